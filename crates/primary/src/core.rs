//! The primary's protocol core.
//!
//! It admits client requests (valid signature, declared partitions as the application derives
//! them, newer than the client's last ordered request), queues them fairly per client
//! ([`admission`](crate::admission): one waiting request per client, round robin, bounded),
//! batches everything pending without ever waiting to fill a batch, and keeps exactly one batch at the USIG at a time: while the trusted
//! component warrants one batch (milliseconds on a TPM), the next one accumulates. With a
//! pipeline depth ([`PrimaryCore::with_pipeline`]) it also keeps at most that many PREPAREs
//! undecided by the groups ([`pacing`](crate::pacing)), so that under load batches grow. Each request
//! goes to the group serving its partition; a multi-partition request to the group of its first
//! partition.
//!
//! Every primary candidate runs this core; only the primary of the current view orders. A
//! candidate becomes primary of view v when it holds f+1 valid VIEW-CHANGEs for v from every
//! group: it warrants the NEW-VIEW that carries them and continues ordering after it.
//!
//! The operator's RECONFIGURE is ordered alone and is the configuration epoch's last PREPARE
//! (docs/protocol.md, "Reconfiguration"): requests admitted after it wait here for the next
//! epoch's core ([`PrimaryCore::take_pending`]).

use crate::admission::Admission;
use crate::pacing::Pacing;
use group::view::Slot;
use group::view::{primary_of, Checker, Invalid};
use proto::batch::RootCache;
use proto::config::Cluster;
use proto::reconfig::ReconfigError;
use proto::{
    ClientId, Decided, GroupId, Incarnation, Join, NewView, NodeId, PartitionRule, Prepare,
    PrepareEntry, Proposal, Reconfigure, Request, View, ViewChange,
};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::sync::Arc;
use usig::UniqueWarrant;

/// Why a request was not admitted (counted by the driver's metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    UnknownClient,
    BadSignature,
    /// The declared partitions are not the operation's, or name no partition of the cluster.
    BadPartitions,
    /// Over the size limits every replica applies ([`proto::Request::within_limits`]): it
    /// would get no order.
    TooLarge,
    /// Not newer than the client's last admitted request (a retransmission or a replay).
    Duplicate,
    /// This candidate is not the primary of its view (yet).
    NotPrimary,
    /// A JOIN from no replica of the configuration, of another epoch, or with a bad warrant.
    BadJoin,
    /// The admission queue is full (the client retransmits; see [`crate::admission`]).
    Overloaded,
    /// A DECIDED from a node that is no replica of the configuration.
    NotReplica,
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Ask the USIG for a warrant over `bytes`, then call [`PrimaryCore::warranted`].
    Warrant { bytes: Vec<u8> },
    /// Send this PREPARE or NEW-VIEW to every group replica.
    Broadcast(Proposal),
}

/// What the USIG is warranting now.
enum Signing {
    Batch(Vec<PrepareEntry>, Vec<Join>),
    Reconfigure(Reconfigure),
    NewView(View, Vec<ViewChange>),
}

/// PREPAREs kept to answer replicas that lost them; older ones are left to state transfer.
const KEEP_PREPARES: usize = 4096;

/// The primary's state.
pub struct PrimaryCore {
    cluster: Arc<Cluster>,
    rule: Arc<dyn PartitionRule>,
    me: NodeId,
    view: View,
    max_batch: usize,
    pending: Admission,
    /// Restarted replicas' JOINs to order with the next PREPARE, the latest per replica.
    joins: BTreeMap<NodeId, Join>,
    /// The incarnation of each replica whose JOIN this candidate ordered (retransmissions of it
    /// are not ordered again).
    joined: BTreeMap<NodeId, Incarnation>,
    signing: Option<Signing>,
    last_admitted: BTreeMap<ClientId, u64>,
    /// Recent PREPAREs and NEW-VIEWs by warrant counter, and where each client's latest request
    /// was ordered.
    recent: BTreeMap<u64, Proposal>,
    ordered_in: BTreeMap<ClientId, (u64, u64)>,
    /// PREPAREs re-broadcast since the last tick (at most once per tick each).
    rebroadcast: BTreeSet<u64>,
    /// The counters sent to each replica's fetches since the last tick (at most once per tick
    /// each: [`PrimaryCore::on_fetch_from`]).
    fetched: BTreeSet<(NodeId, u64)>,
    checker: Checker,
    /// Valid VIEW-CHANGEs for views this candidate is the primary of, by view and sender: each
    /// sender's latest only, so a Byzantine replica's VIEW-CHANGEs for view after view take no
    /// more room than one.
    view_changes: BTreeMap<View, BTreeMap<NodeId, ViewChange>>,
    /// The encoded size of each sender's kept VIEW-CHANGE: a NEW-VIEW takes the smallest f+1 of
    /// each group, so that a Byzantine sender's padded one is left out once enough others came.
    view_change_bytes: BTreeMap<NodeId, usize>,
    /// The most bytes a NEW-VIEW may encode to ([`proto::limits::MAX_NEW_VIEW_BYTES`]).
    max_new_view_bytes: usize,
    /// The last choice of VIEW-CHANGEs (view, and each sender with its VIEW-CHANGE's size) found
    /// too large for a NEW-VIEW: not encoded again while the choice stays the same.
    oversized: Option<Choice>,
    /// How many choices were found too large, since the start.
    too_large: u64,
    /// The operator's RECONFIGURE, admitted and not yet warranted.
    reconfigure: Option<Reconfigure>,
    /// The warrant counter of the PREPARE that ordered a RECONFIGURE (ours, or in a new view's
    /// cut): the epoch's last, nothing is ordered after it.
    closed_at: Option<u64>,
    /// The operator asked where our USIG sequence stands: nothing more is warranted.
    frozen: bool,
    /// The PREPAREs the groups have not decided yet, and how many may be.
    pacing: Pacing,
    /// The client batch roots already checked (docs/protocol.md, "Batch-signed REQUESTs").
    roots: RootCache,
}

/// A choice of VIEW-CHANGEs for a NEW-VIEW: its view, and each sender with its VIEW-CHANGE's
/// encoded size.
type Choice = (View, Vec<(NodeId, usize)>);

impl PrimaryCore {
    /// A candidate in `view` (the primary if it is that view's), batching at most `max_batch`
    /// requests per PREPARE.
    pub fn new(
        cluster: Arc<Cluster>,
        rule: Arc<dyn PartitionRule>,
        me: NodeId,
        view: View,
        max_batch: usize,
    ) -> Self {
        PrimaryCore {
            rule,
            me,
            view,
            max_batch: max_batch.clamp(1, proto::limits::MAX_PREPARE_ENTRIES),
            pending: Admission::default(),
            joins: BTreeMap::new(),
            joined: BTreeMap::new(),
            signing: None,
            last_admitted: BTreeMap::new(),
            recent: BTreeMap::new(),
            ordered_in: BTreeMap::new(),
            rebroadcast: BTreeSet::new(),
            fetched: BTreeSet::new(),
            checker: Checker::new(cluster.clone()),
            cluster,
            view_changes: BTreeMap::new(),
            view_change_bytes: BTreeMap::new(),
            max_new_view_bytes: proto::limits::MAX_NEW_VIEW_BYTES,
            oversized: None,
            too_large: 0,
            reconfigure: None,
            closed_at: None,
            frozen: false,
            pacing: Pacing::new(0),
            roots: RootCache::default(),
        }
    }

    /// Keeps at most `depth` PREPAREs undecided by the groups (0, the default: no limit), so
    /// that requests gather while the groups work ([`crate::pacing`]).
    pub fn with_pipeline(mut self, depth: usize) -> Self {
        self.pacing = Pacing::new(depth);
        self
    }

    /// A replica's DECIDED, from the node its authenticated link names: one more hint towards
    /// the f+1 that decide a PREPARE for the pacing window (hints of other views are stale).
    pub fn on_decided(&mut self, from: NodeId, decided: Decided) -> Result<Vec<Action>, Rejection> {
        let group = self
            .cluster
            .group_of_replica(from)
            .ok_or(Rejection::NotReplica)?;
        if decided.view != self.view {
            return Ok(Vec::new());
        }
        let quorum = self.cluster.config.f + 1;
        self.pacing.on_decided(group, from, decided.counter, quorum);
        Ok(self.next_batch())
    }

    /// PREPAREs sent and not yet decided by f+1 replicas of each group they have work for.
    pub fn undecided(&self) -> usize {
        self.pacing.undecided()
    }

    /// PREPAREs that stopped holding back the next one undecided, since the start.
    pub fn pacing_expired(&self) -> u64 {
        self.pacing.expired()
    }

    /// Choices of VIEW-CHANGEs whose NEW-VIEW was over the limit, since the start: each waited
    /// for more VIEW-CHANGEs.
    pub fn new_views_too_large(&self) -> u64 {
        self.too_large
    }

    /// Warrants nothing more in this epoch (the operator asked where our USIG sequence stands;
    /// the next epoch continues right after our last warrant).
    pub fn freeze(&mut self) {
        self.frozen = true;
    }

    /// Whether this epoch's last PREPARE (a RECONFIGURE) is ordered.
    pub fn is_closed(&self) -> bool {
        self.closed_at.is_some()
    }

    /// The requests admitted and not ordered, for the next configuration epoch's core.
    pub fn take_pending(&mut self) -> Vec<Request> {
        self.pending
            .drain()
            .into_iter()
            .map(|e| e.request)
            .collect()
    }

    /// The operator's RECONFIGURE: checked (operator signature, this epoch, a valid successor)
    /// and, by the primary, ordered alone in the next PREPARE, the epoch's last. A
    /// retransmission of one already ordered re-broadcasts its PREPARE (once per tick), as for a
    /// client's request: the epoch's last PREPARE may be lost by everyone, a gap nobody sees.
    pub fn on_reconfigure(
        &mut self,
        reconfigure: Reconfigure,
    ) -> Result<Vec<Action>, ReconfigError> {
        reconfigure.check(&self.cluster)?;
        if !self.is_primary() {
            return Ok(Vec::new());
        }
        if let Some(counter) = self.closed_at {
            return Ok(match self.recent.get(&counter) {
                Some(proposal) if self.rebroadcast.insert(counter) => {
                    vec![Action::Broadcast(proposal.clone())]
                }
                _ => Vec::new(),
            });
        }
        let in_flight = matches!(self.signing, Some(Signing::Reconfigure(_)));
        if self.reconfigure.is_none() && !in_flight {
            self.reconfigure = Some(reconfigure);
        }
        Ok(self.next_batch())
    }

    /// True when this candidate orders requests in its current view.
    pub fn is_primary(&self) -> bool {
        primary_of(&self.cluster, self.view) == self.me
    }

    /// The view this candidate is in.
    pub fn view(&self) -> View {
        self.view
    }

    /// A replica's VIEW-CHANGE. Kept if it is valid, for a later view this candidate is the
    /// primary of, and the sender's latest (it replaces the sender's earlier one; others are
    /// ignored); with f+1 from every group for one view the NEW-VIEW is warranted.
    pub fn on_view_change(&mut self, vc: ViewChange) -> Result<Vec<Action>, Invalid> {
        let next = vc.next_view;
        if next <= self.view || primary_of(&self.cluster, next) != self.me {
            return Ok(Vec::new());
        }
        let later_kept = self
            .view_changes
            .range(next..)
            .any(|(_, by_sender)| by_sender.contains_key(&vc.replica));
        if later_kept {
            return Ok(Vec::new());
        }
        self.checker.view_change(&vc)?;
        self.view_changes.retain(|_, by_sender| {
            by_sender.remove(&vc.replica);
            !by_sender.is_empty()
        });
        let bytes = vc.encoded_len();
        self.view_change_bytes.insert(vc.replica, bytes);
        self.view_changes
            .entry(next)
            .or_default()
            .insert(vc.replica, vc);
        Ok(self.next_batch())
    }

    /// The VIEW-CHANGEs of the latest view that has f+1 from every group whose NEW-VIEW fits
    /// [`proto::limits::MAX_NEW_VIEW_BYTES`]: the smallest f+1 of each group. Every view is
    /// looked at, not only the highest kept: a Byzantine replica's VIEW-CHANGE for a view far
    /// ahead must not hide the quorum the correct replicas gathered for an earlier one. A choice
    /// too large waits for more VIEW-CHANGEs: the correct ones fit (docs/protocol.md, "Bounded
    /// VIEW-CHANGEs"), and a Byzantine sender's padded one must not hold the view back.
    fn new_view_quorum(&mut self) -> Option<(View, Vec<ViewChange>)> {
        let quorum = self.cluster.config.f + 1;
        let bytes = |vc: &ViewChange| self.view_change_bytes.get(&vc.replica).map_or(0, |&b| b);
        let mut found = None;
        for (&view, changes) in self.view_changes.iter().rev() {
            let mut chosen = Vec::new();
            for g in &self.cluster.config.groups {
                let mut of_group: Vec<&ViewChange> =
                    changes.values().filter(|vc| vc.group.0 == g.id).collect();
                if of_group.len() < quorum {
                    break;
                }
                of_group.sort_by_key(|vc| (bytes(vc), vc.replica));
                chosen.extend(of_group.into_iter().take(quorum));
            }
            if chosen.len() < quorum * self.cluster.config.groups.len() {
                continue;
            }
            let senders = chosen.iter().map(|vc| (vc.replica, bytes(vc))).collect();
            let choice = Some((view, senders));
            // Cloned only for a new choice: while one too large waits, requests keep coming.
            if self.oversized == choice {
                continue;
            }
            let chosen: Vec<ViewChange> = chosen.into_iter().cloned().collect();
            if NewView::encoded_len(&chosen) > self.max_new_view_bytes {
                self.oversized = choice;
                self.too_large += 1;
                continue;
            }
            found = Some((view, chosen));
            break;
        }
        found
    }

    /// A restarted replica's JOIN: ordered with the next PREPARE if this candidate is the primary
    /// (docs/protocol.md, "Replica recovery"). The replica re-sends it until it recovered, so a
    /// candidate that becomes primary later orders it too.
    pub fn on_join(&mut self, join: Join) -> Result<Vec<Action>, Rejection> {
        let valid = join.is_valid_in(&self.cluster);
        if !valid {
            return Err(Rejection::BadJoin);
        }
        if !self.is_primary() {
            return Err(Rejection::NotPrimary);
        }
        let incarnation = join.incarnation();
        let newer = |known: Option<Incarnation>| known.is_none_or(|k| incarnation > k);
        if !newer(self.joined.get(&join.replica).copied())
            || !newer(self.joins.get(&join.replica).map(Join::incarnation))
        {
            return Ok(Vec::new());
        }
        self.joins.insert(join.replica, join);
        Ok(self.next_batch())
    }

    /// A client request arrived. The retransmission of a request already ordered re-broadcasts
    /// our latest proposal (once per tick): its PREPARE may be the last one and lost by
    /// everyone, a gap no replica can see.
    pub fn on_request(&mut self, request: Request) -> Result<Vec<Action>, Rejection> {
        let mut results = self.on_requests(vec![request]);
        results.pop().expect("one request in, one result out")
    }

    /// Several client requests, as [`PrimaryCore::on_request`] takes one (in order, one result
    /// each), with their signatures checked in one batch: drivers gather the requests of a
    /// burst of frames. The verdicts are those of single checks.
    pub fn on_requests(&mut self, requests: Vec<Request>) -> Vec<Result<Vec<Action>, Rejection>> {
        let verdicts = if self.is_primary() {
            let all: Vec<&Request> = requests.iter().collect();
            let cluster = &self.cluster;
            Request::verify_many(&all, |c| cluster.client_key(c), &mut self.roots)
        } else {
            vec![false; requests.len()]
        };
        requests
            .into_iter()
            .zip(verdicts)
            .map(|(request, signed)| self.on_checked_request(request, signed))
            .collect()
    }

    /// `signed`: the client's signature verified.
    fn on_checked_request(
        &mut self,
        request: Request,
        signed: bool,
    ) -> Result<Vec<Action>, Rejection> {
        if !self.is_primary() {
            return Err(Rejection::NotPrimary);
        }
        let group = match self.admit(&request, signed) {
            Err(Rejection::Duplicate) => return self.retransmitted(&request),
            other => other?,
        };
        let (client, timestamp) = (request.client, request.timestamp);
        self.pending
            .push(PrepareEntry { group, request })
            .map_err(|_| Rejection::Overloaded)?;
        self.last_admitted.insert(client, timestamp);
        Ok(self.next_batch())
    }

    /// The USIG warranted the batch or NEW-VIEW in flight.
    pub fn warranted(&mut self, ui: UniqueWarrant) -> Vec<Action> {
        let (entries, joins, reconfigure) = match self.signing.take() {
            None => return Vec::new(),
            Some(Signing::Batch(entries, joins)) => (entries, joins, None),
            Some(Signing::Reconfigure(r)) => (Vec::new(), Vec::new(), Some(Box::new(r))),
            Some(Signing::NewView(view, view_changes)) => {
                let nv = NewView {
                    view,
                    config_epoch: self.cluster.epoch(),
                    primary: self.me,
                    view_changes,
                    ui,
                };
                self.view = view;
                self.view_changes.retain(|v, _| *v > view);
                self.pacing.clear();
                // What we admitted in earlier views need not be in this view's history: a
                // candidate cut off while the others moved on goes on ordering in its old view,
                // unaware, and every replica ignores those PREPAREs. A client's retransmission
                // of such a request must be ordered now, not answered with the old PREPARE; so
                // every client is admitted anew, but for what waits for our next batch (a
                // request ordered before is refused by the replicas' order book, as any
                // duplicate).
                self.last_admitted = self.pending.waiting().collect();
                self.ordered_in.clear();
                // A cut that holds the epoch's last PREPARE: nothing is ordered after it.
                if let Ok(cut) = self.checker.new_view(&nv) {
                    let last = cut.slots.iter().find_map(|slot| match slot {
                        Slot::Prepare(p)
                            if p.reconfigure
                                .as_ref()
                                .is_some_and(|r| r.check(&self.cluster).is_ok()) =>
                        {
                            Some(p.ui.counter)
                        }
                        _ => None,
                    });
                    if last.is_some() {
                        self.closed_at = Some(nv.ui.counter);
                    }
                }
                let proposal = Proposal::NewView(nv);
                self.keep(proposal.clone());
                let mut actions = vec![Action::Broadcast(proposal)];
                actions.extend(self.next_batch());
                return actions;
            }
        };
        let counter = ui.counter;
        let prepare = Prepare {
            view: self.view,
            config_epoch: self.cluster.epoch(),
            primary: self.me,
            entries,
            joins,
            reconfigure,
            ui,
        };
        if prepare.reconfigure.is_some() {
            self.closed_at = Some(counter);
        }
        for j in &prepare.joins {
            self.joined.insert(j.replica, j.incarnation());
        }
        for e in &prepare.entries {
            self.ordered_in
                .insert(e.request.client, (e.request.timestamp, counter));
        }
        let groups = prepare.entries.iter().map(|e| e.group).collect();
        self.pacing.sent(counter, groups);
        let proposal = Proposal::Prepare(prepare);
        self.keep(proposal.clone());
        let mut actions = vec![Action::Broadcast(proposal)];
        actions.extend(self.next_batch());
        actions
    }

    fn keep(&mut self, proposal: Proposal) {
        self.recent.insert(proposal.ui().counter, proposal);
        while self.recent.len() > KEEP_PREPARES {
            self.recent.pop_first();
        }
    }

    /// A replica asks for PREPAREs or NEW-VIEWs it lost (a gap in the warrant counters it holds):
    /// those kept. A reversed range (a Byzantine replica's) asks for nothing: `BTreeMap::range`
    /// would panic. A driver answers through [`PrimaryCore::on_fetch_from`].
    pub fn on_fetch(&self, counters: RangeInclusive<u64>) -> Vec<Proposal> {
        if counters.is_empty() {
            return Vec::new();
        }
        self.recent
            .range(counters)
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// `replica`'s fetch ([`PrimaryCore::on_fetch`]), less the counters this candidate sent it
    /// since the last tick. A fetch is a few bytes and its answer up to 256 PREPAREs, each
    /// cloned and encoded: a Byzantine replica that sent its fetch over and over (or anyone
    /// replaying a correct one's) had the primary's event loop copy PREPAREs as fast as it
    /// could send. Now it gets each at most once per tick. A correct replica loses nothing: it
    /// asks for a counter again only after `RETRY_TICKS` (4) ticks of its own without the
    /// answer, and its next fetch starts after the last one's end.
    pub fn on_fetch_from(
        &mut self,
        replica: NodeId,
        counters: RangeInclusive<u64>,
    ) -> Vec<Proposal> {
        if counters.is_empty() {
            return Vec::new();
        }
        let fetched = &mut self.fetched;
        self.recent
            .range(counters)
            .filter(|(&counter, _)| fetched.insert((replica, counter)))
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// A timer tick: PREPAREs may be re-broadcast and fetched again, requests admission held
    /// back (a client over its share) may be due for a batch now, and PREPAREs undecided for
    /// too long stop holding back the next.
    pub fn on_tick(&mut self) -> Vec<Action> {
        self.rebroadcast.clear();
        self.fetched.clear();
        self.pending.tick();
        self.pacing.tick();
        self.next_batch()
    }

    /// A retransmission of the request `ordered_in` says we ordered last for its client: a
    /// replica may have lost its PREPARE, and if that was our last one, no later PREPARE shows
    /// it the gap. So we broadcast our **latest** proposal again, at most once per tick (and
    /// once more for each proposal sent since): a replica that lacks the request's PREPARE
    /// either gets it (it was the latest) or holds a PREPARE past the gap and fetches the rest
    /// itself (`FetchPrepares`). Re-sending the request's own PREPARE instead cost one
    /// broadcast per request and tick, so whoever replayed every client's last request (every
    /// replica and anyone on the path sees them) made us re-send up to all 4,096 PREPAREs we
    /// keep, every tick (docs/protocol.md, "Byzantine input").
    fn retransmitted(&mut self, request: &Request) -> Result<Vec<Action>, Rejection> {
        let Some(&(timestamp, counter)) = self.ordered_in.get(&request.client) else {
            return Err(Rejection::Duplicate);
        };
        if timestamp != request.timestamp {
            return Err(Rejection::Duplicate);
        }
        if !self.recent.contains_key(&counter) {
            return Ok(Vec::new());
        }
        match self.recent.last_key_value() {
            Some((&latest, proposal)) if self.rebroadcast.insert(latest) => {
                Ok(vec![Action::Broadcast(proposal.clone())])
            }
            _ => Ok(Vec::new()),
        }
    }

    /// Requests waiting for the next batch.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The most requests that may wait for a batch (one per client).
    pub fn pending_capacity(&self) -> usize {
        self.pending.max_clients()
    }

    fn admit(&self, request: &Request, signed: bool) -> Result<GroupId, Rejection> {
        if self.cluster.client_key(request.client).is_none() {
            return Err(Rejection::UnknownClient);
        }
        if !signed {
            return Err(Rejection::BadSignature);
        }
        if !request.within_limits(self.cluster.config.partitions) {
            return Err(Rejection::TooLarge);
        }
        if !request.declares_truthfully(self.rule.as_ref())
            || !request.partitions.windows(2).all(|w| w[0] < w[1])
            || request
                .partitions
                .iter()
                .any(|&p| self.cluster.group_of(p).is_none())
        {
            return Err(Rejection::BadPartitions);
        }
        let group = request
            .partitions
            .first()
            .and_then(|&p| self.cluster.group_of(p))
            .ok_or(Rejection::BadPartitions)?;
        if self
            .last_admitted
            .get(&request.client)
            .is_some_and(|&last| request.timestamp <= last)
        {
            return Err(Rejection::Duplicate);
        }
        Ok(group)
    }

    /// Starts warranting the NEW-VIEW that makes this candidate primary, or else the next batch,
    /// if the USIG is free: everything pending, up to the limit.
    fn next_batch(&mut self) -> Vec<Action> {
        if self.signing.is_some() || self.frozen {
            return Vec::new();
        }
        if let Some((view, view_changes)) = self.new_view_quorum() {
            let bytes =
                NewView::warranted_bytes(view, self.cluster.epoch(), self.me, &view_changes);
            self.signing = Some(Signing::NewView(view, view_changes));
            return vec![Action::Warrant { bytes }];
        }
        if self.closed_at.is_some() || !self.is_primary() {
            return Vec::new();
        }
        if let Some(reconfigure) = self.reconfigure.take() {
            let bytes = Prepare::warranted_bytes(
                self.view,
                self.cluster.epoch(),
                self.me,
                &[],
                &[],
                Some(&reconfigure),
            );
            self.signing = Some(Signing::Reconfigure(reconfigure));
            return vec![Action::Warrant { bytes }];
        }
        if self.pending.is_empty() && self.joins.is_empty() {
            return Vec::new();
        }
        // JOINs never wait: a restarted replica is blind until one is ordered.
        if !self
            .pacing
            .open(self.pending.len() >= self.max_batch || !self.joins.is_empty())
        {
            return Vec::new();
        }
        let entries = self.pending.take(self.max_batch);
        if entries.is_empty() && self.joins.is_empty() {
            return Vec::new();
        }
        let joins: Vec<Join> = std::mem::take(&mut self.joins).into_values().collect();
        let bytes = Prepare::warranted_bytes(
            self.view,
            self.cluster.epoch(),
            self.me,
            &entries,
            &joins,
            None,
        );
        self.signing = Some(Signing::Batch(entries, joins));
        vec![Action::Warrant { bytes }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::testing::{client_key, request, usig, BytesArePartitions, TestCluster};
    use usig::Usig;

    fn primary(max_batch: usize) -> PrimaryCore {
        let cluster = Arc::new(TestCluster::new(1, 2, 4, 4).cluster);
        PrimaryCore::new(
            cluster,
            Arc::new(BytesArePartitions),
            NodeId(0),
            View(0),
            max_batch,
        )
    }

    fn warrant(bytes: &[u8]) -> UniqueWarrant {
        usig(NodeId(0)).create_ui(bytes).unwrap()
    }

    #[test]
    fn batches_while_the_usig_is_busy_and_never_waits_to_fill() {
        let mut p = primary(2);
        let first = p.on_request(request(1, 1, &[0])).unwrap();
        let [Action::Warrant { bytes }] = first.as_slice() else {
            panic!("{first:?}")
        };
        // Three more arrive while the first batch is at the USIG: no new warrant yet.
        for c in 2..=4 {
            assert!(p.on_request(request(c, 1, &[1])).unwrap().is_empty());
        }
        let out = p.warranted(warrant(bytes));
        let [Action::Broadcast(Proposal::Prepare(prepare)), Action::Warrant { .. }] =
            out.as_slice()
        else {
            panic!("{out:?}")
        };
        assert_eq!(prepare.entries.len(), 1);
        assert_eq!(prepare.entries[0].group, GroupId(0));
        assert_eq!(p.pending(), 1, "the next batch took max_batch = 2");
    }

    /// A primary with a pipeline of one that sent the PREPARE of one request, with its
    /// warrant counter.
    fn paced_with_one_undecided() -> (PrimaryCore, u64) {
        let mut p = primary(64).with_pipeline(1);
        let first = p.on_request(request(1, 1, &[0])).unwrap();
        let [Action::Warrant { bytes }] = first.as_slice() else {
            panic!("{first:?}")
        };
        let out = p.warranted(warrant(bytes));
        let [Action::Broadcast(Proposal::Prepare(prepare))] = out.as_slice() else {
            panic!("{out:?}")
        };
        let counter = prepare.ui.counter;
        (p, counter)
    }

    /// With a pipeline of one, requests gather while a PREPARE is undecided and go out together
    /// once f+1 replicas of its group said DECIDED; hints of other views or nodes do nothing.
    #[test]
    fn with_a_pipeline_requests_gather_until_the_group_decides() {
        let (mut p, counter) = paced_with_one_undecided();
        for c in 2..=4 {
            assert!(p.on_request(request(c, 1, &[0])).unwrap().is_empty());
        }
        assert_eq!(p.undecided(), 1);
        let hint = |counter| Decided {
            view: View(0),
            counter,
        };
        let stale = Decided {
            view: View(1),
            counter,
        };
        assert_eq!(
            p.on_decided(NodeId(11), hint(counter)),
            Err(Rejection::NotReplica)
        );
        assert!(p.on_decided(NodeId(101), stale).unwrap().is_empty());
        assert!(p.on_decided(NodeId(102), stale).unwrap().is_empty());
        assert!(p.on_decided(NodeId(201), hint(counter)).unwrap().is_empty());
        assert!(p.on_decided(NodeId(101), hint(counter)).unwrap().is_empty());
        let out = p.on_decided(NodeId(102), hint(counter)).unwrap();
        let [Action::Warrant { bytes }] = out.as_slice() else {
            panic!("{out:?}")
        };
        let out = p.warranted(warrant(bytes));
        let [Action::Broadcast(Proposal::Prepare(prepare))] = out.as_slice() else {
            panic!("{out:?}")
        };
        assert_eq!(
            prepare.entries.len(),
            3,
            "the three gathered in one PREPARE"
        );
    }

    /// Without any DECIDED (hints lost, or every replica withholding them), the next batch
    /// still goes out once the undecided PREPARE expired: hints cost throughput, never liveness.
    #[test]
    fn without_hints_the_next_batch_goes_out_after_the_expiry() {
        let (mut p, _) = paced_with_one_undecided();
        assert!(p.on_request(request(2, 1, &[0])).unwrap().is_empty());
        for _ in 1..crate::pacing::EXPIRE_TICKS {
            assert!(p.on_tick().is_empty());
        }
        let out = p.on_tick();
        assert!(
            matches!(out.as_slice(), [Action::Warrant { .. }]),
            "{out:?}"
        );
        assert_eq!(p.pacing_expired(), 1);
    }

    fn join(replica: u32, warranted_by: u32) -> Join {
        let bytes = Join::warranted_bytes(NodeId(replica), proto::ConfigEpoch(1));
        Join {
            replica: NodeId(replica),
            config_epoch: proto::ConfigEpoch(1),
            ui: usig(NodeId(warranted_by)).create_ui(&bytes).unwrap(),
        }
    }

    /// A JOIN is ordered in a PREPARE of its own when nothing else is pending, once; forged ones
    /// and those of unknown replicas are refused.
    #[test]
    fn a_join_is_ordered_once_and_forged_ones_are_refused() {
        let mut p = primary(4);
        assert_eq!(p.on_join(join(101, 102)), Err(Rejection::BadJoin));
        assert_eq!(p.on_join(join(7, 7)), Err(Rejection::BadJoin));
        let out = p.on_join(join(101, 101)).unwrap();
        let [Action::Warrant { bytes }] = out.as_slice() else {
            panic!("{out:?}")
        };
        let out = p.warranted(warrant(bytes));
        let [Action::Broadcast(Proposal::Prepare(prepare))] = out.as_slice() else {
            panic!("{out:?}")
        };
        assert!(prepare.entries.is_empty());
        assert_eq!(prepare.joins, vec![join(101, 101)]);
        assert!(
            p.on_join(join(101, 101)).unwrap().is_empty(),
            "a re-sent JOIN is not ordered again"
        );
    }

    #[test]
    fn routes_by_partition_and_multi_partition_to_the_first_group() {
        let mut p = primary(8);
        let out = p.on_request(request(1, 1, &[3])).unwrap();
        let [Action::Warrant { bytes }] = out.as_slice() else {
            panic!()
        };
        p.on_request(request(2, 1, &[0, 1])).unwrap();
        let out = p.warranted(warrant(bytes));
        let Action::Broadcast(Proposal::Prepare(first)) = &out[0] else {
            panic!()
        };
        assert_eq!(first.entries[0].group, GroupId(1));
        let Action::Warrant { bytes } = &out[1] else {
            panic!()
        };
        let out = p.warranted(warrant(bytes));
        let Action::Broadcast(Proposal::Prepare(second)) = &out[0] else {
            panic!()
        };
        assert_eq!(second.entries[0].group, GroupId(0));
        assert_eq!(second.entries[0].request.partitions, vec![0, 1]);
    }

    #[test]
    fn rejects_forged_replayed_and_mislabelled_requests() {
        let mut p = primary(8);
        let mut forged = request(1, 1, &[0]);
        forged.timestamp = 2;
        assert_eq!(p.on_request(forged), Err(Rejection::BadSignature));
        assert_eq!(
            p.on_request(request(99, 1, &[0])),
            Err(Rejection::UnknownClient)
        );
        let lying = Request::signed(ClientId(1), 1, vec![0], vec![1], &client_key(ClientId(1)));
        assert_eq!(p.on_request(lying), Err(Rejection::BadPartitions));
        assert_eq!(
            p.on_request(request(1, 1, &[7])),
            Err(Rejection::BadPartitions)
        );
        assert!(p.on_request(request(1, 5, &[0])).is_ok());
        assert_eq!(p.on_request(request(1, 5, &[0])), Err(Rejection::Duplicate));
        assert_eq!(p.on_request(request(1, 4, &[0])), Err(Rejection::Duplicate));
        assert!(p.on_request(request(1, 6, &[0])).is_ok());
    }

    #[test]
    fn requests_checked_in_one_batch_get_the_verdicts_of_one_by_one() {
        let mut forged = request(1, 1, &[0]);
        forged.timestamp = 2;
        let lying = Request::signed(ClientId(1), 1, vec![0], vec![1], &client_key(ClientId(1)));
        let burst = vec![
            request(2, 1, &[1]),
            forged,
            request(99, 1, &[0]),
            lying,
            request(1, 5, &[0]),
            request(1, 5, &[0]),
            request(3, 1, &[2]),
            request(1, 4, &[0]),
            request(1, 6, &[0]),
        ];
        let mut one_by_one = primary(8);
        let expected: Vec<_> = burst
            .iter()
            .map(|r| one_by_one.on_request(r.clone()))
            .collect();
        let mut batched = primary(8);
        assert_eq!(batched.on_requests(burst), expected);
        assert_eq!(batched.pending(), one_by_one.pending());
        assert!(expected.contains(&Err(Rejection::BadSignature)));
        assert!(expected.contains(&Err(Rejection::Duplicate)));
    }

    /// `replica` (of `group`, its first warrant) asks to move to `next_view`.
    fn view_change(replica: u32, group: u32, next_view: u64) -> ViewChange {
        let body = proto::ViewChangeBody {
            checkpoint: None,
            base: None,
            prepares: Vec::new(),
            log: Vec::new(),
            anchor_proof: Vec::new(),
        };
        let (replica, group) = (NodeId(replica), GroupId(group));
        proto::testing::first_view_change(replica, group, View(next_view), body)
    }

    /// A Byzantine replica warrants a VIEW-CHANGE for a view far ahead that this candidate would
    /// lead: the quorum the correct replicas gathered for view 3 still makes the NEW-VIEW, and
    /// the Byzantine replica's VIEW-CHANGEs take one entry however many views it names.
    #[test]
    fn a_view_change_far_ahead_does_not_hide_the_quorum_of_an_earlier_view() {
        let mut p = primary(8);
        assert_eq!(p.on_view_change(view_change(101, 0, 3000)), Ok(Vec::new()));
        assert_eq!(p.on_view_change(view_change(101, 0, 3003)), Ok(Vec::new()));
        assert_eq!(p.on_view_change(view_change(101, 0, 3)), Ok(Vec::new()));
        assert_eq!(p.view_changes.values().map(BTreeMap::len).sum::<usize>(), 1);
        for (replica, group) in [(102, 0), (103, 0), (201, 1)] {
            assert_eq!(
                p.on_view_change(view_change(replica, group, 3)),
                Ok(Vec::new())
            );
        }
        let out = p.on_view_change(view_change(202, 1, 3)).unwrap();
        let [Action::Warrant { bytes }] = out.as_slice() else {
            panic!("{out:?}")
        };
        let out = p.warranted(warrant(bytes));
        let [Action::Broadcast(Proposal::NewView(nv)), ..] = out.as_slice() else {
            panic!("{out:?}")
        };
        assert_eq!(nv.view, View(3));
        assert_eq!(p.view(), View(3));
    }

    /// `replica` of group 0 asks to move to view 3 after warranting 40 other VIEW-CHANGEs,
    /// which its log must list: a VIEW-CHANGE some kilobytes larger than one with nothing
    /// before it.
    fn padded_view_change(replica: u32) -> ViewChange {
        let (replica, group) = (NodeId(replica), GroupId(0));
        let mut who = proto::testing::usig(replica);
        let log = (0..40)
            .map(|i| {
                let body = usig::MessageDigest::of(&[i]);
                let bytes = ViewChange::warranted_bytes(replica, group, View(1), &body);
                let ui = usig::Usig::create_ui(&mut who, &bytes).unwrap();
                proto::Warranted::ViewChange {
                    next_view: View(1),
                    body,
                    ui,
                }
            })
            .collect();
        let body = proto::ViewChangeBody {
            checkpoint: None,
            base: None,
            prepares: Vec::new(),
            log,
            anchor_proof: Vec::new(),
        };
        let bytes = ViewChange::warranted_bytes(replica, group, View(3), &body.digest());
        ViewChange {
            replica,
            group,
            next_view: View(3),
            body,
            ui: usig::Usig::create_ui(&mut who, &bytes).unwrap(),
        }
    }

    /// A Byzantine member's VIEW-CHANGE padded past what a NEW-VIEW may hold is among the first
    /// f+1 of its group: the candidate waits for another, and builds its NEW-VIEW from the
    /// smallest f+1 of each group.
    #[test]
    fn a_new_view_is_built_from_the_smallest_view_changes_and_only_if_it_fits() {
        let mut p = primary(8);
        let padded = padded_view_change(101);
        let small = view_change(102, 0, 3).encoded_len();
        assert!(padded.encoded_len() > 20 * small);
        p.max_new_view_bytes = 10 * small;
        for vc in [
            padded,
            view_change(102, 0, 3),
            view_change(201, 1, 3),
            view_change(202, 1, 3),
        ] {
            assert_eq!(p.on_view_change(vc), Ok(Vec::new()));
        }
        assert_eq!(p.new_views_too_large(), 1);
        let out = p.on_view_change(view_change(103, 0, 3)).unwrap();
        let [Action::Warrant { bytes }] = out.as_slice() else {
            panic!("{out:?}")
        };
        let out = p.warranted(warrant(bytes));
        let [Action::Broadcast(Proposal::NewView(nv)), ..] = out.as_slice() else {
            panic!("{out:?}")
        };
        let senders: Vec<u32> = nv.view_changes.iter().map(|vc| vc.replica.0).collect();
        assert_eq!(senders, vec![102, 103, 201, 202]);
    }

    #[test]
    fn lost_prepares_are_fetched_and_a_retransmission_resends_its_prepare_once_per_tick() {
        let mut p = primary(8);
        let out = p.on_request(request(1, 1, &[0])).unwrap();
        let [Action::Warrant { bytes }] = out.as_slice() else {
            panic!("{out:?}")
        };
        let out = p.warranted(warrant(bytes));
        let [Action::Broadcast(prepare)] = out.as_slice() else {
            panic!("{out:?}")
        };
        let prepare = prepare.clone();
        assert_eq!(p.on_fetch(1..=5), vec![prepare.clone()]);
        assert!(p.on_fetch(2..=5).is_empty());
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 5..=1;
        assert!(
            p.on_fetch(reversed).is_empty(),
            "asks for nothing, no panic"
        );
        let again = p.on_request(request(1, 1, &[0]));
        assert_eq!(again, Ok(vec![Action::Broadcast(prepare.clone())]));
        assert_eq!(p.on_request(request(1, 1, &[0])), Ok(vec![]));
        p.on_tick();
        assert_eq!(
            p.on_request(request(1, 1, &[0])),
            Ok(vec![Action::Broadcast(prepare)])
        );
    }

    /// A retransmission of any recent request re-sends the latest PREPARE, once per tick for
    /// all of them: replaying every client's last request costs the primary one broadcast per
    /// tick, not one per request, and a replica that lacks an older PREPARE sees the gap.
    #[test]
    fn retransmissions_resend_the_latest_prepare_once_per_tick_whoever_sends_them() {
        let mut p = primary(1);
        let sent = prepares_of(&mut p, 4);
        let latest = sent.last().unwrap().clone();
        for _ in 0..3 {
            let mut out = Vec::new();
            for client in 1..=4 {
                out.extend(p.on_request(request(client, 1, &[0])).unwrap());
            }
            assert_eq!(out, vec![Action::Broadcast(latest.clone())]);
            p.on_tick();
        }
        // Only a retransmission of the client's latest ordered request counts.
        assert_eq!(p.on_request(request(1, 0, &[0])), Err(Rejection::Duplicate));
    }

    /// The PREPAREs of `n` requests of one entry each (each a full batch: never held back), in
    /// counter order from 1.
    fn prepares_of(p: &mut PrimaryCore, n: u64) -> Vec<Proposal> {
        let mut usig = usig(NodeId(0));
        let mut sent = Vec::new();
        for client in 1..=n {
            let mut actions = p.on_request(request(client, 1, &[0])).unwrap();
            while let Some(action) = actions.pop() {
                match action {
                    Action::Warrant { bytes } => {
                        actions.extend(p.warranted(usig.create_ui(&bytes).unwrap()))
                    }
                    Action::Broadcast(proposal) => sent.push(proposal),
                }
            }
        }
        sent
    }

    /// A replica that sends its fetch again and again (or whoever replays a correct one's)
    /// used to get up to 256 PREPAREs copied for each: now it gets each PREPARE at most once
    /// per tick, whatever ranges it asks for, and other replicas are answered as before.
    #[test]
    fn a_replica_gets_each_fetched_prepare_at_most_once_per_tick() {
        let mut p = primary(1);
        let sent = prepares_of(&mut p, 3);
        let counters: Vec<u64> = sent.iter().map(|p| p.ui().counter).collect();
        assert_eq!(counters, [1, 2, 3]);
        let (faulty, correct) = (NodeId(101), NodeId(102));
        assert_eq!(p.on_fetch_from(faulty, 1..=2), sent[..2].to_vec());
        let mut replayed = 0;
        for _ in 0..1_000 {
            replayed += p.on_fetch_from(faulty, 1..=2).len();
        }
        assert_eq!(replayed, 0, "nothing more this tick");
        // An overlapping range gets what was not sent yet.
        assert_eq!(p.on_fetch_from(faulty, 2..=3), sent[2..].to_vec());
        assert_eq!(p.on_fetch_from(correct, 1..=3), sent);
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 3..=1;
        assert!(p.on_fetch_from(correct, reversed).is_empty(), "no panic");
        // The next tick, each may be fetched again.
        p.on_tick();
        assert_eq!(p.on_fetch_from(faulty, 1..=3), sent);
    }

    fn operated_primary(me: u32) -> (PrimaryCore, proto::config::ClusterConfig) {
        let (cluster, spares) = TestCluster::operated(1, 2, 1, 4, 4);
        let mut next = cluster.config.clone();
        next.config_epoch += 1;
        next.replicas.extend(spares);
        next.groups.push(proto::config::GroupConfig {
            id: 2,
            partitions: Vec::new(),
        });
        let core = PrimaryCore::new(
            Arc::new(cluster),
            Arc::new(BytesArePartitions),
            NodeId(me),
            View(0),
            8,
        );
        (core, next)
    }

    fn reconfigure(next: &proto::config::ClusterConfig, key: &proto::SigningKey) -> Reconfigure {
        Reconfigure::new(proto::ConfigEpoch(1), next, "127.0.0.1:9", key)
    }

    /// The RECONFIGURE goes alone into the epoch's last PREPARE, after the batch at the USIG;
    /// later requests wait for the next epoch's core; a re-sent RECONFIGURE re-broadcasts its
    /// PREPARE once per tick.
    #[test]
    fn a_reconfigure_is_ordered_alone_and_ends_the_epoch() {
        let (mut p, next) = operated_primary(0);
        let out = p.on_request(request(1, 1, &[0])).unwrap();
        let [Action::Warrant { bytes }] = out.as_slice() else {
            panic!("{out:?}")
        };
        let r = reconfigure(&next, &proto::testing::operator_key());
        assert!(
            p.on_reconfigure(r.clone()).unwrap().is_empty(),
            "the USIG is busy"
        );
        let out = p.warranted(warrant(bytes));
        let [Action::Broadcast(Proposal::Prepare(batch)), Action::Warrant { bytes }] =
            out.as_slice()
        else {
            panic!("{out:?}")
        };
        assert!(batch.reconfigure.is_none() && batch.entries.len() == 1);
        assert!(p.on_request(request(2, 1, &[1])).unwrap().is_empty());
        let out = p.warranted(warrant(bytes));
        let [Action::Broadcast(Proposal::Prepare(last))] = out.as_slice() else {
            panic!("{out:?}")
        };
        assert_eq!(last.reconfigure.as_deref(), Some(&r));
        assert!(last.entries.is_empty() && p.is_closed());
        assert!(p.on_request(request(3, 1, &[2])).unwrap().is_empty());
        let held: Vec<u64> = p.take_pending().iter().map(|r| r.client.0).collect();
        assert_eq!(held, vec![2, 3], "held for the next epoch");
        let again = p.on_reconfigure(r.clone()).unwrap();
        assert_eq!(
            again,
            vec![Action::Broadcast(Proposal::Prepare(last.clone()))]
        );
        assert!(p.on_reconfigure(r.clone()).unwrap().is_empty());
        p.on_tick();
        assert_eq!(p.on_reconfigure(r).unwrap().len(), 1);
    }

    #[test]
    fn forged_reconfigures_are_refused_and_standby_candidates_only_check() {
        let (mut p, next) = operated_primary(0);
        let forged = reconfigure(&next, &proto::testing::node_key(NodeId(0)));
        assert!(matches!(
            p.on_reconfigure(forged),
            Err(ReconfigError::Signature)
        ));
        let mut bad = next.clone();
        bad.groups.clear();
        let unsafe_shape = reconfigure(&bad, &proto::testing::operator_key());
        assert!(matches!(
            p.on_reconfigure(unsafe_shape),
            Err(ReconfigError::Invalid(_))
        ));
        assert!(!p.is_closed());
        let (mut standby, next) = operated_primary(1);
        let good = reconfigure(&next, &proto::testing::operator_key());
        assert!(standby.on_reconfigure(good).unwrap().is_empty());
        assert!(!standby.is_closed());
    }
}
