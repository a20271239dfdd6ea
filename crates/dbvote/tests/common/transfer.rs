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
    let digest = snapshot.stream(true, |p| parts.push(p)).await.unwrap();
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
