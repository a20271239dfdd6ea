//! `cloudbft tpcc run`: the TPC-C driver. Closed-loop terminals send the specification's mix
//! through the client library to a fresh local cluster, or, with `--baseline`, run the same
//! transaction programs on one database with no replication; prints tpmC and per-type latency
//! percentiles, checks the consistency conditions and compares the database nodes' digests.

use crate::bench::{work_dir, Percentiles};
use crate::keygen::{DbKind, KeygenArgs, ShapeArgs};
use crate::launch::{LaunchOptions, LocalCluster};
use crate::measure::Watch;
use crate::tpcc_cmd::{connect, load_database, verify, ScaleArgs};
use anyhow::{bail, Context, Result};
use clap::Args;
use client_plugin::client::{ClientEndpoint, ClientOptions};
use dbvote::unreplicated::Unreplicated;
use dbvote::Executor;
use hdrhistogram::Histogram;
use serde::Serialize;
use sqlx::Connection;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tpcc::pages::Shown;
use tpcc::txn::{TpccOp, TpccResult, TxnKind};
use tpcc::workload::{Population, Terminal};
use tpcc::{NuRandConstants, Tpcc};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Groups of 2f+1 replicas.
    #[arg(long, default_value_t = 1)]
    pub groups: u32,
    #[command(flatten)]
    pub shape: ShapeArgs,
    /// Warehouses, one partition each (default: two per group).
    #[arg(long)]
    pub warehouses: Option<u32>,
    #[command(flatten)]
    pub scale: ScaleArgs,
    /// Closed-loop terminals (default: 10 per warehouse, as the specification has).
    #[arg(long)]
    pub terminals: Option<u64>,
    /// Measured seconds (after the warm-up).
    #[arg(long, default_value_t = 30)]
    pub duration_secs: u64,
    #[arg(long, default_value_t = 5)]
    pub warmup_secs: u64,
    /// Use the specification's keying and think times (clause 5.2.5) instead of none.
    #[arg(long)]
    pub spec_times: bool,
    /// Run the same programs on one database with no replication (the baseline).
    #[arg(long)]
    pub baseline: bool,
    /// With --baseline: unreplicated page-rendering servers in front of the database, each
    /// with the page stage of --page-delay-ms/--page-workers/--page-mode (the paper's 1 to 5
    /// unreplicated VMs); terminal t uses server t mod N.
    #[arg(long, default_value_t = 1, requires = "baseline")]
    pub servers: usize,
    /// Most requests per PREPARE; 1 turns batching off.
    #[arg(long, default_value_t = 64, value_parser = crate::launch::max_batch)]
    pub max_batch: usize,
    /// The primaries' `--pipeline`: most PREPAREs undecided at once (0: no limit).
    #[arg(long, default_value_t = crate::nodes::DEFAULT_PIPELINE)]
    pub pipeline: usize,
    #[command(flatten)]
    pub pages: crate::nodes::PageArgs,
    /// Working directory (must not exist; default: a new temporary directory, removed after).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    #[arg(long, default_value_t = 7500)]
    pub base_port: u16,
    /// Write the results as JSON here and the latency CDFs as SVG next to it.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Seed of the load and of the terminals.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// With --db postgres: drop the run's databases once their consistency checks passed. By
    /// default they are kept, for a look at what the run left.
    #[arg(long)]
    pub drop_databases: bool,
}

/// What a run measured.
#[derive(Debug, Serialize)]
pub struct RunReport {
    pub mode: String,
    pub f: usize,
    pub groups: u32,
    pub usig: String,
    pub db: String,
    pub warehouses: u32,
    pub scale: String,
    pub terminals: u64,
    pub spec_times: bool,
    pub duration_secs: f64,
    /// New-Orders completed per minute.
    pub tpmc: f64,
    /// Transactions of every type completed per minute.
    pub tpm_total: f64,
    pub transactions: u64,
    pub per_type: BTreeMap<String, TypeReport>,
    /// Share of measured transactions that touched more than one warehouse.
    pub multi_partition_share: f64,
    /// New-Orders rolled back by their unused item (about 1% of New-Orders).
    pub rollbacks: u64,
    pub errors: u64,
    /// Every measured transaction, whatever its type.
    pub latency_ms: Percentiles,
    pub latency_histogram: LatencyHistogram,
    /// The page stage: per replica in the cluster, per server in the baseline.
    pub page_delay_ms: u64,
    pub page_workers: usize,
    pub page_mode: String,
    /// Unreplicated page-rendering servers (baseline; 0 in the cluster).
    pub servers: usize,
    /// Each node's Prometheus series (stage timings, warrants, decision log appends, executions and the
    /// counters that divide them) grown over the measured window, by process name; empty for
    /// the baseline.
    pub node_metrics: BTreeMap<String, BTreeMap<String, f64>>,
    /// How busy the machine was during the measured window.
    pub load: crate::measure::MachineLoad,
    /// When the measured window began (seconds since 1970).
    pub started_unix: i64,
    pub machine: String,
    /// The build that ran it ([`crate::BUILD`]).
    pub build: String,
}

/// Counts of measured latencies in bins of `bin_ms` milliseconds from 0.
#[derive(Debug, Serialize)]
pub struct LatencyHistogram {
    pub bin_ms: f64,
    pub counts: Vec<u64>,
}

impl LatencyHistogram {
    const BIN_MS: u64 = 10;

    fn of(histogram: &Histogram<u64>) -> LatencyHistogram {
        let bin_us = Self::BIN_MS * 1000;
        let bins = if histogram.is_empty() {
            0
        } else {
            (histogram.max() / bin_us + 1) as usize
        };
        let mut counts = vec![0u64; bins];
        for v in histogram.iter_recorded() {
            let bin = (v.value_iterated_to() / bin_us) as usize;
            if let Some(c) = counts.get_mut(bin.min(bins.saturating_sub(1))) {
                *c += v.count_at_value();
            }
        }
        LatencyHistogram {
            bin_ms: Self::BIN_MS as f64,
            counts,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct TypeReport {
    pub count: u64,
    pub latency_ms: Percentiles,
}

/// Where the terminals send their transactions.
#[derive(Clone)]
enum Target {
    Cluster(ClientEndpoint),
    Baseline(Baseline),
}

/// The unreplicated system: page-rendering servers, each with its own page stage, in front of
/// one database.
#[derive(Clone)]
struct Baseline {
    db: Unreplicated<Tpcc>,
    servers: Arc<Vec<node::page::PageStage>>,
    pages: Arc<dyn group::render::Renderer>,
}

impl Target {
    /// Runs `op` for `terminal`; `Ok(true)` if it was a rolled-back New-Order.
    async fn run(&self, terminal: u64, op: &TpccOp) -> Result<bool> {
        match self {
            Target::Cluster(client) => {
                let accepted = client.invoke(op.partitions()?, op.encode()).await?;
                match tpcc::pages::shown(&accepted.page) {
                    // Generated inputs are always valid.
                    Shown::Refused => bail!(
                        "the cluster refused the generated input: {}",
                        String::from_utf8_lossy(&accepted.page)
                    ),
                    shown => Ok(shown == Shown::RolledBack),
                }
            }
            Target::Baseline(b) => {
                let operation = op.encode();
                let bytes = b.db.execute(operation.clone()).await?;
                let result = TpccResult::decode(&bytes)?;
                if let TpccResult::Invalid(invalid) = result {
                    bail!("refused generated input: {invalid}");
                }
                // The server renders the same page a replica would, then spends its page stage.
                let request = proto::RequestBody {
                    client: proto::ClientId(terminal),
                    timestamp: 0,
                    partitions: op.partitions()?,
                    operation,
                };
                std::hint::black_box(b.pages.render(&request, &bytes));
                let server = terminal as usize % b.servers.len().max(1);
                if let Some(stage) = b.servers.get(server) {
                    if !stage.is_instant() {
                        stage.render().await;
                    }
                }
                Ok(matches!(result, TpccResult::NewOrderRolledBack { .. }))
            }
        }
    }
}

/// What one terminal measured.
struct Tally {
    histograms: BTreeMap<TxnKind, Histogram<u64>>,
    multi_partition: u64,
    rollbacks: u64,
    errors: u64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            histograms: TxnKind::ALL
                .iter()
                .map(|&k| (k, Histogram::new(3).expect("3 significant digits")))
                .collect(),
            multi_partition: 0,
            rollbacks: 0,
            errors: 0,
        }
    }

    fn add(&mut self, other: Tally) -> Result<()> {
        for (kind, h) in other.histograms {
            if let Some(mine) = self.histograms.get_mut(&kind) {
                mine.add(&h).context("merging histograms")?;
            }
        }
        self.multi_partition += other.multi_partition;
        self.rollbacks += other.rollbacks;
        self.errors += other.errors;
        Ok(())
    }
}

pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

pub fn run(args: RunArgs) -> Result<()> {
    let dir = work_dir(args.data_dir.as_deref(), "cloudbft-tpcc-")?;
    let warehouses = args.warehouses.unwrap_or(2 * args.groups).max(1);
    let terminals = args.terminals.unwrap_or(10 * u64::from(warehouses)).max(1);
    let runtime = tokio::runtime::Runtime::new()?;
    let report = if args.baseline {
        runtime.block_on(run_baseline(&args, &dir, warehouses, terminals))?
    } else {
        run_cluster(&args, &runtime, &dir, warehouses, terminals)?
    };
    if args.data_dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    print_report(&report);
    if let Some(path) = &args.json {
        crate::report::write_json(path, &report)?;
    }
    Ok(())
}

fn run_cluster(
    args: &RunArgs,
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
    warehouses: u32,
    terminals: u64,
) -> Result<RunReport> {
    let keygen = KeygenArgs {
        out: dir.to_path_buf(),
        groups: args.groups,
        max_groups: None,
        spare_machines: 0,
        partitions: warehouses,
        shape: args.shape.clone(),
        base_port: args.base_port,
        clients: 2 * terminals,
        client_endpoints: 2,
        application: tpcc::txn::NAME.into(),
    };
    let (config, cluster) =
        crate::tpcc_cmd::prepare_loaded(&keygen, runtime, &args.scale.config(), args.seed)?;
    let mut local = LocalCluster::start(
        &config,
        args.shape.usig,
        false,
        &LaunchOptions::measured(args.max_batch, args.pipeline, &args.pages),
    )?;
    eprintln!("cluster up in {}", dir.display());
    let report = runtime.block_on(async {
        let client =
            crate::launch::load_driver(Arc::new(cluster.clone()), dir, ClientOptions::default())
                .await?;
        let watch = Watch::of(&local);
        let target = Target::Cluster(client.clone());
        let report = drive(args, target, warehouses, terminals, watch).await;
        client.shutdown().await;
        report
    })?;
    // Stopping drains: every database node reaches the same order before it stops.
    local.stop();
    runtime.block_on(verify_nodes(&cluster))?;
    if args.drop_databases {
        runtime.block_on(crate::bench::drop_databases(&cluster))?;
    }
    Ok(report)
}

/// Checks every database node of a stopped cluster: the twelve consistency conditions on each
/// (a line per condition), and identical digests. Returns the digest.
pub async fn verify_nodes(cluster: &proto::config::Cluster) -> Result<[u8; 32]> {
    let mut digests = Vec::new();
    for db in &cluster.config.db_nodes {
        let mut conn = connect(&db.database).await?;
        let digest = verify(&mut conn, &format!("database node {}", db.id)).await?;
        digests.push((db.id, digest));
    }
    if digests.windows(2).any(|w| w[0].1 != w[1].1) {
        bail!("the database nodes' digests differ: {digests:?}");
    }
    let digest = digests.first().map(|d| d.1).unwrap_or_default();
    eprintln!(
        "all {} database nodes hold identical state (digest {})",
        digests.len(),
        hex::encode(digest)
    );
    Ok(digest)
}

async fn run_baseline(
    args: &RunArgs,
    dir: &Path,
    warehouses: u32,
    terminals: u64,
) -> Result<RunReport> {
    let url = match args.shape.db {
        DbKind::Sqlite => dbvote::sqlite_url(&dir.join("baseline.sqlite")),
        DbKind::Postgres => format!(
            "{}/{}_baseline",
            args.shape.postgres.trim_end_matches('/'),
            args.shape.db_prefix
        ),
    };
    std::fs::create_dir_all(dir)?;
    load_database(&url, &args.scale.config(), i64::from(warehouses), args.seed)
        .await
        .with_context(|| format!("loading the baseline database {url}"))?;
    let executor = Executor::open(&url, Tpcc, warehouses).await?;
    let db = Unreplicated::new(executor).await?;
    let p = &args.pages;
    let servers = (0..args.servers.max(1))
        .map(|_| {
            let delay = Duration::from_millis(p.page_delay_ms);
            node::page::PageStage::new(delay, p.page_workers, p.page_mode)
        })
        .collect();
    let baseline = Baseline {
        db: db.clone(),
        servers: Arc::new(servers),
        pages: node::app::AppKind::Tpcc.renderer(),
    };
    let target = Target::Baseline(baseline);
    let report = drive(args, target, warehouses, terminals, Watch::default()).await?;
    db.executor().close().await;
    let mut conn = connect(&url).await?;
    verify(&mut conn, "the baseline database").await?;
    conn.close().await?;
    if args.drop_databases {
        dbvote::postgres::drop_database(&url).await?;
    }
    Ok(report)
}

async fn drive(
    args: &RunArgs,
    target: Target,
    warehouses: u32,
    terminals: u64,
    watch: Watch,
) -> Result<RunReport> {
    let scale = args.scale.config();
    let population = Population {
        warehouses,
        scale,
        constants: NuRandConstants::for_load(args.seed).for_run(args.seed.wrapping_add(1)),
    };
    let warmup_end = Instant::now() + Duration::from_secs(args.warmup_secs);
    let end = warmup_end + Duration::from_secs(args.duration_secs);
    let done = Arc::new(AtomicU64::new(0));
    let new_orders = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..terminals {
        let mut terminal = Terminal::new(t, population, args.seed);
        let (target, done, new_orders) = (target.clone(), done.clone(), new_orders.clone());
        let spec_times = args.spec_times;
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::new();
            while Instant::now() < end {
                let op = terminal.next(unix_now());
                let kind = op.kind();
                let (keying, think) = terminal.keying_and_think(kind);
                if spec_times {
                    tokio::time::sleep_until((Instant::now() + keying).into()).await;
                }
                let started = Instant::now();
                let outcome = target.run(t, &op).await;
                // Every transaction that completes inside the window counts, whenever it
                // started: with queues longer than the window's edges, counting only those that
                // also started inside it would undercount a saturated system's throughput.
                let finished = Instant::now();
                let measured = finished >= warmup_end && finished <= end;
                match outcome {
                    Ok(rolled_back) if measured => {
                        let micros = started.elapsed().as_micros() as u64;
                        if let Some(h) = tally.histograms.get_mut(&kind) {
                            let _ = h.record(micros.max(1));
                        }
                        tally.multi_partition += u64::from(op.warehouses().len() > 1);
                        tally.rollbacks += u64::from(rolled_back);
                        done.fetch_add(1, Ordering::Relaxed);
                        if kind == TxnKind::NewOrder {
                            new_orders.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tally.errors += 1;
                        tracing::warn!(error = %e, "{} failed", kind.name());
                    }
                }
                if spec_times {
                    tokio::time::sleep_until((Instant::now() + think).into()).await;
                }
            }
            tally
        }));
    }
    // The nodes' counters and the machine's CPU at the start and end of the measured window.
    let watcher = tokio::spawn(async move {
        tokio::time::sleep_until(warmup_end.into()).await;
        let before = watch.scrape();
        let pids = watch.pid_numbers();
        let mut cpu = crate::measure::CpuSample::now(&pids);
        let started_unix = unix_now();
        let mut second = tokio::time::interval(Duration::from_secs(1));
        second.tick().await;
        while Instant::now() + Duration::from_secs(1) < end {
            second.tick().await;
            cpu.sample();
        }
        tokio::time::sleep_until(end.into()).await;
        let load = cpu.finish(&pids);
        let after = watch.scrape();
        let (before, after) = (before.await?, after.await?);
        anyhow::Ok((crate::measure::deltas(&before, &after), load, started_unix))
    });
    let progress = tokio::spawn(async move {
        let started = Instant::now();
        let mut last = 0;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = done.load(Ordering::Relaxed);
            if Instant::now() < warmup_end {
                eprintln!("  {:>3} s: warming up", started.elapsed().as_secs());
            } else {
                eprintln!(
                    "  {:>3} s: {now} transactions measured ({} New-Orders), {}/s now",
                    started.elapsed().as_secs(),
                    new_orders.load(Ordering::Relaxed),
                    now - last
                );
            }
            last = now;
        }
    });
    let mut tally = Tally::new();
    for task in tasks {
        tally.add(task.await?)?;
    }
    progress.abort();
    let (node_metrics, load, started_unix) = watcher.await??;
    let mut all = Histogram::<u64>::new(3).expect("3 significant digits");
    for h in tally.histograms.values() {
        all.add(h).context("merging histograms")?;
    }
    if let Some(path) = &args.json {
        let series: Vec<(&str, &Histogram<u64>)> = tally
            .histograms
            .iter()
            .map(|(k, h)| (k.name(), h))
            .collect();
        crate::report::write_cdf(&path.with_extension("svg"), &series, "TPC-C")?;
    }
    let minutes = args.duration_secs.max(1) as f64 / 60.0;
    let count = |k: &TxnKind| tally.histograms.get(k).map_or(0, Histogram::len);
    let transactions: u64 = TxnKind::ALL.iter().map(count).sum();
    let per_type = tally
        .histograms
        .iter()
        .map(|(k, h)| {
            (
                k.name().to_string(),
                TypeReport {
                    count: h.len(),
                    latency_ms: Percentiles::of(h),
                },
            )
        })
        .collect();
    Ok(RunReport {
        mode: if args.baseline {
            "baseline (one database, no replication)".into()
        } else {
            "cluster".into()
        },
        f: args.shape.f,
        groups: if args.baseline { 0 } else { args.groups },
        usig: format!("{:?}", args.shape.usig).to_lowercase(),
        db: format!("{:?}", args.shape.db).to_lowercase(),
        warehouses,
        scale: format!(
            "{} items, {} districts/warehouse, {} customers/district",
            scale.items, scale.districts_per_warehouse, scale.customers_per_district
        ),
        terminals,
        spec_times: args.spec_times,
        duration_secs: args.duration_secs as f64,
        tpmc: count(&TxnKind::NewOrder) as f64 / minutes,
        tpm_total: transactions as f64 / minutes,
        transactions,
        per_type,
        multi_partition_share: tally.multi_partition as f64 / transactions.max(1) as f64,
        rollbacks: tally.rollbacks,
        errors: tally.errors,
        latency_ms: Percentiles::of(&all),
        latency_histogram: LatencyHistogram::of(&all),
        page_delay_ms: args.pages.page_delay_ms,
        page_workers: args.pages.page_workers,
        page_mode: args.pages.page_mode.name().into(),
        servers: if args.baseline {
            args.servers.max(1)
        } else {
            0
        },
        node_metrics,
        load,
        started_unix,
        machine: crate::bench::machine(),
        build: crate::BUILD.to_owned(),
    })
}

fn print_report(r: &RunReport) {
    println!(
        "TPC-C {} f={} groups={} usig={} db={} warehouses={} ({}) terminals={}; build {}",
        r.mode, r.f, r.groups, r.usig, r.db, r.warehouses, r.scale, r.terminals, r.build
    );
    if r.page_delay_ms > 0 {
        let at = if r.servers > 0 {
            format!("{} page-rendering server(s)", r.servers)
        } else {
            "replica".into()
        };
        println!(
            "page stage: {} ms per page, {} worker(s) per {at} ({})",
            r.page_delay_ms, r.page_workers, r.page_mode
        );
    }
    println!(
        "tpmC {:.0} (New-Orders per minute), {:.0} transactions per minute, {} transactions in \
         {:.0} s; {:.1}% multi-partition, {} rolled back, {} errors",
        r.tpmc,
        r.tpm_total,
        r.transactions,
        r.duration_secs,
        100.0 * r.multi_partition_share,
        r.rollbacks,
        r.errors
    );
    for (name, t) in &r.per_type {
        println!(
            "  {name:<13} {:>7}  p50 {:>8.2} ms  p95 {:>8.2} ms  p99 {:>8.2} ms",
            t.count, t.latency_ms.p50, t.latency_ms.p95, t.latency_ms.p99
        );
    }
    println!(
        "  all types: p50 {:.2} ms  p95 {:.2} ms  p99 {:.2} ms  mean {:.2} ms",
        r.latency_ms.p50, r.latency_ms.p95, r.latency_ms.p99, r.latency_ms.mean
    );
    println!(
        "  ({}; during the window: load average {:.2}, CPU busy {:.0}%, of which other \
         processes {:.0}%)",
        r.machine,
        r.load.loadavg_1m_mean,
        100.0 * r.load.cpu_busy,
        100.0 * r.load.cpu_others
    );
}
