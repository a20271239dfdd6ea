//! The autoscaler across processes: `cloudbft elastic --autoscale --application tpcc` runs a
//! ramp of TPC-C terminals (low, 10×, low) against a fresh cluster whose groups have a limited
//! page stage; the autoscaler must add groups while the load is high and remove them after it
//! fell, no client request may fail, and every database node must end passing the twelve TPC-C
//! consistency conditions with identical digests (docs/operations.md, "The autoscaler"), on
//! SQLite and on PostgreSQL.

mod common;

use common::{PgDatabases, Ports};
use std::process::Command;

fn run(extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let ports = Ports::reserve();
    let json = dir.path().join("elastic.json");
    let output = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
        .args(["elastic", "--groups", "1", "--max-groups", "3"])
        .args(["--application", "tpcc"])
        .args(["--page-delay-ms", "100", "--ramp", "2:12,20:45,2:35"])
        .args([
            "--autoscale",
            "--p95-objective-ms",
            "400",
            "--interval-secs",
            "2",
        ])
        .args(["--cooldown-secs", "3", "--scale-down-window-secs", "10"])
        .args(["--base-port", &ports.base.to_string()])
        .arg("--data-dir")
        .arg(dir.path().join("cluster"))
        .arg("--json")
        .arg(&json)
        .args(extra)
        .env("RUST_LOG", "warn")
        .output()
        .expect("running cloudbft elastic");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "cloudbft elastic failed: {text}");
    eprintln!("{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["failures"], 0, "failed client requests: {text}");
    let timeline = report["timeline"].as_array().unwrap();
    let groups = |from: u64, to: u64| -> Vec<u64> {
        timeline
            .iter()
            .filter(|s| (from..to).contains(&s["at_secs"].as_u64().unwrap()))
            .map(|s| s["groups"].as_u64().unwrap())
            .collect()
    };
    let high = groups(12, 57);
    let most = high.iter().copied().max().unwrap();
    assert!(most > 1, "no group added under the high load: {high:?}");
    let last = timeline.last().unwrap()["groups"].as_u64().unwrap();
    assert!(
        last < most,
        "no group removed after the load fell: {:?}",
        groups(0, 200)
    );
    // Every change is a decision logged with the numbers behind it.
    let decisions = report["decisions"].as_array().unwrap();
    assert!(
        decisions
            .iter()
            .any(|d| d["reason"] == "p95 above the objective"
                && d["p95_ms"].as_f64().unwrap() > 400.0)
    );
    assert!(decisions.iter().any(|d| d["outcome"]
        .as_str()
        .is_some_and(|o| o.contains("remove group"))));
    // Checked by `cloudbft elastic` after the cluster stopped (it fails otherwise), and again
    // here from the databases themselves.
    assert!(
        report["digest"].as_str().is_some_and(|d| d.len() == 64),
        "{report}"
    );
    let digest = common::tpcc_consistent(&dir.path().join("cluster/cluster.toml"));
    assert_eq!(report["digest"], digest.as_str());
}

#[test]
fn the_autoscaler_follows_a_tpcc_load_ramp_without_failed_requests_on_sqlite() {
    run(&[]);
}

#[test]
fn the_autoscaler_follows_a_tpcc_load_ramp_without_failed_requests_on_postgres() {
    let databases = PgDatabases::new("as");
    run(&databases.args());
}
