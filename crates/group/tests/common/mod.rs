//! What the replica core's tests share: a one-group cluster (f=1, members 101, 102 and 103),
//! its view-0 primary, and members that warrant what their core asks for.

// Each test file uses a part of this.
#![allow(dead_code)]

use group::core::{Action, Reject, ReplicaCore};
use group::render::Renderer;
use proto::config::Cluster;
use proto::testing::{node_key, request, usig, warranted_prepare, BytesArePartitions, TestCluster};
use proto::{
    Checkpoint, Commit, GroupId, NodeId, Prepare, PrepareEntry, Proposal, ReqViewChange, Signature,
    View, ViewChange,
};
use std::ops::RangeInclusive;
use std::sync::Arc;
use usig::soft::SoftUsig;
use usig::Usig;

/// Pages are the results themselves.
pub struct Plain;

impl Renderer for Plain {
    fn render(&self, _: &proto::RequestBody, result: &[u8]) -> Vec<u8> {
        result.to_vec()
    }
}

/// One group of three replicas, one partition per byte of a request.
pub fn cluster() -> Arc<Cluster> {
    Arc::new(TestCluster::new(1, 1, 2, 4).cluster)
}

/// Replica `me`'s core, in view 0.
pub fn replica(cluster: &Arc<Cluster>, me: NodeId) -> ReplicaCore {
    let rule = Arc::new(BytesArePartitions);
    ReplicaCore::new(cluster.clone(), rule, Arc::new(Plain), node_key(me), me, 20).unwrap()
}

/// The view-0 primary: its PREPAREs in counter order.
pub struct Primary {
    usig: SoftUsig,
    epoch: proto::ConfigEpoch,
    timestamp: u64,
}

impl Primary {
    pub fn new(cluster: &Cluster) -> Self {
        Primary {
            usig: usig(NodeId(0)),
            epoch: cluster.epoch(),
            timestamp: 0,
        }
    }

    /// The next PREPARE, one request for partition 0 (our group's work).
    pub fn prepare(&mut self) -> Prepare {
        self.timestamp += 1;
        let entries = vec![PrepareEntry {
            group: GroupId(0),
            request: request(1, self.timestamp, &[0]),
        }];
        self.warrant(View(0), entries)
    }

    /// The next PREPARE, without entries: it starts no agreement.
    pub fn empty(&mut self) -> Prepare {
        self.warrant(View(0), Vec::new())
    }

    /// The next counter spent on a PREPARE that names another view: not one of view 0's, so a
    /// null slot of its history.
    pub fn misnamed(&mut self) -> Prepare {
        self.warrant(View(7), Vec::new())
    }

    /// The next PREPARE of view 0, with one request whose operation is over the size limit
    /// every replica applies (`proto::limits`).
    pub fn oversized(&mut self) -> Prepare {
        self.timestamp += 1;
        let client = proto::ClientId(1);
        let operation = vec![0; proto::limits::MAX_OPERATION_BYTES + 1];
        let key = proto::testing::client_key(client);
        let request = proto::Request::signed(client, self.timestamp, vec![0], operation, &key);
        let entries = vec![PrepareEntry {
            group: GroupId(0),
            request,
        }];
        self.warrant(View(0), entries)
    }

    fn warrant(&mut self, view: View, entries: Vec<PrepareEntry>) -> Prepare {
        warranted_prepare(&mut self.usig, view, self.epoch, NodeId(0), entries)
    }
}

/// The view-0 primary and members 101 and 102 of [`cluster`], correct (103 is the test's to
/// play).
pub struct Group {
    pub cluster: Arc<Cluster>,
    pub primary: Primary,
    pub replica: Member,
    pub peer: Member,
}

impl Group {
    pub fn new() -> Self {
        let cluster = cluster();
        Group {
            primary: Primary::new(&cluster),
            replica: Member::new(&cluster, 101),
            peer: Member::new(&cluster, 102),
            cluster,
        }
    }
}

/// A correct member: its core and its USIG.
pub struct Member {
    pub core: ReplicaCore,
    usig: SoftUsig,
}

/// What a member's core did with a message, once it warranted everything it asked for.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Its COMMITs, warranted.
    pub commits: Vec<Commit>,
    /// The slots it decided (and recorded).
    pub decided: Vec<u64>,
    /// The views it asked to move to.
    pub asked: Vec<View>,
    /// Its VIEW-CHANGEs, warranted.
    pub view_changes: Vec<ViewChange>,
    /// Its CHECKPOINTs, warranted.
    pub checkpoints: Vec<Checkpoint>,
    /// The counters it asked a candidate for again.
    pub fetched_prepares: Vec<RangeInclusive<u64>>,
}

impl Member {
    pub fn new(cluster: &Arc<Cluster>, me: u32) -> Self {
        Member {
            core: replica(cluster, NodeId(me)),
            usig: usig(NodeId(me)),
        }
    }

    /// A PREPARE from the primary.
    pub fn prepare(&mut self, prepare: &Prepare) -> Outcome {
        self.try_prepare(prepare).unwrap()
    }

    /// A PREPARE from the primary, which may be refused.
    pub fn try_prepare(&mut self, prepare: &Prepare) -> Result<Outcome, Reject> {
        let actions = self.core.on_proposal(Proposal::Prepare(prepare.clone()))?;
        Ok(self.settle(actions))
    }

    /// A peer's COMMIT.
    pub fn commit(&mut self, commit: Commit) -> Result<Outcome, Reject> {
        let actions = self.core.on_commit(commit)?;
        Ok(self.settle(actions))
    }

    /// A CHECKPOINT of a member of the group.
    pub fn checkpoint(&mut self, checkpoint: Checkpoint) -> Result<Outcome, Reject> {
        let actions = self.core.on_checkpoint(checkpoint)?;
        Ok(self.settle(actions))
    }

    /// Peer `from` asks for `next_view`.
    pub fn asked_by(&mut self, from: u32, next_view: View) -> Outcome {
        let req = ReqViewChange {
            replica: NodeId(from),
            next_view,
            signature: Signature([0; 64]),
        }
        .sign(&node_key(NodeId(from)));
        let actions = self.core.on_req_view_change(&req).unwrap();
        self.settle(actions)
    }

    /// Warrants what the core asks for and records what it decides, until it asks for nothing
    /// more.
    fn settle(&mut self, mut actions: Vec<Action>) -> Outcome {
        let mut outcome = Outcome::default();
        while !actions.is_empty() {
            let mut next = Vec::new();
            for action in actions {
                match action {
                    Action::Warrant { bytes } => {
                        let ui = self.usig.create_ui(&bytes).unwrap();
                        next.extend(self.core.warranted(ui));
                    }
                    Action::SendCommit { to: None, commit } => outcome.commits.push(*commit),
                    Action::SendReqViewChange(req) => outcome.asked.push(req.next_view),
                    Action::SendCheckpoint {
                        to: None,
                        checkpoint,
                    } => outcome.checkpoints.push(checkpoint),
                    Action::SendViewChange {
                        to: None,
                        view_change,
                    } => outcome.view_changes.push(*view_change),
                    Action::FetchPrepares { counters, .. } => {
                        outcome.fetched_prepares.push(counters)
                    }
                    Action::Persist { slot, .. } => {
                        outcome.decided.push(slot);
                        next.extend(self.core.persisted(slot));
                    }
                    _ => {}
                }
            }
            actions = next;
        }
        outcome
    }
}
