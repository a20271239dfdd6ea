//! Configuration loading with real software TPMs (swtpm), on proto::testing's layout: a group
//! whose members' attestation
//! keys come from one TPM is refused whatever machine names the configuration claims, records
//! that disagree with their TPM evidence are refused, and pinned EK CAs (`ek_roots`) admit only
//! TPMs with a certificate from them.

use proto::config::{Cluster, ClusterConfig};
use proto::testing::TestCluster;
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

/// The test layout (f = 1, one group: candidates 0-2 on p0-p2, replicas 101-103 on m1-m3) on
/// TPMs, with `enrollments` instead of its soft ones.
fn config(enrollments: Vec<EnrollmentRecord>) -> ClusterConfig {
    let mut c = TestCluster::new(1, 1, 1, 0).cluster.config;
    c.usig = "tpm".into();
    c.enrollments = enrollments;
    c
}

/// The USIG ids of the layout's nodes, one machine each: candidates, then replicas.
fn usig_ids() -> Vec<u64> {
    let c = config(Vec::new());
    c.primaries
        .iter()
        .map(|p| p.usig)
        .chain(c.replicas.iter().map(|r| r.usig))
        .collect()
}

fn error(c: ClusterConfig) -> String {
    Cluster::new(c).expect_err("accepted").to_string()
}

#[test]
fn members_on_one_tpm_are_refused_whatever_the_machine_names_say() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ids = usig_ids();
    let machines: Vec<_> = ids
        .iter()
        .map(|&id| machine(&dir.path().join(format!("u{id}")), &[id], None))
        .collect();
    let records: Vec<EnrollmentRecord> = machines.iter().flat_map(|(_, r)| r.clone()).collect();
    Cluster::new(config(records.clone())).expect("a TPM for every machine");

    // The last two replicas enrolled on one TPM (one usigd), the configuration saying m2, m3.
    let (_shared, on_one) = machine(&dir.path().join("shared"), &ids[4..], None);
    let mut c = config(records[..4].to_vec());
    c.enrollments.extend(on_one);
    let last = c.replicas[2].id;
    let e = error(c);
    assert!(
        e.contains(&format!("replica {last}.usig: shares a TPM")),
        "{e}"
    );

    // A record whose TPM identity is not its endorsement key's hash.
    let mut c = config(records.clone());
    c.enrollments[4].tpm_identity = records[3].tpm_identity.clone();
    let e = error(c);
    assert!(
        e.contains(&format!("usig_enrollment (id {})", ids[4])) && e.contains("tpm_identity"),
        "{e}"
    );
}

#[test]
fn pinned_ek_roots_admit_only_tpms_they_certified() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = LocalCa::new(&dir.path().join("ca")).expect("ca");
    let ids = usig_ids();
    let machines: Vec<_> = ids
        .iter()
        .map(|&id| machine(&dir.path().join(format!("u{id}")), &[id], Some(&ca)))
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
        e.contains(&format!("usig_enrollment (id {}).ek_certificate", ids[0]))
            && e.contains("not one ek_roots vouches for"),
        "{e}"
    );

    // A TPM without an EK certificate cannot join a cluster that pins EK CAs.
    let (_bare, bare) = machine(&dir.path().join("bare"), &[ids[5]], None);
    let mut c2 = c.clone();
    c2.enrollments[5] = bare[0].clone();
    let e = error(c2);
    assert!(
        e.contains(&format!(
            "usig_enrollment (id {}).ek_certificate: is required because ek_roots is set",
            ids[5]
        )),
        "{e}"
    );

    let mut garbage = c;
    garbage.ek_roots = vec!["not a certificate".into()];
    assert!(error(garbage).starts_with("ek_roots[0]"));
}

/// With TPMs a machine is known by its TPM: a replacement that names a machine its TPM is not
/// (a known machine's name on another TPM, a known TPM under a new name, in the same epoch or
/// across the change) is refused as an unknown machine, and so is a replacement on a TPM
/// another member of the group uses.
#[test]
fn a_replacement_on_an_unknown_machine_or_a_shared_tpm_is_refused() {
    use proto::reconfig::replace_member;
    let dir = tempfile::tempdir().expect("tempdir");
    let ids = usig_ids();
    let (replaced, newcomer) = (ids[5], 1104);
    // Candidates and replicas 101 and 102 on a TPM each; 103 on a TPM that can also host the
    // newcomer's identity.
    let machines: Vec<_> = ids[..5]
        .iter()
        .map(|&id| machine(&dir.path().join(format!("u{id}")), &[id], None))
        .collect();
    let mut records: Vec<EnrollmentRecord> = machines.iter().flat_map(|(_, r)| r.clone()).collect();
    let (_m3, on_m3) = machine(&dir.path().join("m3"), &[replaced, newcomer], None);
    records.push(on_m3[0].clone());
    let prev = config(records.clone());
    Cluster::new(prev.clone()).expect("a TPM for every machine");
    let (spare, _) = proto::testing::member(0, 4);
    let replace = |machine: &str, record: &EnrollmentRecord| {
        let mut new = spare.clone();
        new.machine = machine.into();
        replace_member(&prev, 0, 103, new, Some(record.clone()))
    };

    // On a TPM of its own on a new machine: accepted.
    let (_m4, on_m4) = machine(&dir.path().join("m4"), &[newcomer], None);
    replace("m4", &on_m4[0]).expect("a new machine with its own TPM");

    // A known machine's name (candidate 1's p1) on another TPM.
    let e = replace("p1", &on_m4[0]).unwrap_err().to_string();
    assert!(
        e.contains("replica 104.machine: p1 is known as the machine of TPM")
            && e.contains("the machine is unknown under that name"),
        "{e}"
    );
    // Candidate 0's TPM under a new name.
    let (_p0, on_p0) = machine(&dir.path().join("p0"), &[ids[0], newcomer], None);
    let mut prev_p0 = prev.clone();
    prev_p0.enrollments[0] = on_p0[0].clone();
    Cluster::new(prev_p0.clone()).expect("candidate 0 on its TPM");
    let mut new = spare.clone();
    new.machine = "m9".into();
    let e = replace_member(&prev_p0, 0, 103, new, Some(on_p0[1].clone()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("replica 104.machine: says m9") && e.contains("one TPM is one machine"),
        "{e}"
    );
    // The retired machine's TPM under a new name: only the running epoch knows it (103 leaves).
    let e = replace("m7", &on_m3[1]).unwrap_err().to_string();
    assert!(
        e.contains("replica 104.machine: says m7") && e.contains("which is machine m3"),
        "{e}"
    );
    // On the TPM of a member that stays (replica 101's), whatever the machine is called.
    let (_m1, on_m1) = machine(&dir.path().join("m1"), &[ids[3], newcomer], None);
    let mut prev_m1 = prev.clone();
    prev_m1.enrollments[3] = on_m1[0].clone();
    let mut new = spare.clone();
    new.machine = "m8".into();
    let e = replace_member(&prev_m1, 0, 103, new, Some(on_m1[1].clone()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("replica 104.usig: shares a TPM"), "{e}");
}
