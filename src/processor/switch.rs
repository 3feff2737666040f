//! `switch`: sends each message through the processors of the first case whose `check`
//! passes (a case without a check always passes). With `fallthrough`, the messages of a
//! case go on to the next case's processors too. Messages no case takes pass on
//! unchanged; a check that fails marks the message and passes it on.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::chain::Chain;
use super::{BuildProcessor, ProcessorConfig};
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::config::MappingText;
use crate::mapping::{Mapping, MappingError};
use crate::message::{Batch, Message};

/// The cases, tried in order: written as the list itself, or under `cases` (the shape
/// of the `switch` output, which Tyk's streams documents also use for the processor).
#[derive(Debug, Clone)]
pub struct SwitchConfig(pub Vec<SwitchCase>);

/// The two ways of writing [`SwitchConfig`], for its schema.
#[derive(JsonSchema)]
#[allow(dead_code)]
#[serde(untagged)]
enum SwitchShape {
    List(Vec<SwitchCase>),
    Cases { cases: Vec<SwitchCase> },
}

impl JsonSchema for SwitchConfig {
    fn schema_name() -> String {
        "SwitchConfig".into()
    }

    fn json_schema(g: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        SwitchShape::json_schema(g)
    }
}

impl<'de> Deserialize<'de> for SwitchConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
        use serde::de::{MapAccess, SeqAccess, Visitor};

        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Cases {
            cases: Vec<SwitchCase>,
        }

        struct Shape;
        impl<'de> Visitor<'de> for Shape {
            type Value = SwitchConfig;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of cases, or `cases:` holding that list")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<SwitchConfig, A::Error> {
                Vec::deserialize(SeqAccessDeserializer::new(seq)).map(SwitchConfig)
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SwitchConfig, A::Error> {
                Cases::deserialize(MapAccessDeserializer::new(map)).map(|c| SwitchConfig(c.cases))
            }
        }
        d.deserialize_any(Shape)
    }
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SwitchCase {
    /// A mapping that gives a bool; absent means the case always matches.
    #[serde(default)]
    pub check: Option<MappingText>,
    /// The processors for messages this case takes.
    #[serde(default)]
    #[schemars(with = "Vec<serde_json::Value>")]
    pub processors: Vec<ProcessorConfig>,
    /// Whether messages of this case also go through the next case's processors.
    #[serde(default)]
    pub fallthrough: bool,
}

impl Spec for SwitchConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "switch",
        kind: Kind::Processor,
        summary: "Routes each message to the processors of the first case whose check passes.",
        examples: &[Example {
            title: "Different handling per type",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - switch:\n        - check: 'this.type == \"user\"'\n          processors:\n            - mapping: 'root.kind = \"person\"'\n        - processors:\n            - mutation: 'root.kind = \"other\"'\noutput:\n  stdout: {}\n",
        }],
    };
}

struct Case {
    chain: Chain,
    fallthrough: bool,
}

impl BuildProcessor for SwitchConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        let mut cases = Vec::with_capacity(self.0.len());
        let mut checks = Vec::with_capacity(self.0.len());
        for (i, c) in self.0.iter().enumerate() {
            let path = format!("{}[{i}]", cx.id.path);
            let check = c.check.as_ref().map(|m| m.mapping().clone());
            let chain = Chain::build(&c.processors, cx, &format!("{path}.processors"))?;
            checks.push(check);
            cases.push(Case {
                chain,
                fallthrough: c.fallthrough,
            });
        }
        Ok(Box::new(Switch { checks, cases }))
    }
}

pub struct Switch {
    checks: Vec<Option<Mapping>>,
    cases: Vec<Case>,
}

#[async_trait]
impl Processor for Switch {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        let choice: Vec<Result<Option<usize>, String>> = (0..batch.len())
            .map(|i| switch_case(&self.checks, &batch, i).map_err(|e| e.to_string()))
            .collect();
        let mut per_case: Vec<Batch> = self.cases.iter().map(|_| Vec::new()).collect();
        let mut out: Batch = Vec::new();
        for (mut msg, pick) in batch.into_iter().zip(choice) {
            match pick {
                Ok(Some(i)) => per_case[i].push(msg),
                Ok(None) => out.push(msg),
                Err(e) => {
                    msg.set_error(format!("switch check: {e}"));
                    out.push(msg);
                }
            }
        }
        let mut carried: Batch = Vec::new();
        for (case, mut mine) in self.cases.iter().zip(per_case) {
            let mut input: Batch = std::mem::take(&mut carried);
            input.append(&mut mine);
            if input.is_empty() {
                continue;
            }
            let done: Vec<Message> = case.chain.run_flat(input).await;
            if case.fallthrough {
                carried = done;
            } else {
                out.extend(done);
            }
        }
        out.extend(carried);
        super::nonempty(out)
    }
}

/// The index of the first case whose check passes (a case without a check always
/// passes), or `None`. A failing check is an error for that message.
fn switch_case(
    cases: &[Option<Mapping>],
    batch: &Batch,
    index: usize,
) -> Result<Option<usize>, MappingError> {
    for (i, c) in cases.iter().enumerate() {
        match c {
            None => return Ok(Some(i)),
            Some(m) => {
                if m.check(batch, index)? {
                    return Ok(Some(i));
                }
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::BuildContext;

    fn m(src: &str) -> Mapping {
        Mapping::compile(src, &crate::mapping::Env::default()).unwrap()
    }

    fn build(yaml: &str) -> Box<dyn Processor> {
        let cfg: SwitchConfig = serde_yaml::from_str(yaml).unwrap();
        let cx = BuildContext::new("test", Default::default(), Default::default());
        cfg.build(&cx).unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn routes_by_first_passing_check() {
        let p = build(
            "- check: 'this.n > 10'\n  processors:\n    - mutation: 'root.big = true'\n- check: 'this.n > 5'\n  fallthrough: true\n  processors:\n    - mutation: 'root.mid = true'\n- processors:\n    - mutation: 'root.rest = true'\n",
        );
        let batch = vec![
            Message::new("{\"n\":20}"),
            Message::new("{\"n\":7}"),
            Message::new("{\"n\":1}"),
            Message::new("nope"),
        ];
        let out = p.process(batch).await;
        let texts: Vec<String> = out[0]
            .iter()
            .map(|m| String::from_utf8_lossy(m.payload()).into_owned())
            .collect();
        assert!(
            texts.contains(&r#"{"big":true,"n":20}"#.to_string()),
            "{texts:?}"
        );
        assert!(
            texts.contains(&r#"{"mid":true,"n":7,"rest":true}"#.to_string()),
            "{texts:?}"
        );
        assert!(
            texts.contains(&r#"{"n":1,"rest":true}"#.to_string()),
            "{texts:?}"
        );
        assert!(out[0].iter().any(|m| m.error().is_some()));
    }

    /// Reads `processor` (a `switch` processor written in YAML) with positions, as a
    /// config file's processors are read.
    fn switch_in_a_stream(processor: &str) -> Result<(), String> {
        let text = format!("processors:\n  - switch:\n{processor}");
        let doc =
            crate::config::yaml::parse("s.yaml", &text, &|_| None).map_err(|e| e.to_string())?;
        let node = doc.root.get("processors").ok_or("no processors")?;
        crate::config::de::from_node::<Vec<ProcessorConfig>>(&doc, node, "processors")
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn cases_may_be_written_as_a_list_or_under_cases() {
        let case = "- check: 'this == 1'\n  processors:\n    - mapping: 'root = 2'\n";
        let list: String = case.lines().map(|l| format!("        {l}\n")).collect();
        switch_in_a_stream(&list).unwrap();
        let under: String = case.lines().map(|l| format!("          {l}\n")).collect();
        switch_in_a_stream(&format!("        cases:\n{under}")).unwrap();
        let cfg: SwitchConfig = serde_yaml::from_str(&format!("cases:\n{case}")).unwrap();
        assert_eq!(cfg.0.len(), 1);
    }

    #[test]
    fn a_cases_map_with_another_key_is_refused_where_it_is() {
        let e = switch_in_a_stream("        cases: []\n        fallthrough: true\n").unwrap_err();
        assert!(e.contains("fallthrough") && e.contains("s.yaml:"), "{e}");
        let e = switch_in_a_stream("        7\n").unwrap_err();
        assert!(e.contains("a list of cases"), "{e}");
    }

    #[test]
    fn switch_picks_the_first_passing_case() {
        let cases = vec![Some(m("this.t == \"a\"")), Some(m("this.t == \"b\"")), None];
        let batch = vec![
            Message::new(&br#"{"t":"b"}"#[..]),
            Message::new(&br#"{"t":"z"}"#[..]),
        ];
        assert_eq!(switch_case(&cases, &batch, 0).unwrap(), Some(1));
        assert_eq!(switch_case(&cases, &batch, 1).unwrap(), Some(2));
        assert!(m("this.t").check(&batch, 0).is_err());
    }
}
