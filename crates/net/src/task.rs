//! Task lifetimes: every task of a transport watches one shutdown signal, and shutdown can await
//! the end of all of them (so that a restarted node can bind the same address at once).

use std::future::Future;
use tokio::runtime::Handle;
use tokio::sync::watch;

/// A task's view of its transport's lifetime: where to spawn children and when to stop.
///
/// Holding one keeps [`Transport::shutdown`](crate::Transport::shutdown) waiting: it awaits
/// `watch::Sender::closed`, which completes once every `Lifetime` (every task) is gone.
#[derive(Debug, Clone)]
pub(crate) struct Lifetime {
    runtime: Handle,
    signal: watch::Receiver<bool>,
}

impl Lifetime {
    pub(crate) fn new(runtime: Handle, signal: watch::Receiver<bool>) -> Self {
        Self { runtime, signal }
    }

    /// Completes once shutdown is requested, or once every transport handle is dropped (the
    /// signal's sender goes with them), so that tasks never outlive the transport.
    pub(crate) async fn stopped(&mut self) {
        let _ = self.signal.wait_for(|stop| *stop).await;
    }

    /// Spawns `body` with this lifetime. A clone of the signal is dropped only after the body's
    /// future (and everything it owns: listener, sockets) has been dropped, so that shutdown
    /// returns only once those resources are released.
    pub(crate) fn spawn<F>(self, body: impl FnOnce(Lifetime) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let alive = self.signal.clone();
        let runtime = self.runtime.clone();
        let fut = body(self);
        runtime.spawn(async move {
            fut.await;
            drop(alive);
        });
    }
}
