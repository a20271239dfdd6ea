//! The TCP transport of cloudbft's node drivers (primary, group replica, database node,
//! gateway).
//!
//! It carries opaque frames: callers encode protocol messages (`proto::Envelope::encode`) and
//! decode what arrives. The protocol retransmits what matters, so the transport gives
//! best-effort, in-order delivery per destination. Most messages are authenticated by the
//! protocol itself (signatures, unique warrants) and travel on plain connections; between nodes
//! the transport can also authenticate the connection ([`link`], with
//! [`Transport::bind_with_links`]): the opener proves its identity once per connection with its
//! Ed25519 key (held by the node driver behind [`LinkKeys`]), then every frame carries a MAC,
//! so that point-to-point messages need no signature of their own and the receiver learns the
//! sender from [`Inbound::link`]. Frames are never encrypted.
//!
//! - [`Transport::send`] never blocks and never fails. Each destination has one task with a
//!   bounded queue and one outbound connection, opened lazily, re-opened with capped exponential
//!   backoff; when the queue is full the frame is dropped and counted. A dead, slow or hostile
//!   peer therefore costs at most its queue and never delays traffic to the others. A connection
//!   whose data goes unacknowledged for [`TransportConfig::stall_timeout`] (a partition: the
//!   peer neither answers nor closes) is given up and re-opened too, so that a peer is reached
//!   again within the backoff once the partition heals, not at TCP's next retransmission.
//! - Inbound connections are read-only: each read loop accepts frames up to
//!   [`TransportConfig::max_frame`] and closes its connection on an oversized length prefix or a
//!   truncated frame, counting it, without ever allocating more than the limit. Whoever reaches
//!   the port holds little: a connection whose first frame has not arrived whole within
//!   [`TransportConfig::connect_timeout`] is closed, at most
//!   [`TransportConfig::max_plain_connections`] connections that are not authenticated links are
//!   open at once, and a node's newer link closes its older one. What frames hold is bounded
//!   in bytes: plain connections together hold at most
//!   [`TransportConfig::plain_inbound_bytes`], each link
//!   [`TransportConfig::link_inbound_bytes`] (read, queued or with the consumer, see
//!   [`Inbound::reserved`]); a connection whose next frame does not fit waits before reading it.
//! - Frames use the format of [`wire::frame`] (4-byte big-endian length, then the payload), with
//!   async equivalents in [`frame`].
//!
//! Connections are one-way: a node sends on the connections it opens and receives on those it
//! accepts (the acceptor writes only its link handshake's reply and accept). [`Inbound::from`]
//! is therefore the sender's ephemeral source address, not the address it listens on: identify
//! senders by the signed contents or the authenticated [`Inbound::link`], and reply to their
//! configured address.

mod budget;
pub mod config;
pub mod frame;
mod inbound;
pub mod link;
pub mod metrics;
mod outbound;
mod stats;
mod task;
pub mod testing;

pub use budget::Reserved;
pub use config::{ConfigError, TransportConfig};
pub use link::LinkKeys;
pub use stats::Stats;

use budget::Budget;
use stats::{add, Counters};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use task::Lifetime;
use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};

/// One frame received, with the connection it came on.
#[derive(Debug)]
pub struct Inbound {
    /// Source address of the TCP connection (the peer's ephemeral port, not its listen
    /// address). Informational: the protocol identifies senders by their signatures, or by
    /// [`link`](Inbound::link).
    pub from: SocketAddr,
    /// The frame's payload, at most `max_frame` bytes, not yet decoded. On an authenticated
    /// connection the link's tag has been checked and removed.
    pub frame: Vec<u8>,
    /// The authenticated identity of the node that opened the connection ([`LinkKeys::me`] at
    /// its end), or `None` on a plain connection, whose frames carry no proof of their sender.
    pub link: Option<u64>,
    /// The frame's bytes in its connection's inbound budget
    /// ([`TransportConfig::plain_inbound_bytes`], [`TransportConfig::link_inbound_bytes`]),
    /// given back when this is dropped: a consumer that holds frames holds back the
    /// connections they came on.
    pub reserved: Reserved,
}

/// A handle on one node's transport: a listening socket and one outbound connection per
/// destination.
///
/// Cloning is cheap (all clones share the same connections and counters). The transport stops
/// with [`shutdown`](Transport::shutdown), or when the last handle is dropped.
#[derive(Debug, Clone)]
pub struct Transport {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    config: TransportConfig,
    local_addr: SocketAddr,
    runtime: Handle,
    counters: Arc<Counters>,
    /// The queue of each destination's task. Entries live as long as the transport: nodes talk to
    /// a fixed set of configured addresses.
    peers: Mutex<HashMap<SocketAddr, mpsc::Sender<Vec<u8>>>>,
    /// `true` asks every task to stop; `closed()` tells when all have.
    shutdown: watch::Sender<bool>,
    /// The inbound queue, to tell how full it is (weak: it must not keep the channel open).
    inbound: mpsc::WeakSender<Inbound>,
    /// This node's link keys, if it authenticates connections.
    keys: Option<Arc<dyn LinkKeys>>,
    /// The inbound connections open, shared with the accept and read loops.
    connections: Arc<inbound::Connections>,
    /// What plain connections hold, shared with their read loops.
    plain_budget: Budget,
}

/// How full the transport's bounded queues are right now (for metrics): every queue between
/// this process and its peers has a fixed capacity, and these say how close to it they run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepths {
    /// Frames waiting in all destination queues together.
    pub outbound: usize,
    /// Frames waiting in the fullest destination queue (compare with `queue_per_peer`: a queue
    /// at capacity drops frames).
    pub deepest_outbound: usize,
    /// Inbound frames read but not yet taken by the consumer (at `inbound_queue` the read loops
    /// wait and TCP pushes back on the senders).
    pub inbound: usize,
    /// Bytes of frames from plain connections held now, read or being read, queued or with
    /// the consumer (compare with `plain_inbound_bytes`, at which plain connections wait).
    pub plain_inbound_bytes: usize,
}

/// The inbound connections open right now (for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InboundConnections {
    /// Every inbound connection open: plain ones and authenticated links.
    pub open: usize,
    /// Those that are not authenticated links (yet): compare with `max_plain_connections`, at
    /// which new connections are refused.
    pub plain: usize,
}

impl Shared {
    fn lifetime(&self) -> Lifetime {
        Lifetime::new(self.runtime.clone(), self.shutdown.subscribe())
    }

    fn is_shut_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Starts the task of destination `to` and returns its queue.
    fn spawn_peer(&self, to: SocketAddr) -> mpsc::Sender<Vec<u8>> {
        let (tx, queue) = mpsc::channel(self.config.queue_per_peer);
        let peer = outbound::Peer {
            to,
            queue,
            config: self.config.clone(),
            counters: Arc::clone(&self.counters),
            keys: self.keys.clone(),
        };
        self.lifetime()
            .spawn(move |lifetime| outbound::run(peer, lifetime));
        tx
    }
}

impl Transport {
    /// Binds `listen` (port 0 picks a free port; [`local_addr`](Transport::local_addr) tells which),
    /// spawns the accept loop on the current tokio runtime, and returns the handle with the
    /// receiver of every inbound frame.
    ///
    /// The receiver is bounded by [`TransportConfig::inbound_queue`]: a consumer that falls behind
    /// slows the senders through TCP flow control rather than growing memory. Dropping it stops
    /// accepting connections.
    ///
    /// Fails if the configuration is invalid (`InvalidInput`), if called outside a tokio runtime,
    /// or if the address cannot be bound.
    ///
    /// This transport has no link keys: it opens plain connections only, and refuses (closes,
    /// counting [`Stats::link_refused`]) connections that start a link handshake.
    pub async fn bind(
        listen: SocketAddr,
        config: TransportConfig,
    ) -> io::Result<(Transport, mpsc::Receiver<Inbound>)> {
        Self::bind_inner(listen, config, None).await
    }

    /// Like [`bind`](Transport::bind), with authenticated links ([`link`]): connections to
    /// addresses where `keys` names a node ([`LinkKeys::identity_at`]) are authenticated as
    /// `keys.me()`, and inbound connections that start a handshake naming `keys.me()` are
    /// accepted when `keys` verifies the opener, their frames delivered with
    /// [`Inbound::link`] set. Plain connections work both ways as with `bind`.
    pub async fn bind_with_links(
        listen: SocketAddr,
        config: TransportConfig,
        keys: Arc<dyn LinkKeys>,
    ) -> io::Result<(Transport, mpsc::Receiver<Inbound>)> {
        Self::bind_inner(listen, config, Some(keys)).await
    }

    async fn bind_inner(
        listen: SocketAddr,
        config: TransportConfig,
        keys: Option<Arc<dyn LinkKeys>>,
    ) -> io::Result<(Transport, mpsc::Receiver<Inbound>)> {
        config
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let runtime = Handle::try_current().map_err(io::Error::other)?;
        let listener = TcpListener::bind(listen).await?;
        let local_addr = listener.local_addr()?;
        let (deliver, inbound) = mpsc::channel(config.inbound_queue);
        let (shutdown, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            local_addr,
            runtime,
            counters: Arc::default(),
            peers: Mutex::default(),
            shutdown,
            inbound: deliver.downgrade(),
            connections: Arc::new(inbound::Connections::new(
                config.max_plain_connections,
                config.max_plain_per_address,
            )),
            plain_budget: Budget::new(config.plain_inbound_bytes),
            config,
            keys,
        });
        let ctx = inbound::InboundCtx {
            deliver,
            counters: Arc::clone(&shared.counters),
            max_frame: shared.config.max_frame,
            keys: shared.keys.clone(),
            connect_timeout: shared.config.connect_timeout,
            connections: Arc::clone(&shared.connections),
            plain_budget: shared.plain_budget.clone(),
            link_inbound_bytes: shared.config.link_inbound_bytes,
        };
        shared
            .lifetime()
            .spawn(move |lifetime| inbound::accept_loop(listener, ctx, lifetime));
        let links = shared.keys.as_ref().map(|keys| keys.me());
        tracing::info!(%local_addr, ?links, "transport listening");
        Ok((Transport { shared }, inbound))
    }

    /// The address actually bound (with the real port when `listen` used port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// The configuration in force.
    pub fn config(&self) -> &TransportConfig {
        &self.shared.config
    }

    /// Queues `frame` for `to`. Never blocks and never fails, so protocol code can send from
    /// anywhere (even outside the runtime) without a slow peer stalling it.
    ///
    /// Frames to one destination are sent in order on one connection, opened on the first send
    /// and re-opened after failures with capped exponential backoff. Delivery is best effort:
    /// the frame is dropped (and counted in [`Stats::dropped`]) when the destination's queue is
    /// full or the transport is shut down, and refused ([`Stats::oversized`]) when it exceeds
    /// `max_frame`; frames in flight when a connection breaks may be lost. The protocol
    /// retransmits what matters.
    pub fn send(&self, to: SocketAddr, frame: Vec<u8>) {
        let shared = &self.shared;
        if frame.len() > shared.config.max_frame {
            add(&shared.counters.oversized, 1);
            tracing::warn!(%to, len = frame.len(), max = shared.config.max_frame, "refusing oversized frame");
            return;
        }
        let mut peers = shared.peers.lock().unwrap_or_else(PoisonError::into_inner);
        if shared.is_shut_down() {
            add(&shared.counters.dropped, 1);
            return;
        }
        let queue = peers.entry(to).or_insert_with(|| shared.spawn_peer(to));
        let frame = match queue.try_send(frame) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(_)) => {
                add(&shared.counters.dropped, 1);
                tracing::trace!(%to, "queue full: frame dropped");
                return;
            }
            // The task is gone (it only stops at shutdown, so this is defensive): restart it.
            Err(mpsc::error::TrySendError::Closed(frame)) => frame,
        };
        let queue = shared.spawn_peer(to);
        if queue.try_send(frame).is_err() {
            add(&shared.counters.dropped, 1);
        }
        peers.insert(to, queue);
    }

    /// Queues `frame` for `to` like [`send`](Transport::send), but waits while the destination's
    /// queue is full instead of dropping the frame: for bulk transfers (a database node's state)
    /// whose sender must go at the receiver's pace. Returns false if the frame was refused
    /// (oversized) or the transport shut down.
    pub async fn send_paced(&self, to: SocketAddr, frame: Vec<u8>) -> bool {
        let shared = &self.shared;
        if frame.len() > shared.config.max_frame {
            add(&shared.counters.oversized, 1);
            return false;
        }
        let queue = {
            let mut peers = shared.peers.lock().unwrap_or_else(PoisonError::into_inner);
            if shared.is_shut_down() {
                add(&shared.counters.dropped, 1);
                return false;
            }
            let queue = peers.entry(to).or_insert_with(|| shared.spawn_peer(to));
            if queue.is_closed() {
                *queue = shared.spawn_peer(to);
            }
            queue.clone()
        };
        let sent = queue.send(frame).await.is_ok();
        if !sent {
            add(&shared.counters.dropped, 1);
        }
        sent
    }

    /// How many frames wait in the transport's queues now.
    pub fn queue_depths(&self) -> QueueDepths {
        let shared = &self.shared;
        let mut depths = QueueDepths::default();
        for queue in shared
            .peers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            let waiting = queue.max_capacity() - queue.capacity();
            depths.outbound += waiting;
            depths.deepest_outbound = depths.deepest_outbound.max(waiting);
        }
        if let Some(inbound) = shared.inbound.upgrade() {
            depths.inbound = inbound.max_capacity() - inbound.capacity();
        }
        depths.plain_inbound_bytes = shared.plain_budget.reserved();
        depths
    }

    /// How many inbound connections are open now.
    pub fn inbound_connections(&self) -> InboundConnections {
        self.shared.connections.now()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// Stops the accept loop, every read loop and every outbound task, and returns once all of
    /// them have ended and released their sockets (so the address can be bound again at once).
    /// Frames still queued are discarded. Other handles stay valid but their sends are dropped.
    pub async fn shutdown(self) {
        self.shared.shutdown.send_replace(true);
        self.shared
            .peers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.shared.shutdown.closed().await;
        tracing::info!(local_addr = %self.shared.local_addr, "transport shut down");
    }
}
