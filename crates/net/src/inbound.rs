//! The accept loop and one read loop per inbound connection.
//!
//! Inbound connections carry frames towards us; we write on them only to answer a link hello.
//! Each read loop reads frames of at most `max_frame` bytes and hands them to the single inbound
//! receiver; a bad stream (oversized length prefix, garbage, a frame cut short) closes that
//! connection alone and is counted. A connection whose first frame is a link hello is
//! authenticated first ([`crate::link`]): its frames are delivered only if their tags check,
//! with the opener's identity; any failure closes it and counts `link_refused`.
//!
//! Whoever reaches the port can open connections, so what they hold is bounded: the first frame
//! must arrive whole within `connect_timeout` of the accept, at most `max_plain_connections`
//! connections that are not authenticated links are open at once, `max_plain_per_address` of
//! them from one address (beyond either a new one is closed at once), and each opener holds one
//! link (a newer one closes the older). Links are bounded by
//! the configured nodes, whose handshake signatures the node's [`LinkKeys`] checks.

use crate::budget::{Budget, Reserved};
use crate::frame::{self, FrameError};
use crate::link::{self, LinkError, LinkKeys, Unsealer};
use crate::stats::{add, Counters};
use crate::task::Lifetime;
use crate::{Inbound, InboundConnections};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Read buffer per connection: many small protocol messages are read per system call, while
/// payloads larger than this bypass it.
const READ_BUFFER: usize = 16 * 1024;

/// Pause after a failed `accept` (typically out of file descriptors) so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// While connections are refused at the cap, a warning at most this often (each refusal is
/// counted): a flood must not fill the log too.
const REFUSAL_WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// What every read loop needs.
#[derive(Debug, Clone)]
pub(crate) struct InboundCtx {
    pub deliver: mpsc::Sender<Inbound>,
    pub counters: Arc<Counters>,
    pub max_frame: usize,
    /// This node's link keys; without them every hello is refused.
    pub keys: Option<Arc<dyn LinkKeys>>,
    /// How long an opener may take to send its first frame once accepted, and to complete its
    /// handshake once it sent its hello.
    pub connect_timeout: Duration,
    /// The transport's count of open connections, where each read loop takes its place.
    pub connections: Arc<Connections>,
    /// What plain connections' frames may hold together.
    pub plain_budget: Budget,
    /// What each link's frames may hold.
    pub link_inbound_bytes: usize,
}

/// The inbound connections open now: counted for the caps on plain ones and for metrics, and
/// each opener's link, so that a newer one closes the older.
#[derive(Debug)]
pub(crate) struct Connections {
    /// [`TransportConfig::max_plain_connections`](crate::TransportConfig::max_plain_connections).
    max_plain: usize,
    /// [`TransportConfig::max_plain_per_address`](crate::TransportConfig::max_plain_per_address).
    max_plain_per_address: usize,
    open: AtomicUsize,
    plain: Mutex<Plain>,
    links: Mutex<Links>,
}

/// Open connections that are not authenticated links (yet).
#[derive(Debug, Default)]
struct Plain {
    total: usize,
    /// By the address they come from (addresses with none are not kept).
    by_address: HashMap<IpAddr, usize>,
}

/// The link each opener holds.
#[derive(Debug, Default)]
struct Links {
    /// Tells a link from the newer one of the same opener.
    next_id: u64,
    /// The id of each opener's link, and the sender its read loop watches: never sent on,
    /// dropping it tells the read loop that a newer link replaced it.
    by_opener: HashMap<u64, (u64, oneshot::Sender<()>)>,
}

impl Connections {
    pub(crate) fn new(max_plain: usize, max_plain_per_address: usize) -> Self {
        Connections {
            max_plain,
            max_plain_per_address,
            open: AtomicUsize::new(0),
            plain: Mutex::default(),
            links: Mutex::default(),
        }
    }

    /// How many are open now.
    pub(crate) fn now(&self) -> InboundConnections {
        InboundConnections {
            open: self.open.load(Ordering::Relaxed),
            plain: lock(&self.plain).total,
        }
    }

    /// Counts a newly accepted connection from `address` as open and plain, unless
    /// `max_plain` plain ones are open already, or `max_plain_per_address` from that address.
    fn admit(self: &Arc<Self>, address: IpAddr) -> Option<Admitted> {
        let mut plain = lock(&self.plain);
        let from_address = plain.by_address.get(&address).copied().unwrap_or(0);
        if plain.total >= self.max_plain || from_address >= self.max_plain_per_address {
            return None;
        }
        plain.total += 1;
        plain.by_address.insert(address, from_address + 1);
        self.open.fetch_add(1, Ordering::Relaxed);
        Some(Admitted {
            connections: Arc::clone(self),
            plain: Some(address),
            link: None,
        })
    }

    /// A plain connection from `address` closed or became a link.
    fn unplain(&self, address: IpAddr) {
        let mut plain = lock(&self.plain);
        plain.total -= 1;
        if let Some(n) = plain.by_address.get_mut(&address) {
            *n -= 1;
            if *n == 0 {
                plain.by_address.remove(&address);
            }
        }
    }
}

/// One admitted connection's place in [`Connections`], given back when the read loop ends.
struct Admitted {
    connections: Arc<Connections>,
    /// Still counted against the caps, as coming from this address.
    plain: Option<IpAddr>,
    /// Once authenticated: the opener and this link's id in [`Links`].
    link: Option<(u64, u64)>,
}

impl Admitted {
    /// The connection became `opener`'s link: it no longer counts against the cap, and it
    /// replaces the opener's older link, if any. The receiver completes when a newer link of
    /// the same opener replaces this one.
    fn authenticated(&mut self, opener: u64) -> oneshot::Receiver<()> {
        if let Some(address) = self.plain.take() {
            self.connections.unplain(address);
        }
        let (replace, replaced) = oneshot::channel();
        let mut links = lock(&self.connections.links);
        links.next_id += 1;
        let id = links.next_id;
        // Dropping the older link's sender wakes its read loop, which closes it.
        links.by_opener.insert(opener, (id, replace));
        self.link = Some((opener, id));
        replaced
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let connections = &self.connections;
        connections.open.fetch_sub(1, Ordering::Relaxed);
        if let Some(address) = self.plain {
            connections.unplain(address);
        }
        if let Some((opener, id)) = self.link {
            let mut links = lock(&connections.links);
            // Unless a newer link of the opener took the entry already.
            if links
                .by_opener
                .get(&opener)
                .is_some_and(|(held, _)| *held == id)
            {
                links.by_opener.remove(&opener);
            }
        }
    }
}

/// The data behind `mutex`, also after a panic elsewhere (counts stay usable).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Accepts connections until shutdown, or until the inbound receiver is dropped (nobody would
/// read what arrives).
pub(crate) async fn accept_loop(listener: TcpListener, ctx: InboundCtx, mut lifetime: Lifetime) {
    let mut refusals_unreported = 0u64;
    let mut last_warning: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            _ = lifetime.stopped() => return,
            _ = ctx.deliver.closed() => {
                tracing::debug!("inbound receiver dropped: no longer accepting");
                return;
            }
            accepted = listener.accept() => accepted,
        };
        let (stream, from) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::select! {
                    _ = lifetime.stopped() => return,
                    _ = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => continue,
                }
            }
        };
        let deadline = Instant::now() + ctx.connect_timeout;
        let Some(admitted) = ctx.connections.admit(from.ip()) else {
            // Counted first, so whoever sees it closed sees it counted. Closed at once rather
            // than left in the backlog, where it would keep its opener waiting.
            add(&ctx.counters.connections_refused, 1);
            drop(stream);
            refusals_unreported += 1;
            if last_warning.is_none_or(|at| at.elapsed() >= REFUSAL_WARNING_INTERVAL) {
                tracing::warn!(
                    %from,
                    refused = refusals_unreported,
                    max_plain_connections = ctx.connections.max_plain,
                    max_plain_per_address = ctx.connections.max_plain_per_address,
                    "closing new inbound connections: too many connections that are not authenticated links are open, in all or from this address (raise max_plain_connections or max_plain_per_address if these are legitimate clients)"
                );
                refusals_unreported = 0;
                last_warning = Some(Instant::now());
            }
            continue;
        };
        add(&ctx.counters.accepted, 1);
        tracing::debug!(%from, "inbound connection");
        let ctx = ctx.clone();
        lifetime
            .clone()
            .spawn(move |lifetime| read_loop(stream, from, admitted, deadline, ctx, lifetime));
    }
}

/// The connection's authenticated opener and the state checking its frames' tags.
struct Link {
    opener: u64,
    unsealer: Unsealer,
    /// Completes when a newer link of the same opener replaced this one.
    replaced: oneshot::Receiver<()>,
    /// What this link's frames may hold.
    budget: Budget,
}

/// Reads frames from one connection until it ends, turns bad, shutdown, or the receiver goes;
/// its first frame must have arrived by `deadline`.
async fn read_loop(
    stream: TcpStream,
    from: SocketAddr,
    mut admitted: Admitted,
    deadline: Instant,
    ctx: InboundCtx,
    mut lifetime: Lifetime,
) {
    let mut reader = BufReader::with_capacity(READ_BUFFER, stream);
    // The first frame tells a link hello from a plain connection's first frame; a hello may be
    // longer than a (tiny) max_frame, so the limit is checked after telling them apart.
    let first_max = ctx.max_frame.max(link::HELLO_LEN);
    let first = tokio::select! {
        _ = lifetime.stopped() => return,
        read = tokio::time::timeout_at(deadline, read_within(&mut reader, first_max, &ctx.plain_budget, link::HELLO_LEN)) => read,
    };
    let Ok(first) = first else {
        // Counted, not warned about: anyone can cause it, and a correct opener sends its first
        // frame at once (a slow path that cannot carry it in time needs a longer
        // connect_timeout).
        add(&ctx.counters.first_frame_timeouts, 1);
        tracing::debug!(%from, timeout = ?ctx.connect_timeout, "closing inbound connection: no complete first frame within connect_timeout");
        return;
    };
    let Some((first, reserved)) = frame_or_close(first, from, &ctx) else {
        return;
    };
    let mut link = None;
    if link::is_hello(&first) {
        let accepted = tokio::select! {
            _ = lifetime.stopped() => return,
            accepted = accept(&mut reader, &first, &ctx) => accepted,
        };
        match accepted {
            Ok((opener, unsealer)) => {
                add(&ctx.counters.links, 1);
                tracing::debug!(%from, opener, "authenticated link established");
                let replaced = admitted.authenticated(opener);
                link = Some(Link {
                    opener,
                    unsealer,
                    replaced,
                    budget: Budget::new(ctx.link_inbound_bytes),
                });
            }
            Err(error) => {
                add(&ctx.counters.link_refused, 1);
                tracing::warn!(%from, %error, "closing inbound connection: link refused");
                return;
            }
        }
    } else if first.len() > ctx.max_frame {
        add(&ctx.counters.malformed, 1);
        tracing::warn!(%from, len = first.len(), max = ctx.max_frame, "closing inbound connection: oversized frame");
        return;
    } else if !deliver(first, reserved, from, None, &ctx, &mut lifetime).await {
        return;
    }
    let (max, budget) = match &link {
        Some(link) => (ctx.max_frame + link::TAG_LEN, link.budget.clone()),
        None => (ctx.max_frame, ctx.plain_budget.clone()),
    };
    loop {
        // Biased: a link already replaced delivers nothing more.
        let read = tokio::select! {
            biased;
            _ = lifetime.stopped() => return,
            opener = replaced(&mut link) => {
                add(&ctx.counters.links_replaced, 1);
                tracing::debug!(%from, opener, "closing authenticated connection: the same node opened a newer link");
                return;
            }
            read = read_within(&mut reader, max, &budget, 0) => read,
        };
        let Some((frame, reserved)) = frame_or_close(read, from, &ctx) else {
            return;
        };
        let (frame, opener) = match &mut link {
            None => (frame, None),
            Some(link) => match link.unsealer.open(frame) {
                Ok(payload) => (payload, Some(link.opener)),
                Err(error) => {
                    add(&ctx.counters.link_refused, 1);
                    tracing::warn!(%from, opener = link.opener, %error, "closing authenticated connection");
                    return;
                }
            },
        };
        if !deliver(frame, reserved, from, opener, &ctx, &mut lifetime).await {
            return;
        }
    }
}

/// Reads one frame of at most `max` bytes, its payload only once its length fits in `budget`:
/// until then the connection waits, and TCP pushes back on its sender. A frame of at most
/// `exempt` bytes reserves nothing: a connection's first frame no longer than a link hello, so
/// that a node's hello never waits behind plain connections' frames (what those hold is
/// bounded by the plain places). Not cancel-safe, as [`frame::read_frame`].
async fn read_within(
    reader: &mut BufReader<TcpStream>,
    max: usize,
    budget: &Budget,
    exempt: usize,
) -> Result<Option<(Vec<u8>, Reserved)>, FrameError> {
    let Some(len) = frame::read_header(reader, max).await? else {
        return Ok(None);
    };
    let reserved = if len <= exempt {
        Reserved::default()
    } else {
        budget.reserve(len).await
    };
    let payload = frame::read_payload(reader, len).await?;
    Ok(Some((payload, reserved)))
}

/// Completes, with the opener, once a newer link of the same opener replaced `link`; never on a
/// plain connection.
async fn replaced(link: &mut Option<Link>) -> u64 {
    match link {
        Some(link) => {
            // Never sent on: the sender is dropped when the newer link takes its place.
            let _ = (&mut link.replaced).await;
            link.opener
        }
        None => std::future::pending().await,
    }
}

/// The acceptor's side of the handshake, bounded by `connect_timeout` from the hello.
async fn accept(
    reader: &mut BufReader<TcpStream>,
    hello: &[u8],
    ctx: &InboundCtx,
) -> Result<(u64, Unsealer), LinkError> {
    let handshake = link::accept_link(reader, hello, ctx.keys.as_deref());
    tokio::time::timeout(ctx.connect_timeout, handshake)
        .await
        .map_err(|_| LinkError::Timeout)?
}

/// The frame read, or `None` when the connection is over: closed by the peer, failed, or
/// malformed (counted).
fn frame_or_close<T>(
    read: Result<Option<T>, FrameError>,
    from: SocketAddr,
    ctx: &InboundCtx,
) -> Option<T> {
    match read {
        Ok(Some(frame)) => Some(frame),
        Ok(None) => {
            tracing::debug!(%from, "inbound connection closed by peer");
            None
        }
        Err(error @ (FrameError::TooLarge { .. } | FrameError::Truncated)) => {
            add(&ctx.counters.malformed, 1);
            tracing::warn!(%from, %error, "closing inbound connection: malformed frame stream");
            None
        }
        Err(FrameError::Io(error)) => {
            tracing::debug!(%from, %error, "inbound connection failed");
            None
        }
    }
}

/// Hands one frame to the consumer; false when the connection should end (shutdown, or nobody
/// reads any more).
async fn deliver(
    frame: Vec<u8>,
    reserved: Reserved,
    from: SocketAddr,
    link: Option<u64>,
    ctx: &InboundCtx,
    lifetime: &mut Lifetime,
) -> bool {
    // Counted before delivery, so a consumer that got the frame sees it counted.
    add(&ctx.counters.frames_received, 1);
    let inbound = Inbound {
        from,
        frame,
        link,
        reserved,
    };
    tokio::select! {
        _ = lifetime.stopped() => false,
        sent = ctx.deliver.send(inbound) => sent.is_ok(),
    }
}
