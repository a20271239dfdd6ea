//! `cloudbft bench`: closed-loop clients through the client library (or, `--via-gateway`, as
//! HTTP forms through a gateway) against a fresh local cluster (or, `--responders`, stand-ins
//! that measure the driver or the gateway alone: crate::responders); prints throughput and
//! latency percentiles and can write them as JSON with two SVG plots, the latency CDF and the
//! timeline (throughput and latency per interval of the measured window, so that a stall or a
//! slow start shows instead of hiding in the run's averages).
//! `cloudbft bench summary` and `cloudbft bench compare` read the JSON (`bench_report`).

use crate::cpu::CpuSnapshot;
use crate::keygen::{KeygenArgs, ShapeArgs};
use crate::launch::{prepare, LaunchOptions, LocalCluster};
use crate::measure::Watch;
use crate::report::{write_timeline, Panel};
use anyhow::{bail, Context, Result};
use clap::Args;
use client_plugin::client::ClientOptions;
use dbvote::bank::BankOp;
use dbvote::noop::NoopOp;
use hdrhistogram::Histogram;
use proto::testing::Rng;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `cloudbft bench`: a run, or one of the subcommands that read the JSON reports of runs.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchCommand {
    #[command(subcommand)]
    pub read: Option<crate::bench_report::ReportCommand>,
    #[command(flatten)]
    pub run: BenchArgs,
}

/// Runs the benchmark, or reads reports when a subcommand was given.
pub fn command(command: BenchCommand) -> Result<()> {
    match command.read {
        Some(read) => crate::bench_report::run(read),
        None => bench(command.run),
    }
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[arg(long, default_value_t = 1)]
    pub groups: u32,
    #[command(flatten)]
    pub shape: ShapeArgs,
    /// "noop" or "bank" (each client moves a cent from its account to the next client's).
    #[arg(long, default_value = "noop")]
    pub application: String,
    /// Closed-loop clients (each waits for its reply before sending the next request).
    #[arg(long, default_value_t = 16)]
    pub clients: u64,
    /// Measured seconds (after the warm-up).
    #[arg(long, default_value_t = 10)]
    pub duration_secs: u64,
    #[arg(long, default_value_t = 2)]
    pub warmup_secs: u64,
    /// Most requests per PREPARE; 1 turns batching off.
    #[arg(long, default_value_t = 64, value_parser = crate::launch::max_batch)]
    pub max_batch: usize,
    /// The primaries' `--pipeline`: most PREPAREs undecided at once (0: no limit).
    #[arg(long, default_value_t = crate::nodes::DEFAULT_PIPELINE)]
    pub pipeline: usize,
    /// Share of operations that touch two partitions.
    #[arg(long, default_value_t = 0.0)]
    pub multi_partition: f64,
    #[command(flatten)]
    pub pages: crate::nodes::PageArgs,
    /// Cluster directory (must not exist; default: a new temporary directory).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    #[arg(long, default_value_t = 7300)]
    pub base_port: u16,
    /// The timeline's interval in milliseconds: throughput and latency percentiles are
    /// recorded for each interval of the measured window.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub interval_ms: u64,
    /// Write the results as JSON here, the latency CDF as SVG next to it (F.json: F.svg) and
    /// the timeline too (F-timeline.svg).
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// With --db postgres: drop the database nodes' databases when the run ends. By default
    /// they are kept, for a look at what the run left; a later run then needs them dropped or
    /// another --db-prefix.
    #[arg(long)]
    pub drop_databases: bool,
    /// Replace the cluster with responders that answer each request at once as a correct
    /// group would (`cloudbft responders`: no ordering, no warrants, no database; no-op
    /// only): the run then measures the load driver, or with --via-gateway the gateway, alone.
    #[arg(long)]
    pub responders: bool,
    /// Post each operation as a browser would, the no-op form over HTTP/1.1 (kept-alive
    /// connections) to a gateway started with the cluster, instead of calling the client
    /// library in the driver (no-op on one partition only).
    #[arg(long)]
    pub via_gateway: bool,
    /// Where the gateway of --via-gateway listens.
    #[arg(long, default_value = "127.0.0.1:7299")]
    pub gateway_addr: std::net::SocketAddr,
}

/// What a run measured: written by `--json`, read back by `cloudbft bench summary` and
/// `compare` (so fields added later default when an older report lacks them).
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub application: String,
    pub f: usize,
    pub groups: u32,
    pub usig: String,
    pub db: String,
    pub clients: u64,
    pub max_batch: usize,
    /// The load met responders instead of the cluster (`--responders`; false in older
    /// reports).
    #[serde(default)]
    pub responders: bool,
    /// The load went through a gateway over HTTP (`--via-gateway`; false in older reports).
    #[serde(default)]
    pub via_gateway: bool,
    /// The primaries' `--pipeline` (0 in reports from before it existed: no limit then). Not
    /// in the label, so that `compare` pairs runs before and after it.
    #[serde(default)]
    pub pipeline: usize,
    pub multi_partition: f64,
    pub duration_secs: f64,
    pub operations: u64,
    pub throughput_per_sec: f64,
    pub latency_ms: Percentiles,
    pub retransmissions: u64,
    pub errors: u64,
    /// Requests per signature the load driver made (its endpoint signs the requests that are
    /// ready together; 0 in reports from before requests were batch-signed).
    #[serde(default)]
    pub requests_per_signature: f64,
    /// Requests per PREPARE over the measured window, from the primaries' metrics: what the
    /// per-PREPARE work (warrants, COMMITs, COMMIT-DBs, a database transaction) is spread over
    /// (0 in reports from before it was recorded).
    #[serde(default)]
    pub requests_per_prepare: f64,
    /// Executions per database transaction over the measured window, from the database nodes'
    /// metrics (0 in reports from before it was recorded).
    #[serde(default)]
    pub executions_per_transaction: f64,
    /// CPU time of every process of the run (cluster and load driver) per measured operation
    /// (empty in reports from before it was measured).
    #[serde(default)]
    pub cpu: crate::cpu::CpuPerOperation,
    pub machine: String,
    /// The build that ran it ([`crate::BUILD`]; empty in reports from before it was recorded).
    #[serde(default)]
    pub build: String,
    /// The length of the timeline's intervals (0 in reports from before the timeline).
    #[serde(default)]
    pub interval_secs: f64,
    /// The measured window interval by interval: its operations add up to `operations`.
    #[serde(default)]
    pub timeline: Vec<Interval>,
}

impl Report {
    /// What was run, in one line: `noop f=1 groups=1 usig=soft db=sqlite clients=16
    /// max_batch=64`, then ` via=gateway` and ` responders` when they apply.
    pub fn label(&self) -> String {
        format!(
            "{} f={} groups={} usig={} db={} clients={} max_batch={}{}{}",
            self.application,
            self.f,
            self.groups,
            self.usig,
            self.db,
            self.clients,
            self.max_batch,
            if self.via_gateway { " via=gateway" } else { "" },
            if self.responders { " responders" } else { "" },
        )
    }
}

/// One interval of the measured window.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Seconds from the end of the warm-up to the end of this interval.
    pub end_secs: f64,
    /// Operations that completed in this interval.
    pub operations: u64,
    pub throughput_per_sec: f64,
    /// The latency of those operations (None when none completed).
    pub latency_ms: Option<Percentiles>,
    /// Requests that failed in this interval.
    pub errors: u64,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

impl Percentiles {
    /// The percentiles of latencies recorded in microseconds, in milliseconds.
    pub fn of(histogram: &Histogram<u64>) -> Percentiles {
        let ms = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
        Percentiles {
            p50: ms(0.5),
            p95: ms(0.95),
            p99: ms(0.99),
            max: histogram.max() as f64 / 1000.0,
            mean: histogram.mean() / 1000.0,
        }
    }
}

/// The timeline of a measured window as the client tasks record it: per interval, one small
/// histogram (two significant digits, its range allocated up front, so recording allocates
/// nothing) and an error counter, found by when an operation completed. A lock per interval is
/// held only while a value is recorded.
pub struct Recorder {
    start: Instant,
    window: Duration,
    interval: Duration,
    slots: Vec<(Mutex<Histogram<u64>>, AtomicU64)>,
}

/// The longest latency an interval's histogram tells apart (in µs); longer ones count as this.
const LONGEST_US: u64 = 60_000_000;

impl Recorder {
    /// A recorder for the `window` from `start`, in intervals of `interval` (the last one may be
    /// shorter).
    pub fn new(start: Instant, window: Duration, interval: Duration) -> Result<Recorder> {
        let interval = interval.max(Duration::from_millis(1));
        let count = window.as_nanos().div_ceil(interval.as_nanos()).max(1);
        let slots = (0..count)
            .map(|_| {
                let histogram = Histogram::new_with_bounds(1, LONGEST_US, 2)?;
                Ok((Mutex::new(histogram), AtomicU64::new(0)))
            })
            .collect::<Result<_>>()?;
        Ok(Recorder {
            start,
            window,
            interval,
            slots,
        })
    }

    /// The interval of an event at `at`, or None outside the window.
    fn slot(&self, at: Instant) -> Option<&(Mutex<Histogram<u64>>, AtomicU64)> {
        let offset = at.checked_duration_since(self.start)?;
        if offset > self.window {
            return None;
        }
        let i = (offset.as_nanos() / self.interval.as_nanos()) as usize;
        self.slots.get(i.min(self.slots.len() - 1))
    }

    /// An operation that completed at `at` after `micros` µs.
    pub fn record(&self, at: Instant, micros: u64) {
        if let Some((histogram, _)) = self.slot(at) {
            let mut histogram = histogram.lock().unwrap_or_else(|e| e.into_inner());
            histogram.saturating_record(micros.max(1));
        }
    }

    /// A request that failed at `at`.
    pub fn error(&self, at: Instant) {
        if let Some((_, errors)) = self.slot(at) {
            errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The intervals as the report carries them.
    pub fn intervals(&self) -> Vec<Interval> {
        self.slots
            .iter()
            .enumerate()
            .map(|(i, (histogram, errors))| {
                let histogram = histogram.lock().unwrap_or_else(|e| e.into_inner());
                let begin = self.interval * i as u32;
                let end = (begin + self.interval).min(self.window);
                let secs = (end - begin).as_secs_f64().max(f64::MIN_POSITIVE);
                Interval {
                    end_secs: end.as_secs_f64(),
                    operations: histogram.len(),
                    throughput_per_sec: histogram.len() as f64 / secs,
                    latency_ms: (!histogram.is_empty()).then(|| Percentiles::of(&histogram)),
                    errors: errors.load(Ordering::Relaxed),
                }
            })
            .collect()
    }
}

/// Where `--json F.json` puts the timeline: `F-timeline.svg` next to it.
pub fn timeline_path(json: &Path) -> PathBuf {
    let stem = json.file_stem().unwrap_or_default().to_string_lossy();
    json.with_file_name(format!("{stem}-timeline.svg"))
}

/// Plots the report's timeline: throughput, and latency p50/p95/p99, over the measured window.
fn plot_timeline(path: &Path, report: &Report) -> Result<()> {
    let series = |value: &dyn Fn(&Interval) -> Option<f64>| -> Vec<(f64, f64)> {
        report
            .timeline
            .iter()
            .filter_map(|i| Some((i.end_secs, value(i)?)))
            .collect()
    };
    let latency = |q: fn(&Percentiles) -> f64| series(&|i| i.latency_ms.as_ref().map(q));
    write_timeline(
        path,
        &format!(
            "{}: per {} s after the warm-up",
            report.label(),
            report.interval_secs
        ),
        &[
            Panel {
                title: "throughput (ops/s)",
                lines: vec![("ops/s", series(&|i| Some(i.throughput_per_sec)))],
            },
            Panel {
                title: "latency (ms)",
                lines: vec![
                    ("p50", latency(|p| p.p50)),
                    ("p95", latency(|p| p.p95)),
                    ("p99", latency(|p| p.p99)),
                ],
            },
        ],
    )
}

/// A benchmark's working directory: `data_dir`, which must not exist yet, or a new temporary
/// directory (which the caller removes after the run).
pub fn work_dir(data_dir: Option<&std::path::Path>, prefix: &str) -> Result<PathBuf> {
    Ok(match data_dir {
        Some(d) if d.exists() => bail!("--data-dir {} exists: use a new one", d.display()),
        Some(d) => d.to_path_buf(),
        None => tempfile::Builder::new().prefix(prefix).tempdir()?.keep(),
    })
}

/// What the measurements ran on.
pub fn machine() -> String {
    format!(
        "{} cores, one machine (all processes share it)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    )
}

pub fn bench(args: BenchArgs) -> Result<()> {
    let dir = work_dir(args.data_dir.as_deref(), "cloudbft-bench-")?;
    let partitions = (2 * args.groups).max(2);
    let keygen = KeygenArgs {
        out: dir.clone(),
        groups: args.groups,
        max_groups: None,
        spare_machines: 0,
        partitions,
        shape: args.shape.clone(),
        base_port: args.base_port,
        clients: 2 * args.clients,
        client_endpoints: 2,
        application: args.application.clone(),
    };
    check_load(&args)?;
    let (config, _) = prepare(&keygen)?;
    let mut options = LaunchOptions::measured(args.max_batch, args.pipeline, &args.pages);
    if args.via_gateway {
        options.gateway = Some(args.gateway_addr);
        options.gateway_args = bench_gateway(args.clients);
    }
    let cluster = if args.responders {
        LocalCluster::responders(&config, &options)?
    } else {
        empty_databases(&config)?;
        LocalCluster::start(&config, args.shape.usig, false, &options)?
    };
    eprintln!("cluster up in {}", dir.display());
    // The load driver on one thread: its clients, signer and connections hand work to each
    // other without cross-thread wake-ups, and it leaves the other core to the cluster.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let watch = Watch::of(&cluster);
    let report = runtime.block_on(drive(
        &args,
        cluster.cluster.clone(),
        &dir,
        partitions,
        watch,
    ))?;
    let dropping = args.drop_databases.then(|| cluster.cluster.clone());
    drop(cluster);
    if let Some(databases) = dropping {
        runtime.block_on(drop_databases(&databases))?;
    }
    if args.data_dir.is_none() {
        // A temporary cluster is only kept while it runs (its logs help when a run fails).
        let _ = std::fs::remove_dir_all(&dir);
    }
    print_report(&report);
    if let Some(path) = &args.json {
        crate::report::write_json(path, &report)?;
        let timeline = timeline_path(path);
        plot_timeline(&timeline, &report)?;
        eprintln!("wrote {}", timeline.display());
    }
    Ok(())
}

/// Refuses the combinations that the responders or the gateway's forms cannot run, naming the
/// flag to change.
fn check_load(args: &BenchArgs) -> Result<()> {
    let single_noop = args.application == "noop" && args.multi_partition == 0.0;
    if args.responders && args.application != "noop" {
        bail!("--responders answer no-op requests only: drop --application or --responders");
    }
    if args.via_gateway && !single_noop {
        bail!(
            "--via-gateway posts the no-op form, which names one partition: use --application \
             noop and --multi-partition 0"
        );
    }
    Ok(())
}

/// The gateway's flags for a benchmark: every HTTP client comes from 127.0.0.1, so the
/// per-address form rate and connection limits (there against floods) are lifted, and it
/// serves at least as many requests at once as there are clients; on one thread, as the load
/// driver and the nodes run, since it shares the machine with them.
fn bench_gateway(clients: u64) -> Vec<String> {
    let room = (clients + 64).to_string();
    [
        "--worker-threads",
        "1",
        "--forms-per-second",
        "1000000",
        "--form-burst",
        "1000000",
        "--max-concurrent",
        &room,
        "--max-connections",
        &room,
        "--max-connections-per-client",
        &room,
    ]
    .map(String::from)
    .to_vec()
}

/// Where a run's operations go: the client library in this process, or a gateway over HTTP.
enum Load {
    Library(client_plugin::ClientEndpoint),
    Gateway(std::net::SocketAddr),
}

/// One closed-loop client's way to its [`Load`].
enum Client {
    Library(client_plugin::ClientEndpoint),
    Gateway(crate::form_client::FormClient),
}

impl Load {
    fn client(&self) -> Client {
        match self {
            Load::Library(endpoint) => Client::Library(endpoint.clone()),
            Load::Gateway(at) => Client::Gateway(crate::form_client::FormClient::new(*at)),
        }
    }

    /// Closes the driver's endpoint; the requests it signed together on average (0 through a
    /// gateway, which signs out of the driver's sight).
    async fn finish(self) -> f64 {
        match self {
            Load::Library(endpoint) => {
                let stats = endpoint.stats();
                endpoint.shutdown().await;
                stats.requests_sent as f64 / stats.request_signatures.max(1) as f64
            }
            Load::Gateway(_) => 0.0,
        }
    }
}

impl Client {
    /// Runs one operation; its retransmissions (the gateway does not say: 0).
    async fn invoke(
        &mut self,
        partitions: Vec<proto::PartitionId>,
        operation: Vec<u8>,
    ) -> Result<u32> {
        match self {
            Client::Library(endpoint) => Ok(endpoint
                .invoke(partitions, operation)
                .await?
                .retransmissions),
            Client::Gateway(form) => {
                // check_load allows only one-partition no-ops here.
                let form_body = format!("partition={}", partitions[0]);
                match form.post("/noop", &form_body).await? {
                    200 => Ok(0),
                    status => bail!("the gateway answered {status}"),
                }
            }
        }
    }
}

/// A benchmark starts from empty databases (PostgreSQL ones may survive an earlier run).
pub(crate) fn empty_databases(config: &std::path::Path) -> Result<()> {
    let cluster = proto::config::Cluster::load(config)?;
    let runtime = tokio::runtime::Runtime::new()?;
    for db in &cluster.config.db_nodes {
        let progress = runtime.block_on(node::dbnode::progress(&cluster, &db.database))?;
        if progress.highest_order > 0 {
            bail!(
                "database node {}'s database holds data of an earlier run: drop the \
                 <--db-prefix>_node_* databases, or pass another --db-prefix (and \
                 --drop-databases for runs that should leave none behind)",
                db.id
            );
        }
    }
    Ok(())
}

/// Drops the database nodes' PostgreSQL databases of a stopped cluster (`--drop-databases`;
/// SQLite files go with the cluster's directory).
pub(crate) async fn drop_databases(cluster: &proto::config::Cluster) -> Result<()> {
    for db in &cluster.config.db_nodes {
        dbvote::postgres::drop_database(&db.database)
            .await
            .with_context(|| format!("dropping database node {}'s database", db.id))?;
    }
    Ok(())
}

async fn drive(
    args: &BenchArgs,
    cluster: proto::config::Cluster,
    dir: &std::path::Path,
    partitions: u32,
    watch: Watch,
) -> Result<Report> {
    let load = if args.via_gateway {
        Load::Gateway(args.gateway_addr)
    } else {
        Load::Library(
            crate::launch::load_driver(Arc::new(cluster), dir, ClientOptions::default()).await?,
        )
    };
    let bank = args.application == "bank";
    if bank {
        eprintln!("opening {} accounts", args.clients * u64::from(partitions));
        let mut opens = Vec::new();
        for c in 0..args.clients {
            for branch in 0..partitions {
                let op = BankOp::Open {
                    branch,
                    number: c as u32,
                    initial_cents: 1_000_000_000,
                };
                let mut client = load.client();
                opens.push(tokio::spawn(async move {
                    client.invoke(op.partitions(), op.encode()).await
                }));
            }
        }
        for o in opens {
            o.await??;
        }
    }
    let warmup_end = Instant::now() + Duration::from_secs(args.warmup_secs);
    let end = warmup_end + Duration::from_secs(args.duration_secs);
    let done = Arc::new(AtomicU64::new(0));
    let interval = Duration::from_millis(args.interval_ms);
    let recorder = Arc::new(Recorder::new(warmup_end, end - warmup_end, interval)?);
    // The processes' CPU and the nodes' counters at the start and end of the measured window
    // (scraped off this thread: the clients share it).
    let watcher = tokio::spawn(async move {
        tokio::time::sleep_until(warmup_end.into()).await;
        let before = CpuSnapshot::take(&watch.pids);
        let counters = watch.scrape();
        tokio::time::sleep_until(end.into()).await;
        let after = CpuSnapshot::take(&watch.pids);
        let counters_after = watch.scrape();
        let grown = crate::measure::deltas(&counters.await?, &counters_after.await?);
        anyhow::Ok((before, after, grown))
    });
    let mut tasks = Vec::new();
    for c in 0..args.clients {
        let mut client = load.client();
        let (done, recorder) = (done.clone(), recorder.clone());
        let mut rng = Rng::new(args.seed.wrapping_mul(1000).wrapping_add(c));
        let multi = args.multi_partition;
        let clients = args.clients;
        tasks.push(tokio::spawn(async move {
            let mut histogram = Histogram::<u64>::new(3).expect("3 significant digits");
            let (mut errors, mut retransmissions) = (0u64, 0u64);
            while Instant::now() < end {
                let first = rng.below(u64::from(partitions)) as u32;
                let second = if rng.chance(multi) && partitions > 1 {
                    (first + 1 + rng.below(u64::from(partitions) - 1) as u32) % partitions
                } else {
                    first
                };
                let (parts, op) = if bank {
                    // To the next client's account: money moves, so each transfer reads and
                    // writes two accounts (to the client's own account it would only read).
                    let op = BankOp::Transfer {
                        from: (first, c as u32),
                        to: (second, ((c + 1) % clients) as u32),
                        cents: 1,
                    };
                    (op.partitions(), op.encode())
                } else {
                    let mut partitions = vec![first.min(second), first.max(second)];
                    partitions.dedup();
                    let op = NoopOp {
                        partitions: partitions.clone(),
                        payload: Vec::new(),
                    };
                    (partitions, op.encode())
                };
                let started = Instant::now();
                let result = client.invoke(parts, op).await;
                let finished = Instant::now();
                match result {
                    Ok(retransmitted) if started >= warmup_end && finished <= end => {
                        let micros = (finished - started).as_micros() as u64;
                        let _ = histogram.record(micros.max(1));
                        recorder.record(finished, micros);
                        retransmissions += u64::from(retransmitted);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        errors += 1;
                        recorder.error(finished);
                        tracing::warn!(error = %e, "request failed");
                    }
                }
            }
            (histogram, errors, retransmissions)
        }));
    }
    let progress = {
        let done = done.clone();
        tokio::spawn(async move {
            let mut last = 0;
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let now = done.load(Ordering::Relaxed);
                if Instant::now() < warmup_end {
                    eprintln!("  warming up");
                } else {
                    eprintln!("  {now} operations measured ({}/s now)", now - last);
                }
                last = now;
            }
        })
    };
    let mut histogram = Histogram::<u64>::new(3).expect("3 significant digits");
    let (mut errors, mut retransmissions) = (0, 0);
    for t in tasks {
        let (h, e, r) = t.await?;
        histogram.add(&h).context("merging histograms")?;
        errors += e;
        retransmissions += r;
    }
    progress.abort();
    let (cpu_before, cpu_after, grown) = watcher.await??;
    let requests_per_signature = load.finish().await;
    if let Some(path) = &args.json {
        crate::report::write_cdf(
            &path.with_extension("svg"),
            &[(args.application.as_str(), &histogram)],
            &args.application,
        )?;
    }
    let operations = histogram.len();
    let cpu = cpu_before.per_operation(&cpu_after, operations);
    Ok(Report {
        application: args.application.clone(),
        f: args.shape.f,
        groups: args.groups,
        usig: format!("{:?}", args.shape.usig).to_lowercase(),
        db: format!("{:?}", args.shape.db).to_lowercase(),
        clients: args.clients,
        max_batch: args.max_batch,
        responders: args.responders,
        via_gateway: args.via_gateway,
        pipeline: args.pipeline,
        multi_partition: args.multi_partition,
        duration_secs: args.duration_secs as f64,
        operations,
        throughput_per_sec: operations as f64 / args.duration_secs.max(1) as f64,
        latency_ms: Percentiles::of(&histogram),
        retransmissions,
        errors,
        requests_per_signature,
        requests_per_prepare: crate::measure::mean_batch(&grown, "primary"),
        executions_per_transaction: crate::measure::mean_batch(&grown, "dbnode"),
        cpu,
        machine: machine(),
        build: crate::BUILD.to_owned(),
        interval_secs: interval.as_secs_f64(),
        timeline: recorder.intervals(),
    })
}

fn print_report(r: &Report) {
    println!(
        "{}: {:.0} ops/s, latency p50 {:.2} ms, \
         p95 {:.2} ms, p99 {:.2} ms (max {:.2} ms; {} retransmissions, {} errors; {}; build {})",
        r.label(),
        r.throughput_per_sec,
        r.latency_ms.p50,
        r.latency_ms.p95,
        r.latency_ms.p99,
        r.latency_ms.max,
        r.retransmissions,
        r.errors,
        r.machine,
        r.build
    );
    println!("{}", r.cpu.line());
    // Only the figures that this run's processes counted: a gateway signs out of the driver's
    // sight, and responders make no PREPARE and no transaction.
    let mut batches = Vec::new();
    if !r.via_gateway {
        batches.push(format!(
            "{:.1} requests per client signature (requests the driver signed together)",
            r.requests_per_signature
        ));
    }
    if !r.responders {
        batches.push(format!(
            "{:.1} per PREPARE, {:.1} executions per database transaction",
            r.requests_per_prepare, r.executions_per_transaction
        ));
    }
    if !batches.is_empty() {
        println!("{}", batches.join(", "));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cpu::CpuPerOperation;

    fn percentiles(p50: f64) -> Percentiles {
        Percentiles {
            p50,
            p95: p50 * 1.5,
            p99: p50 * 2.0,
            max: p50 * 3.0,
            mean: p50 * 1.1,
        }
    }

    /// A report as a run of `application` with `clients` clients writes it, with a two-second
    /// timeline and the CPU of three roles.
    pub(crate) fn sample(application: &str, clients: u64, throughput: f64, p50: f64) -> Report {
        let by_role: std::collections::BTreeMap<String, f64> =
            [("dbnode", 0.7), ("driver", 0.1), ("replica", 0.6)]
                .into_iter()
                .map(|(role, ms)| (role.to_string(), ms))
                .collect();
        Report {
            application: application.to_string(),
            f: 1,
            groups: 1,
            usig: "soft".into(),
            db: "sqlite".into(),
            clients,
            max_batch: 64,
            responders: false,
            via_gateway: false,
            pipeline: 1,
            multi_partition: 0.0,
            duration_secs: 2.0,
            operations: (2.0 * throughput) as u64,
            throughput_per_sec: throughput,
            latency_ms: percentiles(p50),
            retransmissions: 0,
            errors: 0,
            requests_per_signature: 4.0,
            requests_per_prepare: 12.0,
            executions_per_transaction: 20.0,
            cpu: CpuPerOperation {
                total_ms: by_role.values().sum(),
                by_process: by_role.clone(),
                by_role,
            },
            machine: "2 cores".into(),
            build: "0123456789ab".into(),
            interval_secs: 1.0,
            timeline: (1..=2)
                .map(|s| Interval {
                    end_secs: f64::from(s),
                    operations: throughput as u64,
                    throughput_per_sec: throughput,
                    latency_ms: Some(percentiles(p50)),
                    errors: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn reports_round_trip_through_json_with_their_timeline() {
        let report = sample("noop", 16, 212.0, 75.0);
        let json = serde_json::to_string_pretty(&report).unwrap();
        assert!(json.contains("\"timeline\"") && json.contains("\"end_secs\": 2.0"));
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back, report);
    }

    /// Saved reports from before the timeline (and before the CPU figures) still read.
    #[test]
    fn older_reports_read_without_the_newer_fields() {
        let mut json = serde_json::to_value(sample("bank", 16, 200.0, 70.0)).unwrap();
        let fields = json.as_object_mut().unwrap();
        for newer in [
            "timeline",
            "interval_secs",
            "cpu",
            "requests_per_prepare",
            "executions_per_transaction",
            "build",
        ] {
            fields.remove(newer);
        }
        let old: Report = serde_json::from_value(json).unwrap();
        assert!(old.timeline.is_empty() && old.cpu.by_role.is_empty());
        assert_eq!(old.requests_per_prepare, 0.0);
        assert_eq!(old.build, "");
        assert_eq!(old.throughput_per_sec, 200.0);
    }

    #[test]
    fn the_recorder_counts_an_operation_in_the_interval_it_completed_in() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let recorder =
            Recorder::new(start, Duration::from_millis(3500), Duration::from_secs(1)).unwrap();
        for (ms, micros) in [
            (200, 1000),
            (999, 3000),
            (1000, 2000),
            (3100, 500),
            (3500, 700),
        ] {
            recorder.record(at(ms), micros);
        }
        recorder.record(at(3501), 10); // after the window
        recorder.error(at(1500));
        recorder.error(at(4000));
        let timeline = recorder.intervals();
        let ends: Vec<f64> = timeline.iter().map(|i| i.end_secs).collect();
        assert_eq!(ends, [1.0, 2.0, 3.0, 3.5]);
        let ops: Vec<u64> = timeline.iter().map(|i| i.operations).collect();
        assert_eq!(ops, [2, 1, 0, 2]);
        // The last interval is half as long: two operations in it are four per second.
        let rates: Vec<f64> = timeline.iter().map(|i| i.throughput_per_sec).collect();
        assert_eq!(rates, [2.0, 1.0, 0.0, 4.0]);
        let errors: Vec<u64> = timeline.iter().map(|i| i.errors).collect();
        assert_eq!(errors, [0, 1, 0, 0]);
        assert!(timeline[2].latency_ms.is_none());
        let first = timeline[0].latency_ms.as_ref().unwrap();
        // Two significant digits: within 1% of the recorded 1 ms and 3 ms.
        assert!((first.p50 - 1.0).abs() < 0.011, "{first:?}");
        assert!((first.p99 - 3.0).abs() < 0.031, "{first:?}");
    }

    #[test]
    fn the_timeline_is_plotted_next_to_the_json() {
        let dir = tempfile::tempdir().unwrap();
        let path = timeline_path(&dir.path().join("b1.json"));
        assert_eq!(path, dir.path().join("b1-timeline.svg"));
        plot_timeline(&path, &sample("noop", 16, 212.0, 75.0)).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(
            svg.contains("throughput (ops/s)") && svg.contains(">p99<"),
            "{svg}"
        );
        // Throughput, then p50, p95 and p99.
        assert_eq!(svg.matches("<polyline").count(), 4);
    }
}
