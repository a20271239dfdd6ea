//! Deterministic transaction programs ([`Application`]) and the database [`Backend`]s.
//!
//! # Why sqlx's `Any` driver and not an enum over `SqlitePool`/`PgPool`
//!
//! An application is written once and must run unchanged on SQLite nodes and PostgreSQL nodes
//! (a cluster may mix them, and the state digest must match across them). With `Any` it gets
//! one connection type, [`AnyConnection`], and one code path. The differences that matter were
//! checked against sqlx 0.9's sources:
//! - placeholders: SQLite accepts PostgreSQL's `$1, $2, ...` (sqlx-sqlite binds `$N` to the N-th
//!   argument), so every statement uses `$N`;
//! - integers: `i64` binds as `INT8` on PostgreSQL and `INTEGER` on SQLite; all columns are
//!   `BIGINT` (a `u64` is stored as `i64` and checked), and `INTEGER`/`SMALLINT` columns still
//!   decode as `i64`;
//! - bytes: `Vec<u8>` binds and decodes as a blob on both, but the column type must be spelled
//!   `BLOB` on SQLite and `BYTEA` on PostgreSQL, hence [`Application::schema`] gets the
//!   [`Backend`] (see [`Backend::bytes_type`]);
//! - what `Any` cannot do: PostgreSQL `NUMERIC`, `TIMESTAMP`, `UUID` and friends do not decode
//!   through `Any`. Applications keep money in integer cents and times as integers carried in
//!   the operation, which determinism requires anyway.
//!
//! An enum over the two pools would give each backend its native types but would make every
//! application write every statement twice, or hide both behind a wrapper as wide as `Any`.
//! The few places where SQL must differ (how to take the partition locks) live in the executor,
//! which knows its [`Backend`].

use std::future::Future;

use sqlx::AnyConnection;

use crate::error::{AppError, ExecError};

/// A data partition: TPC-C's warehouse, the bank's branch. A configuration of `n` partitions
/// numbers them `0..n`.
pub type PartitionId = u32;

/// Which database a node runs on, chosen from the URL scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// SQLite in a local file with write-ahead logging: the embedded default, so that one
    /// command runs a whole cluster.
    Sqlite,
    /// PostgreSQL: the production backend.
    Postgres,
}

impl Backend {
    /// The backend a URL names: `sqlite:` or `postgres://` / `postgresql://`.
    pub fn from_url(url: &str) -> Option<Backend> {
        if url.starts_with("sqlite:") {
            Some(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(Backend::Postgres)
        } else {
            None
        }
    }

    /// The backend behind an open connection (what an application asks when one statement has
    /// to differ).
    pub fn of(connection: &AnyConnection) -> Option<Backend> {
        match connection.backend_name() {
            "SQLite" => Some(Backend::Sqlite),
            "PostgreSQL" => Some(Backend::Postgres),
            _ => None,
        }
    }

    /// The column type for byte strings: `BLOB` on SQLite, `BYTEA` on PostgreSQL.
    pub fn bytes_type(self) -> &'static str {
        match self {
            Backend::Sqlite => "BLOB",
            Backend::Postgres => "BYTEA",
        }
    }
}

/// A deterministic transaction program that database nodes execute in the global order.
///
/// Every correct node must reach the same state and the same result bytes from the same
/// operations, so an implementation:
/// - reads no clock, no randomness and no database default that varies (`now()`,
///   `random()`, autoincrement gaps): all such inputs are in the operation bytes;
/// - touches only rows of the partitions that [`partitions`](Self::partitions) declares (the
///   executor runs operations on other partitions concurrently);
/// - returns canonical result bytes (postcard over serde is canonical for the types used here);
/// - uses only column types that sqlx's `Any` driver decodes on both backends (integers, text,
///   byte strings, booleans), and the `$N` placeholder style (see the [module docs](self)).
///
/// Generic rather than object-safe: [`execute`](Self::execute) returns a `Send` future, so an
/// [`Executor`](crate::Executor) can be driven from any tokio task.
pub trait Application: Send + Sync + 'static {
    /// A short stable name, recorded in the database so that a node cannot be pointed at the
    /// database of another application.
    fn name(&self) -> &'static str;

    /// Idempotent statements (`CREATE TABLE IF NOT EXISTS`, `CREATE INDEX IF NOT EXISTS`) that
    /// create the application's tables, run at every open.
    fn schema(&self, backend: Backend) -> Vec<String>;

    /// The partitions the operation declares it touches. Malformed bytes are an [`AppError`],
    /// never a panic: the bytes come from clients through the ordering layer.
    fn partitions(&self, operation: &[u8]) -> Result<Vec<PartitionId>, AppError>;

    /// Runs the operation on `tx`, a connection inside the executor's open transaction, and
    /// returns its canonical result bytes.
    ///
    /// A business failure (insufficient funds, unknown account) is a normal result, because it
    /// is the same on every correct node. `Err` means the infrastructure failed: the executor
    /// rolls the transaction back and nothing of the operation is kept.
    fn execute(
        &self,
        tx: &mut AnyConnection,
        operation: &[u8],
    ) -> impl Future<Output = Result<Vec<u8>, ExecError>> + Send;

    /// Runs `operations` in this order on `tx`, with the results that
    /// [`execute`](Self::execute) would return one after the other, and leaves the same state.
    /// The executor hands over each run of consecutive operations it may execute now (a chain
    /// of one partition, usually), so that an application can cost fewer statements per
    /// operation: each statement is a hand-off to SQLite's thread and back, or a round trip to
    /// PostgreSQL. `Err` names the operation that could not run; as with `execute`, the
    /// executor then rolls the whole transaction back.
    fn execute_all(
        &self,
        tx: &mut AnyConnection,
        operations: &[&[u8]],
    ) -> impl Future<Output = Result<Vec<Vec<u8>>, BatchFailure>> + Send {
        async move {
            let mut results = Vec::with_capacity(operations.len());
            for (index, operation) in operations.iter().enumerate() {
                let result = (self.execute(tx, operation).await)
                    .map_err(|error| BatchFailure { index, error })?;
                results.push(result);
            }
            Ok(results)
        }
    }

    /// The results of `operations`, as [`execute_all`](Self::execute_all) would return them,
    /// if this application computes them without reading or writing any row; `None` (the
    /// default) if it needs the database.
    ///
    /// The executor needs no statement of the application's inside the transaction then, so on
    /// SQLite it can open the transaction, store the results, move the progress and commit in
    /// one hand-off to the connection's thread instead of two (docs/performance.md, item 43).
    /// The method gets no connection, so an application cannot run a statement here by mistake.
    fn results_without_database(
        &self,
        operations: &[&[u8]],
    ) -> Option<Result<Vec<Vec<u8>>, BatchFailure>> {
        let _ = operations;
        None
    }

    /// The tables that make up the application state, each with the `ORDER BY` clause of its
    /// key columns, for the [state digest](crate::digest).
    fn state_tables(&self) -> Vec<(&'static str, &'static str)>;
}

/// Why [`Application::execute_all`] failed: the operation at `index` of the batch could not run.
#[derive(Debug)]
pub struct BatchFailure {
    /// The failed operation's place in the batch.
    pub index: usize,
    /// What went wrong.
    pub error: ExecError,
}

/// An application's partition rule as the ordering layer applies it (the primary, the replicas
/// and the voters all derive partitions the same way).
pub struct AppRule<A>(pub A);

impl<A: Application> proto::PartitionRule for AppRule<A> {
    fn partitions(&self, operation: &[u8]) -> Option<Vec<PartitionId>> {
        let mut partitions = self.0.partitions(operation).ok()?;
        partitions.sort_unstable();
        partitions.dedup();
        (!partitions.is_empty()).then_some(partitions)
    }
}
