//! `cloudbft`: one binary with a subcommand per role.

mod autoscale;
mod bench;
mod bench_report;
mod cloud_provider;
mod cpu;
mod demo;
mod elastic;
mod form_client;
mod gateway_cmd;
mod keygen;
mod launch;
mod measure;
mod nodes;
mod operator;
mod overload;
mod paper;
mod paper_report;
mod place_cmd;
mod provider;
mod reconfigure_cmd;
mod report;
mod reshape;
mod responders;
mod soak;
mod terraform;
mod tpcc_cmd;
mod tpcc_run;
mod usig_cmd;

use clap::{Parser, Subcommand};

/// mimalloc rather than glibc's malloc: every role allocates per message (frames, decoded
/// envelopes, batches), and glibc's bins cost about 7% of a cluster's CPU under load
/// (docs/performance.md, item 22).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

/// The source this binary was built from: the commit, `-dirty` when tracked files differed
/// from it (build.rs). Bench and TPC-C reports record it, so that a comparison names its builds.
pub const BUILD: &str = env!("CLOUDBFT_BUILD");

/// A metrics registry that already serves `cloudbft_build_info` with [`BUILD`], for the
/// processes that are not nodes (the nodes' own registries get it through `NodeOptions`).
pub fn metrics_registry() -> net::metrics::Registry {
    let mut registry = net::metrics::Registry::default();
    net::metrics::register_build_info(&mut registry, BUILD);
    registry
}

#[derive(Parser)]
#[command(
    name = "cloudbft",
    version = concat!(env!("CARGO_PKG_VERSION"), " (build ", env!("CLOUDBFT_BUILD"), ")"),
    about = "Elastic Byzantine-fault-tolerant web tier"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The USIG daemon of one physical machine: owns its TPM and serves its VMs.
    Usigd(usig_cmd::UsigdArgs),
    /// Talk to usigd as a VM would: warrant a message, verify, show the enrollment.
    Usig(usig_cmd::UsigArgs),
    /// Write keys, USIG enrollments and a cluster configuration for a local cluster.
    Keygen(keygen::KeygenArgs),
    /// Start a whole local cluster (usigd, primary, groups, database nodes, gateway) and print
    /// where to point a browser.
    Demo(demo::DemoArgs),
    /// Measure throughput and latency with closed-loop clients against a fresh local cluster;
    /// `bench summary` and `bench compare` read the JSON reports of runs.
    Bench(bench::BenchCommand),
    /// Measure what one client sending 100x its share, and a slowloris client, do to other
    /// clients' latency and to the gateway's and the primary's memory.
    Overload(overload::OverloadArgs),
    /// Run the HTTP gateway: forms for browsers, pages only when f+1 replicas agree.
    Gateway(gateway_cmd::GatewayArgs),
    /// Stand-ins for a no-op cluster's primary candidates and replicas that answer every
    /// request at once, so that a load driver or gateway is measured alone (`bench
    /// --responders` starts them); they order nothing and check nothing.
    Responders(responders::RespondersArgs),
    /// TPC-C: load databases, check consistency, compare digests, run the benchmark driver.
    Tpcc(tpcc_cmd::TpccArgs),
    /// Run the primary: orders requests with unique warrants and routes them to groups.
    Primary(nodes::PrimaryArgs),
    /// Run a group replica: agrees on PREPAREs, logs decisions, renders pages, replies.
    Replica(nodes::ReplicaArgs),
    /// Run a database node: votes on COMMIT-DBs and executes decided operations exactly once.
    Dbnode(nodes::DbNodeArgs),
    /// Change the number of groups of a running cluster (adds spare groups, removes the
    /// highest, spreads the partitions), signed with the operator key.
    Scale(reconfigure_cmd::ScaleArgs),
    /// Add or remove one group of a running cluster.
    #[command(subcommand)]
    Group(reconfigure_cmd::GroupCommand),
    /// Move partitions between the groups of a running cluster.
    #[command(subcommand)]
    Partition(reconfigure_cmd::PartitionCommand),
    /// Keep a p95 latency objective with the fewest groups: reads the clients' latency from
    /// Prometheus endpoints and scales the running cluster.
    Autoscale(autoscale::AutoscaleArgs),
    /// Run a load ramp against a fresh cluster with fixed groups or the autoscaler, and record
    /// throughput, p95 and groups over time (JSON and SVG).
    Elastic(elastic::ElasticArgs),
    /// Run TPC-C load for long while nodes are killed and restarted in turn, and show that
    /// memory and disk stay flat (samples as JSON, a timeline as SVG, a verdict).
    Soak(soak::SoakArgs),
    /// Reproduce the paper's evaluation (Figs 5-11): run its experiments into a results
    /// directory, and write the report with its plots from one.
    Paper(paper::PaperArgs),
    /// Plan or check where nodes run (anti-affinity), write Terraform variables, scale a cloud.
    Place(place_cmd::PlaceArgs),
}

/// Runs the command and prints a failure as one line, `error: what: why: ...` (anyhow's
/// context chain), and never a backtrace: returning the error from `main` would print its
/// `Debug` form, which adds "Caused by" lists and, with RUST_BACKTRACE set, a stack trace that
/// says nothing to someone who mistyped a path. Bugs panic, and panics keep their backtraces.
fn main() -> ExitCode {
    let cli = Cli::parse();
    // The operator's commands print their own progress; the nodes log what they do.
    let quiet = matches!(
        cli.command,
        Command::Scale(_)
            | Command::Group(_)
            | Command::Partition(_)
            | Command::Autoscale(_)
            | Command::Elastic(_)
            | Command::Paper(_)
            | Command::Soak(_)
    );
    let default = if quiet {
        "warn,net=error"
    } else {
        "info,tss_esapi=warn"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default)),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", one_line(&error));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes joined by ": ", skipping a cause whose text the line already ends
/// with (sqlx, for one, repeats its source in its own message).
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Usigd(args) => usig_cmd::usigd(args),
        Command::Usig(args) => usig_cmd::usig(args),
        Command::Demo(args) => demo::demo(args),
        Command::Bench(command) => bench::command(command),
        Command::Overload(args) => overload::overload(args),
        Command::Gateway(args) => gateway_cmd::gateway(args),
        Command::Responders(args) => responders::responders(args),
        Command::Tpcc(args) => tpcc_cmd::tpcc(args),
        Command::Primary(args) => nodes::primary(args),
        Command::Replica(args) => nodes::replica(args),
        Command::Dbnode(args) => nodes::dbnode(args),
        Command::Scale(args) => reconfigure_cmd::scale(args),
        Command::Group(command) => reconfigure_cmd::group(command),
        Command::Partition(command) => reconfigure_cmd::partition(command),
        Command::Autoscale(args) => autoscale::autoscale(args),
        Command::Elastic(args) => elastic::elastic(args),
        Command::Place(args) => place_cmd::place(args),
        Command::Paper(args) => paper::paper(args),
        Command::Soak(args) => soak::soak(args),
        Command::Keygen(args) => {
            let path = keygen::keygen(&args)?;
            println!("wrote {}", path.display());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every subcommand's flags are well formed (no flag defined twice by flattened groups).
    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
