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
    balance, db_states, highest_order, invoke, kill, metric, node_process, restart, Demo, Ports,
    Restarted,
};
use dbvote::bank::BankOp;
use proto::config::Cluster;
use proto::testing::Rng;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BRANCHES: u32 = 4;
const INITIAL: u64 = 100_000;
const TASKS: u64 = 6;

/// What to do to the cluster once a quarter of the transfers completed; returns the processes
/// the test restarted itself (the demo does not manage them) with their arguments, in the order
/// they were started.
type Fault = Box<dyn FnOnce(&Path) -> Vec<Restarted>>;

/// Runs `transfers` transfers per task, applies `fault` a quarter of the way, checks that every
/// transfer completes, money is conserved and every database node ends in the same state;
/// prints the longest time without a completed transfer after the fault.
///
/// The tasks go on past `transfers` until `fault` returned: a fault that waits for decisions
/// (a rejoined replica deciding) must see load however fast the cluster ran the rest.
fn under_load(what: &str, usig: &str, transfers: u64, fault: Fault) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cluster");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let ports = Ports::reserve();
    let demo = Demo::start(&data, &ports, &["--application", "bank", "--usig", usig]);
    let config = demo.config();
    let completed: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let fault_returned = Arc::new(AtomicBool::new(false));
    let (fault_at, restarted, planned_left) = runtime.block_on(async {
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
            let fault_returned = fault_returned.clone();
            tasks.push(tokio::spawn(async move {
                let mut rng = Rng::new(t);
                let mut done = 0;
                while done < transfers || !fault_returned.load(Ordering::Acquire) {
                    done += 1;
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
        fault_returned.store(true, Ordering::Release);
        let planned_left =
            (TASKS * transfers).saturating_sub(completed.lock().unwrap().len() as u64);
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
        (fault_at, restarted, planned_left)
    });
    for args in restarted
        .iter()
        .map(|r| &r.args)
        .filter(|a| a[1] == "dbnode")
    {
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
        while !highest_order(args).is_some_and(others) {
            assert!(
                Instant::now() < deadline,
                "the restarted database node did not catch up"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // COMMIT-DBs count only on authenticated links (docs/protocol.md, "Authenticated links"):
    // every database node executed, so each has links from the replicas, whatever the fault.
    let cluster = Cluster::load(&config).unwrap();
    for db in &cluster.config.db_nodes {
        let (_, args) = node_process(&config, "dbnode", db.id).expect("database node running");
        let links = metric(&args, "transport_links").unwrap_or_default();
        assert!(
            links >= 1.0,
            "database node {} has no links: {links}",
            db.id
        );
    }
    // Nodes before the usigd they use.
    for node in restarted.into_iter().rev() {
        node.stop();
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
         2 s); {after} of {} transfers completed after it; {planned_left} of the planned ones \
         were left when the fault returned",
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
        "primary of view 0 killed",
        "soft",
        40,
        Box::new(|config| {
            kill(config, "primary", 0);
            Vec::new()
        }),
    );
}

#[test]
fn a_database_node_killed_and_restarted_under_load_catches_up() {
    under_load(
        "database node 12 killed and restarted",
        "soft",
        40,
        Box::new(|config| {
            let args = kill(config, "dbnode", 12);
            std::thread::sleep(Duration::from_secs(1));
            vec![restart(config, &args, "dbnode-12-restarted")]
        }),
    );
}

/// Enough transfers that checkpoints become stable after the restarted replica's JOIN (one
/// every 128 slots) while the load still runs.
const RECOVERY_TRANSFERS: u64 = 200;

/// Kills the first replica of group 0 with SIGKILL and restarts it; with `reboot`, its whole
/// machine: every node on it and the machine's usigd, which comes back in a new USIG epoch (as a
/// rebooted TPM does). Waits until the restarted replicas rejoined their groups, then kills the
/// second replica of group 0 for good and waits until the first decides again: with f = 1 its
/// group now decides only with it.
fn rejoin(config: &Path, reboot: bool) -> Vec<Restarted> {
    let cluster = Cluster::load(config).unwrap();
    let group: Vec<u32> = cluster.members(proto::GroupId(0)).map(|r| r.id).collect();
    let machine = cluster
        .config
        .replicas
        .iter()
        .find(|r| r.id == group[0])
        .map(|r| r.machine.clone())
        .unwrap();
    let (replicas, db_nodes): (Vec<u32>, Vec<u32>) = if reboot {
        let on = |m: &String| *m == machine;
        (
            cluster
                .config
                .replicas
                .iter()
                .filter(|r| on(&r.machine))
                .map(|r| r.id)
                .collect(),
            cluster
                .config
                .db_nodes
                .iter()
                .filter(|d| on(&d.machine))
                .map(|d| d.id)
                .collect(),
        )
    } else {
        (vec![group[0]], Vec::new())
    };
    let replica_args: Vec<Vec<String>> = replicas
        .iter()
        .map(|&id| kill(config, "replica", id))
        .collect();
    let db_args: Vec<Vec<String>> = db_nodes
        .iter()
        .map(|&id| kill(config, "dbnode", id))
        .collect();
    let mut restarted = Vec::new();
    if reboot {
        let mut args = kill_usigd(config, &machine);
        std::thread::sleep(Duration::from_secs(1));
        args.push("--new-epoch".into());
        let usigd = restart(config, &args, &format!("usigd-{machine}-restarted"));
        let (socket, usig) = {
            let r = cluster
                .config
                .replicas
                .iter()
                .find(|r| r.id == group[0])
                .unwrap();
            let dir = config.parent().unwrap();
            (
                node::usig::default_socket(dir, &machine, r.id),
                usig::UsigId(r.usig),
            )
        };
        let configured = cluster.usig_epoch_of(proto::NodeId(group[0]));
        wait_for(config, "usigd did not come back in a new epoch", &|| {
            usig::daemon::client::UsigdClient::connect(&socket, usig)
                .and_then(|mut c| c.epoch())
                .is_ok_and(|e| Some(e) > configured)
        });
        restarted.push(usigd);
    } else {
        std::thread::sleep(Duration::from_secs(1));
    }
    for (id, args) in db_nodes.iter().zip(db_args) {
        restarted.push(restart(config, &args, &format!("dbnode-{id}-restarted")));
    }
    let started = Instant::now();
    for (id, args) in replicas.iter().zip(replica_args) {
        restarted.push(restart(config, &args, &format!("replica-{id}-restarted")));
    }
    let replica_args: Vec<&Vec<String>> = restarted
        .iter()
        .map(|r| &r.args)
        .filter(|a| a[1] == "replica")
        .collect();
    for args in &replica_args {
        wait_for(
            config,
            "a restarted replica did not rejoin its group",
            &|| metric(args, "cloudbft_recoveries_total") == Some(1.0),
        );
    }
    eprintln!(
        "{} replica(s) rejoined {:.2} s after their restart",
        replica_args.len(),
        started.elapsed().as_secs_f64()
    );
    // From now on group 0 decides only with its restarted replica: its decisions must go on.
    kill(config, "replica", group[1]);
    let first = replica_args[0];
    let decisions = || metric(first, "cloudbft_commits_total").unwrap_or(0.0);
    let before = decisions();
    wait_for(
        config,
        "group 0 did not decide with its restarted replica",
        &|| decisions() >= before + 20.0,
    );
    restarted
}

/// Polls `done` until it holds. After two minutes it prints the last lines of group 0's and the
/// primaries' logs (the cluster's directory goes with the test, so a CI log shows what the nodes
/// did only this way) and fails the test with `what`.
fn wait_for(config: &Path, what: &str, done: &dyn Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done() {
        if Instant::now() >= deadline {
            eprintln!("{}", log_tails(config, &["replica-1", "primary-"], 40));
            panic!("{what} (the last lines of the nodes' logs are above)");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last `lines` lines of each log in the cluster's `logs/` whose name starts with one of
/// `prefixes`.
fn log_tails(config: &Path, prefixes: &[&str], lines: usize) -> String {
    let dir = config.parent().unwrap().join("logs");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| prefixes.iter().any(|p| name.starts_with(p)))
        .collect();
    names.sort();
    let mut tails = String::new();
    for name in names {
        let text = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        tails += &format!("==== logs/{name}, its last {lines} lines\n");
        for line in &all[all.len().saturating_sub(lines)..] {
            tails += line;
            tails.push('\n');
        }
    }
    tails
}

/// Kills the usigd of `machine` with SIGKILL and returns its arguments.
fn kill_usigd(config: &Path, machine: &str) -> Vec<String> {
    let usigd_config = config
        .parent()
        .unwrap()
        .join("usigd")
        .join(format!("{machine}.toml"))
        .display()
        .to_string();
    let (pid, args) = common::process(|args| {
        args.get(1).is_some_and(|a| a == "usigd") && args.contains(&usigd_config)
    })
    .unwrap_or_else(|| panic!("the usigd of {machine} is not running"));
    // SAFETY: kill(2) on a process of this test's cluster.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    args
}

#[test]
fn a_replica_killed_and_restarted_under_load_rejoins_its_group() {
    under_load(
        "replica killed and restarted, then another of its group killed",
        "soft",
        RECOVERY_TRANSFERS,
        Box::new(|config| rejoin(config, false)),
    );
}

#[test]
fn a_machine_rebooted_under_load_rejoins_in_new_usig_epochs() {
    under_load(
        "machine rebooted (its replicas, database node and usigd; new USIG epochs)",
        "soft",
        RECOVERY_TRANSFERS,
        Box::new(|config| rejoin(config, true)),
    );
}

/// The same with TPM warrants (swtpm): peers follow the restarted replica from its JOIN's chain
/// value, and it follows the primary and its peers from chain values the stable checkpoint
/// certifies.
#[test]
fn a_replica_restarted_under_load_rejoins_with_tpm_warrants() {
    under_load(
        "replica killed and restarted (TPM warrants), then another of its group killed",
        "tpm",
        RECOVERY_TRANSFERS,
        Box::new(|config| rejoin(config, false)),
    );
}
