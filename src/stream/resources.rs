//! Resources in config files: `cache_resources`, `rate_limit_resources`,
//! `input_resources`, `processor_resources` and `output_resources`, each a list of
//! components with a `label`. At the top of a file they are shared by all its streams;
//! inside one stream (under `streams.<name>` or an API's `x-sluice-streaming`) they
//! belong to that stream and hide the file's of the same label.

use std::sync::Arc;

use crate::cache::CacheConfig;
use crate::component::registry::{Component, Registry};
use crate::component::resources::Resources;
use crate::component::{BuildContext, BuildError, Kind};
use crate::config::yaml::{Document, Node};
use crate::config::{de, ConfigError};
use crate::input::InputConfig;
use crate::output::OutputConfig;
use crate::processor::ProcessorConfig;
use crate::rate_limit::RateLimitConfig;

/// The keys that hold resources, in a file or a stream.
pub const KEYS: &[&str] = &[
    "cache_resources",
    "rate_limit_resources",
    "input_resources",
    "processor_resources",
    "output_resources",
];

/// The resources one file or stream defines, each under its label.
#[derive(Debug, Clone, Default)]
pub struct ResourcesConfig {
    pub caches: Vec<CacheConfig>,
    pub rate_limits: Vec<RateLimitConfig>,
    pub inputs: Vec<InputConfig>,
    pub processors: Vec<ProcessorConfig>,
    pub outputs: Vec<OutputConfig>,
}

impl ResourcesConfig {
    pub fn is_empty(&self) -> bool {
        self.caches.is_empty()
            && self.rate_limits.is_empty()
            && self.inputs.is_empty()
            && self.processors.is_empty()
            && self.outputs.is_empty()
    }

    /// Reads one of [`KEYS`] from `value`, at `path` in the document.
    pub fn read(
        &mut self,
        doc: &Document,
        key: &str,
        value: &Node,
        path: &str,
    ) -> Result<(), ConfigError> {
        match key {
            "cache_resources" => self.caches = labelled(doc, value, path)?,
            "rate_limit_resources" => self.rate_limits = labelled(doc, value, path)?,
            "input_resources" => self.inputs = labelled(doc, value, path)?,
            "processor_resources" => self.processors = labelled(doc, value, path)?,
            "output_resources" => self.outputs = labelled(doc, value, path)?,
            other => {
                return Err(
                    ConfigError::new(format!("`{other}` is not a resource list"))
                        .at(doc.location(path, value.mark)),
                )
            }
        }
        Ok(())
    }

    /// Adds another file's resources; a label defined in both is an error (`file` names
    /// the other file).
    pub fn merge(&mut self, other: ResourcesConfig, file: &str) -> Result<(), ConfigError> {
        fn take<T: Registry>(
            into: &mut Vec<Component<T>>,
            from: Vec<Component<T>>,
            field: &str,
            file: &str,
        ) -> Result<(), ConfigError> {
            for c in from {
                let label = c.label.clone().unwrap_or_default();
                if into
                    .iter()
                    .any(|e| e.label.as_deref() == Some(label.as_str()))
                {
                    return Err(ConfigError::new(format!(
                        "{file}: `{field}` label `{label}` is defined in two files"
                    )));
                }
                into.push(c);
            }
            Ok(())
        }
        take(&mut self.caches, other.caches, "cache_resources", file)?;
        take(
            &mut self.rate_limits,
            other.rate_limits,
            "rate_limit_resources",
            file,
        )?;
        take(&mut self.inputs, other.inputs, "input_resources", file)?;
        take(
            &mut self.processors,
            other.processors,
            "processor_resources",
            file,
        )?;
        take(&mut self.outputs, other.outputs, "output_resources", file)
    }

    /// Builds the caches and rate limits, and keeps the component configs, over `parent`.
    /// Errors are placed at `prefix` + `cache_resources[i].<type>`.
    pub fn build(
        &self,
        parent: Option<Arc<Resources>>,
        cx: &BuildContext,
        prefix: &str,
    ) -> Result<Arc<Resources>, Vec<BuildError>> {
        let mut r = match parent {
            Some(p) if self.is_empty() => return Ok(p),
            Some(p) => Resources::over(p),
            None => Resources::default(),
        };
        let mut errors = Vec::new();
        let at = |field: &str, i: usize, type_name: &str| {
            de::join(prefix, &format!("{field}[{i}].{type_name}"))
        };
        for (i, c) in self.caches.iter().enumerate() {
            let cx = cx.for_component(
                at("cache_resources", i, c.type_name()),
                label(c),
                Kind::Cache,
                c.type_name(),
            );
            match c.kind.build(&cx) {
                Ok(cache) => r.add_cache(&label(c), cache),
                Err(e) => errors.push(e),
            }
        }
        for (i, c) in self.rate_limits.iter().enumerate() {
            let path = at("rate_limit_resources", i, c.type_name());
            let cx = cx.for_component(path, label(c), Kind::RateLimit, c.type_name());
            match c.kind.build(&cx) {
                Ok(limit) => r.add_rate_limit(&label(c), limit),
                Err(e) => errors.push(e),
            }
        }
        for c in &self.inputs {
            r.add_component(Kind::Input, &label(c), c.clone());
        }
        for c in &self.processors {
            r.add_component(Kind::Processor, &label(c), c.clone());
        }
        for c in &self.outputs {
            r.add_component(Kind::Output, &label(c), c.clone());
        }
        if errors.is_empty() {
            Ok(Arc::new(r))
        } else {
            Err(errors)
        }
    }
}

fn label<T: Registry>(c: &Component<T>) -> String {
    c.label.clone().unwrap_or_default()
}

/// A list of components, each with a label of its own.
fn labelled<T: Registry>(
    doc: &Document,
    value: &Node,
    path: &str,
) -> Result<Vec<Component<T>>, ConfigError> {
    let list: Vec<Component<T>> = de::from_node(doc, value, path)?;
    let mut seen = std::collections::HashSet::new();
    for (i, c) in list.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let place = |msg: String| ConfigError::new(msg).at(doc.location(&at, doc.locate(&at)));
        match &c.label {
            None => {
                return Err(place(format!(
                    "a resource needs a `label`: components name it with that (`{}`)",
                    c.type_name()
                )))
            }
            Some(l) if l.is_empty() => return Err(place("`label` must not be empty".into())),
            Some(l) if !seen.insert(l.clone()) => {
                return Err(place(format!("label `{l}` is used twice in `{path}`")))
            }
            Some(_) => {}
        }
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<ResourcesConfig, ConfigError> {
        let doc = crate::config::yaml::parse("r.yaml", yaml, &|_| None).unwrap();
        let mut r = ResourcesConfig::default();
        for (k, v) in doc.root.entries() {
            let key = k.as_str().unwrap_or_default();
            r.read(&doc, key, v, key)?;
        }
        Ok(r)
    }

    #[test]
    fn labels_are_required_and_unique() {
        let e = read("cache_resources:\n  - memory: {}\n").unwrap_err();
        assert!(e.message.contains("needs a `label`"), "{e}");
        assert_eq!(e.location.unwrap().path, "cache_resources[0]");
        let e = read("processor_resources:\n  - {label: a, noop: {}}\n  - {label: a, noop: {}}\n")
            .unwrap_err();
        assert!(e.message.contains("label `a` is used twice"), "{e}");
        let loc = e.location.unwrap();
        assert_eq!((loc.path.as_str(), loc.line), ("processor_resources[1]", 3));
    }

    #[test]
    fn build_errors_name_the_resource() {
        let r = read("rate_limit_resources:\n  - {label: l, local: {count: 0}}\n").unwrap();
        let cx = BuildContext::new("s", Default::default(), Default::default());
        let errors = r.build(None, &cx, "").err().unwrap();
        assert_eq!(errors[0].path, "rate_limit_resources[0].local");
        assert!(errors[0].message.contains("count"));
    }

    #[test]
    fn a_stream_layer_hides_the_files_label() {
        let cx = BuildContext::new("s", Default::default(), Default::default());
        let file =
            read("processor_resources:\n  - {label: p, noop: {}}\n  - {label: q, noop: {}}\n")
                .unwrap()
                .build(None, &cx, "")
                .unwrap();
        let stream = read("processor_resources:\n  - {label: p, log: {message: hi}}\n")
            .unwrap()
            .build(Some(file), &cx, "streams.s")
            .unwrap();
        let p = stream
            .component::<ProcessorConfig>(Kind::Processor, "p")
            .unwrap();
        assert_eq!(p.type_name(), "log");
        let q = stream
            .component::<ProcessorConfig>(Kind::Processor, "q")
            .unwrap();
        assert_eq!(q.type_name(), "noop");
    }
}
