//! Exhaustive checks of the cut-over of online reconfiguration, with a Byzantine primary, a
//! Byzantine member in each of two groups and a view change (see `model::cutover` for the
//! model). Each check prints the number of states it explored; refutations print a shortest
//! counterexample and check that it is the attack their doc describes.

use model::cutover::{
    Action, AfterClose, Certificate, Content, Cutover, Epoch, Point, ReconfigureAgreement, State,
    Voter, DB_AGREEMENT, NO_LOSS, ONE_ASSIGNMENT, ONE_CUT,
};
use model::new_view::Sender;
use model::{harness, F};
use stateright::Path;

fn check_all(name: &str, model: Cutover) {
    harness::check_all(name, model, State::representative);
}

/// Finds a shortest counterexample to `property` (breadth first) and prints it; panics if
/// there is none.
fn refute(name: &str, model: &Cutover, property: &'static str) -> Path<State, Action> {
    let path = harness::shortest_counterexample(name, model, property, 30);
    show(model, &path);
    path
}

fn show(model: &Cutover, path: &Path<State, Action>) {
    let s = path.last_state();
    println!(
        "  old primary's PREPAREs (counter 1..): {:?}; partitions of requests 1..: {:?}",
        s.prepares, s.partitions
    );
    for action in path.clone().into_actions() {
        println!("  {action:?}");
    }
    for (r, replica) in s.correct.iter().enumerate() {
        println!(
            "  correct {r} (group {}): {:?}, decided in epoch e (order, request) {:?}, \
             EPOCH-CLOSEs {:?}",
            model::group_of(r),
            replica.phase,
            model.decided_this(s, r),
            replica.closes
        );
    }
    println!(
        "  cut of the NEW-VIEW: {:?}; new primary's PREPAREs: {:?}",
        s.new_view, s.view1
    );
    for point in model.certified(s) {
        println!("  certified: {point:?}, {:?}", model.book(s, point));
    }
    println!(
        "  epoch e+1 started from {:?}; decided (order, request, group) {:?}",
        s.next,
        model.decided_next(s)
    );
    if let Some((cut, order, request, votes)) = model.foreign_quorum(s) {
        println!(
            "  a database node that knows the cut {cut} executes request {request} at order \
             {order} with {votes:?}"
        );
    }
    println!(
        "  (order, request) correct database nodes can execute: {:?}",
        model.executable(s)
    );
}

/// The rules as implemented hold: three counters of a Byzantine old primary (any contents:
/// requests before and after the RECONFIGURE, forged ones, JOINs), a view change in any
/// state, one PREPARE of the new primary and one order of epoch e+1.
#[test]
fn the_implemented_cut_over_holds() {
    check_all(
        "cut-over as implemented, 2 old PREPAREs, 1 in view 1, 1 in e+1",
        Cutover::implemented(2, 1, 1),
    );
}

/// Not needed for safety, as it turns out: one group agreeing on the RECONFIGURE's slot keeps
/// every property, because a certificate needs f+1 EPOCH-CLOSEs of that group too, and a
/// correct member signs only once its group decided every slot it agrees on, so the slot is
/// decided by some group and in every later cut. (Group 0; the first request may be in either
/// partition, so this covers group 1 too.) Every group agreeing costs the others one COMMIT.
#[test]
fn one_group_agreeing_on_the_reconfigure_holds() {
    check_all(
        "cut-over, only group 0 agrees on the RECONFIGURE",
        Cutover {
            agreement: ReconfigureAgreement::OneGroup(0),
            ..Cutover::implemented(2, 1, 1)
        },
    );
}

/// The voter as first built (found by this model, fixed in `dbvote::voter::reconfigure`).
/// Shortest counterexample: the old primary orders request 1 and the RECONFIGURE; two correct
/// replicas, one of each group, that processed nothing leave view 0; the NEW-VIEW takes them
/// and the Byzantine members, one of which shows both PREPAREs, so the cut closes the book
/// after order 1; the two correct replicas enter view 1, decide the NEW-VIEW slot and sign
/// EPOCH-CLOSEs, which the Byzantine members complete; epoch e+1 starts after order 1. Group
/// 0's Byzantine member votes for request 1 at order 2 in epoch e before the CONFIGURE
/// reaches a database node, group 1's (which serves request 1's partition in e+1) in e+1
/// after it: the node runs request 1 a second time, at order 2.
#[test]
fn votes_kept_across_the_cut_are_refuted() {
    let model = Cutover {
        voter: Voter::KeepsVotesAcrossTheCut,
        ..Cutover::implemented(2, 0, 0)
    };
    refute("votes kept across the cut", &model, ONE_ASSIGNMENT);
    let path = refute("votes kept across the cut", &model, DB_AGREEMENT);
    let s = path.last_state();
    let (cut, order, request, votes) = model.foreign_quorum(s).expect("a foreign quorum");
    assert!(order > cut, "after the cut");
    assert_eq!(
        votes.map(|v| (v.voter, v.epoch, v.early)),
        [
            (Sender::Byzantine(0), Epoch::This, true),
            (Sender::Byzantine(1), Epoch::Next, false)
        ],
        "votes of two Byzantine members, of two groups and two epochs"
    );
    let executable = model.executable(s);
    assert!(
        executable.iter().any(|&(o, q)| q == request && o != order),
        "the request also executes at its own order: {executable:?}"
    );
}

/// Database nodes that, once they know both epochs, count a vote of any group of either epoch
/// for any order. Shortest counterexamples: the run above; a vote of group 0's Byzantine member
/// naming e+1 counts with a correct member's of epoch e for request 1 at order 1 (two
/// assignments for one order), and with group 1's Byzantine member's for request 1 at order 2
/// (request 1 executed twice).
#[test]
fn votes_of_any_group_of_either_epoch_are_refuted() {
    let model = Cutover {
        voter: Voter::AnyGroupOfEitherEpoch,
        ..Cutover::implemented(2, 0, 0)
    };
    let path = refute("votes of any group of either epoch", &model, ONE_ASSIGNMENT);
    assert!(path.last_state().next.is_some(), "after the CONFIGURE");
    let path = refute("votes of any group of either epoch", &model, DB_AGREEMENT);
    let executable = model.executable(path.last_state());
    let twice = executable
        .iter()
        .any(|&(o, q)| executable.iter().any(|&(o2, q2)| q == q2 && o != o2));
    assert!(twice, "a request executes at two orders: {executable:?}");
}

/// Certificates the Byzantine members alone can make: f EPOCH-CLOSEs per group, and f+1 from
/// the whole cluster (the two groups' Byzantine members). Shortest counterexample (both): a
/// correct replica of group 0 processes request 1 and the group's Byzantine member COMMITs it,
/// so it is decided at order 1; the Byzantine members certify the end before counter 1, whose
/// book has no order.
#[test]
fn certificates_without_a_correct_member_of_every_group_are_refuted() {
    for (name, certificate) in [
        ("f EPOCH-CLOSEs per group", Certificate::PerGroup(F)),
        (
            "f+1 EPOCH-CLOSEs from the cluster",
            Certificate::Cluster(F + 1),
        ),
    ] {
        let model = Cutover {
            certificate,
            ..Cutover::implemented(2, 0, 0)
        };
        let path = refute(name, &model, NO_LOSS);
        let s = path.last_state();
        let (point, order, request) = model.lost(s).expect("a decision the book lacks");
        println!("  certified {point:?} lacks request {request} at order {order}");
        let unsigned =
            (0..2).any(|g| model::members(g).all(|r| !s.correct[r].closes.contains(point)));
        assert!(unsigned, "no correct member of some group signed {point:?}");
    }
}

/// No group agreeing on the RECONFIGURE's slot: a replica signs as soon as it processed it.
/// Shortest counterexample: the old primary orders the RECONFIGURE, then request 1; one correct
/// replica of each group processes the RECONFIGURE and signs (with the Byzantine members: a
/// certificate of an empty book); the other two leave view 0 with nothing processed, and the
/// NEW-VIEW takes them with a Byzantine VIEW-CHANGE that shows only counter 2: the cut has a
/// null slot where the RECONFIGURE was, the book is not closed, and request 1 is decided at
/// order 1 in epoch e, after the certified cut at 0.
#[test]
fn no_group_agreeing_on_the_reconfigure_is_refuted() {
    let model = Cutover {
        agreement: ReconfigureAgreement::NoGroup,
        ..Cutover::implemented(2, 0, 0)
    };
    let path = refute("no group agrees on the RECONFIGURE", &model, NO_LOSS);
    let s = path.last_state();
    let r = s.prepares.iter().position(|&c| c == Content::Reconfigure);
    let r = r.expect("a RECONFIGURE") as u8 + 1;
    let cut = s.new_view.expect("a view change");
    assert!(
        !cut.contains(r),
        "the RECONFIGURE is not in the new view's cut"
    );
    assert!(model.certified(s).contains(&Point::View0(r)));
}

/// Replicas that keep ordering after the RECONFIGURE. Shortest counterexample: two correct
/// replicas, one of each group, that processed nothing leave view 0, and the NEW-VIEW takes
/// them with a Byzantine VIEW-CHANGE that shows only the RECONFIGURE (counter 2), so the cut
/// closes an empty book and they sign (a certificate with the Byzantine members); the
/// (Byzantine) new primary then orders request 1, which one of them orders and decides at
/// order 1 in epoch e, after the certified cut.
#[test]
fn ordering_after_the_reconfigure_is_refuted() {
    let model = Cutover {
        after_close: AfterClose::Order,
        ..Cutover::implemented(2, 1, 0)
    };
    let path = refute(
        "replicas keep ordering after the RECONFIGURE",
        &model,
        NO_LOSS,
    );
    let (point, order, _) = model.lost(path.last_state()).expect("a lost decision");
    let book = model.book(path.last_state(), point).expect("its book");
    assert!(order > book.cut(), "decided after the certified cut");
}

/// Order books that record a JOIN after the closing RECONFIGURE (as `OrderBook::join` was
/// first built; found by this model, fixed there). Shortest counterexample: the old primary
/// orders the RECONFIGURE and then a JOIN; correct replicas process the RECONFIGURE (and
/// refuse the JOIN), each group decides it, and a replica of each group that stays in view 0
/// signs; the NEW-VIEW takes two others and a Byzantine VIEW-CHANGE that shows the JOIN, so
/// the replicas entering view 1 re-derive a closed book that records it and sign again: two
/// certificates of the same end with two books, which differ in the JOIN only.
#[test]
fn joins_after_the_close_are_refuted() {
    let model = Cutover {
        joins_after_close: true,
        ..Cutover::implemented(2, 0, 0)
    };
    let path = refute("JOINs recorded after the close", &model, ONE_CUT);
    let s = path.last_state();
    let (a, b) = model.two_cuts(s).expect("two certificates");
    let (a, b) = (model.book(s, a).unwrap(), model.book(s, b).unwrap());
    assert_eq!((&a.orders, a.closed), (&b.orders, b.closed));
    assert_ne!(a.joined, b.joined, "they differ in the JOIN only");
}
