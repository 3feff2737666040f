//! The mapping language against the same transformation written by hand over
//! `serde_json::Value` (parse, change, serialize), in one run.
//!
//! Run with `cargo bench --bench mapping`; after criterion's report the ratios
//! (mapping time / hand-written time) are printed. The target is at most 1.2.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use serde_json::{json, Map, Value as Json};
use sluice::mapping::{Env, InterpolatedString, Mapping};
use sluice::message::Message;

fn user_doc() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "user_id": 12345,
        "first_name": "ada",
        "last_name": "lovelace",
        "email": "ADA@EXAMPLE.COM",
        "price": 19.99,
        "quantity": 3,
        "country": "uk",
        "active": true,
        "tags": ["math", "engines", "poetry"],
        "address": {"street": "1 St James's Square", "city": "London", "zip": "SW1Y"}
    }))
    .unwrap_or_default()
}

fn items_doc() -> Vec<u8> {
    let items: Vec<Json> = (0..100)
        .map(|i| json!({"id": i, "name": format!("item-{i}"), "price": (i * 7) % 100, "in_stock": i % 3 != 0}))
        .collect();
    serde_json::to_vec(&json!({"order": "o-1", "items": items})).unwrap_or_default()
}

const RENAME: &str = r#"
root.id = this.user_id
root.name = this.first_name
root.surname = this.last_name
root.total = this.price * this.quantity
root.city = this.address.city
root.active = this.active
"#;

fn rename_by_hand(input: &[u8]) -> Vec<u8> {
    let mut v: Json = serde_json::from_slice(input).unwrap_or_default();
    let mut out = Map::new();
    let Some(o) = v.as_object_mut() else {
        return Vec::new();
    };
    out.insert("id".into(), o.remove("user_id").unwrap_or_default());
    out.insert("name".into(), o.remove("first_name").unwrap_or_default());
    out.insert("surname".into(), o.remove("last_name").unwrap_or_default());
    let total = o.get("price").and_then(Json::as_f64).unwrap_or(0.0)
        * o.get("quantity").and_then(Json::as_f64).unwrap_or(0.0);
    out.insert("total".into(), json!(total));
    let city = o
        .get_mut("address")
        .and_then(|a| a.get_mut("city"))
        .map(Json::take)
        .unwrap_or_default();
    out.insert("city".into(), city);
    out.insert("active".into(), o.remove("active").unwrap_or_default());
    serde_json::to_vec(&out).unwrap_or_default()
}

const STRINGS: &str = r#"
root.display = "%s %s <%s>".format(this.first_name.capitalize(), this.last_name.uppercase(), this.email.lowercase())
root.slug = (this.first_name + "-" + this.last_name).replace_all(" ", "-")
root.country = this.country.uppercase()
root.tags = this.tags.join(",")
"#;
const KEY: &str = "${! this.country }/${! this.user_id }/${! this.last_name.uppercase() }";

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn strings_by_hand(input: &[u8]) -> (Vec<u8>, String) {
    let v: Json = serde_json::from_slice(input).unwrap_or_default();
    let s = |k: &str| v.get(k).and_then(Json::as_str).unwrap_or("");
    let mut out = Map::new();
    out.insert(
        "display".into(),
        Json::String(format!(
            "{} {} <{}>",
            capitalize(s("first_name")),
            s("last_name").to_uppercase(),
            s("email").to_lowercase()
        )),
    );
    out.insert(
        "slug".into(),
        Json::String(format!("{}-{}", s("first_name"), s("last_name")).replace(' ', "-")),
    );
    out.insert("country".into(), Json::String(s("country").to_uppercase()));
    let tags: Vec<&str> = v
        .get("tags")
        .and_then(Json::as_array)
        .map(|a| a.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default();
    out.insert("tags".into(), Json::String(tags.join(",")));
    let key = format!(
        "{}/{}/{}",
        s("country"),
        v.get("user_id").cloned().unwrap_or_default(),
        s("last_name").to_uppercase()
    );
    (serde_json::to_vec(&out).unwrap_or_default(), key)
}

const ARRAYS: &str = r#"
root.order = this.order
root.names = this.items.filter(i -> i.in_stock && i.price > 20).map_each(i -> i.name.uppercase())
root.total = this.items.map_each(i -> i.price).sum()
"#;

fn arrays_by_hand(input: &[u8]) -> Vec<u8> {
    let v: Json = serde_json::from_slice(input).unwrap_or_default();
    let empty = Vec::new();
    let items = v.get("items").and_then(Json::as_array).unwrap_or(&empty);
    let names: Vec<Json> = items
        .iter()
        .filter(|i| {
            i["in_stock"].as_bool() == Some(true) && i["price"].as_f64().unwrap_or(0.0) > 20.0
        })
        .map(|i| Json::String(i["name"].as_str().unwrap_or("").to_uppercase()))
        .collect();
    let total: i64 = items.iter().map(|i| i["price"].as_i64().unwrap_or(0)).sum();
    let out = json!({"order": v["order"].clone(), "names": names, "total": total});
    serde_json::to_vec(&out).unwrap_or_default()
}

/// One message through a compiled mapping: parse (lazily, once), map, serialize.
fn by_mapping(m: &Mapping, input: &bytes::Bytes) -> Vec<u8> {
    let batch = vec![Message::new(input.clone())];
    match m.apply(&batch, 0) {
        Ok(Some(out)) => out.payload().to_vec(),
        _ => Vec::new(),
    }
}

fn by_mapping_and_key(
    m: &Mapping,
    key: &InterpolatedString,
    input: &bytes::Bytes,
) -> (Vec<u8>, String) {
    let batch = vec![Message::new(input.clone())];
    let k = key.render(&batch, 0).unwrap_or_default();
    let out = match m.apply(&batch, 0) {
        Ok(Some(out)) => out.payload().to_vec(),
        _ => Vec::new(),
    };
    (out, k)
}

struct Case {
    name: &'static str,
    mapping: Box<dyn Fn() -> usize>,
    hand: Box<dyn Fn() -> usize>,
}

fn cases() -> Vec<Case> {
    let env = Env::default();
    let user = bytes::Bytes::from(user_doc());
    let items = bytes::Bytes::from(items_doc());
    let rename = Mapping::compile(RENAME, &env).expect("rename mapping");
    let strings = Mapping::compile(STRINGS, &env).expect("strings mapping");
    let key = InterpolatedString::parse(KEY, &env).expect("key interpolation");
    let arrays = Mapping::compile(ARRAYS, &env).expect("arrays mapping");

    // The outputs must agree, or the comparison means nothing.
    assert_eq!(
        serde_json::from_slice::<Json>(&by_mapping(&rename, &user)).ok(),
        serde_json::from_slice::<Json>(&rename_by_hand(&user)).ok()
    );
    let (a, ka) = by_mapping_and_key(&strings, &key, &user);
    let (b, kb) = strings_by_hand(&user);
    assert_eq!(
        serde_json::from_slice::<Json>(&a).ok(),
        serde_json::from_slice::<Json>(&b).ok()
    );
    assert_eq!(ka, kb);
    assert_eq!(
        serde_json::from_slice::<Json>(&by_mapping(&arrays, &items)).ok(),
        serde_json::from_slice::<Json>(&arrays_by_hand(&items)).ok()
    );

    let (u1, u2, u3, u4, i1, i2) = (
        user.clone(),
        user.clone(),
        user.clone(),
        user,
        items.clone(),
        items,
    );
    vec![
        Case {
            name: "rename_arithmetic",
            mapping: Box::new(move || by_mapping(&rename, &u1).len()),
            hand: Box::new(move || rename_by_hand(&u2).len()),
        },
        Case {
            name: "strings_interpolation",
            mapping: Box::new(move || {
                let (o, k) = by_mapping_and_key(&strings, &key, &u3);
                o.len() + k.len()
            }),
            hand: Box::new(move || {
                let (o, k) = strings_by_hand(&u4);
                o.len() + k.len()
            }),
        },
        Case {
            name: "array_map_filter_100",
            mapping: Box::new(move || by_mapping(&arrays, &i1).len()),
            hand: Box::new(move || arrays_by_hand(&i2).len()),
        },
    ]
}

/// Calls per timed round, so that one round lasts about 20 ms.
fn calls_per_round(f: &dyn Fn() -> usize) -> u32 {
    let mut n = 1u32;
    loop {
        let t = Instant::now();
        for _ in 0..n {
            black_box(f());
        }
        if t.elapsed() > Duration::from_millis(20) {
            return n;
        }
        n *= 2;
    }
}

fn round(f: &dyn Fn() -> usize, n: u32) -> Duration {
    let t = Instant::now();
    for _ in 0..n {
        black_box(f());
    }
    t.elapsed() / n
}

/// Times both sides in alternating rounds, so that a burst of load from elsewhere on
/// the machine falls on both alike; returns the median time per call of each and the
/// median of the per-round ratios.
fn paired(a: &dyn Fn() -> usize, b: &dyn Fn() -> usize) -> (Duration, Duration, f64) {
    let (na, nb) = (calls_per_round(a), calls_per_round(b));
    let mut ta = Vec::new();
    let mut tb = Vec::new();
    let mut ratios = Vec::new();
    for _ in 0..31 {
        let (x, y) = (round(a, na), round(b, nb));
        ratios.push(x.as_secs_f64() / y.as_secs_f64());
        ta.push(x);
        tb.push(y);
    }
    ta.sort();
    tb.sort();
    ratios.sort_by(f64::total_cmp);
    (ta[ta.len() / 2], tb[tb.len() / 2], ratios[ratios.len() / 2])
}

fn main() {
    let cases = cases();
    let mut c = Criterion::default().configure_from_args();
    {
        let mut g = c.benchmark_group("mapping");
        for case in &cases {
            g.bench_function(BenchmarkId::new(case.name, "mapping"), |b| {
                b.iter(|| black_box((case.mapping)()))
            });
            g.bench_function(BenchmarkId::new(case.name, "hand_written"), |b| {
                b.iter(|| black_box((case.hand)()))
            });
        }
        g.finish();
    }
    c.final_summary();

    println!("\nmapping / hand-written (target <= 1.20):");
    for case in &cases {
        let (m, h, ratio) = paired(&*case.mapping, &*case.hand);
        println!(
            "  {:<24} mapping {:>9.2?}  hand {:>9.2?}  ratio {:.2}",
            case.name, m, h, ratio
        );
    }
}
