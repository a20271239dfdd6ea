//! What a benchmark records besides its own clients' view: the nodes' Prometheus counters over
//! the measured window (the time-per-stage breakdown comes from them, not from estimates), and
//! how loaded the machine was while it ran (a busy machine distorts every figure, so each run
//! says how much CPU other processes took).

use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Instant;

/// The series a run keeps from each node's metrics, by name prefix: stage timings, warrants,
/// decision log appends, executions, batch sizes, and the counters that divide them into
/// per-request figures.
const KEPT: [&str; 11] = [
    "cloudbft_stage_seconds_sum",
    "cloudbft_stage_seconds_count",
    "cloudbft_warrant_seconds_sum",
    "cloudbft_warrant_seconds_count",
    "cloudbft_persist_seconds_",
    "cloudbft_execution_seconds_",
    "cloudbft_requests_total",
    "cloudbft_replies_total",
    "cloudbft_executions_total",
    "cloudbft_batches_total",
    "cloudbft_batch_size_",
];

/// The kept series of one Prometheus text exposition, `name{labels}` to value (buckets are
/// left out).
pub fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| KEPT.iter().any(|k| l.starts_with(k)) && !l.contains("_bucket"))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.trim().to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// Every node's kept series at one moment (nodes that did not answer are left out).
pub fn scrape_all(endpoints: &[(String, SocketAddr)]) -> BTreeMap<String, BTreeMap<String, f64>> {
    endpoints
        .iter()
        .filter_map(|(name, addr)| {
            let text = node::metrics::scrape(*addr)?;
            // The HTTP response's body: everything after the blank line.
            let body = text
                .split_once("\r\n\r\n")
                .map_or(text.as_str(), |(_, b)| b);
            Some((name.clone(), parse_metrics(body)))
        })
        .collect()
}

/// What a run watches besides its clients: the nodes' metrics endpoints and the processes (by
/// name) whose CPU time is the run's own. Empty for runs without a cluster (the baseline).
#[derive(Default)]
pub struct Watch {
    pub endpoints: Vec<(String, SocketAddr)>,
    pub pids: Vec<(String, u32)>,
}

impl Watch {
    /// Every process and metrics endpoint of `cluster`.
    pub fn of(cluster: &crate::launch::LocalCluster) -> Watch {
        Watch {
            endpoints: cluster.endpoints(),
            pids: cluster.pids(),
        }
    }

    /// The process ids alone.
    pub fn pid_numbers(&self) -> Vec<u32> {
        self.pids.iter().map(|&(_, pid)| pid).collect()
    }

    /// [`scrape_all`] of the endpoints on a blocking thread, so that the clients sharing the
    /// caller's runtime thread are not held up by the nodes' HTTP answers.
    pub fn scrape(&self) -> tokio::task::JoinHandle<BTreeMap<String, BTreeMap<String, f64>>> {
        let endpoints = self.endpoints.clone();
        tokio::task::spawn_blocking(move || scrape_all(&endpoints))
    }
}

/// What each node's series grew by between two scrapes (nodes in both).
pub fn deltas(
    before: &BTreeMap<String, BTreeMap<String, f64>>,
    after: &BTreeMap<String, BTreeMap<String, f64>>,
) -> BTreeMap<String, BTreeMap<String, f64>> {
    after
        .iter()
        .filter_map(|(node, series)| {
            let earlier = before.get(node)?;
            let grown = series
                .iter()
                .map(|(s, v)| (s.clone(), v - earlier.get(s).copied().unwrap_or(0.0)))
                .collect();
            Some((node.clone(), grown))
        })
        .collect()
}

/// The mean batch of the nodes of `role` (`primary`: requests per PREPARE; `dbnode`:
/// executions per database transaction) over a window's `deltas`, 0 if they made none. Batch
/// size is what the per-batch costs are spread over, so a report without it cannot say why
/// its CPU per operation moved.
pub fn mean_batch(deltas: &BTreeMap<String, BTreeMap<String, f64>>, role: &str) -> f64 {
    let (sum, count) = deltas
        .iter()
        .filter(|(node, _)| node.split_once('-').is_some_and(|(r, _)| r == role))
        .fold((0.0, 0.0), |(sum, count), (_, series)| {
            let get = |name: &str| series.get(name).copied().unwrap_or(0.0);
            (
                sum + get("cloudbft_batch_size_sum"),
                count + get("cloudbft_batch_size_count"),
            )
        });
    if count > 0.0 {
        sum / count
    } else {
        0.0
    }
}

/// How busy the machine was during the measured window, as shares of all its cores
/// (1.0 = every core busy the whole time).
#[derive(Clone, Debug, Default, Serialize)]
pub struct MachineLoad {
    pub cores: usize,
    /// The 1-minute load average (which counts this run's own processes too) when the window
    /// began, its mean over the window (sampled every second) and its highest sample.
    pub loadavg_1m_start: f64,
    pub loadavg_1m_mean: f64,
    pub loadavg_1m_max: f64,
    /// CPU time of the whole machine, of this run's processes (the driver and every node it
    /// started), and of everything else: what other users of the machine took from the run.
    pub cpu_busy: f64,
    pub cpu_ours: f64,
    pub cpu_others: f64,
    /// The other processes that took the most CPU over the window, by command name, as shares
    /// of the machine (only processes alive at both ends are seen: a build's short-lived
    /// compiler processes are mostly missed, which is why this can sum to less than
    /// `cpu_others`).
    pub others_top: Vec<(String, f64)>,
}

/// A CPU-time reading at the start of a window.
pub struct CpuSample {
    at: Instant,
    busy_ticks: u64,
    ours_ticks: u64,
    loadavg: f64,
    samples: Vec<f64>,
    /// Every process's (command, ticks) at the start.
    everyone: BTreeMap<u32, (String, u64)>,
}

impl CpuSample {
    /// Reads the machine's and `pids`' CPU time now (`pids` besides this process).
    pub fn now(pids: &[u32]) -> CpuSample {
        let loadavg = loadavg_1m();
        CpuSample {
            at: Instant::now(),
            busy_ticks: machine_busy_ticks(),
            ours_ticks: process_ticks(pids),
            loadavg,
            samples: vec![loadavg],
            everyone: all_processes(),
        }
    }

    /// Notes the load average once more (call about every second).
    pub fn sample(&mut self) {
        self.samples.push(loadavg_1m());
    }

    /// The window from this reading to now.
    pub fn finish(self, pids: &[u32]) -> MachineLoad {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let ticks_per_sec = ticks_per_second();
        let capacity = self.at.elapsed().as_secs_f64() * cores as f64 * ticks_per_sec;
        let share = |ticks: u64| {
            if capacity > 0.0 {
                ticks as f64 / capacity
            } else {
                0.0
            }
        };
        let busy = share(machine_busy_ticks().saturating_sub(self.busy_ticks));
        let ours = share(process_ticks(pids).saturating_sub(self.ours_ticks));
        let n = self.samples.len().max(1) as f64;
        let own: Vec<u32> = std::iter::once(std::process::id())
            .chain(pids.iter().copied())
            .collect();
        let mut by_command: BTreeMap<String, u64> = BTreeMap::new();
        for (pid, (command, ticks)) in all_processes() {
            if own.contains(&pid) {
                continue;
            }
            if let Some((c, before)) = self.everyone.get(&pid).filter(|(c, _)| *c == command) {
                *by_command.entry(c.clone()).or_default() += ticks.saturating_sub(*before);
            }
        }
        let mut others_top: Vec<(String, f64)> = by_command
            .into_iter()
            .map(|(c, t)| (c, share(t)))
            .filter(|(_, s)| *s >= 0.005)
            .collect();
        others_top.sort_by(|a, b| b.1.total_cmp(&a.1));
        others_top.truncate(3);
        MachineLoad {
            cores,
            loadavg_1m_start: self.loadavg,
            loadavg_1m_mean: self.samples.iter().sum::<f64>() / n,
            loadavg_1m_max: self.samples.iter().copied().fold(0.0, f64::max),
            cpu_busy: busy,
            cpu_ours: ours.min(busy),
            cpu_others: (busy - ours).max(0.0),
            others_top,
        }
    }
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

fn loadavg_1m() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Busy CPU ticks of all cores since boot (everything but idle and I/O wait).
fn machine_busy_ticks() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let Some(cpu) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0;
    };
    let fields: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    total.saturating_sub(idle)
}

/// User and system ticks of this process and of `pids` (all their threads).
fn process_ticks(pids: &[u32]) -> u64 {
    std::iter::once(std::process::id())
        .chain(pids.iter().copied())
        .filter_map(|pid| Some(process(pid)?.1))
        .sum()
}

/// A process's command name and its user and system ticks (all its threads).
fn process(pid: u32) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: it ends at the last ')'.
    let (head, rest) = stat.rsplit_once(')')?;
    let command = head.split_once('(')?.1.to_string();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((command, utime + stime))
}

/// Every process's command name and ticks.
fn all_processes() -> BTreeMap<u32, (String, u64)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return BTreeMap::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, process(pid)?)))
        .collect()
}

/// A process's resident memory in MiB (`VmRSS` of /proc/PID/status); `None` once it is gone.
pub fn resident_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// The disk space the files under `path` (a file or a directory, followed recursively) take,
/// in bytes, as `du` counts it (allocated blocks, not file lengths: a sparse or preallocated
/// file counts what it holds on disk). Files that vanish while it walks (a decision-log
/// segment deleted at a checkpoint) count as nothing; a missing `path` is 0.
pub fn disk_bytes(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.blocks() * 512;
    }
    std::fs::read_dir(path).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| disk_bytes(&e.path()))
            .sum::<u64>()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_stage_sums_and_counts_but_not_buckets() {
        let text = "# HELP cloudbft_stage_seconds x\n\
            cloudbft_stage_seconds_sum{stage=\"agree\"} 1.5\n\
            cloudbft_stage_seconds_count{stage=\"agree\"} 3\n\
            cloudbft_stage_seconds_bucket{le=\"0.1\",stage=\"agree\"} 2\n\
            cloudbft_replies_total 7\n\
            cloudbft_received_total{kind=\"commit\"} 9\n";
        let kept = parse_metrics(text);
        assert_eq!(kept.len(), 3, "{kept:?}");
        assert_eq!(kept["cloudbft_stage_seconds_sum{stage=\"agree\"}"], 1.5);
        assert_eq!(kept["cloudbft_replies_total"], 7.0);
        let before = BTreeMap::from([("r".to_string(), kept.clone())]);
        let mut later = kept;
        *later.get_mut("cloudbft_replies_total").unwrap() = 10.0;
        let grown = deltas(&before, &BTreeMap::from([("r".to_string(), later)]));
        assert_eq!(grown["r"]["cloudbft_replies_total"], 3.0);
        assert_eq!(
            grown["r"]["cloudbft_stage_seconds_count{stage=\"agree\"}"],
            0.0
        );
    }

    #[test]
    fn mean_batches_are_per_role_and_weighted_by_batches() {
        let node = |sum: f64, count: f64| {
            BTreeMap::from([
                ("cloudbft_batch_size_sum".to_string(), sum),
                ("cloudbft_batch_size_count".to_string(), count),
            ])
        };
        let grown = BTreeMap::from([
            // Two primaries (a view change in the window): 30 requests in 2 PREPAREs, then 10
            // in 3, so 40 in 5.
            ("primary-0".to_string(), node(30.0, 2.0)),
            ("primary-1".to_string(), node(10.0, 3.0)),
            ("dbnode-11".to_string(), node(9.0, 3.0)),
            ("replica-101".to_string(), BTreeMap::new()),
        ]);
        assert_eq!(mean_batch(&grown, "primary"), 8.0);
        assert_eq!(mean_batch(&grown, "dbnode"), 3.0);
        assert_eq!(mean_batch(&grown, "replica"), 0.0);
        assert_eq!(mean_batch(&grown, "gateway"), 0.0);
        let text = "cloudbft_batch_size_sum 12\ncloudbft_batch_size_count 4\n\
            cloudbft_batch_size_bucket{le=\"1.0\"} 0\n";
        assert_eq!(parse_metrics(text).len(), 2);
    }

    #[test]
    fn this_process_burning_cpu_counts_as_ours() {
        let start = CpuSample::now(&[]);
        let until = Instant::now() + std::time::Duration::from_millis(300);
        let mut x = 0u64;
        while Instant::now() < until {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let load = start.finish(&[]);
        assert!(load.cores >= 1);
        assert!(load.cpu_ours > 0.0, "{load:?}");
        assert!(load.cpu_ours <= load.cpu_busy + 1e-9, "{load:?}");
        assert!(load.others_top.len() <= 3, "{load:?}");
    }
}
