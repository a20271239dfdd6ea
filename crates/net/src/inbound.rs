//! The accept loop and one read loop per inbound connection.
//!
//! Inbound connections carry frames towards us; we write on them only to answer a link hello.
//! Each read loop reads frames of at most `max_frame` bytes and hands them to the single inbound
//! receiver; a bad stream (oversized length prefix, garbage, a frame cut short) closes that
//! connection alone and is counted. A connection whose first frame is a link hello is
//! authenticated first ([`crate::link`]): its frames are delivered only if their tags check,
//! with the opener's identity; any failure closes it and counts `link_refused`.

use crate::frame::{self, FrameError};
use crate::link::{self, LinkError, LinkKeys, Unsealer};
use crate::stats::{add, Counters};
use crate::task::Lifetime;
use crate::Inbound;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Read buffer per connection: many small protocol messages are read per system call, while
/// payloads larger than this bypass it.
const READ_BUFFER: usize = 16 * 1024;

/// Pause after a failed `accept` (typically out of file descriptors) so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// What every read loop needs.
#[derive(Debug, Clone)]
pub(crate) struct InboundCtx {
    pub deliver: mpsc::Sender<Inbound>,
    pub counters: Arc<Counters>,
    pub max_frame: usize,
    /// This node's link keys; without them every hello is refused.
    pub keys: Option<Arc<dyn LinkKeys>>,
    /// How long an opener may take to complete its handshake once it sent its hello.
    pub handshake_timeout: Duration,
}

/// Accepts connections until shutdown, or until the inbound receiver is dropped (nobody would
/// read what arrives).
pub(crate) async fn accept_loop(listener: TcpListener, ctx: InboundCtx, mut lifetime: Lifetime) {
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
        add(&ctx.counters.accepted, 1);
        tracing::debug!(%from, "inbound connection");
        let ctx = ctx.clone();
        lifetime
            .clone()
            .spawn(move |lifetime| read_loop(stream, from, ctx, lifetime));
    }
}

/// The connection's authenticated opener and the state checking its frames' tags.
struct Link {
    opener: u64,
    unsealer: Unsealer,
}

/// Reads frames from one connection until it ends, turns bad, shutdown, or the receiver goes.
async fn read_loop(stream: TcpStream, from: SocketAddr, ctx: InboundCtx, mut lifetime: Lifetime) {
    let mut reader = BufReader::with_capacity(READ_BUFFER, stream);
    // The first frame tells a link hello from a plain connection's first frame; a hello may be
    // longer than a (tiny) max_frame, so the limit is checked after telling them apart.
    let first_max = ctx.max_frame.max(link::HELLO_LEN);
    let first = tokio::select! {
        _ = lifetime.stopped() => return,
        read = frame::read_frame(&mut reader, first_max) => read,
    };
    let Some(first) = frame_or_close(first, from, &ctx) else {
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
                link = Some(Link { opener, unsealer });
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
    } else if !deliver(first, from, None, &ctx, &mut lifetime).await {
        return;
    }
    let max = match link {
        Some(_) => ctx.max_frame + link::TAG_LEN,
        None => ctx.max_frame,
    };
    loop {
        let read = tokio::select! {
            _ = lifetime.stopped() => return,
            read = frame::read_frame(&mut reader, max) => read,
        };
        let Some(frame) = frame_or_close(read, from, &ctx) else {
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
        if !deliver(frame, from, opener, &ctx, &mut lifetime).await {
            return;
        }
    }
}

/// The acceptor's side of the handshake, bounded by the handshake timeout.
async fn accept(
    reader: &mut BufReader<TcpStream>,
    hello: &[u8],
    ctx: &InboundCtx,
) -> Result<(u64, Unsealer), LinkError> {
    let handshake = link::accept_link(reader, hello, ctx.keys.as_deref());
    tokio::time::timeout(ctx.handshake_timeout, handshake)
        .await
        .map_err(|_| LinkError::Timeout)?
}

/// The frame read, or `None` when the connection is over: closed by the peer, failed, or
/// malformed (counted).
fn frame_or_close(
    read: Result<Option<Vec<u8>>, FrameError>,
    from: SocketAddr,
    ctx: &InboundCtx,
) -> Option<Vec<u8>> {
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
    from: SocketAddr,
    link: Option<u64>,
    ctx: &InboundCtx,
    lifetime: &mut Lifetime,
) -> bool {
    // Counted before delivery, so a consumer that got the frame sees it counted.
    add(&ctx.counters.frames_received, 1);
    let inbound = Inbound { from, frame, link };
    tokio::select! {
        _ = lifetime.stopped() => false,
        sent = ctx.deliver.send(inbound) => sent.is_ok(),
    }
}
