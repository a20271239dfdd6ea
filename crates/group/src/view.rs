//! Checking VIEW-CHANGEs and NEW-VIEWs and computing a new view's cut of the old history
//! (docs/protocol.md, "View change"). Pure functions of the messages and the configuration, so
//! every correct replica and the new primary reach the same cut.

use crate::order::OrderBook;
use proto::config::Cluster;
use proto::{
    chain, chain_start, Anchor, Base, Checkpoint, Commit, Lineage, NewView, NodeId, Prepare,
    StableCheckpoint, View, ViewChange, Warranted, CHECKPOINT_INTERVAL, MAX_NESTED_VIEWS,
    VIEW_CHANGE_SPAN,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use usig::MessageDigest;

/// One position of a history. There are no null slots: a replica takes no PREPARE of a view
/// past a counter its primary spent on anything else, and a VIEW-CHANGE shows every slot after
/// its checkpoint (docs/protocol.md, "No null slots").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Slot {
    Prepare(Arc<Prepare>),
    /// The NEW-VIEW that starts a view, by digest.
    NewView(MessageDigest),
}

impl Slot {
    /// What the running digest takes from this slot.
    pub fn digest(&self) -> MessageDigest {
        match self {
            Slot::Prepare(p) => p.digest(),
            Slot::NewView(d) => *d,
        }
    }
}

/// Why a VIEW-CHANGE or NEW-VIEW is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("sender is not a member of the group it names")]
    NotMember,
    #[error("a warrant does not verify")]
    Warrant,
    #[error("the warranted log is not every counter from 1 (or from the sender's CHECKPOINT an interval below its stable checkpoint) up to the message's own")]
    LogGap,
    #[error("a COMMIT does not match the history shown (chained prefix or proposal)")]
    Prefix,
    #[error("a COMMIT is of a view after the history's")]
    LaterCommit,
    #[error("a PREPARE is not of the base's view, primary and epoch, or not the next slot of the history shown (it holds every slot after its checkpoint)")]
    Prepare,
    #[error("the base NEW-VIEW does not decode, is not of an earlier view, starts after the stable checkpoint shown, nests too deep, or is named but the stable checkpoint does not vouch for it")]
    Base,
    #[error("the NEW-VIEW is not from that view's primary or of this configuration epoch")]
    NewViewSender,
    #[error("not f+1 VIEW-CHANGEs for this view from every group, or one sender twice")]
    Quorum,
    #[error("the stable checkpoint was taken on a history of a later view than the VIEW-CHANGE's base, or of another NEW-VIEW of the base's view")]
    CheckpointLineage,
    #[error("the stable checkpoint is not f+1 matching CHECKPOINTs from every group for the book it carries")]
    Checkpoint,
    #[error("the VIEW-CHANGE is not of the incarnation the stable checkpoint's order book records for its sender (a restarted replica counts only once a stable checkpoint covers its JOIN)")]
    Incarnation,
    #[error("the log starts at a CHECKPOINT that f+1 members of the group do not report as the sender's first at its slot")]
    Anchor,
    #[error("a PREPARE shown is more than VIEW_CHANGE_SPAN slots past the stable checkpoint (a correct replica commits none there, and leaves them out)")]
    Span,
}

/// The primary of a view: the candidates take turns.
pub fn primary_of(cluster: &Cluster, view: View) -> NodeId {
    let candidates = &cluster.config.primaries;
    NodeId(candidates[(view.0 % candidates.len() as u64) as usize].id)
}

/// The warrant counter view 0's history starts after: view 0's primary's configured start (0
/// unless the epoch began by an online reconfiguration, docs/protocol.md, "Reconfiguration").
/// Its PREPARE with counter c takes slot `c - genesis_counter`.
pub fn genesis_counter(cluster: &Cluster) -> u64 {
    cluster.usig_start_of(primary_of(cluster, View(0))).0
}

/// The running digests of the slots after `start`: element i vouches for the first i of them.
pub fn chains(start: MessageDigest, slots: &[Slot]) -> Vec<MessageDigest> {
    let mut out = Vec::with_capacity(slots.len() + 1);
    let mut at = start;
    out.push(at);
    for slot in slots {
        at = chain(&at, &slot.digest());
        out.push(at);
    }
    out
}

/// Where a history shown starts: a stable checkpoint (or the configuration epoch's start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Low {
    pub slot: u64,
    pub chain: MessageDigest,
    /// The certificate and the book (none at the epoch's start).
    pub proof: Option<StableCheckpoint>,
}

impl Low {
    /// The start of the configuration epoch.
    pub fn start(cluster: &Cluster) -> Self {
        Low {
            slot: 0,
            chain: chain_start(cluster.epoch()),
            proof: None,
        }
    }

    /// The order book at this point.
    /// The history the checkpoint was taken on (view 0's at the start).
    pub fn lineage(&self) -> Lineage {
        let first = self.proof.as_ref().and_then(|p| p.certificate.first());
        first.map_or(Lineage::GENESIS, |c| c.lineage)
    }

    pub fn book(&self, cluster: &Cluster) -> OrderBook {
        self.proof
            .as_ref()
            .and_then(|p| OrderBook::decode(&p.book, cluster))
            .unwrap_or_else(|| OrderBook::new(cluster))
    }
}

/// What a valid VIEW-CHANGE shows.
pub struct Shown {
    /// The view of its base NEW-VIEW (0 without one).
    pub view: View,
    /// The base NEW-VIEW's warrant counter (0 without one).
    pub base_counter: u64,
    /// Its stable checkpoint.
    pub low: Low,
    /// Its history after the stable checkpoint: the base's cut, then the PREPAREs after it.
    pub slots: Vec<Slot>,
}

/// A new view's history: the stable checkpoint it starts from and the slots after it, up to
/// and including the NEW-VIEW's own.
#[derive(Debug, PartialEq, Eq)]
pub struct Cut {
    pub low: Low,
    pub slots: Vec<Slot>,
}

impl Cut {
    /// The NEW-VIEW's slot.
    pub fn end(&self) -> u64 {
        self.low.slot + self.slots.len() as u64
    }
}

/// Cuts a [`Checker`] remembers at most: a NEW-VIEW's check nests at most [`MAX_NESTED_VIEWS`]
/// bases, and a Byzantine candidate that warrants NEW-VIEW after NEW-VIEW must not fill memory.
const MAX_REMEMBERED_CUTS: usize = 4 * MAX_NESTED_VIEWS;

/// Checks VIEW-CHANGEs and NEW-VIEWs, remembering the cuts of NEW-VIEWs already checked (the
/// VIEW-CHANGEs of one view usually share their base), those of the lowest views forgotten first
/// beyond [`MAX_REMEMBERED_CUTS`]: a memo only, so forgetting costs a recomputation, never a
/// different answer.
pub struct Checker {
    cluster: Arc<Cluster>,
    cuts: BTreeMap<(View, MessageDigest), Arc<Cut>>,
}

impl Checker {
    pub fn new(cluster: Arc<Cluster>) -> Self {
        Checker {
            cluster,
            cuts: BTreeMap::new(),
        }
    }

    /// The history a VIEW-CHANGE shows, if it is valid.
    pub fn view_change(&mut self, vc: &ViewChange) -> Result<Shown, Invalid> {
        self.shown(vc, 0)
    }

    /// The new view's history up to and including its NEW-VIEW slot, if the NEW-VIEW is valid.
    pub fn new_view(&mut self, nv: &NewView) -> Result<Arc<Cut>, Invalid> {
        self.cut(nv, 0)
    }

    fn shown(&mut self, vc: &ViewChange, depth: usize) -> Result<Shown, Invalid> {
        let cluster = self.cluster.clone();
        let member = cluster.members(vc.group).any(|r| r.id == vc.replica.0);
        let usig = cluster.usig_of(vc.replica).filter(|_| member);
        let usig = usig.ok_or(Invalid::NotMember)?;
        let dir = &cluster.directory;
        dir.verify_ui(usig, &vc.own_warranted_bytes(), &vc.ui)
            .map_err(|_| Invalid::Warrant)?;
        let low = match &vc.body.checkpoint {
            None => Low::start(&cluster),
            Some(proof) => stable(&cluster, proof)?,
        };
        // Only the incarnation the stable checkpoint records counts: a restarted replica's
        // VIEW-CHANGEs count once a stable checkpoint covers its JOIN (docs/protocol.md,
        // "Replica recovery").
        let joined = low.book(&cluster).incarnation(vc.replica);
        let (in_incarnation, after) = match joined {
            Some(i) => (vc.ui.epoch.0 == i.epoch, i.counter),
            None => (
                in_configured_epoch(&cluster, vc.replica, &vc.ui),
                cluster.usig_start_of(vc.replica).0,
            ),
        };
        if !in_incarnation {
            return Err(Invalid::Incarnation);
        }
        // Every message the sender warranted since its first (of its incarnation), or since its own CHECKPOINT an
        // interval below the stable one (the high watermark keeps every COMMIT after the
        // stable checkpoint behind that CHECKPOINT), so none can be left out.
        let log = &vc.body.log;
        let first = log.first().map_or(vc.ui.counter, |e| e.ui().counter);
        if first != after + 1 {
            match log.first() {
                Some(Warranted::Checkpoint(c))
                    if c.replica == vc.replica
                        && c.slot + CHECKPOINT_INTERVAL <= low.slot
                        && first > after =>
                {
                    anchored(&cluster, vc, c)?
                }
                _ => return Err(Invalid::LogGap),
            }
        }
        if vc.ui.counter != first + log.len() as u64 {
            return Err(Invalid::LogGap);
        }
        for (i, entry) in log.iter().enumerate() {
            let ui = entry.ui();
            if ui.counter != first + i as u64 || ui.epoch != vc.ui.epoch {
                return Err(Invalid::LogGap);
            }
            let bytes = match entry {
                Warranted::Commit(c) if c.replica == vc.replica => c.own_warranted_bytes(),
                Warranted::Checkpoint(c) if c.replica == vc.replica => c.own_warranted_bytes(),
                Warranted::Commit(_) | Warranted::Checkpoint(_) => return Err(Invalid::Warrant),
                Warranted::ViewChange {
                    next_view, body, ..
                } => ViewChange::warranted_bytes(vc.replica, vc.group, *next_view, body),
            };
            dir.verify_ui(usig, &bytes, ui)
                .map_err(|_| Invalid::Warrant)?;
        }
        let (lineage, base_counter, base_slot, mut slots) = match &vc.body.base {
            None => (Lineage::GENESIS, genesis_counter(&cluster), 0, Vec::new()),
            // The stable checkpoint vouches for a named base: f+1 members of every group took
            // it on that history at or after the NEW-VIEW's slot, so none of the cut lies after
            // the checkpoint and the lineage's counter and slot are the ones correct replicas
            // derived (docs/protocol.md, "Bounded VIEW-CHANGEs").
            Some(Base::Named(named)) => {
                if named.view == View(0)
                    || named.view >= vc.next_view
                    || low.lineage() != *named
                    || low.slot < named.slot
                {
                    return Err(Invalid::Base);
                }
                (*named, named.counter, named.slot, Vec::new())
            }
            Some(Base::Shared(_)) => return Err(Invalid::Base),
            Some(Base::Carried(bytes)) => {
                let nv = NewView::decode(bytes).ok_or(Invalid::Base)?;
                if nv.view >= vc.next_view || depth + 1 > MAX_NESTED_VIEWS {
                    return Err(Invalid::Base);
                }
                let cut = self.cut(&nv, depth + 1)?;
                // A replica that entered the view took the cut's checkpoint if it was later.
                if cut.low.slot > low.slot {
                    return Err(Invalid::Base);
                }
                let after_low = (low.slot - cut.low.slot) as usize;
                let slots = cut.slots.iter().skip(after_low).cloned().collect();
                (Lineage::of(&nv, cut.end()), nv.ui.counter, cut.end(), slots)
            }
        };
        // The stable checkpoint must lie on the history the base starts: one of a later view,
        // or of another NEW-VIEW of the base's view, would let the cut put this history's
        // slots after a checkpoint whose slots are another history's.
        let view = lineage.view;
        let taken_on = low.lineage();
        if taken_on.view > view || (taken_on.view == view && taken_on != lineage) {
            return Err(Invalid::CheckpointLineage);
        }
        let primary = primary_of(&cluster, view);
        let primary_usig = cluster.usig_of(primary).ok_or(Invalid::Prepare)?;
        for p in &vc.body.prepares {
            let counter = p.ui.counter;
            // Over the size limits: a correct replica refuses such a PREPARE's primary and
            // never shows it (docs/protocol.md, "Requests too large to carry").
            if p.view != view
                || p.primary != primary
                || p.config_epoch != cluster.epoch()
                || counter <= base_counter
                || !p.within_limits(&cluster)
            {
                return Err(Invalid::Prepare);
            }
            let slot = base_slot.saturating_add(counter - base_counter);
            // The next slot after the checkpoint and the slots so far: a correct replica took
            // every counter of the view's primary up to its last PREPARE as a PREPARE of the
            // view, so a gap (a null run a checker would have to expand) is never one's.
            let index = slot.saturating_sub(low.slot) as usize;
            if index != slots.len() + 1 {
                return Err(Invalid::Prepare);
            }
            // Beyond the span a correct replica commits nothing and shows nothing, so a longer
            // history (a Byzantine sender's) is refused before it costs a warrant check
            // (docs/protocol.md, "Bounded VIEW-CHANGEs").
            if slot > low.slot.saturating_add(VIEW_CHANGE_SPAN) {
                return Err(Invalid::Span);
            }
            dir.verify_ui(primary_usig, &p.own_warranted_bytes(), &p.ui)
                .map_err(|_| Invalid::Prepare)?;
            if !in_configured_epoch(&cluster, primary, &p.ui) {
                return Err(Invalid::Prepare);
            }
            slots.push(Slot::Prepare(p.clone()));
        }
        let prefixes = chains(low.chain, &slots);
        for entry in log {
            let Warranted::Commit(c) = entry else {
                continue;
            };
            if c.view > view {
                return Err(Invalid::LaterCommit);
            }
            // COMMITs of earlier views are covered by the base's cut, those up to the stable
            // checkpoint by the checkpoint.
            if c.view == view
                && c.slot > low.slot
                && !matches_history(c, low.slot, &slots, &prefixes)
            {
                return Err(Invalid::Prefix);
            }
        }
        Ok(Shown {
            view,
            base_counter,
            low,
            slots,
        })
    }

    fn cut(&mut self, nv: &NewView, depth: usize) -> Result<Arc<Cut>, Invalid> {
        let digest = nv.digest();
        if let Some(cut) = self.cuts.get(&(nv.view, digest)) {
            return Ok(cut.clone());
        }
        let cluster = self.cluster.clone();
        if nv.view == View(0)
            || nv.config_epoch != cluster.epoch()
            || nv.primary != primary_of(&cluster, nv.view)
        {
            return Err(Invalid::NewViewSender);
        }
        let usig = cluster.usig_of(nv.primary).ok_or(Invalid::NewViewSender)?;
        cluster
            .directory
            .verify_ui(usig, &nv.own_warranted_bytes(), &nv.ui)
            .map_err(|_| Invalid::Warrant)?;
        if !in_configured_epoch(&cluster, nv.primary, &nv.ui) {
            return Err(Invalid::Warrant);
        }
        let mut senders = BTreeSet::new();
        let mut per_group: BTreeMap<u32, usize> = BTreeMap::new();
        let mut shown = Vec::new();
        for vc in &nv.view_changes {
            if vc.next_view != nv.view || !senders.insert(vc.replica) {
                return Err(Invalid::Quorum);
            }
            shown.push(self.shown(vc, depth)?);
            *per_group.entry(vc.group.0).or_default() += 1;
        }
        let quorum = cluster.config.f + 1;
        let groups = &cluster.config.groups;
        if groups
            .iter()
            .any(|g| per_group.get(&g.id).copied().unwrap_or(0) < quorum)
        {
            return Err(Invalid::Quorum);
        }
        let mut cut = combine(&cluster, shown);
        cut.slots.push(Slot::NewView(digest));
        let cut = Arc::new(cut);
        self.cuts.insert((nv.view, digest), cut.clone());
        while self.cuts.len() > MAX_REMEMBERED_CUTS {
            self.cuts.pop_first();
        }
        Ok(cut)
    }
}

/// Checks a stable checkpoint: f+1 matching CHECKPOINTs from every group, warranted by their
/// senders, for the book carried.
pub fn stable(cluster: &Cluster, proof: &StableCheckpoint) -> Result<Low, Invalid> {
    let first = proof.certificate.first().ok_or(Invalid::Checkpoint)?;
    let (slot, chain_at, book, lineage) = (first.slot, first.chain, first.book, first.lineage);
    let book_fits = OrderBook::decode(&proof.book, cluster).is_some();
    if slot == 0
        || slot % CHECKPOINT_INTERVAL != 0
        || MessageDigest::of(&proof.book) != book
        || !book_fits
    {
        return Err(Invalid::Checkpoint);
    }
    let mut per_group: BTreeMap<u32, BTreeSet<NodeId>> = BTreeMap::new();
    for c in &proof.certificate {
        let group = cluster
            .group_of_replica(c.replica)
            .ok_or(Invalid::Checkpoint)?
            .0;
        let usig = cluster.usig_of(c.replica).ok_or(Invalid::Checkpoint)?;
        let matching =
            c.slot == slot && c.chain == chain_at && c.book == book && c.lineage == lineage;
        let warranted = cluster
            .directory
            .verify_ui(usig, &c.own_warranted_bytes(), &c.ui)
            .is_ok();
        if !matching || !warranted || !per_group.entry(group).or_default().insert(c.replica) {
            return Err(Invalid::Checkpoint);
        }
    }
    let quorum = cluster.config.f + 1;
    if cluster
        .config
        .groups
        .iter()
        .any(|g| per_group.get(&g.id).map_or(0, BTreeSet::len) < quorum)
    {
        return Err(Invalid::Checkpoint);
    }
    Ok(Low {
        slot,
        chain: chain_at,
        proof: Some(proof.clone()),
    })
}

/// Whether a warrant of `node` is of the USIG epoch the configuration pins (if it pins one):
/// a node that rebooted into another epoch must not show one history in each.
pub(crate) fn in_configured_epoch(
    cluster: &Cluster,
    node: NodeId,
    ui: &usig::UniqueWarrant,
) -> bool {
    cluster
        .usig_epoch_of(node)
        .is_none_or(|epoch| ui.epoch == epoch)
}

/// Checks that f+1 members of the sender's group report `c` as its first CHECKPOINT at its
/// slot, in their CHECKPOINTs an interval above it. At least one of them is correct and saw the
/// sender's messages in counter order, so the log cannot start at a second CHECKPOINT for an old
/// slot warranted after COMMITs it would hide (docs/protocol.md, "Anchors").
fn anchored(cluster: &Cluster, vc: &ViewChange, c: &Checkpoint) -> Result<(), Invalid> {
    let anchor = Anchor::of(vc.replica, &c.ui);
    let mut reporters = BTreeSet::new();
    for report in &vc.body.anchor_proof {
        let member = cluster.members(vc.group).any(|r| r.id == report.replica.0);
        let usig = cluster.usig_of(report.replica).filter(|_| member);
        let usig = usig.ok_or(Invalid::Anchor)?;
        let reports = report.slot == c.slot + CHECKPOINT_INTERVAL && report.reports(&anchor);
        let warranted = cluster
            .directory
            .verify_ui(usig, &report.own_warranted_bytes(), &report.ui)
            .is_ok();
        if !reports || !warranted || !reporters.insert(report.replica) {
            return Err(Invalid::Anchor);
        }
    }
    if reporters.len() <= cluster.config.f {
        return Err(Invalid::Anchor);
    }
    Ok(())
}

/// True when the COMMIT is for what the history (the slots after `low`) holds at its slot,
/// with the history's prefix.
fn matches_history(c: &Commit, low: u64, slots: &[Slot], prefixes: &[MessageDigest]) -> bool {
    let Some(i) = c
        .slot
        .checked_sub(low)
        .and_then(|i| usize::try_from(i).ok())
        .filter(|&i| i >= 1)
    else {
        return false;
    };
    slots.get(i - 1).map(Slot::digest) == Some(c.proposal) && prefixes.get(i) == Some(&c.prefix)
}

/// The cut: from the latest stable checkpoint shown (every slot up to it is committed, so
/// every history agrees there), the histories of the latest view shown (of its NEW-VIEW with
/// the lowest counter: the only one a correct replica can have accepted), merged slot by slot.
/// The old primary's USIG gives one message per counter, so merging makes no choice; and each
/// history shows every slot from its checkpoint on, none of which is above the latest, so each
/// continues the merged one from its start and the cut has no gap.
fn combine(cluster: &Cluster, shown: Vec<Shown>) -> Cut {
    let low = shown
        .iter()
        .map(|s| &s.low)
        .max_by_key(|l| l.slot)
        .cloned()
        .unwrap_or_else(|| Low::start(cluster));
    let view = shown.iter().map(|s| s.view).max().unwrap_or(View(0));
    let base = shown
        .iter()
        .filter(|s| s.view == view)
        .map(|s| s.base_counter)
        .min()
        .unwrap_or(0);
    let mut merged: Vec<Slot> = Vec::new();
    for s in shown
        .into_iter()
        .filter(|s| s.view == view && s.base_counter == base)
    {
        for (i, slot) in s.slots.into_iter().enumerate() {
            let absolute = s.low.slot + i as u64 + 1;
            let Some(index) = absolute.checked_sub(low.slot + 1) else {
                continue;
            };
            if index as usize == merged.len() {
                merged.push(slot);
            }
        }
    }
    Cut { low, slots: merged }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::tests::signed;
    use proto::testing::{request, usig, warranted_commit, warranted_prepare, TestCluster};
    use proto::{GroupId, PrepareEntry, ViewChangeBody};
    use usig::soft::SoftUsig;
    use usig::Usig;

    fn cluster() -> Arc<Cluster> {
        Arc::new(TestCluster::new(1, 2, 4, 4).cluster)
    }

    /// The view-0 primary's PREPAREs with counters 1..=n, one request each.
    fn prepares(n: u64) -> Vec<Prepare> {
        let mut primary = usig(NodeId(0));
        (1..=n)
            .map(|ts| {
                let entries = vec![PrepareEntry {
                    group: GroupId(0),
                    request: request(1, ts, &[0]),
                }];
                let epoch = proto::ConfigEpoch(1);
                warranted_prepare(&mut primary, View(0), epoch, NodeId(0), entries)
            })
            .collect()
    }

    /// A member's COMMIT stub for `slot` of the history `slots` (view 0).
    fn commit(
        cluster: &Cluster,
        who: &mut SoftUsig,
        replica: u32,
        slots: &[Slot],
        slot: u64,
    ) -> Warranted {
        let prefix = chains(chain_start(cluster.epoch()), slots)[slot as usize];
        let proposal = slots[slot as usize - 1].digest();
        let replica = NodeId(replica);
        Warranted::Commit(warranted_commit(
            who,
            View(0),
            replica,
            slot,
            (proposal, prefix),
        ))
    }

    fn view_change(
        who: &mut SoftUsig,
        replica: u32,
        group: u32,
        prepares: Vec<Prepare>,
        log: Vec<Warranted>,
    ) -> ViewChange {
        let body = ViewChangeBody {
            checkpoint: None,
            base: None,
            prepares: prepares.into_iter().map(Arc::new).collect(),
            log,
            anchor_proof: Vec::new(),
        };
        warrant_view_change(who, replica, group, body)
    }

    /// `replica` of `group` warrants its VIEW-CHANGE for view 1 with `body`.
    fn warrant_view_change(
        who: &mut SoftUsig,
        replica: u32,
        group: u32,
        body: ViewChangeBody,
    ) -> ViewChange {
        let (replica, group) = (NodeId(replica), GroupId(group));
        let bytes = ViewChange::warranted_bytes(replica, group, View(1), &body.digest());
        ViewChange {
            replica,
            group,
            next_view: View(1),
            body,
            ui: who.create_ui(&bytes).unwrap(),
        }
    }

    fn slots_of(prepares: &[Prepare]) -> Vec<Slot> {
        let shared = prepares.iter().cloned().map(Arc::new);
        shared.map(Slot::Prepare).collect()
    }

    /// A member that processed `shown`, committed every slot of it, and shows it.
    fn member(cluster: &Cluster, replica: u32, group: u32, shown: &[Prepare]) -> ViewChange {
        let mut who = usig(NodeId(replica));
        let slots = slots_of(shown);
        let log = (1..=slots.len() as u64)
            .map(|s| commit(cluster, &mut who, replica, &slots, s))
            .collect();
        view_change(&mut who, replica, group, shown.to_vec(), log)
    }

    #[test]
    fn a_view_change_shows_the_history_its_commits_vouch_for() {
        let cluster = cluster();
        let shown = Checker::new(cluster.clone())
            .view_change(&member(&cluster, 101, 0, &prepares(2)))
            .unwrap();
        assert_eq!((shown.view, shown.slots), (View(0), slots_of(&prepares(2))));
    }

    /// Leaving out an earlier PREPARE is a gap; and a COMMIT for a history without it (PREPARE
    /// 2 at slot 1) does not match the history shown, whose slot 1 is PREPARE 1.
    #[test]
    fn leaving_out_an_earlier_prepare_breaks_the_chained_commit() {
        let cluster = cluster();
        let all = prepares(2);
        let mut who = usig(NodeId(101));
        let c = commit(&cluster, &mut who, 101, &slots_of(&all), 2);
        let vc = view_change(&mut who, 101, 0, vec![all[1].clone()], vec![c]);
        let checked = Checker::new(cluster.clone()).view_change(&vc);
        assert_eq!(checked.err(), Some(Invalid::Prepare));

        let mut who = usig(NodeId(101));
        let c = commit(&cluster, &mut who, 101, &slots_of(&all[1..]), 1);
        let vc = view_change(&mut who, 101, 0, all, vec![c]);
        let checked = Checker::new(cluster).view_change(&vc);
        assert_eq!(checked.err(), Some(Invalid::Prefix));
    }

    #[test]
    fn a_warranted_message_left_out_of_the_log_is_a_gap() {
        let cluster = cluster();
        let all = prepares(2);
        let slots = slots_of(&all);
        let mut who = usig(NodeId(101));
        let _hidden = commit(&cluster, &mut who, 101, &slots, 1);
        let shown = commit(&cluster, &mut who, 101, &slots, 2);
        let vc = view_change(&mut who, 101, 0, all, vec![shown]);
        let checked = Checker::new(cluster).view_change(&vc);
        assert_eq!(checked.err(), Some(Invalid::LogGap));
    }

    /// A member whose TPM rebooted warrants in a new epoch from counter 1: its VIEW-CHANGE would
    /// look complete but could leave out everything of its configured epoch, so it is refused.
    #[test]
    fn a_view_change_in_another_usig_epoch_than_configured_is_refused() {
        let cluster = cluster();
        let mut rebooted = proto::testing::usig_in_epoch(NodeId(101), usig::Epoch(2));
        let vc = view_change(&mut rebooted, 101, 0, Vec::new(), Vec::new());
        let checked = Checker::new(cluster.clone()).view_change(&vc);
        assert_eq!(checked.err(), Some(Invalid::Incarnation));
        // The same in the configured epoch is fine.
        let vc = view_change(&mut usig(NodeId(101)), 101, 0, Vec::new(), Vec::new());
        assert!(Checker::new(cluster).view_change(&vc).is_ok());
    }

    #[test]
    fn forged_and_misplaced_view_changes_are_refused() {
        let cluster = cluster();
        let mut checker = Checker::new(cluster.clone());
        // A replica of group 1 cannot speak for group 0.
        let stranger = member(&cluster, 201, 0, &prepares(1));
        assert_eq!(
            checker.view_change(&stranger).err(),
            Some(Invalid::NotMember)
        );
        // A COMMIT of a view after the history shown.
        let mut who = usig(NodeId(102));
        let Warranted::Commit(mut later) =
            commit(&cluster, &mut who, 102, &slots_of(&prepares(1)), 1)
        else {
            unreachable!()
        };
        later.view = View(1);
        let bytes = later.own_warranted_bytes();
        let mut who = usig(NodeId(102));
        later.ui = who.create_ui(&bytes).unwrap();
        let vc = view_change(
            &mut who,
            102,
            0,
            prepares(1),
            vec![Warranted::Commit(later)],
        );
        assert_eq!(checker.view_change(&vc).err(), Some(Invalid::LaterCommit));
        // A tampered body no longer matches the warrant.
        let mut tampered = member(&cluster, 103, 0, &prepares(2));
        tampered.body.prepares.pop();
        assert_eq!(checker.view_change(&tampered).err(), Some(Invalid::Warrant));
    }

    /// Warrants a CHECKPOINT of `replica` at `slot` reporting `anchors`.
    fn checkpoint(
        who: &mut SoftUsig,
        replica: u32,
        slot: u64,
        chain: MessageDigest,
        book: MessageDigest,
        anchors: Vec<Anchor>,
    ) -> Checkpoint {
        signed(who, replica, slot, (chain, book), Lineage::GENESIS, anchors)
    }

    /// A stable checkpoint at slot 2K: f+1 matching CHECKPOINTs from both groups.
    fn stable_at_two_intervals(cluster: &Cluster) -> StableCheckpoint {
        stable_with_book(&OrderBook::new(cluster))
    }

    /// A stable checkpoint at 2K (every group's f+1) whose order book is `book`.
    fn stable_with_book(book: &OrderBook) -> StableCheckpoint {
        stable_on(book, Lineage::GENESIS)
    }

    /// A stable checkpoint at slot 2K taken on the history `lineage` names.
    fn stable_on(book: &OrderBook, lineage: Lineage) -> StableCheckpoint {
        let chain = MessageDigest::of(b"history up to 2K");
        let certificate = [101, 102, 201, 202]
            .map(|r| {
                let mut who = usig(NodeId(r));
                let slot = 2 * CHECKPOINT_INTERVAL;
                let point = (chain, book.digest());
                signed(&mut who, r, slot, point, lineage, Vec::new())
            })
            .to_vec();
        StableCheckpoint {
            certificate,
            book: Arc::new(book.encode()),
        }
    }

    /// Member 103's VIEW-CHANGE after a stable checkpoint at 2K whose log starts at `log[0]`
    /// (a CHECKPOINT of its at slot K), with `proof` as the reports of that anchor.
    fn anchored_view_change(
        who: &mut SoftUsig,
        cluster: &Cluster,
        log: Vec<Warranted>,
        anchor_proof: Vec<Checkpoint>,
    ) -> ViewChange {
        let body = ViewChangeBody {
            checkpoint: Some(stable_at_two_intervals(cluster)),
            base: None,
            prepares: Vec::new(),
            log,
            anchor_proof,
        };
        warrant_view_change(who, 103, 0, body)
    }

    /// The history a NEW-VIEW of view 1 started, its slot below a stable checkpoint at 2K.
    fn view_1_lineage() -> Lineage {
        Lineage {
            view: View(1),
            new_view: MessageDigest::of(b"a NEW-VIEW of view 1"),
            counter: 40,
            slot: 2 * CHECKPOINT_INTERVAL - 3,
        }
    }

    /// A VIEW-CHANGE whose base is view 0 may not show a stable checkpoint taken on view 1's
    /// history (the cut would put view-0 slots after view-1 ones: the model check's
    /// counterexample in `crates/model/src/repeated.rs`); one of view 0's is fine.
    #[test]
    fn a_stable_checkpoint_of_a_later_view_than_the_base_is_refused() {
        let cluster = cluster();
        let book = OrderBook::new(&cluster);
        let view_1 = view_1_lineage();
        let body = |checkpoint| ViewChangeBody {
            checkpoint: Some(checkpoint),
            base: None,
            prepares: Vec::new(),
            log: Vec::new(),
            anchor_proof: Vec::new(),
        };
        let later = body(stable_on(&book, view_1));
        let vc = warrant_view_change(&mut usig(NodeId(101)), 101, 0, later);
        let mut checker = Checker::new(cluster.clone());
        assert_eq!(
            checker.view_change(&vc).err(),
            Some(Invalid::CheckpointLineage)
        );
        let own = body(stable_on(&book, Lineage::GENESIS));
        let vc = warrant_view_change(&mut usig(NodeId(101)), 101, 0, own);
        assert!(checker.view_change(&vc).is_ok());
    }

    /// A VIEW-CHANGE may name its base instead of carrying it only where its stable checkpoint
    /// vouches for it: taken on that base's history, at or after the NEW-VIEW's slot.
    #[test]
    fn a_base_is_named_only_where_the_stable_checkpoint_vouches_for_it() {
        let cluster = cluster();
        let book = OrderBook::new(&cluster);
        let view_1 = view_1_lineage();
        let vc = |taken_on: Lineage, named: Lineage| {
            let body = ViewChangeBody {
                checkpoint: Some(stable_on(&book, taken_on)),
                base: Some(Base::Named(named)),
                prepares: Vec::new(),
                log: Vec::new(),
                anchor_proof: Vec::new(),
            };
            proto::testing::first_view_change(NodeId(101), GroupId(0), View(2), body)
        };
        let mut checker = Checker::new(cluster.clone());
        let shown = checker.view_change(&vc(view_1, view_1)).unwrap();
        assert_eq!(
            (shown.view, shown.base_counter, shown.slots.len()),
            (View(1), 40, 0)
        );
        // Another NEW-VIEW of view 1, a NEW-VIEW after the checkpoint, view 0's checkpoint.
        let other = Lineage {
            new_view: MessageDigest::of(b"another NEW-VIEW of view 1"),
            ..view_1
        };
        let after = Lineage {
            slot: 2 * CHECKPOINT_INTERVAL + 1,
            ..view_1
        };
        for (taken_on, named) in [(view_1, other), (after, after), (Lineage::GENESIS, view_1)] {
            let refused = checker.view_change(&vc(taken_on, named)).err();
            assert_eq!(refused, Some(Invalid::Base), "{named:?} on {taken_on:?}");
        }
    }

    /// A member restarted (its TPM rebooted: epoch 2) and its JOIN was ordered: its VIEW-CHANGE
    /// counts only with a stable checkpoint whose book records that JOIN, and only from right
    /// after it; one without, or that leaves out a message after the JOIN, is refused.
    #[test]
    fn a_rejoined_member_counts_once_a_stable_checkpoint_covers_its_join() {
        let cluster = cluster();
        let mut rebooted = proto::testing::usig_in_epoch(NodeId(101), usig::Epoch(2));
        let bytes = proto::Join::warranted_bytes(NodeId(101), cluster.epoch());
        let join = proto::Join {
            replica: NodeId(101),
            config_epoch: cluster.epoch(),
            ui: rebooted.create_ui(&bytes).unwrap(),
        };
        let mut book = OrderBook::new(&cluster);
        assert!(book.join(&cluster, &join));
        assert!(!book.join(&cluster, &join), "an incarnation is joined once");
        let covered = stable_with_book(&book);
        let body = |checkpoint| ViewChangeBody {
            checkpoint,
            base: None,
            prepares: Vec::new(),
            log: Vec::new(),
            anchor_proof: Vec::new(),
        };
        let mut checker = Checker::new(cluster.clone());
        // The rebooted USIG right after its JOIN (counter 1 of epoch 2).
        let after_join = || {
            let mut u = proto::testing::usig_in_epoch(NodeId(101), usig::Epoch(2));
            u.create_ui(&bytes).unwrap();
            u
        };
        let vc = warrant_view_change(&mut after_join(), 101, 0, body(None));
        assert_eq!(checker.view_change(&vc).err(), Some(Invalid::Incarnation));
        let uncovered = body(Some(stable_at_two_intervals(&cluster)));
        let vc = warrant_view_change(&mut after_join(), 101, 0, uncovered);
        assert_eq!(checker.view_change(&vc).err(), Some(Invalid::Incarnation));
        let vc = warrant_view_change(&mut after_join(), 101, 0, body(Some(covered.clone())));
        assert!(checker.view_change(&vc).is_ok());
        // A message warranted after the JOIN and left out of the log is a gap.
        let mut hid_one = after_join();
        hid_one.create_ui(b"a COMMIT it forgot").unwrap();
        let vc = warrant_view_change(&mut hid_one, 101, 0, body(Some(covered)));
        assert_eq!(checker.view_change(&vc).err(), Some(Invalid::LogGap));
    }

    /// A Byzantine member warrants its CHECKPOINT at K, then a COMMIT, then a second CHECKPOINT
    /// at K, and starts its log at the second to hide the COMMIT: its peers report the first,
    /// so the log is refused; the log from the first, with the same reports, is accepted.
    #[test]
    fn a_log_must_start_at_the_first_checkpoint_that_f_plus_one_peers_report() {
        let cluster = cluster();
        let k = CHECKPOINT_INTERVAL;
        let (chain, book) = (
            MessageDigest::of(b"at K"),
            OrderBook::new(&cluster).digest(),
        );
        let mut byzantine = usig(NodeId(103));
        // Something warranted before, so that no log below starts at counter 1.
        byzantine.create_ui(b"earlier").unwrap();
        let first = checkpoint(&mut byzantine, 103, k, chain, book, Vec::new());
        let slots = slots_of(&prepares(1));
        let hidden = commit(&cluster, &mut byzantine, 103, &slots, 1);
        let second = checkpoint(&mut byzantine, 103, k, chain, book, Vec::new());
        let reports = |anchor: &Checkpoint| {
            [101, 102]
                .map(|r| {
                    let mut who = usig(NodeId(r));
                    let reported = vec![Anchor::of(NodeId(103), &anchor.ui)];
                    checkpoint(&mut who, r, 2 * k, chain, book, reported)
                })
                .to_vec()
        };
        let mut checker = Checker::new(cluster.clone());
        // Its USIG after those four warrants (soft warrants of one key do not depend on each
        // other, so each VIEW-CHANGE below can take counter 5).
        let forked = || {
            let mut who = usig(NodeId(103));
            for _ in 0..4 {
                who.create_ui(b"spent").unwrap();
            }
            who
        };
        // Its correct peers delivered its messages in counter order: they report the first.
        let hiding = anchored_view_change(
            &mut forked(),
            &cluster,
            vec![Warranted::Checkpoint(second.clone())],
            reports(&first),
        );
        assert_eq!(checker.view_change(&hiding).err(), Some(Invalid::Anchor));
        // Its own report of the second plus one correct report of the first are not f+1.
        let mut own = usig(NodeId(103));
        let self_report = checkpoint(
            &mut own,
            103,
            2 * k,
            chain,
            book,
            vec![Anchor::of(NodeId(103), &second.ui)],
        );
        let mut mixed = reports(&first);
        mixed[1] = self_report;
        let hiding = anchored_view_change(
            &mut forked(),
            &cluster,
            vec![Warranted::Checkpoint(second.clone())],
            mixed,
        );
        assert_eq!(checker.view_change(&hiding).err(), Some(Invalid::Anchor));
        // No reports at all.
        let bare = anchored_view_change(
            &mut forked(),
            &cluster,
            vec![Warranted::Checkpoint(second.clone())],
            Vec::new(),
        );
        assert_eq!(checker.view_change(&bare).err(), Some(Invalid::Anchor));
        // From the first, with the COMMIT in it, and f+1 reports: valid.
        let honest = anchored_view_change(
            &mut byzantine,
            &cluster,
            vec![
                Warranted::Checkpoint(first.clone()),
                hidden,
                Warranted::Checkpoint(second),
            ],
            reports(&first),
        );
        assert!(checker.view_change(&honest).is_ok());
    }

    fn new_view(primary: u32, view_changes: Vec<ViewChange>) -> NewView {
        let epoch = proto::ConfigEpoch(1);
        let bytes = NewView::warranted_bytes(View(1), epoch, NodeId(primary), &view_changes);
        NewView {
            view: View(1),
            config_epoch: epoch,
            primary: NodeId(primary),
            view_changes,
            ui: usig(NodeId(primary)).create_ui(&bytes).unwrap(),
        }
    }

    /// A VIEW-CHANGE that skips a counter of the view's primary is refused: a correct replica
    /// takes every counter up to its last PREPARE as a PREPARE of the view (or refuses the
    /// primary from there on), so the gap is a Byzantine sender's, and a gap of millions would
    /// have been a null run every checker expanded.
    #[test]
    fn a_view_change_that_skips_a_counter_is_refused() {
        let cluster = cluster();
        let all = prepares(3);
        let (p1, p3) = (all[0].clone(), all[2].clone());
        let mut who = usig(NodeId(202));
        let gap = view_change(&mut who, 202, 1, vec![p1, p3], vec![]);
        let refused = Checker::new(cluster.clone()).view_change(&gap).err();
        assert_eq!(refused, Some(Invalid::Prepare));
        let shown = member(&cluster, 202, 1, &all);
        assert!(Checker::new(cluster).view_change(&shown).is_ok());
    }

    /// A VIEW-CHANGE that shows a PREPARE over the size limits is refused: a correct replica
    /// refuses such a PREPARE's primary and never shows it, and one shown could make the
    /// NEW-VIEW that carries the VIEW-CHANGE too large for a frame.
    #[test]
    fn a_view_change_that_shows_a_prepare_over_the_size_limits_is_refused() {
        let cluster = cluster();
        let client = proto::ClientId(1);
        let operation = vec![0; proto::limits::MAX_OPERATION_BYTES + 1];
        let key = proto::testing::client_key(client);
        let entries = vec![PrepareEntry {
            group: GroupId(0),
            request: proto::Request::signed(client, 1, vec![0], operation, &key),
        }];
        let epoch = proto::ConfigEpoch(1);
        let big = warranted_prepare(&mut usig(NodeId(0)), View(0), epoch, NodeId(0), entries);
        let refused = Checker::new(cluster.clone()).view_change(&member(&cluster, 101, 0, &[big]));
        assert_eq!(refused.err(), Some(Invalid::Prepare));
    }

    /// A VIEW-CHANGE may show PREPAREs up to [`VIEW_CHANGE_SPAN`] slots past its stable
    /// checkpoint, no further: a correct replica commits none beyond and leaves them out.
    #[test]
    fn a_view_change_that_shows_prepares_beyond_the_span_is_refused() {
        let cluster = cluster();
        let all = prepares(VIEW_CHANGE_SPAN + 1);
        let mut checker = Checker::new(cluster.clone());
        let within = view_change(
            &mut usig(NodeId(101)),
            101,
            0,
            all[..all.len() - 1].to_vec(),
            vec![],
        );
        let shown = checker.view_change(&within).unwrap();
        assert_eq!(shown.slots.len() as u64, VIEW_CHANGE_SPAN);
        let beyond = view_change(&mut usig(NodeId(101)), 101, 0, all, vec![]);
        assert_eq!(checker.view_change(&beyond).err(), Some(Invalid::Span));
    }

    #[test]
    fn the_cut_merges_the_histories_slot_by_slot() {
        let cluster = cluster();
        let all = prepares(3);
        let quorum = vec![
            member(&cluster, 101, 0, &all[..1]),
            member(&cluster, 102, 0, &[]),
            member(&cluster, 201, 1, &[]),
            view_change(&mut usig(NodeId(202)), 202, 1, all.clone(), vec![]),
        ];
        let nv = new_view(1, quorum);
        let cut = Checker::new(cluster).new_view(&nv).unwrap();
        let mut slots = slots_of(&all);
        slots.push(Slot::NewView(nv.digest()));
        assert_eq!(cut.slots, slots);
    }

    #[test]
    fn a_new_view_needs_its_primary_and_f_plus_one_from_every_group() {
        let cluster = cluster();
        let mut checker = Checker::new(cluster.clone());
        let group0 = || {
            vec![
                member(&cluster, 101, 0, &prepares(1)),
                member(&cluster, 102, 0, &prepares(1)),
            ]
        };
        let short = new_view(1, [group0(), vec![member(&cluster, 201, 1, &[])]].concat());
        assert_eq!(checker.new_view(&short).err(), Some(Invalid::Quorum));
        let twice = new_view(1, [group0(), group0()].concat());
        assert_eq!(checker.new_view(&twice).err(), Some(Invalid::Quorum));
        let group1 = || vec![member(&cluster, 201, 1, &[]), member(&cluster, 202, 1, &[])];
        let not_its_primary = new_view(2, [group0(), group1()].concat());
        assert_eq!(
            checker.new_view(&not_its_primary).err(),
            Some(Invalid::NewViewSender)
        );
        let valid = new_view(1, [group0(), group1()].concat());
        assert_eq!(checker.new_view(&valid).unwrap().slots.len(), 2);
    }

    /// A candidate that warrants NEW-VIEW after NEW-VIEW (each valid, each its own digest) fills
    /// the checker's memo of cuts only up to its bound, and a forgotten cut is computed again.
    #[test]
    fn the_remembered_cuts_are_bounded() {
        let cluster = cluster();
        let mut checker = Checker::new(cluster.clone());
        let quorum = vec![
            member(&cluster, 101, 0, &[]),
            member(&cluster, 102, 0, &[]),
            member(&cluster, 201, 1, &[]),
            member(&cluster, 202, 1, &[]),
        ];
        let mut candidate = usig(NodeId(1));
        let epoch = proto::ConfigEpoch(1);
        let bytes = NewView::warranted_bytes(View(1), epoch, NodeId(1), &quorum);
        let new_views: Vec<NewView> = (0..MAX_REMEMBERED_CUTS + 8)
            .map(|_| NewView {
                view: View(1),
                config_epoch: epoch,
                primary: NodeId(1),
                view_changes: quorum.clone(),
                ui: candidate.create_ui(&bytes).unwrap(),
            })
            .collect();
        let first = checker.new_view(&new_views[0]).unwrap();
        for nv in &new_views[1..] {
            checker.new_view(nv).unwrap();
        }
        assert_eq!(checker.cuts.len(), MAX_REMEMBERED_CUTS);
        assert_eq!(checker.new_view(&new_views[0]).unwrap(), first);
    }
}
