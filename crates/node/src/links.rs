//! A node's identity on authenticated links (`net::link`): its id and key, and the address and
//! key of every node of the configuration epochs it has known.
//!
//! Links to nodes are authenticated, so that COMMIT-DBs and REPLY-COMMIT-DBs need no
//! signature (docs/protocol.md, "Authenticated links"); connections to clients and to the
//! operator stay plain (everything sent on them is signed). Only configured nodes may open a
//! link to this node: a client or a stranger opens plain connections, on which a COMMIT-DB or
//! REPLY-COMMIT-DB counts for nothing.

use proto::config::Cluster;
use proto::{NodeId, PublicKey, Signature, SigningKey};
use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{PoisonError, RwLock};

/// Domain of the handshake signatures, apart from every protocol message's.
const DOMAIN: &[u8] = b"cloudbft/link-handshake/v1";

/// Implements `net::LinkKeys` for a node.
pub(crate) struct Links {
    me: NodeId,
    key: SigningKey,
    known: RwLock<Known>,
}

#[derive(Default)]
struct Known {
    /// Who listens at each node address (the latest epoch's, when an address moved).
    at: HashMap<SocketAddr, NodeId>,
    /// Every node's key, of every epoch known: a removed group's members finish their closed
    /// epoch's work (database nodes answer their COMMIT-DBs) before they stop.
    keys: HashMap<NodeId, PublicKey>,
}

impl fmt::Debug for Links {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Links")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

impl Links {
    pub fn new(
        me: NodeId,
        key: SigningKey,
        nodes: &HashMap<SocketAddr, NodeId>,
        cluster: &Cluster,
    ) -> Self {
        let links = Links {
            me,
            key,
            known: RwLock::default(),
        };
        links.learn(nodes, cluster);
        links
    }

    /// Adds a configuration epoch's nodes (`nodes`: their addresses, already parsed).
    pub fn learn(&self, nodes: &HashMap<SocketAddr, NodeId>, cluster: &Cluster) {
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        known.at.extend(nodes);
        for &node in nodes.values() {
            if let Some(key) = cluster.node_key(node) {
                known.keys.insert(node, *key);
            }
        }
    }
}

impl net::LinkKeys for Links {
    fn me(&self) -> u64 {
        u64::from(self.me.0)
    }

    fn identity_at(&self, addr: SocketAddr) -> Option<u64> {
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        known.at.get(&addr).map(|node| u64::from(node.0))
    }

    fn sign(&self, transcript: &[u8]) -> [u8; 64] {
        self.key.sign(DOMAIN, transcript).0
    }

    fn verify(&self, identity: u64, transcript: &[u8], signature: &[u8; 64]) -> bool {
        let Ok(node) = u32::try_from(identity) else {
            return false;
        };
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        known
            .keys
            .get(&NodeId(node))
            .is_some_and(|key| key.verify(DOMAIN, transcript, &Signature(*signature)))
    }
}
