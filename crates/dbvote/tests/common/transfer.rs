//! State transfer at the executor, on real databases: a snapshot's rows installed elsewhere
//! give the same digest, and rows that do not hash to the agreed digest leave the old state.

use dbvote::transfer::Snapshot;
use dbvote::{Bank, DbError, Execution, Executor, Progress};
use proto::{TableRows, Value};

use super::*;

const PARTITIONS: u32 = 3;

/// The rows and digest of a snapshot.
async fn stream(snapshot: Snapshot) -> (Vec<TableRows>, [u8; 32]) {
    let mut parts = Vec::new();
    let digest = snapshot
        .stream(true, |p| {
            parts.push(p);
            std::future::ready(())
        })
        .await
        .unwrap();
    (parts, digest)
}

/// A database that executed the first `upto` orders of the workload.
async fn ran(kind: Kind, executions: &[Execution], upto: usize) -> (TestDb, Executor<Bank>) {
    let db = fresh(kind).await;
    let exec = open(&db, PARTITIONS).await;
    run_sequentially(&exec, &executions[..upto]).await;
    (db, exec)
}

fn partitions(progress: &Progress) -> Vec<(u32, u64, u64)> {
    progress
        .partitions
        .iter()
        .map(|p| (p.partition, p.last_seq, p.last_order))
        .collect()
}

/// A snapshot taken at order 300 streams the state at 300 even while the source executes on
/// (it is pinned when `snapshot` returns); installed on a node that is behind (at order 40)
/// and on an empty one, it gives the source's digest at 300, records the transfer, and both
/// continue executing from there to the source's final state.
pub async fn transfer_round_trip(source: Kind, target: Kind) {
    let executions = workload(PARTITIONS, 20, 500, 7);
    let (_a, a) = ran(source, &executions, 300).await;
    let at_300 = a.digest().await.unwrap();
    let snapshot = a.snapshot().await.unwrap();
    run_sequentially(&a, &executions[300..]).await;
    let (parts, digest) = stream(snapshot).await;
    assert_eq!(
        digest, at_300,
        "the snapshot is the state when it was pinned"
    );
    let rows: usize = parts.iter().map(|p| p.rows.len()).sum();
    assert_eq!(
        rows,
        60 + PARTITIONS as usize,
        "every account and progress row"
    );
    for (_b, b) in [
        ran(target, &executions, 40).await,
        ran(target, &executions, 0).await,
    ] {
        let installed = b.install(300, digest, &parts).await.unwrap();
        assert_eq!(b.digest().await.unwrap(), at_300);
        let progress = b.progress().await.unwrap();
        assert_eq!(progress.partitions, installed);
        assert_eq!(progress.transferred_through, 300);
        assert_eq!(progress.executed_through, 300);
        // It executes on from the transferred state like the source did.
        run_sequentially(&b, &executions[300..]).await;
        assert_eq!(b.digest().await.unwrap(), a.digest().await.unwrap());
        let progress = b.progress().await.unwrap();
        assert_eq!(progress.executed_through, executions.len() as u64);
        assert_eq!(
            partitions(&progress),
            partitions(&a.progress().await.unwrap())
        );
        b.close().await;
    }
    a.close().await;
}

/// Rows a Byzantine sender changed, left out, renamed or misplaced are refused, and the old
/// state is intact (digest, progress, no transfer recorded); the genuine rows still install.
pub async fn tampered_transfer_is_refused(kind: Kind) {
    let executions = workload(PARTITIONS, 10, 200, 11);
    let (_a, a) = ran(kind, &executions, 200).await;
    let (parts, digest) = stream(a.snapshot().await.unwrap()).await;
    let (_b, b) = ran(kind, &executions, 50).await;
    let before = (b.digest().await.unwrap(), b.progress().await.unwrap());

    let mut richer = parts.clone();
    richer[0].rows[3][2] = match &richer[0].rows[3][2] {
        Value::Int(cents) => Value::Int(cents + 1),
        other => panic!("balance is {other:?}"),
    };
    let mut fewer = parts.clone();
    fewer[0].rows.pop();
    let mut renamed = parts.clone();
    renamed[0].columns[2] = "balance_cents = 0; --".into();
    let mut swapped = parts.clone();
    swapped[0].columns.swap(0, 1);
    let mut elsewhere = parts.clone();
    elsewhere[0].table = 7;
    let mut short = parts.clone();
    short[0].rows[0].pop();
    let mut rolled_back = parts.clone();
    // The progress table claims partition 0 is further than it is (with the true digest).
    rolled_back[1].rows[0][1] = Value::Int(0);
    let cases = [
        ("a changed balance", richer, false),
        ("a missing row", fewer, false),
        ("an injected column name", renamed, true),
        ("swapped columns", swapped, false),
        ("an unknown table", elsewhere, true),
        ("a short row", short, true),
        ("a changed progress row", rolled_back, false),
    ];
    for (what, tampered, invalid) in cases {
        match b.install(200, digest, &tampered).await {
            Err(DbError::StateMismatch { order: 200 }) if !invalid => {}
            Err(DbError::InvalidState { order: 200, .. }) if invalid => {}
            other => panic!("{what}: {other:?}"),
        }
        assert_eq!(
            (b.digest().await.unwrap(), b.progress().await.unwrap()),
            before,
            "{what}: the old state is intact"
        );
    }
    b.install(200, digest, &parts).await.unwrap();
    assert_eq!(b.digest().await.unwrap(), digest);
    a.close().await;
    b.close().await;
}

/// The voter and a real database together: a node behind asks for the state, the designated
/// sender (Byzantine) streams rows with one balance changed, the executor refuses them against
/// the digest the two other nodes signed, the voter asks again naming the other sender, and the
/// genuine rows install.
pub async fn byzantine_sender_is_detected_and_another_sender_used(kind: Kind) {
    use dbvote::voter::{transfer::STALL_TICKS, VoterAction, VoterCore};
    use proto::testing::{client_key, node_key, TestCluster};
    use proto::{ClientId, CommitDb, DbCheckpoint, GroupId, Message, NodeId, Request};
    use proto::{Signature, StateChunk};
    use std::sync::Arc;

    // The state after order 6 at a correct node: six accounts opened on partition 0.
    let ops: Vec<BankOp> = (0..6)
        .map(|number| BankOp::Open {
            branch: 0,
            number,
            initial_cents: 100,
        })
        .collect();
    let mut sequencer = Sequencer::new(PARTITIONS);
    let executions: Vec<Execution> = ops.iter().map(|op| sequencer.bank(op)).collect();
    let (_a, a) = ran(kind, &executions, 6).await;
    let (parts, digest) = stream(a.snapshot().await.unwrap()).await;

    // Node 11 is empty; it decided order 6 (the sixth account) and cannot run it.
    let (_b, b) = ran(kind, &executions, 0).await;
    let cluster = Arc::new(TestCluster::new(1, 1, PARTITIONS, 1).cluster);
    let rule = Arc::new(dbvote::AppRule(Bank));
    let mut voter = VoterCore::new(cluster, rule, node_key(NodeId(11)), NodeId(11), vec![0; 3]);
    let sixth = &ops[5];
    let request = Request::signed(
        ClientId(1),
        1,
        sixth.partitions(),
        sixth.encode(),
        &client_key(ClientId(1)),
    );
    for replica in [101, 102] {
        let commit_db = CommitDb {
            config_epoch: voter_epoch(),
            group: GroupId(0),
            replica: NodeId(replica),
            executions: vec![proto::Execution {
                order: 6,
                positions: vec![(0, 6)],
                request: request.body(),
            }],
        };
        let (actions, malformed) = voter.on_commit_db(commit_db.replica, commit_db).unwrap();
        assert!(actions.is_empty() && malformed == 0, "{actions:?}");
    }
    let mut asked = Vec::new();
    for _ in 0..STALL_TICKS * 4 {
        let new: Vec<_> = voter
            .tick()
            .into_iter()
            .filter_map(|a| match a {
                VoterAction::ToDbNodes { message, .. } => match *message {
                    Message::StateRequest(r) => Some(r),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        let Some(request) = new.last().cloned() else {
            continue;
        };
        asked.extend(new);
        let sender = request.sender;
        let target = request.target_order;
        assert_eq!(target, 6, "the highest order it saw decided");
        // Node 12 is Byzantine: it changes a balance in the rows it streams; node 13 is not.
        let mut rows = parts.clone();
        if sender == NodeId(12) {
            rows[0].rows[0][2] = Value::Int(1_000_000);
        }
        // Both sign the true digest.
        let mut actions = Vec::new();
        let count = rows.len();
        for (index, part) in rows.into_iter().enumerate() {
            let chunk = StateChunk {
                db_node: sender,
                order: target,
                index: index as u32,
                last: index + 1 == count,
                rows: part,
                signature: Signature([0; 64]),
            }
            .sign(&node_key(sender));
            actions.extend(voter.on_state_chunk(chunk).unwrap());
        }
        for signer in [12, 13] {
            let checkpoint = DbCheckpoint {
                db_node: NodeId(signer),
                target,
                order: target,
                digest: Some(digest),
                signature: Signature([0; 64]),
            }
            .sign(&node_key(NodeId(signer)));
            actions.extend(voter.on_db_checkpoint(&checkpoint).unwrap());
        }
        let [VoterAction::Install {
            order,
            digest: agreed,
            parts,
        }] = actions.as_slice()
        else {
            panic!("{actions:?}");
        };
        assert_eq!((*order, *agreed), (6, digest));
        match b.install(*order, *agreed, parts).await {
            Err(DbError::StateMismatch { .. }) => {
                assert_eq!(sender, NodeId(12), "only the tampered rows are refused");
                assert_eq!(b.progress().await.unwrap().transferred_through, 0);
                assert!(voter.install_failed(6).is_empty());
            }
            Ok(progress) => {
                assert_eq!(sender, NodeId(13));
                let last_seq = progress.iter().map(|p| p.last_seq).collect();
                voter.installed(6, last_seq);
                assert_eq!(voter.transferring(), None);
                assert_eq!(b.digest().await.unwrap(), digest);
                assert_eq!(b.progress().await.unwrap().transferred_through, 6);
                let senders: Vec<NodeId> = asked.iter().map(|r| r.sender).collect();
                assert_eq!(senders, [NodeId(12), NodeId(13)], "refused, then the other");
                a.close().await;
                b.close().await;
                return;
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    panic!("no transfer installed; requests: {asked:?}");
}

fn voter_epoch() -> proto::ConfigEpoch {
    proto::testing::TestCluster::new(1, 1, PARTITIONS, 1)
        .cluster
        .epoch()
}
