//! Nodes killed with SIGKILL under load, across processes over real TCP: `cloudbft demo` (two
//! primary candidates, two groups of three replicas, three database nodes) runs concurrent bank
//! transfers, and in the middle
//!
//! * the primary of view 0 is killed: the replicas' request timers expire, they move to view 1
//!   with the second candidate as primary, and every transfer completes;
//! * a database node is killed and restarted: the others go on meanwhile, and the restarted one
//!   catches up from the COMMIT-DBs the replicas re-send to it, without executing anything
//!   twice (its executor records each order with its effects) or skipping anything;
//! * a group replica is killed and restarted: it rejoins its group (a JOIN the primary orders,
//!   then a peer's stable state), and then another member of its group is killed for good, so
//!   the group's transfers complete only if the restarted replica takes part again.
//!
//! Money is conserved and every database node ends in the same state. The tests print the
//! longest time without a completed request after the kill (they assert nothing on times).

mod common;

use client_plugin::client::{ClientEndpoint, ClientOptions};
use common::{
    balance, db_states, highest_order, invoke, kill, metric, node_process, restart, Demo,
};
use dbvote::bank::BankOp;
use proto::config::Cluster;
use proto::testing::Rng;
use std::path::Path;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BRANCHES: u32 = 4;
const INITIAL: u64 = 100_000;
const TASKS: u64 = 6;

/// What to do to the cluster once a quarter of the transfers completed; returns a process the
/// test restarted itself (the demo does not manage it) and its arguments.
type Fault = Box<dyn FnOnce(&Path) -> Option<(Child, Vec<String>)>>;

/// Runs `transfers` transfers per task, applies `fault` a quarter of the way, checks that every
/// transfer completes, money is conserved and every database node ends in the same state;
/// prints the longest time without a completed transfer after the fault.
fn under_load(base_port: u16, what: &str, transfers: u64, fault: Fault) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cluster");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let demo = Demo::start(
        &data,
        base_port,
        base_port + 2000,
        &["--application", "bank"],
    );
    let config = demo.config();
    let completed: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let (fault_at, restarted) = runtime.block_on(async {
        let cluster = Arc::new(Cluster::load(&config).unwrap());
        assert!(
            cluster.config.primaries.len() >= 2,
            "the demo configures a second primary candidate"
        );
        let endpoint = cluster.config.clients[1].addr.clone();
        let client = ClientEndpoint::open(
            cluster,
            &demo.dir.join("keys"),
            &endpoint,
            ClientOptions::default(),
        )
        .await
        .expect("opening the load driver's client endpoint");
        for branch in 0..BRANCHES {
            for number in 0..TASKS as u32 {
                let op = BankOp::Open {
                    branch,
                    number,
                    initial_cents: INITIAL,
                };
                assert!(invoke(&client, op).await.contains("opened with balance"));
            }
        }
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let client = client.clone();
            let completed = completed.clone();
            tasks.push(tokio::spawn(async move {
                let mut rng = Rng::new(t);
                for _ in 0..transfers {
                    let from = (rng.below(u64::from(BRANCHES)) as u32, t as u32);
                    let to_branch = if rng.chance(0.3) {
                        (from.0 + 1) % BRANCHES
                    } else {
                        from.0
                    };
                    let to = (to_branch, (t as u32 + 1) % TASKS as u32);
                    let cents = rng.between(1, 5_000);
                    let page = invoke(&client, BankOp::Transfer { from, to, cents }).await;
                    assert!(
                        page.contains("Transferred") || page.contains("Insufficient funds"),
                        "{page}"
                    );
                    completed.lock().unwrap().push(Instant::now());
                }
            }));
        }
        while completed.lock().unwrap().len() < (TASKS * transfers / 4) as usize {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let fault_at = Instant::now();
        let restarted = fault(&config);
        for task in tasks {
            task.await.unwrap();
        }
        let mut total = 0;
        for branch in 0..BRANCHES {
            for number in 0..TASKS as u32 {
                total += balance(&invoke(&client, BankOp::Balance { branch, number }).await);
            }
        }
        assert_eq!(
            total,
            u64::from(BRANCHES) * TASKS * INITIAL,
            "money is conserved"
        );
        client.shutdown().await;
        (fault_at, restarted)
    });
    if let Some((mut child, args)) = restarted {
        // A restarted database node catches up with the others (they executed the last Balance).
        let others = |order: u64| {
            let cluster = Cluster::load(&config).unwrap();
            cluster.config.db_nodes.iter().all(|d| {
                node_process(&config, "dbnode", d.id)
                    .and_then(|(_, a)| highest_order(&a))
                    .is_some_and(|o| o == order)
            })
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while args[1] == "dbnode" && !highest_order(&args).is_some_and(others) {
            assert!(
                Instant::now() < deadline,
                "the restarted database node did not catch up"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: kill(2) on the child this test started.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        assert!(child.wait().unwrap().success());
    }
    demo.stop();
    let times = completed.lock().unwrap().clone();
    let after = times.iter().filter(|&&t| t > fault_at).count();
    assert!(after > 0, "no transfer completed after the fault");
    let stall = times
        .windows(2)
        .filter(|w| w[1] > fault_at)
        .map(|w| w[1].duration_since(w[0].max(fault_at)))
        .max()
        .unwrap_or_default();
    eprintln!(
        "{what}: longest time without a completed transfer after it {:.2} s (request timer \
         2 s); {after} of {} transfers completed after it",
        stall.as_secs_f64(),
        times.len()
    );
    let states = runtime.block_on(db_states(&data.join("cluster.toml")));
    assert!(
        states.iter().all(|s| *s == states[0]),
        "database nodes differ: {states:?}"
    );
}

#[test]
fn killing_the_primary_under_load_moves_the_cluster_to_a_new_view() {
    under_load(
        61800,
        "primary of view 0 killed",
        40,
        Box::new(|config| {
            kill(config, "primary", 0);
            None
        }),
    );
}

#[test]
fn a_database_node_killed_and_restarted_under_load_catches_up() {
    under_load(
        61900,
        "database node 12 killed and restarted",
        40,
        Box::new(|config| {
            let args = kill(config, "dbnode", 12);
            std::thread::sleep(Duration::from_secs(1));
            let child = restart(config, &args, "dbnode-12-restarted");
            Some((child, args))
        }),
    );
}

/// Enough transfers that checkpoints become stable after the restarted replica's JOIN (one
/// every 128 slots) while the load still runs.
const RECOVERY_TRANSFERS: u64 = 200;

#[test]
fn a_replica_killed_and_restarted_under_load_rejoins_its_group() {
    under_load(
        61500,
        "replica killed and restarted, then another of its group killed",
        RECOVERY_TRANSFERS,
        Box::new(|config| {
            let cluster = Cluster::load(config).unwrap();
            let group: Vec<u32> = cluster.members(proto::GroupId(0)).map(|r| r.id).collect();
            let args = kill(config, "replica", group[0]);
            std::thread::sleep(Duration::from_secs(1));
            let child = restart(config, &args, &format!("replica-{}-restarted", group[0]));
            let restarted = Instant::now();
            let wait_for = |what: &str, done: &dyn Fn() -> bool| {
                let deadline = Instant::now() + Duration::from_secs(120);
                while !done() {
                    assert!(Instant::now() < deadline, "{what} (logs in logs/)");
                    std::thread::sleep(Duration::from_millis(50));
                }
            };
            let recoveries = || metric(&args, "cloudbft_recoveries_total");
            wait_for("the restarted replica did not rejoin", &|| {
                recoveries() == Some(1.0)
            });
            eprintln!(
                "replica {} rejoined {:.2} s after its restart",
                group[0],
                restarted.elapsed().as_secs_f64()
            );
            // From now on its group decides only with it: its decisions must go on.
            kill(config, "replica", group[1]);
            let decisions = || metric(&args, "cloudbft_commits_total").unwrap_or(0.0);
            let before = decisions();
            wait_for(
                "the group did not decide with the restarted replica",
                &|| decisions() >= before + 20.0,
            );
            Some((child, args))
        }),
    );
}
