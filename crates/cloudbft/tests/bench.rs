//! `cloudbft bench` end to end on a real local cluster, so that its report cannot rot: a short
//! run writes the JSON with the figures a reader divides by (CPU by role, requests per
//! PREPARE, executions per database transaction, the timeline, the build) and its two plots,
//! and `bench compare` reads it back. It checks the shape and the invariants of what is written,
//! never the timings.

mod common;

use std::process::Command;

#[test]
fn a_short_run_reports_its_batches_and_compares_with_itself() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let ports = common::Ports::reserve();
    let out = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
        .args([
            "bench",
            "--groups",
            "1",
            "--clients",
            "8",
            "--max-batch",
            "4",
        ])
        .args(["--warmup-secs", "1", "--duration-secs", "2"])
        .args(["--base-port", &ports.base.to_string(), "--json"])
        .arg(&json)
        .env("RUST_LOG", "warn")
        .output()
        .expect("running cloudbft bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(" per PREPARE, "), "{stdout}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
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
