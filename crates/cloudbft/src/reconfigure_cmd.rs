//! The operator's commands against a running cluster (docs/operations.md, "Scaling"):
//! `cloudbft scale --groups N`, `cloudbft group add|remove|replace`, `cloudbft partition move`.
//! Each computes the next configuration, prints the plan (`--dry-run` stops there), starts the
//! new replicas through a provider, runs the reconfiguration (crate::operator), and lets the
//! provider release removed replicas' machines.

use crate::cloud_provider::TerraformProvider;
use crate::keygen::SPARES;
use crate::operator::{Operator, Outcome};
use crate::provider::{LocalProvider, ManualProvider, Provider};
use crate::reshape::{self, Spares};
use crate::terraform::Terraform;
use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use proto::config::{Cluster, ClusterConfig};
use proto::reconfig::{check_successor, describe};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// What every operator command needs.
#[derive(Args, Debug, Clone)]
pub struct OperatorArgs {
    /// The cluster's configuration (a demo's is <data-dir>/cluster.toml).
    #[arg(long, default_value = "cloudbft-demo/cluster.toml")]
    pub config: PathBuf,
    /// The operator's key (default: keys/operator.key next to the configuration).
    #[arg(long)]
    pub operator_key: Option<PathBuf>,
    /// Spare replicas for new groups (default: spares.toml next to the configuration).
    #[arg(long)]
    pub spares: Option<PathBuf>,
    /// Where this command listens for the nodes' answers (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Who starts new replicas: `local` processes next to a `cloudbft demo`, `manual` (the
    /// command prints what to start and waits for them), or `terraform` (machines of a
    /// Terraform deployment: --terraform-dir, --machine-hook).
    #[arg(long, value_enum, default_value_t = ProviderKind::Local)]
    pub provider: ProviderKind,
    /// With --provider terraform: the deployment's Terraform root module, initialised, where
    /// `cloudbft place --tfvars` wrote cloudbft.auto.tfvars.json.
    #[arg(long, required_if_eq("provider", "terraform"))]
    pub terraform_dir: Option<PathBuf>,
    /// With --provider terraform: the program run as terraform.
    #[arg(long, default_value = "terraform")]
    pub terraform_cmd: PathBuf,
    /// With --provider terraform: the program that enrolls a new machine's TPM (`HOOK enroll
    /// ID ADDRESS MACHINE`) and installs its node (`HOOK install ID ADDRESS MACHINE BUNDLE`);
    /// deploy/terraform/machine-hook-ssh.sh does both over ssh.
    #[arg(long, required_if_eq("provider", "terraform"))]
    pub machine_hook: Option<PathBuf>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProviderKind {
    Local,
    Manual,
    Terraform,
}

impl OperatorArgs {
    /// The arguments for a cluster started by `cloudbft demo` (or `elastic`) with
    /// configuration `config`: its operator key and spares, local processes.
    pub fn local(config: PathBuf) -> OperatorArgs {
        OperatorArgs {
            config,
            operator_key: None,
            spares: None,
            listen: "127.0.0.1:0".parse().expect("an address"),
            dry_run: false,
            provider: ProviderKind::Local,
            terraform_dir: None,
            terraform_cmd: PathBuf::from("terraform"),
            machine_hook: None,
        }
    }

    fn provider(&self) -> Result<Box<dyn Provider>> {
        Ok(match self.provider {
            ProviderKind::Local => Box::new(LocalProvider::for_dir(&self.dir())),
            ProviderKind::Manual => Box::new(ManualProvider),
            ProviderKind::Terraform => {
                let dir = self
                    .terraform_dir
                    .clone()
                    .context("--provider terraform needs --terraform-dir DIR")?;
                let hook = self
                    .machine_hook
                    .clone()
                    .context("--provider terraform needs --machine-hook PROGRAM")?;
                Box::new(TerraformProvider::new(
                    Terraform::new(&self.terraform_cmd, dir),
                    hook,
                    self.dir(),
                ))
            }
        })
    }

    fn dir(&self) -> PathBuf {
        self.config
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    }

    fn spares_path(&self) -> PathBuf {
        self.spares
            .clone()
            .unwrap_or_else(|| self.dir().join(SPARES))
    }
}

#[derive(Args, Debug)]
pub struct ScaleArgs {
    #[command(flatten)]
    pub operator: OperatorArgs,
    /// The number of groups to run.
    #[arg(long)]
    pub groups: usize,
}

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// Add a group of spare replicas (the lowest spare group id unless --group).
    Add {
        #[command(flatten)]
        operator: OperatorArgs,
        #[arg(long)]
        group: Option<u32>,
        /// The partitions it takes over (default: its fair share).
        #[arg(long, value_delimiter = ',')]
        partitions: Option<Vec<u32>>,
    },
    /// Remove a group; its partitions go to the groups that serve the fewest.
    Remove {
        #[command(flatten)]
        operator: OperatorArgs,
        group: u32,
    },
    /// Replace one member of a group (its machine retired or failed) by a spare replica on a
    /// machine the group does not use; the group keeps its id and partitions.
    Replace {
        #[command(flatten)]
        operator: OperatorArgs,
        group: u32,
        /// The member to replace.
        #[arg(long)]
        replica: u32,
        /// The spare replica that takes its place (default: the lowest spare made for the
        /// group on a machine it does not use).
        #[arg(long)]
        with: Option<u32>,
    },
}

#[derive(Subcommand, Debug)]
pub enum PartitionCommand {
    /// Move partitions to a group.
    Move {
        #[command(flatten)]
        operator: OperatorArgs,
        /// Comma-separated partitions.
        #[arg(value_delimiter = ',')]
        partitions: Vec<u32>,
        #[arg(long)]
        to: u32,
    },
}

pub fn scale(args: ScaleArgs) -> Result<()> {
    let groups = args.groups;
    change(&args.operator, |config, spares| {
        reshape::scale(config, spares, groups)
    })
}

pub fn group(command: GroupCommand) -> Result<()> {
    match command {
        GroupCommand::Add {
            operator,
            group,
            partitions,
        } => change(&operator, |config, spares| {
            reshape::add_group(config, spares, group, partitions.clone())
        }),
        GroupCommand::Remove { operator, group } => {
            change(&operator, |config, _| reshape::remove_group(config, group))
        }
        GroupCommand::Replace {
            operator,
            group,
            replica,
            with,
        } => change(&operator, |config, spares| {
            reshape::replace_member(config, spares, group, replica, with)
        }),
    }
}

pub fn partition(command: PartitionCommand) -> Result<()> {
    let PartitionCommand::Move {
        operator,
        partitions,
        to,
    } = command;
    change(&operator, |config, _| {
        reshape::move_partitions(config, &partitions, to)
    })
}

/// Plans the change, prints it, and (unless a dry run) carries it out.
fn change(
    args: &OperatorArgs,
    plan: impl FnOnce(&ClusterConfig, &Spares) -> Result<ClusterConfig>,
) -> Result<()> {
    let current = Cluster::load(&args.config)?;
    let mut spares = Spares::load(&args.spares_path())?;
    let next = plan(&current.config, &spares)?;
    check_successor(&current.config, &next)
        .map_err(|e| anyhow::anyhow!("the change is refused: {e}"))?;
    println!(
        "configuration epoch {} -> {}:",
        current.config.config_epoch, next.config_epoch
    );
    for line in describe(&current.config, &next) {
        println!("  {line}");
    }
    if args.dry_run {
        println!("dry run: nothing was sent");
        return Ok(());
    }
    let outcome = run(args, &current, next, &mut spares)?;
    println!(
        "epoch {} runs: everything up to global order {} completed under the old assignment, \
         everything after it under the new one (closed after {:.2} s, started after {:.2} s)",
        outcome.config.config_epoch,
        outcome.cut_order,
        outcome.closed_after.as_secs_f64(),
        outcome.started_after.as_secs_f64()
    );
    if !outcome.rejoining.is_empty() {
        println!(
            "replicas {:?} rejoin the new epoch with a JOIN (they did not report their position)",
            outcome.rejoining
        );
    }
    if !outcome.silent.is_empty() {
        println!(
            "nodes {:?} did not acknowledge the new epoch: they are down or unreachable; they \
             run it once they receive the configuration (restart them with {})",
            outcome.silent,
            args.config.display()
        );
    }
    Ok(())
}

/// Starts the new replicas, reconfigures, and keeps the outcome: the configuration file and
/// the spares (removed replicas with the position their USIG sequence continues from); then
/// the provider releases the removed replicas' machines (checked before anything was sent).
pub fn run(
    args: &OperatorArgs,
    current: &Cluster,
    mut next: ClusterConfig,
    spares: &mut Spares,
) -> Result<Outcome> {
    let dir = args.dir();
    let new: Vec<u32> = next
        .replicas
        .iter()
        .map(|r| r.id)
        .filter(|id| !current.config.replicas.iter().any(|r| r.id == *id))
        .collect();
    let removed: Vec<u32> = current
        .config
        .replicas
        .iter()
        .map(|r| r.id)
        .filter(|id| !next.replicas.iter().any(|r| r.id == *id))
        .collect();
    let mut provider = args.provider()?;
    if !removed.is_empty() {
        provider.prepare_release(&current.config, &next)?;
    }
    if !new.is_empty() {
        let shape = dir.join(format!("cluster-epoch-{}.toml", next.config_epoch));
        println!("starting replicas {new:?}");
        provider.start(&current.config, &mut next, &new, &shape)?;
    }
    let key_path = args
        .operator_key
        .clone()
        .unwrap_or_else(|| dir.join("keys").join("operator.key"));
    let expected = current.operator_key().context(
        "the configuration names no operator_key: it was made before online reconfiguration; \
         make a new cluster with `cloudbft keygen` (or `cloudbft demo` on a new --data-dir)",
    )?;
    let key = proto::keys::load(&key_path, Some(&expected))?;
    let outcome = tokio::runtime::Runtime::new()?.block_on(async {
        let mut operator = Operator::bind(args.listen, key).await?;
        operator
            .reconfigure(current, next, &mut |line| println!("  {line}"))
            .await
    })?;
    std::fs::write(&args.config, toml::to_string(&outcome.config)?)
        .with_context(|| format!("writing {}", args.config.display()))?;
    let dropped = spares.update(&current.config, &outcome.config, &outcome.positions);
    for (replica, machine) in &dropped.replaced {
        println!(
            "  replica {replica} is not kept as a spare, and machine {machine} is retired (no \
             spare on it is used until it is taken off `retired` in {})",
            args.spares_path().display()
        );
    }
    if !dropped.unknown.is_empty() {
        println!(
            "  replicas {:?} left without reporting where their USIG sequence stands (down?): \
             they are not kept as spares",
            dropped.unknown
        );
    }
    spares.save(&args.spares_path())?;
    if !removed.is_empty() {
        provider.release(&outcome.config)?;
    }
    Ok(outcome)
}
