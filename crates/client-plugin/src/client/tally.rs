//! The vote on one request's REPLYs: the single place that decides whether a page is accepted.
//!
//! A page is accepted once f+1 distinct members of one group sent it, byte for byte, each reply
//! on its replica's authenticated link (the endpoint's reader refuses any other before it gets
//! here). Among any f+1 members of a group at least one is correct, so the
//! accepted page is one a correct replica rendered. Votes of different groups never add up (two
//! groups' f+1 can be one faulty replica in each), nor votes of one group in two configuration
//! epochs (a group whose member was replaced keeps its id, and each epoch's members may hold f
//! faulty ones: the replaced member and its replacement are not f+1 of any group); a replica
//! counts once, with the first page it sent.

use super::metrics::RejectReason;
use proto::config::Cluster;
use proto::{ClientId, ConfigEpoch, GroupId, NodeId, Reply};
use std::collections::BTreeMap;

/// What a replica vouched for, as a member of `group` in configuration epoch `epoch`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Vote {
    epoch: ConfigEpoch,
    group: GroupId,
    page: Vec<u8>,
}

/// What one reply did to the vote.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Counted {
    /// The reply completed a quorum. `disagreeing` is the number of recorded votes for another
    /// page (or group), which the quorum just outvoted.
    Accepted {
        epoch: ConfigEpoch,
        group: GroupId,
        page: Vec<u8>,
        disagreeing: u64,
    },
    /// Recorded; no page has a quorum yet.
    Recorded,
    /// Repeats the replica's earlier vote (replicas re-send their cached reply when the client
    /// retransmits): changes nothing.
    Duplicate,
    /// An authentic reply with a page other than the replica's earlier one, or other than the
    /// page already accepted.
    Disagreeing,
    /// The accepted page again, from a replica not needed for the quorum.
    Late,
}

/// The votes on one request `(client, timestamp)`.
#[derive(Debug)]
pub(crate) struct Tally {
    client: ClientId,
    timestamp: u64,
    /// f+1.
    quorum: usize,
    /// Each replica's first authentic vote.
    votes: BTreeMap<NodeId, Vote>,
    accepted: Option<Vote>,
}

impl Tally {
    pub(crate) fn new(client: ClientId, timestamp: u64, f: usize) -> Self {
        Tally {
            client,
            timestamp,
            quorum: f + 1,
            votes: BTreeMap::new(),
            accepted: None,
        }
    }

    /// Counts `reply`, which came on the authenticated link of the replica it names, with
    /// `cluster` the configuration of the reply's epoch. Checks, in this order: that it answers
    /// this request; whether it repeats something already known (it cannot change the
    /// outcome); that its replica belongs to its group in that epoch. Only then does it vote.
    pub(crate) fn add(&mut self, reply: Reply, cluster: &Cluster) -> Result<Counted, RejectReason> {
        if reply.client != self.client {
            return Err(RejectReason::UnknownClient);
        }
        if reply.timestamp != self.timestamp {
            return Err(RejectReason::WrongTimestamp);
        }
        let matches = |vote: &Vote| {
            vote.epoch == reply.config_epoch && vote.group == reply.group && vote.page == reply.page
        };
        if self.accepted.as_ref().is_some_and(matches) {
            return Ok(Counted::Late);
        }
        if self.votes.get(&reply.replica).is_some_and(matches) {
            return Ok(Counted::Duplicate);
        }
        if !cluster
            .members(reply.group)
            .any(|member| member.id == reply.replica.0)
        {
            return Err(RejectReason::NotMember);
        }
        if self.votes.contains_key(&reply.replica) || self.accepted.is_some() {
            // Either a second, different page from one replica or, after acceptance, a page
            // that is not the accepted one. Only the first vote of a replica is kept, so a
            // faulty replica cannot vote for two pages.
            self.votes.entry(reply.replica).or_insert(Vote {
                epoch: reply.config_epoch,
                group: reply.group,
                page: reply.page,
            });
            return Ok(Counted::Disagreeing);
        }
        let vote = Vote {
            epoch: reply.config_epoch,
            group: reply.group,
            page: reply.page,
        };
        let agreeing = 1 + self.votes.values().filter(|v| **v == vote).count();
        self.votes.insert(reply.replica, vote.clone());
        if agreeing < self.quorum {
            return Ok(Counted::Recorded);
        }
        let disagreeing = self.votes.values().filter(|v| **v != vote).count() as u64;
        let Vote { epoch, group, page } = vote.clone();
        self.accepted = Some(vote);
        Ok(Counted::Accepted {
            epoch,
            group,
            page,
            disagreeing,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::testing::TestCluster;
    use proto::View;

    const CLIENT: ClientId = ClientId(1);
    const TS: u64 = 42;

    fn cluster() -> Cluster {
        // f = 1: groups 0 (nodes 101-103) and 1 (nodes 201-203).
        TestCluster::new(1, 2, 4, 1).cluster
    }

    fn reply(replica: u32, group: u32, page: &str) -> Reply {
        Reply {
            config_epoch: proto::ConfigEpoch(1),
            view: View(0),
            group: GroupId(group),
            replica: NodeId(replica),
            client: CLIENT,
            timestamp: TS,
            page: page.as_bytes().to_vec(),
        }
    }

    fn accepted(page: &str, group: u32, disagreeing: u64) -> Result<Counted, RejectReason> {
        accepted_in(1, page, group, disagreeing)
    }

    fn accepted_in(
        epoch: u64,
        page: &str,
        group: u32,
        disagreeing: u64,
    ) -> Result<Counted, RejectReason> {
        Ok(Counted::Accepted {
            epoch: ConfigEpoch(epoch),
            group: GroupId(group),
            page: page.as_bytes().to_vec(),
            disagreeing,
        })
    }

    #[test]
    fn f_plus_one_members_of_one_group_accept() {
        let c = cluster();
        let mut t = Tally::new(CLIENT, TS, 1);
        assert_eq!(t.add(reply(101, 0, "p"), &c), Ok(Counted::Recorded));
        assert_eq!(t.add(reply(101, 0, "p"), &c), Ok(Counted::Duplicate));
        assert_eq!(t.add(reply(103, 0, "p"), &c), accepted("p", 0, 0));
        assert_eq!(t.add(reply(102, 0, "p"), &c), Ok(Counted::Late));
        assert_eq!(t.add(reply(102, 0, "q"), &c), Ok(Counted::Disagreeing));
    }

    #[test]
    fn votes_of_two_groups_never_add_up() {
        let c = cluster();
        let mut t = Tally::new(CLIENT, TS, 1);
        assert_eq!(t.add(reply(101, 0, "p"), &c), Ok(Counted::Recorded));
        assert_eq!(t.add(reply(201, 1, "p"), &c), Ok(Counted::Recorded));
        assert_eq!(t.add(reply(202, 1, "p"), &c), accepted("p", 1, 1));
    }

    /// Group 0 is 101-103 in epoch 1 and 101, 102, 104 in epoch 2 (103 replaced by 104). A
    /// faulty 103 in epoch 1 and a faulty 104 in epoch 2 are each within their epoch's f, and
    /// together they must not make f+1 for a page.
    #[test]
    fn votes_of_one_group_in_two_epochs_never_add_up() {
        let first = cluster();
        let mut config = first.config.clone();
        config.config_epoch = 2;
        let (newcomer, enrollment) = proto::testing::member(0, 4);
        config.enrollments.push(enrollment);
        let slot = config.replicas.iter_mut().find(|r| r.id == 103).unwrap();
        *slot = newcomer;
        let second = Cluster::new(config).unwrap();
        let in_epoch = |epoch: u64, replica: u32, page: &str| Reply {
            config_epoch: ConfigEpoch(epoch),
            ..reply(replica, 0, page)
        };
        let mut t = Tally::new(CLIENT, TS, 1);
        assert_eq!(
            t.add(in_epoch(1, 103, "evil"), &first),
            Ok(Counted::Recorded)
        );
        assert_eq!(
            t.add(in_epoch(2, 104, "evil"), &second),
            Ok(Counted::Recorded)
        );
        // Each epoch's member counts against its own epoch's membership only.
        assert_eq!(
            t.add(in_epoch(2, 103, "evil"), &second),
            Err(RejectReason::NotMember)
        );
        assert_eq!(
            t.add(in_epoch(1, 101, "good"), &first),
            Ok(Counted::Recorded)
        );
        assert_eq!(
            t.add(in_epoch(1, 102, "good"), &first),
            accepted_in(1, "good", 0, 2)
        );
    }

    #[test]
    fn a_replica_votes_once_and_a_second_page_is_disagreement() {
        let c = cluster();
        let mut t = Tally::new(CLIENT, TS, 1);
        assert_eq!(t.add(reply(101, 0, "evil"), &c), Ok(Counted::Recorded));
        assert_eq!(t.add(reply(101, 0, "good"), &c), Ok(Counted::Disagreeing));
        // 101's second page did not replace its first: one more member is needed.
        assert_eq!(t.add(reply(102, 0, "good"), &c), Ok(Counted::Recorded));
        assert_eq!(t.add(reply(103, 0, "good"), &c), accepted("good", 0, 1));
    }

    #[test]
    fn foreign_and_misaddressed_replies_are_rejected() {
        let c = cluster();
        let mut t = Tally::new(CLIENT, TS, 1);
        // 201 is a member of group 1, not 0; 999 is nobody.
        assert_eq!(t.add(reply(201, 0, "p"), &c), Err(RejectReason::NotMember));
        assert_eq!(t.add(reply(999, 0, "p"), &c), Err(RejectReason::NotMember));
        let other_client = Reply {
            client: ClientId(2),
            ..reply(102, 0, "p")
        };
        assert_eq!(t.add(other_client, &c), Err(RejectReason::UnknownClient));
        let other_ts = Reply {
            timestamp: TS + 1,
            ..reply(102, 0, "p")
        };
        assert_eq!(t.add(other_ts, &c), Err(RejectReason::WrongTimestamp));
        // None of that counted: two authentic votes are still needed.
        assert_eq!(t.add(reply(102, 0, "p"), &c), Ok(Counted::Recorded));
        assert_eq!(t.add(reply(101, 0, "p"), &c), accepted("p", 0, 0));
    }
}
