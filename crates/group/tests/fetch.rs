//! How a replica fetches a candidate's PREPAREs it missed: at most 256 counters at a time, and
//! asked again only once that answer was delivered or went 4 ticks unanswered. Asking for the
//! whole gap on every message that arrived while it remained multiplied the answers: a rejoined
//! replica refused thousands of duplicates and took seconds to follow its view's primary.

use group::core::{Action, ReplicaCore};
use group::render::Renderer;
use proto::testing::{node_key, usig, BytesArePartitions, TestCluster};
use proto::{NodeId, Prepare, Proposal, View};
use std::ops::RangeInclusive;
use std::sync::Arc;
use usig::Usig;

struct Plain;

impl Renderer for Plain {
    fn render(&self, _: &proto::RequestBody, result: &[u8]) -> Vec<u8> {
        result.to_vec()
    }
}

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

#[test]
fn a_gap_is_fetched_a_batch_at_a_time_and_not_asked_for_again_while_its_answer_is_due() {
    let cluster = Arc::new(TestCluster::new(1, 1, 2, 4).cluster);
    let me = NodeId(101);
    let rule = Arc::new(BytesArePartitions);
    let mut replica =
        ReplicaCore::new(cluster.clone(), rule, Arc::new(Plain), node_key(me), me, 20).unwrap();
    let mut candidate = usig(NodeId(0));
    let prepares: Vec<Prepare> = (0..600)
        .map(|_| {
            let (view, epoch, primary) = (View(0), cluster.epoch(), NodeId(0));
            let bytes = Prepare::warranted_bytes(view, epoch, primary, &[], &[], None);
            Prepare {
                view,
                config_epoch: epoch,
                primary,
                entries: Vec::new(),
                joins: Vec::new(),
                reconfigure: None,
                ui: candidate.create_ui(&bytes).unwrap(),
            }
        })
        .collect();
    let start = prepares[0].ui.counter;
    let first_batch = start..=start + 255;

    // The last one arrives first: the first 256 counters of the gap are asked for.
    assert_eq!(
        deliver(&mut replica, &prepares[599]),
        vec![first_batch.clone()]
    );
    // Another one beyond the gap while that answer is due: not asked again.
    assert_eq!(deliver(&mut replica, &prepares[598]), Vec::new());
    // Nor on the next three ticks; on the fourth, unanswered, it is.
    for _ in 0..3 {
        assert_eq!(fetches(&replica.on_tick()), Vec::new());
    }
    assert_eq!(fetches(&replica.on_tick()), vec![first_batch]);
    // The answer arrives: once it is delivered, the next batch is asked for at once, and once.
    let asked: Vec<_> = (prepares[..256].iter())
        .flat_map(|p| deliver(&mut replica, p))
        .collect();
    assert_eq!(asked, vec![start + 256..=start + 511]);
}
