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
//!
//! What a tally holds is bounded by the members that may vote, whatever they send
//! (docs/protocol.md, "Byzantine input"): only members of the group that serves the request's
//! first partition in a reply's epoch vote, since no other group orders it; a vote keeps its
//! page as a digest, the reply that completes a quorum bringing the page itself; and once a page
//! is accepted the votes are dropped and later replies add nothing. A page is as large as the
//! endpoint transport's `max_frame` at most (it refuses larger frames before they are decoded),
//! and none is kept.

use super::metrics::RejectReason;
use proto::config::Cluster;
use proto::{ClientId, ConfigEpoch, GroupId, NodeId, PartitionId, Reply};
use std::collections::BTreeMap;
use usig::MessageDigest;

/// What a replica vouched for, as a member of `group` in configuration epoch `epoch`: the page,
/// by its SHA-256. Equal digests are equal pages, so votes compare as their pages would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Vote {
    epoch: ConfigEpoch,
    group: GroupId,
    page: MessageDigest,
}

/// What one reply did to the vote.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Counted {
    /// The reply completed a quorum. `disagreeing` is the number of recorded votes for another
    /// page, group or epoch, which the quorum just outvoted.
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
    /// The request's first partition: the group serving it in a reply's epoch is the one that
    /// orders and answers the request (`None`, a request declaring none, is ordered by nobody).
    partition: Option<PartitionId>,
    /// f+1.
    quorum: usize,
    /// Each replica's first authentic vote, until a page is accepted: then nothing can change
    /// the outcome, and it is emptied.
    votes: BTreeMap<NodeId, Vote>,
    accepted: Option<Vote>,
}

impl Tally {
    pub(crate) fn new(
        client: ClientId,
        timestamp: u64,
        partition: Option<PartitionId>,
        f: usize,
    ) -> Self {
        Tally {
            client,
            timestamp,
            partition,
            quorum: f + 1,
            votes: BTreeMap::new(),
            accepted: None,
        }
    }

    /// Counts `reply`, which came on the authenticated link of the replica it names, with
    /// `cluster` the configuration of the reply's epoch. Checks, in this order: that it answers
    /// this request; that its replica belongs to its group in that epoch, and that this group
    /// serves the request there (the cheap checks, before the page is hashed); whether it
    /// repeats something already known (it cannot change the outcome). Only then does it vote.
    pub(crate) fn add(&mut self, reply: Reply, cluster: &Cluster) -> Result<Counted, RejectReason> {
        if reply.client != self.client {
            return Err(RejectReason::UnknownClient);
        }
        if reply.timestamp != self.timestamp {
            return Err(RejectReason::WrongTimestamp);
        }
        if !cluster
            .members(reply.group)
            .any(|member| member.id == reply.replica.0)
        {
            return Err(RejectReason::NotMember);
        }
        if self.partition.and_then(|p| cluster.group_of(p)) != Some(reply.group) {
            return Err(RejectReason::NotServing);
        }
        let vote = Vote {
            epoch: reply.config_epoch,
            group: reply.group,
            page: MessageDigest::of(&reply.page),
        };
        if self.accepted == Some(vote) {
            return Ok(Counted::Late);
        }
        if self.votes.get(&reply.replica) == Some(&vote) {
            return Ok(Counted::Duplicate);
        }
        if self.votes.contains_key(&reply.replica) || self.accepted.is_some() {
            // Either a second, different page from one replica or, after acceptance, a page
            // that is not the accepted one. Only the first vote of a replica is kept, so a
            // faulty replica cannot vote for two pages; nothing is kept after acceptance.
            return Ok(Counted::Disagreeing);
        }
        self.votes.insert(reply.replica, vote);
        let agreeing = self.votes.values().filter(|v| **v == vote).count();
        if agreeing < self.quorum {
            return Ok(Counted::Recorded);
        }
        let disagreeing = (self.votes.len() - agreeing) as u64;
        self.votes.clear();
        self.accepted = Some(vote);
        Ok(Counted::Accepted {
            epoch: vote.epoch,
            group: vote.group,
            page: reply.page,
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

    /// A tally for a request on partition 0, which group 0 serves.
    fn tally() -> Tally {
        Tally::new(CLIENT, TS, Some(0), 1)
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
        let mut t = tally();
        assert_eq!(t.add(reply(101, 0, "p"), &c), Ok(Counted::Recorded));
        assert_eq!(t.add(reply(101, 0, "p"), &c), Ok(Counted::Duplicate));
        assert_eq!(t.add(reply(103, 0, "p"), &c), accepted("p", 0, 0));
        assert_eq!(t.add(reply(102, 0, "p"), &c), Ok(Counted::Late));
        assert_eq!(t.add(reply(102, 0, "q"), &c), Ok(Counted::Disagreeing));
    }

    /// Partition 0 moves from group 0 in epoch 1 to group 1 in epoch 2: each group serves the
    /// request in one epoch, and their votes for one page still do not add up.
    #[test]
    fn votes_of_two_groups_never_add_up() {
        let first = cluster();
        let mut config = first.config.clone();
        config.config_epoch = 2;
        config.groups[0].partitions.retain(|&p| p != 0);
        config.groups[1].partitions.push(0);
        let second = Cluster::new(config).unwrap();
        let in_second = |replica: u32| Reply {
            config_epoch: ConfigEpoch(2),
            ..reply(replica, 1, "p")
        };
        let mut t = tally();
        assert_eq!(t.add(reply(101, 0, "p"), &first), Ok(Counted::Recorded));
        assert_eq!(t.add(in_second(201), &second), Ok(Counted::Recorded));
        assert_eq!(t.add(in_second(202), &second), accepted_in(2, "p", 1, 1));
    }

    /// Only the group serving the request's first partition in the reply's epoch orders and
    /// answers it: another group's members, correct or not, get no vote, and a request that
    /// declares no partition is answered by nobody.
    #[test]
    fn replies_of_a_group_that_does_not_serve_the_request_are_refused() {
        let c = cluster();
        let mut t = tally();
        assert_eq!(t.add(reply(201, 1, "p"), &c), Err(RejectReason::NotServing));
        assert_eq!(t.add(reply(202, 1, "p"), &c), Err(RejectReason::NotServing));
        assert!(t.votes.is_empty());
        assert_eq!(t.add(reply(101, 0, "p"), &c), Ok(Counted::Recorded));
        assert_eq!(t.add(reply(102, 0, "p"), &c), accepted("p", 0, 0));

        let mut on_partition_1 = Tally::new(CLIENT, TS, Some(1), 1);
        assert_eq!(
            on_partition_1.add(reply(101, 0, "p"), &c),
            Err(RejectReason::NotServing)
        );
        assert_eq!(
            on_partition_1.add(reply(201, 1, "p"), &c),
            Ok(Counted::Recorded)
        );
        let mut on_none = Tally::new(CLIENT, TS, None, 1);
        assert_eq!(
            on_none.add(reply(101, 0, "p"), &c),
            Err(RejectReason::NotServing)
        );
    }

    /// A vote keeps its page's digest, not the page: the reply that completes the quorum brings
    /// the page the caller gets.
    #[test]
    fn a_vote_keeps_its_page_as_a_digest() {
        let c = cluster();
        let page = vec![7; 1 << 20];
        let with_page = |replica| Reply {
            page: page.clone(),
            ..reply(replica, 0, "")
        };
        let mut t = tally();
        assert_eq!(t.add(with_page(101), &c), Ok(Counted::Recorded));
        assert_eq!(t.votes[&NodeId(101)].page, MessageDigest::of(&page));
        let Ok(Counted::Accepted { page: got, .. }) = t.add(with_page(102), &c) else {
            panic!("f+1 matching pages are accepted");
        };
        assert_eq!(got, page);
    }

    /// Once a page is accepted the tally holds the accepted vote alone (an identity keeps it
    /// until its next request), and replies after it, agreeing or not, add nothing.
    #[test]
    fn an_accepted_tally_holds_its_vote_alone_and_later_replies_add_nothing() {
        let c = cluster();
        let mut t = tally();
        assert_eq!(t.add(reply(101, 0, "evil"), &c), Ok(Counted::Recorded));
        assert_eq!(t.add(reply(102, 0, "p"), &c), Ok(Counted::Recorded));
        assert_eq!(t.add(reply(103, 0, "p"), &c), accepted("p", 0, 1));
        assert!(t.votes.is_empty());
        assert_eq!(t.add(reply(101, 0, "evil"), &c), Ok(Counted::Disagreeing));
        assert_eq!(t.add(reply(102, 0, "q"), &c), Ok(Counted::Disagreeing));
        assert_eq!(t.add(reply(101, 0, "p"), &c), Ok(Counted::Late));
        assert!(t.votes.is_empty());
        let accepted = Vote {
            epoch: ConfigEpoch(1),
            group: GroupId(0),
            page: MessageDigest::of(b"p"),
        };
        assert_eq!(t.accepted, Some(accepted));
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
        let mut t = tally();
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
        let mut t = tally();
        assert_eq!(t.add(reply(101, 0, "evil"), &c), Ok(Counted::Recorded));
        assert_eq!(t.add(reply(101, 0, "good"), &c), Ok(Counted::Disagreeing));
        // 101's second page did not replace its first: one more member is needed.
        assert_eq!(t.add(reply(102, 0, "good"), &c), Ok(Counted::Recorded));
        assert_eq!(t.add(reply(103, 0, "good"), &c), accepted("good", 0, 1));
    }

    #[test]
    fn foreign_and_misaddressed_replies_are_rejected() {
        let c = cluster();
        let mut t = tally();
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
