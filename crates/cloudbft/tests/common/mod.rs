//! A `cloudbft demo` cluster as a child process, for the cluster-level tests.

#![allow(dead_code)] // Each test binary uses part of it.

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
}

impl Demo {
    /// Starts `cloudbft demo --data-dir dir --base-port base --gateway-addr 127.0.0.1:gateway`
    /// with `extra` arguments and waits for its "ready:" line.
    ///
    /// Tests run in parallel, so each takes its own ports, above Linux's ephemeral range
    /// (32768-60999, where outgoing connections get their ports) and swtpm's (10000-32766): a
    /// base in 61000-61900 (nodes from there, metrics at +1000) and a gateway at base + 2000.
    pub fn start(dir: &Path, base_port: u16, gateway_port: u16, extra: &[&str]) -> Demo {
        let gateway = format!("127.0.0.1:{gateway_port}");
        let mut child = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
            .arg("demo")
            .arg("--data-dir")
            .arg(dir)
            .args(["--base-port", &base_port.to_string()])
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

impl Drop for PgDatabases {
    fn drop(&mut self) {
        use sqlx::Connection;
        let dropped = tokio::runtime::Runtime::new().unwrap().block_on(async {
            sqlx::any::install_default_drivers();
            let mut admin =
                sqlx::AnyConnection::connect(&format!("{}/postgres", self.server)).await?;
            let names: Vec<String> =
                sqlx::query_scalar("SELECT datname::text FROM pg_database WHERE datname LIKE $1")
                    .bind(format!("{}\\_%", self.prefix))
                    .fetch_all(&mut admin)
                    .await?;
            for name in names {
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut admin)
                .await?;
            }
            admin.close().await
        });
        if let Err(e) = dropped {
            if !std::thread::panicking() {
                panic!("could not drop the test's databases: {e}");
            }
        }
    }
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
