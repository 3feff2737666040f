//! Stream configuration: the typed config tree of `sluice run`, read from YAML with
//! positions, with `${VAR}` substitution and errors that name file, document path, line
//! and column.
//!
//! A file holds one stream (`input`, `pipeline`, `output` at the top) or several under
//! `streams: {name: {input, pipeline, output}}`, the same shape as `x-sluice-streaming`,
//! plus the process settings `http`, `logger`, `metrics` and `shutdown_timeout`.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;

use std::sync::Arc;

use crate::component::resources::Resources;
use crate::component::BuildContext;
use crate::config::yaml::{self, Document, Node};
use crate::config::{de, process_env, unknown_key, ConfigError, ConfigErrors};
use crate::duration::Duration;
use crate::http::Routes;
use crate::input::InputConfig;
use crate::logging::LoggerConfig;
use crate::output::OutputConfig;
use crate::processor::ProcessorConfig;

pub use super::resources::ResourcesConfig;

/// One stream: input, processors, output.
#[derive(Debug, Clone)]
pub struct StreamConfig {
    pub input: InputConfig,
    pub pipeline: PipelineConfig,
    pub output: OutputConfig,
    /// Capacity, in batches, of each channel between two nodes.
    pub channel_capacity: usize,
    /// Resources of this stream alone, over those of its file.
    pub resources: ResourcesConfig,
}

pub const DEFAULT_CHANNEL_CAPACITY: usize = 64;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// Workers running the processors in parallel, the order of messages kept; `-1` for
    /// one per CPU.
    #[serde(default = "one")]
    pub threads: i64,
    /// Processors applied in order to every batch.
    #[serde(default)]
    pub processors: Vec<ProcessorConfig>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            threads: 1,
            processors: Vec::new(),
        }
    }
}

impl PipelineConfig {
    /// How many workers `threads` asks for.
    pub fn workers(&self) -> usize {
        match self.threads {
            -1 => std::thread::available_parallelism().map_or(1, usize::from),
            n => usize::try_from(n).unwrap_or(1).max(1),
        }
    }
}

fn one() -> i64 {
    1
}

/// The standalone server of `sluice run` (HTTP components, `/metrics`, `/ready`).
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Listen or not. Unset, the server listens when a component serves HTTP or when the
    /// config has an `http` section.
    pub enabled: Option<bool>,
    /// Address to listen on, `host:port`. Loopback unless told otherwise.
    pub address: String,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// The longest silence allowed while a client sends a request body.
    pub body_read_timeout: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            enabled: None,
            address: "127.0.0.1:4195".into(),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
        }
    }
}

/// A listen address binding could not read.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a listen address (write `host:port`, e.g. `127.0.0.1:4195`)")]
pub struct BadAddress(pub String);

/// Checks a listen address the way binding will read it: `host:port`, or `[v6]:port`.
pub fn check_address(address: &str) -> Result<(), BadAddress> {
    if address.parse::<std::net::SocketAddr>().is_ok() {
        return Ok(());
    }
    let bad = || BadAddress(address.to_owned());
    let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
    let host_ok = !host.is_empty()
        && host
            .split('.')
            .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    if !host_ok || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok(())
}

#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum MetricsConfig {
    /// Serve Prometheus text format on `/metrics`.
    Prometheus {},
    /// Record nothing.
    None {},
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig::Prometheus {}
    }
}

/// Everything one or more config files ask for.
#[derive(Debug, Clone)]
pub struct RootConfig {
    pub http: HttpConfig,
    pub logger: LoggerConfig,
    pub metrics: MetricsConfig,
    pub shutdown_timeout: Duration,
    pub streams: BTreeMap<String, StreamConfig>,
    /// Resources shared by every stream.
    pub resources: ResourcesConfig,
}

impl Default for RootConfig {
    fn default() -> Self {
        RootConfig {
            http: HttpConfig::default(),
            logger: LoggerConfig::default(),
            metrics: MetricsConfig::default(),
            shutdown_timeout: Duration::from_secs(20),
            streams: BTreeMap::new(),
            resources: ResourcesConfig::default(),
        }
    }
}

const ROOT_KEYS: &[&str] = &[
    "http",
    "logger",
    "metrics",
    "shutdown_timeout",
    "input",
    "pipeline",
    "output",
    "channel_capacity",
    "streams",
    "tests",
    "cache_resources",
    "rate_limit_resources",
    "input_resources",
    "processor_resources",
    "output_resources",
];

const STREAM_KEYS: &[&str] = &[
    "input",
    "pipeline",
    "output",
    "channel_capacity",
    "cache_resources",
    "rate_limit_resources",
    "input_resources",
    "processor_resources",
    "output_resources",
];

/// Loads config files; settings come from the first file that has them, streams from all.
/// A stream config file is one whose streams run, so one without any is a mistake.
pub fn load_files(paths: &[impl AsRef<Path>]) -> Result<RootConfig, ConfigErrors> {
    let (files, mut errors) = read_files(paths);
    let root = merge_files(paths, files, &mut errors);
    if errors.is_empty() {
        Ok(root)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Every file that parses, and the errors of those that do not.
fn read_files(paths: &[impl AsRef<Path>]) -> (Vec<FileRoot>, Vec<ConfigError>) {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for path in paths {
        match read_file(path.as_ref()) {
            Ok(file) => files.push(file),
            Err(e) => errors.extend(e.0),
        }
    }
    (files, errors)
}

/// One config from several files, as `sluice run` loads them.
fn merge_files(
    paths: &[impl AsRef<Path>],
    files: Vec<FileRoot>,
    errors: &mut Vec<ConfigError>,
) -> RootConfig {
    let mut root = RootConfig::default();
    let mut seen_settings = HashSet::new();
    for file in files {
        merge(&mut root, file, &mut seen_settings, errors);
    }
    if errors.is_empty() && root.streams.is_empty() {
        let names: Vec<_> = paths
            .iter()
            .map(|p| p.as_ref().display().to_string())
            .collect();
        errors.push(no_streams(&names.join(", ")));
    }
    root
}

fn no_streams(files: &str) -> ConfigError {
    ConfigError::new(format!(
        "{files}: no streams to run: give `input` and `output` at the top, or `streams`"
    ))
}

/// Reads and parses one file; a stream written at the top is named after the file.
fn read_file(path: &Path) -> Result<FileRoot, ConfigErrors> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new(format!("{name}: cannot read: {e}")))?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "stream".into());
    parse_root(&name, &stem, &text, &process_env)
}

/// Checks config files without running anything: every parse error of every file, then
/// every problem building would find in every stream, each with file, document path,
/// line and column. Files are checked one by one, or `together` as `sluice run` would
/// load them (stream names and HTTP paths then must not clash across files).
pub fn lint_files(paths: &[impl AsRef<Path>], together: bool) -> Vec<ConfigError> {
    let (files, mut errors) = read_files(paths);
    // Each file's own resources, built with their errors placed in that file.
    let shared: Vec<_> = files
        .iter()
        .map(|f| file_resources(&f.root.resources, &f.doc, &mut errors))
        .collect();
    if together {
        let routes = Routes::new();
        let placed: Vec<_> = files
            .iter()
            .map(|f| {
                (
                    f.root.streams.keys().cloned().collect::<Vec<_>>(),
                    f.doc.clone(),
                    f.prefixes(),
                )
            })
            .collect();
        let root = merge_files(paths, files, &mut errors);
        let cx = BuildContext::new("", routes.clone(), Default::default());
        let resources = root.resources.build(None, &cx, "").unwrap_or_default();
        for (names, doc, prefixes) in placed {
            for (name, prefix) in names.iter().zip(prefixes) {
                if let Some(stream) = root.streams.get(name) {
                    let r = resources.clone();
                    validate_stream(name, stream, &doc, &prefix, &routes, r, &mut errors);
                }
            }
        }
    } else {
        for (file, resources) in files.into_iter().zip(shared) {
            if file.root.streams.is_empty() {
                errors.push(no_streams(&file.doc.file));
            }
            let routes = Routes::new();
            for (name, stream) in &file.root.streams {
                let prefix = file.prefix(name);
                let r = resources.clone();
                validate_stream(name, stream, &file.doc, &prefix, &routes, r, &mut errors);
            }
        }
    }
    errors
}

/// Builds a file's top-level resources; what fails is reported, placed in `doc`.
fn file_resources(
    config: &ResourcesConfig,
    doc: &Document,
    errors: &mut Vec<ConfigError>,
) -> Arc<Resources> {
    let cx = BuildContext::new("", Routes::new(), Default::default());
    config.build(None, &cx, "").unwrap_or_else(|failed| {
        for e in failed {
            errors.push(ConfigError::new(e.message).at(doc.location(&e.path, doc.locate(&e.path))));
        }
        Arc::default()
    })
}

/// [`Stream::validate`], with each problem placed in its document.
fn validate_stream(
    name: &str,
    stream: &StreamConfig,
    doc: &Document,
    prefix: &str,
    routes: &Arc<Routes>,
    resources: Arc<Resources>,
    errors: &mut Vec<ConfigError>,
) {
    for e in super::Stream::validate_over(name, stream, routes, resources) {
        let path = de::join(prefix, &e.path);
        let mark = doc.locate(&path);
        errors.push(ConfigError::new(e.message).at(doc.location(&path, mark)));
    }
}

/// What one file set explicitly, so that later files only add streams.
struct FileRoot {
    root: RootConfig,
    set: Vec<&'static str>,
    doc: Document,
    default_stream: String,
}

impl FileRoot {
    /// Each stream's path prefix, in the order of `root.streams`.
    fn prefixes(&self) -> Vec<String> {
        self.root.streams.keys().map(|s| self.prefix(s)).collect()
    }

    /// Where a stream's document path starts in this file.
    fn prefix(&self, stream: &str) -> String {
        if stream == self.default_stream
            && self
                .doc
                .root
                .get("streams")
                .is_none_or(|s| s.get(stream).is_none())
        {
            String::new()
        } else {
            format!("streams.{stream}")
        }
    }
}

fn merge(
    into: &mut RootConfig,
    file: FileRoot,
    seen: &mut HashSet<&'static str>,
    errors: &mut Vec<ConfigError>,
) {
    let name = &*file.doc.file;
    for key in file.set {
        if !seen.insert(key) {
            continue;
        }
        match key {
            "http" => into.http = file.root.http.clone(),
            "logger" => into.logger = file.root.logger.clone(),
            "metrics" => into.metrics = file.root.metrics.clone(),
            "shutdown_timeout" => into.shutdown_timeout = file.root.shutdown_timeout,
            _ => {}
        }
    }
    if let Err(e) = into.resources.merge(file.root.resources, name) {
        errors.push(e);
    }
    for (stream, cfg) in file.root.streams {
        match into.streams.entry(stream) {
            std::collections::btree_map::Entry::Occupied(e) => {
                errors.push(ConfigError::new(format!(
                    "{name}: stream `{}` is defined twice (stream names must be unique across files)",
                    e.key()
                )));
            }
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(cfg);
            }
        }
    }
}

/// Parses one file's text. `default_stream` names a stream written at the top level.
fn parse_root(
    file: &str,
    default_stream: &str,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<FileRoot, ConfigErrors> {
    let doc = yaml::parse(file, text, env)?;
    root_from_document(doc, default_stream)
}

/// Reads a config from a parsed document (which a caller may have edited, as `sluice test`
/// does with its mocks). `default_stream` names a stream written at the top level.
pub fn parse_document(doc: Document, default_stream: &str) -> Result<RootConfig, ConfigErrors> {
    root_from_document(doc, default_stream).map(|f| f.root)
}

fn root_from_document(doc: Document, default_stream: &str) -> Result<FileRoot, ConfigErrors> {
    let file = doc.file.clone();
    let file: &str = &file;
    let mut root = RootConfig::default();
    let mut set = Vec::new();
    let mut errors = Vec::new();
    if !matches!(doc.root.kind, yaml::NodeKind::Map(_)) {
        return Err(ConfigError::new(format!(
            "a config file must be a mapping, found {}",
            doc.root.describe()
        ))
        .at(doc.location("", doc.root.mark))
        .into());
    }
    let mut has_top_stream = false;
    for (key_node, value) in doc.root.entries() {
        let key = key_node.as_str().unwrap_or_default();
        let mut take = |r: Result<(), ConfigError>| {
            if let Err(e) = r {
                errors.push(e)
            }
        };
        match key {
            "http" => take(
                de::from_node::<HttpConfig>(&doc, value, key).and_then(|mut v| {
                    check_address(&v.address).map_err(|e| {
                        let node = value.get("address").unwrap_or(value);
                        ConfigError::new(e.to_string()).at(doc.location("http.address", node.mark))
                    })?;
                    // Asking for a server is asking for it to listen.
                    v.enabled.get_or_insert(true);
                    root.http = v;
                    Ok(())
                }),
            ),
            "logger" => take(de::from_node(&doc, value, key).map(|v| root.logger = v)),
            "metrics" => take(de::from_node(&doc, value, key).map(|v| root.metrics = v)),
            "shutdown_timeout" => {
                take(de::from_node(&doc, value, key).map(|v| root.shutdown_timeout = v))
            }
            "streams" => {
                for (name_node, stream) in value.entries() {
                    let name = name_node.as_str().unwrap_or_default();
                    match stream_from_node(&doc, stream, &format!("streams.{name}")) {
                        Ok(s) => {
                            root.streams.insert(name.to_owned(), s);
                        }
                        Err(e) => errors.extend(e.0),
                    }
                }
                if !matches!(value.kind, yaml::NodeKind::Map(_)) && !value.is_null() {
                    errors.push(
                        ConfigError::new(format!(
                            "`streams` must map stream names to streams, found {}",
                            value.describe()
                        ))
                        .at(doc.location(key, value.mark)),
                    );
                }
            }
            // Config unit tests are run by `sluice test`, not by the runtime.
            "tests" => {}
            k if super::resources::KEYS.contains(&k) => {
                let read = root.resources.read(&doc, k, value, k);
                super::bounds::check_field(&doc, "", k, value, k, &mut errors);
                errors.extend(read.err());
            }
            k if STREAM_KEYS.contains(&k) => has_top_stream = true,
            other => errors.push(unknown_key(&doc, key_node, other, "", ROOT_KEYS)),
        }
        if let Some(k) = ["http", "logger", "metrics", "shutdown_timeout"]
            .into_iter()
            .find(|k| *k == key)
        {
            set.push(k);
        }
    }
    if has_top_stream {
        if root.streams.contains_key(default_stream) {
            errors.push(ConfigError::new(format!(
                "{file}: a top-level stream and `streams.{default_stream}` share a name"
            )));
        }
        match stream_fields(&doc, &doc.root, "", true) {
            Ok(s) => {
                root.streams.insert(default_stream.to_owned(), s);
            }
            Err(e) => errors.extend(e.0),
        }
    }
    if errors.is_empty() {
        Ok(FileRoot {
            root,
            set,
            doc,
            default_stream: default_stream.to_owned(),
        })
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Reads one stream (`input`, `pipeline`, `output`) from a node, reporting every error.
/// Streams nested in other documents are read with this, `path` placing them.
pub fn stream_from_node(
    doc: &Document,
    node: &Node,
    path: &str,
) -> Result<StreamConfig, ConfigErrors> {
    stream_fields(doc, node, path, false)
}

fn stream_fields(
    doc: &Document,
    node: &Node,
    path: &str,
    at_root: bool,
) -> Result<StreamConfig, ConfigErrors> {
    let mut errors = Vec::new();
    if !matches!(node.kind, yaml::NodeKind::Map(_)) {
        return Err(ConfigError::new(format!(
            "a stream must be a mapping with `input` and `output`, found {}",
            node.describe()
        ))
        .at(doc.location(path, node.mark))
        .into());
    }
    let mut input = None;
    let mut output = None;
    let mut pipeline = PipelineConfig::default();
    let mut channel_capacity = DEFAULT_CHANNEL_CAPACITY;
    let mut resources = ResourcesConfig::default();
    for (key_node, value) in node.entries() {
        let key = key_node.as_str().unwrap_or_default();
        let p = de::join(path, key);
        // Top-level resources of a file are checked with the file's other keys.
        if STREAM_KEYS.contains(&key) && !(at_root && super::resources::KEYS.contains(&key)) {
            super::bounds::check_field(doc, "", key, value, &p, &mut errors);
        }
        match key {
            "input" => match de::from_node::<InputConfig>(doc, value, &p) {
                Ok(v) => input = Some(v),
                Err(e) => errors.push(e),
            },
            "output" => match de::from_node::<OutputConfig>(doc, value, &p) {
                Ok(v) => output = Some(v),
                Err(e) => errors.push(e),
            },
            "pipeline" => match de::from_node::<PipelineConfig>(doc, value, &p) {
                Ok(v) if v.threads == 0 || v.threads < -1 => {
                    let at = value.get("threads").map_or(value.mark, |n| n.mark);
                    errors.push(
                        ConfigError::new("`threads` must be at least 1, or -1 for one per CPU")
                            .at(doc.location(&de::join(&p, "threads"), at)),
                    )
                }
                Ok(v) => pipeline = v,
                Err(e) => errors.push(e),
            },
            "channel_capacity" => match de::from_node::<usize>(doc, value, &p) {
                Ok(0) => errors.push(
                    ConfigError::new("`channel_capacity` must be at least 1")
                        .at(doc.location(&p, value.mark)),
                ),
                Ok(v) => channel_capacity = v,
                Err(e) => errors.push(e),
            },
            _ if at_root => {}
            k if super::resources::KEYS.contains(&k) => {
                if let Err(e) = resources.read(doc, k, value, &p) {
                    errors.push(e);
                }
            }
            other => errors.push(unknown_key(doc, key_node, other, path, STREAM_KEYS)),
        }
    }
    for (what, missing) in [("input", input.is_none()), ("output", output.is_none())] {
        let failed_already = node.get(what).is_some();
        if missing && !failed_already {
            // A mapping's own mark sits after its first key; point at that key instead.
            let mark = node.entries().first().map_or(node.mark, |(k, _)| k.mark);
            errors.push(
                ConfigError::new(format!("the stream has no `{what}`"))
                    .at(doc.location(path, mark)),
            );
        }
    }
    match (input, output) {
        (Some(input), Some(output)) if errors.is_empty() => {
            let stream = StreamConfig {
                input,
                pipeline,
                output,
                channel_capacity,
                resources,
            };
            Ok(stream)
        }
        _ => Err(ConfigErrors(errors)),
    }
}

/// Parses a config text as `sluice run` would.
pub fn parse_str(file: &str, text: &str) -> Result<RootConfig, ConfigErrors> {
    let stem = Path::new(file)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "stream".into());
    parse_root(file, &stem, text, &process_env).map(|f| f.root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logging::LogFormat;

    fn parse(text: &str) -> Result<RootConfig, ConfigErrors> {
        parse_root("t.yaml", "t", text, &|_| None).map(|f| f.root)
    }

    #[test]
    fn single_stream_at_top_level() {
        let root =
            parse("input:\n  generate:\n    payload: hi\n    count: 2\noutput:\n  stdout: {}\n")
                .unwrap();
        assert_eq!(root.streams.len(), 1);
        let s = &root.streams["t"];
        assert_eq!(s.input.type_name(), "generate");
        assert_eq!(s.output.type_name(), "stdout");
        assert_eq!(root.http.address, "127.0.0.1:4195");
        assert_eq!(root.http.enabled, None);
    }

    #[test]
    fn several_streams_and_settings() {
        let root = parse(
            "http: {address: 127.0.0.1:9000}\nshutdown_timeout: 5s\nlogger: {level: debug, format: json}\nstreams:\n  a:\n    input: {stdin: {}}\n    output: {drop: {}}\n  b:\n    input: {stdin: {}}\n    output: {label: out, stdout: {}}\n",
        )
        .unwrap();
        assert_eq!(root.streams.len(), 2);
        assert_eq!(root.streams["b"].output.label.as_deref(), Some("out"));
        assert_eq!(root.http.address, "127.0.0.1:9000");
        assert_eq!(root.shutdown_timeout, Duration::from_secs(5));
        assert_eq!(root.logger.format, LogFormat::Json);
    }

    #[test]
    fn misspelt_key_has_line_column_and_suggestion() {
        let errs =
            parse("input:\n  generate:\n    payload: x\n    intervl: 1s\noutput:\n  drop: {}\n")
                .unwrap_err();
        let e = &errs.0[0];
        let loc = e.location.clone().unwrap();
        assert_eq!((loc.line, loc.col), (4, 5));
        assert_eq!(loc.path, "input.generate.intervl");
        assert_eq!(e.suggestion.as_deref(), Some("interval"));
    }

    #[test]
    fn unknown_component_type_is_suggested() {
        let errs = parse("input:\n  genrate: {}\noutput:\n  drop: {}\n").unwrap_err();
        let e = &errs.0[0];
        assert!(e.message.contains("unknown input type `genrate`"), "{e}");
        assert_eq!(e.suggestion.as_deref(), Some("generate"));
        assert_eq!(e.location.clone().unwrap().line, 2);
    }

    #[test]
    fn every_error_is_reported() {
        let errs = parse("inptu: {}\noutput:\n  stdot: {}\nshutdown_timeout: soon\n").unwrap_err();
        // The misspelt key, the bad duration, the unknown type, and the missing input.
        assert_eq!(errs.0.len(), 4, "{errs}");
        assert_eq!(errs.0[0].suggestion.as_deref(), Some("input"));
        let timeout = errs.0.iter().find(|e| e.message.contains("soon")).unwrap();
        assert_eq!(timeout.location.clone().unwrap().line, 4);
    }

    #[test]
    fn missing_input_is_an_error() {
        let errs = parse("output:\n  drop: {}\n").unwrap_err();
        assert!(errs.to_string().contains("no `input`"), "{errs}");
    }

    #[test]
    fn two_types_in_one_component_is_an_error() {
        let errs = parse("input:\n  stdin: {}\n  generate: {payload: x}\noutput:\n  drop: {}\n")
            .unwrap_err();
        assert!(errs.to_string().contains("exactly one type"), "{errs}");
    }
}
