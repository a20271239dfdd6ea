//! Configuration loading with real software TPMs (swtpm): a group whose members' attestation
//! keys come from one TPM is refused whatever machine names the configuration claims, records
//! that disagree with their TPM evidence are refused, and pinned EK CAs (`ek_roots`) admit only
//! TPMs with a certificate from them.

use proto::config::{Cluster, ClusterConfig, DbNodeConfig, GroupConfig, NodeConfig, ReplicaConfig};
use proto::SigningKey;
use std::path::Path;
use usig::tpm::device::TpmDevice;
use usig::tpm::swtpm::{LocalCa, Swtpm};
use usig::tpm::TpmBackend;
use usig::{EnrollmentRecord, UsigId};

/// A machine: its swtpm (with an EK certificate from `ca` if given) and the enrollment records
/// of the identities it hosts, with the TPM's evidence, as usigd enrolls them.
fn machine(dir: &Path, ids: &[u64], ca: Option<&LocalCa>) -> (Swtpm, Vec<EnrollmentRecord>) {
    let swtpm = Swtpm::start(&dir.join("tpm")).expect("swtpm");
    if let Some(ca) = ca {
        let mut device = TpmDevice::connect(&swtpm.tcti()).expect("connect");
        let ek = device.ek_public().expect("ek");
        let cert = ca.issue_ek_certificate(&ek).expect("issue");
        device.store_ek_certificate(&cert).expect("store");
    }
    let mut backend = TpmBackend::open(&swtpm.tcti(), &dir.join("state")).expect("open");
    let evidence = backend.evidence().expect("evidence");
    let records = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            backend
                .add_identity(UsigId(id), 8 + i as u8)
                .expect("identity");
            EnrollmentRecord::new(
                UsigId(id),
                &backend.enrollment(UsigId(id)).expect("enrolled"),
            )
            .with_evidence(&evidence)
        })
        .collect();
    (swtpm, records)
}

fn key(seed: u8) -> String {
    SigningKey::from_seed([seed; 32]).public_key().to_hex()
}

/// f = 1, one group (101..103 on m1..m3), candidate 0 on m0, database nodes 11..13 on m1..m3.
fn config(enrollments: Vec<EnrollmentRecord>) -> ClusterConfig {
    ClusterConfig {
        f: 1,
        config_epoch: 1,
        partitions: 1,
        usig: "tpm".into(),
        application: "bank".into(),
        epoch_start: Default::default(),
        primaries: vec![NodeConfig {
            id: 0,
            addr: "127.0.0.1:1".into(),
            machine: "m0".into(),
            usig: 1000,
            usig_epoch: None,
            public_key: key(1),
        }],
        groups: vec![GroupConfig {
            id: 0,
            partitions: vec![0],
        }],
        replicas: (1..=3)
            .map(|k| ReplicaConfig {
                id: 100 + k,
                group: 0,
                addr: format!("127.0.0.1:{}", 100 + k),
                machine: format!("m{k}"),
                usig: 1100 + u64::from(k),
                usig_epoch: None,
                public_key: key(100 + k as u8),
            })
            .collect(),
        db_nodes: (1..=3)
            .map(|k| DbNodeConfig {
                id: 10 + k,
                addr: format!("127.0.0.1:{}", 10 + k),
                machine: format!("m{k}"),
                database: "sqlite::memory:".into(),
                public_key: key(10 + k as u8),
            })
            .collect(),
        clients: Vec::new(),
        enrollments,
        ek_roots: Vec::new(),
    }
}

fn error(c: ClusterConfig) -> String {
    Cluster::new(c).expect_err("accepted").to_string()
}

#[test]
fn members_on_one_tpm_are_refused_whatever_the_machine_names_say() {
    let dir = tempfile::tempdir().expect("tempdir");
    let machines: Vec<_> = [vec![1000], vec![1101], vec![1102], vec![1103]]
        .iter()
        .enumerate()
        .map(|(k, ids)| machine(&dir.path().join(format!("m{k}")), ids, None))
        .collect();
    let records: Vec<EnrollmentRecord> = machines.iter().flat_map(|(_, r)| r.clone()).collect();
    Cluster::new(config(records.clone())).expect("four TPMs for four machines");

    // Replicas 102 and 103 enrolled on one TPM (one usigd), the configuration saying m2, m3.
    let (_shared, on_one) = machine(&dir.path().join("shared"), &[1102, 1103], None);
    let mut c = config(records[..2].to_vec());
    c.enrollments.extend(on_one);
    let e = error(c);
    assert!(e.contains("replica 103.usig: shares a TPM"), "{e}");

    // A record whose TPM identity is not its endorsement key's hash.
    let mut c = config(records.clone());
    let other = machines[1].1[0].tpm_identity.clone();
    c.enrollments[2].tpm_identity = other;
    let e = error(c);
    assert!(
        e.contains("usig_enrollment (id 1102)") && e.contains("tpm_identity"),
        "{e}"
    );
}

#[test]
fn pinned_ek_roots_admit_only_tpms_they_certified() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = LocalCa::new(&dir.path().join("ca")).expect("ca");
    let machines: Vec<_> = [vec![1000], vec![1101], vec![1102], vec![1103]]
        .iter()
        .enumerate()
        .map(|(k, ids)| machine(&dir.path().join(format!("m{k}")), ids, Some(&ca)))
        .collect();
    let records: Vec<EnrollmentRecord> = machines.iter().flat_map(|(_, r)| r.clone()).collect();
    assert!(records.iter().all(|r| r.ek_certificate.is_some()));
    let mut c = config(records.clone());
    c.ek_roots = vec![ca.certificates_pem().expect("pem")];
    Cluster::new(c.clone()).expect("every TPM certified by the pinned CA");

    let other = LocalCa::new(&dir.path().join("other")).expect("other ca");
    let (_m, _) = machine(&dir.path().join("by-other"), &[1], Some(&other));
    let mut wrong = c.clone();
    wrong.ek_roots = vec![other.certificates_pem().expect("pem")];
    let e = error(wrong);
    assert!(
        e.contains("usig_enrollment (id 1000).ek_certificate")
            && e.contains("not one ek_roots vouches for"),
        "{e}"
    );

    // A TPM without an EK certificate cannot join a cluster that pins EK CAs.
    let (_bare, bare) = machine(&dir.path().join("bare"), &[1103], None);
    let mut c2 = c.clone();
    c2.enrollments[3] = bare[0].clone();
    let e = error(c2);
    assert!(
        e.contains("usig_enrollment (id 1103).ek_certificate: is required because ek_roots is set"),
        "{e}"
    );

    let mut garbage = c;
    garbage.ek_roots = vec!["not a certificate".into()];
    assert!(error(garbage).starts_with("ek_roots[0]"));
}
