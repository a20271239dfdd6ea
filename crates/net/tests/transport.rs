//! The transport over real TCP on 127.0.0.1, ports chosen by the OS. Timeouts only bound how long
//! an expected event may take; nothing sleeps for an event it could await.

mod common;

use common::{expect_closed, numbered, recv, send_until_down, seq_of, wait_until, WAIT};
use net::metrics::{render, Registry, TransportMetrics};
use net::testing::unused_loopback_addr;
use net::{Inbound, InboundConnections, Transport, TransportConfig};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc::Receiver;
use tokio::time::timeout;

fn config() -> TransportConfig {
    TransportConfig {
        connect_backoff_min: Duration::from_millis(5),
        connect_backoff_max: Duration::from_millis(50),
        ..TransportConfig::default()
    }
}

async fn bind_at(addr: SocketAddr, config: TransportConfig) -> (Transport, Receiver<Inbound>) {
    Transport::bind(addr, config).await.unwrap()
}

async fn bind(config: TransportConfig) -> (Transport, Receiver<Inbound>) {
    bind_at("127.0.0.1:0".parse().unwrap(), config).await
}

/// Receives `n` numbered frames and checks they are 0..n in order, from a loopback address.
async fn receive_in_order(rx: &mut Receiver<Inbound>, n: u64) {
    for expected in 0..n {
        let inbound = recv(rx).await;
        assert!(inbound.from.ip().is_loopback());
        assert_eq!(seq_of(&inbound.frame), expected);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_many_frames_in_order_both_ways() {
    const N: u64 = 5000;
    let cfg = TransportConfig {
        queue_per_peer: N as usize,
        ..config()
    };
    let (a, mut a_rx) = bind(cfg.clone()).await;
    let (b, mut b_rx) = bind(cfg).await;
    for seq in 0..N {
        a.send(b.local_addr(), numbered(seq));
        b.send(a.local_addr(), numbered(seq));
    }
    tokio::join!(
        receive_in_order(&mut a_rx, N),
        receive_in_order(&mut b_rx, N)
    );

    for t in [&a, &b] {
        wait_until("all frames are counted as sent", || {
            t.stats().frames_sent == N
        })
        .await;
        let s = t.stats();
        assert_eq!(s.frames_received, N);
        assert_eq!((s.dropped, s.malformed, s.oversized), (0, 0, 0));
        assert_eq!((s.connects, s.reconnects, s.accepted), (1, 0, 1));
    }
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn peer_down_at_first_gets_the_frames_queued_before_it_came_up() {
    let (a, _a_rx) = bind(config()).await;
    let b_addr = unused_loopback_addr();
    for seq in 0..200 {
        a.send(b_addr, numbered(seq));
    }
    wait_until("a retried the absent peer with backoff", || {
        a.stats().connect_failures >= 3
    })
    .await;

    let (b, mut b_rx) = bind_at(b_addr, config()).await;
    for expected in 0..200 {
        assert_eq!(seq_of(&recv(&mut b_rx).await.frame), expected);
    }
    let s = a.stats();
    assert_eq!((s.connects, s.reconnects, s.dropped), (1, 0, 0));
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn peer_restarting_mid_stream_gets_later_frames_once_back() {
    let (a, _a_rx) = bind(config()).await;
    let (b1, mut b1_rx) = bind(config()).await;
    let b_addr = b1.local_addr();
    for seq in 0..100 {
        a.send(b_addr, numbered(seq));
    }
    for expected in 0..100 {
        assert_eq!(seq_of(&recv(&mut b1_rx).await.frame), expected);
    }

    // B goes down; shutdown returns once its sockets are closed.
    b1.shutdown().await;
    drop(b1_rx);
    // Keep sending while it is down.
    let queued_while_down = send_until_down(&a, b_addr, 100).await;

    // B comes back on the same address: frames queued while it was down and every later frame
    // arrive, in order.
    let (b2, mut b2_rx) = bind_at(b_addr, config()).await;
    let last = queued_while_down + 100;
    for seq in queued_while_down..last {
        a.send(b_addr, numbered(seq));
    }
    let mut received = Vec::new();
    while received.last() != Some(&(last - 1)) {
        received.push(seq_of(&recv(&mut b2_rx).await.frame));
    }
    assert!(received.windows(2).all(|w| w[0] < w[1]), "out of order");
    assert!(received.ends_with(&(queued_while_down..last).collect::<Vec<_>>()));
    assert_eq!(a.stats().reconnects, 1);
    a.shutdown().await;
    b2.shutdown().await;
}

#[tokio::test]
async fn malformed_inbound_streams_are_closed_and_counted_others_keep_working() {
    const MAX: usize = 1024;
    let cfg = TransportConfig {
        max_frame: MAX,
        ..config()
    };
    let (a, _a_rx) = bind(cfg.clone()).await;
    let (b, mut b_rx) = bind(cfg).await;
    a.send(b.local_addr(), b"before".to_vec());
    assert_eq!(recv(&mut b_rx).await.frame, b"before");

    let raw = || TcpStream::connect(b.local_addr());

    // A frame of exactly the limit is fine.
    let mut ok = raw().await.unwrap();
    ok.write_all(&(MAX as u32).to_be_bytes()).await.unwrap();
    ok.write_all(&[9; MAX]).await.unwrap();
    assert_eq!(recv(&mut b_rx).await.frame, vec![9; MAX]);

    // One byte over the limit.
    let mut oversized = raw().await.unwrap();
    oversized
        .write_all(&(MAX as u32 + 1).to_be_bytes())
        .await
        .unwrap();
    expect_closed(oversized).await;

    // Garbage: read as a length prefix of about 1.2 GB, refused without allocating it.
    let mut garbage = raw().await.unwrap();
    garbage
        .write_all(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n")
        .await
        .unwrap();
    expect_closed(garbage).await;

    // A frame announced at 100 bytes whose stream ends after 10.
    let mut truncated = raw().await.unwrap();
    truncated.write_all(&100u32.to_be_bytes()).await.unwrap();
    truncated.write_all(&[1; 10]).await.unwrap();
    truncated.shutdown().await.unwrap();
    expect_closed(truncated).await;

    // A header cut short.
    let mut short_header = raw().await.unwrap();
    short_header.write_all(&[0, 0]).await.unwrap();
    short_header.shutdown().await.unwrap();
    expect_closed(short_header).await;

    wait_until("four malformed streams are counted", || {
        b.stats().malformed == 4
    })
    .await;

    // The well-behaved connections were not disturbed.
    a.send(b.local_addr(), b"after".to_vec());
    assert_eq!(recv(&mut b_rx).await.frame, b"after");
    ok.write_all(&3u32.to_be_bytes()).await.unwrap();
    ok.write_all(b"raw").await.unwrap();
    assert_eq!(recv(&mut b_rx).await.frame, b"raw");
    let s = b.stats();
    assert_eq!((s.malformed, s.frames_received, s.accepted), (4, 4, 6));
    assert_eq!(a.stats().reconnects, 0);
    a.shutdown().await;
    b.shutdown().await;
}

/// Writes one plain frame on a raw connection.
async fn write_raw_frame(stream: &mut TcpStream, payload: &[u8]) {
    stream
        .write_all(&(payload.len() as u32).to_be_bytes())
        .await
        .unwrap();
    stream.write_all(payload).await.unwrap();
}

/// The transport's `transport_*` metrics as a scrape would show them now.
fn scrape(t: &Transport) -> String {
    let mut registry = Registry::default();
    TransportMetrics::register(&mut registry).update(t);
    render(&registry)
}

/// Asserts that `t`'s metrics say each `name value`.
fn assert_metrics(t: &Transport, expected: &[(&str, u64)]) {
    let text = scrape(t);
    for (name, value) in expected {
        let line = format!("{name} {value}\n");
        assert!(text.contains(&line), "no {line:?} in {text}");
    }
}

#[tokio::test]
async fn a_connection_without_a_whole_first_frame_in_time_is_closed_and_counted() {
    let cfg = TransportConfig {
        connect_timeout: Duration::from_millis(200),
        ..config()
    };
    let (b, mut b_rx) = bind(cfg).await;
    let raw = || TcpStream::connect(b.local_addr());

    // A correct opener sends its first frame at once, and its connection stays open past the
    // deadline of the others (accepted later).
    let mut ok = raw().await.unwrap();
    write_raw_frame(&mut ok, b"first").await;
    assert_eq!(recv(&mut b_rx).await.frame, b"first");
    // Says nothing at all.
    let silent = raw().await.unwrap();
    // Announces a frame of 100 bytes and sends 10 of them.
    let mut partial = raw().await.unwrap();
    partial.write_all(&100u32.to_be_bytes()).await.unwrap();
    partial.write_all(&[1; 10]).await.unwrap();
    // Sends two bytes of a length prefix.
    let mut short_header = raw().await.unwrap();
    short_header.write_all(&[0, 0]).await.unwrap();
    for stream in [silent, partial, short_header] {
        expect_closed(stream).await;
    }
    wait_until("the three are counted", || {
        b.stats().first_frame_timeouts == 3
    })
    .await;
    let open = InboundConnections { open: 1, plain: 1 };
    wait_until("only the correct one is open", || {
        b.inbound_connections() == open
    })
    .await;

    write_raw_frame(&mut ok, b"second").await;
    assert_eq!(recv(&mut b_rx).await.frame, b"second");
    let s = b.stats();
    assert_eq!((s.accepted, s.malformed, s.frames_received), (4, 0, 2));
    assert_metrics(
        &b,
        &[
            ("transport_first_frame_timeouts", 3),
            ("transport_accepted", 4),
            ("transport_inbound_connections", 1),
            ("transport_plain_connections", 1),
        ],
    );
    b.shutdown().await;
}

#[tokio::test]
async fn connections_beyond_the_plain_cap_are_closed_at_once_and_counted() {
    let cfg = TransportConfig {
        max_plain_connections: 2,
        ..config()
    };
    let (a, _a_rx) = bind(config()).await;
    let (b, mut b_rx) = bind(cfg).await;
    // Two plain connections: a transport's, and a raw one.
    a.send(b.local_addr(), b"from a".to_vec());
    assert_eq!(recv(&mut b_rx).await.frame, b"from a");
    let mut raw = TcpStream::connect(b.local_addr()).await.unwrap();
    write_raw_frame(&mut raw, b"raw").await;
    assert_eq!(recv(&mut b_rx).await.frame, b"raw");

    // Beyond the cap each new connection is closed at once, before it sends anything.
    for _ in 0..3 {
        expect_closed(TcpStream::connect(b.local_addr()).await.unwrap()).await;
    }
    wait_until("the three are counted", || {
        b.stats().connections_refused == 3
    })
    .await;
    assert_eq!(
        b.inbound_connections(),
        InboundConnections { open: 2, plain: 2 }
    );

    // Once one closes, its place is free again.
    drop(raw);
    wait_until("the closed one no longer counts", || {
        b.inbound_connections().plain == 1
    })
    .await;
    let mut again = TcpStream::connect(b.local_addr()).await.unwrap();
    write_raw_frame(&mut again, b"again").await;
    assert_eq!(recv(&mut b_rx).await.frame, b"again");
    // The connections within the cap were never disturbed.
    a.send(b.local_addr(), b"still here".to_vec());
    assert_eq!(recv(&mut b_rx).await.frame, b"still here");
    assert_eq!(a.stats().reconnects, 0);

    let s = b.stats();
    assert_eq!((s.accepted, s.connections_refused), (3, 3));
    assert_metrics(
        &b,
        &[
            ("transport_connections_refused", 3),
            ("transport_accepted", 3),
            ("transport_plain_connections", 2),
            ("transport_plain_capacity", 2),
            ("transport_inbound_connections", 2),
        ],
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// A connection from `local` (a loopback address: any 127.x.y.z is this host) to `to`.
async fn connect_from(local: &str, to: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{local}:0").parse().unwrap()).unwrap();
    socket.connect(to).await.unwrap()
}

/// One address may hold `max_plain_per_address` plain connections, however many places are
/// left: one host cannot take them all. Other addresses still get in.
#[tokio::test]
async fn connections_from_one_address_beyond_its_cap_are_closed_and_others_still_get_in() {
    let cfg = TransportConfig {
        max_plain_per_address: 2,
        ..config()
    };
    let (b, mut b_rx) = bind(cfg).await;
    let to = b.local_addr();
    let mut held = Vec::new();
    for i in 0..2u8 {
        let mut c = connect_from("127.0.0.1", to).await;
        write_raw_frame(&mut c, &[i]).await;
        assert_eq!(recv(&mut b_rx).await.frame, vec![i]);
        held.push(c);
    }
    expect_closed(connect_from("127.0.0.1", to).await).await;
    wait_until("the refusal is counted", || {
        b.stats().connections_refused == 1
    })
    .await;
    let mut other = connect_from("127.0.0.2", to).await;
    write_raw_frame(&mut other, b"other").await;
    assert_eq!(recv(&mut b_rx).await.frame, b"other");
    // A place the address gives back is its own again.
    drop(held.pop());
    wait_until("the closed one no longer counts", || {
        b.inbound_connections().plain == 2
    })
    .await;
    let mut again = connect_from("127.0.0.1", to).await;
    write_raw_frame(&mut again, b"again").await;
    assert_eq!(recv(&mut b_rx).await.frame, b"again");
    assert_eq!(b.stats().connections_refused, 1);
    b.shutdown().await;
}

/// Frames from plain connections hold at most `plain_inbound_bytes` together, whoever sends
/// them: a connection whose next frame does not fit waits (TCP pushes back) until the consumer
/// drops frames, and then every frame gets through, each connection's in order.
#[tokio::test]
async fn plain_frames_hold_at_most_their_byte_budget_and_wait_for_room() {
    const FRAME: usize = 1000;
    let cfg = TransportConfig {
        max_frame: FRAME,
        plain_inbound_bytes: 3 * FRAME,
        ..config()
    };
    let (t, mut rx) = bind(cfg).await;
    let mut a = TcpStream::connect(t.local_addr()).await.unwrap();
    let mut b = TcpStream::connect(t.local_addr()).await.unwrap();
    for seq in 0..4u8 {
        write_raw_frame(&mut a, &[seq; FRAME]).await;
    }
    for seq in 4..6u8 {
        write_raw_frame(&mut b, &[seq; FRAME]).await;
    }
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(recv(&mut rx).await);
    }
    assert_eq!(t.queue_depths().plain_inbound_bytes, 3 * FRAME);
    assert_metrics(
        &t,
        &[
            ("transport_plain_inbound_bytes", 3000),
            ("transport_plain_inbound_capacity", 3000),
        ],
    );
    // Nothing more is read while the consumer holds what fills the budget.
    assert!(timeout(Duration::from_millis(300), rx.recv())
        .await
        .is_err());
    assert_eq!(t.queue_depths().inbound, 0);
    let mut seen: Vec<u8> = held.iter().map(|f| f.frame[0]).collect();
    while seen.len() < 6 {
        // Each frame the consumer drops makes room for one more.
        held.remove(0);
        let next = recv(&mut rx).await;
        assert!(t.queue_depths().plain_inbound_bytes <= 3 * FRAME);
        seen.push(next.frame[0]);
        held.push(next);
    }
    let from_a: Vec<u8> = seen.iter().copied().filter(|s| *s < 4).collect();
    let from_b: Vec<u8> = seen.iter().copied().filter(|s| *s >= 4).collect();
    assert_eq!((from_a, from_b), (vec![0, 1, 2, 3], vec![4, 5]));
    drop(held);
    assert_eq!(t.queue_depths().plain_inbound_bytes, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_toward_dead_or_stalled_peers_drops_and_never_delays_a_live_peer() {
    const QUEUE: usize = 16;
    const ROUNDS: u64 = 200;
    const PER_ROUND: u64 = 10;
    let cfg = TransportConfig {
        queue_per_peer: QUEUE,
        ..config()
    };
    let (a, _a_rx) = bind(cfg.clone()).await;
    let (live, mut live_rx) = bind(cfg).await;
    let dead = unused_loopback_addr();
    // Completes handshakes through its backlog but never reads: writes to it stall once the
    // kernel buffers are full.
    let stalled = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let stalled_addr = stalled.local_addr().unwrap();

    let start = Instant::now();
    let mut slowest = Duration::ZERO;
    for round in 0..ROUNDS {
        for _ in 0..PER_ROUND {
            a.send(dead, vec![0; 100]);
            a.send(stalled_addr, vec![0; 32 * 1024]);
        }
        let sent_at = Instant::now();
        a.send(live.local_addr(), numbered(round));
        assert_eq!(seq_of(&recv(&mut live_rx).await.frame), round);
        slowest = slowest.max(sent_at.elapsed());
    }
    let elapsed = start.elapsed();

    let s = a.stats();
    let flooded = ROUNDS * PER_ROUND;
    // Toward the dead peer at most the queue plus the frame its task holds were kept.
    let dead_dropped_at_least = flooded - QUEUE as u64 - 1;
    // Toward the stalled one, the kernel buffers take a few MB at most of the 64 MB offered.
    assert!(
        s.dropped >= dead_dropped_at_least + flooded / 2,
        "dropped only {}",
        s.dropped
    );
    assert!(s.connect_failures >= 1);
    assert_eq!(live.stats().frames_received, ROUNDS);
    assert!(
        slowest < Duration::from_secs(1) && elapsed < Duration::from_secs(5),
        "live peer slowed: slowest frame {slowest:?}, all {elapsed:?}"
    );
    // The queues say how full they are: the dead peer's is at its bound (its task may hold
    // one frame out of it), and no queue is ever above it.
    let depths = a.queue_depths();
    assert!(
        (QUEUE - 1..=QUEUE).contains(&depths.deepest_outbound),
        "{depths:?}"
    );
    assert!(depths.outbound <= 2 * QUEUE, "{depths:?}");
    // Inbound frames nobody takes yet show in the inbound depth.
    for round in 0..5 {
        a.send(live.local_addr(), numbered(round));
    }
    wait_until("five inbound frames waiting", || {
        live.queue_depths().inbound == 5
    })
    .await;
    receive_in_order(&mut live_rx, 5).await;
    assert_eq!(live.queue_depths().inbound, 0);
    a.shutdown().await;
    live.shutdown().await;
    drop(stalled);
}

/// A bulk sender that paces itself loses nothing toward a receiver that reads slowly: 20 MB in
/// 64 KiB frames through a 4-frame queue and a receiver that reads nothing until its own inbound
/// queue (4 frames) and the kernel buffers are full. Plain sends would drop most of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_sends_wait_for_a_slow_receiver_and_lose_nothing() {
    const N: u64 = 320;
    let cfg = TransportConfig {
        queue_per_peer: 4,
        inbound_queue: 4,
        ..config()
    };
    let (a, _a_rx) = bind(cfg.clone()).await;
    let (b, mut b_rx) = bind(cfg).await;
    let to = b.local_addr();
    let sender = {
        let a = a.clone();
        tokio::spawn(async move {
            for seq in 0..N {
                let mut frame = seq.to_be_bytes().to_vec();
                frame.resize(64 * 1024, seq as u8);
                assert!(a.send_paced(to, frame).await);
            }
        })
    };
    // The receiver's queue fills before it reads anything.
    wait_until("the receiver's queue is full", || {
        b.stats().frames_received >= 4
    })
    .await;
    for seq in 0..N {
        let frame = recv(&mut b_rx).await.frame;
        assert_eq!(u64::from_be_bytes(frame[..8].try_into().unwrap()), seq);
        assert_eq!(frame.len(), 64 * 1024);
    }
    timeout(WAIT, sender).await.unwrap().unwrap();
    assert_eq!(a.stats().dropped, 0);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn oversized_sends_are_refused_and_shutdown_drops_later_sends() {
    let cfg = TransportConfig {
        max_frame: 64,
        ..config()
    };
    let (a, _a_rx) = bind(cfg.clone()).await;
    let (b, mut b_rx) = bind(cfg).await;
    a.send(b.local_addr(), vec![1; 65]);
    a.send(b.local_addr(), vec![2; 64]);
    assert_eq!(recv(&mut b_rx).await.frame, vec![2; 64]);
    assert_eq!(a.stats().oversized, 1);

    assert_metrics(&a, &[("transport_oversized", 1)]);

    let handle = a.clone();
    a.shutdown().await;
    handle.send(b.local_addr(), vec![3]);
    assert_eq!(handle.stats().dropped, 1);
    b.shutdown().await;
    // b's read loop ended with it, so its receiver reports the end.
    assert!(timeout(WAIT, b_rx.recv()).await.unwrap().is_none());
}

#[tokio::test]
async fn invalid_configuration_is_refused() {
    let cfg = TransportConfig {
        queue_per_peer: 0,
        ..config()
    };
    let err = Transport::bind("127.0.0.1:0".parse().unwrap(), cfg)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

#[tokio::test]
async fn dropping_every_handle_stops_the_transport() {
    let (a, _a_rx) = bind(config()).await;
    let (b, mut b_rx) = bind(config()).await;
    a.send(b.local_addr(), b"hello".to_vec());
    assert_eq!(recv(&mut b_rx).await.frame, b"hello");
    // Without shutdown: b's accept loop and read loop end once its last handle is gone, closing
    // the inbound channel.
    drop(b);
    assert!(timeout(WAIT, b_rx.recv()).await.unwrap().is_none());
    a.shutdown().await;
}
