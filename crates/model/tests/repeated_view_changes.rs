//! Exhaustive checks of repeated view changes, view 0 → 1 → 2, with a Byzantine view-1 primary
//! (see `model::repeated` for the model). Each check prints the number of states it explored;
//! refutations print a shortest counterexample.

use model::harness;
use model::repeated::{
    no_loss, Action, Base, CutRule, Repeated, Sender, State, AGREEMENT, NO_LOSS,
};
use model::F;
use stateright::Path;

fn check_all(name: &str, model: Repeated) {
    harness::check_all(name, model, State::representative);
}

/// Finds a shortest counterexample to `property` (breadth first with an increasing depth
/// bound) and prints it; panics if there is none.
fn refute(name: &str, model: Repeated, property: &'static str) -> Path<State, Action> {
    let path = harness::shortest_counterexample(name, &model, property, 40);
    show(&path);
    path
}

fn show(path: &Path<State, Action>) {
    let s = path.last_state();
    println!("  old PREPAREs (counter 1..): {:?}", s.prepares);
    for action in path.clone().into_actions() {
        println!("  {action:?}");
    }
    println!(
        "  view-1 primary's messages after its NEW-VIEW: {:?}",
        s.view1
    );
    if let Some(cut) = s.new_view1 {
        let h = State::cut1_history(cut, 0);
        println!(
            "  view-1 cut and NEW-VIEW slot: {h:?}, orders {:?}",
            s.orders(&h)
        );
    }
    if let Some(cut) = &s.new_view2 {
        println!("  view-2 cut: {cut:?}, orders {:?}", s.orders(cut));
    }
    for (i, r) in s.correct.iter().enumerate() {
        println!(
            "  correct {i}: view {}, decided (slot, proposal) {:?}, COMMIT-DBs (order, request) \
             sent in views 0, 1, 2: {:?}",
            r.view, r.decided, r.sent
        );
    }
}

/// The VIEW-CHANGEs the view-2 NEW-VIEW of the path took, with their bases.
fn view2_bases(path: &Path<State, Action>) -> Vec<Base> {
    let actions = path.clone().into_actions();
    let senders = actions.iter().find_map(|a| match a {
        Action::NewView2 { view_changes } => Some(view_changes.clone()),
        _ => None,
    });
    let s = path.last_state();
    let base = |v: Sender| match v {
        Sender::Correct(r) => s.correct_view_change2(r).base,
        Sender::Byzantine(g) => s.byzantine[g as usize].view_change2.unwrap().base,
    };
    senders
        .expect("a NEW-VIEW of view 2")
        .into_iter()
        .map(base)
        .collect()
}

/// The rules as implemented hold: the view-1 cut keeps every view-0 decision, and the view-2
/// cut every decision of views 0 and 1 (the NEW-VIEW slot's included), with their order ids;
/// no order id gets two requests; no request two order ids.
#[test]
fn implemented_rules_hold_for_one_group() {
    check_all(
        "implemented, 1 group, 2 old PREPAREs, 1 view-1 message",
        Repeated::implemented(1, 2, 1),
    );
}

/// The same with a view-1 primary that may warrant a second NEW-VIEW of view 1, which only the
/// Byzantine replica can show as its base: the lowest NEW-VIEW counter among the highest base
/// view keeps everything.
#[test]
fn implemented_rules_hold_with_a_second_new_view() {
    let model = Repeated {
        second_new_view: true,
        ..Repeated::implemented(1, 1, 1)
    };
    check_all(
        "implemented, 1 group, 1 old PREPARE, 1 view-1 message, a second NEW-VIEW",
        model,
    );
}

/// Merging the VIEW-CHANGEs of the highest base view whatever NEW-VIEW they name. Shortest
/// counterexample: both correct replicas enter view 1 (cut [PREPARE 1]), one asks for view 2,
/// the other decides the NEW-VIEW slot (request 1 at order 1); the view-1 primary warrants a second NEW-VIEW with an
/// empty cut, the Byzantine replica shows it as its base, and the view-2 NEW-VIEW lists that
/// VIEW-CHANGE first: its NEW-VIEW slot takes slot 1, and request 1 has no order any more.
#[test]
fn any_new_view_of_the_highest_view_is_refuted() {
    let model = Repeated {
        second_new_view: true,
        cut_rule: CutRule::HighestViewAnyNewView,
        ..Repeated::implemented(1, 1, 1)
    };
    let path = refute("highest base view, any NEW-VIEW", model, NO_LOSS);
    assert!(
        view2_bases(&path).contains(&Base::View1 { after: 1 }),
        "the second NEW-VIEW is a base"
    );
}

/// Merging every VIEW-CHANGE slot by slot whatever its base view. Shortest counterexample: the
/// view-1 cut is [null, PREPARE 2] (the Byzantine VIEW-CHANGE shows only counter 2), both
/// correct replicas enter view 1 and one decides the NEW-VIEW slot (request 2 at order 1); the
/// Byzantine replica's VIEW-CHANGE for view 2 has base view 0 and shows PREPAREs 1 and 2,
/// which fill the null slot 1 of a correct replica's view-1 history: request 2 moves to
/// order 2.
#[test]
fn every_base_merged_is_refuted() {
    let model = Repeated {
        cut_rule: CutRule::AllBases,
        ..Repeated::implemented(1, 2, 1)
    };
    let path = refute("every base merged", model, NO_LOSS);
    let bases = view2_bases(&path);
    assert!(bases.contains(&Base::View0) && bases.iter().any(|&b| b != Base::View0));
}

/// Counting a peer's view-1 COMMIT warranted after its VIEW-CHANGE for view 2. Shortest
/// counterexample: the Byzantine replica sends a VIEW-CHANGE for view 2 with base view 0 and
/// nothing in it, then COMMITs the view-1 NEW-VIEW slot, which decides it for a correct
/// replica (request 1 at order 1); the view-2 NEW-VIEW takes that VIEW-CHANGE and one of a
/// correct replica that never processed anything: request 1 is not in the cut.
#[test]
fn commits_after_a_view_change_are_refuted() {
    let model = Repeated {
        commits_after_view_change: true,
        ..Repeated::implemented(1, 1, 1)
    };
    let path = refute("view-1 COMMITs after a VIEW-CHANGE counted", model, NO_LOSS);
    let actions = path.into_actions();
    let left = actions
        .iter()
        .position(|a| matches!(a, Action::ByzantineViewChange2 { .. }));
    let commit = actions
        .iter()
        .rposition(|a| matches!(a, Action::ByzantineCommit1 { .. }));
    assert!(left < commit, "a COMMIT after the VIEW-CHANGE");
}

/// Sending a new view's cut to the database nodes on entering the view, without f+1 COMMITs of
/// its NEW-VIEW slot. Shortest counterexample: the view-1 cut holds PREPAREs 1 and 2 (the
/// Byzantine VIEW-CHANGE shows both), a correct replica enters view 1 and sends request 1 at
/// order 1 and request 2 at order 2; the view-2 NEW-VIEW takes the other correct replica's
/// empty VIEW-CHANGE and a Byzantine one of base view 0 showing only PREPARE 2: request 2 at
/// order 1. Once that replica enters view 2, database nodes disagree at order 1 (and request 2
/// executes twice: the same run refutes "no double execution").
#[test]
fn an_uncommitted_new_view_slot_is_refuted() {
    let model = Repeated {
        commit_new_view_slot: false,
        ..Repeated::implemented(1, 2, 1)
    };
    for property in [NO_LOSS, AGREEMENT] {
        let path = refute("NEW-VIEW slot not committed", model.clone(), property);
        let s = path.last_state();
        let commits = s.correct.iter().filter(|r| r.processed1.is_some()).count()
            + usize::from(s.byzantine[0].commits1.contains(1));
        assert!(commits <= F, "the NEW-VIEW slot has fewer than f+1 COMMITs");
        if property == NO_LOSS {
            assert!(!no_loss(s));
        }
    }
}
