//! A short soak (docs/operations.md, "Soak"): `cloudbft soak` runs TPC-C terminals against a
//! fresh f=1 cluster on SQLite for 80 s while a replica and a database node are killed with
//! SIGKILL and restarted in turn every 20 s, sampling every process's resident memory and every
//! node's data every 2 s. It asserts sizes only, never times:
//!
//! * every process's resident memory stays below [`RSS_BOUND_MIB`] and every node's data below
//!   [`DISK_BOUND_MIB`] in every sample;
//! * nothing grows after the warm-up by the flatness rule, with tolerances for a run this short
//!   (the command fails otherwise, naming what grew);
//! * at least one replica and one database node were restarted, and each recovered;
//! * no request failed, every database node holds exactly the acknowledged New-Orders and
//!   Payments (nothing lost, nothing executed twice), passes the twelve TPC-C consistency
//!   conditions, and all digests are equal (checked by the command, and here again from the
//!   databases).

mod common;

use common::Ports;
use std::process::Command;

/// Resident memory no process of the test cluster (debug build) comes near: a replica, a
/// database node or the driver uses some tens of MiB.
const RSS_BOUND_MIB: f64 = 400.0;
/// Disk no node's data comes near in 80 s: a database of the small population with four
/// warehouses is about 10 MiB, and grows by some MiB in the run; a decision log stays within
/// two checkpoint intervals.
const DISK_BOUND_MIB: f64 = 200.0;

#[test]
fn a_short_soak_with_restarts_stays_flat_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("soak");
    let ports = Ports::reserve();
    let output = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
        .args([
            "soak",
            "--duration-secs",
            "80",
            "--restart-every-secs",
            "20",
        ])
        .args(["--sample-every-secs", "2", "--terminals", "4"])
        // A stalled cluster fails the run at once, saying so, instead of at the end.
        .args(["--stall-secs", "30"])
        // A short run's quarters are 20 s: a restart in the last one lifts that node's memory
        // while it catches up, which an hour's run averages away.
        .args(["--rss-tolerance-pct", "50", "--rss-slack-mib", "24"])
        .args(["--disk-tolerance-pct", "100", "--disk-slack-mib", "16"])
        .args(["--base-port", &ports.base.to_string()])
        .arg("--out")
        .arg(&out)
        .env("RUST_LOG", "warn")
        .output()
        .expect("running cloudbft soak");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("{text}");
    assert!(output.status.success(), "cloudbft soak failed: {text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("soak.json")).unwrap()).unwrap();
    let samples = report["samples"].as_array().unwrap();
    assert!(samples.len() >= 30, "{} samples", samples.len());
    for s in samples {
        for (name, mib) in s["rss_mib"].as_object().unwrap() {
            let mib = mib.as_f64().unwrap();
            assert!(mib < RSS_BOUND_MIB, "{name}: {mib} MiB at {}", s["at_secs"]);
        }
        for (name, mib) in s["disk_mib"].as_object().unwrap() {
            let mib = mib.as_f64().unwrap();
            assert!(
                mib < DISK_BOUND_MIB,
                "{name}: {mib} MiB at {}",
                s["at_secs"]
            );
        }
    }
    // Every process was sampled, restarted ones included.
    let last = samples.last().unwrap()["rss_mib"].as_object().unwrap();
    for role in ["replica-", "dbnode-", "primary-", "usigd-", "driver"] {
        assert!(
            last.keys().any(|k| k.starts_with(role)),
            "no {role}: {last:?}"
        );
    }
    let judged = report["judged"].as_array().unwrap();
    assert!(judged.iter().all(|j| j["flat"] == true), "{judged:?}");
    assert!(
        judged.len() >= last.len(),
        "not every process judged: {judged:?}"
    );
    let restarts = report["restarts"].as_array().unwrap();
    for role in ["replica-", "dbnode-"] {
        assert!(
            restarts
                .iter()
                .any(|r| r["node"].as_str().unwrap().starts_with(role)),
            "no {role} restarted: {restarts:?}"
        );
    }
    assert!(
        restarts.iter().all(|r| r["recovered_after_secs"].is_f64()),
        "{restarts:?}"
    );
    assert_eq!(report["failures"], 0, "{text}");
    assert!(report["transactions"].as_u64().unwrap() > 0);
    for (node, d) in report["ledger"].as_object().unwrap() {
        for (what, n) in d.as_object().unwrap() {
            assert_eq!(n, 0, "{node}: {what}");
        }
    }
    let digest = report["digest"]["Ok"].as_str().expect("a digest");
    assert_eq!(
        digest,
        common::tpcc_consistent(&out.join("cluster/cluster.toml"))
    );
    assert!(std::fs::read_to_string(out.join("soak.svg"))
        .unwrap()
        .contains("replica-"));
}
