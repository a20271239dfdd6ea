//! `cloudbft tpcc run` end to end: the driver's terminals run the specification's mix through
//! the whole local cluster (f=1, two groups, three database nodes, real processes over TCP),
//! then every database node passes the twelve consistency conditions and all digests are
//! identical, on SQLite and on PostgreSQL; and the unreplicated baseline runs the same programs.

mod common;

use common::cloudbft;
use std::path::Path;

/// A small population: loads in about a second per database node.
const SMALL: [&str; 6] = ["--items", "1000", "--districts", "10", "--customers", "60"];

/// Runs the driver with `extra` and returns its JSON report.
fn run(dir: &Path, extra: &[&str]) -> serde_json::Value {
    let json = dir.join("report.json");
    let data = dir.join("run");
    let mut args = vec![
        "tpcc",
        "run",
        "--data-dir",
        data.to_str().unwrap(),
        "--terminals",
        "8",
        "--warmup-secs",
        "1",
        "--duration-secs",
        "4",
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend(SMALL);
    args.extend(extra);
    let stdout = cloudbft(&args);
    assert!(stdout.contains("tpmC"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(dir.join("report.svg").exists(), "no latency CDF plot");
    assert_eq!(report["errors"], 0, "{report}");
    let per_type = report["per_type"].as_object().unwrap();
    assert_eq!(per_type.len(), 5, "{report}");
    assert!(
        per_type["New-Order"]["count"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert!(report["tpmc"].as_f64().unwrap() > 0.0, "{report}");
    report
}

fn through_cluster(extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let ports = common::Ports::reserve();
    let port = ports.base.to_string();
    let args = [
        &["--groups", "2", "--warehouses", "4", "--base-port", &port],
        extra,
    ]
    .concat();
    let report = run(dir.path(), &args);
    assert_eq!(report["groups"], 2);
    assert!(
        report["multi_partition_share"].as_f64().unwrap() > 0.0,
        "remote warehouses make some transactions multi-partition: {report}"
    );

    // Independently of the driver's own verification: every database node passes every
    // condition and all digests are equal.
    let config = dir.path().join("run/cluster.toml");
    assert_eq!(
        proto::config::Cluster::load(&config)
            .unwrap()
            .config
            .db_nodes
            .len(),
        3
    );
    common::tpcc_consistent(&config);
}

#[test]
fn tpcc_through_two_groups_on_sqlite() {
    through_cluster(&[]);
}

#[test]
fn tpcc_through_two_groups_on_postgres() {
    // Dropped when the test ends, passed or not: each run left three databases before.
    let databases = common::PgDatabases::new("tpcc");
    through_cluster(&databases.args());
}

#[test]
fn drop_databases_leaves_no_database_of_the_run_behind() {
    // The run checks its databases' consistency before it drops them; without the flag they
    // stay (as the test above needs them to).
    let databases = common::PgDatabases::new("tpccdrop");
    let dir = tempfile::tempdir().unwrap();
    let ports = common::Ports::reserve();
    let port = ports.base.to_string();
    let args = [
        &[
            "--warehouses",
            "1",
            "--base-port",
            &port,
            "--drop-databases",
        ][..],
        &databases.args(),
    ]
    .concat();
    run(dir.path(), &args);
    assert_eq!(databases.existing().unwrap(), Vec::<String>::new());
    let baseline = [
        &["--baseline", "--warehouses", "1", "--drop-databases"][..],
        &databases.args(),
    ]
    .concat();
    let baseline_dir = dir.path().join("baseline");
    std::fs::create_dir(&baseline_dir).unwrap();
    run(&baseline_dir, &baseline);
    assert_eq!(databases.existing().unwrap(), Vec::<String>::new());
}

#[test]
fn baseline_runs_the_same_programs_on_one_database() {
    let dir = tempfile::tempdir().unwrap();
    let report = run(dir.path(), &["--baseline", "--warehouses", "2"]);
    assert_eq!(report["groups"], 0);
    let db = format!(
        "sqlite:{}?mode=rwc",
        dir.path().join("run/baseline.sqlite").display()
    );
    let check = cloudbft(&["tpcc", "check", "--db", &db]);
    assert_eq!(
        check.lines().filter(|l| l.starts_with("PASS")).count(),
        12,
        "{check}"
    );
}
