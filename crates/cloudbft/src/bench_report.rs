//! `cloudbft bench summary` and `cloudbft bench compare`: the JSON reports of `cloudbft bench`
//! as a person reads them. The summary is a Markdown table, one row per run (what
//! `benches/e2e-matrix.sh` writes as summary.md); the comparison puts saved runs beside new ones
//! figure by figure, with the ratio and whether each got better or worse. It is a guide for
//! reviews, not a test: figures move by 10-20% from run to run on this shared machine, so it
//! never fails because one got worse (docs/performance.md, "Reading and comparing reports").

use crate::bench::Report;
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// What `cloudbft bench` does with reports instead of running.
#[derive(Subcommand, Debug)]
pub enum ReportCommand {
    /// Print a Markdown table of bench reports, one row per run.
    Summary(SummaryArgs),
    /// Compare saved bench reports with new ones, figure by figure: old, new, new/old and
    /// whether it got better or worse (never fails because a figure got worse).
    Compare(CompareArgs),
}

#[derive(Args, Debug)]
pub struct SummaryArgs {
    /// Bench JSON reports, or directories of them (every *.json in name order).
    #[arg(required = true)]
    pub reports: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The saved run: a bench JSON report, or a directory of them.
    pub old: PathBuf,
    /// The new run: a bench JSON report, or a directory of them. Runs are paired by
    /// application, f, groups, USIG, database, batch and clients; several runs of one
    /// configuration on a side are compared by their medians.
    pub new: PathBuf,
    /// Changes smaller than this share are marked "within noise" (differences under about 10%
    /// are noise on this shared machine).
    #[arg(long, default_value_t = 0.10)]
    pub noise: f64,
}

/// Runs a report subcommand, printing to standard output.
pub fn run(command: ReportCommand) -> Result<()> {
    match command {
        ReportCommand::Summary(args) => print!("{}", summary(&load(&args.reports)?)),
        ReportCommand::Compare(args) => {
            let old = load(std::slice::from_ref(&args.old))?;
            let new = load(std::slice::from_ref(&args.new))?;
            print!("{}", compare(&old, &new).render(args.noise));
        }
    }
    Ok(())
}

/// The reports at `paths`: each a bench JSON file, or a directory whose *.json files are read
/// in name order.
pub fn load(paths: &[PathBuf]) -> Result<Vec<(PathBuf, Report)>> {
    let mut files = Vec::new();
    for path in paths {
        if !path.is_dir() {
            files.push(path.clone());
            continue;
        }
        let entries =
            std::fs::read_dir(path).with_context(|| format!("reading {}", path.display()))?;
        let mut jsons: Vec<PathBuf> = entries
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        if jsons.is_empty() {
            bail!("{} holds no *.json bench report", path.display());
        }
        jsons.sort();
        files.extend(jsons);
    }
    files
        .into_iter()
        .map(|file| {
            let report = read(&file)?;
            Ok((file, report))
        })
        .collect()
}

/// The bench report in `path`, or an error that names the file when it holds something else.
pub fn read(path: &Path) -> Result<Report> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a cloudbft bench report", path.display()))
}

/// CPU milliseconds per operation of all processes, if the report measured it.
fn cpu_total(r: &Report) -> Option<f64> {
    (!r.cpu.by_role.is_empty()).then_some(r.cpu.total_ms)
}

/// A Markdown table whose columns are padded so that it lines up in a terminal too.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let padded: Vec<String> = cells
            .zip(&widths)
            .map(|(cell, &width)| format!("{cell:<width$}"))
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    let mut out = line(&mut header.iter().copied());
    out += &line(&mut rule.iter().map(String::as_str));
    for row in rows {
        out += &line(&mut row.iter().map(String::as_str));
    }
    out
}

/// The Markdown table of `reports`, one row per run in the order given.
pub fn summary(reports: &[(PathBuf, Report)]) -> String {
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|(_, r)| {
            vec![
                r.application.clone(),
                r.groups.to_string(),
                r.usig.clone(),
                r.max_batch.to_string(),
                r.clients.to_string(),
                format!("{:.0}", r.throughput_per_sec),
                format!(
                    "{:.1} / {:.1} / {:.1}",
                    r.latency_ms.p50, r.latency_ms.p95, r.latency_ms.p99
                ),
                cpu_total(r).map_or("-".to_string(), |ms| format!("{ms:.3}")),
                if r.requests_per_prepare > 0.0 {
                    format!("{:.1}", r.requests_per_prepare)
                } else {
                    "-".to_string()
                },
                r.errors.to_string(),
                build_of(r).to_owned(),
            ]
        })
        .collect();
    table(
        &[
            "application",
            "groups",
            "usig",
            "batch",
            "clients",
            "ops/s",
            "p50 / p95 / p99 ms",
            "CPU ms/op",
            "requests/PREPARE",
            "errors",
            "build",
        ],
        &rows,
    )
}

/// Which way a figure should move.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Better {
    Higher,
    Lower,
}

/// One figure compared: the values of each side's runs (a figure a run lacks, such as a role
/// the other side has, has none there).
#[derive(Debug, PartialEq)]
pub struct Row {
    pub figure: String,
    pub better: Better,
    /// Decimals when printed.
    decimals: usize,
    pub old: Vec<f64>,
    pub new: Vec<f64>,
}

/// The middle value (the mean of the two middle ones for an even count).
fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

impl Row {
    /// The old side's median.
    pub fn old_median(&self) -> Option<f64> {
        median(&self.old)
    }

    /// The new side's median.
    pub fn new_median(&self) -> Option<f64> {
        median(&self.new)
    }

    /// New over old, when both sides have the figure and the old one is not 0.
    pub fn ratio(&self) -> Option<f64> {
        let (old, new) = (self.old_median()?, self.new_median()?);
        (old != 0.0).then(|| new / old)
    }

    /// "better", "worse" or "same" (equal as printed), with "within noise" when the change is
    /// less than the share `noise`; "-" when a side lacks the figure.
    pub fn verdict(&self, noise: f64) -> String {
        let (Some(old), Some(new)) = (self.old_median(), self.new_median()) else {
            return "-".to_string();
        };
        if self.format(old) == self.format(new) {
            return "same".to_string();
        }
        let word = match (new > old, self.better) {
            (true, Better::Higher) | (false, Better::Lower) => "better",
            _ => "worse",
        };
        match self.ratio() {
            Some(r) if (r - 1.0).abs() < noise => format!("{word}, within noise"),
            _ => word.to_string(),
        }
    }

    fn format(&self, value: f64) -> String {
        format!("{value:.*}", self.decimals)
    }
}

/// The figures of a run that are compared, in the order they are printed.
fn figures(r: &Report) -> Vec<(String, f64, Better, usize)> {
    let mut out = vec![
        (
            "throughput (ops/s)".into(),
            r.throughput_per_sec,
            Better::Higher,
            1,
        ),
        (
            "latency p50 (ms)".into(),
            r.latency_ms.p50,
            Better::Lower,
            2,
        ),
        (
            "latency p95 (ms)".into(),
            r.latency_ms.p95,
            Better::Lower,
            2,
        ),
        (
            "latency p99 (ms)".into(),
            r.latency_ms.p99,
            Better::Lower,
            2,
        ),
    ];
    if let Some(total) = cpu_total(r) {
        out.push(("CPU ms/op, all".into(), total, Better::Lower, 3));
        for (role, ms) in &r.cpu.by_role {
            out.push((format!("CPU ms/op, {role}"), *ms, Better::Lower, 3));
        }
    }
    // Larger batches spread the per-batch work over more requests (reports from before these
    // were recorded have none).
    for (figure, mean) in [
        ("requests per PREPARE", r.requests_per_prepare),
        ("executions per transaction", r.executions_per_transaction),
    ] {
        if mean > 0.0 {
            out.push((figure.into(), mean, Better::Higher, 1));
        }
    }
    out.push(("errors".into(), r.errors as f64, Better::Lower, 0));
    out
}

/// The rows comparing the runs `old` with the runs `new`.
fn rows(old: &[(&Path, &Report)], new: &[(&Path, &Report)]) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for (is_new, runs) in [(false, old), (true, new)] {
        for (_, run) in runs {
            for (figure, value, better, decimals) in figures(run) {
                let i = match rows.iter().position(|r| r.figure == figure) {
                    Some(i) => i,
                    None => {
                        rows.push(Row {
                            figure,
                            better,
                            decimals,
                            old: Vec::new(),
                            new: Vec::new(),
                        });
                        rows.len() - 1
                    }
                };
                let side = if is_new {
                    &mut rows[i].new
                } else {
                    &mut rows[i].old
                };
                side.push(value);
            }
        }
    }
    rows
}

/// The runs of one configuration on both sides, and their figures side by side.
pub struct Pair<'a> {
    pub old: Vec<(&'a Path, &'a Report)>,
    pub new: Vec<(&'a Path, &'a Report)>,
    pub rows: Vec<Row>,
}

/// Saved runs against new ones.
pub struct Comparison<'a> {
    pub pairs: Vec<Pair<'a>>,
    /// Runs with no run of their configuration on the other side.
    pub only_old: Vec<&'a Path>,
    pub only_new: Vec<&'a Path>,
}

/// Pairs the runs of `old` and `new` by configuration (application, f, groups, USIG, database,
/// batch, clients); when each side holds one run, those two are paired whatever differs (the
/// rendering then says what does).
pub fn compare<'a>(old: &'a [(PathBuf, Report)], new: &'a [(PathBuf, Report)]) -> Comparison<'a> {
    let refs = |runs: &'a [(PathBuf, Report)]| -> Vec<(&'a Path, &'a Report)> {
        runs.iter().map(|(p, r)| (p.as_path(), r)).collect()
    };
    if old.len() == 1 && new.len() == 1 {
        let (old, new) = (refs(old), refs(new));
        return Comparison {
            pairs: vec![Pair {
                rows: rows(&old, &new),
                old,
                new,
            }],
            only_old: Vec::new(),
            only_new: Vec::new(),
        };
    }
    type Sides<'a> = (Vec<(&'a Path, &'a Report)>, Vec<(&'a Path, &'a Report)>);
    let mut by_configuration: BTreeMap<String, Sides<'a>> = BTreeMap::new();
    for run in refs(old) {
        by_configuration
            .entry(run.1.label())
            .or_default()
            .0
            .push(run);
    }
    for run in refs(new) {
        by_configuration
            .entry(run.1.label())
            .or_default()
            .1
            .push(run);
    }
    let mut comparison = Comparison {
        pairs: Vec::new(),
        only_old: Vec::new(),
        only_new: Vec::new(),
    };
    for (_, (old, new)) in by_configuration {
        if old.is_empty() {
            comparison.only_new.extend(new.iter().map(|(p, _)| *p));
        } else if new.is_empty() {
            comparison.only_old.extend(old.iter().map(|(p, _)| *p));
        } else {
            comparison.pairs.push(Pair {
                rows: rows(&old, &new),
                old,
                new,
            });
        }
    }
    comparison
}

/// The build a report names ([`crate::BUILD`]), or that it names none.
fn build_of(report: &Report) -> &str {
    match report.build.as_str() {
        "" => "not recorded",
        build => build,
    }
}

/// The builds of one side's runs, each once.
fn builds(runs: &[(&Path, &Report)]) -> String {
    let builds: std::collections::BTreeSet<&str> = runs.iter().map(|(_, r)| build_of(r)).collect();
    builds.into_iter().collect::<Vec<_>>().join(", ")
}

/// The files of one side, shortened to "N runs (median)" past three.
fn files(runs: &[(&Path, &Report)]) -> String {
    if runs.len() > 3 {
        return format!("{} runs (median)", runs.len());
    }
    let names: Vec<String> = runs.iter().map(|(p, _)| p.display().to_string()).collect();
    match runs.len() {
        1 => names.join(""),
        _ => format!("{} (median)", names.join(", ")),
    }
}

impl Comparison<'_> {
    /// The comparison as Markdown: a table per configuration, then the runs left unpaired.
    pub fn render(&self, noise: f64) -> String {
        let mut out = format!(
            "Ratios are new/old; \"within noise\": changed by less than {:.0}%.\n",
            noise * 100.0
        );
        for pair in &self.pairs {
            let (old_label, new_label) = (pair.old[0].1.label(), pair.new[0].1.label());
            let _ = writeln!(out, "\n## {new_label}\n");
            if old_label != new_label {
                let _ = writeln!(out, "The runs differ: old {old_label}.\n");
            }
            let (old_builds, new_builds) = (builds(&pair.old), builds(&pair.new));
            let _ = writeln!(
                out,
                "old: {} (build {old_builds})  \nnew: {} (build {new_builds})\n",
                files(&pair.old),
                files(&pair.new)
            );
            // One commit's build is the same code on both sides; a dirty one (or one of unknown
            // source, several builds, none recorded) may not be.
            let one_commit = |b: &str| b.chars().all(|c| c.is_ascii_hexdigit());
            if old_label == new_label && old_builds == new_builds && one_commit(&old_builds) {
                let _ = writeln!(
                    out,
                    "Both sides ran the same build: only the machine differs.\n"
                );
            }
            let cells: Vec<Vec<String>> = pair
                .rows
                .iter()
                .map(|row| {
                    let value = |v: Option<f64>| v.map_or("-".to_string(), |v| row.format(v));
                    vec![
                        row.figure.clone(),
                        value(row.old_median()),
                        value(row.new_median()),
                        row.ratio().map_or("-".to_string(), |r| format!("{r:.3}")),
                        row.verdict(noise),
                    ]
                })
                .collect();
            out += &table(&["figure", "old", "new", "new/old", "change"], &cells);
        }
        for (side, runs) in [("old", &self.only_old), ("new", &self.only_new)] {
            if !runs.is_empty() {
                let _ = writeln!(out, "\nOnly in {side}, not compared:");
                for path in runs.iter() {
                    let _ = writeln!(out, "- {}", path.display());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::tests::sample;

    fn named(runs: Vec<(&str, Report)>) -> Vec<(PathBuf, Report)> {
        runs.into_iter()
            .map(|(name, r)| (PathBuf::from(name), r))
            .collect()
    }

    fn row<'a>(pair: &'a Pair, figure: &str) -> &'a Row {
        pair.rows
            .iter()
            .find(|r| r.figure == figure)
            .unwrap_or_else(|| panic!("no row {figure}"))
    }

    #[test]
    fn the_summary_has_a_row_per_run() {
        let mut bank = sample("bank", 64, 198.4, 80.0);
        bank.groups = 2;
        bank.usig = "tpm".into();
        bank.max_batch = 1;
        bank.errors = 3;
        bank.requests_per_prepare = 0.0;
        bank.build = String::new();
        let table = summary(&named(vec![
            ("a.json", sample("noop", 16, 212.4, 75.0)),
            ("b.json", bank),
        ]));
        let lines: Vec<Vec<&str>> = table
            .lines()
            .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
            .collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert_eq!(lines[0][0], "application");
        assert_eq!(lines[0][9], "errors");
        assert_eq!(lines[0][10], "build");
        assert!(lines[1].iter().all(|c| c.chars().all(|ch| ch == '-')));
        assert_eq!(
            lines[2],
            [
                "noop",
                "1",
                "soft",
                "64",
                "16",
                "212",
                "75.0 / 112.5 / 150.0",
                "1.400",
                "12.0",
                "0",
                "0123456789ab"
            ]
        );
        assert_eq!(
            lines[3],
            [
                "bank",
                "2",
                "tpm",
                "1",
                "64",
                "198",
                "80.0 / 120.0 / 160.0",
                "1.400",
                "-",
                "3",
                "not recorded"
            ]
        );
        // Padded: every line is as long as the header.
        let widths: Vec<usize> = table.lines().map(|l| l.chars().count()).collect();
        assert!(widths.iter().all(|&w| w == widths[0]), "{table}");
    }

    #[test]
    fn runs_pair_by_configuration_and_compare_by_their_medians() {
        let old = named(vec![
            ("old/noop-1.json", sample("noop", 16, 200.0, 80.0)),
            ("old/noop-2.json", sample("noop", 16, 240.0, 70.0)),
            ("old/noop-3.json", sample("noop", 16, 220.0, 75.0)),
            ("old/bank.json", sample("bank", 16, 200.0, 80.0)),
        ]);
        let mut faster = sample("noop", 16, 242.0, 60.0);
        faster.cpu.by_role.remove("driver");
        faster.cpu.by_role.insert("usigd".into(), 0.1);
        faster.errors = 2;
        faster.requests_per_prepare = 24.0;
        let new = named(vec![
            ("new/noop.json", faster),
            ("new/noop-64.json", sample("noop", 64, 400.0, 150.0)),
        ]);
        let comparison = compare(&old, &new);
        assert_eq!(comparison.pairs.len(), 1);
        assert_eq!(comparison.only_old, [Path::new("old/bank.json")]);
        assert_eq!(comparison.only_new, [Path::new("new/noop-64.json")]);
        let pair = &comparison.pairs[0];
        assert_eq!((pair.old.len(), pair.new.len()), (3, 1));

        let throughput = row(pair, "throughput (ops/s)");
        assert_eq!(
            (throughput.old_median(), throughput.new_median()),
            (Some(220.0), Some(242.0))
        );
        assert!((throughput.ratio().unwrap() - 1.1).abs() < 1e-9);
        assert_eq!(throughput.verdict(0.05), "better");
        assert_eq!(throughput.verdict(0.2), "better, within noise");
        let p50 = row(pair, "latency p50 (ms)");
        assert_eq!(p50.old_median(), Some(75.0));
        assert_eq!(p50.verdict(0.1), "better");
        let p99 = row(pair, "latency p99 (ms)");
        assert!((p99.ratio().unwrap() - 0.8).abs() < 1e-9);
        let replica = row(pair, "CPU ms/op, replica");
        assert_eq!(
            (replica.ratio(), replica.verdict(0.1)),
            (Some(1.0), String::from("same"))
        );
        // A role on one side only is shown, not compared.
        for role in ["CPU ms/op, driver", "CPU ms/op, usigd"] {
            assert_eq!(
                (row(pair, role).ratio(), row(pair, role).verdict(0.1)),
                (None, String::from("-"))
            );
        }
        // Batch sizes are compared; a report from before they were recorded has none.
        let batch = row(pair, "requests per PREPARE");
        assert_eq!(
            (batch.ratio(), batch.verdict(0.1)),
            (Some(2.0), "better".into())
        );
        let mut older = sample("noop", 16, 220.0, 75.0);
        older.executions_per_transaction = 0.0;
        assert!(!figures(&older)
            .iter()
            .any(|(figure, ..)| figure == "executions per transaction"));
        // From no errors to some: no ratio, but worse.
        let errors = row(pair, "errors");
        assert_eq!(
            (errors.ratio(), errors.verdict(0.1)),
            (None, String::from("worse"))
        );

        let text = comparison.render(0.1);
        assert!(
            text.contains("old: old/noop-1.json, old/noop-2.json, old/noop-3.json (median)"),
            "{text}"
        );
        assert!(text.contains("| throughput (ops/s) "), "{text}");
        assert!(
            text.contains("| 220.0 ") && text.contains("| 1.100 "),
            "{text}"
        );
        assert!(text.contains("Only in old") && text.contains("- new/noop-64.json"));
    }

    #[test]
    fn the_comparison_names_each_sides_builds() {
        let built = |build: &str| {
            let mut report = sample("noop", 16, 200.0, 20.0);
            report.build = build.into();
            report
        };
        let render = |old: Vec<Report>, new: Vec<Report>| {
            let side = |name: &str, runs: Vec<Report>| {
                (runs.into_iter().enumerate())
                    .map(|(i, r)| (PathBuf::from(format!("{name}-{i}.json")), r))
                    .collect::<Vec<_>>()
            };
            compare(&side("old", old), &side("new", new)).render(0.1)
        };
        let same = "Both sides ran the same build";

        let text = render(vec![built("aaa")], vec![built("bbb")]);
        assert!(text.contains("old: old-0.json (build aaa)  \nnew: new-0.json (build bbb)"));
        assert!(!text.contains(same), "{text}");

        let text = render(vec![built("aaa"), built("aaa")], vec![built("aaa")]);
        assert!(text.contains(same), "{text}");
        // Uncommitted changes, an unknown source, two builds on a side, or none recorded: not
        // known to be the same code.
        let unknown = "unknown (not built from a git checkout)";
        for (old, new) in [
            (vec![built("aaa-dirty")], vec![built("aaa-dirty")]),
            (vec![built(unknown)], vec![built(unknown)]),
            (
                vec![built("aaa"), built("bbb")],
                vec![built("aaa"), built("bbb")],
            ),
            (vec![built("")], vec![built("")]),
        ] {
            let text = render(old, new);
            assert!(!text.contains(same), "{text}");
        }
        let text = render(vec![built("aaa"), built("")], vec![built("aaa")]);
        assert!(text.contains("(build aaa, not recorded)"), "{text}");
        // One build, but the configurations differ: more than the machine differs.
        let mut other = built("aaa");
        other.clients = 64;
        assert!(!render(vec![built("aaa")], vec![other]).contains(same));
    }

    #[test]
    fn one_run_a_side_is_compared_whatever_differs() {
        let old = named(vec![("16.json", sample("noop", 16, 200.0, 20.0))]);
        let new = named(vec![("64.json", sample("noop", 64, 400.0, 60.0))]);
        let comparison = compare(&old, &new);
        assert_eq!(comparison.pairs.len(), 1);
        let pair = &comparison.pairs[0];
        assert_eq!(row(pair, "throughput (ops/s)").ratio(), Some(2.0));
        assert_eq!(row(pair, "latency p50 (ms)").verdict(0.1), "worse");
        let text = comparison.render(0.1);
        assert!(
            text.contains("The runs differ: old noop f=1 groups=1 usig=soft db=sqlite clients=16")
        );
    }

    #[test]
    fn a_file_that_is_not_a_bench_report_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let tpcc = dir.path().join("tpcc.json");
        std::fs::write(&tpcc, r#"{"tpm_total": 4269.0, "errors": 0}"#).unwrap();
        let text = dir.path().join("notes.json");
        std::fs::write(&text, "ops/s: 212").unwrap();
        for path in [&tpcc, &text] {
            let error = format!("{:#}", load(std::slice::from_ref(path)).unwrap_err());
            assert!(
                error.starts_with(&format!(
                    "{} is not a cloudbft bench report: ",
                    path.display()
                )),
                "{error}"
            );
        }
        let empty = tempfile::tempdir().unwrap();
        let error = load(&[empty.path().to_path_buf()]).unwrap_err().to_string();
        assert!(error.contains("holds no *.json bench report"), "{error}");
    }

    #[test]
    fn a_directory_reads_its_reports_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        for (name, clients) in [("b.json", 64), ("a.json", 16)] {
            let json = serde_json::to_string(&sample("noop", clients, 200.0, 20.0)).unwrap();
            std::fs::write(dir.path().join(name), json).unwrap();
        }
        std::fs::write(dir.path().join("summary.md"), "| not | json |").unwrap();
        let reports = load(&[dir.path().to_path_buf()]).unwrap();
        let clients: Vec<u64> = reports.iter().map(|(_, r)| r.clients).collect();
        assert_eq!(clients, [16, 64]);
    }
}
