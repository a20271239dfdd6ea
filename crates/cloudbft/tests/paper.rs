//! `cloudbft paper run --short` and `cloudbft paper report` end to end, so that the paper's
//! reproduction cannot rot: the short plan (Fig. 5 with one group and one unreplicated server,
//! a few seconds each) runs for real, and the test checks the shape of what it writes (every
//! run's JSON with the nodes' stage metrics and the machine's load, the manifest, the report
//! with a section per figure and its plot), never the timings.

mod common;

use std::process::Command;

#[test]
fn the_short_plan_runs_and_the_report_has_every_figure() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    let ports = common::Ports::reserve();
    let out = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
        .args(["paper", "run", "--short", "--out"])
        .arg(&results)
        .args(["--base-port", &ports.base.to_string()])
        .env("RUST_LOG", "warn")
        .output()
        .expect("running cloudbft paper run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "paper run failed:\n{stderr}");
    assert!(
        stderr.contains("[1/2]") && stderr.contains("[2/2]"),
        "{stderr}"
    );

    let read = |name: &str| -> serde_json::Value {
        let path = results.join(name);
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{}: {e}\n{stderr}", path.display());
        }))
        .unwrap()
    };
    let manifest = read("manifest.json");
    assert_eq!(manifest["plan"], "short");
    assert!(manifest["command"].as_str().unwrap().contains("--short"));
    let runs = manifest["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{manifest}");
    for r in runs {
        assert_eq!(r["status"], "done", "{manifest}");
        assert_eq!(r["figures"], serde_json::json!([5, 7]));
    }

    let cluster = read("cluster-g1-c15.json");
    let baseline = read("baseline-s1-c15.json");
    for run in [&cluster, &baseline] {
        assert_eq!(run["warehouses"], 5, "{run}");
        assert_eq!(run["terminals"], 15, "{run}");
        assert_eq!(run["page_delay_ms"], 200, "{run}");
        assert_eq!(run["page_workers"], 1, "{run}");
        assert_eq!(run["page_mode"], "sleep", "{run}");
        assert_eq!(run["errors"], 0, "{run}");
        assert!(run["transactions"].as_u64().unwrap() > 0, "{run}");
        let bins = run["latency_histogram"]["counts"].as_array().unwrap();
        let binned: u64 = bins.iter().map(|c| c.as_u64().unwrap()).sum();
        assert_eq!(binned, run["transactions"].as_u64().unwrap(), "{run}");
        assert!(run["latency_ms"]["p95"].as_f64().unwrap() > 0.0, "{run}");
        for field in [
            "cores",
            "loadavg_1m_mean",
            "cpu_busy",
            "cpu_ours",
            "cpu_others",
        ] {
            assert!(run["load"][field].is_number(), "load.{field}: {run}");
        }
    }
    assert_eq!(cluster["groups"], 1);
    assert_eq!(cluster["servers"], 0);
    assert_eq!(baseline["servers"], 1);
    assert!(baseline["node_metrics"].as_object().unwrap().is_empty());

    // The stages of Fig. 6, as the nodes measured them: every role reported its own.
    let nodes = cluster["node_metrics"].as_object().unwrap();
    let count = |role: &str, series: &str| -> f64 {
        nodes
            .iter()
            .filter(|(name, _)| name.starts_with(role))
            .filter_map(|(_, s)| s.get(series).and_then(|v| v.as_f64()))
            .sum()
    };
    let stage = |s: &str| format!("cloudbft_stage_seconds_count{{stage=\"{s}\"}}");
    assert!(count("primary-", &stage("order")) > 0.0, "{cluster}");
    for s in ["agree", "database", "page_queue", "page_work", "handle"] {
        assert!(
            count("replica-", &stage(s)) > 0.0,
            "replica stage {s}: {cluster}"
        );
    }
    assert!(count("dbnode-", &stage("vote")) > 0.0, "{cluster}");
    assert!(count("dbnode-", "cloudbft_execution_seconds_count") > 0.0);
    assert!(count("replica-", "cloudbft_replies_total") > 0.0);

    // The report: a section per figure, the paper's numbers next to ours, the command, the
    // machine, and Fig. 5's plot.
    let doc = dir.path().join("doc").join("paper.md");
    let out = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
        .args(["paper", "report", "--results"])
        .arg(&results)
        .arg("--out")
        .arg(&doc)
        .output()
        .expect("running cloudbft paper report");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(&doc).unwrap();
    for heading in [
        "## The paper's numbers next to ours",
        "## The machine, and what it limits",
        "## Page modes",
        "## Fig. 5:",
        "## Fig. 6:",
        "## Fig. 7:",
        "## Fig. 8:",
        "## Fig. 9:",
        "## Figs 10 and 11:",
        "## Every run",
    ] {
        assert!(md.contains(heading), "no {heading:?} in the report:\n{md}");
    }
    assert!(md.contains("cloudbft paper run --short"), "{md}");
    assert!(
        md.contains("| 5 | one group, 15 clients | ≈ 200 tx/min |"),
        "{md}"
    );
    assert!(md.contains("| cluster-g1-c15 |") && md.contains("| baseline-s1-c15 |"));
    // Figures the short plan does not run say so instead of showing nothing.
    assert!(md.contains("Not measured in these results"), "{md}");
    assert!(md.contains("![Fig. 5](paper-fig5.svg)"), "{md}");
    let svg = std::fs::read_to_string(dir.path().join("doc/paper-fig5.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("CloudBFT, sleep"),
        "{svg}"
    );
    assert!(svg.contains("unreplicated, sleep"), "{svg}");
}
