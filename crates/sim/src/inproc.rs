//! The ordering path alone, in one process and on one thread: the view's primary
//! ([`PrimaryCore`]), one group of 2f+1 replicas ([`ReplicaCore`]) and 2f+1 database voters
//! ([`VoterCore`] with a trivial executor), over one in-memory FIFO queue, with closed-loop
//! clients that send pre-signed requests. A node takes the frames waiting for it in bursts of up
//! to 64, client requests, REPLY-COMMIT-DBs and COMMIT-DBs first and together, as the node
//! drivers' intake does.
//!
//! What is real: every message between nodes is encoded and decoded with [`Envelope`] as the
//! node drivers do (a message to several nodes is encoded once, as `Peers::to_nodes` does);
//! PREPAREs and COMMITs carry soft-USIG warrants made and checked by the cores; client requests
//! are Ed25519-signed and checked; COMMIT-DBs, REPLY-COMMIT-DBs, DECIDEDs and REPLYs go on
//! authenticated links, each frame tagged with HMAC-SHA256 by its sender and checked by its
//! receiver as the transport does (the handshake, once per connection, is left out), and a
//! REPLY counts only if it names the replica whose link it came on; the
//! clients share one endpoint, as a load driver's do: the requests it has ready after taking a
//! burst of REPLYs go to the primary and to the group's replicas in one REQUESTS frame each, and
//! each replica sends the REPLYs of one turn to it in one REPLIES frame, as the client library
//! and the node driver do.
//!
//! What is not: no network, no disk (a decision is acknowledged as persisted at once, as in the
//! simulation), no database (a voter's executor answers each order with its number), no timer
//! ticks (nothing is lost, so nothing needs repair), and only the view's primary gets requests
//! (a standby candidate refuses them before any check). Warrants are made when their turn in
//! the queue comes, as the drivers' USIG threads answer later: requests that arrive meanwhile
//! wait at the primary and go in the next PREPARE, which is how batches form.
//!
//! [`Through::Decisions`] stops the path at the ordering itself, the terms other MinBFT
//! implementations are measured on (no execution): a request is done once f+1 replicas decided
//! it with the same order and body (their COMMIT-DBs, encoded once each as the driver does, go
//! to no database node), and no voter, REPLY-COMMIT-DB, page or REPLY takes part.
//!
//! `cargo bench -p cloudbft-sim --bench ordering` measures it; docs/performance.md has figures.

use crate::run::{replica_core, rule, SimRule};
use dbvote::voter::{StoredResult, VoterAction, VoterCore};
use group::core::{Action as ReplicaAction, ReplicaCore};
use primary::core::{Action as PrimaryAction, PrimaryCore};
use proto::testing::{client_key, endpoint_key, node_key, usig, TestCluster};
use proto::{
    ClientId, CommitDb, Envelope, Execution, GroupId, Message, NodeId, PartitionId, PartitionRule,
    Proposal, Request, View,
};
use ring::hmac;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use usig::soft::SoftUsig;
use usig::Usig;

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    pub f: usize,
    /// Partitions of the one group (the voters execute a chain per partition).
    pub partitions: u32,
    /// Closed-loop clients: requests in flight.
    pub clients: u64,
    pub requests_per_client: u64,
    /// Most requests per PREPARE.
    pub max_batch: usize,
    /// The primary's pipeline depth (`primary::pacing`).
    pub pipeline: usize,
    /// Requests the clients' endpoint signs together. Above 1 every client shares the
    /// endpoint's key (as `cloudbft keygen` sets up the identities of one load driver), and
    /// each round of requests (one per client) is signed in batches of this many, about what
    /// the REPLYs of one PREPARE release at once; 1: every client signs alone with its own key.
    pub sign_batch: usize,
    /// Where a request counts as done.
    pub through: Through,
}

/// Where a request's path ends in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Through {
    /// f+1 matching REPLYs at the client: ordering, execution by the voters, pages.
    Replies,
    /// f+1 replicas decided it with the same order and body: the ordering alone.
    Decisions,
}

impl Options {
    /// f = 1, 256 requests in flight, batches of at most 64 (the primary's default).
    pub fn standard(requests_per_client: u64) -> Self {
        Options {
            f: 1,
            partitions: 4,
            clients: 256,
            requests_per_client,
            max_batch: 64,
            pipeline: primary::pacing::DEFAULT_DEPTH,
            sign_batch: 64,
            through: Through::Replies,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Requests that got f+1 matching REPLYs (with [`Through::Decisions`], f+1 replicas'
    /// matching decisions).
    pub completed: u64,
    /// PREPAREs broadcast and the client requests they carried.
    pub prepares: u64,
    pub ordered: u64,
    /// REPLYs that reached clients (after the run drained: every replica's).
    pub replies: u64,
    /// REPLYs whose page differed from the one f+1 replicas agreed on, or that did not come on
    /// the link of the replica they name.
    pub bad_replies: u64,
    /// Frames a node refused or could not decode, and core refusals.
    pub rejected: u64,
    /// Actions of the repair, view-change and recovery paths, which a loss-free run with a
    /// correct primary never needs.
    pub unexpected: u64,
    /// Per request, by (client, timestamp): the replicas whose REPLY matched the accepted page
    /// (with [`Through::Decisions`], whose decision matched the accepted one).
    pub matching: BTreeMap<(ClientId, u64), usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Addr {
    Primary,
    Replica(usize),
    Db(usize),
    /// The clients' endpoint (a load driver): one address for every client, as
    /// `[[client]] addr` gives the identities of one process.
    Endpoint,
}

/// Frames a node's driver takes from its transport at once (crates/node's intake).
const BURST: usize = 64;

enum Event {
    /// A frame reached this node's inbox: if it is still there, the node takes it and what
    /// followed it, up to [`BURST`] frames, as its driver does.
    Frame(Addr),
    /// A node's USIG turn: warrant these bytes and hand the warrant to its core.
    Warrant(Addr, Vec<u8>),
}

struct Client {
    id: ClientId,
    /// Pre-signed requests, sent in order.
    requests: VecDeque<Request>,
    outstanding: Option<Request>,
    /// Votes on the outstanding request, by outcome, each with the replicas that cast it.
    votes: Vec<(Outcome, BTreeSet<NodeId>)>,
    /// The accepted outcome of each request, to check the votes that come after it.
    accepted: BTreeMap<u64, Outcome>,
}

/// What a replica vouches for about a request: the page of its REPLY, or with
/// [`Through::Decisions`] the execution it decided.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Page(Vec<u8>),
    Decision(Execution),
}

struct Replica {
    core: ReplicaCore,
    usig: SoftUsig,
}

struct Db {
    voter: VoterCore,
    /// Where the latest orders ran, for lookups (a result is made from its order alone). Older
    /// ones are forgotten, as a database node forgets old results: a lookup of one finds none.
    ran_at: BTreeMap<u64, Vec<(PartitionId, u64)>>,
}

/// How many orders' positions a [`Db`] keeps.
const KEEP_RAN_AT: usize = 16_384;

/// The primary, one group, its database nodes and the clients, ready to run.
pub struct Harness {
    options: Options,
    primary: PrimaryCore,
    primary_usig: SoftUsig,
    replicas: Vec<Replica>,
    replica_ids: Vec<NodeId>,
    dbs: Vec<Db>,
    db_ids: Vec<NodeId>,
    clients: Vec<Client>,
    /// Requests the endpoint has ready, sent together when it has taken its burst.
    ready: Vec<Request>,
    queue: VecDeque<Event>,
    /// Each node's frames not taken yet.
    inboxes: BTreeMap<Addr, VecDeque<Frame>>,
    /// The key of every authenticated link (one for all: the cost is what is measured).
    link_key: hmac::Key,
    report: Report,
}

/// A frame in a node's inbox: the encoded envelope, shared by the receivers of a broadcast as
/// the driver shares a frame encoded once, and for a frame on an authenticated link its sender
/// and tag.
struct Frame {
    envelope: Rc<[u8]>,
    link: Option<(NodeId, hmac::Tag)>,
}

impl Harness {
    /// Builds the cluster (one group, f, the partitions) and signs every client's requests.
    pub fn new(options: Options) -> Self {
        let layout = TestCluster::new(options.f, 1, options.partitions, options.clients);
        let layout = if options.sign_batch > 1 {
            layout.one_endpoint()
        } else {
            layout
        };
        let cluster = Arc::new(layout.cluster);
        let primary_id = NodeId(cluster.config.primaries[0].id);
        let primary = PrimaryCore::new(
            cluster.clone(),
            rule(),
            primary_id,
            View(0),
            options.max_batch,
        )
        .with_pipeline(options.pipeline);
        let replica_ids: Vec<NodeId> = cluster.members(GroupId(0)).map(|r| NodeId(r.id)).collect();
        let replicas = replica_ids
            .iter()
            .map(|&id| Replica {
                core: replica_core(&cluster, id),
                usig: usig(id),
            })
            .collect();
        let db_ids: Vec<NodeId> = cluster
            .config
            .db_nodes
            .iter()
            .map(|d| NodeId(d.id))
            .collect();
        let dbs = db_ids
            .iter()
            .map(|&id| Db {
                voter: VoterCore::new(
                    cluster.clone(),
                    rule(),
                    node_key(id),
                    id,
                    vec![0; options.partitions as usize],
                ),
                ran_at: BTreeMap::new(),
            })
            .collect();
        let mut requests: Vec<Vec<Request>> = vec![Vec::new(); options.clients as usize];
        for ts in 1..=options.requests_per_client {
            let round: Vec<Request> = (1..=options.clients)
                .map(|c| {
                    let partition = ((c + ts) % u64::from(options.partitions)) as u8;
                    let mut op = vec![1, partition];
                    op.extend_from_slice(&c.to_be_bytes());
                    op.extend_from_slice(&ts.to_be_bytes());
                    let partitions = SimRule.partitions(&op).unwrap_or_default();
                    Request::unsigned(ClientId(c), ts, partitions, op)
                })
                .collect();
            let signed: Vec<Request> = if options.sign_batch > 1 {
                round
                    .chunks(options.sign_batch)
                    .flat_map(|chunk| Request::sign_all(chunk.to_vec(), &endpoint_key()))
                    .collect()
            } else {
                round
                    .into_iter()
                    .map(|r| {
                        let key = client_key(r.client);
                        Request::sign_all(vec![r], &key).remove(0)
                    })
                    .collect()
            };
            for (queue, request) in requests.iter_mut().zip(signed) {
                queue.push(request);
            }
        }
        let clients = (1..=options.clients)
            .zip(requests)
            .map(|(c, requests)| Client {
                id: ClientId(c),
                requests: requests.into(),
                outstanding: None,
                votes: Vec::new(),
                accepted: BTreeMap::new(),
            })
            .collect();
        Harness {
            primary,
            primary_usig: usig(primary_id),
            replicas,
            replica_ids,
            dbs,
            db_ids,
            clients,
            queue: VecDeque::new(),
            ready: Vec::new(),
            inboxes: BTreeMap::new(),
            link_key: hmac::Key::new(hmac::HMAC_SHA256, b"cloudbft/inproc/link"),
            report: Report::default(),
            options,
        }
    }

    /// Every request that will be sent.
    pub fn requests(&self) -> u64 {
        self.options.clients * self.options.requests_per_client
    }

    /// Runs until every client is done and every message was delivered.
    pub fn run(mut self) -> Report {
        for i in 0..self.clients.len() {
            self.next_request(i);
        }
        self.send_ready();
        while let Some(event) = self.queue.pop_front() {
            match event {
                Event::Frame(to) => {
                    let inbox = self.inboxes.entry(to).or_default();
                    let burst: Vec<Frame> = inbox.drain(..inbox.len().min(BURST)).collect();
                    if !burst.is_empty() {
                        self.deliver(to, &burst);
                    }
                }
                Event::Warrant(Addr::Primary, bytes) => {
                    let ui = self.primary_usig.create_ui(&bytes).expect("soft usig");
                    let actions = self.primary.warranted(ui);
                    self.primary_actions(actions);
                }
                Event::Warrant(Addr::Replica(i), bytes) => {
                    let r = &mut self.replicas[i];
                    let ui = r.usig.create_ui(&bytes).expect("soft usig");
                    let actions = r.core.warranted(ui);
                    self.replica_actions(i, actions);
                }
                Event::Warrant(..) => unreachable!("only the primary and replicas warrant"),
            }
        }
        self.report
    }

    fn send(&mut self, to: impl IntoIterator<Item = Addr>, message: &Message) {
        self.send_on(None, to, message);
    }

    /// Sends on node `from`'s authenticated links: each frame tagged for its receiver.
    fn send_linked(&mut self, from: NodeId, to: impl IntoIterator<Item = Addr>, message: &Message) {
        self.send_on(Some(from), to, message);
    }

    fn send_on(
        &mut self,
        from: Option<NodeId>,
        to: impl IntoIterator<Item = Addr>,
        message: &Message,
    ) {
        let envelope: Rc<[u8]> = Envelope::encode(message).into();
        for to in to {
            let link = from.map(|from| (from, hmac::sign(&self.link_key, &envelope)));
            let frame = Frame {
                envelope: envelope.clone(),
                link,
            };
            self.inboxes.entry(to).or_default().push_back(frame);
            self.queue.push_back(Event::Frame(to));
        }
    }

    /// A client's next pre-signed request, made ready for [`Harness::send_ready`].
    fn next_request(&mut self, i: usize) {
        let client = &mut self.clients[i];
        client.votes.clear();
        client.outstanding = client.requests.pop_front();
        if let Some(request) = client.outstanding.clone() {
            self.ready.push(request);
        }
    }

    /// The requests made ready since the last call, to the primary and to the group's replicas
    /// in one REQUESTS frame each, as the client library's signer sends those of one round.
    fn send_ready(&mut self) {
        if self.ready.is_empty() {
            return;
        }
        let to: Vec<Addr> = std::iter::once(Addr::Primary)
            .chain((0..self.replicas.len()).map(Addr::Replica))
            .collect();
        let ready = std::mem::take(&mut self.ready);
        self.send(to, &Message::Requests(ready));
    }

    /// A burst of frames for one node: its COMMIT-DBs, client requests and REPLY-COMMIT-DBs
    /// first, each kind together (the requests' signatures checked in one batch), then the
    /// other messages in order, as the node's driver does. A frame whose link tag does not
    /// check is refused, and COMMIT-DBs and REPLY-COMMIT-DBs count only from a link.
    fn deliver(&mut self, to: Addr, burst: &[Frame]) {
        let (mut requests, mut replies, mut others) = (Vec::new(), Vec::new(), Vec::new());
        let (mut commit_dbs, mut endpoint_replies) = (Vec::new(), Vec::new());
        for frame in burst {
            let link = match &frame.link {
                Some((from, tag)) => {
                    if hmac::verify(&self.link_key, &frame.envelope, tag.as_ref()).is_err() {
                        self.report.rejected += 1;
                        continue;
                    }
                    Some(*from)
                }
                None => None,
            };
            match (Envelope::decode(&frame.envelope), link) {
                (Ok(Message::Request(r)), _) => requests.push(r),
                (Ok(Message::Requests(rs)), _) => requests.extend(rs),
                (Ok(Message::ReplyCommitDb(r)), Some(from)) => replies.push((from, r)),
                (Ok(Message::Reply(r)), from) if to == Addr::Endpoint => {
                    endpoint_replies.push((from, r))
                }
                (Ok(Message::Replies(rs)), from) if to == Addr::Endpoint => {
                    endpoint_replies.extend(rs.into_iter().map(|r| (from, r)))
                }
                (Ok(Message::CommitDb(c)), Some(from)) => commit_dbs.push((from, c)),
                (Ok(Message::Decided(d)), Some(from)) if to == Addr::Primary => {
                    match self.primary.on_decided(from, d) {
                        Ok(actions) => self.primary_actions(actions),
                        Err(_) => self.report.rejected += 1,
                    }
                }
                (
                    Ok(Message::ReplyCommitDb(_) | Message::CommitDb(_) | Message::Decided(_)),
                    None,
                )
                | (Err(_), _) => self.report.rejected += 1,
                (Ok(message), _) => others.push(message),
            }
        }
        if let (Addr::Db(i), false) = (to, commit_dbs.is_empty()) {
            for (from, commit_db) in commit_dbs {
                match self.dbs[i].voter.on_commit_db(from, commit_db) {
                    Ok((actions, malformed)) => {
                        self.report.rejected += malformed as u64;
                        self.voter_actions(i, actions);
                    }
                    Err(_) => self.report.rejected += 1,
                }
            }
        } else {
            self.report.unexpected += commit_dbs.len() as u64;
        }
        if !requests.is_empty() {
            self.deliver_requests(to, requests);
        }
        if !replies.is_empty() {
            if let Addr::Replica(i) = to {
                let core = &mut self.replicas[i].core;
                let actions = core.on_reply_commit_dbs(replies);
                self.report.rejected += core.take_refusals().len() as u64;
                self.replica_actions(i, actions);
            } else {
                self.report.unexpected += replies.len() as u64;
            }
        }
        for message in others {
            self.deliver_one(to, message);
        }
        for (from, reply) in endpoint_replies {
            self.client_reply(from, reply);
        }
        if to == Addr::Endpoint {
            self.send_ready();
        }
    }

    fn deliver_requests(&mut self, to: Addr, requests: Vec<Request>) {
        match to {
            Addr::Primary => {
                for result in self.primary.on_requests(requests) {
                    match result {
                        Ok(actions) => self.primary_actions(actions),
                        Err(_) => self.report.rejected += 1,
                    }
                }
            }
            Addr::Replica(i) => {
                let actions = self.replicas[i].core.on_requests(&requests);
                self.replica_actions(i, actions);
            }
            _ => self.report.unexpected += requests.len() as u64,
        }
    }

    fn deliver_one(&mut self, to: Addr, message: Message) {
        match (to, message) {
            (Addr::Replica(i), m) => {
                let core = &mut self.replicas[i].core;
                let result = match m {
                    Message::Prepare(p) => core.on_proposal(Proposal::Prepare(p)),
                    Message::Commit(c) => core.on_commit(c),
                    Message::Checkpoint(c) => core.on_checkpoint(c),
                    _ => {
                        self.report.unexpected += 1;
                        Ok(Vec::new())
                    }
                };
                self.report.rejected += core.take_refusals().len() as u64;
                match result {
                    Ok(actions) => self.replica_actions(i, actions),
                    Err(_) => self.report.rejected += 1,
                }
            }
            _ => self.report.unexpected += 1,
        }
    }

    fn primary_actions(&mut self, actions: Vec<PrimaryAction>) {
        for action in actions {
            match action {
                PrimaryAction::Warrant { bytes } => {
                    self.queue.push_back(Event::Warrant(Addr::Primary, bytes))
                }
                PrimaryAction::Broadcast(proposal) => {
                    if let Proposal::Prepare(p) = &proposal {
                        self.report.prepares += 1;
                        self.report.ordered += p.entries.len() as u64;
                    }
                    let to: Vec<Addr> = (0..self.replicas.len()).map(Addr::Replica).collect();
                    self.send(to, &proposal.into_message());
                }
            }
        }
    }

    fn replica_actions(&mut self, i: usize, actions: Vec<ReplicaAction>) {
        let mut queue: VecDeque<ReplicaAction> = actions.into();
        // REPLYs go to the endpoint together after the turn, as the node driver sends them.
        let mut replies = Vec::new();
        while let Some(action) = queue.pop_front() {
            match action {
                ReplicaAction::Warrant { bytes } => self
                    .queue
                    .push_back(Event::Warrant(Addr::Replica(i), bytes)),
                ReplicaAction::SendCommit { to, commit } => {
                    let mates: Vec<Addr> = (0..self.replicas.len())
                        .filter(|&j| j != i && to.is_none_or(|to| to == self.replica_ids[j]))
                        .map(Addr::Replica)
                        .collect();
                    self.send(mates, &Message::Commit(*commit));
                }
                // No disk: durable at once (the driver's log thread answers after its fsync).
                ReplicaAction::Persist { slot, executions } => {
                    drop(executions);
                    queue.extend(self.replicas[i].core.persisted(slot))
                }
                ReplicaAction::SendCommitDb { to, commit_db }
                    if self.options.through == Through::Decisions =>
                {
                    // A COMMIT-DB to every database node is the decision; one to a single
                    // node is a re-send, which a loss-free run never makes.
                    match to {
                        None => self.decided(i, commit_db),
                        Some(_) => self.report.unexpected += 1,
                    }
                }
                ReplicaAction::SendCommitDb { to, commit_db } => {
                    let dbs: Vec<Addr> = (0..self.dbs.len())
                        .filter(|&j| to.is_none_or(|to| to == self.db_ids[j]))
                        .map(Addr::Db)
                        .collect();
                    let me = self.replica_ids[i];
                    self.send_linked(me, dbs, &Message::CommitDb(commit_db));
                }
                ReplicaAction::SendDecided { decided, .. } => {
                    let me = self.replica_ids[i];
                    self.send_linked(me, [Addr::Primary], &Message::Decided(decided));
                }
                ReplicaAction::SendCheckpoint { to, checkpoint } => {
                    let peers: Vec<Addr> = (0..self.replicas.len())
                        .filter(|&j| j != i && to.is_none_or(|to| to == self.replica_ids[j]))
                        .map(Addr::Replica)
                        .collect();
                    self.send(peers, &Message::Checkpoint(checkpoint));
                }
                ReplicaAction::SendReply(reply) => replies.push(reply),
                ReplicaAction::EpochClosed
                | ReplicaAction::ForwardRequest(_)
                | ReplicaAction::FetchPrepares { .. }
                | ReplicaAction::FetchCommits { .. }
                | ReplicaAction::SendViewChange { .. }
                | ReplicaAction::SendReqViewChange(_)
                | ReplicaAction::SendJoin(_)
                | ReplicaAction::RequestRecovery
                | ReplicaAction::SendRecoveryState { .. }
                | ReplicaAction::SendEpochClose(_) => self.report.unexpected += 1,
            }
        }
        if !replies.is_empty() {
            let me = self.replica_ids[i];
            self.send_linked(me, [Addr::Endpoint], &Message::Replies(replies));
        }
        if self.options.through == Through::Decisions {
            self.send_ready();
        }
    }

    /// [`Through::Decisions`]: replica `i` decided the executions of `commit_db`. Its COMMIT-DB
    /// is encoded, as the driver encodes it once for every database node, and goes nowhere; f+1
    /// replicas with the same execution of a client's outstanding request complete it.
    fn decided(&mut self, i: usize, commit_db: CommitDb) {
        let message = Message::CommitDb(commit_db);
        std::hint::black_box(Envelope::encode(&message));
        let Message::CommitDb(commit_db) = message else {
            unreachable!("built above")
        };
        let me = self.replica_ids[i];
        for execution in commit_db.executions {
            self.client_decision(me, execution);
        }
    }

    /// A replica's decision of a client's request, counted as [`Harness::client_reply`] counts
    /// a REPLY.
    fn client_decision(&mut self, from: NodeId, execution: Execution) {
        let (client, timestamp) = (execution.request.client, execution.request.timestamp);
        self.vote(from, client, timestamp, Outcome::Decision(execution));
    }

    fn voter_actions(&mut self, i: usize, actions: Vec<VoterAction>) {
        let mut queue: VecDeque<VoterAction> = actions.into();
        while let Some(action) = queue.pop_front() {
            match action {
                // The trivial executor: each order's result is its number.
                VoterAction::Execute(chain) => {
                    let db = &mut self.dbs[i];
                    for e in &chain {
                        db.ran_at.insert(e.order, e.positions.clone());
                    }
                    while db.ran_at.len() > KEEP_RAN_AT {
                        db.ran_at.pop_first();
                    }
                    let results = chain
                        .iter()
                        .map(|e| (e.order, e.order.to_be_bytes().to_vec()))
                        .collect();
                    queue.extend(db.voter.executed_all(results));
                }
                VoterAction::LookUp { orders } => {
                    let db = &mut self.dbs[i];
                    let found = orders
                        .iter()
                        .map(|&o| {
                            let stored = db.ran_at.get(&o).map(|positions| StoredResult {
                                positions: positions.clone(),
                                result: o.to_be_bytes().to_vec(),
                            });
                            (o, stored)
                        })
                        .collect();
                    queue.extend(db.voter.looked_up(found).actions);
                }
                VoterAction::Reply { group, reply } => {
                    let members = self.dbs[i].voter.members_of(group);
                    let to: Vec<Addr> = members
                        .iter()
                        .filter_map(|m| self.replica_ids.iter().position(|r| r == m))
                        .map(Addr::Replica)
                        .collect();
                    self.send_linked(self.db_ids[i], to, &Message::ReplyCommitDb(reply));
                }
                VoterAction::ToDbNodes { .. }
                | VoterAction::Snapshot { .. }
                | VoterAction::Install { .. }
                | VoterAction::ForgetResults { .. } => self.report.unexpected += 1,
            }
        }
    }

    /// A REPLY at its client, on the link of `from`: f+1 distinct replicas with the same page
    /// complete the request.
    fn client_reply(&mut self, from: Option<NodeId>, reply: proto::Reply) {
        self.report.replies += 1;
        if from != Some(reply.replica) || !self.replica_ids.contains(&reply.replica) {
            self.report.bad_replies += 1;
            return;
        }
        let (client, timestamp) = (reply.client, reply.timestamp);
        self.vote(reply.replica, client, timestamp, Outcome::Page(reply.page));
    }

    /// Replica `from`'s vote on request `timestamp` of `client`: f+1 distinct replicas with the
    /// same outcome complete the request; a vote after that must match the accepted outcome.
    fn vote(&mut self, from: NodeId, client: ClientId, timestamp: u64, outcome: Outcome) {
        // Clients 1..=n are at 0..n.
        let at = usize::try_from(client.0)
            .ok()
            .and_then(|c| c.checked_sub(1));
        let Some(i) = at.filter(|&i| i < self.clients.len()) else {
            self.report.bad_replies += 1;
            return;
        };
        let f = self.options.f;
        let client = &mut self.clients[i];
        if let Some(accepted) = client.accepted.get(&timestamp) {
            if *accepted == outcome {
                *self
                    .report
                    .matching
                    .entry((client.id, timestamp))
                    .or_default() += 1;
            } else {
                self.report.bad_replies += 1;
            }
            return;
        }
        let current = client.outstanding.as_ref().map(|r| r.timestamp);
        if current != Some(timestamp) {
            self.report.bad_replies += 1;
            return;
        }
        let at = match client.votes.iter().position(|(o, _)| *o == outcome) {
            Some(at) => at,
            None => {
                client.votes.push((outcome, BTreeSet::new()));
                client.votes.len() - 1
            }
        };
        let (outcome, voters) = &mut client.votes[at];
        voters.insert(from);
        if voters.len() > f {
            let matched = voters.len();
            self.report.matching.insert((client.id, timestamp), matched);
            client.accepted.insert(timestamp, outcome.clone());
            self.report.completed += 1;
            self.next_request(i);
        }
    }
}
