//! `cloudbft overload`: what one client sending far more than its share, and a slowloris client,
//! do to everyone else.
//!
//! A fresh local cluster (no-op application) with its gateway, and `--clients` browsers-like
//! HTTP clients, each on its own loopback address (127.0.0.10, .11, ...), each posting the no-op
//! form, waiting for the page, thinking `--think-ms`, and again. The run has four phases of
//! `--phase-secs` each, the normal clients running throughout:
//!
//! 1. **normal**: nothing else; a client's throughput here is its *share*;
//! 2. **gateway flood**: one more client (127.0.0.200) posts forms open-loop at
//!    `--flood-factor` times the share, and a slowloris client (127.0.0.201) holds
//!    `--slowloris` connections sending a header line a second;
//! 3. **primary flood**: one client identity signs requests open-loop at `--flood-factor` times
//!    the share and sends them straight to the primary candidates and every replica, as a
//!    Byzantine client could, bypassing the gateway;
//! 4. **normal again**: to see the machine's drift over the run.
//!
//! It prints the normal clients' latency percentiles per phase with the p95 relative to the
//! first phase, what the flooders got, and the largest resident memory of the gateway and the
//! primary in each phase (from /proc).

use crate::bench::Percentiles;
use crate::keygen::{KeygenArgs, ShapeArgs};
use crate::launch::{prepare, LaunchOptions, LocalCluster};
use anyhow::{Context, Result};
use clap::Args;
use dbvote::noop::NoopOp;
use hdrhistogram::Histogram;
use proto::{ClientId, Envelope, Message, Request};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

#[derive(Args, Debug)]
pub struct OverloadArgs {
    #[command(flatten)]
    pub shape: ShapeArgs,
    #[arg(long, default_value_t = 1)]
    pub groups: u32,
    #[command(flatten)]
    pub pages: crate::nodes::PageArgs,
    /// Normal HTTP clients (each from its own loopback address).
    #[arg(long, default_value_t = 8)]
    pub clients: u8,
    /// A normal client's pause between a page and its next form.
    #[arg(long, default_value_t = 250)]
    pub think_ms: u64,
    /// How many times a normal client's share each flooder sends.
    #[arg(long, default_value_t = 100.0)]
    pub flood_factor: f64,
    /// Connections the slowloris client tries to hold.
    #[arg(long, default_value_t = 200)]
    pub slowloris: usize,
    /// Seconds of each phase (after a warm-up).
    #[arg(long, default_value_t = 20)]
    pub phase_secs: u64,
    #[arg(long, default_value_t = 5)]
    pub warmup_secs: u64,
    #[arg(long, default_value_t = 50000)]
    pub base_port: u16,
    #[arg(long, default_value = "127.0.0.1:52000")]
    pub gateway_addr: SocketAddr,
    /// Cluster directory (must not exist; default: a new temporary directory).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

const PHASES: [&str; 4] = ["normal", "gateway flood", "primary flood", "normal again"];

/// One phase's figures.
#[derive(Debug, Serialize)]
pub struct Phase {
    pub name: &'static str,
    pub normal_operations: u64,
    pub normal_errors: u64,
    pub normal_latency_ms: Percentiles,
    /// The normal clients' p95 over the first phase's.
    pub p95_vs_normal: f64,
    /// Flood requests sent (HTTP or signed), and the gateway's answers by status.
    pub flood_sent: u64,
    pub flood_statuses: BTreeMap<String, u64>,
    /// Slowloris connections the gateway refused at connect or cut (header timeout).
    pub slowloris_refused_or_cut: u64,
    /// Requests the primary ordered in the phase (normal, flood and all).
    pub ordered_at_primary: u64,
    pub max_rss_mib: BTreeMap<String, f64>,
}

#[derive(Debug, Serialize)]
pub struct OverloadReport {
    pub clients: u8,
    pub think_ms: u64,
    pub share_per_sec: f64,
    pub flood_per_sec: f64,
    pub phases: Vec<Phase>,
    pub gateway_refused: Vec<String>,
    pub machine: String,
}

/// What all tasks share: the phase now, and per phase the normal clients' latencies and the
/// flooders' counts.
struct Tally {
    phase: AtomicUsize,
    stop: AtomicBool,
    latencies: Mutex<Vec<Histogram<u64>>>,
    errors: [AtomicU64; 4],
    flood_sent: [AtomicU64; 4],
    flood_statuses: Mutex<Vec<BTreeMap<String, u64>>>,
    slowloris_cut: [AtomicU64; 4],
}

impl Tally {
    fn phase(&self) -> usize {
        self.phase.load(Ordering::Relaxed)
    }

    fn status(&self, phase: usize, status: String) {
        *lock(&self.flood_statuses)[phase].entry(status).or_default() += 1;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub fn overload(args: OverloadArgs) -> Result<()> {
    let dir = crate::bench::work_dir(args.data_dir.as_deref(), "cloudbft-overload-")?;
    let keygen = KeygenArgs {
        out: dir.clone(),
        groups: args.groups,
        partitions: (2 * args.groups).max(2),
        shape: args.shape.clone(),
        base_port: args.base_port,
        // Endpoint 0 (the gateway's) gets every odd identity, endpoint 1 the flooder's.
        clients: 2 * 128,
        client_endpoints: 2,
        application: "noop".into(),
        max_groups: None,
        spare_machines: 0,
    };
    let (config, _) = prepare(&keygen)?;
    let cluster = LocalCluster::start(
        &config,
        args.shape.usig,
        false,
        &LaunchOptions::driven(&args.pages, Some(args.gateway_addr)),
    )?;
    eprintln!("cluster up in {}", dir.display());
    let primary_metrics = cluster
        .endpoints()
        .into_iter()
        .find(|(name, _)| name.starts_with("primary-"))
        .map(|(_, addr)| addr)
        .context("the cluster has no primary")?;
    let pids: Vec<(String, u32)> = cluster
        .pids()
        .into_iter()
        .filter(|(name, _)| name == "gateway" || name.starts_with("primary-"))
        .collect();
    let runtime = tokio::runtime::Runtime::new()?;
    let report = runtime.block_on(drive(&args, &cluster.cluster, &dir, pids, primary_metrics));
    drop(cluster);
    if args.data_dir.is_none() && report.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let report = report?;
    print_report(&report);
    if let Some(path) = &args.json {
        crate::report::write_json(path, &report)?;
    }
    Ok(())
}

async fn drive(
    args: &OverloadArgs,
    cluster: &proto::config::Cluster,
    dir: &std::path::Path,
    pids: Vec<(String, u32)>,
    primary_metrics: SocketAddr,
) -> Result<OverloadReport> {
    let partitions = cluster.config.partitions;
    let tally = Arc::new(Tally {
        phase: AtomicUsize::new(usize::MAX),
        stop: AtomicBool::new(false),
        latencies: Mutex::new(
            (0..PHASES.len())
                .map(|_| Histogram::new(3).expect("3 significant digits"))
                .collect(),
        ),
        errors: Default::default(),
        flood_sent: Default::default(),
        flood_statuses: Mutex::new(vec![BTreeMap::new(); PHASES.len()]),
        slowloris_cut: Default::default(),
    });
    let gateway = args.gateway_addr;
    let think = Duration::from_millis(args.think_ms);
    let mut normal = Vec::new();
    for c in 0..args.clients {
        let tally = Arc::clone(&tally);
        let from = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 10 + c));
        let form = format!("partition={}&payload=normal", u32::from(c) % partitions);
        normal.push(tokio::spawn(async move {
            while !tally.stop.load(Ordering::Relaxed) {
                let phase = tally.phase();
                let started = Instant::now();
                let status = post(from, gateway, "/noop", &form).await;
                let micros = started.elapsed().as_micros() as u64;
                if phase < PHASES.len() && tally.phase() == phase {
                    if status.as_ref().is_ok_and(|s| *s == 200) {
                        let _ = lock(&tally.latencies)[phase].record(micros.max(1));
                    } else {
                        tally.errors[phase].fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(think).await;
            }
        }));
    }
    eprintln!("warming up for {} s", args.warmup_secs);
    tokio::time::sleep(Duration::from_secs(args.warmup_secs)).await;

    let phase_length = Duration::from_secs(args.phase_secs);
    let mut rss: Vec<BTreeMap<String, f64>> = Vec::new();
    let mut ordered = Vec::new();
    let mut flood_per_sec = 0.0;
    let mut share_per_sec = 0.0;
    for (phase, name) in PHASES.iter().enumerate() {
        tally.phase.store(phase, Ordering::Relaxed);
        eprintln!("phase {}: {name} for {} s", phase + 1, args.phase_secs);
        let ordered_before = batched(primary_metrics).await;
        let end = Instant::now() + phase_length;
        let mut flooders = Vec::new();
        match phase {
            1 => {
                flooders.push(tokio::spawn(http_flood(
                    Arc::clone(&tally),
                    gateway,
                    flood_per_sec,
                    end,
                    partitions,
                )));
                for _ in 0..args.slowloris {
                    flooders.push(tokio::spawn(slowloris(Arc::clone(&tally), gateway, end)));
                }
            }
            2 => flooders.push(tokio::spawn(signed_flood(
                Arc::clone(&tally),
                cluster.clone(),
                dir.join("keys"),
                flood_per_sec,
                end,
            ))),
            _ => {}
        }
        let mut peak = BTreeMap::new();
        while Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(500)).await;
            for (name, pid) in &pids {
                let now = crate::measure::resident_mib(*pid).unwrap_or(0.0);
                let max = peak.entry(name.clone()).or_insert(0.0f64);
                *max = max.max(now);
            }
        }
        for f in flooders {
            f.await??;
        }
        rss.push(peak);
        ordered.push(
            batched(primary_metrics)
                .await
                .saturating_sub(ordered_before),
        );
        if phase == 0 {
            let done = lock(&tally.latencies)[0].len();
            share_per_sec =
                done as f64 / args.phase_secs.max(1) as f64 / f64::from(args.clients.max(1));
            flood_per_sec = (share_per_sec * args.flood_factor).max(1.0);
            eprintln!(
                "a normal client's share: {share_per_sec:.2} forms/s; flooders send \
                 {flood_per_sec:.0}/s"
            );
        }
    }
    tally.phase.store(usize::MAX, Ordering::Relaxed);
    tally.stop.store(true, Ordering::Relaxed);
    for n in normal {
        n.await?;
    }
    let gateway_refused = scrape(gateway, "/metrics")
        .await
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("gateway_refused_total"))
        .map(str::to_owned)
        .collect();
    let latencies = std::mem::take(&mut *lock(&tally.latencies));
    let statuses = std::mem::take(&mut *lock(&tally.flood_statuses));
    let base_p95 = Percentiles::of(&latencies[0]).p95.max(f64::MIN_POSITIVE);
    let phases = PHASES
        .iter()
        .zip(latencies.iter().zip(statuses).zip(rss).zip(ordered))
        .enumerate()
        .map(|(i, (name, (((histogram, statuses), rss), ordered)))| {
            let latency = Percentiles::of(histogram);
            Phase {
                name,
                normal_operations: histogram.len(),
                normal_errors: tally.errors[i].load(Ordering::Relaxed),
                p95_vs_normal: latency.p95 / base_p95,
                normal_latency_ms: latency,
                flood_sent: tally.flood_sent[i].load(Ordering::Relaxed),
                flood_statuses: statuses,
                slowloris_refused_or_cut: tally.slowloris_cut[i].load(Ordering::Relaxed),
                ordered_at_primary: ordered,
                max_rss_mib: rss,
            }
        })
        .collect();
    Ok(OverloadReport {
        clients: args.clients,
        think_ms: args.think_ms,
        share_per_sec,
        flood_per_sec,
        phases,
        gateway_refused,
        machine: crate::bench::machine(),
    })
}

/// Forms posted open-loop at `rate` per second from 127.0.0.200 until `end` (at most 512 in
/// flight: the flooder's own memory is not what is measured).
async fn http_flood(
    tally: Arc<Tally>,
    gateway: SocketAddr,
    rate: f64,
    end: Instant,
    partitions: u32,
) -> Result<()> {
    let from = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 200));
    let in_flight = Arc::new(tokio::sync::Semaphore::new(512));
    let mut every = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut n = 0u32;
    while Instant::now() < end {
        every.tick().await;
        let Ok(permit) = Arc::clone(&in_flight).try_acquire_owned() else {
            tally.status(1, "skipped (512 in flight)".into());
            continue;
        };
        n = n.wrapping_add(1);
        let form = format!("partition={}&payload=flood", n % partitions);
        let tally = Arc::clone(&tally);
        tally.flood_sent[1].fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let status = match post(from, gateway, "/noop", &form).await {
                Ok(status) => status.to_string(),
                Err(e) => format!("error: {}", e.kind()),
            };
            tally.status(1, status);
            drop(permit);
        });
    }
    Ok(())
}

/// One slowloris connection from 127.0.0.201: a request line, then a header line a second,
/// never the end of the headers; reconnects whenever the gateway refuses or cuts it.
async fn slowloris(tally: Arc<Tally>, gateway: SocketAddr, end: Instant) -> Result<()> {
    let from = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 201));
    while Instant::now() < end {
        let Ok(mut stream) = connect(from, gateway).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let _ = stream
            .write_all(b"POST /noop HTTP/1.1\r\nHost: x\r\n")
            .await;
        let mut buf = [0u8; 256];
        loop {
            tokio::select! {
                _ = stream.read(&mut buf) => {
                    // An answer (503: too many connections), or the close after the timeout.
                    tally.slowloris_cut[1].fetch_add(1, Ordering::Relaxed);
                    break;
                }
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    if Instant::now() >= end || stream.write_all(b"X-Slow: 1\r\n").await.is_err() {
                        break;
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Signed no-op requests from one identity of the load-driver endpoint, open-loop at `rate`,
/// straight to every primary candidate and replica (a Byzantine client need not use the
/// gateway). Replies are read and dropped.
async fn signed_flood(
    tally: Arc<Tally>,
    cluster: proto::config::Cluster,
    keys: PathBuf,
    rate: f64,
    end: Instant,
) -> Result<()> {
    let me = cluster
        .config
        .clients
        .get(1)
        .context("no load-driver client in the configuration")?;
    let (client, endpoint) = (ClientId(me.id), me.addr.clone());
    let key = proto::keys::load(
        &proto::keys::client_key_path(&keys, client),
        cluster.client_key(client),
    )?;
    let mut destinations = Vec::new();
    for addr in cluster
        .config
        .primaries
        .iter()
        .map(|p| &p.addr)
        .chain(cluster.config.replicas.iter().map(|r| &r.addr))
    {
        destinations.push(addr.parse::<SocketAddr>().with_context(|| addr.clone())?);
    }
    let (transport, mut replies) =
        net::Transport::bind(endpoint.parse()?, net::TransportConfig::default()).await?;
    let drain = tokio::spawn(async move { while replies.recv().await.is_some() {} });
    let partitions = cluster.config.partitions;
    let mut every = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last = 0u64;
    while Instant::now() < end {
        every.tick().await;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        last = now.max(last + 1);
        let op = NoopOp {
            partitions: vec![(last % u64::from(partitions)) as u32],
            payload: b"flood".to_vec(),
        };
        let request = Request::signed(client, last, op.partitions.clone(), op.encode(), &key);
        let frame = Envelope::encode(&Message::Request(request));
        for &to in &destinations {
            transport.send(to, frame.clone());
        }
        tally.flood_sent[2].fetch_add(1, Ordering::Relaxed);
    }
    transport.shutdown().await;
    drain.abort();
    Ok(())
}

async fn connect(from: IpAddr, to: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(to).await
}

/// Posts a form on a connection of its own; the response's status.
async fn post(from: IpAddr, to: SocketAddr, path: &str, body: &str) -> std::io::Result<u16> {
    let mut stream = connect(from, to).await?;
    let request = crate::form_client::form_post(path, to, body, true);
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(90), stream.read_to_end(&mut response))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    std::str::from_utf8(&response)
        .ok()
        .and_then(|r| r.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidData))
}

/// Requests the primary put in PREPAREs so far (the sum of its batch sizes).
async fn batched(metrics: SocketAddr) -> u64 {
    scrape(metrics, "/metrics")
        .await
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("cloudbft_batch_size_sum "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// A GET of `path` on `at`, the whole response as text.
async fn scrape(at: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(at).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {at}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await?;
    Ok(text)
}

fn print_report(r: &OverloadReport) {
    println!(
        "{} normal clients (think {} ms), share {:.2} forms/s each, flooders at {:.0}/s; {}",
        r.clients, r.think_ms, r.share_per_sec, r.flood_per_sec, r.machine
    );
    println!(
        "{:<14} {:>6} {:>6} {:>8} {:>8} {:>8} {:>6} {:>8}  {:<36} RSS MiB (max)",
        "phase",
        "ops",
        "errors",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "p95 x",
        "ordered",
        "flood (sent: answers)"
    );
    for p in &r.phases {
        let flood = if p.flood_sent == 0 {
            String::new()
        } else {
            let answers: Vec<String> = p
                .flood_statuses
                .iter()
                .map(|(s, n)| format!("{s}x{n}"))
                .collect();
            format!("{}: {}", p.flood_sent, answers.join(" "))
        };
        let rss: Vec<String> = p
            .max_rss_mib
            .iter()
            .map(|(n, m)| format!("{n} {m:.1}"))
            .collect();
        println!(
            "{:<14} {:>6} {:>6} {:>8.1} {:>8.1} {:>8.1} {:>6.2} {:>8}  {:<36} {}",
            p.name,
            p.normal_operations,
            p.normal_errors,
            p.normal_latency_ms.p50,
            p.normal_latency_ms.p95,
            p.normal_latency_ms.p99,
            p.p95_vs_normal,
            p.ordered_at_primary,
            flood,
            rss.join(", ")
        );
        if p.slowloris_refused_or_cut > 0 {
            println!(
                "{:<14} slowloris connections refused or cut: {}",
                "", p.slowloris_refused_or_cut
            );
        }
    }
    for line in &r.gateway_refused {
        println!("{line}");
    }
}
