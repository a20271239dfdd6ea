//! State transfer of a TPC-C database (docs/state-transfer.md): nine tables with text, NULLs
//! (undelivered orders' carrier and delivery date) and more rows than fit one chunk, streamed
//! from an SQLite node and installed on a node of each backend, give the same digest and the
//! same rows.

mod common;

use common::{dump, fresh, on_both_backends, Kind};
use dbvote::{Application, Executor};
use tpcc::{load, ScaleConfig, Tpcc};

on_both_backends!(a_loaded_database_transfers_in_chunks_and_installs_identically);

async fn a_loaded_database_transfers_in_chunks_and_installs_identically(target: Kind) {
    let source_db = fresh(Kind::Sqlite).await;
    let source = Executor::open(&source_db.url, Tpcc, 1).await.unwrap();
    let mut conn = source_db.connect().await;
    load(&mut conn, &ScaleConfig::small(), 1, 7, |_| {})
        .await
        .unwrap();
    let mut parts = Vec::new();
    let digest = source
        .snapshot()
        .await
        .unwrap()
        .stream(true, |part| {
            parts.push(part);
            std::future::ready(())
        })
        .await
        .unwrap();
    assert_eq!(digest, source.digest().await.unwrap());
    let tables = Tpcc.state_tables().len() + 1;
    let mut seen: Vec<u32> = parts.iter().map(|p| p.table).collect();
    seen.dedup();
    assert_eq!(seen.len(), tables, "every table has rows, in order");
    assert!(parts.len() > tables, "some table takes several chunks");

    let target_db = fresh(target).await;
    let installed = Executor::open(&target_db.url, Tpcc, 1).await.unwrap();
    installed.install(0, digest, &parts).await.unwrap();
    assert_eq!(installed.digest().await.unwrap(), digest);
    let mut target_conn = target_db.connect().await;
    assert_eq!(dump(&mut target_conn).await, dump(&mut conn).await);
    source.close().await;
    installed.close().await;
}
