//! Network partitions and slow links between real processes, under TPC-C load.
//!
//! Every node of an f=1 cluster (two primary candidates, two groups of three replicas, three
//! database nodes on SQLite) runs in a network namespace of its own with its own address, and the
//! test's load driver (the client library, 8 closed-loop TPC-C terminals) in another; the
//! namespaces are joined by veth pairs to one bridge that the test creates and removes
//! (`common::netns`). Then, one after the other in the same cluster, each under load:
//!
//! 1. the primary is isolated (the replicas move to the next view without it);
//! 2. one replica is isolated, then brought back (it catches up with its group); then again for
//!    20 s (it starts over and rejoins from a peer's checkpoint);
//! 3. its group is split: the primary and one replica on one side, the group's two other
//!    replicas, the rejoined one among them, on the other (the majority side gets no PREPAREs and
//!    moves to a view whose primary reaches everyone; the group decides again only in that view,
//!    and only if the rejoined replica follows that primary);
//! 4. a database node is cut off, then brought back (it catches up from re-sent COMMIT-DBs);
//! 5. a quarter of the frames the primary sends are lost, none of those it receives;
//! 6. the primary's link is slowed to a token-bucket rate.
//!
//! After each: every group made progress during the fault and after the heal, the affected node
//! caught up, every acknowledged transaction is in every database exactly once (the New-Orders
//! and Payments the driver got pages for are exactly the orders and history rows added since
//! the load), no request failed, the twelve TPC-C consistency conditions hold on every database
//! node and their digests are identical. The test prints, per scenario, the longest time a group
//! completed no transaction and the times the affected node took to resume and to catch up
//! after the heal; it asserts no time.
//!
//! It needs root, iproute2 and nftables and fails (never skips) without them. Each node has a
//! network stack of its own, so its ports cannot collide with anything else on the machine: the
//! test reserves no port block.

mod common;

use client_plugin::client::{ClientEndpoint, ClientOptions};
use common::netns::{Fault, Network};
use proto::config::{Cluster, ClusterConfig};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tpcc::txn::TpccOp;
use tpcc::workload::{Population, Terminal};

/// One warehouse per partition, two partitions per group.
const WAREHOUSES: u32 = 4;
/// A small population (the TPC-C tests' own): each database node loads in about a second.
const SCALE: [&str; 6] = ["--items", "1000", "--districts", "10", "--customers", "60"];
const TERMINALS: u64 = 8;
/// How long each fault lasts at least (longer when it must first have its effect, e.g. a
/// view change); `PARTITION_HOLD_SECS` sets another time, to see how recovery depends on it.
fn hold() -> Duration {
    let secs =
        std::env::var("PARTITION_HOLD_SECS").map(|s| s.parse().expect("a number of seconds"));
    Duration::from_secs(secs.unwrap_or(5))
}
/// How long anything the test waits for may take before it fails.
const DEADLINE: Duration = Duration::from_secs(120);

fn cloudbft(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("running cloudbft");
    assert!(
        out.status.success(),
        "cloudbft {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `done` until it holds; fails the test with `what` after [`DEADLINE`].
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what} within {DEADLINE:?} (node logs in the cluster's logs/)"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The network host of a node: `p<id>` (primary candidates), `r<id>` (replicas), `db<id>`.
fn host(role: &str, id: u32) -> String {
    match role {
        "primary" => format!("p{id}"),
        "replica" => format!("r{id}"),
        _ => format!("db{id}"),
    }
}

/// One node process in its namespace.
struct Node {
    role: &'static str,
    id: u32,
    child: Child,
    /// Its command line (`common::metric` reads `--metrics` from it).
    args: Vec<String>,
}

/// A cluster whose nodes run in the namespaces of a [`Network`]. Dropping it kills every
/// process it started.
struct NetCluster {
    dir: PathBuf,
    cluster: Cluster,
    nodes: Vec<Node>,
    usigds: Vec<Child>,
}

impl NetCluster {
    /// Keys and configuration (`cloudbft keygen`), each node's address moved to its host,
    /// TPC-C loaded into every database node, then a usigd per machine and every node in its
    /// namespace. The calling thread must be in the client's namespace.
    fn start(dir: &Path, net: &Network) -> NetCluster {
        let out = dir.join("cluster");
        let out_arg = out.display().to_string();
        cloudbft(&[
            "keygen",
            "--out",
            &out_arg,
            "--groups",
            "2",
            "--partitions",
            &WAREHOUSES.to_string(),
            "--application",
            tpcc::txn::NAME,
            "--clients",
            "32",
            "--client-endpoints",
            "2",
        ]);
        let path = out.join("cluster.toml");
        let mut config: ClusterConfig = Cluster::load(&path).unwrap().config;
        let on = |addr: &str, host: &str| {
            let port = addr.rsplit(':').next().expect("host:port");
            format!("{}:{port}", net.ip(host))
        };
        for p in &mut config.primaries {
            p.addr = on(&p.addr, &host("primary", p.id));
        }
        for r in &mut config.replicas {
            r.addr = on(&r.addr, &host("replica", r.id));
        }
        for d in &mut config.db_nodes {
            d.addr = on(&d.addr, &host("dbnode", d.id));
        }
        for c in &mut config.clients {
            c.addr = on(&c.addr, "client");
        }
        write_config(&path, config);
        let path_arg = path.display().to_string();
        cloudbft(&[&["tpcc", "load", "--config", &path_arg][..], &SCALE].concat());

        std::fs::create_dir_all(out.join("logs")).unwrap();
        let mut me = NetCluster {
            dir: out.clone(),
            cluster: Cluster::load(&path).unwrap(),
            nodes: Vec::new(),
            usigds: Vec::new(),
        };
        let c = me.cluster.config.clone();
        let mut machines: Vec<&str> = c
            .primaries
            .iter()
            .map(|p| p.machine.as_str())
            .chain(c.replicas.iter().map(|r| r.machine.as_str()))
            .collect();
        machines.sort();
        machines.dedup();
        for machine in machines {
            let usigd = out.join("usigd").join(format!("{machine}.toml"));
            let mut command = me.command(&format!("usigd-{machine}"));
            command.args(["usigd", "run", "--config", &usigd.display().to_string()]);
            me.usigds.push(
                command
                    .spawn()
                    .expect("starting usigd (it needs no network)"),
            );
        }
        // Pin every identity's USIG epoch in the configuration, as the launcher does.
        let mut config = c.clone();
        let epoch = |id: u32, machine: &str, usig: u64| {
            let socket = node::usig::default_socket(&out, machine, id);
            // Until it accepts a connection, as the launcher waits: the file appears first.
            wait_until(&format!("usigd socket {}", socket.display()), || {
                std::os::unix::net::UnixStream::connect(&socket).is_ok()
            });
            usig::daemon::client::UsigdClient::connect(&socket, usig::UsigId(usig))
                .and_then(|mut client| client.epoch())
                .unwrap_or_else(|e| panic!("USIG epoch of node {id}: {e}"))
                .0
        };
        for p in &mut config.primaries {
            p.usig_epoch = Some(epoch(p.id, &p.machine, p.usig));
        }
        for r in &mut config.replicas {
            r.usig_epoch = Some(epoch(r.id, &r.machine, r.usig));
        }
        write_config(&path, config);
        me.cluster = Cluster::load(&path).unwrap();

        let c = me.cluster.config.clone();
        let nodes = c
            .db_nodes
            .iter()
            .map(|d| ("dbnode", d.id, &d.addr))
            .chain(c.replicas.iter().map(|r| ("replica", r.id, &r.addr)))
            .chain(c.primaries.iter().map(|p| ("primary", p.id, &p.addr)));
        for (role, id, addr) in nodes {
            let addr: SocketAddr = addr.parse().unwrap();
            let metrics = SocketAddr::new(addr.ip(), addr.port() + 1000);
            let args: Vec<String> = [
                "cloudbft",
                role,
                "--config",
                &path_arg,
                "--id",
                &id.to_string(),
                "--metrics",
                &metrics.to_string(),
            ]
            .map(String::from)
            .to_vec();
            let name = format!("{role}-{id}");
            let host = host(role, id);
            let mut command = me.command(&name);
            command.args(&args[1..]);
            net.place(&mut command, &host);
            let child = command
                .spawn()
                .unwrap_or_else(|e| panic!("starting {name}: {e}"));
            me.nodes.push(Node {
                role,
                id,
                child,
                args,
            });
            let node = me.nodes.last_mut().unwrap();
            wait_until(&format!("{name} did not listen on {addr}"), || {
                assert!(
                    node.child.try_wait().unwrap().is_none(),
                    "{name} exited while starting: see logs/{name}.log"
                );
                TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
            });
        }
        me
    }

    /// `cloudbft` logging to `logs/<name>.log`, killed if the thread that starts it ends (the
    /// test failed without stopping it).
    fn command(&self, name: &str) -> Command {
        use std::os::unix::process::CommandExt;
        let log = std::fs::File::create(self.dir.join("logs").join(format!("{name}.log")))
            .expect("creating a log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_cloudbft"));
        // SAFETY: prctl(2) is async-signal-safe and changes only the child.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        // PARTITION_RUST_LOG overrides the nodes' log filter (DEBUG runs of a failure).
        let filter = std::env::var("PARTITION_RUST_LOG");
        command
            .env("RUST_LOG", filter.as_deref().unwrap_or("info,net=warn"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        command
    }

    fn node(&self, role: &str, id: u32) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.role == role && n.id == id)
            .unwrap_or_else(|| panic!("no {role} {id}"))
    }

    fn metric(&self, role: &str, id: u32, name: &str) -> Option<f64> {
        common::metric(&self.node(role, id).args, name)
    }

    /// The replicas of group `g`, by id.
    fn group(&self, g: u32) -> Vec<u32> {
        self.cluster
            .members(proto::GroupId(g))
            .map(|r| r.id)
            .collect()
    }

    /// The highest view any replica reports (the unreachable ones do not answer).
    fn view(&self) -> u64 {
        self.cluster
            .config
            .replicas
            .iter()
            .filter_map(|r| self.metric("replica", r.id, "cloudbft_view"))
            .fold(0, |view, v| view.max(v as u64))
    }

    /// The host of the current view's primary.
    fn primary(&self) -> String {
        let candidates = &self.cluster.config.primaries;
        host(
            "primary",
            candidates[self.view() as usize % candidates.len()].id,
        )
    }

    /// Each database node's highest executed order (`None`: unreachable).
    fn orders(&self) -> Vec<Option<u64>> {
        self.cluster
            .config
            .db_nodes
            .iter()
            .map(|d| common::highest_order(&self.node("dbnode", d.id).args))
            .collect()
    }

    /// Fails if any node exited: no fault here may crash a process.
    fn assert_running(&mut self) {
        for node in &mut self.nodes {
            if let Some(status) = node.child.try_wait().unwrap() {
                panic!(
                    "{} {} exited ({status}): see logs/{}-{}.log",
                    node.role, node.id, node.role, node.id
                );
            }
        }
    }
}

impl Drop for NetCluster {
    fn drop(&mut self) {
        // Nodes before the usigd they use; SIGTERM, and SIGKILL for what does not stop.
        let children = self
            .nodes
            .iter_mut()
            .rev()
            .map(|n| &mut n.child)
            .chain(self.usigds.iter_mut());
        for child in children {
            // SAFETY: kill(2) on a child this test started.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn write_config(path: &Path, config: ClusterConfig) {
    Cluster::new(config.clone()).expect("a valid configuration");
    std::fs::write(path, toml::to_string(&config).unwrap()).unwrap();
}

/// What the clients were told: the pages they accepted, as the rows they stand for.
#[derive(Default)]
struct Ledger {
    /// The acknowledged New-Orders and Payments.
    acknowledged: tpcc::ledger::Ledger,
    /// When each transaction was accepted, and by which group.
    completed: Vec<(Instant, u32)>,
    /// Requests that failed (they must not).
    errors: Vec<String>,
}

impl Ledger {
    fn record(&mut self, op: &TpccOp, page: &[u8], group: u32) -> Result<(), String> {
        self.acknowledged
            .record(op, page)
            .map_err(|e| e.to_string())?;
        self.completed.push((Instant::now(), group));
        Ok(())
    }

    fn completed_since(&self, t: Instant, group: Option<u32>) -> usize {
        let counts = |&&(c, g): &&(Instant, u32)| c > t && group.is_none_or(|group| g == group);
        self.completed.iter().filter(counts).count()
    }

    /// The longest time between `from` and `to` in which some group completed no transaction.
    fn stall(&self, from: Instant, to: Instant, groups: u32) -> Duration {
        (0..groups)
            .map(|group| {
                let mut last = from;
                let mut longest = Duration::ZERO;
                for &(t, _) in self
                    .completed
                    .iter()
                    .filter(|&&(t, g)| g == group && t > from && t <= to)
                {
                    longest = longest.max(t - last);
                    last = t;
                }
                longest.max(to - last)
            })
            .max()
            .unwrap_or_default()
    }
}

/// Closed-loop terminals running until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl Load {
    fn start(
        runtime: &tokio::runtime::Runtime,
        client: &ClientEndpoint,
        ledger: &Arc<Mutex<Ledger>>,
        seed: u64,
    ) -> Load {
        let population = Population {
            warehouses: WAREHOUSES,
            scale: tpcc::ScaleConfig {
                items: 1000,
                districts_per_warehouse: 10,
                customers_per_district: 60,
                orders_per_district: 60,
            },
            constants: tpcc::NuRandConstants::for_load(1).for_run(seed),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..TERMINALS)
            .map(|t| {
                let mut terminal = Terminal::new(t, population, seed);
                let (client, ledger, stop) = (client.clone(), ledger.clone(), stop.clone());
                runtime.spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let op = terminal.next(unix_now());
                        let outcome = client
                            .invoke(op.partitions().unwrap(), op.encode())
                            .await
                            .map_err(|e| format!("{:?} failed: {e}", op.kind()))
                            .and_then(|accepted| {
                                ledger
                                    .lock()
                                    .unwrap()
                                    .record(&op, &accepted.page, accepted.group.0)
                            });
                        if let Err(e) = outcome {
                            ledger.lock().unwrap().errors.push(e);
                        }
                    }
                })
            })
            .collect();
        Load { stop, tasks }
    }

    /// Lets every terminal finish the transaction it is in.
    fn stop(self, runtime: &tokio::runtime::Runtime) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            runtime.block_on(task).expect("a terminal panicked");
        }
    }
}

/// Everything one run needs. Fields drop in order: the processes stop before their network
/// goes.
struct Run {
    cluster: NetCluster,
    net: Network,
    runtime: tokio::runtime::Runtime,
    client: ClientEndpoint,
    ledger: Arc<Mutex<Ledger>>,
    /// The history rows loaded before any transaction.
    loaded_history: Vec<[i64; 7]>,
    reports: Vec<String>,
}

/// What must have happened before a fault is healed (e.g. a view change), and what its
/// absence is called.
type Holds<'a> = Option<(&'a str, &'a dyn Fn(&NetCluster) -> bool)>;

/// The node a fault leaves behind, and the counter that shows its progress: a replica's
/// decisions (`cloudbft_commits_total`) or a database node's highest executed order.
struct Lagging {
    role: &'static str,
    id: u32,
    /// Nodes of the same role that go on meanwhile, to compare with.
    peers: Vec<u32>,
    /// The replica's completed recoveries before the fault: one more means it rejoined.
    recoveries: f64,
}

impl Lagging {
    fn replica(cluster: &NetCluster, id: u32) -> Option<Lagging> {
        let group = cluster
            .cluster
            .config
            .replicas
            .iter()
            .find(|r| r.id == id)?
            .group;
        let peers = cluster
            .group(group)
            .into_iter()
            .filter(|&r| r != id)
            .collect();
        Some(Lagging {
            role: "replica",
            id,
            peers,
            recoveries: recoveries(cluster, id),
        })
    }

    fn db_node(cluster: &NetCluster, id: u32) -> Option<Lagging> {
        let peers = cluster.cluster.config.db_nodes.iter().map(|d| d.id);
        Some(Lagging {
            role: "dbnode",
            id,
            peers: peers.filter(|&d| d != id).collect(),
            recoveries: 0.0,
        })
    }

    fn progress(&self, cluster: &NetCluster, id: u32) -> Option<f64> {
        match self.role {
            "replica" => cluster.metric("replica", id, "cloudbft_commits_total"),
            _ => cluster.metric("dbnode", id, "cloudbft_highest_order"),
        }
    }

    /// A replica that was too far behind to fetch what it missed rejoins from a peer's
    /// checkpoint instead of deciding every slot (docs/operations.md, "Group replica"). Only a
    /// recovery completed since the fault counts: an earlier one once let the test split the
    /// group while the replica was still starting over, which no group of three survives.
    fn rejoined(&self, cluster: &NetCluster) -> bool {
        self.role == "replica" && recoveries(cluster, self.id) > self.recoveries
    }
}

/// The recoveries a replica completed (`cloudbft_recoveries_total`; 0 if it does not answer).
fn recoveries(cluster: &NetCluster, id: u32) -> f64 {
    cluster
        .metric("replica", id, "cloudbft_recoveries_total")
        .unwrap_or(0.0)
}

impl Run {
    fn completed_since(&self, t: Instant) -> usize {
        self.ledger.lock().unwrap().completed_since(t, None)
    }

    fn groups(&self) -> u32 {
        self.cluster.cluster.config.groups.len() as u32
    }

    /// Waits until every group completed enough transactions after `t` that some were sent
    /// after it (more than there are terminals in flight).
    fn progress_after(&self, t: Instant, what: &str) {
        for group in 0..self.groups() {
            wait_until(&format!("no progress of group {group} {what}"), || {
                let ledger = self.ledger.lock().unwrap();
                ledger.completed_since(t, Some(group)) > TERMINALS as usize
            });
        }
    }

    /// Runs one scenario under load: `fault` is applied once the load runs, held for [`hold`]
    /// and until `holds` (e.g. the view changed) and until the cluster progressed under it,
    /// then healed; the `lagging` node must then resume and catch up with its peers (both
    /// measured). Then the load stops and everything is checked.
    fn scenario(&mut self, name: &str, fault: Fault, holds: Holds, lagging: Option<Lagging>) {
        self.scenario_for(hold(), name, fault, holds, lagging);
    }

    /// [`scenario`](Self::scenario) with the fault held for `hold` at least.
    fn scenario_for(
        &mut self,
        hold: Duration,
        name: &str,
        fault: Fault,
        holds: Holds,
        lagging: Option<Lagging>,
    ) {
        let seed = self.reports.len() as u64 + 2;
        let load = Load::start(&self.runtime, &self.client, &self.ledger, seed);
        let started = Instant::now();
        self.progress_after(started, "before the fault");
        let fault_at = Instant::now();
        let before = self.completed_since(started) as f64 / (fault_at - started).as_secs_f64();
        let own = lagging.as_ref().map(|l| {
            l.progress(&self.cluster, l.id)
                .expect("the node answers before the fault")
        });
        self.net.apply(&fault);
        std::thread::sleep(hold);
        if let Some((what, holds)) = holds {
            wait_until(what, || holds(&self.cluster));
        }
        self.progress_after(fault_at, "during the fault");
        let heal_at = Instant::now();
        let during = self.completed_since(fault_at) as f64 / (heal_at - fault_at).as_secs_f64();
        // How far the others got meanwhile.
        let target = lagging.as_ref().map(|l| {
            let peers = l.peers.iter().filter_map(|&p| l.progress(&self.cluster, p));
            peers.fold(0.0, f64::max)
        });
        self.net.heal();
        let caught_up = lagging.map(|l| {
            let (own, target) = (own.unwrap(), target.unwrap());
            let name = format!("{} {}", l.role, l.id);
            wait_until(&format!("{name} did not resume after the heal"), || {
                l.progress(&self.cluster, l.id).is_some_and(|n| n > own)
                    || l.rejoined(&self.cluster)
            });
            let resumed = heal_at.elapsed();
            wait_until(&format!("{name} did not catch up after the heal"), || {
                l.progress(&self.cluster, l.id).is_some_and(|n| n >= target)
                    || l.rejoined(&self.cluster)
            });
            let rejoined = if l.rejoined(&self.cluster) {
                " (rejoined from a peer's checkpoint)"
            } else {
                ""
            };
            format!(
                "; {name} resumed {:.2} s and caught up{rejoined} {:.2} s after the heal \
                 ({} behind its peers)",
                resumed.as_secs_f64(),
                heal_at.elapsed().as_secs_f64(),
                target - own
            )
        });
        self.progress_after(Instant::now(), "after the heal");
        load.stop(&self.runtime);
        let stopped = Instant::now();
        let after = self.completed_since(heal_at) as f64 / (stopped - heal_at).as_secs_f64();
        let stall = |from, to| self.ledger.lock().unwrap().stall(from, to, self.groups());
        let mut report = format!(
            "{name}: longest time a group completed no transaction {:.2} s during the fault \
             ({:.1} s), {:.2} s after the heal; {before:.1} / {during:.1} / {after:.1} \
             transactions/s before / during / after",
            stall(fault_at, heal_at).as_secs_f64(),
            (heal_at - fault_at).as_secs_f64(),
            stall(heal_at, stopped).as_secs_f64(),
        );
        report += &caught_up.unwrap_or_default();
        let level = self.check();
        report += &format!(
            "; database nodes level {:.2} s after the load stopped",
            level.as_secs_f64()
        );
        eprintln!("{report}");
        self.reports.push(report);
    }

    /// Waits until every database node executed the same orders, then checks them: no failed
    /// request, every acknowledged New-Order and Payment present exactly once, the consistency
    /// conditions, equal digests. Returns how long the nodes took to level.
    fn check(&mut self) -> Duration {
        self.cluster.assert_running();
        let stopped = Instant::now();
        let mut last = Vec::new();
        wait_until("the database nodes did not reach the same order", || {
            let orders = self.cluster.orders();
            let level = orders.iter().all(|o| o.is_some() && *o == orders[0]);
            let stable = level && orders == last;
            last = orders;
            stable
        });
        let level = stopped.elapsed();
        let ledger = self.ledger.lock().unwrap();
        assert!(
            ledger.errors.is_empty(),
            "requests failed: {:?}",
            ledger.errors
        );
        let mut digests = Vec::new();
        for db in &self.cluster.cluster.config.db_nodes {
            let (digest, rows) = self.runtime.block_on(inspect(&db.database, db.id));
            let discrepancy = ledger.acknowledged.compare(&self.loaded_history, &rows);
            assert!(
                discrepancy.is_exact(),
                "database node {}: the orders and history rows added are not exactly the \
                 New-Orders and Payments acknowledged: {discrepancy:?}",
                db.id
            );
            digests.push((db.id, hex::encode(digest)));
        }
        assert!(
            digests.iter().all(|d| d.1 == digests[0].1),
            "the database nodes' digests differ: {digests:?}"
        );
        level
    }
}

/// A database node's digest and the rows the ledger counts, after checking the consistency
/// conditions.
async fn inspect(url: &str, id: u32) -> ([u8; 32], tpcc::ledger::Rows) {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(url).await.unwrap();
    let scale = tpcc::ScaleConfig::of_database(&mut conn).await.unwrap();
    let failed: Vec<String> = tpcc::check(&mut conn, scale.delivered_per_district())
        .await
        .unwrap()
        .into_iter()
        .filter(|r| !r.passed)
        .map(|r| format!("{}: {} ({})", r.number, r.description, r.detail))
        .collect();
    assert!(
        failed.is_empty(),
        "database node {id} fails TPC-C consistency conditions: {failed:?}"
    );
    let digest = dbvote::digest::of_database(&mut conn, tpcc::schema::TABLES)
        .await
        .unwrap();
    let rows = tpcc::ledger::Rows::read(&mut conn, &scale).await.unwrap();
    conn.close().await.unwrap();
    (digest, rows)
}

/// Starts the network and the cluster, runs `script` under it from the client's namespace,
/// stops everything and prints what each scenario measured.
fn with_cluster(script: fn(&mut Run)) {
    let started = Instant::now();
    let mut hosts = vec!["client".to_string()];
    // The hosts keygen's layout has (f=1, two candidates, two groups, three database nodes).
    hosts.extend(["p0", "p1"].map(String::from));
    for g in 1..=2 {
        hosts.extend((1..=3).map(|k| format!("r{}", 100 * g + k)));
    }
    hosts.extend((11..=13).map(|id| format!("db{id}")));
    let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
    let net = Network::new(&hosts);
    // The test runs in its own thread in the client's namespace: its sockets, the tokio
    // runtime's threads and the node processes it spawns (before they move to their own
    // namespaces) are all there, and nothing of the test thread's namespace changes.
    let net = std::thread::scope(|scope| {
        scope
            .spawn(move || {
                net.enter("client");
                run(net, script)
            })
            .join()
    });
    let reports = net.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    eprintln!(
        "partition test: {} scenarios in {:.0} s in all:\n  {}",
        reports.len(),
        started.elapsed().as_secs_f64(),
        reports.join("\n  ")
    );
}

/// The primary isolated: the replicas' request timers expire and they move on without it.
fn isolate_primary(run: &mut Run) {
    let primary = run.cluster.primary();
    let view = run.cluster.view();
    run.scenario(
        &format!("primary {primary} isolated"),
        Fault::isolate(&primary),
        Some(("the replicas did not leave the view", &|c: &NetCluster| {
            c.view() > view
        })),
        None,
    );
}

/// Group 0's first replica isolated for `hold` and brought back: it catches up with its group
/// (fetching what it missed, or from a peer's checkpoint when it fell too far behind).
fn isolate_replica(run: &mut Run, hold: Duration) {
    let isolated = run.cluster.group(0)[0];
    let lagging = Lagging::replica(&run.cluster, isolated);
    run.scenario_for(
        hold,
        &format!("replica {isolated} isolated"),
        Fault::isolate(&host("replica", isolated)),
        None,
        lagging,
    );
}

/// Splits group `g`: the current primary and the group's second replica on one side, its
/// first and third replicas on the other; every other link works. The majority side gets no
/// PREPAREs and moves the cluster to the next view, whose primary reaches everyone.
fn split(run: &mut Run, g: u32) {
    let primary = run.cluster.primary();
    let view = run.cluster.view();
    let members = run.cluster.group(g);
    let minority = host("replica", members[1]);
    let majority = [members[0], members[2]].map(|id| host("replica", id));
    let majority = [majority[0].as_str(), majority[1].as_str()];
    let lagging = Lagging::replica(&run.cluster, members[1]);
    run.scenario(
        &format!(
            "group {g} split: {primary} and {minority} | {}",
            majority.join(" and ")
        ),
        Fault::split(&[&primary, &minority], &majority),
        Some((
            "the majority side did not move to a new view",
            &|c: &NetCluster| c.view() > view,
        )),
        lagging,
    );
}

#[test]
fn partitions_and_slow_links_under_tpcc_load() {
    with_cluster(|run| {
        // 1.
        isolate_primary(run);

        // 2. For a few seconds (it catches up by fetching), then for 20 s (it falls too far
        // behind, starts over as after a restart and rejoins from a peer's checkpoint).
        isolate_replica(run, hold());
        isolate_replica(run, Duration::from_secs(20));

        // 3. Its group split with the primary on the other side of the rejoined replica's: the
        // majority side's view can go on only if the rejoined replica follows its primary.
        // This found that it could not (it followed that candidate only from the
        // configuration's start), and that the candidate, primary again, did not order again
        // what it had ordered unaware; the seeded simulation
        // `a_recovered_replica_follows_a_later_view_of_an_earlier_primary` runs both
        // (docs/protocol.md, "Following the other candidates"). After those fixes the cluster
        // still stalled once right after the 20 s isolation healed; with VIEW-CHANGEs bounded
        // ("Bounded VIEW-CHANGEs") it passed three runs in a row.
        split(run, 0);

        // 4. A database node cut off and brought back: it catches up from re-sent COMMIT-DBs.
        let db = run.cluster.cluster.config.db_nodes[2].id;
        let lagging = Lagging::db_node(&run.cluster, db);
        run.scenario(
            &format!("database node {db} cut off"),
            Fault::isolate(&host("dbnode", db)),
            None,
            lagging,
        );

        // 5. Asymmetric loss: a quarter of what the primary sends is lost, nothing it
        // receives.
        let primary = run.cluster.primary();
        run.scenario(
            &format!("25% loss of what {primary} sends"),
            Fault::loss_from(&primary, 25),
            None,
            None,
        );

        // 6. A slow link: the primary's link limited to a token-bucket rate each way.
        let primary = run.cluster.primary();
        run.scenario(
            &format!("{primary}'s link slowed to 2 Mbit/s"),
            Fault::slow_link(&primary, "2mbit"),
            None,
            None,
        );
    });
}

/// The test's directory (configuration, databases, every node's log): removed after a
/// passing run unless `PARTITION_KEEP_LOGS` is set, kept after a failure.
struct WorkDir(Option<tempfile::TempDir>);

impl WorkDir {
    fn path(&self) -> &Path {
        self.0.as_ref().unwrap().path()
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("PARTITION_KEEP_LOGS").is_some() {
            let kept = self.0.take().unwrap().keep();
            eprintln!(
                "the cluster's logs are in {}",
                kept.join("cluster/logs").display()
            );
        }
    }
}

fn run(net: Network, script: fn(&mut Run)) -> Vec<String> {
    let dir = WorkDir(Some(tempfile::tempdir().unwrap()));
    let cluster = NetCluster::start(dir.path(), &net);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(async {
        let endpoint = cluster.cluster.config.clients[1].addr.clone();
        ClientEndpoint::open(
            Arc::new(cluster.cluster.clone()),
            &cluster.dir.join("keys"),
            &endpoint,
            ClientOptions::default(),
        )
        .await
        .expect("opening the load driver's client endpoint")
    });
    let url = &cluster.cluster.config.db_nodes[0].database;
    let loaded_history = runtime.block_on(async {
        use sqlx::Connection;
        sqlx::any::install_default_drivers();
        let mut conn = sqlx::AnyConnection::connect(url).await.unwrap();
        tpcc::ledger::history(&mut conn).await.unwrap()
    });
    let mut run = Run {
        net,
        cluster,
        runtime,
        client,
        ledger: Arc::default(),
        loaded_history,
        reports: Vec::new(),
    };

    script(&mut run);

    let Run {
        cluster,
        net,
        runtime,
        client,
        reports,
        ..
    } = run;
    runtime.block_on(client.shutdown());
    drop(cluster);
    drop(net);
    reports
}
