//! Anti-affinity placement for CloudBFT: which physical machine runs each primary candidate,
//! each group replica and each database node.
//!
//! CloudBFT tolerates f Byzantine faults per group only if faults are independent: a machine
//! that fails (or is compromised) must hold at most one member of each group. This crate turns a
//! list of [`Machine`]s (VM slots, failure-domain labels, TPM identity) and a [`Demand`]
//! (f, groups, primary candidates) into a [`Plan`] that
//!
//! - puts the 2f+1 members of every group in distinct failure domains at the chosen
//!   [`Level`] (host by default; rack or zone on request, like TiKV PD's location labels and
//!   isolation level), hence on distinct machines with distinct TPMs;
//! - puts the primary candidates in distinct domains, on hosts that run no group replica
//!   (design decision 10: the paper's 2f+2 machines are one for ordering and 2f+1 for groups);
//! - puts the 2f+1 database nodes in distinct domains;
//! - uses as few machines as it can and spreads the load evenly over them;
//! - is incremental: given the previous plan, adding a group moves nothing already placed and
//!   losing a machine replaces only the members it held ([`plan`] with `previous`);
//! - when no plan exists, says which constraint fails and how many machines of which kind
//!   are missing ([`PlacementError::Infeasible`]).
//!
//! The elastic scaler's decision rule is here too ([`scaler`]): how many groups keep a latency
//! objective, decided from measured load without flapping.
//!
//! Pure and I/O-free: `cloudbft place` reads and writes files around it. [`check`] verifies a
//! plan made elsewhere (`cloudbft place --check`); [`lower_bound`] gives the bound the docs
//! compare plans against.

mod bound;
mod check;
mod planner;
pub mod scaler;

pub use bound::lower_bound;
pub use check::{check, Violation};
pub use planner::plan;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The failure-domain level whose domains must be distinct within a group (and among the
/// primary candidates and among the database nodes).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Distinct physical hosts (machines that share a `host` label are one host).
    #[default]
    Host,
    /// Distinct racks: survives a top-of-rack switch or power feed failure.
    Rack,
    /// Distinct zones (cloud availability zones): survives a zone outage.
    Zone,
}

impl Level {
    /// The label's name, as configuration files spell it.
    pub fn name(self) -> &'static str {
        match self {
            Level::Host => "host",
            Level::Rack => "rack",
            Level::Zone => "zone",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "host" => Ok(Level::Host),
            "rack" => Ok(Level::Rack),
            "zone" => Ok(Level::Zone),
            _ => Err(format!(
                "{s:?} is not an isolation level: use host, rack or zone"
            )),
        }
    }
}

/// A physical machine that can run VMs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    /// The machine's name: what the cluster configuration's `machine` fields say.
    pub id: String,
    /// How many VMs (nodes) it can run.
    pub slots: u32,
    /// Physical host. Two entries with the same host are one physical machine (for example
    /// two hypervisor pools on one server); absent, the machine is its own host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Rack (required on every machine for `isolation = rack`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    /// Zone (required on every machine for `isolation = zone`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The machine's TPM identity (hex SHA-256 of its endorsement key, as `cloudbft usigd
    /// enroll` reports it), when known. Two machines with one TPM are one physical machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<String>,
}

impl Machine {
    /// A machine with `slots` VM slots and no labels (it is its own host).
    pub fn new(id: impl Into<String>, slots: u32) -> Self {
        Machine {
            id: id.into(),
            slots,
            host: None,
            rack: None,
            zone: None,
            tpm: None,
        }
    }

    /// The machine's domain at `level`, if labelled (the host defaults to the machine itself).
    pub fn domain(&self, level: Level) -> Option<&str> {
        match level {
            Level::Host => Some(self.host.as_deref().unwrap_or(&self.id)),
            Level::Rack => self.rack.as_deref(),
            Level::Zone => self.zone.as_deref(),
        }
    }
}

/// What must be placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Demand {
    /// Byzantine faults tolerated per group and among the database nodes.
    pub f: usize,
    /// Groups of 2f+1 replicas.
    pub groups: usize,
    /// Primary candidates (view v's primary is candidate v mod this).
    pub primaries: usize,
    /// Database nodes: 2f+1, as the cluster configuration requires.
    pub db_nodes: usize,
    /// Which failure domains must be distinct.
    #[serde(default)]
    pub isolation: Level,
}

impl Demand {
    /// `groups` groups and `primaries` candidates at host isolation, with 2f+1 database nodes.
    pub fn new(f: usize, groups: usize, primaries: usize) -> Self {
        Demand {
            f,
            groups,
            primaries,
            db_nodes: 2 * f + 1,
            isolation: Level::Host,
        }
    }

    /// The same demand at another isolation level.
    pub fn at(self, isolation: Level) -> Self {
        Demand { isolation, ..self }
    }

    /// Members per group: 2f+1.
    pub fn group_size(&self) -> usize {
        2 * self.f + 1
    }

    /// VMs to place in all.
    pub fn total_vms(&self) -> usize {
        self.groups * self.group_size() + self.primaries + self.db_nodes
    }
}

/// Where everything runs: machine ids.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// `groups[g]`: the machines of group g's members, one per member (2f+1).
    pub groups: Vec<Vec<String>>,
    /// One machine per primary candidate, candidate 0 first.
    pub primaries: Vec<String>,
    /// One machine per database node.
    pub db_nodes: Vec<String>,
}

impl Plan {
    /// How many VMs each used machine runs.
    pub fn load(&self) -> BTreeMap<&str, usize> {
        let mut load = BTreeMap::new();
        let all = self
            .groups
            .iter()
            .flatten()
            .chain(&self.primaries)
            .chain(&self.db_nodes);
        for m in all {
            *load.entry(m.as_str()).or_default() += 1;
        }
        load
    }

    /// Machines that run at least one VM.
    pub fn machines_used(&self) -> usize {
        self.load().len()
    }

    /// Placed VMs whose machine differs from `other`'s for the same role and slot: what an
    /// incremental change moved.
    pub fn moves_from(&self, other: &Plan) -> usize {
        fn diff(a: &[String], b: &[String]) -> usize {
            a.iter().zip(b).filter(|(x, y)| x != y).count()
        }
        let groups: usize = self
            .groups
            .iter()
            .zip(&other.groups)
            .map(|(a, b)| diff(a, b))
            .sum();
        groups + diff(&self.primaries, &other.primaries) + diff(&self.db_nodes, &other.db_nodes)
    }
}

/// A rule of the placement, as errors name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Constraint {
    /// Each group's 2f+1 members in distinct domains, on hosts without a primary candidate.
    GroupSpread,
    /// Primary candidates in distinct domains, on hosts without group replicas.
    PrimarySpread,
    /// The 2f+1 database nodes in distinct domains.
    DbSpread,
}

impl fmt::Display for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Constraint::GroupSpread => {
                "each group's 2f+1 replicas in distinct domains, on hosts without a primary candidate"
            }
            Constraint::PrimarySpread => {
                "primary candidates in distinct domains, on hosts without group replicas"
            }
            Constraint::DbSpread => "the 2f+1 database nodes in distinct domains",
        })
    }
}

/// The machines that would make an infeasible demand feasible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MachineKind {
    /// VM slots per machine.
    pub slots: u32,
    /// Each machine in a domain of its own at this level (a new host, rack or zone).
    pub level: Level,
}

/// Why no plan was made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// The input is inconsistent; `field` names it.
    #[error("{field}: {fix}")]
    Invalid { field: String, fix: String },
    /// The machines cannot hold the demand: `missing` more machines of `kind` would.
    #[error(
        "no placement: {constraint} fails ({detail}); add {missing} machine(s) with {} VM slot(s), each in a {} of its own",
        kind.slots, kind.level
    )]
    Infeasible {
        constraint: Constraint,
        detail: String,
        missing: usize,
        kind: MachineKind,
    },
}

pub(crate) fn invalid(field: impl Into<String>, fix: impl Into<String>) -> PlacementError {
    PlacementError::Invalid {
        field: field.into(),
        fix: fix.into(),
    }
}
