//! Runs a set of streams together and stops them together.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::join_all;
use tracing::{error, info};

use super::StreamConfig;
use super::{RunningStream, Stream, StreamEnv};
use crate::component::BuildError;

pub struct Manager {
    env: StreamEnv,
    streams: BTreeMap<String, RunningStream>,
}

/// How a set of streams ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShutdownReport {
    pub abandoned: usize,
}

impl Manager {
    pub fn new(env: StreamEnv) -> Self {
        Manager {
            env,
            streams: BTreeMap::new(),
        }
    }

    pub fn env(&self) -> &StreamEnv {
        &self.env
    }

    /// Builds every stream, then starts them all; starts none if any fails to build.
    pub fn start_all<'a>(
        &mut self,
        configs: impl IntoIterator<Item = (&'a String, &'a StreamConfig)>,
    ) -> Result<(), Vec<BuildError>> {
        let mut built = Vec::new();
        let mut errors = Vec::new();
        let mut names = Vec::new();
        for (name, config) in configs {
            names.push(name);
            match Stream::build(name, config, &self.env) {
                Ok(s) => built.push((name.clone(), s)),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            for (name, _) in &built {
                self.env.routes.unmount_owned_by(&format!("{name}/"));
                self.env.readiness.remove_prefix(&format!("{name}/"));
            }
            if let Some(hubs) = &self.env.hubs {
                names.iter().for_each(|name| hubs.failed(name));
            }
            return Err(errors);
        }
        for (name, stream) in built {
            info!(stream = %name, "Stream started.");
            self.streams.insert(name, stream.start());
        }
        Ok(())
    }

    /// Adds one stream to the running set (for callers that start streams one at a time).
    pub fn start(&mut self, name: &str, config: &StreamConfig) -> Result<(), BuildError> {
        let stream = Stream::build(name, config, &self.env).inspect_err(|_| {
            if let Some(hubs) = &self.env.hubs {
                hubs.failed(name);
            }
        })?;
        self.streams.insert(name.to_owned(), stream.start());
        Ok(())
    }

    pub fn contains(&self, name: &str) -> bool {
        self.streams.contains_key(name)
    }

    pub fn names(&self) -> Vec<String> {
        self.streams.keys().cloned().collect()
    }

    /// Stops one stream with a drain deadline and unmounts its routes.
    pub async fn stop(&mut self, name: &str, timeout: Duration) -> Option<ShutdownReport> {
        let stream = self.streams.remove(name)?;
        let report = stream.stop(timeout).await;
        if let Some(hubs) = &self.env.hubs {
            hubs.stopped(name);
        }
        self.env.routes.unmount_owned_by(&format!("{name}/"));
        self.env.readiness.remove_prefix(&format!("{name}/"));
        Some(ShutdownReport {
            abandoned: report.abandoned,
        })
    }

    /// Runs until every stream ended by itself or `signal` fires; then stops them all,
    /// each draining for up to `timeout`.
    pub async fn run_until(
        mut self,
        signal: impl std::future::Future<Output = ()>,
        timeout: Duration,
    ) -> ShutdownReport {
        let all_finished = join_all(self.streams.values_mut().map(|s| s.finished()));
        tokio::select! {
            _ = all_finished => {
                info!("All streams finished.");
            }
            _ = signal => {
                info!(timeout = ?timeout, "Shutting down: draining in-flight messages.");
            }
        }
        self.env.shutdown.cancel();
        let names = self.names();
        let mut total = 0;
        let reports = join_all(
            std::mem::take(&mut self.streams)
                .into_values()
                .map(|s| s.stop(timeout)),
        )
        .await;
        for (name, report) in names.iter().zip(reports) {
            if report.abandoned > 0 {
                error!(stream = %name, abandoned = report.abandoned, "Shutdown deadline passed with messages undelivered.");
            }
            total += report.abandoned;
        }
        ShutdownReport { abandoned: total }
    }
}
