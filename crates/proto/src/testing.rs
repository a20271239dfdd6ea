//! Deterministic clusters for simulations and tests: every key derives from a seed, so a seeded
//! run replays exactly. Never use these keys outside tests.

use crate::config::{
    ClientConfig, Cluster, ClusterConfig, DbNodeConfig, GroupConfig, NodeConfig, ReplicaConfig,
};
use crate::crypto::SigningKey;
use crate::ids::{ClientId, NodeId};
use usig::soft::SoftUsig;
use usig::{Enrollment, EnrollmentRecord, Epoch, UsigId};

/// A local cluster layout: primary candidates 0, 1, 2 on machines p0, p1, p2 (view v's primary is
/// candidate v mod 3); group g's member k is node 100(g+1)+k on machine mk; database node 10+k
/// on machine mk; clients 1..=clients.
pub struct TestCluster {
    pub cluster: Cluster,
}

impl TestCluster {
    /// Builds and validates the layout; partitions are spread over groups round-robin.
    pub fn new(f: usize, groups: u32, partitions: u32, clients: u64) -> Self {
        let n = 2 * f as u32 + 1;
        let mut c = ClusterConfig {
            f,
            config_epoch: 1,
            partitions,
            usig: "soft".into(),
            application: "bank".into(),
            epoch_start: Default::default(),
            primaries: (0..CANDIDATES)
                .map(|id| NodeConfig {
                    id,
                    addr: format!("sim:{id}"),
                    machine: format!("p{id}"),
                    usig: usig_id(NodeId(id)).0,
                    usig_epoch: Some(1),
                    usig_start: None,
                    public_key: node_key(NodeId(id)).public_key().to_hex(),
                })
                .collect(),
            groups: Vec::new(),
            replicas: Vec::new(),
            db_nodes: Vec::new(),
            clients: (1..=clients)
                .map(|id| ClientConfig {
                    id,
                    addr: format!("sim:client-{id}"),
                    public_key: client_key(ClientId(id)).public_key().to_hex(),
                })
                .collect(),
            enrollments: (0..CANDIDATES).map(|id| enrollment(NodeId(id))).collect(),
            operator_key: None,
            ek_roots: Vec::new(),
        };
        for g in 0..groups {
            c.groups.push(GroupConfig {
                id: g,
                partitions: (0..partitions).filter(|p| p % groups == g).collect(),
            });
            for k in 1..=n {
                let (replica, enrollment) = member(g, k);
                c.replicas.push(replica);
                c.enrollments.push(enrollment);
            }
        }
        for k in 1..=n {
            let id = NodeId(10 + k);
            c.db_nodes.push(DbNodeConfig {
                id: id.0,
                addr: format!("sim:{}", id.0),
                machine: format!("m{k}"),
                database: "sqlite::memory:".into(),
                public_key: node_key(id).public_key().to_hex(),
            });
        }
        let cluster = Cluster::new(c).expect("test cluster layout is valid");
        TestCluster { cluster }
    }

    /// The same layout with every client identity signing with [`endpoint_key`]: one load
    /// driver holding them all, as `cloudbft keygen` sets up an endpoint's identities.
    pub fn one_endpoint(self) -> Self {
        let mut config = self.cluster.config.clone();
        let key = endpoint_key().public_key().to_hex();
        for client in &mut config.clients {
            client.public_key = key.clone();
        }
        let cluster = Cluster::new(config).expect("test cluster layout is valid");
        TestCluster { cluster }
    }
}

/// Member `k` of group `g` in the layout: replica 100(g+1)+k on machine mk, with its USIG
/// enrollment. With k above 2f+1 it is a spare on a machine no member of the group uses (to
/// replace one).
pub fn member(g: u32, k: u32) -> (ReplicaConfig, EnrollmentRecord) {
    let id = NodeId(100 * (g + 1) + k);
    let replica = ReplicaConfig {
        id: id.0,
        group: g,
        addr: format!("sim:{}", id.0),
        machine: format!("m{k}"),
        usig: usig_id(id).0,
        usig_epoch: Some(1),
        usig_start: None,
        rejoin: false,
        public_key: node_key(id).public_key().to_hex(),
    };
    (replica, enrollment(id))
}

/// Primary candidates in a test cluster.
pub const CANDIDATES: u32 = 3;

/// The USIG identity of a node in a test cluster.
pub fn usig_id(node: NodeId) -> UsigId {
    UsigId(1000 + u64::from(node.0))
}

/// A node's soft USIG (in memory, epoch 1).
pub fn usig(node: NodeId) -> SoftUsig {
    usig_in_epoch(node, Epoch(1))
}

/// A node's USIG in another epoch than the configured one (as after a reboot of its TPM).
pub fn usig_in_epoch(node: NodeId, epoch: Epoch) -> SoftUsig {
    SoftUsig::in_memory(usig_id(node), seed(b'u', u64::from(node.0)), epoch)
}

/// `replica` of `group` asks to move to `next_view` with `body`, under the first warrant of its
/// USIG.
pub fn first_view_change(
    replica: NodeId,
    group: crate::ids::GroupId,
    next_view: crate::ids::View,
    body: crate::ViewChangeBody,
) -> crate::ViewChange {
    use usig::Usig;
    let bytes = crate::ViewChange::warranted_bytes(replica, group, next_view, &body.digest());
    crate::ViewChange {
        replica,
        group,
        next_view,
        body,
        ui: usig(replica).create_ui(&bytes).unwrap(),
    }
}

/// `primary`'s PREPARE of `view` in `config_epoch` with `entries` (no JOIN, no RECONFIGURE),
/// warranted by `who`.
pub fn warranted_prepare(
    who: &mut SoftUsig,
    view: crate::ids::View,
    config_epoch: crate::ConfigEpoch,
    primary: NodeId,
    entries: Vec<crate::PrepareEntry>,
) -> crate::Prepare {
    use usig::Usig;
    let bytes = crate::Prepare::warranted_bytes(view, config_epoch, primary, &entries, &[], None);
    crate::Prepare {
        view,
        config_epoch,
        primary,
        entries,
        joins: Vec::new(),
        reconfigure: None,
        ui: who.create_ui(&bytes).unwrap(),
    }
}

/// `replica`'s COMMIT of `view` for `slot`, proposal and prefix, warranted by `who`; it
/// carries no PREPARE.
pub fn warranted_commit(
    who: &mut SoftUsig,
    view: crate::ids::View,
    replica: NodeId,
    slot: u64,
    (proposal, prefix): (usig::MessageDigest, usig::MessageDigest),
) -> crate::Commit {
    use usig::Usig;
    let bytes = crate::Commit::warranted_bytes(view, replica, slot, &proposal, &prefix);
    crate::Commit {
        view,
        replica,
        slot,
        proposal,
        prefix,
        prepare: None,
        ui: who.create_ui(&bytes).unwrap(),
    }
}

/// `replica`'s CHECKPOINT at `slot` for a running digest and an order book digest, taken on
/// `lineage` and reporting `anchors`, warranted by `who`; it names no followed candidate.
pub fn warranted_checkpoint(
    who: &mut SoftUsig,
    replica: NodeId,
    slot: u64,
    (chain, book): (usig::MessageDigest, usig::MessageDigest),
    lineage: crate::Lineage,
    anchors: Vec<crate::Anchor>,
) -> crate::Checkpoint {
    use usig::Usig;
    let bytes =
        crate::Checkpoint::warranted_bytes(replica, slot, &chain, &book, &lineage, &anchors, &[]);
    crate::Checkpoint {
        replica,
        slot,
        chain,
        book,
        lineage,
        anchors,
        followed: Vec::new(),
        ui: who.create_ui(&bytes).unwrap(),
    }
}

/// A node's signing key.
pub fn node_key(node: NodeId) -> SigningKey {
    SigningKey::from_seed(seed(b'n', u64::from(node.0)))
}

/// A client's signing key.
pub fn client_key(client: ClientId) -> SigningKey {
    SigningKey::from_seed(seed(b'c', client.0))
}

/// The key every client shares in [`TestCluster::one_endpoint`] clusters.
pub fn endpoint_key() -> SigningKey {
    SigningKey::from_seed(seed(b'e', 0))
}

/// The operator's signing key (its public key is in [`TestCluster::operated`] clusters).
pub fn operator_key() -> SigningKey {
    SigningKey::from_seed(seed(b'o', 0))
}

impl TestCluster {
    /// The layout of [`TestCluster::new`] with `spare_groups` more groups' worth of replicas
    /// enrolled but serving in no group (as `cloudbft keygen --max-groups` makes), and the
    /// operator's key: a cluster that can be reconfigured online. Returns the cluster and the
    /// spare replicas.
    pub fn operated(
        f: usize,
        groups: u32,
        spare_groups: u32,
        partitions: u32,
        clients: u64,
    ) -> (Cluster, Vec<ReplicaConfig>) {
        let mut config = TestCluster::new(f, groups + spare_groups, partitions, clients)
            .cluster
            .config;
        config.operator_key = Some(operator_key().public_key().to_hex());
        let spares: Vec<ReplicaConfig> = config
            .replicas
            .iter()
            .filter(|r| r.group >= groups)
            .cloned()
            .collect();
        config.replicas.retain(|r| r.group < groups);
        config.groups.retain(|g| g.id < groups);
        for p in 0..partitions {
            let g = p % groups;
            if let Some(group) = config.groups.iter_mut().find(|x| x.id == g) {
                if !group.partitions.contains(&p) {
                    group.partitions.push(p);
                }
            }
        }
        for g in &mut config.groups {
            g.partitions = (0..partitions).filter(|p| p % groups == g.id).collect();
        }
        let cluster = Cluster::new(config).expect("a valid operated test cluster");
        (cluster, spares)
    }
}

fn enrollment(node: NodeId) -> EnrollmentRecord {
    let public_key = usig(node).public_key();
    EnrollmentRecord::new(usig_id(node), &Enrollment::Soft { public_key })
}

fn seed(kind: u8, id: u64) -> [u8; 32] {
    let mut s = [0u8; 32];
    s[0] = kind;
    s[1..9].copy_from_slice(&id.to_be_bytes());
    s
}

/// A test application rule: the operation's bytes are the partitions it touches.
pub struct BytesArePartitions;

impl crate::message::PartitionRule for BytesArePartitions {
    fn partitions(&self, operation: &[u8]) -> Option<Vec<crate::ids::PartitionId>> {
        let mut p: Vec<crate::ids::PartitionId> = operation.iter().map(|&b| b.into()).collect();
        p.sort_unstable();
        p.dedup();
        (!p.is_empty()).then_some(p)
    }
}

/// A request of `client` touching `partitions` (its operation, under [`BytesArePartitions`]).
pub fn request(client: u64, timestamp: u64, partitions: &[u8]) -> crate::message::Request {
    let client = ClientId(client);
    let declared = partitions.iter().map(|&p| p.into()).collect();
    crate::message::Request::signed(
        client,
        timestamp,
        declared,
        partitions.to_vec(),
        &client_key(client),
    )
}

/// SplitMix64: a small generator with the same sequence for the same seed on every machine, so
/// that a failing seeded test replays exactly.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}
