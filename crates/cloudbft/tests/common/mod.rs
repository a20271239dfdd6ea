//! A `cloudbft demo` cluster as a child process, for the cluster-level tests.

#![allow(dead_code)] // Each test binary uses part of it.

pub mod netns;
mod ports;
pub use ports::Ports;

use client_plugin::client::ClientEndpoint;
use dbvote::bank::{Bank, BankOp};
use dbvote::executor::Executor;
use proto::config::Cluster;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a cluster may take to start (a cold debug build on two cores starts ~15 processes).
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// A running `cloudbft demo`. Dropping it stops the cluster with SIGINT, as Ctrl-C would.
pub struct Demo {
    child: Option<Child>,
    pub dir: PathBuf,
    pub gateway: String,
    /// Held while the cluster runs.
    _ports: Ports,
}

impl Demo {
    /// Starts `cloudbft demo --data-dir dir --base-port base --gateway-addr 127.0.0.1:gateway`
    /// with `extra` arguments and waits for its "ready:" line.
    ///
    /// Tests run in parallel, so each reserves its own block of ports ([`Ports`]).
    pub fn start(dir: &Path, ports: &Ports, extra: &[&str]) -> Demo {
        let gateway = format!("127.0.0.1:{}", ports.gateway);
        let mut child = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
            .arg("demo")
            .arg("--data-dir")
            .arg(dir)
            .args(["--base-port", &ports.base.to_string()])
            .args(["--gateway-addr", &gateway])
            .args(extra)
            .env("RUST_LOG", "warn")
            .env("TSS2_LOG", "all+none")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting cloudbft demo");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let ready = line.starts_with("ready:");
                if tx.send(line).is_err() || ready {
                    return;
                }
            }
        });
        let mut seen = Vec::new();
        loop {
            match rx.recv_timeout(READY_TIMEOUT) {
                Ok(line) if line.starts_with("ready:") => break,
                Ok(line) => seen.push(line),
                Err(_) => {
                    let _ = child.kill();
                    panic!(
                        "cloudbft demo did not get ready; it printed {seen:?}; logs in {}",
                        dir.join("logs").display()
                    );
                }
            }
        }
        Demo {
            child: Some(child),
            dir: dir.to_path_buf(),
            gateway,
            _ports: ports.clone(),
        }
    }

    /// The cluster configuration the demo runs.
    pub fn config(&self) -> PathBuf {
        self.dir.join("cluster.toml")
    }

    /// Stops the cluster as Ctrl-C does and waits for it; panics if it did not stop cleanly.
    pub fn stop(mut self) {
        self.interrupt();
    }

    fn interrupt(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let status = child.wait().expect("waiting for cloudbft demo");
            assert!(status.success(), "cloudbft demo stopped with {status}");
        }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(mut child) = self.child.take() {
                unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
                let _ = child.wait();
            }
        } else {
            self.interrupt();
        }
    }
}

/// The PostgreSQL databases of one test's cluster: `--db postgres` flags naming the test server
/// (`CLOUDBFT_TEST_POSTGRES`, else the one `.ci/postgres-up` sets up) and a database prefix of
/// the test's own. Dropping it drops every database with that prefix.
pub struct PgDatabases {
    server: String,
    prefix: String,
}

impl PgDatabases {
    pub fn new(tag: &str) -> PgDatabases {
        let server = std::env::var("CLOUDBFT_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://cloudbft:cloudbft@127.0.0.1:5432/postgres".into());
        PgDatabases {
            server: server.trim_end_matches("/postgres").to_string(),
            prefix: format!("cloudbft_{tag}{}", std::process::id()),
        }
    }

    /// The flags that put a cluster's databases there.
    pub fn args(&self) -> [&str; 6] {
        [
            "--db",
            "postgres",
            "--postgres",
            &self.server,
            "--db-prefix",
            &self.prefix,
        ]
    }
}

impl PgDatabases {
    /// The databases with this prefix that exist now.
    pub fn existing(&self) -> Result<Vec<String>, sqlx::Error> {
        use sqlx::Connection;
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            sqlx::any::install_default_drivers();
            let mut admin = sqlx::AnyConnection::connect(&self.admin_url()).await?;
            let names =
                sqlx::query_scalar("SELECT datname::text FROM pg_database WHERE datname LIKE $1")
                    .bind(format!("{}\\_%", self.prefix))
                    .fetch_all(&mut admin)
                    .await?;
            admin.close().await?;
            Ok(names)
        })
    }

    fn admin_url(&self) -> String {
        format!("{}/postgres", self.server)
    }
}

impl Drop for PgDatabases {
    fn drop(&mut self) {
        let dropped = self.existing().and_then(|names| {
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(dbvote::postgres::drop_databases(&self.admin_url(), &names))
        });
        if let Err(e) = dropped {
            if !std::thread::panicking() {
                panic!("could not drop the test's databases: {e}");
            }
        }
    }
}

/// A client endpoint at the load driver's address (client endpoint 1) of the cluster whose
/// configuration is `config` (keys in keys/ next to it).
pub async fn load_driver_client(config: &Path) -> ClientEndpoint {
    let cluster = std::sync::Arc::new(Cluster::load(config).unwrap());
    let endpoint = cluster.config.clients[1].addr.clone();
    let keys = config.parent().unwrap().join("keys");
    ClientEndpoint::open(cluster, &keys, &endpoint, Default::default())
        .await
        .unwrap()
}

/// Runs a bank operation through the client library and returns the accepted page.
pub async fn invoke(client: &ClientEndpoint, op: BankOp) -> String {
    let accepted = client
        .invoke(op.partitions(), op.encode())
        .await
        .unwrap_or_else(|e| panic!("{op:?}: {e}"));
    String::from_utf8(accepted.page).expect("pages are UTF-8")
}

/// The balance an accepted Balance page shows, in cents.
pub fn balance(page: &str) -> u64 {
    let amount = page
        .split("id=\"result\">")
        .nth(1)
        .and_then(|result| result.split(": ").nth(1))
        .and_then(|rest| rest.split('<').next())
        .map(|text| text.trim_end_matches('.').replace('.', ""));
    amount
        .and_then(|cents| cents.parse().ok())
        .unwrap_or_else(|| panic!("no balance in {page}"))
}

/// Every database node's state digest and highest executed order, after the cluster stopped.
pub async fn db_states(config: &Path) -> Vec<([u8; 32], u64)> {
    let cluster = Cluster::load(config).unwrap();
    let mut out = Vec::new();
    for db in &cluster.config.db_nodes {
        let executor = Executor::open(&db.database, Bank, cluster.config.partitions)
            .await
            .unwrap();
        out.push((
            executor.digest().await.unwrap(),
            executor.progress().await.unwrap().highest_order,
        ));
        executor.close().await;
    }
    out
}

/// A database node's `cloudbft_highest_order`, from the metrics endpoint its arguments name.
pub fn highest_order(args: &[String]) -> Option<u64> {
    let metrics = args.windows(2).find(|w| w[0] == "--metrics")?[1]
        .parse()
        .ok()?;
    node::metrics::highest_order(metrics)
}

/// The pid and arguments of the process running `cloudbft <role> --config <config> --id <id>`.
pub fn node_process(config: &Path, role: &str, id: u32) -> Option<(i32, Vec<String>)> {
    let config = config.display().to_string();
    let id = id.to_string();
    process(|args| {
        let has = |pair: [&str; 2]| args.windows(2).any(|w| w[0] == pair[0] && w[1] == pair[1]);
        let is_role = args.get(1).is_some_and(|a| a == role);
        is_role && has(["--config", &config]) && has(["--id", &id])
    })
}

/// The pid and arguments of a process whose arguments satisfy `wanted`.
pub fn process(wanted: impl Fn(&[String]) -> bool) -> Option<(i32, Vec<String>)> {
    std::fs::read_dir("/proc").ok()?.find_map(|entry| {
        let entry = entry.ok()?;
        let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
        let args: Vec<String> = cmdline
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        wanted(&args).then_some((pid, args))
    })
}

/// Kills `cloudbft <role> ... --id <id>` with SIGKILL and returns its arguments.
pub fn kill(config: &Path, role: &str, id: u32) -> Vec<String> {
    let (pid, args) =
        node_process(config, role, id).unwrap_or_else(|| panic!("{role} {id} is not running"));
    // SAFETY: kill(2) on a process of this test's cluster.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    args
}

/// A node's metric without labels (its first sample named `name`), from the metrics endpoint
/// its arguments name.
pub fn metric(args: &[String], name: &str) -> Option<f64> {
    let metrics = args.windows(2).find(|w| w[0] == "--metrics")?[1]
        .parse()
        .ok()?;
    node::metrics::value(metrics, name)
}

/// A node process a test started again itself (the demo does not manage it). If the test ends
/// without stopping it, e.g. by a failed assertion, it is killed: it must not hold the ports of
/// the next test.
pub struct Restarted {
    child: Child,
    pub args: Vec<String>,
    log: PathBuf,
}

impl Restarted {
    /// Whether it still runs, and the end of its log: what a test that waited for it in vain
    /// prints, since the log goes with the test's temporary directory.
    pub fn diagnosis(&mut self) -> String {
        let state = match self.child.try_wait() {
            Ok(None) => format!("still running (pid {})", self.child.id()),
            Ok(Some(status)) => format!("exited with {status}"),
            Err(e) => format!("state unknown ({e})"),
        };
        let log = std::fs::read_to_string(&self.log).unwrap_or_else(|e| format!("({e})"));
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        format!(
            "{:?} {state}; the last lines of {}:\n{tail}",
            self.args,
            self.log.display()
        )
    }

    /// Stops it as Ctrl-C would and asserts that it exits cleanly.
    pub fn stop(mut self) {
        // SAFETY: kill(2) on a child this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{:?} stopped with {status}", self.args);
    }
}

impl Drop for Restarted {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `cloudbft` again with the arguments of a node this test killed, logging to
/// `logs/<log>.log` next to the configuration.
pub fn restart(config: &Path, args: &[String], log: &str) -> Restarted {
    let path = PathBuf::from(config.parent().unwrap()).join(format!("logs/{log}.log"));
    let log = std::fs::File::create(&path).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("restarting a node");
    Restarted {
        child,
        args: args.to_vec(),
        log: path,
    }
}

/// Runs `cloudbft <args>` and returns what it printed; panics with its output if it fails.
pub fn cloudbft(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("running cloudbft");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "cloudbft {args:?} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Independently of any driver's own verification, on a stopped cluster: every database node
/// of `config` passes the twelve TPC-C consistency conditions (`cloudbft tpcc check`) and all
/// their digests (`cloudbft tpcc digest`) are equal. Returns the digest.
pub fn tpcc_consistent(config: &Path) -> String {
    let cluster = Cluster::load(config).unwrap();
    let mut digests = Vec::new();
    for node in &cluster.config.db_nodes {
        let db = node.database.as_str();
        let check = cloudbft(&["tpcc", "check", "--db", db]);
        assert_eq!(
            check.lines().filter(|l| l.starts_with("PASS")).count(),
            12,
            "database node {}: {check}",
            node.id
        );
        digests.push(cloudbft(&["tpcc", "digest", "--db", db]).trim().to_string());
    }
    assert_eq!(digests[0].len(), 64);
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    digests.swap_remove(0)
}
