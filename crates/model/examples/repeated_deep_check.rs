//! The larger checks of repeated view changes, too slow for the test suite (about 34 M states,
//! 1.5 minutes in a release build on two cores): two view-1 messages, a second NEW-VIEW of view
//! 1 with two old PREPAREs, and two of each.
//!
//! `cargo run --release -p cloudbft-model --example repeated_deep_check`

use model::repeated::{Repeated, State};
use stateright::{Checker, Model};
use std::time::Instant;

fn check(name: &str, model: Repeated) {
    let start = Instant::now();
    let checker = model
        .checker()
        .symmetry_fn(State::representative)
        .spawn_dfs()
        .join();
    println!(
        "{name}: {} unique states ({} generated), {:.1?}",
        checker.unique_state_count(),
        checker.state_count(),
        start.elapsed()
    );
    checker.assert_properties();
}

fn main() {
    check(
        "1 group, 1 old PREPARE, 2 view-1 messages",
        Repeated::implemented(1, 1, 2),
    );
    check(
        "1 group, 2 old PREPAREs, 1 view-1 message, a second NEW-VIEW",
        Repeated {
            second_new_view: true,
            ..Repeated::implemented(1, 2, 1)
        },
    );
    check(
        "1 group, 2 old PREPAREs, 2 view-1 messages",
        Repeated::implemented(1, 2, 2),
    );
    println!("every property holds");
}
