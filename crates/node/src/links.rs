//! A node's identity on authenticated links (`net::link`): its id and key, the address and key
//! of every node of the configuration epochs it has known, and the address and link identity
//! of every client endpoint.
//!
//! Links to nodes are authenticated, so that COMMIT-DBs and REPLY-COMMIT-DBs need no
//! signature (docs/protocol.md, "Authenticated links"); so are links to client endpoints, so
//! that REPLYs need none (docs/protocol.md, "REPLYs on authenticated links"). Connections to the
//! operator stay plain (everything sent on them is signed). Only configured nodes may open a
//! link to this node: a client or a stranger opens plain connections, on which a COMMIT-DB or
//! REPLY-COMMIT-DB counts for nothing.

use proto::config::Cluster;
use proto::crypto::LINK_HANDSHAKE_DOMAIN;
use proto::{NodeId, PublicKey, Signature, SigningKey};
use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{PoisonError, RwLock};

/// Implements `net::LinkKeys` for a node.
pub(crate) struct Links {
    me: NodeId,
    key: SigningKey,
    known: RwLock<Known>,
}

#[derive(Default)]
struct Known {
    /// Who listens at each node address (the latest epoch's, when an address moved) and at
    /// each client endpoint's, by link identity.
    at: HashMap<SocketAddr, u64>,
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
    pub fn new(me: NodeId, key: SigningKey, at: &LinkAddresses, cluster: &Cluster) -> Self {
        let links = Links {
            me,
            key,
            known: RwLock::default(),
        };
        links.learn(at, cluster);
        links
    }

    /// Adds a configuration epoch's nodes and client endpoints (`at`: their addresses, already
    /// parsed).
    pub fn learn(&self, at: &LinkAddresses, cluster: &Cluster) {
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        for (&addr, &node) in &at.nodes {
            known.at.insert(addr, u64::from(node.0));
            if let Some(key) = cluster.node_key(node) {
                known.keys.insert(node, *key);
            }
        }
        known.at.extend(&at.endpoints);
    }
}

/// Who listens where, as a configuration names them: nodes by id, client endpoints by their
/// link identity ([`Cluster::endpoints`]).
#[derive(Default)]
pub(crate) struct LinkAddresses {
    pub nodes: HashMap<SocketAddr, NodeId>,
    pub endpoints: HashMap<SocketAddr, u64>,
}

impl net::LinkKeys for Links {
    fn me(&self) -> u64 {
        u64::from(self.me.0)
    }

    fn identity_at(&self, addr: SocketAddr) -> Option<u64> {
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        known.at.get(&addr).copied()
    }

    fn sign(&self, transcript: &[u8]) -> [u8; 64] {
        self.key.sign(LINK_HANDSHAKE_DOMAIN, transcript).0
    }

    fn verify(&self, identity: u64, transcript: &[u8], signature: &[u8; 64]) -> bool {
        let Ok(node) = u32::try_from(identity) else {
            return false;
        };
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        known.keys.get(&NodeId(node)).is_some_and(|key| {
            key.verify(LINK_HANDSHAKE_DOMAIN, transcript, &Signature(*signature))
        })
    }
}
