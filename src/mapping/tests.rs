//! Language-level tests: statements, operators, control flow, metadata and the public API.

use super::*;
use crate::message::Message;

fn run(src: &str, input: &str) -> Result<String, String> {
    let m = Mapping::compile(src, &Env::default()).map_err(|d| d.to_string())?;
    let batch = vec![Message::new(input.as_bytes().to_vec())];
    let show = |r: Result<Option<Message>, MappingError>| match r {
        Ok(Some(out)) => Ok(String::from_utf8_lossy(out.payload()).into_owned()),
        Ok(None) => Ok("<deleted>".into()),
        Err(e) => Err(e.to_string()),
    };
    let copied = show(m.apply(&batch, 0));
    if m.edits_in_place() {
        // Run on a message it owns, the mapping edits the input in place: same result.
        let owned = show(m.apply_owned(batch[0].clone()).map_err(|f| f.error));
        assert_eq!(copied, owned, "`{src}` in place");
    }
    copied
}

fn ok(src: &str, input: &str) -> String {
    run(src, input).unwrap_or_else(|e| panic!("`{src}` failed: {e}"))
}

#[test]
fn arithmetic_keeps_int_and_float_apart() {
    assert_eq!(ok("root = 1 + 2 * 3", "{}"), "7");
    assert_eq!(ok("root = 7 / 2", "{}"), "3.5");
    assert_eq!(ok("root = 6 / 2", "{}"), "3");
    assert_eq!(ok("root = 7 % 3", "{}"), "1");
    assert_eq!(ok("root = 1.5 + 1", "{}"), "2.5");
    assert_eq!(ok("root = (1 + 2) * 3", "{}"), "9");
    assert_eq!(ok("root = -this.n", r#"{"n":4}"#), "-4");
    assert_eq!(ok(r#"root = "a" + "b""#, "{}"), r#"ab"#);
    assert_eq!(
        ok("root = 9223372036854775807 + 1", "{}"),
        "9223372036854776000"
    );
}

#[test]
fn comparisons_and_logic() {
    assert_eq!(ok("root = 1 == 1.0", "{}"), "true");
    assert_eq!(ok(r#"root = "1" == 1"#, "{}"), "false");
    assert_eq!(
        ok("root = 2 > 1 && 1 >= 1 && 1 < 2 && 1 <= 1 && 1 != 2", "{}"),
        "true"
    );
    assert_eq!(ok("root = !true || false", "{}"), "false");
    assert_eq!(ok("root = false && this.missing.not_null()", "{}"), "false");
    assert_eq!(ok(r#"root = "b" > "a""#, "{}"), "true");
    assert_eq!(
        ok("root = [1, {\"a\": 2}] == [1, {\"a\": 2.0}]", "{}"),
        "true"
    );
}

#[test]
fn type_errors_name_the_expression_and_types() {
    let e = run("root.a = this.a + 5", r#"{"a":"x"}"#).unwrap_err();
    assert!(e.contains("line 1"), "{e}");
    assert!(
        e.contains("string (\"x\")") && e.contains("number (5)") && e.contains("this.a"),
        "{e}"
    );
    let e = run("root = this.a.uppercase()", r#"{"a":5}"#).unwrap_err();
    assert!(
        e.contains("this.a.uppercase()") && e.contains("expected string value, got number (5)"),
        "{e}"
    );
    let e = run("root = 1 / 0", "{}").unwrap_err();
    assert!(e.contains("divide by zero"), "{e}");
    let e = run("root = 1 && true", "{}").unwrap_err();
    assert!(e.contains("number (1)"), "{e}");
}

#[test]
fn coalescing_pipe() {
    assert_eq!(ok("root = this.a | this.b | \"c\"", r#"{"b":"B"}"#), "B");
    assert_eq!(ok("root = this.a.number() | 0", r#"{"a":"x"}"#), "0");
    assert_eq!(ok("root = this.a | 1", r#"{"a":false}"#), "false");
}

#[test]
fn paths_quotes_and_indexes() {
    assert_eq!(ok(r#"root."a.b".c = 1"#, "{}"), r#"{"a.b":{"c":1}}"#);
    assert_eq!(ok(r#"root = this."a.b""#, r#"{"a.b":2}"#), "2");
    assert_eq!(ok("root = this.a.1", r#"{"a":[1,2]}"#), "2");
    assert_eq!(ok("root = this.a[-1]", r#"{"a":[1,2,3]}"#), "3");
    assert_eq!(ok("root = this.a[1:3]", r#"{"a":[1,2,3,4]}"#), "[2,3]");
    assert_eq!(ok("root = this.s[1:]", r#"{"s":"hello"}"#), "ello");
    assert_eq!(ok(r#"root = this["k"]"#, r#"{"k":1}"#), "1");
    assert_eq!(
        ok("root = this\nroot.a[0] = 9", r#"{"a":[1,2]}"#),
        r#"{"a":[9,2]}"#
    );
    assert_eq!(ok("root = this.nope.deeper", "{}"), "null");
    assert_eq!(ok("foo = bar.baz", r#"{"bar":{"baz":1}}"#), r#"{"foo":1}"#);
}

#[test]
fn literals() {
    assert_eq!(
        ok(
            r#"root = {"a": [1, 2.5, "x", true, null], this.k: "dyn", "d": deleted()}"#,
            r#"{"k":"key"}"#
        ),
        r#"{"a":[1,2.5,"x",true,null],"key":"dyn"}"#
    );
    assert_eq!(
        ok("root = \"\"\"raw \\n \"q\" \"\"\"", "{}"),
        r#"raw \n "q" "#
    );
    assert_eq!(ok("root = [1, deleted(), 3]", "{}"), "[1,3]");
}

#[test]
fn deleted_and_nothing() {
    assert_eq!(ok("root = deleted()", "{}"), "<deleted>");
    assert_eq!(
        ok("root = this\nroot.a = deleted()", r#"{"a":1,"b":2}"#),
        r#"{"b":2}"#
    );
    assert_eq!(ok("root.a = nothing()", "{}"), "{}");
    // A mapping that never assigns root keeps the content.
    assert_eq!(ok("meta x = 1", "raw text"), "raw text");
}

#[test]
fn variables() {
    assert_eq!(
        ok("let x = this.a + 1\nroot.b = $x * 2", r#"{"a":1}"#),
        r#"{"b":4}"#
    );
    let e = run("root = $nope", "{}").unwrap_err();
    assert!(e.contains("$nope"), "{e}");
}

#[test]
fn metadata_reads_and_writes() {
    let m = Mapping::compile(
        "meta out = @in + \"!\"\nmeta in = deleted()\nroot.m = @\nroot.orig = metadata(\"in\")\nroot.s = meta(\"in\")",
        &Env::default(),
    )
    .unwrap();
    let batch = vec![Message::new("{}").with_meta("in", "v")];
    let out = m.apply(&batch, 0).unwrap().unwrap();
    assert_eq!(out.meta_str("out").as_deref(), Some("v!"));
    assert!(out.meta("in").is_none());
    assert_eq!(
        &out.payload()[..],
        br#"{"m":{"out":"v!"},"orig":"v","s":"v"}"#
    );
    let m = Mapping::compile("meta = {\"a\": 1}", &Env::default()).unwrap();
    let out = m.apply(&batch, 0).unwrap().unwrap();
    assert_eq!(out.metadata().len(), 1);
    assert_eq!(out.meta("a"), Some(&Value::Int(1)));
}

#[test]
fn if_statements_and_expressions() {
    let src = "if this.n > 10 {\n  root.size = \"big\"\n} else if this.n > 5 {\n  root.size = \"mid\"\n} else {\n  root.size = \"small\"\n}";
    assert_eq!(ok(src, r#"{"n":11}"#), r#"{"size":"big"}"#);
    assert_eq!(ok(src, r#"{"n":6}"#), r#"{"size":"mid"}"#);
    assert_eq!(ok(src, r#"{"n":1}"#), r#"{"size":"small"}"#);
    assert_eq!(
        ok("root.a = if this.x { 1 } else { 2 }", r#"{"x":false}"#),
        r#"{"a":2}"#
    );
    assert_eq!(
        ok("root.b = 0\nroot.a = if this.x { 1 }", r#"{"x":false}"#),
        r#"{"b":0}"#
    );
    let e = run("root.a = if this.x { 1 }", r#"{"x":"yes"}"#).unwrap_err();
    assert!(e.contains("bool"), "{e}");
}

#[test]
fn match_forms() {
    let src = "root = match this.v {\n  \"a\" => 1\n  this.length() > 3 => 2\n  _ => 3\n}";
    assert_eq!(ok(src, r#"{"v":"a"}"#), "1");
    assert_eq!(ok(src, r#"{"v":"abcd"}"#), "2");
    assert_eq!(ok(src, r#"{"v":"ab"}"#), "3");
    let src = "root = match { this.a == 1 => \"one\", this.a == 2 => \"two\" }";
    assert_eq!(ok(src, r#"{"a":2}"#), "two");
    assert_eq!(
        ok(
            &format!("root.x = 0\n{}", src.replace("root =", "root.y =")),
            r#"{"a":3}"#
        ),
        // No case matched: null, as in Bloblang.
        r#"{"x":0,"y":null}"#
    );
}

#[test]
fn lambdas_and_context_capture() {
    assert_eq!(
        ok(
            "root = this.a.map_each(x -> x + this.inc)",
            r#"{"a":[1,2],"inc":10}"#
        ),
        "[11,12]"
    );
    assert_eq!(
        ok(
            "root = this.foo.(f -> f.a + f.b)",
            r#"{"foo":{"a":1,"b":2}}"#
        ),
        "3"
    );
    assert_eq!(
        ok("root = this.foo.(this.a * 10)", r#"{"foo":{"a":1}}"#),
        "10"
    );
    assert_eq!(
        ok(
            "root = this.rows.map_each(r -> r.items.map_each(i -> i * r.k))",
            r#"{"rows":[{"k":2,"items":[1,2]}]}"#
        ),
        "[[2,4]]"
    );
    assert_eq!(
        ok(
            "root = this.a.filter(x -> x.contains(\"b\")).length()",
            r#"{"a":["ab","c"]}"#
        ),
        "1"
    );
}

#[test]
fn named_maps_and_imports() {
    let src = "map greet {\n  root.hello = this.name.uppercase()\n}\nroot = this.people.map_each(p -> p.apply(\"greet\"))";
    assert_eq!(
        ok(src, r#"{"people":[{"name":"a"}]}"#),
        r#"[{"hello":"A"}]"#
    );
    let e = run("root = this.apply(\"nope\")", "{}").unwrap_err();
    assert!(e.contains("map `nope` is not defined"), "{e}");

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("lib.blobl"),
        "map twice {\n  root = this * 2\n}\n",
    )
    .unwrap();
    let env = Env::with_import_dir(dir.path());
    let m = Mapping::compile("import \"lib.blobl\"\nroot = this.n.apply(\"twice\")", &env).unwrap();
    assert_eq!(
        m.query_value(&Value::from_json(br#"{"n":4}"#).unwrap())
            .unwrap(),
        Value::Int(8)
    );
    let e = Mapping::compile("import \"missing.blobl\"", &env).unwrap_err();
    assert!(e.to_string().contains("cannot import"), "{e}");
}

#[test]
fn throw_catch_or_not_null() {
    assert_eq!(
        ok("root = throw(\"boom\").catch(\"caught\")", "{}"),
        "caught"
    );
    assert_eq!(ok("root = this.a.not_null().catch(0)", "{}"), "0");
    assert!(run("root = throw(\"boom\")", "{}")
        .unwrap_err()
        .contains("boom"));
}

#[test]
fn content_env_and_batch() {
    assert_eq!(ok("root = content().string().uppercase()", "abc"), "ABC");
    let m = Mapping::compile("root = [batch_index(), batch_size()]", &Env::default()).unwrap();
    let batch = vec![Message::new("a"), Message::new("b")];
    assert_eq!(
        &m.apply(&batch, 1).unwrap().unwrap().payload()[..],
        b"[1,2]"
    );
    assert!(matches!(
        m.apply(&batch, 5),
        Err(MappingError::NoMessage { .. })
    ));
}

#[test]
fn error_function_reads_the_message_error() {
    let m = Mapping::compile("root.e = error()\nroot.f = errored()", &Env::default()).unwrap();
    let mut msg = Message::new("{}");
    msg.set_error("earlier failure");
    let out = m.apply(&[msg], 0).unwrap().unwrap();
    assert_eq!(&out.payload()[..], br#"{"e":"earlier failure","f":true}"#);
    assert_eq!(out.error(), Some("earlier failure"));
}

#[test]
fn this_on_non_json_is_an_error_not_a_panic() {
    let e = run("root = this.a", "not json").unwrap_err();
    assert!(e.contains("this"), "{e}");
}

#[test]
fn mutation_edits_in_place() {
    let m = Mapping::compile(
        "root.b = this.a + 1\nroot.c = this.b\nmeta k = \"v\"",
        &Env::default(),
    )
    .unwrap();
    let mut msg = Message::new(&br#"{"a":1,"z":0}"#[..]).with_meta("old", "x");
    assert!(m.mutate(&mut msg, 0, 1).unwrap());
    assert_eq!(&msg.payload()[..], br#"{"a":1,"b":2,"c":2,"z":0}"#);
    assert_eq!(msg.meta_str("k").as_deref(), Some("v"));
    assert_eq!(msg.meta_str("old").as_deref(), Some("x"));

    // A mutation that only touches metadata never parses the payload.
    let m = Mapping::compile("meta seen = true", &Env::default()).unwrap();
    let mut msg = Message::new("not json");
    assert!(m.mutate(&mut msg, 0, 1).unwrap());
    assert_eq!(&msg.payload()[..], b"not json");

    let m = Mapping::compile("root = deleted()", &Env::default()).unwrap();
    let mut msg = Message::new("{}");
    assert!(!m.mutate(&mut msg, 0, 1).unwrap());

    let m = Mapping::compile("root.x = this.a.uppercase()", &Env::default()).unwrap();
    let mut msg = Message::new(&br#"{"a":1}"#[..]).with_meta("k", "v");
    assert!(m.mutate(&mut msg, 0, 1).is_err());
    assert_eq!(&msg.payload()[..], br#"{"a":1}"#);
    assert_eq!(msg.meta_str("k").as_deref(), Some("v"));
}

#[test]
fn query_returns_the_root_value() {
    let m = Mapping::compile("this.type == \"a\"", &Env::default()).unwrap();
    assert_eq!(
        m.query(&Message::new(&br#"{"type":"a"}"#[..])).unwrap(),
        Value::Bool(true)
    );
    assert_eq!(
        m.query(&Message::new(&br#"{"type":"b"}"#[..])).unwrap(),
        Value::Bool(false)
    );
}

#[test]
fn generate_has_no_input() {
    let m = Mapping::compile("root.n = 1\nmeta a = \"b\"", &Env::default()).unwrap();
    let out = m.generate().unwrap().unwrap();
    assert_eq!(&out.payload()[..], br#"{"n":1}"#);
    assert_eq!(out.meta_str("a").as_deref(), Some("b"));
}

#[test]
fn compile_errors_are_all_reported() {
    let e = Mapping::compile(
        "root.a = nope_fn()\nroot.b = this.x.uppercas()\nroot.c = this.y.replace_all(\"a\")",
        &Env::default(),
    )
    .unwrap_err();
    assert_eq!(e.0.len(), 3, "{e}");
    let text = e.to_string();
    assert!(text.contains("unknown function `nope_fn`"), "{text}");
    assert!(text.contains("did you mean `uppercase`?"), "{text}");
    assert!(text.contains("missing argument `new`"), "{text}");
    assert!(text.contains("2 | root.b = this.x.uppercas()"), "{text}");
    let e = Mapping::compile("root = this.s.re_match(\"(\")", &Env::default()).unwrap_err();
    assert!(e.to_string().contains("invalid regular expression"), "{e}");
    let e = Mapping::compile("root = this.a.map_each(x -> x, 1)", &Env::default()).unwrap_err();
    assert!(e.to_string().contains("at most 1"), "{e}");
    let e = Mapping::compile("root = this.a.join(x: \",\")", &Env::default()).unwrap_err();
    assert!(e.to_string().contains("unknown parameter `x`"), "{e}");
}

#[test]
fn named_arguments() {
    assert_eq!(
        ok("root = this.a.slice(low: 1, high: 2)", r#"{"a":"abc"}"#),
        "b"
    );
}

#[test]
fn constants_are_folded() {
    let m = Mapping::compile("root = \"abc\".uppercase() + \"d\"", &Env::default()).unwrap();
    assert!(matches!(
        &m.prog.stmts[0],
        program::CStmt::Assign {
            value: program::Node::Lit(_),
            ..
        }
    ));
}

#[test]
fn env_restrictions() {
    let env = Env::default().no_message();
    assert!(Mapping::compile("root = content()", &env).is_err());
    assert!(Mapping::compile("root = now()", &env).is_ok());
    assert!(Mapping::compile("root = now()", &Env::default().only_pure()).is_err());
}

#[test]
fn hostile_input_does_not_panic() {
    for src in [
        "root = this.a[99999999999]",
        "root = this.s[5:1]",
        "root = this.s.slice(-100, 100)",
        "root = this.a.sort(x -> true)",
        "root = this.a.sort()",
        "root = \"x\".repeat(-1)",
        "root = range(0, 10, 0)",
        "root = this.n.int8()",
        "root = this.s.parse_json().a.b",
        "root = this.s.decompress(\"gzip\")",
        "root = this.s.ts_strftime(\"%Q\")",
        "root = this.s.format(1, 2, 3)",
        "root = (-9223372036854775807 - 1) % -1",
        "root = -(-9223372036854775807 - 1)",
    ] {
        let _ = run(src, r#"{"a":[3,"x",1.5,{"k":1}],"s":"%d %q ∑","n":1e300}"#);
    }
}

#[test]
fn runaway_recursion_is_an_error() {
    let e = run(
        "map loop {\n  root = this.apply(\"loop\")\n}\nroot = this.apply(\"loop\")",
        "{}",
    )
    .unwrap_err();
    assert!(e.contains("levels deep"), "{e}");
    let e = run(
        "root = range(0, 1000).fold({}, acc -> {\"a\": acc.tally})",
        "{}",
    )
    .unwrap_err();
    assert!(e.contains("deeper than"), "{e}");
    let deep_xml = format!("root = \"{}\".parse_xml()", "<a>".repeat(300));
    assert!(run(&deep_xml, "{}").is_err());
    let deep_json = format!("{}{}", "[".repeat(200), "]".repeat(200));
    assert!(run("root = content().parse_json()", &deep_json).is_err());
}

#[test]
fn more_hostile_input() {
    for src in [
        "root = range(-9223372036854775807, 9223372036854775807)",
        "root = range(9223372036854775806, 9223372036854775807, 10)",
        "root = \"%.4000000000f|%999999999d\".format(1.5, 2)",
        "root = é",
        "root = this.é",
        "root = \"\\ud800\"",
    ] {
        let _ = run(src, "{}");
    }
    assert_eq!(
        ok(
            "root = range(9223372036854775806, 9223372036854775807, 10)",
            "{}"
        ),
        "[9223372036854775806]"
    );
}

/// Random token soup must compile or fail with diagnostics, and what compiles must run
/// or fail with an error: never panic.
#[test]
fn random_token_soup_never_panics() {
    const TOKENS: &[&str] = &[
        "root",
        "this",
        ".",
        "a",
        "b",
        "=",
        "==",
        "+",
        "-",
        "*",
        "/",
        "%",
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        ",",
        ":",
        "\"s\"",
        "1",
        "2.5",
        "-1",
        "!",
        "&&",
        "||",
        "|",
        "if",
        "else",
        "match",
        "=>",
        "_",
        "x",
        "->",
        "\n",
        "@",
        "$v",
        "let v",
        "meta",
        "map m",
        ".apply(\"m\")",
        ".map_each(",
        ".filter(",
        ".length()",
        ".uppercase()",
        "deleted()",
        "now()",
        ".sort()",
        ".index(",
        ".slice(",
        "\"\"\"r\"\"\"",
        "é",
        "#c\n",
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let input = r#"{"a":[3,1,2],"b":{"c":"x"},"s":"hey"}"#;
    for _ in 0..3000 {
        let len = (next() % 24) as usize + 1;
        let src: String = (0..len)
            .map(|_| TOKENS[(next() % TOKENS.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ");
        if let Ok(m) = Mapping::compile(&src, &Env::default()) {
            let _ = m.apply(&[Message::new(input)], 0);
            let mut msg = Message::new(input);
            let _ = m.mutate(&mut msg, 0, 1);
        }
        let _ = InterpolatedString::parse(&format!("x ${{! {src} }}"), &Env::default());
    }
}

#[test]
fn a_sandboxed_mapping_cannot_read_the_host() {
    let sandbox = Env::default().sandboxed();
    for src in [
        r#"root = this.ip.geoip_city("/etc/passwd")"#,
        r#"root = this.ip.geoip_asn("/nonexistent/asn.mmdb")"#,
        r#"root = env("HOME")"#,
    ] {
        let err = Mapping::compile(src, &sandbox)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("reads the host and is not available"),
            "{src}: {err}"
        );
        // Outside the sandbox the same text compiles.
        assert!(Mapping::compile(src, &Env::default()).is_ok(), "{src}");
    }
    // A mapping carried by the data runs sandboxed.
    let err = run(
        r#"root = "x".bloblang("root = this.geoip_city(\"/etc/passwd\")")"#,
        "{}",
    )
    .unwrap_err();
    assert!(err.contains("not available"), "{err}");
}

fn err(src: &str, input: &str) -> String {
    match run(src, input) {
        Ok(out) => panic!("`{src}` should fail, gave {out}"),
        Err(e) => e,
    }
}

#[test]
fn slices_take_a_step() {
    let a = r#"{"a":[0,1,2,3,4,5],"s":"hello"}"#;
    assert_eq!(ok("root = this.a[::2]", a), "[0,2,4]");
    assert_eq!(ok("root = this.a[1::2]", a), "[1,3,5]");
    assert_eq!(ok("root = this.a[1:5:2]", a), "[1,3]");
    assert_eq!(ok("root = this.a[::-1]", a), "[5,4,3,2,1,0]");
    assert_eq!(ok("root = this.a[4:1:-1]", a), "[4,3,2]");
    assert_eq!(ok("root = this.a[-1:-4:-2]", a), "[5,3]");
    assert_eq!(ok("root = this.a[1:4:]", a), "[1,2,3]");
    assert_eq!(ok("root = this.a[0:3:-1]", a), "[]");
    assert_eq!(ok("root = this.a[100::-2]", a), "[5,3,1]");
    assert_eq!(ok("root = this.s[::-1]", a), "olleh");
    assert_eq!(ok("root = this.s[::2]", a), "hlo");
    assert_eq!(ok("root = this.s[-2::-1]", a), "lleh");
    assert_eq!(ok(r#"root = "héllo"[::-2]"#, "{}"), "olh");
    assert_eq!(ok(r#"root = "abcd".bytes()[::-1].string()"#, "{}"), "dcba");
    let e = err("root = this.a[::0]", a);
    assert!(e.contains("slice step cannot be zero"), "{e}");
    // Without a step, slices keep their meaning.
    assert_eq!(ok("root = this.a[1:3]", a), "[1,2]");
    assert_eq!(ok("root = this.s[:2]", a), "he");
}

#[test]
fn indexes_past_the_end_fail_with_index_and_length() {
    let a = r#"{"a":[1,2,3],"s":"héllo"}"#;
    let e = err("root = this.a[3]", a);
    assert!(
        e.contains("index 3 is out of bounds for an array of length 3"),
        "{e}"
    );
    let e = err("root = this.a[-4]", a);
    assert!(
        e.contains("index -4 is out of bounds for an array of length 3"),
        "{e}"
    );
    let e = err("root = this.s[5]", a);
    assert!(
        e.contains("index 5 is out of bounds for a string of length 5"),
        "{e}"
    );
    let e = err(r#"root = "ab".bytes()[2]"#, a);
    assert!(
        e.contains("index 2 is out of bounds for bytes of length 2"),
        "{e}"
    );
    assert_eq!(ok("root = this.a[-3]", a), "1");
    assert_eq!(ok("root = this.s[1]", a), "é");
    // A missing field and an object key are not positions: null, as before.
    assert_eq!(ok("root = this.nope[3]", a), "null");
    assert_eq!(ok(r#"root = this["nope"]"#, a), "null");
    // Bytes index like an array of numbers, with brackets or `index`.
    assert_eq!(ok(r#"root = "AB".bytes()[0]"#, a), "65");
    assert_eq!(ok(r#"root = "AB".bytes().index(-1)"#, a), "66");
    let e = err(r#"root = "AB".bytes().index(2)"#, a);
    assert!(
        e.contains("index 2 is out of bounds for bytes of length 2"),
        "{e}"
    );
}

#[test]
fn empty_mappings_and_misused_names_do_not_parse() {
    for src in [
        "",
        "   \n\n",
        "# only a comment\n# and another",
        "\n  # c\n",
    ] {
        let e = Mapping::compile(src, &Env::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("the mapping is empty"), "{src:?}: {e}");
    }
    let e = Mapping::compile("let = 5", &Env::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected a name"), "{e}");
    assert!(e.contains("line 1, column 5"), "{e}");
    let e = Mapping::compile("root.a = 1\nlet\n", &Env::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2"), "{e}");
    for src in [
        "root = this.a.map_each(this -> this + 1)",
        "root = this.a.map_each(root -> 1)",
        "root = this.a.(this -> this)",
        "root = this.a.filter(true -> true)",
    ] {
        let e = Mapping::compile(src, &Env::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot name a lambda parameter") || e.contains("is not allowed"),
            "{src}: {e}"
        );
    }
    // Names that only start like keywords are fine.
    assert_eq!(
        ok(
            "root = this.a.map_each(thisone -> thisone + 1)",
            r#"{"a":[1]}"#
        ),
        "[2]"
    );
    assert_eq!(ok("root.letter = 1", "{}"), r#"{"letter":1}"#);
}

fn parse_err(src: &str) -> Diagnostic {
    Mapping::compile(src, &Env::default())
        .unwrap_err()
        .first()
        .cloned()
        .unwrap_or_else(|| panic!("`{src}` gave no diagnostic"))
}

#[test]
fn parse_errors_name_what_was_expected_in_words() {
    // A word after a complete statement on the same line: the statement ends there.
    for (src, col, word) in [
        ("root = this.foo bar", 17, "`bar`"),
        ("root = 5 foo", 10, "`foo`"),
        ("root.a = \"x\" y", 14, "`y`"),
        ("root = if this.a { 1 } x", 24, "`x`"),
        ("root.a = 1\nroot.b = this.c d\n", 17, "`d`"),
    ] {
        let d = parse_err(src);
        assert_eq!(d.col, col, "{src}: {d}");
        assert!(d.message.contains("the end of the line"), "{src}: {d}");
        assert!(d.message.contains(&format!("found {word}")), "{src}: {d}");
        assert!(d.message.contains("an operator"), "{src}: {d}");
    }
    assert_eq!(parse_err("root.a = 1\nroot.b = this.c d\n").line, 2);
    // Punctuation the grammar waits for is named.
    let d = parse_err("root = (1 + 2");
    assert!(
        d.message.contains("`)`") && d.message.contains("end of input"),
        "{d}"
    );
    let d = parse_err("root = [1, 2");
    assert!(
        d.message.contains("`]`") && d.message.contains("`,`"),
        "{d}"
    );
    let d = parse_err("root = {\"a\": 1");
    assert!(d.message.contains("`}`"), "{d}");
    let d = parse_err("let x");
    assert!(d.message.contains("expected `=`"), "{d}");
    assert_eq!((d.line, d.col), (1, 6), "{d}");
    let d = parse_err("root = this.a.map_each(x -> )");
    assert!(
        d.message.contains("expected an expression, found `)`"),
        "{d}"
    );
    let d = parse_err("root.a = 1 +");
    assert_eq!(d.message, "expected an expression, found end of input");
    // An unclosed string is named as such, at its opening quote.
    let d = parse_err("root.a = 1\nroot.b = \"abc\n");
    assert!(d.message.contains("string is not closed"), "{d}");
    assert_eq!((d.line, d.col), (2, 10), "{d}");
    // No pest rule names leak into messages.
    for src in [
        "root = this.a.b(",
        "root = this.a[1:2",
        "map foo { root = 1 ",
        "root = match this { 1 => }",
        "root = this.a.",
        "if this.a { root = 1 ",
        "root = $",
        "root = @foo bar",
    ] {
        let d = parse_err(src);
        let m = &d.message;
        assert!(
            m.starts_with("expected ") || m.contains("not closed"),
            "{src}: {m}"
        );
        for rule in [
            "slice_",
            "kw_",
            "path_ident",
            "EOI",
            "something else",
            "_stmt",
            "str_inner",
        ] {
            assert!(!m.contains(rule), "{src}: {m}");
        }
        assert!(d.line >= 1 && d.col >= 1, "{src}: {d}");
    }
}

#[test]
fn reference_edge_cases_of_changed_behaviour() {
    // parse_timestamp with a format gives a timestamp.
    assert_eq!(
        ok(
            r#"root = this.t.parse_timestamp("2006-01-02").type()"#,
            r#"{"t":"2020-08-14"}"#
        ),
        "timestamp"
    );
    // A match with no case taken is null; an `if` without `else` still skips.
    assert_eq!(
        ok("root.a = match this.x { 1 => \"one\" }", r#"{"x":2}"#),
        r#"{"a":null}"#
    );
    assert_eq!(ok("root.a = if false { 1 }", "{}"), "{}");
    // unique over values it cannot compare fails, naming the index.
    let e = err("root = this.unique()", r#"[1,true]"#);
    assert!(
        e.contains("index 1: expected string or number value, got bool"),
        "{e}"
    );
    let e = err("root = this.unique(x -> x.a)", r#"[{"a":null}]"#);
    assert!(e.contains("index 0"), "{e}");
    // catch with a lambda sees the error text.
    assert_eq!(
        ok(
            "root = this.a.number().catch(e -> e.contains(\"this.a.number()\"))",
            r#"{"a":"x"}"#
        ),
        "true"
    );
    // catch(deleted()) on unstructured data deletes the message.
    assert_eq!(ok("root = this.catch(deleted())", "not json"), "<deleted>");
    // cosine_similarity with integer and float vectors.
    assert_eq!(ok("root = cosine_similarity([3, 4], [6.0, 8])", "{}"), "1");
    // flow_id reads the flow_id metadata when there is one.
    let m = Mapping::compile("root = flow_id()", &Env::default()).unwrap();
    let mut msg = Message::new(b"{}".to_vec());
    msg.metadata_mut()
        .insert("flow_id".into(), crate::value::Value::from("abc"));
    let out = m.apply(&[msg], 0).unwrap().unwrap();
    assert_eq!(out.payload().as_ref(), b"abc");
}

#[test]
fn use_number_keeps_big_integers_exact() {
    let src = "root = this.s.parse_json(use_number: true)";
    let input = r#"{"s":"{\"big\":18446744073709551615,\"neg\":-9223372036854775809,\"small\":7,\"f\":1.5}"}"#;
    assert_eq!(
        ok(src, input),
        // Integers past i64 either way keep every digit.
        r#"{"big":18446744073709551615,"f":1.5,"neg":-9223372036854775809,"small":7}"#
    );
    // They are numbers: they compare, add (as floats) and format as JSON.
    let src = r#"root.t = this.s.parse_json(use_number: true).big.type()
root.gt = this.s.parse_json(use_number: true).big > 1
root.eq = this.s.parse_json(use_number: true).big == this.s.parse_json(use_number: true).big
root.sum = this.s.parse_json(use_number: true).big + 1
root.j = this.s.parse_json(use_number: true).format_json(no_indent: true).string()"#;
    assert_eq!(
        ok(src, input),
        r#"{"eq":true,"gt":true,"j":"{\"big\":18446744073709551615,\"f\":1.5,\"neg\":-9223372036854775809,\"small\":7}","sum":18446744073709552000,"t":"number"}"#
    );
    // Without use_number they become floats, as before.
    assert_eq!(
        ok("root = this.s.parse_json().big", input),
        "18446744073709552000"
    );
}

#[test]
fn parse_errors_never_panic_on_odd_text() {
    let pieces = [
        "root", " = ", "\"é", "ü\"", "this.", "é", "[", "]", "(", ")", "{", "}", "::", ":", "-",
        "->", "#", "\n", "\"\"\"", "💛", "let ", "x", "=", ",", "'", "\\", "\t",
    ];
    // Every pair and triple of pieces: each parses or fails with a positioned message.
    for a in pieces {
        for b in pieces {
            for c in pieces {
                let src = format!("{a}{b}{c}");
                if let Err(d) = Mapping::compile(&src, &Env::default()) {
                    for x in &d.0 {
                        assert!(x.line >= 1 && x.col >= 1, "{src:?}: {d}");
                        assert!(!x.message.is_empty(), "{src:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn values_never_nest_past_the_limit() {
    // Every way a mapping can nest a value: a path from data, a long assignment path,
    // a loop, nested literals and methods, and a value assigned under itself. Each
    // stops at the limit with an error, where the value would otherwise grow until
    // dropping it overflowed the stack.
    let deep = vec!["a"; 20_000].join(".");
    let input = format!(r#"{{"p":"{deep}"}}"#);
    let cases = [
        format!(r#"root = {{}}.set("{deep}", 1)"#),
        "root = {}.set(this.p, 1)".to_owned(),
        format!("root.{deep} = 1"),
        "root = range(0, 20000).fold({}, t -> {\"a\": t.tally})".to_owned(),
        "root = range(0, 20000).fold([], t -> [t.tally])".to_owned(),
        "root = range(0, 20000).fold([], t -> [].append(t.tally))".to_owned(),
        "root = range(0, 20000).fold([1], t -> t.tally.enumerated())".to_owned(),
        "root = range(0, 20000).fold({}, t -> {}.set(\"a.b\", t.tally))".to_owned(),
    ];
    for src in &cases {
        let err = run(src, &input).unwrap_err();
        assert!(err.contains("deeper than 128 levels"), "{src:.50}: {err}");
    }
    // A value assigned under itself, statement after statement.
    let grow = "root = []\n".to_owned() + &"root = [root]\n".repeat(300);
    let err = run(&grow, "{}").unwrap_err();
    assert!(err.contains("deeper than 128 levels"), "{err}");
    // Up to the limit, values are built as before.
    let at_limit = vec!["a"; 128].join(".");
    let out = ok(&format!(r#"root = {{}}.set("{at_limit}", 1)"#), "{}");
    assert!(out.ends_with(&"}".repeat(128)), "{out}");
    let past = vec!["a"; 129].join(".");
    assert!(run(&format!(r#"root = {{}}.set("{past}", 1)"#), "{}").is_err());
}

#[test]
fn sandboxed_mappings_keep_the_host_name_and_counters_to_themselves() {
    let sandbox = Env::default().sandboxed();
    let err = Mapping::compile("root = hostname()", &sandbox)
        .map(|_| ())
        .expect_err("hostname() is withheld")
        .to_string();
    assert!(err.contains("hostname"), "{err}");
    Mapping::compile("root = hostname()", &Env::default()).unwrap();

    // Two sandboxed environments (two tenants' streams) count apart; mappings compiled
    // in one environment share its counters.
    let count = |env: &Env| {
        let m = Mapping::compile(r#"root = count("c")"#, env).unwrap();
        m.query_value(&Value::Null).unwrap()
    };
    let (a, b) = (Env::default().sandboxed(), Env::default().sandboxed());
    assert_eq!(count(&a), Value::Int(1));
    assert_eq!(count(&a), Value::Int(2));
    assert_eq!(count(&b), Value::Int(1));
    // A stream's counters hold a bounded number of names.
    let m = Mapping::compile("root = count(this.string())", &a).unwrap();
    let limit = functions::Counters::SCOPED_NAMES as i64;
    for i in 1..limit {
        m.query_value(&Value::Int(i)).unwrap();
    }
    let err = m
        .query_value(&Value::Int(limit + 1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("counter names"), "{err}");
    m.query_value(&Value::Int(1)).unwrap();
}

#[test]
fn concatenation_stops_before_it_takes_the_hosts_memory() {
    // Each step doubles the tally: 40 steps would be a terabyte.
    let err = run(
        r#"root = range(0, 40).fold("x", t -> t.tally + t.tally).length()"#,
        "{}",
    )
    .unwrap_err();
    assert!(err.contains("longer than 268435456 bytes"), "{err}");
    assert_eq!(ok(r#"root = ("ab" + "cd").length()"#, "{}"), "4");
}

/// Runs `src` as a tenant's mapping over `input`, with a deadline long enough that only
/// the size bounds can stop it.
fn tenant(src: &str, input: &str) -> Result<String, String> {
    let env = Env {
        budget: Some(std::time::Duration::from_secs(60)),
        ..Env::default().sandboxed()
    };
    let m = Mapping::compile(src, &env).unwrap_or_else(|d| panic!("`{src}`: {d}"));
    let batch = vec![Message::new(input.as_bytes().to_vec())];
    match m.apply(&batch, 0) {
        Ok(Some(out)) => Ok(String::from_utf8_lossy(out.payload()).into_owned()),
        Ok(None) => Ok("<deleted>".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// `src` as a tenant's mapping fails for building a value past the cap.
fn stopped_at_the_value_cap(src: &str, input: &str) -> String {
    let out = tenant(src, input);
    let e = out.expect_err(src);
    // The bound's own error, not the CPU deadline's: the bound stopped it, not the clock
    // (a clock would make the test depend on how loaded the machine is).
    assert!(
        e.contains("the mapping built a value larger than 67108864 bytes"),
        "`{src}`: {e}"
    );
    e
}

#[test]
fn a_tenants_mapping_that_doubles_a_value_stops_at_the_value_cap() {
    let s = r#"{"s":"ab\"<&"}"#;
    // Each of these doubles its value per step: forty steps would ask for terabytes.
    for src in [
        "root = range(0, 40).fold(this.s, t -> t.tally + t.tally)",
        "root = range(0, 40).fold([this.s], t -> t.tally.concat(t.tally))",
        "root = range(0, 40).fold([this.s], t -> t.tally.append(t.tally, t.tally))",
        "root = range(0, 40).fold(this.s, t -> [t.tally, t.tally])",
        r#"root = range(0, 40).fold(this.s, t -> {"a": t.tally, "b": t.tally})"#,
        r#"root = range(0, 40).fold({"a": this.s}, t -> t.tally.merge({"b": t.tally}))"#,
        "root = range(0, 40).fold(this.s, t -> [t.tally, t.tally].join(\"\"))",
        r#"root = range(0, 40).fold(this.s, t -> "%s%s".format(t.tally, t.tally))"#,
        "root = range(0, 40).fold(this.s, t -> t.tally.format_json(no_indent: true).string())",
        "root = range(0, 40).fold(this.s, t -> t.tally.quote())",
        "root = range(0, 40).fold(this.s, t -> t.tally.replace_all(\"a\", t.tally))",
        "root = range(0, 40).fold(this.s, t -> t.tally.re_replace_all(\"(?s)^.*$\", \"$0$0\"))",
        "root = range(0, 40).fold([this.s], t -> t.tally.map_each(x -> [x, x]))",
        "root = range(0, 40).fold(this.s.bytes(), t -> t.tally + t.tally)",
        "root = range(0, 40).fold(this.s, t -> t.tally.escape_html().unescape_html() + t.tally)",
    ] {
        stopped_at_the_value_cap(src, s);
    }
}

#[test]
fn a_tenants_mapping_cannot_make_a_step_many_times_its_inputs() {
    let s = r#"{"s":"ab,cd"}"#;
    // One step whose result is the product of two sizes, or many small values made out
    // of text (forty bytes each, for one byte of text): refused as it is built.
    for src in [
        // A megabyte delimiter between a hundred items.
        r#"root = range(0, 100).map_each(i -> "x").join(this.s.repeat(250000))"#,
        // Every character replaced by a megabyte.
        r#"root = this.s.repeat(20).replace_all("", this.s.repeat(250000))"#,
        r#"root = this.s.repeat(80).replace_many(["a", this.s.repeat(250000)])"#,
        // Millions of one-character values.
        r#"root = this.s.repeat(4000000).split("")"#,
        r#"root = this.s.repeat(4000000).split(",")"#,
        r#"root = this.s.repeat(4000000).bytes().split("")"#,
        r#"root = this.s.repeat(4000000).unicode_segments("grapheme")"#,
        r#"root = this.s.repeat(4000000).re_find_all(".")"#,
        r#"root = ("[" + "0,".repeat(10000000) + "0]").parse_json()"#,
        r#"root = ("[" + "0,".repeat(10000000) + "0]").parse_json(use_number: true)"#,
        r#"root = ("[" + "0,".repeat(10000000) + "0]").parse_yaml()"#,
        r#"root = "a,".repeat(10000000).parse_csv(parse_header_row: false)"#,
        r#"root = "a&".repeat(10000000).parse_form_url_encoded()"#,
        r#"root = "<a/>".repeat(5000000).parse_xml()"#,
        // A megabyte document once per item.
        r#"root = {"big": this.s.repeat(250000), "v": range(0, 100)}.explode("v")"#,
        r#"root = range(0, 100).map_each(i -> this.s.repeat(250000))"#,
        // Indentation of a megabyte on every line.
        r#"root = range(0, 100).format_json(indent: this.s.repeat(250000))"#,
        r#"root = {"r": {"a": range(0, 100)}}.format_xml(indent: this.s.repeat(250000))"#,
        // Four copies of a large value in one literal.
        r#"let big = this.s.repeat(4000000)
root = [$big, $big, $big, $big]"#,
        // Buffers sized by an argument.
        "root = bytes(100000000)",
    ] {
        stopped_at_the_value_cap(src, s);
    }
    // A few kilobytes that inflate past the cap.
    let out = tenant(
        r#"let c = this.s.repeat(6000000).compress("gzip")
root = ($c + $c + $c).decompress("gzip")"#,
        s,
    );
    let e = out.unwrap_err();
    assert!(e.contains("larger than 67108864 bytes"), "{e}");
}

#[test]
fn a_tenants_run_stores_a_bounded_total() {
    // Each value fits, but a run that keeps assigning copies would fill memory.
    let src = r#"let big = this.s.repeat(4000000)
root.a = $big
root.b = $big
root.c = $big
root.d = $big
root.e = $big
root.f = $big
root.g = $big"#;
    let out = tenant(src, r#"{"s":"abcde"}"#);
    let e = out.unwrap_err();
    assert!(
        e.contains("the mapping stored more than 134217728 bytes"),
        "{e}"
    );
    let out = tenant(
        r#"let big = this.s.repeat(4000000)
root.a = $big
meta b = $big"#,
        r#"{"s":"abcde"}"#,
    );
    assert_eq!(out.unwrap().len(), 20_000_008);
}

#[test]
fn within_the_cap_a_tenants_mapping_runs_as_the_operators_does() {
    let input = r#"{"s":"ab,cd","doc":{"a":[1,{"b":"x"}],"c":"<y>"}}"#;
    for src in [
        "root = range(0, 16).fold(this.s, t -> t.tally + t.tally).length()",
        r#"root = this.s.repeat(1000).split(",").length()"#,
        r#"root = this.doc.collapse()"#,
        r#"root = this.doc.format_json(indent: "  ").string().parse_json()"#,
        r#"root = this.doc.a.map_each(x -> [x, x]).enumerated()"#,
        r#"root = this.s.re_replace_all("(b)", "$1$1").replace_all(",", "--")"#,
        r#"root = {"doc": this.doc, "v": [1, 2]}.explode("v")"#,
        r#"root = this.doc.format_xml().string().parse_xml()"#,
        "root = range(0, 1000000).length()",
    ] {
        let got = tenant(src, input);
        assert_eq!(got, run(src, input), "`{src}`");
    }
    // The operator's mappings are not held to the tenant's cap.
    let big = "root = range(0, 26).fold(this.s, t -> t.tally + t.tally).length()";
    assert_eq!(ok(big, r#"{"s":"x"}"#), (1u64 << 26).to_string());
    let out = tenant(big, r#"{"s":"x"}"#);
    assert!(out.unwrap_err().contains("larger than 67108864 bytes"));
}
