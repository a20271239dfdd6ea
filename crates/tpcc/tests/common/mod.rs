//! Fresh databases for the tests: a SQLite file in a temporary directory, or a PostgreSQL
//! database (at `CLOUDBFT_TEST_POSTGRES`, else the local CI server) dropped afterwards.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::{AnyConnection, AssertSqlSafe, Connection};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

pub struct TestDb {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    pg: Option<(String, String)>,
}

const DEFAULT_POSTGRES: &str = "postgres://cloudbft:cloudbft@127.0.0.1:5432/postgres";
static NEXT_DB: AtomicU64 = AtomicU64::new(0);

fn admin_url() -> String {
    std::env::var("CLOUDBFT_TEST_POSTGRES").unwrap_or_else(|_| DEFAULT_POSTGRES.to_owned())
}

/// `admin` with its database path replaced by `name` (no query string in the test URLs).
fn with_database(admin: &str, name: &str) -> String {
    let (base, query) = admin.split_once('?').unwrap_or((admin, ""));
    let start = base.find("://").map_or(0, |i| i + 3);
    let path = base[start..].find('/').map_or(base.len(), |i| start + i);
    let mut url = format!("{}/{name}", &base[..path]);
    if !query.is_empty() {
        url.push('?');
        url.push_str(query);
    }
    url
}

pub async fn fresh(kind: Kind) -> TestDb {
    sqlx::any::install_default_drivers();
    match kind {
        Kind::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let url = format!(
                "sqlite:{}?mode=rwc",
                dir.path().join("tpcc.sqlite").display()
            );
            TestDb {
                url,
                _dir: Some(dir),
                pg: None,
            }
        }
        Kind::Postgres => {
            let admin = admin_url();
            let mut conn = AnyConnection::connect(&admin)
                .await
                .unwrap_or_else(|e| panic!("PostgreSQL at {admin} is unreachable: {e}"));
            let name = format!(
                "tpcc_test_{}_{}",
                std::process::id(),
                NEXT_DB.fetch_add(1, Ordering::Relaxed)
            );
            sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut conn)
                .await
                .unwrap();
            conn.close().await.unwrap();
            TestDb {
                url: with_database(&admin, &name),
                _dir: None,
                pg: Some((admin, name)),
            }
        }
    }
}

impl TestDb {
    pub async fn connect(&self) -> AnyConnection {
        AnyConnection::connect(&self.url).await.unwrap()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((admin, name)) = self.pg.take() else {
            return;
        };
        // Drop runs inside the test's runtime: use a thread with its own.
        let dropped = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async move {
                    let mut conn = AnyConnection::connect(&admin).await?;
                    sqlx::raw_sql(AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut conn)
                    .await?;
                    conn.close().await
                })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) && !std::thread::panicking() {
            panic!("could not drop a test database: {dropped:?}");
        }
    }
}
