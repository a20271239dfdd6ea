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

/// Up to this many results, one INSERT stores exactly as many; above it, in `EXACT_ROWS` and
/// [`MOST_RESULTS_PER_INSERT`] rows. Each statement text is prepared once per connection, so
/// this bounds the statements a connection keeps for results (33) well below sqlx's cache of
/// 100, while a batch of up to 32 executions stores its results in one statement (each
/// statement is a hand-off to the database's thread and back).
const EXACT_ROWS: usize = 32;

/// How many of `waiting` results the next INSERT stores.
pub(crate) fn insert_results_rows(waiting: usize) -> usize {
    match waiting.max(1) {
        n if n <= EXACT_ROWS => n,
        n if n < MOST_RESULTS_PER_INSERT => EXACT_ROWS,
        _ => MOST_RESULTS_PER_INSERT,
    }
}

/// The INSERT of `rows` results (one of [`insert_results_rows`]'s sizes), binding order id,
/// positions, operation hash and result for each.
pub(crate) fn insert_results(rows: usize) -> &'static str {
    static STATEMENTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let statements = STATEMENTS.get_or_init(|| {
        (1..=MOST_RESULTS_PER_INSERT)
            .map(|rows| {
                let values: Vec<String> = (0..rows)
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
    debug_assert!((1..=MOST_RESULTS_PER_INSERT).contains(&rows));
    &statements[rows - 1]
}

/// Most partitions one progress UPDATE moves (6 parameters each).
pub(crate) const MOST_PARTITIONS_PER_UPDATE: usize = 16;

/// The UPDATE that moves `k` progress rows at once, each only if it still holds the
/// `last_seq` the transaction found. Parameters are numbered in the order they appear: the
/// (partition id, new last_seq) pairs of the `k` rows, then their (partition id, new
/// last_order) pairs, then their (partition id, last_seq found) pairs. Each row matches at
/// most one guard, so the UPDATE moved every row exactly when it affected `k` rows.
pub(crate) fn update_progress(k: usize) -> &'static str {
    static STATEMENTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let statements = STATEMENTS.get_or_init(|| {
        (1..=MOST_PARTITIONS_PER_UPDATE)
            .map(|k| {
                // The i-th pair of the `part`-th group of k pairs.
                let pair = |part: usize, i: usize| (2 * (part * k + i) + 1, 2 * (part * k + i) + 2);
                let case = |part: usize| -> String {
                    (0..k)
                        .map(|i| {
                            let (id, value) = pair(part, i);
                            format!(" WHEN ${id} THEN ${value}")
                        })
                        .collect()
                };
                let guards: Vec<String> = (0..k)
                    .map(|i| {
                        let (id, found) = pair(2, i);
                        format!("(partition_id = ${id} AND last_seq = ${found})")
                    })
                    .collect();
                format!(
                    "UPDATE cloudbft_progress SET last_seq = CASE partition_id{} END, \
                     last_order = CASE partition_id{} END WHERE {}",
                    case(0),
                    case(1),
                    guards.join(" OR ")
                )
            })
            .collect()
    });
    debug_assert!((1..=MOST_PARTITIONS_PER_UPDATE).contains(&k));
    &statements[k - 1]
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
    fn results_are_inserted_in_at_most_two_statements_up_to_sixty_four() {
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
        assert_eq!(sizes(21), [21]);
        assert_eq!(sizes(32), [32]);
        assert_eq!(sizes(50), [32, 18]);
        assert_eq!(sizes(64), [64]);
        assert_eq!(sizes(130), [64, 64, 2]);
        assert!(insert_results(1).ends_with("VALUES ($1, $2, $3, $4)"));
        assert!(insert_results(64).ends_with("($253, $254, $255, $256)"));
        assert_eq!(insert_results(21).matches('(').count(), 22);
    }

    #[test]
    fn one_update_moves_several_partitions_each_under_its_guard() {
        assert_eq!(
            update_progress(1),
            "UPDATE cloudbft_progress SET last_seq = CASE partition_id WHEN $1 THEN $2 END, \
             last_order = CASE partition_id WHEN $3 THEN $4 END \
             WHERE (partition_id = $5 AND last_seq = $6)"
        );
        assert_eq!(
            update_progress(2),
            "UPDATE cloudbft_progress SET last_seq = CASE partition_id WHEN $1 THEN $2 \
             WHEN $3 THEN $4 END, last_order = CASE partition_id WHEN $5 THEN $6 WHEN $7 THEN $8 \
             END WHERE (partition_id = $9 AND last_seq = $10) OR \
             (partition_id = $11 AND last_seq = $12)"
        );
        assert!(update_progress(MOST_PARTITIONS_PER_UPDATE).ends_with("last_seq = $96)"));
    }
}
