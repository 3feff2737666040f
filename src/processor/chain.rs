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
