//! Byte budgets for inbound frames: what a connection may hold in memory, frames read or being
//! read, queued for the consumer or still with it, counted in bytes rather than in frames
//! (docs/protocol.md, "Byzantine input").

use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A budget of bytes shared by the connections that take from it: plain connections share
/// one, each authenticated link has its own.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    bytes: Arc<Semaphore>,
    total: usize,
}

impl Budget {
    pub(crate) fn new(total: usize) -> Self {
        Budget {
            bytes: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// Waits until `len` more bytes fit, and reserves them (first come, first served).
    /// `len` is at most the total ([`TransportConfig::validate`](crate::TransportConfig)).
    pub(crate) async fn reserve(&self, len: usize) -> Reserved {
        let len = u32::try_from(len).expect("a frame's length fits its u32 prefix");
        let permit = Arc::clone(&self.bytes)
            .acquire_many_owned(len)
            .await
            .expect("a budget's semaphore is never closed");
        Reserved {
            _bytes: Some(permit),
        }
    }

    /// Bytes reserved now.
    pub(crate) fn reserved(&self) -> usize {
        self.total - self.bytes.available_permits()
    }
}

/// One frame's bytes in its connection's budget: given back when the
/// [`Inbound`](crate::Inbound) that holds it is dropped. Frames made outside the transport
/// (tests of a consumer) hold none ([`Reserved::default`]).
#[derive(Debug, Default)]
pub struct Reserved {
    /// Held for its drop, which gives the bytes back.
    _bytes: Option<OwnedSemaphorePermit>,
}
