//! A replica COMMITs a PREPARE only within `VIEW_CHANGE_SPAN` slots of its stable checkpoint,
//! and its VIEW-CHANGE leaves out the PREPAREs it processed beyond that span, so a primary
//! running ahead cannot make a correct replica's VIEW-CHANGE grow past a frame
//! (docs/protocol.md, "Bounded VIEW-CHANGEs").

mod common;

use common::{Group, Member};
use group::view::Checker;
use proto::{Prepare, View, CHECKPOINT_INTERVAL, VIEW_CHANGE_SPAN};

/// `member` processes `prepares`; its COMMITs and CHECKPOINTs.
fn process(member: &mut Member, prepares: &[Prepare]) -> common::Outcome {
    let mut all = common::Outcome::default();
    for p in prepares {
        let outcome = member.prepare(p);
        all.commits.extend(outcome.commits);
        all.checkpoints.extend(outcome.checkpoints);
    }
    all
}

/// Our own CHECKPOINTs run ahead of the stable checkpoint (no peer's CHECKPOINT arrives), so
/// the high watermark alone would let the replica COMMIT up to slot 511; the span stops it at
/// 384, the VIEW-CHANGE shows exactly that far and checks out, and a stable checkpoint moves
/// the span on at once.
#[test]
fn commits_stay_within_the_span_of_the_stable_checkpoint_and_the_view_change_shows_no_more() {
    let Group {
        cluster,
        mut primary,
        mut replica,
        ..
    } = Group::new();
    // Slots 1-300 have no work for the group: nothing to agree on, so our CHECKPOINTs at 128
    // and 256 go out at once.
    let empty: Vec<Prepare> = (0..300).map(|_| primary.empty()).collect();
    let ours = process(&mut replica, &empty);
    let slots: Vec<u64> = ours.checkpoints.iter().map(|c| c.slot).collect();
    assert_eq!(slots, vec![CHECKPOINT_INTERVAL, 2 * CHECKPOINT_INTERVAL]);
    // Slots 301-500 are the group's work.
    let work: Vec<Prepare> = (0..200).map(|_| primary.prepare()).collect();
    let ours = process(&mut replica, &work);
    let committed: Vec<u64> = ours.commits.iter().map(|c| c.slot).collect();
    assert_eq!(committed, (301..=VIEW_CHANGE_SPAN).collect::<Vec<_>>());

    // Its VIEW-CHANGE shows slots 1-384, every one it committed, and is valid.
    replica.asked_by(102, View(1));
    let left = replica.asked_by(103, View(1));
    let vc = &left.view_changes[0];
    assert_eq!(vc.body.prepares.len() as u64, VIEW_CHANGE_SPAN);
    let shown = Checker::new(cluster.clone()).view_change(vc).unwrap();
    assert_eq!(shown.slots.len() as u64, VIEW_CHANGE_SPAN);
}

#[test]
fn a_checkpoint_that_becomes_stable_moves_the_span_on_at_once() {
    let Group {
        mut primary,
        mut replica,
        mut peer,
        ..
    } = Group::new();
    let empty: Vec<Prepare> = (0..300).map(|_| primary.empty()).collect();
    process(&mut replica, &empty);
    let peers = process(&mut peer, &empty);
    let work: Vec<Prepare> = (0..200).map(|_| primary.prepare()).collect();
    let before = process(&mut replica, &work).commits.len();
    assert_eq!(before as u64, VIEW_CHANGE_SPAN - 300);
    // The peer's CHECKPOINT at 128 makes it stable (f+1 = 2 with ours): slots up to 512 are
    // within the span, so the rest of the work is committed without waiting for a tick.
    let at_128 = peers.checkpoints[0].clone();
    assert_eq!(at_128.slot, CHECKPOINT_INTERVAL);
    let after = replica.checkpoint(at_128).unwrap();
    let committed: Vec<u64> = after.commits.iter().map(|c| c.slot).collect();
    assert_eq!(committed, (VIEW_CHANGE_SPAN + 1..=500).collect::<Vec<_>>());
}
