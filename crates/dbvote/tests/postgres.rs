//! The execution layer against a real PostgreSQL server: `CLOUDBFT_TEST_POSTGRES`, else
//! `postgres://cloudbft:cloudbft@127.0.0.1:5432/postgres` (what `.ci/postgres-up` sets up). Each
//! test creates its own database and drops it. An unreachable server fails the tests.

mod common;

use common::{scenarios, Kind};

macro_rules! on_backend {
    ($kind:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                scenarios::$name($kind).await;
            }
        )*
    };
}

on_backend!(
    Kind::Postgres;
    executes_in_order,
    not_ready_for_missing_predecessor,
    disjoint_partitions_run_concurrently,
    multi_partition_waits_on_all_partitions,
    already_executed_returns_stored_result,
    conflicting_positions_are_errors,
    malformed_and_invalid_are_errors,
    dropped_mid_stream_resumes,
    interleavings_reach_identical_state,
    refuses_foreign_database,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_then_reopen() {
    scenarios::sigkill_then_reopen(Kind::Postgres, "sigkill_then_reopen").await;
}
