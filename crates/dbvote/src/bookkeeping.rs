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
    let key = integer_key(backend);
    vec![
        "CREATE TABLE IF NOT EXISTS cloudbft_meta (\
         name TEXT PRIMARY KEY, \
         value TEXT NOT NULL)"
            .to_owned(),
        format!(
            "CREATE TABLE IF NOT EXISTS cloudbft_progress (\
             partition_id {key} PRIMARY KEY, \
             last_seq BIGINT NOT NULL, \
             last_order BIGINT NOT NULL)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS cloudbft_results (\
             order_id {key} PRIMARY KEY, \
             positions {bytes} NOT NULL, \
             operation_sha256 {bytes} NOT NULL, \
             result {bytes} NOT NULL)"
        ),
    ]
}

/// The type of a 64-bit integer primary key. On SQLite `INTEGER PRIMARY KEY` (and only that
/// spelling) makes the key the table's rowid: one B-tree per table. Any other spelling, such as
/// `BIGINT`, keeps a rowid B-tree and adds an index on the key beside it, and every stored result
/// then wrote both: 7.3 WAL pages per commit at 64 no-op clients instead of 4.9
/// (docs/performance.md, item 41). The values are the same 64-bit signed integers either way, so
/// a database created with `BIGINT` keys by an earlier build works as before.
fn integer_key(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "INTEGER",
        Backend::Postgres => "BIGINT",
    }
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
pub(crate) const EXACT_ROWS: usize = 32;

/// How many of `waiting` results the next INSERT stores.
pub(crate) fn insert_results_rows(waiting: usize) -> usize {
    match waiting.max(1) {
        n if n <= EXACT_ROWS => n,
        n if n < MOST_RESULTS_PER_INSERT => EXACT_ROWS,
        _ => MOST_RESULTS_PER_INSERT,
    }
}

/// The INSERT of `rows` results (one of [`insert_results_rows`]'s sizes), binding order id,
/// positions, operation hash and result for each, with `backend`'s parameters ([`text_for`]).
pub(crate) fn insert_results(backend: Backend, rows: usize) -> &'static str {
    static STATEMENTS: Texts = Texts::new();
    debug_assert!((1..=MOST_RESULTS_PER_INSERT).contains(&rows));
    &STATEMENTS.get(backend, MOST_RESULTS_PER_INSERT, |i| {
        insert_results_from(i + 1, 1)
    })[rows - 1]
}

/// [`insert_results`] with its parameters numbered from `$first`.
fn insert_results_from(rows: usize, first: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|row| {
            let p = first + 4 * row;
            format!("(${}, ${}, ${}, ${})", p, p + 1, p + 2, p + 3)
        })
        .collect();
    format!(
        "INSERT INTO cloudbft_results (order_id, positions, operation_sha256, result) VALUES {}",
        values.join(", ")
    )
}

/// Most partitions one progress UPDATE moves (6 parameters each).
pub(crate) const MOST_PARTITIONS_PER_UPDATE: usize = 16;

/// The UPDATE that moves `k` progress rows at once, each only from the `last_seq` the
/// transaction found. Parameters are numbered in the order they appear: the (partition id,
/// last_seq found, new last_seq) triples of the `k` rows, then their (partition id, new
/// last_order) pairs, then their partition ids. A row that no longer holds the `last_seq` found
/// gets NULL, which the column refuses: the statement fails (a NOT NULL violation) and moves
/// nothing. So the check needs no second statement and comes before the commit, also where
/// the commit follows in the same hand-off to the database ([`store_move_commit`]). A missing
/// row is not an error here; the UPDATE then affects fewer than `k` rows.
pub(crate) fn update_progress(backend: Backend, k: usize) -> &'static str {
    static STATEMENTS: Texts = Texts::new();
    debug_assert!((1..=MOST_PARTITIONS_PER_UPDATE).contains(&k));
    &STATEMENTS.get(backend, MOST_PARTITIONS_PER_UPDATE, |i| {
        update_progress_from(i + 1, 1)
    })[k - 1]
}

/// [`update_progress`] with its parameters numbered from `$first`.
fn update_progress_from(k: usize, first: usize) -> String {
    let seq: String = (0..k)
        .map(|i| {
            let p = first + 3 * i;
            format!(
                " WHEN partition_id = ${p} AND last_seq = ${} THEN ${}",
                p + 1,
                p + 2
            )
        })
        .collect();
    let first = first + 3 * k;
    let order: String = (0..k)
        .map(|i| format!(" WHEN ${} THEN ${}", first + 2 * i, first + 2 * i + 1))
        .collect();
    let first = first + 2 * k;
    let ids: Vec<String> = (0..k).map(|i| format!("${}", first + i)).collect();
    format!(
        "UPDATE cloudbft_progress SET last_seq = CASE{seq} END, \
         last_order = CASE partition_id{order} END WHERE partition_id IN ({})",
        ids.join(", ")
    )
}

/// SQLite: the end of an executing transaction as one list of statements, which sqlx runs in
/// one hand-off to the connection's thread: the INSERT of `rows` results (up to
/// [`EXACT_ROWS`]; none if 0), the UPDATE of `k` partitions (up to
/// [`MOST_PARTITIONS_PER_UPDATE`]; none if 0), then `COMMIT`. Parameters are numbered through
/// the list, the INSERT's first. SQLite stops at the first statement that fails, so the
/// commit runs only after both succeeded; the caller then rolls back. Each `(rows, k)` is its
/// own text, prepared once per connection: with `p` partitions up to `33 × p` of them (and as
/// many of [`begin_store_move_commit`]'s), so beyond a few partitions sqlx's cache (100 per
/// connection) may prepare the rarer ones again. Built once per `(rows, k)`, when first used.
pub(crate) fn store_move_commit(rows: usize, k: usize) -> &'static str {
    static LISTS: Lists = Lists::new();
    LISTS.get(rows, k, false)
}

/// SQLite: [`store_move_commit`] after `BEGIN IMMEDIATE`, the whole of a transaction that
/// needs no other statement, in one hand-off to the connection's thread.
pub(crate) fn begin_store_move_commit(rows: usize, k: usize) -> &'static str {
    static LISTS: Lists = Lists::new();
    LISTS.get(rows, k, true)
}

/// The lists of [`store_move_commit`] or [`begin_store_move_commit`], one per `(rows, k)`.
struct Lists([[std::sync::OnceLock<String>; MOST_PARTITIONS_PER_UPDATE + 1]; EXACT_ROWS + 1]);

impl Lists {
    const fn new() -> Self {
        Lists(
            [const { [const { std::sync::OnceLock::new() }; MOST_PARTITIONS_PER_UPDATE + 1] };
                EXACT_ROWS + 1],
        )
    }

    fn get(&'static self, rows: usize, k: usize, begin: bool) -> &'static str {
        self.0[rows][k].get_or_init(|| list(rows, k, begin))
    }
}

/// The text of [`Lists::get`].
fn list(rows: usize, k: usize, begin: bool) -> String {
    let mut statements = Vec::with_capacity(4);
    if begin {
        statements.push("BEGIN IMMEDIATE".to_owned());
    }
    if rows > 0 {
        statements.push(insert_results_from(rows, 1));
    }
    if k > 0 {
        statements.push(update_progress_from(k, 1 + 4 * rows));
    }
    statements.push("COMMIT".to_owned());
    positional(&statements.join("; "))
}

/// Statement texts of several sizes, built once per backend in its parameter style
/// ([`text_for`]) and kept for the process: sqlx caches prepared statements by their text.
pub(crate) struct Texts([std::sync::OnceLock<Vec<String>>; 2]);

impl Texts {
    pub(crate) const fn new() -> Self {
        Texts([const { std::sync::OnceLock::new() }; 2])
    }

    /// `build(i)` for each `i` in `0..count`, as `backend` takes them.
    pub(crate) fn get(
        &'static self,
        backend: Backend,
        count: usize,
        build: impl Fn(usize) -> String,
    ) -> &'static [String] {
        self.0[per_backend(backend)]
            .get_or_init(|| (0..count).map(|i| text_for(backend, build(i))).collect())
    }
}

/// Where a cache of statement texts keeps `backend`'s.
fn per_backend(backend: Backend) -> usize {
    match backend {
        Backend::Sqlite => 0,
        Backend::Postgres => 1,
    }
}

/// `text` as `backend` takes its parameters best: [`positional`] on SQLite, as built on
/// PostgreSQL.
fn text_for(backend: Backend, text: String) -> String {
    match backend {
        Backend::Sqlite => positional(&text),
        Backend::Postgres => text,
    }
}

/// SQLite: `text` with its parameters `$1`, `$2`, ... written as plain `?`, which SQLite
/// numbers by position. SQLite takes `$N` for a *named* parameter, and sqlx finds each one's
/// number by asking for its name, which SQLite looks up in a list of the statement's names:
/// quadratic in the parameters, about 2.5% of a database node's CPU with the 128 of a 32-row
/// INSERT of results (`perf`, 2026-11-28). Plain `?` bind in order (sqlx goes on counting
/// through a list of statements), so this needs each parameter once and in order, as the
/// builders here number them; it panics otherwise, when the text is first built.
fn positional(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut next = 1;
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let digits = rest[at + 1..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len() - at - 1);
        let number: usize = rest[at + 1..at + 1 + digits]
            .parse()
            .unwrap_or_else(|_| panic!("a `$` without a parameter number in {text}"));
        assert_eq!(number, next, "parameters out of order in {text}");
        out.push('?');
        next += 1;
        rest = &rest[at + 1 + digits..];
    }
    out.push_str(rest);
    out
}

/// SQLite: opens an executing transaction and reads every partition's progress, in one
/// hand-off to the connection's thread ([`begin_write`], then [`SELECT_ALL_PROGRESS`]).
pub(crate) const BEGIN_AND_READ_ALL_PROGRESS: &str = "BEGIN IMMEDIATE; SELECT partition_id, \
     last_seq, last_order FROM cloudbft_progress ORDER BY partition_id";

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
        assert!(insert_results(Backend::Postgres, 1).ends_with("VALUES ($1, $2, $3, $4)"));
        assert!(insert_results(Backend::Postgres, 64).ends_with("($253, $254, $255, $256)"));
        assert_eq!(
            insert_results(Backend::Postgres, 21).matches('(').count(),
            22
        );
    }

    #[test]
    fn one_update_moves_several_partitions_each_under_its_guard() {
        assert_eq!(
            update_progress(Backend::Postgres, 1),
            "UPDATE cloudbft_progress SET last_seq = CASE WHEN partition_id = $1 AND \
             last_seq = $2 THEN $3 END, last_order = CASE partition_id WHEN $4 THEN $5 END \
             WHERE partition_id IN ($6)"
        );
        assert_eq!(
            update_progress(Backend::Postgres, 2),
            "UPDATE cloudbft_progress SET last_seq = CASE WHEN partition_id = $1 AND \
             last_seq = $2 THEN $3 WHEN partition_id = $4 AND last_seq = $5 THEN $6 END, \
             last_order = CASE partition_id WHEN $7 THEN $8 WHEN $9 THEN $10 END \
             WHERE partition_id IN ($11, $12)"
        );
        assert!(update_progress(Backend::Postgres, MOST_PARTITIONS_PER_UPDATE).ends_with(", $96)"));
    }

    #[test]
    fn a_transaction_ends_in_one_list_numbered_through() {
        assert_eq!(store_move_commit(0, 0), "COMMIT");
        let both = store_move_commit(2, 1);
        assert!(
            both.starts_with(&format!("{}; UPDATE", insert_results(Backend::Sqlite, 2))),
            "{both}"
        );
        assert!(
            both.ends_with(
                "THEN ? END, last_order = CASE partition_id WHEN ? THEN ? \
                 END WHERE partition_id IN (?); COMMIT"
            ),
            "{both}"
        );
        assert_eq!(both.matches('?').count(), 14, "{both}");
        assert!(!both.contains('$'), "{both}");
        assert_eq!(
            store_move_commit(0, 1),
            format!("{}; COMMIT", update_progress(Backend::Sqlite, 1))
        );
        assert_eq!(
            store_move_commit(EXACT_ROWS, 0),
            format!("{}; COMMIT", insert_results(Backend::Sqlite, EXACT_ROWS))
        );
    }

    #[test]
    fn sqlite_texts_number_their_parameters_by_position() {
        assert_eq!(
            insert_results(Backend::Sqlite, 2),
            "INSERT INTO cloudbft_results (order_id, positions, operation_sha256, result) \
             VALUES (?, ?, ?, ?), (?, ?, ?, ?)"
        );
        let update = update_progress(Backend::Sqlite, MOST_PARTITIONS_PER_UPDATE);
        assert_eq!(update.matches('?').count(), 6 * MOST_PARTITIONS_PER_UPDATE);
        assert_eq!(
            positional("SELECT $1, $2 FROM t WHERE a IN ($3,$4)"),
            "SELECT ?, ? FROM t WHERE a IN (?,?)"
        );
        assert_eq!(positional("COMMIT"), "COMMIT");
    }

    #[test]
    #[should_panic(expected = "parameters out of order")]
    fn a_text_with_parameters_out_of_order_is_refused() {
        positional("UPDATE t SET a = $2 WHERE b = $1");
    }

    #[test]
    #[should_panic(expected = "without a parameter number")]
    fn a_dollar_without_a_number_is_refused() {
        positional("SELECT '$x'");
    }
}
