//! Stable checkpoints between two view changes (see `model::repeated`, "Checkpoints between
//! the view changes"): view 0 → 1 → 2, a checkpoint of view 1 becomes stable, VIEW-CHANGEs for
//! view 2 are based on it. Each check prints the number of states it explored; refutations
//! print a shortest counterexample, the replayed scenarios every step.

use model::harness;
use model::repeated::{
    agreement, Action, Base, Low, LowRule, Repeated, Sender, State, ViewChange2, NO_LOSS,
};
use model::F;
use stateright::{Model, Path};

fn check_all(name: &str, model: Repeated) {
    harness::check_all(name, model, State::representative);
}

fn refute(name: &str, model: Repeated, property: &'static str) -> Path<State, Action> {
    let path = harness::shortest_counterexample(name, &model, property, 40);
    for action in path.clone().into_actions() {
        println!("  {action:?}");
    }
    show(path.last_state());
    path
}

fn show(s: &State) {
    println!("  old PREPAREs (counter 1..): {:?}", s.prepares);
    println!(
        "  view-1 primary's messages after its NEW-VIEW: {:?}",
        s.view1
    );
    println!("  true view-1 history: {:?}", s.true_history());
    println!("  stable checkpoints of view 1 (slots): {:?}", s.stable);
    if let Some(cut) = &s.new_view2 {
        println!(
            "  view-2 cut: {cut:?} (stable checkpoint at {}), orders {:?}",
            s.low2,
            s.orders(cut)
        );
    }
    for (i, r) in s.correct.iter().enumerate() {
        println!(
            "  correct {i}: view {}, entered view 2 from the checkpoint at {}, COMMIT-DBs \
             (order, request) sent in views 0, 1, 2: {:?}",
            r.view, r.start2, r.sent
        );
    }
}

/// Replays `actions` from the initial state whose old PREPAREs carry distinct requests,
/// checking that the model allows each step; returns the last state.
fn replay(model: &Repeated, actions: &[Action]) -> State {
    let distinct = |s: &State| {
        let mut requests: Vec<_> = s.prepares.iter().map(|p| p.request).collect();
        requests.sort();
        requests.dedup();
        requests.len() == s.prepares.len()
    };
    let mut s = model.init_states().into_iter().find(distinct).unwrap();
    for action in actions {
        let mut enabled = Vec::new();
        model.actions(&s, &mut enabled);
        assert!(
            enabled.contains(action),
            "{action:?} is not enabled in {s:?}"
        );
        println!("  {action:?}");
        s = model.next_state(&s, action.clone()).unwrap();
    }
    show(&s);
    s
}

/// The Byzantine member's VIEW-CHANGE for view 2 with base view 0 and the view-1 stable
/// checkpoint at `low`, showing old counter `shows`.
fn view0_based(low: u8, shows: u8) -> Action {
    let mut counters = model::prepare::Counters::default();
    counters.insert(shows);
    Action::ByzantineViewChange2 {
        group: 0,
        view_change: ViewChange2 {
            base: Base::View0,
            low: Low {
                at: low,
                nulled: Default::default(),
            },
            shows: counters,
        },
    }
}

/// **The first rule loses agreement** (before CHECKPOINTs named their lineage) when a stable checkpoint of view 1 is the low of a
/// VIEW-CHANGE of base view 0 and a replica enters view 2 from a higher checkpoint of its own.
/// Correct replica 1 enters view 1 (empty cut) and decides the NEW-VIEW slot 1 with the
/// Byzantine member's COMMIT; the view-1 primary's next message is no PREPARE (slot 2 null), so
/// replica 1 CHECKPOINTs slots 1 and 2, both stable with the Byzantine member's CHECKPOINTs.
/// The Byzantine member sends a VIEW-CHANGE of base view 0 with the stable checkpoint at 1
/// (its log starts at an anchor after its view-1 COMMIT, which is at the checkpoint) showing old
/// counter 2; correct replica 0 never entered view 1 (base view 0, nothing processed). The
/// view-2 NEW-VIEW takes these two: its cut is the checkpoint at 1, then old counter 2 at slot
/// 2. Replica 0 installs the cut (request 2 at order 1); replica 1 keeps its own stable
/// checkpoint at 2 (`enter`: the later of the cut's and its own) where slot 2 is null. The
/// view-2 primary's first request gets order 2 at replica 0 and order 1 at replica 1: each
/// decides it with the Byzantine member's COMMIT, and order 1 executes request 2 at some
/// database nodes and the fresh request at others.
#[test]
fn the_first_rule_loses_agreement_with_a_checkpoint_between_views() {
    let model = Repeated::with_checkpoints_before_lineage(2, 1);
    let to = |replica, to| Action::ViewChange {
        replica,
        to,
        low: 0,
    };
    let s = replay(
        &model,
        &[
            to(0, 1),
            to(0, 2),
            to(1, 1),
            Action::NewView1 {
                view_changes: vec![Sender::Correct(0), Sender::Correct(1)],
            },
            Action::Accept {
                replica: 1,
                view: 1,
                start: 0,
            },
            Action::ByzantineCommit1 {
                group: 0,
                position: 1,
            },
            view0_based(1, 2),
            Action::View1Message(model::repeated::View1Message::Other),
            Action::Prepare1 { replica: 1 },
            Action::NewView2 {
                view_changes: vec![Sender::Correct(0), Sender::Byzantine(0)],
            },
            Action::Accept {
                replica: 0,
                view: 2,
                start: 1,
            },
            Action::Accept {
                replica: 1,
                view: 2,
                start: 2,
            },
        ],
    );
    assert_eq!(s.low2, 1);
    assert!(!agreement(&s));
}

/// The same with the checkpoint interval K = 1 taken literally: the Byzantine member's log can
/// start at an anchor above its view-1 COMMIT only under a stable checkpoint at slot 2 or
/// higher (an anchored CHECKPOINT at x ≤ low − K, reported at x + K), so the scenario needs
/// three old PREPAREs and two view-1 null slots: cut at 2, replica 1's checkpoint at 3.
#[test]
fn the_first_rule_loses_agreement_with_k_1() {
    let model = Repeated {
        min_anchored_low: 2,
        ..Repeated::with_checkpoints_before_lineage(3, 2)
    };
    let to = |replica, to| Action::ViewChange {
        replica,
        to,
        low: 0,
    };
    let other = Action::View1Message(model::repeated::View1Message::Other);
    let s = replay(
        &model,
        &[
            to(0, 1),
            to(0, 2),
            to(1, 1),
            Action::NewView1 {
                view_changes: vec![Sender::Correct(0), Sender::Correct(1)],
            },
            Action::Accept {
                replica: 1,
                view: 1,
                start: 0,
            },
            Action::ByzantineCommit1 {
                group: 0,
                position: 1,
            },
            other.clone(),
            Action::Prepare1 { replica: 1 },
            view0_based(2, 3),
            other,
            Action::Prepare1 { replica: 1 },
            Action::NewView2 {
                view_changes: vec![Sender::Correct(0), Sender::Byzantine(0)],
            },
            Action::Accept {
                replica: 0,
                view: 2,
                start: 2,
            },
            Action::Accept {
                replica: 1,
                view: 2,
                start: 3,
            },
        ],
    );
    assert_eq!(s.low2, 2);
    assert!(!agreement(&s));
}

/// With one old PREPARE there is no old counter above a view-1 checkpoint to put there: the
/// first rule holds.
#[test]
fn the_first_rule_holds_with_one_old_prepare() {
    check_all(
        "checkpoints, first rule, 1 old PREPARE, 1 view-1 message",
        Repeated::with_checkpoints_before_lineage(1, 1),
    );
}

/// The lineage rule (implemented): a VIEW-CHANGE's stable checkpoint must lie on its base's history (a view-1
/// checkpoint only with the first NEW-VIEW of view 1 as its base). Every property holds, also
/// with a second NEW-VIEW of view 1. Larger instances: `examples/checkpoint_deep_check.rs`.
#[test]
fn the_lineage_rule_holds() {
    check_all(
        "checkpoints on the base, 1 old PREPARE, 1 view-1 message",
        Repeated::with_checkpoints(1, 1),
    );
    check_all(
        "checkpoints on the base, 1 old PREPARE, 1 view-1 message, a second NEW-VIEW",
        Repeated {
            second_new_view: true,
            ..Repeated::with_checkpoints(1, 1)
        },
    );
}

/// The cut starting at the lowest stable checkpoint of its VIEW-CHANGEs (docs/protocol.md,
/// "The new view", as first designed). Shortest counterexample: the view-1 cut holds PREPARE 1,
/// a correct replica decides the NEW-VIEW slot 2 (request 1 at order 1) with the Byzantine
/// member's COMMIT, which makes 2 stable; the Byzantine VIEW-CHANGE for view 2 shows that
/// checkpoint and nothing above it, the other correct replica's base view 0 and nothing: the
/// cut starts at 0 and only the Byzantine history (above its checkpoint) is merged, so it is
/// empty.
#[test]
fn the_lowest_checkpoint_is_refuted() {
    let model = Repeated {
        low_rule: LowRule::Lowest,
        ..Repeated::with_checkpoints(1, 1)
    };
    let path = refute("cut from the lowest checkpoint", model, NO_LOSS);
    assert_eq!(path.last_state().low2, 0);
}

/// A checkpoint made stable by f CHECKPOINTs: the Byzantine member alone certifies a history
/// with PREPARE 1 made null, which a correct replica decided in view 0 (request 1 at order 1).
#[test]
fn a_checkpoint_of_f_is_refuted() {
    let model = Repeated {
        checkpoint_quorum: F,
        ..Repeated::with_checkpoints(1, 1)
    };
    let path = refute("checkpoints stable with f CHECKPOINTs", model, NO_LOSS);
    assert!(path.last_state().low2 > 0);
}
