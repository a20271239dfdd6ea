//! A restarted group replica's messages (docs/protocol.md, "Replica recovery"): the JOIN that
//! starts its new incarnation once the primary orders it, and the state it takes from a peer.

use crate::config::Cluster;
use crate::crypto::{PublicKey, Signature, SigningKey};
use crate::ids::{ConfigEpoch, NodeId};
use crate::message::canonical;
use crate::view::{Proposal, StableCheckpoint};
use serde::{Deserialize, Serialize};
use usig::{MessageDigest, UniqueWarrant};

/// Where a replica's current incarnation starts in its warrant sequence: its JOIN's epoch and
/// counter, or the configured epoch and counter 0 before any JOIN. Only messages after it count,
/// and its VIEW-CHANGEs only once a stable checkpoint's order book records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Incarnation {
    pub epoch: u64,
    pub counter: u64,
}

/// A restarted replica's first warranted message: it forgot what it warranted before, so its
/// peers must stop waiting for those counters, and only the global order may tell them when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Join {
    pub replica: NodeId,
    pub config_epoch: ConfigEpoch,
    /// The replica's warrant over [`Join::warranted_bytes`].
    pub ui: UniqueWarrant,
}

impl Join {
    /// What the replica's USIG warrants.
    pub fn warranted_bytes(replica: NodeId, config_epoch: ConfigEpoch) -> Vec<u8> {
        canonical(&(b"cloudbft/join/v1", replica, config_epoch))
    }

    /// This JOIN's warranted bytes.
    pub fn own_warranted_bytes(&self) -> Vec<u8> {
        Self::warranted_bytes(self.replica, self.config_epoch)
    }

    /// Whether it is a JOIN of a replica of `cluster`, of its configuration epoch, warranted by
    /// that replica's USIG.
    pub fn is_valid_in(&self, cluster: &Cluster) -> bool {
        let replica = cluster.group_of_replica(self.replica).is_some();
        let usig = cluster.usig_of(self.replica).filter(|_| replica);
        self.config_epoch == cluster.epoch()
            && usig.is_some_and(|u| {
                cluster
                    .directory
                    .verify_ui(u, &self.own_warranted_bytes(), &self.ui)
                    .is_ok()
            })
    }

    /// The incarnation it starts.
    pub fn incarnation(&self) -> Incarnation {
        Incarnation {
            epoch: self.ui.epoch.0,
            counter: self.ui.counter,
        }
    }
}

/// A recovering replica asks a member of its group for its latest stable state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryRequest {
    pub replica: NodeId,
    pub signature: Signature,
}

crate::node_signed!(RecoveryRequest, b"cloudbft/recovery-request/v1", |m| m
    .replica);

/// A member's stable state, all of it checkable without trusting the member: the stable
/// checkpoint (f+1 CHECKPOINTs of every group), the proposal at its slot with the running digest
/// before it (the checkpoint's digest certifies the exact warrant, and so the position to follow
/// the primary from), and the NEW-VIEW of that proposal's view (the lineage the CHECKPOINTs name
/// certifies it). Signed, so that only members of the group make a replica check one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryState {
    pub replica: NodeId,
    pub stable: StableCheckpoint,
    /// The running digest of the slots before the stable one.
    pub witness: MessageDigest,
    /// The PREPARE or NEW-VIEW at the stable slot.
    pub at: Proposal,
    /// The encoded NEW-VIEW of `at`'s view (none in view 0, or when `at` is that NEW-VIEW).
    pub base: Option<Vec<u8>>,
    pub signature: Signature,
}

crate::node_signed!(RecoveryState, b"cloudbft/recovery-state/v1", |m| (
    m.replica,
    &m.stable,
    m.witness.0,
    &m.at,
    &m.base
));
