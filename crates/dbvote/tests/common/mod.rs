//! Shared by the SQLite and PostgreSQL test suites: fresh databases, a seeded bank workload with
//! its partition positions, and drivers that feed an executor in valid orders.
#![allow(dead_code)]

pub mod scenarios;
pub mod transfer;

/// One test per scenario on one backend.
macro_rules! on_backend {
    ($kind:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                scenarios::$name($kind).await;
            }
        )*
    };
}
pub(crate) use on_backend;

/// Every backend-independent scenario as a test on one backend.
macro_rules! every_scenario {
    ($kind:expr) => {
        $crate::common::on_backend!(
            $kind;
            executes_in_order,
            not_ready_for_missing_predecessor,
            disjoint_partitions_run_concurrently,
            multi_partition_waits_on_all_partitions,
            already_executed_returns_stored_result,
            forgotten_results_stay_executed,
            conflicting_positions_are_errors,
            malformed_and_invalid_are_errors,
            dropped_mid_stream_resumes,
            interleavings_reach_identical_state,
            refuses_foreign_database,
            batches_chain_and_are_atomic,
            bank_matches_its_model,
            bank_batches_match_its_model,
            tampered_transfer_is_refused,
            byzantine_sender_is_detected_and_another_sender_used,
        );
    };
}
pub(crate) use every_scenario;

use std::collections::BTreeMap;
use std::time::Duration;

use dbvote::{Bank, BankOp, Execution, Executor, Outcome, PartitionId};
use tokio::sync::watch;
use tokio::task::JoinSet;

pub use dbvote::testing::{fresh, Kind, TestDb};

pub async fn open(db: &TestDb, partitions: u32) -> Executor<Bank> {
    Executor::open(&db.url, Bank, partitions).await.unwrap()
}

pub use proto::testing::Rng;

pub use dbvote::testing::Sequencer;

pub const INITIAL_CENTS: u64 = 10_000;

/// Opens `accounts` accounts per branch, then `ops` random deposits, transfers (some across
/// branches, some with insufficient funds) and balance reads.
pub fn workload(partitions: u32, accounts: u32, ops: usize, seed: u64) -> Vec<Execution> {
    let mut rng = Rng::new(seed);
    let mut seq = Sequencer::new(partitions);
    let mut out = Vec::new();
    for branch in 0..partitions {
        for number in 0..accounts {
            out.push(seq.bank(&BankOp::Open {
                branch,
                number,
                initial_cents: INITIAL_CENTS,
            }));
        }
    }
    let account = |rng: &mut Rng, branch: Option<u32>| {
        let branch = branch.unwrap_or_else(|| rng.below(u64::from(partitions)) as u32);
        (branch, rng.below(u64::from(accounts)) as u32)
    };
    for _ in 0..ops {
        let roll = rng.below(100);
        let op = if roll < 45 {
            let (branch, number) = account(&mut rng, None);
            BankOp::Deposit {
                branch,
                number,
                cents: rng.below(5_000),
            }
        } else if roll < 85 {
            let from = account(&mut rng, None);
            let to = account(&mut rng, Some(from.0));
            BankOp::Transfer {
                from,
                to,
                cents: rng.below(20_000),
            }
        } else if roll < 95 {
            let from = account(&mut rng, None);
            let to = account(&mut rng, None);
            BankOp::Transfer {
                from,
                to,
                cents: rng.below(20_000),
            }
        } else {
            let (branch, number) = account(&mut rng, None);
            BankOp::Balance { branch, number }
        };
        out.push(seq.bank(&op));
    }
    out
}

/// Only single-partition operations.
pub fn single_partition_workload(partitions: u32, ops: usize, seed: u64) -> Vec<Execution> {
    let mut rng = Rng::new(seed);
    let mut seq = Sequencer::new(partitions);
    let mut out = Vec::new();
    for branch in 0..partitions {
        out.push(seq.bank(&BankOp::Open {
            branch,
            number: 0,
            initial_cents: INITIAL_CENTS,
        }));
    }
    for _ in 0..ops {
        let branch = rng.below(u64::from(partitions)) as u32;
        out.push(seq.bank(&BankOp::Deposit {
            branch,
            number: 0,
            cents: 1 + rng.below(100),
        }));
    }
    out
}

/// A random order of `executions` that respects every partition's sequence.
pub fn shuffled_valid_order(executions: &[Execution], seed: u64) -> Vec<Execution> {
    let mut rng = Rng::new(seed);
    let mut next: BTreeMap<PartitionId, u64> = BTreeMap::new();
    let mut pending: Vec<&Execution> = executions.iter().collect();
    let mut out = Vec::new();
    while !pending.is_empty() {
        let ready: Vec<usize> = (0..pending.len())
            .filter(|&i| {
                pending[i]
                    .positions
                    .iter()
                    .all(|&(p, s)| next.get(&p).copied().unwrap_or(0) + 1 == s)
            })
            .collect();
        assert!(!ready.is_empty(), "workload has no valid order");
        let chosen = pending.swap_remove(ready[rng.below(ready.len() as u64) as usize]);
        for &(p, s) in &chosen.positions {
            next.insert(p, s);
        }
        out.push(chosen.clone());
    }
    out
}

/// Executes in the given order, one at a time; every execution must run now.
pub async fn run_sequentially(
    exec: &Executor<Bank>,
    executions: &[Execution],
) -> BTreeMap<u64, Vec<u8>> {
    let mut results = BTreeMap::new();
    for e in executions {
        match exec.execute(e).await.unwrap() {
            Outcome::Executed(r) => {
                results.insert(e.order, r);
            }
            other => panic!("order {} did not run: {other:?}", e.order),
        }
    }
    results
}

/// One task per partition, each feeding its partition's executions in sequence order, as a
/// voter would: on `NotReady` it waits until some execution completes and tries again. A
/// multi-partition execution is offered by all its partitions' tasks; one runs it, the others
/// see `AlreadyExecuted`. `on_done` is called with each order as it completes.
pub async fn run_concurrently(
    exec: &Executor<Bank>,
    executions: &[Execution],
    on_done: impl Fn(u64) + Send + Sync + Clone + 'static,
) -> BTreeMap<u64, Vec<u8>> {
    let mut queues: BTreeMap<PartitionId, Vec<Execution>> = BTreeMap::new();
    for e in executions {
        for &(p, _) in &e.positions {
            queues.entry(p).or_default().push(e.clone());
        }
    }
    let (done_tx, done_rx) = watch::channel(0u64);
    // A JoinSet, so that dropping this future (a test simulating a crash) aborts every task.
    let mut tasks = JoinSet::new();
    for (_, mut queue) in queues {
        queue.sort_by_key(|e| e.order);
        let exec = exec.clone();
        let done_tx = done_tx.clone();
        let mut done_rx = done_rx.clone();
        let on_done = on_done.clone();
        tasks.spawn(async move {
            let mut results = Vec::new();
            for e in queue {
                loop {
                    done_rx.borrow_and_update();
                    match exec.execute(&e).await.unwrap() {
                        Outcome::Executed(r) | Outcome::AlreadyExecuted(r) => {
                            on_done(e.order);
                            done_tx.send_modify(|n| *n += 1);
                            results.push((e.order, r));
                            break;
                        }
                        Outcome::NotReady { .. } => done_rx.changed().await.unwrap(),
                    }
                }
            }
            results
        });
    }
    drop(done_tx);
    let mut results = BTreeMap::new();
    let all = async {
        while let Some(task) = tasks.join_next().await {
            for (order, r) in task.unwrap() {
                if let Some(previous) = results.insert(order, r.clone()) {
                    assert_eq!(previous, r, "order {order} gave two results");
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("concurrent run stalled");
    results
}

/// Runs `executions` in order on a fresh SQLite database: the reference state and results.
pub async fn reference(
    partitions: u32,
    executions: &[Execution],
) -> ([u8; 32], BTreeMap<u64, Vec<u8>>) {
    let db = fresh(Kind::Sqlite).await;
    let exec = open(&db, partitions).await;
    let results = run_sequentially(&exec, executions).await;
    let digest = exec.digest().await.unwrap();
    exec.close().await;
    (digest, results)
}
