//! The execution layer against real SQLite files (WAL, synchronous=FULL) in temporary
//! directories.

mod common;

use common::{every_scenario, scenarios, Kind};

every_scenario!(Kind::Sqlite);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transfer_round_trip() {
    scenarios::transfer_round_trip(Kind::Sqlite, Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_then_reopen() {
    scenarios::sigkill_then_reopen(Kind::Sqlite, "sigkill_then_reopen").await;
}

/// A database file in a directory that does not exist is an error that names the URL.
#[tokio::test]
async fn missing_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let url = dbvote::sqlite_url(&dir.path().join("missing").join("node.sqlite"));
    match dbvote::Executor::open(&url, dbvote::Bank, 1).await {
        Err(e @ dbvote::DbError::Connect { .. }) => {
            let message = e.to_string();
            assert!(message.contains(&url), "{message}");
            assert!(message.contains("directory exists"), "{message}");
        }
        Err(other) => panic!("expected Connect, got {other:?}"),
        Ok(_) => panic!("opened a database in a missing directory"),
    }
}
