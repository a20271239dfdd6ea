//! `cloudbft bench`: closed-loop clients through the client library against a fresh local
//! cluster; prints throughput and latency percentiles and can write them as JSON and an SVG
//! latency CDF.

use crate::cpu::CpuSnapshot;
use crate::keygen::{KeygenArgs, ShapeArgs};
use crate::launch::{prepare, LaunchOptions, LocalCluster};
use anyhow::{bail, Context, Result};
use clap::Args;
use client_plugin::client::ClientOptions;
use dbvote::bank::BankOp;
use dbvote::noop::NoopOp;
use hdrhistogram::Histogram;
use proto::testing::Rng;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[arg(long, default_value_t = 1)]
    pub groups: u32,
    #[command(flatten)]
    pub shape: ShapeArgs,
    /// "noop" or "bank" (transfers between accounts).
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
    #[arg(long, default_value_t = 64)]
    pub max_batch: usize,
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
    /// Write the results as JSON here (and the latency CDF as SVG next to it).
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// What a run measured.
#[derive(Debug, Serialize)]
pub struct Report {
    pub application: String,
    pub f: usize,
    pub groups: u32,
    pub usig: String,
    pub db: String,
    pub clients: u64,
    pub max_batch: usize,
    pub multi_partition: f64,
    pub duration_secs: f64,
    pub operations: u64,
    pub throughput_per_sec: f64,
    pub latency_ms: Percentiles,
    pub retransmissions: u64,
    pub errors: u64,
    /// CPU time of every process of the run (cluster and load driver) per measured operation.
    pub cpu: crate::cpu::CpuPerOperation,
    pub machine: String,
}

#[derive(Debug, Serialize)]
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
    let (config, _) = prepare(&keygen)?;
    empty_databases(&config)?;
    let cluster = LocalCluster::start(
        &config,
        args.shape.usig,
        false,
        &LaunchOptions {
            max_batch: args.max_batch,
            pages: args.pages.clone(),
            gateway: None,
        },
    )?;
    eprintln!("cluster up in {}", dir.display());
    let runtime = tokio::runtime::Runtime::new()?;
    let pids = cluster.pids();
    let report = runtime.block_on(drive(
        &args,
        cluster.cluster.clone(),
        &dir,
        partitions,
        pids,
    ))?;
    drop(cluster);
    if args.data_dir.is_none() {
        // A temporary cluster is only kept while it runs (its logs help when a run fails).
        let _ = std::fs::remove_dir_all(&dir);
    }
    print_report(&report);
    if let Some(path) = &args.json {
        crate::report::write_json(path, &report)?;
    }
    Ok(())
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
                 <--db-prefix>_node_* databases or pass another --db-prefix",
                db.id
            );
        }
    }
    Ok(())
}

async fn drive(
    args: &BenchArgs,
    cluster: proto::config::Cluster,
    dir: &std::path::Path,
    partitions: u32,
    pids: Vec<(String, u32)>,
) -> Result<Report> {
    let client =
        crate::launch::load_driver(Arc::new(cluster), dir, ClientOptions::default()).await?;
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
                let client = client.clone();
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
    let cpu = tokio::spawn(async move {
        tokio::time::sleep_until(warmup_end.into()).await;
        let before = CpuSnapshot::take(&pids);
        tokio::time::sleep_until(end.into()).await;
        (before, CpuSnapshot::take(&pids))
    });
    let mut tasks = Vec::new();
    for c in 0..args.clients {
        let client = client.clone();
        let done = done.clone();
        let mut rng = Rng::new(args.seed.wrapping_mul(1000).wrapping_add(c));
        let multi = args.multi_partition;
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
                    let op = BankOp::Transfer {
                        from: (first, c as u32),
                        to: (second, c as u32),
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
                match client.invoke(parts, op).await {
                    Ok(accepted) if started >= warmup_end && Instant::now() <= end => {
                        let micros = started.elapsed().as_micros() as u64;
                        let _ = histogram.record(micros.max(1));
                        retransmissions += u64::from(accepted.retransmissions);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        errors += 1;
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
    let (cpu_before, cpu_after) = cpu.await?;
    client.shutdown().await;
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
        multi_partition: args.multi_partition,
        duration_secs: args.duration_secs as f64,
        operations,
        throughput_per_sec: operations as f64 / args.duration_secs.max(1) as f64,
        latency_ms: Percentiles::of(&histogram),
        retransmissions,
        errors,
        cpu,
        machine: machine(),
    })
}

fn print_report(r: &Report) {
    println!(
        "{} f={} groups={} usig={} db={} clients={} max_batch={}: {:.0} ops/s, latency p50 {:.2} ms, \
         p95 {:.2} ms, p99 {:.2} ms (max {:.2} ms; {} retransmissions, {} errors; {})",
        r.application,
        r.f,
        r.groups,
        r.usig,
        r.db,
        r.clients,
        r.max_batch,
        r.throughput_per_sec,
        r.latency_ms.p50,
        r.latency_ms.p95,
        r.latency_ms.p99,
        r.latency_ms.max,
        r.retransmissions,
        r.errors,
        r.machine
    );
    println!("{}", r.cpu.line());
}
