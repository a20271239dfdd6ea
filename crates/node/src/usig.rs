//! The node's USIG: a `usigd` client on a blocking thread, since a TPM warrant takes
//! milliseconds and must not stall the event loop. The cores keep at most one warrant request
//! in flight, so one thread is enough and warrants come back in request order.

use crate::metrics::Metrics;
use crate::NodeError;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;
use tokio::sync::mpsc;
use usig::daemon::client::UsigdClient;
use usig::{MessageDigest, UniqueWarrant, UsigError, UsigId};

/// A warrant, or why the USIG failed (the node cannot go on without it).
pub type Warranted = Result<UniqueWarrant, NodeError>;

/// The last warrant made and the digest of what it warranted.
type Last = Arc<Mutex<Option<(MessageDigest, UniqueWarrant)>>>;

/// Sends messages to warrant to the USIG thread.
pub struct UsigWorker {
    requests: std::sync::mpsc::Sender<Vec<u8>>,
    /// Requests sent and not yet warranted.
    pending: Arc<AtomicUsize>,
    last: Last,
}

impl UsigWorker {
    /// Connects to usigd at `socket` for `identity`, and starts the thread, which counts each
    /// warrant and its time in `metrics`. Results arrive on the returned receiver.
    pub fn start(
        socket: &Path,
        identity: UsigId,
        metrics: Arc<Metrics>,
    ) -> Result<(UsigWorker, mpsc::UnboundedReceiver<Warranted>), NodeError> {
        let mut client =
            UsigdClient::connect(socket, identity).map_err(|source| NodeError::Usig {
                socket: socket.display().to_string(),
                source,
            })?;
        let (requests, incoming) = std::sync::mpsc::channel::<Vec<u8>>();
        let (results, warranted) = mpsc::unbounded_channel();
        let shown = socket.display().to_string();
        let pending = Arc::new(AtomicUsize::new(0));
        let last: Last = Arc::default();
        let (pending_, last_) = (pending.clone(), last.clone());
        std::thread::Builder::new()
            .name(format!("usig-{}", identity.0))
            .spawn(move || {
                while let Ok(bytes) = incoming.recv() {
                    let started = Instant::now();
                    let result = usig::Usig::create_ui(&mut client, &bytes).map_err(|source| {
                        NodeError::Usig {
                            socket: shown.clone(),
                            source,
                        }
                    });
                    if let Ok(ui) = &result {
                        metrics.warrants.inc();
                        Metrics::observe(&metrics.warrant_seconds, started.elapsed());
                        *last_.lock().unwrap_or_else(PoisonError::into_inner) =
                            Some((MessageDigest::of(&bytes), ui.clone()));
                    }
                    pending_.fetch_sub(1, Ordering::SeqCst);
                    if results.send(result).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| NodeError::Usig {
                socket: socket.display().to_string(),
                source: UsigError::Daemon(format!("cannot start the USIG thread: {e}")),
            })?;
        Ok((
            UsigWorker {
                requests,
                pending,
                last,
            },
            warranted,
        ))
    }

    /// Asks for a warrant over `bytes`.
    pub fn warrant(&self, bytes: Vec<u8>) {
        self.pending.fetch_add(1, Ordering::SeqCst);
        // The thread only ends when this sender is dropped or the driver's receiver is gone.
        let _ = self.requests.send(bytes);
    }

    /// Whether warrants were asked for and not made yet.
    pub fn busy(&self) -> bool {
        self.pending.load(Ordering::SeqCst) > 0
    }

    /// The last warrant made, with the digest of what it warranted: where the identity's
    /// sequence stands (docs/protocol.md, "Reconfiguration").
    pub fn last(&self) -> Option<(MessageDigest, UniqueWarrant)> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Where `cloudbft keygen` puts the usigd socket of a node: next to cluster.toml, under
/// `usigd/<machine>/node-<id>.sock`.
pub fn default_socket(config_dir: &Path, machine: &str, node: u32) -> PathBuf {
    config_dir
        .join("usigd")
        .join(machine)
        .join(format!("node-{node}.sock"))
}
