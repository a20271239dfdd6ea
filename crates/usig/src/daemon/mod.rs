//! usigd: one daemon per physical machine that owns the machine's TPM (or, in development, soft
//! keys) and serves the VMs on that machine.
//!
//! Each VM identity has its own socket and its own chain (its own PCR), so VMs of different
//! groups that share one TPM never share a counter, and a VM can only use the identity whose
//! socket it was given. usigd keeps every counter position on disk and continues after its own
//! restart without reusing a counter.

pub mod client;
pub mod config;
pub mod protocol;
pub mod server;

pub use client::UsigdClient;
pub use config::UsigdConfig;
pub use server::{Usigd, UsigdStats};
