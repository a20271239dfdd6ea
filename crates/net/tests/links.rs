//! Authenticated links over real TCP on 127.0.0.1: the transport's own handshakes, and
//! handshakes driven by hand over raw sockets with the building blocks of `net::link` to play a
//! forger, a replayer or an impostor. Node keys are real Ed25519 keys from fixed seeds. Timeouts
//! only bound how long an expected event may take; nothing sleeps for an event it could await.

mod common;

use common::{expect_closed, numbered, recv, send_until_down, seq_of, wait_until};
use net::frame::{read_frame, write_frame};
use net::link::{self, Ephemeral, Hello, Sealer};
use net::metrics::{render, Registry, TransportMetrics};
use net::{Inbound, InboundConnections, LinkKeys, Transport, TransportConfig};
use ring::signature::{self, Ed25519KeyPair, KeyPair};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::mpsc::Receiver;

/// `max_frame` of every transport here.
const MAX: usize = 4096;

fn config() -> TransportConfig {
    TransportConfig {
        max_frame: MAX,
        connect_backoff_min: Duration::from_millis(5),
        connect_backoff_max: Duration::from_millis(50),
        ..TransportConfig::default()
    }
}

fn any() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Node `id`'s Ed25519 key pair (the seed is the id).
fn key_pair(id: u64) -> Ed25519KeyPair {
    Ed25519KeyPair::from_seed_unchecked(&[id as u8; 32]).unwrap()
}

/// The cluster's configuration as every node sees it: who the members are and where they
/// listen (filled in as the transports bind on port 0).
#[derive(Debug)]
struct Cluster {
    members: Vec<u64>,
    addrs: Mutex<HashMap<SocketAddr, u64>>,
}

impl Cluster {
    fn new(members: &[u64]) -> Arc<Cluster> {
        Arc::new(Cluster {
            members: members.to_vec(),
            addrs: Mutex::default(),
        })
    }

    /// Node `me`'s keys in this cluster (`me` need not be a member: an outsider).
    fn keys(self: &Arc<Self>, me: u64) -> Arc<NodeKeys> {
        Arc::new(NodeKeys {
            me,
            pair: key_pair(me),
            cluster: Arc::clone(self),
        })
    }

    fn listens(&self, id: u64, addr: SocketAddr) {
        self.addrs.lock().unwrap().insert(addr, id);
    }

    /// Binds node `me` with links at `addr` and records where it listens.
    async fn bind(self: &Arc<Self>, me: u64, addr: SocketAddr) -> (Transport, Receiver<Inbound>) {
        let (t, rx) = Transport::bind_with_links(addr, config(), self.keys(me))
            .await
            .unwrap();
        self.listens(me, t.local_addr());
        (t, rx)
    }
}

/// A node driver's [`LinkKeys`]: its own Ed25519 key and the cluster's public keys.
#[derive(Debug)]
struct NodeKeys {
    me: u64,
    pair: Ed25519KeyPair,
    cluster: Arc<Cluster>,
}

impl LinkKeys for NodeKeys {
    fn me(&self) -> u64 {
        self.me
    }

    fn identity_at(&self, addr: SocketAddr) -> Option<u64> {
        self.cluster.addrs.lock().unwrap().get(&addr).copied()
    }

    fn sign(&self, transcript: &[u8]) -> [u8; 64] {
        self.pair.sign(transcript).as_ref().try_into().unwrap()
    }

    fn verify(&self, identity: u64, transcript: &[u8], sig: &[u8; 64]) -> bool {
        self.cluster.members.contains(&identity)
            && signature::UnparsedPublicKey::new(
                &signature::ED25519,
                key_pair(identity).public_key().as_ref(),
            )
            .verify(transcript, sig)
            .is_ok()
    }
}

/// Asserts that nothing was delivered (call once the refusal is counted: a refused connection
/// delivers nothing after it is counted).
fn nothing_delivered(rx: &mut Receiver<Inbound>) {
    if let Ok(inbound) = rx.try_recv() {
        panic!("delivered {inbound:?}");
    }
}

/// What an eavesdropper records of a handshake: the opener's two frames.
struct Recorded {
    hello: Vec<u8>,
    auth: [u8; 64],
}

/// The opener's side of the handshake step by step (what `link::open_link` does), keeping the
/// frames it sent; `true` when the acceptor confirmed with its ACCEPT.
async fn handshake_by_hand(
    stream: &mut TcpStream,
    keys: &dyn LinkKeys,
    acceptor: u64,
) -> (Sealer, Recorded, bool) {
    let ephemeral = Ephemeral::generate().unwrap();
    let hello = Hello {
        opener: keys.me(),
        acceptor,
        ephemeral: ephemeral.public(),
    }
    .encode();
    write_frame(stream, &hello, link::HELLO_LEN).await.unwrap();
    let reply = read_frame(stream, link::REPLY_LEN).await.unwrap().unwrap();
    let theirs = link::parse_reply(&reply).unwrap();
    let transcript = link::transcript(keys.me(), acceptor, &ephemeral.public(), &theirs);
    let key = ephemeral.agree(&theirs, &transcript).unwrap();
    let auth = keys.sign(&transcript);
    write_frame(stream, &auth, link::SIGNATURE_LEN)
        .await
        .unwrap();
    let accepted = matches!(
        read_frame(stream, link::ACCEPT.len()).await,
        Ok(Some(frame)) if frame == link::ACCEPT
    );
    (Sealer::new(key), Recorded { hello, auth }, accepted)
}

/// Sends a HELLO from `opener` naming `acceptor` to `addr` and waits until the acceptor closes
/// the connection without a reply.
async fn hello_is_refused(addr: SocketAddr, opener: u64, acceptor: u64) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let hello = Hello {
        opener,
        acceptor,
        ephemeral: Ephemeral::generate().unwrap().public(),
    };
    write_frame(&mut stream, &hello.encode(), link::HELLO_LEN)
        .await
        .unwrap();
    expect_closed(stream).await;
}

/// Writes an already sealed frame payload (`payload ‖ tag`).
async fn write_raw_frame(stream: &mut TcpStream, payload: &[u8]) {
    write_frame(stream, payload, payload.len()).await.unwrap();
}

async fn write_sealed(stream: &mut TcpStream, sealed: &[u8]) {
    write_frame(stream, sealed, MAX + link::TAG_LEN)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticated_frames_arrive_in_order_with_the_openers_identity_and_plain_ones_without() {
    const N: u64 = 500;
    let cluster = Cluster::new(&[1, 2]);
    let (a, _a_rx) = cluster.bind(1, any()).await;
    let (b, mut b_rx) = cluster.bind(2, any()).await;
    let (plain, mut plain_rx) = Transport::bind(any(), config()).await.unwrap();

    for seq in 0..N {
        a.send(b.local_addr(), numbered(seq));
    }
    // The limit applies to the payload: the tag comes on top.
    a.send(b.local_addr(), vec![7; MAX]);
    a.send(b.local_addr(), vec![8; MAX + 1]);
    for expected in 0..N {
        let inbound = recv(&mut b_rx).await;
        assert_eq!(inbound.link, Some(1));
        assert_eq!(seq_of(&inbound.frame), expected);
    }
    let inbound = recv(&mut b_rx).await;
    assert_eq!((inbound.frame, inbound.link), (vec![7; MAX], Some(1)));
    assert_eq!(a.stats().oversized, 1);

    // A sender without links reaches the same acceptor on a plain connection.
    plain.send(b.local_addr(), b"plain".to_vec());
    let inbound = recv(&mut b_rx).await;
    assert_eq!((inbound.frame, inbound.link), (b"plain".to_vec(), None));
    // A node with links reaches an address its keys do not name on a plain connection.
    a.send(plain.local_addr(), b"to a client".to_vec());
    let inbound = recv(&mut plain_rx).await;
    assert_eq!(
        (inbound.frame, inbound.link),
        (b"to a client".to_vec(), None)
    );

    let s = b.stats();
    assert_eq!((s.accepted, s.links, s.link_refused), (2, 1, 0));
    assert_eq!((s.frames_received, s.malformed), (N + 2, 0));
    let s = plain.stats();
    assert_eq!((s.accepted, s.links, s.link_refused), (1, 0, 0));
    let mut registry = Registry::default();
    let metrics = TransportMetrics::register(&mut registry);
    metrics.update(&b);
    let text = render(&registry);
    assert!(text.contains("transport_links 1\n"), "{text}");
    assert!(text.contains("transport_link_refused 0\n"), "{text}");
    assert!(text.contains("transport_accepted 2\n"), "{text}");
    for t in [a, b, plain] {
        t.shutdown().await;
    }
}

#[tokio::test]
async fn a_frame_with_a_wrong_tag_is_refused_and_closes_the_connection() {
    let cluster = Cluster::new(&[1, 2]);
    let (b, mut b_rx) = cluster.bind(2, any()).await;
    let mut stream = TcpStream::connect(b.local_addr()).await.unwrap();
    let mut sealer = link::open_link(&mut stream, cluster.keys(1).as_ref(), 2)
        .await
        .unwrap();
    write_sealed(&mut stream, &sealer.seal(b"good")).await;
    let inbound = recv(&mut b_rx).await;
    assert_eq!((inbound.frame, inbound.link), (b"good".to_vec(), Some(1)));

    let mut forged = sealer.seal(b"forged");
    *forged.last_mut().unwrap() ^= 1;
    write_sealed(&mut stream, &forged).await;
    expect_closed(stream).await;
    wait_until("the wrong tag is counted", || b.stats().link_refused == 1).await;
    nothing_delivered(&mut b_rx);
    let s = b.stats();
    assert_eq!((s.links, s.frames_received), (1, 1));
    b.shutdown().await;
}

#[tokio::test]
async fn an_opener_the_acceptor_does_not_know_is_refused_and_nothing_is_delivered() {
    let cluster = Cluster::new(&[1, 2]);
    let (b, mut b_rx) = cluster.bind(2, any()).await;
    // Node 9 has a key and knows where node 2 listens, but is not a member.
    let (outsider, _rx) = cluster.bind(9, any()).await;
    outsider.send(b.local_addr(), b"let me in".to_vec());
    wait_until("the outsider is refused", || b.stats().link_refused >= 1).await;
    // Without an ACCEPT the outsider's attempt failed: it backs off rather than sending into a
    // connection that seems up.
    wait_until("the outsider counts a failed attempt", || {
        outsider.stats().connect_failures >= 1
    })
    .await;
    assert_eq!(outsider.stats().connects, 0);
    nothing_delivered(&mut b_rx);
    let s = b.stats();
    assert_eq!((s.links, s.frames_received), (0, 0));

    // By hand, to see the refusal come right after the signature: no ACCEPT.
    let mut stream = TcpStream::connect(b.local_addr()).await.unwrap();
    let (_, _, accepted) = handshake_by_hand(&mut stream, cluster.keys(9).as_ref(), 2).await;
    assert!(!accepted);
    expect_closed(stream).await;
    wait_until("the second refusal is counted", || {
        b.stats().link_refused >= 2
    })
    .await;
    nothing_delivered(&mut b_rx);
    assert_eq!(b.stats().links, 0);
    outsider.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_hello_naming_another_acceptor_is_refused() {
    // Node 3 received a hello meant for it and relays it to node 2.
    let cluster = Cluster::new(&[1, 2, 3]);
    let (b, mut b_rx) = cluster.bind(2, any()).await;
    // Refused before any reply.
    hello_is_refused(b.local_addr(), 1, 3).await;
    wait_until("the hello is refused", || b.stats().link_refused == 1).await;

    // A malformed hello (one byte short) is refused too.
    let mut stream = TcpStream::connect(b.local_addr()).await.unwrap();
    let hello = Hello {
        opener: 1,
        acceptor: 2,
        ephemeral: Ephemeral::generate().unwrap().public(),
    }
    .encode();
    write_frame(&mut stream, &hello[..link::HELLO_LEN - 1], MAX)
        .await
        .unwrap();
    expect_closed(stream).await;
    wait_until("the malformed hello is refused", || {
        b.stats().link_refused == 2
    })
    .await;
    nothing_delivered(&mut b_rx);
    assert_eq!(b.stats().links, 0);
    b.shutdown().await;
}

#[tokio::test]
async fn recorded_frames_and_handshakes_are_refused_when_replayed() {
    let cluster = Cluster::new(&[1, 2]);
    let (b, mut b_rx) = cluster.bind(2, any()).await;
    let keys = cluster.keys(1);

    // Within one connection: the same sealed bytes twice.
    let mut first = TcpStream::connect(b.local_addr()).await.unwrap();
    let (mut sealer, recorded, accepted) = handshake_by_hand(&mut first, keys.as_ref(), 2).await;
    assert!(accepted);
    let zero = sealer.seal(b"zero");
    write_sealed(&mut first, &zero).await;
    assert_eq!(recv(&mut b_rx).await.frame, b"zero");
    write_sealed(&mut first, &zero).await;
    expect_closed(first).await;
    wait_until("the replay is refused", || b.stats().link_refused == 1).await;

    // On a new connection, the frame recorded as number 0 of the first one is refused as this
    // connection's number 0: the acceptor's fresh ephemeral key made a new link key.
    let mut second = TcpStream::connect(b.local_addr()).await.unwrap();
    link::open_link(&mut second, keys.as_ref(), 2)
        .await
        .unwrap();
    write_sealed(&mut second, &zero).await;
    expect_closed(second).await;
    wait_until("the cross-connection replay is refused", || {
        b.stats().link_refused == 2
    })
    .await;

    // The recorded handshake itself, replayed: the signature was over the first connection's
    // transcript, not over one with the acceptor's new ephemeral key.
    let mut third = TcpStream::connect(b.local_addr()).await.unwrap();
    write_frame(&mut third, &recorded.hello, link::HELLO_LEN)
        .await
        .unwrap();
    let reply = read_frame(&mut third, link::REPLY_LEN)
        .await
        .unwrap()
        .unwrap();
    link::parse_reply(&reply).unwrap();
    write_frame(&mut third, &recorded.auth, link::SIGNATURE_LEN)
        .await
        .unwrap();
    expect_closed(third).await;
    wait_until("the replayed handshake is refused", || {
        b.stats().link_refused == 3
    })
    .await;

    nothing_delivered(&mut b_rx);
    let s = b.stats();
    assert_eq!((s.links, s.frames_received), (2, 1));
    b.shutdown().await;
}

#[tokio::test]
async fn frames_queued_while_a_linked_peer_restarts_arrive_after_the_new_handshake() {
    let cluster = Cluster::new(&[1, 2]);
    let (a, _a_rx) = cluster.bind(1, any()).await;
    let (b1, mut b1_rx) = cluster.bind(2, any()).await;
    let b_addr = b1.local_addr();
    for seq in 0..100 {
        a.send(b_addr, numbered(seq));
    }
    for expected in 0..100 {
        let inbound = recv(&mut b1_rx).await;
        assert_eq!((seq_of(&inbound.frame), inbound.link), (expected, Some(1)));
    }

    b1.shutdown().await;
    drop(b1_rx);
    let queued_while_down = send_until_down(&a, b_addr, 100).await;

    // Node 2 comes back on the same address with a new transport: a new handshake, new link
    // key, sequence numbers from 0 again; the frames queued meanwhile carry tags valid there.
    let (b2, mut b2_rx) = cluster.bind(2, b_addr).await;
    let last = queued_while_down + 100;
    for seq in queued_while_down..last {
        a.send(b_addr, numbered(seq));
    }
    let mut received = Vec::new();
    while received.last() != Some(&(last - 1)) {
        let inbound = recv(&mut b2_rx).await;
        assert_eq!(inbound.link, Some(1));
        received.push(seq_of(&inbound.frame));
    }
    assert!(received.windows(2).all(|w| w[0] < w[1]), "out of order");
    assert!(received.ends_with(&(queued_while_down..last).collect::<Vec<_>>()));
    assert_eq!(a.stats().reconnects, 1);
    let s = b2.stats();
    assert_eq!((s.links, s.link_refused), (1, 0));
    a.shutdown().await;
    b2.shutdown().await;
}

#[tokio::test]
async fn a_hello_to_a_transport_without_links_is_refused_and_counted() {
    let cluster = Cluster::new(&[1, 2]);
    let (plain, mut plain_rx) = Transport::bind(any(), config()).await.unwrap();
    // Node 1 believes node 2 listens there (a misconfiguration, or node 2 not yet upgraded).
    cluster.listens(2, plain.local_addr());
    let (a, _a_rx) = cluster.bind(1, any()).await;
    a.send(plain.local_addr(), b"for node 2".to_vec());
    wait_until("the hello is refused", || plain.stats().link_refused >= 1).await;
    // The opener finds no reply: a failed attempt, retried with backoff.
    wait_until("the opener counts a failed attempt", || {
        a.stats().connect_failures >= 1
    })
    .await;

    // By hand: closed without a reply.
    hello_is_refused(plain.local_addr(), 1, 2).await;

    nothing_delivered(&mut plain_rx);
    let s = plain.stats();
    assert_eq!((s.links, s.frames_received, s.malformed), (0, 0, 0));
    a.shutdown().await;
    plain.shutdown().await;
}

#[tokio::test]
async fn authenticated_links_do_not_count_against_the_plain_cap() {
    let cluster = Cluster::new(&[1, 2, 3]);
    let cfg = TransportConfig {
        max_plain_connections: 1,
        ..config()
    };
    let (b, mut b_rx) = Transport::bind_with_links(any(), cfg, cluster.keys(2))
        .await
        .unwrap();
    cluster.listens(2, b.local_addr());
    let (a, _a_rx) = cluster.bind(1, any()).await;
    let (c, _c_rx) = cluster.bind(3, any()).await;
    // One after the other: a connection counts against the cap until its hello is accepted.
    for (t, id) in [(&a, 1), (&c, 3)] {
        t.send(b.local_addr(), b"linked".to_vec());
        let inbound = recv(&mut b_rx).await;
        assert_eq!(
            (inbound.frame, inbound.link),
            (b"linked".to_vec(), Some(id))
        );
    }
    // Two links are open and the one plain place is still free.
    let (plain, _plain_rx) = Transport::bind(any(), config()).await.unwrap();
    plain.send(b.local_addr(), b"plain".to_vec());
    let inbound = recv(&mut b_rx).await;
    assert_eq!((inbound.frame, inbound.link), (b"plain".to_vec(), None));
    // Now it is taken.
    expect_closed(TcpStream::connect(b.local_addr()).await.unwrap()).await;
    wait_until("the refusal is counted", || {
        b.stats().connections_refused == 1
    })
    .await;
    let s = b.stats();
    assert_eq!((s.links, s.accepted, s.link_refused), (2, 3, 0));
    assert_eq!(
        b.inbound_connections(),
        InboundConnections { open: 3, plain: 1 }
    );
    for t in [a, b, c, plain] {
        t.shutdown().await;
    }
}

/// Each link has a byte budget of its own: plain connections that hold all of theirs hold no
/// link back, neither its hello nor its frames, and one link's frames held hold no other link
/// back either.
#[tokio::test]
async fn links_are_not_held_back_by_frames_held_from_plain_connections_or_other_links() {
    let cluster = Cluster::new(&[1, 2, 3]);
    let cfg = TransportConfig {
        plain_inbound_bytes: MAX,
        link_inbound_bytes: MAX + link::TAG_LEN,
        ..config()
    };
    let (b, mut b_rx) = Transport::bind_with_links(any(), cfg, cluster.keys(2))
        .await
        .unwrap();
    cluster.listens(2, b.local_addr());
    // A plain connection fills the plain budget and has another frame waiting for room.
    let mut plain = TcpStream::connect(b.local_addr()).await.unwrap();
    for fill in [7, 8] {
        write_raw_frame(&mut plain, &[fill; MAX]).await;
    }
    let held_plain = recv(&mut b_rx).await;
    assert_eq!((held_plain.frame[0], held_plain.link), (7, None));
    // Node 1 fills its link's budget and has another frame waiting for room.
    let (a, _a_rx) = cluster.bind(1, any()).await;
    a.send(b.local_addr(), vec![1; MAX]);
    a.send(b.local_addr(), vec![2; MAX]);
    let held_link = recv(&mut b_rx).await;
    assert_eq!((held_link.frame[0], held_link.link), (1, Some(1)));
    // Node 3 still gets its link and its frames through.
    let (c, _c_rx) = cluster.bind(3, any()).await;
    for seq in 0..3 {
        c.send(b.local_addr(), numbered(seq));
        let inbound = recv(&mut b_rx).await;
        assert_eq!((seq_of(&inbound.frame), inbound.link), (seq, Some(3)));
    }
    // The waiting frames come once the held ones are dropped.
    drop(held_link);
    let next = recv(&mut b_rx).await;
    assert_eq!((next.frame[0], next.link), (2, Some(1)));
    drop(held_plain);
    let next = recv(&mut b_rx).await;
    assert_eq!((next.frame[0], next.link), (8, None));
    for t in [a, b, c] {
        t.shutdown().await;
    }
}

#[tokio::test]
async fn a_newer_link_from_the_same_opener_closes_the_older_and_no_other() {
    let cluster = Cluster::new(&[1, 2, 3]);
    let (b, mut b_rx) = cluster.bind(2, any()).await;
    let keys = cluster.keys(1);
    let open = || async {
        let mut stream = TcpStream::connect(b.local_addr()).await.unwrap();
        let sealer = link::open_link(&mut stream, keys.as_ref(), 2)
            .await
            .unwrap();
        (stream, sealer)
    };
    // Node 3's link, which node 1's links must leave alone.
    let (other, _other_rx) = cluster.bind(3, any()).await;
    other.send(b.local_addr(), b"from 3".to_vec());
    assert_eq!(recv(&mut b_rx).await.link, Some(3));

    let (mut old, mut old_sealer) = open().await;
    write_sealed(&mut old, &old_sealer.seal(b"old")).await;
    let inbound = recv(&mut b_rx).await;
    assert_eq!((inbound.frame, inbound.link), (b"old".to_vec(), Some(1)));
    // Node 1 restarted, or gave the connection up across a partition: no FIN ever reached
    // node 2, and node 1 opens a new link.
    let (mut new, mut new_sealer) = open().await;
    expect_closed(old).await;
    wait_until("the replaced link is counted", || {
        b.stats().links_replaced == 1
    })
    .await;
    write_sealed(&mut new, &new_sealer.seal(b"new")).await;
    let inbound = recv(&mut b_rx).await;
    assert_eq!((inbound.frame, inbound.link), (b"new".to_vec(), Some(1)));
    let two_links = InboundConnections { open: 2, plain: 0 };
    wait_until("node 1 holds one link", || {
        b.inbound_connections() == two_links
    })
    .await;

    // The closed link's end left the newer one in place: a third replaces it in turn.
    let (mut third, mut third_sealer) = open().await;
    expect_closed(new).await;
    write_sealed(&mut third, &third_sealer.seal(b"third")).await;
    assert_eq!(recv(&mut b_rx).await.frame, b"third");
    other.send(b.local_addr(), b"3 still linked".to_vec());
    let inbound = recv(&mut b_rx).await;
    assert_eq!(
        (inbound.frame, inbound.link),
        (b"3 still linked".to_vec(), Some(3))
    );
    wait_until("node 1 holds one link again", || {
        b.inbound_connections() == two_links
    })
    .await;
    let s = b.stats();
    assert_eq!((s.links, s.links_replaced, s.link_refused), (4, 2, 0));
    let mut registry = Registry::default();
    TransportMetrics::register(&mut registry).update(&b);
    let text = render(&registry);
    assert!(text.contains("transport_links_replaced 2\n"), "{text}");
    assert_eq!(other.stats().reconnects, 0);
    other.shutdown().await;
    b.shutdown().await;
}
