//! The database node's voter (sans-IO): executes an operation once f+1 members of the group that
//! decided it sent the same COMMIT-DB, and only when its predecessors on every partition it
//! holds have executed.
//!
//! Inputs: COMMIT-DBs, execution completions, timer ticks and the state-transfer messages of
//! other database nodes. Outputs: [`VoterAction`]s. The executor below it makes execution
//! exactly once, so asking it to execute an order that already ran just returns the stored
//! result (how retransmitted COMMIT-DBs get their answer again).
//!
//! State transfer (docs/state-transfer.md) lives in [`transfer`]: a node that stalls asks the
//! others for their state after an order, and a node asked sets a barrier there.

mod lookups;
pub mod transfer;
mod votes;

use lookups::Lookups;
pub use lookups::MAX_LOOKUPS_PER_MEMBER;
use proto::config::Cluster;
use proto::{
    CommitDb, Execution, GroupId, Message, NodeId, PartitionId, PartitionRule, ReplyCommitDb,
    SigningKey, TableRows,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use votes::Tally;

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VoterAction {
    /// Run (or look up the stored results of) these executions, in this order, in one database
    /// transaction, then call [`VoterCore::executed`] for each. A batch is a chain of
    /// consecutive positions on one partition, or one multi-partition execution alone: batches
    /// of different partitions run in parallel, and one commit (one fsync) covers a chain.
    Execute(Vec<Execution>),
    /// Delete the stored results of every order up to `through`, all executed, recording them
    /// as orders without results ([`crate::executor::Executor::forget_results_through`]).
    ForgetResults { through: u64 },
    /// Send to every member of the group.
    Reply {
        group: GroupId,
        reply: ReplyCommitDb,
    },
    /// Send to these database nodes (a STATE-REQUEST, or a DB-CHECKPOINT saying this node is
    /// past the requested order).
    ToDbNodes {
        to: Vec<NodeId>,
        message: Box<Message>,
    },
    /// Every order up to `order` has executed and nothing later was released: open a read
    /// snapshot now and call [`VoterCore::snapshot_pinned`] once it is pinned (executions stay
    /// held until then). Then send a signed DB-CHECKPOINT with its digest to `answer`, and
    /// stream its rows to `stream`.
    Snapshot {
        order: u64,
        answer: Vec<NodeId>,
        stream: Vec<NodeId>,
    },
    /// Install these rows in one transaction if they hash to `digest` (f+1 other database
    /// nodes signed it), then call [`VoterCore::installed`] or [`VoterCore::install_failed`].
    /// Nothing runs meanwhile.
    Install {
        order: u64,
        digest: [u8; 32],
        parts: Vec<TableRows>,
    },
    /// Read the stored results of these orders (with the positions each ran at), which executed
    /// here before and whose results are no longer in memory, then call
    /// [`VoterCore::looked_up`] with what was found. Never
    /// part of an execution's transaction: a member may name any order with positions this node
    /// passed, and one that never ran here (a Byzantine member's) must only go unanswered,
    /// never fail the executions it would have shared a transaction with.
    LookUp { orders: Vec<u64> },
}

/// An executed order's stored result, as a [`VoterAction::LookUp`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResult {
    /// The positions the order ran at: only a member that names these gets the result.
    pub positions: Vec<(PartitionId, u64)>,
    pub result: Vec<u8>,
}

/// What the reads of a [`VoterAction::LookUp`] came to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LookedUp {
    /// The answers to send.
    pub actions: Vec<VoterAction>,
    /// Orders with no stored result (counted by the driver).
    pub missing: usize,
    /// Members that named an order at positions other than those it ran at: another group's
    /// order, or a made-up execution (counted by the driver as malformed executions).
    pub mismatched: usize,
}

/// Why a COMMIT-DB, or one of its executions, was dropped (counted by the driver).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoterReject {
    /// Signed by a node that is not a member of the group it names, or not signed by it.
    NotMember,
    /// For another configuration epoch.
    WrongEpoch,
    /// Positions that do not fit the request, or a request no correct replica would have
    /// ordered (untruthful partitions); or a state-transfer message whose fields contradict
    /// each other.
    Malformed,
    /// A state-transfer message for a transfer that is not (or no longer) going on here, or
    /// from a node that is not its designated sender.
    Stale,
    /// A STATE-REQUEST sooner after the last snapshot served to that node than the rate limit
    /// allows.
    RateLimited,
    /// A state transfer that would exceed the bytes a node buffers.
    Oversized,
}

/// Most executions in one chain (one database transaction).
const MAX_CHAIN: usize = 64;

/// Results of recently executed orders kept in memory. Groups re-send a COMMIT-DB until they
/// see this node's result; under load many re-sends cross the reply, and answering them from
/// the database took the connections the executions needed (a node that fell behind stayed
/// behind). Older retransmissions are looked up in the database.
const KEEP_RESULTS: usize = 4096;

/// Stored results a database node keeps, by default, below the orders it executed: older ones
/// are forgotten so that the results table stays bounded (docs/operations.md, "Soak").
pub const STORED_RESULTS_KEPT: u64 = 100_000;

/// The least a database node may keep (`--keep-results`): two checkpoint intervals of PREPAREs
/// of the default batch (64 requests). A replica that far behind what the database nodes
/// executed is two intervals behind its group's checkpoints and starts over from a peer's, so
/// no correct replica waits for an answer to a COMMIT-DB whose result was forgotten.
pub const STORED_RESULTS_KEPT_MIN: u64 = 2 * proto::CHECKPOINT_INTERVAL * 64;

/// Results are forgotten in steps of this many orders (one DELETE each).
const FORGET_STEP: u64 = 4_096;

/// A recently executed order as [`VoterCore`] keeps it to answer re-sends from memory: the
/// group that decided it and its positions, with its result. A member may name any order in a
/// COMMIT-DB; only an execution of that group at those positions is the one that ran there and
/// gets the result.
struct Recent {
    group: GroupId,
    positions: Vec<(u32, u64)>,
    result: Vec<u8>,
}

/// A database node's voting state.
pub struct VoterCore {
    cluster: Arc<Cluster>,
    /// Earlier configuration epochs (docs/protocol.md, "Reconfiguration"), each with the last
    /// order it covers: a lagging member's COMMIT-DBs for them still count, within their range.
    past: Vec<(Arc<Cluster>, u64)>,
    rule: Arc<dyn PartitionRule>,
    key: SigningKey,
    me: NodeId,
    /// Last executed sequence number per partition.
    last_seq: Vec<u64>,
    /// Last sequence number released to the executor per partition (at least `last_seq`).
    released: Vec<u64>,
    /// Undecided votes, bounded per member ([`votes`]).
    votes: Tally,
    decided: BTreeMap<u64, (GroupId, Execution)>,
    running: BTreeSet<u64>,
    /// Orders being looked up again ([`VoterAction::LookUp`]) and who asked, bounded per
    /// member ([`lookups`]).
    lookups: Lookups,
    /// The last [`KEEP_RESULTS`] executed orders, with their results.
    recent: BTreeMap<u64, Recent>,
    /// Stored results kept below the executed orders ([`STORED_RESULTS_KEPT`]).
    keep_stored: u64,
    /// Everything state transfer needs to know.
    st: transfer::State,
}

impl VoterCore {
    /// A voter resuming from the executor's progress (last executed sequence per partition).
    pub fn new(
        cluster: Arc<Cluster>,
        rule: Arc<dyn PartitionRule>,
        key: SigningKey,
        me: NodeId,
        last_seq: Vec<u64>,
    ) -> Self {
        VoterCore {
            cluster,
            past: Vec::new(),
            rule,
            key,
            me,
            released: last_seq.clone(),
            last_seq,
            votes: Tally::default(),
            decided: BTreeMap::new(),
            running: BTreeSet::new(),
            lookups: Lookups::default(),
            recent: BTreeMap::new(),
            keep_stored: STORED_RESULTS_KEPT,
            st: transfer::State::default(),
        }
    }

    /// Keeps `orders` stored results below the executed orders instead of
    /// [`STORED_RESULTS_KEPT`] (at least [`STORED_RESULTS_KEPT_MIN`]).
    pub fn keep_stored_results(mut self, orders: u64) -> Self {
        self.keep_stored = orders.max(STORED_RESULTS_KEPT_MIN);
        self
    }

    /// Where the executor stands beyond the per-partition progress: every order up to
    /// `executed_through` executed, and those of `executed_above`; `highest_order` the highest
    /// executed; orders up to `transferred_through` without stored results (transferred, or
    /// their results forgotten).
    pub fn resume(mut self, progress: &crate::Progress) -> Self {
        let start = &self.cluster.config.epoch_start;
        // Orders up to the epoch's start that this node has not executed were dropped
        // everywhere (docs/protocol.md, "Configuration epochs"), unless this node is behind
        // the start on some partition (then it needs a state transfer).
        let at_start = start
            .positions
            .iter()
            .zip(&self.last_seq)
            .all(|(start, last)| last >= start);
        let floor = if at_start { start.order } else { 0 };
        self.st.executed_through = progress.executed_through.max(floor);
        self.st.max_released = progress.highest_order.max(self.st.executed_through);
        self.st.transferred_through = progress.transferred_through;
        for &order in &progress.executed_above {
            self.st.executed(order);
        }
        self
    }

    /// The next configuration epoch starts (after the certified end of this one): COMMIT-DBs of
    /// this epoch still count for its orders, those of the next one for the orders after, and
    /// votes of this epoch already counted for orders after its end are dropped.
    pub fn reconfigure(&mut self, next: Arc<Cluster>) {
        let end = next.config.epoch_start.order;
        let previous = std::mem::replace(&mut self.cluster, next);
        self.past.push((previous, end));
        // Votes for orders after the cut were counted while this epoch seemed to cover them:
        // those orders are the next epoch's, and only its votes may decide them. Kept, a
        // Byzantine member of the old group (before the CONFIGURE) and one of the new group
        // (after it) made f+1 for an execution no correct replica decided.
        self.votes.retain(|order| order <= end);
        // Epochs whose every order executed here need no more votes.
        let done = self.st.executed_through;
        self.past.retain(|(_, end)| *end > done);
    }

    /// The configuration of epoch `epoch` and the orders it covers (after `start`, up to `end`).
    fn epoch(&self, epoch: proto::ConfigEpoch) -> Option<(&Arc<Cluster>, u64, Option<u64>)> {
        if epoch == self.cluster.epoch() {
            return Some((&self.cluster, self.cluster.config.epoch_start.order, None));
        }
        self.past
            .iter()
            .find(|(c, _)| c.epoch() == epoch)
            .map(|(c, end)| (c, c.config.epoch_start.order, Some(*end)))
    }

    /// The members of `group` in the current epoch and in every earlier one this node still
    /// keeps (where its answers for that group's executions go): a group keeps its id when a
    /// member is replaced, and the replaced member finishes its executions of the closed epoch
    /// too, as a removed group's members do.
    pub fn members_of(&self, group: GroupId) -> Vec<NodeId> {
        let mut members = Vec::new();
        for cluster in std::iter::once(&self.cluster).chain(self.past.iter().rev().map(|(c, _)| c))
        {
            for id in cluster.members(group).map(|r| NodeId(r.id)) {
                if !members.contains(&id) {
                    members.push(id);
                }
            }
        }
        members
    }

    /// A COMMIT-DB that arrived on the authenticated link of node `from` (COMMIT-DBs are not
    /// signed: docs/protocol.md, "Authenticated links"). Returns the actions and how many of
    /// its executions were dropped as malformed. It counts only if `from` is the member it
    /// names, and its executions only for orders of its configuration epoch and only if that
    /// epoch assigns their (first) partition to its group: votes of different groups never add
    /// up (docs/protocol.md, "Reconfiguration").
    pub fn on_commit_db(
        &mut self,
        from: NodeId,
        commit_db: CommitDb,
    ) -> Result<(Vec<VoterAction>, usize), VoterReject> {
        let (cluster, start, end) = self
            .epoch(commit_db.config_epoch)
            .ok_or(VoterReject::WrongEpoch)?;
        let member = cluster
            .members(commit_db.group)
            .any(|r| r.id == commit_db.replica.0);
        if from != commit_db.replica || !member {
            return Err(VoterReject::NotMember);
        }
        let assigned = |e: &Execution| {
            e.order > start
                && end.is_none_or(|end| e.order <= end)
                && e.request
                    .partitions
                    .first()
                    .and_then(|&p| cluster.group_of(p))
                    == Some(commit_db.group)
        };
        let misrouted: BTreeSet<u64> = commit_db
            .executions
            .iter()
            .filter(|e| !assigned(e))
            .map(|e| e.order)
            .collect();
        let quorum = self.cluster.config.f + 1;
        let mut actions = Vec::new();
        let mut malformed = 0;
        let mut answers = Vec::new();
        let mut look_up = Vec::new();
        // A correct member names an order once per COMMIT-DB, in increasing order: only
        // otherwise are the orders met so far remembered (no allocation on the common path).
        let increasing = (commit_db.executions.windows(2)).all(|w| w[0].order < w[1].order);
        let mut seen = BTreeSet::new();
        for execution in commit_db.executions {
            let repeated = !increasing && !seen.insert(execution.order);
            if misrouted.contains(&execution.order) || repeated {
                malformed += 1;
                continue;
            }
            // Retransmissions of what is decided or executed are the common case under load:
            // answered (or skipped) before the costlier checks below. An answer from memory
            // costs a copy of the result to every member of the group, so only the execution
            // that ran gets it, once per COMMIT-DB: a Byzantine member's copies, or made-up
            // executions naming the order, used to be answered once each.
            if let Some(recent) = self.recent.get(&execution.order) {
                let ran =
                    recent.group == commit_db.group && recent.positions == execution.positions;
                if ran && self.well_formed(&execution) {
                    answers.push((execution.order, recent.result.clone()));
                } else {
                    malformed += 1;
                }
                continue;
            }
            if self.decided.contains_key(&execution.order) {
                continue;
            }
            if execution.order <= self.st.transferred_through {
                // Arrived by state transfer, or its result was forgotten: no stored result to
                // answer with, and it must not run again.
                self.st.transferred_skips += 1;
                continue;
            }
            if !self.well_formed(&execution) {
                malformed += 1;
                continue;
            }
            if self.already_executed(&execution) {
                // A retransmission after we executed: answer again with the stored result.
                let (order, group, member) = (execution.order, commit_db.group, commit_db.replica);
                if self.lookups.ask(order, group, member, &execution.positions) {
                    look_up.push(execution.order);
                }
                continue;
            }
            let order = execution.order;
            if let Some(decided) =
                self.votes
                    .count(commit_db.replica, commit_db.group, execution, quorum)
            {
                self.decided.insert(order, decided);
            }
        }
        if !answers.is_empty() {
            actions.push(self.reply(commit_db.group, answers));
        }
        if !look_up.is_empty() {
            actions.push(VoterAction::LookUp { orders: look_up });
        }
        actions.extend(self.schedule());
        Ok((actions, malformed))
    }

    /// Votes evicted since the last call because their member held too many (module `votes`;
    /// counted by the driver).
    pub fn take_evicted_votes(&mut self) -> u64 {
        self.votes.take_evicted()
    }

    /// Lookups refused since the last call because their member had
    /// [`MAX_LOOKUPS_PER_MEMBER`] in flight (module `lookups`; counted by the driver).
    pub fn take_refused_lookups(&mut self) -> u64 {
        self.lookups.take_refused()
    }

    /// The stored results a [`VoterAction::LookUp`] found (`None`: no result stored for that
    /// order), answered to every group a member of which asked for the order at the positions
    /// it ran at, each once.
    pub fn looked_up(&mut self, found: Vec<(u64, Option<StoredResult>)>) -> LookedUp {
        let mut answers: BTreeMap<GroupId, Vec<(u64, Vec<u8>)>> = BTreeMap::new();
        let mut outcome = LookedUp::default();
        for (order, stored) in found {
            let positions = stored.as_ref().map(|s| s.positions.as_slice());
            let (groups, mismatched) = self.lookups.answered(order, positions);
            outcome.mismatched += mismatched;
            let Some(stored) = stored else {
                outcome.missing += 1;
                continue;
            };
            for group in groups {
                answers
                    .entry(group)
                    .or_default()
                    .push((order, stored.result.clone()));
            }
        }
        outcome.actions = answers
            .into_iter()
            .map(|(group, results)| self.reply(group, results))
            .collect();
        outcome
    }

    fn reply(&self, group: GroupId, results: Vec<(u64, Vec<u8>)>) -> VoterAction {
        let reply = ReplyCommitDb {
            db_node: self.me,
            results,
        };
        VoterAction::Reply { group, reply }
    }

    /// The executor ran (or looked up) `order` with this result.
    pub fn executed(&mut self, order: u64, result: Vec<u8>) -> Vec<VoterAction> {
        self.executed_all(vec![(order, result)])
    }

    /// The executor ran (or looked up) a batch: each order with its result. The results for
    /// one group go out in one REPLY-COMMIT-DB, so a batch of n costs one message per member
    /// instead of n.
    pub fn executed_all(&mut self, results: Vec<(u64, Vec<u8>)>) -> Vec<VoterAction> {
        let mut replies: BTreeMap<GroupId, Vec<(u64, Vec<u8>)>> = BTreeMap::new();
        for (order, result) in results {
            self.running.remove(&order);
            let Some((group, execution)) = self.decided.remove(&order) else {
                continue;
            };
            for &(p, s) in &execution.positions {
                if let Some(last) = self.last_seq.get_mut(p as usize) {
                    *last = (*last).max(s);
                }
            }
            self.st.executed(order);
            replies
                .entry(group)
                .or_default()
                .push((order, result.clone()));
            let positions = execution.positions;
            let recent = Recent {
                group,
                positions,
                result,
            };
            self.recent.insert(order, recent);
        }
        while self.recent.len() > KEEP_RESULTS {
            self.recent.pop_first();
        }
        let mut actions: Vec<VoterAction> = replies
            .into_iter()
            .map(|(group, results)| self.reply(group, results))
            .collect();
        // Forgotten from here on, before the executor deletes them: their retransmissions are
        // skipped like transferred orders', which every order up to `executed_through` may be.
        let horizon = self.st.executed_through.saturating_sub(self.keep_stored);
        if horizon >= self.st.transferred_through + FORGET_STEP {
            self.st.transferred_through = horizon;
            actions.push(VoterAction::ForgetResults { through: horizon });
        }
        actions.extend(self.schedule());
        actions
    }

    /// Decided executions waiting for predecessors.
    pub fn waiting(&self) -> usize {
        self.decided.len()
            - self
                .running
                .iter()
                .filter(|o| self.decided.contains_key(o))
                .count()
    }

    /// Releases, in global order, every decided execution whose predecessors have been
    /// released: chains of single-partition executions per partition (each chain one batch,
    /// continued only while nothing earlier of that partition is still running), and a
    /// multi-partition execution alone once everything before it has executed on every
    /// partition.
    fn schedule(&mut self) -> Vec<VoterAction> {
        let mut actions = Vec::new();
        let mut chains: BTreeMap<u32, Vec<Execution>> = BTreeMap::new();
        let busy = |v: &Self, p: u32| v.released[p as usize] > v.last_seq[p as usize];
        let mut released = Vec::new();
        let hold = self.st.hold();
        for (order, (_, execution)) in &self.decided {
            if hold.is_some_and(|h| *order > h) {
                break;
            }
            if self.running.contains(order) {
                continue;
            }
            let next =
                |&(p, s): &(u32, u64)| self.released.get(p as usize).is_some_and(|&r| r + 1 == s);
            match execution.positions.as_slice() {
                [position @ (p, _)] => {
                    let chained = chains.get(p).is_some_and(|c| c.len() < MAX_CHAIN);
                    if next(position) && (chained || (!busy(self, *p) && !chains.contains_key(p))) {
                        chains.entry(*p).or_default().push(execution.clone());
                        self.released[*p as usize] = position.1;
                        released.push(*order);
                    }
                }
                positions => {
                    let idle = positions.iter().all(|(p, s)| {
                        !busy(self, *p)
                            && !chains.contains_key(p)
                            && self.last_seq.get(*p as usize).is_some_and(|&l| l + 1 == *s)
                    });
                    if idle {
                        for &(p, s) in positions {
                            self.released[p as usize] = s;
                        }
                        released.push(*order);
                        actions.push(VoterAction::Execute(vec![execution.clone()]));
                    }
                }
            }
        }
        if let Some(&last) = released.iter().max() {
            self.st.max_released = self.st.max_released.max(last);
        }
        self.running.extend(released);
        actions.extend(chains.into_values().map(VoterAction::Execute));
        actions.extend(self.after_schedule());
        actions
    }

    fn already_executed(&self, execution: &Execution) -> bool {
        execution
            .positions
            .iter()
            .all(|&(p, s)| self.last_seq.get(p as usize).is_some_and(|&last| s <= last))
    }

    /// Positions fit the request (its own partition, or every partition for a multi-partition
    /// request) and its partitions are the ones its operation touches.
    ///
    /// The client's signature is not checked here: an execution runs only once f+1 members of
    /// its assigned group sent it, so a correct member derived it from its order book, which
    /// checked that signature (`group::order::OrderBook::order`). Checking it again at each
    /// database node would repeat what that quorum vouches for, at the cost of one signature
    /// check per request per node (docs/performance.md). A Byzantine member may send a request
    /// with a forged signature; it stays one candidate among its votes and never gathers f+1.
    fn well_formed(&self, execution: &Execution) -> bool {
        let request = &execution.request;
        let partitions = self.cluster.config.partitions;
        let expected: Vec<u32> = if request.partitions.len() == 1 {
            request.partitions.clone()
        } else {
            (0..partitions).collect()
        };
        let positioned: Vec<u32> = execution.positions.iter().map(|&(p, _)| p).collect();
        positioned == expected
            && execution
                .positions
                .iter()
                .all(|&(p, s)| p < partitions && s >= 1)
            && request.declares_truthfully(self.rule.as_ref())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use proto::testing::{node_key, request, BytesArePartitions, TestCluster};

    /// Group 0 of a one-group cluster with two partitions; database node 11 votes.
    pub(in crate::voter) fn voter() -> VoterCore {
        voter_of(1)
    }

    /// Database node 11 of a cluster of `groups` groups and two partitions (group g serves
    /// partition g with two groups).
    fn voter_of(groups: u32) -> VoterCore {
        let cluster = Arc::new(TestCluster::new(1, groups, 2, 4).cluster);
        VoterCore::new(
            cluster,
            Arc::new(BytesArePartitions),
            node_key(NodeId(11)),
            NodeId(11),
            vec![0, 0],
        )
    }

    /// Executions as f+1 = 2 members of group 0 send them.
    pub(in crate::voter) fn decide(
        voter: &mut VoterCore,
        executions: &[Execution],
    ) -> Vec<VoterAction> {
        let mut actions = Vec::new();
        for replica in [101, 102] {
            let commit_db = CommitDb {
                config_epoch: voter.cluster.epoch(),
                group: GroupId(0),
                replica: NodeId(replica),
                executions: executions.to_vec(),
            };
            let (more, malformed) = voter.on_commit_db(commit_db.replica, commit_db).unwrap();
            assert_eq!(malformed, 0);
            actions.extend(more);
        }
        actions
    }

    pub(in crate::voter) fn execution(
        order: u64,
        positions: &[(u32, u64)],
        partitions: &[u8],
    ) -> Execution {
        Execution {
            order,
            positions: positions.to_vec(),
            request: request((order - 1) % 4 + 1, order, partitions).body(),
        }
    }

    pub(in crate::voter) fn batches(actions: &[VoterAction]) -> Vec<Vec<u64>> {
        actions
            .iter()
            .filter_map(|a| match a {
                VoterAction::Execute(batch) => Some(batch.iter().map(|e| e.order).collect()),
                _ => None,
            })
            .collect()
    }

    /// A COMMIT-DB of `group`'s member `replica`, of configuration epoch `epoch`.
    fn commit_db(epoch: u64, group: u32, replica: u32, executions: &[Execution]) -> CommitDb {
        CommitDb {
            config_epoch: proto::ConfigEpoch(epoch),
            group: GroupId(group),
            replica: NodeId(replica),
            executions: executions.to_vec(),
        }
    }

    /// `commit_db` as it arrives on the link of the member it names.
    fn linked(
        v: &mut VoterCore,
        commit_db: &CommitDb,
    ) -> Result<(Vec<VoterAction>, usize), VoterReject> {
        v.on_commit_db(commit_db.replica, commit_db.clone())
    }

    fn progress(executed_through: u64, highest_order: u64, above: &[u64]) -> crate::Progress {
        crate::Progress {
            partitions: Vec::new(),
            highest_order,
            executed_through,
            transferred_through: 0,
            executed_above: above.to_vec(),
        }
    }

    /// A crash can leave an executed order above a gap (chains of different partitions commit
    /// concurrently). Once the gap executes after the restart, the node counts itself past
    /// that order too: it goes on forgetting results from there (it stopped for good before,
    /// and the results table grew until the next restart).
    #[test]
    fn an_order_executed_above_a_gap_before_a_restart_counts_once_the_gap_executes() {
        let keep = STORED_RESULTS_KEPT_MIN;
        let through = keep + FORGET_STEP + 10;
        let mut v =
            voter()
                .keep_stored_results(1)
                .resume(&progress(through, through + 2, &[through + 2]));
        let e = execution(through + 1, &[(0, 1)], &[0]);
        assert_eq!(batches(&decide(&mut v, &[e])), vec![vec![through + 1]]);
        let forgot: Vec<u64> = v
            .executed(through + 1, b"result".to_vec())
            .iter()
            .filter_map(|a| match a {
                VoterAction::ForgetResults { through } => Some(*through),
                _ => None,
            })
            .collect();
        assert_eq!(forgot, vec![through + 2 - keep]);
    }

    /// Once a node has executed more orders than it keeps results for, and a step more, it has
    /// the executor forget the oldest results (never fewer kept than the minimum, whatever was
    /// asked), and it skips their retransmissions like transferred orders'.
    #[test]
    fn old_results_are_forgotten_in_steps_and_their_retransmissions_skipped() {
        let keep = STORED_RESULTS_KEPT_MIN;
        let through = keep + FORGET_STEP + 10;
        let mut v = voter()
            .keep_stored_results(1)
            .resume(&progress(through, through, &[]));
        let forgets = |actions: &[VoterAction]| -> Vec<u64> {
            actions
                .iter()
                .filter_map(|a| match a {
                    VoterAction::ForgetResults { through } => Some(*through),
                    _ => None,
                })
                .collect()
        };
        for (order, position, forgotten) in [
            (through + 1, 1, vec![through + 1 - keep]),
            (through + 2, 2, vec![]),
        ] {
            let e = execution(order, &[(0, position)], &[0]);
            assert_eq!(batches(&decide(&mut v, &[e])), vec![vec![order]]);
            assert_eq!(forgets(&v.executed(order, b"result".to_vec())), forgotten);
        }
        let old = decide(&mut v, &[execution(7, &[(1, 1)], &[1])]);
        assert!(old.is_empty(), "{old:?}");
        assert_eq!(v.take_transferred_skips(), 2);
    }

    /// Votes of the wrong group never decide anything, however many; votes of two groups never
    /// add up (docs/protocol.md, "Reconfiguration").
    #[test]
    fn only_the_group_serving_the_partition_decides() {
        let mut v = voter_of(2);
        let cluster = v.cluster.clone();
        let serving = cluster.group_of(0).unwrap().0;
        let other = 1 - serving;
        let members = |g: u32| -> Vec<u32> { cluster.members(GroupId(g)).map(|r| r.id).collect() };
        let e = [execution(1, &[(0, 1)], &[0])];
        for replica in members(other) {
            let (actions, malformed) = linked(&mut v, &commit_db(1, other, replica, &e)).unwrap();
            assert!(actions.is_empty());
            assert_eq!(malformed, 1);
        }
        // One vote of the serving group is not f+1 either.
        let first = members(serving)[0];
        let (actions, _) = linked(&mut v, &commit_db(1, serving, first, &e)).unwrap();
        assert!(batches(&actions).is_empty());
        let second = members(serving)[1];
        let (actions, _) = linked(&mut v, &commit_db(1, serving, second, &e)).unwrap();
        assert_eq!(batches(&actions), vec![vec![1]]);
    }

    /// A COMMIT-DB counts only from the link of the member it names: one that another member,
    /// a member of another group or a node outside the cluster sends in a member's name is
    /// refused and is no vote of that member; an unknown epoch is refused too.
    #[test]
    fn a_commit_db_counts_only_from_the_link_of_the_member_it_names() {
        let mut v = voter_of(2);
        let cluster = v.cluster.clone();
        let serving = cluster.group_of(0).unwrap().0;
        let members: Vec<u32> = cluster.members(GroupId(serving)).map(|r| r.id).collect();
        let outsider = cluster.members(GroupId(1 - serving)).next().unwrap().id;
        let e = [execution(1, &[(0, 1)], &[0])];
        let from =
            |v: &mut VoterCore, link: u32, c: &CommitDb| v.on_commit_db(NodeId(link), c.clone());
        let first = commit_db(1, serving, members[0], &e);
        assert!(batches(&from(&mut v, members[0], &first).unwrap().0).is_empty());
        let in_second_name = commit_db(1, serving, members[1], &e);
        for link in [members[0], members[2], outsider, 999] {
            assert_eq!(
                from(&mut v, link, &in_second_name).unwrap_err(),
                VoterReject::NotMember
            );
        }
        let outsiders = commit_db(1, serving, outsider, &e);
        assert_eq!(
            from(&mut v, outsider, &outsiders).unwrap_err(),
            VoterReject::NotMember
        );
        let unknown_epoch = commit_db(9, serving, members[1], &e);
        assert_eq!(
            from(&mut v, members[1], &unknown_epoch).unwrap_err(),
            VoterReject::WrongEpoch
        );
        // None of those was a second vote: the second member's own COMMIT-DB decides.
        let (actions, _) = from(&mut v, members[1], &in_second_name).unwrap();
        assert_eq!(batches(&actions), vec![vec![1]]);
    }

    /// After a reconfiguration, each epoch's COMMIT-DBs count only for its own orders: the
    /// earlier epoch up to the cut, the next one after it; an unknown epoch not at all.
    #[test]
    fn each_epoch_decides_only_its_own_orders() {
        let mut v = voter();
        let mut next = v.cluster.config.clone();
        next.config_epoch = 2;
        next.epoch_start.order = 2;
        v.reconfigure(Arc::new(Cluster::new(next).unwrap()));
        let vote = |v: &mut VoterCore, epoch: u64, e: &[Execution]| {
            let mut decided = Vec::new();
            let mut malformed = 0;
            for replica in [101, 102] {
                let (actions, m) = linked(v, &commit_db(epoch, 0, replica, e)).unwrap();
                decided.extend(batches(&actions));
                malformed += m;
            }
            (decided, malformed)
        };
        // Order 3 is after the cut: not epoch 1's.
        let third = [execution(3, &[(0, 2)], &[0])];
        assert_eq!(vote(&mut v, 1, &third), (vec![], 2));
        // Order 1 is before it: not epoch 2's, but still epoch 1's.
        let first = [execution(1, &[(0, 1)], &[0])];
        assert_eq!(vote(&mut v, 2, &first), (vec![], 2));
        assert_eq!(vote(&mut v, 1, &first), (vec![vec![1]], 0));
        assert_eq!(
            linked(&mut v, &commit_db(3, 0, 101, &third)).unwrap_err(),
            VoterReject::WrongEpoch
        );
    }

    /// Member 103 of group 0 is replaced by 104 at epoch 2: each epoch's COMMIT-DBs count only
    /// from that epoch's members, and answers go to the members of both epochs while the
    /// closed one has orders to finish (103's closed-epoch core waits for them too).
    #[test]
    fn a_replaced_member_votes_only_in_its_epoch_and_is_answered_while_it_finishes() {
        let mut v = voter();
        let mut next = v.cluster.config.clone();
        next.config_epoch = 2;
        next.epoch_start.order = 1;
        let (newcomer, enrollment) = proto::testing::member(0, 4);
        next.enrollments.push(enrollment);
        let slot = next.replicas.iter_mut().find(|r| r.id == 103).unwrap();
        *slot = newcomer;
        v.reconfigure(Arc::new(Cluster::new(next).unwrap()));
        let ids = |members: Vec<NodeId>| -> Vec<u32> { members.iter().map(|n| n.0).collect() };
        assert_eq!(ids(v.members_of(GroupId(0))), vec![101, 102, 104, 103]);
        let first = [execution(1, &[(0, 1)], &[0])];
        let second = [execution(2, &[(0, 2)], &[0])];
        assert_eq!(
            linked(&mut v, &commit_db(2, 0, 103, &second)).unwrap_err(),
            VoterReject::NotMember,
            "103 is not a member in epoch 2"
        );
        assert_eq!(
            linked(&mut v, &commit_db(1, 0, 104, &first)).unwrap_err(),
            VoterReject::NotMember,
            "104 was not a member in epoch 1"
        );
        let (actions, _) = linked(&mut v, &commit_db(1, 0, 103, &first)).unwrap();
        assert!(batches(&actions).is_empty());
        let (actions, _) = linked(&mut v, &commit_db(1, 0, 101, &first)).unwrap();
        assert_eq!(
            batches(&actions),
            vec![vec![1]],
            "103 and 101 decide epoch 1's order"
        );
        v.executed(1, Vec::new());
        let (actions, _) = linked(&mut v, &commit_db(2, 0, 104, &second)).unwrap();
        assert!(batches(&actions).is_empty());
        let (actions, _) = linked(&mut v, &commit_db(2, 0, 102, &second)).unwrap();
        assert_eq!(
            batches(&actions),
            vec![vec![2]],
            "104 and 102 decide epoch 2's"
        );
    }

    /// A vote of the earlier epoch for an order after the cut, counted before the node knew
    /// the cut, does not add up with a vote of the next epoch for that order. The model check
    /// of the cut-over (`crates/model/src/cutover.rs`) found this: partition 0 moves from
    /// group 0 to group 1 at a cut at order 0; before the CONFIGURE reaches this node, group 0's
    /// Byzantine member votes for request 1 at order 1 (epoch 1 still counted any order); after
    /// it, group 1's Byzantine member votes the same. Two votes of two groups of two epochs made
    /// f+1: the node executed what no correct replica decided (in the model, a request executed
    /// at two orders). Now the node executes only what group 1's correct members decide there.
    #[test]
    fn votes_before_the_cut_do_not_add_up_with_the_next_epochs() {
        let mut v = voter_of(2);
        let cluster = v.cluster.clone();
        assert_eq!(cluster.group_of(0), Some(GroupId(0)));
        let forged = [execution(1, &[(0, 1)], &[0])];
        let (actions, malformed) = linked(&mut v, &commit_db(1, 0, 103, &forged)).unwrap();
        assert!(batches(&actions).is_empty() && malformed == 0);
        let mut next = cluster.config.clone();
        next.config_epoch = 2;
        for g in &mut next.groups {
            g.partitions = vec![1 - g.id];
        }
        v.reconfigure(Arc::new(Cluster::new(next).unwrap()));
        let (actions, malformed) = linked(&mut v, &commit_db(2, 1, 203, &forged)).unwrap();
        assert_eq!(malformed, 0, "group 1 serves partition 0 in epoch 2");
        assert!(batches(&actions).is_empty(), "{actions:?}");
        // What epoch 2 decided at order 1 executes.
        let decided = [Execution {
            request: request(2, 1, &[0]).body(),
            ..forged[0].clone()
        }];
        let mut executed = Vec::new();
        for replica in [201, 202] {
            let (actions, _) = linked(&mut v, &commit_db(2, 1, replica, &decided)).unwrap();
            executed.extend(actions.into_iter().filter_map(|a| match a {
                VoterAction::Execute(batch) => Some(batch),
                _ => None,
            }));
        }
        assert_eq!(executed, vec![decided.to_vec()]);
    }

    #[test]
    fn consecutive_positions_form_one_batch_per_partition_and_multi_partition_waits() {
        let mut v = voter();
        let decided = [
            execution(1, &[(0, 1)], &[0]),
            execution(2, &[(1, 1)], &[1]),
            execution(3, &[(0, 2)], &[0]),
            execution(4, &[(0, 3), (1, 2)], &[0, 1]),
            execution(5, &[(1, 3)], &[1]),
        ];
        let actions = decide(&mut v, &decided);
        // One chain per partition; the multi-partition order waits for both.
        assert_eq!(batches(&actions), vec![vec![1, 3], vec![2]]);
        assert!(batches(&v.executed(1, vec![])).is_empty());
        assert!(
            batches(&v.executed(2, vec![])).is_empty(),
            "partition 0 still runs"
        );
        // Everything before it done: the multi-partition order runs alone.
        assert_eq!(batches(&v.executed(3, vec![])), vec![vec![4]]);
        assert_eq!(batches(&v.executed(4, vec![])), vec![vec![5]]);
    }

    #[test]
    fn retransmissions_of_executed_orders_are_answered_from_memory() {
        let mut v = voter();
        let one = [execution(1, &[(0, 1)], &[0])];
        assert_eq!(batches(&decide(&mut v, &one)), vec![vec![1]]);
        // Re-sent while it runs: nothing more to do.
        assert!(decide(&mut v, &one).is_empty());
        let replies = |actions: &[VoterAction]| -> Vec<Vec<u64>> {
            actions
                .iter()
                .filter_map(|a| match a {
                    VoterAction::Reply { reply, .. } => {
                        Some(reply.results.iter().map(|r| r.0).collect())
                    }
                    _ => None,
                })
                .collect()
        };
        assert_eq!(replies(&v.executed(1, b"r".to_vec())), vec![vec![1]]);
        // Re-sent after it ran: answered at once from memory, the database is not asked.
        let again = decide(&mut v, &one);
        assert!(batches(&again).is_empty(), "{again:?}");
        assert_eq!(replies(&again), vec![vec![1], vec![1]]);
    }

    /// The groups answered and the orders each answer holds.
    fn replies(actions: &[VoterAction]) -> Vec<(GroupId, Vec<u64>)> {
        actions
            .iter()
            .filter_map(|a| match a {
                VoterAction::Reply { group, reply } => {
                    Some((*group, reply.results.iter().map(|r| r.0).collect()))
                }
                _ => None,
            })
            .collect()
    }

    /// One Byzantine member's COMMIT-DB naming a recently executed order gets what a correct
    /// member's re-send gets, no more: one answer per order, and only for the execution that
    /// ran there. It used to be answered from memory before any check, once per copy: one
    /// minimal execution of a few bytes cloned the order's result into the reply, to every
    /// member of the group, as often as the frame held copies.
    #[test]
    fn copies_of_a_recent_order_are_answered_once_and_only_as_executed() {
        let mut v = voter();
        let one = execution(1, &[(0, 1)], &[0]);
        assert_eq!(
            batches(&decide(&mut v, std::slice::from_ref(&one))),
            vec![vec![1]]
        );
        v.executed(1, b"result".to_vec());
        let from_103 = |executions: &[Execution]| commit_db(1, 0, 103, executions);
        let minimal = Execution {
            positions: Vec::new(),
            ..one.clone()
        };
        let moved = Execution {
            positions: vec![(0, 2)],
            ..one.clone()
        };
        for wrong in [minimal, moved] {
            let (actions, malformed) = linked(&mut v, &from_103(&[wrong])).unwrap();
            assert_eq!((replies(&actions), malformed), (vec![], 1), "{actions:?}");
        }
        let (actions, malformed) = linked(&mut v, &from_103(&vec![one; 50])).unwrap();
        assert_eq!(replies(&actions), vec![(GroupId(0), vec![1])]);
        assert_eq!(malformed, 49, "the copies are counted");
    }

    /// A member's COMMIT-DB for an order at positions this node passed, with no result in
    /// memory (a restart), is looked up apart from every execution. One Byzantine member can
    /// name any order there: one that never ran here goes unanswered and is counted, where it
    /// used to join a writer transaction that then failed, and was retried, forever.
    #[test]
    fn executed_positions_are_looked_up_apart_and_an_unknown_order_goes_unanswered() {
        let cluster = Arc::new(TestCluster::new(1, 1, 2, 4).cluster);
        let mut v = VoterCore::new(
            cluster,
            Arc::new(BytesArePartitions),
            node_key(NodeId(11)),
            NodeId(11),
            vec![5, 0],
        );
        let from_101 = |executions: &[Execution]| commit_db(1, 0, 101, executions);
        let real = [execution(3, &[(0, 3)], &[0])];
        let (actions, malformed) = linked(&mut v, &from_101(&real)).unwrap();
        assert_eq!(malformed, 0);
        assert_eq!(actions, vec![VoterAction::LookUp { orders: vec![3] }]);
        // Asked again while the lookup runs: not looked up twice.
        assert!(linked(&mut v, &from_101(&real)).unwrap().0.is_empty());
        let looked_up = v.looked_up(vec![(3, Some(stored(&[(0, 3)], b"r")))]);
        assert_eq!((looked_up.missing, looked_up.mismatched), (0, 0));
        let answers = looked_up.actions;
        let [VoterAction::Reply { group, reply }] = answers.as_slice() else {
            panic!("{answers:?}")
        };
        assert_eq!(
            (*group, reply.results.clone()),
            (GroupId(0), vec![(3, b"r".to_vec())])
        );

        let made_up = [execution(999, &[(0, 2)], &[0])];
        let (actions, _) = linked(&mut v, &from_101(&made_up)).unwrap();
        assert_eq!(actions, vec![VoterAction::LookUp { orders: vec![999] }]);
        let looked_up = v.looked_up(vec![(999, None)]);
        assert_eq!((looked_up.actions, looked_up.missing), (Vec::new(), 1));
        assert!(batches(&actions).is_empty(), "never an execution");
    }

    /// What a lookup reads for an order that ran at `positions`.
    fn stored(positions: &[(PartitionId, u64)], result: &[u8]) -> StoredResult {
        StoredResult {
            positions: positions.to_vec(),
            result: result.to_vec(),
        }
    }

    /// Database node 11 of a two-group cluster that passed positions 5 of both partitions,
    /// with no result in memory (a restart): re-sends are looked up.
    fn restarted_of_two_groups() -> VoterCore {
        let cluster = Arc::new(TestCluster::new(1, 2, 2, 4).cluster);
        VoterCore::new(
            cluster,
            Arc::new(BytesArePartitions),
            node_key(NodeId(11)),
            NodeId(11),
            vec![5, 5],
        )
    }

    /// A member of group 0 names group 1's order 3 at positions of its own partition that
    /// this node passed. Its lookup used to hold the order for group 0 alone: group 1's
    /// genuine re-send, arriving meanwhile, was dropped and the answer went to group 0 only;
    /// later every asking group got it, group 0 too, though order 3 never ran at the positions
    /// its member named. Now the order is read once and answered only to the group whose member
    /// named the positions it ran at; the other is counted.
    #[test]
    fn a_lookup_answers_only_the_groups_that_named_where_the_order_ran() {
        let mut v = restarted_of_two_groups();
        let byzantine = [execution(3, &[(0, 2)], &[0])];
        let (actions, _) = linked(&mut v, &commit_db(1, 0, 103, &byzantine)).unwrap();
        assert_eq!(actions, vec![VoterAction::LookUp { orders: vec![3] }]);
        let genuine = [execution(3, &[(1, 3)], &[1])];
        let (actions, malformed) = linked(&mut v, &commit_db(1, 1, 201, &genuine)).unwrap();
        assert_eq!((actions, malformed), (vec![], 0), "read once");
        let looked_up = v.looked_up(vec![(3, Some(stored(&[(1, 3)], b"r")))]);
        assert_eq!((looked_up.missing, looked_up.mismatched), (0, 1));
        assert_eq!(replies(&looked_up.actions), vec![(GroupId(1), vec![3])]);
        let again = v.looked_up(vec![(3, Some(stored(&[(1, 3)], b"r")))]);
        assert_eq!(again, LookedUp::default(), "nobody asks any more");
    }

    /// A Byzantine member naming made-up orders at passed positions used to start one read per
    /// order, without bound. Now it has at most [`MAX_LOOKUPS_PER_MEMBER`] in flight: the
    /// rest are refused and counted; another member's lookups still go through, and once the
    /// reads end the member may ask again.
    #[test]
    fn lookups_in_flight_are_bounded_per_member() {
        let mut v = restarted_of_two_groups();
        let made_up: Vec<Execution> = (0..MAX_LOOKUPS_PER_MEMBER as u64 + 10)
            .map(|i| execution(1_000 + i, &[(0, 1)], &[0]))
            .collect();
        let (actions, _) = linked(&mut v, &commit_db(1, 0, 103, &made_up)).unwrap();
        let [VoterAction::LookUp { orders }] = actions.as_slice() else {
            panic!("{actions:?}")
        };
        assert_eq!(orders.len(), MAX_LOOKUPS_PER_MEMBER);
        assert_eq!(v.take_refused_lookups(), 10);
        let correct = [execution(3, &[(0, 2)], &[0])];
        let (actions, _) = linked(&mut v, &commit_db(1, 0, 101, &correct)).unwrap();
        assert_eq!(actions, vec![VoterAction::LookUp { orders: vec![3] }]);
        let none = orders.iter().map(|&o| (o, None)).collect();
        let looked_up = v.looked_up(none);
        assert_eq!(
            (looked_up.actions, looked_up.missing),
            (vec![], MAX_LOOKUPS_PER_MEMBER)
        );
        let again = [execution(5_000, &[(0, 1)], &[0])];
        let (actions, _) = linked(&mut v, &commit_db(1, 0, 103, &again)).unwrap();
        assert_eq!(
            actions,
            vec![VoterAction::LookUp {
                orders: vec![5_000]
            }]
        );
        assert_eq!(v.take_refused_lookups(), 0);
    }

    #[test]
    fn a_chain_is_answered_in_one_signed_reply() {
        let mut v = voter();
        let chain = [execution(1, &[(0, 1)], &[0]), execution(2, &[(0, 2)], &[0])];
        assert_eq!(batches(&decide(&mut v, &chain)), vec![vec![1, 2]]);
        let actions = v.executed_all(vec![(1, b"a".to_vec()), (2, b"b".to_vec())]);
        let replies: Vec<&ReplyCommitDb> = actions
            .iter()
            .filter_map(|a| match a {
                VoterAction::Reply { reply, .. } => Some(reply),
                _ => None,
            })
            .collect();
        assert_eq!(replies.len(), 1, "{actions:?}");
        assert_eq!(
            replies[0].results,
            vec![(1, b"a".to_vec()), (2, b"b".to_vec())]
        );
        assert_eq!(replies[0].db_node, NodeId(11));
    }

    #[test]
    fn a_chain_does_not_grow_while_its_partition_runs_an_earlier_batch() {
        let mut v = voter();
        assert_eq!(
            batches(&decide(&mut v, &[execution(1, &[(0, 1)], &[0])])),
            vec![vec![1]]
        );
        // Decided while order 1 runs: waits, then forms the next batch.
        let later = [execution(2, &[(0, 2)], &[0]), execution(3, &[(0, 3)], &[0])];
        assert!(batches(&decide(&mut v, &later)).is_empty());
        assert_eq!(batches(&v.executed(1, vec![])), vec![vec![2, 3]]);
    }
}
