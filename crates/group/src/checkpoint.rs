//! Checkpoints (docs/protocol.md, "Checkpoints and garbage collection"): a replica's running
//! digest and order book every [`CHECKPOINT_INTERVAL`] slots, its own CHECKPOINTs, the votes of
//! every replica, and the latest stable checkpoint (f+1 matching CHECKPOINTs from every group),
//! behind which histories, logs and decisions can go.

use crate::order::OrderBook;
use crate::view::Low;
use proto::config::Cluster;
use proto::{Checkpoint, GroupId, NodeId, StableCheckpoint, CHECKPOINT_INTERVAL};
use std::collections::BTreeMap;
use std::sync::Arc;
use usig::MessageDigest;

/// Checkpoint slots ahead of our history whose votes we keep (a lagging replica still learns
/// of the next stable checkpoint; a Byzantine one cannot fill memory with far-future votes).
const VOTE_HORIZON: u64 = 4 * CHECKPOINT_INTERVAL;

/// What one checkpoint vouches for: slot, running digest, order book digest.
type Point = (u64, MessageDigest, MessageDigest);

pub struct Checkpoints {
    cluster: Arc<Cluster>,
    /// Our running digest and order book at each checkpoint slot we passed, above the stable.
    snapshots: BTreeMap<u64, (MessageDigest, OrderBook)>,
    /// The highest slot we queued our CHECKPOINT for.
    queued: u64,
    /// Our warranted CHECKPOINTs: slot and warrant counter.
    own: BTreeMap<u64, u64>,
    votes: BTreeMap<Point, BTreeMap<NodeId, Checkpoint>>,
    stable: Low,
}

impl Checkpoints {
    pub fn new(cluster: Arc<Cluster>) -> Self {
        Checkpoints {
            stable: Low::start(&cluster),
            cluster,
            snapshots: BTreeMap::new(),
            queued: 0,
            own: BTreeMap::new(),
            votes: BTreeMap::new(),
        }
    }

    /// The latest stable checkpoint.
    pub fn stable(&self) -> &Low {
        &self.stable
    }

    /// Our history reached `slot` with this running digest and book. Returns a newly stable
    /// checkpoint if the votes for it were already in.
    pub fn passed(&mut self, slot: u64, chain: MessageDigest, book: &OrderBook) -> Option<u64> {
        if slot % CHECKPOINT_INTERVAL != 0 || slot <= self.stable.slot {
            return None;
        }
        self.snapshots.insert(slot, (chain, book.clone()));
        self.try_stable(slot)
    }

    /// Our next CHECKPOINT, if `decided_through(slot)` says our group's work up to a passed
    /// checkpoint slot is decided and executed: (slot, running digest, book digest).
    pub fn due(&mut self, decided_through: impl Fn(u64) -> bool) -> Option<Point> {
        let (&slot, (chain, book)) = self.snapshots.range(self.queued + 1..).next()?;
        if !decided_through(slot) {
            return None;
        }
        self.queued = slot;
        Some((slot, *chain, book.digest()))
    }

    /// Our CHECKPOINT was warranted (counter `ui.counter`); it is our vote too.
    pub fn warranted(&mut self, checkpoint: &Checkpoint) -> Option<u64> {
        self.own.insert(checkpoint.slot, checkpoint.ui.counter);
        self.queued = self.queued.max(checkpoint.slot);
        self.vote(checkpoint.clone())
    }

    /// The high watermark: we COMMIT slot s only once we warranted our CHECKPOINT at the
    /// interval two below s's (so a VIEW-CHANGE's log that starts at our CHECKPOINT an interval
    /// below the stable one holds every COMMIT after the stable checkpoint).
    pub fn may_commit(&self, slot: u64) -> bool {
        let need = (slot.saturating_sub(1) / CHECKPOINT_INTERVAL)
            .saturating_sub(1)
            .saturating_mul(CHECKPOINT_INTERVAL);
        need == 0 || self.own.keys().next_back().is_some_and(|&s| s >= need)
    }

    /// The counter of our CHECKPOINT that a VIEW-CHANGE's log may start at: the latest an
    /// interval or more below the stable checkpoint.
    pub fn anchor(&self) -> Option<u64> {
        let below = self.stable.slot.checked_sub(CHECKPOINT_INTERVAL)?;
        self.own.range(..=below).next_back().map(|(_, &c)| c)
    }

    /// A replica's CHECKPOINT (warrant checked by the caller). Returns the newly stable slot.
    pub fn vote(&mut self, checkpoint: Checkpoint) -> Option<u64> {
        let slot = checkpoint.slot;
        let reached = self.snapshots.keys().next_back().copied();
        let horizon = reached.unwrap_or(0).max(self.stable.slot) + VOTE_HORIZON;
        if slot <= self.stable.slot || slot > horizon || slot % CHECKPOINT_INTERVAL != 0 {
            return None;
        }
        let point = (slot, checkpoint.chain, checkpoint.book);
        self.votes
            .entry(point)
            .or_default()
            .insert(checkpoint.replica, checkpoint);
        self.try_stable(slot)
    }

    /// Makes `slot` stable if f+1 replicas of every group vouch for what our snapshot holds.
    fn try_stable(&mut self, slot: u64) -> Option<u64> {
        let (chain, book) = self.snapshots.get(&slot)?;
        let point = (slot, *chain, book.digest());
        let votes = self.votes.get(&point)?;
        let quorum = self.cluster.config.f + 1;
        let mut per_group: BTreeMap<GroupId, Vec<&Checkpoint>> = BTreeMap::new();
        for (replica, c) in votes {
            if let Some(r) = self
                .cluster
                .config
                .replicas
                .iter()
                .find(|r| r.id == replica.0)
            {
                per_group.entry(GroupId(r.group)).or_default().push(c);
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
            book: book.encode(),
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
        self.votes.retain(|&(s, _, _), _| s > slot);
        self.queued = self.queued.max(slot);
        let keep_from = slot.saturating_sub(CHECKPOINT_INTERVAL);
        // Our CHECKPOINTs below the anchor are no longer needed.
        let anchor = self.own.range(..=keep_from).next_back().map(|(&s, _)| s);
        if let Some(anchor) = anchor {
            self.own.retain(|&s, _| s >= anchor);
        }
    }

    /// Our history was replaced by a new view's cut: the snapshots taken of the old one must not
    /// become CHECKPOINTs (the cut's are taken as we re-derive it).
    pub fn restart(&mut self) {
        self.snapshots.clear();
        self.queued = self.stable.slot;
    }

    /// Whether we ever warranted a CHECKPOINT at or above `slot`.
    pub fn own_at_or_above(&self, slot: u64) -> bool {
        self.own.keys().next_back().is_some_and(|&s| s >= slot)
    }

    /// Entries kept (snapshots, vote points, our CHECKPOINTs): bounded by a few intervals.
    pub fn retained(&self) -> usize {
        self.snapshots.len() + self.votes.len() + self.own.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::testing::{usig, TestCluster};
    use usig::Usig;

    fn vote(replica: u32, slot: u64, chain: MessageDigest, book: MessageDigest) -> Checkpoint {
        let bytes = Checkpoint::warranted_bytes(NodeId(replica), slot, &chain, &book);
        Checkpoint {
            replica: NodeId(replica),
            slot,
            chain,
            book,
            ui: usig(NodeId(replica)).create_ui(&bytes).unwrap(),
        }
    }

    #[test]
    fn f_plus_one_from_every_group_make_a_checkpoint_stable_even_before_we_reach_it() {
        let cluster = Arc::new(TestCluster::new(1, 2, 4, 2).cluster);
        let book = OrderBook::new(&cluster);
        let chain = MessageDigest::of(b"history");
        let mut cp = Checkpoints::new(cluster.clone());
        for k in 1..=6 {
            let slot = k * CHECKPOINT_INTERVAL;
            // Votes arrive before our history reaches the slot; a group short of f+1 (or a
            // vote for another history) is not enough.
            for replica in [101, 102, 201] {
                assert_eq!(cp.vote(vote(replica, slot, chain, book.digest())), None);
            }
            let other = MessageDigest::of(b"another history");
            assert_eq!(cp.vote(vote(202, slot, other, book.digest())), None);
            assert_eq!(cp.passed(slot, chain, &book), None);
            assert_eq!(cp.vote(vote(203, slot, chain, book.digest())), Some(slot));
            assert_eq!(cp.stable().slot, slot);
            assert!(cp.retained() <= 2, "kept {}", cp.retained());
        }
        // Far-future votes are not kept.
        let far = 20 * CHECKPOINT_INTERVAL;
        cp.vote(vote(101, far, chain, book.digest()));
        assert_eq!(cp.retained(), 0);
    }

    #[test]
    fn the_high_watermark_waits_for_our_checkpoint_two_intervals_below() {
        let cluster = Arc::new(TestCluster::new(1, 1, 2, 1).cluster);
        let mut cp = Checkpoints::new(cluster);
        let k = CHECKPOINT_INTERVAL;
        assert!(cp.may_commit(2 * k));
        assert!(!cp.may_commit(2 * k + 1));
        let book = MessageDigest::of(b"book");
        cp.warranted(&vote(101, k, MessageDigest::of(b"h"), book));
        assert!(cp.may_commit(3 * k));
        assert!(!cp.may_commit(3 * k + 1));
    }
}
