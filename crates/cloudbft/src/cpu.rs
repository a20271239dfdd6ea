//! CPU time per operation, by role: what each benchmark operation costs the cluster's processes
//! and the load driver, read from /proc (user + system time of every thread of each process).
//!
//! Wall-clock throughput on a shared 2-core machine moves with whatever else runs; the CPU time
//! a run's processes spent per operation moves much less, so it is the figure to compare when
//! work on the request path claims a saving (docs/performance.md).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Clock ticks per second of /proc's time fields (`_SC_CLK_TCK`).
fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// What a snapshot needs from `/proc/<pid>/stat`.
struct Stat {
    command: String,
    ppid: u32,
    /// User plus system CPU seconds so far, all threads.
    cpu_seconds: f64,
}

/// Reads `/proc/<pid>/stat`, or None once the process is gone.
fn stat(pid: u32) -> Option<Stat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after its end.
    let close = stat.rfind(')')?;
    let command = stat.get(stat.find('(')? + 1..close)?.to_string();
    let fields: Vec<&str> = stat.get(close + 2..)?.split(' ').collect();
    // Fields 4 (ppid), 14 and 15 (utime, stime) are at 1, 11 and 12 after the name and state.
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some(Stat {
        command,
        ppid,
        cpu_seconds: (utime + stime) / ticks_per_sec(),
    })
}

/// User plus system CPU seconds so far of process `pid` (all its threads), or None once it is
/// gone.
fn cpu_seconds(pid: u32) -> Option<f64> {
    stat(pid).map(|s| s.cpu_seconds)
}

/// The CPU seconds of the live children of each process in `parents` (pid → name), named
/// `<command>-<parent's name>`: usigd's swtpm, whose CPU time would otherwise count nowhere (a
/// parent's /proc/PID/stat has its children's time only once they exited and were waited
/// for).
fn children(parents: &BTreeMap<u32, &str>) -> Vec<(String, f64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = stat(pid)?;
        let parent = parents.get(&stat.ppid)?;
        Some((format!("{}-{parent}", stat.command), stat.cpu_seconds))
    })
    .collect()
}

/// The role of a launched process from its name (`replica-101` → `replica`, `swtpm-usigd-m0`
/// → `swtpm`).
fn role(name: &str) -> &str {
    name.split_once('-').map_or(name, |(role, _)| role)
}

/// CPU seconds of a set of named processes at one moment.
#[derive(Debug, Clone)]
pub struct CpuSnapshot(Vec<(String, f64)>);

impl CpuSnapshot {
    /// Takes the snapshot of `pids` (name, pid), of their live children (named after their
    /// command and parent), and of this process, named `driver`.
    pub fn take(pids: &[(String, u32)]) -> CpuSnapshot {
        let parents: BTreeMap<u32, &str> = pids.iter().map(|(n, p)| (*p, n.as_str())).collect();
        let mut taken: Vec<(String, f64)> = pids
            .iter()
            .filter_map(|(name, pid)| Some((name.clone(), cpu_seconds(*pid)?)))
            .chain(children(&parents))
            .collect();
        taken.extend(cpu_seconds(std::process::id()).map(|s| ("driver".to_string(), s)));
        CpuSnapshot(taken)
    }

    /// CPU milliseconds per operation from `self` to `later`, for `operations` operations:
    /// summed per role and per process.
    pub fn per_operation(&self, later: &CpuSnapshot, operations: u64) -> CpuPerOperation {
        let ops = operations.max(1) as f64;
        let mut by_process = BTreeMap::new();
        let mut by_role: BTreeMap<String, f64> = BTreeMap::new();
        for (name, before) in &self.0 {
            let Some((_, after)) = later.0.iter().find(|(n, _)| n == name) else {
                continue;
            };
            let ms = (after - before).max(0.0) * 1000.0 / ops;
            by_process.insert(name.clone(), ms);
            *by_role.entry(role(name).to_string()).or_default() += ms;
        }
        CpuPerOperation {
            total_ms: by_role.values().sum(),
            by_role,
            by_process,
        }
    }
}

/// What one operation cost in CPU milliseconds, across every process of the run (the default,
/// with no roles, stands for a report from before it was measured).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuPerOperation {
    pub total_ms: f64,
    /// Summed over the processes of each role (`replica`, `dbnode`, `primary`, `usigd`,
    /// `driver`, ...).
    pub by_role: BTreeMap<String, f64>,
    pub by_process: BTreeMap<String, f64>,
}

impl CpuPerOperation {
    /// One line for people: `total 2.41 ms = replica 1.10 + dbnode 0.70 + ...`.
    pub fn line(&self) -> String {
        let mut roles: Vec<(&String, &f64)> = self.by_role.iter().collect();
        roles.sort_by(|a, b| b.1.total_cmp(a.1));
        let parts: Vec<String> = roles
            .iter()
            .map(|(role, ms)| format!("{role} {ms:.3}"))
            .collect();
        format!(
            "CPU per operation: {:.3} ms = {}",
            self.total_ms,
            parts.join(" + ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_cpu_time_that_grows_with_work() {
        let now = || cpu_seconds(std::process::id()).expect("our own /proc/PID/stat");
        let before = now();
        let mut x = 0u64;
        // Work until the kernel has counted at least one more tick (a few ms of CPU).
        let grew = (0..100_000).any(|_| {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            std::hint::black_box(x);
            now() > before
        });
        assert!(grew, "no CPU time counted for this process in /proc");
        assert!(cpu_seconds(u32::MAX).is_none());
    }

    #[test]
    fn a_process_s_children_are_counted_under_their_command() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let me = std::process::id();
        let snapshot = CpuSnapshot::take(&[("usigd-m0".to_string(), me)]);
        child.kill().expect("kill sleep");
        child.wait().expect("wait for sleep");
        let names: Vec<&str> = snapshot.0.iter().map(|(n, _)| n.as_str()).collect();
        assert!(names.contains(&"usigd-m0"), "{names:?}");
        assert!(names.contains(&"sleep-usigd-m0"), "{names:?}");
        assert_eq!(role("sleep-usigd-m0"), "sleep");
    }

    #[test]
    fn costs_are_summed_by_role_and_divided_by_operations() {
        let at =
            |v: &[(&str, f64)]| CpuSnapshot(v.iter().map(|(n, s)| (n.to_string(), *s)).collect());
        let before = at(&[
            ("replica-101", 1.0),
            ("replica-102", 2.0),
            ("dbnode-11", 0.5),
        ]);
        let after = at(&[
            ("replica-101", 2.0),
            ("replica-102", 4.0),
            ("dbnode-11", 1.0),
        ]);
        let cost = before.per_operation(&after, 1000);
        assert_eq!(cost.by_role["replica"], 3.0);
        assert_eq!(cost.by_role["dbnode"], 0.5);
        assert_eq!(cost.total_ms, 3.5);
        assert_eq!(cost.by_process["replica-102"], 2.0);
        assert!(cost
            .line()
            .starts_with("CPU per operation: 3.500 ms = replica 3.000"));
    }
}
