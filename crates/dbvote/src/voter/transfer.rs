//! State transfer in the voter (docs/state-transfer.md), both sides, sans-IO.
//!
//! **Asked** (`on_state_request`): a node sets a *barrier* at the target order: it releases
//! nothing after the target until every order up to it has executed, then asks the driver for
//! a read snapshot and releases again once the snapshot is pinned. A node that already
//! released something after the target cannot produce that state any more and says so (a
//! DB-CHECKPOINT without digest). Barriers that actually drain the pipeline are rate-limited
//! per requester, so a Byzantine node cannot keep the others draining.
//!
//! **Behind** (`tick`): a node whose decided executions wait behind missing predecessors with
//! no execution completing for [`STALL_TICKS`] asks every other database node for the state
//! after the highest order it saw decided, naming one of them (rotated per attempt) to stream
//! the rows. It installs the rows once they are complete and f+1 distinct other nodes signed
//! one digest for that order; the executor commits only if the rows hash to it. While it
//! waits it releases nothing after the target, and nothing at all while installing.

use super::{VoterAction, VoterCore, VoterReject};
use proto::{DbCheckpoint, Message, NodeId, PublicKey, Signature, StateChunk, StateRequest};
use proto::{TableRows, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Ticks without a completed execution, while decided ones wait, before a node asks for the
/// state (the node driver ticks every 50 ms: 2 s, several times the replicas' re-send delay).
pub const STALL_TICKS: u64 = 40;
/// Ticks an attempt may take before the node tries again with the next sender.
pub const ATTEMPT_TICKS: u64 = 100;
/// Least ticks between two snapshots served to one requester; a requester that was told
/// "past" waits as long before asking again.
pub const SERVE_GAP_TICKS: u64 = 20;
/// Most row bytes a node buffers for one transfer.
pub const MAX_TRANSFER_BYTES: usize = 512 << 20;
/// How far past the reported progress a retry aims after "past" answers (doubling per retry,
/// up to 32 times), so that the others have not released the target yet when the request
/// arrives.
const MARGIN: u64 = 32;

/// The voter's state-transfer bookkeeping.
#[derive(Default)]
pub(super) struct State {
    /// Timer ticks so far.
    now: u64,
    /// Tick of the last completed execution or install.
    progressed_at: u64,
    /// Every order up to here has executed (or was transferred) here.
    pub(super) executed_through: u64,
    /// Executed orders above `executed_through`.
    executed_above: BTreeSet<u64>,
    /// The highest order released to the executor.
    pub(super) max_released: u64,
    /// Orders up to here arrived by state transfer, without stored results.
    pub(super) transferred_through: u64,
    /// COMMIT-DB executions skipped because their order was transferred.
    pub(super) transferred_skips: u64,
    /// Snapshots owed, by target order.
    barriers: BTreeMap<u64, Barrier>,
    /// Tick of the last snapshot served to each requester.
    served_at: BTreeMap<NodeId, u64>,
    /// This node's own transfer, while it is behind.
    own: Option<Transfer>,
    /// The highest order each other node reported having released past a target.
    claims: BTreeMap<NodeId, u64>,
    attempts: u64,
    /// Consecutive attempts that met a "past" answer.
    pasts: u32,
}

#[derive(Default)]
struct Barrier {
    /// Who gets the DB-CHECKPOINT.
    answer: BTreeSet<NodeId>,
    /// Who named this node to stream the rows.
    stream: BTreeSet<NodeId>,
    /// The snapshot was asked for; executions stay held until it is pinned.
    pinning: bool,
}

struct Transfer {
    target: u64,
    sender: NodeId,
    started: u64,
    digests: BTreeMap<NodeId, [u8; 32]>,
    past: BTreeSet<NodeId>,
    parts: Vec<TableRows>,
    next_index: u32,
    bytes: usize,
    complete: bool,
    /// Rows complete and agreed: everything is held until the install ends.
    installing: bool,
    /// The Install action went out.
    sent: bool,
    /// A chunk was lost or refused, or the install failed: the attempt cannot complete.
    broken: bool,
}

impl State {
    pub(super) fn executed(&mut self, order: u64) {
        self.progressed_at = self.now;
        if order > self.executed_through {
            self.executed_above.insert(order);
        }
        // Checked: an installed target is a claimed order (saturated at `u64::MAX`).
        while let Some(next) = self.executed_through.checked_add(1) {
            if !self.executed_above.remove(&next) {
                break;
            }
            self.executed_through = next;
        }
    }

    /// Nothing after this order may be released now.
    pub(super) fn hold(&self) -> Option<u64> {
        let barrier = self.barriers.keys().next().copied();
        let own = self
            .own
            .as_ref()
            .map(|t| if t.installing { 0 } else { t.target });
        barrier.into_iter().chain(own).min()
    }
}

impl VoterCore {
    /// A timer tick: starts a state transfer when the node is stalled, and tries again when an
    /// attempt timed out or cannot complete.
    pub fn tick(&mut self) -> Vec<VoterAction> {
        self.st.now += 1;
        let now = self.st.now;
        let again = match &self.st.own {
            None => {
                self.waiting() > 0
                    && self.running.is_empty()
                    && now - self.st.progressed_at >= STALL_TICKS
            }
            Some(t) if !t.installing => {
                let hopeless = t.broken
                    || t.past.contains(&t.sender)
                    || self.others().len() - t.past.len() < self.quorum();
                now - t.started >= ATTEMPT_TICKS || (hopeless && now - t.started >= SERVE_GAP_TICKS)
            }
            Some(_) => false,
        };
        if again {
            self.attempt()
        } else {
            Vec::new()
        }
    }

    /// The order this node is transferring the state for, if it is.
    pub fn transferring(&self) -> Option<u64> {
        self.st.own.as_ref().map(|t| t.target)
    }

    /// COMMIT-DB executions skipped since the last call because their order arrived by state
    /// transfer (for the driver's count).
    pub fn take_transferred_skips(&mut self) -> u64 {
        std::mem::take(&mut self.st.transferred_skips)
    }

    fn quorum(&self) -> usize {
        self.cluster.config.f + 1
    }

    fn others(&self) -> Vec<NodeId> {
        let me = self.me;
        self.cluster
            .config
            .db_nodes
            .iter()
            .map(|d| NodeId(d.id))
            .filter(|&d| d != me)
            .collect()
    }

    /// The (f+1)-th highest order other nodes claimed to have released ("past" answers), or 0
    /// while fewer than f+1 nodes claimed one. Up to f claims may be Byzantine, so only the
    /// (f+1)-th highest is at most what a correct node reported; with fewer claims the highest
    /// one could be a single Byzantine node's order far ahead (claims only grow until an
    /// install), and the node would ask for a state nobody reaches, forever.
    fn claimed(&self) -> u64 {
        let mut claims: Vec<u64> = self.st.claims.values().copied().collect();
        claims.sort_unstable_by(|a, b| b.cmp(a));
        claims.get(self.quorum() - 1).copied().unwrap_or(0)
    }

    /// A new attempt: target the highest order seen decided, or what f+1 others reported
    /// having passed, whichever is higher (plus a margin after "past" answers), never below
    /// what this node released.
    fn attempt(&mut self) -> Vec<VoterAction> {
        let others = self.others();
        if others.is_empty() {
            return Vec::new();
        }
        let met_past = self.st.own.take().is_some_and(|t| !t.past.is_empty());
        self.st.pasts = if met_past { self.st.pasts + 1 } else { 0 };
        let decided = self.decided.keys().next_back().copied().unwrap_or(0);
        let claimed = self.claimed();
        let margin = match self.st.pasts {
            0 => 0,
            n => MARGIN << (n - 1).min(5),
        };
        // Saturating: a claimed order is anything a node signed, up to `u64::MAX`.
        let target = decided
            .max(claimed)
            .max(self.st.max_released)
            .max(self.st.executed_through.saturating_add(1))
            .saturating_add(margin);
        let sender = others[(self.st.attempts % others.len() as u64) as usize];
        self.st.attempts += 1;
        self.st.own = Some(Transfer {
            target,
            sender,
            started: self.st.now,
            digests: BTreeMap::new(),
            past: BTreeSet::new(),
            parts: Vec::new(),
            next_index: 0,
            bytes: 0,
            complete: false,
            installing: false,
            sent: false,
            broken: false,
        });
        let request = StateRequest {
            db_node: self.me,
            target_order: target,
            sender,
            signature: Signature([0; 64]),
        }
        .sign(&self.key);
        vec![VoterAction::ToDbNodes {
            to: others,
            message: Box::new(Message::StateRequest(request)),
        }]
    }

    /// Another database node, authenticated.
    fn check_db_node(
        &self,
        node: NodeId,
        verify: impl FnOnce(&PublicKey) -> bool,
    ) -> Result<(), VoterReject> {
        let listed = node != self.me && self.cluster.config.db_nodes.iter().any(|d| d.id == node.0);
        let key = self.cluster.node_key(node).filter(|_| listed);
        if key.is_some_and(verify) {
            Ok(())
        } else {
            Err(VoterReject::NotMember)
        }
    }

    /// Another database node asks for the state after `target_order`.
    pub fn on_state_request(
        &mut self,
        request: &StateRequest,
    ) -> Result<Vec<VoterAction>, VoterReject> {
        self.check_db_node(request.db_node, |k| request.verify(k))?;
        let requester = request.db_node;
        let sender_listed = self
            .cluster
            .config
            .db_nodes
            .iter()
            .any(|d| d.id == request.sender.0);
        if request.sender == requester || !sender_listed {
            return Err(VoterReject::Malformed);
        }
        let target = request.target_order;
        // A new request replaces the requester's earlier one.
        for barrier in self.st.barriers.values_mut().filter(|b| !b.pinning) {
            barrier.answer.remove(&requester);
            barrier.stream.remove(&requester);
        }
        self.st
            .barriers
            .retain(|_, b| b.pinning || !b.answer.is_empty());
        if self.st.barriers.get(&target).is_some_and(|b| b.pinning) {
            return Err(VoterReject::Stale);
        }
        if self.st.max_released > target {
            let past = DbCheckpoint {
                db_node: self.me,
                target,
                order: self.st.max_released,
                digest: None,
                signature: Signature([0; 64]),
            }
            .sign(&self.key);
            return Ok(vec![VoterAction::ToDbNodes {
                to: vec![requester],
                message: Box::new(Message::DbCheckpoint(past)),
            }]);
        }
        let now = self.st.now;
        if self
            .st
            .served_at
            .get(&requester)
            .is_some_and(|&at| now - at < SERVE_GAP_TICKS)
        {
            return Err(VoterReject::RateLimited);
        }
        let barrier = self.st.barriers.entry(target).or_default();
        barrier.answer.insert(requester);
        if request.sender == self.me {
            barrier.stream.insert(requester);
        }
        Ok(self.after_schedule())
    }

    /// The driver pinned the snapshot for `order`: executions after it may go on.
    pub fn snapshot_pinned(&mut self, order: u64) -> Vec<VoterAction> {
        if self.st.barriers.get(&order).is_some_and(|b| b.pinning) {
            self.st.barriers.remove(&order);
        }
        self.schedule()
    }

    /// A digest (or a "past" answer) for this node's transfer.
    pub fn on_db_checkpoint(
        &mut self,
        checkpoint: &DbCheckpoint,
    ) -> Result<Vec<VoterAction>, VoterReject> {
        self.check_db_node(checkpoint.db_node, |k| checkpoint.verify(k))?;
        let Some(t) = self.st.own.as_mut() else {
            return Err(VoterReject::Stale);
        };
        if checkpoint.target != t.target || t.installing {
            return Err(VoterReject::Stale);
        }
        match checkpoint.digest {
            Some(digest) if checkpoint.order == checkpoint.target => {
                t.digests.entry(checkpoint.db_node).or_insert(digest);
            }
            None if checkpoint.order > checkpoint.target => {
                t.past.insert(checkpoint.db_node);
                let claim = self.st.claims.entry(checkpoint.db_node).or_default();
                *claim = (*claim).max(checkpoint.order);
            }
            _ => return Err(VoterReject::Malformed),
        }
        Ok(self.after_schedule())
    }

    /// Rows from the designated sender, in order.
    pub fn on_state_chunk(&mut self, chunk: StateChunk) -> Result<Vec<VoterAction>, VoterReject> {
        self.check_db_node(chunk.db_node, |k| chunk.verify(k))?;
        let Some(t) = self.st.own.as_mut() else {
            return Err(VoterReject::Stale);
        };
        if chunk.db_node != t.sender || chunk.order != t.target || t.complete || t.broken {
            return Err(VoterReject::Stale);
        }
        if chunk.index != t.next_index {
            // A chunk was lost on the way (a full send queue): this attempt cannot complete.
            t.broken = true;
            return Err(VoterReject::Stale);
        }
        let backwards = t.parts.last().is_some_and(|p| chunk.rows.table < p.table);
        if chunk.rows.rows.is_empty() || backwards {
            t.broken = true;
            return Err(VoterReject::Malformed);
        }
        let bytes = chunk.rows.columns.iter().map(String::len).sum::<usize>()
            + chunk
                .rows
                .rows
                .iter()
                .flatten()
                .map(Value::weight)
                .sum::<usize>();
        if t.bytes + bytes > MAX_TRANSFER_BYTES {
            t.broken = true;
            return Err(VoterReject::Oversized);
        }
        t.bytes += bytes;
        t.next_index += 1;
        t.complete = chunk.last;
        t.parts.push(chunk.rows);
        Ok(self.after_schedule())
    }

    /// The executor installed the transferred state for `order`; `last_seq` is its progress.
    pub fn installed(&mut self, order: u64, last_seq: Vec<u64>) -> Vec<VoterAction> {
        if !self
            .st
            .own
            .as_ref()
            .is_some_and(|t| t.target == order && t.installing)
        {
            return Vec::new();
        }
        self.st.own = None;
        // Nothing ran during the install, so nothing is released beyond the progress.
        self.released = last_seq.clone();
        self.last_seq = last_seq;
        let st = &mut self.st;
        st.executed_above.retain(|&o| o > order);
        st.executed_through = st.executed_through.max(order);
        st.executed(order);
        st.max_released = st.max_released.max(order);
        st.transferred_through = st.transferred_through.max(order);
        st.claims.clear();
        st.pasts = 0;
        self.decided.retain(|&o, _| o > order);
        self.votes.retain(|o| o > order);
        self.schedule()
    }

    /// The install for `order` failed (the rows did not hash to the agreed digest, or the
    /// database failed): the old state is intact; the next tick tries another sender.
    pub fn install_failed(&mut self, order: u64) -> Vec<VoterAction> {
        if let Some(t) = self.st.own.as_mut().filter(|t| t.target == order) {
            t.installing = false;
            t.sent = false;
            t.broken = true;
            t.parts.clear();
        }
        self.schedule()
    }

    /// What becomes possible after executions were released or completed: the lowest barrier's
    /// snapshot once its orders have executed, and this node's install once its rows are
    /// complete, agreed, and nothing runs.
    pub(super) fn after_schedule(&mut self) -> Vec<VoterAction> {
        let mut actions = Vec::new();
        let now = self.st.now;
        if let Some((&order, barrier)) = self.st.barriers.iter_mut().next() {
            if !barrier.pinning && self.st.executed_through >= order {
                barrier.pinning = true;
                for &r in &barrier.answer {
                    self.st.served_at.insert(r, now);
                }
                actions.push(VoterAction::Snapshot {
                    order,
                    answer: barrier.answer.iter().copied().collect(),
                    stream: barrier.stream.iter().copied().collect(),
                });
            }
        }
        // The node caught up on its own (the missing predecessors arrived after all): no
        // transfer needed.
        let executed = self.st.executed_through;
        if self
            .st
            .own
            .as_ref()
            .is_some_and(|t| !t.installing && executed >= t.target)
        {
            self.st.own = None;
        }
        let quorum = self.quorum();
        let idle = self.running.is_empty();
        if let Some(t) = self.st.own.as_mut() {
            let agreed = agreed(&t.digests, quorum);
            if t.complete && !t.broken && agreed.is_some() {
                t.installing = true;
            }
            if let (true, false, true, Some(digest)) = (t.installing, t.sent, idle, agreed) {
                t.sent = true;
                actions.push(VoterAction::Install {
                    order: t.target,
                    digest,
                    parts: std::mem::take(&mut t.parts),
                });
            }
        }
        actions
    }
}

/// The digest that `quorum` distinct nodes signed, if one has.
fn agreed(digests: &BTreeMap<NodeId, [u8; 32]>, quorum: usize) -> Option<[u8; 32]> {
    let mut counts: BTreeMap<[u8; 32], usize> = BTreeMap::new();
    for d in digests.values() {
        *counts.entry(*d).or_default() += 1;
    }
    counts
        .into_iter()
        .find(|&(_, n)| n >= quorum)
        .map(|(d, _)| d)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{batches, decide, execution, voter};
    use super::*;
    use proto::testing::node_key;

    fn request(from: u32, target: u64, sender: u32) -> StateRequest {
        StateRequest {
            db_node: NodeId(from),
            target_order: target,
            sender: NodeId(sender),
            signature: Signature([0; 64]),
        }
        .sign(&node_key(NodeId(from)))
    }

    fn checkpoint(from: u32, target: u64, order: u64, digest: Option<[u8; 32]>) -> DbCheckpoint {
        DbCheckpoint {
            db_node: NodeId(from),
            target,
            order,
            digest,
            signature: Signature([0; 64]),
        }
        .sign(&node_key(NodeId(from)))
    }

    fn chunk(from: u32, order: u64, index: u32, last: bool, table: u32) -> StateChunk {
        StateChunk {
            db_node: NodeId(from),
            order,
            index,
            last,
            rows: TableRows {
                table,
                columns: vec!["k".into()],
                rows: vec![vec![Value::Int(index.into())]],
            },
            signature: Signature([0; 64]),
        }
        .sign(&node_key(NodeId(from)))
    }

    fn requests(actions: &[VoterAction]) -> Vec<(Vec<NodeId>, StateRequest)> {
        actions
            .iter()
            .filter_map(|a| match a {
                VoterAction::ToDbNodes { to, message } => match message.as_ref() {
                    Message::StateRequest(r) => Some((to.clone(), r.clone())),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    fn ticks(v: &mut VoterCore, n: u64) -> Vec<VoterAction> {
        (0..n).flat_map(|_| v.tick()).collect()
    }

    /// Voter 11 decided order 3 on partition 0 at position 2, but never order 1 (position 1):
    /// it is stalled and asks for the state.
    fn stalled() -> (VoterCore, StateRequest) {
        let mut v = voter();
        assert!(batches(&decide(&mut v, &[execution(3, &[(0, 2)], &[0])])).is_empty());
        assert!(ticks(&mut v, STALL_TICKS - 1).is_empty(), "not stalled yet");
        let asked = requests(&v.tick());
        assert_eq!(asked.len(), 1);
        let (to, request) = asked[0].clone();
        assert_eq!(to, vec![NodeId(12), NodeId(13)]);
        assert_eq!(request.target_order, 3, "the highest order seen decided");
        assert_eq!(request.sender, NodeId(12));
        assert!(request.verify(&node_key(NodeId(11)).public_key()));
        (v, request)
    }

    #[test]
    fn a_stalled_node_asks_and_installs_only_rows_with_f_plus_1_matching_digests() {
        let (mut v, _) = stalled();
        // Decided later on while it waits: held behind the target.
        assert!(batches(&decide(&mut v, &[execution(4, &[(0, 3)], &[0])])).is_empty());
        let digest = [7; 32];
        assert!(v
            .on_state_chunk(chunk(12, 3, 0, false, 0))
            .unwrap()
            .is_empty());
        assert!(v
            .on_state_chunk(chunk(12, 3, 1, true, 1))
            .unwrap()
            .is_empty());
        // One digest is not enough, nor two different ones (a Byzantine signer).
        assert!(v
            .on_db_checkpoint(&checkpoint(12, 3, 3, Some(digest)))
            .unwrap()
            .is_empty());
        // The second one arrives: f+1 = 2 distinct nodes signed the digest.
        let actions = v
            .on_db_checkpoint(&checkpoint(13, 3, 3, Some(digest)))
            .unwrap();
        let [VoterAction::Install {
            order,
            digest: d,
            parts,
        }] = actions.as_slice()
        else {
            panic!("{actions:?}");
        };
        assert_eq!((*order, *d, parts.len()), (3, digest, 2));
        // Nothing runs while installing.
        assert!(ticks(&mut v, ATTEMPT_TICKS * 2).is_empty());
        // Installed: partition 0 at position 2 (order 3). Order 4 runs next.
        assert_eq!(batches(&v.installed(3, vec![2, 0])), vec![vec![4]]);
        assert_eq!(v.transferring(), None);
        // A later COMMIT-DB for a transferred order neither executes nor answers.
        let again = decide(&mut v, &[execution(1, &[(0, 1)], &[0])]);
        assert!(again.is_empty(), "{again:?}");
        assert_eq!(v.take_transferred_skips(), 2);
    }

    #[test]
    fn disagreeing_digests_install_nothing_and_a_failed_install_tries_another_sender() {
        let (mut v, _) = stalled();
        v.on_state_chunk(chunk(12, 3, 0, true, 0)).unwrap();
        v.on_db_checkpoint(&checkpoint(12, 3, 3, Some([1; 32])))
            .unwrap();
        let actions = v
            .on_db_checkpoint(&checkpoint(13, 3, 3, Some([2; 32])))
            .unwrap();
        assert!(actions.is_empty(), "no f+1 agreement: {actions:?}");
        // Nothing agreed within the attempt: the next one goes to the other sender.
        let again = requests(&ticks(&mut v, ATTEMPT_TICKS));
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].1.sender, NodeId(13));
        let target = again[0].1.target_order;
        v.on_state_chunk(chunk(13, target, 0, true, 0)).unwrap();
        v.on_db_checkpoint(&checkpoint(12, target, target, Some([3; 32])))
            .unwrap();
        let actions = v
            .on_db_checkpoint(&checkpoint(13, target, target, Some([3; 32])))
            .unwrap();
        assert!(matches!(actions.as_slice(), [VoterAction::Install { .. }]));
        // The rows did not hash to the digest (a Byzantine sender): the node asks again.
        assert!(v.install_failed(target).is_empty());
        let third = requests(&ticks(&mut v, SERVE_GAP_TICKS));
        assert_eq!(third.len(), 1);
        assert_eq!(third[0].1.sender, NodeId(12), "rotated");
    }

    #[test]
    fn a_past_sender_makes_the_node_retry_beyond_what_f_plus_1_reported() {
        let (mut v, _) = stalled();
        v.on_db_checkpoint(&checkpoint(12, 3, 50, None)).unwrap();
        v.on_db_checkpoint(&checkpoint(13, 3, 90, None)).unwrap();
        assert!(
            ticks(&mut v, SERVE_GAP_TICKS - 1).is_empty(),
            "waits out the rate limit"
        );
        let retry = requests(&v.tick());
        // The (f+1)-th highest claim (50: one of 12 and 13 is correct) plus the margin.
        assert_eq!(retry[0].1.target_order, 50 + MARGIN);
    }

    /// Claims of "past" count only once f+1 distinct nodes made one: the (f+1)-th highest is
    /// then at most what a correct node reported. One Byzantine node's claim far ahead used to
    /// set the target on its own (the highest of fewer than f+1 claims), and claims only grow:
    /// the node asked for a state nobody would reach, forever.
    #[test]
    fn one_byzantine_past_claim_far_ahead_does_not_move_the_target() {
        let (mut v, _) = stalled();
        v.on_db_checkpoint(&checkpoint(12, 3, 1 << 62, None))
            .unwrap();
        let retry = requests(&ticks(&mut v, SERVE_GAP_TICKS));
        assert_eq!(retry.len(), 1);
        assert_eq!(
            retry[0].1.target_order,
            3 + MARGIN,
            "the decided order, not the claim"
        );
    }

    /// A claim of `u64::MAX` overflowed the target's margin (a panic in debug builds); alone it
    /// does not count, and f+1 of them (which no correct node makes) saturate.
    #[test]
    fn a_past_claim_of_u64_max_does_not_overflow_the_target() {
        let (mut v, _) = stalled();
        v.on_db_checkpoint(&checkpoint(12, 3, u64::MAX, None))
            .unwrap();
        let retry = requests(&ticks(&mut v, SERVE_GAP_TICKS));
        let target = retry[0].1.target_order;
        assert_eq!(target, 3 + MARGIN);
        v.on_db_checkpoint(&checkpoint(12, target, u64::MAX, None))
            .unwrap();
        v.on_db_checkpoint(&checkpoint(13, target, u64::MAX, None))
            .unwrap();
        let retry = requests(&ticks(&mut v, SERVE_GAP_TICKS));
        assert_eq!(retry[0].1.target_order, u64::MAX);
    }

    #[test]
    fn stale_out_of_order_and_forged_transfer_messages_are_refused() {
        let (mut v, _) = stalled();
        // Not the designated sender, another order, a forged signature, from a replica, from
        // itself, a digest for an order that is not the target.
        assert_eq!(
            v.on_state_chunk(chunk(13, 3, 0, true, 0)),
            Err(VoterReject::Stale)
        );
        assert_eq!(
            v.on_state_chunk(chunk(12, 4, 0, true, 0)),
            Err(VoterReject::Stale)
        );
        let mut forged = chunk(12, 3, 0, true, 0);
        forged.rows.rows[0][0] = Value::Int(99);
        assert_eq!(v.on_state_chunk(forged), Err(VoterReject::NotMember));
        let mut replica = chunk(12, 3, 0, true, 0);
        replica.db_node = NodeId(101);
        assert_eq!(
            v.on_state_chunk(replica.sign(&node_key(NodeId(101)))),
            Err(VoterReject::NotMember)
        );
        assert_eq!(
            v.on_state_chunk(chunk(11, 3, 0, true, 0)),
            Err(VoterReject::NotMember)
        );
        assert_eq!(
            v.on_db_checkpoint(&checkpoint(12, 3, 4, Some([1; 32]))),
            Err(VoterReject::Malformed)
        );
        assert_eq!(
            v.on_db_checkpoint(&checkpoint(12, 2, 2, Some([1; 32]))),
            Err(VoterReject::Stale)
        );
        // A gap in the chunks breaks the attempt; the node asks again after the gap.
        assert_eq!(
            v.on_state_chunk(chunk(12, 3, 1, true, 0)),
            Err(VoterReject::Stale)
        );
        assert_eq!(requests(&ticks(&mut v, SERVE_GAP_TICKS)).len(), 1);
        // A request naming its own sender, or an unknown one.
        let mut w = voter();
        assert_eq!(
            w.on_state_request(&request(12, 5, 12)),
            Err(VoterReject::Malformed)
        );
        assert_eq!(
            w.on_state_request(&request(12, 5, 99)),
            Err(VoterReject::Malformed)
        );
        let mut forged = request(12, 5, 13);
        forged.target_order = 6;
        assert_eq!(w.on_state_request(&forged), Err(VoterReject::NotMember));
        // Nothing to transfer into: checkpoints and chunks are stale.
        assert_eq!(
            w.on_db_checkpoint(&checkpoint(12, 3, 3, Some([1; 32]))),
            Err(VoterReject::Stale)
        );
    }

    #[test]
    fn a_node_that_catches_up_on_its_own_drops_its_transfer() {
        let (mut v, _) = stalled();
        let late = [execution(1, &[(0, 1)], &[0]), execution(2, &[(1, 1)], &[1])];
        assert_eq!(batches(&decide(&mut v, &late)), vec![vec![1, 3], vec![2]]);
        v.executed(1, vec![]);
        v.executed(3, vec![]);
        assert_eq!(v.transferring(), Some(3));
        v.executed(2, vec![]);
        assert_eq!(v.transferring(), None);
        assert_eq!(
            v.on_state_chunk(chunk(12, 3, 0, true, 0)),
            Err(VoterReject::Stale)
        );
        assert!(ticks(&mut v, ATTEMPT_TICKS).is_empty(), "nothing waits");
    }

    #[test]
    fn a_barrier_holds_later_orders_until_the_snapshot_is_pinned() {
        let mut v = voter();
        // Node 13 asks for the state after order 2 and names node 11 to stream it.
        assert!(v.on_state_request(&request(13, 2, 11)).unwrap().is_empty());
        let decided = [
            execution(1, &[(0, 1)], &[0]),
            execution(2, &[(1, 1)], &[1]),
            execution(3, &[(0, 2)], &[0]),
            execution(4, &[(1, 2)], &[1]),
        ];
        // Only the orders up to the target are released.
        assert_eq!(batches(&decide(&mut v, &decided)), vec![vec![1], vec![2]]);
        assert!(v
            .executed(1, vec![])
            .iter()
            .all(|a| !matches!(a, VoterAction::Snapshot { .. })));
        let actions = v.executed(2, vec![]);
        let snapshot = actions
            .iter()
            .find(|a| matches!(a, VoterAction::Snapshot { .. }));
        assert_eq!(
            snapshot,
            Some(&VoterAction::Snapshot {
                order: 2,
                answer: vec![NodeId(13)],
                stream: vec![NodeId(13)],
            })
        );
        assert!(batches(&actions).is_empty(), "held until pinned");
        assert!(batches(&ticks(&mut v, 10)).is_empty());
        assert_eq!(batches(&v.snapshot_pinned(2)), vec![vec![3], vec![4]]);
        // Asked again at once: rate-limited. Asked for an order it passed: "past".
        assert_eq!(
            v.on_state_request(&request(13, 9, 12)),
            Err(VoterReject::RateLimited)
        );
        let past = v.on_state_request(&request(13, 3, 12)).unwrap();
        let [VoterAction::ToDbNodes { to, message }] = past.as_slice() else {
            panic!("{past:?}");
        };
        let Message::DbCheckpoint(cp) = message.as_ref() else {
            panic!("{message:?}");
        };
        assert_eq!(to, &vec![NodeId(13)]);
        assert_eq!((cp.target, cp.order, cp.digest), (3, 4, None));
        // After the gap a new barrier is accepted (no drain: nothing to hold yet).
        ticks(&mut v, SERVE_GAP_TICKS);
        assert!(v.on_state_request(&request(13, 9, 12)).unwrap().is_empty());
    }

    #[test]
    fn a_new_request_replaces_the_requesters_earlier_barrier() {
        let mut v = voter();
        v.on_state_request(&request(13, 1, 12)).unwrap();
        v.on_state_request(&request(13, 3, 12)).unwrap();
        let decided = [execution(1, &[(0, 1)], &[0]), execution(2, &[(0, 2)], &[0])];
        // The barrier at 1 is gone: both form one chain.
        assert_eq!(batches(&decide(&mut v, &decided)), vec![vec![1, 2]]);
    }
}
