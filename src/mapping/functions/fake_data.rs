//! `fake(name)`: made-up but realistic values for tests and demos.

use chrono::{DateTime, Datelike, TimeZone, Utc};
use fake::rand::seq::IndexedRandom;
use fake::rand::Rng;
use fake::Fake;

use crate::mapping::exec::{own, Ctx, V};
use crate::mapping::go_time::LONG_MONTHS;
use crate::mapping::program::FuncCall;
use crate::mapping::spec::{ex, opt, Args, Default, FunctionSpec, Res};
use crate::value::Value;

/// Every name `fake` knows, in the order the reference lists them.
const NAMES: &[&str] = &[
    "latitude",
    "longitude",
    "unix_time",
    "date",
    "time_string",
    "month_name",
    "year_string",
    "day_of_week",
    "day_of_month",
    "timestamp",
    "century",
    "timezone",
    "time_period",
    "email",
    "mac_address",
    "domain_name",
    "url",
    "username",
    "ipv4",
    "ipv6",
    "password",
    "jwt",
    "word",
    "sentence",
    "paragraph",
    "cc_type",
    "cc_number",
    "currency",
    "amount_with_currency",
    "title_male",
    "title_female",
    "first_name",
    "first_name_male",
    "first_name_female",
    "last_name",
    "name",
    "gender",
    "chinese_first_name",
    "chinese_last_name",
    "chinese_name",
    "phone_number",
    "toll_free_phone_number",
    "e164_phone_number",
    "uuid_hyphenated",
    "uuid_digit",
];

pub static SPECS: &[FunctionSpec] = &[FunctionSpec {
    name: "fake",
    category: "Fake Data Generation",
    description: "A made-up value of the named kind: `latitude`, `longitude`, `unix_time`, `date`, `time_string`, `month_name`, `year_string`, `day_of_week`, `day_of_month`, `timestamp`, `century`, `timezone`, `time_period`, `email`, `mac_address`, `domain_name`, `url`, `username`, `ipv4`, `ipv6`, `password`, `jwt`, `word`, `sentence`, `paragraph`, `cc_type`, `cc_number`, `currency`, `amount_with_currency`, `title_male`, `title_female`, `first_name`, `first_name_male`, `first_name_female`, `last_name`, `name`, `gender`, `chinese_first_name`, `chinese_last_name`, `chinese_name`, `phone_number`, `toll_free_phone_number`, `e164_phone_number`, `uuid_hyphenated` or `uuid_digit`. Latitude and longitude are numbers, `unix_time` an integer, the rest strings.",
    params: &[opt("function", Default::Str(""))],
    examples: &[
        ex(r#"root.ok = fake("time_string").re_match("^\\d{2}:\\d{2}:\\d{2}$")"#, "{}", r#"{"ok":true}"#),
        ex(r#"root.ok = fake("email").contains("@")"#, "{}", r#"{"ok":true}"#),
        ex(r#"root.ok = fake("uuid_hyphenated").length() == 36"#, "{}", r#"{"ok":true}"#),
        ex(r#"root.ok = fake("latitude").type() == "number""#, "{}", r#"{"ok":true}"#),
        ex(r#"root = fake("shoe_size")"#, "{}", "error:unknown fake function"),
    ],
    pure: false,
    needs_message: false,
    imp: fake_fn,
}];

const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const CENTURIES: [&str; 21] = [
    "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII", "XIII", "XIV", "XV",
    "XVI", "XVII", "XVIII", "XIX", "XX", "XXI",
];
const CARD_TYPES: [&str; 6] = [
    "VISA",
    "MasterCard",
    "American Express",
    "Discover",
    "JCB",
    "Diners Club",
];
const MALE_TITLES: [&str; 6] = ["Mr.", "Dr.", "Prof.", "Lord", "King", "Prince"];
const FEMALE_TITLES: [&str; 8] = [
    "Mrs.", "Ms.", "Miss", "Dr.", "Prof.", "Lady", "Queen", "Princess",
];
const MALE_NAMES: [&str; 20] = [
    "James", "John", "Robert", "Michael", "William", "David", "Richard", "Joseph", "Thomas",
    "Charles", "Daniel", "Matthew", "Anthony", "Mark", "Paul", "Steven", "Andrew", "Kenneth",
    "George", "Edward",
];
const FEMALE_NAMES: [&str; 20] = [
    "Mary",
    "Patricia",
    "Jennifer",
    "Linda",
    "Elizabeth",
    "Barbara",
    "Susan",
    "Jessica",
    "Sarah",
    "Karen",
    "Nancy",
    "Lisa",
    "Margaret",
    "Betty",
    "Sandra",
    "Ashley",
    "Dorothy",
    "Kimberly",
    "Emily",
    "Donna",
];

fn pick<'s>(rng: &mut impl Rng, from: &[&'s str]) -> &'s str {
    from.choose(rng).copied().unwrap_or_default()
}

fn digits(rng: &mut impl Rng, n: usize) -> String {
    (0..n)
        .map(|_| char::from(b'0' + rng.random_range(0..10u8)))
        .collect()
}

/// A moment between 1970 and now.
fn moment(rng: &mut impl Rng) -> DateTime<Utc> {
    let now = Utc::now().timestamp().max(1);
    Utc.timestamp_opt(rng.random_range(0..now), 0)
        .single()
        .unwrap_or_default()
}

fn base64url(rng: &mut impl Rng, n: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    (0..n)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

fn domain(rng: &mut impl Rng) -> String {
    use fake::faker::internet::en::DomainSuffix;
    use fake::faker::lorem::en::Word;
    let word: String = Word().fake_with_rng(rng);
    let suffix: String = DomainSuffix().fake_with_rng(rng);
    format!("{}.{suffix}", word.to_lowercase())
}

fn generate(name: &str) -> Res<Value> {
    use fake::faker::creditcard::en::CreditCardNumber;
    use fake::faker::currency::en::CurrencyCode;
    use fake::faker::internet::en::{FreeEmail, IPv4, IPv6, MACAddress, Password, Username};
    use fake::faker::lorem::en::{Paragraph, Sentence, Word};
    use fake::faker::name::en::{FirstName, LastName, Name};
    use fake::faker::name::zh_cn;
    use fake::faker::phone_number::en::PhoneNumber;

    let rng = &mut fake::rand::rng();
    let s = |v: String| Ok(Value::String(v));
    match name {
        "latitude" => Ok(Value::Float(rng.random_range(-90.0..=90.0))),
        "longitude" => Ok(Value::Float(rng.random_range(-180.0..=180.0))),
        "unix_time" => Ok(Value::Int(moment(rng).timestamp())),
        "date" => s(moment(rng).format("%Y-%m-%d").to_string()),
        "time_string" => s(moment(rng).format("%H:%M:%S").to_string()),
        "month_name" => s(LONG_MONTHS[moment(rng).month0() as usize].to_string()),
        "year_string" => s(moment(rng).year().to_string()),
        "day_of_week" => s(pick(rng, &DAYS).to_string()),
        "day_of_month" => s(moment(rng).day().to_string()),
        "timestamp" => s(moment(rng).format("%Y-%m-%d %H:%M:%S").to_string()),
        "century" => s(pick(rng, &CENTURIES).to_string()),
        "timezone" => {
            let zones = chrono_tz::TZ_VARIANTS;
            s(zones[rng.random_range(0..zones.len())].name().to_string())
        }
        "time_period" => s(pick(rng, &["AM", "PM"]).to_string()),
        "email" => s(FreeEmail().fake_with_rng(rng)),
        "mac_address" => s(MACAddress().fake_with_rng::<String, _>(rng).to_lowercase()),
        "domain_name" => s(domain(rng)),
        "url" => {
            let scheme = pick(rng, &["http", "https"]);
            s(format!("{scheme}://www.{}/", domain(rng)))
        }
        "username" => s(Username().fake_with_rng(rng)),
        "ipv4" => s(IPv4().fake_with_rng(rng)),
        "ipv6" => s(IPv6().fake_with_rng(rng)),
        "password" => s(Password(12..20).fake_with_rng(rng)),
        "jwt" => s(format!(
            "{}.{}.{}",
            base64url(rng, 36),
            base64url(rng, 60),
            base64url(rng, 43)
        )),
        "word" => s(Word().fake_with_rng(rng)),
        "sentence" => s(Sentence(4..10).fake_with_rng(rng)),
        "paragraph" => s(Paragraph(3..6).fake_with_rng(rng)),
        "cc_type" => s(pick(rng, &CARD_TYPES).to_string()),
        "cc_number" => s(CreditCardNumber().fake_with_rng(rng)),
        "currency" => s(CurrencyCode().fake_with_rng(rng)),
        "amount_with_currency" => {
            let code: String = CurrencyCode().fake_with_rng(rng);
            s(format!("{code} {:.2}", rng.random_range(1.0..10_000.0)))
        }
        "title_male" => s(pick(rng, &MALE_TITLES).to_string()),
        "title_female" => s(pick(rng, &FEMALE_TITLES).to_string()),
        "first_name" => s(FirstName().fake_with_rng(rng)),
        "first_name_male" => s(pick(rng, &MALE_NAMES).to_string()),
        "first_name_female" => s(pick(rng, &FEMALE_NAMES).to_string()),
        "last_name" => s(LastName().fake_with_rng(rng)),
        "name" => s(Name().fake_with_rng(rng)),
        "gender" => s(pick(rng, &["Male", "Female"]).to_string()),
        "chinese_first_name" => s(zh_cn::FirstName().fake_with_rng(rng)),
        "chinese_last_name" => s(zh_cn::LastName().fake_with_rng(rng)),
        "chinese_name" => s(zh_cn::Name().fake_with_rng(rng)),
        "phone_number" => s(PhoneNumber().fake_with_rng(rng)),
        "toll_free_phone_number" => {
            let area = pick(rng, &["800", "833", "844", "855", "866", "877", "888"]);
            s(format!("({area}) {}-{}", digits(rng, 3), digits(rng, 4)))
        }
        "e164_phone_number" => s(format!("+{}{}", rng.random_range(1..10u8), digits(rng, 10))),
        "uuid_hyphenated" => s(uuid::Uuid::new_v4().hyphenated().to_string()),
        "uuid_digit" => s(uuid::Uuid::new_v4().simple().to_string()),
        other => Err(format!(
            "unknown fake function {other:?}; known ones: {}",
            NAMES.join(", ")
        )),
    }
}

fn fake_fn<'a>(_: &'a FuncCall, args: &Args<'_>, _: &Ctx<'a>) -> Res<V<'a>> {
    own(generate(args.str(0)?)?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_listed_name_makes_a_value() {
        for name in super::NAMES {
            let v = super::generate(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!v.to_text().is_empty(), "{name} gave an empty value");
        }
    }
}
