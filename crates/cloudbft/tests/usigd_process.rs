//! usigd as a real process: killed with SIGKILL at arbitrary points under load and restarted, it
//! never reuses a counter, never leaves a gap, and never breaks its chain.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use usig::daemon::UsigdClient;
use usig::tpm::swtpm::Swtpm;
use usig::{Directory, MessageDigest, OrderedVerifier, Usig, UsigId};

const A: UsigId = UsigId(41);
const B: UsigId = UsigId(42);

fn cloudbft() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cloudbft"));
    cmd.env("TSS2_LOG", "all+none").env("RUST_LOG", "warn");
    cmd
}

fn write_config(dir: &Path, tcti: Option<&str>) -> PathBuf {
    let mut text = format!("state_dir = {:?}\n", dir.join("state"));
    if let Some(tcti) = tcti {
        text += &format!("[tpm]\ntcti = {tcti:?}\n");
    }
    for (id, pcr) in [(A, 11), (B, 12)] {
        text += &format!(
            "[[identity]]\nid = {}\nsocket = {:?}\n",
            id.0,
            socket(dir, id)
        );
        if tcti.is_some() {
            text += &format!("pcr = {pcr}\n");
        }
    }
    let path = dir.join("usigd.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

fn socket(dir: &Path, id: UsigId) -> PathBuf {
    dir.join(format!("usig-{}.sock", id.0))
}

/// Starts usigd and waits until it answers on A's socket.
fn start_usigd(config: &Path, dir: &Path) -> Child {
    let child = cloudbft()
        .args(["usigd", "run", "--config"])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn cloudbft usigd");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut backoff = Duration::from_millis(5);
    while UsigdClient::connect(&socket(dir, A), A).is_err() {
        assert!(Instant::now() < deadline, "usigd did not come up");
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(Duration::from_millis(100));
    }
    child
}

fn kill9(child: &mut Child) {
    // SIGKILL: no destructor, no clean shutdown, like a crash.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().expect("reap usigd");
}

fn crash_and_restart(tcti: Option<&str>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), tcti);
    let mut usigd = start_usigd(&config, dir.path());
    let mut records = Vec::new();
    for id in [A, B] {
        records.push(
            UsigdClient::connect(&socket(dir.path(), id), id)
                .unwrap()
                .enrollment()
                .unwrap(),
        );
    }
    let mut verifier = OrderedVerifier::new(Directory::from_records(&records).unwrap(), 64);

    // A second process keeps B busy on the same TPM while A is being crashed.
    let b_load = cloudbft()
        .args(["usig", "warrant", "--identity", "42", "--socket"])
        .arg(socket(dir.path(), B))
        .args((0..20).map(|i| format!("b{i}")))
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn load on B");

    // A killer thread crashes usigd whenever A has made a few more warrants, so crashes land at
    // arbitrary points of A's requests (before, during or after the TPM commands).
    let progress = Arc::new(AtomicU64::new(0));
    let killer = {
        let progress = Arc::clone(&progress);
        let (config, dir) = (config.clone(), dir.path().to_path_buf());
        std::thread::spawn(move || {
            for crash_after in [3u64, 7, 8, 15] {
                while progress.load(Ordering::SeqCst) < crash_after {
                    std::thread::yield_now();
                }
                kill9(&mut usigd);
                usigd = start_usigd(&config, &dir);
            }
            usigd
        })
    };
    let mut a = UsigdClient::connect(&socket(dir.path(), A), A).expect("connect");
    for i in 1..=20u64 {
        let msg = format!("a{i}");
        let w = a
            .create_ui(msg.as_bytes())
            .expect("warrant across restarts");
        let out = verifier
            .offer(A, MessageDigest::of(msg.as_bytes()), &w, msg.clone())
            .expect("every warrant continues the sequence");
        assert_eq!(out.len(), 1, "no gap, no reuse");
        assert_eq!(w.counter, i);
        progress.store(i, Ordering::SeqCst);
    }
    let mut usigd = killer.join().expect("killer");
    let output = b_load.wait_with_output().expect("B load");
    // B's client may have been cut off by a crash; whatever it printed must be in order.
    let counters: Vec<u64> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| {
            l.split(' ')
                .nth(1)
                .expect("counter")
                .parse()
                .expect("number")
        })
        .collect();
    assert!(
        counters.windows(2).all(|w| w[1] == w[0] + 1),
        "{counters:?}"
    );
    kill9(&mut usigd);
}

#[test]
fn sigkilled_usigd_never_reuses_or_skips_a_counter_tpm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let swtpm = Swtpm::start(&dir.path().join("tpm")).expect("swtpm");
    crash_and_restart(Some(&swtpm.tcti()));
}

#[test]
fn sigkilled_usigd_never_reuses_or_skips_a_counter_soft() {
    crash_and_restart(None);
}

#[test]
fn cli_warrants_verify_against_the_enrollment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), None);
    let mut usigd = start_usigd(&config, dir.path());
    let out = cloudbft()
        .args(["usig", "enrollment", "--identity", "41", "--socket"])
        .arg(socket(dir.path(), A))
        .output()
        .expect("enrollment");
    assert!(out.status.success());
    let enrollments = dir.path().join("enrollments.toml");
    std::fs::write(&enrollments, &out.stdout).unwrap();
    let out = cloudbft()
        .args(["usig", "warrant", "--identity", "41", "--socket"])
        .arg(socket(dir.path(), A))
        .arg("hello")
        .output()
        .expect("warrant");
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    let hex = line
        .split_whitespace()
        .nth(2)
        .expect("hex warrant")
        .to_string();
    let verify = |message: &str| {
        cloudbft()
            .args(["usig", "verify", "--identity", "41", "--enrollments"])
            .arg(&enrollments)
            .args(["--message", message, "--warrant", &hex])
            .output()
            .expect("verify")
    };
    assert!(verify("hello").status.success());
    let forged = verify("hullo");
    assert!(!forged.status.success());
    assert!(String::from_utf8_lossy(&forged.stderr).contains("signature"));
    kill9(&mut usigd);
}

#[test]
fn configuration_errors_name_the_field_and_the_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("bad.toml");
    std::fs::write(
        &config,
        "state_dir = \"/tmp/x\"\n[tpm]\ntcti = \"device:/dev/null\"\n[[identity]]\nid = 1\nsocket = \"/tmp/x/1.sock\"\npcr = 16\n",
    )
    .unwrap();
    let out = cloudbft()
        .args(["usigd", "run", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("identity[0].pcr: must be in 0-15"),
        "{stderr}"
    );
}

/// `cloudbft usigd enroll --epochs` (what the autoscaler's Terraform provider has a new
/// machine print) gives the records and epochs the usigd then started serves.
#[test]
fn enroll_prints_the_records_and_epochs_usigd_then_serves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), None);
    let out = cloudbft()
        .args(["usigd", "enroll", "--epochs", "--config"])
        .arg(&config)
        .output()
        .expect("enroll");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: toml::Value = toml::from_str(&String::from_utf8_lossy(&out.stdout)).unwrap();
    let mut usigd = start_usigd(&config, dir.path());
    for (i, id) in [A, B].into_iter().enumerate() {
        let ask = |what: &str| {
            let out = cloudbft()
                .args(["usig", what, "--identity", &id.0.to_string(), "--socket"])
                .arg(socket(dir.path(), id))
                .output()
                .expect("usig");
            assert!(out.status.success());
            toml::from_str::<toml::Value>(&String::from_utf8_lossy(&out.stdout)).unwrap()
        };
        assert_eq!(
            printed["usig_enrollment"][i],
            ask("enrollment")["usig_enrollment"][0]
        );
        assert_eq!(
            printed["usig_epoch"][i]["id"].as_integer(),
            Some(id.0 as i64)
        );
        assert_eq!(
            printed["usig_epoch"][i]["epoch"],
            ask("epoch")["usig_epoch"]
        );
    }
    kill9(&mut usigd);
}
