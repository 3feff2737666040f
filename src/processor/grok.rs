//! `grok`: parses unstructured text (log lines) with grok expressions. The first
//! expression that captures at least one value replaces the message with a JSON object of
//! its captures; a message no expression matches is passed on unchanged and marked.
//!
//! Expressions are regular expressions with `%{PATTERN:name}` placeholders, the standard
//! pattern set (`WORD`, `INT`, `IP`, `COMBINEDAPACHELOG`, ...) built in. A third part
//! converts the capture: `%{INT:port:int}` gives a number. All expressions are compiled
//! when the stream is built, so a mistake or an unknown pattern stops it there.

use std::collections::BTreeMap;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

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

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrokConfig {
    /// Expressions tried in order; the first that captures something wins.
    pub expressions: Vec<String>,
    /// Extra patterns by name, usable in the expressions as `%{NAME}`.
    #[serde(default)]
    pub pattern_definitions: BTreeMap<String, String>,
    /// Files (or directories, or glob patterns) of `NAME regex` lines, read when the
    /// stream is built.
    #[serde(default)]
    pub pattern_paths: Vec<String>,
    /// Keep only the captures given a name (`%{WORD:first}`), not every pattern used.
    #[serde(default = "yes")]
    pub named_captures_only: bool,
    /// Start from the standard pattern set.
    #[serde(default = "yes")]
    pub use_default_patterns: bool,
    /// Leave out captures that matched an empty string.
    #[serde(default = "yes")]
    pub remove_empty_values: bool,
}

impl Spec for GrokConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "grok",
        kind: Kind::Processor,
        summary: "Parses text into a JSON object with the first grok expression that matches.",
        examples: &[Example {
            title: "Parse VPC flow logs",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - grok:\n        expressions:\n          - '%{VPCFLOWLOG}'\n        pattern_definitions:\n          VPCFLOWLOG: '%{NUMBER:version:int} %{NUMBER:accountid} %{NOTSPACE:interfaceid} %{NOTSPACE:srcaddr} %{NOTSPACE:dstaddr} %{NOTSPACE:srcport:int} %{NOTSPACE:dstport:int} %{NOTSPACE:protocol:int} %{NOTSPACE:packets:int} %{NOTSPACE:bytes:int} %{NUMBER:start:int} %{NUMBER:end:int} %{NOTSPACE:action} %{NOTSPACE:logstatus}'\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for GrokConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        if self.expressions.is_empty() {
            return Err(cx.error("`expressions` needs at least one grok expression"));
        }
        let mut grok = if self.use_default_patterns {
            grok::Grok::with_default_patterns()
        } else {
            grok::Grok::empty()
        };
        for (i, path) in self.pattern_paths.iter().enumerate() {
            for (name, pattern) in
                read_patterns(path).map_err(|e| cx.error(format!("pattern_paths[{i}]: {e}")))?
            {
                grok.add_pattern(name, pattern);
            }
        }
        // Definitions in the config win over files and the standard set.
        for (name, pattern) in &self.pattern_definitions {
            grok.add_pattern(name.clone(), pattern.clone());
        }
        let mut patterns = Vec::with_capacity(self.expressions.len());
        for (i, expr) in self.expressions.iter().enumerate() {
            let pattern = grok
                .compile(expr, self.named_captures_only)
                .map_err(|e| cx.error(format!("expressions[{i}]: {e}")))?;
            patterns.push(pattern);
        }
        Ok(Box::new(Grok {
            patterns,
            remove_empty_values: self.remove_empty_values,
        }))
    }
}

/// The `NAME regex` lines of every file `path` names: a file, a directory (its files) or
/// a glob pattern. Blank lines and `#` comments are skipped.
fn read_patterns(path: &str) -> Result<Vec<(String, String)>, String> {
    let path = path.strip_prefix("file://").unwrap_or(path);
    let mut files = Vec::new();
    let meta = std::fs::metadata(path);
    if meta.as_ref().is_ok_and(|m| m.is_dir()) {
        let entries = std::fs::read_dir(path).map_err(|e| format!("cannot list `{path}`: {e}"))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("cannot list `{path}`: {e}"))?;
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                files.push(entry.path());
            }
        }
        files.sort();
    } else if meta.is_ok() {
        files.push(path.into());
    } else {
        let found = glob::glob(path).map_err(|e| format!("bad pattern `{path}`: {e}"))?;
        files.extend(found.filter_map(Result::ok).filter(|p| p.is_file()));
        if files.is_empty() {
            return Err(format!("no pattern file at `{path}`"));
        }
    }
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read `{}`: {e}", file.display()))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((name, pattern)) = line.split_once(char::is_whitespace) else {
                return Err(format!(
                    "{}:{}: expected `NAME pattern`",
                    file.display(),
                    n + 1
                ));
            };
            out.push((name.to_owned(), pattern.trim().to_owned()));
        }
    }
    Ok(out)
}

pub struct Grok {
    patterns: Vec<grok::Pattern>,
    remove_empty_values: bool,
}

impl Grok {
    fn parse(&self, text: &str) -> Option<Object> {
        for pattern in &self.patterns {
            let Some(matches) = pattern.match_against(text) else {
                continue;
            };
            let mut object = Object::new();
            for (name, value) in matches.iter() {
                if self.remove_empty_values && value.is_empty() {
                    continue;
                }
                let typed = match pattern.get_extract(name) {
                    Some("int") | Some("integer") => value
                        .parse::<i64>()
                        .map(Value::Int)
                        .unwrap_or_else(|_| Value::String(value.to_owned())),
                    Some("float") | Some("number") => value
                        .parse::<f64>()
                        .map(Value::Float)
                        .unwrap_or_else(|_| Value::String(value.to_owned())),
                    _ => Value::String(value.to_owned()),
                };
                object.insert(name.to_owned(), typed);
            }
            if !object.is_empty() {
                return Some(object);
            }
        }
        None
    }
}

#[async_trait]
impl Processor for Grok {
    async fn process_message(&self, msg: &mut Message) -> Result<bool, ProcessError> {
        let text = std::str::from_utf8(msg.payload())
            .map_err(|e| ProcessError::new(format!("grok: payload is not UTF-8: {e}")))?;
        let object = self
            .parse(text)
            .ok_or_else(|| ProcessError::new("grok: no expression matched the message"))?;
        msg.set_structured(Value::Object(object));
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::{run_one as run, text};

    fn cx() -> BuildContext {
        BuildContext::new("t", crate::http::Routes::new(), Default::default()).child("g")
    }

    fn build(yaml: &str) -> Box<dyn Processor> {
        let cfg: GrokConfig = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        cfg.build(&cx()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn type_hints_are_respected() {
        let p = build("expressions: ['%{WORD:first},%{INT:second:int}']");
        assert_eq!(
            text(&run(&*p, "foo,1").await),
            r#"{"first":"foo","second":1}"#
        );
    }

    #[tokio::test]
    async fn the_reference_vpc_flow_log_example() {
        let p = build(
            "expressions: ['%{VPCFLOWLOG}']\npattern_definitions:\n  VPCFLOWLOG: '%{NUMBER:version:int} %{NUMBER:accountid} %{NOTSPACE:interfaceid} %{NOTSPACE:srcaddr} %{NOTSPACE:dstaddr} %{NOTSPACE:srcport:int} %{NOTSPACE:dstport:int} %{NOTSPACE:protocol:int} %{NOTSPACE:packets:int} %{NOTSPACE:bytes:int} %{NUMBER:start:int} %{NUMBER:end:int} %{NOTSPACE:action} %{NOTSPACE:logstatus}'\n",
        );
        let m = run(
            &*p,
            "2 123456789010 eni-1235b8ca123456789 172.31.16.139 172.31.16.21 20641 22 6 20 4249 1418530010 1418530070 ACCEPT OK",
        )
        .await;
        assert_eq!(
            text(&m),
            r#"{"accountid":"123456789010","action":"ACCEPT","bytes":4249,"dstaddr":"172.31.16.21","dstport":22,"end":1418530070,"interfaceid":"eni-1235b8ca123456789","logstatus":"OK","packets":20,"protocol":6,"srcaddr":"172.31.16.139","srcport":20641,"start":1418530010,"version":2}"#
        );
    }

    #[tokio::test]
    async fn the_standard_set_parses_an_apache_line() {
        let p = build("expressions: ['%{COMMONAPACHELOG}']");
        let m = run(
            &*p,
            r#"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326"#,
        )
        .await;
        let v = m.structured().unwrap().clone();
        let Value::Object(o) = v else { panic!() };
        assert_eq!(o["clientip"], Value::String("127.0.0.1".into()));
        assert_eq!(o["verb"], Value::String("GET".into()));
        assert_eq!(o["response"], Value::String("200".into()));
        // The unnamed patterns inside are not captured.
        assert!(!o.contains_key("IPORHOST"), "{o:?}");
    }

    #[tokio::test]
    async fn expressions_are_tried_in_order_and_misses_are_flagged() {
        let p = build("expressions: ['^%{INT:n:int}$', '^%{WORD:w}$']");
        assert_eq!(text(&run(&*p, "42").await), r#"{"n":42}"#);
        assert_eq!(text(&run(&*p, "hello").await), r#"{"w":"hello"}"#);
        let miss = run(&*p, "two words").await;
        assert_eq!(text(&miss), "two words");
        assert!(miss.error().unwrap().contains("no expression matched"));
    }

    #[tokio::test]
    async fn empty_values_and_unnamed_captures() {
        let keep = build("expressions: ['%{WORD:a}:(?<b>[0-9]*)']\nremove_empty_values: false");
        assert_eq!(text(&run(&*keep, "x:").await), r#"{"a":"x","b":""}"#);
        let drop = build("expressions: ['%{WORD:a}:(?<b>[0-9]*)']");
        assert_eq!(text(&run(&*drop, "x:").await), r#"{"a":"x"}"#);
        let all = build("expressions: ['%{INT}-%{WORD:w}']\nnamed_captures_only: false");
        let m = run(&*all, "7-x").await;
        let s = text(&m);
        assert!(
            s.contains(r#""INT":"7""#) && s.contains(r#""w":"x""#),
            "{s}"
        );
    }

    #[tokio::test]
    async fn patterns_from_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("mine"),
            "# colours\nCOLOUR (?:red|green|blue)\n\nSHADE %{COLOUR}-%{INT}\n",
        )
        .unwrap();
        let p = build(&format!(
            "expressions: ['%{{SHADE:s}}']\npattern_paths: ['{}']\nuse_default_patterns: true",
            dir.path().display()
        ));
        assert_eq!(text(&run(&*p, "green-5").await), r#"{"s":"green-5"}"#);
        let missing = serde_yaml::from_str::<GrokConfig>(
            "expressions: ['%{WORD}']\npattern_paths: ['/nonexistent/patterns']",
        )
        .unwrap();
        let e = missing.build(&cx()).err().unwrap();
        assert!(e.message.starts_with("pattern_paths[0]"), "{e}");
    }

    #[test]
    fn bad_expressions_are_refused_with_their_index() {
        let cfg: GrokConfig =
            serde_yaml::from_str("expressions: ['%{WORD:a}', '%{NOPE:b}']").unwrap();
        let e = cfg.build(&cx()).err().unwrap();
        assert_eq!(e.path, "g");
        assert!(
            e.message.starts_with("expressions[1]") && e.message.contains("NOPE"),
            "{e}"
        );
        let cfg: GrokConfig =
            serde_yaml::from_str("expressions: ['%{WORD}']\nuse_default_patterns: false").unwrap();
        assert!(
            cfg.build(&cx()).is_err(),
            "WORD is unknown without the standard set"
        );
        let cfg: GrokConfig = serde_yaml::from_str("expressions: ['(unclosed']").unwrap();
        assert!(cfg.build(&cx()).is_err());
        let cfg: GrokConfig = serde_yaml::from_str("expressions: []").unwrap();
        assert!(cfg
            .build(&cx())
            .err()
            .unwrap()
            .message
            .contains("at least one"));
    }
}
