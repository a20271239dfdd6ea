//! Seeded simulations of online reconfiguration (docs/protocol.md, "Reconfiguration"): the
//! operator adds and removes groups and moves partitions while clients keep sending requests
//! over a lossy, duplicating, reordering network; a view change in the middle of a
//! reconfiguration; a Byzantine member of a new group; a Byzantine old primary. Every run
//! checks the invariants of `sim::check_reconfigured`.

use proto::GroupId;
use sim::{check_reconfigured, run, Fault, Outcome, Reshape, Scenario};

/// Two groups serving four partitions, one spare group, clients under load.
fn base(seed: u64) -> Scenario {
    Scenario {
        clients: 6,
        requests_per_client: 25,
        spare_groups: 1,
        max_time: 400_000,
        ..Scenario::lossy(seed)
    }
}

fn reshape(at: u64, groups: &[(u32, &[u32])]) -> Reshape {
    Reshape {
        at,
        groups: groups.iter().map(|(g, p)| (*g, p.to_vec())).collect(),
    }
}

fn add_group(seed: u64) -> Scenario {
    Scenario {
        reconfigurations: vec![reshape(1_000, &[(0, &[0]), (1, &[1, 3]), (2, &[2])])],
        ..base(seed)
    }
}

fn show(o: &Outcome) {
    eprintln!(
        "time {} reconfigurations {:?} served {:?} rejected {}",
        o.time, o.reconfigurations, o.served, o.rejected_messages
    );
}

#[test]
fn a_group_is_added_under_load() {
    for seed in 0..3 {
        let scenario = add_group(seed);
        let o = run(scenario.clone());
        show(&o);
        check_reconfigured(&scenario, &o, &[(2, GroupId(2))]);
    }
}
