//! Property tests of the placement invariants, incremental changes and errors.

use placement::{
    check, lower_bound, plan, Constraint, Demand, Level, Machine, MachineKind, PlacementError, Plan,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// A fleet whose labels nest (hosts in racks in zones); some machines share a host label (and
/// then its TPM), some have no host label (each its own host) and no TPM.
fn fleet() -> impl Strategy<Value = Vec<Machine>> {
    prop::collection::vec(
        (
            0..3u8,
            0..3u8,
            0..6u8,
            0..6u32,
            any::<bool>(),
            any::<bool>(),
        ),
        0..30,
    )
    .prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (z, r, h, slots, labelled, tpm))| {
                let host = format!("z{z}r{r}h{h}");
                Machine {
                    id: format!("m{i}"),
                    slots,
                    zone: Some(format!("z{z}")),
                    rack: Some(format!("z{z}r{r}")),
                    tpm: (labelled && tpm).then(|| format!("tpm-{host}")),
                    host: labelled.then_some(host),
                }
            })
            .collect()
    })
}

fn level() -> impl Strategy<Value = Level> {
    prop_oneof![Just(Level::Host), Just(Level::Rack), Just(Level::Zone)]
}

fn demand() -> impl Strategy<Value = Demand> {
    (0..3usize, 0..5usize, 1..4usize, level()).prop_map(|(f, groups, primaries, isolation)| {
        Demand::new(f, groups, primaries).at(isolation)
    })
}

fn homogeneous(n: usize, slots: u32) -> Vec<Machine> {
    (0..n)
        .map(|i| Machine::new(format!("m{i}"), slots))
        .collect()
}

/// `kind` machines, each in a host, rack and zone of its own.
fn add_machines(machines: &[Machine], missing: usize, kind: MachineKind) -> Vec<Machine> {
    let mut out = machines.to_vec();
    out.extend((0..missing).map(|i| {
        let id = format!("added{i}");
        Machine {
            rack: Some(id.clone()),
            zone: Some(id.clone()),
            ..Machine::new(id, kind.slots)
        }
    }));
    out
}

/// Everything the planner promises about a successful plan.
fn assert_valid(machines: &[Machine], demand: &Demand, p: &Plan) -> Result<(), TestCaseError> {
    prop_assert_eq!(p.groups.len(), demand.groups);
    prop_assert_eq!(p.primaries.len(), demand.primaries);
    prop_assert_eq!(p.db_nodes.len(), demand.db_nodes);
    let violations = check(machines, demand.isolation, demand.f, p);
    prop_assert!(violations.is_empty(), "{:?}", violations);
    prop_assert!(p.machines_used() >= lower_bound(machines, demand));
    Ok(())
}

/// Every slot of `before` whose machine is still in `machines` is unchanged in `after`.
fn kept(before: &Plan, after: &Plan, gone: &str) -> Result<(), TestCaseError> {
    let pairs = before
        .groups
        .iter()
        .flatten()
        .zip(after.groups.iter().flatten())
        .chain(before.primaries.iter().zip(&after.primaries))
        .chain(before.db_nodes.iter().zip(&after.db_nodes));
    for (b, a) in pairs {
        if b != gone {
            prop_assert_eq!(b, a);
        } else {
            prop_assert_ne!(a, gone);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A plan keeps every rule; an infeasible demand becomes feasible with exactly the machines
    /// the error asks for (and the error names a spread constraint, never a vague failure).
    #[test]
    fn plans_are_valid_and_errors_say_what_is_missing(machines in fleet(), demand in demand()) {
        match plan(&machines, &demand, None) {
            Ok(p) => assert_valid(&machines, &demand, &p)?,
            Err(PlacementError::Infeasible { missing, kind, .. }) => {
                prop_assert!(missing > 0);
                prop_assert_eq!(kind.level, demand.isolation);
                let more = add_machines(&machines, missing, kind);
                let p = plan(&more, &demand, None);
                prop_assert!(p.is_ok(), "{} more machine(s) were said to suffice: {:?}", missing, p);
                assert_valid(&more, &demand, &p.unwrap())?;
            }
            Err(e @ PlacementError::Invalid { .. }) => {
                // Only unlabelled domains can be invalid here: the generated labels nest.
                prop_assert!(demand.isolation == Level::Host || machines.is_empty(), "{}", e);
                prop_assert!(false, "generated input refused: {}", e);
            }
        }
    }

    /// The same input gives the same plan.
    #[test]
    fn planning_is_deterministic(machines in fleet(), demand in demand()) {
        prop_assert_eq!(plan(&machines, &demand, None), plan(&machines, &demand, None));
    }

    /// Adding a group moves nothing already placed.
    #[test]
    fn adding_a_group_moves_nothing(machines in fleet(), demand in demand()) {
        let Ok(before) = plan(&machines, &demand, None) else { return Ok(()) };
        let bigger = Demand { groups: demand.groups + 1, ..demand };
        if let Ok(after) = plan(&machines, &bigger, Some(&before)) {
            assert_valid(&machines, &bigger, &after)?;
            prop_assert_eq!(&after.groups[..demand.groups], &before.groups[..]);
            prop_assert_eq!(&after.primaries, &before.primaries);
            prop_assert_eq!(&after.db_nodes, &before.db_nodes);
        }
    }

    /// Removing a group keeps every other placement.
    #[test]
    fn removing_a_group_moves_nothing(machines in fleet(), demand in demand()) {
        let Ok(before) = plan(&machines, &demand, None) else { return Ok(()) };
        if demand.groups == 0 { return Ok(()) }
        let smaller = Demand { groups: demand.groups - 1, ..demand };
        let after = plan(&machines, &smaller, Some(&before));
        prop_assert!(after.is_ok(), "{:?}", after);
        let after = after.unwrap();
        assert_valid(&machines, &smaller, &after)?;
        prop_assert_eq!(&after.groups[..], &before.groups[..smaller.groups]);
        prop_assert_eq!(after.moves_from(&before), 0);
    }

    /// Removing a machine replaces only the VMs it ran, each on another machine.
    #[test]
    fn removing_a_machine_replaces_only_its_members(
        machines in fleet(), demand in demand(), pick in any::<prop::sample::Index>()
    ) {
        let Ok(before) = plan(&machines, &demand, None) else { return Ok(()) };
        let used: Vec<&str> = before.load().keys().copied().collect();
        let gone = used[pick.index(used.len())].to_string();
        let rest: Vec<Machine> = machines.iter().filter(|m| m.id != gone).cloned().collect();
        match plan(&rest, &demand, Some(&before)) {
            Ok(after) => {
                assert_valid(&rest, &demand, &after)?;
                kept(&before, &after, &gone)?;
                let on_gone = before.load()[gone.as_str()];
                prop_assert_eq!(after.moves_from(&before), on_gone);
            }
            Err(PlacementError::Infeasible { missing, kind, .. }) => {
                let more = add_machines(&rest, missing, kind);
                let after = plan(&more, &demand, Some(&before));
                prop_assert!(after.is_ok(), "{:?}", after);
                kept(&before, &after.unwrap(), &gone)?;
            }
            Err(e) => prop_assert!(false, "{}", e),
        }
    }

    /// On machines big enough for one replica of every group and a database node, a plan uses
    /// the paper's minimum: one machine per candidate and 2f+1 for the groups (2f+2 with one
    /// candidate), whatever else the fleet offers.
    #[test]
    fn large_machines_give_the_papers_minimum(
        f in 0..4usize, groups in 1..8usize, primaries in 1..4usize, spare in 0..20usize,
        extra_slots in 0..4u32,
    ) {
        let demand = Demand::new(f, groups, primaries);
        let machines = homogeneous(primaries + 2 * f + 1 + spare, groups as u32 + 1 + extra_slots);
        let p = plan(&machines, &demand, None);
        prop_assert!(p.is_ok(), "{:?}", p);
        let p = p.unwrap();
        assert_valid(&machines, &demand, &p)?;
        prop_assert_eq!(p.machines_used(), primaries + 2 * f + 1);
        prop_assert_eq!(p.machines_used(), lower_bound(&machines, &demand));
    }

    /// On equal machines, group replicas are spread evenly (machines running replicas differ by
    /// at most one replica) and the plan stays within one machine of the lower bound.
    #[test]
    fn equal_machines_are_loaded_evenly_and_nearly_minimally(
        f in 0..3usize, groups in 1..12usize, primaries in 1..3usize, slots in 1..8u32,
    ) {
        let demand = Demand::new(f, groups, primaries);
        let machines = homogeneous(demand.total_vms(), slots);
        let p = plan(&machines, &demand, None);
        prop_assert!(p.is_ok(), "{:?}", p);
        let p = p.unwrap();
        assert_valid(&machines, &demand, &p)?;
        let mut replicas: BTreeMap<&str, usize> = BTreeMap::new();
        for m in p.groups.iter().flatten() {
            *replicas.entry(m.as_str()).or_default() += 1;
        }
        let (lo, hi) = (replicas.values().min().unwrap(), replicas.values().max().unwrap());
        prop_assert!(hi - lo <= 1, "replicas per machine {:?}", replicas);
        prop_assert!(p.machines_used() <= lower_bound(&machines, &demand) + 1,
            "{} machines, bound {}", p.machines_used(), lower_bound(&machines, &demand));
    }
}

fn infeasible(r: Result<Plan, PlacementError>) -> (Constraint, usize, MachineKind, String) {
    match r {
        Err(e @ PlacementError::Infeasible { .. }) => {
            let text = e.to_string();
            let PlacementError::Infeasible {
                constraint,
                missing,
                kind,
                ..
            } = e
            else {
                unreachable!()
            };
            (constraint, missing, kind, text)
        }
        other => panic!("expected infeasible, got {other:?}"),
    }
}

#[test]
fn too_few_hosts_for_a_group_names_the_group_rule_and_the_missing_host() {
    // f=1: the candidate takes one of three machines, the group needs three more hosts.
    let (c, missing, kind, text) =
        infeasible(plan(&homogeneous(3, 10), &Demand::new(1, 2, 1), None));
    assert_eq!(c, Constraint::GroupSpread);
    assert_eq!(missing, 1);
    assert_eq!(
        kind,
        MachineKind {
            slots: 10,
            level: Level::Host
        }
    );
    assert!(
        text.contains("add 1 machine(s) with 10 VM slot(s), each in a host of its own"),
        "{text}"
    );
}

#[test]
fn too_few_zones_asks_for_machines_in_new_zones() {
    let machines: Vec<Machine> = (0..8)
        .map(|i| Machine {
            zone: Some(format!("z{}", i % 2)),
            ..Machine::new(format!("m{i}"), 4)
        })
        .collect();
    let (c, missing, kind, text) =
        infeasible(plan(&machines, &Demand::new(1, 2, 1).at(Level::Zone), None));
    assert_eq!(c, Constraint::GroupSpread);
    assert_eq!((missing, kind.level), (1, Level::Zone));
    assert!(text.contains("each in a zone of its own"), "{text}");
}

#[test]
fn candidates_need_hosts_free_of_replicas() {
    // f=0: one replica per group; two candidates on one machine is refused.
    let (c, missing, _, _) = infeasible(plan(&homogeneous(1, 8), &Demand::new(0, 1, 2), None));
    assert_eq!(c, Constraint::PrimarySpread);
    assert_eq!(missing, 2);
}

#[test]
fn database_nodes_need_their_own_domains() {
    // Four single-slot machines and one big one: f=1, the candidate takes a small one and the
    // group the big one and two small ones. The three database nodes need three distinct
    // machines with a free slot: the big one and the last small one have room, so one machine
    // is missing.
    let mut machines = homogeneous(4, 1);
    machines.push(Machine::new("big", 9));
    let (c, missing, kind, _) = infeasible(plan(&machines, &Demand::new(1, 1, 1), None));
    assert_eq!(c, Constraint::DbSpread);
    assert_eq!((missing, kind.slots), (1, 9));
}

#[test]
fn inconsistent_input_names_the_field() {
    let mut machines = homogeneous(5, 3);
    machines[2].rack = None;
    for m in machines.iter_mut().filter(|m| m.id != "m2") {
        m.rack = Some("r1".into());
    }
    let err = plan(&machines, &Demand::new(1, 1, 1).at(Level::Rack), None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "machine m2.rack: isolation = rack needs a rack label on every machine"
    );

    let mut machines = homogeneous(5, 3);
    machines[1].tpm = Some("ek1".into());
    machines[3].tpm = Some("ek1".into());
    let err = plan(&machines, &Demand::new(1, 1, 1), None).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("machine m3.host: is \"m3\" but machine m1 on the same TPM"),
        "{err}"
    );

    let mut machines = homogeneous(5, 3);
    machines[0].host = Some("h".into());
    machines[0].rack = Some("r1".into());
    machines[4].host = Some("h".into());
    machines[4].rack = Some("r2".into());
    let err = plan(&machines, &Demand::new(1, 1, 1), None).unwrap_err();
    assert!(err.to_string().starts_with("machine m4.rack"), "{err}");

    let err = plan(
        &homogeneous(9, 3),
        &Demand {
            db_nodes: 2,
            ..Demand::new(1, 1, 1)
        },
        None,
    )
    .unwrap_err();
    assert!(
        err.to_string().starts_with("db_nodes: must be 2f+1 = 3"),
        "{err}"
    );
}

#[test]
fn machines_sharing_a_host_label_never_hold_two_members_of_a_group() {
    // Six entries but three physical hosts: f=1 needs three hosts for the group and one more
    // for the candidate.
    let machines: Vec<Machine> = (0..6)
        .map(|i| Machine {
            host: Some(format!("h{}", i / 2)),
            ..Machine::new(format!("m{i}"), 4)
        })
        .collect();
    let (c, missing, _, _) = infeasible(plan(&machines, &Demand::new(1, 1, 1), None));
    assert_eq!((c, missing), (Constraint::GroupSpread, 1));
}

#[test]
fn the_plan_fills_opened_machines_evenly() {
    // 4 groups of 3 on 3-slot machines: 4 machines hold the 12 replicas (each misses one
    // group), one more holds the candidate and two database nodes, one more the last one.
    let demand = Demand::new(1, 4, 1);
    let machines = homogeneous(20, 3);
    let p = plan(&machines, &demand, None).unwrap();
    assert_eq!(p.machines_used(), 6);
    assert_eq!(lower_bound(&machines, &demand), 6);
}
