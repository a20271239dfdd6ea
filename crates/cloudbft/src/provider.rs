//! Where a new group's replicas come from: VMs started for them, with their USIG identities,
//! before the operator's RECONFIGURE names them, and where a removed group's machines go after
//! it. The autoscaler and the operator's commands use the same interface: local processes
//! ([`LocalProvider`]), replicas started by hand ([`ManualProvider`]), or machines of a
//! Terraform deployment (crate::cloud_provider).

use anyhow::{bail, Context, Result};
use proto::config::{ClusterConfig, ReplicaConfig};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a new replica may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Starts the machines (VMs) of new replicas, and releases those of removed ones.
pub trait Provider {
    /// Readies the replicas `new` of the next configuration `next` (their USIG epochs pinned in
    /// `next`, and whatever the machines decide: address, machine, enrollment) and starts them
    /// with the next configuration's shape, written to `shape`, where they wait for the
    /// operator's CONFIGURE. `current` is the configuration that runs now. An error leaves the
    /// cluster as it is: nothing has been sent to it.
    fn start(
        &mut self,
        current: &ClusterConfig,
        next: &mut ClusterConfig,
        new: &[u32],
        shape: &Path,
    ) -> Result<()>;

    /// Before a reconfiguration that removes replicas (those of `current` not in `next`):
    /// checks that their machines can be released afterwards. An error leaves the cluster as
    /// it is. Nothing to do by default: removed replicas stop by themselves.
    fn prepare_release(&mut self, _current: &ClusterConfig, _next: &ClusterConfig) -> Result<()> {
        Ok(())
    }

    /// After the reconfiguration to `config`: releases the machines prepared above.
    fn release(&mut self, _config: &ClusterConfig) -> Result<()> {
        Ok(())
    }
}

/// Marks a provider's failure that needs the operator (the cloud and the cluster may
/// disagree, or a machine did not come up): the autoscaler stops on it instead of trying
/// again (`anyhow::Error::downcast_ref::<NeedsOperator>()` finds it in the chain).
#[derive(Debug)]
pub struct NeedsOperator;

impl std::fmt::Display for NeedsOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the machines' provider failed")
    }
}

/// New replicas as processes on this machine, next to a cluster started by `cloudbft demo`:
/// the machines' usigd already serve their identities (keygen made them as spares).
pub struct LocalProvider {
    pub dir: PathBuf,
    /// Extra arguments of every replica the demo starts (its page stage).
    pub replica_args: Vec<String>,
}

/// What the demo records for providers that start more of its processes.
pub const LAUNCH_FILE: &str = "launch.toml";

/// The contents of [`LAUNCH_FILE`].
#[derive(serde::Serialize, serde::Deserialize, Default)]
pub struct Launch {
    pub replica_args: Vec<String>,
}

impl LocalProvider {
    /// The provider for the cluster in `dir`, starting replicas with the arguments the demo
    /// gave its own (`launch.toml`, written by `cloudbft demo`).
    pub fn for_dir(dir: &Path) -> LocalProvider {
        let launch: Launch = std::fs::read_to_string(dir.join(LAUNCH_FILE))
            .ok()
            .and_then(|text| toml::from_str(&text).ok())
            .unwrap_or_default();
        LocalProvider {
            dir: dir.to_path_buf(),
            replica_args: launch.replica_args,
        }
    }
}

impl Provider for LocalProvider {
    fn start(
        &mut self,
        _current: &ClusterConfig,
        next: &mut ClusterConfig,
        new: &[u32],
        shape: &Path,
    ) -> Result<()> {
        for r in next.replicas.iter_mut().filter(|r| new.contains(&r.id)) {
            pin_epoch(&self.dir, r)?;
        }
        std::fs::write(shape, toml::to_string(next)?)
            .with_context(|| format!("writing {}", shape.display()))?;
        std::fs::create_dir_all(self.dir.join("logs"))?;
        std::fs::create_dir_all(self.dir.join("pids"))?;
        for r in next.replicas.iter().filter(|r| new.contains(&r.id)) {
            let addr: SocketAddr = r
                .addr
                .parse()
                .with_context(|| format!("replica {}.addr", r.id))?;
            let metrics = SocketAddr::new(addr.ip(), addr.port() + 1000);
            let name = format!("replica-{}", r.id);
            // The same replica removed a little earlier may still finish its closed epoch
            // there (up to a minute): it must be gone before this one binds its address.
            wait_free(&name, addr)?;
            let log = self.dir.join("logs").join(format!("{name}.log"));
            let out = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .with_context(|| format!("opening {}", log.display()))?;
            let mut command = Command::new(std::env::current_exe()?);
            command
                .arg("replica")
                .arg("--config")
                .arg(shape)
                .args(["--id", &r.id.to_string(), "--await-epoch"])
                .args(["--metrics", &metrics.to_string()])
                .args(&self.replica_args)
                .stdin(Stdio::null())
                .stdout(out.try_clone()?)
                .stderr(out)
                // Its own session: it outlives this command, and the demo stops it (pids/).
                .process_group(0);
            let child = command
                .spawn()
                .with_context(|| format!("starting {name}"))?;
            std::fs::write(
                self.dir.join("pids").join(format!("{name}.pid")),
                child.id().to_string(),
            )?;
            wait_listening(&name, addr)?;
        }
        Ok(())
    }
}

/// Replicas the operator starts by hand (a cluster run by hand, docs/operations.md): prints
/// what to run and waits until they listen.
pub struct ManualProvider;

impl Provider for ManualProvider {
    fn start(
        &mut self,
        _current: &ClusterConfig,
        next: &mut ClusterConfig,
        new: &[u32],
        shape: &Path,
    ) -> Result<()> {
        std::fs::write(shape, toml::to_string(next)?)
            .with_context(|| format!("writing {}", shape.display()))?;
        let members: Vec<&ReplicaConfig> = next
            .replicas
            .iter()
            .filter(|r| new.contains(&r.id))
            .collect();
        for r in &members {
            eprintln!(
                "start replica {} on machine {} (its usigd must serve usig#{}):\n  cloudbft replica \
                 --config {} --id {} --await-epoch",
                r.id,
                r.machine,
                r.usig,
                shape.display(),
                r.id
            );
        }
        for r in members {
            let addr: SocketAddr = r
                .addr
                .parse()
                .with_context(|| format!("replica {}.addr", r.id))?;
            wait_listening(&format!("replica {}", r.id), addr)?;
        }
        Ok(())
    }
}

/// Pins a new replica's USIG epoch from its machine's usigd; a position from an earlier time
/// in the cluster is kept only if usigd is still in that epoch (otherwise its counter started
/// over).
fn pin_epoch(dir: &Path, r: &mut ReplicaConfig) -> Result<()> {
    let socket = node::usig::default_socket(dir, &r.machine, r.id);
    let mut client = usig::daemon::client::UsigdClient::connect(&socket, usig::UsigId(r.usig))
        .with_context(|| {
            format!(
                "asking usigd of machine {} for replica {}'s USIG epoch (is the demo running?)",
                r.machine, r.id
            )
        })?;
    let epoch = client.epoch()?.0;
    if r.usig_epoch != Some(epoch) {
        r.usig_start = None;
    }
    r.usig_epoch = Some(epoch);
    Ok(())
}

/// How long an address may stay taken by a replica finishing its removal.
const FREE_TIMEOUT: Duration = Duration::from_secs(90);

fn wait_free(name: &str, addr: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + FREE_TIMEOUT;
    let mut told = false;
    while std::net::TcpListener::bind(addr).is_err() {
        if !told {
            eprintln!(
                "{name}: {addr} is still taken (a removed replica finishing its epoch?); waiting"
            );
            told = true;
        }
        if Instant::now() > deadline {
            bail!("{name}: {addr} stayed taken for {FREE_TIMEOUT:?}: which process holds it?");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

pub(crate) fn wait_listening(name: &str, addr: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if Instant::now() > deadline {
            bail!("{name} did not listen on {addr} within {START_TIMEOUT:?}: see its log");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}
