//! `cloudbft keygen`: keys, USIG enrollments and the cluster configuration for a cluster laid out
//! on the minimum number of machines (the paper's 2f+2, plus one per further primary candidate):
//! the first primary candidate alone on machine m0, on each of the machines m1..m(2f+1) one
//! replica of every group and one database node, and each further candidate alone on a machine
//! of its own (m(2f+2), ...), so that a crashed machine takes at most one candidate. Spare
//! machines (`--spare-machines`) come after those, each with a spare replica for every group:
//! what `cloudbft group replace` swaps a member of a failed or retired machine for.

use crate::reshape::Spares;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use proto::config::{
    ClientConfig, Cluster, ClusterConfig, DbNodeConfig, GroupConfig, NodeConfig, ReplicaConfig,
};
use proto::SigningKey;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use usig::daemon::config::{IdentityConfig, TpmConfig};
use usig::daemon::server::UsigdBackend;
use usig::daemon::UsigdConfig;
use usig::tpm::swtpm::Swtpm;
use usig::UsigId;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum UsigMode {
    /// Ed25519 keys in usigd (development only).
    Soft,
    /// A TPM per machine: a software TPM (swtpm) per simulated machine here.
    Tpm,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum DbKind {
    Sqlite,
    Postgres,
}

#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// Directory for keys, usigd state and cluster.toml (created).
    #[arg(long)]
    pub out: PathBuf,
    /// Number of groups of 2f+1 replicas.
    #[arg(long, default_value_t = 2)]
    pub groups: u32,
    /// Groups the cluster may grow to online: identities (keys, USIG enrollments, usigd
    /// identities on their machines) for the groups beyond --groups are written to spares.toml
    /// for `cloudbft group add` and `cloudbft scale` (default: --groups, no spares).
    #[arg(long)]
    pub max_groups: Option<u32>,
    /// Number of data partitions (spread over the groups round-robin).
    #[arg(long, default_value_t = 4)]
    pub partitions: u32,
    /// Machines held in reserve, each with a spare replica identity for every group up to
    /// --max-groups (in spares.toml): `cloudbft group replace` moves a member of a failed or
    /// retired machine to one of them.
    #[arg(long, default_value_t = 0)]
    pub spare_machines: u32,
    #[command(flatten)]
    pub shape: ShapeArgs,
    /// First TCP port; nodes listen on consecutive ports from here on 127.0.0.1.
    #[arg(long, default_value_t = 7100)]
    pub base_port: u16,
    /// Client identities to create (gateway slots and load-driver terminals).
    #[arg(long, default_value_t = 16)]
    pub clients: u64,
    /// Client endpoints (reply addresses): the clients are dealt round-robin among them.
    /// Endpoint 0 is the gateway's, endpoint 1 the load driver's.
    #[arg(long, default_value_t = 2)]
    pub client_endpoints: u64,
    /// The application: "bank" (accounts by branch) or "noop" (no database work).
    #[arg(long, default_value = "bank")]
    pub application: String,
}

/// The choices keygen, demo and bench share.
#[derive(Args, Debug, Clone)]
pub struct ShapeArgs {
    /// Byzantine faults tolerated per group and among database nodes.
    #[arg(long, default_value_t = 1)]
    pub f: usize,
    /// Primary candidates, each on its own machine: view v's primary is candidate v mod this
    /// (1 to 9; with one, a crashed primary stops the cluster).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=9))]
    pub candidates: u32,
    #[arg(long, value_enum, default_value_t = UsigMode::Soft)]
    pub usig: UsigMode,
    #[arg(long, value_enum, default_value_t = DbKind::Sqlite)]
    pub db: DbKind,
    /// Base URL of the PostgreSQL server with --db postgres (each node gets its own database).
    #[arg(long, default_value = "postgres://cloudbft:cloudbft@127.0.0.1:5432")]
    pub postgres: String,
    /// PostgreSQL database names are <prefix>_node_<id>.
    #[arg(long, default_value = "cloudbft")]
    pub db_prefix: String,
}

/// The spare replicas' file next to cluster.toml.
pub const SPARES: &str = "spares.toml";

/// Machine name of the k-th machine (m0 hosts the first primary candidate).
fn machine(k: usize) -> String {
    format!("m{k}")
}

/// Writes everything and returns the path of cluster.toml.
pub fn keygen(args: &KeygenArgs) -> Result<PathBuf> {
    if args.groups == 0 || args.partitions < args.groups {
        bail!(
            "--partitions ({}) must be at least --groups ({}), and --groups at least 1",
            args.partitions,
            args.groups
        );
    }
    let max_groups = args.max_groups.unwrap_or(args.groups).max(args.groups);
    if max_groups > args.partitions {
        bail!(
            "--max-groups ({max_groups}) must be at most --partitions ({}): a group without a \
             partition would serve nothing",
            args.partitions
        );
    }
    // usigd gives each identity on a machine its own PCR (8 to 15) in TPM mode.
    if args.shape.usig == UsigMode::Tpm && max_groups > 8 {
        bail!("--max-groups ({max_groups}) must be at most 8 with --usig tpm: each machine has 8 PCRs (8-15) for its VMs' identities");
    }
    let most = proto::limits::MAX_CLIENTS as u64;
    if args.clients > most {
        bail!(
            "--clients ({}) must be at most {most}: every checkpoint carries each client's newest \
             timestamp; let each endpoint serve many users instead",
            args.clients
        );
    }
    let machines =
        2 * args.shape.f + 1 + args.shape.candidates as usize + args.spare_machines as usize;
    if machines > 99 {
        bail!("{machines} machines: replica ids are 100 + 100 × group + machine number, so at most m98; use fewer --spare-machines");
    }
    let out = &args.out;
    fs::create_dir_all(out.join("keys")).with_context(|| format!("creating {}", out.display()))?;
    fs::create_dir_all(out.join("db")).with_context(|| format!("creating {}", out.display()))?;
    let n = 2 * args.shape.f + 1;
    let mut port = args.base_port;
    let mut next_addr = || {
        port += 1;
        format!("127.0.0.1:{}", port - 1)
    };
    let operator = new_key(out, "operator")?;
    let mut spares = Spares::default();
    let mut config = ClusterConfig {
        f: args.shape.f,
        config_epoch: 1,
        partitions: args.partitions,
        usig: match args.shape.usig {
            UsigMode::Soft => "soft".into(),
            UsigMode::Tpm => "tpm".into(),
        },
        application: args.application.clone(),
        epoch_start: Default::default(),
        primaries: Vec::new(),
        groups: Vec::new(),
        replicas: Vec::new(),
        db_nodes: Vec::new(),
        clients: Vec::new(),
        enrollments: Vec::new(),
        operator_key: Some(operator),
        ek_roots: Vec::new(),
    };
    let candidates = args.shape.candidates as usize;
    // usigd identities per machine: (node id, usig id).
    let spare_machines = args.spare_machines as usize;
    let mut hosted: Vec<Vec<(u32, u64)>> = vec![Vec::new(); n + candidates + spare_machines];
    for c in 0..candidates {
        let id = c as u32;
        let k = if c == 0 { 0 } else { n + c };
        let usig = 1000 + u64::from(id);
        config.primaries.push(NodeConfig {
            id,
            addr: next_addr(),
            machine: machine(k),
            usig,
            // Filled in from usigd when the cluster starts (crate::launch).
            usig_epoch: None,
            usig_start: None,
            public_key: new_key(out, &format!("node-{id}"))?,
        });
        hosted[k].push((id, usig));
    }
    // Replicas of the groups beyond --groups are spares: their addresses come after everything
    // else, so that the ports of a cluster do not depend on --max-groups.
    let mut spare_ids = Vec::new();
    for g in 0..args.groups {
        config.groups.push(GroupConfig {
            id: g,
            partitions: (0..args.partitions)
                .filter(|p| p % args.groups == g)
                .collect(),
        });
        config.replicas.extend(group_replicas(
            out,
            g,
            1,
            &mut hosted[1..=n],
            &mut next_addr,
        )?);
    }
    for k in 1..=n {
        let id = 10 + k as u32;
        config.db_nodes.push(DbNodeConfig {
            id,
            addr: next_addr(),
            machine: machine(k),
            database: match args.shape.db {
                DbKind::Sqlite => format!(
                    "sqlite:{}?mode=rwc",
                    out.join(format!("db/node-{id}.sqlite")).display()
                ),
                DbKind::Postgres => {
                    format!(
                        "{}/{}_node_{id}",
                        args.shape.postgres.trim_end_matches('/'),
                        args.shape.db_prefix
                    )
                }
            },
            public_key: new_key(out, &format!("node-{id}"))?,
        });
    }
    let endpoints: Vec<String> = (0..args.client_endpoints.max(1))
        .map(|_| next_addr())
        .collect();
    for g in args.groups..max_groups {
        let replicas = group_replicas(out, g, 1, &mut hosted[1..=n], &mut next_addr)?;
        spare_ids.extend(replicas.iter().map(|r| r.usig));
        spares.replicas.extend(replicas);
    }
    // Spare machines: one replica of every group on each, after everything else.
    let first_spare = n + candidates;
    for g in 0..max_groups {
        let replicas = group_replicas(
            out,
            g,
            first_spare,
            &mut hosted[first_spare..],
            &mut next_addr,
        )?;
        spare_ids.extend(replicas.iter().map(|r| r.usig));
        spares.replicas.extend(replicas);
    }
    // The identities of one endpoint share its key: one process holds them all anyway, and
    // the endpoint then signs the requests that are ready together once (docs/protocol.md,
    // "Batch-signed REQUESTs").
    let endpoint_keys = (0..endpoints.len())
        .map(|_| {
            SigningKey::generate()
                .map_err(|_| anyhow::anyhow!("system random number generator failed"))
        })
        .collect::<Result<Vec<_>>>()?;
    for c in 1..=args.clients {
        let endpoint = ((c - 1) % endpoints.len() as u64) as usize;
        config.clients.push(ClientConfig {
            id: c,
            addr: endpoints[endpoint].clone(),
            public_key: write_key(out, &format!("client-{c}"), &endpoint_keys[endpoint])?,
        });
    }
    for (k, identities) in hosted.iter().enumerate() {
        for record in enroll_machine(out, k, identities, args.shape.usig)? {
            if spare_ids.contains(&record.id) {
                spares.enrollments.push(record);
            } else {
                config.enrollments.push(record);
            }
        }
    }
    if !spares.replicas.is_empty() {
        spares.save(&out.join(SPARES))?;
    }
    Cluster::new(config.clone()).context("keygen produced an invalid configuration (a bug)")?;
    let path = out.join("cluster.toml");
    fs::write(&path, toml::to_string(&config)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Replicas of group `g`, one on each of the machines m(first).. whose identities `hosted` lists
/// (each gets its replica's identity), with their keys written: replica 100 + 100g + k on
/// machine mk.
fn group_replicas(
    out: &Path,
    g: u32,
    first: usize,
    hosted: &mut [Vec<(u32, u64)>],
    next_addr: &mut dyn FnMut() -> String,
) -> Result<Vec<ReplicaConfig>> {
    let mut replicas = Vec::new();
    for (i, machine_identities) in hosted.iter_mut().enumerate() {
        let k = i + first;
        let id = 100 + g * 100 + k as u32;
        let usig = 1000 + u64::from(id);
        replicas.push(ReplicaConfig {
            id,
            group: g,
            addr: next_addr(),
            machine: machine(k),
            usig,
            usig_epoch: None,
            usig_start: None,
            rejoin: false,
            public_key: new_key(out, &format!("node-{id}"))?,
        });
        machine_identities.push((id, usig));
    }
    Ok(replicas)
}

/// Writes a new signing key for a node or the operator (seed, mode 0600) and returns its public
/// key in hex.
fn new_key(out: &Path, name: &str) -> Result<String> {
    let key = SigningKey::generate()
        .map_err(|_| anyhow::anyhow!("system random number generator failed"))?;
    write_key(out, name, &key)
}

/// Writes `key` as the key called `name` (seed, mode 0600) and returns its public key in hex.
fn write_key(out: &Path, name: &str, key: &SigningKey) -> Result<String> {
    let path = key_path(out, name);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| {
            format!(
                "{} exists: keygen never overwrites keys; use a new --out",
                path.display()
            )
        })?;
    file.write_all(key.seed())?;
    Ok(key.public_key().to_hex())
}

/// Where keygen puts the key called `name` (`node-N`, `client-N` or `operator`, as
/// [`proto::keys`] reads).
pub fn key_path(out: &Path, name: &str) -> PathBuf {
    out.join("keys").join(format!("{name}.key"))
}

/// Writes machine k's usigd configuration and enrolls its identities (with a swtpm per machine
/// in TPM mode, whose state usigd reuses with `--swtpm`).
fn enroll_machine(
    out: &Path,
    k: usize,
    identities: &[(u32, u64)],
    mode: UsigMode,
) -> Result<Vec<usig::EnrollmentRecord>> {
    let dir = out.join("usigd").join(machine(k));
    let tpm = mode == UsigMode::Tpm;
    let config = UsigdConfig {
        state_dir: dir.clone(),
        tpm: tpm.then(|| TpmConfig {
            tcti: "device:/dev/tpmrm0".into(),
        }),
        identities: identities
            .iter()
            .enumerate()
            .map(|(i, &(node, usig))| IdentityConfig {
                id: usig,
                socket: dir.join(format!("node-{node}.sock")),
                // PCRs 8.. upward: one per VM on the machine.
                pcr: tpm.then_some(8 + i as u8),
            })
            .collect(),
    };
    config.validate()?;
    fs::create_dir_all(&dir)?;
    fs::write(
        out.join("usigd").join(format!("{}.toml", machine(k))),
        toml::to_string(&config)?,
    )?;
    let mut effective = config.clone();
    let _swtpm = if tpm {
        let swtpm = Swtpm::start(&dir.join("swtpm"))?;
        if let Some(t) = effective.tpm.as_mut() {
            t.tcti = swtpm.tcti();
        }
        Some(swtpm)
    } else {
        None
    };
    let mut backend = UsigdBackend::open(&effective, false)?;
    identities
        .iter()
        .map(|&(_, usig)| Ok(backend.enrollment(UsigId(usig))?))
        .collect()
}
