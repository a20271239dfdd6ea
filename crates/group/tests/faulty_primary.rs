//! A primary that spends a counter of its view on anything but the view's next PREPARE is
//! faulty. A replica takes none of its PREPAREs from there on and asks for the next view, so
//! that its history has no null slot and its VIEW-CHANGE shows every slot after its checkpoint,
//! which is what lets a checker refuse a VIEW-CHANGE with a gap (docs/protocol.md, "No null
//! slots"). A PREPARE over the size limits is refused the same way ("Requests too large to
//! carry").

mod common;

use common::Group;
use group::view::Checker;
use proto::View;

#[test]
fn a_primary_that_spends_a_counter_on_another_view_is_refused_from_there_on() {
    let Group {
        cluster,
        mut primary,
        mut replica,
        mut peer,
    } = Group::new();
    let first = primary.prepare();
    let ours = replica.prepare(&first);
    let peers = peer.prepare(&first);
    assert_eq!(ours.commits.len(), 1);
    assert_eq!(
        replica.commit(peers.commits[0].clone()).unwrap().decided,
        vec![1]
    );

    // Counter 2 goes to a PREPARE of view 7: refused, and view 1 asked for at once.
    let misnamed = replica.prepare(&primary.misnamed());
    assert_eq!(misnamed.asked, vec![View(1)]);
    assert!(misnamed.commits.is_empty());
    // Its later PREPAREs of view 0 take no slot (they would have followed a null one).
    for _ in 0..3 {
        let later = replica.prepare(&primary.prepare());
        assert!(later.commits.is_empty() && later.asked.is_empty());
    }

    // With a peer asking too, the replica leaves the view: its VIEW-CHANGE shows slot 1 only,
    // and checks out.
    let left = replica.asked_by(102, View(1));
    let vc = &left.view_changes[0];
    assert_eq!(vc.body.prepares, vec![std::sync::Arc::new(first)]);
    let shown = Checker::new(cluster).view_change(vc).unwrap();
    assert_eq!(shown.slots.len(), 1);
}

/// A PREPARE whose request is over the size limit: no COMMIT (it would carry the PREPARE, and
/// could exceed a frame), the next view asked for, and the VIEW-CHANGE shows only what came
/// before it.
#[test]
fn a_primary_that_orders_a_request_over_the_size_limit_is_refused() {
    let Group {
        cluster,
        mut primary,
        mut replica,
        ..
    } = Group::new();
    let first = primary.prepare();
    assert_eq!(replica.prepare(&first).commits.len(), 1);
    let oversized = replica.prepare(&primary.oversized());
    assert_eq!(oversized.asked, vec![View(1)]);
    assert!(oversized.commits.is_empty());
    let left = replica.asked_by(102, View(1));
    let vc = &left.view_changes[0];
    assert_eq!(vc.body.prepares, vec![std::sync::Arc::new(first)]);
    assert!(Checker::new(cluster).view_change(vc).is_ok());
}
