//! A list of processors run one after another, for the processors that contain others
//! (`switch`, `branch`, `try`, `catch`).

use crate::component::{BuildContext, BuildError, Processor};
use crate::message::Batch;

use super::ProcessorConfig;

pub struct Chain(Vec<Box<dyn Processor>>);

impl Chain {
    /// Builds the nested processors found at `path` (`...processors`).
    pub fn build(
        configs: &[ProcessorConfig],
        cx: &BuildContext,
        path: &str,
    ) -> Result<Chain, BuildError> {
        let mut out = Vec::with_capacity(configs.len());
        for (i, c) in configs.iter().enumerate() {
            let child = cx.child(format!("{path}[{i}].{}", c.type_name()));
            if let Some(label) = &c.label {
                child.claim_label(label)?;
            }
            out.push(c.kind.build(&child)?);
        }
        Ok(Chain(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Runs every processor over every batch the previous one produced.
    pub async fn run(&self, batch: Batch) -> Vec<Batch> {
        let mut batches = vec![batch];
        for p in &self.0 {
            let mut next = Vec::with_capacity(batches.len());
            for b in batches {
                next.extend(p.process(b).await);
            }
            batches = next;
            if batches.is_empty() {
                break;
            }
        }
        batches
    }

    /// Runs the chain and joins what comes out into one batch.
    pub async fn run_flat(&self, batch: Batch) -> Batch {
        self.run(batch).await.into_iter().flatten().collect()
    }
}

/// One batch, or none when everything was filtered (an empty batch is never passed on).
pub fn non_empty(batch: Batch) -> Vec<Batch> {
    super::nonempty(batch)
}

#[cfg(test)]
pub(crate) mod test_support {
    use crate::component::{BuildContext, Processor};
    use crate::message::{Batch, Message};

    use super::super::BuildProcessor;

    pub fn cx() -> BuildContext {
        BuildContext::new("test", Default::default(), Default::default())
    }

    /// Builds a processor config from YAML, panicking with the build error.
    pub fn build<C: BuildProcessor + serde::de::DeserializeOwned>(
        yaml: &str,
    ) -> Box<dyn Processor> {
        let cfg: C = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        cfg.build(&cx()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The build error of a config that parses but must not build.
    pub fn build_error<C: BuildProcessor + serde::de::DeserializeOwned>(yaml: &str) -> String {
        let cfg: C = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        match cfg.build(&cx()) {
            Ok(_) => panic!("`{yaml}` built"),
            Err(e) => e.to_string(),
        }
    }

    pub fn batch(payloads: &[&str]) -> Batch {
        payloads
            .iter()
            .map(|p| Message::new(p.to_string()))
            .collect()
    }

    pub fn texts(batch: &Batch) -> Vec<String> {
        batch
            .iter()
            .map(|m| String::from_utf8_lossy(m.payload()).into_owned())
            .collect()
    }

    /// The payload of one message, as text.
    pub fn text(m: &Message) -> String {
        String::from_utf8_lossy(m.payload()).into_owned()
    }

    /// Runs one payload through `p` and gives the first message out.
    pub async fn run_one(p: &dyn Processor, payload: &str) -> Message {
        let mut out: Vec<Message> = p
            .process(vec![Message::new(payload.to_owned())])
            .await
            .into_iter()
            .flatten()
            .collect();
        out.remove(0)
    }

    /// Each output batch as its payloads.
    pub fn all_texts(batches: &[Batch]) -> Vec<Vec<String>> {
        batches.iter().map(texts).collect()
    }
}
