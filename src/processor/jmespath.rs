//! `jmespath`: runs a JMESPath query on each JSON message and replaces the message with
//! the result (`null` when nothing matches). A message that is not JSON, or that the
//! query fails on, is passed on unchanged and marked with the error.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, Example, Kind, ProcessError, Processor,
};
use crate::message::Message;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JmespathConfig {
    /// The JMESPath query applied to each message.
    pub query: JmespathQuery,
}

/// A JMESPath expression, compiled when the config is read.
#[derive(Debug, Clone)]
pub struct JmespathQuery(String);

impl<'de> Deserialize<'de> for JmespathQuery {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let source = String::deserialize(d)?;
        compile(&source).map_err(serde::de::Error::custom)?;
        Ok(JmespathQuery(source))
    }
}

impl JsonSchema for JmespathQuery {
    fn schema_name() -> String {
        "JmespathQuery".into()
    }
    fn json_schema(g: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        String::json_schema(g)
    }
}

fn compile(source: &str) -> Result<jmespath::Expression<'static>, String> {
    jmespath::compile(source).map_err(|e| format!("invalid JMESPath query: {e}"))
}

impl Spec for JmespathConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "jmespath",
        kind: Kind::Processor,
        summary: "Replaces each JSON message with the result of a JMESPath query.",
        examples: &[Example {
            title: "Collect the cities of one state",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - jmespath:\n        query: \"locations[?state == 'WA'].name | sort(@) | {Cities: join(', ', @)}\"\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for JmespathConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        let expr = compile(&self.query.0).map_err(|e| cx.error(format!("query: {e}")))?;
        Ok(Box::new(Jmespath(expr)))
    }
}

pub struct Jmespath(jmespath::Expression<'static>);

#[async_trait]
impl Processor for Jmespath {
    async fn process_message(&self, msg: &mut Message) -> Result<bool, ProcessError> {
        let doc: serde_json::Value = serde_json::from_slice(msg.payload())
            .map_err(|e| ProcessError::new(format!("payload is not valid JSON: {e}")))?;
        let data = jmespath::Variable::try_from(doc)
            .map_err(|e| ProcessError::new(format!("jmespath: {e}")))?;
        let result = self
            .0
            .search(data)
            .map_err(|e| ProcessError::new(format!("jmespath: {e}")))?;
        let out = serde_json::to_vec(&*result)
            .map_err(|e| ProcessError::new(format!("jmespath: {e}")))?;
        msg.set_payload(out);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::chain::test_support::text;

    async fn run(query: &str, payload: &str) -> Message {
        let cfg: JmespathConfig = serde_yaml::from_str(&format!("query: {query:?}")).unwrap();
        let cx = BuildContext::new("t", crate::http::Routes::new(), Default::default());
        let p = cfg.build(&cx).unwrap();
        let mut out: Vec<Message> = p
            .process(vec![Message::new(payload.to_owned())])
            .await
            .into_iter()
            .flatten()
            .collect();
        out.remove(0)
    }

    #[tokio::test]
    async fn the_reference_example() {
        let doc = r#"{"locations":[{"name":"Seattle","state":"WA"},{"name":"New York","state":"NY"},{"name":"Bellevue","state":"WA"},{"name":"Olympia","state":"WA"}]}"#;
        let m = run(
            "locations[?state == 'WA'].name | sort(@) | {Cities: join(', ', @)}",
            doc,
        )
        .await;
        assert_eq!(text(&m), r#"{"Cities":"Bellevue, Olympia, Seattle"}"#);
    }

    #[tokio::test]
    async fn projections_and_missing_fields() {
        let m = run("people[*].age", r#"{"people":[{"age":3},{"age":40},{}]}"#).await;
        assert_eq!(text(&m), "[3,40]");
        let m = run("nope.deeper", r#"{"a":1}"#).await;
        assert_eq!(text(&m), "null");
        assert!(m.error().is_none());
    }

    #[tokio::test]
    async fn failures_keep_the_message_and_flag_it() {
        let m = run("a", "not json").await;
        assert_eq!(text(&m), "not json");
        assert!(m.error().unwrap().contains("not valid JSON"));
        // A function given the wrong type fails at run time.
        let m = run("abs(a)", r#"{"a":"x"}"#).await;
        assert_eq!(text(&m), r#"{"a":"x"}"#);
        assert!(m.error().unwrap().contains("jmespath"), "{:?}", m.error());
    }

    #[test]
    fn a_bad_query_is_refused_while_reading() {
        let e = serde_yaml::from_str::<JmespathConfig>("query: 'a[?'").unwrap_err();
        assert!(e.to_string().contains("invalid JMESPath query"), "{e}");
    }
}
