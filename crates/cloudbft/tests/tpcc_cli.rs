//! `cloudbft tpcc load` and `cloudbft tpcc check` on a real SQLite file: a fresh load passes
//! all twelve consistency conditions; a second load into the same database is refused.

use std::process::Command;

const TINY: [&str; 6] = ["--items", "200", "--districts", "3", "--customers", "30"];

fn cloudbft(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cloudbft"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("running cloudbft")
}

#[test]
fn load_then_check_passes_every_condition() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite:{}?mode=rwc",
        dir.path().join("tpcc.sqlite").display()
    );
    let mut load = vec!["tpcc", "load", "--db", &url, "--warehouses", "2"];
    load.extend(TINY);
    let out = cloudbft(&load);
    assert!(out.status.success(), "{out:?}");

    // The scale is read back from the database.
    let out = cloudbft(&["tpcc", "check", "--db", &url]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("PASS")).count(), 12);

    let out = cloudbft(&load);
    assert!(!out.status.success(), "a second load must be refused");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warehouse") || stderr.contains("item"),
        "{stderr}"
    );
}

#[test]
fn digest_is_equal_for_equal_loads_and_differs_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let digest_of = |name: &str, seed: &str| {
        let url = format!("sqlite:{}?mode=rwc", dir.path().join(name).display());
        let mut load = vec!["tpcc", "load", "--db", &url, "--seed", seed];
        load.extend(TINY);
        assert!(cloudbft(&load).status.success());
        let out = cloudbft(&["tpcc", "digest", "--db", &url]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let a = digest_of("a.sqlite", "5");
    assert_eq!(a.len(), 64, "{a}");
    assert_eq!(a, digest_of("b.sqlite", "5"));
    assert_ne!(a, digest_of("c.sqlite", "6"));
}
