//! `json_schema`: checks each message against a JSON Schema. A message that does not
//! conform (or is not JSON) passes on unchanged, marked with what is wrong and where, so
//! that `catch`, `switch` on `errored()` or the output can deal with it.
//!
//! The schema is given inline (`schema`) or read from a file when the stream is built
//! (`schema_path`, with or without a `file://` prefix). Reading the file reaches the
//! host, so streams served by the gateway may only use it when the gateway allows it.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{
    BuildContext, BuildError, ComponentSpec, Example, Kind, ProcessError, Processor,
};
use crate::message::Message;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JsonSchemaConfig {
    /// The schema, as JSON text.
    #[serde(default)]
    pub schema: Option<String>,
    /// A file holding the schema (`file://` prefix optional).
    #[serde(default)]
    pub schema_path: Option<String>,
}

impl Spec for JsonSchemaConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "json_schema",
        kind: Kind::Processor,
        summary: "Marks each message that does not conform to a JSON Schema with the reasons.",
        examples: &[Example {
            title: "Drop what does not conform",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - json_schema:\n        schema: '{\"type\":\"object\",\"required\":[\"id\"],\"properties\":{\"id\":{\"type\":\"integer\"}}}'\n    - switch:\n        - check: errored()\n          processors:\n            - log: {level: warn, message: 'invalid: ${! error() }'}\n            - mapping: root = deleted()\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for JsonSchemaConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        let (text, field) = match (&self.schema, &self.schema_path) {
            (Some(s), None) => (s.clone(), "schema".to_owned()),
            (None, Some(path)) => {
                let file = path.strip_prefix("file://").unwrap_or(path);
                let text = std::fs::read_to_string(file)
                    .map_err(|e| cx.error(format!("schema_path: cannot read `{file}`: {e}")))?;
                (text, format!("schema_path `{file}`"))
            }
            (Some(_), Some(_)) => {
                return Err(cx.error("set either `schema` or `schema_path`, not both"))
            }
            (None, None) => return Err(cx.error("`schema` or `schema_path` is required")),
        };
        let schema: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| cx.error(format!("{field}: the schema is not valid JSON: {e}")))?;
        let validator = jsonschema::validator_for(&schema)
            .map_err(|e| cx.error(format!("{field}: invalid JSON Schema: {e}")))?;
        Ok(Box::new(JsonSchemaCheck(validator)))
    }
}

pub struct JsonSchemaCheck(jsonschema::Validator);

#[async_trait]
impl Processor for JsonSchemaCheck {
    async fn process_message(&self, msg: &mut Message) -> Result<bool, ProcessError> {
        let doc: serde_json::Value = serde_json::from_slice(msg.payload())
            .map_err(|e| ProcessError::new(format!("payload is not valid JSON: {e}")))?;
        let problems: Vec<String> = self
            .0
            .iter_errors(&doc)
            .map(|e| {
                let at = e.instance_path().as_str().to_owned();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("{at}: {e}")
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(true)
        } else {
            Err(ProcessError::new(format!(
                "json schema validation failed: {}",
                problems.join("; ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = r#"{
        "$id": "https://example.com/person.schema.json",
        "title": "Person",
        "type": "object",
        "properties": {
            "firstName": {"type": "string"},
            "lastName": {"type": "string"},
            "age": {"type": "integer", "minimum": 0}
        }
    }"#;

    fn cx() -> BuildContext {
        BuildContext::new("t", crate::http::Routes::new(), Default::default()).child("p")
    }

    async fn check(p: &dyn Processor, payload: &str) -> Message {
        let mut out: Vec<Message> = p
            .process(vec![Message::new(payload.to_owned())])
            .await
            .into_iter()
            .flatten()
            .collect();
        out.remove(0)
    }

    #[tokio::test]
    async fn conforming_messages_pass_and_others_are_flagged() {
        let cfg = JsonSchemaConfig {
            schema: Some(SCHEMA.into()),
            schema_path: None,
        };
        let p = cfg.build(&cx()).unwrap();
        let ok = check(&*p, r#"{"firstName":"John","lastName":"Doe","age":21}"#).await;
        assert!(ok.error().is_none(), "{:?}", ok.error());
        let bad = check(&*p, r#"{"firstName":"John","age":-21}"#).await;
        let e = bad.error().unwrap();
        assert!(e.contains("/age") && e.contains("minimum"), "{e}");
        assert_eq!(&bad.payload()[..], br#"{"firstName":"John","age":-21}"#);
        let not_json = check(&*p, "hello").await;
        assert!(not_json.error().unwrap().contains("not valid JSON"));
    }

    #[tokio::test]
    async fn the_schema_can_come_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("person.json");
        std::fs::write(&path, SCHEMA).unwrap();
        let cfg = JsonSchemaConfig {
            schema: None,
            schema_path: Some(format!("file://{}", path.display())),
        };
        let p = cfg.build(&cx()).unwrap();
        let bad = check(&*p, r#"{"age":"old"}"#).await;
        assert!(bad.error().unwrap().contains("/age"), "{:?}", bad.error());
    }

    #[test]
    fn bad_configs_are_refused_with_the_reason() {
        let both = JsonSchemaConfig {
            schema: Some("{}".into()),
            schema_path: Some("x.json".into()),
        };
        let e = both.build(&cx()).err().unwrap();
        assert_eq!(e.path, "p");
        assert!(e.message.contains("not both"), "{e}");
        let none = JsonSchemaConfig {
            schema: None,
            schema_path: None,
        };
        assert!(none
            .build(&cx())
            .err()
            .unwrap()
            .message
            .contains("required"));
        let broken = JsonSchemaConfig {
            schema: Some("{".into()),
            schema_path: None,
        };
        assert!(broken
            .build(&cx())
            .err()
            .unwrap()
            .message
            .contains("not valid JSON"));
        let invalid = JsonSchemaConfig {
            schema: Some(r#"{"type": 12}"#.into()),
            schema_path: None,
        };
        let e = invalid.build(&cx()).err().unwrap();
        assert!(e.message.contains("invalid JSON Schema"), "{e}");
        let missing = JsonSchemaConfig {
            schema: None,
            schema_path: Some("/nonexistent/schema.json".into()),
        };
        assert!(missing
            .build(&cx())
            .err()
            .unwrap()
            .message
            .contains("cannot read"));
    }
}
