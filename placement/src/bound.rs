//! A lower bound on the machines any valid plan uses, to judge the planner's plans against.

use crate::{Demand, Machine};

/// No valid plan of `demand` on `machines` uses fewer machines than this. The largest of:
///
/// - the primary candidates' machines plus 2f+1 for the groups (candidates share no host with a
///   group replica, and a group needs 2f+1 distinct hosts): the paper's 2f+2 for one candidate;
/// - the primary candidates' machines plus enough machines for every group replica, when a
///   machine holds at most `min(groups, slots)` of them (one per group) and the machines are the
///   largest of the fleet;
/// - the fewest of the largest machines whose slots add up to every VM;
/// - the database nodes (one per machine at least).
///
/// It ignores failure domains above the host, so at rack or zone isolation it may be lower
/// than any plan can reach.
pub fn lower_bound(machines: &[Machine], demand: &Demand) -> usize {
    let mut slots: Vec<u64> = machines.iter().map(|m| u64::from(m.slots)).collect();
    slots.sort_unstable_by(|a, b| b.cmp(a));
    let n = demand.group_size();
    let groups = demand.groups as u64;
    // Fewest of the largest machines holding `need` with at most `per` each.
    let fewest = |need: u64, per: Option<u64>| {
        let mut sum = 0;
        for (k, &s) in slots.iter().enumerate() {
            if sum >= need {
                return k;
            }
            sum += per.map_or(s, |p| s.min(p));
        }
        if sum >= need {
            slots.len()
        } else {
            // The fleet is too small: count machines of its largest size beyond it.
            let largest = per.map_or(slots.first().copied().unwrap_or(1), |p| {
                slots.first().copied().unwrap_or(1).min(p)
            });
            slots.len() + (need - sum).div_ceil(largest.max(1)) as usize
        }
    };
    let spread = if demand.groups > 0 { n } else { 0 };
    let replicas = fewest(groups * n as u64, Some(groups));
    [
        demand.primaries + spread,
        demand.primaries + replicas,
        fewest(demand.total_vms() as u64, None),
        demand.db_nodes,
    ]
    .into_iter()
    .max()
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(n: usize, slots: u32) -> Vec<Machine> {
        (0..n)
            .map(|i| Machine::new(format!("m{i}"), slots))
            .collect()
    }

    #[test]
    fn the_papers_two_f_plus_two_when_machines_are_large() {
        for f in 1..4 {
            assert_eq!(
                lower_bound(&fleet(50, 10), &Demand::new(f, 3, 1)),
                2 * f + 2
            );
        }
    }

    #[test]
    fn small_machines_raise_the_bound() {
        // f=1, 4 groups of 3 on 3-slot machines: 12 replicas need 4 machines besides the
        // candidate's, but 16 VMs need 6 machines of 3 slots.
        assert_eq!(lower_bound(&fleet(50, 3), &Demand::new(1, 4, 1)), 6);
        // With 4 slots: 1 + 12/4 = 4 = 16/4.
        assert_eq!(lower_bound(&fleet(50, 4), &Demand::new(1, 4, 1)), 4);
        // Replicas per machine are capped by the group count: 2 groups on 10-slot machines
        // still need 3 machines for replicas, plus 2 candidates.
        assert_eq!(lower_bound(&fleet(50, 10), &Demand::new(1, 2, 2)), 5);
        // One slot per machine: every VM on its own machine.
        assert_eq!(lower_bound(&fleet(50, 1), &Demand::new(1, 2, 2)), 11);
        // A fleet too small still gets a finite bound.
        assert_eq!(lower_bound(&fleet(2, 1), &Demand::new(1, 2, 2)), 11);
    }
}
