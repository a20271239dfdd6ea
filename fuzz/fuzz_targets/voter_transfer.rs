//! A database node's voter core fed STATE-CHUNKs, DB-CHECKPOINTs and STATE-REQUESTs (signed by
//! the database node they name, or forged), COMMIT-DBs, and its driver's calls, in any order
//! (`cloudbft_fuzz::VoterEvent`). Besides never panicking, it must install rows only for a
//! digest that f+1 = 2 other database nodes signed for that order, in table order, within
//! `MAX_TRANSFER_BYTES`. The driver is modelled faithfully: it completes only what the core
//! released, installs only what it was told to, and pins only the snapshots it was asked for.
#![no_main]

use cloudbft_fuzz::VoterEvent;
use dbvote::voter::transfer::MAX_TRANSFER_BYTES;
use dbvote::voter::{VoterAction, VoterCore};
use libfuzzer_sys::fuzz_target;
use proto::config::Cluster;
use proto::testing::{self, node_key, BytesArePartitions};
use proto::{
    CommitDb, DbCheckpoint, Execution, GroupId, NodeId, Signature, StateChunk, StateRequest, Value,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, LazyLock};

/// f = 1, one group, two partitions, database nodes 11, 12 and 13; the voter is node 11.
static CLUSTER: LazyLock<Arc<Cluster>> =
    LazyLock::new(|| Arc::new(testing::TestCluster::new(1, 1, 2, 4).cluster));
const ME: NodeId = NodeId(11);

fn db_node(from: u8) -> NodeId {
    NodeId(11 + u32::from(from % 3))
}

/// What the driver holds: released executions, the install and the snapshots it was asked for.
#[derive(Default)]
struct Driver {
    released: Vec<u64>,
    install: Option<u64>,
    snapshots: BTreeSet<u64>,
    /// Database nodes other than this one that validly signed each (order, digest).
    signed: BTreeMap<(u64, [u8; 32]), BTreeSet<NodeId>>,
    /// Orders whose stored results the voter asked for (answered with none: nothing is stored).
    lookups: Vec<u64>,
}

impl Driver {
    fn take(&mut self, actions: Vec<VoterAction>) {
        for action in actions {
            match action {
                VoterAction::Execute(batch) => self.released.extend(batch.iter().map(|e| e.order)),
                VoterAction::LookUp { orders } => self.lookups.extend(orders),
                VoterAction::Snapshot { order, .. } => {
                    self.snapshots.insert(order);
                }
                VoterAction::Install {
                    order,
                    digest,
                    parts,
                } => {
                    let signers = self.signed.get(&(order, digest)).map_or(0, BTreeSet::len);
                    assert!(
                        signers >= 2,
                        "installing order {order} with a digest {signers} other nodes signed"
                    );
                    assert!(parts.iter().all(|p| !p.rows.is_empty()));
                    assert!(parts.windows(2).all(|w| w[0].table <= w[1].table));
                    let bytes: usize = parts
                        .iter()
                        .flat_map(|p| p.rows.iter().flatten())
                        .map(Value::weight)
                        .sum();
                    assert!(bytes <= MAX_TRANSFER_BYTES);
                    assert!(self.install.is_none(), "a second install while one runs");
                    self.install = Some(order);
                }
                // Results are forgotten only 16,384 orders behind the executed ones, far past
                // what an input executes; the voter's unit test covers it.
                VoterAction::Reply { .. }
                | VoterAction::ToDbNodes { .. }
                | VoterAction::ForgetResults { .. } => {}
            }
        }
    }
}

fn sign<T>(forged: bool, from: NodeId, message: T, sign: impl Fn(T, &proto::SigningKey) -> T) -> T {
    if forged {
        message
    } else {
        sign(message, &node_key(from))
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(events) = wire::decode::<Vec<VoterEvent>>(data) else {
        return;
    };
    let mut voter = VoterCore::new(
        CLUSTER.clone(),
        Arc::new(BytesArePartitions),
        node_key(ME),
        ME,
        vec![0, 0],
    );
    let mut driver = Driver::default();
    for event in events {
        let actions = match event {
            VoterEvent::Chunk {
                from,
                forged,
                order,
                index,
                last,
                rows,
            } => {
                let from = db_node(from);
                let chunk = StateChunk {
                    db_node: from,
                    order,
                    index,
                    last,
                    rows,
                    signature: Signature([0; 64]),
                };
                voter
                    .on_state_chunk(sign(forged, from, chunk, StateChunk::sign))
                    .unwrap_or_default()
            }
            VoterEvent::Checkpoint {
                from,
                forged,
                target,
                order,
                digest,
            } => {
                let from = db_node(from);
                if let (false, Some(digest), false) = (forged, digest, from == ME) {
                    driver
                        .signed
                        .entry((order, digest))
                        .or_default()
                        .insert(from);
                }
                let checkpoint = DbCheckpoint {
                    db_node: from,
                    target,
                    order,
                    digest,
                    signature: Signature([0; 64]),
                };
                let checkpoint = sign(forged, from, checkpoint, DbCheckpoint::sign);
                voter.on_db_checkpoint(&checkpoint).unwrap_or_default()
            }
            VoterEvent::Request {
                from,
                target,
                sender,
            } => {
                let from = db_node(from);
                let request = StateRequest {
                    db_node: from,
                    target_order: target,
                    sender: db_node(sender),
                    signature: Signature([0; 64]),
                }
                .sign(&node_key(from));
                voter.on_state_request(&request).unwrap_or_default()
            }
            VoterEvent::Decide {
                order,
                partition,
                position,
            } => {
                let partition = partition % 2;
                let execution = Execution {
                    order,
                    positions: vec![(partition.into(), position)],
                    request: testing::request(order % 4 + 1, order, &[partition]).body(),
                };
                let mut actions = Vec::new();
                for replica in [NodeId(101), NodeId(102)] {
                    let commit_db = CommitDb {
                        config_epoch: CLUSTER.epoch(),
                        group: GroupId(0),
                        replica,
                        executions: vec![execution.clone()],
                    };
                    if let Ok((more, _)) = voter.on_commit_db(replica, commit_db) {
                        actions.extend(more);
                    }
                }
                actions
            }
            VoterEvent::Ticks(n) => (0..n).flat_map(|_| voter.tick()).collect(),
            VoterEvent::Executed(pick) if !driver.released.is_empty() => {
                let at = pick as usize % driver.released.len();
                let order = driver.released.remove(at);
                voter.executed(order, Vec::new())
            }
            VoterEvent::Installed { order, last_seq } if driver.install == Some(order) => {
                driver.install = None;
                let mut last_seq = last_seq;
                last_seq.resize(2, 0);
                voter.installed(order, last_seq)
            }
            VoterEvent::InstallFailed(order) if driver.install == Some(order) => {
                driver.install = None;
                voter.install_failed(order)
            }
            VoterEvent::SnapshotPinned(order) if driver.snapshots.remove(&order) => {
                voter.snapshot_pinned(order)
            }
            _ => Vec::new(),
        };
        driver.take(actions);
        if !driver.lookups.is_empty() {
            let found = driver.lookups.drain(..).map(|o| (o, None)).collect();
            let looked_up = voter.looked_up(found);
            assert!(
                looked_up.actions.is_empty(),
                "nothing stored, nothing answered"
            );
            assert!(looked_up.missing > 0);
        }
    }
});
