//! `cloudbft`: one binary with a subcommand per role.

mod keygen;
mod usig_cmd;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "cloudbft",
    version,
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
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,tss_esapi=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Usigd(args) => usig_cmd::usigd(args),
        Command::Usig(args) => usig_cmd::usig(args),
        Command::Keygen(args) => {
            let path = keygen::keygen(&args)?;
            println!("wrote {}", path.display());
            Ok(())
        }
    }
}
