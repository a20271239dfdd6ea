//! A deterministic simulation of a whole CloudBFT cluster over the sans-IO cores.
//!
//! One seeded random number generator drives an in-memory network that loses, duplicates,
//! delays and reorders messages; a run with the same [`Scenario`] replays exactly. Database
//! nodes execute with [`model::ModelDb`], an in-memory stand-in for the SQL executor (the real
//! executor is tested against SQLite and PostgreSQL in `crates/dbvote`). Byzantine behaviour is
//! injected at the boundary of a node's core: what it sends is altered and re-signed with its
//! own key, which is exactly what a compromised node can do.
//!
//! Online reconfiguration runs here too: an [`operator::Operator`] moves the cluster to the
//! shapes a scenario names ([`Reshape`]) with the real operator's steps and configuration
//! function, every node switches epochs on its own CONFIGURE, spares join, removed replicas
//! finish their epoch's work and stop, and clients follow the epochs; [`check_reconfigured`]
//! asserts what must hold across the cut.

pub mod checks;
pub mod inproc;
pub mod model;
pub mod net;
pub mod operator;
pub mod run;

pub use checks::{check, check_reconfigured};
pub use operator::Reconfigured;
pub use run::{explored_seeds, run, Fault, Outcome, Reshape, Scenario};
