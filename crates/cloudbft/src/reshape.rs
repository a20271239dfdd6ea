//! The next configuration's shape for the operator's commands (`cloudbft scale`, `group add`,
//! `group remove`, `group replace`, `partition move`): which replicas form a new group, which
//! one replaces a member, where partitions go. Pure functions over the configuration and the
//! spare replicas; the protocol checks the result again (`proto::reconfig::check_successor`).
//!
//! Spare replicas are VM identities that exist (keys, USIG enrollments, a usigd identity on
//! their machine) but serve in no group: `cloudbft keygen --max-groups` makes them for the
//! groups beyond `--groups`, `--spare-machines` one for every group on each machine held in
//! reserve, and a removed group's replicas become spares again, with the position their USIG
//! sequence continues from. A replaced member does not: its machine is retired.

use anyhow::{bail, Context, Result};
use proto::config::{ClusterConfig, GroupConfig, ReplicaConfig};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use usig::EnrollmentRecord;

/// Replicas that can form new groups.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spares {
    /// Each with the group it was made for (`group`), its machine, address and USIG identity.
    #[serde(rename = "replica", default)]
    pub replicas: Vec<ReplicaConfig>,
    #[serde(rename = "usig_enrollment", default)]
    pub enrollments: Vec<EnrollmentRecord>,
    /// Machines whose member was replaced (retired or failed): no spare on them is used. Take a
    /// machine off the list when it is back in service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<String>,
}

impl Spares {
    /// Reads `path`; a missing file is no spares.
    pub fn load(path: &Path) -> Result<Spares> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Spares::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        std::fs::write(path, toml::to_string(self)?)
            .with_context(|| format!("writing {}", path.display()))
    }

    /// The spare groups: for each group id not in use, 2f+1 spares made for it on distinct
    /// machines (the lowest ids first: the group's own machines before spare machines).
    fn groups(&self, config: &ClusterConfig) -> BTreeMap<u32, Vec<&ReplicaConfig>> {
        let used: BTreeSet<u32> = config.groups.iter().map(|g| g.id).collect();
        let mut by_group: BTreeMap<u32, Vec<&ReplicaConfig>> = BTreeMap::new();
        let mut spares: Vec<&ReplicaConfig> = self.usable().collect();
        spares.sort_by_key(|r| r.id);
        for r in spares {
            let members = by_group.entry(r.group).or_default();
            let placed = members.iter().any(|m| m.machine == r.machine);
            if !used.contains(&r.group) && !placed && members.len() < 2 * config.f + 1 {
                members.push(r);
            }
        }
        by_group.retain(|_, members| members.len() == 2 * config.f + 1);
        by_group
    }

    /// Spares not on a retired machine.
    fn usable(&self) -> impl Iterator<Item = &ReplicaConfig> {
        self.replicas
            .iter()
            .filter(|r| !self.retired.contains(&r.machine))
    }

    /// Moves the replicas that left the configuration here, with the position their USIG
    /// sequence continues from (`positions`, as reported when the epoch closed), and takes the
    /// replicas now in `config` out. A replaced member (its group goes on without it) is not
    /// kept and its machine is retired; a removed group's member that left without reporting its
    /// position (down) is not kept either: where its sequence stands is unknown, so it could not
    /// start again where verifiers expect it. Returns the replicas not kept.
    pub fn update(
        &mut self,
        previous: &ClusterConfig,
        config: &ClusterConfig,
        positions: &proto::reconfig::Positions,
    ) -> Dropped {
        let serving: BTreeSet<u32> = config.replicas.iter().map(|r| r.id).collect();
        self.replicas.retain(|r| !serving.contains(&r.id));
        let mut dropped = Dropped::default();
        for r in previous
            .replicas
            .iter()
            .filter(|r| !serving.contains(&r.id))
        {
            self.replicas.retain(|s| s.id != r.id);
            if config.groups.iter().any(|g| g.id == r.group) {
                if !self.retired.contains(&r.machine) {
                    self.retired.push(r.machine.clone());
                }
                dropped.replaced.push((r.id, r.machine.clone()));
                continue;
            }
            let Some((start, epoch)) = positions.get(&r.id) else {
                dropped.unknown.push(r.id);
                continue;
            };
            self.replicas.push(ReplicaConfig {
                usig_start: start.clone(),
                usig_epoch: Some(*epoch),
                rejoin: false,
                ..r.clone()
            });
            if !self.enrollments.iter().any(|e| e.id == r.usig) {
                if let Some(e) = previous.enrollments.iter().find(|e| e.id == r.usig) {
                    self.enrollments.push(e.clone());
                }
            }
        }
        for r in &mut self.replicas {
            if let Some((start, epoch)) = positions.get(&r.id) {
                r.usig_start = start.clone();
                r.usig_epoch = Some(*epoch);
            }
        }
        self.replicas.sort_by_key(|r| r.id);
        dropped
    }
}

/// The replicas that left a configuration and are not kept as spares.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Replaced members, with their machines (now retired).
    pub replaced: Vec<(u32, String)>,
    /// Replicas of removed groups whose position is unknown.
    pub unknown: Vec<u32>,
}

/// The next configuration's shape: `config` with its epoch advanced and without the start of
/// the current epoch (the operator fills that in once the epoch is closed).
fn next_of(config: &ClusterConfig) -> ClusterConfig {
    let mut next = config.clone();
    next.config_epoch += 1;
    next
}

/// Adds the spare group with the lowest id (or `group` if given), serving `partitions` (or
/// its fair share of the partitions taken from the groups that serve the most).
pub fn add_group(
    config: &ClusterConfig,
    spares: &Spares,
    group: Option<u32>,
    partitions: Option<Vec<u32>>,
) -> Result<ClusterConfig> {
    let available = spares.groups(config);
    let (&id, members) = match group {
        Some(g) => available.get_key_value(&g).with_context(|| {
            format!(
                "group {g}: no 2f+1 spare replicas for it (spares for groups {:?}); make more \
                 with `cloudbft keygen --max-groups` or start the cluster with a larger \
                 --max-groups",
                available.keys().collect::<Vec<_>>()
            )
        })?,
        None => available.iter().next().with_context(|| {
            "no spare group left: every group the cluster has identities for is serving \
             (start the cluster with a larger --max-groups)"
        })?,
    };
    let mut next = next_of(config);
    for &r in members {
        let enrollment = spares.enrollments.iter().find(|e| e.id == r.usig);
        let enrollment = enrollment.with_context(|| {
            format!(
                "spare replica {}: usig#{} has no enrollment in the spares",
                r.id, r.usig
            )
        })?;
        if !next.enrollments.iter().any(|e| e.id == enrollment.id) {
            next.enrollments.push(enrollment.clone());
        }
        next.replicas.push(ReplicaConfig {
            rejoin: false,
            ..r.clone()
        });
    }
    next.groups.push(GroupConfig {
        id,
        partitions: Vec::new(),
    });
    next.groups.sort_by_key(|g| g.id);
    match partitions {
        Some(ps) => move_partitions(&next, &ps, id).map(|mut n| {
            n.config_epoch = next.config_epoch;
            n
        }),
        None => Ok(rebalance(next)),
    }
}

/// Replaces member `replica` of group `group` (its machine retired or failed) by a spare on a
/// machine the group does not use: `with`, or the lowest spare made for the group on such a
/// machine (`cloudbft keygen --spare-machines` makes them).
pub fn replace_member(
    config: &ClusterConfig,
    spares: &Spares,
    group: u32,
    replica: u32,
    with: Option<u32>,
) -> Result<ClusterConfig> {
    let used: BTreeSet<&str> = config
        .replicas
        .iter()
        .filter(|r| r.group == group)
        .map(|r| r.machine.as_str())
        .collect();
    let spare = match with {
        Some(id) => {
            let spare = spares
                .replicas
                .iter()
                .find(|r| r.id == id)
                .with_context(|| {
                    format!(
                        "replica {id} is not a spare (spares: {:?}): a replacement must be a VM \
                     identity with keys, a USIG enrollment and a usigd identity on its machine",
                        spares.replicas.iter().map(|r| r.id).collect::<Vec<_>>()
                    )
                })?;
            if spares.retired.contains(&spare.machine) {
                bail!(
                    "replica {id} is on machine {}, retired when a member there was replaced \
                     (spares.toml, `retired`): take it off that list once the machine is back",
                    spare.machine
                );
            }
            spare
        }
        None => {
            let mut made_for: Vec<&ReplicaConfig> =
                spares.usable().filter(|r| r.group == group).collect();
            made_for.sort_by_key(|r| r.id);
            made_for
                .iter()
                .find(|r| !used.contains(r.machine.as_str()))
                .copied()
                .with_context(|| {
                    format!(
                        "no spare replica for group {group} on a machine it does not use (it \
                         uses {used:?}; its spares: {:?}): make spare machines with `cloudbft \
                         keygen --spare-machines`, or name a spare with --with",
                        made_for
                            .iter()
                            .map(|r| format!("{} on {}", r.id, r.machine))
                            .collect::<Vec<_>>()
                    )
                })?
        }
    };
    let enrollment = spares
        .enrollments
        .iter()
        .find(|e| e.id == spare.usig)
        .cloned();
    proto::reconfig::replace_member(config, group, replica, spare.clone(), enrollment)
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// Removes group `group`; its partitions go to the groups that serve the fewest.
pub fn remove_group(config: &ClusterConfig, group: u32) -> Result<ClusterConfig> {
    if !config.groups.iter().any(|g| g.id == group) {
        bail!(
            "group {group} does not exist (groups: {:?})",
            config.groups.iter().map(|g| g.id).collect::<Vec<_>>()
        );
    }
    if config.groups.len() == 1 {
        bail!("group {group} is the last group: at least one group must serve the partitions");
    }
    let mut next = next_of(config);
    let orphaned: Vec<u32> = next
        .groups
        .iter()
        .find(|g| g.id == group)
        .map(|g| g.partitions.clone())
        .unwrap_or_default();
    next.groups.retain(|g| g.id != group);
    let gone: BTreeSet<u64> = next
        .replicas
        .iter()
        .filter(|r| r.group == group)
        .map(|r| r.usig)
        .collect();
    next.replicas.retain(|r| r.group != group);
    next.enrollments.retain(|e| !gone.contains(&e.id));
    for p in orphaned {
        let fewest = next
            .groups
            .iter_mut()
            .min_by_key(|g| (g.partitions.len(), g.id))
            .expect("another group remains");
        fewest.partitions.push(p);
        fewest.partitions.sort_unstable();
    }
    Ok(next)
}

/// Moves `partitions` to group `to`.
pub fn move_partitions(
    config: &ClusterConfig,
    partitions: &[u32],
    to: u32,
) -> Result<ClusterConfig> {
    if !config.groups.iter().any(|g| g.id == to) {
        bail!(
            "group {to} does not exist (groups: {:?}): add it first (`cloudbft group add`)",
            config.groups.iter().map(|g| g.id).collect::<Vec<_>>()
        );
    }
    if let Some(p) = partitions.iter().find(|&&p| p >= config.partitions) {
        bail!(
            "partition {p} does not exist (partitions 0..{})",
            config.partitions
        );
    }
    let mut next = next_of(config);
    for g in &mut next.groups {
        g.partitions.retain(|p| !partitions.contains(p));
        if g.id == to {
            g.partitions.extend_from_slice(partitions);
            g.partitions.sort_unstable();
            g.partitions.dedup();
        }
    }
    Ok(next)
}

/// Adds or removes groups until there are `groups`: new ones from the spares (lowest ids
/// first), removing the highest ids; then spreads the partitions evenly.
pub fn scale(config: &ClusterConfig, spares: &Spares, groups: usize) -> Result<ClusterConfig> {
    if groups == 0 {
        bail!("--groups must be at least 1");
    }
    if groups > config.partitions as usize {
        bail!(
            "--groups {groups} is more than the {} partitions: a group without a partition \
             would serve nothing",
            config.partitions
        );
    }
    let mut next = config.clone();
    while next.groups.len() < groups {
        let epoch = next.config_epoch;
        next = add_group(&next, spares, None, Some(Vec::new()))?;
        next.config_epoch = epoch;
    }
    while next.groups.len() > groups {
        let epoch = next.config_epoch;
        let highest = next.groups.iter().map(|g| g.id).max().expect("groups");
        next = remove_group(&next, highest)?;
        next.config_epoch = epoch;
    }
    next.config_epoch = config.config_epoch + 1;
    Ok(rebalance(next))
}

/// Spreads the partitions evenly over the groups, moving as few as possible: each group keeps
/// up to its fair share of what it serves, and the rest goes to the groups below their share.
fn rebalance(mut next: ClusterConfig) -> ClusterConfig {
    let count = next.groups.len();
    let partitions = next.partitions as usize;
    let mut loose = Vec::new();
    for (i, g) in next.groups.iter_mut().enumerate() {
        let share = partitions / count + usize::from(i < partitions % count);
        while g.partitions.len() > share {
            loose.extend(g.partitions.pop());
        }
    }
    let placed: BTreeSet<u32> = next
        .groups
        .iter()
        .flat_map(|g| g.partitions.iter().copied())
        .chain(loose.iter().copied())
        .collect();
    loose.extend((0..next.partitions).filter(|p| !placed.contains(p)));
    loose.sort_unstable();
    for (i, g) in next.groups.iter_mut().enumerate() {
        let share = partitions / count + usize::from(i < partitions % count);
        while g.partitions.len() < share {
            match loose.pop() {
                Some(p) => g.partitions.push(p),
                None => break,
            }
        }
        g.partitions.sort_unstable();
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::reconfig::check_successor;
    use proto::testing::TestCluster;

    /// A two-group cluster with four partitions, an operator, and spares for groups 2 and 3.
    fn cluster_and_spares() -> (ClusterConfig, Spares) {
        let big = TestCluster::new(1, 4, 4, 2).cluster.config;
        let mut config = big.clone();
        config.operator_key = Some(
            proto::testing::node_key(proto::NodeId(999))
                .public_key()
                .to_hex(),
        );
        config.groups.retain(|g| g.id < 2);
        config.groups[0].partitions = vec![0, 2];
        config.groups[1].partitions = vec![1, 3];
        let spare: Vec<ReplicaConfig> = config
            .replicas
            .iter()
            .filter(|r| r.group >= 2)
            .cloned()
            .collect();
        config.replicas.retain(|r| r.group < 2);
        let spare_usigs: BTreeSet<u64> = spare.iter().map(|r| r.usig).collect();
        let enrollments = config
            .enrollments
            .iter()
            .filter(|e| spare_usigs.contains(&e.id))
            .cloned()
            .collect();
        config.enrollments.retain(|e| !spare_usigs.contains(&e.id));
        proto::config::Cluster::new(config.clone()).unwrap();
        (
            config,
            Spares {
                replicas: spare,
                enrollments,
                retired: Vec::new(),
            },
        )
    }

    /// Every replica of `c` reported its position (nothing warranted, USIG epoch 1).
    fn reported(c: &ClusterConfig) -> proto::reconfig::Positions {
        c.replicas.iter().map(|r| (r.id, (None, 1))).collect()
    }

    fn serving(c: &ClusterConfig) -> Vec<(u32, Vec<u32>)> {
        c.groups
            .iter()
            .map(|g| (g.id, g.partitions.clone()))
            .collect()
    }

    #[test]
    fn scaling_up_and_down_gives_valid_successors_and_spreads_partitions() {
        let (config, mut spares) = cluster_and_spares();
        let three = scale(&config, &spares, 3).unwrap();
        check_successor(&config, &three).unwrap();
        assert_eq!(three.config_epoch, config.config_epoch + 1);
        let sizes: Vec<usize> = three.groups.iter().map(|g| g.partitions.len()).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 4);
        assert!(
            sizes.iter().all(|&n| (1..=2).contains(&n)),
            "{:?}",
            serving(&three)
        );
        spares.update(&config, &three, &reported(&config));
        assert!(spares.replicas.iter().all(|r| r.group == 3));
        let one = scale(&three, &spares, 1).unwrap();
        check_successor(&three, &one).unwrap();
        assert_eq!(serving(&one), vec![(0, vec![0, 1, 2, 3])]);
        spares.update(&three, &one, &reported(&three));
        assert_eq!(
            spares.groups(&one).len(),
            3,
            "groups 1, 2 and 3 are spare again"
        );
    }

    /// [`cluster_and_spares`] with a spare machine m4 holding a spare of every group (as
    /// `cloudbft keygen --spare-machines 1` makes).
    fn with_spare_machine() -> (ClusterConfig, Spares) {
        let (config, mut spares) = cluster_and_spares();
        for g in 0..4 {
            let (replica, enrollment) = proto::testing::member(g, 4);
            spares.replicas.push(replica);
            spares.enrollments.push(enrollment);
        }
        (config, spares)
    }

    #[test]
    fn a_member_is_replaced_by_a_spare_on_a_machine_its_group_does_not_use() {
        let (config, mut spares) = with_spare_machine();
        // Group 0 is 101-103 on m1-m3; its spare on m4 is 104.
        let next = replace_member(&config, &spares, 0, 102, None).unwrap();
        check_successor(&config, &next).unwrap();
        assert_eq!(
            proto::reconfig::describe(&config, &next),
            vec!["group 0: replace replica 102 on m2 by 104 on m4".to_string()]
        );
        assert_eq!(serving(&next), serving(&config));
        let dropped = spares.update(&config, &next, &reported(&config));
        assert_eq!(
            dropped.replaced,
            vec![(102, "m2".to_string())],
            "the replaced member is not a spare"
        );
        assert_eq!(spares.retired, vec!["m2".to_string()]);
        assert!(!spares.replicas.iter().any(|r| r.id == 104));
        // No spare of group 0 is left on a machine it does not use (m2 is retired).
        let e = replace_member(&next, &spares, 0, 101, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no spare replica for group 0"), "{e}");
        // A spare group avoids the retired machine: group 2 takes its spare on m4.
        let added = add_group(&next, &spares, Some(2), None).unwrap();
        let machines: Vec<&str> = added
            .replicas
            .iter()
            .filter(|r| r.group == 2)
            .map(|r| r.machine.as_str())
            .collect();
        assert_eq!(machines, vec!["m1", "m3", "m4"]);
    }

    #[test]
    fn a_replacement_on_a_machine_the_group_uses_is_refused() {
        let (config, spares) = with_spare_machine();
        // 301 (made for group 2) is on m1, where group 0's 101 runs.
        let e = replace_member(&config, &spares, 0, 103, Some(301))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("replica 301.machine: m1 already hosts member 101 of the group"),
            "{e}"
        );
        // 303 is on m3, the machine of the member it would replace.
        let e = replace_member(&config, &spares, 0, 103, Some(303))
            .unwrap_err()
            .to_string();
        assert!(e.contains("the replaced member's machine"), "{e}");
        let e = replace_member(&config, &spares, 0, 103, Some(999))
            .unwrap_err()
            .to_string();
        assert!(e.contains("replica 999 is not a spare"), "{e}");
        let e = replace_member(&config, &spares, 0, 201, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a member of group 0"), "{e}");
        // Any spare on an unused machine may take the place, whatever group it was made for.
        let next = replace_member(&config, &spares, 0, 103, Some(204)).unwrap();
        check_successor(&config, &next).unwrap();
    }

    #[test]
    fn add_remove_and_move_refuse_what_cannot_be_done() {
        let (config, spares) = cluster_and_spares();
        let e = remove_group(&config, 7).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        let one = remove_group(&config, 1).unwrap();
        assert_eq!(serving(&one), vec![(0, vec![0, 1, 2, 3])]);
        let e = remove_group(&one, 0).unwrap_err().to_string();
        assert!(e.contains("last group"), "{e}");
        let e = move_partitions(&config, &[1], 5).unwrap_err().to_string();
        assert!(e.contains("add it first"), "{e}");
        let e = move_partitions(&config, &[9], 0).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        let moved = move_partitions(&config, &[1], 0).unwrap();
        check_successor(&config, &moved).unwrap();
        assert_eq!(serving(&moved), vec![(0, vec![0, 1, 2]), (1, vec![3])]);
        let e = add_group(&config, &spares, Some(1), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no 2f+1 spare replicas"), "{e}");
        let e = scale(&config, &spares, 5).unwrap_err().to_string();
        assert!(e.contains("partitions"), "{e}");
        let e = scale(&config, &Spares::default(), 3)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no spare group"), "{e}");
    }
}
