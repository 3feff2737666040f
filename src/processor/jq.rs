//! `jq`: runs a jq query on each message and replaces the message with what it emits.
//! No value filters the message, one value becomes the payload, several become an array.
//! The message's metadata is the variable `$metadata`. A query that fails leaves the
//! message as it was and marks it with the error.
//!
//! The query is compiled while the config is read, so a syntax error or an unknown
//! filter stops the stream before it starts, with the offset in the query.

use async_trait::async_trait;
use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars};
use jaq_json::Val;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, Example, Kind, ProcessError, Processor,
};
use crate::message::Message;

type Data = jaq_core::data::JustLut<Val>;
type Filter = jaq_core::compile::Filter<jaq_core::Native<Data>>;

/// A query emitting more values than this is stopped: one message cannot become an
/// unbounded array (`repeat(.)` would otherwise fill the memory).
const MAX_RESULTS: usize = 100_000;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JqConfig {
    /// The jq query run on each message.
    pub query: JqQuery,
    /// Give the query the payload as a string instead of parsing it as JSON.
    #[serde(default)]
    pub raw: bool,
    /// Write a string result as raw text instead of a quoted JSON string.
    #[serde(default)]
    pub output_raw: bool,
}

/// A jq query, checked when the config is read.
#[derive(Debug, Clone)]
pub struct JqQuery {
    source: String,
    /// Whether the host's environment (`env`, `$ENV`) may be read: not in configs that
    /// arrived as data.
    host: bool,
}

impl<'de> Deserialize<'de> for JqQuery {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let source = String::deserialize(d)?;
        let host = !crate::config::mapped::is_sandboxed();
        compile(&source, host).map_err(serde::de::Error::custom)?;
        Ok(JqQuery { source, host })
    }
}

impl JsonSchema for JqQuery {
    fn schema_name() -> String {
        "JqQuery".into()
    }
    fn json_schema(g: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        String::json_schema(g)
    }
}

impl Spec for JqConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "jq",
        kind: Kind::Processor,
        summary: "Replaces each message with what a jq query emits from it.",
        examples: &[Example {
            title: "Keep the names of the adults",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - jq:\n        query: '[.people[] | select(.age >= 18) | .name]'\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for JqConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        let filter = compile(&self.query.source, self.query.host)
            .map_err(|e| cx.error(format!("query: {e}")))?;
        // Reading the whole environment for every message costs more than most queries:
        // read it once, and only for a query that can use it.
        let env = (self.query.host && self.query.source.contains("env"))
            .then(|| std::env::vars().collect());
        Ok(Box::new(Jq {
            filter,
            host: self.query.host,
            env,
            raw: self.raw,
            output_raw: self.output_raw,
        }))
    }
}

/// Compiles `code` with jq's standard library; `host` adds `env` and `$ENV`.
fn compile(code: &str, host: bool) -> Result<Filter, String> {
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    let funs = jaq_core::funs()
        .chain(jaq_std::funs())
        .chain(jaq_json::funs())
        .filter(|(name, _, _)| host || *name != "env");
    let arena = Arena::default();
    let modules = Loader::new(defs)
        .load(&arena, File { code, path: () })
        .map_err(|errors| {
            let mut out = Vec::new();
            for (_, e) in errors {
                match e {
                    jaq_core::load::Error::Io(es) => {
                        out.extend(es.into_iter().map(|(path, e)| format!("{path}: {e}")))
                    }
                    jaq_core::load::Error::Lex(es) => out.extend(
                        es.into_iter()
                            .map(|(want, got)| found(code, want.as_str(), got)),
                    ),
                    jaq_core::load::Error::Parse(es) => out.extend(
                        es.into_iter()
                            .map(|(want, got)| found(code, want.as_str(), got)),
                    ),
                }
            }
            format!("invalid jq query: {}", out.join("; "))
        })?;
    let globals: &[&str] = if host {
        &["$metadata", "$ENV"]
    } else {
        &["$metadata"]
    };
    Compiler::default()
        .with_funs(funs)
        .with_global_vars(globals.iter().copied())
        .compile(modules)
        .map_err(|errors| {
            let out: Vec<String> = errors
                .into_iter()
                .flat_map(|(_, es)| es)
                .map(|(name, what)| {
                    let at = jaq_core::load::span(code, name).start;
                    let hint = if !host && (name == "env" || name == "$ENV") {
                        " (the host's environment is not available here)"
                    } else {
                        ""
                    };
                    format!("undefined {} `{name}` at offset {at}{hint}", what.as_str())
                })
                .collect();
            format!("invalid jq query: {}", out.join("; "))
        })
}

/// "expected X at offset N, found `...`" for a lexer or parser error.
fn found(code: &str, want: &str, got: &str) -> String {
    let at = jaq_core::load::span(code, got).start;
    let near: String = got.chars().take(20).collect();
    if near.is_empty() {
        format!("expected {want} at the end")
    } else {
        format!("expected {want} at offset {at}, found `{near}`")
    }
}

pub struct Jq {
    filter: Filter,
    host: bool,
    /// The process environment, as `$ENV` and `env` see it; `None` when the query does
    /// not mention them.
    env: Option<Vec<(String, String)>>,
    raw: bool,
    output_raw: bool,
}

impl Jq {
    fn run(&self, msg: &Message) -> Result<Option<Vec<u8>>, String> {
        let input = if self.raw {
            Val::utf8_str(msg.payload().to_vec())
        } else {
            jaq_json::read::parse_single(msg.payload())
                .map_err(|e| format!("payload is not valid JSON: {e}"))?
        };
        let mut metadata = Vec::with_capacity(msg.metadata().len());
        for (k, v) in msg.metadata() {
            let v = jaq_json::read::parse_single(&v.to_json())
                .map_err(|e| format!("metadata `{k}`: {e}"))?;
            metadata.push((Val::utf8_str(k.clone().into_bytes()), v));
        }
        let metadata = Val::obj(metadata.into_iter().collect());
        let mut globals = vec![metadata];
        if self.host {
            let env = self.env.iter().flatten().map(|(k, v)| {
                (
                    Val::utf8_str(k.clone().into_bytes()),
                    Val::utf8_str(v.clone().into_bytes()),
                )
            });
            globals.push(Val::obj(env.collect()));
        }
        let ctx = Ctx::<Data>::new(&self.filter.lut, Vars::new(globals));
        let mut out = Vec::new();
        for result in self.filter.id.run((ctx, input)) {
            match result {
                Ok(v) => out.push(v),
                // `halt` and `halt_error` stop the query, never the process.
                Err(exn) => {
                    return Err(match exn.get_err() {
                        Ok(e) => format!("jq: {e}"),
                        Err(exn) => match exn.get_halt() {
                            Ok(code) => format!("jq: halted with exit code {code}"),
                            Err(_) => "jq: the query stopped unexpectedly".to_owned(),
                        },
                    });
                }
            }
            if out.len() > MAX_RESULTS {
                return Err(format!(
                    "jq: the query emitted more than {MAX_RESULTS} values"
                ));
            }
        }
        let value = match out.len() {
            0 => return Ok(None),
            1 => out.pop().unwrap_or_default(),
            _ => out.into_iter().collect(),
        };
        match value {
            Val::TStr(s) | Val::BStr(s) if self.output_raw => Ok(Some(s.to_vec())),
            v => Ok(Some(v.to_string().into_bytes())),
        }
    }
}

#[async_trait]
impl Processor for Jq {
    async fn process_message(&self, msg: &mut Message) -> Result<bool, ProcessError> {
        match self.run(msg).map_err(ProcessError)? {
            Some(payload) => {
                msg.set_payload(payload);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::text;

    fn build(yaml: &str) -> Box<dyn Processor> {
        let cfg: JqConfig = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default());
        cfg.build(&cx).unwrap_or_else(|e| panic!("{e}"))
    }

    async fn run(p: &dyn Processor, payloads: &[&str]) -> Vec<Message> {
        let batch = payloads
            .iter()
            .map(|p| Message::new(p.to_string()))
            .collect();
        p.process(batch).await.into_iter().flatten().collect()
    }

    #[tokio::test]
    async fn the_reference_mapping_example() {
        let p = build(
            r#"query: '{Cities: .locations | map(select(.state == "WA").name) | sort | join(", ") }'"#,
        );
        let doc = r#"{"locations":[{"name":"Seattle","state":"WA"},{"name":"New York","state":"NY"},{"name":"Bellevue","state":"WA"},{"name":"Olympia","state":"WA"}]}"#;
        let out = run(&*p, &[doc]).await;
        assert_eq!(text(&out[0]), r#"{"Cities":"Bellevue, Olympia, Seattle"}"#);
        // Fields added to an object keep their place after the existing ones.
        let p = build("query: '.sum = (.in + .out)'");
        let out = run(&*p, &[r#"{"in":10,"out":5}"#]).await;
        assert_eq!(text(&out[0]), r#"{"in":10,"out":5,"sum":15}"#);
    }

    #[tokio::test]
    async fn no_value_filters_and_several_make_an_array() {
        let p = build("query: '.items[] | select(. > 1)'");
        let out = run(&*p, &[r#"{"items":[1,2,3]}"#, r#"{"items":[0]}"#]).await;
        assert_eq!(out.len(), 1, "the second message emits nothing");
        assert_eq!(text(&out[0]), "[2,3]");
    }

    #[tokio::test]
    async fn raw_input_and_raw_output() {
        let p = build("{query: 'ascii_upcase', raw: true, output_raw: true}");
        let out = run(&*p, &["not json"]).await;
        assert_eq!(text(&out[0]), "NOT JSON");
        let p = build("query: '.name'");
        let out = run(&*p, &[r#"{"name":"ann"}"#]).await;
        assert_eq!(text(&out[0]), r#""ann""#, "quoted without output_raw");
        let p = build("{query: '.name', output_raw: true}");
        let out = run(&*p, &[r#"{"name":"ann"}"#]).await;
        assert_eq!(text(&out[0]), "ann");
    }

    #[tokio::test]
    async fn metadata_is_a_variable() {
        let p = build("query: '{topic: $metadata.topic, id: .id}'");
        let msg = Message::new(r#"{"id":7}"#).with_meta("topic", "orders");
        let out: Vec<Message> = p.process(vec![msg]).await.into_iter().flatten().collect();
        assert_eq!(text(&out[0]), r#"{"topic":"orders","id":7}"#);
    }

    #[tokio::test]
    async fn failures_keep_the_message_and_flag_it() {
        let p = build("query: '.a + 1'");
        let out = run(&*p, &[r#"{"a":"x"}"#, "not json"]).await;
        assert_eq!(out.len(), 2);
        assert_eq!(text(&out[0]), r#"{"a":"x"}"#);
        assert!(
            out[0].error().unwrap().contains("jq:"),
            "{:?}",
            out[0].error()
        );
        assert!(out[1].error().unwrap().contains("not valid JSON"));
        // halt ends the query, not the process.
        let p = build("query: 'halt_error(3)'");
        let out = run(&*p, &["1"]).await;
        assert!(
            out[0].error().unwrap().contains("exit code 3"),
            "{:?}",
            out[0].error()
        );
        // An endless generator is cut off.
        let p = build("query: 'repeat(1)'");
        let out = run(&*p, &["1"]).await;
        assert!(out[0].error().unwrap().contains("more than"));
    }

    #[test]
    fn bad_queries_are_refused_while_reading() {
        let e = serde_yaml::from_str::<JqConfig>("query: '.a | '").unwrap_err();
        assert!(e.to_string().contains("invalid jq query"), "{e}");
        let e = serde_yaml::from_str::<JqConfig>("query: 'nosuchfilter(1)'").unwrap_err();
        assert!(e.to_string().contains("nosuchfilter"), "{e}");
        let e = serde_yaml::from_str::<JqConfig>("query: '.a'\nbogus: 1").unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
    }

    #[test]
    fn the_environment_is_left_out_of_posted_configs() {
        assert!(serde_yaml::from_str::<JqConfig>("query: 'env.HOME'").is_ok());
        let e = crate::config::mapped::sandboxed(|| {
            serde_yaml::from_str::<JqConfig>("query: 'env.HOME'").unwrap_err()
        });
        assert!(e.to_string().contains("not available"), "{e}");
        let e = crate::config::mapped::sandboxed(|| {
            serde_yaml::from_str::<JqConfig>("query: '$ENV.HOME'").unwrap_err()
        });
        assert!(e.to_string().contains("$ENV"), "{e}");
    }
}
