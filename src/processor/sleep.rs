//! `sleep`: waits a fixed time for every batch (rate shaping, tests of backpressure).

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::duration::Duration;
use crate::message::Batch;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SleepConfig {
    /// How long to wait per batch.
    pub duration: Duration,
}

impl Spec for SleepConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "sleep",
        kind: Kind::Processor,
        summary: "Waits a fixed time for every batch.",
        examples: &[Example {
            title: "At most ten batches a second",
            yaml: "input:\n  stdin: {}\npipeline:\n  processors:\n    - sleep: {duration: 100ms}\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for SleepConfig {
    fn build(&self, _cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        Ok(Box::new(Sleep(self.duration.0)))
    }
}

pub struct Sleep(std::time::Duration);

#[async_trait]
impl Processor for Sleep {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        tokio::time::sleep(self.0).await;
        vec![batch]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    #[tokio::test(start_paused = true)]
    async fn waits_then_passes_on() {
        let p = Sleep(std::time::Duration::from_secs(3));
        let start = tokio::time::Instant::now();
        let out = p.process(vec![Message::new("x")]).await;
        assert!(start.elapsed() >= std::time::Duration::from_secs(3));
        assert_eq!(out[0].len(), 1);
    }

    #[test]
    fn duration_is_required() {
        assert!(serde_yaml::from_str::<SleepConfig>("{}").is_err());
    }
}
