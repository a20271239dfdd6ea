//! The larger checks of the checkpoint anchor rule (`model::anchor`), too slow for the test
//! suite: 3 slots with 7 Byzantine messages (16.3 M states, 49 s in a release build on two
//! cores) and 4 slots (CHECKPOINTs at 1..=3) with 5 (30.7 M states, 103 s).
//!
//! `cargo run --release -p cloudbft-model --example anchor_deep_check`

use model::anchor::{Anchors, State};
use stateright::{Checker, Model};
use std::time::Instant;

fn main() {
    let three = Anchors::reported(7);
    let four = Anchors {
        slots: 4,
        checkpoints: 3,
        ..Anchors::reported(5)
    };
    for (name, model) in [("3 slots, 7", three), ("4 slots, 5", four)] {
        let start = Instant::now();
        let checker = model
            .checker()
            .symmetry_fn(State::representative)
            .spawn_dfs()
            .join();
        println!(
            "anchor reports (f+1), {name} Byzantine messages: {} unique states ({} generated), \
             {:.1?}",
            checker.unique_state_count(),
            checker.state_count(),
            start.elapsed()
        );
        checker.assert_properties();
    }
    println!("every property holds");
}
