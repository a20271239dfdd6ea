//! The larger check, too slow for the test suite (about 53 M states, ~9 minutes in a debug
//! build on two cores): the chained COMMIT rule with 2 groups and 3 PREPAREs.
//!
//! `cargo run --release -p cloudbft-model --example deep_check`

use model::{CloudBft, State};
use stateright::{Checker, Model};
use std::time::Instant;

fn main() {
    let start = Instant::now();
    let checker = CloudBft::chained(2, 3)
        .checker()
        .symmetry_fn(State::representative)
        .spawn_dfs()
        .join();
    println!(
        "chained, 2 groups, 3 PREPAREs: {} unique states ({} generated), {:.1?}",
        checker.unique_state_count(),
        checker.state_count(),
        start.elapsed()
    );
    checker.assert_properties();
    println!("every property holds");
}
