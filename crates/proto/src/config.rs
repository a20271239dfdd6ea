//! The cluster configuration (TOML), validated with errors that name the field and the fix.
//!
//! It is what every node and gateway loads: who the primary candidates, group replicas and
//! database nodes are, where they listen, on which physical machine they run, their public keys
//! and USIG enrollments, and which partitions each group serves.

use crate::crypto::PublicKey;
use crate::ids::{ClientId, ConfigEpoch, GroupId, NodeId, PartitionId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use usig::{Directory, Enrollment, EnrollmentRecord, UsigId};

/// The whole cluster configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Byzantine faults tolerated per group and among the database nodes.
    pub f: usize,
    pub config_epoch: u64,
    /// Number of data partitions, numbered from 0.
    pub partitions: u32,
    /// "soft" or "tpm": what every USIG identity must be enrolled as.
    pub usig: String,
    /// The application every node runs ("bank" or "noop"): its partition rule, transaction
    /// programs and pages must be the same everywhere.
    #[serde(default = "default_application")]
    pub application: String,
    /// Where this configuration epoch's global order continues from (all zero for a new
    /// cluster).
    #[serde(default)]
    pub epoch_start: EpochStart,
    #[serde(rename = "primary")]
    pub primaries: Vec<NodeConfig>,
    #[serde(rename = "group")]
    pub groups: Vec<GroupConfig>,
    #[serde(rename = "replica")]
    pub replicas: Vec<ReplicaConfig>,
    #[serde(rename = "dbnode")]
    pub db_nodes: Vec<DbNodeConfig>,
    #[serde(rename = "client", default)]
    pub clients: Vec<ClientConfig>,
    #[serde(rename = "usig_enrollment", default)]
    pub enrollments: Vec<EnrollmentRecord>,
    /// The operator's public key (hex): the only key that may change the configuration
    /// (docs/protocol.md, "Reconfiguration"). Without it the configuration is fixed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_key: Option<String>,
    /// PEM certificates of the TPM vendors' endorsement-key CAs (roots and intermediates) this
    /// cluster trusts. When set (with usig = "tpm"), every TPM enrollment must carry an EK
    /// certificate that chains to one of them, so every identity is known to live in a genuine
    /// TPM whose endorsement key its TPM identity hashes (docs/usig.md, "Which TPM").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ek_roots: Vec<String>,
}

/// The last global order and the last position on each partition executed before this
/// configuration epoch. A new epoch starts every USIG and every protocol sequence afresh, and
/// continues the database's order from here (docs/protocol.md, "Configuration epochs").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpochStart {
    pub order: u64,
    /// One entry per partition (empty means all zero).
    #[serde(default)]
    pub positions: Vec<u64>,
    /// The newest ordered timestamp of each client, `[client, timestamp]`: a request of an
    /// earlier epoch is a duplicate in this one (set by an online reconfiguration).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clients: Vec<(u64, u64)>,
}

/// Where a USIG identity's warrants of this configuration epoch start: right after the warrant
/// with this counter, whose TPM chain value (hex, empty for soft USIGs) is `chain`. Set at an
/// online reconfiguration from the identity's position report; without it the identity starts
/// at counter 1 of its USIG epoch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsigStart {
    pub counter: u64,
    #[serde(default)]
    pub chain: String,
}

impl UsigStart {
    /// The chain value as bytes (zero for a soft USIG or counter 0), if well formed.
    pub fn chain_bytes(&self) -> Option<[u8; 32]> {
        if self.chain.is_empty() {
            return Some([0; 32]);
        }
        hex::decode(&self.chain).ok()?.try_into().ok()
    }
}

fn is_false(b: &bool) -> bool {
    !b
}

/// A primary candidate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    pub id: u32,
    /// host:port the node listens on.
    pub addr: String,
    /// The physical machine (failure domain) the node runs on.
    pub machine: String,
    pub usig: u64,
    /// The USIG epoch this identity starts the configuration epoch in (written by the launcher
    /// from usigd). Verifiers refuse its warrants of any other epoch; without it they follow the
    /// first epoch they see, which a Byzantine node that reboots its TPM could split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usig_epoch: Option<u64>,
    /// Where its warrants of this epoch start (see [`UsigStart`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usig_start: Option<UsigStart>,
    pub public_key: String,
}

/// A group and the partitions it serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    pub id: u32,
    pub partitions: Vec<PartitionId>,
}

/// A group replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaConfig {
    pub id: u32,
    pub group: u32,
    pub addr: String,
    pub machine: String,
    pub usig: u64,
    /// The USIG epoch this identity starts the configuration epoch in (written by the launcher
    /// from usigd). Verifiers refuse its warrants of any other epoch; without it they follow the
    /// first epoch they see, which a Byzantine node that reboots its TPM could split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usig_epoch: Option<u64>,
    /// Where its warrants of this epoch start (see [`UsigStart`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usig_start: Option<UsigStart>,
    /// Its position was unknown when this epoch began (it did not answer the operator): it
    /// rejoins with a JOIN, like a restarted replica.
    #[serde(default, skip_serializing_if = "is_false")]
    pub rejoin: bool,
    pub public_key: String,
}

/// A database node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DbNodeConfig {
    pub id: u32,
    pub addr: String,
    pub machine: String,
    /// sqlx URL of this node's own database.
    pub database: String,
    pub public_key: String,
}

/// A client identity (a gateway slot or a load driver terminal).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    pub id: u64,
    /// host:port where the process holding this identity receives REPLYs. Several identities
    /// share one address when one gateway or load driver holds them all; replicas send replies
    /// only to configured addresses, never to one a request names.
    pub addr: String,
    pub public_key: String,
}

fn default_application() -> String {
    "bank".into()
}

/// Where client endpoints' identities on authenticated links start: node ids are 32-bit, so no
/// endpoint can be taken for a node ([`Cluster::endpoints`]).
pub const ENDPOINT_LINK_IDS: u64 = 1 << 32;

/// A configuration mistake.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: String,
        source: toml::de::Error,
    },
    #[error("{field}: {fix}")]
    Invalid { field: String, fix: String },
}

fn invalid(field: impl Into<String>, fix: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        fix: fix.into(),
    }
}

/// A validated configuration with the lookups the roles need.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub config: ClusterConfig,
    pub directory: Directory,
    keys: BTreeMap<NodeId, PublicKey>,
    client_keys: BTreeMap<ClientId, PublicKey>,
    partition_group: BTreeMap<PartitionId, GroupId>,
}

impl Cluster {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::parse(&text, &shown)
    }

    /// Parses and validates a configuration's text; `path` names where it came from in errors.
    /// [`Cluster::load`] reads files through it, and the fuzz targets and property tests drive
    /// it directly, so they check exactly what a node accepts.
    pub fn parse(text: &str, path: &str) -> Result<Self, ConfigError> {
        let config = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })?;
        Self::new(config)
    }

    /// Validates a configuration.
    pub fn new(config: ClusterConfig) -> Result<Self, ConfigError> {
        let n = 2 * config.f + 1;
        let directory = Directory::from_records(&config.enrollments)
            .map_err(|e| invalid(format!("usig_enrollment (id {})", e.id), e.to_string()))?;
        let mut keys = BTreeMap::new();
        let mut usigs = BTreeSet::new();
        let usig_nodes = config
            .primaries
            .iter()
            .map(|p| ("primary", p.id, p.usig, &p.public_key))
            .chain(
                config
                    .replicas
                    .iter()
                    .map(|r| ("replica", r.id, r.usig, &r.public_key)),
            );
        for (role, id, usig, key) in usig_nodes {
            check_enrolled(&config, &directory, role, id, usig, &mut usigs)?;
            insert_key(&mut keys, role, id, key)?;
        }
        let starts = config
            .primaries
            .iter()
            .map(|p| ("primary", p.id, &p.usig_start))
            .chain(
                config
                    .replicas
                    .iter()
                    .map(|r| ("replica", r.id, &r.usig_start)),
            );
        for (role, id, start) in starts {
            if start.as_ref().is_some_and(|s| s.chain_bytes().is_none()) {
                return Err(invalid(
                    format!("{role} {id}.usig_start.chain"),
                    "must be 32 bytes in hex (the TPM chain value after the warrant) or empty",
                ));
            }
        }
        if let Some(key) = &config.operator_key {
            if PublicKey::from_hex(key).is_none() {
                return Err(invalid(
                    "operator_key",
                    "must be 32 bytes in hex, as `cloudbft keygen` writes it",
                ));
            }
        }
        for db in &config.db_nodes {
            insert_key(&mut keys, "dbnode", db.id, &db.public_key)?;
        }
        let start = &config.epoch_start;
        if !start.positions.is_empty() && start.positions.len() != config.partitions as usize {
            return Err(invalid(
                "epoch_start.positions",
                format!("needs one entry per partition ({})", config.partitions),
            ));
        }
        let most = crate::limits::MAX_CLIENTS;
        if config.clients.len() > most {
            return Err(invalid(
                "client",
                format!(
                    "names {} clients; at most {most} may be configured (clients are gateways \
                     and application servers: let each serve many users)",
                    config.clients.len()
                ),
            ));
        }
        if start.clients.len() > most {
            return Err(invalid(
                "epoch_start.clients",
                format!(
                    "lists {} clients; at most {most} may be listed",
                    start.clients.len()
                ),
            ));
        }
        if config.primaries.is_empty() {
            return Err(invalid("primary", "add at least one [[primary]] candidate"));
        }
        distinct_machines(
            "primary",
            config.primaries.iter().map(|p| (p.id, &p.machine)),
            None,
        )?;
        check_ek_roots(&config)?;
        let partition_group = check_groups(&config, n, &directory)?;
        check_machine_tpms(&tpm_hosts(&config, &directory))?;
        distinct_machines(
            "dbnode",
            config.db_nodes.iter().map(|d| (d.id, &d.machine)),
            Some(n),
        )?;
        let mut client_keys = BTreeMap::new();
        for c in &config.clients {
            let key = PublicKey::from_hex(&c.public_key).ok_or_else(|| {
                invalid(
                    format!("client {}.public_key", c.id),
                    "must be 32 bytes in hex",
                )
            })?;
            if client_keys.insert(ClientId(c.id), key).is_some() {
                return Err(invalid(format!("client {}.id", c.id), "is used twice"));
            }
        }
        Ok(Cluster {
            config,
            directory,
            keys,
            client_keys,
            partition_group,
        })
    }

    /// A node's public key.
    pub fn node_key(&self, node: NodeId) -> Option<&PublicKey> {
        self.keys.get(&node)
    }

    /// A client's public key.
    pub fn client_key(&self, client: ClientId) -> Option<&PublicKey> {
        self.client_keys.get(&client)
    }

    /// The group serving a partition.
    pub fn group_of(&self, partition: PartitionId) -> Option<GroupId> {
        self.partition_group.get(&partition).copied()
    }

    /// The group of a group replica; none for any other node.
    pub fn group_of_replica(&self, node: NodeId) -> Option<GroupId> {
        self.config
            .replicas
            .iter()
            .find(|r| r.id == node.0)
            .map(|r| GroupId(r.group))
    }

    /// The members of a group, in id order.
    pub fn members(&self, group: GroupId) -> impl Iterator<Item = &ReplicaConfig> {
        self.config
            .replicas
            .iter()
            .filter(move |r| r.group == group.0)
    }

    /// The operator's key, if the configuration may change.
    pub fn operator_key(&self) -> Option<PublicKey> {
        self.config
            .operator_key
            .as_deref()
            .and_then(PublicKey::from_hex)
    }

    /// Where the warrants of `node` (a primary candidate or replica) start in this epoch: the
    /// last counter before them and the TPM chain value after it (0 and zero: counter 1 of its
    /// USIG epoch, a fresh chain).
    pub fn usig_start_of(&self, node: NodeId) -> (u64, [u8; 32]) {
        let primary = self.config.primaries.iter().find(|p| p.id == node.0);
        let replica = self.config.replicas.iter().find(|r| r.id == node.0);
        primary
            .and_then(|p| p.usig_start.as_ref())
            .or(replica.and_then(|r| r.usig_start.as_ref()))
            .map_or((0, [0; 32]), |s| {
                (s.counter, s.chain_bytes().unwrap_or([0; 32]))
            })
    }

    /// Whether `replica` must rejoin this epoch with a JOIN (its position was unknown when the
    /// epoch began).
    pub fn rejoins(&self, replica: NodeId) -> bool {
        self.config
            .replicas
            .iter()
            .any(|r| r.id == replica.0 && r.rejoin)
    }

    /// The configuration epoch.
    pub fn epoch(&self) -> ConfigEpoch {
        ConfigEpoch(self.config.config_epoch)
    }

    /// The listen address of a primary candidate, replica or database node.
    pub fn node_addr(&self, node: NodeId) -> Option<&str> {
        let primaries = self.config.primaries.iter().map(|p| (p.id, &p.addr));
        let replicas = self.config.replicas.iter().map(|r| (r.id, &r.addr));
        let dbs = self.config.db_nodes.iter().map(|d| (d.id, &d.addr));
        primaries
            .chain(replicas)
            .chain(dbs)
            .find(|(id, _)| *id == node.0)
            .map(|(_, addr)| addr.as_str())
    }

    /// Every client endpoint (the one process at a `[[client]]` address, holding every identity
    /// configured there) with its identity on authenticated links: [`ENDPOINT_LINK_IDS`] plus
    /// the address's place among the configuration's client addresses, in order of first
    /// appearance. Successive epochs keep their clients (`reconfig::check_successor`), so an
    /// endpoint has one identity in all of them.
    pub fn endpoints(&self) -> Vec<(&str, u64)> {
        let mut out: Vec<(&str, u64)> = Vec::new();
        for client in &self.config.clients {
            if !out.iter().any(|(addr, _)| *addr == client.addr) {
                out.push((&client.addr, ENDPOINT_LINK_IDS + out.len() as u64));
            }
        }
        out
    }

    /// The link identity of the client endpoint at `addr` (as configured), if there is one.
    pub fn endpoint_identity(&self, addr: &str) -> Option<u64> {
        self.endpoints()
            .into_iter()
            .find(|(at, _)| *at == addr)
            .map(|(_, identity)| identity)
    }

    /// Where a client receives its REPLYs.
    pub fn client_addr(&self, client: ClientId) -> Option<&str> {
        self.config
            .clients
            .iter()
            .find(|c| c.id == client.0)
            .map(|c| c.addr.as_str())
    }

    /// The USIG identity of a primary candidate or replica.
    /// The configured USIG epoch of a primary candidate or replica, if the configuration
    /// pins one.
    pub fn usig_epoch_of(&self, node: NodeId) -> Option<usig::Epoch> {
        let primary = self.config.primaries.iter().find(|p| p.id == node.0);
        let replica = self.config.replicas.iter().find(|r| r.id == node.0);
        primary
            .and_then(|p| p.usig_epoch)
            .or(replica.and_then(|r| r.usig_epoch))
            .map(usig::Epoch)
    }

    pub fn usig_of(&self, node: NodeId) -> Option<UsigId> {
        let primary = self
            .config
            .primaries
            .iter()
            .find(|p| p.id == node.0)
            .map(|p| p.usig);
        let replica = self
            .config
            .replicas
            .iter()
            .find(|r| r.id == node.0)
            .map(|r| r.usig);
        primary.or(replica).map(UsigId)
    }
}

fn insert_key(
    keys: &mut BTreeMap<NodeId, PublicKey>,
    role: &str,
    id: u32,
    hex: &str,
) -> Result<(), ConfigError> {
    let key = PublicKey::from_hex(hex).ok_or_else(|| {
        invalid(
            format!("{role} {id}.public_key"),
            "must be 32 bytes in hex, as `cloudbft keygen` writes it",
        )
    })?;
    if keys.insert(NodeId(id), key).is_some() {
        return Err(invalid(
            format!("{role} {id}.id"),
            "is used by another node",
        ));
    }
    Ok(())
}

fn check_enrolled(
    config: &ClusterConfig,
    directory: &Directory,
    role: &str,
    id: u32,
    usig: u64,
    seen: &mut BTreeSet<u64>,
) -> Result<(), ConfigError> {
    let field = format!("{role} {id}.usig");
    if !seen.insert(usig) {
        return Err(invalid(
            field,
            "is used by another node; every node needs its own USIG identity",
        ));
    }
    let kind_ok = match (directory.get(UsigId(usig)), config.usig.as_str()) {
        (Some(Enrollment::Soft { .. }), "soft") | (Some(Enrollment::Tpm { .. }), "tpm") => true,
        (None, _) => {
            return Err(invalid(
                field,
                format!("usig#{usig} has no [[usig_enrollment]]; add the record `cloudbft usigd enroll` prints"),
            ))
        }
        _ => false,
    };
    if !kind_ok {
        return Err(invalid(
            field,
            format!("usig#{usig} is not enrolled as usig = {:?}", config.usig),
        ));
    }
    Ok(())
}

/// With `ek_roots`, every TPM enrollment's EK certificate must chain to one of them.
fn check_ek_roots(config: &ClusterConfig) -> Result<(), ConfigError> {
    if config.ek_roots.is_empty() || config.usig != "tpm" {
        return Ok(());
    }
    let mut roots = Vec::new();
    for (i, pem) in config.ek_roots.iter().enumerate() {
        roots.extend(usig::ekcert::pem_certificates(pem).map_err(|e| {
            invalid(
                format!("ek_roots[{i}]"),
                format!("{e}: give the CA certificates in PEM"),
            )
        })?);
    }
    for record in &config.enrollments {
        let field = |name: &str| format!("usig_enrollment (id {}).{name}", record.id);
        let evidence = record
            .evidence()
            .map_err(|e| invalid(field(e.field), e.fix))?;
        let Some((ek, cert)) = evidence.and_then(|e| Some((e.ek_public, e.ek_certificate?))) else {
            return Err(invalid(
                field("ek_certificate"),
                "is required because ek_roots is set: enroll on a TPM with an EK certificate \
                 (`cloudbft usigd enroll` copies it from the TPM), or remove ek_roots",
            ));
        };
        usig::ekcert::verify_ek_certificate(&cert, &ek, &roots).map_err(|e| {
            invalid(
                field("ek_certificate"),
                format!("{e}; this TPM is not one ek_roots vouches for"),
            )
        })?;
    }
    Ok(())
}

/// Checks groups: 2f+1 members each on distinct machines (and distinct TPMs), every partition
/// served by exactly one group. Returns the partition → group map.
fn check_groups(
    config: &ClusterConfig,
    n: usize,
    directory: &Directory,
) -> Result<BTreeMap<PartitionId, GroupId>, ConfigError> {
    if config.usig != "soft" && config.usig != "tpm" {
        return Err(invalid("usig", "must be \"soft\" or \"tpm\""));
    }
    let mut partition_group = BTreeMap::new();
    for group in &config.groups {
        for &p in &group.partitions {
            if p >= config.partitions {
                return Err(invalid(
                    format!("group {}.partitions", group.id),
                    format!(
                        "partition {p} does not exist (partitions = {})",
                        config.partitions
                    ),
                ));
            }
            if partition_group.insert(p, GroupId(group.id)).is_some() {
                return Err(invalid(
                    format!("group {}.partitions", group.id),
                    format!("partition {p} is served by two groups; give it to one"),
                ));
            }
        }
        let members: Vec<&ReplicaConfig> = config
            .replicas
            .iter()
            .filter(|r| r.group == group.id)
            .collect();
        distinct_machines(
            &format!("group {} replica", group.id),
            members.iter().map(|r| (r.id, &r.machine)),
            Some(n),
        )?;
        // One TPM shows as one TPM identity (the EK's hash, checked against the EK when the
        // enrollment carries it) and as one attestation key (fixedTPM: it cannot leave it).
        let (mut tpms, mut aks) = (BTreeSet::new(), BTreeSet::new());
        for r in &members {
            if let Some(Enrollment::Tpm {
                tpm_identity,
                ak_public_key,
                ..
            }) = directory.get(UsigId(r.usig))
            {
                if !tpms.insert(*tpm_identity) || !aks.insert(*ak_public_key) {
                    return Err(invalid(
                        format!("replica {}.usig", r.id),
                        "shares a TPM with another member of its group: members must be on distinct physical machines",
                    ));
                }
            }
        }
    }
    if let Some(missing) = (0..config.partitions).find(|p| !partition_group.contains_key(p)) {
        return Err(invalid(
            "group",
            format!("partition {missing} is served by no group; add it to one group's partitions"),
        ));
    }
    if let Some(r) = config
        .replicas
        .iter()
        .find(|r| !config.groups.iter().any(|g| g.id == r.group))
    {
        return Err(invalid(
            format!("replica {}.group", r.id),
            format!("group {} is not defined", r.group),
        ));
    }
    Ok(partition_group)
}

/// A node whose USIG identity lives in a TPM: its role, id, the machine the configuration names
/// and the TPM its enrollment proves (the endorsement key's hash).
pub(crate) type TpmHost = (&'static str, u32, String, [u8; 32]);

/// Every candidate and replica of `config` whose USIG identity is enrolled on a TPM.
pub(crate) fn tpm_hosts(config: &ClusterConfig, directory: &Directory) -> Vec<TpmHost> {
    let nodes = config
        .primaries
        .iter()
        .map(|p| ("primary", p.id, &p.machine, p.usig))
        .chain(
            config
                .replicas
                .iter()
                .map(|r| ("replica", r.id, &r.machine, r.usig)),
        );
    nodes
        .filter_map(
            |(role, id, machine, usig)| match directory.get(UsigId(usig)) {
                Some(Enrollment::Tpm { tpm_identity, .. }) => {
                    Some((role, id, machine.clone(), *tpm_identity))
                }
                _ => None,
            },
        )
        .collect()
}

/// Checks that machine names and TPMs correspond one to one: the configuration has no machine
/// inventory of its own, and with TPM-backed USIGs a machine is known by its TPM. A machine name
/// used with two TPMs, or one TPM under two machine names, names a machine the evidence does
/// not know (a new TPM is a new machine: it gets a new name). The first host of each name and
/// TPM is the reference, so a successor's hosts listed after its predecessor's are checked
/// against what the running epoch knows.
pub(crate) fn check_machine_tpms(hosts: &[TpmHost]) -> Result<(), ConfigError> {
    let short = |tpm: &[u8; 32]| hex::encode(&tpm[..4]);
    let mut by_machine: BTreeMap<&str, &TpmHost> = BTreeMap::new();
    let mut by_tpm: BTreeMap<[u8; 32], &TpmHost> = BTreeMap::new();
    for host in hosts {
        let (role, id, machine, tpm) = host;
        let known = *by_machine.entry(machine.as_str()).or_insert(host);
        if known.3 != *tpm {
            return Err(invalid(
                format!("{role} {id}.machine"),
                format!(
                    "{machine} is known as the machine of TPM {} ({} {}), but this node's USIG \
                     identity is enrolled on TPM {}: the machine is unknown under that name; \
                     name the machine its TPM is in (a new TPM is a new machine)",
                    short(&known.3),
                    known.0,
                    known.1,
                    short(tpm)
                ),
            ));
        }
        let known = *by_tpm.entry(*tpm).or_insert(host);
        if known.2 != *machine {
            return Err(invalid(
                format!("{role} {id}.machine"),
                format!(
                    "says {machine}, but its USIG identity is enrolled on TPM {}, which is \
                     machine {} ({} {}): one TPM is one machine",
                    short(tpm),
                    known.2,
                    known.0,
                    known.1
                ),
            ));
        }
    }
    Ok(())
}

/// Checks that members are on distinct machines, and that there are exactly `n` if given.
fn distinct_machines<'a>(
    what: &str,
    members: impl Iterator<Item = (u32, &'a String)>,
    n: Option<usize>,
) -> Result<(), ConfigError> {
    let members: Vec<_> = members.collect();
    if let Some(n) = n.filter(|&n| members.len() != n) {
        return Err(invalid(
            what,
            format!(
                "has {} members; with f it needs exactly 2f+1 = {n}",
                members.len()
            ),
        ));
    }
    let mut machines = BTreeSet::new();
    for (id, machine) in members {
        if !machines.insert(machine) {
            return Err(invalid(
                format!("{what} {id}.machine"),
                format!("{machine} already hosts another member: place each member on a distinct machine"),
            ));
        }
    }
    Ok(())
}
