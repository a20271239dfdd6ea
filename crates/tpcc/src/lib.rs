//! TPC-C (the paper's evaluation workload and the demo's application) on the database nodes.
//!
//! This crate holds the parts that do not depend on the ordering layer: the [`schema`] with the
//! specification's table and column names, the deterministic [`random`] generator and its
//! specification helpers, the [loader](mod@load) that gives every database node byte-identical initial
//! data for a seed, and the twelve consistency conditions in [`mod@check`].
//!
//! Everything goes through sqlx's `Any` driver so that one code path runs on SQLite and on
//! PostgreSQL: only `BIGINT` and `TEXT` columns, `$N` placeholders, money and rates in integer
//! fixed point (see [`schema`]).

mod app;
pub mod check;
pub mod ledger;
pub mod load;
pub mod pages;
mod programs;
pub mod random;
pub mod schema;
pub mod txn;
pub mod workload;

pub use app::Tpcc;
pub use check::{check, CheckError, CheckResult};
pub use load::{load, LoadError, ScaleConfig};
pub use random::{NuRandConstants, TpccRng};
