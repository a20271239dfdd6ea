//! The endpoint's side of the authenticated links that its cluster's nodes open to it, on which
//! REPLYs arrive unsigned (docs/protocol.md, "REPLYs on authenticated links"). It answers to its
//! own link identity ([`Cluster::endpoints`](proto::config::Cluster::endpoints)), and takes a
//! link only from a node of a configuration epoch it knows, whose handshake signature checks
//! under that node's configured key. It opens none itself: what it sends (REQUESTs, requests
//! for the configuration) is signed.

use super::configs::Configs;
use proto::crypto::LINK_HANDSHAKE_DOMAIN;
use proto::{NodeId, Signature, SigningKey};
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::Notify;

pub(crate) struct EndpointLinks {
    /// This endpoint's link identity.
    pub me: u64,
    /// One of the endpoint's identities' keys: the trait asks for a signer, but an endpoint
    /// never opens a link, so nothing is signed with it.
    pub key: Arc<SigningKey>,
    pub configs: Arc<Configs>,
    /// Told when a node the endpoint does not know tried to open a link: a replica of an epoch
    /// it has not followed yet (a group added since), whose REPLYs it cannot take until it asks
    /// the nodes for that configuration; the node retries after its backoff.
    pub stranger: Arc<Notify>,
}

impl fmt::Debug for EndpointLinks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointLinks")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

impl net::LinkKeys for EndpointLinks {
    fn me(&self) -> u64 {
        self.me
    }

    fn identity_at(&self, _: SocketAddr) -> Option<u64> {
        None
    }

    fn sign(&self, transcript: &[u8]) -> [u8; 64] {
        self.key.sign(LINK_HANDSHAKE_DOMAIN, transcript).0
    }

    fn verify(&self, identity: u64, transcript: &[u8], signature: &[u8; 64]) -> bool {
        let Ok(node) = u32::try_from(identity) else {
            return false;
        };
        match self.configs.node_key(NodeId(node)) {
            Some(key) => key.verify(LINK_HANDSHAKE_DOMAIN, transcript, &Signature(*signature)),
            None => {
                self.stranger.notify_one();
                false
            }
        }
    }
}
