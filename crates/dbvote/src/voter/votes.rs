//! The COMMIT-DB votes a database node holds for orders not decided yet, with a bound on what
//! each member may hold.
//!
//! A member's vote costs memory until f+1 members agree, and nothing stops a Byzantine member
//! from voting for orders no correct replica will ever send (any order of the epoch, with an
//! operation of up to a frame's 16 MiB): unbounded, its votes would fill the node's memory. So
//! each member holds at most [`MAX_HELD_VOTES`] votes and [`MAX_HELD_BYTES`] of operations; a
//! vote beyond that evicts the member's own vote for its lowest order. A Byzantine member can
//! only evict its own votes. A correct member holds few undecided votes (its peers' votes for
//! the same orders decide them), and when it holds many (its peers' COMMIT-DBs do not reach
//! this node) its latest votes are the ones kept: those for orders the node can still decide
//! when the peers come back, and whose decisions show the node it is behind (state transfer).
//! An evicted vote that mattered comes again: members re-send a COMMIT-DB until f+1 database
//! nodes answered.

use proto::{Execution, GroupId, NodeId, CHECKPOINT_INTERVAL};
use std::collections::BTreeMap;

/// Undecided votes one member may hold: the replicas' vote horizon (four checkpoint intervals)
/// of PREPAREs of the default batch (64 requests).
pub const MAX_HELD_VOTES: usize = 4 * CHECKPOINT_INTERVAL as usize * 64;

/// Operation bytes one member's undecided votes may hold (the primary's admission bound).
pub const MAX_HELD_BYTES: usize = 64 << 20;

/// What a vote costs beyond its operation's bytes (the execution's other fields).
const VOTE_OVERHEAD: usize = 256;

/// The votes for one order: each member's (its first) as an index into the candidates, and
/// each execution some member sent with the group of the first COMMIT-DB that carried it and
/// how many members sent it. Executions are compared whole, not by digest: a member sends at
/// most one, so there are at most as many candidates as members, and comparing bytes costs
/// less than hashing them.
#[derive(Default)]
struct Votes {
    voted: BTreeMap<NodeId, usize>,
    candidates: Vec<(GroupId, Execution, usize)>,
}

impl Votes {
    /// Adds `member`'s vote (of `group`) for `execution`; returns how many members sent that
    /// execution now, and its index among the candidates.
    fn add(&mut self, member: NodeId, group: GroupId, execution: Execution) -> (usize, usize) {
        let i = match self.candidates.iter().position(|(_, e, _)| *e == execution) {
            Some(i) => i,
            None => {
                self.candidates.push((group, execution, 0));
                self.candidates.len() - 1
            }
        };
        self.voted.insert(member, i);
        let votes = &mut self.candidates[i].2;
        *votes += 1;
        (*votes, i)
    }

    /// Takes `member`'s vote back; a candidate nobody votes for any more goes.
    fn withdraw(&mut self, member: NodeId) {
        let Some(i) = self.voted.remove(&member) else {
            return;
        };
        self.candidates[i].2 -= 1;
        if self.candidates[i].2 > 0 {
            return;
        }
        let last = self.candidates.len() - 1;
        self.candidates.swap_remove(i);
        for index in self.voted.values_mut() {
            if *index == last {
                *index = i;
            }
        }
    }
}

/// What one member holds: the orders it voted for, each with what the vote costs, and the sum.
#[derive(Default)]
struct Held {
    orders: BTreeMap<u64, usize>,
    bytes: usize,
}

/// The undecided votes of every order, and what each member holds of them.
#[derive(Default)]
pub(super) struct Tally {
    by_order: BTreeMap<u64, Votes>,
    held: BTreeMap<NodeId, Held>,
    evicted: u64,
}

impl Tally {
    /// Counts `member`'s first vote for `order`, evicting its own lowest votes if it holds too
    /// many; returns the execution once `quorum` members agree on it.
    pub(super) fn count(
        &mut self,
        member: NodeId,
        group: GroupId,
        execution: Execution,
        quorum: usize,
    ) -> Option<(GroupId, Execution)> {
        let order = execution.order;
        if self
            .by_order
            .get(&order)
            .is_some_and(|v| v.voted.contains_key(&member))
        {
            return None;
        }
        let cost = execution.request.operation.len() + VOTE_OVERHEAD;
        self.make_room(member, cost);
        let votes = self.by_order.entry(order).or_default();
        let (count, i) = votes.add(member, group, execution);
        if count >= quorum {
            let (group, execution, _) = votes.candidates.swap_remove(i);
            self.drop_order(order);
            return Some((group, execution));
        }
        let held = self.held.entry(member).or_default();
        held.orders.insert(order, cost);
        held.bytes += cost;
        None
    }

    /// Evicts `member`'s votes for its lowest orders until a vote costing `cost` fits.
    fn make_room(&mut self, member: NodeId, cost: usize) {
        let Some(held) = self.held.get_mut(&member) else {
            return;
        };
        while !held.orders.is_empty()
            && (held.orders.len() >= MAX_HELD_VOTES || held.bytes + cost > MAX_HELD_BYTES)
        {
            let Some((order, freed)) = held.orders.pop_first() else {
                break;
            };
            held.bytes -= freed;
            self.evicted += 1;
            if let Some(votes) = self.by_order.get_mut(&order) {
                votes.withdraw(member);
                if votes.voted.is_empty() {
                    self.by_order.remove(&order);
                }
            }
        }
    }

    /// Drops every vote for `order` (decided, or no longer this node's to decide).
    fn drop_order(&mut self, order: u64) {
        let Some(votes) = self.by_order.remove(&order) else {
            return;
        };
        for member in votes.voted.keys() {
            if let Some(held) = self.held.get_mut(member) {
                if let Some(cost) = held.orders.remove(&order) {
                    held.bytes -= cost;
                }
                if held.orders.is_empty() {
                    self.held.remove(member);
                }
            }
        }
    }

    /// Keeps the votes of the orders `keep` accepts, drops the others.
    pub(super) fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        let gone: Vec<u64> = self
            .by_order
            .keys()
            .copied()
            .filter(|&o| !keep(o))
            .collect();
        for order in gone {
            self.drop_order(order);
        }
    }

    /// Votes evicted since the last call (counted by the driver).
    pub(super) fn take_evicted(&mut self) -> u64 {
        std::mem::take(&mut self.evicted)
    }

    /// How many votes `member` holds.
    #[cfg(test)]
    fn held_by(&self, member: NodeId) -> usize {
        self.held.get(&member).map_or(0, |h| h.orders.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::testing::request;

    fn execution(order: u64, operation: Vec<u8>) -> Execution {
        let mut request = request(1, order, &[0]).body();
        request.operation = operation;
        Execution {
            order,
            positions: vec![(0, order)],
            request,
        }
    }

    /// A member's first vote is its only one, and only identical executions add up: a member
    /// that sends two executions, or one that differs in a byte, never makes f+1 with others.
    #[test]
    fn votes_count_each_member_once_and_only_identical_executions_together() {
        let e = execution(1, vec![1]);
        let other = execution(1, vec![1, 0xee]);
        let group = GroupId(0);
        let mut votes = Tally::default();
        assert_eq!(votes.count(NodeId(101), group, other.clone(), 2), None);
        let second = votes.count(NodeId(101), group, e.clone(), 2);
        assert_eq!(second, None, "a second vote");
        assert_eq!(votes.count(NodeId(102), group, e.clone(), 2), None);
        let second = votes.count(NodeId(102), group, other, 2);
        assert_eq!(second, None, "a second vote");
        assert_eq!(
            votes.count(NodeId(103), group, e.clone(), 2),
            Some((group, e))
        );
    }

    /// A Byzantine member voting for order after order holds at most MAX_HELD_VOTES of them,
    /// its lowest evicted first; the correct members' votes are untouched and still decide.
    #[test]
    fn a_member_holds_a_bounded_number_of_votes_and_evicts_only_its_own() {
        let mut tally = Tally::default();
        let (byzantine, correct, other) = (NodeId(101), NodeId(102), NodeId(103));
        let group = GroupId(0);
        assert_eq!(tally.count(correct, group, execution(1, vec![1]), 2), None);
        for order in 2..MAX_HELD_VOTES as u64 + 12 {
            assert_eq!(
                tally.count(byzantine, group, execution(order, vec![]), 2),
                None
            );
        }
        assert_eq!(tally.held_by(byzantine), MAX_HELD_VOTES);
        assert_eq!(tally.take_evicted(), 10);
        assert!(!tally.by_order.contains_key(&2), "its lowest votes went");
        assert_eq!(tally.held_by(correct), 1);
        let decided = tally.count(other, group, execution(1, vec![1]), 2);
        assert_eq!(decided, Some((group, execution(1, vec![1]))));
        assert_eq!(
            tally.held_by(correct),
            0,
            "a decided order's votes are released"
        );
        // A second vote of a member for an order counts for nothing.
        let top = MAX_HELD_VOTES as u64 + 11;
        assert_eq!(
            tally.count(byzantine, group, execution(top, vec![]), 2),
            None
        );
        assert_eq!(tally.take_evicted(), 0);
    }

    /// Big operations count by their bytes: a member's votes never hold more than
    /// MAX_HELD_BYTES, and an evicted vote's candidate goes while the others' stay.
    #[test]
    fn a_member_holds_a_bounded_number_of_bytes() {
        let mut tally = Tally::default();
        let (byzantine, correct) = (NodeId(101), NodeId(102));
        let group = GroupId(0);
        let big = || vec![0; 16 << 20];
        for order in 1..=5 {
            assert_eq!(
                tally.count(byzantine, group, execution(order, big()), 2),
                None
            );
        }
        assert_eq!(
            tally.held_by(byzantine),
            3,
            "three 16 MiB votes fit in 64 MiB"
        );
        assert_eq!(tally.take_evicted(), 2);
        // The same order voted differently by a correct member: withdrawing the Byzantine vote
        // keeps the correct member's candidate, and the indices stay right.
        assert_eq!(tally.count(correct, group, execution(3, vec![7]), 2), None);
        assert_eq!(tally.count(byzantine, group, execution(6, big()), 2), None);
        let votes = &tally.by_order[&4];
        assert_eq!(votes.candidates.len(), 1);
        assert!(!tally.by_order[&3].voted.contains_key(&byzantine));
        assert_eq!(tally.by_order[&3].candidates.len(), 1);
        let decided = tally.count(NodeId(103), group, execution(3, vec![7]), 2);
        assert_eq!(decided, Some((group, execution(3, vec![7]))));
    }

    #[test]
    fn dropped_orders_release_what_their_voters_held() {
        let mut tally = Tally::default();
        for order in 1..=10 {
            tally.count(NodeId(101), GroupId(0), execution(order, vec![1; 10]), 2);
        }
        tally.retain(|o| o > 4);
        assert_eq!(tally.held_by(NodeId(101)), 6);
        tally.retain(|_| false);
        assert!(tally.held.is_empty() && tally.by_order.is_empty());
    }
}
