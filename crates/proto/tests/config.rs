//! Cluster configuration validation: every rule the roles rely on, each with an error that names
//! the field.

use proto::config::{
    ClientConfig, Cluster, ClusterConfig, DbNodeConfig, GroupConfig, NodeConfig, ReplicaConfig,
};
use proto::{GroupId, NodeId, SigningKey};
use usig::soft::SoftUsig;
use usig::{Enrollment, EnrollmentRecord, Epoch, UsigId};

fn key(seed: u8) -> String {
    SigningKey::from_seed([seed; 32]).public_key().to_hex()
}

fn enrollment(usig: u64) -> EnrollmentRecord {
    let public_key = SoftUsig::in_memory(UsigId(usig), [usig as u8; 32], Epoch(1)).public_key();
    EnrollmentRecord::new(UsigId(usig), &Enrollment::Soft { public_key })
}

/// f = 1, two groups, four partitions, on machines m0..m3.
fn valid() -> ClusterConfig {
    let mut c = ClusterConfig {
        f: 1,
        config_epoch: 1,
        partitions: 4,
        usig: "soft".into(),
        application: "bank".into(),
        epoch_start: Default::default(),
        primaries: vec![NodeConfig {
            id: 0,
            addr: "127.0.0.1:1".into(),
            machine: "m0".into(),
            usig: 1000,
            usig_epoch: None,
            usig_start: None,
            public_key: key(1),
        }],
        groups: vec![
            GroupConfig {
                id: 0,
                partitions: vec![0, 2],
            },
            GroupConfig {
                id: 1,
                partitions: vec![1, 3],
            },
        ],
        replicas: Vec::new(),
        db_nodes: Vec::new(),
        clients: Vec::new(),
        enrollments: vec![enrollment(1000)],
        operator_key: None,
        ek_roots: Vec::new(),
    };
    for g in 0..2u32 {
        for k in 1..=3u32 {
            let id = 100 * (g + 1) + k;
            c.replicas.push(ReplicaConfig {
                id,
                group: g,
                addr: format!("127.0.0.1:{id}"),
                machine: format!("m{k}"),
                usig: 1000 + u64::from(id),
                usig_epoch: None,
                usig_start: None,
                rejoin: false,
                public_key: key(id as u8),
            });
            c.enrollments.push(enrollment(1000 + u64::from(id)));
        }
    }
    for k in 1..=3u32 {
        c.db_nodes.push(DbNodeConfig {
            id: 10 + k,
            addr: format!("127.0.0.1:{}", 10 + k),
            machine: format!("m{k}"),
            database: "sqlite::memory:".into(),
            public_key: key(10 + k as u8),
        });
    }
    c
}

fn error(c: ClusterConfig) -> String {
    Cluster::new(c)
        .expect_err("invalid configuration accepted")
        .to_string()
}

#[test]
fn a_valid_configuration_gives_the_lookups() {
    let cluster = Cluster::new(valid()).unwrap();
    assert_eq!(cluster.group_of(2), Some(GroupId(0)));
    assert_eq!(cluster.group_of(3), Some(GroupId(1)));
    assert_eq!(cluster.members(GroupId(1)).count(), 3);
    assert_eq!(cluster.usig_of(NodeId(203)), Some(UsigId(1203)));
    assert!(cluster.node_key(NodeId(11)).is_some());
    let text = toml::to_string(&cluster.config).unwrap();
    assert_eq!(
        toml::from_str::<ClusterConfig>(&text).unwrap(),
        cluster.config
    );
}

#[test]
fn every_rule_names_its_field() {
    let mut c = valid();
    c.replicas[1].machine = "m1".into();
    assert!(error(c).contains("group 0 replica 102.machine"));

    let mut c = valid();
    c.replicas.pop();
    assert!(error(c).contains("has 2 members; with f it needs exactly 2f+1 = 3"));

    let mut c = valid();
    c.groups[1].partitions = vec![1, 2, 3];
    assert!(error(c).contains("partition 2 is served by two groups"));

    let mut c = valid();
    c.groups[1].partitions = vec![1];
    assert!(error(c).contains("partition 3 is served by no group"));

    let mut c = valid();
    c.groups[0].partitions.push(9);
    assert!(error(c).contains("partition 9 does not exist"));

    let mut c = valid();
    c.enrollments.remove(1);
    assert!(error(c).contains("has no [[usig_enrollment]]"));

    let mut c = valid();
    c.replicas[0].usig = 1000;
    assert!(error(c).contains("replica 101.usig: is used by another node"));

    let mut c = valid();
    c.usig = "tpm".into();
    assert!(error(c).contains("is not enrolled as usig = \"tpm\""));

    let mut c = valid();
    c.db_nodes[0].public_key = "zz".into();
    assert!(error(c).contains("dbnode 11.public_key"));

    let mut c = valid();
    c.db_nodes[2].machine = "m1".into();
    assert!(error(c).contains("dbnode 13.machine"));

    let mut c = valid();
    c.primaries.clear();
    assert!(error(c).contains("primary"));

    let most = proto::limits::MAX_CLIENTS;
    let mut c = valid();
    c.clients = (0..=most as u64)
        .map(|id| ClientConfig {
            id,
            addr: "127.0.0.1:9".into(),
            public_key: key(9),
        })
        .collect();
    let e = error(c);
    assert!(
        e.contains("client") && e.contains(&format!("at most {most}")),
        "{e}"
    );

    let mut c = valid();
    c.epoch_start.clients = (0..=most as u64).map(|id| (id, 1)).collect();
    let e = error(c);
    assert!(e.contains("epoch_start.clients"), "{e}");
}

#[test]
fn members_of_one_group_may_not_share_a_tpm() {
    let mut c = valid();
    c.usig = "tpm".into();
    let tpm = |usig: u64, machine: u8, pcr: u8| {
        let mut ak_public_key = [machine; 65];
        ak_public_key[0] = 4;
        EnrollmentRecord::new(
            UsigId(usig),
            &Enrollment::Tpm {
                ak_public_key,
                epoch_offset: Default::default(),
                pcr,
                tpm_identity: [machine; 32],
            },
        )
    };
    c.enrollments = vec![tpm(1000, 0, 8)];
    for (i, r) in c.replicas.iter().enumerate() {
        let machine: u8 = r.machine.trim_start_matches('m').parse().unwrap();
        c.enrollments.push(tpm(r.usig, machine, 8 + i as u8));
    }
    assert!(Cluster::new(c.clone()).is_ok());
    // Replica 102 claims machine m2 but its warrants come from m1's TPM.
    c.enrollments[2] = tpm(1102, 1, 9);
    let e = error(c);
    assert!(e.contains("replica 102.usig: shares a TPM"), "{e}");
}
