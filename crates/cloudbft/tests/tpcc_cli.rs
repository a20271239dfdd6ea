//! `cloudbft tpcc load` and `cloudbft tpcc check` on a real SQLite file: a fresh load passes
//! all twelve consistency conditions; a second load into the same database is refused.

use std::process::Command;

const TINY: [&str; 6] = ["--items", "200", "--districts", "3", "--customers", "30"];

fn cloudbft(args: &[&str]) -> std::process::Output {
    cloudbft_in(std::path::Path::new("."), args)
}

fn cloudbft_in(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cloudbft"))
        .args(args)
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("running cloudbft")
}

/// The README's first TPC-C command as a newcomer types it: a relative `sqlite://` URL of a file
/// that does not exist is created and loaded; checking a database that is not there fails with
/// one line that says what to do, without a backtrace even with RUST_BACKTRACE=1, and creates
/// nothing.
#[test]
fn load_creates_a_missing_sqlite_file_and_a_missing_database_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut load = vec![
        "tpcc",
        "load",
        "--warehouses",
        "1",
        "--db",
        "sqlite://tpcc.db",
    ];
    load.extend(TINY);
    let out = cloudbft_in(dir.path(), &load);
    assert!(out.status.success(), "{out:?}");
    assert!(dir.path().join("tpcc.db").is_file());
    let out = cloudbft_in(dir.path(), &["tpcc", "check", "--db", "sqlite://tpcc.db"]);
    assert!(out.status.success(), "{out:?}");

    let out = cloudbft_in(
        dir.path(),
        &["tpcc", "check", "--db", "sqlite://missing.db"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("error: connecting to sqlite://missing.db"),
        "{stderr}"
    );
    assert!(lines[0].contains("cloudbft tpcc load"), "{stderr}");
    assert!(
        !stderr.contains("backtrace") && !stderr.contains("Caused by"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("missing.db").exists(),
        "a check creates nothing"
    );
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
