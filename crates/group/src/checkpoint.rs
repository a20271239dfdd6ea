//! Checkpoints (docs/protocol.md, "Checkpoints and garbage collection"): a replica's running
//! digest and order book every [`CHECKPOINT_INTERVAL`] slots, its own CHECKPOINTs, the votes of
//! every replica, and the latest stable checkpoint (f+1 matching CHECKPOINTs from every group),
//! behind which histories, logs and decisions can go.

use crate::order::OrderBook;
use crate::view::Low;
use proto::config::Cluster;
use proto::{Anchor, Checkpoint, GroupId, Lineage, NodeId, StableCheckpoint, CHECKPOINT_INTERVAL};
use std::collections::BTreeMap;
use std::sync::Arc;
use usig::MessageDigest;

/// Checkpoint slots ahead of our history whose votes we keep (a lagging replica still learns
/// of the next stable checkpoint; a Byzantine one cannot fill memory with far-future votes).
const VOTE_HORIZON: u64 = 4 * CHECKPOINT_INTERVAL;

/// What one checkpoint vouches for: slot, running digest, order book digest, and the history it
/// was taken on.
pub type Point = (u64, MessageDigest, MessageDigest, Lineage);

/// The slot of the CHECKPOINT a replica must have warranted before it COMMITs `slot`: the
/// multiple of the interval two below `slot`'s (the high watermark; 0 needs none).
pub fn watermark(slot: u64) -> u64 {
    (slot.saturating_sub(1) / CHECKPOINT_INTERVAL)
        .saturating_sub(1)
        .saturating_mul(CHECKPOINT_INTERVAL)
}

/// What we learnt of one member of our group (ourselves included) from its CHECKPOINTs, in its
/// counter order.
#[derive(Default)]
struct Member {
    /// The highest slot of its CHECKPOINTs so far: its COMMITs above the watermark of this are
    /// not counted, and a CHECKPOINT that does not go above it is never reported.
    highest: u64,
    /// Its first CHECKPOINT at each slot (each above every earlier one), for our reports.
    first: BTreeMap<u64, Anchor>,
}

pub struct Checkpoints {
    cluster: Arc<Cluster>,
    me: NodeId,
    /// Members of our group, by id.
    members: BTreeMap<NodeId, Member>,
    /// For each slot of our own first CHECKPOINTs: the CHECKPOINTs of our group an interval
    /// above that report it, by reporter. f+1 of them let our VIEW-CHANGE's log start there.
    proofs: BTreeMap<u64, BTreeMap<NodeId, Checkpoint>>,
    /// Our running digest and order book at each checkpoint slot we passed, above the stable.
    snapshots: BTreeMap<u64, (MessageDigest, OrderBook, Lineage)>,
    /// The highest slot we queued our CHECKPOINT for.
    queued: u64,
    /// Our warranted CHECKPOINTs: slot and the warrant counter of the first at that slot.
    own: BTreeMap<u64, u64>,
    votes: BTreeMap<Point, BTreeMap<NodeId, Checkpoint>>,
    /// Where each replica's vote at each slot is: one per replica and slot, its latest by
    /// warrant (a correct replica sends another only with a new view's history), so a Byzantine
    /// one cannot hold an entry per warrant it spends.
    voted: BTreeMap<(u64, NodeId), Point>,
    stable: Low,
}

impl Checkpoints {
    /// The checkpoints of replica `me` of `group`.
    pub fn new(cluster: Arc<Cluster>, me: NodeId, group: GroupId) -> Self {
        let members = cluster
            .members(group)
            .map(|r| (NodeId(r.id), Member::default()))
            .collect();
        Checkpoints {
            stable: Low::start(&cluster),
            cluster,
            me,
            members,
            proofs: BTreeMap::new(),
            snapshots: BTreeMap::new(),
            queued: 0,
            own: BTreeMap::new(),
            votes: BTreeMap::new(),
            voted: BTreeMap::new(),
        }
    }

    /// The latest stable checkpoint.
    pub fn stable(&self) -> &Low {
        &self.stable
    }

    /// Our history reached `slot` with this running digest and book. Returns a newly stable
    /// checkpoint if the votes for it were already in.
    pub fn passed(
        &mut self,
        slot: u64,
        chain: MessageDigest,
        book: &OrderBook,
        lineage: Lineage,
    ) -> Option<u64> {
        if slot % CHECKPOINT_INTERVAL != 0 || slot <= self.stable.slot {
            return None;
        }
        self.snapshots.insert(slot, (chain, book.clone(), lineage));
        self.try_stable(slot)
    }

    /// Our order book at a checkpoint slot we passed above the stable one.
    pub fn book_at(&self, slot: u64) -> Option<&OrderBook> {
        self.snapshots.get(&slot).map(|(_, book, _)| book)
    }

    /// Our next CHECKPOINT, if `decided_through(slot)` says our group's work up to a passed
    /// checkpoint slot is decided and executed.
    pub fn due(&mut self, decided_through: impl Fn(u64) -> bool) -> Option<Point> {
        let (&slot, (chain, book, lineage)) = self.snapshots.range(self.queued + 1..).next()?;
        if !decided_through(slot) {
            return None;
        }
        self.queued = slot;
        Some((slot, *chain, book.digest(), *lineage))
    }

    /// Our CHECKPOINT was warranted (counter `ui.counter`); it is our vote too.
    pub fn warranted(&mut self, checkpoint: &Checkpoint) -> Option<u64> {
        self.own
            .entry(checkpoint.slot)
            .or_insert(checkpoint.ui.counter);
        self.queued = self.queued.max(checkpoint.slot);
        self.delivered(checkpoint);
        self.vote(checkpoint.clone())
    }

    /// The high watermark: we COMMIT slot s only once we warranted our CHECKPOINT at the
    /// interval two below s's (so a VIEW-CHANGE's log that starts at our first CHECKPOINT an
    /// interval below the stable one holds every COMMIT after the stable checkpoint).
    pub fn may_commit(&self, slot: u64) -> bool {
        let need = watermark(slot);
        need == 0 || self.own.keys().next_back().is_some_and(|&s| s >= need)
    }

    /// The same rule for a peer, as its warrant order shows it: a COMMIT it warranted before a
    /// CHECKPOINT high enough does not count (a Byzantine peer could hide it behind a later one).
    pub fn peer_may_commit(&self, peer: NodeId, slot: u64) -> bool {
        let need = watermark(slot);
        need == 0 || self.members.get(&peer).is_some_and(|m| m.highest >= need)
    }

    /// A CHECKPOINT of a member of our group (ours included), in its warrant order: remember
    /// where its first one at each slot is (within the horizon of the votes we keep: one
    /// entry per warrant a Byzantine member spends on ever higher slots would fill memory),
    /// and keep it if it reports our own.
    pub fn delivered(&mut self, checkpoint: &Checkpoint) {
        let horizon = self.horizon();
        let Some(member) = self.members.get_mut(&checkpoint.replica) else {
            return;
        };
        if checkpoint.slot > member.highest {
            member.highest = checkpoint.slot;
            if checkpoint.slot <= horizon && checkpoint.slot % CHECKPOINT_INTERVAL == 0 {
                let anchor = Anchor::of(checkpoint.replica, &checkpoint.ui);
                member.first.insert(checkpoint.slot, anchor);
            }
        }
        let Some(below) = checkpoint.slot.checked_sub(CHECKPOINT_INTERVAL) else {
            return;
        };
        let ours = self.members.get(&self.me).and_then(|m| m.first.get(&below));
        if ours.is_some_and(|a| checkpoint.reports(a)) && below >= self.anchor_floor() {
            self.proofs
                .entry(below)
                .or_default()
                .insert(checkpoint.replica, checkpoint.clone());
        }
    }

    /// What our CHECKPOINT at `slot` reports: each member's first CHECKPOINT an interval below.
    pub fn anchors_for(&self, slot: u64) -> Vec<Anchor> {
        let Some(below) = slot.checked_sub(CHECKPOINT_INTERVAL) else {
            return Vec::new();
        };
        self.members
            .values()
            .filter_map(|m| m.first.get(&below).copied())
            .collect()
    }

    /// Where a VIEW-CHANGE's log may start: the counter of our first CHECKPOINT at the latest
    /// slot an interval or more below the stable checkpoint that f+1 members of our group
    /// report, with their CHECKPOINTs.
    pub fn anchor(&self) -> Option<(u64, Vec<Checkpoint>)> {
        let slot = self.anchor_slot()?;
        let counter = self.members.get(&self.me)?.first.get(&slot)?.counter;
        let reports = self.proofs.get(&slot)?.values();
        let quorum = self.cluster.config.f + 1;
        Some((counter, reports.take(quorum).cloned().collect()))
    }

    /// Reports below this slot are no longer needed: a proven anchor is at or above it.
    fn anchor_floor(&self) -> u64 {
        self.anchor_slot().unwrap_or(0)
    }

    /// The slot of our latest proven anchor an interval or more below the stable checkpoint.
    fn anchor_slot(&self) -> Option<u64> {
        let below = self.stable.slot.checked_sub(CHECKPOINT_INTERVAL)?;
        let quorum = self.cluster.config.f + 1;
        self.proofs
            .range(..=below)
            .rev()
            .find(|(_, reports)| reports.len() >= quorum)
            .map(|(&slot, _)| slot)
    }

    /// A replica's CHECKPOINT (warrant checked by the caller). Returns the newly stable slot.
    pub fn vote(&mut self, checkpoint: Checkpoint) -> Option<u64> {
        let slot = checkpoint.slot;
        if slot <= self.stable.slot || slot > self.horizon() || slot % CHECKPOINT_INTERVAL != 0 {
            return None;
        }
        let point = (slot, checkpoint.chain, checkpoint.book, checkpoint.lineage);
        let replica = checkpoint.replica;
        if let Some(earlier) = self.voted.get(&(slot, replica)) {
            let kept = self.votes.get_mut(earlier).and_then(|v| v.get(&replica));
            let warrant = |c: &Checkpoint| (c.ui.epoch, c.ui.counter);
            if kept.is_some_and(|k| warrant(k) >= warrant(&checkpoint)) {
                return None;
            }
            if let Some(votes) = self.votes.get_mut(earlier) {
                votes.remove(&replica);
                if votes.is_empty() {
                    self.votes.remove(earlier);
                }
            }
        }
        self.voted.insert((slot, replica), point);
        self.votes
            .entry(point)
            .or_default()
            .insert(replica, checkpoint);
        self.try_stable(slot)
    }

    /// The highest checkpoint slot whose CHECKPOINTs we keep: [`VOTE_HORIZON`] beyond our
    /// history or the stable checkpoint, whichever is further.
    fn horizon(&self) -> u64 {
        let reached = self.snapshots.keys().next_back().copied().unwrap_or(0);
        reached.max(self.stable.slot) + VOTE_HORIZON
    }

    /// Makes `slot` stable if f+1 replicas of every group vouch for what our snapshot holds.
    fn try_stable(&mut self, slot: u64) -> Option<u64> {
        let (chain, book, lineage) = self.snapshots.get(&slot)?;
        let point = (slot, *chain, book.digest(), *lineage);
        let votes = self.votes.get(&point)?;
        let quorum = self.cluster.config.f + 1;
        let mut per_group: BTreeMap<GroupId, Vec<&Checkpoint>> = BTreeMap::new();
        for (replica, c) in votes {
            if let Some(group) = self.cluster.group_of_replica(*replica) {
                per_group.entry(group).or_default().push(c);
            }
        }
        let groups = &self.cluster.config.groups;
        if groups.iter().any(|g| {
            per_group
                .get(&GroupId(g.id))
                .is_none_or(|v| v.len() < quorum)
        }) {
            return None;
        }
        let certificate = per_group
            .into_values()
            .flat_map(|v| v.into_iter().take(quorum).cloned())
            .collect();
        let proof = StableCheckpoint {
            certificate,
            book: Arc::new(book.encode()),
        };
        self.install(Low {
            slot,
            chain: point.1,
            proof: Some(proof),
        });
        Some(slot)
    }

    /// Takes `low` as the stable checkpoint (ours, or a new view's) and forgets what is behind.
    pub fn install(&mut self, low: Low) {
        if low.slot <= self.stable.slot {
            return;
        }
        let slot = low.slot;
        self.stable = low;
        self.snapshots.retain(|&s, _| s > slot);
        self.votes.retain(|&(s, _, _, _), _| s > slot);
        self.voted.retain(|&(s, _), _| s > slot);
        self.queued = self.queued.max(slot);
        let keep_from = slot.saturating_sub(CHECKPOINT_INTERVAL);
        // Our CHECKPOINTs below the anchor are no longer needed, nor reports of them; we report
        // only members' CHECKPOINTs an interval below ours, which are above the stable one.
        let floor = self.anchor_floor();
        self.proofs.retain(|&s, _| s >= floor);
        for member in self.members.values_mut() {
            member.first.retain(|&s, _| s >= floor.min(keep_from));
        }
        let anchor = self.own.range(..=keep_from).next_back().map(|(&s, _)| s);
        if let Some(anchor) = anchor {
            self.own.retain(|&s, _| s >= anchor);
        }
    }

    /// A member's JOIN was ordered: what we learnt of its earlier incarnation no longer counts
    /// (its new CHECKPOINTs start over, in its new warrant sequence).
    pub fn rejoined(&mut self, member: NodeId) {
        if let Some(m) = self.members.get_mut(&member) {
            *m = Member::default();
        }
    }

    /// Our history was replaced by a new view's cut: the snapshots taken of the old one must not
    /// become CHECKPOINTs (the cut's are taken as we re-derive it).
    pub fn restart(&mut self) {
        self.snapshots.clear();
        self.queued = self.stable.slot;
    }

    /// The slot of our latest CHECKPOINT (0 before the first): how far we decided and executed.
    pub fn own_highest(&self) -> u64 {
        self.own.keys().next_back().copied().unwrap_or(0)
    }

    /// Whether we ever warranted a CHECKPOINT at or above `slot`.
    pub fn own_at_or_above(&self, slot: u64) -> bool {
        self.own.keys().next_back().is_some_and(|&s| s >= slot)
    }

    /// Entries kept (snapshots, vote points, our CHECKPOINTs, reports): bounded by a few
    /// intervals.
    pub fn retained(&self) -> usize {
        let firsts: usize = self.members.values().map(|m| m.first.len()).sum();
        self.snapshots.len() + self.votes.len() + self.own.len() + self.proofs.len() + firsts
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proto::testing::{usig, warranted_checkpoint, TestCluster};
    use usig::soft::SoftUsig;

    fn vote(replica: u32, slot: u64, chain: MessageDigest, book: MessageDigest) -> Checkpoint {
        signed(
            &mut usig(NodeId(replica)),
            replica,
            slot,
            (chain, book),
            Lineage::GENESIS,
            Vec::new(),
        )
    }

    #[test]
    fn f_plus_one_from_every_group_make_a_checkpoint_stable_even_before_we_reach_it() {
        let cluster = Arc::new(TestCluster::new(1, 2, 4, 2).cluster);
        let book = OrderBook::new(&cluster);
        let chain = MessageDigest::of(b"history");
        let mut cp = Checkpoints::new(cluster.clone(), NodeId(101), GroupId(0));
        for k in 1..=6 {
            let slot = k * CHECKPOINT_INTERVAL;
            // Votes arrive before our history reaches the slot; a group short of f+1 (or a
            // vote for another history) is not enough.
            for replica in [101, 102, 201] {
                assert_eq!(cp.vote(vote(replica, slot, chain, book.digest())), None);
            }
            let other = MessageDigest::of(b"another history");
            assert_eq!(cp.vote(vote(202, slot, other, book.digest())), None);
            assert_eq!(cp.passed(slot, chain, &book, Lineage::GENESIS), None);
            assert_eq!(cp.vote(vote(203, slot, chain, book.digest())), Some(slot));
            assert_eq!(cp.stable().slot, slot);
            assert!(cp.retained() <= 2, "kept {}", cp.retained());
        }
        // Far-future votes are not kept.
        let far = 20 * CHECKPOINT_INTERVAL;
        cp.vote(vote(101, far, chain, book.digest()));
        assert_eq!(cp.retained(), 0);
    }

    /// A replica holds one vote per slot, its latest by warrant: a Byzantine one that warrants
    /// CHECKPOINT after CHECKPOINT at one slot, each for another history, takes one entry, and a
    /// vote that arrives after a later one of the same replica does not replace it.
    #[test]
    fn a_replica_holds_one_vote_per_slot_its_latest() {
        let cluster = Arc::new(TestCluster::new(1, 1, 2, 1).cluster);
        let book = OrderBook::new(&cluster).digest();
        let mut cp = Checkpoints::new(cluster.clone(), NodeId(101), GroupId(0));
        let slot = CHECKPOINT_INTERVAL;
        let mut byzantine = usig(NodeId(102));
        let forged: Vec<Checkpoint> = (0..100u32)
            .map(|i| {
                let chain = MessageDigest::of(&i.to_be_bytes());
                in_view_0(&mut byzantine, 102, slot, (chain, book))
            })
            .collect();
        for c in &forged[1..] {
            cp.vote(c.clone());
        }
        assert_eq!(cp.retained(), 1);
        // The earliest one arrives last (another group's votes are not delivered in order).
        cp.vote(forged[0].clone());
        let point = (slot, forged[99].chain, book, Lineage::GENESIS);
        assert!(cp.votes[&point].contains_key(&NodeId(102)));
        // The same history from the others still becomes stable with it.
        let chain = forged[99].chain;
        let honest = |r| vote(r, slot, chain, book);
        assert_eq!(cp.vote(honest(103)), None);
        let lineage = Lineage::GENESIS;
        assert_eq!(
            cp.passed(slot, chain, &OrderBook::new(&cluster), lineage),
            Some(slot)
        );
    }

    /// A Byzantine member's CHECKPOINTs claim ever higher slots. Each raises the watermark its
    /// COMMITs are held to (a claim only ever makes them count later), but only those within
    /// the horizon of the votes we keep take an entry.
    #[test]
    fn a_members_claims_far_ahead_take_no_entries() {
        let cluster = Arc::new(TestCluster::new(1, 1, 2, 1).cluster);
        let book = OrderBook::new(&cluster).digest();
        let mut cp = Checkpoints::new(cluster, NodeId(101), GroupId(0));
        let chain = MessageDigest::of(b"history");
        let mut byzantine = usig(NodeId(102));
        let mut claim = |slot| in_view_0(&mut byzantine, 102, slot, (chain, book));
        for k in 1..=1_000 {
            let c = claim(k * CHECKPOINT_INTERVAL);
            cp.delivered(&c);
            cp.vote(c);
            // Not at a checkpoint slot: no entry either.
            cp.delivered(&claim(k * CHECKPOINT_INTERVAL + 1));
        }
        // Four slots within the horizon: a first CHECKPOINT and a vote at each.
        assert_eq!(cp.retained(), 8);
        let far = 1_000 * CHECKPOINT_INTERVAL;
        assert!(cp.peer_may_commit(NodeId(102), far));
        // What we report an interval above: its first CHECKPOINT at 4 intervals, none at 5.
        assert_eq!(cp.anchors_for(5 * CHECKPOINT_INTERVAL).len(), 1);
        assert!(cp.anchors_for(6 * CHECKPOINT_INTERVAL).is_empty());
    }

    /// A CHECKPOINT of `replica` at `slot` warranted by `who`, reporting `anchors`.
    fn report(who: &mut SoftUsig, replica: u32, slot: u64, anchors: Vec<Anchor>) -> Checkpoint {
        let point = (MessageDigest::of(b"h"), MessageDigest::of(b"book"));
        signed(who, replica, slot, point, Lineage::GENESIS, anchors)
    }

    /// A CHECKPOINT of the history `lineage` names, warranted by `who` (view.rs's tests too).
    pub(crate) fn signed(
        who: &mut SoftUsig,
        replica: u32,
        slot: u64,
        (chain, book): (MessageDigest, MessageDigest),
        lineage: Lineage,
        anchors: Vec<Anchor>,
    ) -> Checkpoint {
        let point = (chain, book);
        warranted_checkpoint(who, NodeId(replica), slot, point, lineage, anchors)
    }

    /// A CHECKPOINT of view 0's history that reports nothing, warranted by `who`.
    fn in_view_0(
        who: &mut SoftUsig,
        replica: u32,
        slot: u64,
        point: (MessageDigest, MessageDigest),
    ) -> Checkpoint {
        signed(who, replica, slot, point, Lineage::GENESIS, vec![])
    }

    #[test]
    fn members_first_checkpoints_are_reported_and_bound_their_commits() {
        let cluster = Arc::new(TestCluster::new(1, 1, 2, 1).cluster);
        let k = CHECKPOINT_INTERVAL;
        let mut cp = Checkpoints::new(cluster.clone(), NodeId(101), GroupId(0));
        let mut peer = usig(NodeId(102));
        let first = report(&mut peer, 102, k, Vec::new());
        cp.delivered(&first);
        // A second CHECKPOINT for the same slot, or a lower one, is never reported.
        cp.delivered(&report(&mut peer, 102, k, Vec::new()));
        let anchor = Anchor::of(NodeId(102), &first.ui);
        assert_eq!(cp.anchors_for(2 * k), vec![anchor]);
        // The peer's COMMITs count up to the watermark of its highest CHECKPOINT.
        assert!(cp.peer_may_commit(NodeId(102), 3 * k));
        assert!(!cp.peer_may_commit(NodeId(102), 3 * k + 1));
        assert!(!cp.peer_may_commit(NodeId(103), 2 * k + 1));
        assert!(cp.peer_may_commit(NodeId(103), 2 * k));

        // Our own first CHECKPOINT at K is an anchor once f+1 members report it at 2K and 2K is
        // stable.
        let mut me = usig(NodeId(101));
        let ours = report(&mut me, 101, k, Vec::new());
        cp.warranted(&ours);
        let mine = Anchor::of(NodeId(101), &ours.ui);
        let book = OrderBook::new(&cluster);
        cp.passed(2 * k, MessageDigest::of(b"h"), &book, Lineage::GENESIS);
        let wrong = Anchor { counter: 9, ..mine };
        cp.delivered(&report(&mut peer, 102, 2 * k, vec![wrong]));
        assert_eq!(cp.anchor(), None);
        let mut third = usig(NodeId(103));
        cp.delivered(&report(&mut third, 103, 2 * k, vec![mine]));
        cp.delivered(&report(&mut me, 101, 2 * k, vec![mine]));
        // Not before 2K is stable.
        assert_eq!(cp.anchor(), None);
        cp.install(Low {
            slot: 2 * k,
            chain: MessageDigest::of(b"h"),
            proof: None,
        });
        let (counter, proof) = cp.anchor().expect("f+1 reports");
        assert_eq!(counter, ours.ui.counter);
        assert_eq!(proof.len(), 2);
        assert!(proof.iter().all(|c| c.reports(&mine)));
    }

    #[test]
    fn the_high_watermark_waits_for_our_checkpoint_two_intervals_below() {
        let cluster = Arc::new(TestCluster::new(1, 1, 2, 1).cluster);
        let mut cp = Checkpoints::new(cluster, NodeId(101), GroupId(0));
        let k = CHECKPOINT_INTERVAL;
        assert!(cp.may_commit(2 * k));
        assert!(!cp.may_commit(2 * k + 1));
        let book = MessageDigest::of(b"book");
        cp.warranted(&vote(101, k, MessageDigest::of(b"h"), book));
        assert!(cp.may_commit(3 * k));
        assert!(!cp.may_commit(3 * k + 1));
    }
}
