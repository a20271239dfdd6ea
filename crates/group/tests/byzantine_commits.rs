//! A Byzantine member's COMMITs and CHECKPOINTs are warranted, so they are delivered in its
//! counter order like anyone's; what they name is its choice. None of it may cost a correct
//! member's COMMIT its vote, or open agreements without bound (docs/protocol.md, "Byzantine
//! input").

mod common;

use common::Group;
use group::core::{Action, Reject, AGREEMENT_HORIZON};
use proto::testing::{usig, warranted_checkpoint, warranted_commit};
use proto::{Checkpoint, Commit, Lineage, NodeId, View, CHECKPOINT_INTERVAL};
use usig::soft::SoftUsig;
use usig::MessageDigest;

/// Member 103's COMMIT for `slot` of view 0, for a proposal nobody made.
fn made_up_commit(byzantine: &mut SoftUsig, slot: u64) -> Commit {
    let made_up = (MessageDigest([7; 32]), MessageDigest([8; 32]));
    warranted_commit(byzantine, View(0), NodeId(103), slot, made_up)
}

/// Member 103's CHECKPOINT claiming `slot`.
fn claim(byzantine: &mut SoftUsig, slot: u64) -> Checkpoint {
    let point = (MessageDigest([1; 32]), MessageDigest([2; 32]));
    warranted_checkpoint(
        byzantine,
        NodeId(103),
        slot,
        point,
        Lineage::GENESIS,
        vec![],
    )
}

/// 103 commits to something else at slot 2 before anything reached 101. 102's COMMIT for slot 2
/// (carrying its PREPARE) arrives while 101 still misses the primary's counter 1, so 101 cannot
/// process that PREPARE yet. It used to count only COMMITs matching the first one it saw for a
/// slot, and to drop them all when its own PREPARE said otherwise: 102's vote was lost for good
/// (it is never delivered twice), and slot 2 waited for 103, which never helps.
#[test]
fn a_commit_for_something_else_that_came_first_costs_a_correct_one_nothing() {
    let mut g = Group::new();
    let mut byzantine = usig(NodeId(103));
    // Counter 1 has no work for the group (no COMMIT carries it); counter 2 does.
    let (first, second) = (g.primary.empty(), g.primary.prepare());
    assert!(g.peer.prepare(&first).commits.is_empty());
    let peers = g.peer.prepare(&second).commits;
    assert_eq!(peers.iter().map(|c| c.slot).collect::<Vec<_>>(), vec![2]);

    let early = g.replica.commit(made_up_commit(&mut byzantine, 2)).unwrap();
    assert!(early.decided.is_empty());
    let waiting = g.replica.commit(peers[0].clone()).unwrap();
    assert!(waiting.commits.is_empty(), "slot 2 waits for counter 1");

    let caught_up = g.replica.prepare(&first);
    assert_eq!(caught_up.commits.len(), 1, "our COMMIT for slot 2");
    assert_eq!(caught_up.decided, vec![2], "with 102's, it decides");
    assert_eq!(g.replica.core.open_agreements(), 0);
}

/// 103 claims a CHECKPOINT far ahead, which lifts the high watermark its COMMITs are held to,
/// and then commits to slot after slot. Only those within the horizon of 101's history open
/// agreements (one per slot, whoever sends them); the rest are refused and counted. Those it
/// opened are not asked for again, and the group goes on deciding.
#[test]
fn commits_beyond_the_horizon_open_no_agreement() {
    let mut g = Group::new();
    let mut byzantine = usig(NodeId(103));
    let core = &mut g.replica.core;
    core.on_checkpoint(claim(&mut byzantine, 1_000 * CHECKPOINT_INTERVAL))
        .unwrap();
    let sent = 3 * AGREEMENT_HORIZON;
    for slot in 1..=sent {
        core.on_commit(made_up_commit(&mut byzantine, slot))
            .unwrap();
    }
    assert_eq!(core.open_agreements() as u64, AGREEMENT_HORIZON);
    let refused = core.take_refusals();
    assert_eq!(refused.len() as u64, sent - AGREEMENT_HORIZON);
    assert!(refused.iter().all(|r| *r == Reject::BeyondHorizon));
    // Nor does 101 ask its peers for COMMITs at slots it has not reached.
    for _ in 0..8 {
        let asked = core
            .on_tick()
            .into_iter()
            .any(|a| matches!(a, Action::FetchCommits { slots, .. } if !slots.is_empty()));
        assert!(!asked);
    }

    // Slot 1 is decided by 101 and 102, whatever 103 said about it.
    let prepare = g.primary.prepare();
    let peers = g.peer.prepare(&prepare).commits;
    assert!(g.replica.prepare(&prepare).decided.is_empty());
    let decided = g.replica.commit(peers[0].clone()).unwrap().decided;
    assert_eq!(decided, vec![1]);
}
