//! A replica COMMITs a PREPARE only within `VIEW_CHANGE_SPAN` slots of its stable checkpoint,
//! and its VIEW-CHANGE leaves out the PREPAREs it processed beyond that span, so a primary
//! running ahead cannot make a correct replica's VIEW-CHANGE grow past a frame
//! (docs/protocol.md, "Bounded VIEW-CHANGEs").

mod common;

use common::{Group, Member};
use group::core::{Reject, PREPARE_HORIZON};
use group::view::Checker;
use proto::{Prepare, View, CHECKPOINT_INTERVAL, VIEW_CHANGE_SPAN};
use usig::VerifyError;

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

/// No checkpoint is stable (no peer's CHECKPOINT arrives), so the high watermark alone would
/// let the replica COMMIT up to slot 256; the span stops it at 128, and its VIEW-CHANGE shows
/// exactly that far and checks out.
#[test]
fn commits_stay_within_the_span_of_the_stable_checkpoint_and_the_view_change_shows_no_more() {
    let Group {
        cluster,
        mut primary,
        mut replica,
        ..
    } = Group::new();
    // Slots 1-100 have no work for the group, slots 101-300 have.
    let empty: Vec<Prepare> = (0..100).map(|_| primary.empty()).collect();
    process(&mut replica, &empty);
    let work: Vec<Prepare> = (0..200).map(|_| primary.prepare()).collect();
    let ours = process(&mut replica, &work);
    let committed: Vec<u64> = ours.commits.iter().map(|c| c.slot).collect();
    assert_eq!(committed, (101..=VIEW_CHANGE_SPAN).collect::<Vec<_>>());

    // Its VIEW-CHANGE shows slots 1-128, every one it committed, and is valid.
    replica.asked_by(102, View(1));
    let left = replica.asked_by(103, View(1));
    let vc = &left.view_changes[0];
    assert_eq!(vc.body.prepares.len() as u64, VIEW_CHANGE_SPAN);
    let shown = Checker::new(cluster.clone()).view_change(vc).unwrap();
    assert_eq!(shown.slots.len() as u64, VIEW_CHANGE_SPAN);
}

/// Our own CHECKPOINT at 128 runs ahead of the stable checkpoint: nothing past the span is
/// committed until a peer's CHECKPOINT at 128 makes it stable, and then at once.
#[test]
fn a_checkpoint_that_becomes_stable_moves_the_span_on_at_once() {
    let Group {
        mut primary,
        mut replica,
        mut peer,
        ..
    } = Group::new();
    // Slots 1-200 have no work for the group: nothing to agree on, so the CHECKPOINTs at 128
    // go out at once.
    let empty: Vec<Prepare> = (0..200).map(|_| primary.empty()).collect();
    let ours = process(&mut replica, &empty);
    assert_eq!(ours.checkpoints.len(), 1);
    let peers = process(&mut peer, &empty);
    let work: Vec<Prepare> = (0..100).map(|_| primary.prepare()).collect();
    assert!(process(&mut replica, &work).commits.is_empty());
    // The peer's CHECKPOINT at 128 makes it stable (f+1 = 2 with ours): slots up to 256 are
    // within the span, so they are committed without waiting for a tick.
    let at_128 = peers.checkpoints[0].clone();
    assert_eq!(at_128.slot, CHECKPOINT_INTERVAL);
    let after = replica.checkpoint(at_128).unwrap();
    let committed: Vec<u64> = after.commits.iter().map(|c| c.slot).collect();
    let span = CHECKPOINT_INTERVAL + VIEW_CHANGE_SPAN;
    assert_eq!(committed, (201..=span).collect::<Vec<_>>());
}

/// A primary running far ahead (PREPAREs with no work for the group, as fast as it likes) makes
/// a replica keep at most `PREPARE_HORIZON` slots past its stable checkpoint: the later
/// PREPAREs are refused unprocessed, and the replica asks for them again once a CHECKPOINT
/// moves the stable checkpoint on, up to the new horizon only.
#[test]
fn a_primary_running_far_ahead_is_held_at_the_horizon_and_fetched_from_as_checkpoints_move() {
    let Group {
        mut primary,
        mut replica,
        mut peer,
        ..
    } = Group::new();
    let flood: Vec<Prepare> = (0..PREPARE_HORIZON + 200)
        .map(|_| primary.empty())
        .collect();
    let mut refused = 0;
    for p in &flood {
        match replica.try_prepare(p) {
            Ok(_) => {}
            Err(Reject::Warrant(VerifyError::BeyondCeiling { .. })) => refused += 1,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(refused, 200);
    let retained = replica.core.retained();
    assert_eq!(
        (retained.stable, retained.prepares as u64),
        (0, PREPARE_HORIZON)
    );

    // The peer's CHECKPOINT at 128 makes it stable: the horizon moves to 640, and the replica
    // asks for what it refused up to there.
    let peers = process(&mut peer, &flood[..CHECKPOINT_INTERVAL as usize]);
    let after = replica.checkpoint(peers.checkpoints[0].clone()).unwrap();
    let next = PREPARE_HORIZON + 1;
    let horizon = CHECKPOINT_INTERVAL + PREPARE_HORIZON;
    assert_eq!(after.fetched_prepares, vec![next..=horizon]);
    for p in &flood[PREPARE_HORIZON as usize..] {
        let refused = replica.try_prepare(p).is_err();
        assert_eq!(refused, p.ui.counter > horizon, "counter {}", p.ui.counter);
    }
    let retained = replica.core.retained();
    let kept = (retained.stable, retained.prepares as u64);
    assert_eq!(kept, (CHECKPOINT_INTERVAL, PREPARE_HORIZON));
}
