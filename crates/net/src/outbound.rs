//! One task per destination: connects lazily, authenticates the connection when the
//! destination is a known node, sends queued frames in order, reconnects with capped
//! exponential backoff.
//!
//! Outbound connections only carry frames away from us (past the link handshake's reply); the
//! task also watches the read side so that a peer that closed (e.g. restarted, or refused our
//! link) is noticed at once rather than at the next write, which TCP would accept into the dead
//! connection's buffer and lose.

use crate::config::TransportConfig;
use crate::frame;
use crate::link::{self, LinkKeys, Sealer};
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
    /// This node's link keys: connections to the nodes they name are authenticated.
    pub keys: Option<Arc<dyn LinkKeys>>,
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
            connected = establish(&peer) => connected,
        };
        let delivered_some = match connected {
            Ok((stream, sealer)) => {
                let counter = if ever_connected {
                    &peer.counters.reconnects
                } else {
                    &peer.counters.connects
                };
                add(counter, 1);
                tracing::debug!(to = %peer.to, reconnect = ever_connected, "outbound connection up");
                ever_connected = true;
                failures_in_a_row = 0;
                outbox.start(sealer, peer.config.max_frame);
                match pump(stream, &mut peer, &mut outbox, &mut lifetime).await {
                    Pumped::Stop => return,
                    Pumped::Broken { error, sent_any } => {
                        tracing::debug!(to = %peer.to, %error, "outbound connection lost");
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

/// Opens a connection to the peer and, when our keys name the node listening there, runs the
/// link handshake on it (bounded by `connect_timeout` too); returns the sealer for an
/// authenticated connection. A failed handshake counts as a failed connection attempt.
async fn establish(peer: &Peer) -> io::Result<(TcpStream, Option<Sealer>)> {
    let mut stream = connect(peer.to, &peer.config).await?;
    let Some(keys) = &peer.keys else {
        return Ok((stream, None));
    };
    let Some(acceptor) = keys.identity_at(peer.to) else {
        return Ok((stream, None));
    };
    let handshake = link::open_link(&mut stream, keys.as_ref(), acceptor);
    let sealer = tokio::time::timeout(peer.config.connect_timeout, handshake)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "link handshake timed out"))?
        .map_err(|error| {
            io::Error::other(format!("link handshake with node {acceptor}: {error}"))
        })?;
    tracing::trace!(to = %peer.to, acceptor, "link handshake done");
    Ok((stream, Some(sealer)))
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
/// opened (beyond the link reply, read before this is first called), so any data is a protocol
/// violation and also ends the connection.
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
///
/// Frames are encoded for the current connection: sealed with its link key and sequence
/// numbers, or plain. A new connection has a new key and starts at sequence number 0, so
/// [`start`](Outbox::start) re-encodes the frames not yet completely written (the payload is
/// recovered from the encoded frame: no second copy is kept). Frames pushed between two
/// connections are encoded for the last one and re-encoded likewise.
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
    /// How `buf[done..]` is encoded: sealed by this, or plain.
    sealer: Option<Sealer>,
}

impl Outbox {
    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Appends one frame. Oversized frames were refused by `send`; one that slips through is
    /// dropped here rather than poisoning the stream.
    fn push(&mut self, payload: &[u8], max: usize) {
        let encoded = match &mut self.sealer {
            None => frame::encode_into(&mut self.buf, payload, max),
            Some(sealer) => sealer.seal_frame_into(&mut self.buf, payload, max),
        };
        match encoded {
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

    /// A new connection, authenticated by `sealer` or plain: the frame the last connection cut
    /// starts over, and every frame not completely written is encoded anew for this one.
    fn start(&mut self, sealer: Option<Sealer>, max: usize) {
        self.written = self.done;
        let old_tag = match self.sealer {
            Some(_) => link::TAG_LEN,
            None => 0,
        };
        self.sealer = sealer;
        if old_tag == 0 && self.sealer.is_none() {
            // Plain frames are valid on any plain connection as they are.
            return;
        }
        let old = std::mem::take(&mut self.buf);
        let ends = std::mem::take(&mut self.ends);
        let mut start = self.done;
        self.written = 0;
        self.done = 0;
        for end in ends {
            // Our own encoding: a header, the payload, then the old tag if any.
            self.push(&old[start + frame::HEADER_LEN..end - old_tag], max);
            start = end;
        }
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
        outbox.start(None, 64);
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

    fn key(secret: &[u8]) -> link::LinkKey {
        link::derive_key(secret, b"transcript").unwrap()
    }

    /// Opens sealed frames in order with `key`, as the receiver of a new connection does.
    fn open_all(key: link::LinkKey, bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut unsealer = link::Unsealer::new(key);
        frames(bytes)
            .into_iter()
            .map(|f| unsealer.open(f).expect("tag valid for this connection"))
            .collect()
    }

    #[test]
    fn frames_not_completely_written_are_sealed_anew_for_each_connection() {
        let (tx, mut rx) = mpsc::channel(8);
        let mut outbox = Outbox::default();
        // Queued before the first connection: encoded plain, sealed once it is up.
        outbox.push(b"aaaa", 64);
        outbox.start(Some(Sealer::new(key(b"one"))), 64);
        for f in [&b"bb"[..], b"cccccc"] {
            tx.try_send(f.to_vec()).unwrap();
        }
        outbox.fill_from(&mut rx, 64);
        assert_eq!(
            open_all(key(b"one"), outbox.unwritten()),
            vec![b"aaaa".to_vec(), b"bb".to_vec(), b"cccccc".to_vec()]
        );
        // The first connection takes "aaaa" whole and part of "bb", then breaks.
        let first = HEADER_LEN + 4 + link::TAG_LEN;
        assert_eq!(outbox.advance(first + 3), 1);
        // Pushed between connections.
        tx.try_send(b"d".to_vec()).unwrap();
        outbox.fill_from(&mut rx, 64);
        // The next connection has another key and starts at sequence number 0: the cut frame
        // is resent whole, and every unsent frame carries a tag valid there.
        outbox.start(Some(Sealer::new(key(b"two"))), 64);
        let expected = vec![b"bb".to_vec(), b"cccccc".to_vec(), b"d".to_vec()];
        assert_eq!(open_all(key(b"two"), outbox.unwritten()), expected);
        // A plain connection next: the same frames without tags.
        outbox.start(None, 64);
        assert_eq!(frames(outbox.unwritten()), expected);
        // Frames pushed while it is up are plain too, and the batch drains completely.
        outbox.push(b"e", 64);
        assert_eq!(frames(outbox.unwritten()).last().unwrap(), b"e");
        let all = outbox.unwritten().len();
        assert_eq!(outbox.advance(all), 4);
        assert!(outbox.is_empty());
    }

    #[test]
    fn frames_pushed_on_an_authenticated_connection_are_sealed_in_sequence() {
        let mut outbox = Outbox::default();
        outbox.start(Some(Sealer::new(key(b"k"))), 8);
        outbox.push(b"one", 8);
        let mut written = outbox.unwritten().to_vec();
        assert_eq!(outbox.advance(written.len()), 1);
        outbox.push(&[0; 9], 8); // oversized: dropped, consumes no sequence number
        outbox.push(b"two", 8);
        outbox.push(&[7; 8], 8); // the limit applies to the payload, not payload + tag
        written.extend_from_slice(outbox.unwritten());
        assert_eq!(
            open_all(key(b"k"), &written),
            vec![b"one".to_vec(), b"two".to_vec(), vec![7; 8]]
        );
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
