//! In-flight memory shared by a group of streams (one organisation's): every read takes
//! its bytes from the budget and gives them back once it is settled, so that together
//! the streams never hold more than the budget in messages read and not yet delivered.
//! A read that does not fit waits, which slows the sources down instead of growing the
//! process.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// Bytes a group of streams may hold in flight.
#[derive(Debug)]
pub struct MemoryBudget {
    bytes: Arc<Semaphore>,
    total: u32,
}

/// Why a read got no room.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoRoom {
    #[error(
        "a read of {read} bytes is larger than the whole in-flight memory quota ({total} bytes)"
    )]
    TooLarge { read: usize, total: u32 },
    #[error("the stream stopped while waiting for in-flight memory")]
    Stopped,
}

impl MemoryBudget {
    /// A budget of `total` bytes (at most 4 GiB, what one reservation can count).
    pub fn new(total: usize) -> Arc<Self> {
        let total = u32::try_from(total).unwrap_or(u32::MAX).max(1);
        Arc::new(MemoryBudget {
            bytes: Arc::new(Semaphore::new(total as usize)),
            total,
        })
    }

    /// Bytes not held by any read now.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }

    /// Room for `read` bytes, waited for until it is free or `cancel` fires; the room is
    /// given back when the permit drops.
    pub async fn reserve(
        &self,
        read: usize,
        cancel: &CancellationToken,
    ) -> Result<OwnedSemaphorePermit, NoRoom> {
        let n = u32::try_from(read)
            .ok()
            .filter(|n| *n <= self.total)
            .ok_or(NoRoom::TooLarge {
                read,
                total: self.total,
            })?;
        tokio::select! {
            permit = self.bytes.clone().acquire_many_owned(n.max(1)) => permit.map_err(|_| NoRoom::Stopped),
            () = cancel.cancelled() => Err(NoRoom::Stopped),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_take_and_give_back_room_and_a_read_too_large_is_refused() {
        let budget = MemoryBudget::new(100);
        let cancel = CancellationToken::new();
        let a = budget.reserve(60, &cancel).await.unwrap();
        assert_eq!(budget.available(), 40);
        assert_eq!(
            budget.reserve(101, &cancel).await.unwrap_err(),
            NoRoom::TooLarge {
                read: 101,
                total: 100
            }
        );
        // No room yet: a second read waits until the first is settled.
        let waiting = budget.reserve(50, &cancel);
        tokio::pin!(waiting);
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        drop(a);
        let b = waiting.await.unwrap();
        assert_eq!(budget.available(), 50);
        drop(b);
        assert_eq!(budget.available(), 100);
        // A stream stopping while it waits gets no room.
        let _all = budget.reserve(100, &cancel).await.unwrap();
        cancel.cancel();
        assert_eq!(
            budget.reserve(1, &cancel).await.unwrap_err(),
            NoRoom::Stopped
        );
    }
}
