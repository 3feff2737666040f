//! `rate_limit`: holds each message until a rate limit resource lets it through, so that
//! every component naming the same resource shares one rate.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::BuildProcessor;
use crate::component::registry::Spec;
use crate::component::resources::RateLimit;
use crate::component::{BuildContext, BuildError, ComponentSpec, Example, Kind, Processor};
use crate::message::Batch;

/// How long to wait before asking a rate limit that failed to answer (Redis down) again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimitProcessorConfig {
    /// The label of a `rate_limit_resources` entry.
    pub resource: String,
}

impl Spec for RateLimitProcessorConfig {
    const SPEC: ComponentSpec = ComponentSpec {
        name: "rate_limit",
        kind: Kind::Processor,
        summary: "Holds each message until a rate limit resource lets it through.",
        examples: &[Example {
            title: "Ten messages a second",
            yaml: "rate_limit_resources:\n  - label: ten_per_second\n    local: {count: 10, interval: 1s}\ninput:\n  stdin: {}\npipeline:\n  processors:\n    - rate_limit:\n        resource: ten_per_second\noutput:\n  stdout: {}\n",
        }],
    };
}

impl BuildProcessor for RateLimitProcessorConfig {
    fn build(&self, cx: &BuildContext) -> Result<Box<dyn Processor>, BuildError> {
        let limit = cx
            .resources
            .rate_limit(&self.resource)
            .map_err(|e| cx.error(e))?;
        Ok(Box::new(RateLimitProcessor {
            limit,
            shutdown: cx.lifecycle.shutdown.clone(),
            component: cx.id.component.clone(),
        }))
    }
}

pub struct RateLimitProcessor {
    limit: Arc<dyn RateLimit>,
    shutdown: CancellationToken,
    component: String,
}

impl RateLimitProcessor {
    /// Waits for one access. Returns early when the stream stops, so that draining is not
    /// held up by the limit.
    async fn wait_turn(&self) {
        loop {
            let wait = match self.limit.access().await {
                Ok(None) => return,
                Ok(Some(wait)) => wait,
                Err(e) => {
                    warn!(component = %self.component, error = %e, "rate_limit: cannot check the limit");
                    RETRY_AFTER_FAILURE
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.shutdown.cancelled() => return,
            }
        }
    }
}

#[async_trait]
impl Processor for RateLimitProcessor {
    async fn process(&self, batch: Batch) -> Vec<Batch> {
        for _ in 0..batch.len() {
            self.wait_turn().await;
        }
        vec![batch]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::resources::Resources;
    use crate::message::Message;
    use crate::rate_limit::{local::LocalRateLimitConfig, BuildRateLimit};

    #[tokio::test]
    async fn messages_pass_at_the_resources_rate() {
        let cx = BuildContext::new("test", Default::default(), Default::default());
        let config: LocalRateLimitConfig =
            serde_yaml::from_str("{count: 2, interval: 200ms}").unwrap();
        let mut r = Resources::default();
        r.add_rate_limit("two", config.build(&cx).unwrap());
        let cx = cx.with_resources(Arc::new(r));
        let p: RateLimitProcessorConfig = serde_yaml::from_str("resource: two").unwrap();
        let p = p.build(&cx).unwrap();

        let start = std::time::Instant::now();
        let out = p
            .process((0..6).map(|i| Message::new(i.to_string())).collect())
            .await;
        assert_eq!(out[0].len(), 6);
        // Two at once, then one every 100ms: the sixth cannot pass before 400ms.
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(390), "{took:?}");

        let e = RateLimitProcessorConfig {
            resource: "nope".into(),
        }
        .build(&cx)
        .err()
        .unwrap();
        assert!(e.message.contains("no rate limit resource `nope`"), "{e}");
    }
}
