//! `parse_log`: parses syslog lines (RFC 5424 or RFC 3164) into JSON objects.
//!
//! RFC 3164 timestamps carry neither a year nor a zone: `default_year` and
//! `default_timezone` fill them in. With `best_effort` (the default) a line that does not
//! follow the format still becomes an object with what could be read (at least
//! `message`); without it such a line is passed on unchanged and marked with the error.

use std::str::FromStr;

use async_trait::async_trait;
use chrono::{DateTime, Datelike, FixedOffset, SecondsFormat, TimeZone, Utc};
use schemars::JsonSchema;
use serde::Deserialize;
use syslog_loose::{Protocol, Variant};

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, Example, Kind, ProcessError, Processor,
};
use crate::message::Message;
use crate::value::{Object, Value};

fn yes() -> bool {
    true
}

fn current() -> String {
    "current".into()
}

fn utc() -> String {
    "UTC".into()
}

fn json() -> String {
    "json".into()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    SyslogRfc5424,
    SyslogRfc3164,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ParseLogConfig {
    /// The log format: `syslog_rfc5424` or `syslog_rfc3164`.
    pub format: LogFormat,
    /// How the parsed document is written; only `json`.
    #[serde(default = "json")]
    pub codec: String,
    /// Give what could be parsed even from a line that does not follow the format.
    #[serde(default = "yes")]
    pub best_effort: bool,
    /// Also accept RFC 3339 timestamps in RFC 3164 lines.
    #[serde(default = "yes")]
    pub allow_rfc3339: bool,
    /// The year of RFC 3164 timestamps: `current`, a number, or empty for year 0.
    #[serde(default = "current")]
    pub default_year: String,
    /// The time zone of RFC 3164 timestamps, an IANA name (`UTC`, `Europe/Paris`).
    #[serde(default = "utc")]
    pub default_timezone: String,
}

impl Spec for ParseLogConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "parse_log",
        kind: Kind::Processor,
        summary: "Parses syslog lines (RFC 5424 or RFC 3164) into JSON objects.",
        examples: &[Example {
            title: "Structure syslog lines",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - parse_log:\n        format: syslog_rfc3164\n        default_timezone: Europe/Paris\noutput:\n  stdout: {}\n",
        }],
    };
}

#[derive(Clone, Copy)]
enum Year {
    Current,
    Fixed(i32),
}

impl BuildProcessor for ParseLogConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        if self.codec != "json" {
            return Err(cx.error(format!(
                "codec: `{}` is not supported (only `json`)",
                self.codec
            )));
        }
        let year = match self.default_year.trim() {
            "current" => Year::Current,
            "" => Year::Fixed(0),
            n => Year::Fixed(n.parse().map_err(|_| {
                cx.error(format!(
                    "default_year: `{n}` is not `current`, a year or empty"
                ))
            })?),
        };
        let timezone = chrono_tz::Tz::from_str(self.default_timezone.trim()).map_err(|_| {
            cx.error(format!(
                "default_timezone: `{}` is not a known time zone (an IANA name such as `UTC` or `Europe/Paris`)",
                self.default_timezone
            ))
        })?;
        Ok(Box::new(ParseLog {
            format: self.format,
            best_effort: self.best_effort,
            allow_rfc3339: self.allow_rfc3339,
            year,
            timezone,
        }))
    }
}

pub struct ParseLog {
    format: LogFormat,
    best_effort: bool,
    allow_rfc3339: bool,
    year: Year,
    timezone: chrono_tz::Tz,
}

/// Whether the timestamp after `<PRI>` is RFC 3339 (it starts with a four-digit year),
/// which carries its own zone, rather than the RFC 3164 `Mmm dd hh:mm:ss`.
fn rfc3339_stamp(line: &str) -> bool {
    let rest = line
        .trim_start()
        .strip_prefix('<')
        .and_then(|r| r.split_once('>'))
        .map(|(_, r)| r)
        .unwrap_or(line);
    let b = rest.as_bytes();
    b.len() > 4 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
}

impl ParseLog {
    fn parse(&self, line: &str) -> Result<Object, String> {
        let year = self.year;
        let get_year = move |_| match year {
            Year::Current => Utc::now().year(),
            Year::Fixed(y) => y,
        };
        let variant = match self.format {
            LogFormat::SyslogRfc5424 => Variant::RFC5424,
            LogFormat::SyslogRfc3164 => Variant::RFC3164,
        };
        // Zone-less stamps are read as UTC here and moved into the configured zone below
        // (the parser's own zone parameter takes fixed offsets only).
        let utc = FixedOffset::east_opt(0);
        let mut problem = None;
        if self.format == LogFormat::SyslogRfc3164 && !self.allow_rfc3339 && rfc3339_stamp(line) {
            problem = Some("RFC 3339 timestamps are not allowed (allow_rfc3339: false)".into());
        }
        let parsed = match problem {
            None => syslog_loose::parse_message_with_year_exact_tz(line, get_year, utc, variant)
                .map_err(|_| format!("not a valid {} line", self.format_name())),
            Some(p) => Err(p),
        };
        let msg = match parsed {
            Ok(m) => m,
            Err(e) if !self.best_effort => return Err(e),
            Err(_) => syslog_loose::parse_message_with_year_tz(line, get_year, utc, variant),
        };
        let mut out = Object::new();
        out.insert("message".into(), Value::String(msg.msg.to_owned()));
        if let Some(ts) = msg.timestamp {
            let ts = if self.format == LogFormat::SyslogRfc3164 && !rfc3339_stamp(line) {
                self.in_default_zone(ts)
            } else {
                ts
            };
            out.insert(
                "timestamp".into(),
                Value::String(ts.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
            );
        }
        if let Some(f) = msg.facility {
            out.insert("facility".into(), Value::Int(f as i64));
        }
        if let Some(s) = msg.severity {
            out.insert("severity".into(), Value::Int(s as i64));
        }
        if let (Some(f), Some(s)) = (msg.facility, msg.severity) {
            out.insert("priority".into(), Value::Int(f as i64 * 8 + s as i64));
        }
        if let Some(h) = msg.hostname {
            out.insert("hostname".into(), Value::String(h.to_owned()));
        }
        if let Some(a) = msg.appname {
            out.insert("appname".into(), Value::String(a.to_owned()));
        }
        if let Some(p) = msg.procid {
            out.insert("procid".into(), Value::String(p.to_string()));
        }
        if let Some(m) = msg.msgid {
            out.insert("msgid".into(), Value::String(m.to_owned()));
        }
        if let Protocol::RFC5424(version) = msg.protocol {
            out.insert("version".into(), Value::Int(version.into()));
            if !msg.structured_data.is_empty() {
                let mut sd = Object::new();
                for element in &msg.structured_data {
                    let params: Object = element
                        .params()
                        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
                        .collect();
                    sd.insert(element.id.to_owned(), Value::Object(params));
                }
                out.insert("structureddata".into(), Value::Object(sd));
            }
        }
        Ok(out)
    }

    /// The wall-clock time of a zone-less stamp (read as UTC) in `default_timezone`.
    fn in_default_zone(&self, ts: DateTime<FixedOffset>) -> DateTime<FixedOffset> {
        self.timezone
            .from_local_datetime(&ts.naive_utc())
            .earliest()
            .map(|t| t.fixed_offset())
            .unwrap_or(ts)
    }

    fn format_name(&self) -> &'static str {
        match self.format {
            LogFormat::SyslogRfc5424 => "RFC 5424 syslog",
            LogFormat::SyslogRfc3164 => "RFC 3164 syslog",
        }
    }
}

#[async_trait]
impl Processor for ParseLog {
    async fn process_message(&self, msg: &mut Message) -> Result<bool, ProcessError> {
        let line = std::str::from_utf8(msg.payload())
            .map_err(|e| ProcessError::new(format!("parse_log: payload is not UTF-8: {e}")))?;
        let object = self
            .parse(line)
            .map_err(|e| ProcessError::new(format!("parse_log: {e}")))?;
        msg.set_structured(Value::Object(object));
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::{run_one as run, text};

    fn cx() -> BuildContext {
        BuildContext::new("t", crate::http::Routes::new(), Default::default()).child("p")
    }

    fn build(yaml: &str) -> Box<dyn Processor> {
        let cfg: ParseLogConfig = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        cfg.build(&cx()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn rfc5424_with_structured_data() {
        let p = build("format: syslog_rfc5424");
        let m = run(
            &*p,
            r#"<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut="3" eventSource="Application" eventID="1011"] An application event log entry..."#,
        )
        .await;
        assert!(m.error().is_none(), "{:?}", m.error());
        assert_eq!(
            text(&m),
            r#"{"appname":"evntslog","facility":20,"hostname":"mymachine.example.com","message":"An application event log entry...","msgid":"ID47","priority":165,"severity":5,"structureddata":{"exampleSDID@32473":{"eventID":"1011","eventSource":"Application","iut":"3"}},"timestamp":"2003-10-11T22:14:15.003Z","version":1}"#
        );
    }

    #[tokio::test]
    async fn rfc3164_takes_the_year_and_zone_from_the_config() {
        let p =
            build("{format: syslog_rfc3164, default_year: '2005', default_timezone: Europe/Paris}");
        let m = run(
            &*p,
            "<34>Oct 11 22:14:15 mymachine su[123]: 'su root' failed for lonvick on /dev/pts/8",
        )
        .await;
        assert_eq!(
            text(&m),
            r#"{"appname":"su","facility":4,"hostname":"mymachine","message":"'su root' failed for lonvick on /dev/pts/8","priority":34,"procid":"123","severity":2,"timestamp":"2005-10-11T22:14:15+02:00"}"#
        );
        let p = build("format: syslog_rfc3164");
        let m = run(&*p, "<34>Oct 11 22:14:15 mymachine su: hi").await;
        let year = Utc::now().year();
        assert!(
            text(&m).contains(&format!(r#""timestamp":"{year}-10-11T22:14:15Z""#)),
            "{}",
            text(&m)
        );
    }

    #[tokio::test]
    async fn rfc3339_stamps_in_rfc3164_lines() {
        let line = "<34>2003-10-11T22:14:15.003+01:00 mymachine su: hi";
        let p = build("format: syslog_rfc3164");
        let m = run(&*p, line).await;
        assert!(
            text(&m).contains(r#""timestamp":"2003-10-11T22:14:15.003+01:00""#),
            "{}",
            text(&m)
        );
        let p = build("{format: syslog_rfc3164, allow_rfc3339: false, best_effort: false}");
        let m = run(&*p, line).await;
        assert_eq!(text(&m), line);
        assert!(m.error().unwrap().contains("RFC 3339"), "{:?}", m.error());
    }

    #[tokio::test]
    async fn best_effort_keeps_what_it_can() {
        let p = build("format: syslog_rfc5424");
        let m = run(&*p, "just some text").await;
        assert!(m.error().is_none());
        assert_eq!(text(&m), r#"{"message":"just some text"}"#);
        let p = build("{format: syslog_rfc5424, best_effort: false}");
        let m = run(&*p, "just some text").await;
        assert_eq!(text(&m), "just some text");
        assert!(
            m.error().unwrap().contains("not a valid RFC 5424"),
            "{:?}",
            m.error()
        );
    }

    #[test]
    fn bad_configs_are_refused() {
        let e = serde_yaml::from_str::<ParseLogConfig>("format: apache").unwrap_err();
        assert!(e.to_string().contains("syslog_rfc5424"), "{e}");
        for (yaml, said) in [
            (
                "{format: syslog_rfc3164, default_year: soon}",
                "default_year",
            ),
            (
                "{format: syslog_rfc3164, default_timezone: Mars/Olympus}",
                "default_timezone",
            ),
            ("{format: syslog_rfc3164, codec: xml}", "codec"),
        ] {
            let cfg: ParseLogConfig = serde_yaml::from_str(yaml).unwrap();
            let e = cfg.build(&cx()).err().unwrap();
            assert!(e.message.starts_with(said), "{e}");
        }
    }
}
