//! A database node that lost its database catches up by state transfer, under load, across
//! processes: `cloudbft demo` (bank; two groups, three database nodes on SQLite, and again on
//! PostgreSQL) runs
//! closed-loop transfers; database node 12 is killed with SIGKILL, its database is deleted, and
//! it is started again on an empty database. The replicas re-send it only what it has not
//! answered, so the orders it executed before are gone for good: its decided executions wait
//! behind them, it stalls, and it asks the other two for their state (docs/state-transfer.md).
//!
//! Checked: the state transfer completes (and none fails), every bank transfer completes, money
//! is conserved, the node catches up with the others and every database ends with the same
//! digest. Printed (not asserted): completed bank transfers per second in 1 s windows before,
//! during and after, and the state transfer's duration and size.

mod common;

use client_plugin::client::{ClientEndpoint, ClientOptions};
use common::{balance, db_states, highest_order, invoke, kill, metric, node_process, restart};
use common::{Demo, PgDatabases, Ports};
use dbvote::bank::BankOp;
use proto::config::Cluster;
use proto::testing::Rng;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

const BRANCHES: u32 = 4;
const INITIAL: u64 = 100_000;
const TASKS: u32 = 6;
/// Accounts the transfers do not touch, so that there is some state to transfer.
const IDLE_ACCOUNTS: u32 = 800;
/// Bank transfers completed before the kill, and after the state transfer completed.
const BEFORE: usize = 500;
const AFTER: usize = 800;

/// Deletes a database node's database: an SQLite file and its WAL files, or a PostgreSQL
/// database (the node creates an empty one when it starts).
async fn wipe(url: &str) {
    use sqlx::Connection;
    if let Some(rest) = url.strip_prefix("sqlite:") {
        let path = rest.split('?').next().unwrap();
        for suffix in ["", "-wal", "-shm"] {
            let file = format!("{path}{suffix}");
            if Path::new(&file).exists() {
                std::fs::remove_file(&file).unwrap();
            }
        }
        return;
    }
    let (server, name) = url.rsplit_once('/').expect("a PostgreSQL URL");
    sqlx::any::install_default_drivers();
    let mut admin = sqlx::AnyConnection::connect(&format!("{server}/postgres"))
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {name} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    admin.close().await.unwrap();
}

/// Polls (there is no other notification across processes) until `ready` holds, at most
/// `limit`; `None` if it never did.
fn until(limit: Duration, mut ready: impl FnMut() -> bool) -> Option<Instant> {
    let deadline = Instant::now() + limit;
    while !ready() {
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(Instant::now())
}

#[test]
fn a_database_node_restarted_on_an_empty_database_catches_up_by_state_transfer() {
    catches_up(&[]);
}

#[test]
fn the_same_on_postgresql() {
    let databases = PgDatabases::new("st");
    catches_up(&databases.args());
}

/// The test, on a cluster started with `extra` arguments.
fn catches_up(extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cluster");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let ports = Ports::reserve();
    let demo = Demo::start(&data, &ports, &[&["--application", "bank"], extra].concat());
    let config = demo.config();
    let cluster = Arc::new(Cluster::load(&config).unwrap());
    let database = cluster
        .config
        .db_nodes
        .iter()
        .find(|d| d.id == 12)
        .expect("database node 12")
        .database
        .clone();
    let completed: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let (count, mut counted) = watch::channel(0usize);
    let count = Arc::new(count);
    let (mut child, args, marks) = runtime.block_on(async {
        let endpoint = cluster.config.clients[1].addr.clone();
        let client = ClientEndpoint::open(
            cluster.clone(),
            &demo.dir.join("keys"),
            &endpoint,
            ClientOptions::default(),
        )
        .await
        .expect("opening the load driver's client endpoint");
        let mut opening = Vec::new();
        for t in 0..TASKS {
            let client = client.clone();
            opening.push(tokio::spawn(async move {
                let per_task = TASKS + IDLE_ACCOUNTS / BRANCHES / TASKS;
                for branch in 0..BRANCHES {
                    for number in (t..per_task * TASKS).step_by(TASKS as usize) {
                        let op = BankOp::Open {
                            branch,
                            number,
                            initial_cents: INITIAL,
                        };
                        assert!(invoke(&client, op).await.contains("opened with balance"));
                    }
                }
            }));
        }
        for task in opening {
            task.await.unwrap();
        }
        let start = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let (client, completed, count, stop) = (
                client.clone(),
                completed.clone(),
                count.clone(),
                stop.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut rng = Rng::new(u64::from(t));
                while !stop.load(Ordering::Relaxed) {
                    let from = (rng.below(u64::from(BRANCHES)) as u32, t);
                    let to_branch = if rng.chance(0.3) {
                        (from.0 + 1) % BRANCHES
                    } else {
                        from.0
                    };
                    let to = (to_branch, (t + 1) % TASKS);
                    let cents = rng.between(1, 5_000);
                    let page = invoke(&client, BankOp::Transfer { from, to, cents }).await;
                    assert!(
                        page.contains("Transferred") || page.contains("Insufficient funds"),
                        "{page}"
                    );
                    completed.lock().unwrap().push(Instant::now());
                    count.send_modify(|n| *n += 1);
                }
            }));
        }
        counted.wait_for(|&n| n >= BEFORE).await.unwrap();
        let args = kill(&config, "dbnode", 12);
        let killed = Instant::now();
        wipe(&database).await;
        let mut child = restart(&config, &args, "dbnode-12-empty");
        let restarted = Instant::now();
        let transferred = {
            let args = args.clone();
            tokio::task::spawn_blocking(move || {
                until(Duration::from_secs(120), || {
                    metric(&args, "cloudbft_state_transfers_completed_total")
                        .is_some_and(|n| n >= 1.0)
                })
            })
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no state transfer completed: {}", child.diagnosis()))
        };
        let at = *counted.borrow();
        counted.wait_for(|&n| n >= at + AFTER).await.unwrap();
        stop.store(true, Ordering::Relaxed);
        for task in tasks {
            task.await.unwrap();
        }
        let mut total = 0;
        for branch in 0..BRANCHES {
            for number in 0..TASKS {
                total += balance(&invoke(&client, BankOp::Balance { branch, number }).await);
            }
        }
        assert_eq!(
            total,
            u64::from(BRANCHES * TASKS) * INITIAL,
            "money is conserved"
        );
        client.shutdown().await;
        (child, args, [start, killed, restarted, transferred])
    });
    // The node catches up with the others (they executed the last Balance).
    let others = |order: u64| {
        cluster.config.db_nodes.iter().all(|d| {
            node_process(&config, "dbnode", d.id)
                .and_then(|(_, a)| highest_order(&a))
                .is_some_and(|o| o == order)
        })
    };
    until(Duration::from_secs(120), || {
        highest_order(&args).is_some_and(others)
    })
    .unwrap_or_else(|| panic!("node 12 did not catch up: {}", child.diagnosis()));
    let get = |name: &str| metric(&args, name).unwrap_or_default();
    let (attempts, failed) = (
        get("cloudbft_state_transfers_started_total"),
        get("cloudbft_state_transfers_failed_total"),
    );
    let (rows, bytes) = (
        get("cloudbft_state_rows_received_total"),
        get("cloudbft_state_bytes_received_total"),
    );
    let seconds = get("cloudbft_state_transfer_seconds_sum");
    assert_eq!(failed, 0.0, "an install failed with correct senders only");
    assert!(rows > 0.0 && bytes > 0.0);
    child.stop();
    demo.stop();
    let states = runtime.block_on(db_states(&data.join("cluster.toml")));
    assert!(
        states.iter().all(|s| *s == states[0]),
        "database nodes differ: {states:?}"
    );

    let [start, killed, restarted, transferred] = marks;
    let times = completed.lock().unwrap().clone();
    let rate = |from: Instant, to: Instant| {
        let n = times.iter().filter(|&&t| t > from && t <= to).count();
        n as f64 / to.duration_since(from).as_secs_f64()
    };
    let end = *times.last().unwrap();
    eprintln!("completed bank transfers per 1 s window (k: node 12 killed and wiped, r: restarted on an empty database, t: state transfer installed):");
    let mut window = start;
    while window < end {
        let next = window + Duration::from_secs(1);
        let marks: String = [(killed, 'k'), (restarted, 'r'), (transferred, 't')]
            .iter()
            .filter(|(m, _)| *m >= window && *m < next)
            .map(|(_, c)| *c)
            .collect();
        let n = times.iter().filter(|&&t| t >= window && t < next).count();
        // The last window ends with the last transfer.
        let span = next.min(end).duration_since(window).as_secs_f64();
        eprintln!(
            "  {:>5.1} s  {:>5.0}/s {marks}",
            window.duration_since(start).as_secs_f64(),
            n as f64 / span
        );
        window = next;
    }
    eprintln!(
        "throughput: {:.1}/s before the kill, {:.1}/s from the restart to the install, {:.1}/s after it",
        rate(start, killed),
        rate(restarted, transferred),
        rate(transferred, end)
    );
    eprintln!(
        "state transfer: {attempts} attempt(s), {seconds:.2} s from the first STATE-REQUEST to \
         the install, {:.2} s from the restart, {rows} rows in {bytes} bytes of STATE-CHUNKs",
        transferred.duration_since(restarted).as_secs_f64()
    );
}
