//! `cloudbft bench` end to end on a real local cluster, so that its report cannot rot: a short
//! run writes the JSON with the figures a reader divides by (CPU by role, requests per
//! PREPARE, executions per database transaction, the timeline, the build) and its two plots,
//! and `bench compare` reads it back. It checks the shape and the invariants of what is written,
//! never the timings.

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn a_short_run_reports_its_batches_and_compares_with_itself() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let ports = common::Ports::reserve();
    let (report, stdout) = short_run(dir.path(), &ports, &["--groups", "1", "--max-batch", "4"]);
    assert!(stdout.contains(" per PREPARE, "), "{stdout}");

    let number = |field: &str| {
        report[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{field}: {report}"))
    };
    assert_eq!(report["errors"], 0, "{report}");
    let operations = report["operations"].as_u64().unwrap();
    assert!(operations > 0, "{report}");
    // Eight clients and batches of at most four: every PREPARE held one to four requests.
    let per_prepare = number("requests_per_prepare");
    assert!((1.0..=4.0).contains(&per_prepare), "{report}");
    // A database transaction executes at least one operation.
    assert!(number("executions_per_transaction") >= 1.0, "{report}");
    for role in ["driver", "primary", "replica", "dbnode", "usigd"] {
        assert!(
            report["cpu"]["by_role"][role].as_f64().unwrap() > 0.0,
            "{role}: {report}"
        );
    }
    let timeline = report["timeline"].as_array().unwrap();
    let in_intervals: u64 = timeline
        .iter()
        .map(|i| i["operations"].as_u64().unwrap())
        .sum();
    assert_eq!(in_intervals, operations, "{report}");
    for plot in ["run.svg", "run-timeline.svg"] {
        assert!(dir.path().join(plot).is_file(), "{plot}");
    }
    // The report names the build that ran it, as `--version` does.
    let version = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
        .arg("--version")
        .output()
        .expect("running cloudbft --version");
    let version = String::from_utf8_lossy(&version.stdout);
    let build = report["build"].as_str().unwrap();
    assert!(!build.is_empty(), "{report}");
    assert!(
        version.trim_end().ends_with(&format!("(build {build})")),
        "{version}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
        .args(["bench", "compare"])
        .args([&json, &json])
        .output()
        .expect("running cloudbft bench compare");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    for figure in ["| requests per PREPARE ", "| executions per transaction "] {
        let row = table
            .lines()
            .find(|l| l.starts_with(figure))
            .unwrap_or_else(|| panic!("no row {figure}: {table}"));
        assert!(row.contains("| 1.000 ") && row.contains("| same "), "{row}");
    }
}

/// `cloudbft bench` with the flags of a short run at `ports`, then `extra`, writing `dir`/run.json
/// (and its plots); the report and what it printed.
fn short_run(dir: &Path, ports: &common::Ports, extra: &[&str]) -> (serde_json::Value, String) {
    let json = dir.join("run.json");
    let out = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
        .args(["bench", "--clients", "8"])
        .args(["--warmup-secs", "1", "--duration-secs", "2"])
        .args(["--base-port", &ports.base.to_string()])
        .args(["--gateway-addr", &format!("127.0.0.1:{}", ports.gateway)])
        .args(extra)
        .arg("--json")
        .arg(&json)
        .env("RUST_LOG", "warn")
        .output()
        .expect("running cloudbft bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    let report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (report, stdout.into_owned())
}

/// The load driver and the gateway measured alone: against responders (no ordering, no
/// database) every operation is accepted as f+1 matching pages, and the CPU per operation is
/// the driver's, the gateway's and the responders' only.
#[test]
fn responders_measure_the_driver_and_the_gateway_alone() {
    let ports = common::Ports::reserve();
    for (flags, label, roles) in [
        (
            &["--responders"][..],
            " responders",
            &["driver", "responders"][..],
        ),
        (
            &["--responders", "--via-gateway"][..],
            " via=gateway responders",
            &["driver", "responders", "gateway"][..],
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (report, stdout) = short_run(dir.path(), &ports, flags);
        assert_eq!(report["errors"], 0, "{flags:?}: {report}");
        assert!(report["operations"].as_u64().unwrap() > 0, "{report}");
        let by_role = report["cpu"]["by_role"].as_object().unwrap();
        let mut measured: Vec<&str> = by_role.keys().map(String::as_str).collect();
        measured.sort_unstable();
        let mut expected = roles.to_vec();
        expected.sort_unstable();
        assert_eq!(measured, expected, "{report}");
        for role in roles {
            assert!(by_role[*role].as_f64().unwrap() > 0.0, "{role}: {report}");
        }
        assert_eq!(report["responders"], true, "{report}");
        let via_gateway = flags.contains(&"--via-gateway");
        assert_eq!(report["via_gateway"], via_gateway, "{report}");
        // The label says what the load met, so `bench compare` never pairs these runs with
        // the cluster's.
        assert!(
            stdout.contains(&format!("clients=8 max_batch=64{label}: ")),
            "{stdout}"
        );
    }
}

/// What responders or the gateway's form cannot run is refused before anything starts, naming
/// the flag.
#[test]
fn responders_and_the_gateway_refuse_what_they_cannot_run() {
    for (flags, says) in [
        (
            &["--responders", "--application", "bank"][..],
            "--responders",
        ),
        (
            &["--via-gateway", "--multi-partition", "0.5"][..],
            "--multi-partition 0",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
            .arg("bench")
            .args(flags)
            .output()
            .expect("running cloudbft bench");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?} ran");
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
    }
}
