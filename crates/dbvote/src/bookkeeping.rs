//! The executor's own tables, written in the same transaction as each operation.
//!
//! - `cloudbft_meta (name, value)`: the application name and partition count the database was
//!   created for, so a node cannot be pointed at another node's or application's database, and
//!   the order up to which the state holds no stored results (`transferred_through`: after a
//!   state transfer the order it transferred up to, raised as old results are forgotten);
//! - `cloudbft_progress (partition_id, last_seq, last_order)`: per partition, the sequence number
//!   and order id of the last executed operation. Its rows are also the partition locks: an
//!   execution locks the rows of its partitions (SQLite: the database write lock; PostgreSQL:
//!   `SELECT ... FOR UPDATE` in partition order, so multi-partition operations cannot deadlock);
//! - `cloudbft_results (order_id, positions, operation_sha256, result)`: the canonical result of
//!   every executed order with the positions and the hash of the operation it was executed
//!   with, to answer repeated requests without executing again and to refuse a second,
//!   different decision for the same order. Only the last orders' are kept
//!   ([`crate::voter::STORED_RESULTS_KEPT`]).

use crate::app::Backend;

pub(crate) fn schema(backend: Backend) -> Vec<String> {
    let bytes = backend.bytes_type();
    vec![
        "CREATE TABLE IF NOT EXISTS cloudbft_meta (\
         name TEXT PRIMARY KEY, \
         value TEXT NOT NULL)"
            .to_owned(),
        "CREATE TABLE IF NOT EXISTS cloudbft_progress (\
         partition_id BIGINT PRIMARY KEY, \
         last_seq BIGINT NOT NULL, \
         last_order BIGINT NOT NULL)"
            .to_owned(),
        format!(
            "CREATE TABLE IF NOT EXISTS cloudbft_results (\
             order_id BIGINT PRIMARY KEY, \
             positions {bytes} NOT NULL, \
             operation_sha256 {bytes} NOT NULL, \
             result {bytes} NOT NULL)"
        ),
    ]
}

pub(crate) const INSERT_META: &str =
    "INSERT INTO cloudbft_meta (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING";
pub(crate) const SELECT_META: &str = "SELECT value FROM cloudbft_meta WHERE name = $1";
pub(crate) const UPSERT_META: &str = "INSERT INTO cloudbft_meta (name, value) VALUES ($1, $2) \
     ON CONFLICT (name) DO UPDATE SET value = excluded.value";
/// The `cloudbft_meta` entry naming the order up to which the state arrived by state transfer.
pub(crate) const TRANSFERRED: &str = "transferred_through";
pub(crate) const INSERT_PARTITION: &str =
    "INSERT INTO cloudbft_progress (partition_id, last_seq, last_order) VALUES ($1, 0, 0) \
     ON CONFLICT (partition_id) DO NOTHING";

pub(crate) const SELECT_RESULT: &str =
    "SELECT positions, operation_sha256, result FROM cloudbft_results WHERE order_id = $1";
/// Most results one INSERT stores (4 parameters each, far below both backends' limits).
const MOST_RESULTS_PER_INSERT: usize = 64;

/// How many of `waiting` results the next INSERT stores: a power of two, so that a
/// connection prepares at most seven distinct statements for them.
pub(crate) fn insert_results_rows(waiting: usize) -> usize {
    let most = waiting.clamp(1, MOST_RESULTS_PER_INSERT);
    1 << most.ilog2()
}

/// The INSERT of `rows` results (one of [`insert_results_rows`]'s sizes), binding order id,
/// positions, operation hash and result for each.
pub(crate) fn insert_results(rows: usize) -> &'static str {
    static STATEMENTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let statements = STATEMENTS.get_or_init(|| {
        (0..=MOST_RESULTS_PER_INSERT.ilog2())
            .map(|power| {
                let values: Vec<String> = (0..1usize << power)
                    .map(|row| {
                        let p = 4 * row;
                        format!("(${}, ${}, ${}, ${})", p + 1, p + 2, p + 3, p + 4)
                    })
                    .collect();
                format!(
                    "INSERT INTO cloudbft_results (order_id, positions, operation_sha256, \
                     result) VALUES {}",
                    values.join(", ")
                )
            })
            .collect()
    });
    debug_assert!(rows.is_power_of_two() && rows <= MOST_RESULTS_PER_INSERT);
    &statements[rows.ilog2() as usize]
}
pub(crate) const RESULTS_SIZE: &str = "SELECT COUNT(*), COALESCE(SUM(LENGTH(positions) + \
     LENGTH(operation_sha256) + LENGTH(result)), 0) FROM cloudbft_results";
pub(crate) const DELETE_RESULTS_THROUGH: &str = "DELETE FROM cloudbft_results WHERE order_id <= $1";
pub(crate) const HIGHEST_ORDER: &str = "SELECT COALESCE(MAX(order_id), 0) FROM cloudbft_results";
pub(crate) const HAS_RESULT: &str = "SELECT COUNT(*) FROM cloudbft_results WHERE order_id = $1";
/// The lowest stored order above `$1` whose successor is not stored.
pub(crate) const END_OF_RUN: &str = "SELECT COALESCE(MIN(r.order_id), 0) FROM cloudbft_results r \
     WHERE r.order_id > $1 AND NOT EXISTS \
     (SELECT 1 FROM cloudbft_results s WHERE s.order_id = r.order_id + 1)";

/// The stored orders above `$1`, in order (after [`END_OF_RUN`]: the few a crash left above a
/// gap).
pub(crate) const RESULTS_ABOVE: &str =
    "SELECT order_id FROM cloudbft_results WHERE order_id > $1 ORDER BY order_id";

pub(crate) const SELECT_ALL_PROGRESS: &str =
    "SELECT partition_id, last_seq, last_order FROM cloudbft_progress ORDER BY partition_id";
pub(crate) const UPDATE_PROGRESS: &str =
    "UPDATE cloudbft_progress SET last_seq = $1, last_order = $2 \
     WHERE partition_id = $3 AND last_seq = $4";

/// Reads the progress of one partition or of all; `lock` takes the partition locks on
/// PostgreSQL (on SQLite the transaction already holds the write lock).
pub(crate) fn select_progress(backend: Backend, one: bool, lock: bool) -> &'static str {
    match (backend, one, lock) {
        (Backend::Postgres, true, true) => {
            "SELECT partition_id, last_seq, last_order FROM cloudbft_progress \
             WHERE partition_id = $1 FOR UPDATE"
        }
        (Backend::Postgres, false, true) => {
            "SELECT partition_id, last_seq, last_order FROM cloudbft_progress \
             ORDER BY partition_id FOR UPDATE"
        }
        (_, true, _) => {
            "SELECT partition_id, last_seq, last_order FROM cloudbft_progress \
             WHERE partition_id = $1"
        }
        (_, false, _) => SELECT_ALL_PROGRESS,
    }
}

/// The statement that opens an executing transaction. SQLite's `BEGIN IMMEDIATE` takes the
/// write lock at once: a deferred transaction that reads and then writes fails with
/// `SQLITE_BUSY_SNAPSHOT` (without waiting) when another writer committed in between.
pub(crate) fn begin_write(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "BEGIN IMMEDIATE",
        Backend::Postgres => "BEGIN ISOLATION LEVEL READ COMMITTED",
    }
}

/// The progress table and its key, as the [state digest](crate::digest) covers it.
pub(crate) const PROGRESS_TABLE: (&str, &str) = ("cloudbft_progress", "partition_id");

/// The statement that opens a consistent read-only snapshot (for the digest).
pub(crate) fn begin_snapshot(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "BEGIN",
        Backend::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_inserted_in_powers_of_two() {
        let sizes = |mut waiting: usize| {
            let mut out = Vec::new();
            while waiting > 0 {
                let rows = insert_results_rows(waiting);
                out.push(rows);
                waiting -= rows;
            }
            out
        };
        assert_eq!(sizes(1), [1]);
        assert_eq!(sizes(15), [8, 4, 2, 1]);
        assert_eq!(sizes(64), [64]);
        assert_eq!(sizes(130), [64, 64, 2]);
        assert!(insert_results(1).ends_with("VALUES ($1, $2, $3, $4)"));
        assert!(insert_results(64).ends_with("($253, $254, $255, $256)"));
        assert_eq!(insert_results(8).matches('(').count(), 9);
    }
}
