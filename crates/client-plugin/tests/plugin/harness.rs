//! A cluster of fake nodes on 127.0.0.1 for the client and the gateway: the primary and every
//! replica are real transports that hand the test each REQUEST they receive; the test decides
//! which signed REPLYs to send back, or lets a responder answer like a correct group.

use client_plugin::{ClientEndpoint, ClientOptions, ClientStats};
use net::{Transport, TransportConfig};
use proto::config::Cluster;
use proto::testing::{client_key, node_key, TestCluster};
use proto::{ClientId, Envelope, GroupId, Message, NodeId, Reply, Request, View};
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
    /// Sends the replies of any replica: the client authenticates replies by signature, not by
    /// connection, and one connection keeps them in the order the test sends them.
    wire: Transport,
}

impl Harness {
    /// f = 1, primary candidates 0-2, groups 0 (replicas 101-103) and 1 (201-203), partitions
    /// 0-3 (even ones in group 0), and `clients` identities, all at one endpoint address.
    pub async fn new(application: &str, clients: u64) -> Harness {
        let mut config = TestCluster::new(1, 2, 4, clients).cluster.config.clone();
        config.application = application.into();
        let mut requests = HashMap::new();
        let mut fake = |id: u32| {
            let (tx, rx) = mpsc::unbounded_channel();
            requests.insert(NodeId(id), rx);
            fake_node(tx)
        };
        for primary in &mut config.primaries {
            primary.addr = fake(primary.id).await.to_string();
        }
        for replica in &mut config.replicas {
            replica.addr = fake(replica.id).await.to_string();
        }
        let endpoint = unused_addr().to_string();
        for client in &mut config.clients {
            client.addr = endpoint.clone();
        }
        let cluster = Arc::new(Cluster::new(config).expect("valid test configuration"));
        let keys = tempfile::tempdir().unwrap();
        for client in &cluster.config.clients {
            write_key(keys.path(), ClientId(client.id));
        }
        let (wire, _) = Transport::bind(localhost(), TransportConfig::default())
            .await
            .unwrap();
        Harness {
            cluster,
            endpoint,
            keys,
            requests,
            wire,
        }
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

    /// Sends replica `replica`'s signed reply (claiming membership of `group`) to `request`.
    pub fn reply(&self, replica: u32, group: u32, request: &Request, page: &[u8]) {
        self.send(reply(replica, group, request, page));
    }

    pub fn send(&self, reply: Reply) {
        self.send_frame(Envelope::encode(&Message::Reply(reply)));
    }

    pub fn send_frame(&self, frame: Vec<u8>) {
        self.wire.send(self.endpoint.parse().unwrap(), frame);
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
        let wire = self.wire.clone();
        let to: SocketAddr = self.endpoint.parse().unwrap();
        let (report, reports) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(request) = requests.recv().await {
                let page = render(&request);
                let group = cluster.group_of(request.partitions[0]).expect("a group");
                // One member's REPLY alone, the others' together, as a replica sends those
                // it has ready for one endpoint.
                let mut replies: Vec<Reply> = cluster
                    .members(group)
                    .map(|member| reply(member.id, group.0, &request, &page))
                    .collect();
                let first = replies.remove(0);
                wire.send(to, Envelope::encode(&Message::Reply(first)));
                wire.send(to, Envelope::encode(&Message::Replies(replies)));
                let _ = report.send((request, page));
            }
        });
        reports
    }
}

/// Replica `replica`'s reply in `group` to `request`, signed with its key.
pub fn reply(replica: u32, group: u32, request: &Request, page: &[u8]) -> Reply {
    signed_reply(replica, replica, group, request, page)
}

/// A reply naming `replica` but signed with `signer`'s key.
pub fn signed_reply(
    signer: u32,
    replica: u32,
    group: u32,
    request: &Request,
    page: &[u8],
) -> Reply {
    Reply {
        config_epoch: proto::ConfigEpoch(1),
        view: View(0),
        group: GroupId(group),
        replica: NodeId(replica),
        client: request.client,
        timestamp: request.timestamp,
        page: page.to_vec(),
        signature: proto::BatchSignature::unsigned(),
    }
    .sign(&node_key(NodeId(signer)))
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
    let deadline = Instant::now() + WAIT;
    loop {
        let stats = endpoint.stats();
        if cond(&stats) {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting until {what}: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// An address nobody listens on (bound by the OS, then released), for the client endpoint: the
/// configuration must name it before the endpoint binds it.
fn unused_addr() -> SocketAddr {
    std::net::TcpListener::bind(localhost())
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Starts a fake node that forwards every REQUEST it receives; returns its address.
async fn fake_node(forward: mpsc::UnboundedSender<Request>) -> SocketAddr {
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
