//! Which TPM an identity lives in, with real software TPMs (swtpm): usigd exports the TPM's
//! evidence (endorsement key, EK certificate, AK public area), two usigd on two TPMs give two
//! TPM identities, one TPM gives one, a credential-activation challenge is answered only by the
//! TPM that holds both the EK and the AK (a forged binding is refused), and an EK certificate
//! from swtpm's local CA chains to that CA's root.

use std::path::Path;
use usig::credential;
use usig::daemon::config::{IdentityConfig, TpmConfig};
use usig::daemon::{Usigd, UsigdClient, UsigdConfig};
use usig::ekcert::{self, EkCertError};
use usig::tpm::device::TpmDevice;
use usig::tpm::swtpm::{LocalCa, Swtpm};
use usig::tpm::TpmBackend;
use usig::{EnrollmentRecord, TpmEvidence, UsigId};

/// usigd on a fresh swtpm serving `ids` (PCRs 8, 9, ...), and the records it enrolls, as a VM
/// asks for them over its socket.
fn usigd_records(dir: &Path, swtpm: &Swtpm, ids: &[u64]) -> Vec<EnrollmentRecord> {
    let config = UsigdConfig {
        state_dir: dir.join("state"),
        tpm: Some(TpmConfig { tcti: swtpm.tcti() }),
        identities: ids
            .iter()
            .enumerate()
            .map(|(i, &id)| IdentityConfig {
                id,
                socket: dir.join(format!("usig-{id}.sock")),
                pcr: Some(8 + i as u8),
            })
            .collect(),
    };
    let usigd = Usigd::start(&config, false).expect("start usigd");
    let records = config
        .identities
        .iter()
        .map(|i| {
            UsigdClient::connect(&i.socket, UsigId(i.id))
                .expect("connect")
                .enrollment()
                .expect("enrollment")
        })
        .collect();
    usigd.shutdown();
    records
}

fn evidence(record: &EnrollmentRecord) -> TpmEvidence {
    record
        .evidence()
        .expect("well-formed")
        .expect("a TPM record carries evidence")
}

#[test]
fn two_usigd_on_two_tpms_give_two_identities_and_one_tpm_gives_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (m1, m2) = (dir.path().join("m1"), dir.path().join("m2"));
    let tpm1 = Swtpm::start(&m1.join("tpm")).expect("swtpm 1");
    let tpm2 = Swtpm::start(&m2.join("tpm")).expect("swtpm 2");
    let on1 = usigd_records(&m1, &tpm1, &[101, 201]);
    let on2 = usigd_records(&m2, &tpm2, &[102]);
    for r in on1.iter().chain(&on2) {
        r.parse().expect("evidence consistent with the record");
        assert!(
            r.ek_certificate.is_none(),
            "a bare swtpm has no EK certificate"
        );
    }
    assert_ne!(on1[0].tpm_identity, on2[0].tpm_identity);
    assert_ne!(evidence(&on1[0]).ek_public, evidence(&on2[0]).ek_public);
    // Two identities of one usigd: one TPM, one EK, one AK.
    assert_eq!(on1[0].tpm_identity, on1[1].tpm_identity);
    assert_eq!(on1[0].ak_public_key, on1[1].ak_public_key);
    assert_eq!(evidence(&on1[0]), evidence(&on1[1]));
}

#[test]
fn only_the_tpm_with_both_keys_answers_and_a_forged_binding_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a_swtpm, b_swtpm) = (
        Swtpm::start(&dir.path().join("a")).expect("swtpm a"),
        Swtpm::start(&dir.path().join("b")).expect("swtpm b"),
    );
    let mut a = TpmBackend::open(&a_swtpm.tcti(), &dir.path().join("a-state")).expect("open a");
    let mut b = TpmBackend::open(&b_swtpm.tcti(), &dir.path().join("b-state")).expect("open b");
    let (ev_a, ev_b) = (a.evidence().expect("a"), b.evidence().expect("b"));
    drop((a, b));
    // The verifier's side needs no TPM: it only encrypts to the EK for the AK's name.
    let answer = |swtpm: &Swtpm, state: &str, ek: &[u8; 65], ak_area: &[u8]| {
        let (challenge, expected) = credential::challenge(ek, ak_area).expect("challenge");
        let mut device = TpmDevice::connect(&swtpm.tcti()).expect("connect");
        let blob = std::fs::read(dir.path().join(state).join("ak.blob")).expect("ak blob");
        device
            .load_ak(&usig::tpm::device::AkBlob::from_bytes(&blob).expect("blob"))
            .expect("load ak");
        device
            .activate_credential(&challenge)
            .map_err(|e| e.to_string())
            .and_then(|secret| expected.check(&secret).map_err(|e| e.to_string()))
    };
    answer(&a_swtpm, "a-state", &ev_a.ek_public, &ev_a.ak_public_area).expect("genuine pair");
    // A's AK claimed to live under B's EK: A cannot decrypt for B's EK, and B has no object
    // with A's AK name.
    let forged = (&ev_b.ek_public, &ev_a.ak_public_area);
    let on_a = answer(&a_swtpm, "a-state", forged.0, forged.1);
    let on_b = answer(&b_swtpm, "b-state", forged.0, forged.1);
    assert!(on_a.is_err(), "TPM A answered a challenge for B's EK");
    assert!(on_b.is_err(), "TPM B answered a challenge for A's AK");
    assert!(
        on_b.as_ref().unwrap_err().contains("ActivateCredential"),
        "{on_b:?}"
    );

    // In a record: an identity claimed for another EK, or an AK area of another key.
    let record = |ek: &[u8; 65], area: &[u8], identity: [u8; 32], key: &[u8]| EnrollmentRecord {
        id: 7,
        kind: "tpm".into(),
        public_key: None,
        ak_public_key: Some(hex::encode(key)),
        epoch_offset: Some([0, 0]),
        pcr: Some(8),
        tpm_identity: Some(hex::encode(identity)),
        ek_public: Some(hex::encode(ek)),
        ek_certificate: None,
        ak_public_area: Some(hex::encode(area)),
    };
    let ak_a = usig::tpm::device::ak_key_of_public_area(&ev_a.ak_public_area).expect("ak a");
    let id_a = usig::tpm::device::tpm_identity_of(&ev_a.ek_public);
    let id_b = usig::tpm::device::tpm_identity_of(&ev_b.ek_public);
    record(&ev_a.ek_public, &ev_a.ak_public_area, id_a, &ak_a)
        .parse()
        .expect("genuine record");
    let err = record(&ev_b.ek_public, &ev_a.ak_public_area, id_a, &ak_a)
        .parse()
        .expect_err("identity of A with the EK of B");
    assert_eq!(err.field, "tpm_identity");
    let err = record(&ev_a.ek_public, &ev_b.ak_public_area, id_a, &ak_a)
        .parse()
        .expect_err("AK area of B for the AK of A");
    assert_eq!(err.field, "ak_public_area");
    // The consistent forgery (B's EK and identity, A's AK) parses: only the activation above
    // tells it apart, which is why a verifier runs one (docs/usig.md).
    record(&ev_b.ek_public, &ev_a.ak_public_area, id_b, &ak_a)
        .parse()
        .expect("consistent on paper");
}

#[test]
fn an_ek_certificate_from_swtpms_local_ca_chains_to_its_root() {
    let dir = tempfile::tempdir().expect("tempdir");
    let swtpm = Swtpm::start(&dir.path().join("tpm")).expect("swtpm");
    let ca = LocalCa::new(&dir.path().join("ca")).expect("ca");
    let other_ca = LocalCa::new(&dir.path().join("other-ca")).expect("other ca");
    let mut device = TpmDevice::connect(&swtpm.tcti()).expect("connect");
    assert_eq!(device.ek_certificate().expect("read"), None);
    let ek = device.ek_public().expect("ek");
    let cert = ca.issue_ek_certificate(&ek).expect("issue");
    device.store_ek_certificate(&cert).expect("store");
    drop(device);

    let mut backend = TpmBackend::open(&swtpm.tcti(), &dir.path().join("state")).expect("open");
    let evidence = backend.evidence().expect("evidence");
    assert_eq!(evidence.ek_public, ek);
    assert_eq!(evidence.ek_certificate.as_deref(), Some(&cert[..]));

    let roots = ekcert::pem_certificates(&ca.certificates_pem().expect("pem")).expect("parse");
    assert_eq!(roots.len(), 2, "root and issuing CA");
    ekcert::verify_ek_certificate(&cert, &ek, &roots).expect("chains to the local CA's root");
    // Without the issuing CA, or under another CA, or for another EK: refused.
    assert_eq!(
        ekcert::verify_ek_certificate(&cert, &ek, &roots[..1]),
        Err(EkCertError::Untrusted)
    );
    other_ca
        .issue_ek_certificate(&ek)
        .expect("other CA's certificate");
    let others = ekcert::pem_certificates(&other_ca.certificates_pem().expect("pem")).expect("pem");
    assert_eq!(
        ekcert::verify_ek_certificate(&cert, &ek, &others),
        Err(EkCertError::Untrusted)
    );
    let mut other_ek = ek;
    other_ek[10] ^= 1;
    assert_eq!(
        ekcert::verify_ek_certificate(&cert, &other_ek, &roots),
        Err(EkCertError::OtherKey)
    );
    let mut tampered = cert.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    assert_eq!(
        ekcert::verify_ek_certificate(&tampered, &ek, &roots),
        Err(EkCertError::Untrusted)
    );
    // The record usigd would write carries the certificate and parses.
    let id = UsigId(5);
    backend.add_identity(id, 8).expect("identity");
    let record = EnrollmentRecord::new(id, &backend.enrollment(id).expect("enrolled"))
        .with_evidence(&evidence);
    record.parse().expect("consistent");
    assert!(record.ek_certificate.is_some());
}
