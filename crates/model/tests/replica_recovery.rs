//! Exhaustive checks of when a VIEW-CHANGE of a replica that crashed with amnesia (or rebooted
//! on purpose) may count (see `model::recovery` for the model). Each check prints the number of
//! states it explored; refutations print a shortest counterexample.

use model::harness;
use model::recovery::{decided, Action, Recovery, Rule, State, NO_LOSS};
use stateright::Path;

/// The design: the stable checkpoint a restarted replica's VIEW-CHANGE shows covers its JOIN.
const DESIGN: Rule = Rule::Covers { slack: 0 };

/// Explores every state, depth first, one state per class of interchangeable correct members;
/// then the safety property holds and every `sometimes` property was seen.
fn check_all(name: &str, model: Recovery) {
    let symmetry = match model.byzantine {
        true => State::representative_byzantine,
        false => State::representative,
    };
    harness::check_all(name, model, symmetry);
}

/// Finds a shortest counterexample to "no decided slot is lost" (breadth first with an
/// increasing depth bound: stateright's BFS keeps the last violation it met in a block of
/// states, not the first), prints it and checks its shape: a decided slot that the cut loses was
/// decided with a COMMIT its sender forgot. Panics if there is none.
fn refute(name: &str, model: Recovery) -> Path<State, Action> {
    let path = harness::shortest_counterexample(name, &model, NO_LOSS, 30);
    show(&model, &path);
    let s = path.last_state();
    let cut = s.new_view.expect("a NEW-VIEW");
    let lost: Vec<_> = decided(&model, s)
        .iter()
        .filter(|&d| !cut.keeps(d))
        .collect();
    assert!(
        lost.iter()
            .any(|&d| s.replicas.iter().any(|r| r.old.contains(d))),
        "{name}: a lost slot was decided with a forgotten COMMIT"
    );
    path
}

fn show(model: &Recovery, path: &Path<State, Action>) {
    for action in path.clone().into_actions() {
        println!("  {action:?}");
    }
    let s = path.last_state();
    for (i, r) in s.replicas.iter().enumerate() {
        println!(
            "  replica {i}: {:?}, restarted {} times, JOIN at {:?}, from checkpoint {} processed \
             up to {}, forgotten COMMITs {:?}, decided {:?}, CHECKPOINTs {:?}{}",
            r.status,
            r.restarts,
            r.join,
            r.base,
            r.processed,
            r.old,
            r.durable,
            r.signed,
            if r.in_new_view {
                ", in the NEW-VIEW"
            } else {
                ""
            }
        );
    }
    println!(
        "  stable checkpoints {:?}, cut {:?}",
        model.certified(s),
        s.new_view
    );
}

/// The design with amnesia, within the fault budget: 4 slots, K = 1 (CHECKPOINTs at 1..=3), up
/// to 3 crashes (one replica recovers and is covered, then another crashes, ...).
#[test]
fn covered_join_holds_with_amnesia() {
    check_all(
        "JOIN covered, amnesia, 4 slots, K = 1, 3 crashes",
        Recovery::amnesia(DESIGN, 4, 1, 3),
    );
}

/// The same with K = 2: 5 slots, CHECKPOINTs at 2 and 4.
#[test]
fn covered_join_holds_with_amnesia_and_two_slot_intervals() {
    check_all(
        "JOIN covered, amnesia, 5 slots, K = 2, 2 crashes",
        Recovery::amnesia(DESIGN, 5, 2, 2),
    );
}

/// The design with a Byzantine member that reboots on purpose (twice) to forget its COMMITs,
/// and otherwise warrants COMMITs and CHECKPOINTs for any slot in any order.
#[test]
fn covered_join_holds_with_a_byzantine_rebooter() {
    check_all(
        "JOIN covered, Byzantine reboots, 4 slots, K = 1, 2 reboots",
        Recovery::byzantine(DESIGN, 4, 1, 2),
    );
}

/// Beyond the fault budget: replicas crash at any time (3 crashes, several uncovered at once),
/// and the Byzantine member with a correct one crashing. The property still holds: the budget
/// is for liveness (f+1 VIEW-CHANGEs that count), not for keeping decided slots.
#[test]
fn covered_join_holds_beyond_the_fault_budget() {
    check_all(
        "JOIN covered, amnesia without budget, 4 slots, K = 1, 3 crashes",
        Recovery {
            budget: false,
            ..Recovery::amnesia(DESIGN, 4, 1, 3)
        },
    );
    check_all(
        "JOIN covered, Byzantine reboots and a crash, no budget, 3 slots, K = 1",
        Recovery {
            budget: false,
            crashes: 1,
            ..Recovery::byzantine(DESIGN, 3, 1, 1)
        },
    );
}

/// Slack 1 (`low ≥ J − 1`) holds too: the JOIN's own slot is never forgotten (its PREPARE is
/// warranted after the JOIN). The design's `low ≥ J` is what the order book can check (the
/// checkpoint's book records the incarnation).
#[test]
fn a_checkpoint_just_below_the_join_holds() {
    check_all(
        "checkpoint at J − 1, amnesia, 4 slots, K = 1, 2 crashes",
        Recovery::amnesia(Rule::Covers { slack: 1 }, 4, 1, 2),
    );
    check_all(
        "checkpoint at J − 1, Byzantine reboots, 4 slots, K = 1, 1 reboot",
        Recovery::byzantine(Rule::Covers { slack: 1 }, 4, 1, 1),
    );
}

/// Re-processing instead of a covering checkpoint holds: a VIEW-CHANGE counts once its stable
/// checkpoint or the PREPAREs its new incarnation shows reach the JOIN.
#[test]
fn replay_up_to_the_join_holds() {
    check_all(
        "replay to the JOIN, amnesia, 4 slots, K = 1, 1 crash",
        Recovery::amnesia(Rule::Replay, 4, 1, 1),
    );
    check_all(
        "replay to the JOIN, Byzantine reboots, 4 slots, K = 1, 1 reboot",
        Recovery::byzantine(Rule::Replay, 4, 1, 1),
    );
}

/// (a) Counting a VIEW-CHANGE once the JOIN is ordered. Shortest counterexample: replica 2
/// COMMITs slot 1 and crashes; replica 1 processes slot 1 and decides it with that COMMIT (still
/// in flight); replica 2's JOIN is ordered; the NEW-VIEW takes replica 2's VIEW-CHANGE (new
/// incarnation: nothing) and replica 0's (it never processed slot 1): slot 1 is null in the cut.
#[test]
fn counting_once_the_join_is_ordered_is_refuted() {
    refute(
        "JOIN ordered, amnesia",
        Recovery::amnesia(Rule::JoinOrdered, 3, 1, 1),
    );
}

/// (b) No JOIN: the restarted replica starts a new log and counts at once; the same loss
/// without a JOIN. A Byzantine member does the same on purpose (COMMIT slot 1, reboot).
#[test]
fn restarting_without_a_join_is_refuted() {
    refute("no JOIN, amnesia", Recovery::amnesia(Rule::NoJoin, 3, 1, 1));
    refute(
        "no JOIN, Byzantine reboots",
        Recovery::byzantine(Rule::NoJoin, 3, 1, 1),
    );
}

/// The durable decision log instead of the JOIN: the same run as (a); the crashed replica had
/// COMMITted slot 1 but not decided it (no other COMMIT had reached it), so its decision log
/// names nothing to cover.
#[test]
fn covering_the_decision_log_is_refuted() {
    refute(
        "checkpoint covers the decision log, amnesia",
        Recovery::amnesia(Rule::DecisionLog, 3, 1, 1),
    );
}

/// Installing any stable checkpoint (below the JOIN): replica 0 COMMITs slots 1 and 2 and
/// checkpoints 1, crashes and JOINs at 3; replica 1 decides slot 2 with replica 0's COMMIT and
/// makes checkpoint 1 stable; replica 0's VIEW-CHANGE (checkpoint 1, nothing above) and replica
/// 2's (nothing) lose slot 2.
#[test]
fn any_stable_checkpoint_is_refuted() {
    refute(
        "any stable checkpoint, amnesia",
        Recovery::amnesia(Rule::AnyStableCheckpoint, 3, 1, 1),
    );
}

/// Slack 2 (`low ≥ J − 2`): the slot just below the JOIN may be forgotten (JOIN at 2, slot 1
/// lost as in (a), with no checkpoint at all).
#[test]
fn a_checkpoint_two_below_the_join_is_refuted() {
    refute(
        "checkpoint at J − 2, amnesia",
        Recovery::amnesia(Rule::Covers { slack: 2 }, 3, 1, 1),
    );
}
