//! Online reconfiguration across processes (docs/protocol.md, "Reconfiguration"): a `cloudbft
//! demo` cluster under concurrent bank transfers through the client library goes from one group
//! to three (`cloudbft scale`), moves a partition (`cloudbft partition move`) and back to one
//! group, by the operator's commands. No client request fails, the new groups serve requests,
//! money is conserved, and every database node ends in the same state.

mod common;

use client_plugin::client::ClientEndpoint;
use common::{balance, db_states, invoke, load_driver_client, Demo, PgDatabases, Ports};
use dbvote::bank::BankOp;
use proto::config::Cluster;
use proto::testing::Rng;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BRANCHES: u32 = 4;
const ACCOUNTS: u32 = 4;
const INITIAL: u64 = 100_000;

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

/// The same, for a command that must be refused: returns its error output.
fn refused(config: &Path, args: &[&str]) -> String {
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
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn groups_of(config: &Path) -> usize {
    Cluster::load(config).unwrap().config.groups.len()
}

async fn total(client: &ClientEndpoint) -> u64 {
    let mut sum = 0;
    for branch in 0..BRANCHES {
        for number in 0..ACCOUNTS {
            sum += balance(&invoke(client, BankOp::Balance { branch, number }).await);
        }
    }
    sum
}

fn run(extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cluster");
    let ports = Ports::reserve();
    let args = [
        &[
            "--application",
            "bank",
            "--groups",
            "1",
            "--max-groups",
            "3",
            "--partitions",
            "4",
        ],
        extra,
    ]
    .concat();
    let demo = Demo::start(&data, &ports, &args);
    let config = demo.config();
    assert_eq!(groups_of(&config), 1);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(async {
        let client = load_driver_client(&config).await;
        for branch in 0..BRANCHES {
            for number in 0..ACCOUNTS {
                let open = BankOp::Open {
                    branch,
                    number,
                    initial_cents: INITIAL,
                };
                invoke(&client, open).await;
            }
        }
        client
    });

    // Transfers go on during every reconfiguration; each records the group that served it.
    let stop = Arc::new(AtomicBool::new(false));
    let served: Arc<Mutex<BTreeSet<u32>>> = Arc::default();
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let tasks: Vec<_> = (0..6u64)
        .map(|t| {
            let (client, stop) = (client.clone(), stop.clone());
            let (served, failures) = (served.clone(), failures.clone());
            runtime.spawn(async move {
                let mut rng = Rng::new(t);
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let from = (rng.below(u64::from(BRANCHES)) as u32, t as u32 % ACCOUNTS);
                    let to_branch = if rng.chance(0.3) {
                        (from.0 + 1) % BRANCHES
                    } else {
                        from.0
                    };
                    let to = (to_branch, (t as u32 + 1) % ACCOUNTS);
                    let op = BankOp::Transfer {
                        from,
                        to,
                        cents: rng.between(1, 3_000),
                    };
                    match client.invoke(op.partitions(), op.encode()).await {
                        Ok(accepted) => {
                            served.lock().unwrap().insert(accepted.group.0);
                            done += 1;
                        }
                        Err(e) => failures.lock().unwrap().push(format!("{op:?}: {e}")),
                    }
                }
                done
            })
        })
        .collect();
    let settle = || std::thread::sleep(Duration::from_secs(2));
    settle();

    let bad = refused(&config, &["group", "remove", "0"]);
    assert!(bad.contains("last group"), "{bad}");
    let plan = operator(&config, &["scale", "--groups", "3", "--dry-run"]);
    assert!(
        plan.contains("add group 1") && plan.contains("add group 2"),
        "{plan}"
    );
    assert_eq!(groups_of(&config), 1, "a dry run changes nothing");

    let out = operator(&config, &["scale", "--groups", "3"]);
    assert!(out.contains("epoch 2 runs"), "{out}");
    assert_eq!(groups_of(&config), 3);
    settle();
    let after_scale_up = served.lock().unwrap().clone();

    let out = operator(&config, &["partition", "move", "0", "--to", "2"]);
    assert!(out.contains("move partitions [0] to group 2"), "{out}");
    settle();

    let out = operator(&config, &["scale", "--groups", "1"]);
    assert!(out.contains("epoch 4 runs"), "{out}");
    assert_eq!(groups_of(&config), 1);
    settle();

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
    assert!(
        after_scale_up.contains(&1) && after_scale_up.contains(&2),
        "the added groups served requests: {after_scale_up:?}"
    );
    eprintln!(
        "{done} transfers, served by groups {:?}",
        served.lock().unwrap()
    );
    runtime.block_on(async {
        assert_eq!(
            total(&client).await,
            u64::from(BRANCHES * ACCOUNTS) * INITIAL,
            "money is conserved"
        );
        client.shutdown().await;
    });
    demo.stop();
    let states = runtime.block_on(db_states(&config));
    assert!(
        states.iter().all(|s| *s == states[0]),
        "database nodes differ: {states:?}"
    );
}

#[test]
fn one_to_three_groups_and_back_under_load_on_sqlite() {
    run(&[]);
}

#[test]
fn one_to_three_groups_and_back_under_load_on_postgres() {
    let databases = PgDatabases::new("rc");
    run(&databases.args());
}
