//! `cloudbft usigd ...` and `cloudbft usig ...`.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use usig::daemon::server::UsigdBackend;
use usig::daemon::{Usigd, UsigdClient, UsigdConfig};
use usig::tpm::swtpm::Swtpm;
use usig::{Directory, EnrollmentRecord, MessageDigest, UniqueWarrant, Usig, UsigId};

#[derive(Args)]
pub struct UsigdArgs {
    #[command(subcommand)]
    command: UsigdCommand,
}

#[derive(Subcommand)]
enum UsigdCommand {
    /// Serve the configured identities until Ctrl-C.
    Run {
        #[command(flatten)]
        target: Target,
        /// Soft mode only: start every identity in a new epoch (after its counter state was lost).
        #[arg(long)]
        new_epoch: bool,
    },
    /// Print the `[[usig_enrollment]]` records of every identity, for the cluster configuration.
    /// Run it while usigd is stopped (the TPM serves one client at a time).
    Enroll {
        #[command(flatten)]
        target: Target,
        /// Also print each identity's current USIG epoch (`[[usig_epoch]]` id, epoch): what the
        /// autoscaler's Terraform provider pins as the new replica's `usig_epoch`.
        #[arg(long)]
        epochs: bool,
    },
}

#[derive(Args)]
struct Target {
    /// usigd configuration file (see examples/usigd-*.toml).
    #[arg(long)]
    config: PathBuf,
    /// Start a software TPM (swtpm) with its state in <state_dir>/swtpm and use it instead of
    /// [tpm].tcti: for development and the demo, never for production.
    #[arg(long)]
    swtpm: bool,
}

impl Target {
    /// Loads the configuration and, with --swtpm, starts the software TPM it will use.
    fn open(&self) -> Result<(UsigdConfig, Option<Swtpm>)> {
        let mut config = UsigdConfig::load(&self.config)?;
        if !self.swtpm {
            return Ok((config, None));
        }
        let Some(tpm) = config.tpm.as_mut() else {
            bail!("--swtpm needs a [tpm] section in {}", self.config.display());
        };
        let swtpm = Swtpm::start(&config.state_dir.join("swtpm"))?;
        tpm.tcti = swtpm.tcti();
        Ok((config, Some(swtpm)))
    }
}

pub fn usigd(args: UsigdArgs) -> Result<()> {
    match args.command {
        UsigdCommand::Run { target, new_epoch } => {
            let (config, _swtpm) = target.open()?;
            let usigd = Usigd::start(&config, new_epoch)?;
            let (tx, rx) = mpsc::channel();
            ctrlc::set_handler(move || {
                let _ = tx.send(());
            })
            .context("installing the Ctrl-C handler")?;
            eprintln!(
                "usigd is serving {} identities; Ctrl-C stops it",
                config.identities.len()
            );
            let _ = rx.recv();
            let stats = usigd.stats();
            tracing::info!(?stats, "usigd stopping");
            usigd.shutdown();
            Ok(())
        }
        UsigdCommand::Enroll { target, epochs } => {
            let (config, _swtpm) = target.open()?;
            let mut backend = UsigdBackend::open(&config, false)?;
            let mut out = MachineEnrollment::default();
            for id in config.identity_ids() {
                out.usig_enrollment.push(backend.enrollment(id)?);
                if epochs {
                    out.usig_epoch.push(EpochRecord {
                        id: id.0,
                        epoch: backend.epoch(id)?.0,
                    });
                }
            }
            print!("{}", toml::to_string(&out)?);
            Ok(())
        }
    }
}

/// What `cloudbft usigd enroll [--epochs]` prints about a machine's identities.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineEnrollment {
    #[serde(default)]
    pub usig_enrollment: Vec<EnrollmentRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usig_epoch: Vec<EpochRecord>,
}

/// The USIG epoch an identity warrants in (`usig_epoch` of its configuration entry).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpochRecord {
    pub id: u64,
    pub epoch: u64,
}

#[derive(Args)]
pub struct UsigArgs {
    #[command(subcommand)]
    command: UsigCommand,
}

#[derive(Subcommand)]
enum UsigCommand {
    /// Ask usigd for warrants on messages and print them (hex), one per line.
    Warrant {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        identity: u64,
        /// Messages to warrant, in order.
        #[arg(required = true)]
        messages: Vec<String>,
    },
    /// Print this identity's enrollment record, as usigd reports it.
    Enrollment {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        identity: u64,
    },
    /// Print the USIG epoch this identity warrants in now: the `usig_epoch` of its
    /// `[[primary]]` or `[[replica]]` entry in cluster.toml.
    Epoch {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        identity: u64,
    },
    /// Verify a warrant (hex) for a message against enrollment records in a TOML file.
    Verify {
        /// File with [[usig_enrollment]] records (the output of `cloudbft usigd enroll`, or a
        /// cluster.toml).
        #[arg(long)]
        enrollments: PathBuf,
        #[arg(long)]
        identity: u64,
        #[arg(long)]
        message: String,
        #[arg(long)]
        warrant: String,
    },
}

pub fn usig(args: UsigArgs) -> Result<()> {
    match args.command {
        UsigCommand::Warrant {
            socket,
            identity,
            messages,
        } => {
            let mut client = UsigdClient::connect(&socket, UsigId(identity))?;
            for message in messages {
                let w = client.create_ui(message.as_bytes())?;
                println!("{} {} {}", w.epoch, w.counter, hex::encode(w.to_bytes()));
            }
            Ok(())
        }
        UsigCommand::Enrollment { socket, identity } => {
            let record = UsigdClient::connect(&socket, UsigId(identity))?.enrollment()?;
            println!("[[usig_enrollment]]\n{}", toml::to_string(&record)?);
            Ok(())
        }
        UsigCommand::Epoch { socket, identity } => {
            let epoch = UsigdClient::connect(&socket, UsigId(identity))?.epoch()?;
            println!("usig_epoch = {}", epoch.0);
            Ok(())
        }
        UsigCommand::Verify {
            enrollments,
            identity,
            message,
            warrant,
        } => {
            let directory = load_directory(&enrollments)?;
            let bytes = hex::decode(warrant.trim()).context("--warrant is not hex")?;
            let warrant = UniqueWarrant::from_bytes(&bytes).context("--warrant")?;
            directory.verify_digest(
                UsigId(identity),
                &MessageDigest::of(message.as_bytes()),
                &warrant,
            )?;
            println!(
                "valid: usig#{identity} epoch {} counter {}",
                warrant.epoch, warrant.counter
            );
            Ok(())
        }
    }
}

fn load_directory(path: &Path) -> Result<Directory> {
    // The records as the cluster configuration names them; anything else (the rest of a
    // cluster.toml) is ignored.
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        usig_enrollment: Vec<EnrollmentRecord>,
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file: File =
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    if file.usig_enrollment.is_empty() {
        bail!(
            "{}: no [[usig_enrollment]] records; write the output of `cloudbft usigd enroll` \
             or `cloudbft usig enrollment` there",
            path.display()
        );
    }
    Ok(Directory::from_records(&file.usig_enrollment)?)
}
