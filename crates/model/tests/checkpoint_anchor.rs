//! Exhaustive checks of where a VIEW-CHANGE's log may start once replicas take checkpoints (see
//! `model::anchor` for the model). Each check prints the number of states it explored;
//! refutations print a shortest counterexample.

use model::anchor::{Action, Anchors, LogStart, Msg, Sender, State, NO_LOSS};
use model::{harness, F};
use stateright::Path;

fn check_all(name: &str, model: Anchors) {
    harness::check_all(name, model, State::representative);
}

/// Finds a shortest counterexample to "no decided slot is lost" (breadth first) and prints it;
/// panics if there is none.
fn refute(name: &str, model: Anchors) -> Path<State, Action> {
    let path = harness::shortest_counterexample(name, &model, NO_LOSS, 40);
    show(&model, &path);
    assert_hidden_behind_an_anchor(&model, &path);
    path
}

fn show(model: &Anchors, path: &Path<State, Action>) {
    for action in path.clone().into_actions() {
        println!("  {action:?}");
    }
    let s = path.last_state();
    println!(
        "  Byzantine replica warranted (counter 1..): {:?}",
        s.byzantine
    );
    for r in 0..2 {
        let c = &s.correct[r];
        println!(
            "  correct {r}: processed 1..={}, COMMITs 1..={}, CHECKPOINT reports {:?}, stable {}, \
             decided {:?}",
            c.processed,
            c.committed,
            c.checkpoints,
            c.stable,
            model.decided(s, r)
        );
    }
    println!("  cut: {:?}", s.new_view);
}

/// The path's last state loses a decided slot behind a Byzantine log that starts at an
/// anchor.
fn assert_hidden_behind_an_anchor(model: &Anchors, path: &Path<State, Action>) {
    let s = path.last_state();
    let cut = s.new_view.expect("a NEW-VIEW");
    assert!(
        cut.anchor.is_some(),
        "the Byzantine log starts at an anchor"
    );
    assert!((0..2).any(|r| model.decided(s, r).iter().any(|d| !cut.keeps(d))));
}

/// The rule being implemented holds: f+1 reports of the sender's first CHECKPOINT at x,
/// CHECKPOINT slots increasing, with the span (COMMITs and shown PREPAREs within one interval
/// of the stable checkpoint a replica holds, and VIEW-CHANGEs showing more refused).
#[test]
fn anchor_reports_hold() {
    check_all(
        "anchor reports (f+1) with the span, 3 slots, 5 Byzantine messages",
        Anchors::reported(5),
    );
}

/// And without the span, as before it existed: the span only holds COMMITs back and refuses
/// more VIEW-CHANGEs, so it is not what keeps the anchors safe.
#[test]
fn anchor_reports_hold_without_the_span() {
    check_all(
        "anchor reports (f+1), no span, 3 slots, 5 Byzantine messages",
        Anchors::without_span(5),
    );
}

/// With the span, a correct VIEW-CHANGE must show its own stable checkpoint: one that showed a
/// lower one (as it could before the span) would leave out PREPAREs it COMMITted within the
/// span of its own, and a slot decided there would be lost. Shortest counterexample: correct
/// replica 0 takes checkpoint 1 (its CHECKPOINT and the Byzantine one's) as stable and COMMITs
/// slot 2 within its span, but its VIEW-CHANGE shows checkpoint 0 and so slot 1 only; the
/// Byzantine VIEW-CHANGE shows checkpoint 1 and nothing above it. Slot 2 is null, and correct
/// replica 1, catching up in view 0, decides it.
#[test]
fn a_view_change_showing_a_lower_checkpoint_than_its_own_is_refuted_with_the_span() {
    let model = Anchors {
        shows_own_stable: false,
        ..Anchors::reported(3)
    };
    let name = "span, correct VIEW-CHANGEs show any certified checkpoint";
    let path = harness::shortest_counterexample(name, &model, NO_LOSS, 40);
    show(&model, &path);
    let states = path.clone().into_states();
    let before = &states[states.len() - 2];
    let actions = path.into_actions();
    let Some(Action::NewView { view_changes }) = actions.last() else {
        panic!("the last step is a NEW-VIEW");
    };
    let below_own = view_changes.iter().any(|vc| match *vc {
        Sender::Correct { replica, low } => low < before.correct[replica].stable,
        Sender::Byzantine { .. } => false,
    });
    assert!(
        below_own,
        "a correct VIEW-CHANGE showed less than its stable checkpoint"
    );
}

/// The rule before the fix. Shortest counterexample: the Byzantine replica warrants CHECKPOINT 2
/// (so its COMMIT for slot 3 counts: watermark 1), COMMIT 3, then CHECKPOINT 1 (its counter 3),
/// and starts its log there under the stable checkpoint 2 (its CHECKPOINT 2 and a correct
/// one's): the log shows no COMMIT, the correct VIEW-CHANGE holds slots 1 and 2 only, so slot 3
/// is null; the other correct replica, which the NEW-VIEW has not reached yet, checkpoints 1
/// and 2, COMMITs slot 3 and decides it with the Byzantine COMMIT. (The Byzantine messages
/// need 3 counters; every check of the rule being implemented allows 5.)
#[test]
fn any_own_checkpoint_is_refuted() {
    refute("any own CHECKPOINT", Anchors::any_own_checkpoint(3));
}

/// The gap as docs/protocol.md describes it: even when the Byzantine replica's CHECKPOINT slots
/// never go down, a second CHECKPOINT at the same slot after a COMMIT (CHECKPOINT 1, COMMIT 3,
/// CHECKPOINT 1) hides that COMMIT.
#[test]
fn a_repeated_checkpoint_refutes_the_old_rule() {
    let model = Anchors {
        byzantine_slots_never_decrease: true,
        ..Anchors::any_own_checkpoint(3)
    };
    let path = refute("any own CHECKPOINT, Byzantine slots never decrease", model);
    let cps = path.last_state().byzantine.iter();
    let cps: Vec<_> = cps.filter(|m| matches!(m, Msg::Checkpoint(_))).collect();
    assert!(
        cps.windows(2).any(|w| w[0] == w[1]),
        "a repeated CHECKPOINT"
    );
}

/// Reports from f members: the Byzantine replica's own CHECKPOINT at x + K is enough, so this
/// is the rule before the fix again.
#[test]
fn f_reports_are_refuted() {
    let model = Anchors {
        log_start: LogStart::Reported(F),
        ..Anchors::reported(3)
    };
    refute("anchor reports (f)", model);
}

/// Reports of a CHECKPOINT that does not go above an earlier one: the Byzantine CHECKPOINT 2
/// lets its COMMIT for slot 3 count, a later CHECKPOINT 1 is its first at 1, and a correct
/// member that reports it (with the Byzantine replica's own CHECKPOINT 2) lets the log start
/// after the COMMIT.
#[test]
fn reports_without_increasing_slots_are_refuted() {
    let model = Anchors {
        increasing_slots: false,
        ..Anchors::reported(3)
    };
    refute("anchor reports (f+1), slots not increasing", model);
}

/// Receivers that count a peer's COMMIT whatever CHECKPOINTs came before it: the Byzantine
/// replica COMMITs slot 3 before any CHECKPOINT, then warrants its first CHECKPOINT at 1, which
/// correct members rightly report, and its log starts after the COMMIT. The anchor rule relies
/// on the receivers' watermark (`Checkpoints::peer_may_commit`).
#[test]
fn receivers_without_the_watermark_are_refuted() {
    let model = Anchors {
        receivers_check_watermark: false,
        ..Anchors::reported(3)
    };
    refute(
        "anchor reports (f+1), receivers ignore the watermark",
        model,
    );
}
