//! `cloudbft primary|replica|dbnode`: one process per node, configured by cluster.toml.

use anyhow::{Context, Result};
use clap::Args;
use node::dbnode::DbNodeOptions;
use node::primary::PrimaryOptions;
use node::replica::ReplicaOptions;
use node::{Cluster, NodeId, NodeOptions};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// What every node subcommand takes.
#[derive(Args, Debug, Clone)]
pub struct NodeArgs {
    /// The cluster configuration written by `cloudbft keygen`.
    #[arg(long)]
    pub config: PathBuf,
    /// This node's id in the configuration.
    #[arg(long)]
    pub id: u32,
    /// The keys directory (default: keys/ next to the configuration).
    #[arg(long)]
    pub keys: Option<PathBuf>,
    /// Serve Prometheus metrics on this address.
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Timer period in milliseconds (fetches of lost messages, retransmissions).
    #[arg(long, default_value_t = 50)]
    pub tick_ms: u64,
    /// Async runtime worker threads. A node's protocol core is one task, so more threads mostly
    /// add cross-thread wake-ups: one measured 13% less CPU per request than one per core
    /// (docs/performance.md). With 1 the node runs on a current-thread runtime, so its core and
    /// its connections' tasks share one thread and hand frames over without waking another.
    /// Page rendering in burn mode and SQLite have their own threads either way.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub worker_threads: u16,
}

#[derive(Args, Debug, Clone)]
pub struct PrimaryArgs {
    #[command(flatten)]
    pub node: NodeArgs,
    /// usigd socket (default: usigd/<machine>/node-<id>.sock next to the configuration).
    #[arg(long)]
    pub usig_socket: Option<PathBuf>,
    /// Most requests per PREPARE; 1 turns batching off.
    #[arg(long, default_value_t = 64, value_parser = crate::launch::max_batch)]
    pub max_batch: usize,
    /// Most PREPAREs the groups have not decided yet; requests gather meanwhile, so batches
    /// grow with the load. 0 sends a PREPARE whenever the USIG is free.
    #[arg(long, default_value_t = DEFAULT_PIPELINE)]
    pub pipeline: usize,
}

/// The primaries' default `--pipeline`.
pub const DEFAULT_PIPELINE: usize = primary::pacing::DEFAULT_DEPTH;

#[derive(Args, Debug, Clone)]
pub struct ReplicaArgs {
    #[command(flatten)]
    pub node: NodeArgs,
    /// usigd socket (default: usigd/<machine>/node-<id>.sock next to the configuration).
    #[arg(long)]
    pub usig_socket: Option<PathBuf>,
    /// Directory of the decision log (default: data/node-<id> next to the configuration).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub pages: PageArgs,
    /// Join the cluster at the next configuration epoch: `--config` is that epoch's shape (as
    /// `cloudbft group add` writes it), and the replica waits for the operator's CONFIGURE of it
    /// (docs/protocol.md, "Reconfiguration").
    #[arg(long)]
    pub await_epoch: bool,
}

/// The page-generation stage of every replica (node::page): the paper's is 200 ms per page on
/// a one-core VM.
#[derive(Args, Debug, Clone)]
pub struct PageArgs {
    /// Time per page in milliseconds (0: no stage, pages go out as soon as they are rendered).
    #[arg(long, default_value_t = 0)]
    pub page_delay_ms: u64,
    /// Pages a replica works on at once; the others queue (the paper's VM had one core).
    #[arg(long, default_value_t = 1)]
    pub page_workers: usize,
    /// "sleep" (a worker is held, no CPU used) or "burn" (spins for the time in CPU time, for
    /// runs where each replica is capped to one CPU share).
    #[arg(long, default_value = "sleep")]
    pub page_mode: node::page::PageMode,
}

impl PageArgs {
    /// The flags again, for a replica process the launcher starts.
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "--page-delay-ms".into(),
            self.page_delay_ms.to_string(),
            "--page-workers".into(),
            self.page_workers.to_string(),
            "--page-mode".into(),
            self.page_mode.name().into(),
        ]
    }
}

impl Default for PageArgs {
    fn default() -> Self {
        PageArgs {
            page_delay_ms: 0,
            page_workers: 1,
            page_mode: node::page::PageMode::Sleep,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct DbNodeArgs {
    #[command(flatten)]
    pub node: NodeArgs,
    /// Database URL (default: the node's `database` in the configuration).
    #[arg(long)]
    pub database: Option<String>,
    /// Stored results to keep below the executed orders; older ones are forgotten so the
    /// results table stays bounded (at least 16384: two checkpoint intervals of full batches).
    #[arg(long, default_value_t = dbvote::voter::STORED_RESULTS_KEPT)]
    pub keep_results: u64,
}

fn config_dir(config: &Path) -> PathBuf {
    config
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

impl NodeArgs {
    fn options(&self) -> Result<NodeOptions> {
        let cluster = Cluster::load(&self.config)?;
        Ok(NodeOptions {
            cluster: Arc::new(cluster),
            keys: self
                .keys
                .clone()
                .unwrap_or_else(|| config_dir(&self.config).join("keys")),
            id: NodeId(self.id),
            metrics: self.metrics,
            tick: Duration::from_millis(self.tick_ms.max(1)),
            config_path: Some(self.config.clone()),
            build: crate::BUILD,
        })
    }

    /// The machine this node runs on, for the default usigd socket.
    fn usig_socket(&self, options: &NodeOptions, explicit: &Option<PathBuf>) -> Result<PathBuf> {
        if let Some(socket) = explicit {
            return Ok(socket.clone());
        }
        let c = &options.cluster.config;
        let machine = c
            .primaries
            .iter()
            .map(|p| (p.id, &p.machine))
            .chain(c.replicas.iter().map(|r| (r.id, &r.machine)))
            .find(|(id, _)| *id == self.id)
            .map(|(_, m)| m.clone())
            .with_context(|| {
                format!(
                    "node {} is not a primary or replica in the configuration",
                    self.id
                )
            })?;
        Ok(node::usig::default_socket(
            &config_dir(&self.config),
            &machine,
            self.id,
        ))
    }
}

/// The future every node stops on: Ctrl-C or SIGTERM.
pub type Stop = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Completes on Ctrl-C or SIGTERM (call inside a runtime).
pub fn stop_signal() -> Result<Stop> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    Ok(Box::pin(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }))
}

/// A runtime with `workers` threads: a current-thread runtime for 1 (whose tasks hand work to
/// each other without waking another thread), one worker per core for 0.
pub fn runtime(workers: u16) -> std::io::Result<tokio::runtime::Runtime> {
    match workers {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            if n > 1 {
                builder.worker_threads(n.into());
            }
            builder
        }
    }
    .enable_all()
    .build()
}

/// Runs a node until Ctrl-C or SIGTERM: on a current-thread runtime for one worker (the core
/// runs in `block_on`, which a multi-thread runtime runs on a thread besides its workers), else
/// on `args.worker_threads` workers.
fn run_until_signal<F>(args: &NodeArgs, node: impl FnOnce(Stop) -> F) -> Result<()>
where
    F: std::future::Future<Output = Result<(), node::NodeError>>,
{
    let runtime = runtime(args.worker_threads)?;
    let result = runtime.block_on(async { Ok(node(stop_signal()?).await?) });
    // A blocking task still running now is orphaned (say, the USIG client's recovery waiting up
    // to 10 s for usigd): do not hold the exit for it.
    runtime.shutdown_timeout(Duration::from_millis(500));
    result
}

pub fn primary(args: PrimaryArgs) -> Result<()> {
    let node = args.node.options()?;
    let options = PrimaryOptions {
        usig_socket: args.node.usig_socket(&node, &args.usig_socket)?,
        max_batch: args.max_batch,
        pipeline: args.pipeline,
        node,
    };
    run_until_signal(&args.node, |stop| node::primary::run(options, stop))
}

pub fn replica(args: ReplicaArgs) -> Result<()> {
    let node = args.node.options()?;
    let options = ReplicaOptions {
        usig_socket: args.node.usig_socket(&node, &args.usig_socket)?,
        data_dir: args.data_dir.clone().unwrap_or_else(|| {
            config_dir(&args.node.config)
                .join("data")
                .join(format!("node-{}", args.node.id))
        }),
        page_delay: Duration::from_millis(args.pages.page_delay_ms),
        page_workers: args.pages.page_workers,
        page_mode: args.pages.page_mode,
        await_epoch: args.await_epoch,
        node,
    };
    run_until_signal(&args.node, |stop| node::replica::run(options, stop))
}

pub fn dbnode(args: DbNodeArgs) -> Result<()> {
    if args.keep_results < dbvote::voter::STORED_RESULTS_KEPT_MIN {
        anyhow::bail!(
            "--keep-results {} is below {}: a replica may still need those results; raise it",
            args.keep_results,
            dbvote::voter::STORED_RESULTS_KEPT_MIN
        );
    }
    let options = DbNodeOptions {
        node: args.node.options()?,
        database: args.database.clone(),
        keep_results: args.keep_results,
    };
    run_until_signal(&args.node, |stop| node::dbnode::run(options, stop))
}
