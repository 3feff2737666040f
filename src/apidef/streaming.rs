//! `x-sluice-streaming`: the streams of an API, each the same `input`, `pipeline` and
//! `output` that `sluice run` takes, read by the same code and checked by building them
//! on a private route table (nothing connects, nothing runs).

use std::sync::Arc;

use serde_json::Value;

use crate::config::yaml::{Document, Node, NodeKind};
use crate::config::{de, ConfigError};
use crate::egress::{EgressPolicy, EgressTarget};
use crate::http::Routes;
use crate::stream::config::stream_from_node;
use crate::stream::{Stream, StreamConfig};

use super::Definition;

/// The extension key of an API's streams.
pub const STREAMING: &str = "x-sluice-streaming";

/// Components that reach the host (its files, its standard streams, its programs):
/// refused in streams of the gateway unless `streaming.allow_unsafe` names them, so that
/// whoever may post an API cannot read or write the gateway's files or run its commands.
pub const UNSAFE: &[&str] = &["command", "file", "stdin", "stdout", "subprocess"];

/// Components whose own languages can recurse without bound (jq's recursive functions
/// and `recurse`), which no budget of Sluice's can interrupt: refused the same way.
pub const UNBOUNDED: &[&str] = &["jq"];

/// Fields that make an otherwise harmless component read the host's files when the
/// stream is built: refused the same way unless `streaming.allow_unsafe` names the
/// component.
pub const UNSAFE_FIELDS: &[(&str, &str)] =
    &[("grok", "pattern_paths"), ("json_schema", "schema_path")];

/// Fields inside a component's settings block (`tls`, `auth`) that read the host's files
/// when the client connects: refused in posted streams (from the store) unless
/// `streaming.allow_unsafe` names the component. The operator's own files may use them.
pub const POSTED_UNSAFE_FIELDS: &[(&str, &str)] = &[
    ("tls", "root_cas_file"),
    ("tls", "client_cert_file"),
    ("tls", "client_key_file"),
    ("auth", "user_credentials_file"),
];

/// The components with a `tls` or `auth` block of [`POSTED_UNSAFE_FIELDS`].
pub const POSTED_UNSAFE_COMPONENTS: &[&str] = &[
    "amqp_0_9",
    "amqp_1",
    "kafka",
    "mqtt",
    "nats",
    "nats_jetstream",
    "redis",
    "redis_pubsub",
    "redis_streams",
];

/// Every name `streaming.allow_unsafe` accepts.
pub fn allowable() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = UNSAFE.to_vec();
    names.extend(UNBOUNDED);
    names.extend(UNSAFE_FIELDS.iter().map(|(component, _)| *component));
    names.extend(POSTED_UNSAFE_COMPONENTS);
    names.sort_unstable();
    names.dedup();
    names
}

/// The prefix of the placeholders that make a stream per client.
pub const CONTEXT: &str = "$sluice_context.";

/// Every prefix a placeholder may be written with: Tyk Streams' `$tyk_context.` is an
/// alias, with the same names, so that a stream written for Tyk works as written rather
/// than taking the placeholder as literal text (which would filter nothing).
pub const CONTEXTS: [&str; 2] = [CONTEXT, "$tyk_context."];

/// One stream of an API.
pub struct ApiStream {
    pub name: String,
    pub config: StreamConfig,
    /// The stream as written, to tell on reload whether it changed.
    pub raw: Value,
    /// The stream has `$sluice_context.` placeholders: each distinct set of values from
    /// requests runs an instance of its own, started by the request.
    pub per_client: bool,
    /// The paths (below the listen path) this stream serves.
    pub paths: Vec<String>,
    /// The named hosts its components connect to, with the document path of each, when
    /// it was compiled under an egress policy (a posted definition).
    pub egress_targets: Vec<EgressTarget>,
}

/// The name a bare stream (`x-sluice-streaming: {input, pipeline, output}`) runs under.
pub const BARE_STREAM: &str = "default";

/// Whether an `x-sluice-streaming` value is one bare stream rather than a `streams` map.
pub fn is_bare(ext: &Value) -> bool {
    ext.get("input").is_some() || ext.get("output").is_some()
}

/// The named streams of an `x-sluice-streaming` value as stored: each of `streams`, or
/// the bare stream under [`BARE_STREAM`]. Empty when neither shape is there.
pub fn streams_of(ext: &Value) -> Vec<(&str, &Value)> {
    if is_bare(ext) {
        return vec![(BARE_STREAM, ext)];
    }
    ext.get("streams")
        .and_then(Value::as_object)
        .map(|streams| streams.iter().map(|(k, v)| (k.as_str(), v)).collect())
        .unwrap_or_default()
}

/// Whether a stream's definition is run once per client: it has `$sluice_context.` (or
/// `$tyk_context.`) placeholders.
pub fn per_client(raw: &Value) -> bool {
    let text = raw.to_string();
    CONTEXTS.iter().any(|prefix| text.contains(prefix))
}

/// The streams of a document and the paths their HTTP components serve.
pub fn parse(
    doc: &Document,
    whole: &Value,
    api_id: &str,
    allow_unsafe: &[String],
    egress: Option<&Arc<EgressPolicy>>,
) -> Result<(Vec<ApiStream>, Vec<String>), Vec<ConfigError>> {
    let Some(node) = doc.root.get(STREAMING) else {
        return Ok((Vec::new(), Vec::new()));
    };
    let at = |path: &str, message: String| {
        ConfigError::new(message).at(doc.location(path, doc.locate(path)))
    };
    let mut errors = Vec::new();
    // Either `streams: {name: stream}` or one bare stream.
    let mut found: Vec<(String, &Node, String)> = Vec::new();
    if node.get("input").is_some() || node.get("output").is_some() {
        found.push((BARE_STREAM.into(), node, STREAMING.into()));
    } else {
        for (key, value) in node.entries() {
            match key.as_str() {
                Some("streams") => {
                    if !matches!(value.kind, NodeKind::Map(_)) {
                        errors.push(at(
                            &format!("{STREAMING}.streams"),
                            "`streams` maps stream names to streams".into(),
                        ));
                        continue;
                    }
                    for (name_node, stream) in value.entries() {
                        let name = name_node.as_str().unwrap_or_default().to_owned();
                        let path = format!("{STREAMING}.streams.{name}");
                        if name.is_empty()
                            || !name
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c))
                        {
                            errors.push(at(
                                &path,
                                format!("`{name}`: a stream name is letters, digits, `-` and `_`"),
                            ));
                            continue;
                        }
                        found.push((name, stream, path));
                    }
                }
                Some(other) => errors.push(crate::config::unknown_key(
                    doc,
                    key,
                    other,
                    STREAMING,
                    &["streams", "input", "pipeline", "output"],
                )),
                None => {}
            }
        }
    }
    let routes = Routes::new();
    let mut streams = Vec::new();
    for (name, stream_node, path) in found {
        unsafe_components(doc, stream_node, &path, allow_unsafe, &mut errors);
        if egress.is_some() {
            posted_file_fields(doc, stream_node, &path, allow_unsafe, &mut errors);
        }
        let config = match stream_from_node(doc, stream_node, &path) {
            Ok(c) => c,
            Err(e) => {
                errors.extend(e.0);
                continue;
            }
        };
        let stream_id = format!("{api_id}.{name}");
        let (problems, targets) = match egress {
            Some(policy) => Stream::validate_posted(&stream_id, &config, &routes, policy.clone()),
            None => (Stream::validate(&stream_id, &config, &routes), Vec::new()),
        };
        for e in problems {
            let place = de::join(&path, &e.path);
            errors.push(at(&place, e.message));
        }
        let egress_targets = targets
            .into_iter()
            .map(|t| EgressTarget {
                path: de::join(&path, &t.path),
                ..t
            })
            .collect();
        let pointer = if path == STREAMING {
            format!("/{STREAMING}")
        } else {
            format!("/{STREAMING}/streams/{name}")
        };
        let raw = whole.pointer(&pointer).cloned().unwrap_or(Value::Null);
        let per_client = per_client(&raw);
        let paths = routes.paths_owned_by(&format!("{stream_id}/"));
        streams.push(ApiStream {
            name,
            config,
            raw,
            per_client,
            paths,
            egress_targets,
        });
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok((streams, routes.paths()))
}

/// Reports every field of [`POSTED_UNSAFE_FIELDS`] in a posted stream: a `tls` or `auth`
/// block under a component's key, holding one of the file fields.
fn posted_file_fields(
    doc: &Document,
    node: &Node,
    path: &str,
    allow: &[String],
    errors: &mut Vec<ConfigError>,
) {
    for (key, value) in node.entries() {
        let Some(k) = key.as_str() else { continue };
        let here = de::join(path, k);
        if !allow.iter().any(|a| a == k) {
            for (block, field) in POSTED_UNSAFE_FIELDS {
                let Some(settings) = value.get(block) else {
                    continue;
                };
                if let Some((fkey, _)) = settings
                    .entries()
                    .iter()
                    .find(|(f, _)| f.as_str() == Some(*field))
                {
                    let at = de::join(&de::join(&here, block), field);
                    errors.push(
                        ConfigError::new(format!(
                            "`{k}.{block}.{field}` reads the server's files and is refused in posted streams (the operator can list `{k}` in the gateway's `streaming.allow_unsafe`)"
                        ))
                        .at(doc.location(&at, fkey.mark)),
                    );
                }
            }
        }
        posted_file_fields(doc, value, &here, allow, errors);
    }
    if let NodeKind::Seq(items) = &node.kind {
        for (i, item) in items.iter().enumerate() {
            posted_file_fields(doc, item, &format!("{path}[{i}]"), allow, errors);
        }
    }
}

/// Reports every unsafe component in a stream: a key of that name whose value is a
/// component's settings (a mapping, or empty).
fn unsafe_components(
    doc: &Document,
    node: &Node,
    path: &str,
    allow: &[String],
    errors: &mut Vec<ConfigError>,
) {
    for (key, value) in node.entries() {
        let Some(k) = key.as_str() else { continue };
        let here = de::join(path, k);
        let settings = matches!(value.kind, NodeKind::Map(_)) || value.is_null();
        let allowed = allow.iter().any(|a| a == k);
        let why = if UNSAFE.contains(&k) {
            Some("reaches the gateway's host")
        } else if UNBOUNDED.contains(&k) {
            Some("runs a language that can recurse without bound")
        } else {
            None
        };
        if let (true, false, Some(why)) = (settings, allowed, why) {
            errors.push(
                ConfigError::new(format!(
                    "`{k}` {why} and is refused in streams served by the gateway (list it in the gateway's `streaming.allow_unsafe` to allow it)"
                ))
                .at(doc.location(&here, key.mark)),
            );
        }
        for (component, field) in UNSAFE_FIELDS {
            if k != *component || allowed {
                continue;
            }
            if let Some((fkey, _)) = value
                .entries()
                .iter()
                .find(|(f, _)| f.as_str() == Some(*field))
            {
                errors.push(
                    ConfigError::new(format!(
                        "`{k}.{field}` reads the gateway's files and is refused in streams served by the gateway (list `{k}` in the gateway's `streaming.allow_unsafe` to allow it)"
                    ))
                    .at(doc.location(&de::join(&here, field), fkey.mark)),
                );
            }
        }
        unsafe_components(doc, value, &here, allow, errors);
    }
    if let NodeKind::Seq(items) = &node.kind {
        for (i, item) in items.iter().enumerate() {
            unsafe_components(doc, item, &format!("{path}[{i}]"), allow, errors);
        }
    }
}

/// What a dry run or `sluice lint` warns of in a compiled API: each stream fed by HTTP
/// clients that serves HTTP clients, which reaches the clients of other gateway nodes
/// only over the cluster's bus. With the document path of each.
pub fn cluster_warnings(api: &Definition) -> Vec<(String, String)> {
    api.streams
        .iter()
        .filter(|s| !s.per_client && crate::stream::node_local(&s.config))
        .map(|s| {
            let bare = api.document.get(STREAMING).is_some_and(is_bare);
            let path = if s.name == BARE_STREAM && bare {
                STREAMING.to_owned()
            } else {
                format!("{STREAMING}.streams.{}", s.name)
            };
            (
                path,
                format!(
                    "stream `{}` takes messages from HTTP clients and serves them to HTTP \
                     clients: on several gateways a message posted to one node reaches only \
                     that node's clients, unless the gateways carry it over a bus \
                     (`cluster.bus` in the gateway config)",
                    s.name
                ),
            )
        })
        .collect()
}
