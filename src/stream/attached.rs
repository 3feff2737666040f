//! The `processors` of an input or an output: applied to each batch an input reads before
//! it enters the stream, or to each batch an output is given before it writes. They wrap
//! the component, so that with several inputs (`broker`) or outputs each applies its own.

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::component::{ConnectorError, Input, Output, ReadBatch, Router};
use crate::message::{Batch, Outcome, Transaction};
use crate::processor::chain::Chain;

/// An input whose reads pass through processors.
pub struct ProcessedInput {
    pub inner: Box<dyn Input>,
    pub chain: Chain,
}

#[async_trait]
impl Input for ProcessedInput {
    async fn connect(&mut self) -> Result<(), ConnectorError> {
        self.inner.connect().await
    }

    async fn read(&mut self) -> Result<ReadBatch, ConnectorError> {
        loop {
            let mut read = self.inner.read().await?;
            let batch = std::mem::take(&mut read.batch);
            read.batch = self.chain.run_flat(batch).await;
            if !read.batch.is_empty() {
                return Ok(read);
            }
            // Everything was filtered on purpose: that is delivered.
            (read.ack)(Outcome::Filtered);
        }
    }

    async fn close(&mut self) {
        self.inner.close().await
    }

    fn handles_nacks(&self) -> bool {
        self.inner.handles_nacks()
    }
}

/// An output that processes each batch before writing it.
pub struct ProcessedOutput {
    pub inner: Box<dyn Output>,
    pub chain: Chain,
}

#[async_trait]
impl Output for ProcessedOutput {
    async fn connect(&self) -> Result<(), ConnectorError> {
        self.inner.connect().await
    }

    async fn write(&self, batch: &Batch) -> Result<(), ConnectorError> {
        let processed = self.chain.run_flat(batch.clone()).await;
        if processed.is_empty() {
            return Ok(());
        }
        self.inner.write(&processed).await
    }

    async fn close(&self) {
        self.inner.close().await
    }
}

/// A router (`broker`, `switch`, ...) that processes each batch before routing it.
pub struct ProcessedRouter {
    pub inner: Box<dyn Router>,
    pub chain: Chain,
}

#[async_trait]
impl Router for ProcessedRouter {
    async fn route(&mut self, mut t: Transaction, children: &[mpsc::Sender<Transaction>]) {
        t.batch = self.chain.run_flat(std::mem::take(&mut t.batch)).await;
        if t.batch.is_empty() {
            t.ack.resolve(Outcome::Filtered);
            return;
        }
        self.inner.route(t, children).await
    }
}
