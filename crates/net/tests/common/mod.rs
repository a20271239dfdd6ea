//! What the transport tests share: bounded waits for expected events (nothing sleeps for an
//! event it could await) and numbered frames whose contents are checked on arrival.

use net::{Inbound, Transport};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc::Receiver;
use tokio::time::timeout;

/// Upper bound for any single expected event.
pub const WAIT: Duration = Duration::from_secs(10);

pub async fn recv(rx: &mut Receiver<Inbound>) -> Inbound {
    timeout(WAIT, rx.recv())
        .await
        .expect("timed out waiting for a frame")
        .expect("inbound channel closed")
}

/// Polls a condition that has no event to await (counters), up to [`WAIT`].
pub async fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits until the acceptor closes `stream` (EOF, or a reset if our bytes were unread) without
/// writing anything more, proving the connection was dropped.
pub async fn expect_closed(mut stream: TcpStream) {
    let mut buf = [0u8; 64];
    let read = timeout(WAIT, stream.read(&mut buf))
        .await
        .expect("the acceptor kept the connection open");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "the acceptor wrote {read:?} bytes"
    );
}

/// A frame carrying sequence number `seq`, with a length that varies with it (including the
/// 8-byte minimum and, now and then, a frame larger than one write batch).
pub fn numbered(seq: u64) -> Vec<u8> {
    let pad = match seq % 1000 {
        999 => 300 * 1024,
        n => (n % 97) as usize * 13,
    };
    let mut frame = seq.to_be_bytes().to_vec();
    frame.extend((0..pad).map(|i| (seq as usize + i) as u8));
    frame
}

/// Sequence number of a [`numbered`] frame, checking its contents.
pub fn seq_of(frame: &[u8]) -> u64 {
    let seq = u64::from_be_bytes(frame[..8].try_into().unwrap());
    assert_eq!(frame, numbered(seq), "frame {seq} corrupted");
    seq
}

/// Once `to` went down, keeps sending [`numbered`] frames from `first` until `from` notices
/// (a failed connection attempt); returns the next sequence number. Frames written before it
/// notices are taken by TCP into the dead connection and lost (the protocol retransmits); once
/// it has noticed, its attempts fail and the frames wait in its queue.
pub async fn send_until_down(from: &Transport, to: SocketAddr, first: u64) -> u64 {
    let mut seq = first;
    let deadline = Instant::now() + WAIT;
    while from.stats().connect_failures == 0 {
        assert!(
            Instant::now() < deadline,
            "the sender never found its peer down"
        );
        from.send(to, numbered(seq));
        seq += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    seq
}
