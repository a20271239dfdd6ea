//! Cost of creating and verifying one unique warrant, per backend.
//!
//! `cargo bench -p cloudbft-usig`. The TPM benches start their own swtpm (Debian: swtpm).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::time::Duration;
use usig::daemon::config::{IdentityConfig, TpmConfig};
use usig::daemon::{Usigd, UsigdClient, UsigdConfig};
use usig::soft::SoftUsig;
use usig::tpm::swtpm::Swtpm;
use usig::tpm::TpmUsig;
use usig::{Directory, Epoch, MessageDigest, OrderedVerifier, Usig, UsigId};

const ID: UsigId = UsigId(1);

fn soft(c: &mut Criterion) {
    let mut g = c.benchmark_group("soft");
    g.throughput(Throughput::Elements(1));
    let digest = MessageDigest::of(b"batch");
    let mut mem = SoftUsig::in_memory(ID, [1; 32], Epoch(1));
    g.bench_function("create/in-memory", |b| {
        b.iter(|| mem.create_ui_for_digest(&digest).unwrap())
    });
    let dir = tempfile::tempdir().unwrap();
    let mut disk = SoftUsig::open(dir.path(), ID).unwrap();
    g.bench_function("create/on-disk", |b| {
        b.iter(|| disk.create_ui_for_digest(&digest).unwrap())
    });

    let mut directory = Directory::new();
    directory.enroll(
        ID,
        usig::Enrollment::Soft {
            public_key: mem.public_key(),
        },
    );
    let w = mem.create_ui_for_digest(&digest).unwrap();
    g.bench_function("verify", |b| {
        b.iter(|| directory.verify_digest(ID, &digest, &w).unwrap())
    });
    g.bench_function("ordered-offer", |b| {
        b.iter_batched(
            || {
                let mut u = SoftUsig::in_memory(ID, [1; 32], Epoch(1));
                (
                    OrderedVerifier::<()>::new(directory.clone(), 16),
                    u.create_ui_for_digest(&digest).unwrap(),
                )
            },
            |(mut v, w)| v.offer(ID, digest, &w, ()).unwrap(),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn tpm(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let swtpm = Swtpm::start(&dir.path().join("tpm")).expect("swtpm (apt-get install swtpm)");
    let mut g = c.benchmark_group("tpm");
    g.throughput(Throughput::Elements(1));
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    let digest = MessageDigest::of(b"batch");
    {
        let mut direct = TpmUsig::open(&swtpm.tcti(), &dir.path().join("direct"), ID, 8).unwrap();
        let mut directory = Directory::new();
        directory.enroll(ID, direct.enrollment().clone());
        let w = direct.create_ui_for_digest(&digest).unwrap();
        g.bench_function("verify", |b| {
            b.iter(|| directory.verify_digest(ID, &digest, &w).unwrap())
        });
        g.bench_function("create/direct", |b| {
            b.iter(|| direct.create_ui_for_digest(&digest).unwrap())
        });
    }
    let config = UsigdConfig {
        state_dir: dir.path().join("usigd"),
        tpm: Some(TpmConfig { tcti: swtpm.tcti() }),
        identities: vec![IdentityConfig {
            id: 2,
            socket: dir.path().join("2.sock"),
            pcr: Some(9),
        }],
    };
    let usigd = Usigd::start(&config, false).unwrap();
    let mut client = UsigdClient::connect(&dir.path().join("2.sock"), UsigId(2)).unwrap();
    g.bench_function("create/usigd", |b| {
        b.iter(|| client.create_ui_for_digest(&digest).unwrap())
    });
    g.finish();
    usigd.shutdown();
}

fn soft_usigd(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let config = UsigdConfig {
        state_dir: dir.path().join("usigd"),
        tpm: None,
        identities: vec![IdentityConfig {
            id: 3,
            socket: dir.path().join("3.sock"),
            pcr: None,
        }],
    };
    let usigd = Usigd::start(&config, false).unwrap();
    let mut client = UsigdClient::connect(&dir.path().join("3.sock"), UsigId(3)).unwrap();
    let digest = MessageDigest::of(b"batch");
    let mut g = c.benchmark_group("soft");
    g.throughput(Throughput::Elements(1));
    g.bench_function("create/usigd", |b| {
        b.iter(|| client.create_ui_for_digest(&digest).unwrap())
    });
    g.finish();
    usigd.shutdown();
}

criterion_group!(benches, soft, soft_usigd, tpm);
criterion_main!(benches);
