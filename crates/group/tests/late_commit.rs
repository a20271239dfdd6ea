//! A COMMIT that arrives after its slot was decided changes nothing at the replica, and the link
//! already says who sent it; its warrant is checked all the same. The warrant is what ties a
//! peer's message at counter c to the one it shows everyone else: a Byzantine peer that put a
//! made-up "late COMMIT" at the counter of its real VIEW-CHANGE, if that were believed, would
//! have its later COMMITs of the view it left counted (docs/protocol.md, "Why a late COMMIT is
//! still checked").

mod common;

use common::{Member, Primary};
use group::core::Reject;
use proto::testing::usig;
use proto::{Commit, NodeId};
use usig::{UniqueWarrant, Usig};

/// Replica 101 and the view-0 primary.
struct Fixture {
    replica: Member,
    primary: Primary,
}

impl Fixture {
    fn new() -> Fixture {
        let cluster = common::cluster();
        Fixture {
            replica: Member::new(&cluster, 101),
            primary: Primary::new(&cluster),
        }
    }

    /// The primary's next PREPARE, processed here: returns our COMMIT for it (which names its
    /// slot, proposal and prefix).
    fn prepare(&mut self) -> Commit {
        let prepare = self.primary.prepare();
        let mut ours = self.replica.prepare(&prepare).commits;
        ours.pop().expect("our COMMIT goes out")
    }

    /// Hands a peer's COMMIT to the replica; true when it decided that slot (f+1 with ours).
    fn decides(&mut self, commit: Commit) -> Result<bool, Reject> {
        let slot = commit.slot;
        Ok(self.replica.commit(commit)?.decided.contains(&slot))
    }
}

/// `peer`'s COMMIT matching ours, under the warrant `ui` makes for its bytes.
fn commit_of(peer: u32, ours: &Commit, ui: impl FnOnce(&[u8]) -> UniqueWarrant) -> Commit {
    let replica = NodeId(peer);
    let bytes =
        Commit::warranted_bytes(ours.view, replica, ours.slot, &ours.proposal, &ours.prefix);
    Commit {
        replica,
        prepare: None,
        ui: ui(&bytes),
        ..ours.clone()
    }
}

/// Slot 1 is decided with 102's COMMIT; then 103's COMMITs for slots 1 (late) and 2 arrive.
/// `forge`: 103's counter 1 went to another message (its VIEW-CHANGE, say), and the "late
/// COMMIT" carries that warrant. Returns whether 103's COMMIT decided slot 2.
fn slot_2_decided_by_103(forge: bool) -> bool {
    let mut f = Fixture::new();
    let mut peer_102 = usig(NodeId(102));
    let mut peer_103 = usig(NodeId(103));
    let mut warrant_103 = |bytes: &[u8]| peer_103.create_ui(bytes).unwrap();
    let first = f.prepare();
    let by_102 = commit_of(102, &first, |b| peer_102.create_ui(b).unwrap());
    assert_eq!(f.decides(by_102), Ok(true));

    let late = if forge {
        let elsewhere = warrant_103(b"103's VIEW-CHANGE");
        commit_of(103, &first, |_| elsewhere)
    } else {
        commit_of(103, &first, &mut warrant_103)
    };
    let refused = f.decides(late);
    if forge {
        assert!(matches!(refused, Err(Reject::Warrant(_))), "{refused:?}");
    } else {
        assert_eq!(refused, Ok(false), "a late COMMIT decides nothing");
    }

    let second = f.prepare();
    let decided = f.decides(commit_of(103, &second, warrant_103)).unwrap();
    assert_eq!(f.replica.core.commit_gaps(), usize::from(forge));
    decided
}

#[test]
fn a_late_commit_with_its_own_warrant_keeps_the_peer_in_order() {
    assert!(slot_2_decided_by_103(false));
}

#[test]
fn a_late_commit_under_another_messages_warrant_is_refused_and_moves_nothing_on() {
    // The COMMIT 103 warranted after its counter 1 waits behind it: it is not counted until the
    // message 103 really warranted at counter 1 arrives (and if that was a VIEW-CHANGE, never).
    assert!(!slot_2_decided_by_103(true));
}
