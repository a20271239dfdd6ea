//! How many PREPAREs the primary keeps undecided at once.
//!
//! A batch costs the replicas and database nodes about the same whether it carries one request
//! or sixty-four (a warrant check and a warrant each, a decision log append, COMMIT-DBs,
//! REPLY-COMMIT-DBs). A primary that sends a PREPARE as soon as its USIG is free sends, under
//! load, mostly PREPAREs of one or two requests: closed-loop clients' next requests trickle in
//! one by one, and the soft USIG answers in a fraction of a millisecond. So the primary keeps at
//! most `depth` PREPAREs undecided and lets the requests gather meanwhile: batches then grow
//! with the load by themselves, and a lone request still goes out at once.
//!
//! A PREPARE counts as decided once, in every group it has work for, f+1 replicas sent DECIDED
//! with its counter or a later one (so at least one correct replica decided it: f Byzantine
//! ones can neither hold the window shut nor open it alone). DECIDED proves nothing to anyone,
//! and nothing but this window depends on it: a PREPARE still undecided after [`EXPIRE_TICKS`]
//! ticks stops counting, so lost or withheld hints cost throughput, never liveness.
//! docs/protocol.md, "Pacing", has the argument.

use proto::{GroupId, NodeId};
use std::collections::BTreeMap;

/// The primaries' default depth (docs/performance.md, item 14, has the measurements).
pub const DEFAULT_DEPTH: usize = 1;

/// Ticks (50 ms at the drivers) after which an undecided PREPARE no longer holds back the next.
pub const EXPIRE_TICKS: u64 = 2;

/// The undecided PREPAREs and what each replica said it decided.
#[derive(Debug, Default)]
pub struct Pacing {
    /// At most this many undecided PREPAREs (0: no limit).
    depth: usize,
    ticks: u64,
    /// Undecided PREPAREs by warrant counter: the groups they have work for, and the tick they
    /// were sent at.
    undecided: BTreeMap<u64, (Vec<GroupId>, u64)>,
    /// The highest counter each replica said it decided, by group.
    decided: BTreeMap<GroupId, BTreeMap<NodeId, u64>>,
    /// PREPAREs that expired undecided, since the start.
    expired: u64,
}

impl Pacing {
    /// At most `depth` undecided PREPAREs; 0 sends a PREPARE whenever the USIG is free.
    pub fn new(depth: usize) -> Self {
        Pacing {
            depth,
            ..Pacing::default()
        }
    }

    /// Whether another PREPARE may go out now; `full` if it would carry a whole batch (never
    /// held back: waiting could not make it bigger).
    pub fn open(&self, full: bool) -> bool {
        full || self.depth == 0 || self.undecided.len() < self.depth
    }

    /// The PREPARE with `counter` went out with work for `groups`.
    pub fn sent(&mut self, counter: u64, mut groups: Vec<GroupId>) {
        if self.depth == 0 || groups.is_empty() {
            return;
        }
        groups.sort_unstable();
        groups.dedup();
        self.undecided.insert(counter, (groups, self.ticks));
    }

    /// `replica` of `group` decided the PREPARE with `counter`; `quorum` is f+1.
    pub fn on_decided(&mut self, group: GroupId, replica: NodeId, counter: u64, quorum: usize) {
        let highest = self
            .decided
            .entry(group)
            .or_default()
            .entry(replica)
            .or_default();
        *highest = (*highest).max(counter);
        let decided = &self.decided;
        self.undecided.retain(|&c, (groups, _)| {
            !groups.iter().all(|g| {
                decided
                    .get(g)
                    .is_some_and(|d| quorum_counter(d, quorum) >= c)
            })
        });
    }

    /// A timer tick: PREPAREs undecided for [`EXPIRE_TICKS`] stop counting.
    pub fn tick(&mut self) {
        self.ticks += 1;
        let now = self.ticks;
        let before = self.undecided.len();
        self.undecided
            .retain(|_, (_, sent)| now - *sent < EXPIRE_TICKS);
        self.expired += (before - self.undecided.len()) as u64;
    }

    /// PREPAREs that expired undecided since the start: hints lost, withheld, or never due (a
    /// PREPARE whose entries the replicas' order books all refused).
    pub fn expired(&self) -> u64 {
        self.expired
    }

    /// A new view: its counters start afresh, the replicas' hints are about the old one.
    pub fn clear(&mut self) {
        self.undecided.clear();
        self.decided.clear();
    }

    /// PREPAREs undecided now.
    pub fn undecided(&self) -> usize {
        self.undecided.len()
    }
}

/// The highest counter that `quorum` replicas each said they decided (0 if fewer spoke).
fn quorum_counter(decided: &BTreeMap<NodeId, u64>, quorum: usize) -> u64 {
    let mut counters: Vec<u64> = decided.values().copied().collect();
    counters.sort_unstable_by(|a, b| b.cmp(a));
    counters.get(quorum.saturating_sub(1)).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const G0: GroupId = GroupId(0);
    const G1: GroupId = GroupId(1);

    #[test]
    fn f_plus_one_replicas_of_every_group_decide_a_prepare() {
        let mut p = Pacing::new(1);
        assert!(p.open(false));
        p.sent(1, vec![G0, G1, G0]);
        assert!(
            !p.open(false),
            "one PREPARE undecided fills a window of one"
        );
        assert!(p.open(true), "a full batch is never held back");
        // One replica alone (perhaps Byzantine) decides nothing, even with a counter far ahead.
        p.on_decided(G0, NodeId(1), 99, 2);
        assert!(!p.open(false));
        p.on_decided(G0, NodeId(2), 1, 2);
        assert!(!p.open(false), "group 1 has not decided yet");
        p.on_decided(G1, NodeId(4), 1, 2);
        p.on_decided(G1, NodeId(5), 1, 2);
        assert!(p.open(false));
        assert_eq!(p.undecided(), 0);
    }

    #[test]
    fn a_later_counter_decides_the_earlier_prepares() {
        let mut p = Pacing::new(3);
        for c in 1..=3 {
            p.sent(c, vec![G0]);
        }
        assert!(!p.open(false));
        p.on_decided(G0, NodeId(1), 2, 2);
        p.on_decided(G0, NodeId(2), 3, 2);
        assert_eq!(
            p.undecided(),
            1,
            "f+1 replicas decided 2; only one decided 3"
        );
        p.on_decided(G0, NodeId(1), 3, 2);
        assert_eq!(p.undecided(), 0);
    }

    #[test]
    fn an_undecided_prepare_stops_counting_after_expire_ticks() {
        let mut p = Pacing::new(1);
        p.sent(1, vec![G0]);
        for _ in 1..EXPIRE_TICKS {
            p.tick();
            assert!(!p.open(false));
        }
        p.tick();
        assert!(
            p.open(false),
            "withheld hints cost throughput, never liveness"
        );
        assert_eq!(p.expired(), 1);
    }

    #[test]
    fn without_a_depth_or_work_nothing_is_held() {
        let mut p = Pacing::new(0);
        p.sent(1, vec![G0]);
        assert!(p.open(false));
        let mut p = Pacing::new(1);
        p.sent(1, Vec::new());
        assert!(
            p.open(false),
            "a PREPARE of JOINs alone has nothing to decide"
        );
        p.sent(2, vec![G0]);
        p.clear();
        assert!(p.open(false), "a new view starts with an empty window");
    }
}
