//! usigd over its sockets: one chain per identity, identity isolation, hostile clients, restarts.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use usig::daemon::config::{IdentityConfig, TpmConfig};
use usig::daemon::{Usigd, UsigdClient, UsigdConfig};
use usig::tpm::swtpm::Swtpm;
use usig::{Directory, MessageDigest, OrderedVerifier, Usig, UsigError, UsigId};

const A: UsigId = UsigId(31);
const B: UsigId = UsigId(32);

fn config(dir: &Path, tcti: Option<String>) -> UsigdConfig {
    let identity = |id: UsigId, pcr: u8| IdentityConfig {
        id: id.0,
        socket: dir.join(format!("usig-{}.sock", id.0)),
        pcr: tcti.as_ref().map(|_| pcr),
    };
    UsigdConfig {
        state_dir: dir.join("state"),
        tpm: tcti.clone().map(|tcti| TpmConfig { tcti }),
        identities: vec![identity(A, 9), identity(B, 10)],
    }
}

fn socket(config: &UsigdConfig, id: UsigId) -> PathBuf {
    config
        .identities
        .iter()
        .find(|i| i.id == id.0)
        .expect("identity")
        .socket
        .clone()
}

fn directory(config: &UsigdConfig) -> Directory {
    let mut records = Vec::new();
    for id in [A, B] {
        let mut client = UsigdClient::connect(&socket(config, id), id).expect("connect");
        records.push(client.enrollment().expect("enrollment"));
    }
    Directory::from_records(&records).expect("directory")
}

/// Two identities sharing one TPM (or one usigd) keep separate counters, and each chain verifies.
fn separate_chains(tcti: Option<String>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), tcti);
    let usigd = Usigd::start(&config, false).expect("start usigd");
    let dirs = directory(&config);
    let mut verifier = OrderedVerifier::new(dirs, 16);
    let mut a = UsigdClient::connect(&socket(&config, A), A).expect("connect A");
    let mut b = UsigdClient::connect(&socket(&config, B), B).expect("connect B");
    for round in 1..=3u64 {
        for (client, id) in [(&mut a, A), (&mut b, B)] {
            let msg = format!("{id} round {round}");
            let w = client.create_ui(msg.as_bytes()).expect("warrant");
            assert_eq!((w.identity, w.counter), (id, round));
            let out = verifier
                .offer(id, MessageDigest::of(msg.as_bytes()), &w, ())
                .expect("verify");
            assert_eq!(out.len(), 1);
        }
    }
    assert_eq!(usigd.stats().warrants.load(Ordering::Relaxed), 6);
    usigd.shutdown();
}

#[test]
fn identities_have_separate_counters_soft() {
    separate_chains(None);
}

#[test]
fn identities_sharing_one_tpm_have_separate_chains() {
    let dir = tempfile::tempdir().expect("tempdir");
    let swtpm = Swtpm::start(&dir.path().join("tpm")).expect("swtpm");
    separate_chains(Some(swtpm.tcti()));
}

#[test]
fn a_vm_can_only_use_its_own_identity_and_garbage_is_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), None);
    let usigd = Usigd::start(&config, false).expect("start usigd");
    // B's socket does not serve A.
    match UsigdClient::connect(&socket(&config, B), A) {
        Err(UsigError::Refused(why)) => assert!(why.contains("serves usig#32"), "{why}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    assert_eq!(usigd.stats().refused.load(Ordering::Relaxed), 1);
    // Garbage, a truncated frame and an oversized frame: each closes its connection.
    for junk in [
        vec![0, 0, 0, 3, 0xff, 0xff, 0xff],
        vec![0, 0, 0, 9, 1],
        vec![0x7f, 0xff, 0xff, 0xff],
    ] {
        let mut s = UnixStream::connect(socket(&config, A)).expect("connect");
        s.write_all(&junk).expect("write");
        s.shutdown(std::net::Shutdown::Write).expect("shutdown");
        let mut rest = Vec::new();
        let _ = std::io::Read::read_to_end(&mut s, &mut rest);
    }
    assert_eq!(usigd.stats().malformed.load(Ordering::Relaxed), 3);
    // A request before Hello is refused too.
    let mut s = UnixStream::connect(socket(&config, A)).expect("connect");
    let create =
        wire::encode(&usig::daemon::protocol::Request::Create { digest: [0; 32] }).unwrap();
    wire::write_frame(&mut s, &create, 4096).expect("write");
    let answer = wire::read_frame(&mut s, 4096)
        .expect("read")
        .expect("frame");
    assert!(matches!(
        wire::decode::<usig::daemon::protocol::Response>(&answer),
        Ok(usig::daemon::protocol::Response::Error { .. })
    ));
    // usigd still serves well-behaved clients.
    let mut a = UsigdClient::connect(&socket(&config, A), A).expect("connect");
    assert_eq!(a.create_ui(b"still fine").expect("warrant").counter, 1);
    usigd.shutdown();
}

/// usigd restarts under a connected client: the client reconnects, counters continue, and the
/// verifier sees one unbroken sequence (TPM mode: one unbroken chain).
fn restart_keeps_counters(tcti: Option<String>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), tcti);
    let usigd = Usigd::start(&config, false).expect("start usigd");
    let mut verifier = OrderedVerifier::new(directory(&config), 16);
    let mut a = UsigdClient::connect(&socket(&config, A), A).expect("connect");
    let mut next = 1;
    let mut warrant = |a: &mut UsigdClient, v: &mut OrderedVerifier<()>| {
        let msg = format!("message {next}");
        let w = a.create_ui(msg.as_bytes()).expect("warrant");
        assert_eq!(w.counter, next);
        assert_eq!(
            v.offer(A, MessageDigest::of(msg.as_bytes()), &w, ())
                .expect("verify")
                .len(),
            1
        );
        next += 1;
    };
    warrant(&mut a, &mut verifier);
    warrant(&mut a, &mut verifier);
    usigd.shutdown();
    let usigd = Usigd::start(&config, false).expect("restart usigd");
    warrant(&mut a, &mut verifier);
    let (digest, last) = a.last().expect("last").expect("some");
    assert_eq!((digest, last.counter), (MessageDigest::of(b"message 3"), 3));
    usigd.shutdown();
}

#[test]
fn usigd_restart_keeps_counters_soft() {
    restart_keeps_counters(None);
}

#[test]
fn usigd_restart_keeps_counters_and_chain_tpm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let swtpm = Swtpm::start(&dir.path().join("tpm")).expect("swtpm");
    restart_keeps_counters(Some(swtpm.tcti()));
}

#[test]
fn a_second_usigd_on_the_same_sockets_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), None);
    let usigd = Usigd::start(&config, false).expect("start usigd");
    let second = Usigd::start(&config, false);
    assert!(second.is_err());
    usigd.shutdown();
}

/// A caller that drives the socket itself (a node's event loop): the taken stream warrants, an
/// answer lost before it was accepted is recovered as the same warrant rather than a second
/// counter, a digest never sent gets a new one, and a usigd restart under the taken stream is
/// recovered too. Garbage in place of an answer is an error, not a panic.
#[test]
fn a_taken_stream_warrants_and_recovers_without_spending_a_counter_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), None);
    let usigd = Usigd::start(&config, false).expect("start usigd");
    let mut a = UsigdClient::connect(&socket(&config, A), A).expect("connect");
    let mut stream = a.take_stream().expect("connected");
    let ask = |stream: &mut UnixStream, digest: &MessageDigest| {
        stream
            .write_all(&UsigdClient::create_frame(digest).expect("frame"))
            .expect("send");
        wire::read_frame(stream, usig::daemon::protocol::MAX_FRAME)
            .expect("read")
            .expect("an answer")
    };
    let digest = |n: u8| MessageDigest([n; 32]);
    let answer = ask(&mut stream, &digest(1));
    assert_eq!(a.accept_warrant(&answer).expect("warrant").counter, 1);
    assert!(a.accept_warrant(b"\xff\xff garbage").is_err());

    // usigd made warrant 2 but the caller's transport failed before accepting it.
    let _lost = ask(&mut stream, &digest(2));
    drop(stream);
    let cause = || UsigError::Daemon("connection reset".into());
    let again = a.recover(&digest(2), cause()).expect("recovered");
    assert_eq!(again.counter, 2, "the lost warrant, not a new counter");
    let fresh = a.recover(&digest(3), cause()).expect("new warrant");
    assert_eq!(
        fresh.counter, 3,
        "a digest never sent gets the next counter"
    );

    let stream = a.take_stream().expect("reconnected");
    usigd.shutdown();
    drop(stream);
    let usigd = Usigd::start(&config, false).expect("restart usigd");
    assert_eq!(a.recover(&digest(4), cause()).expect("warrant").counter, 4);
    usigd.shutdown();
}
