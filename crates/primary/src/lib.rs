//! The primary of CloudBFT: orders client requests.
//!
//! [`core::PrimaryCore`] is a sans-IO state machine (requests and signed batches in, actions
//! out); a driver does the networking and calls the USIG.

pub mod admission;
pub mod core;
pub mod pacing;
