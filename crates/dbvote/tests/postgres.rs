//! The execution layer against a real PostgreSQL server: `CLOUDBFT_TEST_POSTGRES`, else
//! `postgres://cloudbft:cloudbft@127.0.0.1:5432/postgres` (what `.ci/postgres-up` sets up). Each
//! test creates its own database and drops it. An unreachable server fails the tests.

mod common;

use common::{every_scenario, scenarios, Kind};

every_scenario!(Kind::Postgres);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transfer_round_trip() {
    scenarios::transfer_round_trip(Kind::Postgres, Kind::Postgres).await;
}

/// The digest does not depend on the backend, so a PostgreSQL node can catch up from SQLite
/// rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transfer_from_sqlite_to_postgres() {
    scenarios::transfer_round_trip(Kind::Sqlite, Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_then_reopen() {
    scenarios::sigkill_then_reopen(Kind::Postgres, "sigkill_then_reopen").await;
}
