//! NEW-VIEW: which VIEW-CHANGEs the new primary may include, and the sequence `S` every replica
//! computes from them.

use crate::prepare::{Counters, Group};
use crate::{Phase, State};

/// How many VIEW-CHANGEs a NEW-VIEW must include.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quorum {
    /// Exactly this many from every group (the design: f+1).
    PerGroup(usize),
    /// Exactly this many from the whole cluster, whatever their groups (a wrong rule).
    Cluster(usize),
}

/// The sender of a VIEW-CHANGE: a correct replica (index into [`State::correct`]) or the
/// Byzantine member of a group.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Sender {
    Correct(usize),
    Byzantine(Group),
}

/// The VIEW-CHANGEs sent so far, with their senders' groups.
pub fn sent(state: &State) -> Vec<(Sender, Group)> {
    let correct = (0..state.correct.len())
        .filter(|&r| state.correct[r].phase == Phase::ViewChange)
        .map(|r| (Sender::Correct(r), state.group_of(r)));
    let byzantine = (0..state.byzantine.len())
        .filter(|&g| state.byzantine[g].view_change.is_some())
        .map(|g| (Sender::Byzantine(g as Group), g as Group));
    correct.chain(byzantine).collect()
}

/// Every NEW-VIEW the new primary can build: any choice of sent VIEW-CHANGEs that meets the
/// quorum rule. A correct new primary takes the first ones to arrive, and the network chooses
/// which those are; a Byzantine one chooses them itself, but its USIG lets it issue only one
/// NEW-VIEW for view 1. Either way: every choice.
pub fn choices(quorum: Quorum, groups: usize, sent: &[(Sender, Group)]) -> Vec<Vec<Sender>> {
    (0u32..1 << sent.len())
        .filter(|mask| {
            let count = |g: Option<usize>| {
                (0..sent.len())
                    .filter(|&i| mask & (1 << i) != 0)
                    .filter(|&i| g.is_none_or(|g| sent[i].1 as usize == g))
                    .count()
            };
            match quorum {
                Quorum::PerGroup(k) => (0..groups).all(|g| count(Some(g)) == k),
                Quorum::Cluster(k) => count(None) == k,
            }
        })
        .map(|mask| {
            (0..sent.len())
                .filter(|&i| mask & (1 << i) != 0)
                .map(|i| sent[i].0)
                .collect()
        })
        .collect()
}

/// `S`: the counters whose PREPARE some included log holds (the others are null entries). The
/// content of each is the old primary's one PREPARE for that counter.
pub fn sequence(state: &State, view_changes: &[Sender]) -> Counters {
    view_changes
        .iter()
        .map(|&s| match s {
            Sender::Correct(r) => crate::view_change::correct_log(state.correct[r].processed),
            Sender::Byzantine(g) => state.byzantine[g as usize].view_change.unwrap_or_default(),
        })
        .fold(Counters::default(), Counters::union)
}
