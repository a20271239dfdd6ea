//! The stored results a database node is reading again for members that re-sent an execution
//! it passed ([`super::VoterAction::LookUp`]), with a bound on what each member may have in
//! flight.
//!
//! Every member that asks for an order while its lookup is in flight is kept, with the
//! positions it named, so that the answer reaches each asking group whose member named the
//! positions the order ran at: a member of one group naming another group's order (at its own
//! group's positions, the only ones it may name) neither takes that group's answer, nor drops
//! its re-send, nor gets that order's result sent to its own group. A member may name any order
//! at positions this node passed, including made-up ones, and each costs an entry and a read
//! until the read ends. So each member has at most [`MAX_LOOKUPS_PER_MEMBER`] orders in flight;
//! an order beyond that is refused (counted) and not read. A Byzantine member can only use up
//! its own allowance, and entries end with their reads, so made-up orders cost at most the
//! bound per member, never more as they keep coming.

use proto::{GroupId, NodeId, PartitionId};
use std::collections::{BTreeMap, BTreeSet};

/// Orders one member may have looked up at once: as many decided executions as a correct
/// member awaits answers for (`KEEP_DECIDED` in the group crate), each of which it asks for
/// once while its lookup is in flight. A correct member is refused only when reads fall behind
/// by more than all it awaits, and then asks again with its next re-send.
pub const MAX_LOOKUPS_PER_MEMBER: usize = 4096;

/// The positions an execution names.
type Positions = Vec<(PartitionId, u64)>;

/// The lookups in flight.
#[derive(Default)]
pub(super) struct Lookups {
    /// The members (with their groups) that asked for each order being read, and the positions
    /// each named.
    asked: BTreeMap<u64, BTreeMap<(GroupId, NodeId), Positions>>,
    /// How many orders each member has in flight.
    in_flight: BTreeMap<NodeId, usize>,
    /// Orders refused since the last [`Lookups::take_refused`].
    refused: u64,
}

impl Lookups {
    /// `member` of `group` asks for the stored result of `order`, which it names at
    /// `positions`; true if it must be read now (nobody asked for it yet). Refused (false,
    /// counted) beyond the member's bound.
    pub(super) fn ask(
        &mut self,
        order: u64,
        group: GroupId,
        member: NodeId,
        positions: &[(PartitionId, u64)],
    ) -> bool {
        let asked = self.asked.get(&order);
        if asked.is_some_and(|a| a.contains_key(&(group, member))) {
            return false;
        }
        let in_flight = self.in_flight.entry(member).or_default();
        if *in_flight >= MAX_LOOKUPS_PER_MEMBER {
            self.refused += 1;
            return false;
        }
        *in_flight += 1;
        let first = asked.is_none();
        let askers = self.asked.entry(order).or_default();
        askers.insert((group, member), positions.to_vec());
        first
    }

    /// The read of `order` ended, finding it stored at `stored` (`None`: not stored). Returns
    /// the groups to answer, each once (those of the members that named the stored
    /// positions), and how many members named others.
    pub(super) fn answered(
        &mut self,
        order: u64,
        stored: Option<&[(PartitionId, u64)]>,
    ) -> (BTreeSet<GroupId>, usize) {
        let asked = self.asked.remove(&order).unwrap_or_default();
        let (mut groups, mut mismatched) = (BTreeSet::new(), 0);
        for ((group, member), positions) in asked {
            if let Some(n) = self.in_flight.get_mut(&member) {
                *n -= 1;
                if *n == 0 {
                    self.in_flight.remove(&member);
                }
            }
            match stored {
                Some(stored) if stored == positions.as_slice() => {
                    groups.insert(group);
                }
                Some(_) => mismatched += 1,
                None => {}
            }
        }
        (groups, mismatched)
    }

    /// Orders refused since the last call (counted by the driver).
    pub(super) fn take_refused(&mut self) -> u64 {
        std::mem::take(&mut self.refused)
    }
}
