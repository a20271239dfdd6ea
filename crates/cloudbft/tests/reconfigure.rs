//! Online reconfiguration across processes (docs/protocol.md, "Reconfiguration"): a `cloudbft
//! demo` cluster under TPC-C load through the client library (terminals running the
//! specification's mix on four warehouses) goes from one group to three (`cloudbft scale`),
//! moves a partition (`cloudbft partition move`), replaces a member of a group
//! (`cloudbft group replace`), then another one whose process was killed, and goes back to one
//! group, all by the operator's commands; commands that must be refused change nothing. No
//! client request fails, the new groups serve requests, so do the new members (once both
//! replacements are done every quorum of their group holds one), the removed groups become
//! spares again away from the retired machines, and every database node ends passing the
//! twelve TPC-C consistency conditions with identical digests.

mod common;

use common::{kill, load_driver_client, tpcc_consistent, Demo, PgDatabases, Ports};
use proto::config::Cluster;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};
use tpcc::pages::Shown;
use tpcc::workload::{Population, Terminal};
use tpcc::{NuRandConstants, ScaleConfig};

/// Warehouses (one partition each).
const WAREHOUSES: u32 = 4;
/// Closed-loop terminals.
const TERMINALS: u64 = 6;
/// How long a step may take to show its effect before the test gives up (a hang guard only:
/// every wait below is for an event).
const STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `cloudbft <args>` against the demo's configuration and returns what it printed; panics
/// with its output if it fails.
fn operator(config: &Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "warn")
        .output()
        .expect("running the operator command");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "cloudbft {args:?} failed: {text}");
    eprintln!("cloudbft {args:?}:\n{text}");
    text
}

/// The same, for a command that must be refused: returns its error output, and checks that
/// it changed neither the configuration nor the spares.
fn refused(config: &Path, args: &[&str]) -> String {
    let files = || {
        ["cluster.toml", "spares.toml"].map(|f| std::fs::read(config.with_file_name(f)).unwrap())
    };
    let before = files();
    let output = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .expect("running the operator command");
    assert!(
        !output.status.success(),
        "cloudbft {args:?} was not refused"
    );
    assert!(files() == before, "the refused {args:?} changed a file");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn groups_of(config: &Path) -> usize {
    Cluster::load(config).unwrap().config.groups.len()
}

/// Pages accepted so far, by the configuration epoch and group that served them, with a way to
/// wait until they reach a condition.
#[derive(Default)]
struct Served {
    counts: Mutex<BTreeMap<(u64, u32), u64>>,
    changed: Condvar,
}

impl Served {
    fn add(&self, epoch: u64, group: u32) {
        *self
            .counts
            .lock()
            .unwrap()
            .entry((epoch, group))
            .or_default() += 1;
        self.changed.notify_all();
    }

    fn count(&self, epoch: u64, group: u32) -> u64 {
        let counts = self.counts.lock().unwrap();
        counts.get(&(epoch, group)).copied().unwrap_or(0)
    }

    /// Waits until `group` served `n` pages in `epoch`.
    fn wait_for(&self, epoch: u64, group: u32, n: u64) {
        let counts = self.counts.lock().unwrap();
        let (counts, timeout) = self
            .changed
            .wait_timeout_while(counts, STEP_TIMEOUT, |c| {
                c.get(&(epoch, group)).copied().unwrap_or(0) < n
            })
            .unwrap();
        assert!(
            !timeout.timed_out(),
            "group {group} did not serve {n} requests in epoch {epoch}: {counts:?}"
        );
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn run(extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cluster");
    let ports = Ports::reserve();
    let partitions = WAREHOUSES.to_string();
    let args = [
        &[
            "--application",
            "tpcc",
            "--groups",
            "1",
            "--max-groups",
            "3",
            "--partitions",
            &partitions,
            "--spare-machines",
            "2",
        ],
        extra,
    ]
    .concat();
    let demo = Demo::start(&data, &ports, &args);
    let config = demo.config();
    assert_eq!(groups_of(&config), 1);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(async { load_driver_client(&config).await });

    // TPC-C terminals run during every reconfiguration, on the population the demo loaded
    // (the small one, load seed 1).
    let population = Population {
        warehouses: WAREHOUSES,
        scale: ScaleConfig::small(),
        constants: NuRandConstants::for_load(1).for_run(2),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let served: Arc<Served> = Arc::default();
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let tasks: Vec<_> = (0..TERMINALS)
        .map(|t| {
            let (client, stop) = (client.clone(), stop.clone());
            let (served, failures) = (served.clone(), failures.clone());
            let mut terminal = Terminal::new(t, population, 7);
            runtime.spawn(async move {
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let op = terminal.next(unix_now());
                    let outcome = client.invoke(op.partitions().unwrap(), op.encode()).await;
                    match outcome {
                        Ok(accepted) if tpcc::pages::shown(&accepted.page) != Shown::Refused => {
                            served.add(accepted.config_epoch.0, accepted.group.0);
                            done += 1;
                        }
                        Ok(accepted) => failures.lock().unwrap().push(format!(
                            "{op:?} refused: {}",
                            String::from_utf8_lossy(&accepted.page)
                        )),
                        Err(e) => failures.lock().unwrap().push(format!("{op:?}: {e}")),
                    }
                }
                done
            })
        })
        .collect();
    served.wait_for(1, 0, 10);

    // Refused, changing nothing: the last group, and a replacement on a machine the group
    // uses (spare 201, made for group 1, is on m1 with group 0's 101).
    let bad = refused(&config, &["group", "remove", "0"]);
    assert!(bad.contains("last group"), "{bad}");
    let bad = refused(
        &config,
        &["group", "replace", "0", "--replica", "103", "--with", "201"],
    );
    assert!(
        bad.contains("replica 201.machine: m1 already hosts member 101 of the group"),
        "{bad}"
    );
    let plan = operator(&config, &["scale", "--groups", "3", "--dry-run"]);
    assert!(
        plan.contains("add group 1") && plan.contains("add group 2"),
        "{plan}"
    );
    assert_eq!(groups_of(&config), 1, "a dry run changes nothing");

    let out = operator(&config, &["scale", "--groups", "3"]);
    assert!(out.contains("epoch 2 runs"), "{out}");
    assert_eq!(groups_of(&config), 3);
    served.wait_for(2, 1, 5);
    served.wait_for(2, 2, 5);

    let out = operator(&config, &["partition", "move", "0", "--to", "2"]);
    assert!(out.contains("move partitions [0] to group 2"), "{out}");
    served.wait_for(3, 2, 5);

    // Machine m3 retires: group 0's member there is replaced by its spare on m5.
    let plan = operator(
        &config,
        &["group", "replace", "0", "--replica", "103", "--dry-run"],
    );
    assert!(
        plan.contains("group 0: replace replica 103 on m3 by 105 on m5"),
        "{plan}"
    );
    let out = operator(&config, &["group", "replace", "0", "--replica", "103"]);
    assert!(
        out.contains("group 0: replace replica 103 on m3 by 105 on m5")
            && out.contains("machine m3 is retired")
            && out.contains("epoch 4 runs"),
        "{out}"
    );
    served.wait_for(4, 0, 5);

    // Machine m1 fails: 101's process dies, then it is replaced by group 0's spare on m6 (m3
    // is retired). Group 0 is then 102, 105 and 106: every page it serves is vouched for by a
    // newcomer.
    kill(&config, "replica", 101);
    let out = operator(&config, &["group", "replace", "0", "--replica", "101"]);
    assert!(
        out.contains("group 0: replace replica 101 on m1 by 106 on m6")
            && out.contains("epoch 5 runs"),
        "{out}"
    );
    let before = served.count(5, 0);
    served.wait_for(5, 0, before + 10);

    let out = operator(&config, &["scale", "--groups", "1"]);
    assert!(out.contains("epoch 6 runs"), "{out}");
    assert_eq!(groups_of(&config), 1);
    served.wait_for(6, 0, 10);
    let members: Vec<u32> = Cluster::load(&config)
        .unwrap()
        .config
        .replicas
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(members, vec![106, 102, 105]);
    // The removed groups are spares again (their replicas reported where their USIG sequences
    // stand), on machines that are not retired: m1 and m3 were, so each takes its spares on
    // the spare machines.
    let plan = operator(&config, &["scale", "--groups", "3", "--dry-run"]);
    assert!(
        plan.contains("add group 1 (replicas 202 on m2, 205 on m5, 206 on m6)")
            && plan.contains("add group 2 (replicas 302 on m2, 305 on m5, 306 on m6)"),
        "{plan}"
    );

    stop.store(true, Ordering::Relaxed);
    let done: u64 = runtime.block_on(async {
        let mut sum = 0;
        for t in tasks {
            sum += t.await.unwrap();
        }
        sum
    });
    let failures = failures.lock().unwrap().clone();
    assert!(failures.is_empty(), "failed client requests: {failures:?}");
    eprintln!(
        "{done} TPC-C transactions, served by (epoch, group) {:?}",
        served.counts.lock().unwrap()
    );
    runtime.block_on(client.shutdown());
    demo.stop();
    tpcc_consistent(&config);
}

#[test]
fn one_to_three_groups_and_back_with_member_replacements_under_tpcc_on_sqlite() {
    run(&[]);
}

#[test]
fn one_to_three_groups_and_back_with_member_replacements_under_tpcc_on_postgres() {
    let databases = PgDatabases::new("rc");
    run(&databases.args());
}
