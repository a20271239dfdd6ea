//! `cloudbft soak`: a long run under TPC-C load in which nodes crash and come back, to show
//! that nothing accumulates. A fresh local cluster (the embedded defaults: f=1, soft USIG,
//! SQLite unless `--db postgres`, the small TPC-C population) serves closed-loop terminals while
//! every `--restart-every-secs` one node is killed with SIGKILL and started again: a group
//! replica and a database node in turn, each time the next one. Every `--sample-every-secs` it
//! records the resident memory of every process (following restarted ones), the disk use of
//! every node's data, and the transactions completed.
//!
//! At the end it stops the cluster, checks the database nodes (the twelve consistency
//! conditions, identical digests, and that the acknowledged New-Orders and Payments are exactly
//! the orders and history rows added), writes every sample as JSON and a timeline as SVG, and
//! judges the memory and disk use by the flatness rule ([`Tolerance`]; docs/operations.md,
//! "Soak"): a non-zero exit names what grew.

use crate::bench::machine;
use crate::keygen::{KeygenArgs, ShapeArgs};
use crate::launch::{LaunchOptions, LocalCluster};
use crate::measure::{disk_bytes, resident_mib};
use crate::report::{write_json, write_timeline, Panel};
use anyhow::{bail, Context, Result};
use clap::Args;
use client_plugin::client::{ClientEndpoint, ClientOptions};
use proto::config::Cluster;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tpcc::ledger::{Discrepancy, HistoryRow, Ledger};
use tpcc::workload::{Population, Terminal};
use tpcc::NuRandConstants;

const MIB: f64 = 1024.0 * 1024.0;

#[derive(Args, Debug)]
pub struct SoakArgs {
    /// How long the load runs, in seconds.
    #[arg(long, default_value_t = 3600)]
    pub duration_secs: u64,
    /// Kill (SIGKILL) and restart one node this often: a replica and a database node in turn,
    /// each time the next one. The next restart waits until the last restarted node recovered.
    #[arg(long, default_value_t = 180)]
    pub restart_every_secs: u64,
    /// How long a killed node stays down before it is started again.
    #[arg(long, default_value_t = 2)]
    pub down_secs: u64,
    /// Sample memory, disk and throughput this often.
    #[arg(long, default_value_t = 5)]
    pub sample_every_secs: u64,
    /// Stop early, and fail, when no transaction completed for this long: a stalled cluster
    /// shows nothing more by running on.
    #[arg(long, default_value_t = 120)]
    pub stall_secs: u64,
    /// The database nodes' `--keep-results` (stored results kept below the executed orders;
    /// default: theirs, 100000).
    #[arg(long)]
    pub keep_results: Option<u64>,
    /// Closed-loop TPC-C terminals (no keying or think time).
    #[arg(long, default_value_t = 4)]
    pub terminals: u64,
    /// Groups of 2f+1 replicas (two warehouses each).
    #[arg(long, default_value_t = 1)]
    pub groups: u32,
    #[command(flatten)]
    pub shape: ShapeArgs,
    #[command(flatten)]
    pub pages: crate::nodes::PageArgs,
    #[command(flatten)]
    pub tolerance: Tolerance,
    /// Results directory (must not exist): the cluster (configuration, logs, databases),
    /// soak.json with every sample and soak.svg (and, while it runs, samples.json with the
    /// samples so far, rewritten every minute).
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value_t = 7900)]
    pub base_port: u16,
    /// Seed of the load and of the terminals.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// The flatness rule. The run's first quarter is warm-up (caches fill, the decision logs reach
/// their first checkpoints, the allocator its working set); after it, a quantity is flat if its
/// largest value in the last quarter is at most `pct` percent above its largest value in the
/// second quarter, plus an absolute slack. Maxima, not means: a decision log grows between
/// checkpoints and shrinks at each, and memory peaks after a restart; an unbounded quantity
/// shows as a maximum that keeps rising. A database node's data grows with the TPC-C rows by
/// design (an order and its lines per New-Order, a history row per Payment), so it is judged
/// per executed order instead: its growth over the last quarter may be at most `pct` percent
/// above what the second quarter's bytes per order predict, plus the slack.
#[derive(Args, Clone, Copy, Debug, Serialize)]
pub struct Tolerance {
    /// Relative tolerance of memory, in percent.
    #[arg(long, default_value_t = 10.0)]
    pub rss_tolerance_pct: f64,
    /// Absolute slack of memory, in MiB.
    #[arg(long, default_value_t = 8.0)]
    pub rss_slack_mib: f64,
    /// Relative tolerance of disk use, in percent.
    #[arg(long, default_value_t = 10.0)]
    pub disk_tolerance_pct: f64,
    /// Absolute slack of disk use, in MiB.
    #[arg(long, default_value_t = 8.0)]
    pub disk_slack_mib: f64,
}

/// One sample of the run.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    pub at_secs: f64,
    /// Transactions completed since the start, and per second since the previous sample.
    pub transactions: u64,
    pub per_sec: f64,
    /// Resident memory by process (a process that is down has no entry).
    pub rss_mib: BTreeMap<String, f64>,
    /// Disk use by node data (a replica's decision log, a database node's database, a usigd's
    /// state) and of the logs directory (`logs`).
    pub disk_mib: BTreeMap<String, f64>,
    /// Each database node's highest executed order (down: no entry).
    pub executed: BTreeMap<String, u64>,
}

/// One node killed and started again.
#[derive(Clone, Debug, Serialize)]
pub struct Restart {
    pub at_secs: f64,
    pub node: String,
    /// From the kill (`--down-secs` included) until the node took part again: a replica rejoined its group, a
    /// database node executed what the others had executed when it came back.
    pub recovered_after_secs: Option<f64>,
}

/// What the flatness rule said of one process or data directory.
#[derive(Clone, Debug, Serialize)]
pub struct Judged {
    pub what: String,
    /// "rss_mib", "disk_mib", or "disk_bytes_per_order" (database nodes).
    pub measure: String,
    /// Largest value in the second quarter and in the last (for database nodes: growth in
    /// MiB over each quarter, and the orders executed in each).
    pub second_quarter: f64,
    pub last_quarter: f64,
    pub orders: Option<(u64, u64)>,
    /// What the last quarter may reach.
    pub bound: f64,
    pub flat: bool,
}

/// The executor's stored results on one database node.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct StoredResults {
    pub rows: u64,
    /// Their bytes (results, positions, operation hashes) without the table's overhead.
    pub mib: f64,
}

/// What a soak run measured.
#[derive(Debug, Serialize)]
pub struct SoakReport {
    /// How long the load ran: `planned_secs`, or less if the cluster stalled.
    pub duration_secs: f64,
    pub planned_secs: u64,
    /// When the last transaction completed before a stall of `--stall-secs` ended the run.
    pub stalled_at_secs: Option<f64>,
    pub restart_every_secs: u64,
    pub groups: u32,
    pub terminals: u64,
    pub usig: String,
    pub db: String,
    pub tolerance: Tolerance,
    pub transactions: u64,
    /// Requests that failed (the client library gave up): none are expected, since at most
    /// one node is down at a time.
    pub failures: u64,
    pub failure_examples: Vec<String>,
    pub restarts: Vec<Restart>,
    pub samples: Vec<Sample>,
    pub judged: Vec<Judged>,
    /// Per database node: what it lacks of the acknowledged transactions and holds beyond them.
    pub ledger: BTreeMap<String, Discrepancy>,
    /// Per database node at the end: the executor's stored results, one per executed order,
    /// which nothing deletes yet (docs/operations.md, "Soak").
    pub stored_results: BTreeMap<String, StoredResults>,
    /// The digest every database node ended with after passing the consistency conditions,
    /// or why the check failed.
    pub digest: std::result::Result<String, String>,
    pub machine: String,
}

/// The closed-loop terminals, running until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    completed: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<String>>>,
    ledger: Arc<Mutex<Ledger>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(runtime: &tokio::runtime::Runtime, client: &ClientEndpoint, args: &SoakArgs) -> Load {
        let population = Population {
            warehouses: 2 * args.groups,
            scale: tpcc::ScaleConfig::small(),
            constants: NuRandConstants::for_load(args.seed).for_run(args.seed.wrapping_add(1)),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let completed = Arc::new(AtomicU64::new(0));
        let failures: Arc<Mutex<Vec<String>>> = Arc::default();
        let ledger: Arc<Mutex<Ledger>> = Arc::default();
        let tasks = (0..args.terminals)
            .map(|t| {
                let mut terminal = Terminal::new(t, population, args.seed);
                let (client, stop, completed, failures, ledger) = (
                    client.clone(),
                    stop.clone(),
                    completed.clone(),
                    failures.clone(),
                    ledger.clone(),
                );
                runtime.spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let op = terminal.next(crate::tpcc_run::unix_now());
                        let outcome = match op.partitions() {
                            Ok(partitions) => client
                                .invoke(partitions, op.encode())
                                .await
                                .map_err(|e| format!("{} failed: {e}", op.kind().name()))
                                .and_then(|accepted| {
                                    lock(&ledger)
                                        .record(&op, &accepted.page)
                                        .map_err(|e| e.to_string())
                                }),
                            Err(e) => Err(format!("{op:?}: {e}")),
                        };
                        match outcome {
                            Ok(()) => {
                                completed.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => lock(&failures).push(e),
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            completed,
            failures,
            ledger,
            tasks,
        }
    }

    /// Lets every terminal finish the transaction it is in.
    fn stop(self, runtime: &tokio::runtime::Runtime) -> Result<(Ledger, Vec<String>)> {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            runtime.block_on(task).context("a terminal panicked")?;
        }
        let ledger = lock(&self.ledger).clone();
        let failures = lock(&self.failures).clone();
        Ok((ledger, failures))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Where a node keeps its data, to measure.
enum Data {
    /// Files and directories on this machine.
    Paths(Vec<PathBuf>),
    /// A PostgreSQL database (`pg_database_size`).
    Postgres(String),
}

/// Every node's data: replicas' decision logs, database nodes' databases, usigd state, and the
/// logs directory.
fn data_of(cluster: &Cluster, dir: &Path) -> Vec<(String, Data)> {
    let mut out = Vec::new();
    for r in &cluster.config.replicas {
        let path = dir.join("data").join(format!("node-{}", r.id));
        out.push((format!("replica-{}", r.id), Data::Paths(vec![path])));
    }
    for db in &cluster.config.db_nodes {
        let data = match sqlite_path(&db.database) {
            Some(path) => {
                let with = |suffix: &str| PathBuf::from(format!("{}{suffix}", path.display()));
                Data::Paths(vec![path.clone(), with("-wal"), with("-shm")])
            }
            None => Data::Postgres(db.database.clone()),
        };
        out.push((format!("dbnode-{}", db.id), data));
    }
    let mut machines: Vec<&String> = cluster.config.replicas.iter().map(|r| &r.machine).collect();
    machines.extend(cluster.config.primaries.iter().map(|p| &p.machine));
    machines.sort();
    machines.dedup();
    for m in machines {
        let path = dir.join("usigd").join(m);
        out.push((format!("usigd-{m}"), Data::Paths(vec![path])));
    }
    out.push(("logs".into(), Data::Paths(vec![dir.join("logs")])));
    out
}

/// The file of a `sqlite:PATH?options` URL (as keygen writes them).
fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    Some(PathBuf::from(rest.split('?').next().unwrap_or(rest)))
}

async fn postgres_bytes(url: &str) -> Result<i64> {
    let mut conn = crate::tpcc_cmd::connect(url).await?;
    let size: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(&mut conn)
        .await?;
    sqlx::Connection::close(conn).await?;
    Ok(size)
}

/// The process a restart picks: replicas and database nodes in turn, each list in order.
fn victim(k: usize, replicas: &[String], db_nodes: &[String]) -> String {
    let list = if k.is_multiple_of(2) {
        replicas
    } else {
        db_nodes
    };
    list[(k / 2) % list.len()].clone()
}

/// The role of a process or data name: what precedes its first '-'.
fn role(name: &str) -> &str {
    name.split('-').next().unwrap_or(name)
}

pub fn soak(args: SoakArgs) -> Result<()> {
    if args.duration_secs < 8 || args.sample_every_secs == 0 || args.restart_every_secs == 0 {
        bail!("--duration-secs must be at least 8 (four quarters of samples), and the intervals above 0");
    }
    if args.out.exists() {
        bail!("--out {} exists: use a new directory", args.out.display());
    }
    let dir = args.out.join("cluster");
    let warehouses = 2 * args.groups;
    let keygen = KeygenArgs {
        out: dir.clone(),
        groups: args.groups,
        max_groups: None,
        spare_machines: 0,
        partitions: warehouses,
        shape: args.shape.clone(),
        base_port: args.base_port,
        clients: 2 * args.terminals + 2,
        client_endpoints: 2,
        application: tpcc::txn::NAME.into(),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let scale = tpcc::ScaleConfig::small();
    let (config, cluster) = crate::tpcc_cmd::prepare_loaded(&keygen, &runtime, &scale, args.seed)?;
    let loaded: Vec<HistoryRow> = runtime.block_on(async {
        let db = cluster
            .config
            .db_nodes
            .first()
            .context("no database node")?;
        let mut conn = crate::tpcc_cmd::connect(&db.database).await?;
        let history = tpcc::ledger::history(&mut conn).await?;
        sqlx::Connection::close(conn).await?;
        anyhow::Ok(history)
    })?;
    let mut local = LocalCluster::start(
        &config,
        args.shape.usig,
        false,
        &LaunchOptions {
            keep_results: args.keep_results,
            ..LaunchOptions::driven(&args.pages, None)
        },
    )?;
    eprintln!(
        "cluster up in {}: {} group(s), {} database nodes, {} terminals for {} s, a node \
         killed and restarted every {} s",
        dir.display(),
        args.groups,
        cluster.config.db_nodes.len(),
        args.terminals,
        args.duration_secs,
        args.restart_every_secs
    );
    let client = runtime.block_on(crate::launch::load_driver(
        Arc::new(cluster.clone()),
        &dir,
        ClientOptions::default(),
    ))?;
    let load = Load::start(&runtime, &client, &args);
    let run = run(&args, &mut local, &cluster, &dir, &runtime, &load.completed);
    let stopped = load.stop(&runtime);
    runtime.block_on(client.shutdown());
    // Stopping drains: every database node reaches the same order before it stops.
    local.stop();
    let (samples, restarts, stalled_at_secs) = run?;
    // What ran, which is less than planned if the cluster stalled.
    let duration = samples.last().map_or(0.0, |s| s.at_secs);
    let (ledger, failures) = stopped?;
    let digest = runtime
        .block_on(crate::tpcc_run::verify_nodes(&cluster))
        .map(hex::encode)
        .map_err(|e| format!("{e:#}"));
    let (mut discrepancies, mut stored_results) = (BTreeMap::new(), BTreeMap::new());
    for db in &cluster.config.db_nodes {
        let (rows, stored) = runtime.block_on(async {
            let mut conn = crate::tpcc_cmd::connect(&db.database).await?;
            let scale = tpcc::ScaleConfig::of_database(&mut conn).await?;
            let rows = tpcc::ledger::Rows::read(&mut conn, &scale).await?;
            let stored = dbvote::executor::stored_results(&mut conn).await?;
            sqlx::Connection::close(conn).await?;
            anyhow::Ok((rows, stored))
        })?;
        let name = format!("dbnode-{}", db.id);
        discrepancies.insert(name.clone(), ledger.compare(&loaded, &rows));
        stored_results.insert(
            name,
            StoredResults {
                rows: stored.0,
                mib: stored.1 as f64 / MIB,
            },
        );
    }
    let judged = judge(&samples, duration, &args.tolerance);
    let report = SoakReport {
        duration_secs: duration,
        planned_secs: args.duration_secs,
        stalled_at_secs,
        restart_every_secs: args.restart_every_secs,
        groups: args.groups,
        terminals: args.terminals,
        usig: format!("{:?}", args.shape.usig).to_lowercase(),
        db: format!("{:?}", args.shape.db).to_lowercase(),
        tolerance: args.tolerance,
        transactions: samples.last().map_or(0, |s| s.transactions),
        failures: failures.len() as u64,
        failure_examples: failures.iter().take(10).cloned().collect(),
        restarts,
        samples,
        judged,
        ledger: discrepancies,
        stored_results,
        digest,
        machine: machine(),
    };
    write_json(&args.out.join("soak.json"), &report)?;
    plot(&report, &args.out.join("soak.svg"))?;
    eprintln!("wrote {}", args.out.join("soak.svg").display());
    verdict(&report)
}

/// Runs the schedule: samples, restarts, progress lines. Returns the samples and restarts.
fn run(
    args: &SoakArgs,
    local: &mut LocalCluster,
    cluster: &Cluster,
    dir: &Path,
    runtime: &tokio::runtime::Runtime,
    completed: &AtomicU64,
) -> Result<(Vec<Sample>, Vec<Restart>, Option<f64>)> {
    let names: Vec<String> = local.pids().into_iter().map(|(n, _)| n).collect();
    let of_role =
        |r: &str| -> Vec<String> { names.iter().filter(|n| role(n) == r).cloned().collect() };
    let (replicas, db_nodes) = (of_role("replica"), of_role("dbnode"));
    if replicas.is_empty() || db_nodes.is_empty() {
        bail!("the cluster has no replica or no database node to restart");
    }
    let data = data_of(cluster, dir);
    let start = Instant::now();
    let end = start + Duration::from_secs(args.duration_secs);
    let every = Duration::from_secs(args.sample_every_secs);
    let (mut samples, mut restarts) = (Vec::<Sample>::new(), Vec::<Restart>::new());
    let mut next_sample = start;
    let mut next_restart = start + Duration::from_secs(args.restart_every_secs);
    let mut last_progress = start;
    // The last restarted node until it recovered, and what it must reach (database nodes).
    let mut recovering: Option<(usize, Option<u64>)> = None;
    let mut waiting_said = false;
    let at = |t: Instant| t.duration_since(start).as_secs_f64();
    let (mut done, mut last_done, mut stalled) = (0, start, None);
    let mut last_saved = start;
    while Instant::now() < end {
        let now = Instant::now();
        if completed.load(Ordering::Relaxed) != done {
            done = completed.load(Ordering::Relaxed);
            last_done = now;
        } else if now.duration_since(last_done) > Duration::from_secs(args.stall_secs) {
            eprintln!(
                "[{:>5.0} s] no transaction completed for {} s: the cluster stalled; stopping \
                 the run (see the logs in {})",
                at(now),
                args.stall_secs,
                dir.join("logs").display()
            );
            stalled = Some(at(last_done));
            break;
        }
        let endpoints: BTreeMap<String, SocketAddr> = local.endpoints().into_iter().collect();
        if let Some((i, target)) = recovering {
            let restart = &mut restarts[i];
            let metrics = endpoints.get(&restart.node).copied();
            let recovered = metrics.is_some_and(|m| match target {
                Some(order) => node::metrics::highest_order(m).is_some_and(|o| o >= order),
                None => {
                    node::metrics::value(m, "cloudbft_recoveries_total").is_some_and(|v| v >= 1.0)
                }
            });
            if recovered {
                let after = at(now) - restart.at_secs;
                restart.recovered_after_secs = Some(after);
                eprintln!(
                    "[{:>5.0} s] {} {} after {after:.1} s",
                    at(now),
                    restart.node,
                    if target.is_some() {
                        "caught up"
                    } else {
                        "rejoined its group"
                    }
                );
                recovering = None;
            }
        }
        if now >= next_restart {
            if let Some((i, _)) = recovering {
                if !waiting_said {
                    eprintln!(
                        "[{:>5.0} s] next restart waits: {} has not recovered yet",
                        at(now),
                        restarts[i].node
                    );
                    waiting_said = true;
                }
            } else {
                let node = victim(restarts.len(), &replicas, &db_nodes);
                // A database node must reach what the others executed when it went down.
                let target = (role(&node) == "dbnode").then(|| {
                    endpoints
                        .iter()
                        .filter(|(n, _)| role(n) == "dbnode" && **n != node)
                        .filter_map(|(_, &m)| node::metrics::highest_order(m))
                        .max()
                        .unwrap_or(0)
                });
                eprintln!(
                    "[{:>5.0} s] killing {node} (SIGKILL), restarting it in {} s",
                    at(now),
                    args.down_secs
                );
                restarts.push(Restart {
                    at_secs: at(now),
                    node: node.clone(),
                    recovered_after_secs: None,
                });
                local.kill_and_restart(&node, Duration::from_secs(args.down_secs))?;
                recovering = Some((restarts.len() - 1, target));
                waiting_said = false;
                next_restart = now + Duration::from_secs(args.restart_every_secs);
            }
        }
        if now >= next_sample {
            let sample = take_sample(local, &data, &endpoints, runtime, completed, at(now));
            let per_sec = match samples.last() {
                Some(last) => {
                    (sample.transactions - last.transactions) as f64
                        / (sample.at_secs - last.at_secs).max(1e-3)
                }
                None => 0.0,
            };
            samples.push(Sample { per_sec, ..sample });
            next_sample += every;
            if now.duration_since(last_progress) >= Duration::from_secs(10) || samples.len() == 1 {
                last_progress = now;
                progress(samples.last().expect("just pushed"), args, restarts.len());
            }
            if now.duration_since(last_saved) >= Duration::from_secs(60) {
                last_saved = now;
                let so_far = serde_json::json!({ "samples": &samples, "restarts": &restarts });
                let path = args.out.join("samples.json");
                std::fs::write(&path, so_far.to_string())
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let endpoints: BTreeMap<String, SocketAddr> = local.endpoints().into_iter().collect();
    let last = take_sample(
        local,
        &data,
        &endpoints,
        runtime,
        completed,
        at(Instant::now()),
    );
    if let Some(previous) = samples.last() {
        let per_sec = (last.transactions - previous.transactions) as f64
            / (last.at_secs - previous.at_secs).max(1e-3);
        samples.push(Sample { per_sec, ..last });
    }
    Ok((samples, restarts, stalled))
}

fn take_sample(
    local: &LocalCluster,
    data: &[(String, Data)],
    endpoints: &BTreeMap<String, SocketAddr>,
    runtime: &tokio::runtime::Runtime,
    completed: &AtomicU64,
    at_secs: f64,
) -> Sample {
    let mut rss_mib: BTreeMap<String, f64> = local
        .pids()
        .into_iter()
        .filter_map(|(name, pid)| Some((name, resident_mib(pid)?)))
        .collect();
    if let Some(me) = resident_mib(std::process::id()) {
        rss_mib.insert("driver".into(), me);
    }
    let disk_mib = data
        .iter()
        .filter_map(|(name, d)| {
            let bytes = match d {
                Data::Paths(paths) => paths.iter().map(|p| disk_bytes(p)).sum::<u64>() as f64,
                Data::Postgres(url) => match runtime.block_on(postgres_bytes(url)) {
                    Ok(bytes) => bytes as f64,
                    Err(e) => {
                        tracing::warn!(error = %e, "measuring {name}'s database");
                        return None;
                    }
                },
            };
            Some((name.clone(), bytes / MIB))
        })
        .collect();
    let executed = endpoints
        .iter()
        .filter(|(n, _)| role(n) == "dbnode")
        .filter_map(|(n, &m)| Some((n.clone(), node::metrics::highest_order(m)?)))
        .collect();
    Sample {
        at_secs,
        transactions: completed.load(Ordering::Relaxed),
        per_sec: 0.0,
        rss_mib,
        disk_mib,
        executed,
    }
}

/// The largest value per role in a sample's map.
fn per_role(values: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for (name, &v) in values {
        let max = out.entry(role(name).to_string()).or_insert(0.0);
        *max = max.max(v);
    }
    out
}

fn progress(s: &Sample, args: &SoakArgs, restarts: usize) {
    let show = |m: BTreeMap<String, f64>| {
        m.iter()
            .map(|(r, v)| format!("{r} {v:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    eprintln!(
        "[{:>5.0} s of {}] {:.1} tx/s, {} transactions, {restarts} restarts; largest RSS MiB: {}; \
         largest disk MiB: {}",
        s.at_secs,
        args.duration_secs,
        s.per_sec,
        s.transactions,
        show(per_role(&s.rss_mib)),
        show(per_role(&s.disk_mib))
    );
}

/// The samples of quarter `q` (0 to 3) of a run of `duration` seconds.
fn quarter(samples: &[Sample], duration: f64, q: usize) -> impl Iterator<Item = &Sample> {
    let (from, to) = (duration * q as f64 / 4.0, duration * (q + 1) as f64 / 4.0);
    samples
        .iter()
        .filter(move |s| s.at_secs >= from && (s.at_secs < to || q == 3))
}

/// Applies the flatness rule ([`Tolerance`]) to every node's memory and every data directory.
/// Two grow by design and are only recorded: the load driver, which keeps every acknowledged
/// New-Order and Payment for the check at the end, and the logs (rotating them is the
/// operator's).
pub fn judge(samples: &[Sample], duration: f64, t: &Tolerance) -> Vec<Judged> {
    let max_in = |q: usize, get: &dyn Fn(&Sample) -> Option<f64>| {
        quarter(samples, duration, q)
            .filter_map(get)
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    };
    let mut names: Vec<(String, &str)> = Vec::new();
    if let Some(first) = samples.first() {
        names.extend(
            first
                .rss_mib
                .keys()
                .filter(|n| *n != "driver")
                .map(|n| (n.clone(), "rss_mib")),
        );
        names.extend(
            first
                .disk_mib
                .keys()
                .filter(|n| *n != "logs")
                .map(|n| (n.clone(), "disk_mib")),
        );
    }
    let mut out = Vec::new();
    for (name, measure) in names {
        let get = |s: &Sample| match measure {
            "rss_mib" => s.rss_mib.get(&name).copied(),
            _ => s.disk_mib.get(&name).copied(),
        };
        if measure == "disk_mib" && role(&name) == "dbnode" {
            if let Some(j) = judge_per_order(samples, duration, &name, t) {
                out.push(j);
            }
            continue;
        }
        let (Some(second), Some(last)) = (max_in(1, &get), max_in(3, &get)) else {
            continue;
        };
        let (pct, slack) = if measure == "rss_mib" {
            (t.rss_tolerance_pct, t.rss_slack_mib)
        } else {
            (t.disk_tolerance_pct, t.disk_slack_mib)
        };
        let bound = second * (1.0 + pct / 100.0) + slack;
        out.push(Judged {
            what: name.clone(),
            measure: measure.into(),
            second_quarter: second,
            last_quarter: last,
            orders: None,
            bound,
            flat: last <= bound,
        });
    }
    out
}

/// A database node's data growth per executed order, second quarter against last.
fn judge_per_order(samples: &[Sample], duration: f64, name: &str, t: &Tolerance) -> Option<Judged> {
    let growth = |q: usize| -> Option<(f64, u64)> {
        let points: Vec<(f64, u64)> = quarter(samples, duration, q)
            .filter_map(|s| Some((*s.disk_mib.get(name)?, *s.executed.get(name)?)))
            .collect();
        let (first, last) = (points.first()?, points.last()?);
        Some((last.0 - first.0, last.1.saturating_sub(first.1)))
    };
    let ((grown2, orders2), (grown4, orders4)) = (growth(1)?, growth(3)?);
    let per_order = grown2.max(0.0) / orders2.max(1) as f64;
    let bound =
        per_order * orders4 as f64 * (1.0 + t.disk_tolerance_pct / 100.0) + t.disk_slack_mib;
    Some(Judged {
        what: name.into(),
        measure: "disk_growth_mib_per_quarter".into(),
        second_quarter: grown2,
        last_quarter: grown4,
        orders: Some((orders2, orders4)),
        bound,
        flat: grown4 <= bound,
    })
}

/// Prints the largest memory and disk use per role at the start, at the end of the warm-up
/// and at the end, and the throughput per quarter: the figures docs/operations.md reports.
fn summary(r: &SoakReport) {
    let (Some(first), Some(last)) = (r.samples.first(), r.samples.last()) else {
        return;
    };
    let warm = r
        .samples
        .iter()
        .find(|s| s.at_secs >= r.duration_secs / 4.0)
        .unwrap_or(last);
    for what in ["RSS", "disk"] {
        let of = |s: &Sample| {
            per_role(if what == "RSS" {
                &s.rss_mib
            } else {
                &s.disk_mib
            })
        };
        let (a, b, c) = (of(first), of(warm), of(last));
        for (role, end) in &c {
            println!(
                "  {what:<4} {role:<8} largest: start {:>7.2} MiB, after the warm-up ({:.0} s) \
                 {:>7.2} MiB, end {end:>7.2} MiB",
                a.get(role).copied().unwrap_or(0.0),
                warm.at_secs,
                b.get(role).copied().unwrap_or(0.0),
            );
        }
    }
    let rates: Vec<String> = (0..4)
        .map(|q| {
            let in_q: Vec<&Sample> = quarter(&r.samples, r.duration_secs, q).collect();
            match (in_q.first(), in_q.last()) {
                (Some(a), Some(b)) if b.at_secs > a.at_secs => format!(
                    "{:.1}",
                    (b.transactions - a.transactions) as f64 / (b.at_secs - a.at_secs)
                ),
                _ => "-".into(),
            }
        })
        .collect();
    println!(
        "  throughput per quarter: {} transactions/s",
        rates.join(", ")
    );
}

/// Prints the verdict; an error names what grew or what failed.
fn verdict(r: &SoakReport) -> Result<()> {
    let restarted = |role_name: &str| {
        r.restarts
            .iter()
            .filter(|x| role(&x.node) == role_name)
            .count()
    };
    let slowest = r
        .restarts
        .iter()
        .filter_map(|x| x.recovered_after_secs)
        .fold(0.0f64, f64::max);
    println!(
        "soak: {:.0} s, {} transactions ({:.1}/s), {} failed; {} restarts ({} replica, {} \
         database node; slowest recovery {slowest:.1} s)",
        r.duration_secs,
        r.transactions,
        r.transactions as f64 / r.duration_secs.max(1.0),
        r.failures,
        r.restarts.len(),
        restarted("replica"),
        restarted("dbnode")
    );
    summary(r);
    for j in &r.judged {
        let unit = if j.measure == "rss_mib" {
            "RSS"
        } else if j.orders.is_some() {
            "data growth"
        } else {
            "disk"
        };
        let orders = j
            .orders
            .map(|(a, b)| format!(" ({a} then {b} orders)"))
            .unwrap_or_default();
        println!(
            "  {:<14} {unit:<11} 2nd quarter {:>8.2} MiB, last {:>8.2} MiB{orders}, bound {:>8.2} MiB: {}",
            j.what,
            j.second_quarter,
            j.last_quarter,
            j.bound,
            if j.flat { "flat" } else { "GREW" }
        );
    }
    for (node, s) in &r.stored_results {
        println!(
            "  {node:<14} keeps {} results of executed orders, {:.2} MiB ({:.0} bytes each; \
             older ones are forgotten, see --keep-results)",
            s.rows,
            s.mib,
            s.mib * MIB / s.rows.max(1) as f64
        );
    }
    let mut problems: Vec<String> = r
        .judged
        .iter()
        .filter(|j| !j.flat)
        .map(|j| {
            format!(
                "{}'s {} grew: {:.2} MiB in the last quarter against {:.2} MiB in the second \
                 (bound {:.2} MiB)",
                j.what, j.measure, j.last_quarter, j.second_quarter, j.bound
            )
        })
        .collect();
    if r.failures > 0 {
        problems.push(format!(
            "{} requests failed, e.g. {:?}",
            r.failures, r.failure_examples
        ));
    }
    for (node, d) in &r.ledger {
        if !d.is_exact() {
            problems.push(format!(
                "{node} does not hold exactly the acknowledged transactions: {d:?}"
            ));
        }
    }
    if let Some(at) = r.stalled_at_secs {
        problems.push(format!(
            "the cluster stalled: no transaction completed after {at:.0} s (of {} planned)",
            r.planned_secs
        ));
    }
    if let Err(e) = &r.digest {
        problems.push(e.clone());
    }
    for x in r
        .restarts
        .iter()
        .filter(|x| x.recovered_after_secs.is_none())
    {
        problems.push(format!(
            "{} (restarted at {:.0} s) had not recovered by the end",
            x.node, x.at_secs
        ));
    }
    if restarted("replica") == 0 || restarted("dbnode") == 0 {
        problems.push(
            "the run restarted no replica or no database node: make --duration-secs at least \
             twice --restart-every-secs"
                .into(),
        );
    }
    if problems.is_empty() {
        println!(
            "flat: memory and disk did not grow after the warm-up; every database node holds \
             exactly the acknowledged transactions"
        );
        Ok(())
    } else {
        bail!("{}", problems.join("; "))
    }
}

fn plot(r: &SoakReport, path: &Path) -> Result<()> {
    let series = |get: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        r.samples
            .iter()
            .filter_map(|s| get(s).map(|v| (s.at_secs, v)))
            .collect()
    };
    let names = |of: &dyn Fn(&Sample) -> Vec<String>| -> Vec<String> {
        let mut all: Vec<String> = r.samples.iter().flat_map(of).collect();
        all.sort();
        all.dedup();
        all
    };
    let rss_names = names(&|s| s.rss_mib.keys().cloned().collect());
    let disk_names = names(&|s| s.disk_mib.keys().cloned().collect());
    let lines = |names: &[String], roles: &[&str], rss: bool| -> Vec<(String, Vec<(f64, f64)>)> {
        names
            .iter()
            .filter(|n| roles.contains(&role(n)))
            .map(|n| {
                let points = series(&|s| {
                    if rss {
                        s.rss_mib.get(n).copied()
                    } else {
                        s.disk_mib.get(n).copied()
                    }
                });
                (n.clone(), points)
            })
            .collect()
    };
    let owned = [
        (
            "RSS of the replicas (MiB)",
            lines(&rss_names, &["replica"], true),
        ),
        (
            "RSS of the database nodes (MiB)",
            lines(&rss_names, &["dbnode"], true),
        ),
        (
            "RSS of the primaries, usigd, the load driver (MiB)",
            lines(&rss_names, &["primary", "usigd", "driver"], true),
        ),
        (
            "replicas' decision logs (MiB)",
            lines(&disk_names, &["replica"], false),
        ),
        (
            "database nodes' databases (MiB)",
            lines(&disk_names, &["dbnode"], false),
        ),
        (
            "usigd state and the logs (MiB)",
            lines(&disk_names, &["usigd", "logs"], false),
        ),
    ];
    let restarts: Vec<(f64, f64)> = r
        .samples
        .iter()
        .map(|s| {
            let n = r.restarts.iter().filter(|x| x.at_secs <= s.at_secs).count();
            (s.at_secs, n as f64)
        })
        .collect();
    let mut panels = vec![
        Panel {
            title: "throughput (transactions/s)",
            // The first sample has no interval before it.
            lines: vec![(
                "completed",
                series(&|s| Some(s.per_sec)).into_iter().skip(1).collect(),
            )],
        },
        Panel {
            title: "nodes killed and restarted so far",
            lines: vec![("restarts", restarts)],
        },
    ];
    for (title, lines) in &owned {
        panels.push(Panel {
            title,
            lines: lines
                .iter()
                .map(|(n, pts)| (n.as_str(), pts.clone()))
                .collect(),
        });
    }
    write_timeline(
        path,
        &format!(
            "soak: {} terminals, {} s, a node killed and restarted every {} s",
            r.terminals, r.duration_secs, r.restart_every_secs
        ),
        &panels,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: f64, rss: f64, disk: f64, db: f64, executed: u64) -> Sample {
        Sample {
            at_secs: at,
            transactions: 0,
            per_sec: 0.0,
            rss_mib: [("replica-101".to_string(), rss)].into(),
            disk_mib: [
                ("replica-101".to_string(), disk),
                ("dbnode-11".to_string(), db),
                ("logs".to_string(), at),
            ]
            .into(),
            executed: [("dbnode-11".to_string(), executed)].into(),
        }
    }

    const T: Tolerance = Tolerance {
        rss_tolerance_pct: 10.0,
        rss_slack_mib: 8.0,
        disk_tolerance_pct: 10.0,
        disk_slack_mib: 8.0,
    };

    #[test]
    fn a_flat_run_passes_and_a_leak_is_named() {
        // Memory that levels off after the warm-up and a database that grows 1 MiB per 100
        // orders throughout: flat. The logs are not judged.
        let flat: Vec<Sample> = (0..40)
            .map(|i| {
                let t = f64::from(i);
                sample(
                    t,
                    30.0 + (t.min(10.0)),
                    2.0 + (i % 3) as f64,
                    t,
                    100 * i as u64,
                )
            })
            .collect();
        let judged = judge(&flat, 40.0, &T);
        assert_eq!(judged.len(), 3, "{judged:?}");
        assert!(judged.iter().all(|j| j.flat), "{judged:?}");
        // Memory that rises 1 MiB a second: GREW, by name.
        let leak: Vec<Sample> = (0..40)
            .map(|i| sample(f64::from(i), 30.0 + f64::from(i), 2.0, 0.0, 0))
            .collect();
        let judged = judge(&leak, 40.0, &T);
        let rss = judged.iter().find(|j| j.measure == "rss_mib").unwrap();
        assert!(!rss.flat && rss.what == "replica-101", "{rss:?}");
        // A database whose bytes per order double in the last quarter: GREW.
        let faster: Vec<Sample> = (0..40)
            .map(|i| {
                let t = f64::from(i);
                let db = if i < 30 {
                    t * 2.0
                } else {
                    60.0 + (t - 30.0) * 10.0
                };
                sample(t, 30.0, 2.0, db, 100 * i as u64)
            })
            .collect();
        let judged = judge(&faster, 40.0, &T);
        let db = judged.iter().find(|j| j.what == "dbnode-11").unwrap();
        assert!(!db.flat, "{db:?}");
    }

    #[test]
    fn restarts_alternate_and_rotate() {
        let r = ["replica-101".to_string(), "replica-102".to_string()];
        let d = [
            "dbnode-11".to_string(),
            "dbnode-12".to_string(),
            "dbnode-13".to_string(),
        ];
        let picked: Vec<String> = (0..6).map(|k| victim(k, &r, &d)).collect();
        assert_eq!(
            picked,
            [
                "replica-101",
                "dbnode-11",
                "replica-102",
                "dbnode-12",
                "replica-101",
                "dbnode-13"
            ]
        );
        assert_eq!(
            sqlite_path("sqlite:/tmp/x/db/node-11.sqlite?mode=rwc"),
            Some(PathBuf::from("/tmp/x/db/node-11.sqlite"))
        );
        assert_eq!(sqlite_path("postgres://h/db"), None);
    }
}
