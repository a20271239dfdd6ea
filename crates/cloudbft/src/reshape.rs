//! The next configuration's shape for the operator's commands (`cloudbft scale`, `group add`,
//! `group remove`, `partition move`): which replicas form a new group, where partitions go.
//! Pure functions over the configuration and the spare replicas; the protocol checks the
//! result again (`proto::reconfig::check_successor`).
//!
//! Spare replicas are VM identities that exist (keys, USIG enrollments, a usigd identity on
//! their machine) but serve in no group: `cloudbft keygen --max-groups` makes them for the
//! groups beyond `--groups`, and a removed group's replicas become spares again, with the
//! position their USIG sequence continues from.

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

    /// The spare groups: complete sets of 2f+1 spares made for one group id not in use.
    fn groups(&self, config: &ClusterConfig) -> BTreeMap<u32, Vec<&ReplicaConfig>> {
        let used: BTreeSet<u32> = config.groups.iter().map(|g| g.id).collect();
        let mut by_group: BTreeMap<u32, Vec<&ReplicaConfig>> = BTreeMap::new();
        for r in &self.replicas {
            if !used.contains(&r.group) {
                by_group.entry(r.group).or_default().push(r);
            }
        }
        by_group.retain(|_, members| members.len() == 2 * config.f + 1);
        by_group
    }

    /// Moves a removed group's replicas here (their USIG sequences continue where the
    /// configuration that removed them said), and takes the replicas now in `config` out.
    pub fn update(&mut self, previous: &ClusterConfig, config: &ClusterConfig) {
        let serving: BTreeSet<u32> = config.replicas.iter().map(|r| r.id).collect();
        self.replicas.retain(|r| !serving.contains(&r.id));
        let enrolled: BTreeSet<u64> = self.enrollments.iter().map(|e| e.id).collect();
        for r in previous
            .replicas
            .iter()
            .filter(|r| !serving.contains(&r.id))
        {
            self.replicas.retain(|s| s.id != r.id);
            self.replicas.push(r.clone());
            if !enrolled.contains(&r.usig) {
                if let Some(e) = previous.enrollments.iter().find(|e| e.id == r.usig) {
                    self.enrollments.push(e.clone());
                }
            }
        }
        self.replicas.sort_by_key(|r| r.id);
    }
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
            },
        )
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
        spares.update(&config, &three);
        assert!(spares.replicas.iter().all(|r| r.group == 3));
        let one = scale(&three, &spares, 1).unwrap();
        check_successor(&three, &one).unwrap();
        assert_eq!(serving(&one), vec![(0, vec![0, 1, 2, 3])]);
        spares.update(&three, &one);
        assert_eq!(
            spares.groups(&one).len(),
            3,
            "groups 1, 2 and 3 are spare again"
        );
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
