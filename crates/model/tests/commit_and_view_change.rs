//! Exhaustive checks of the commit and view-change rules (see the crate doc for the model).
//! Each check prints the number of states it explored; refutations print a shortest
//! counterexample.

use model::commit_db::{executable, view0_orders, view1_orders};
use model::new_view::Quorum;
use model::{harness, CloudBft, State, F};
use stateright::Path;

const AGREEMENT: &str = "agreement at the database";
const NO_LOSS: &str = "no loss across the view change";
const NO_DOUBLE: &str = "no double execution";

/// Explores every state, depth first, one state per class of interchangeable correct members;
/// then every `always` property holds and every `sometimes` one was seen.
fn check_all(name: &str, model: CloudBft) {
    harness::check_all(name, model, State::representative);
}

/// Finds a shortest counterexample to `property` (breadth first with an increasing depth bound)
/// and prints it; panics if there is none.
fn refute(name: &str, model: CloudBft, property: &'static str) -> Path<State, model::Action> {
    let path = harness::shortest_counterexample(name, &model, property, 40);
    show(&path);
    path
}

fn show(path: &Path<State, model::Action>) {
    let s = path.last_state();
    println!("  old PREPAREs (counter 1..): {:?}", s.prepares);
    for action in path.clone().into_actions() {
        println!("  {action:?}");
    }
    println!("  decided in view 0: {:?}", {
        let decided = s.correct.iter().map(|r| r.decided.iter().collect());
        decided.collect::<Vec<Vec<_>>>()
    });
    println!("  view-0 orders by counter: {:?}", view0_orders(s));
    if let Some(seq) = s.new_view {
        let seq: Vec<_> = seq.iter().collect();
        println!(
            "  S holds counters {seq:?}; view-1 PREPARE {:?}",
            s.view1_prepare
        );
        println!(
            "  orders derived from S (+ view-1 PREPARE): {:?}",
            view1_orders(s)
        );
    }
    println!("  executable (order, request): {:?}", {
        let e = executable(s, true)
            .into_iter()
            .map(|e| (e.order, e.request));
        e.collect::<Vec<_>>()
    });
}

#[test]
fn chained_commits_hold_for_one_group() {
    check_all("chained, 1 group, 3 PREPAREs", CloudBft::chained(1, 3));
}

#[test]
fn chained_commits_hold_for_two_groups() {
    check_all("chained, 2 groups, 2 PREPAREs", CloudBft::chained(2, 2));
}

/// The rule as docs/protocol.md writes it violates all three safety properties, with one group
/// and with two: a Byzantine member of the VIEW-CHANGE quorum shows its warranted COMMIT for
/// counter 2 but leaves out PREPARE 1, which it only accepted; `S` gets a null at counter 1
/// and every later order id shifts down.
#[test]
fn design_as_written_is_refuted() {
    for property in [NO_LOSS, AGREEMENT, NO_DOUBLE] {
        refute(
            "as designed, 1 group",
            CloudBft::as_designed(1, 2),
            property,
        );
    }
    // With two groups the PREPARE left out belongs to the other group: the member never
    // warranted anything about it.
    refute(
        "as designed, 2 groups",
        CloudBft::as_designed(2, 2),
        AGREEMENT,
    );
}

/// A NEW-VIEW with only f VIEW-CHANGEs from a group can miss a decided PREPARE.
#[test]
fn f_view_changes_per_group_are_refuted() {
    let model = CloudBft {
        quorum: Quorum::PerGroup(F),
        ..CloudBft::chained(1, 2)
    };
    refute("chained, f per group", model, NO_LOSS);
}

/// A NEW-VIEW with any 2f+1 VIEW-CHANGEs of the cluster can take none from the group that
/// decided a PREPARE.
#[test]
fn two_f_plus_one_from_the_cluster_are_refuted() {
    let model = CloudBft {
        quorum: Quorum::Cluster(2 * F + 1),
        ..CloudBft::chained(2, 2)
    };
    refute("chained, 2f+1 from the cluster", model, NO_LOSS);
}

/// Counting a peer's view-0 COMMIT warranted after its VIEW-CHANGE lets a decision escape `S`.
#[test]
fn commits_after_a_view_change_are_refuted() {
    let model = CloudBft {
        commits_after_view_change: true,
        ..CloudBft::chained(1, 2)
    };
    refute(
        "chained, COMMITs after a VIEW-CHANGE counted",
        model,
        NO_LOSS,
    );
}
