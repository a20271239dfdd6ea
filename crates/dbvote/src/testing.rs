//! Databases that exist for one test, on either backend: shared by the test suites of the
//! crates whose code runs on database nodes (like `proto::testing`, never for production use).
//!
//! PostgreSQL tests use the server at `CLOUDBFT_TEST_POSTGRES`, else the one `.ci/postgres-up`
//! sets up; each test gets its own database, dropped afterwards.

use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::Connection;

/// Which backend a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// A database that exists for one test: a file in a temporary directory, or a PostgreSQL
/// database dropped when this is dropped.
pub struct TestDb {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    pg: Option<PgDatabase>,
}

impl TestDb {
    /// A connection to it (panics if the database is unreachable: tests only).
    pub async fn connect(&self) -> sqlx::AnyConnection {
        sqlx::any::install_default_drivers();
        sqlx::AnyConnection::connect(&self.url)
            .await
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.url))
    }
}

struct PgDatabase {
    admin_url: String,
    name: String,
}

const DEFAULT_POSTGRES: &str = "postgres://cloudbft:cloudbft@127.0.0.1:5432/postgres";

/// The server the PostgreSQL tests use: `CLOUDBFT_TEST_POSTGRES`, else the one `.ci/postgres-up`
/// sets up.
pub fn postgres_admin_url() -> String {
    std::env::var("CLOUDBFT_TEST_POSTGRES").unwrap_or_else(|_| DEFAULT_POSTGRES.to_owned())
}

static NEXT_DB: AtomicU64 = AtomicU64::new(0);

/// A new, empty database of `kind`.
pub async fn fresh(kind: Kind) -> TestDb {
    match kind {
        Kind::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let url = crate::sqlite_url(&dir.path().join("node.sqlite"));
            TestDb {
                url,
                _dir: Some(dir),
                pg: None,
            }
        }
        Kind::Postgres => {
            sqlx::any::install_default_drivers();
            let admin_url = postgres_admin_url();
            let mut admin = admin_connect(&admin_url).await;
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos();
            let name = format!(
                "dbvote_test_{}_{}_{nanos}",
                std::process::id(),
                NEXT_DB.fetch_add(1, Ordering::Relaxed)
            );
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut admin)
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot create a test database on {admin_url}: {e}; the role needs \
                         CREATEDB (run `.ci/postgres-up`)"
                    )
                });
            admin.close().await.unwrap();
            TestDb {
                url: with_database(&admin_url, &name),
                _dir: None,
                pg: Some(PgDatabase { admin_url, name }),
            }
        }
    }
}

async fn admin_connect(admin_url: &str) -> sqlx::AnyConnection {
    match sqlx::AnyConnection::connect(admin_url).await {
        Ok(conn) => conn,
        Err(e) => panic!(
            "PostgreSQL at {admin_url} is unreachable: {e}. The PostgreSQL tests need a real \
             server: run `.ci/postgres-up` (as root; installs, starts and sets up the Debian \
             PostgreSQL), or set CLOUDBFT_TEST_POSTGRES to a server where the role may CREATE \
             DATABASE"
        ),
    }
}

/// `admin_url` with its database replaced by `name`.
fn with_database(admin_url: &str, name: &str) -> String {
    let (base, query) = match admin_url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (admin_url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let mut url = format!("{}/{name}", &base[..path_start]);
    if let Some(query) = query {
        url.push('?');
        url.push_str(query);
    }
    url
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some(pg) = self.pg.take() else { return };
        // Drop may run inside a runtime (or while panicking): drop the database from a thread
        // with its own runtime.
        let name = pg.name.clone();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(crate::postgres::drop_databases(&pg.admin_url, &[pg.name]))
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) && !std::thread::panicking() {
            panic!("could not drop the test database {name}: {dropped:?}");
        }
    }
}

/// Assigns global order ids and per-partition positions as the ordering layer does: a
/// multi-partition operation is positioned on every partition.
pub struct Sequencer {
    order: u64,
    seq: Vec<u64>,
}

impl Sequencer {
    /// A sequencer for a configuration of `partitions` partitions.
    pub fn new(partitions: u32) -> Sequencer {
        Sequencer {
            order: 0,
            seq: vec![0; partitions as usize],
        }
    }

    /// The next execution, for an operation that touches `touched` (panics on a partition
    /// outside the configuration: tests only).
    pub fn next(
        &mut self,
        touched: Vec<crate::PartitionId>,
        operation: Vec<u8>,
    ) -> crate::Execution {
        self.order += 1;
        let positioned = if touched.len() > 1 {
            (0..self.seq.len() as crate::PartitionId).collect()
        } else {
            touched
        };
        let positions = positioned
            .into_iter()
            .map(|p| {
                self.seq[p as usize] += 1;
                (p, self.seq[p as usize])
            })
            .collect();
        crate::Execution {
            order: self.order,
            positions,
            operation,
        }
    }

    /// The next execution of a bank operation.
    pub fn bank(&mut self, op: &crate::BankOp) -> crate::Execution {
        self.next(op.partitions(), op.encode())
    }
}
