//! The larger checks of stable checkpoints between view changes (`model::repeated`), too slow
//! for the test suite (about 31 M states and 2.5 minutes in a release build on two cores: 5 to
//! 7 M and about 20 s per check, 50 s for the shortest counterexample, at depth 13): the lineage
//! rule as implemented (a VIEW-CHANGE's stable checkpoint on its base's history) with two old
//! PREPAREs, with two view-1 messages, and with a second NEW-VIEW of view 1; the first rule's
//! cut with replicas that enter view 2 from the cut's checkpoint (the mixed-view `low` alone is
//! safe); and a shortest counterexample to agreement for the first rule.
//!
//! `cargo run --release -p cloudbft-model --example checkpoint_deep_check`

use model::harness;
use model::repeated::{Repeated, State, AGREEMENT};

fn check(name: &str, model: Repeated) {
    harness::check_all(name, model, State::representative);
}

fn main() {
    check(
        "checkpoints on the base, 2 old PREPAREs, 1 view-1 message",
        Repeated::with_checkpoints(2, 1),
    );
    check(
        "checkpoints on the base, 1 old PREPARE, 2 view-1 messages",
        Repeated::with_checkpoints(1, 2),
    );
    check(
        "checkpoints on the base, 2 old PREPAREs, 1 view-1 message, a second NEW-VIEW",
        Repeated {
            second_new_view: true,
            ..Repeated::with_checkpoints(2, 1)
        },
    );
    check(
        "first rule's cut, replicas enter view 2 from its checkpoint, 2 old PREPAREs, 1 view-1 \
         message",
        Repeated {
            enter_from_own_checkpoint: false,
            ..Repeated::with_checkpoints_before_lineage(2, 1)
        },
    );
    let path = harness::shortest_counterexample(
        "first rule, 2 old PREPAREs, 1 view-1 message",
        &Repeated::with_checkpoints_before_lineage(2, 1),
        AGREEMENT,
        40,
    );
    for action in path.into_actions() {
        println!("  {action:?}");
    }
    println!("every check as expected");
}
