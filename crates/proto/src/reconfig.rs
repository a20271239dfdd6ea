//! Online reconfiguration (docs/protocol.md, "Reconfiguration"): the operator's RECONFIGURE
//! that the primary orders as the last slot of a configuration epoch, the replicas' EPOCH-CLOSE
//! that certifies where the epoch ended, the position reports that say where every USIG
//! sequence continues, and the operator's CONFIGURE that starts the next epoch. Also the rules
//! every node applies to decide whether a configuration may follow another one.

use crate::config::{
    check_machine_tpms, tpm_hosts, Cluster, ClusterConfig, ConfigError, EpochStart, ReplicaConfig,
    UsigStart,
};
use crate::crypto::{PublicKey, Signature, SigningKey};
use crate::ids::{ClientId, ConfigEpoch, NodeId};
use crate::message::canonical;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use usig::{MessageDigest, UniqueWarrant};

/// The operator asks the cluster to end configuration epoch `config_epoch` and continue in
/// `next` (the next configuration's shape, TOML): ordered by the primary as the epoch's last
/// slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconfigure {
    pub config_epoch: ConfigEpoch,
    pub next: String,
    /// Where the operator listens (host:port): replicas send it their EPOCH-CLOSEs. Signed, so
    /// nobody else can point nodes at an address.
    pub reply_to: String,
    /// The operator's signature.
    pub signature: Signature,
}

crate::node_signed!(Reconfigure, b"cloudbft/reconfigure/v1", |m| (
    m.config_epoch,
    &m.next,
    &m.reply_to
));

/// Why a RECONFIGURE or CONFIGURE is refused.
#[derive(Debug, thiserror::Error)]
pub enum ReconfigError {
    #[error("this configuration names no operator_key: it cannot change online")]
    NoOperator,
    #[error("not signed by the operator key of the configuration")]
    Signature,
    #[error("for configuration epoch {got}, but this node is in epoch {current}")]
    Epoch { current: u64, got: u64 },
    #[error("the next configuration does not parse: {0}")]
    Parse(String),
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    #[error("the certificate is not f+1 matching EPOCH-CLOSEs of every group at the RECONFIGURE's slot: {0}")]
    Certificate(String),
    #[error("node {node}'s position report does not verify: {why}")]
    Position { node: u32, why: String },
}

fn invalid(field: impl Into<String>, fix: impl Into<String>) -> ReconfigError {
    ReconfigError::Invalid(ConfigError::Invalid {
        field: field.into(),
        fix: fix.into(),
    })
}

impl Reconfigure {
    /// A RECONFIGURE of `current`'s epoch towards `next`, signed by the operator, who listens
    /// at `reply_to`.
    pub fn new(
        current: ConfigEpoch,
        next: &ClusterConfig,
        reply_to: &str,
        operator: &SigningKey,
    ) -> Self {
        Reconfigure {
            config_epoch: current,
            next: toml::to_string(next).expect("a configuration serializes to TOML"),
            reply_to: reply_to.to_owned(),
            signature: Signature([0; 64]),
        }
        .sign(operator)
    }

    /// Checks it against the cluster's current configuration: the operator's signature, the
    /// epoch, and that `next` is a valid successor. Returns the next configuration's shape.
    pub fn check(&self, cluster: &Cluster) -> Result<ClusterConfig, ReconfigError> {
        let key = cluster.operator_key().ok_or(ReconfigError::NoOperator)?;
        if !self.verify(&key) {
            return Err(ReconfigError::Signature);
        }
        if self.config_epoch != cluster.epoch() {
            return Err(ReconfigError::Epoch {
                current: cluster.epoch().0,
                got: self.config_epoch.0,
            });
        }
        let next: ClusterConfig =
            toml::from_str(&self.next).map_err(|e| ReconfigError::Parse(e.to_string()))?;
        check_successor(&cluster.config, &next)?;
        Ok(next)
    }
}

/// Checks that `next` may follow `prev` (docs/protocol.md, "Valid successors"): same fault
/// threshold, partitions, application, USIG mode, primary candidates, database nodes, clients
/// and operator; the next epoch number; at least one group; a configuration that is valid on
/// its own (every partition served by one group, 2f+1 members per group on distinct machines
/// and TPMs, enrolled identities, machine names that match their TPMs); and no machine name or
/// TPM that `prev` knows otherwise.
pub fn check_successor(prev: &ClusterConfig, next: &ClusterConfig) -> Result<(), ReconfigError> {
    if next.config_epoch != prev.config_epoch + 1 {
        return Err(invalid(
            "config_epoch",
            format!(
                "must be {} (the epoch after {})",
                prev.config_epoch + 1,
                prev.config_epoch
            ),
        ));
    }
    let checked = descendant(prev, next)?;
    // A machine is known by its TPM across the change too: a node of `next` may not name a
    // machine that the running epoch knows with another TPM, nor a known TPM under another
    // name.
    if let Ok(directory) = usig::Directory::from_records(&prev.enrollments) {
        let mut hosts = tpm_hosts(prev, &directory);
        hosts.extend(tpm_hosts(next, &checked.directory));
        check_machine_tpms(&hosts)?;
    }
    Ok(())
}

/// The rules of [`check_successor`] that hold across any number of epochs, for a client that
/// missed some: what never changes online, at least one group, a configuration valid on its own,
/// and replica ids that keep their identity, key and machine.
pub fn check_descendant(prev: &ClusterConfig, next: &ClusterConfig) -> Result<(), ReconfigError> {
    if next.config_epoch <= prev.config_epoch {
        return Err(invalid(
            "config_epoch",
            format!("must be after {}", prev.config_epoch),
        ));
    }
    descendant(prev, next).map(drop)
}

fn descendant(prev: &ClusterConfig, next: &ClusterConfig) -> Result<Cluster, ReconfigError> {
    let same = |field: &str, equal: bool| {
        if equal {
            Ok(())
        } else {
            Err(invalid(
                field,
                "cannot change online: start a new cluster (or a new epoch by a whole-cluster \
                 restart) to change it",
            ))
        }
    };
    same("f", prev.f == next.f)?;
    same("partitions", prev.partitions == next.partitions)?;
    same("application", prev.application == next.application)?;
    same("usig", prev.usig == next.usig)?;
    same("dbnode", prev.db_nodes == next.db_nodes)?;
    same("client", prev.clients == next.clients)?;
    same("operator_key", prev.operator_key == next.operator_key)?;
    same("ek_roots", prev.ek_roots == next.ek_roots)?;
    let candidates = |c: &ClusterConfig| -> BTreeSet<(u32, String, String, u64, String)> {
        c.primaries
            .iter()
            .map(|p| {
                (
                    p.id,
                    p.addr.clone(),
                    p.machine.clone(),
                    p.usig,
                    p.public_key.clone(),
                )
            })
            .collect()
    };
    same("primary", candidates(prev) == candidates(next))?;
    if next.groups.is_empty() {
        return Err(invalid(
            "group",
            "removes the last group: at least one group must serve the partitions",
        ));
    }
    let kept: BTreeMap<u32, &crate::config::ReplicaConfig> =
        prev.replicas.iter().map(|r| (r.id, r)).collect();
    for r in &next.replicas {
        if let Some(old) = kept.get(&r.id) {
            if old.usig != r.usig || old.public_key != r.public_key || old.machine != r.machine {
                return Err(invalid(
                    format!("replica {}", r.id),
                    "keeps its id but changes its USIG identity, key or machine: a new VM is a \
                     new replica id",
                ));
            }
        }
    }
    Ok(Cluster::new(next.clone())?)
}

/// The next configuration's shape with replica `old` of `group` replaced by `new` (a VM identity
/// serving in no group, with its USIG `enrollment` if the configuration lacks it), when a machine
/// is retired or failed: the group keeps its id and partitions, `new` starts the next epoch from
/// the configuration and the certified order book with its own fresh USIG state (as a new
/// group's members do), and `old` finishes the closed epoch and stops. `new` must be on a
/// machine the group does not use, the replaced member's included (it is the one leaving), and
/// on a TPM none of the remaining members use; the result is checked as a successor of `prev`.
pub fn replace_member(
    prev: &ClusterConfig,
    group: u32,
    old: u32,
    new: ReplicaConfig,
    enrollment: Option<usig::EnrollmentRecord>,
) -> Result<ClusterConfig, ReconfigError> {
    let field = format!("group {group}");
    if !prev.groups.iter().any(|g| g.id == group) {
        return Err(invalid(
            field,
            format!(
                "does not exist (groups: {:?})",
                prev.groups.iter().map(|g| g.id).collect::<Vec<_>>()
            ),
        ));
    }
    let members: Vec<&ReplicaConfig> = prev.replicas.iter().filter(|r| r.group == group).collect();
    let listed = || {
        members
            .iter()
            .map(|r| format!("{} on {}", r.id, r.machine))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !members.iter().any(|r| r.id == old) {
        return Err(invalid(
            format!("replica {old}"),
            format!("is not a member of group {group} (members: {})", listed()),
        ));
    }
    if let Some(serving) = prev.replicas.iter().find(|r| r.id == new.id) {
        return Err(invalid(
            format!("replica {}", new.id),
            format!(
                "already serves in group {}: a replacement is a replica that serves in no group",
                serving.group
            ),
        ));
    }
    if let Some(host) = members.iter().find(|r| r.machine == new.machine) {
        let why = if host.id == old {
            "is the replaced member's machine (the one being retired)".to_string()
        } else {
            format!("already hosts member {} of the group", host.id)
        };
        return Err(invalid(
            format!("replica {}.machine", new.id),
            format!(
                "{} {why}: the members of a group must be on distinct machines; pick a \
                 replacement on a machine group {group} does not use (members: {})",
                new.machine,
                listed()
            ),
        ));
    }
    let mut next = prev.clone();
    next.config_epoch += 1;
    let gone = members
        .iter()
        .find(|r| r.id == old)
        .map(|r| r.usig)
        .expect("a member");
    next.enrollments.retain(|e| e.id != gone);
    if let Some(e) = enrollment {
        if !next.enrollments.iter().any(|x| x.id == e.id) {
            next.enrollments.push(e);
        }
    }
    // In the replaced member's place.
    let slot = next
        .replicas
        .iter_mut()
        .find(|r| r.id == old)
        .expect("a member");
    *slot = ReplicaConfig {
        group,
        rejoin: false,
        ..new
    };
    check_successor(prev, &next)?;
    Ok(next)
}

/// Whether two configurations have the same shape: everything but where the epoch starts
/// (`epoch_start`, the identities' `usig_start` and `rejoin`) and the order of the primary
/// candidates (the next epoch lists the one that ordered the RECONFIGURE first).
pub fn same_shape(a: &ClusterConfig, b: &ClusterConfig) -> bool {
    shape(a) == shape(b)
}

fn shape(c: &ClusterConfig) -> ClusterConfig {
    let mut c = c.clone();
    c.epoch_start = EpochStart::default();
    for p in &mut c.primaries {
        p.usig_start = None;
    }
    for r in &mut c.replicas {
        r.usig_start = None;
        r.rejoin = false;
    }
    c.primaries.sort_by_key(|p| p.id);
    c
}

/// What changes from `prev` to `next`, one line each, for people: groups added and removed,
/// members replaced, partitions moved.
pub fn describe(prev: &ClusterConfig, next: &ClusterConfig) -> Vec<String> {
    let groups = |c: &ClusterConfig| -> BTreeMap<u32, Vec<u32>> {
        c.groups
            .iter()
            .map(|g| (g.id, g.partitions.clone()))
            .collect()
    };
    let members = |c: &ClusterConfig, g: u32| -> Vec<String> {
        c.replicas
            .iter()
            .filter(|r| r.group == g)
            .map(|r| format!("{} on {}", r.id, r.machine))
            .collect()
    };
    let (before, after) = (groups(prev), groups(next));
    let mut lines = Vec::new();
    for (g, partitions) in &after {
        if !before.contains_key(g) {
            lines.push(format!(
                "add group {g} (replicas {}) serving partitions {partitions:?}",
                members(next, *g).join(", ")
            ));
        }
    }
    for g in before.keys().filter(|g| !after.contains_key(g)) {
        lines.push(format!(
            "remove group {g} (replicas {})",
            members(prev, *g).join(", ")
        ));
    }
    for (g, partitions) in &after {
        let Some(old) = before.get(g) else { continue };
        let old_members: BTreeSet<String> = members(prev, *g).into_iter().collect();
        let new_members: BTreeSet<String> = members(next, *g).into_iter().collect();
        for (gone, came) in old_members
            .difference(&new_members)
            .zip(new_members.difference(&old_members))
        {
            lines.push(format!("group {g}: replace replica {gone} by {came}"));
        }
        let gained: Vec<u32> = partitions
            .iter()
            .filter(|p| !old.contains(p))
            .copied()
            .collect();
        if !gained.is_empty() && before.contains_key(g) {
            lines.push(format!("move partitions {gained:?} to group {g}"));
        }
    }
    if lines.is_empty() {
        lines.push("no change of groups, members or partitions".into());
    }
    lines
}

/// A replica's word that its group decided every slot of epoch `config_epoch` up to `slot`
/// (the RECONFIGURE's) on the history with running digest `chain`, and that each execution there
/// has f+1 matching results; `book` is the order book's digest after it. f+1 matching ones of
/// every group certify where the epoch ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochClose {
    pub replica: NodeId,
    pub config_epoch: ConfigEpoch,
    /// The view of the history that ended (its primary ordered the RECONFIGURE, or the cut that
    /// kept it): the next epoch starts with that candidate as primary.
    pub view: crate::ids::View,
    pub slot: u64,
    pub chain: MessageDigest,
    pub book: MessageDigest,
    pub signature: Signature,
}

crate::node_signed!(EpochClose, b"cloudbft/epoch-close/v1", |m| (
    m.replica,
    m.config_epoch,
    m.view,
    m.slot,
    m.chain.0,
    m.book.0
));

impl EpochClose {
    /// What it vouches for, to compare EPOCH-CLOSEs.
    pub fn point(&self) -> (crate::ids::View, u64, MessageDigest, MessageDigest) {
        (self.view, self.slot, self.chain, self.book)
    }
}

/// Checks that `closes` hold f+1 valid EPOCH-CLOSEs of every group of `cluster` for one point;
/// returns that point (slot, running digest, book digest).
pub fn certified(
    cluster: &Cluster,
    closes: &[EpochClose],
) -> Result<(crate::ids::View, u64, MessageDigest, MessageDigest), ReconfigError> {
    let bad = |why: &str| ReconfigError::Certificate(why.into());
    let first = closes.first().ok_or_else(|| bad("it is empty"))?;
    let point = first.point();
    let mut by_group: BTreeMap<u32, BTreeSet<NodeId>> = BTreeMap::new();
    for c in closes {
        let group = cluster
            .group_of_replica(c.replica)
            .ok_or_else(|| bad("an EPOCH-CLOSE is from no replica of the epoch"))?;
        let key = cluster
            .node_key(c.replica)
            .ok_or_else(|| bad("an EPOCH-CLOSE is from an unknown node"))?;
        if c.config_epoch != cluster.epoch() || !c.verify(key) {
            return Err(bad("an EPOCH-CLOSE does not verify for this epoch"));
        }
        if c.point() != point {
            return Err(bad("the EPOCH-CLOSEs do not match"));
        }
        by_group.entry(group.0).or_default().insert(c.replica);
    }
    let quorum = cluster.config.f + 1;
    for g in &cluster.config.groups {
        if by_group.get(&g.id).map_or(0, BTreeSet::len) < quorum {
            return Err(bad(&format!("group {} has fewer than f+1", g.id)));
        }
    }
    Ok(point)
}

/// Keeps `close` as its replica's latest EPOCH-CLOSE in `closes` if it is signed by a node of
/// `cluster` for its epoch, and returns the certificate (f+1 matching ones of every group) once
/// its point has one: how an operator collects them, in `cloudbft` and in the simulation.
pub fn collect_close(
    cluster: &Cluster,
    closes: &mut BTreeMap<NodeId, EpochClose>,
    close: EpochClose,
) -> Option<Vec<EpochClose>> {
    let valid = cluster
        .node_key(close.replica)
        .is_some_and(|k| close.verify(k));
    if !valid || close.config_epoch != cluster.epoch() {
        return None;
    }
    let point = close.point();
    closes.insert(close.replica, close);
    let matching: Vec<EpochClose> = closes
        .values()
        .filter(|c| c.point() == point)
        .cloned()
        .collect();
    certified(cluster, &matching).ok().map(|_| matching)
}

/// The operator's next configuration, with the certificate of where the previous epoch ended and
/// the order book there, so that every node can check the start it is given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Configure {
    /// The full configuration of the next epoch (TOML).
    pub config: String,
    /// f+1 matching EPOCH-CLOSEs of every group of the previous epoch.
    pub certificate: Vec<EpochClose>,
    /// The encoded order book the certificate names.
    pub book: Vec<u8>,
    /// Where the operator listens: nodes acknowledge the new epoch there (EPOCH-STARTED).
    pub reply_to: String,
    /// The operator's signature.
    pub signature: Signature,
}

crate::node_signed!(Configure, b"cloudbft/configure/v1", |m| (
    &m.config,
    &m.certificate,
    &m.book,
    &m.reply_to
));

/// A node runs configuration epoch `config_epoch` (its answer to the CONFIGURE that started it,
/// at the operator's address).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochStarted {
    pub node: NodeId,
    pub config_epoch: ConfigEpoch,
    pub signature: Signature,
}

crate::node_signed!(EpochStarted, b"cloudbft/epoch-started/v1", |m| (
    m.node,
    m.config_epoch
));

/// The part of the order book the next epoch starts from: the last order and position of each
/// partition, and the newest ordered timestamp of each client.
pub type BookStart = EpochStart;

impl Configure {
    /// Checks a CONFIGURE against the epoch it ends (`current`), the RECONFIGURE's next shape
    /// (`shape`, when the node processed the RECONFIGURE; a node that did not still checks the
    /// successor rules and the certificate), and `start`, the book start the certificate's book
    /// digest decodes to (the caller decodes the book with its own rules). Returns the next
    /// configuration.
    pub fn check(
        &self,
        current: &Cluster,
        shape: Option<&ClusterConfig>,
        start: impl FnOnce(&[u8]) -> Option<BookStart>,
    ) -> Result<ClusterConfig, ReconfigError> {
        let key = current.operator_key().ok_or(ReconfigError::NoOperator)?;
        if !self.verify(&key) {
            return Err(ReconfigError::Signature);
        }
        let next: ClusterConfig =
            toml::from_str(&self.config).map_err(|e| ReconfigError::Parse(e.to_string()))?;
        check_successor(&current.config, &next)?;
        if shape.is_some_and(|s| !same_shape(s, &next)) {
            return Err(invalid(
                "config",
                "differs from the configuration the ordered RECONFIGURE named",
            ));
        }
        let (_, _, _, book) = certified(current, &self.certificate)?;
        if MessageDigest::of(&self.book) != book {
            return Err(ReconfigError::Certificate(
                "the book does not hash to the certified digest".into(),
            ));
        }
        let from_book = start(&self.book)
            .ok_or_else(|| ReconfigError::Certificate("the book does not decode".into()))?;
        if from_book != next.epoch_start {
            return Err(invalid(
                "epoch_start",
                "is not the certified end of the previous epoch",
            ));
        }
        Ok(next)
    }
}

impl Configure {
    /// Checks a CONFIGURE at a node that was not in the previous epoch and waits to join
    /// (`cloudbft replica --await-epoch`, a spare of the simulation): it knows only the shape it
    /// was started with, so it checks the operator's signature with the shape's operator key, the
    /// epoch and the shape. Returns the configuration to start.
    pub fn check_as_newcomer(&self, shape: &Cluster) -> Result<ClusterConfig, ReconfigError> {
        let key = shape.operator_key().ok_or(ReconfigError::NoOperator)?;
        if !self.verify(&key) {
            return Err(ReconfigError::Signature);
        }
        let next: ClusterConfig =
            toml::from_str(&self.config).map_err(|e| ReconfigError::Parse(e.to_string()))?;
        if next.config_epoch != shape.config.config_epoch || !same_shape(&shape.config, &next) {
            return Err(ReconfigError::Epoch {
                current: shape.config.config_epoch,
                got: next.config_epoch,
            });
        }
        Ok(next)
    }
}

/// The operator asks a node where its USIG sequence stands, once the epoch is closed: the node
/// then warrants nothing more in this epoch and answers at `reply_to`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PositionRequest {
    pub config_epoch: ConfigEpoch,
    pub reply_to: String,
    /// The operator's signature.
    pub signature: Signature,
}

crate::node_signed!(PositionRequest, b"cloudbft/position-request/v1", |m| (
    m.config_epoch,
    &m.reply_to
));

/// A node's last warrant of the closed epoch (and the digest of what it warranted), after which
/// it warrants nothing until the next epoch: where its sequence continues. A replica that holds
/// the order book at the end of the epoch sends it along (the operator checks it against the
/// certificate).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PositionReport {
    pub node: NodeId,
    pub config_epoch: ConfigEpoch,
    /// None: it warranted nothing yet.
    pub last: Option<(MessageDigest, UniqueWarrant)>,
    pub book: Option<Vec<u8>>,
    pub signature: Signature,
}

crate::node_signed!(PositionReport, b"cloudbft/position-report/v1", |m| (
    m.node,
    m.config_epoch,
    &m.last,
    &m.book
));

/// A client (gateway) asks a node for its current configuration; the answer is the CONFIGURE
/// that started it, whose operator signature makes one answer enough.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigRequest {
    pub client: ClientId,
    /// The epoch the client knows: nodes answer only if theirs is later.
    pub config_epoch: ConfigEpoch,
    pub signature: Signature,
}

crate::node_signed!(ConfigRequest, b"cloudbft/config-request/v1", |m| (
    m.client,
    m.config_epoch
));

/// Where the USIG sequences of a reconfiguration's nodes continue, by node id: the start after
/// the node's last warrant (none: counter 1) and its USIG epoch.
pub type Positions = BTreeMap<u32, (Option<UsigStart>, u64)>;

/// The next epoch's configuration as the operator writes it (docs/protocol.md,
/// "Reconfiguration", step 3): the shape `next`, where it starts (`start`, the certified book's
/// epoch start), where every identity's USIG sequence continues (from its position report; a
/// replica of `current` without one rejoins with a JOIN), and `closing_primary` (the primary of
/// the certificate's view, which ordered the RECONFIGURE or the cut that kept it) first among
/// the candidates, so that it orders view 0 of the new epoch. Returns the configuration, the
/// replicas that rejoin and every reported position (removed replicas included: re-added later,
/// they continue from there). One function for every operator (the `cloudbft` commands and the
/// simulation's), so that what is tested is what runs.
pub fn next_configuration(
    current: &Cluster,
    mut next: ClusterConfig,
    reports: &BTreeMap<NodeId, PositionReport>,
    start: EpochStart,
    closing_primary: NodeId,
) -> Result<(ClusterConfig, Vec<u32>, Positions), ReconfigError> {
    next.epoch_start = start;
    let position = |id: u32,
                    previous: Option<&UsigStart>|
     -> Result<Option<(UsigStart, u64)>, ReconfigError> {
        let Some(report) = reports.get(&NodeId(id)) else {
            return Ok(None);
        };
        let Some((digest, ui)) = &report.last else {
            // Nothing warranted since the epoch began: it continues where the epoch started it.
            let epoch = current.usig_epoch_of(NodeId(id)).map_or(0, |e| e.0);
            return Ok(Some((previous.cloned().unwrap_or_default(), epoch)));
        };
        let bad = |why: String| ReconfigError::Position { node: id, why };
        let usig = current
            .usig_of(NodeId(id))
            .ok_or_else(|| bad("it has no USIG identity".into()))?;
        let link = current
            .directory
            .verify_digest(usig, digest, ui)
            .map_err(|e| bad(e.to_string()))?;
        let chain = link.map(|l| hex::encode(l.next)).unwrap_or_default();
        Ok(Some((
            UsigStart {
                counter: ui.counter,
                chain,
            },
            ui.epoch.0,
        )))
    };
    let mut positions = Positions::new();
    for r in &current.config.replicas {
        if let Some((start, epoch)) = position(r.id, r.usig_start.as_ref())? {
            positions.insert(r.id, ((start.counter > 0).then_some(start), epoch));
        }
    }
    let continuing: BTreeSet<u32> = current.config.replicas.iter().map(|r| r.id).collect();
    let mut rejoining = Vec::new();
    for r in &mut next.replicas {
        let previous = current
            .config
            .replicas
            .iter()
            .find(|c| c.id == r.id)
            .and_then(|c| c.usig_start.as_ref());
        match position(r.id, previous.or(r.usig_start.as_ref()))? {
            Some((start, epoch)) => {
                r.usig_start = (start.counter > 0).then_some(start);
                r.usig_epoch = Some(epoch);
                r.rejoin = false;
            }
            None if continuing.contains(&r.id) => {
                r.usig_start = None;
                r.rejoin = true;
                rejoining.push(r.id);
            }
            // A replica that joins in this epoch: its own start (fresh, or where it stopped
            // when it was removed before).
            None => r.rejoin = false,
        }
    }
    for p in &mut next.primaries {
        let previous = current
            .config
            .primaries
            .iter()
            .find(|c| c.id == p.id)
            .and_then(|c| c.usig_start.as_ref());
        if let Some((start, epoch)) = position(p.id, previous)? {
            p.usig_start = (start.counter > 0).then_some(start);
            p.usig_epoch = Some(epoch);
        }
    }
    if let Some(i) = next
        .primaries
        .iter()
        .position(|p| p.id == closing_primary.0)
    {
        next.primaries.rotate_left(i);
    }
    check_successor(&current.config, &next)?;
    Ok((next, rejoining, positions))
}
