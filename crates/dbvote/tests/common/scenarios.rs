//! The test cases, written once and run against both backends (tests/sqlite.rs,
//! tests/postgres.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dbvote::voter::StoredResult;
use dbvote::{Bank, BankOp, BankResult, DbError, Execution, Executor, Gap, Outcome, PartitionId};
use tokio::sync::watch;

pub use super::transfer::*;
use super::*;

fn executed(outcome: Outcome) -> BankResult {
    match outcome {
        Outcome::Executed(bytes) => BankResult::decode(&bytes).unwrap(),
        other => panic!("expected Executed, got {other:?}"),
    }
}

fn single(order: u64, partition: PartitionId, seq: u64, op: &BankOp) -> Execution {
    Execution {
        order,
        positions: vec![(partition, seq)],
        operation: op.encode(),
    }
}

fn open_op(branch: u32, number: u32, initial_cents: u64) -> BankOp {
    BankOp::Open {
        branch,
        number,
        initial_cents,
    }
}

fn deposit_op(branch: u32, number: u32, cents: u64) -> BankOp {
    BankOp::Deposit {
        branch,
        number,
        cents,
    }
}

/// Operations run in order and give the bank's deterministic results, business failures
/// included; progress tells where each partition stands.
pub async fn executes_in_order(kind: Kind) {
    let db = fresh(kind).await;
    let exec = open(&db, 2).await;
    let mut seq = Sequencer::new(2);
    let ok = |balance_cents| BankResult::Ok { balance_cents };
    let cases = [
        (open_op(0, 1, 500), ok(500)),
        (open_op(1, 1, 0), ok(0)),
        (deposit_op(0, 1, 250), ok(750)),
        (
            BankOp::Transfer {
                from: (0, 1),
                to: (1, 1),
                cents: 1_000,
            },
            BankResult::InsufficientFunds { balance_cents: 750 },
        ),
        (
            BankOp::Transfer {
                from: (0, 1),
                to: (1, 1),
                cents: 700,
            },
            ok(50),
        ),
        (
            BankOp::Balance {
                branch: 1,
                number: 1,
            },
            ok(700),
        ),
        (
            deposit_op(1, 9, 5),
            BankResult::NoSuchAccount {
                branch: 1,
                number: 9,
            },
        ),
        (open_op(0, 1, 3), BankResult::AlreadyExists),
        (deposit_op(0, 1, u64::MAX), BankResult::AmountTooLarge),
        (open_op(0, 2, u64::MAX), BankResult::AmountTooLarge),
        (
            BankOp::Transfer {
                from: (1, 1),
                to: (1, 1),
                cents: 10,
            },
            ok(700),
        ),
    ];
    for (op, expected) in &cases {
        let execution = seq.bank(op);
        assert_eq!(
            executed(exec.execute(&execution).await.unwrap()),
            *expected,
            "{op:?}"
        );
    }
    let progress = exec.progress().await.unwrap();
    assert_eq!(progress.highest_order, cases.len() as u64);
    // Partition 0: 5 single + 2 multi; partition 1: 4 single + 2 multi.
    assert_eq!(progress.last_seq(0), Some(7));
    assert_eq!(progress.last_seq(1), Some(6));
    assert_eq!(progress.partitions[0].last_order, 10);
    assert_eq!(progress.partitions[1].last_order, 11);
    assert_eq!(
        exec.stored_result(5).await.unwrap().map(|s| s.result),
        Some(ok(50).encode()),
        "stored result of order 5"
    );
    assert_eq!(exec.stored_result(99).await.unwrap(), None);
    exec.close().await;
}

/// An execution whose predecessor on its partition is missing does not run, changes nothing,
/// and does not hold up other partitions.
pub async fn not_ready_for_missing_predecessor(kind: Kind) {
    let db = fresh(kind).await;
    let exec = open(&db, 2).await;
    let first = single(1, 0, 1, &open_op(0, 0, 100));
    let second = single(2, 0, 2, &deposit_op(0, 0, 5));
    let other = single(3, 1, 1, &open_op(1, 0, 100));
    let before = exec.digest().await.unwrap();

    assert_eq!(
        exec.execute(&second).await.unwrap(),
        Outcome::NotReady {
            gaps: vec![Gap {
                partition: 0,
                last_executed: 0,
                position: 2
            }]
        }
    );
    assert_eq!(exec.digest().await.unwrap(), before);
    assert_eq!(exec.progress().await.unwrap().highest_order, 0);

    // Partition 1 is independent of the gap on partition 0. The progress names the orders
    // executed above the gap, which a restarted voter must count once the gap fills.
    let above = |p: dbvote::Progress| (p.executed_through, p.highest_order, p.executed_above);
    executed(exec.execute(&other).await.unwrap());
    assert_eq!(above(exec.progress().await.unwrap()), (0, 3, vec![3]));
    executed(exec.execute(&first).await.unwrap());
    assert_eq!(above(exec.progress().await.unwrap()), (1, 3, vec![3]));
    assert_eq!(
        executed(exec.execute(&second).await.unwrap()),
        BankResult::Ok { balance_cents: 105 }
    );
    assert_eq!(above(exec.progress().await.unwrap()), (3, 3, vec![]));
    exec.close().await;
}

/// Single-partition executions on four partitions, fed from one task per partition at once,
/// all land, and the state is the one of a sequential run.
pub async fn disjoint_partitions_run_concurrently(kind: Kind) {
    let executions = single_partition_workload(4, 160, 7);
    let (want_digest, want_results) = reference(4, &executions).await;
    let db = fresh(kind).await;
    let exec = open(&db, 4).await;
    let results = run_concurrently(&exec, &executions, |_| {}).await;
    assert_eq!(results, want_results);
    let progress = exec.progress().await.unwrap();
    for p in 0..4 {
        let count = executions.iter().filter(|e| e.positions[0].0 == p).count() as u64;
        assert_eq!(progress.last_seq(p), Some(count), "partition {p}");
    }
    assert_eq!(progress.highest_order, executions.len() as u64);
    assert_eq!(exec.digest().await.unwrap(), want_digest);
    exec.close().await;
}

/// A transfer between branches is positioned on every partition: it waits for everything
/// before it on all of them, and everything after it on any of them waits for it.
pub async fn multi_partition_waits_on_all_partitions(kind: Kind) {
    let db = fresh(kind).await;
    let exec = open(&db, 3).await;
    let mut seq = Sequencer::new(3);
    let o1 = seq.bank(&open_op(0, 0, 100));
    let o2 = seq.bank(&open_op(1, 0, 100));
    let o3 = seq.bank(&open_op(2, 0, 100));
    let o4 = seq.bank(&BankOp::Transfer {
        from: (0, 0),
        to: (1, 0),
        cents: 60,
    });
    let o5 = seq.bank(&deposit_op(2, 0, 5));
    let o6 = seq.bank(&deposit_op(0, 0, 1));
    assert_eq!(o4.positions, vec![(0, 2), (1, 2), (2, 2)]);

    let gaps = |outcome| -> Vec<PartitionId> {
        match outcome {
            Outcome::NotReady { gaps } => gaps.iter().map(|g: &Gap| g.partition).collect(),
            other => panic!("expected NotReady, got {other:?}"),
        }
    };
    assert_eq!(gaps(exec.execute(&o4).await.unwrap()), vec![0, 1, 2]);
    executed(exec.execute(&o1).await.unwrap());
    executed(exec.execute(&o2).await.unwrap());
    assert_eq!(gaps(exec.execute(&o4).await.unwrap()), vec![2]);
    // Later operations on any partition wait for the transfer.
    assert_eq!(gaps(exec.execute(&o5).await.unwrap()), vec![2]);
    assert_eq!(gaps(exec.execute(&o6).await.unwrap()), vec![0]);

    // A task offering the transfer as a voter would, woken when other executions complete.
    let (done_tx, mut done_rx) = watch::channel(());
    let waiter = {
        let exec = exec.clone();
        let o4 = o4.clone();
        tokio::spawn(async move {
            loop {
                done_rx.borrow_and_update();
                match exec.execute(&o4).await.unwrap() {
                    Outcome::NotReady { .. } => done_rx.changed().await.unwrap(),
                    outcome => return executed(outcome),
                }
            }
        })
    };
    executed(exec.execute(&o3).await.unwrap());
    done_tx.send(()).unwrap();
    assert_eq!(waiter.await.unwrap(), BankResult::Ok { balance_cents: 40 });
    assert_eq!(
        executed(exec.execute(&o6).await.unwrap()),
        BankResult::Ok { balance_cents: 41 }
    );
    assert_eq!(
        executed(exec.execute(&o5).await.unwrap()),
        BankResult::Ok { balance_cents: 105 }
    );
    let progress = exec.progress().await.unwrap();
    assert_eq!(progress.last_seq(1), Some(2));
    assert_eq!(progress.partitions[1].last_order, 4);
    exec.close().await;
}

/// Repeating an executed order returns the stored result and changes nothing, also after a
/// restart.
pub async fn already_executed_returns_stored_result(kind: Kind) {
    let executions = workload(2, 2, 40, 11);
    let db = fresh(kind).await;
    let exec = open(&db, 2).await;
    let results = run_sequentially(&exec, &executions).await;
    let digest = exec.digest().await.unwrap();
    let progress = exec.progress().await.unwrap();
    for e in &executions {
        assert_eq!(
            exec.execute(e).await.unwrap(),
            Outcome::AlreadyExecuted(results[&e.order].clone())
        );
    }
    assert_eq!(exec.digest().await.unwrap(), digest);
    assert_eq!(exec.progress().await.unwrap(), progress);
    exec.close().await;
    drop(exec);

    let exec = open(&db, 2).await;
    for e in executions.iter().rev().take(5) {
        assert_eq!(
            exec.execute(e).await.unwrap(),
            Outcome::AlreadyExecuted(results[&e.order].clone())
        );
    }
    assert_eq!(exec.digest().await.unwrap(), digest);
    assert_eq!(exec.progress().await.unwrap(), progress);
    exec.close().await;
}

/// Forgetting the stored results of old orders removes their rows and records them as orders
/// without results, in one transaction: the state and its digest do not change, the progress
/// after a restart says which orders have no results, the later ones are still answered, and
/// a forgotten order never runs again.
pub async fn forgotten_results_stay_executed(kind: Kind) {
    let executions = workload(2, 2, 40, 12);
    let db = fresh(kind).await;
    let exec = open(&db, 2).await;
    let results = run_sequentially(&exec, &executions).await;
    let digest = exec.digest().await.unwrap();
    let before = exec.progress().await.unwrap();
    let forgotten = executions.iter().filter(|e| e.order <= 25).count() as u64;
    assert_eq!(exec.forget_results_through(25).await.unwrap(), forgotten);
    assert_eq!(
        exec.forget_results_through(10).await.unwrap(),
        0,
        "never lowered"
    );
    exec.close().await;
    drop(exec);

    let exec = open(&db, 2).await;
    let after = exec.progress().await.unwrap();
    assert_eq!(
        (
            after.executed_through,
            after.highest_order,
            after.transferred_through
        ),
        (before.executed_through, before.highest_order, 25)
    );
    assert_eq!(after.partitions, before.partitions);
    assert_eq!(exec.digest().await.unwrap(), digest);
    for e in &executions {
        let outcome = exec.execute(e).await;
        if e.order > 25 {
            let stored = Outcome::AlreadyExecuted(results[&e.order].clone());
            assert_eq!(outcome.unwrap(), stored);
        } else {
            assert!(
                outcome.is_err(),
                "forgotten order {} ran: {outcome:?}",
                e.order
            );
        }
    }
    assert_eq!(exec.digest().await.unwrap(), digest);
    let mut conn = db.connect().await;
    let (rows, _) = dbvote::executor::stored_results(&mut conn).await.unwrap();
    assert_eq!(rows, executions.len() as u64 - forgotten);
    exec.close().await;
}

/// Executions that contradict what was executed are errors, and run nothing.
pub async fn conflicting_positions_are_errors(kind: Kind) {
    let db = fresh(kind).await;
    let exec = open(&db, 2).await;
    let o1 = single(1, 0, 1, &open_op(0, 0, 100));
    executed(exec.execute(&o1).await.unwrap());
    let o5 = single(5, 0, 2, &deposit_op(0, 0, 1));
    executed(exec.execute(&o5).await.unwrap());
    let digest = exec.digest().await.unwrap();
    let progress = exec.progress().await.unwrap();

    let conflicts = [
        // The same order at another position: the next one, and one further ahead.
        single(1, 0, 3, &open_op(0, 0, 100)),
        single(1, 0, 9, &open_op(0, 0, 100)),
        // The same order and position with another operation.
        single(1, 0, 1, &open_op(0, 0, 999)),
        // Another order at a taken position.
        single(2, 0, 1, &deposit_op(0, 0, 1)),
        // The next position, but an order before one the partition already executed.
        single(3, 0, 3, &deposit_op(0, 0, 1)),
    ];
    for e in &conflicts {
        match exec.execute(e).await {
            Err(DbError::Conflict { order, .. }) => assert_eq!(order, e.order),
            other => panic!("{e:?}: expected a conflict, got {other:?}"),
        }
    }
    assert_eq!(exec.digest().await.unwrap(), digest);
    assert_eq!(exec.progress().await.unwrap(), progress);
    exec.close().await;
}

/// Malformed operation bytes and ill-formed positions are errors, not panics, and run nothing.
pub async fn malformed_and_invalid_are_errors(kind: Kind) {
    let db = fresh(kind).await;
    let exec = open(&db, 3).await;
    executed(
        exec.execute(&single(1, 0, 1, &open_op(0, 0, 100)))
            .await
            .unwrap(),
    );
    let digest = exec.digest().await.unwrap();
    let progress = exec.progress().await.unwrap();

    let mut trailing = deposit_op(0, 0, 1).encode();
    trailing.push(0);
    let mut truncated = deposit_op(0, 0, 300).encode();
    truncated.pop();
    let mut rng = Rng::new(3);
    let mut malformed = vec![vec![], vec![0xff; 12], vec![7], trailing, truncated];
    for _ in 0..50 {
        let len = rng.below(24) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        if BankOp::decode(&bytes).is_err() {
            malformed.push(bytes);
        }
    }
    for operation in malformed {
        let e = Execution {
            order: 2,
            positions: vec![(0, 2)],
            operation,
        };
        match exec.execute(&e).await {
            Err(DbError::Malformed { order: 2, .. }) => {}
            other => panic!("{e:?}: expected Malformed, got {other:?}"),
        }
    }

    let deposit = deposit_op(0, 0, 1).encode();
    let transfer = BankOp::Transfer {
        from: (0, 0),
        to: (1, 0),
        cents: 1,
    }
    .encode();
    let invalid = [
        (0, vec![(0, 2)], deposit.clone()),
        (u64::MAX, vec![(0, 2)], deposit.clone()),
        (2, vec![], deposit.clone()),
        (2, vec![(0, 0)], deposit.clone()),
        (2, vec![(0, u64::MAX)], deposit.clone()),
        (2, vec![(3, 1)], deposit.clone()),
        (2, vec![(1, 1)], deposit.clone()),
        (2, vec![(1, 1), (0, 2), (2, 1)], deposit.clone()),
        (2, vec![(0, 2), (0, 3), (2, 1)], deposit.clone()),
        (2, vec![(0, 2), (1, 1)], transfer.clone()),
        (2, vec![(0, 2)], transfer.clone()),
    ];
    for (order, positions, operation) in invalid {
        let e = Execution {
            order,
            positions,
            operation,
        };
        match exec.execute(&e).await {
            Err(DbError::InvalidExecution { .. }) => {}
            other => panic!("{e:?}: expected InvalidExecution, got {other:?}"),
        }
    }
    assert_eq!(exec.digest().await.unwrap(), digest);
    assert_eq!(exec.progress().await.unwrap(), progress);
    exec.close().await;
}

/// The executor dropped in the middle of a concurrent run (tasks aborted mid-transaction):
/// after reopening, progress tells where it stopped and finishing the run gives exactly the
/// state and results of an uninterrupted one.
pub async fn dropped_mid_stream_resumes(kind: Kind) {
    let executions = workload(3, 3, 100, 21);
    let (want_digest, want_results) = reference(3, &executions).await;
    let db = fresh(kind).await;
    let exec = open(&db, 3).await;
    let done = Arc::new(AtomicU64::new(0));
    let (reached_tx, mut reached_rx) = watch::channel(0u64);
    let counter = Arc::clone(&done);
    let run = run_concurrently(&exec, &executions, move |_| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        reached_tx.send_replace(n);
    });
    tokio::select! {
        _ = run => panic!("the run finished before it was interrupted"),
        _ = reached_rx.wait_for(|n| *n >= 40) => {}
    }
    drop(exec);

    let exec = open(&db, 3).await;
    let progress = exec.progress().await.unwrap();
    assert!(progress.highest_order >= 30, "{progress:?}");
    check_prefix(&exec, &executions, &want_results).await;
    let results = run_concurrently(&exec, &executions, |_| {}).await;
    assert_eq!(results, want_results);
    assert_eq!(exec.digest().await.unwrap(), want_digest);
    exec.close().await;
}

/// Every execution at or below a partition's progress has its reference result stored, and
/// none above it has a result.
async fn check_prefix(
    exec: &Executor<Bank>,
    executions: &[Execution],
    want: &BTreeMap<u64, Vec<u8>>,
) -> usize {
    let progress = exec.progress().await.unwrap();
    let mut stored = 0;
    for e in executions {
        let (p, s) = e.positions[0];
        let done = s <= progress.last_seq(p).unwrap();
        let result = exec.stored_result(e.order).await.unwrap().map(|s| s.result);
        if done {
            assert_eq!(result.as_ref(), Some(&want[&e.order]), "order {}", e.order);
            stored += 1;
        } else {
            assert_eq!(
                result, None,
                "order {} beyond progress {progress:?}",
                e.order
            );
        }
    }
    stored
}

/// Executors fed the same executions in different valid interleavings (in order on SQLite for
/// the reference, shuffled, and concurrently from one task per partition) end with identical
/// digests and results; on PostgreSQL this also shows that the digest is backend-independent.
pub async fn interleavings_reach_identical_state(kind: Kind) {
    let executions = workload(4, 3, 120, 5);
    let (want_digest, want_results) = reference(4, &executions).await;
    let order = shuffled_valid_order(&executions, 1);
    assert_ne!(order, executions);
    let db = fresh(kind).await;
    let exec = open(&db, 4).await;
    assert_eq!(run_sequentially(&exec, &order).await, want_results);
    assert_eq!(exec.digest().await.unwrap(), want_digest);
    exec.close().await;
    let db = fresh(kind).await;
    let exec = open(&db, 4).await;
    assert_eq!(
        run_concurrently(&exec, &executions, |_| {}).await,
        want_results
    );
    assert_eq!(exec.digest().await.unwrap(), want_digest);
    exec.close().await;
}

/// A database created for one configuration refuses another; unsupported URLs are refused.
pub async fn refuses_foreign_database(kind: Kind) {
    let db = fresh(kind).await;
    open(&db, 2).await.close().await;
    match Executor::open(&db.url, Bank, 3).await {
        Err(DbError::Mismatch { what, found, .. }) => {
            assert_eq!(what, "the partition count");
            assert_eq!(found, "2");
        }
        Err(other) => panic!("expected Mismatch, got {other:?}"),
        Ok(_) => panic!("expected Mismatch, got an executor"),
    }
    for url in ["mysql://root@localhost/x", "nonsense"] {
        assert!(matches!(
            Executor::open(url, Bank, 1).await,
            Err(DbError::UnsupportedUrl { .. })
        ));
    }
    assert!(matches!(
        Executor::open(&db.url, Bank, 0).await,
        Err(DbError::Config(_))
    ));
}

const CHILD_URL: &str = "CLOUDBFT_DBVOTE_CHILD_URL";
const KILL_WORKLOAD: (u32, u32, usize, u64) = (3, 3, 150, 99);

fn kill_workload() -> Vec<Execution> {
    let (partitions, accounts, ops, seed) = KILL_WORKLOAD;
    workload(partitions, accounts, ops, seed)
}

/// Runs the executor in a child process (this test binary, re-invoked on the test `test_name`
/// with an environment variable), SIGKILLs it at a random point three times, and checks after
/// each kill that progress tells where it stopped, every acknowledged execution is there, and
/// finishing the run gives exactly the reference state: nothing lost, nothing executed twice.
pub async fn sigkill_then_reopen(kind: Kind, test_name: &str) {
    if let Ok(url) = std::env::var(CHILD_URL) {
        return child(&url).await;
    }
    let executions = kill_workload();
    let partitions = KILL_WORKLOAD.0;
    let (want_digest, want_results) = reference(partitions, &executions).await;
    let db = fresh(kind).await;
    open(&db, partitions).await.close().await;

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("sigkill_then_reopen: kill points from seed {seed}");
    let mut rng = Rng::new(seed);
    let mut acked: BTreeSet<u64> = BTreeSet::new();
    let mut previous = 0;
    for round in 0..3 {
        let after = 1 + rng.below(40);
        // Killing right as an acknowledgement arrives would always hit the child at the same
        // phase of its next execution; a random delay spreads the kill over all of them.
        let delay = Duration::from_micros(rng.below(8_000));
        let url = db.url.clone();
        let test_name = test_name.to_owned();
        let known = acked.clone();
        acked =
            tokio::task::spawn_blocking(move || kill_child(&url, &test_name, after, delay, known))
                .await
                .unwrap();

        let exec = open(&db, partitions).await;
        let progress = exec.progress().await.unwrap();
        let stored = check_prefix(&exec, &executions, &want_results).await;
        for order in &acked {
            assert_eq!(
                exec.stored_result(*order)
                    .await
                    .unwrap()
                    .map(|s| s.result)
                    .as_ref(),
                Some(&want_results[order]),
                "acknowledged order {order} lost (round {round}, seed {seed})"
            );
        }
        assert!(stored >= previous, "progress went back: {progress:?}");
        previous = stored;
        exec.close().await;
    }
    let exec = open(&db, partitions).await;
    let results = run_concurrently(&exec, &executions, |_| {}).await;
    assert_eq!(results, want_results, "seed {seed}");
    assert_eq!(exec.digest().await.unwrap(), want_digest, "seed {seed}");
    exec.close().await;
}

/// Starts the child, reads its acknowledgements until `after` orders not in `acked` were
/// acknowledged (the child acknowledges what earlier lives executed too), SIGKILLs it and
/// returns all acknowledged orders.
fn kill_child(
    url: &str,
    test_name: &str,
    after: u64,
    delay: Duration,
    mut acked: BTreeSet<u64>,
) -> BTreeSet<u64> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_URL, url)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut new = 0;
    // Kept open until the child is dead: a closed pipe would fail the child's next print.
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(order) = line.strip_prefix("acked ") {
            if acked.insert(order.parse().unwrap()) {
                new += 1;
                if new >= after {
                    break;
                }
            }
        }
    }
    // Child::kill sends SIGKILL on Unix: no destructor, no rollback, no flush runs.
    let killed = new >= after;
    if killed {
        std::thread::sleep(delay);
        child.kill().unwrap();
    }
    let status = child.wait().unwrap();
    drop(lines);
    assert!(
        killed || status.success(),
        "the child failed on its own: {status}"
    );
    acked
}

/// The child: resumes the workload where the database stands and acknowledges on stdout each
/// execution once the executor returned its result.
async fn child(url: &str) {
    let exec = Executor::open(url, Bank, KILL_WORKLOAD.0).await.unwrap();
    run_concurrently(&exec, &kill_workload(), |order| println!("acked {order}")).await;
    exec.close().await;
}

/// A batch runs a chain of positions on one partition in one transaction, a repeat returns the
/// stored results, and a batch with a conflicting execution leaves nothing of itself.
pub async fn batches_chain_and_are_atomic(kind: Kind) {
    let db = fresh(kind).await;
    let exec = open(&db, 2).await;
    let chain = [
        single(1, 0, 1, &open_op(0, 0, 100)),
        single(2, 0, 2, &deposit_op(0, 0, 5)),
        single(3, 0, 3, &deposit_op(0, 0, 7)),
    ];
    let outcomes = exec.execute_batch(&chain).await.unwrap();
    let balances: Vec<BankResult> = outcomes.iter().cloned().map(executed).collect();
    let ok = |balance_cents| BankResult::Ok { balance_cents };
    assert_eq!(balances, vec![ok(100), ok(105), ok(112)]);
    assert_eq!(exec.progress().await.unwrap().last_seq(0), Some(3));
    let repeated = exec.execute_batch(&chain).await.unwrap();
    for (first, again) in outcomes.into_iter().zip(repeated) {
        let Outcome::Executed(bytes) = first else {
            unreachable!()
        };
        assert_eq!(again, Outcome::AlreadyExecuted(bytes));
    }

    let digest = exec.digest().await.unwrap();
    let progress = exec.progress().await.unwrap();
    let half_bad = [
        single(4, 0, 4, &deposit_op(0, 0, 1)),
        // Order 1 again at another position: a conflict.
        single(1, 0, 5, &open_op(0, 0, 100)),
    ];
    match exec.execute_batch(&half_bad).await {
        Err(DbError::Conflict { order: 1, .. }) => {}
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(
        exec.digest().await.unwrap(),
        digest,
        "the batch left writes"
    );
    assert_eq!(exec.progress().await.unwrap(), progress);

    // Both partitions move in one batch; a transfer between them follows (their progress as
    // this transaction moved it), then one that is not ready and one that runs after it.
    let transfer = BankOp::Transfer {
        from: (0, 0),
        to: (1, 0),
        cents: 10,
    };
    let mixed = [
        single(4, 0, 4, &deposit_op(0, 0, 1)),
        single(5, 1, 1, &open_op(1, 0, 50)),
        Execution {
            order: 6,
            positions: vec![(0, 5), (1, 2)],
            operation: transfer.encode(),
        },
        single(9, 1, 5, &deposit_op(1, 0, 1)),
        single(7, 0, 6, &deposit_op(0, 0, 2)),
    ];
    let outcomes = exec.execute_batch(&mixed).await.unwrap();
    assert!(
        matches!(&outcomes[3], Outcome::NotReady { gaps } if gaps.len() == 1),
        "{:?}",
        outcomes[3]
    );
    let balances: Vec<BankResult> = [0, 1, 2, 4]
        .into_iter()
        .map(|i| executed(outcomes[i].clone()))
        .collect();
    assert_eq!(
        balances,
        vec![ok(113), ok(50), executed(outcomes[2].clone()), ok(105)]
    );
    let after = exec.progress().await.unwrap();
    assert_eq!((after.last_seq(0), after.last_seq(1)), (Some(6), Some(2)));

    // A repeat inside the batch sees the result the batch stored before it; a long chain is
    // stored in several INSERTs (64 + 4 + 2 results), each result where a lookup finds it.
    let mut long: Vec<Execution> = (0..70)
        .map(|i| single(10 + i, 1, 3 + i, &deposit_op(1, 0, 1)))
        .collect();
    long.insert(5, long[2].clone());
    let outcomes = exec.execute_batch(&long).await.unwrap();
    let Outcome::Executed(third) = &outcomes[2] else {
        panic!("{:?}", outcomes[2])
    };
    assert_eq!(outcomes[5], Outcome::AlreadyExecuted(third.clone()));
    for (execution, outcome) in long.iter().zip(&outcomes) {
        let stored = exec.stored_result(execution.order).await.unwrap();
        match outcome {
            Outcome::Executed(result) | Outcome::AlreadyExecuted(result) => {
                let ran = StoredResult {
                    positions: execution.positions.clone(),
                    result: result.clone(),
                };
                assert_eq!(stored, Some(ran), "with the positions it ran at")
            }
            other => panic!("order {}: {other:?}", execution.order),
        }
    }
    assert_eq!(exec.progress().await.unwrap().last_seq(1), Some(72));
    exec.close().await;
}

/// What the bank's operations mean, kept in a map: open, deposit, transfer and balance with
/// every business failure, in the order the bank checks them.
#[derive(Default)]
struct BankModel(BTreeMap<(u32, u32), u64>);

impl BankModel {
    fn apply(&mut self, op: &BankOp) -> BankResult {
        let fits = |cents: u64| i64::try_from(cents).is_ok();
        let no_such = |(branch, number): (u32, u32)| BankResult::NoSuchAccount { branch, number };
        match *op {
            BankOp::Open {
                branch,
                number,
                initial_cents,
            } => {
                if !fits(initial_cents) {
                    return BankResult::AmountTooLarge;
                }
                match self.0.entry((branch, number)) {
                    std::collections::btree_map::Entry::Occupied(_) => BankResult::AlreadyExists,
                    std::collections::btree_map::Entry::Vacant(account) => {
                        account.insert(initial_cents);
                        BankResult::Ok {
                            balance_cents: initial_cents,
                        }
                    }
                }
            }
            BankOp::Deposit {
                branch,
                number,
                cents,
            } => match self.0.get(&(branch, number)).copied() {
                None => no_such((branch, number)),
                Some(now) => match now.checked_add(cents).filter(|b| fits(*b)) {
                    None => BankResult::AmountTooLarge,
                    Some(new) => {
                        self.0.insert((branch, number), new);
                        BankResult::Ok { balance_cents: new }
                    }
                },
            },
            BankOp::Transfer { from, to, cents } => {
                let (Some(from_now), Some(to_now)) =
                    (self.0.get(&from).copied(), self.0.get(&to).copied())
                else {
                    return no_such(if self.0.contains_key(&from) { to } else { from });
                };
                if from_now < cents {
                    return BankResult::InsufficientFunds {
                        balance_cents: from_now,
                    };
                }
                if from == to {
                    return BankResult::Ok {
                        balance_cents: from_now,
                    };
                }
                let Some(to_new) = to_now.checked_add(cents).filter(|b| fits(*b)) else {
                    return BankResult::AmountTooLarge;
                };
                self.0.insert(from, from_now - cents);
                self.0.insert(to, to_new);
                BankResult::Ok {
                    balance_cents: from_now - cents,
                }
            }
            BankOp::Balance { branch, number } => match self.0.get(&(branch, number)) {
                Some(&balance_cents) => BankResult::Ok { balance_cents },
                None => no_such((branch, number)),
            },
        }
    }
}

/// Seeded random operations on a few accounts of two branches (missing accounts, transfers to
/// the same account, amounts at and past the BIGINT limit included) give, one by one, what the
/// model says, and leave the balances it holds.
pub async fn bank_matches_its_model(kind: Kind) {
    bank_against_model(kind, |_| 1).await;
}

/// As [`bank_matches_its_model`], with the operations handed to the executor in batches of 1 to
/// 40 consecutive orders: the bank reads a batch's accounts once and writes them once, and
/// each operation must still see what the ones before it in the batch left.
pub async fn bank_batches_match_its_model(kind: Kind) {
    bank_against_model(kind, |next| 1 + next(40) as usize).await;
}

async fn bank_against_model(
    kind: Kind,
    mut batch: impl FnMut(&mut dyn FnMut(u64) -> u64) -> usize,
) {
    let db = fresh(kind).await;
    let exec = open(&db, 2).await;
    let mut model = BankModel::default();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % below
    };
    let limit = i64::MAX as u64;
    let mut seqs = [0u64; 2];
    let mut ops = Vec::new();
    for order in 1..=400u64 {
        let account = |next: &mut dyn FnMut(u64) -> u64| (next(2) as u32, next(4) as u32);
        let cents = match next(10) {
            0 => limit - next(3),
            1 => limit + 1 + next(3),
            _ => next(300),
        };
        let (branch, number) = account(&mut next);
        let op = match next(8) {
            0 | 1 => BankOp::Open {
                branch,
                number,
                initial_cents: cents,
            },
            2 => BankOp::Deposit {
                branch,
                number,
                cents,
            },
            3 => BankOp::Balance { branch, number },
            _ => BankOp::Transfer {
                from: (branch, number),
                to: account(&mut next),
                cents,
            },
        };
        let positions = op
            .partitions()
            .into_iter()
            .map(|p| {
                seqs[p as usize] += 1;
                (p, seqs[p as usize])
            })
            .collect();
        let execution = Execution {
            order,
            positions,
            operation: op.encode(),
        };
        ops.push((execution, op));
    }
    let mut rest = ops.as_slice();
    while !rest.is_empty() {
        let (now, later) = rest.split_at(batch(&mut next).min(rest.len()));
        let executions: Vec<Execution> = now.iter().map(|(e, _)| e.clone()).collect();
        let outcomes = exec.execute_batch(&executions).await.unwrap();
        for ((execution, op), outcome) in now.iter().zip(outcomes) {
            let order = execution.order;
            assert_eq!(executed(outcome), model.apply(op), "order {order}: {op:?}");
        }
        rest = later;
    }
    for (&(branch, number), &balance_cents) in &model.0 {
        let op = BankOp::Balance { branch, number };
        seqs[branch as usize] += 1;
        let check = single(
            1000 + u64::from(branch * 10 + number),
            branch,
            seqs[branch as usize],
            &op,
        );
        let outcome = exec.execute(&check).await.unwrap();
        assert_eq!(executed(outcome), BankResult::Ok { balance_cents });
    }
    exec.close().await;
}
