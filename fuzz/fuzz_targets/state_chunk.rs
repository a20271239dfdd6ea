//! Database state transfer: STATE-CHUNK, DB-CHECKPOINT and STATE-REQUEST as a database node
//! decodes them (canonical), and the shape check a chunk's rows pass before any of them reaches
//! SQL (`dbvote::transfer::check_rows`): it accepts only plain identifiers as column names
//! and rows of one value per column.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::{DbCheckpoint, StateChunk, StateRequest, Value};

fuzz_target!(|data: &[u8]| {
    let _ = cloudbft_fuzz::canonical::<StateRequest>(data);
    let _ = cloudbft_fuzz::canonical::<DbCheckpoint>(data);
    let Some(chunk) = cloudbft_fuzz::canonical::<StateChunk>(data) else {
        return;
    };
    let rows = &chunk.rows;
    let _: usize = rows.rows.iter().flatten().map(Value::weight).sum();
    if dbvote::transfer::check_rows(rows).is_ok() {
        assert!(!rows.columns.is_empty());
        assert!(
            rows.columns
                .iter()
                .all(|c| cloudbft_fuzz::plain_identifier(c)),
            "a column name that is not a plain identifier was accepted: {:?}",
            rows.columns
        );
        assert!(rows.rows.iter().all(|r| r.len() == rows.columns.len()));
    }
});
