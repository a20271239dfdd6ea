//! How a replica fetches a candidate's PREPAREs it missed: at most 256 counters at a time, and
//! asked again only once that answer was delivered or went 4 ticks unanswered. Asking for the
//! whole gap on every message that arrived while it remained multiplied the answers: a rejoined
//! replica refused thousands of duplicates and took seconds to follow its view's primary. And
//! when it may have lost the tail of the primary's sequence: it asks a quiet primary only.

mod common;

use common::Primary;
use group::core::{Action, ReplicaCore};
use proto::testing::{node_key, usig, warranted_commit};
use proto::{NodeId, Prepare, Proposal, View};
use std::ops::RangeInclusive;
use std::sync::Arc;
use usig::{MessageDigest, Usig};

fn fetches(actions: &[Action]) -> Vec<RangeInclusive<u64>> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::FetchPrepares { counters, .. } => Some(counters.clone()),
            _ => None,
        })
        .collect()
}

/// Delivers a PREPARE and returns the fetches it made the replica ask for.
fn deliver(replica: &mut ReplicaCore, p: &Prepare) -> Vec<RangeInclusive<u64>> {
    fetches(&replica.on_proposal(Proposal::Prepare(p.clone())).unwrap())
}

/// Replica 101 of a one-group cluster, in view 0, and its cluster.
fn replica_101() -> (Arc<proto::config::Cluster>, ReplicaCore) {
    let cluster = common::cluster();
    let replica = common::replica(&cluster, NodeId(101));
    (cluster, replica)
}

/// `n` PREPAREs without entries from the view-0 primary, in counter order.
fn empty_prepares(cluster: &proto::config::Cluster, n: usize) -> Vec<Prepare> {
    let mut primary = Primary::new(cluster);
    (0..n).map(|_| primary.empty()).collect()
}

/// A PREPARE that starts no agreement (a JOIN's, say) is carried by no peer's COMMIT, so a lost
/// one at the end of the primary's sequence shows no gap until its next PREPARE. While a peer's
/// gap stays open (a restarted peer whose JOIN we may have lost), a replica asks for what
/// follows its last PREPARE, but only from a primary that was quiet for 4 ticks: under load,
/// with PREPAREs arriving, COMMITs that are merely reordered never make it ask.
#[test]
fn a_quiet_primary_is_asked_for_its_tail_while_a_peer_gap_stays_open() {
    let (cluster, mut replica) = replica_101();
    let prepares = empty_prepares(&cluster, 30);
    let start = prepares[0].ui.counter;
    assert_eq!(deliver(&mut replica, &prepares[0]), Vec::new());
    // Peer 102's second warrant arrives, its first not (yet): a gap before it.
    let mut peer = usig(NodeId(102));
    let point = (MessageDigest([1; 32]), MessageDigest([2; 32]));
    let _lost = warranted_commit(&mut peer, View(0), NodeId(102), 5, point);
    let commit = warranted_commit(&mut peer, View(0), NodeId(102), 5, point);
    replica.on_commit(commit).unwrap();
    assert_eq!(replica.commit_gaps(), 1);

    // Under load: a PREPARE every tick, and never a probe.
    for p in &prepares[1..20] {
        assert_eq!(deliver(&mut replica, p), Vec::new());
        assert_eq!(fetches(&replica.on_tick()), Vec::new());
    }
    // The primary goes quiet: on the fourth tick after its last PREPARE it is asked for the
    // eight counters after that PREPARE, then again only after four more.
    let tail = start + 20..=start + 27;
    for _ in 0..2 {
        assert_eq!(fetches(&replica.on_tick()), Vec::new());
    }
    assert_eq!(fetches(&replica.on_tick()), vec![tail.clone()]);
    for _ in 0..3 {
        assert_eq!(fetches(&replica.on_tick()), Vec::new());
    }
    assert_eq!(fetches(&replica.on_tick()), vec![tail]);
    // Its answer is heard: quiet again for four ticks before the next probe.
    assert_eq!(deliver(&mut replica, &prepares[20]), Vec::new());
    for _ in 0..3 {
        assert_eq!(fetches(&replica.on_tick()), Vec::new());
    }
    assert_eq!(fetches(&replica.on_tick()), vec![start + 21..=start + 28]);
}

/// Without a gap at any peer, a quiet primary is never asked (an idle cluster stays silent).
#[test]
fn a_quiet_primary_is_not_asked_without_a_peer_gap() {
    let (cluster, mut replica) = replica_101();
    let prepares = empty_prepares(&cluster, 1);
    assert_eq!(deliver(&mut replica, &prepares[0]), Vec::new());
    for _ in 0..40 {
        assert_eq!(fetches(&replica.on_tick()), Vec::new());
    }
}

#[test]
fn a_gap_is_fetched_a_batch_at_a_time_and_not_asked_for_again_while_its_answer_is_due() {
    let (cluster, mut replica) = replica_101();
    // Within the horizon (`PREPARE_HORIZON`, 512 slots with no stable checkpoint).
    let prepares = empty_prepares(&cluster, 500);
    let start = prepares[0].ui.counter;
    let first_batch = start..=start + 255;

    // The last one arrives first: the first 256 counters of the gap are asked for.
    assert_eq!(
        deliver(&mut replica, &prepares[499]),
        vec![first_batch.clone()]
    );
    // Another one beyond the gap while that answer is due: not asked again.
    assert_eq!(deliver(&mut replica, &prepares[498]), Vec::new());
    // Nor on the next three ticks; on the fourth, unanswered, it is.
    for _ in 0..3 {
        assert_eq!(fetches(&replica.on_tick()), Vec::new());
    }
    assert_eq!(fetches(&replica.on_tick()), vec![first_batch]);
    // The answer arrives: once it is delivered, the next batch is asked for at once, and once.
    let asked: Vec<_> = (prepares[..256].iter())
        .flat_map(|p| deliver(&mut replica, p))
        .collect();
    assert_eq!(asked, vec![start + 256..=start + 497]);
}

/// A FETCH-COMMITS is signed by a group peer, but a Byzantine peer chooses its fields: a reversed
/// range of warrant counters is refused, where `BTreeMap::range` would have panicked the
/// replica's event loop once it had sent anything.
#[test]
fn a_reversed_fetch_commits_range_is_refused_without_a_panic() {
    use group::core::Reject;
    use proto::{ReqViewChange, Signature};
    let (_, mut replica) = replica_101();
    // Two peers ask for view 1: the replica warrants its VIEW-CHANGE, so it has sent something.
    let mut warrant = None;
    for peer in [NodeId(102), NodeId(103)] {
        let req = ReqViewChange {
            replica: peer,
            next_view: View(1),
            signature: Signature([0; 64]),
        }
        .sign(&node_key(peer));
        for action in replica.on_req_view_change(&req).unwrap() {
            if let Action::Warrant { bytes } = action {
                warrant = Some(bytes);
            }
        }
    }
    let bytes = warrant.expect("the VIEW-CHANGE is warranted");
    replica.warranted(usig(NodeId(101)).create_ui(&bytes).unwrap());
    let sent = replica
        .on_fetch_commits(NodeId(102), Some(1..=1), &[])
        .unwrap();
    assert_eq!(sent.len(), 1, "what it sent is there to fetch: {sent:?}");

    #[allow(clippy::reversed_empty_ranges)]
    let reversed = 5..=1;
    assert_eq!(
        replica.on_fetch_commits(NodeId(102), Some(reversed), &[]),
        Err(Reject::BadFetch)
    );
}

/// Member 101 after `empty` PREPAREs without work for the group and one with work: its COMMIT
/// for that last slot is there to fetch, and so are the CHECKPOINTs it warranted on the way.
/// The two members' CHECKPOINTs make them stable at both, so that the last slot is within the
/// span a replica COMMITs in, and every PREPARE within the horizon it processes them in.
fn committed_after(empty: usize) -> (ReplicaCore, u64) {
    let mut g = common::Group::new();
    for _ in 0..empty {
        let p = g.primary.empty();
        let ours = g.replica.prepare(&p);
        assert!(ours.commits.is_empty());
        for checkpoint in g.peer.prepare(&p).checkpoints {
            g.replica.checkpoint(checkpoint).unwrap();
        }
        for checkpoint in ours.checkpoints {
            g.peer.checkpoint(checkpoint).unwrap();
        }
    }
    let p = g.primary.prepare();
    let commits = g.replica.prepare(&p).commits;
    let slot = empty as u64 + 1;
    assert_eq!(
        commits.iter().map(|c| c.slot).collect::<Vec<_>>(),
        vec![slot]
    );
    (g.replica.core, slot)
}

/// The COMMITs a fetch's answer carries, by slot.
fn fetched_slots(actions: &[Action]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::SendCommit { commit, .. } => Some(commit.slot),
            _ => None,
        })
        .collect()
}

/// A correct replica lists the slots it fetches once each, in ascending order. A Byzantine
/// member's FETCH-COMMITS naming one slot 100,000 times (millions fit in a frame) was answered
/// with 100,000 COMMITs: one listing a slot twice, or out of order, is now refused.
#[test]
fn a_fetch_commits_with_repeated_or_unordered_slots_is_refused() {
    use group::core::Reject;
    let (replica, slot) = committed_after(3);
    // How many messages the answer carries.
    let asked = |slots: &[u64]| {
        let answer = replica.on_fetch_commits(NodeId(102), None, slots);
        answer.map(|actions| fetched_slots(&actions).len())
    };
    assert_eq!(asked(&[slot]), Ok(1));
    assert_eq!(asked(&[1, 2, slot]), Ok(1));
    assert_eq!(asked(&vec![slot; 100_000]), Err(Reject::BadFetch));
    assert_eq!(asked(&[slot, slot]), Err(Reject::BadFetch));
    assert_eq!(asked(&[slot, 1]), Err(Reject::BadFetch));
}

/// One fetch is answered for at most 256 warrant counters (what a correct replica asks for at
/// a time) and for its lowest `MAX_FETCHED_SLOTS` slots: a range of every counter, which was
/// answered with everything the replica kept, is refused, and a slot listed after the first
/// `MAX_FETCHED_SLOTS` is not answered.
#[test]
fn a_fetch_commits_is_answered_for_a_batch_of_warrants_and_its_lowest_slots() {
    use group::core::{Reject, MAX_FETCHED_SLOTS};
    let (replica, slot) = committed_after(MAX_FETCHED_SLOTS + 10);
    // The slots of the COMMITs the answer carries, and how many messages it carries.
    let asked = |warrants, slots: &[u64]| {
        let answer = replica.on_fetch_commits(NodeId(102), warrants, slots);
        answer.map(|actions| (fetched_slots(&actions), actions.len()))
    };
    // Everything it sent: its eight CHECKPOINTs, one per interval, and its COMMIT.
    assert_eq!(asked(Some(1..=256), &[]), Ok((vec![slot], 9)));
    assert_eq!(asked(Some(1..=257), &[]), Err(Reject::BadFetch));
    assert_eq!(asked(Some(0..=u64::MAX), &[]), Err(Reject::BadFetch));

    let lowest: Vec<u64> = (slot + 1 - MAX_FETCHED_SLOTS as u64..=slot).collect();
    assert_eq!(asked(None, &lowest), Ok((vec![slot], 1)));
    let more: Vec<u64> = (slot - MAX_FETCHED_SLOTS as u64..=slot).collect();
    assert_eq!(asked(None, &more), Ok((vec![], 0)));
}
