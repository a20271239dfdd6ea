//! Starts and stops a whole local cluster as child processes of this binary: a usigd per
//! simulated machine, the database nodes, the group replicas, the primary and the gateway.
//! Used by `cloudbft demo` and `cloudbft bench`.

use crate::keygen::{keygen, KeygenArgs, UsigMode};
use anyhow::{bail, Context, Result};
use client_plugin::client::{ClientEndpoint, ClientOptions};
use proto::config::{Cluster, ClusterConfig, EpochStart};
use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a process may take to open its port or socket.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the database nodes get to level out at a stop.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a process may take to stop after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Parses `--max-batch`: 1 (no batching) up to the most entries a replica takes in one
/// PREPARE ([`proto::limits::MAX_PREPARE_ENTRIES`]; it refuses the primary of a larger one).
pub fn max_batch(value: &str) -> Result<usize, String> {
    let max = proto::limits::MAX_PREPARE_ENTRIES;
    match value.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "--max-batch must be a whole number from 1 to {max} (replicas refuse larger PREPAREs)"
        )),
    }
}

/// What to start besides the configuration.
#[derive(Clone, Debug)]
pub struct LaunchOptions {
    pub max_batch: usize,
    /// The primaries' `--pipeline`.
    pub pipeline: usize,
    pub pages: crate::nodes::PageArgs,
    /// Gateway listen address (`None`: no gateway).
    pub gateway: Option<SocketAddr>,
    /// More flags for the gateway (its limits, for a benchmark that is one client address).
    pub gateway_args: Vec<String>,
    /// Database nodes' `--keep-results` (`None`: their default).
    pub keep_results: Option<u64>,
}

impl LaunchOptions {
    /// A fresh cluster that one of our commands (soak, elastic, overload) drives itself: the
    /// default batch of 64, its page stage, and a gateway if it tests one.
    pub fn driven(pages: &crate::nodes::PageArgs, gateway: Option<SocketAddr>) -> Self {
        LaunchOptions {
            max_batch: 64,
            pipeline: crate::nodes::DEFAULT_PIPELINE,
            pages: pages.clone(),
            gateway,
            gateway_args: Vec::new(),
            keep_results: None,
        }
    }

    /// A fresh cluster that a benchmark (bench, tpcc run) measures: the batch, pipeline and
    /// page stage it was asked for, no gateway.
    pub fn measured(max_batch: usize, pipeline: usize, pages: &crate::nodes::PageArgs) -> Self {
        LaunchOptions {
            max_batch,
            pipeline,
            ..Self::driven(pages, None)
        }
    }
}

/// A running local cluster. Dropping it stops every process.
pub struct LocalCluster {
    pub cluster: Cluster,
    /// The cluster's directory (configuration, logs, pid files).
    dir: PathBuf,
    /// Every process, in start order.
    processes: Vec<Process>,
}

/// One child process of the cluster, with what it takes to start it again.
struct Process {
    name: String,
    child: Child,
    metrics: Option<SocketAddr>,
    /// Its arguments (after the executable), to restart it as it was.
    args: Vec<String>,
    /// Where it listens once started, to wait for it after a restart.
    listens: Option<SocketAddr>,
}

/// Opens the load driver's client endpoint (the configuration's second `[[client]]`; the
/// gateway has the first) with the client keys in `dir/keys`: how the benchmarks and the soak
/// reach a local cluster.
pub async fn load_driver(
    cluster: Arc<Cluster>,
    dir: &Path,
    options: ClientOptions,
) -> Result<ClientEndpoint> {
    let endpoint = cluster
        .config
        .clients
        .get(1)
        .map(|c| c.addr.clone())
        .context("no load-driver client endpoint in the configuration")?;
    Ok(ClientEndpoint::open(cluster, &dir.join("keys"), &endpoint, options).await?)
}

/// Creates the cluster directory on first use; on later uses starts a new configuration epoch
/// that continues from the database nodes' progress (docs/protocol.md, "Configuration epochs").
/// Returns the configuration path and whether this is a restart.
pub fn prepare(args: &KeygenArgs) -> Result<(PathBuf, bool)> {
    let path = args.out.join("cluster.toml");
    if !path.exists() {
        eprintln!("creating a new cluster in {}", args.out.display());
        return Ok((keygen(args)?, false));
    }
    let cluster = Cluster::load(&path)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let mut order = 0;
    let mut positions = vec![0u64; cluster.config.partitions as usize];
    let mut seen = Vec::new();
    for db in &cluster.config.db_nodes {
        let progress = runtime
            .block_on(node::dbnode::progress(&cluster, &db.database))
            .with_context(|| format!("reading the progress of database node {}", db.id))?;
        order = order.max(progress.highest_order);
        for p in &progress.partitions {
            let slot = &mut positions[p.partition as usize];
            *slot = (*slot).max(p.last_seq);
        }
        seen.push((db.id, progress.highest_order));
    }
    if seen.iter().any(|&(_, o)| o != order) {
        tracing::warn!(
            ?seen,
            "database nodes stopped at different orders: the ones behind cannot execute the new \
             epoch's operations and will ask the others for their state once they stall \
             (state transfer, docs/state-transfer.md)"
        );
    }
    let mut config: ClusterConfig = cluster.config;
    config.config_epoch += 1;
    // Every USIG starts a new epoch at a whole-cluster restart: sequences start at counter 1.
    for p in &mut config.primaries {
        p.usig_start = None;
    }
    for r in &mut config.replicas {
        r.usig_start = None;
        r.rejoin = false;
    }
    let spares_path = args.out.join(crate::keygen::SPARES);
    let mut spares = crate::reshape::Spares::load(&spares_path)?;
    if !spares.replicas.is_empty() {
        for r in &mut spares.replicas {
            r.usig_start = None;
        }
        spares.save(&spares_path)?;
    }
    config.epoch_start = EpochStart {
        order,
        positions,
        clients: Vec::new(),
    };
    Cluster::new(config.clone())?;
    fs::write(&path, toml::to_string(&config)?)
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "continuing the cluster in {}: configuration epoch {}, after global order {order}",
        args.out.display(),
        config.config_epoch
    );
    Ok((path, true))
}

impl LocalCluster {
    /// The configuration at `config_path` with no process started yet (its directory gets a
    /// `logs/`).
    fn empty(config_path: &Path) -> Result<LocalCluster> {
        let cluster = Cluster::load(config_path)?;
        let dir = config_path.parent().unwrap_or(Path::new(".")).to_path_buf();
        fs::create_dir_all(dir.join("logs"))?;
        Ok(LocalCluster {
            cluster,
            dir,
            processes: Vec::new(),
        })
    }

    /// Starts everything and waits until every node listens.
    pub fn start(
        config_path: &Path,
        usig: UsigMode,
        restart: bool,
        options: &LaunchOptions,
    ) -> Result<LocalCluster> {
        let mut me = LocalCluster::empty(config_path)?;
        let dir = me.dir.clone();
        let config_arg = config_path.display().to_string();
        // The spares' machines run their usigd too: a replica started there later (a new
        // group, a replacement) needs it, as a VM held in reserve on a running machine would.
        let spares = crate::reshape::Spares::load(&dir.join(crate::keygen::SPARES))?;
        let machines: Vec<String> = {
            let mut m: Vec<String> = me
                .cluster
                .config
                .primaries
                .iter()
                .map(|p| p.machine.clone())
                .chain(me.cluster.config.replicas.iter().map(|r| r.machine.clone()))
                .chain(
                    spares
                        .replicas
                        .iter()
                        .map(|r| r.machine.clone())
                        .filter(|m| dir.join("usigd").join(format!("{m}.toml")).exists()),
                )
                .collect();
            m.sort();
            m.dedup();
            m
        };
        for machine in &machines {
            let usigd_config = dir.join("usigd").join(format!("{machine}.toml"));
            let mut args = vec![
                "usigd".to_string(),
                "run".into(),
                "--config".into(),
                usigd_config.display().to_string(),
            ];
            if usig == UsigMode::Tpm {
                args.push("--swtpm".into());
            } else if restart {
                // Every identity starts a new USIG epoch with the new configuration epoch.
                args.push("--new-epoch".into());
            }
            me.spawn(&dir, &format!("usigd-{machine}"), &args, None, None)?;
        }
        let c = me.cluster.config.clone();
        for id in c
            .primaries
            .iter()
            .map(|p| (p.id, &p.machine))
            .chain(c.replicas.iter().map(|r| (r.id, &r.machine)))
        {
            let socket = node::usig::default_socket(&dir, id.1, id.0);
            // Until it accepts a connection: the file appears at bind(), before listen(), and a
            // connection in between is refused (seen once in CI under load).
            wait_for(&format!("usigd socket {}", socket.display()), || {
                std::os::unix::net::UnixStream::connect(&socket).is_ok()
            })?;
        }
        me.pin_usig_epochs(config_path, &dir)?;
        let node_args = |role: &str, id: u32| -> Vec<String> {
            vec![
                role.to_string(),
                "--config".into(),
                config_arg.clone(),
                "--id".into(),
                id.to_string(),
            ]
        };
        let mut nodes = Vec::new();
        for db in &c.db_nodes {
            let mut args = node_args("dbnode", db.id);
            if let Some(keep) = options.keep_results {
                args.extend(["--keep-results".into(), keep.to_string()]);
            }
            nodes.push((format!("dbnode-{}", db.id), args, &db.addr));
        }
        for r in &c.replicas {
            let mut args = node_args("replica", r.id);
            args.extend(options.pages.to_args());
            nodes.push((format!("replica-{}", r.id), args, &r.addr));
        }
        for p in &c.primaries {
            let mut args = node_args("primary", p.id);
            args.extend(["--max-batch".into(), options.max_batch.to_string()]);
            args.extend(["--pipeline".into(), options.pipeline.to_string()]);
            nodes.push((format!("primary-{}", p.id), args, &p.addr));
        }
        for (name, mut args, addr) in nodes {
            let addr: SocketAddr = addr.parse().with_context(|| format!("{name}.addr"))?;
            let metrics = SocketAddr::new(addr.ip(), addr.port() + 1000);
            args.extend(["--metrics".into(), metrics.to_string()]);
            me.spawn(&dir, &name, &args, Some(metrics), Some(addr))?;
            wait_port(&name, addr, &mut me.processes)?;
        }
        me.start_gateway(config_path, options)?;
        Ok(me)
    }

    /// Starts `cloudbft responders` in place of the cluster's primaries and replicas (no
    /// usigd, no database node), and the gateway if `options` asks for one: the stand-in that
    /// measures a load driver or a gateway alone (crate::responders).
    pub fn responders(config_path: &Path, options: &LaunchOptions) -> Result<LocalCluster> {
        let mut me = LocalCluster::empty(config_path)?;
        let dir = me.dir.clone();
        let args = [
            "responders".to_string(),
            "--config".into(),
            config_path.display().to_string(),
        ];
        me.spawn(&dir, "responders", &args, None, None)?;
        let listens: Vec<SocketAddr> = crate::responders::stand_ins(&me.cluster)
            .map(|(_, addr)| addr.parse().with_context(|| format!("node address {addr}")))
            .collect::<Result<_>>()?;
        for addr in listens {
            wait_port("responders", addr, &mut me.processes)?;
        }
        me.start_gateway(config_path, options)?;
        Ok(me)
    }

    /// The gateway of `options`, if any, on the configuration's first client endpoint.
    fn start_gateway(&mut self, config_path: &Path, options: &LaunchOptions) -> Result<()> {
        let Some(gateway) = options.gateway else {
            return Ok(());
        };
        let endpoint = self
            .cluster
            .config
            .clients
            .first()
            .map(|cl| cl.addr.clone())
            .context("the configuration has no [[client]]: re-run keygen with --clients")?;
        let mut args = vec![
            "gateway".to_string(),
            "--config".into(),
            config_path.display().to_string(),
            "--listen".into(),
            gateway.to_string(),
            "--endpoint".into(),
            endpoint,
            // The nodes' metrics, for the cluster page (ports as above).
            "--node-metrics-offset".into(),
            "1000".into(),
        ];
        args.extend(options.gateway_args.iter().cloned());
        let dir = self.dir.clone();
        self.spawn(&dir, "gateway", &args, Some(gateway), Some(gateway))?;
        wait_port("gateway", gateway, &mut self.processes)
    }

    /// Writes every primary's and replica's current USIG epoch into the configuration before
    /// any node reads it, so that verifiers follow no other epoch (docs/protocol.md, "Replica
    /// recovery").
    fn pin_usig_epochs(&mut self, config_path: &Path, dir: &Path) -> Result<()> {
        let mut config = self.cluster.config.clone();
        let epoch = |machine: &str, id: u32, usig: u64| -> Result<u64> {
            let socket = node::usig::default_socket(dir, machine, id);
            let mut client =
                usig::daemon::client::UsigdClient::connect(&socket, usig::UsigId(usig))
                    .with_context(|| format!("asking usigd for node {id}'s USIG epoch"))?;
            Ok(client.epoch()?.0)
        };
        for p in &mut config.primaries {
            p.usig_epoch = Some(epoch(&p.machine, p.id, p.usig)?);
        }
        for r in &mut config.replicas {
            r.usig_epoch = Some(epoch(&r.machine, r.id, r.usig)?);
        }
        self.cluster = Cluster::new(config.clone())?;
        fs::write(config_path, toml::to_string(&config)?)
            .with_context(|| format!("writing {}", config_path.display()))?;
        Ok(())
    }

    fn spawn(
        &mut self,
        dir: &Path,
        name: &str,
        args: &[String],
        metrics: Option<SocketAddr>,
        listens: Option<SocketAddr>,
    ) -> Result<()> {
        let child = start_child(dir, name, args)?;
        self.processes.push(Process {
            name: name.to_string(),
            child,
            metrics,
            args: args.to_vec(),
            listens,
        });
        Ok(())
    }

    /// Kills the process `name` with SIGKILL, as a crash would (nothing flushed, no goodbye to
    /// its peers), waits `down`, starts it again with the arguments it was first started with
    /// (its log continues) and waits until it listens. The soak test restarts nodes this way.
    pub fn kill_and_restart(&mut self, name: &str, down: Duration) -> Result<()> {
        let process = self
            .processes
            .iter_mut()
            .find(|p| p.name == name)
            .with_context(|| format!("{name} is not a running process of this cluster"))?;
        process
            .child
            .kill()
            .with_context(|| format!("killing {name}"))?;
        process.child.wait()?;
        std::thread::sleep(down);
        process.child = start_child(&self.dir, name, &process.args)?;
        if let Some(addr) = process.listens {
            wait_port(name, addr, &mut self.processes)?;
        }
        Ok(())
    }
}

/// Starts this binary with `args` as the process `name`, appending its output to
/// `logs/<name>.log` in `dir`.
fn start_child(dir: &Path, name: &str, args: &[String]) -> Result<Child> {
    let log = dir.join("logs").join(format!("{name}.log"));
    let out = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .with_context(|| format!("opening {}", log.display()))?;
    let exe = std::env::current_exe()?;
    // Each child in its own process group: a Ctrl-C in the terminal reaches only the
    // launcher, which then stops the children in order (gateway, drain, nodes, usigd).
    // If the launcher itself dies (SIGKILL), the kernel sends the children SIGTERM.
    let mut command = Command::new(exe);
    // SAFETY: prctl is async-signal-safe and touches only the child's own state.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let child = command
        .process_group(0)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    Ok(child)
}

impl LocalCluster {
    /// (name, metrics address) of every process with an HTTP endpoint.
    pub fn endpoints(&self) -> Vec<(String, SocketAddr)> {
        self.processes
            .iter()
            .filter_map(|p| p.metrics.map(|m| (p.name.clone(), m)))
            .collect()
    }

    /// (name, process id) of every running process, to watch their resources.
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.processes
            .iter()
            .map(|p| (p.name.clone(), p.child.id()))
            .collect()
    }

    /// The processes that exited since the last call (name and status); they are no longer
    /// part of the cluster.
    pub fn exited(&mut self) -> Vec<(String, std::process::ExitStatus)> {
        let mut exited = Vec::new();
        self.processes.retain_mut(|p| match p.child.try_wait() {
            Ok(Some(status)) => {
                exited.push((p.name.clone(), status));
                false
            }
            _ => true,
        });
        exited
    }

    /// Stops every process, newest first: SIGTERM, then SIGKILL after a grace period. The
    /// gateway goes first; then the database nodes get a moment to catch up with each other
    /// (replicas re-send decisions to the ones behind), so that a restart finds them level.
    /// Replicas that operator commands started for this cluster (`pids/`) stop with it.
    pub fn stop(&mut self) {
        if let Some(i) = self.processes.iter().position(|p| p.name == "gateway") {
            let mut gateway = self.processes.remove(i);
            terminate(&gateway.name, &mut gateway.child);
        }
        self.drain();
        self.stop_added();
        while let Some(mut p) = self.processes.pop() {
            terminate(&p.name, &mut p.child);
        }
    }

    /// Waits (at most DRAIN_TIMEOUT) until every database node reports the same highest
    /// executed order twice in a row.
    fn drain(&self) {
        let dbs: Vec<SocketAddr> = self
            .processes
            .iter()
            .filter(|p| p.name.starts_with("dbnode-"))
            .filter_map(|p| p.metrics)
            .collect();
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        let mut last = None;
        let mut unreachable = 0;
        while Instant::now() < deadline {
            let orders: Option<Vec<u64>> = dbs
                .iter()
                .map(|&a| node::metrics::highest_order(a))
                .collect();
            unreachable = if orders.is_some() { 0 } else { unreachable + 1 };
            if unreachable == 3 {
                tracing::warn!("a database node's metrics endpoint does not answer: not waiting");
                return;
            }
            match orders {
                Some(o) if o.windows(2).all(|w| w[0] == w[1]) && last.as_ref() == Some(&o) => {
                    return
                }
                o => last = o,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        tracing::warn!(?last, "database nodes did not level out before the stop");
    }
}

impl LocalCluster {
    /// Stops the replicas an operator command started (their pid files in `pids/`).
    fn stop_added(&self) {
        let Ok(entries) = fs::read_dir(self.dir.join("pids")) else {
            return;
        };
        for entry in entries.flatten() {
            let pid = fs::read_to_string(entry.path())
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok());
            if let Some(pid) = pid {
                // SAFETY: kill(2); the pid is one this cluster's operator command started
                // (a stale pid of a process that exited gets ESRCH).
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            let _ = fs::remove_file(entry.path());
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

fn terminate(name: &str, child: &mut Child) {
    if child.try_wait().ok().flatten().is_some() {
        return;
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + STOP_TIMEOUT;
    while Instant::now() < deadline {
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    tracing::warn!(name, "did not stop after SIGTERM: killing it");
    let _ = child.kill();
    let _ = child.wait();
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    while !ready() {
        if Instant::now() > deadline {
            bail!("{what} did not appear within {START_TIMEOUT:?}: see the logs/ directory");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Waits until `addr` accepts connections, failing early if the process exited.
fn wait_port(name: &str, addr: SocketAddr, processes: &mut [Process]) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Some(p) = processes.iter_mut().rev().find(|p| p.name == name) {
            if let Ok(Some(status)) = p.child.try_wait() {
                bail!("{name} exited ({status}) while starting: see logs/{name}.log");
            }
        }
        if Instant::now() > deadline {
            bail!("{name} did not listen on {addr} within {START_TIMEOUT:?}: see logs/{name}.log");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn max_batch_is_refused_outside_what_replicas_take() {
        let max = proto::limits::MAX_PREPARE_ENTRIES;
        assert_eq!(super::max_batch("1"), Ok(1));
        assert_eq!(super::max_batch(&max.to_string()), Ok(max));
        for bad in ["0", "-3", "many", &(max + 1).to_string()] {
            let error = super::max_batch(bad).unwrap_err();
            assert!(error.contains("--max-batch must be"), "{bad}: {error}");
        }
    }
}
