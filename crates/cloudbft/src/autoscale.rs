//! The autoscaler (`cloudbft autoscale`, `cloudbft demo --autoscale`): every interval it reads
//! the clients' latency histograms from the gateways' (or load drivers') Prometheus endpoints,
//! takes the p95 of the requests completed since the last reading, and lets
//! `placement::scaler` decide the group count; a change runs as an operator reconfiguration
//! through a provider (crate::reconfigure_cmd). Every decision is logged with the numbers
//! behind it, appended to a JSON-lines file and exported as metrics. A failed change is tried
//! again at a later decision, except a provider failure marked
//! [`NeedsOperator`](crate::provider::NeedsOperator) (Terraform failed, or a new machine did
//! not come up): then the autoscaler stops with the error.

use crate::provider::NeedsOperator;
use crate::reconfigure_cmd::{self, OperatorArgs};
use crate::reshape::{self, Spares};
use anyhow::{Context, Result};
use clap::Args;
use placement::scaler::{Decision, Policy, Reason, Sample, Scaler};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use proto::config::Cluster;
use serde::Serialize;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

#[derive(Args, Debug, Clone)]
pub struct AutoscaleArgs {
    #[command(flatten)]
    pub operator: OperatorArgs,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Metrics endpoints (host:port) whose `client_latency_seconds` histogram measures the
    /// requests: the gateways', or load drivers'.
    #[arg(long = "latency-from", required = true, value_delimiter = ',')]
    pub sources: Vec<SocketAddr>,
    /// Where to export the autoscaler's own metrics (Prometheus text at /metrics).
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// At most this many groups (default: the current ones plus every spare group).
    #[arg(long)]
    pub max_groups: Option<usize>,
}

/// The latency objective and how cautiously to keep it.
#[derive(Args, Debug, Clone)]
pub struct PolicyArgs {
    /// The p95 latency to keep, in milliseconds.
    #[arg(long, default_value_t = 300)]
    pub p95_objective_ms: u64,
    #[arg(long, default_value_t = 1)]
    pub min_groups: usize,
    /// Seconds between readings.
    #[arg(long, default_value_t = 5)]
    pub interval_secs: u64,
    /// A scale-down needs the p95 low for this long.
    #[arg(long, default_value_t = 60)]
    pub scale_down_window_secs: u64,
    /// No decision this long after a change.
    #[arg(long, default_value_t = 10)]
    pub cooldown_secs: u64,
    /// Relative band around the objective in which nothing changes.
    #[arg(long, default_value_t = 0.1)]
    pub tolerance: f64,
}

impl PolicyArgs {
    fn policy(&self, max_groups: usize) -> Policy {
        Policy {
            tolerance: self.tolerance,
            scale_down_window: Duration::from_secs(self.scale_down_window_secs),
            cooldown: Duration::from_secs(self.cooldown_secs),
            ..Policy::new(
                Duration::from_millis(self.p95_objective_ms),
                self.min_groups,
                max_groups,
            )
        }
    }
}

/// One decision, as logged and written to the decisions file.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    /// Seconds since the autoscaler started.
    pub at_secs: f64,
    pub p95_ms: Option<f64>,
    pub requests_per_second: f64,
    pub groups: usize,
    pub recommended: usize,
    pub decided: usize,
    pub reason: String,
    /// Set when a reconfiguration finished: what it did, or why it failed.
    pub outcome: Option<String>,
}

/// The autoscaler's exported metrics.
struct Exported {
    groups: Gauge,
    desired: Gauge,
    p95_ms: Gauge<f64, AtomicU64>,
    rate: Gauge<f64, AtomicU64>,
    ups: Counter,
    downs: Counter,
    failures: Counter,
}

impl Exported {
    fn register(registry: &mut net::metrics::Registry) -> Exported {
        let e = Exported {
            groups: Gauge::default(),
            desired: Gauge::default(),
            p95_ms: Gauge::default(),
            rate: Gauge::default(),
            ups: Counter::default(),
            downs: Counter::default(),
            failures: Counter::default(),
        };
        let r = registry.sub_registry_with_prefix("cloudbft_autoscaler");
        r.register("groups", "Groups serving now", e.groups.clone());
        r.register(
            "desired_groups",
            "Groups the last decision asked for",
            e.desired.clone(),
        );
        r.register(
            "p95_ms",
            "p95 latency of the last interval, ms",
            e.p95_ms.clone(),
        );
        r.register(
            "requests_per_second",
            "Requests completed per second, last interval",
            e.rate.clone(),
        );
        r.register("scale_ups", "Scale-ups carried out", e.ups.clone());
        r.register("scale_downs", "Scale-downs carried out", e.downs.clone());
        r.register(
            "failed_changes",
            "Reconfigurations that failed",
            e.failures.clone(),
        );
        e
    }
}

pub fn autoscale(args: AutoscaleArgs) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
        .context("installing the Ctrl-C handler")?;
    run(&args, &stop, &mut |r| print_record(r))
}

/// Prints a decision as one line.
pub fn print_record(r: &Record) {
    let p95 = r
        .p95_ms
        .map_or("no requests".into(), |ms| format!("p95 {ms:.0} ms"));
    let outcome = r
        .outcome
        .as_deref()
        .map(|o| format!(": {o}"))
        .unwrap_or_default();
    println!(
        "autoscaler {:>6.1} s: {p95}, {:.1} req/s, {} group(s), recommends {}, decides {} ({}){outcome}",
        r.at_secs, r.requests_per_second, r.groups, r.recommended, r.decided, r.reason
    );
}

/// Runs until `stop` is set, calling `report` with every decision.
pub fn run(args: &AutoscaleArgs, stop: &AtomicBool, report: &mut dyn FnMut(&Record)) -> Result<()> {
    let config = &args.operator.config;
    let dir = config
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .to_path_buf();
    let spares = Spares::load(
        &args
            .operator
            .spares
            .clone()
            .unwrap_or(dir.join(crate::keygen::SPARES)),
    )?;
    let current = Cluster::load(config)?;
    let spare_groups = spares
        .replicas
        .iter()
        .map(|r| r.group)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let policy = args
        .policy
        .policy(current.config.groups.len() + spare_groups);
    tracing::info!(?policy, "autoscaler starting");
    let mut scaler = Scaler::new(policy);
    let mut registry = crate::metrics_registry();
    let exported = Exported::register(&mut registry);
    let _serving = args
        .metrics
        .map(|addr| serve_metrics(addr, registry))
        .transpose()?;
    let decisions_path: PathBuf = dir.join("autoscaler.jsonl");
    let mut decisions = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&decisions_path)
        .with_context(|| format!("opening {}", decisions_path.display()))?;
    let started = Instant::now();
    let interval = Duration::from_secs(args.policy.interval_secs.max(1));
    let mut window = Window::new(&args.sources);
    let (done_tx, done) = mpsc::channel::<(usize, Result<String>)>();
    let mut next = Instant::now() + interval;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(
            Duration::from_millis(100).min(next.saturating_duration_since(Instant::now())),
        );
        let mut outcome = None;
        // A provider failure that needs the operator: recorded, then the autoscaler stops.
        let mut fatal = None;
        if let Ok((groups, result)) = done.try_recv() {
            scaler.finished(started.elapsed());
            outcome = Some(match result {
                Ok(text) => {
                    if groups > exported.groups.get() as usize {
                        exported.ups.inc();
                    } else {
                        exported.downs.inc();
                    }
                    text
                }
                Err(e) => {
                    exported.failures.inc();
                    let text = format!("the reconfiguration failed: {e:#}");
                    if e.downcast_ref::<NeedsOperator>().is_some() {
                        fatal = Some(e);
                    }
                    text
                }
            });
        }
        if Instant::now() < next && outcome.is_none() {
            continue;
        }
        let reading = Instant::now() >= next;
        if reading {
            next += interval;
        }
        let groups = Cluster::load(config).map(|c| c.config.groups.len())?;
        exported.groups.set(groups as i64);
        let (p95, rate) = if reading { window.read() } else { (None, 0.0) };
        let sample = Sample {
            at: started.elapsed(),
            p95,
            requests_per_second: rate,
            groups,
        };
        let decision = if reading {
            scaler.observe(sample)
        } else {
            Decision {
                groups,
                recommended: groups,
                reason: Reason::InFlight,
            }
        };
        exported.desired.set(decision.groups as i64);
        exported
            .p95_ms
            .set(p95.map_or(0.0, |d| d.as_secs_f64() * 1000.0));
        exported.rate.set(rate);
        let record = Record {
            at_secs: sample.at.as_secs_f64(),
            p95_ms: p95.map(|d| d.as_secs_f64() * 1000.0),
            requests_per_second: rate,
            groups,
            recommended: decision.recommended,
            decided: decision.groups,
            reason: decision.reason.to_string(),
            outcome,
        };
        writeln!(decisions, "{}", serde_json::to_string(&record)?)?;
        report(&record);
        if let Some(e) = fatal {
            return Err(e.context(format!(
                "the autoscaler stopped with {groups} group(s) serving: a failure of the \
                 machines' provider needs the operator (the cloud and the cluster may \
                 disagree); start it again once resolved"
            )));
        }
        if reading && decision.changes(&sample) {
            scaler.started();
            let (operator, target, tx) = (args.operator.clone(), decision.groups, done_tx.clone());
            std::thread::spawn(move || {
                let result = change(&operator, target);
                let _ = tx.send((target, result));
            });
        }
    }
    Ok(())
}

/// Scales to `groups` groups and says what changed.
fn change(operator: &OperatorArgs, groups: usize) -> Result<String> {
    let current = Cluster::load(&operator.config)?;
    let spares_path = operator.spares.clone().unwrap_or_else(|| {
        operator
            .config
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join(crate::keygen::SPARES)
    });
    let mut spares = Spares::load(&spares_path)?;
    let next = reshape::scale(&current.config, &spares, groups)?;
    let plan = proto::reconfig::describe(&current.config, &next).join("; ");
    let outcome = reconfigure_cmd::run(operator, &current, next, &mut spares)?;
    Ok(format!(
        "epoch {} runs with {} group(s) after global order {} ({plan}; {:.2} s)",
        outcome.config.config_epoch,
        outcome.config.groups.len(),
        outcome.cut_order,
        outcome.started_after.as_secs_f64()
    ))
}

/// Serves the registry on its own runtime thread for as long as the process runs.
fn serve_metrics(
    addr: SocketAddr,
    registry: net::metrics::Registry,
) -> Result<std::thread::JoinHandle<()>> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime
        .block_on(net::metrics::serve(addr, Arc::new(registry)))
        .with_context(|| format!("serving the autoscaler's metrics at {addr}"))?;
    Ok(std::thread::spawn(move || {
        runtime.block_on(std::future::pending::<()>())
    }))
}

/// The latency histograms of the sources at the last reading, to take the difference.
struct Window {
    sources: Vec<SocketAddr>,
    last: Option<(Instant, Buckets)>,
}

/// Cumulative counts per upper bound (seconds; `f64::INFINITY` last), summed over sources.
type Buckets = Vec<(f64, u64)>;

impl Window {
    fn new(sources: &[SocketAddr]) -> Window {
        Window {
            sources: sources.to_vec(),
            last: None,
        }
    }

    /// The p95 and rate of the requests completed since the last reading (none the first
    /// time, or when a source does not answer).
    fn read(&mut self) -> (Option<Duration>, f64) {
        let now = Instant::now();
        let mut total: Buckets = Vec::new();
        for &source in &self.sources {
            let Some(text) = node::metrics::scrape(source) else {
                tracing::warn!(%source, "a latency source does not answer its metrics endpoint");
                return (None, 0.0);
            };
            add(&mut total, &histogram(&text, "client_latency_seconds"));
        }
        let Some((at, before)) = self.last.replace((now, total.clone())) else {
            return (None, 0.0);
        };
        let delta: Buckets = total
            .iter()
            .map(|&(le, n)| {
                let earlier = before.iter().find(|(b, _)| *b == le).map_or(0, |&(_, m)| m);
                (le, n.saturating_sub(earlier))
            })
            .collect();
        let count = delta.last().map_or(0, |&(_, n)| n);
        let rate = count as f64 / now.duration_since(at).as_secs_f64().max(1e-3);
        (quantile(&delta, 0.95).map(Duration::from_secs_f64), rate)
    }
}

fn add(total: &mut Buckets, more: &Buckets) {
    for &(le, n) in more {
        match total.iter_mut().find(|(b, _)| *b == le) {
            Some((_, m)) => *m += n,
            None => total.push((le, n)),
        }
    }
    total.sort_by(|a, b| a.0.total_cmp(&b.0));
}

/// A Prometheus histogram's cumulative buckets from the text format.
fn histogram(text: &str, name: &str) -> Buckets {
    let prefix = format!("{name}_bucket{{");
    let mut out: Buckets = text
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&prefix)?;
            let le = rest.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            let count = rest.rsplit(' ').next()?.trim().parse().ok()?;
            Some((le, count))
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// The `q` quantile of cumulative buckets, interpolated linearly within its bucket (as
/// Prometheus' `histogram_quantile`); none without observations.
fn quantile(buckets: &Buckets, q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut lower = (0.0, 0u64);
    for &(le, n) in buckets {
        if n as f64 >= rank {
            if le.is_infinite() {
                return Some(lower.0);
            }
            let inside = (n - lower.1) as f64;
            let fraction = if inside > 0.0 {
                (rank - lower.1 as f64) / inside
            } else {
                1.0
            };
            return Some(lower.0 + (le - lower.0) * fraction);
        }
        lower = (le, n);
    }
    Some(lower.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# TYPE client_latency_seconds histogram
client_latency_seconds_sum 12.5
client_latency_seconds_count 100
client_latency_seconds_bucket{le="0.1"} 50
client_latency_seconds_bucket{le="0.2"} 90
client_latency_seconds_bucket{le="0.4"} 100
client_latency_seconds_bucket{le="+Inf"} 100
"#;

    #[test]
    fn the_p95_is_interpolated_within_its_bucket() {
        let buckets = histogram(TEXT, "client_latency_seconds");
        assert_eq!(buckets.len(), 4);
        // The 95th of 100 lies half way through the (0.2, 0.4] bucket's 10.
        let p95 = quantile(&buckets, 0.95).unwrap();
        assert!((p95 - 0.3).abs() < 1e-9, "{p95}");
        assert_eq!(quantile(&vec![(0.1, 0), (f64::INFINITY, 0)], 0.95), None);
        let mut two = buckets.clone();
        add(&mut two, &buckets);
        assert_eq!(two.last(), Some(&(f64::INFINITY, 200)));
    }
}
