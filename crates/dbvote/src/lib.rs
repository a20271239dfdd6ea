//! The execution layer of a CloudBFT database node (the paper's section IV.D).
//!
//! A database node executes every operation the groups decided exactly once, in the global
//! order, against its own relational database, and answers with canonical result bytes so that
//! f+1 database nodes can be seen to agree. This crate is the part below the vote: given an
//! [`Execution`] (the order id, the operation's sequence number on every partition it touches,
//! and the operation bytes) the [`Executor`] runs it when its predecessors on those partitions
//! have run, in one database transaction that also records the progress and the result, so that
//! a crash leaves the database before or after the operation and never between. Operations on
//! disjoint partitions run concurrently; a multi-partition operation is ordered on every
//! partition and so runs alone (the paper's global lock).
//!
//! The voter ([`voter::VoterCore`], sans-IO) decides what to execute: an operation once f+1
//! members of the group that decided it sent the same COMMIT-DB.
//!
//! - [`app`]: the [`Application`] trait for deterministic transaction programs, and [`Backend`];
//! - [`bank`]: a small built-in bank application, partitioned by branch;
//! - [`canonical`]: the one encoding of operations and results;
//! - [`noop`]: operations that do no application work, to measure the protocol alone;
//! - [`executor`]: [`Executor`] over SQLite (embedded default, WAL) or PostgreSQL, via sqlx;
//! - [`postgres`]: creating a node's PostgreSQL database, and dropping a benchmark's;
//! - [`digest`]: the state digest that must be identical on every correct node;
//! - [`transfer`]: state transfer's snapshot and install (docs/state-transfer.md);
//! - [`unreplicated`]: the same executor behind a local sequencer, the baseline benchmarks
//!   compare the replicated system with;
//! - [`error`]: what can go wrong, and what to do about it.

pub mod app;
pub mod bank;
mod bookkeeping;
pub mod canonical;
pub mod digest;
pub mod error;
pub mod executor;
pub mod noop;
pub mod postgres;
pub mod testing;
pub mod transfer;
pub mod unreplicated;
pub mod voter;

pub use app::{AppRule, Application, Backend, BatchFailure, PartitionId};
pub use bank::{Bank, BankOp, BankResult};
pub use error::{AppError, DbError, ExecError};
pub use executor::{sqlite_url, Execution, Executor, Gap, Outcome, PartitionProgress, Progress};

/// The sqlx connection an [`Application`] runs its statements on. Re-exported so that
/// applications name the same sqlx version as the executor.
pub use sqlx::AnyConnection;

/// The sqlx this crate is built with, for applications' statements.
pub use sqlx;
