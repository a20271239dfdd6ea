//! The accept loop and one read loop per inbound connection.
//!
//! Inbound connections only carry frames towards us. Each read loop reads frames of at most
//! `max_frame` bytes and hands them to the single inbound receiver; a bad stream (oversized
//! length prefix, garbage, a frame cut short) closes that connection alone and is counted.

use crate::frame::{self, FrameError};
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

/// Reads frames from one connection until it ends, turns bad, shutdown, or the receiver goes.
async fn read_loop(stream: TcpStream, from: SocketAddr, ctx: InboundCtx, mut lifetime: Lifetime) {
    let mut reader = BufReader::with_capacity(READ_BUFFER, stream);
    loop {
        let read = tokio::select! {
            _ = lifetime.stopped() => return,
            read = frame::read_frame(&mut reader, ctx.max_frame) => read,
        };
        match read {
            Ok(Some(frame)) => {
                // Counted before delivery, so a consumer that got the frame sees it counted.
                add(&ctx.counters.frames_received, 1);
                let delivered = tokio::select! {
                    _ = lifetime.stopped() => return,
                    sent = ctx.deliver.send(Inbound { from, frame }) => sent.is_ok(),
                };
                if !delivered {
                    return;
                }
            }
            Ok(None) => {
                tracing::debug!(%from, "inbound connection closed by peer");
                return;
            }
            Err(error @ (FrameError::TooLarge { .. } | FrameError::Truncated)) => {
                add(&ctx.counters.malformed, 1);
                tracing::warn!(%from, %error, "closing inbound connection: malformed frame stream");
                return;
            }
            Err(FrameError::Io(error)) => {
                tracing::debug!(%from, %error, "inbound connection failed");
                return;
            }
        }
    }
}
