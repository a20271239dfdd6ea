//! `cloudbft paper run|report`: the experiments of the CloudBFT paper's section V (Figs 5-11)
//! with its parameters, each run a fresh `cloudbft tpcc run` whose raw JSON goes into a results
//! directory, and the report that turns that directory into docs/results/paper.md with its
//! plots (crate::paper_report).
//!
//! The paper's setup: TPC-C with 5 warehouses (one partition each), closed-loop clients with no
//! think time, a 200 ms page-generation stage on one-core VMs, 1 to 5 groups of three replicas,
//! and as the baseline 1 to 5 unreplicated VMs in front of one database. Here each replica has
//! one page worker (`--page-workers 1`), the baseline is N unreplicated page-rendering servers
//! with the same page stage in front of one database (`tpcc run --baseline --servers N`), and
//! everything runs on this one machine.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(Args, Debug)]
pub struct PaperArgs {
    #[command(subcommand)]
    command: PaperCommand,
}

#[derive(Subcommand, Debug)]
enum PaperCommand {
    /// Run the experiments (each a fresh cluster or baseline), writing one JSON per run and
    /// a manifest into --out; runs whose JSON is there already are skipped, so an interrupted
    /// run continues where it stopped.
    Run(RunArgs),
    /// Write the report (Markdown and SVG plots) from a results directory.
    Report(crate::paper_report::ReportArgs),
}

/// How much of the paper to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Plan {
    /// Fig. 5 at one group and one unreplicated server, a few seconds each (CI runs it).
    Short,
    /// Every figure with fewer client counts and 10 s runs.
    Medium,
    /// Every figure with the paper's client counts (1 to 20) and 30 s runs.
    Full,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[arg(long, value_enum, default_value_t = Plan::Full)]
    pub plan: Plan,
    /// The same as --plan short.
    #[arg(long, conflicts_with = "plan")]
    pub short: bool,
    /// Results directory (created; runs already in it are kept).
    #[arg(long)]
    pub out: PathBuf,
    /// Group counts of Figs 5, 7, 8 and 9 (default: the plan's).
    #[arg(long, value_delimiter = ',')]
    pub groups: Option<Vec<u32>>,
    /// Client counts of Figs 8 and 9 (default: the plan's).
    #[arg(long, value_delimiter = ',')]
    pub clients: Option<Vec<u64>>,
    /// Measured seconds per run (default: the plan's).
    #[arg(long)]
    pub duration_secs: Option<u64>,
    /// Warm-up seconds per run (default: the plan's).
    #[arg(long)]
    pub warmup_secs: Option<u64>,
    /// Load the specification's cardinalities (100,000 items, 3,000 customers per district)
    /// instead of the reduced population (slow to load: every run loads three databases).
    #[arg(long)]
    pub full_scale: bool,
    /// Print the runs and the expected duration, run nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long, default_value_t = 7500)]
    pub base_port: u16,
    /// Flags passed to every `cloudbft tpcc run` (e.g. `-- --usig tpm`).
    #[arg(last = true)]
    pub extra: Vec<String>,
}

/// What a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Cluster,
    Baseline,
}

/// One planned run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Planned {
    /// File name (without .json) in the results directory.
    pub name: String,
    /// The figures it is a point of.
    pub figures: Vec<u8>,
    pub kind: Kind,
    /// Groups (cluster) or unreplicated servers (baseline).
    pub size: u32,
    pub clients: u64,
    pub page_mode: String,
    /// The USIG backend: "soft", or "tpm" (a swtpm per simulated machine).
    #[serde(default = "soft")]
    pub usig: String,
    pub warmup_secs: u64,
    pub duration_secs: u64,
    /// "done", "existing" (kept from an earlier invocation), "failed: ..." or "planned".
    #[serde(default)]
    pub status: String,
    /// Wall time of the whole run (start, load, measure, stop, checks).
    #[serde(default)]
    pub seconds: f64,
}

fn soft() -> String {
    "soft".into()
}

/// The results directory's description of its runs.
#[derive(Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub plan: Plan,
    /// The command that made the results.
    pub command: String,
    pub git_commit: Option<String>,
    pub population: String,
    pub page_delay_ms: u64,
    pub page_workers: usize,
    pub warehouses: u32,
    pub extra: Vec<String>,
    pub started_unix: i64,
    pub finished_unix: Option<i64>,
    pub runs: Vec<Planned>,
}

pub const MANIFEST: &str = "manifest.json";
/// The paper's parameters.
pub const WAREHOUSES: u32 = 5;
pub const PAGE_DELAY_MS: u64 = 200;
pub const PAGE_WORKERS: usize = 1;
/// Clients of Figs 5 and 7, and of Figs 10 and 11 (with five groups).
pub const FIG5_CLIENTS: u64 = 15;
pub const FIG10_CLIENTS: u64 = 11;
pub const FIG10_GROUPS: u32 = 5;
/// Time to start and stop a cluster and load and check its databases, for the estimate (the
/// medium plan took 16 s per run besides its warm-up and measured time on this 2-core machine,
/// with the reduced population, busy with other work).
const OVERHEAD_SECS: u64 = 20;

/// The runs of `plan`, with the overrides.
pub fn plan(args: &RunArgs, plan: Plan) -> Vec<Planned> {
    let (warmup, duration) = match plan {
        Plan::Short => (1, 4),
        Plan::Medium => (2, 10),
        Plan::Full => (5, 30),
    };
    let warmup = args.warmup_secs.unwrap_or(warmup);
    let duration = args.duration_secs.unwrap_or(duration);
    let groups = args.groups.clone().unwrap_or(match plan {
        Plan::Short => vec![1],
        _ => (1..=5).collect(),
    });
    let clients = args.clients.clone().unwrap_or(match plan {
        Plan::Short => vec![],
        Plan::Medium => vec![1, 5, 11, 15, 20],
        Plan::Full => (1..=20).collect(),
    });
    let run = |kind: Kind, size: u32, clients: u64, mode: &str, figures: Vec<u8>| {
        let prefix = match kind {
            Kind::Cluster => format!("cluster-g{size}"),
            Kind::Baseline => format!("baseline-s{size}"),
        };
        let burn = if mode == "burn" { "-burn" } else { "" };
        Planned {
            name: format!("{prefix}-c{clients}{burn}"),
            figures,
            kind,
            size,
            clients,
            page_mode: mode.into(),
            usig: soft(),
            warmup_secs: warmup,
            duration_secs: duration,
            status: "planned".into(),
            seconds: 0.0,
        }
    };
    let mut runs: Vec<Planned> = Vec::new();
    // Figs 8 and 9: throughput and latency against clients for each group count; the points
    // at 15 clients are Figs 5 and 7's, the one-group one-client point is Fig. 6's, five
    // groups with 11 clients Figs 10 and 11's (unless a longer run of its own is planned).
    let long_latency_run = plan == Plan::Full;
    for &g in &groups {
        let mut counts = clients.clone();
        if !counts.contains(&FIG5_CLIENTS) {
            counts.push(FIG5_CLIENTS);
        }
        if g == 1 && plan != Plan::Short && !counts.contains(&1) {
            counts.push(1);
        }
        counts.sort_unstable();
        counts.dedup();
        for c in counts {
            let mut figures = Vec::new();
            if c == FIG5_CLIENTS {
                figures.extend([5, 7]);
            }
            if g == 1 && c == 1 {
                figures.push(6);
            }
            if clients.contains(&c) {
                figures.extend([8, 9]);
            }
            if g == FIG10_GROUPS && c == FIG10_CLIENTS && !long_latency_run {
                figures.extend([10, 11]);
            }
            figures.sort_unstable();
            runs.push(run(Kind::Cluster, g, c, "sleep", figures));
        }
    }
    // Fig. 6 again with warrants from a TPM (swtpm), as the paper's were.
    if plan != Plan::Short && groups.contains(&1) {
        let mut r = run(Kind::Cluster, 1, 1, "sleep", vec![6]);
        r.name.push_str("-tpm");
        r.usig = "tpm".into();
        runs.push(r);
    }
    if long_latency_run && groups.contains(&FIG10_GROUPS) {
        let mut r = run(
            Kind::Cluster,
            FIG10_GROUPS,
            FIG10_CLIENTS,
            "sleep",
            vec![10, 11],
        );
        r.name.push_str("-long");
        r.duration_secs = args.duration_secs.map_or(120, |d| 4 * d);
        runs.push(r);
    }
    // Fig. 5's baseline: 1 to 5 unreplicated servers.
    for &s in &groups {
        runs.push(run(Kind::Baseline, s, FIG5_CLIENTS, "sleep", vec![5, 7]));
    }
    // Fig. 5 again with the page stage burning CPU: what two cores can do.
    let burn_sizes: Vec<u32> = match plan {
        Plan::Short => vec![],
        Plan::Medium => {
            let (lo, hi) = (groups.iter().min(), groups.iter().max());
            let mut s: Vec<u32> = lo.into_iter().chain(hi).copied().collect();
            s.dedup();
            s
        }
        Plan::Full => groups.clone(),
    };
    for &g in &burn_sizes {
        runs.push(run(Kind::Cluster, g, FIG5_CLIENTS, "burn", vec![5]));
    }
    for &s in &burn_sizes {
        runs.push(run(Kind::Baseline, s, FIG5_CLIENTS, "burn", vec![5]));
    }
    runs
}

/// The `cloudbft tpcc run` flags of a planned run.
fn flags(args: &RunArgs, plan: Plan, r: &Planned, json: &Path) -> Vec<String> {
    let mut f: Vec<String> = vec!["tpcc".into(), "run".into()];
    match r.kind {
        Kind::Cluster => f.extend(["--groups".into(), r.size.to_string()]),
        Kind::Baseline => f.extend(["--baseline".into(), "--servers".into(), r.size.to_string()]),
    }
    let population: &[&str] = if args.full_scale {
        &[]
    } else if plan == Plan::Short {
        &["--items", "1000", "--customers", "60"]
    } else {
        &["--items", "10000", "--customers", "300"]
    };
    f.extend(population.iter().map(|s| s.to_string()));
    if r.usig != "soft" {
        f.extend(["--usig".into(), r.usig.clone()]);
    }
    for (flag, value) in [
        ("--warehouses", WAREHOUSES.to_string()),
        ("--terminals", r.clients.to_string()),
        ("--page-delay-ms", PAGE_DELAY_MS.to_string()),
        ("--page-workers", PAGE_WORKERS.to_string()),
        ("--page-mode", r.page_mode.clone()),
        ("--warmup-secs", r.warmup_secs.to_string()),
        ("--duration-secs", r.duration_secs.to_string()),
        ("--base-port", args.base_port.to_string()),
        ("--json", json.display().to_string()),
    ] {
        f.extend([flag.to_string(), value]);
    }
    f.extend(args.extra.iter().cloned());
    f
}

fn population(args: &RunArgs, plan: Plan) -> String {
    if args.full_scale {
        "the specification's: 100,000 items, 10 districts per warehouse, 3,000 customers per \
         district"
    } else if plan == Plan::Short {
        "reduced: 1,000 items, 10 districts per warehouse, 60 customers per district"
    } else {
        "reduced: 10,000 items, 10 districts per warehouse, 300 customers per district"
    }
    .into()
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn minutes(secs: u64) -> String {
    if secs >= 3600 {
        format!("{}h{:02}", secs / 3600, secs % 3600 / 60)
    } else {
        format!("{} min", secs.div_ceil(60))
    }
}

/// The command line as typed, with the binary as `cloudbft`.
pub fn command_line() -> String {
    let mut words: Vec<String> = std::env::args().skip(1).collect();
    words.insert(0, "cloudbft".into());
    words
        .iter()
        .map(|w| {
            if w.is_empty() || w.contains(|c: char| c.is_whitespace() || c == '\'') {
                format!("'{}'", w.replace('\'', "'\\''"))
            } else {
                w.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The checkout's commit, and whether its tracked files differ from it.
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .stderr(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).filter(|s| !s.is_empty())?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty {
        format!("{commit} with uncommitted changes")
    } else {
        commit
    })
}

pub fn paper(args: PaperArgs) -> Result<()> {
    match args.command {
        PaperCommand::Run(run) => run_plan(&run),
        PaperCommand::Report(report) => crate::paper_report::report(&report),
    }
}

fn run_plan(args: &RunArgs) -> Result<()> {
    let which = if args.short { Plan::Short } else { args.plan };
    let mut runs = plan(args, which);
    let expected = expected_secs(&runs);
    eprintln!(
        "plan {which:?}: {} runs, expected about {} on a quiet machine ({} s per run to start, \
         load and stop besides its warm-up and measured time)",
        runs.len(),
        minutes(expected),
        OVERHEAD_SECS
    );
    if args.dry_run {
        for r in &runs {
            println!(
                "{:<28} figs {:<14} {:?} size {} clients {:>2} {} {} USIG {}+{} s",
                r.name,
                format!("{:?}", r.figures),
                r.kind,
                r.size,
                r.clients,
                r.page_mode,
                r.usig,
                r.warmup_secs,
                r.duration_secs
            );
        }
        return Ok(());
    }
    std::fs::create_dir_all(args.out.join("logs"))
        .with_context(|| format!("creating {}", args.out.display()))?;
    let out = args.out.canonicalize()?;
    let mut manifest = Manifest {
        plan: which,
        command: command_line(),
        git_commit: git_commit(),
        population: population(args, which),
        page_delay_ms: PAGE_DELAY_MS,
        page_workers: PAGE_WORKERS,
        warehouses: WAREHOUSES,
        extra: args.extra.clone(),
        started_unix: unix_now(),
        finished_unix: None,
        runs: Vec::new(),
    };
    // Runs kept from an earlier invocation keep their recorded wall time, and the results
    // their first start.
    let earlier = std::fs::read_to_string(out.join(MANIFEST))
        .ok()
        .and_then(|t| serde_json::from_str::<Manifest>(&t).ok());
    if let Some(e) = &earlier {
        manifest.started_unix = e.started_unix;
    }
    let earlier: Vec<Planned> = earlier.map(|m| m.runs).unwrap_or_default();
    let exe = std::env::current_exe()?;
    let began = Instant::now();
    let kept = |r: &Planned| out.join(format!("{}.json", r.name)).exists();
    let to_measure: Vec<Planned> = runs.iter().filter(|r| !kept(r)).cloned().collect();
    if to_measure.len() < runs.len() {
        eprintln!(
            "{} runs are in {} already; about {} to measure the other {}",
            runs.len() - to_measure.len(),
            out.display(),
            minutes(expected_secs(&to_measure)),
            to_measure.len()
        );
    }
    let mut remaining = expected_secs(&to_measure);
    let total = runs.len();
    let mut failed = 0;
    for i in 0..total {
        let r = runs[i].clone();
        let json = out.join(format!("{}.json", r.name));
        if json.exists() {
            same_run(&json, &r)?;
            runs[i].status = "existing".into();
            runs[i].seconds = earlier
                .iter()
                .find(|e| e.name == r.name)
                .map_or(0.0, |e| e.seconds);
            eprintln!("[{}/{total}] {}: kept from an earlier run", i + 1, r.name);
            continue;
        }
        remaining = remaining.saturating_sub(expected_secs(std::slice::from_ref(&r)));
        eprintln!(
            "[{}/{total}] {} (figs {:?}): {} {} with {} clients, {} page stage, {} USIG; {} \
             elapsed, about {} to go after this one",
            i + 1,
            r.name,
            r.figures,
            r.size,
            match r.kind {
                Kind::Cluster => "group(s)",
                Kind::Baseline => "unreplicated server(s)",
            },
            r.clients,
            r.page_mode,
            r.usig,
            minutes(began.elapsed().as_secs()),
            minutes(remaining)
        );
        let log_path = out.join("logs").join(format!("{}.log", r.name));
        let log = std::fs::File::create(&log_path)?;
        let started = Instant::now();
        let status = Command::new(&exe)
            .args(flags(args, which, &r, &json))
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .status()
            .context("starting cloudbft tpcc run")?;
        runs[i].seconds = started.elapsed().as_secs_f64();
        if status.success() && json.exists() {
            runs[i].status = "done".into();
            eprintln!(
                "    {} (took {:.0} s)",
                summary(&json).unwrap_or_else(|e| format!("unreadable result: {e}")),
                runs[i].seconds
            );
        } else {
            failed += 1;
            runs[i].status = format!("failed: {status}, see logs/{}.log", r.name);
            // A failed run leaves no result behind (its plot either).
            let _ = std::fs::remove_file(&json);
            eprintln!(
                "    FAILED ({status}); its log: {}; the last lines:\n{}",
                log_path.display(),
                tail(&log_path, 8)
            );
        }
        manifest.runs = runs.clone();
        write_manifest(&out, &manifest)?;
    }
    manifest.runs = runs;
    manifest.finished_unix = Some(unix_now());
    write_manifest(&out, &manifest)?;
    eprintln!(
        "{} runs in {} ({} failed); results in {}",
        total,
        minutes(began.elapsed().as_secs()),
        failed,
        out.display()
    );
    eprintln!(
        "the report: cloudbft paper report --results {} --out docs/results/paper.md",
        args.out.display()
    );
    if failed > 0 {
        bail!(
            "{failed} of {total} runs failed (see the logs in {})",
            out.join("logs").display()
        );
    }
    Ok(())
}

/// Fails unless the result at `json` is a measurement of `planned` (a results directory of
/// another plan, with other durations, must not pass for this one's).
fn same_run(json: &Path, planned: &Planned) -> Result<()> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(json)?)
        .with_context(|| format!("reading {}", json.display()))?;
    let size = match planned.kind {
        Kind::Cluster => &v["groups"],
        Kind::Baseline => &v["servers"],
    };
    let found = (
        size.as_u64(),
        v["terminals"].as_u64(),
        v["page_mode"].as_str(),
        v["usig"].as_str(),
        v["duration_secs"].as_f64(),
    );
    let wanted = (
        Some(u64::from(planned.size)),
        Some(planned.clients),
        Some(planned.page_mode.as_str()),
        Some(planned.usig.as_str()),
        Some(planned.duration_secs as f64),
    );
    if found != wanted {
        bail!(
            "{} is not this plan's {} (it has size, clients, page mode, USIG, seconds {found:?}; the \
             plan wants {wanted:?}): use another --out, or remove it to measure it again",
            json.display(),
            planned.name
        );
    }
    Ok(())
}

fn write_manifest(out: &Path, manifest: &Manifest) -> Result<()> {
    let path = out.join(MANIFEST);
    std::fs::write(&path, serde_json::to_string_pretty(manifest)?)
        .with_context(|| format!("writing {}", path.display()))
}

/// One line about a finished run.
fn summary(json: &Path) -> Result<String> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(json)?)?;
    let f = |p: &str| v.pointer(p).and_then(|x| x.as_f64()).unwrap_or(f64::NAN);
    Ok(format!(
        "{:.0} tx/min, latency mean {:.0} ms, p95 {:.0} ms, {} errors; load average {:.1}, \
         other processes {:.0}% of the CPU",
        f("/tpm_total"),
        f("/latency_ms/mean"),
        f("/latency_ms/p95"),
        v["errors"],
        f("/load/loadavg_1m_mean"),
        100.0 * f("/load/cpu_others")
    ))
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// How long `runs` take on a quiet machine, about.
pub fn expected_secs(runs: &[Planned]) -> u64 {
    runs.iter()
        .map(|r| OVERHEAD_SECS + r.warmup_secs + r.duration_secs)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn runs(argv: &[&str]) -> Vec<Planned> {
        let cli = Cli::parse_from(std::iter::once("x").chain(argv.iter().copied()));
        let which = if cli.run.short {
            Plan::Short
        } else {
            cli.run.plan
        };
        plan(&cli.run, which)
    }

    #[test]
    fn the_full_plan_has_every_figure_with_the_papers_parameters() {
        let r = runs(&["--out", "x"]);
        let cluster = |g, c, mode: &str| {
            r.iter()
                .find(|p| {
                    p.kind == Kind::Cluster
                        && p.size == g
                        && p.clients == c
                        && p.page_mode == mode
                        && p.usig == "soft"
                })
                .unwrap_or_else(|| panic!("no cluster run g{g} c{c} {mode}"))
        };
        // Figs 8 and 9: 1 to 5 groups, 1 to 20 clients.
        for g in 1..=5 {
            for c in 1..=20 {
                assert!(cluster(g, c, "sleep").figures.contains(&8));
            }
            assert!(cluster(g, 15, "sleep").figures.contains(&5));
            assert!(cluster(g, 15, "burn").figures.contains(&5));
        }
        assert_eq!(cluster(1, 1, "sleep").figures, vec![6, 8, 9]);
        let tpm: Vec<_> = r.iter().filter(|p| p.usig == "tpm").collect();
        assert_eq!(tpm.len(), 1);
        assert_eq!(
            (tpm[0].size, tpm[0].clients, &tpm[0].figures),
            (1, 1, &vec![6])
        );
        let long: Vec<_> = r.iter().filter(|p| p.figures.contains(&10)).collect();
        assert_eq!(long.len(), 1);
        assert_eq!((long[0].size, long[0].clients), (5, 11));
        assert!(long[0].duration_secs > cluster(5, 11, "sleep").duration_secs);
        let baselines: Vec<u32> = r
            .iter()
            .filter(|p| p.kind == Kind::Baseline && p.page_mode == "sleep")
            .map(|p| p.size)
            .collect();
        assert_eq!(baselines, vec![1, 2, 3, 4, 5]);
        let mut names: Vec<_> = r.iter().map(|p| &p.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), r.len(), "run names are unique");
        assert_eq!(r.len(), 100 + 1 + 1 + 5 + 10);
    }

    #[test]
    fn the_short_plan_is_fig5_at_one_group_and_one_server() {
        let r = runs(&["--short", "--out", "x"]);
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|p| p.figures == vec![5, 7] && p.size == 1));
        assert!(r.iter().all(|p| p.duration_secs <= 5));
        let f = flags(
            &Cli::parse_from(["x", "--out", "x", "--", "--usig", "tpm"]).run,
            Plan::Short,
            &r[1],
            Path::new("b.json"),
        );
        let joined = f.join(" ");
        assert!(joined.contains("--baseline --servers 1"), "{joined}");
        assert!(
            joined.contains("--page-delay-ms 200 --page-workers 1"),
            "{joined}"
        );
        assert!(joined.ends_with("--usig tpm"), "{joined}");
    }

    #[test]
    fn a_kept_result_must_be_the_planned_run() {
        let r = runs(&["--short", "--out", "x"]);
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("r.json");
        let result = |seconds: f64| {
            serde_json::json!({"groups": 1, "servers": 0, "terminals": 15, "usig": "soft",
                               "page_mode": "sleep", "duration_secs": seconds})
            .to_string()
        };
        std::fs::write(&json, result(4.0)).unwrap();
        same_run(&json, &r[0]).unwrap();
        std::fs::write(&json, result(30.0)).unwrap();
        let e = same_run(&json, &r[0]).unwrap_err().to_string();
        assert!(e.contains("another --out"), "{e}");
    }

    #[test]
    fn overrides_choose_groups_and_clients() {
        let r = runs(&[
            "--plan",
            "medium",
            "--out",
            "x",
            "--groups",
            "1,3",
            "--clients",
            "2",
        ]);
        let fig8: Vec<(u32, u64)> = r
            .iter()
            .filter(|p| p.figures.contains(&8))
            .map(|p| (p.size, p.clients))
            .collect();
        assert_eq!(fig8, vec![(1, 2), (3, 2)]);
        // Figs 5 and 6 keep their points.
        assert!(r.iter().any(|p| p.figures.contains(&6)));
        assert!(r.iter().any(|p| p.size == 3 && p.clients == 15));
    }
}
