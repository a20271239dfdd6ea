//! A CloudBFT group replica.
//!
//! - [`order`]: the global order and per-partition positions every replica derives from the
//!   primary's PREPAREs;
//! - [`core::ReplicaCore`]: the sans-IO agreement core (PREPARE, COMMIT, COMMIT-DB,
//!   REPLY-COMMIT-DB, REPLY);
//! - [`log::DecisionLog`]: the durable log of accepted decisions (one fsync per batch);
//! - [`render::Renderer`]: deterministic page rendering from f+1 matching database results.

pub mod checkpoint;
pub mod core;
pub mod log;
pub mod order;
pub mod render;
pub mod view;
