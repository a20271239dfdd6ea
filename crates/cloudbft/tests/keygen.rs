//! `cloudbft keygen` writes a configuration that validates, keys that stay private, and USIG
//! enrollments that match what each machine's usigd then warrants with.

use proto::config::Cluster;
use proto::NodeId;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use usig::daemon::UsigdClient;
use usig::{MessageDigest, OrderedVerifier, Usig};

fn cloudbft() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cloudbft"));
    cmd.env("TSS2_LOG", "all+none").env("RUST_LOG", "warn");
    cmd
}

#[test]
fn tpm_keygen_enrollments_match_each_machines_usigd() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cluster");
    let status = cloudbft()
        .args(["keygen", "--usig", "tpm", "--groups", "2", "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let cluster = Cluster::load(&out.join("cluster.toml")).expect("keygen output validates");
    assert_eq!(cluster.config.replicas.len(), 6);
    let mode = std::fs::metadata(out.join("keys/node-0.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // Machine m1's usigd (on the swtpm keygen enrolled with) warrants for replica 101.
    let mut usigd = cloudbft()
        .args(["usigd", "run", "--swtpm", "--config"])
        .arg(out.join("usigd/m1.toml"))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let replica = NodeId(101);
    let usig_id = cluster.usig_of(replica).unwrap();
    let socket = out.join("usigd/m1/node-101.sock");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut client = loop {
        match UsigdClient::connect(&socket, usig_id) {
            Ok(c) => break c,
            Err(e) if Instant::now() > deadline => panic!("usigd did not come up: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let mut verifier = OrderedVerifier::new(cluster.directory.clone(), 8);
    for m in [&b"first"[..], b"second"] {
        let w = client.create_ui(m).unwrap();
        let out = verifier
            .offer(usig_id, MessageDigest::of(m), &w, ())
            .unwrap();
        assert_eq!(out.len(), 1);
    }
    // SIGTERM: usigd shuts down cleanly and stops the swtpm it started.
    unsafe { libc::kill(usigd.id() as i32, libc::SIGTERM) };
    assert!(usigd.wait().unwrap().success());

    // keygen never overwrites keys.
    let again = cloudbft()
        .args(["keygen", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("never overwrites keys"));
}

#[test]
fn keygen_refuses_fewer_partitions_than_groups() {
    let dir = tempfile::tempdir().unwrap();
    let out = cloudbft()
        .args(["keygen", "--groups", "3", "--partitions", "2", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("--partitions (2) must be at least --groups (3)"));
}

#[test]
fn keygen_refuses_more_clients_than_a_checkpoint_may_carry() {
    let dir = tempfile::tempdir().unwrap();
    let too_many = (proto::limits::MAX_CLIENTS + 1).to_string();
    let out = cloudbft()
        .args(["keygen", "--clients", &too_many, "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--clients (16385) must be at most 16384"),
        "{stderr}"
    );
}
