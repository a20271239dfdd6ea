//! The group replica's protocol core (sans-IO).
//!
//! Inputs: PREPAREs from the primary, COMMITs from group peers, our own USIG's warrants, durable
//! log completions, REPLY-COMMIT-DBs from database nodes, client requests and timer ticks.
//! Outputs: [`Action`]s for the driver. Every replica processes every PREPARE, in the primary's
//! counter order, to derive the global order; only the PREPARE's named groups agree on it.

use crate::order::OrderBook;
use crate::render::Renderer;
use proto::config::Cluster;
use proto::{
    ClientId, Commit, CommitDb, Execution, GroupId, NodeId, PartitionRule, Prepare, Reply,
    ReplyCommitDb, Request, Signature, SigningKey, View,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::RangeInclusive;
use std::sync::Arc;
use usig::{MessageDigest, OrderedVerifier, UniqueWarrant, UsigId, VerifyError, DEFAULT_WINDOW};

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Ask our USIG for a warrant over `bytes`, then call [`ReplicaCore::warranted`].
    Warrant { bytes: Vec<u8> },
    /// Send to the other members of our group, or to `to` alone when it asked for it again.
    SendCommit {
        to: Option<NodeId>,
        commit: Box<Commit>,
    },
    /// Ask the primary to send the PREPAREs with these counters again.
    FetchPrepares(RangeInclusive<u64>),
    /// Ask a peer to send its COMMITs again: those with these warrant counters (a gap in its
    /// sequence) and those for these PREPARE counters (agreements still short of f+1).
    FetchCommits {
        from: NodeId,
        warrants: Option<RangeInclusive<u64>>,
        prepares: Vec<u64>,
    },
    /// Write the decision for the PREPARE with this counter durably, then call
    /// [`ReplicaCore::persisted`].
    Persist {
        counter: u64,
        executions: Vec<Execution>,
    },
    /// Send to database node `to`, or to every database node.
    SendCommitDb {
        to: Option<NodeId>,
        commit_db: CommitDb,
    },
    /// Send to the client.
    SendReply(Reply),
}

/// Why a message was dropped (counted by the driver).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reject {
    /// Not from the primary of the current view, or for another view.
    WrongView,
    /// For another configuration epoch.
    WrongEpoch,
    /// A COMMIT from a node that is not a member of our group.
    NotMember,
    /// A node-signed message whose signature does not verify, or from an unknown node.
    BadSignature,
    /// The warrant does not verify or is out of order (replay, equivocation, gap too large).
    Warrant(VerifyError),
}

struct Agreement {
    digest: MessageDigest,
    /// Our executions once the PREPARE was ordered here.
    executions: Option<Vec<Execution>>,
    prepare: Prepare,
    committed: BTreeSet<NodeId>,
    accepted: bool,
    /// Tick at which we started on it, or last asked peers for their COMMITs.
    asked: u64,
}

struct Awaiting {
    execution: Execution,
    votes: BTreeMap<NodeId, MessageDigest>,
    results: BTreeMap<MessageDigest, Vec<u8>>,
    replied: bool,
    /// Tick at which the COMMIT-DB was last sent.
    sent: u64,
    /// How often it was re-sent: each re-send waits twice as long as the one before.
    resends: u32,
}

/// Decided executions kept for database nodes that have not answered yet (a lagging node
/// catches up from them); older ones are left to state transfer.
const KEEP_DECIDED: usize = 4096;
/// Our COMMITs kept for peers that lost them.
const KEEP_COMMITS: usize = 4096;
/// Ticks without progress before we ask again for COMMITs or re-send a COMMIT-DB: under load
/// an agreement or an execution legitimately takes a few ticks, and asking every tick would
/// multiply the work of the very nodes that are behind.
const RETRY_TICKS: u64 = 4;
/// A COMMIT-DB is re-sent after `RETRY_TICKS << min(resends, MAX_BACKOFF)` ticks: a database
/// node that is merely busy answers the first COMMIT-DB, and re-sending everything in flight
/// every few ticks would bury it in duplicates.
const MAX_BACKOFF: u32 = 5;

/// A group replica's state.
pub struct ReplicaCore {
    cluster: Arc<Cluster>,
    rule: Arc<dyn PartitionRule>,
    renderer: Arc<dyn Renderer>,
    key: SigningKey,
    me: NodeId,
    group: GroupId,
    view: View,
    prepares: OrderedVerifier<Prepare>,
    commits: OrderedVerifier<Commit>,
    book: OrderBook,
    agreements: BTreeMap<u64, Agreement>,
    to_warrant: VecDeque<u64>,
    /// The PREPARE whose COMMIT our USIG is warranting. Kept here, not looked up in
    /// `agreements`: the agreement may be decided (by f+1 peers) while the warrant is made, and
    /// the COMMIT must still go out, or peers would wait forever for its counter.
    warranting: Option<Prepare>,
    awaiting: BTreeMap<u64, Awaiting>,
    replies: BTreeMap<ClientId, Reply>,
    /// Our COMMITs by our warrant counter, and that counter by PREPARE counter.
    sent: BTreeMap<u64, Commit>,
    sent_for: BTreeMap<u64, u64>,
    /// Timer ticks so far.
    ticks: u64,
}

impl ReplicaCore {
    /// A replica `me` of `cluster`, in view 0.
    pub fn new(
        cluster: Arc<Cluster>,
        rule: Arc<dyn PartitionRule>,
        renderer: Arc<dyn Renderer>,
        key: SigningKey,
        me: NodeId,
    ) -> Option<Self> {
        let group = GroupId(cluster.config.replicas.iter().find(|r| r.id == me.0)?.group);
        let directory = cluster.directory.clone();
        Some(ReplicaCore {
            book: OrderBook::new(&cluster),
            cluster,
            rule,
            renderer,
            key,
            me,
            group,
            view: View(0),
            prepares: OrderedVerifier::new(directory.clone(), DEFAULT_WINDOW),
            commits: OrderedVerifier::new(directory, DEFAULT_WINDOW),
            agreements: BTreeMap::new(),
            to_warrant: VecDeque::new(),
            warranting: None,
            awaiting: BTreeMap::new(),
            replies: BTreeMap::new(),
            sent: BTreeMap::new(),
            sent_for: BTreeMap::new(),
            ticks: 0,
        })
    }

    /// The primary this replica follows (its current view's).
    pub fn primary(&self) -> NodeId {
        self.primary_of(self.view)
    }

    /// Peers of the group whose COMMITs we hold out of order behind a missing counter.
    pub fn commit_gaps(&self) -> usize {
        self.cluster
            .members(self.group)
            .filter(|r| r.id != self.me.0)
            .filter_map(|r| self.cluster.usig_of(NodeId(r.id)))
            .filter(|&usig| self.commits.missing(usig).is_some())
            .count()
    }

    /// Agreements not yet decided: zero once the cluster is idle (anything else would be
    /// fetched again on every retry and kept forever).
    pub fn open_agreements(&self) -> usize {
        self.agreements.len()
    }

    /// The group this replica belongs to.
    pub fn group(&self) -> GroupId {
        self.group
    }

    /// The primary of a view: the candidates take turns.
    fn primary_of(&self, view: View) -> NodeId {
        let candidates = &self.cluster.config.primaries;
        NodeId(candidates[(view.0 % candidates.len() as u64) as usize].id)
    }

    fn f(&self) -> usize {
        self.cluster.config.f
    }

    /// A PREPARE from the primary (or carried by a peer's COMMIT).
    pub fn on_prepare(&mut self, prepare: Prepare) -> Result<Vec<Action>, Reject> {
        if prepare.view != self.view || prepare.primary != self.primary_of(self.view) {
            return Err(Reject::WrongView);
        }
        // Before the warrant is looked at: a PREPARE of an earlier configuration epoch (whose
        // USIG epochs and counters started over) must not reach the ordered verifier.
        if prepare.config_epoch != self.cluster.epoch() {
            return Err(Reject::WrongEpoch);
        }
        let primary = self.usig(prepare.primary)?;
        let digest = MessageDigest::of(&prepare.own_warranted_bytes());
        let ui = prepare.ui.clone();
        let delivered = match self.prepares.offer(primary, digest, &ui, prepare) {
            Ok(d) => d,
            // A PREPARE we already processed, e.g. carried again by a peer's COMMIT.
            Err(VerifyError::Replay { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(Reject::Warrant(e)),
        };
        let mut actions = Vec::new();
        for d in delivered {
            self.ordered(d.counter, d.payload);
        }
        if let Some(missing) = self.prepares.missing(primary) {
            actions.push(Action::FetchPrepares(missing));
        }
        actions.extend(self.next_warrant());
        actions.extend(self.try_accept_all());
        Ok(actions)
    }

    /// Derives the order for a PREPARE delivered in counter order; queues our COMMIT if our
    /// group has work in it.
    fn ordered(&mut self, counter: u64, prepare: Prepare) {
        let ordered = self.book.order(&self.cluster, self.rule.as_ref(), &prepare);
        let mine: Vec<Execution> = ordered
            .into_iter()
            .filter(|(g, _)| *g == self.group)
            .map(|(_, e)| e)
            .collect();
        if mine.is_empty() {
            return;
        }
        let digest = prepare.digest();
        let agreement = self.agreements.entry(counter).or_insert_with(|| Agreement {
            digest,
            executions: None,
            prepare: prepare.clone(),
            committed: BTreeSet::new(),
            accepted: false,
            asked: self.ticks,
        });
        agreement.executions = Some(mine);
        self.to_warrant.push_back(counter);
    }

    /// Starts warranting our next COMMIT if the USIG is free.
    fn next_warrant(&mut self) -> Vec<Action> {
        if self.warranting.is_some() {
            return Vec::new();
        }
        let Some(counter) = self.to_warrant.pop_front() else {
            return Vec::new();
        };
        let Some(agreement) = self.agreements.get(&counter) else {
            return Vec::new();
        };
        let bytes = Commit::warranted_bytes(self.view, self.me, &agreement.prepare);
        self.warranting = Some(agreement.prepare.clone());
        vec![Action::Warrant { bytes }]
    }

    /// Our USIG warranted the COMMIT in flight.
    pub fn warranted(&mut self, ui: UniqueWarrant) -> Vec<Action> {
        let Some(prepare) = self.warranting.take() else {
            return Vec::new();
        };
        let counter = prepare.ui.counter;
        let commit = Commit {
            view: self.view,
            replica: self.me,
            prepare,
            ui,
        };
        if let Some(agreement) = self.agreements.get_mut(&counter) {
            agreement.committed.insert(self.me);
        }
        self.sent_for.insert(counter, commit.ui.counter);
        self.sent.insert(commit.ui.counter, commit.clone());
        while self.sent.len() > KEEP_COMMITS {
            if let Some((_, old)) = self.sent.pop_first() {
                self.sent_for.remove(&old.prepare.ui.counter);
            }
        }
        let mut actions = vec![Action::SendCommit {
            to: None,
            commit: Box::new(commit),
        }];
        actions.extend(self.next_warrant());
        actions.extend(self.try_accept_all());
        actions
    }

    /// A COMMIT from a peer.
    pub fn on_commit(&mut self, commit: Commit) -> Result<Vec<Action>, Reject> {
        if commit.prepare.config_epoch != self.cluster.epoch() {
            return Err(Reject::WrongEpoch);
        }
        if commit.view != self.view {
            return Err(Reject::WrongView);
        }
        if !self
            .cluster
            .members(self.group)
            .any(|r| r.id == commit.replica.0)
        {
            return Err(Reject::NotMember);
        }
        let sender = self.usig(commit.replica)?;
        let digest = MessageDigest::of(&Commit::warranted_bytes(
            commit.view,
            commit.replica,
            &commit.prepare,
        ));
        let ui = commit.ui.clone();
        let delivered = self
            .commits
            .offer(sender, digest, &ui, commit)
            .map_err(Reject::Warrant)?;
        let mut actions = Vec::new();
        for d in delivered {
            let commit = d.payload;
            let counter = commit.prepare.ui.counter;
            let prepare_digest = commit.prepare.digest();
            // The PREPARE may reach us first through this COMMIT (MinBFT). Usually we ordered it
            // already: then skip verifying its warrant again (the costliest step here).
            let primary_next = self
                .cluster
                .usig_of(commit.prepare.primary)
                .and_then(|p| self.prepares.expected(p));
            let seen = primary_next.is_some_and(|(epoch, next)| {
                commit.prepare.ui.epoch == epoch && commit.prepare.ui.counter < next
            });
            let ordered_here = if seen {
                Ok(Vec::new())
            } else {
                self.on_prepare(commit.prepare.clone())
            };
            match ordered_here {
                Ok(more) => actions.extend(more),
                Err(Reject::Warrant(VerifyError::Replay { .. })) => {}
                Err(e) => return Err(e),
            }
            // A PREPARE we ordered has its agreement already, unless it had no work for our
            // group or was decided since: a late COMMIT must not start a new agreement that
            // would never complete (and be fetched again forever).
            let ordered = self
                .cluster
                .usig_of(commit.prepare.primary)
                .and_then(|p| self.prepares.expected(p))
                .is_some_and(|(_, next)| counter < next);
            if ordered && !self.agreements.contains_key(&counter) {
                continue;
            }
            let agreement = self.agreements.entry(counter).or_insert_with(|| Agreement {
                digest: prepare_digest,
                executions: None,
                prepare: commit.prepare.clone(),
                committed: BTreeSet::new(),
                accepted: false,
                asked: self.ticks,
            });
            if agreement.digest == prepare_digest {
                agreement.committed.insert(commit.replica);
            }
        }
        actions.extend(self.try_accept_all());
        Ok(actions)
    }

    /// Accepts every PREPARE with f+1 matching COMMITs that this replica has ordered.
    fn try_accept_all(&mut self) -> Vec<Action> {
        let quorum = self.f() + 1;
        let mut actions = Vec::new();
        for (&counter, agreement) in self.agreements.iter_mut() {
            if agreement.accepted || agreement.committed.len() < quorum {
                continue;
            }
            if let Some(executions) = &agreement.executions {
                agreement.accepted = true;
                actions.push(Action::Persist {
                    counter,
                    executions: executions.clone(),
                });
            }
        }
        actions
    }

    /// The decision for `counter` is durable: send it to the database nodes.
    pub fn persisted(&mut self, counter: u64) -> Vec<Action> {
        let Some(agreement) = self.agreements.remove(&counter) else {
            return Vec::new();
        };
        let executions = agreement.executions.unwrap_or_default();
        for e in &executions {
            self.awaiting.insert(
                e.order,
                Awaiting {
                    execution: e.clone(),
                    votes: BTreeMap::new(),
                    results: BTreeMap::new(),
                    replied: false,
                    sent: self.ticks,
                    resends: 0,
                },
            );
        }
        while self.awaiting.len() > KEEP_DECIDED {
            self.awaiting.pop_first();
        }
        vec![Action::SendCommitDb {
            to: None,
            commit_db: self.commit_db(executions),
        }]
    }

    fn commit_db(&self, executions: Vec<Execution>) -> CommitDb {
        CommitDb {
            config_epoch: self.cluster.epoch(),
            group: self.group,
            replica: self.me,
            executions,
            signature: Signature([0; 64]),
        }
        .sign(&self.key)
    }

    /// Results from a database node.
    pub fn on_reply_commit_db(&mut self, reply: ReplyCommitDb) -> Result<Vec<Action>, Reject> {
        let is_db = self
            .cluster
            .config
            .db_nodes
            .iter()
            .any(|d| d.id == reply.db_node.0);
        let key = self.cluster.node_key(reply.db_node).filter(|_| is_db);
        if !key.is_some_and(|k| reply.verify(k)) {
            return Err(Reject::BadSignature);
        }
        let quorum = self.f() + 1;
        let db_nodes = self.cluster.config.db_nodes.len();
        let mut pages = Vec::new();
        for (order, result) in reply.results {
            let Some(awaiting) = self.awaiting.get_mut(&order) else {
                continue;
            };
            let digest = MessageDigest::of(&result);
            if awaiting.votes.insert(reply.db_node, digest).is_some() {
                continue;
            }
            awaiting.results.entry(digest).or_insert(result);
            let agreeing = awaiting.votes.values().filter(|d| **d == digest).count();
            if agreeing >= quorum && !awaiting.replied {
                awaiting.replied = true;
                pages.push((
                    awaiting.execution.request.clone(),
                    awaiting.results[&digest].clone(),
                ));
            }
            // Kept until every database node answered, so that a lagging one still gets it.
            if awaiting.votes.len() == db_nodes {
                self.awaiting.remove(&order);
            }
        }
        Ok(pages
            .into_iter()
            .map(|(request, result)| Action::SendReply(self.reply(&request, &result)))
            .collect())
    }

    fn reply(&mut self, request: &Request, result: &[u8]) -> Reply {
        let reply = Reply {
            view: self.view,
            group: self.group,
            replica: self.me,
            client: request.client,
            timestamp: request.timestamp,
            page: self.renderer.render(request, result),
            signature: Signature([0; 64]),
        }
        .sign(&self.key);
        let newer = self
            .replies
            .get(&request.client)
            .is_none_or(|cached| cached.timestamp < request.timestamp);
        if newer {
            self.replies.insert(request.client, reply.clone());
        }
        reply
    }

    /// A client's request reached us directly: re-send the cached reply if it is a retransmission.
    pub fn on_request(&mut self, request: &Request) -> Vec<Action> {
        match self.replies.get(&request.client) {
            Some(reply) if reply.timestamp == request.timestamp => {
                vec![Action::SendReply(reply.clone())]
            }
            _ => Vec::new(),
        }
    }

    /// A peer asks for COMMITs it lost.
    pub fn on_fetch_commits(
        &self,
        from: NodeId,
        warrants: Option<RangeInclusive<u64>>,
        prepares: &[u64],
    ) -> Vec<Action> {
        let by_warrant = warrants
            .into_iter()
            .flat_map(|range| self.sent.range(range).map(|(_, c)| c));
        let by_prepare = prepares
            .iter()
            .filter_map(|p| self.sent_for.get(p).and_then(|w| self.sent.get(w)));
        by_warrant
            .chain(by_prepare)
            .map(|commit| Action::SendCommit {
                to: Some(from),
                commit: Box::new(commit.clone()),
            })
            .collect()
    }

    /// A timer tick: ask again for what we miss, and re-send decisions to database nodes that
    /// have not answered.
    pub fn on_tick(&mut self) -> Vec<Action> {
        self.ticks += 1;
        let now = self.ticks;
        let mut actions = Vec::new();
        if let Some(primary) = self.cluster.usig_of(self.primary_of(self.view)) {
            if let Some(missing) = self.prepares.missing(primary) {
                actions.push(Action::FetchPrepares(missing));
            }
        }
        let mut short = Vec::new();
        for (&counter, agreement) in self.agreements.iter_mut() {
            if !agreement.accepted && now - agreement.asked >= RETRY_TICKS {
                agreement.asked = now;
                short.push(counter);
            }
        }
        let peers: Vec<NodeId> = self
            .cluster
            .members(self.group)
            .map(|r| NodeId(r.id))
            .filter(|&id| id != self.me)
            .collect();
        for from in peers {
            let warrants = self
                .cluster
                .usig_of(from)
                .and_then(|usig| self.commits.missing(usig));
            if warrants.is_some() || !short.is_empty() {
                actions.push(Action::FetchCommits {
                    from,
                    warrants,
                    prepares: short.clone(),
                });
            }
        }
        let stale: Vec<u64> = self
            .awaiting
            .iter()
            .filter(|(_, a)| now - a.sent >= RETRY_TICKS << a.resends.min(MAX_BACKOFF))
            .map(|(&order, _)| order)
            .collect();
        for db in self.cluster.config.db_nodes.iter().map(|d| NodeId(d.id)) {
            let missing: Vec<Execution> = stale
                .iter()
                .filter_map(|order| self.awaiting.get(order))
                .filter(|a| !a.votes.contains_key(&db))
                .map(|a| a.execution.clone())
                .collect();
            if !missing.is_empty() {
                actions.push(Action::SendCommitDb {
                    to: Some(db),
                    commit_db: self.commit_db(missing),
                });
            }
        }
        for order in stale {
            if let Some(a) = self.awaiting.get_mut(&order) {
                a.sent = now;
                a.resends += 1;
            }
        }
        actions
    }

    fn usig(&self, node: NodeId) -> Result<UsigId, Reject> {
        self.cluster.usig_of(node).ok_or(Reject::BadSignature)
    }
}
