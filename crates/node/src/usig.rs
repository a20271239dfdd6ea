//! The node's USIG: a `usigd` client driven by the node's own event loop. A TPM warrant takes
//! milliseconds, so the request goes out on the socket and the loop goes on; the answer arrives
//! like any other event. The cores keep at most one warrant request in flight, so warrants
//! come back in request order. Only when the connection fails (usigd restarting) does the
//! recovery, which may wait seconds, run on a blocking thread.

use crate::metrics::Metrics;
use crate::NodeError;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, Interest, ReadBuf};
use tokio::sync::mpsc;
use usig::daemon::client::UsigdClient;
use usig::daemon::protocol::MAX_FRAME;
use usig::{MessageDigest, UniqueWarrant, UsigError, UsigId};

/// A warrant, or why the USIG failed (the node cannot go on without it).
pub type Warranted = Result<UniqueWarrant, NodeError>;

/// The last warrant made and the digest of what it warranted.
type Last = Arc<Mutex<Option<(MessageDigest, UniqueWarrant)>>>;

/// Sends messages to warrant to the USIG task.
pub struct UsigWorker {
    requests: mpsc::UnboundedSender<Vec<u8>>,
    /// Requests sent and not yet warranted.
    pending: Arc<AtomicUsize>,
    last: Last,
}

impl UsigWorker {
    /// Connects to usigd at `socket` for `identity`, and starts the task on the current
    /// runtime, which counts each warrant and its time in `metrics`. Results arrive on the
    /// returned receiver.
    pub fn start(
        socket: &Path,
        identity: UsigId,
        metrics: Arc<Metrics>,
    ) -> Result<(UsigWorker, mpsc::UnboundedReceiver<Warranted>), NodeError> {
        let shown = socket.display().to_string();
        let failed = |source| NodeError::Usig {
            socket: shown.clone(),
            source,
        };
        let mut client = UsigdClient::connect(socket, identity).map_err(failed)?;
        let stream = usigd_socket(client.take_stream()).map_err(failed)?;
        let (requests, incoming) = mpsc::unbounded_channel::<Vec<u8>>();
        let (results, warranted) = mpsc::unbounded_channel();
        let pending = Arc::new(AtomicUsize::new(0));
        let last: Last = Arc::default();
        let link = Link {
            client,
            stream,
            socket: shown.clone(),
        };
        tokio::spawn(serve(
            link,
            incoming,
            results,
            metrics,
            pending.clone(),
            last.clone(),
        ));
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
        // The task only ends when this sender is dropped or the driver's receiver is gone.
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

/// The usigd connection of the USIG task.
struct Link {
    client: UsigdClient,
    /// `None` after a failed recovery: the next warrant reconnects.
    stream: Option<UsigdSocket>,
    socket: String,
}

impl Link {
    /// One warrant over `digest`: on the socket, or by the client's recovery when the socket
    /// fails.
    async fn warrant(mut self, digest: MessageDigest) -> (Self, Result<UniqueWarrant, NodeError>) {
        let sent = match self.stream.as_mut() {
            Some(stream) => exchange(stream, &digest).await,
            None => Err(UsigError::Daemon("usigd connection: not connected".into())),
        };
        let result = match sent {
            Ok(payload) => self.client.accept_warrant(&payload),
            Err(cause) => {
                let result;
                (self, result) = self.recover(digest, cause).await;
                result
            }
        };
        // The socket's name is copied only into an error, not for every warrant.
        let result = result.map_err(|source| NodeError::Usig {
            socket: self.socket.clone(),
            source,
        });
        (self, result)
    }

    /// The client's recovery after the socket failed (`cause`), on a blocking thread: it may
    /// wait seconds for usigd to come back.
    async fn recover(
        self,
        digest: MessageDigest,
        cause: UsigError,
    ) -> (Self, Result<UniqueWarrant, UsigError>) {
        let Link {
            mut client, socket, ..
        } = self;
        let (client, result, stream) = tokio::task::spawn_blocking(move || {
            let result = client.recover(&digest, cause);
            let stream = client.take_stream();
            (client, result, stream)
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        let stream = usigd_socket(stream).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "usigd connection not usable; reconnecting at the next warrant");
            None
        });
        let link = Link {
            client,
            stream,
            socket,
        };
        (link, result)
    }
}

/// Sends the request for a warrant over `digest` and reads usigd's answer.
async fn exchange(stream: &mut UsigdSocket, digest: &MessageDigest) -> Result<Vec<u8>, UsigError> {
    let io = |e: String| UsigError::Daemon(format!("usigd connection: {e}"));
    stream
        .send(&UsigdClient::create_frame(digest)?)
        .map_err(|e| io(e.to_string()))?;
    net::frame::read_frame(stream, MAX_FRAME)
        .await
        .map_err(|e| io(e.to_string()))?
        .ok_or_else(|| io("closed by usigd".into()))
}

/// The client's connected socket, watched by this runtime.
fn usigd_socket(stream: Option<UnixStream>) -> Result<Option<UsigdSocket>, UsigError> {
    let io = |e: io::Error| UsigError::Daemon(format!("usigd connection: {e}"));
    stream.map(|s| UsigdSocket::new(s).map_err(io)).transpose()
}

/// usigd's socket, watched by the runtime for input alone. A Unix socket tells its watchers
/// each time the peer reads what was written to it (there is room to write again); registered
/// for writing too, as tokio's `UnixStream` is, the node's thread would wake for nothing each
/// time usigd reads a request. Writes do not wait instead: a request is a few dozen bytes and
/// the cores keep at most one in flight, so a socket without room for it means usigd stopped
/// reading, and the request fails into the recovery path.
struct UsigdSocket(AsyncFd<UnixStream>);

impl UsigdSocket {
    fn new(stream: UnixStream) -> io::Result<Self> {
        stream.set_nonblocking(true)?;
        // SAFETY: a `UnixStream` owns its descriptor: open, and the one `as_raw_fd` returns,
        // until the stream is dropped with the `AsyncFd`.
        let registered = unsafe { AsyncFd::register_with_interest(stream, Interest::READABLE) };
        Ok(UsigdSocket(registered?))
    }

    /// Writes the whole of `frame` now, or fails.
    fn send(&self, frame: &[u8]) -> io::Result<()> {
        match self.0.get_ref().write(frame) {
            Ok(written) if written == frame.len() => Ok(()),
            Ok(_) => Err(io::Error::other("usigd took part of a request")),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                Err(io::Error::other("usigd is not reading its socket"))
            }
            Err(e) => Err(e),
        }
    }
}

impl AsyncRead for UsigdSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut ready = std::task::ready!(self.0.poll_read_ready(cx))?;
            if let Ok(read) = ready.try_io(|fd| fd.get_ref().read(buf.initialize_unfilled())) {
                buf.advance(read?);
                return Poll::Ready(Ok(()));
            }
        }
    }
}

/// Warrants each message that arrives on `incoming`, in order, until the node lets go.
async fn serve(
    mut link: Link,
    mut incoming: mpsc::UnboundedReceiver<Vec<u8>>,
    results: mpsc::UnboundedSender<Warranted>,
    metrics: Arc<Metrics>,
    pending: Arc<AtomicUsize>,
    last: Last,
) {
    while let Some(bytes) = incoming.recv().await {
        let started = Instant::now();
        let digest = MessageDigest::of(&bytes);
        let result;
        (link, result) = link.warrant(digest).await;
        if let Ok(ui) = &result {
            metrics.warrants.inc();
            Metrics::observe(&metrics.warrant_seconds, started.elapsed());
            *last.lock().unwrap_or_else(PoisonError::into_inner) = Some((digest, ui.clone()));
        }
        pending.fetch_sub(1, Ordering::SeqCst);
        if results.send(result).is_err() {
            return;
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use usig::daemon::config::IdentityConfig;
    use usig::daemon::{Usigd, UsigdConfig};

    /// usigd's socket, watched for input alone: a request it has no room for fails at once,
    /// naming usigd, instead of waiting; an answer that arrives in pieces is still read whole.
    #[tokio::test(flavor = "current_thread")]
    async fn a_full_socket_fails_the_request_and_answers_arrive_whole() {
        let (ours, mut theirs) = UnixStream::pair().expect("socket pair");
        let socket = UsigdSocket::new(ours).expect("register");
        let frame = vec![0u8; 64 * 1024];
        let refused = loop {
            if let Err(e) = socket.send(&frame) {
                break e;
            }
        };
        assert!(refused.to_string().contains("usigd"), "{refused}");

        let mut answer = Vec::new();
        wire::write_frame(&mut answer, b"warrant", MAX_FRAME).expect("frame");
        let rest = answer.split_off(2);
        theirs.write_all(&answer).expect("first piece");
        let reading = tokio::spawn(async move {
            let mut socket = socket;
            net::frame::read_frame(&mut socket, MAX_FRAME).await
        });
        tokio::task::yield_now().await;
        theirs.write_all(&rest).expect("the rest");
        let read = reading.await.expect("task").expect("a frame");
        assert_eq!(read.as_deref(), Some(&b"warrant"[..]));
    }

    /// On the node's own runtime, warrants come back in order; when usigd is killed and
    /// restarted between two warrants, the next one is recovered on the blocking path and the
    /// counter goes on without a gap or a repeat.
    #[tokio::test(flavor = "current_thread")]
    async fn warrants_in_order_and_across_a_usigd_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = UsigdConfig {
            state_dir: dir.path().join("state"),
            tpm: None,
            identities: vec![IdentityConfig {
                id: 7,
                socket: dir.path().join("node-7.sock"),
                pcr: None,
            }],
        };
        let usigd = Usigd::start(&config, false).expect("start usigd");
        let metrics = Metrics::register(&mut Default::default());
        let (worker, mut warranted) =
            UsigWorker::start(&config.identities[0].socket, UsigId(7), metrics).expect("worker");
        async fn next(
            worker: &UsigWorker,
            warranted: &mut mpsc::UnboundedReceiver<Warranted>,
            message: &[u8],
        ) -> UniqueWarrant {
            worker.warrant(message.to_vec());
            assert!(worker.busy());
            warranted.recv().await.expect("open").expect("warrant")
        }
        assert_eq!(next(&worker, &mut warranted, b"one").await.counter, 1);
        assert_eq!(next(&worker, &mut warranted, b"two").await.counter, 2);
        usigd.shutdown();
        let usigd = Usigd::start(&config, false).expect("restart usigd");
        let third = next(&worker, &mut warranted, b"three").await;
        assert_eq!((third.identity, third.counter), (UsigId(7), 3));
        assert!(!worker.busy());
        assert_eq!(worker.last(), Some((MessageDigest::of(b"three"), third)));
        usigd.shutdown();
    }
}
