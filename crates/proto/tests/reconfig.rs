//! Bad input to online reconfiguration is refused with a clear reason and changes nothing
//! (docs/protocol.md, "Valid successors"): RECONFIGUREs not signed by the operator or of another
//! epoch, next configurations that change what cannot change online, put two members of a group
//! on one machine, remove the last group, or leave a partition to a group that is gone (or
//! move one to a group that is not there); replacements of a member on a machine its group
//! uses; and certificates of the epoch's end that are short of f+1 per group or do not match.
//! Machines named against their TPM's evidence: `tpm_machines.rs` (real software TPMs).

use proto::config::{Cluster, ClusterConfig};
use proto::reconfig::{
    certified, check_successor, describe, replace_member, same_shape, ReconfigError,
};
use proto::testing::{member, node_key, operator_key, TestCluster};
use proto::{ConfigEpoch, EpochClose, GroupId, NodeId, Reconfigure, Signature, View};
use usig::MessageDigest;

/// A two-group cluster that may change online, and the spare replicas of a third group.
fn operated() -> (Cluster, Vec<proto::config::ReplicaConfig>) {
    TestCluster::operated(1, 2, 1, 4, 2)
}

/// The next epoch's shape with the spare group added, serving partition 3.
fn with_third_group(cluster: &Cluster, spares: &[proto::config::ReplicaConfig]) -> ClusterConfig {
    let mut next = cluster.config.clone();
    next.config_epoch += 1;
    next.replicas.extend(spares.iter().cloned());
    for g in &mut next.groups {
        g.partitions.retain(|&p| p != 3);
    }
    next.groups.push(proto::config::GroupConfig {
        id: 2,
        partitions: vec![3],
    });
    next
}

fn refusal(prev: &ClusterConfig, next: &ClusterConfig) -> String {
    check_successor(prev, next).unwrap_err().to_string()
}

#[test]
fn a_reconfigure_needs_the_operator_and_the_current_epoch() {
    let (cluster, spares) = operated();
    let next = with_third_group(&cluster, &spares);
    let good = Reconfigure::new(cluster.epoch(), &next, "127.0.0.1:1", &operator_key());
    let shape = good.check(&cluster).unwrap();
    assert!(same_shape(&shape, &next));

    let forged = Reconfigure::new(cluster.epoch(), &next, "127.0.0.1:1", &node_key(NodeId(0)));
    assert!(matches!(
        forged.check(&cluster),
        Err(ReconfigError::Signature)
    ));
    let mut redirected = good.clone();
    redirected.reply_to = "10.0.0.66:1".into();
    assert!(matches!(
        redirected.check(&cluster),
        Err(ReconfigError::Signature)
    ));
    let stale = Reconfigure::new(ConfigEpoch(0), &next, "127.0.0.1:1", &operator_key());
    assert!(matches!(
        stale.check(&cluster),
        Err(ReconfigError::Epoch { .. })
    ));

    let mut fixed = cluster.config.clone();
    fixed.operator_key = None;
    let fixed = Cluster::new(fixed).unwrap();
    assert!(matches!(good.check(&fixed), Err(ReconfigError::NoOperator)));
}

#[test]
fn what_may_not_change_online_is_refused_with_the_field() {
    let (cluster, spares) = operated();
    let prev = &cluster.config;
    let next = with_third_group(&cluster, &spares);
    check_successor(prev, &next).unwrap();

    let mut skipped = next.clone();
    skipped.config_epoch += 1;
    assert!(refusal(prev, &skipped).contains("config_epoch"));
    let mut f2 = next.clone();
    f2.f = 2;
    assert!(refusal(prev, &f2).contains("f:"));
    let mut fewer = next.clone();
    fewer.partitions = 3;
    assert!(refusal(prev, &fewer).contains("partitions"));
    let mut other_db = next.clone();
    other_db.db_nodes[0].database = "sqlite:elsewhere".into();
    assert!(refusal(prev, &other_db).contains("dbnode"));
    let mut new_operator = next.clone();
    new_operator.operator_key = Some(node_key(NodeId(9)).public_key().to_hex());
    assert!(refusal(prev, &new_operator).contains("operator_key"));
    let mut moved_vm = next.clone();
    moved_vm.replicas[0].machine = "m9".into();
    assert!(refusal(prev, &moved_vm).contains("a new VM is a new replica id"));
}

#[test]
fn unsafe_shapes_are_refused() {
    let (cluster, spares) = operated();
    let prev = &cluster.config;

    // Two members of the new group on one machine.
    let mut crowded = with_third_group(&cluster, &spares);
    let first = crowded.replicas.iter().position(|r| r.group == 2).unwrap();
    crowded.replicas[first + 1].machine = crowded.replicas[first].machine.clone();
    let e = refusal(prev, &crowded);
    assert!(e.contains("already hosts another member"), "{e}");

    // An identity that is not enrolled.
    let mut unenrolled = with_third_group(&cluster, &spares);
    let usig = unenrolled.replicas.last().unwrap().usig;
    unenrolled.enrollments.retain(|e| e.id != usig);
    let e = refusal(prev, &unenrolled);
    assert!(e.contains("usig_enrollment"), "{e}");

    // Removing the last group.
    let mut none = prev.clone();
    none.config_epoch += 1;
    none.groups.clear();
    none.replicas.clear();
    let e = refusal(prev, &none);
    assert!(e.contains("last group"), "{e}");

    // Group 1 removed while partition 1 still names it: served by no group.
    let mut orphan = prev.clone();
    orphan.config_epoch += 1;
    orphan.groups.retain(|g| g.id != 1);
    orphan.replicas.retain(|r| r.group != 1);
    let e = refusal(prev, &orphan);
    assert!(e.contains("served by no group"), "{e}");

    // Partition 3 moved to group 2, which is not there (no members: it was removed, or never
    // added).
    let mut to_removed = prev.clone();
    to_removed.config_epoch += 1;
    for g in &mut to_removed.groups {
        g.partitions.retain(|&p| p != 3);
    }
    to_removed.groups.push(proto::config::GroupConfig {
        id: 2,
        partitions: vec![3],
    });
    let e = refusal(prev, &to_removed);
    assert!(
        e.contains("group 2 replica") && e.contains("has 0 members"),
        "{e}"
    );
}

/// Replacing a member (a retired or failed machine): the group keeps its id and partitions, the
/// newcomer takes the member's place; a newcomer on a machine the group uses (the replaced
/// member's included), one that already serves, a replica that is not a member, or a group that
/// does not exist is refused with the reason, and nothing changes.
#[test]
fn a_member_is_replaced_only_by_a_replica_on_a_machine_the_group_does_not_use() {
    let (cluster, _) = operated();
    let prev = &cluster.config;
    // Group 0 is 101-103 on m1-m3; 104 is a spare for it on m4.
    let (spare, enrollment) = member(0, 4);
    let next = replace_member(prev, 0, 103, spare.clone(), Some(enrollment.clone())).unwrap();
    check_successor(prev, &next).unwrap();
    assert_eq!(next.config_epoch, prev.config_epoch + 1);
    let members: Vec<(u32, &str)> = next
        .replicas
        .iter()
        .filter(|r| r.group == 0)
        .map(|r| (r.id, r.machine.as_str()))
        .collect();
    assert_eq!(members, vec![(101, "m1"), (102, "m2"), (104, "m4")]);
    assert_eq!(next.groups, prev.groups, "the group keeps its partitions");
    assert!(
        !next.enrollments.iter().any(|e| e.id == 1103),
        "the replaced identity leaves the directory"
    );
    assert_eq!(
        describe(prev, &next),
        vec!["group 0: replace replica 103 on m3 by 104 on m4".to_string()]
    );
    let next_cluster = Cluster::new(next.clone()).unwrap();
    assert_eq!(next_cluster.group_of_replica(NodeId(104)), Some(GroupId(0)));
    assert_eq!(next_cluster.group_of_replica(NodeId(103)), None);

    let refused = |group: u32, old: u32, new: proto::config::ReplicaConfig| {
        replace_member(prev, group, old, new, Some(enrollment.clone()))
            .unwrap_err()
            .to_string()
    };
    // On a machine another member uses.
    let mut crowded = spare.clone();
    crowded.machine = "m1".into();
    let e = refused(0, 103, crowded);
    assert!(
        e.contains("replica 104.machine") && e.contains("already hosts member 101"),
        "{e}"
    );
    // On the machine of the member it replaces (the one being retired).
    let mut same = spare.clone();
    same.machine = "m3".into();
    let e = refused(0, 103, same);
    assert!(e.contains("replaced member's machine"), "{e}");
    // A replica that serves already, one that is not a member, a group that does not exist.
    let (serving, _) = member(1, 1);
    let e = refused(0, 103, serving);
    assert!(e.contains("already serves in group 1"), "{e}");
    let e = refused(0, 201, spare.clone());
    assert!(e.contains("replica 201: is not a member of group 0"), "{e}");
    let e = refused(5, 103, spare.clone());
    assert!(e.contains("group 5: does not exist"), "{e}");
    // Without its enrollment the newcomer names an identity the directory does not know.
    let e = replace_member(prev, 0, 103, spare, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("usig"), "{e}");
}

fn close(replica: u32, slot: u64, book: &[u8]) -> EpochClose {
    EpochClose {
        replica: NodeId(replica),
        config_epoch: ConfigEpoch(1),
        view: View(0),
        slot,
        chain: MessageDigest::of(b"history"),
        book: MessageDigest::of(book),
        signature: Signature([0; 64]),
    }
    .sign(&node_key(NodeId(replica)))
}

#[test]
fn the_end_of_an_epoch_needs_f_plus_one_matching_closes_of_every_group() {
    let (cluster, _) = operated();
    let both = [
        close(101, 7, b"book"),
        close(102, 7, b"book"),
        close(201, 7, b"book"),
        close(203, 7, b"book"),
    ];
    let (_, slot, _, book) = certified(&cluster, &both).unwrap();
    assert_eq!((slot, book), (7, MessageDigest::of(b"book")));
    // One group short.
    assert!(certified(&cluster, &both[..3]).is_err());
    // A member that names another book does not count with the others.
    let mut split = both.clone();
    split[3] = close(203, 7, b"other book");
    assert!(certified(&cluster, &split).is_err());
    // Forged (signed by someone else) or of another epoch.
    let mut forged = both.clone();
    forged[0].signature = close(102, 7, b"book").signature;
    assert!(certified(&cluster, &forged).is_err());
    let mut stale = both.clone();
    stale[1].config_epoch = ConfigEpoch(0);
    assert!(certified(&cluster, &stale).is_err());
    // One member twice is one vote.
    let twice = [
        close(101, 7, b"book"),
        close(101, 7, b"book"),
        close(201, 7, b"book"),
        close(203, 7, b"book"),
    ];
    assert!(certified(&cluster, &twice).is_err());
}
