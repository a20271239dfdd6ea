//! The invariants every simulated run must keep, asserted by the scenarios of `tests/`.

use crate::{Fault, Outcome, Scenario};
use proto::GroupId;

/// Every request completed with the page correct replicas render, correct database nodes are
/// identical, nothing executed twice, and no replica was left with open agreements or waiting
/// for COMMIT counters that were never sent.
pub fn check(scenario: &Scenario, o: &Outcome) {
    for (client, done) in &o.completed {
        assert_eq!(
            *done, scenario.requests_per_client,
            "{client} stalled (seed {}) at time {}: completed {:?}, views {:?}, \
             reconfigurations {:?}, node epochs {:?}",
            scenario.seed, o.time, o.completed, o.views, o.reconfigurations, o.node_epochs
        );
    }
    let mut states = o.db_states.values();
    let first = states.next().expect("a correct database node");
    assert!(
        states.all(|s| s == first),
        "correct database nodes diverged (seed {})",
        scenario.seed
    );
    assert_eq!(
        o.max_executions, 1,
        "an order executed twice (seed {})",
        scenario.seed
    );
    assert!(o.executed_orders as u64 >= scenario.clients * scenario.requests_per_client);
    assert_eq!(
        o.open_agreements, 0,
        "agreements left open at the end (seed {})",
        scenario.seed
    );
    if !scenario.faults.contains(&Fault::MisnamedPrepares) {
        assert_eq!(
            o.refused_primaries, 0,
            "a replica refused a primary that warranted nothing odd (seed {})",
            scenario.seed
        );
    }
    assert_eq!(
        o.commit_gaps, 0,
        "replicas wait for COMMIT counters that were never sent (seed {})",
        scenario.seed
    );
    for (key, page) in &o.accepted_pages {
        assert_eq!(
            Some(page),
            o.correct_pages.get(key),
            "client accepted a wrong page for {key:?}"
        );
    }
}

/// [`check`], and the rules of online reconfiguration (docs/protocol.md, "Reconfiguration"):
/// every reconfiguration of the scenario completed and every running node ended in the last
/// epoch; no order was decided under two assignments, outside its epoch's range or by a group
/// its epoch does not assign it to; nothing decided was lost; no core warranted anything after
/// it reported its position; no correct primary ordered a request after the RECONFIGURE of its
/// epoch; and each of `new_groups` (epoch, group) served requests.
pub fn check_reconfigured(scenario: &Scenario, o: &Outcome, new_groups: &[(u64, GroupId)]) {
    check(scenario, o);
    let seed = scenario.seed;
    assert_eq!(
        o.reconfigurations.len(),
        scenario.reconfigurations.len(),
        "every reconfiguration completed (seed {seed}): {:?}",
        o.reconfigurations
    );
    let last = 1 + scenario.reconfigurations.len() as u64;
    assert!(
        o.node_epochs.values().all(|&e| e == last),
        "every running node is in epoch {last} (seed {seed}): {:?}",
        o.node_epochs
    );
    assert_eq!(o.decided_twice, 0, "orders decided twice (seed {seed})");
    assert_eq!(
        o.misassigned, 0,
        "orders decided under the wrong assignment (seed {seed})"
    );
    assert_eq!(o.lost, 0, "decided orders never executed (seed {seed})");
    assert_eq!(
        o.frozen_warrants, 0,
        "warrants after a position report (seed {seed})"
    );
    assert_eq!(
        o.ordered_after_close, 0,
        "a correct primary ordered requests after the RECONFIGURE (seed {seed})"
    );
    for key in new_groups {
        assert!(
            o.served.get(key).is_some_and(|&n| n > 0),
            "group {} served no request in epoch {} (seed {seed}): {:?}",
            key.1,
            key.0,
            o.served
        );
    }
}
