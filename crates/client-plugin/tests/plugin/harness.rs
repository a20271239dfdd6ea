//! A cluster of fake nodes on 127.0.0.1 for the client and the gateway: the primary and every
//! replica are real transports that hand the test each REQUEST they receive; the test decides
//! which REPLYs to send back, each on the authenticated link of a replica (its handshake signed
//! with that replica's configured key, as a node's transport does) or on a plain connection,
//! or lets a responder answer like a correct group.

use client_plugin::{ClientEndpoint, ClientOptions, ClientStats};
use net::testing::unused_loopback_addr;
use net::{LinkKeys, Transport, TransportConfig};
use proto::config::Cluster;
use proto::crypto::LINK_HANDSHAKE_DOMAIN;
use proto::testing::{client_key, node_key, TestCluster};
use proto::{ClientId, ConfigRequest, Envelope, GroupId, Message, NodeId, Reply, Request, View};
use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::sync::mpsc;

/// Upper bound for any single expected event.
pub const WAIT: Duration = Duration::from_secs(10);

/// The primary's node id in a test cluster.
pub const PRIMARY: u32 = 0;

pub struct Harness {
    pub cluster: Arc<Cluster>,
    /// Where the client endpoint listens (every `[[client]]` is configured there).
    pub endpoint: String,
    keys: TempDir,
    /// Requests each fake node received, in arrival order.
    requests: HashMap<NodeId, mpsc::UnboundedReceiver<Request>>,
    /// Requests for the configuration any fake node received.
    config_requests: mpsc::UnboundedReceiver<ConfigRequest>,
    /// Each replica's authenticated link to the endpoint (frames on one keep their order).
    links: Links,
    /// A plain connection to the endpoint, which proves nothing about who sends on it.
    plain: Transport,
}

/// Each replica's outbound side towards the endpoint.
type Links = Arc<HashMap<u32, Transport>>;

impl Harness {
    /// f = 1, primary candidates 0-2, groups 0 (replicas 101-103) and 1 (201-203), partitions
    /// 0-3 (even ones in group 0), and `clients` identities, all at one endpoint address.
    pub async fn new(application: &str, clients: u64) -> Harness {
        let mut config = TestCluster::new(1, 2, 4, clients).cluster.config.clone();
        config.application = application.into();
        let mut requests = HashMap::new();
        let (asked, config_requests) = mpsc::unbounded_channel();
        let mut fake = |id: u32| {
            let (tx, rx) = mpsc::unbounded_channel();
            requests.insert(NodeId(id), rx);
            fake_node(tx, asked.clone())
        };
        for primary in &mut config.primaries {
            primary.addr = fake(primary.id).await.to_string();
        }
        for replica in &mut config.replicas {
            replica.addr = fake(replica.id).await.to_string();
        }
        // The configuration names the endpoint's address before the endpoint binds it.
        let endpoint = unused_loopback_addr().to_string();
        for client in &mut config.clients {
            client.addr = endpoint.clone();
        }
        let cluster = Arc::new(Cluster::new(config).expect("valid test configuration"));
        let keys = tempfile::tempdir().unwrap();
        for client in &cluster.config.clients {
            write_key(keys.path(), ClientId(client.id));
        }
        let (plain, _) = Transport::bind(localhost(), TransportConfig::default())
            .await
            .unwrap();
        let endpoint_addr: SocketAddr = endpoint.parse().unwrap();
        let identity = cluster.endpoint_identity(&endpoint).expect("the endpoint");
        let mut links = HashMap::new();
        for replica in &cluster.config.replicas {
            links.insert(
                replica.id,
                link(replica.id, (endpoint_addr, identity)).await,
            );
        }
        Harness {
            cluster,
            endpoint,
            keys,
            requests,
            config_requests,
            links: Arc::new(links),
            plain,
        }
    }

    /// The outbound side of node `node` (with its test key, configured or not), which opens
    /// links to the endpoint.
    pub async fn link_of(&self, node: u32) -> Transport {
        let identity = self.cluster.endpoint_identity(&self.endpoint).unwrap();
        link(node, (self.endpoint.parse().unwrap(), identity)).await
    }

    /// The next request for the configuration a fake node received.
    pub async fn config_request(&mut self) -> ConfigRequest {
        tokio::time::timeout(WAIT, self.config_requests.recv())
            .await
            .expect("a fake node gets a configuration request")
            .expect("fake nodes running")
    }

    pub fn keys(&self) -> &Path {
        self.keys.path()
    }

    /// Opens the client endpoint.
    pub async fn open(&self, options: ClientOptions) -> ClientEndpoint {
        ClientEndpoint::open(
            Arc::clone(&self.cluster),
            self.keys(),
            &self.endpoint,
            options,
        )
        .await
        .expect("endpoint opens")
    }

    /// The next request fake node `node` received.
    pub async fn request_at(&mut self, node: u32) -> Request {
        let rx = self.requests.get_mut(&NodeId(node)).expect("a fake node");
        tokio::time::timeout(WAIT, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("node {node} got no request"))
            .expect("fake node running")
    }

    /// The next request the primary received with a timestamp above `after` (skipping
    /// retransmissions of earlier ones).
    pub async fn request_after(&mut self, after: u64) -> Request {
        loop {
            let request = self.request_at(PRIMARY).await;
            if request.timestamp > after {
                return request;
            }
        }
    }

    /// Sends replica `replica`'s reply (claiming membership of `group`) to `request`, on its
    /// link.
    pub fn reply(&self, replica: u32, group: u32, request: &Request, page: &[u8]) {
        self.send_on(replica, reply(replica, group, request, page));
    }

    /// Sends `reply`, whatever replica it names, on replica `link`'s link.
    pub fn send_on(&self, link: u32, reply: Reply) {
        let frame = Envelope::encode(&Message::Reply(reply));
        self.links[&link].send(self.endpoint.parse().unwrap(), frame);
    }

    /// Sends `reply` on a plain connection.
    pub fn send_plain(&self, reply: Reply) {
        self.send_frame(Envelope::encode(&Message::Reply(reply)));
    }

    /// Sends a frame on a plain connection.
    pub fn send_frame(&self, frame: Vec<u8>) {
        self.plain.send(self.endpoint.parse().unwrap(), frame);
    }

    /// Answers every request the primary receives like a correct group would: all members of
    /// the group serving its first partition send `render(request)`. Reports each request and
    /// the page sent.
    pub fn respond(
        &mut self,
        render: fn(&Request) -> Vec<u8>,
    ) -> mpsc::UnboundedReceiver<(Request, Vec<u8>)> {
        let mut requests = self
            .requests
            .remove(&NodeId(PRIMARY))
            .expect("the primary's requests are not taken yet");
        let cluster = Arc::clone(&self.cluster);
        let links = Arc::clone(&self.links);
        let to: SocketAddr = self.endpoint.parse().unwrap();
        let (report, reports) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(request) = requests.recv().await {
                let page = render(&request);
                let group = cluster.group_of(request.partitions[0]).expect("a group");
                // Each member on its link: the first a REPLY alone, the others in a REPLIES
                // frame, as a replica sends those it has ready for one endpoint.
                for (i, member) in cluster.members(group).enumerate() {
                    let reply = reply(member.id, group.0, &request, &page);
                    let message = match i {
                        0 => Message::Reply(reply),
                        _ => Message::Replies(vec![reply]),
                    };
                    links[&member.id].send(to, Envelope::encode(&message));
                }
                let _ = report.send((request, page));
            }
        });
        reports
    }
}

/// Replica `replica`'s reply in `group` to `request`.
pub fn reply(replica: u32, group: u32, request: &Request, page: &[u8]) -> Reply {
    Reply {
        config_epoch: proto::ConfigEpoch(1),
        view: View(0),
        group: GroupId(group),
        replica: NodeId(replica),
        client: request.client,
        timestamp: request.timestamp,
        page: page.to_vec(),
    }
}

/// Node `me`'s transport, opening links to the endpoint at `endpoint` (address, link identity).
async fn link(me: u32, endpoint: (SocketAddr, u64)) -> Transport {
    let keys = Arc::new(ReplicaKeys { me, endpoint });
    let (transport, _) = Transport::bind_with_links(localhost(), TransportConfig::default(), keys)
        .await
        .unwrap();
    transport
}

/// A fake replica's side of its link to the endpoint: it opens one, signing the handshake with
/// its test node key, and accepts none.
#[derive(Debug)]
struct ReplicaKeys {
    me: u32,
    /// The endpoint's address and link identity.
    endpoint: (SocketAddr, u64),
}

impl LinkKeys for ReplicaKeys {
    fn me(&self) -> u64 {
        u64::from(self.me)
    }

    fn identity_at(&self, addr: SocketAddr) -> Option<u64> {
        (addr == self.endpoint.0).then_some(self.endpoint.1)
    }

    fn sign(&self, transcript: &[u8]) -> [u8; 64] {
        node_key(NodeId(self.me))
            .sign(LINK_HANDSHAKE_DOMAIN, transcript)
            .0
    }

    fn verify(&self, _: u64, _: &[u8], _: &[u8; 64]) -> bool {
        false
    }
}

/// Options that retransmit quickly, for tests that wait for a retransmission.
pub fn fast_retransmit() -> ClientOptions {
    ClientOptions {
        retransmit: Duration::from_millis(10),
        max_retransmit: Duration::from_millis(40),
        ..ClientOptions::default()
    }
}

/// Polls an endpoint's counters (they have no event to await) until `cond` holds, up to WAIT.
pub async fn wait_until(
    endpoint: &ClientEndpoint,
    what: &str,
    cond: impl Fn(&ClientStats) -> bool,
) -> ClientStats {
    poll_until(what, || endpoint.stats(), cond).await
}

/// Polls what `read` returns (counters have no event to await) until `cond` holds, up to WAIT.
pub async fn poll_until<T: std::fmt::Debug>(
    what: &str,
    read: impl Fn() -> T,
    cond: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        let value = read();
        if cond(&value) {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting until {what}: {value:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Starts a fake node that forwards every REQUEST and CONFIG-REQUEST it receives; returns its
/// address.
async fn fake_node(
    forward: mpsc::UnboundedSender<Request>,
    asked: mpsc::UnboundedSender<ConfigRequest>,
) -> SocketAddr {
    let (transport, mut inbound) = Transport::bind(localhost(), TransportConfig::default())
        .await
        .unwrap();
    let addr = transport.local_addr();
    tokio::spawn(async move {
        // Holding the transport keeps the node listening for the whole test.
        let _transport = transport;
        while let Some(frame) = inbound.recv().await {
            match Envelope::decode(&frame.frame) {
                Ok(Message::Request(request)) => {
                    let _ = forward.send(request);
                }
                Ok(Message::Requests(requests)) => {
                    for request in requests {
                        let _ = forward.send(request);
                    }
                }
                Ok(Message::ConfigRequest(request)) => {
                    let _ = asked.send(request);
                }
                _ => {}
            }
        }
    });
    addr
}

/// Writes a client's key file as `cloudbft keygen` does (mode 0600).
pub fn write_key(dir: &Path, client: ClientId) {
    let path = proto::keys::client_key_path(dir, client);
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .unwrap()
        .write_all(client_key(client).seed())
        .unwrap();
}
