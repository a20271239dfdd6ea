//! `cloudbft demo`: a whole local cluster on the embedded defaults, in one command.

use crate::keygen::{KeygenArgs, ShapeArgs};
use crate::launch::{prepare, LaunchOptions, LocalCluster};
use anyhow::{Context, Result};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Number of groups of 2f+1 replicas.
    #[arg(long, default_value_t = 2)]
    pub groups: u32,
    /// Number of partitions (TPC-C warehouses, bank branches); default: two per group, and at
    /// least --max-groups.
    #[arg(long)]
    pub partitions: Option<u32>,
    /// Groups the cluster may grow to online (`cloudbft scale`, `cloudbft group add`, the
    /// autoscaler): identities for them are made at the start (default: 4, or --groups if
    /// more).
    #[arg(long)]
    pub max_groups: Option<u32>,
    /// Machines held in reserve for `cloudbft group replace` (a spare replica of every group
    /// on each, with its own usigd).
    #[arg(long, default_value_t = 1)]
    pub spare_machines: u32,
    #[command(flatten)]
    pub shape: ShapeArgs,
    /// Where browsers connect.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub gateway_addr: SocketAddr,
    /// Keys, configuration, databases, logs. Reused (and continued) when it exists.
    #[arg(long, default_value = "cloudbft-demo")]
    pub data_dir: PathBuf,
    /// First port of the nodes (metrics at +1000).
    #[arg(long, default_value_t = 7100)]
    pub base_port: u16,
    /// "tpcc", "bank" or "noop".
    #[arg(long, default_value = "tpcc")]
    pub application: String,
    /// With tpcc: load the specification's cardinalities (100,000 items, 3,000 customers per
    /// district; ~20 s per warehouse and database node) instead of the small demo population.
    #[arg(long)]
    pub full_scale: bool,
    /// Most requests per PREPARE (1 turns batching off).
    #[arg(long, default_value_t = 64, value_parser = crate::launch::max_batch)]
    pub max_batch: usize,
    #[command(flatten)]
    pub pages: crate::nodes::PageArgs,
    /// Run the autoscaler too: it reads the gateway's latency and adds or removes groups to
    /// keep --p95-objective-ms (docs/operations.md, "The autoscaler").
    #[arg(long)]
    pub autoscale: bool,
    #[command(flatten)]
    pub policy: crate::autoscale::PolicyArgs,
}

impl DemoArgs {
    /// The groups the demo makes identities for: --max-groups, else 4 (never more than the
    /// partitions, nor fewer than --groups).
    fn max_groups(&self) -> u32 {
        let wanted = self.max_groups.unwrap_or(4).max(self.groups);
        match self.partitions {
            Some(p) if self.max_groups.is_none() => wanted.min(p).max(self.groups),
            _ => wanted,
        }
    }

    pub fn keygen_args(&self) -> KeygenArgs {
        KeygenArgs {
            out: self.data_dir.clone(),
            groups: self.groups,
            max_groups: Some(self.max_groups()),
            spare_machines: self.spare_machines,
            partitions: self
                .partitions
                .unwrap_or((2 * self.groups).max(self.max_groups())),
            shape: self.shape.clone(),
            base_port: self.base_port,
            clients: 64,
            client_endpoints: 2,
            application: self.application.clone(),
        }
    }
}

pub fn demo(args: DemoArgs) -> Result<()> {
    let (config, restart) = prepare(&args.keygen_args())?;
    let cluster = proto::config::Cluster::load(&config)?;
    if !restart && cluster.config.application == tpcc::txn::NAME {
        let scale = if args.full_scale {
            tpcc::ScaleConfig::standard()
        } else {
            tpcc::ScaleConfig::small()
        };
        eprintln!(
            "loading TPC-C ({} warehouses) into each database node",
            cluster.config.partitions
        );
        tokio::runtime::Runtime::new()?
            .block_on(crate::tpcc_cmd::load_cluster(&cluster, &scale, 1))?;
    }
    // What an operator command needs to start more replicas like ours (crate::provider).
    let launch = crate::provider::Launch {
        replica_args: args.pages.to_args(),
    };
    std::fs::write(
        args.data_dir.join(crate::provider::LAUNCH_FILE),
        toml::to_string(&launch)?,
    )?;
    let (stop_tx, stop) = mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = stop_tx.send(());
    })
    .context("installing the Ctrl-C handler")?;
    let mut cluster = LocalCluster::start(
        &config,
        args.shape.usig,
        restart,
        &LaunchOptions {
            max_batch: args.max_batch,
            ..LaunchOptions::driven(&args.pages, Some(args.gateway_addr))
        },
    )?;
    let c = &cluster.cluster.config;
    println!(
        "cloudbft demo: f={}, {} groups of {} replicas, {} database nodes ({:?}), USIG {:?}, \
         application {}",
        c.f,
        c.groups.len(),
        2 * c.f + 1,
        c.db_nodes.len(),
        args.shape.db,
        args.shape.usig,
        c.application
    );
    for (name, addr) in cluster.endpoints() {
        if name != "gateway" {
            println!("  {name:<12} metrics http://{addr}/metrics");
        }
    }
    println!("  logs in {}", args.data_dir.join("logs").display());
    println!(
        "  scale it: cloudbft scale --config {} --groups N",
        config.display()
    );
    println!(
        "ready: open http://{}/ in a browser (Ctrl-C stops the cluster)",
        args.gateway_addr
    );
    let scaling = Arc::new(AtomicBool::new(false));
    let scaler = args.autoscale.then(|| {
        let auto = crate::autoscale::AutoscaleArgs {
            operator: crate::reconfigure_cmd::OperatorArgs::local(config.clone()),
            policy: args.policy.clone(),
            sources: vec![args.gateway_addr],
            metrics: None,
            max_groups: None,
        };
        println!(
            "autoscaler: keeping the gateway's p95 at {} ms with {} to {} groups",
            args.policy.p95_objective_ms,
            args.policy.min_groups,
            args.max_groups()
        );
        let scaling = scaling.clone();
        std::thread::spawn(move || {
            let result =
                crate::autoscale::run(&auto, &scaling, &mut crate::autoscale::print_record);
            if let Err(e) = &result {
                eprintln!("the autoscaler stopped: {e:#}");
            }
        })
    });
    loop {
        match stop.recv_timeout(Duration::from_millis(500)) {
            Ok(()) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                for (name, status) in cluster.exited() {
                    // The protocol survives a faulty primary (view change) and f faulty
                    // replicas per group or database nodes; the gateway is the demo's own
                    // plumbing.
                    if name == "gateway" {
                        eprintln!("{name} exited ({status}): stopping the cluster; see its log");
                        cluster.stop();
                        anyhow::bail!("{name} exited unexpectedly");
                    }
                    if let Some(machine) = name.strip_prefix("usigd-") {
                        eprintln!(
                            "{name} exited ({status}): the nodes of machine {machine} can no \
                             longer warrant anything, as if the machine failed; the cluster goes \
                             on without them. Restart it (with --new-epoch if its state is lost), \
                             then its nodes: replicas rejoin their groups (docs/operations.md)"
                        );
                        continue;
                    }
                    if status.success() && name.starts_with("replica-") {
                        eprintln!(
                            "{name} left the cluster: a reconfiguration removed it (see \
                             logs/{name}.log)"
                        );
                        continue;
                    }
                    eprintln!(
                        "{name} exited ({status}); the cluster goes on without it (a primary is \
                         replaced by a view change, f replicas per group and f database nodes \
                         may fail); see logs/{name}.log"
                    );
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    scaling.store(true, Ordering::Relaxed);
    if let Some(scaler) = scaler {
        let _ = scaler.join();
    }
    eprintln!("stopping the cluster");
    cluster.stop();
    Ok(())
}
