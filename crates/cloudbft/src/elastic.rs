//! `cloudbft elastic`: a load ramp against a fresh local cluster whose groups either stay fixed
//! or follow the autoscaler, recorded second by second (throughput, p95, groups) as JSON and an
//! SVG plot. This is how the repository shows that more groups serve more load at lower latency
//! on this machine (docs/operations.md, "Scaling"): groups add capacity only when a group's
//! capacity is limited, so the page stage (`--page-delay-ms`, one worker per replica) is on.
//! The load is no-op requests, or TPC-C terminals (`--application tpcc`, the small population,
//! a warehouse per partition), after which every database node must pass the twelve
//! consistency conditions with identical digests.

use crate::autoscale::{self, AutoscaleArgs, PolicyArgs, Record};
use crate::bench::{empty_databases, machine, work_dir};
use crate::keygen::{KeygenArgs, ShapeArgs};
use crate::launch::{prepare, LaunchOptions, LocalCluster};
use crate::nodes::PageArgs;
use crate::reconfigure_cmd::OperatorArgs;
use crate::report::{write_timeline, Panel};
use anyhow::{bail, Context, Result};
use clap::Args;
use client_plugin::client::{ClientEndpoint, ClientMetrics, ClientOptions};
use dbvote::noop::NoopOp;
use hdrhistogram::Histogram;
use proto::config::Cluster;
use proto::testing::Rng;
use serde::Serialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tpcc::pages::Shown;
use tpcc::workload::{Population, Terminal};
use tpcc::NuRandConstants;

#[derive(Args, Debug)]
pub struct ElasticArgs {
    /// Groups at the start.
    #[arg(long, default_value_t = 1)]
    pub groups: u32,
    /// Groups the cluster may grow to (identities are made for them at the start).
    #[arg(long, default_value_t = 4)]
    pub max_groups: u32,
    /// The load: closed-loop clients and seconds per phase, `CLIENTS:SECONDS,...`.
    #[arg(long, default_value = "4:60,40:120,4:120")]
    pub ramp: String,
    /// Let the autoscaler change the groups (otherwise they stay as started).
    #[arg(long)]
    pub autoscale: bool,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub shape: ShapeArgs,
    #[command(flatten)]
    pub pages: PageArgs,
    /// Cluster directory (must not exist; default: a new temporary directory).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    #[arg(long, default_value_t = 7700)]
    pub base_port: u16,
    /// Write the timeline as JSON here and the plot as SVG next to it.
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The load: "noop" requests on one random partition each, or "tpcc" terminals (the
    /// specification's mix on the small population).
    #[arg(long, default_value = "noop", value_parser = ["noop", "tpcc"])]
    pub application: String,
}

/// One second of the run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Second {
    pub at_secs: u64,
    pub clients: usize,
    pub completed: u64,
    pub p95_ms: Option<f64>,
    pub groups: usize,
}

/// What a run measured.
#[derive(Debug, Serialize)]
pub struct ElasticReport {
    pub mode: String,
    pub ramp: Vec<(usize, u64)>,
    pub page_delay_ms: u64,
    pub p95_objective_ms: Option<u64>,
    pub requests: u64,
    pub failures: u64,
    /// Per phase: clients, completed per second, p95 in ms.
    pub phases: Vec<(usize, f64, f64)>,
    pub timeline: Vec<Second>,
    pub decisions: Vec<Record>,
    pub application: String,
    /// With TPC-C: the digest every database node ended with, after each passed the twelve
    /// consistency conditions.
    pub digest: Option<String>,
    pub machine: String,
}

fn parse_ramp(text: &str) -> Result<Vec<(usize, u64)>> {
    let phases: Result<Vec<(usize, u64)>> = text
        .split(',')
        .map(|phase| {
            let (clients, secs) = phase
                .split_once(':')
                .with_context(|| format!("--ramp phase {phase:?}: write CLIENTS:SECONDS"))?;
            Ok((clients.trim().parse()?, secs.trim().parse()?))
        })
        .collect();
    let phases = phases.context("--ramp: CLIENTS:SECONDS,... with whole numbers")?;
    if phases.is_empty() || phases.iter().any(|&(c, s)| c == 0 || s == 0) {
        bail!("--ramp needs at least one phase, each with clients and seconds above 0");
    }
    Ok(phases)
}

pub fn elastic(args: ElasticArgs) -> Result<()> {
    let ramp = parse_ramp(&args.ramp)?;
    if args.max_groups < args.groups {
        bail!("--max-groups must be at least --groups");
    }
    let most = ramp.iter().map(|&(c, _)| c).max().unwrap_or(1);
    let dir = work_dir(args.data_dir.as_deref(), "cloudbft-elastic-")?;
    // Two partitions per group at the most, so that every group count spreads them evenly.
    let partitions = 2 * args.max_groups;
    let keygen = KeygenArgs {
        out: dir.clone(),
        groups: args.groups,
        max_groups: Some(args.max_groups),
        spare_machines: 0,
        partitions,
        shape: args.shape.clone(),
        base_port: args.base_port,
        clients: most as u64 + 2,
        client_endpoints: 2,
        application: args.application.clone(),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let config = if args.application == tpcc::txn::NAME {
        let scale = tpcc::ScaleConfig::small();
        crate::tpcc_cmd::prepare_loaded(&keygen, &runtime, &scale, args.seed)?.0
    } else {
        let (config, _) = prepare(&keygen)?;
        empty_databases(&config)?;
        config
    };
    let launch = crate::provider::Launch {
        replica_args: args.pages.to_args(),
    };
    std::fs::write(
        dir.join(crate::provider::LAUNCH_FILE),
        toml::to_string(&launch)?,
    )?;
    let cluster = LocalCluster::start(
        &config,
        args.shape.usig,
        false,
        &LaunchOptions::driven(&args.pages, None),
    )?;
    eprintln!("cluster up in {}", dir.display());
    let mut report = runtime.block_on(drive(&args, &ramp, &config, &dir))?;
    // Stopping drains: every database node reaches the same order before it stops.
    drop(cluster);
    if args.application == tpcc::txn::NAME {
        let digest = runtime.block_on(crate::tpcc_run::verify_nodes(&Cluster::load(&config)?))?;
        report.digest = Some(hex::encode(digest));
    }
    if args.data_dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    for &(clients, rate, p95) in &report.phases {
        println!("{clients:>4} clients: {rate:>7.1} ops/s, p95 {p95:>7.0} ms");
    }
    println!(
        "{}: {} requests ({}), {} failed, groups over time {:?} ({})",
        report.mode,
        report.requests,
        report.application,
        report.failures,
        changes(&report.timeline),
        report.machine
    );
    if let Some(digest) = &report.digest {
        println!(
            "every database node passed the twelve TPC-C consistency conditions, digest {digest}"
        );
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        plot(&report, &path.with_extension("svg"))?;
        eprintln!("wrote {} and its .svg", path.display());
    }
    Ok(())
}

/// (second, groups) whenever the group count changed.
fn changes(timeline: &[Second]) -> Vec<(u64, usize)> {
    let mut out: Vec<(u64, usize)> = Vec::new();
    for s in timeline {
        if out.last().is_none_or(|&(_, g)| g != s.groups) {
            out.push((s.at_secs, s.groups));
        }
    }
    out
}

fn plot(report: &ElasticReport, path: &std::path::Path) -> Result<()> {
    let series = |f: &dyn Fn(&Second) -> Option<f64>| -> Vec<(f64, f64)> {
        report
            .timeline
            .iter()
            .filter_map(|s| f(s).map(|v| (s.at_secs as f64, v)))
            .collect()
    };
    let mut latency = vec![("p95", series(&|s| s.p95_ms))];
    if let Some(objective) = report.p95_objective_ms {
        let end = report.timeline.last().map_or(1.0, |s| s.at_secs as f64);
        latency.push((
            "objective",
            vec![(0.0, objective as f64), (end, objective as f64)],
        ));
    }
    write_timeline(
        path,
        &format!("{}: load ramp {:?} (clients, s)", report.mode, report.ramp),
        &[
            Panel {
                title: "throughput (ops/s)",
                lines: vec![("completed", series(&|s| Some(s.completed as f64)))],
            },
            Panel {
                title: "p95 latency (ms)",
                lines: latency,
            },
            Panel {
                title: "groups and clients",
                lines: vec![
                    ("groups", series(&|s| Some(s.groups as f64))),
                    ("clients / 10", series(&|s| Some(s.clients as f64 / 10.0))),
                ],
            },
        ],
    )
}

async fn drive(
    args: &ElasticArgs,
    ramp: &[(usize, u64)],
    config: &std::path::Path,
    dir: &std::path::Path,
) -> Result<ElasticReport> {
    let cluster = Arc::new(Cluster::load(config)?);
    // The load driver's client metrics, where the autoscaler reads the latency.
    let mut registry = crate::metrics_registry();
    let metrics = ClientMetrics::register(&mut registry);
    let metrics_addr = SocketAddr::from(([127, 0, 0, 1], args.base_port + 1999));
    net::metrics::serve(metrics_addr, Arc::new(registry))
        .await
        .with_context(|| format!("serving the load driver's metrics at {metrics_addr}"))?;
    let client = crate::launch::load_driver(
        cluster.clone(),
        dir,
        ClientOptions {
            metrics,
            ..ClientOptions::default()
        },
    )
    .await?;
    let stop = Arc::new(AtomicBool::new(false));
    let decisions: Arc<Mutex<Vec<Record>>> = Arc::default();
    let scaler = args.autoscale.then(|| {
        let auto = AutoscaleArgs {
            operator: OperatorArgs::local(config.to_path_buf()),
            policy: args.policy.clone(),
            sources: vec![metrics_addr],
            metrics: None,
            max_groups: Some(args.max_groups as usize),
        };
        let (stop, decisions) = (stop.clone(), decisions.clone());
        std::thread::spawn(move || {
            autoscale::run(&auto, &stop, &mut |r| {
                autoscale::print_record(r);
                decisions.lock().expect("decisions").push(r.clone());
            })
        })
    });

    let most = ramp.iter().map(|&(c, _)| c).max().unwrap_or(1);
    let active = Arc::new(AtomicUsize::new(0));
    let (done_tx, mut done_rx) =
        tokio::sync::mpsc::unbounded_channel::<(Instant, Duration, bool)>();
    let partitions = cluster.config.partitions;
    let mut tasks = Vec::new();
    for c in 0..most {
        let (client, active, stop, done) = (
            client.clone(),
            active.clone(),
            stop.clone(),
            done_tx.clone(),
        );
        let mut source = if args.application == tpcc::txn::NAME {
            let population = Population {
                warehouses: partitions,
                scale: tpcc::ScaleConfig::small(),
                constants: NuRandConstants::for_load(args.seed).for_run(args.seed + 1),
            };
            Source::Tpcc(Terminal::new(c as u64, population, args.seed))
        } else {
            Source::Noop(
                Rng::new(args.seed.wrapping_mul(1000).wrapping_add(c as u64)),
                partitions,
            )
        };
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if c >= active.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                let started = Instant::now();
                let ok = source.run(&client).await;
                let _ = done.send((Instant::now(), started.elapsed(), ok));
            }
        }));
    }
    drop(done_tx);

    let start = Instant::now();
    let mut timeline: Vec<Second> = Vec::new();
    let (mut requests, mut failures) = (0u64, 0u64);
    let mut phases = Vec::new();
    let mut second = Histogram::<u64>::new(3)?;
    let mut phase_histogram = Histogram::<u64>::new(3)?;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    for &(clients, secs) in ramp {
        active.store(clients, Ordering::Relaxed);
        eprintln!("{clients} clients for {secs} s");
        phase_histogram.reset();
        let mut phase_done = 0u64;
        for _ in 0..secs {
            let mut completed = 0;
            loop {
                tokio::select! {
                    _ = tick.tick() => break,
                    Some((_, latency, ok)) = done_rx.recv() => {
                        requests += 1;
                        if ok {
                            completed += 1;
                            let micros = latency.as_micros() as u64;
                            let _ = second.record(micros.max(1));
                            let _ = phase_histogram.record(micros.max(1));
                        } else {
                            failures += 1;
                        }
                    }
                }
            }
            phase_done += completed;
            let groups = Cluster::load(config).map_or(0, |c| c.config.groups.len());
            timeline.push(Second {
                at_secs: start.elapsed().as_secs(),
                clients,
                completed,
                p95_ms: (!second.is_empty())
                    .then(|| second.value_at_quantile(0.95) as f64 / 1000.0),
                groups,
            });
            second.reset();
        }
        let p95 = phase_histogram.value_at_quantile(0.95) as f64 / 1000.0;
        phases.push((clients, phase_done as f64 / secs as f64, p95));
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    if let Some(scaler) = scaler {
        match scaler.join() {
            Ok(result) => result?,
            Err(_) => bail!("the autoscaler thread panicked"),
        }
    }
    client.shutdown().await;
    let decisions = decisions.lock().expect("decisions").clone();
    Ok(ElasticReport {
        mode: if args.autoscale {
            format!(
                "autoscaler (p95 objective {} ms)",
                args.policy.p95_objective_ms
            )
        } else {
            format!("{} fixed group(s)", args.groups)
        },
        ramp: ramp.to_vec(),
        page_delay_ms: args.pages.page_delay_ms,
        p95_objective_ms: args.autoscale.then_some(args.policy.p95_objective_ms),
        requests,
        failures,
        phases,
        timeline,
        decisions,
        application: args.application.clone(),
        digest: None,
        machine: machine(),
    })
}

/// Where a client's operations come from.
enum Source {
    /// No-op requests on a random partition of this many.
    Noop(Rng, u32),
    /// A TPC-C terminal.
    Tpcc(Terminal),
}

impl Source {
    /// Runs the next operation through `client`: whether it succeeded (for TPC-C, a page that
    /// is not the Invalid screen: generated input is always valid).
    async fn run(&mut self, client: &ClientEndpoint) -> bool {
        match self {
            Source::Noop(rng, partitions) => {
                let partition = rng.below(u64::from(*partitions)) as u32;
                let op = NoopOp {
                    partitions: vec![partition],
                    payload: Vec::new(),
                };
                client.invoke(vec![partition], op.encode()).await.is_ok()
            }
            Source::Tpcc(terminal) => {
                let op = terminal.next(crate::tpcc_run::unix_now());
                let Ok(partitions) = op.partitions() else {
                    return false;
                };
                match client.invoke(partitions, op.encode()).await {
                    Ok(accepted) => tpcc::pages::shown(&accepted.page) != Shown::Refused,
                    Err(e) => {
                        tracing::warn!(error = %e, "{} failed", op.kind().name());
                        false
                    }
                }
            }
        }
    }
}
