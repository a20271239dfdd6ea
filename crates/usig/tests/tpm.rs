//! The TPM backend against a real TPM 2.0 (swtpm, started by each test on its own ports).

use std::path::Path;
use usig::tpm::device::{AkBlob, TpmDevice};
use usig::tpm::swtpm::Swtpm;
use usig::tpm::TpmUsig;
use usig::warrant::{extend, tpm_entry};
use usig::{
    Certificate, Directory, Epoch, MessageDigest, OrderedVerifier, TpmCertificate, UniqueWarrant,
    Usig, UsigId, VerifyError,
};

const A: UsigId = UsigId(21);
const PCR: u8 = 8;

struct Machine {
    swtpm: Swtpm,
    dir: tempfile::TempDir,
}

impl Machine {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let swtpm = Swtpm::start(&dir.path().join("tpm")).expect("swtpm (apt-get install swtpm)");
        Machine { swtpm, dir }
    }

    fn state(&self) -> std::path::PathBuf {
        self.dir.path().join("usig")
    }

    fn usig(&self) -> TpmUsig {
        TpmUsig::open(&self.swtpm.tcti(), &self.state(), A, PCR).expect("open TPM USIG")
    }
}

fn directory(usig: &TpmUsig) -> Directory {
    let mut dir = Directory::new();
    dir.enroll(A, usig.enrollment().clone());
    dir
}

fn offer(
    v: &mut OrderedVerifier<Vec<u8>>,
    m: &[u8],
    w: &UniqueWarrant,
) -> Result<Vec<u64>, VerifyError> {
    v.offer(A, MessageDigest::of(m), w, m.to_vec())
        .map(|d| d.into_iter().map(|d| d.counter).collect())
}

fn tpm_cert(w: &UniqueWarrant) -> &TpmCertificate {
    match &w.certificate {
        Certificate::Tpm(t) => t,
        Certificate::Soft { .. } => panic!("expected a TPM certificate"),
    }
}

#[test]
fn warrants_verify_in_software_and_chain_in_order() {
    let m = Machine::start();
    let mut usig = m.usig();
    let dir = directory(&usig);
    let mut v = OrderedVerifier::new(dir.clone(), 16);
    let ws: Vec<_> = (0..4u8)
        .map(|i| usig.create_ui(&[i]).expect("warrant"))
        .collect();
    for (i, w) in ws.iter().enumerate() {
        assert_eq!(w.counter, i as u64 + 1);
        assert_eq!(
            dir.verify_ui(A, &[i as u8], w).map(|l| l.is_some()),
            Ok(true)
        );
        let bytes = w.to_bytes();
        assert_eq!(&UniqueWarrant::from_bytes(&bytes).expect("decode"), w);
    }
    assert_eq!(tpm_cert(&ws[0]).prev, [0; 32]);
    // Delivered in order whatever the arrival order.
    assert_eq!(offer(&mut v, &[2], &ws[2]), Ok(vec![]));
    assert_eq!(offer(&mut v, &[0], &ws[0]), Ok(vec![1]));
    assert_eq!(offer(&mut v, &[1], &ws[1]), Ok(vec![2, 3]));
    assert_eq!(offer(&mut v, &[3], &ws[3]), Ok(vec![4]));
}

#[test]
fn forged_and_replayed_certificates_are_rejected() {
    let m = Machine::start();
    let mut usig = m.usig();
    let dir = directory(&usig);
    let w1 = usig.create_ui(b"one").expect("warrant");
    let w2 = usig.create_ui(b"two").expect("warrant");
    let mut v = OrderedVerifier::new(dir.clone(), 16);
    assert_eq!(offer(&mut v, b"one", &w1), Ok(vec![1]));
    assert_eq!(
        offer(&mut v, b"one", &w1),
        Err(VerifyError::Replay {
            counter: 1,
            expected: 2
        })
    );

    // A genuine certificate moved to another message, counter or identity.
    assert!(matches!(
        dir.verify_ui(A, b"other", &w2),
        Err(VerifyError::QuoteMismatch(_))
    ));
    let mut moved = w2.clone();
    moved.counter = 3;
    assert!(matches!(
        dir.verify_ui(A, b"two", &moved),
        Err(VerifyError::QuoteMismatch(_))
    ));
    let mut spliced = w2.clone();
    spliced.certificate = w1.certificate.clone();
    assert!(dir.verify_ui(A, b"two", &spliced).is_err());
    let mut other_id = w2.clone();
    other_id.identity = UsigId(22);
    assert!(matches!(
        dir.verify_ui(A, b"two", &other_id),
        Err(VerifyError::WrongSender { .. })
    ));
    // Any flipped bit in the attest or the signature.
    let cert = tpm_cert(&w2).clone();
    for i in 0..cert.attest.len() {
        let mut bad = cert.clone();
        bad.attest[i] ^= 0x01;
        let mut w = w2.clone();
        w.certificate = Certificate::Tpm(bad);
        assert!(dir.verify_ui(A, b"two", &w).is_err(), "attest byte {i}");
    }
    let mut bad = cert;
    bad.signature[40] ^= 0x80;
    let mut w = w2.clone();
    w.certificate = Certificate::Tpm(bad);
    assert_eq!(dir.verify_ui(A, b"two", &w), Err(VerifyError::BadSignature));
    assert_eq!(offer(&mut v, b"two", &w2), Ok(vec![2]));
}

#[test]
fn restart_of_the_usig_keeps_counters_and_the_chain() {
    let m = Machine::start();
    let mut usig = m.usig();
    let dir = directory(&usig);
    let mut v = OrderedVerifier::new(dir, 16);
    let w1 = usig.create_ui(b"a").expect("warrant");
    drop(usig);
    let mut usig = m.usig();
    let w2 = usig.create_ui(b"b").expect("warrant");
    assert_eq!((w2.epoch, w2.counter), (w1.epoch, 2));
    assert_eq!(offer(&mut v, b"a", &w1), Ok(vec![1]));
    assert_eq!(offer(&mut v, b"b", &w2), Ok(vec![2]));
    let (digest, last) = usig.last().expect("last").expect("some");
    assert_eq!((digest, last.counter), (MessageDigest::of(b"b"), 2));
}

#[test]
fn tpm_restart_is_a_new_epoch_that_verifiers_notice() {
    let mut m = Machine::start();
    let mut usig = m.usig();
    let mut v = OrderedVerifier::new(directory(&usig), 16);
    let w1 = usig.create_ui(b"before").expect("warrant");
    assert_eq!(offer(&mut v, b"before", &w1), Ok(vec![1]));
    m.swtpm.restart().expect("restart swtpm");
    // The same USIG object notices the reset and starts a fresh chain in the new epoch.
    let w2 = usig.create_ui(b"after").expect("warrant after TPM restart");
    assert!(w2.epoch > w1.epoch, "{} > {}", w2.epoch, w1.epoch);
    assert_eq!(w2.counter, 1);
    assert_eq!(
        offer(&mut v, b"after", &w2),
        Err(VerifyError::NewEpoch {
            current: w1.epoch,
            offered: w2.epoch
        })
    );
    v.begin_epoch(A, w2.epoch)
        .expect("protocol accepts the new epoch");
    assert_eq!(offer(&mut v, b"after", &w2), Ok(vec![1]));
    assert!(matches!(
        offer(&mut v, b"before", &w1),
        Err(VerifyError::StaleEpoch { .. })
    ));
}

/// The host is compromised: it stops usigd, takes the TPM and the AK blob, and tries to make a
/// second valid warrant for a counter that already has one. No verifier delivers it.
#[test]
fn host_driving_the_tpm_directly_cannot_equivocate() {
    let mut m = Machine::start();
    let mut usig = m.usig();
    let dir = directory(&usig);
    let honest: Vec<(Vec<u8>, UniqueWarrant)> = (1..=3u8)
        .map(|i| (vec![i], usig.create_ui(&[i]).expect("warrant")))
        .collect();
    drop(usig);
    let epoch = honest[0].1.epoch;
    let v2 = tpm_cert(&honest[2].1).prev;
    let evil = MessageDigest::of(b"evil");
    let entry = tpm_entry(A, 3, &evil);

    let mut dev = TpmDevice::connect(&m.swtpm.tcti()).expect("connect");
    let blob = std::fs::read(m.state().join("ak.blob")).expect("AK blob is readable by the host");
    dev.load_ak(&AkBlob::from_bytes(&blob).expect("blob"))
        .expect("load AK");
    let v3 = dev.pcr_read(PCR).expect("read");
    let forge = |dev: &mut TpmDevice, prev: [u8; 32]| {
        let q = dev.quote(PCR, &entry).expect("quote");
        UniqueWarrant {
            identity: A,
            epoch,
            counter: 3,
            certificate: Certificate::Tpm(TpmCertificate {
                prev,
                attest: q.attest,
                signature: q.signature,
            }),
        }
    };
    // 1. Quote the current PCR as if it held the evil entry at counter 3.
    let relabelled = forge(&mut dev, v2);
    assert!(matches!(
        dir.verify_digest(A, &evil, &relabelled),
        Err(VerifyError::QuoteMismatch(_))
    ));
    // 2. Extend the evil entry now: a genuine quote, but of position 4 of the chain.
    dev.pcr_extend(PCR, &entry).expect("extend");
    let late = forge(&mut dev, v3);
    assert_eq!(dev.pcr_read(PCR).expect("read"), extend(&v3, &entry));
    assert!(
        dir.verify_digest(A, &evil, &late).is_ok(),
        "valid on its own"
    );

    // However the evil and honest warrants reach verifiers, none delivers the evil message.
    let orders: [&[usize]; 4] = [&[0, 1, 2, 3], &[0, 1, 3, 2], &[3, 0, 1, 2], &[0, 3, 1, 2]];
    for order in orders {
        let mut v = OrderedVerifier::new(dir.clone(), 16);
        let mut delivered = Vec::new();
        for &i in order {
            let (msg, w) = if i == 3 {
                (b"evil".to_vec(), late.clone())
            } else {
                honest[i].clone()
            };
            if let Ok(out) = v.offer(A, MessageDigest::of(&msg), &w, msg.clone()) {
                delivered.extend(out.into_iter().map(|d| d.payload));
            }
        }
        assert!(!delivered.contains(&b"evil".to_vec()), "order {order:?}");
        assert!(delivered.len() <= 3);
    }

    // 3. Reboot the machine and rebuild counters 1..=3 with other messages: a new epoch.
    drop(dev);
    m.swtpm.restart().expect("restart");
    let mut dev = TpmDevice::connect(&m.swtpm.tcti()).expect("connect");
    dev.load_ak(&AkBlob::from_bytes(&blob).expect("blob"))
        .expect("load AK");
    let (reset, restart) = dev.epoch().expect("epoch");
    let new_epoch = Epoch::from_tpm(reset, restart);
    assert!(new_epoch > epoch);
    let mut prev = [0; 32];
    let mut v = OrderedVerifier::new(dir.clone(), 16);
    for (msg, w) in &honest {
        v.offer(A, MessageDigest::of(msg), w, msg.clone())
            .expect("honest chain");
    }
    for counter in 1..=3 {
        let e = tpm_entry(A, counter, &evil);
        dev.pcr_extend(PCR, &e).expect("extend");
        let q = dev.quote(PCR, &e).expect("quote");
        let w = UniqueWarrant {
            identity: A,
            epoch,
            counter,
            certificate: Certificate::Tpm(TpmCertificate {
                prev,
                attest: q.attest.clone(),
                signature: q.signature,
            }),
        };
        // Claiming the old epoch fails: the TPM attests the new one.
        assert!(matches!(
            dir.verify_digest(A, &evil, &w),
            Err(VerifyError::QuoteMismatch(_))
        ));
        let w = UniqueWarrant {
            epoch: new_epoch,
            ..w
        };
        assert!(dir.verify_digest(A, &evil, &w).is_ok());
        assert!(matches!(
            v.offer(A, evil, &w, b"evil".to_vec()),
            Err(VerifyError::NewEpoch { .. })
        ));
        prev = extend(&prev, &e);
    }
}

#[test]
fn another_program_extending_the_pcr_stops_warrants_with_a_clear_error() {
    let m = Machine::start();
    let mut usig = m.usig();
    usig.create_ui(b"a").expect("warrant");
    drop(usig);
    let mut dev = TpmDevice::connect(&m.swtpm.tcti()).expect("connect");
    dev.pcr_extend(PCR, &[7; 32]).expect("extend");
    drop(dev);
    let err = TpmUsig::open(&m.swtpm.tcti(), &m.state(), A, PCR)
        .err()
        .expect("a tampered chain is refused");
    assert!(err.to_string().contains("PCR 8"), "{err}");
    assert!(TpmUsig::open(&m.swtpm.tcti(), &m.state(), A, 16).is_err());
    assert!(Path::new(&m.state().join("ak.blob")).exists());
}
