//! A JSON Schema of the whole config file, for editors (through a YAML language server)
//! and for checking documents before they are read. Built from the same types the reader
//! deserializes: each component's schema comes from its config type, placed under
//! `definitions` as `<family>.<type>` with its own definitions renamed beside it.

use schemars::schema::RootSchema;
use serde_json::{json, Map, Value};

use crate::cache::CacheKind;
use crate::component::registry::Registry;
use crate::component::{ComponentSpec, Kind};
use crate::input::InputKind;
use crate::logging::LoggerConfig;
use crate::output::OutputKind;
use crate::processor::ProcessorKind;
use crate::rate_limit::RateLimitKind;

use super::config::{HttpConfig, MetricsConfig, PipelineConfig};

/// A family: its kind, whether its components take `processors`, and each type's spec
/// and schema.
type Family = (Kind, bool, Vec<(ComponentSpec, RootSchema)>);

fn families() -> Vec<Family> {
    vec![
        (Kind::Input, InputKind::ATTACHES, InputKind::specs()),
        (
            Kind::Processor,
            ProcessorKind::ATTACHES,
            ProcessorKind::specs(),
        ),
        (Kind::Output, OutputKind::ATTACHES, OutputKind::specs()),
        (Kind::Cache, CacheKind::ATTACHES, CacheKind::specs()),
        (
            Kind::RateLimit,
            RateLimitKind::ATTACHES,
            RateLimitKind::specs(),
        ),
    ]
}

const FAMILY_NAMES: &[&str] = &["input", "processor", "output", "cache", "rate_limit"];

/// The schema of a config file, as JSON (draft 7).
pub fn config_schema() -> Value {
    let mut defs = Map::new();
    for (kind, attaches, specs) in families() {
        let mut variants = Vec::new();
        for (spec, schema) in specs {
            let name = format!("{kind}.{}", spec.name);
            place(&name, schema, &mut defs);
            let mut props = Map::new();
            props.insert("label".into(), json!({"type": "string", "description": "Names the component in metrics and logs."}));
            if attaches {
                props.insert(
                    "processors".into(),
                    json!({"type": "array", "items": {"$ref": "#/definitions/processor"}, "description": "Processors applied to what this component reads or is given."}),
                );
            }
            props.insert(
                spec.name.into(),
                json!({"$ref": format!("#/definitions/{name}")}),
            );
            variants.push(json!({
                "type": "object",
                "description": spec.summary,
                "properties": props,
                "required": [spec.name],
                "additionalProperties": false,
            }));
        }
        defs.insert(
            kind.to_string(),
            json!({"description": format!("A {kind}: a mapping with one type key."), "oneOf": variants}),
        );
    }
    for (name, schema) in [
        ("settings.http", schemars::schema_for!(HttpConfig)),
        ("settings.logger", schemars::schema_for!(LoggerConfig)),
        ("settings.metrics", schemars::schema_for!(MetricsConfig)),
        ("settings.pipeline", schemars::schema_for!(PipelineConfig)),
    ] {
        place(name, schema, &mut defs);
    }
    let resources = |family: &str| json!({"type": "array", "items": {"allOf": [{"$ref": format!("#/definitions/{family}")}, {"required": ["label"]}]}});
    let mut stream = Map::new();
    stream.insert("input".into(), json!({"$ref": "#/definitions/input"}));
    stream.insert(
        "pipeline".into(),
        json!({"$ref": "#/definitions/settings.pipeline"}),
    );
    stream.insert("output".into(), json!({"$ref": "#/definitions/output"}));
    stream.insert(
        "channel_capacity".into(),
        json!({"type": "integer", "minimum": 1}),
    );
    for (key, family) in RESOURCE_LISTS {
        stream.insert((*key).into(), resources(family));
    }
    defs.insert(
        "stream".into(),
        json!({"type": "object", "properties": stream.clone(), "required": ["input", "output"], "additionalProperties": false}),
    );
    let mut root = stream;
    root.insert(
        "http".into(),
        json!({"$ref": "#/definitions/settings.http"}),
    );
    root.insert(
        "logger".into(),
        json!({"$ref": "#/definitions/settings.logger"}),
    );
    root.insert(
        "metrics".into(),
        json!({"$ref": "#/definitions/settings.metrics"}),
    );
    root.insert("shutdown_timeout".into(), json!({"type": "string", "description": "How long a shutdown waits for in-flight messages, e.g. `20s`."}));
    root.insert(
        "streams".into(),
        json!({"type": "object", "additionalProperties": {"$ref": "#/definitions/stream"}}),
    );
    root.insert(
        "tests".into(),
        json!({"type": "array", "description": "Config unit tests, run by `sluice test`."}),
    );
    json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Sluice stream config",
        "type": "object",
        "properties": root,
        "additionalProperties": false,
        "definitions": defs,
    })
}

const RESOURCE_LISTS: &[(&str, &str)] = &[
    ("cache_resources", "cache"),
    ("rate_limit_resources", "rate_limit"),
    ("input_resources", "input"),
    ("processor_resources", "processor"),
    ("output_resources", "output"),
];

/// Puts one type's schema under `definitions.<name>`, its own definitions beside it as
/// `<name>.<Def>`, and points references to a component family at the family's schema.
fn place(name: &str, schema: RootSchema, defs: &mut Map<String, Value>) {
    let rename = |def: &str| {
        if FAMILY_NAMES.contains(&def) {
            def.to_owned()
        } else {
            format!("{name}.{def}")
        }
    };
    let mut main = serde_json::to_value(&schema.schema).unwrap_or(Value::Bool(true));
    retarget(&mut main, &rename);
    for (def, body) in schema.definitions {
        if FAMILY_NAMES.contains(&def.as_str()) {
            continue;
        }
        let mut body = serde_json::to_value(&body).unwrap_or(Value::Bool(true));
        retarget(&mut body, &rename);
        defs.insert(rename(&def), body);
    }
    defs.insert(name.to_owned(), main);
}

/// Rewrites every `$ref` to `#/definitions/X` through `rename`.
fn retarget(v: &mut Value, rename: &dyn Fn(&str) -> String) {
    match v {
        Value::Object(m) => {
            for (k, val) in m.iter_mut() {
                if k == "$ref" {
                    if let Some(def) = val.as_str().and_then(|r| r.strip_prefix("#/definitions/")) {
                        *val = Value::String(format!("#/definitions/{}", rename(def)));
                    }
                } else {
                    retarget(val, rename);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| retarget(i, rename)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validator() -> jsonschema::Validator {
        jsonschema::validator_for(&config_schema()).expect("the schema is a valid JSON Schema")
    }

    fn yaml(text: &str) -> Value {
        serde_yaml::from_str(text).unwrap()
    }

    #[test]
    fn every_reference_resolves_and_a_config_validates() {
        let v = validator();
        let ok = yaml(
            "input:\n  label: in\n  generate: {count: 1, mapping: 'root = 1'}\n  processors:\n    - mapping: 'root = this'\npipeline:\n  processors:\n    - switch:\n        - check: 'true'\n          processors: [{noop: {}}]\noutput:\n  broker:\n    pattern: fan_out\n    outputs: [{stdout: {}}, {drop: {}}]\ncache_resources:\n  - label: c\n    memory: {default_ttl: 1m}\n",
        );
        let errors: Vec<String> = v
            .iter_errors(&ok)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{errors:#?}");
    }

    #[test]
    fn mistakes_are_caught() {
        let v = validator();
        for bad in [
            "input:\n  genrate: {}\noutput:\n  stdout: {}\n",
            "input:\n  stdin: {}\noutput:\n  stdout: {}\nunknown_key: 1\n",
            "input:\n  stdin: {bogus_field: 1}\noutput:\n  stdout: {}\n",
            "input:\n  stdin: {}\noutput:\n  stdout: {}\ncache_resources:\n  - memory: {}\n",
            "input:\n  stdin: {}\npipeline:\n  processors:\n    - dedupe: {cache: 5}\noutput:\n  stdout: {}\n",
        ] {
            assert!(!v.is_valid(&yaml(bad)), "accepted:\n{bad}");
        }
    }
}
