//! One task per destination: connects lazily, sends queued frames in order, reconnects with
//! capped exponential backoff.
//!
//! Outbound connections only carry frames away from us; the task also watches the read side so
//! that a peer that closed (e.g. restarted) is noticed at once rather than at the next write,
//! which TCP would accept into the dead connection's buffer and lose.

use crate::config::TransportConfig;
use crate::frame;
use crate::stats::{add, Counters};
use crate::task::Lifetime;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Frames are gathered from the queue into one buffer of about this size per write, so that a
/// burst of small messages costs few system calls while an idle peer gets each frame at once.
const BATCH_BYTES: usize = 256 * 1024;

/// What one destination's task needs.
#[derive(Debug)]
pub(crate) struct Peer {
    pub to: SocketAddr,
    pub queue: mpsc::Receiver<Vec<u8>>,
    pub config: TransportConfig,
    pub counters: Arc<Counters>,
}

/// Runs until shutdown or until the queue's sender is gone (the transport was dropped).
pub(crate) async fn run(mut peer: Peer, mut lifetime: Lifetime) {
    let mut outbox = Outbox::default();
    let mut backoff = Backoff::new(
        peer.config.connect_backoff_min,
        peer.config.connect_backoff_max,
    );
    let mut ever_connected = false;
    let mut failures_in_a_row = 0u32;
    loop {
        // Lazy: a connection is opened only when there is something to send.
        if outbox.is_empty() {
            tokio::select! {
                _ = lifetime.stopped() => return,
                next = peer.queue.recv() => match next {
                    Some(frame) => outbox.push(&frame, peer.config.max_frame),
                    None => return,
                },
            }
            if outbox.is_empty() {
                continue;
            }
        }
        let connected = tokio::select! {
            _ = lifetime.stopped() => return,
            connected = connect(peer.to, &peer.config) => connected,
        };
        let delivered_some = match connected {
            Ok(stream) => {
                let counter = if ever_connected {
                    &peer.counters.reconnects
                } else {
                    &peer.counters.connects
                };
                add(counter, 1);
                tracing::debug!(to = %peer.to, reconnect = ever_connected, "outbound connection up");
                ever_connected = true;
                failures_in_a_row = 0;
                match pump(stream, &mut peer, &mut outbox, &mut lifetime).await {
                    Pumped::Stop => return,
                    Pumped::Broken { error, sent_any } => {
                        tracing::debug!(to = %peer.to, %error, "outbound connection lost");
                        outbox.rewind();
                        sent_any
                    }
                }
            }
            Err(error) => {
                add(&peer.counters.connect_failures, 1);
                failures_in_a_row += 1;
                if failures_in_a_row == 1 {
                    tracing::warn!(to = %peer.to, %error, "cannot connect; retrying with backoff");
                } else {
                    tracing::debug!(to = %peer.to, %error, failures_in_a_row, "cannot connect");
                }
                false
            }
        };
        if delivered_some {
            // A connection that worked and then broke (a restart): retry at once.
            backoff.reset();
        } else {
            // Refused, timed out, or closed before taking a frame: wait before trying again.
            tokio::select! {
                _ = lifetime.stopped() => return,
                _ = tokio::time::sleep(backoff.next_delay()) => {}
            }
        }
    }
}

async fn connect(to: SocketAddr, config: &TransportConfig) -> io::Result<TcpStream> {
    let stream = tokio::time::timeout(config.connect_timeout, TcpStream::connect(to))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connection attempt timed out"))??;
    // Frames are already batched; do not let Nagle delay the last one of a burst.
    stream.set_nodelay(true)?;
    set_stall_timeout(&stream, config.stall_timeout)?;
    Ok(stream)
}

/// Gives the connection up (the next write or read fails with `ETIMEDOUT`) once written data
/// stays unacknowledged for `timeout`, so that [`run`] re-opens it instead of leaving delivery
/// to TCP's exponentially spaced retransmissions across a partition
/// ([`TransportConfig::stall_timeout`]).
fn set_stall_timeout(stream: &TcpStream, timeout: Duration) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // Validated: 1 ms to u32::MAX ms.
    let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
    // SAFETY: setsockopt(2) on a socket we own, with a pointer to a live u32 and its size.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&ms as *const u32).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// How a connection's pump ended.
enum Pumped {
    /// Shutdown, or the transport is gone.
    Stop,
    /// The connection failed; `sent_any` tells whether it delivered at least one frame.
    Broken { error: io::Error, sent_any: bool },
}

/// Writes queued frames to one connection until it breaks.
async fn pump(
    stream: TcpStream,
    peer: &mut Peer,
    outbox: &mut Outbox,
    lifetime: &mut Lifetime,
) -> Pumped {
    let (mut read_half, mut write_half) = stream.into_split();
    let mut sent_any = false;
    loop {
        if outbox.is_empty() {
            // Biased: a closure already seen is handled before taking frames that would be
            // written into the dead connection.
            tokio::select! {
                biased;
                _ = lifetime.stopped() => return Pumped::Stop,
                error = peer_closed(&mut read_half) => return Pumped::Broken { error, sent_any },
                next = peer.queue.recv() => match next {
                    Some(frame) => outbox.push(&frame, peer.config.max_frame),
                    None => return Pumped::Stop,
                },
            }
        }
        outbox.fill_from(&mut peer.queue, peer.config.max_frame);
        if outbox.is_empty() {
            continue;
        }
        // `write` is cancel-safe: when another branch wins, nothing was written. Biased as above.
        let written = tokio::select! {
            biased;
            _ = lifetime.stopped() => return Pumped::Stop,
            error = peer_closed(&mut read_half) => return Pumped::Broken { error, sent_any },
            written = write_half.write(outbox.unwritten()) => written,
        };
        match written {
            Ok(0) => {
                let error = io::Error::new(io::ErrorKind::WriteZero, "connection took no bytes");
                return Pumped::Broken { error, sent_any };
            }
            Ok(n) => {
                let done = outbox.advance(n);
                if done > 0 {
                    add(&peer.counters.frames_sent, done);
                    sent_any = true;
                }
            }
            Err(error) => return Pumped::Broken { error, sent_any },
        }
    }
}

/// Completes when the peer closes or resets the connection. Peers never write on a connection we
/// opened, so any data is a protocol violation and also ends the connection.
async fn peer_closed(read_half: &mut OwnedReadHalf) -> io::Error {
    let mut buf = [0u8; 64];
    match read_half.read(&mut buf).await {
        Ok(0) => io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed the connection"),
        Ok(_) => io::Error::new(
            io::ErrorKind::InvalidData,
            "peer sent data on an outbound-only connection",
        ),
        Err(error) => error,
    }
}

/// Encoded frames waiting for one connection, with their boundaries, so that after a failure
/// the frame that was cut is resent whole on the next connection and frames already handed to
/// the kernel are not resent (no duplicates from the transport itself).
#[derive(Debug, Default)]
struct Outbox {
    /// Encoded frames: `buf[..done]` are sent, `buf[written..]` not yet written.
    buf: Vec<u8>,
    /// End offset in `buf` of each frame not yet completely written, in order.
    ends: VecDeque<usize>,
    /// Bytes of `buf` handed to the current connection.
    written: usize,
    /// End of the last completely written frame.
    done: usize,
}

impl Outbox {
    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Appends one frame. Oversized frames were refused by `send`; one that slips through is
    /// dropped here rather than poisoning the stream.
    fn push(&mut self, payload: &[u8], max: usize) {
        match frame::encode_into(&mut self.buf, payload, max) {
            Ok(()) => self.ends.push_back(self.buf.len()),
            Err(error) => tracing::warn!(%error, "dropping an oversized outbound frame"),
        }
    }

    /// Moves frames already waiting in `queue` into the outbox, up to about [`BATCH_BYTES`]
    /// unwritten, first discarding the bytes of completed frames.
    fn fill_from(&mut self, queue: &mut mpsc::Receiver<Vec<u8>>, max: usize) {
        if self.done > 0 {
            self.buf.drain(..self.done);
            for end in &mut self.ends {
                *end -= self.done;
            }
            self.written -= self.done;
            self.done = 0;
        }
        while self.buf.len() - self.written < BATCH_BYTES {
            match queue.try_recv() {
                Ok(frame) => self.push(&frame, max),
                Err(_) => break,
            }
        }
    }

    fn unwritten(&self) -> &[u8] {
        &self.buf[self.written..]
    }

    /// Records `n` more bytes written; returns how many frames that completed.
    fn advance(&mut self, n: usize) -> u64 {
        self.written += n;
        let mut completed = 0;
        while let Some(&end) = self.ends.front() {
            if end > self.written {
                break;
            }
            self.ends.pop_front();
            self.done = end;
            completed += 1;
        }
        if self.ends.is_empty() {
            self.buf.clear();
            self.written = 0;
            self.done = 0;
        }
        completed
    }

    /// After a broken connection: the partly written frame starts over on the next one.
    fn rewind(&mut self) {
        self.written = self.done;
    }
}

/// Exponential backoff between connection attempts, capped so that a peer that comes back is
/// reached within `max`.
#[derive(Debug)]
struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            next: min,
        }
    }

    fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        delay
    }

    fn reset(&mut self) {
        self.next = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::HEADER_LEN;

    fn frames(bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut r = bytes;
        while r.len() >= HEADER_LEN {
            let len = u32::from_be_bytes([r[0], r[1], r[2], r[3]]) as usize;
            out.push(r[HEADER_LEN..HEADER_LEN + len].to_vec());
            r = &r[HEADER_LEN + len..];
        }
        out
    }

    #[test]
    fn a_cut_frame_is_resent_whole_and_completed_ones_are_not() {
        let (tx, mut rx) = mpsc::channel(8);
        for f in [&b"aaaa"[..], b"bb", b"cccccc"] {
            tx.try_send(f.to_vec()).unwrap();
        }
        let mut outbox = Outbox::default();
        outbox.fill_from(&mut rx, 64);
        // First connection takes "aaaa" whole and 3 bytes of "bb"'s frame, then breaks.
        assert_eq!(outbox.advance(HEADER_LEN + 4 + 3), 1);
        outbox.rewind();
        tx.try_send(b"d".to_vec()).unwrap();
        outbox.fill_from(&mut rx, 64);
        assert_eq!(
            frames(outbox.unwritten()),
            vec![b"bb".to_vec(), b"cccccc".to_vec(), b"d".to_vec()]
        );
        let all = outbox.unwritten().len();
        assert_eq!(outbox.advance(all), 3);
        assert!(outbox.is_empty());
        assert!(outbox.unwritten().is_empty());
    }

    #[test]
    fn oversized_frames_never_enter_the_outbox() {
        let mut outbox = Outbox::default();
        outbox.push(&[0; 9], 8);
        assert!(outbox.is_empty());
        assert!(outbox.unwritten().is_empty());
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_resets() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(10), ms(35));
        let delays: Vec<_> = (0..5).map(|_| b.next_delay()).collect();
        assert_eq!(delays, vec![ms(10), ms(20), ms(35), ms(35), ms(35)]);
        b.reset();
        assert_eq!(b.next_delay(), ms(10));
    }
}
