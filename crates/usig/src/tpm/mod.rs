//! TPM 2.0 backend: one PCR per identity as a hash chain, certified by quotes of a restricted
//! attestation key. See docs/usig.md for the construction and why it is equivocation-proof.

pub mod backend;
pub mod chain;
pub mod device;
pub mod swtpm;

pub use backend::{TpmBackend, TpmUsig};
