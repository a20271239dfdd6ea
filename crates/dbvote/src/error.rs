//! Errors of the execution layer.
//!
//! Three kinds, by who can act on them:
//! - [`AppError`]: the operation bytes are not a valid operation of the application. Every
//!   correct node decides this identically, so the ordering layer (which calls
//!   [`Application::partitions`](crate::Application::partitions) to route a request) must refuse
//!   such a request before it is ordered.
//! - [`ExecError`]: the application could not run an operation because the infrastructure
//!   failed; its transaction is rolled back and the operation can be retried.
//! - [`DbError`]: everything the [`Executor`](crate::Executor) reports, naming the database
//!   (password removed) and what to do.

use crate::PartitionId;

/// The operation bytes do not decode to an operation of this application.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The bytes are not a canonical encoding of an operation.
    #[error("malformed {app} operation ({len} bytes): {reason}")]
    Malformed {
        /// The application's name.
        app: &'static str,
        /// Length of the rejected bytes.
        len: usize,
        /// What the decoder found wrong.
        reason: String,
    },
}

/// An application failed to run an operation; its transaction is rolled back.
///
/// Business outcomes (insufficient funds, unknown account) are results, never an `ExecError`: a
/// result must be identical on every correct node, while an `ExecError` depends on the node.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The database failed; nothing of the operation was kept.
    #[error("database error: {0}")]
    Sql(#[from] sqlx::Error),
    /// The operation bytes are malformed (the executor checks this before running, so an
    /// application only reports it if its two decoders disagree).
    #[error(transparent)]
    Malformed(#[from] AppError),
    /// The application's tables hold something it never writes.
    #[error("application state is corrupt: {0}")]
    Corrupt(String),
}

/// Why the [`Executor`](crate::Executor) could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The URL names no supported database.
    #[error(
        "unsupported database URL `{url}`: use `sqlite:PATH?mode=rwc` (embedded, the default) or \
         `postgres://USER:PASSWORD@HOST:PORT/DATABASE`"
    )]
    UnsupportedUrl {
        /// The URL, password removed.
        url: String,
    },
    /// The database could not be opened or reached.
    #[error(
        "cannot open the database at `{url}`: {source}; for SQLite check that the directory \
         exists and is writable and that the URL has `?mode=rwc` to create the file; for \
         PostgreSQL check that the server runs and accepts this user (`.ci/postgres-up` sets up \
         a local one)"
    )]
    Connect {
        /// The URL, password removed.
        url: String,
        /// What sqlx reported.
        source: sqlx::Error,
    },
    /// A PostgreSQL database could not be dropped (`postgres::drop_database`).
    #[error(
        "cannot drop the database `{url}`: {source}; the role must own it (or be a superuser), \
         and the server must be reachable"
    )]
    Drop {
        /// The URL, password removed.
        url: String,
        /// What sqlx reported.
        source: sqlx::Error,
    },
    /// A statement of the executor's own failed.
    #[error("database `{url}` failed while {during}: {source}; the operation was rolled back, retry once the database is healthy")]
    Sql {
        /// The URL, password removed.
        url: String,
        /// What the executor was doing.
        during: &'static str,
        /// What sqlx reported.
        source: sqlx::Error,
    },
    /// A schema statement of the application or of the bookkeeping failed.
    #[error("database `{url}`: creating the schema failed at `{statement}`: {source}")]
    Schema {
        /// The URL, password removed.
        url: String,
        /// The statement that failed.
        statement: String,
        /// What sqlx reported.
        source: sqlx::Error,
    },
    /// SQLite refused write-ahead logging (for example on a read-only or network file system).
    #[error("SQLite database `{url}` runs in journal mode `{mode}`, not WAL; put the file on a local, writable file system")]
    NoWal {
        /// The URL.
        url: String,
        /// The journal mode SQLite reported.
        mode: String,
    },
    /// The database was initialised for another application or partition count.
    #[error("database `{url}` holds {what} `{found}` but this node is configured with `{expected}`; point the node at its own database or at a fresh one")]
    Mismatch {
        /// The URL, password removed.
        url: String,
        /// Which setting differs.
        what: &'static str,
        /// What the database holds.
        found: String,
        /// What the node was opened with.
        expected: String,
    },
    /// The configuration itself is unusable.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The execution is not well formed (positions unsorted, out of range, not covering what
    /// the operation touches). Nothing was executed; a correct voter never passes such a thing.
    #[error("execution of order {order} is invalid: {reason}; nothing was executed (the ordering layer produced it: reject the decision)")]
    InvalidExecution {
        /// The order id.
        order: u64,
        /// What is wrong.
        reason: String,
    },
    /// The operation bytes are malformed. Nothing was executed.
    #[error("execution of order {order}: {source}; nothing was executed (the ordering layer must reject such requests before ordering them)")]
    Malformed {
        /// The order id.
        order: u64,
        /// What the application reported.
        source: AppError,
    },
    /// The execution contradicts what this node already executed: the same order with other
    /// positions, or a position already used by another order.
    #[error("order {order} conflicts with what this node executed: {reason}; nothing was executed (two different decisions for one slot: investigate the primary and the groups)")]
    Conflict {
        /// The order id.
        order: u64,
        /// What it conflicts with.
        reason: String,
    },
    /// The application failed; its transaction was rolled back and can be retried.
    #[error("executing order {order} on `{url}` failed and was rolled back: {source}; retry once the database is healthy")]
    Execute {
        /// The order id.
        order: u64,
        /// The URL, password removed.
        url: String,
        /// What the application reported.
        source: ExecError,
    },
    /// The bookkeeping tables hold something the executor never writes.
    #[error("database `{url}` is corrupt: {reason}; restore it from a correct database node")]
    Corrupt {
        /// The URL, password removed.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// Rows received by state transfer do not hash to the digest f+1 database nodes signed (a
    /// Byzantine or broken sender). Nothing was installed.
    #[error("the state transferred for order {order} does not match the digest f+1 database nodes signed; rolled back, the old state is intact (ask another sender)")]
    StateMismatch {
        /// The order the state is for.
        order: u64,
    },
    /// Rows received by state transfer cannot be installed (unknown table, bad column names,
    /// rows that do not fit). Nothing was installed.
    #[error("the state transferred for order {order} is malformed: {reason}; rolled back, the old state is intact (ask another sender)")]
    InvalidState {
        /// The order the state is for.
        order: u64,
        /// What is wrong.
        reason: String,
    },
    /// A partition named by the progress table is outside the configuration.
    #[error("partition {partition} is outside the configuration of {partitions} partitions")]
    NoSuchPartition {
        /// The partition.
        partition: PartitionId,
        /// The configured count.
        partitions: u32,
    },
}
