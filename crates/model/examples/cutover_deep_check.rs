//! The larger checks of the cut-over of online reconfiguration (`model::cutover`), too slow for
//! the test suite (about 4.5 minutes in a release build on two shared cores): 3 old PREPAREs
//! with 1 of the new primary and 1 order of epoch e+1 (6.3 M states, 47 s), also with group 0
//! removed at the cut instead of the groups swapping partitions (6.3 M, 51 s), 2 of each (2.1
//! M, 13 s), and one group agreeing on the RECONFIGURE's slot instead of every group, which
//! holds too (5.9 M and 5.8 M).
//!
//! `cargo run --release -p cloudbft-model --example cutover_deep_check`

use model::cutover::{Cutover, ReconfigureAgreement, State};
use model::harness;

fn check(name: &str, model: Cutover) {
    harness::check_all(name, model, State::representative);
}

fn main() {
    check(
        "as implemented, 3 old PREPAREs, 1 in view 1, 1 in e+1",
        Cutover::implemented(3, 1, 1),
    );
    check(
        "as implemented, 2 old PREPAREs, 2 in view 1, 2 in e+1",
        Cutover::implemented(2, 2, 2),
    );
    check(
        "as implemented, 3 old PREPAREs, 1 in view 1, 1 in e+1, group 0 removed",
        Cutover {
            next_assignment: [1, 1],
            ..Cutover::implemented(3, 1, 1)
        },
    );
    check(
        "only group 0 agrees on the RECONFIGURE, 3 old PREPAREs, 1 in view 1, 1 in e+1",
        Cutover {
            agreement: ReconfigureAgreement::OneGroup(0),
            ..Cutover::implemented(3, 1, 1)
        },
    );
    println!("every property holds");
}
