//! COMMIT: who warranted a COMMIT for a PREPARE, and the decisions of correct replicas
//! (f+1 COMMITs of the group, their own included).

use crate::prepare::{Counter, Group};
use crate::{Phase, State, F};

/// Members of `group` that warranted a COMMIT for the old primary's counter `c` in view 0. A
/// correct replica warrants one for every PREPARE of its group it processed (it processes in
/// counter order, so "processed" is a prefix and is frozen once it leaves view 0); a Byzantine
/// one for whatever it chose, frozen once it sent a VIEW-CHANGE (its later COMMITs come after
/// the VIEW-CHANGE in its USIG order, and peers drop view-0 messages a sender warranted after
/// its VIEW-CHANGE).
pub fn commits(state: &State, group: Group, c: Counter) -> usize {
    let correct = state
        .members(group)
        .filter(|&r| state.correct[r].processed >= c)
        .count();
    correct + usize::from(state.byzantine[group as usize].commits.contains(c))
}

/// Decides, for every correct replica still in view 0, every PREPARE of its group it processed
/// that has f+1 COMMITs. Decisions are taken eagerly, in the same step as the COMMIT that
/// completes them: a replica deciding later, or never (a COMMIT delayed past its move to view 1),
/// only sends fewer COMMIT-DBs and has fewer decisions to keep, and every property is monotone in
/// both, so eager decisions lose no violation.
pub fn decide(state: &mut State) {
    for r in 0..state.correct.len() {
        let replica = state.correct[r];
        if replica.phase != Phase::Normal {
            continue;
        }
        let group = state.group_of(r);
        let mut decided = replica.decided;
        for c in 1..=replica.processed {
            if state.prepares[c as usize - 1].group == group && commits(state, group, c) > F {
                decided.insert(c);
            }
        }
        state.correct[r].decided = decided;
    }
}
