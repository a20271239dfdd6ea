//! One simulated run: a primary, every group's replicas, the database nodes and closed-loop
//! clients, over the faulty network.

use crate::model::ModelDb;
use crate::net::{Faults, Network, Rng};
use dbvote::voter::{VoterAction, VoterCore};
use group::core::{Action as ReplicaAction, ReplicaCore, Retained};
use group::render::Renderer;
use primary::core::{Action as PrimaryAction, PrimaryCore};
use proto::config::Cluster;
use proto::testing::{client_key, node_key, usig, usig_in_epoch, TestCluster};
use proto::{
    ClientId, GroupId, Message, NodeId, PartitionId, PartitionRule, Proposal, RecoveryRequest,
    Reply, Request, Signature, View,
};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::sync::Arc;
use usig::soft::SoftUsig;
use usig::{UniqueWarrant, Usig};

/// Byzantine behaviour to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// This replica sends every client a different page.
    WrongPage(NodeId),
    /// This replica sends the database nodes a different operation.
    WrongCommitDb(NodeId),
    /// This database node answers with a wrong result.
    WrongResult(NodeId),
    /// This replica also sends COMMIT-DBs naming a group it does not belong to.
    OutsiderCommitDb(NodeId),
    /// A rogue client floods requests with bad signatures.
    ForgedClient,
    /// The network re-injects old client requests at random times.
    ReplayRequests,
    /// The primary of view 0 crashes at this time (it processes and sends nothing after).
    CrashPrimary(u64),
    /// From this time on the primary of view 0 orders nothing new (it still answers fetches).
    StallPrimary(u64),
    /// The primary of view 0 never sends PREPAREs to this group's replicas, nor answers them.
    WithholdFromGroup(GroupId),
    /// The primary of view 0 warrants a PREPARE it never sends, every few batches.
    SkipCounters,
    /// The primary of view 0 sends each PREPARE to a random subset of the replicas and answers
    /// no fetches.
    PrepareToSubset,
    /// This replica crashes at `crash` (losing everything it did not send) and restarts at
    /// `restart` (never if `u64::MAX`), with its USIG going on, or in a new epoch as after a
    /// reboot; it then recovers through a JOIN and a peer's state.
    RestartReplica {
        replica: NodeId,
        crash: u64,
        restart: u64,
        new_epoch: bool,
    },
    /// This replica sends recovering peers a state whose running digest before the stable slot
    /// is forged (as if to make them follow another PREPARE).
    ForgeRecoveryState(NodeId),
    /// The network cuts this replica off from everyone from `from` to `until` (it keeps its
    /// state and its USIG).
    Isolate {
        replica: NodeId,
        from: u64,
        until: u64,
    },
}

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub seed: u64,
    pub f: usize,
    pub groups: u32,
    pub partitions: u32,
    pub clients: u64,
    pub requests_per_client: u64,
    /// Share of requests that touch two partitions.
    pub multi_partition: f64,
    pub max_batch: usize,
    pub loss: f64,
    pub duplicate: f64,
    pub max_delay: u64,
    pub faults: Vec<Fault>,
    /// Give up after this much simulated time.
    pub max_time: u64,
}

impl Scenario {
    /// f = 1, two groups, four partitions, a lossy, duplicating, reordering network.
    pub fn lossy(seed: u64) -> Self {
        Scenario {
            seed,
            f: 1,
            groups: 2,
            partitions: 4,
            clients: 4,
            requests_per_client: 6,
            multi_partition: 0.2,
            max_batch: 4,
            loss: 0.05,
            duplicate: 0.05,
            max_delay: 10,
            faults: Vec::new(),
            max_time: 200_000,
        }
    }
}

/// What happened.
#[derive(Debug)]
pub struct Outcome {
    /// Requests that got f+1 matching replies, per client.
    pub completed: BTreeMap<ClientId, u64>,
    /// State of each correct database node.
    pub db_states: BTreeMap<NodeId, Vec<(PartitionId, u64, [u8; 32])>>,
    /// Most times any order really executed on any correct node (must be 1).
    pub max_executions: u32,
    /// Orders executed by the first correct node.
    pub executed_orders: usize,
    /// Pages clients accepted, by (client, timestamp): every one must be the correct page.
    pub accepted_pages: BTreeMap<(ClientId, u64), Vec<u8>>,
    /// The pages a correct replica renders from a correct node's results.
    pub correct_pages: BTreeMap<(ClientId, u64), Vec<u8>>,
    pub rejected_messages: u64,
    /// Undecided agreements left at replicas at the end (after the grace period).
    pub open_agreements: usize,
    /// Peers' COMMIT counters that replicas still miss at the end: a warrant that was made but
    /// never sent leaves a hole the peers can never fill.
    pub commit_gaps: usize,
    /// The view each replica ended in.
    pub views: BTreeMap<NodeId, View>,
    /// The most history any replica kept at the end.
    pub retained: Retained,
    /// Replicas up at the end and still recovering after a restart.
    pub recovering: usize,
    /// Recoveries completed (restarted replicas, and replicas that fell too far behind).
    pub recoveries: usize,
    /// Recovery states a recovering replica refused.
    pub refused_states: u64,
    pub time: u64,
}

/// The partitions of a simulated operation: its first byte counts them, the next bytes list them.
pub struct SimRule;

impl PartitionRule for SimRule {
    fn partitions(&self, op: &[u8]) -> Option<Vec<PartitionId>> {
        let (&k, rest) = op.split_first()?;
        let mut p: Vec<PartitionId> = rest
            .get(..usize::from(k))?
            .iter()
            .map(|&b| b.into())
            .collect();
        p.sort_unstable();
        p.dedup();
        (!p.is_empty()).then_some(p)
    }
}

/// What the simulation's groups render.
pub struct SimRenderer;

impl Renderer for SimRenderer {
    fn render(&self, request: &Request, result: &[u8]) -> Vec<u8> {
        format!(
            "<p>client {} request {}: {}</p>",
            request.client.0,
            request.timestamp,
            result
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        )
        .into_bytes()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Addr {
    Primary(NodeId),
    Replica(NodeId),
    Db(NodeId),
    Client(ClientId),
}

// Nearly every message is the large variant, so boxing it would only add an allocation each.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
enum Msg {
    Proto(Message),
    /// The replica's USIG thread answers its warrant request (of the replica's run with this
    /// number: a restarted replica never gets its earlier run's warrants).
    Warranted(u32, UniqueWarrant),
    FetchPrepares(NodeId, RangeInclusive<u64>),
    FetchCommits(NodeId, Option<RangeInclusive<u64>>, Vec<u64>),
}

struct Client {
    id: ClientId,
    next_ts: u64,
    outstanding: Option<(Request, u64)>,
    votes: BTreeMap<(GroupId, Vec<u8>), BTreeSet<NodeId>>,
    done: u64,
    sent: Vec<Request>,
}

struct World {
    scenario: Scenario,
    cluster: Arc<Cluster>,
    rng: Rng,
    net: Network<Addr, Msg>,
    now: u64,
    primaries: BTreeMap<NodeId, (PrimaryCore, SoftUsig)>,
    /// Counters the faulty primary warranted and never sent.
    skipped: BTreeSet<u64>,
    replicas: BTreeMap<NodeId, (ReplicaCore, SoftUsig)>,
    /// How often each replica restarted.
    runs: BTreeMap<NodeId, u32>,
    refused_states: u64,
    voters: BTreeMap<NodeId, (VoterCore, ModelDb)>,
    clients: Vec<Client>,
    accepted: BTreeMap<(ClientId, u64), Vec<u8>>,
    rejected: u64,
}

const TICK: u64 = 50;
/// Simulated time after the last client finished, for lagging nodes to catch up.
const GRACE: u64 = 2_000;
const CLIENT_TIMEOUT: u64 = 200;
/// Ticks a replica lets a request wait before it asks for a view change.
const VIEW_TIMEOUT_TICKS: u64 = 20;
/// The primary of view 0, the one the primary faults apply to.
const FIRST_PRIMARY: NodeId = NodeId(0);

/// Runs a scenario to completion (every client done) or to its time limit.
pub fn run(scenario: Scenario) -> Outcome {
    let mut w = World::new(scenario);
    for i in 0..w.clients.len() {
        w.next_request(i);
    }
    let mut next_tick = TICK;
    let mut finished_at = None;
    while w.now < w.scenario.max_time && finished_at.is_none_or(|t| w.now < t + GRACE) {
        if finished_at.is_none() && w.all_done() {
            finished_at = Some(w.now);
        }
        match w.net.peek_time() {
            Some(at) if at <= next_tick => {
                let Some((at, envelope)) = w.net.pop() else {
                    break;
                };
                w.now = at;
                w.deliver(envelope.to, envelope.message);
            }
            _ => {
                w.now = next_tick;
                next_tick += TICK;
                w.tick();
            }
        }
    }
    w.outcome()
}

impl World {
    fn new(scenario: Scenario) -> Self {
        let test = TestCluster::new(
            scenario.f,
            scenario.groups,
            scenario.partitions,
            scenario.clients,
        );
        let cluster = Arc::new(test.cluster);
        let rule: Arc<dyn PartitionRule> = Arc::new(SimRule);
        let renderer: Arc<dyn Renderer> = Arc::new(SimRenderer);
        let replicas = cluster
            .config
            .replicas
            .iter()
            .map(|r| {
                let id = NodeId(r.id);
                let core = ReplicaCore::new(
                    cluster.clone(),
                    rule.clone(),
                    renderer.clone(),
                    node_key(id),
                    id,
                    VIEW_TIMEOUT_TICKS,
                )
                .expect("replica in the cluster");
                (id, (core, usig(id)))
            })
            .collect();
        let voters = cluster
            .config
            .db_nodes
            .iter()
            .map(|d| {
                let id = NodeId(d.id);
                let last = vec![0; scenario.partitions as usize];
                (
                    id,
                    (
                        VoterCore::new(cluster.clone(), rule.clone(), node_key(id), id, last),
                        ModelDb::default(),
                    ),
                )
            })
            .collect();
        let clients = (1..=scenario.clients)
            .map(|c| Client {
                id: ClientId(c),
                next_ts: 1,
                outstanding: None,
                votes: BTreeMap::new(),
                done: 0,
                sent: Vec::new(),
            })
            .collect();
        World {
            rng: Rng::new(scenario.seed),
            net: Network::new(Faults {
                loss: scenario.loss,
                duplicate: scenario.duplicate,
                max_delay: scenario.max_delay,
            }),
            now: 0,
            primaries: cluster
                .config
                .primaries
                .iter()
                .map(|p| {
                    let id = NodeId(p.id);
                    let core = PrimaryCore::new(
                        cluster.clone(),
                        rule.clone(),
                        id,
                        View(0),
                        scenario.max_batch,
                    );
                    (id, (core, usig(id)))
                })
                .collect(),
            skipped: BTreeSet::new(),
            replicas,
            runs: BTreeMap::new(),
            refused_states: 0,
            voters,
            clients,
            accepted: BTreeMap::new(),
            rejected: 0,
            cluster,
            scenario,
        }
    }

    fn faulty(&self, fault: Fault) -> bool {
        self.scenario.faults.contains(&fault)
    }

    fn send(&mut self, to: Addr, msg: Msg) {
        self.net.send(&mut self.rng, self.now, to, msg);
    }

    fn all_done(&self) -> bool {
        self.clients
            .iter()
            .all(|c| c.done >= self.scenario.requests_per_client)
    }

    /// The client's next request: one partition, or two with the scenario's probability.
    fn next_request(&mut self, i: usize) {
        if self.clients[i].done >= self.scenario.requests_per_client {
            return;
        }
        let parts = self.scenario.partitions as u64;
        let first = self.rng.between(0, parts - 1) as u8;
        let mut ps = vec![first];
        if self.rng.chance(self.scenario.multi_partition) && parts > 1 {
            ps.push(((u64::from(first) + self.rng.between(1, parts - 1)) % parts) as u8);
        }
        let client = &mut self.clients[i];
        let ts = client.next_ts;
        client.next_ts += 1;
        let mut op = vec![ps.len() as u8];
        op.extend_from_slice(&ps);
        op.extend_from_slice(&client.id.0.to_be_bytes());
        op.extend_from_slice(&ts.to_be_bytes());
        let partitions = SimRule.partitions(&op).unwrap_or_default();
        let request = Request::signed(client.id, ts, partitions, op, &client_key(client.id));
        client.outstanding = Some((request.clone(), self.now));
        client.votes.clear();
        client.sent.push(request.clone());
        self.broadcast_request(request);
    }

    fn broadcast_request(&mut self, request: Request) {
        let candidates: Vec<NodeId> = self.primaries.keys().copied().collect();
        for id in candidates {
            self.send(
                Addr::Primary(id),
                Msg::Proto(Message::Request(request.clone())),
            );
        }
        let ids: Vec<NodeId> = self.replicas.keys().copied().collect();
        for id in ids {
            self.send(
                Addr::Replica(id),
                Msg::Proto(Message::Request(request.clone())),
            );
        }
    }

    fn tick(&mut self) {
        let ids: Vec<NodeId> = self.primaries.keys().copied().collect();
        let ids: Vec<NodeId> = ids.into_iter().filter(|&id| !self.crashed(id)).collect();
        for id in ids {
            let actions = self
                .primaries
                .get_mut(&id)
                .map(|(core, _)| core.on_tick())
                .unwrap_or_default();
            self.primary_actions(id, actions);
        }
        self.restart_replicas();
        let ids: Vec<NodeId> = self.replicas.keys().copied().collect();
        let ids: Vec<NodeId> = ids.into_iter().filter(|&id| !self.down(id)).collect();
        for id in ids {
            let actions = self
                .replicas
                .get_mut(&id)
                .map(|(r, _)| r.on_tick())
                .unwrap_or_default();
            self.replica_actions(id, actions);
        }
        for i in 0..self.clients.len() {
            let stale = self.clients[i]
                .outstanding
                .as_ref()
                .filter(|(_, at)| self.now - at >= CLIENT_TIMEOUT)
                .map(|(r, _)| r.clone());
            if let Some(request) = stale {
                self.clients[i].outstanding = Some((request.clone(), self.now));
                self.broadcast_request(request);
            }
        }
        if self.faulty(Fault::ForgedClient) {
            let mut forged = Request::signed(
                ClientId(1),
                1_000_000 + self.now,
                vec![0],
                vec![1, 0],
                &client_key(ClientId(2)),
            );
            forged.signature = Signature([7; 64]);
            self.broadcast_request(forged);
        }
        if self.faulty(Fault::ReplayRequests) {
            let old: Vec<Request> = self
                .clients
                .iter()
                .filter_map(|c| c.sent.first().cloned())
                .collect();
            for r in old {
                self.broadcast_request(r);
            }
        }
    }

    /// Restarts the replicas whose restart time came: a fresh core that recovers.
    fn restart_replicas(&mut self) {
        let due: Vec<(NodeId, bool)> = self
            .scenario
            .faults
            .iter()
            .filter_map(|f| match *f {
                Fault::RestartReplica {
                    replica,
                    restart,
                    new_epoch,
                    ..
                } if self.now >= restart && !self.runs.contains_key(&replica) => {
                    Some((replica, new_epoch))
                }
                _ => None,
            })
            .collect();
        for (id, new_epoch) in due {
            self.runs.insert(id, 1);
            let Some((core, usig)) = self.replicas.get_mut(&id) else {
                continue;
            };
            *core = ReplicaCore::new(
                self.cluster.clone(),
                Arc::new(SimRule),
                Arc::new(SimRenderer),
                node_key(id),
                id,
                VIEW_TIMEOUT_TICKS,
            )
            .expect("replica in the cluster");
            if new_epoch {
                *usig = usig_in_epoch(id, usig::Epoch(2));
            }
            let actions = core.recover();
            self.replica_actions(id, actions);
        }
    }

    /// Whether the network cuts this replica off now.
    fn isolated(&self, id: NodeId) -> bool {
        self.scenario.faults.iter().any(|f| {
            matches!(*f, Fault::Isolate { replica, from, until }
                if replica == id && from <= self.now && self.now < until)
        })
    }

    /// Whether this replica is crashed now.
    fn down(&self, id: NodeId) -> bool {
        self.scenario.faults.iter().any(|f| {
            matches!(*f, Fault::RestartReplica { replica, crash, restart, .. }
                if replica == id && crash <= self.now && self.now < restart)
        })
    }

    fn deliver(&mut self, to: Addr, msg: Msg) {
        match (to, msg) {
            (Addr::Primary(id), _) if self.crashed(id) => {}
            (Addr::Replica(id), _) if self.down(id) => {}
            (Addr::Replica(id), Msg::Proto(_) | Msg::FetchCommits(..)) if self.isolated(id) => {}
            (Addr::Primary(id), Msg::Proto(Message::Join(join))) => {
                let Some((core, _)) = self.primaries.get_mut(&id) else {
                    return;
                };
                match core.on_join(join) {
                    Ok(actions) => self.primary_actions(id, actions),
                    Err(_) => self.rejected += 1,
                }
            }
            (Addr::Primary(id), Msg::Proto(Message::Request(r))) => {
                if id == FIRST_PRIMARY && self.stalled() {
                    return;
                }
                let Some((core, _)) = self.primaries.get_mut(&id) else {
                    return;
                };
                match core.on_request(r) {
                    Ok(actions) => self.primary_actions(id, actions),
                    Err(_) => self.rejected += 1,
                }
            }
            (Addr::Primary(id), Msg::Proto(Message::ViewChange(vc))) => {
                let Some((core, _)) = self.primaries.get_mut(&id) else {
                    return;
                };
                match core.on_view_change(vc) {
                    Ok(actions) => self.primary_actions(id, actions),
                    Err(_) => self.rejected += 1,
                }
            }
            (Addr::Primary(_), Msg::Proto(Message::ReqViewChange(_))) => {}
            (Addr::Primary(id), Msg::FetchPrepares(from, range)) => {
                if id == FIRST_PRIMARY && !self.answers(from) {
                    return;
                }
                let Some((core, _)) = self.primaries.get(&id) else {
                    return;
                };
                let proposals: Vec<Proposal> = core
                    .on_fetch(range)
                    .into_iter()
                    .filter(|p| id != FIRST_PRIMARY || !self.skipped.contains(&p.ui().counter))
                    .collect();
                for p in proposals {
                    self.send(Addr::Replica(from), Msg::Proto(p.into_message()));
                }
            }
            (Addr::Replica(id), Msg::Warranted(run, ui)) => {
                if run != self.runs.get(&id).copied().unwrap_or(0) {
                    return;
                }
                if let Some((core, _)) = self.replicas.get_mut(&id) {
                    let actions = core.warranted(ui);
                    self.replica_actions(id, actions);
                }
            }
            (Addr::Replica(id), Msg::FetchCommits(from, warrants, prepares)) => {
                let actions = self
                    .replicas
                    .get(&id)
                    .map(|(core, _)| core.on_fetch_commits(from, warrants, &prepares))
                    .unwrap_or_default();
                self.replica_actions(id, actions);
            }
            (Addr::Replica(id), Msg::Proto(m)) => {
                let Some((core, _)) = self.replicas.get_mut(&id) else {
                    return;
                };
                let result = match m {
                    Message::Prepare(p) => core.on_proposal(Proposal::Prepare(p)).map_err(|_| ()),
                    Message::NewView(nv) => core.on_proposal(Proposal::NewView(nv)).map_err(|_| ()),
                    Message::Commit(c) => core.on_commit(c).map_err(|_| ()),
                    Message::ViewChange(vc) => core.on_view_change(vc).map_err(|_| ()),
                    Message::ReqViewChange(r) => core.on_req_view_change(&r).map_err(|_| ()),
                    Message::Checkpoint(c) => core.on_checkpoint(c).map_err(|_| ()),
                    Message::ReplyCommitDb(r) => core.on_reply_commit_db(r).map_err(|_| ()),
                    Message::Request(r) => Ok(core.on_request(&r)),
                    Message::RecoveryRequest(r) => {
                        let signed = self
                            .cluster
                            .node_key(r.replica)
                            .is_some_and(|k| r.verify(k));
                        if signed {
                            Ok(core.on_recovery_request(r.replica))
                        } else {
                            Err(())
                        }
                    }
                    Message::RecoveryState(state) => {
                        let result = core.on_recovery_state(*state);
                        if result.is_err() {
                            self.refused_states += 1;
                        }
                        result.map_err(|_| ())
                    }
                    _ => Err(()),
                };
                match result {
                    Ok(actions) => self.replica_actions(id, actions),
                    Err(()) => self.rejected += 1,
                }
            }
            (Addr::Db(id), Msg::Proto(Message::CommitDb(c))) => {
                let Some((voter, _)) = self.voters.get_mut(&id) else {
                    return;
                };
                match voter.on_commit_db(&c) {
                    Ok((actions, malformed)) => {
                        self.rejected += malformed as u64;
                        self.voter_actions(id, actions);
                    }
                    Err(_) => self.rejected += 1,
                }
            }
            (Addr::Client(c), Msg::Proto(Message::Reply(r))) => self.client_reply(c, r),
            _ => self.rejected += 1,
        }
    }

    fn primary_actions(&mut self, id: NodeId, mut actions: Vec<PrimaryAction>) {
        while let Some(action) = actions.pop() {
            match action {
                PrimaryAction::Warrant { bytes } => {
                    let Some((core, usig)) = self.primaries.get_mut(&id) else {
                        return;
                    };
                    let ui = usig.create_ui(&bytes).expect("soft usig");
                    actions.extend(core.warranted(ui));
                }
                PrimaryAction::Broadcast(proposal) => self.broadcast_proposal(id, proposal),
            }
        }
    }

    /// Sends a candidate's PREPARE or NEW-VIEW to every replica, as the scenario's faults of
    /// the first primary allow.
    fn broadcast_proposal(&mut self, from: NodeId, proposal: Proposal) {
        if from == FIRST_PRIMARY && self.faulty(Fault::SkipCounters) {
            // Every fifth counter is warranted and never sent: a hole no fetch can fill.
            let counter = proposal.ui().counter;
            if counter.is_multiple_of(5) {
                self.skipped.insert(counter);
                return;
            }
        }
        let ids: Vec<NodeId> = self.replicas.keys().copied().collect();
        for id in ids {
            if from == FIRST_PRIMARY {
                if !self.answers(id) {
                    continue;
                }
                if self.faulty(Fault::PrepareToSubset) && self.rng.chance(0.5) {
                    continue;
                }
            }
            self.send(
                Addr::Replica(id),
                Msg::Proto(proposal.clone().into_message()),
            );
        }
    }

    fn crashed(&self, id: NodeId) -> bool {
        id == FIRST_PRIMARY
            && self
                .scenario
                .faults
                .iter()
                .any(|f| matches!(f, Fault::CrashPrimary(at) if self.now >= *at))
    }

    fn stalled(&self) -> bool {
        self.scenario
            .faults
            .iter()
            .any(|f| matches!(f, Fault::StallPrimary(at) if self.now >= *at))
    }

    /// Whether the first primary sends to (and answers) this replica.
    fn answers(&self, replica: NodeId) -> bool {
        let group = self.group_of(replica);
        !self.faulty(Fault::WithholdFromGroup(group)) && !self.faulty(Fault::PrepareToSubset)
    }

    fn replica_actions(&mut self, id: NodeId, actions: Vec<ReplicaAction>) {
        let mut queue: std::collections::VecDeque<ReplicaAction> = actions.into();
        while let Some(action) = queue.pop_front() {
            // An isolated replica's USIG and disk still work; its messages go nowhere.
            let local = matches!(
                action,
                ReplicaAction::Warrant { .. } | ReplicaAction::Persist { .. }
            );
            if self.isolated(id) && !local {
                continue;
            }
            match action {
                ReplicaAction::Warrant { bytes } => {
                    let Some((_, usig)) = self.replicas.get_mut(&id) else {
                        return;
                    };
                    let ui = usig.create_ui(&bytes).expect("soft usig");
                    // As in the driver, the warrant comes back later: meanwhile the agreement
                    // may be decided by the peers' COMMITs.
                    let run = self.runs.get(&id).copied().unwrap_or(0);
                    self.net.local(
                        &mut self.rng,
                        self.now,
                        Addr::Replica(id),
                        Msg::Warranted(run, ui),
                    );
                }
                ReplicaAction::SendCommit { to, commit } => {
                    let group = self.group_of(id);
                    for peer in self.members(group) {
                        if peer != id && to.is_none_or(|to| to == peer) {
                            let m = Message::Commit((*commit).clone());
                            self.send(Addr::Replica(peer), Msg::Proto(m));
                        }
                    }
                }
                ReplicaAction::FetchPrepares { from, counters } => {
                    self.send(Addr::Primary(from), Msg::FetchPrepares(id, counters))
                }
                ReplicaAction::ForwardRequest(r) => {
                    let primary = self.primary_of_replica(id);
                    self.send(Addr::Primary(primary), Msg::Proto(Message::Request(r)))
                }
                ReplicaAction::FetchCommits {
                    from,
                    warrants,
                    slots,
                } => self.send(Addr::Replica(from), Msg::FetchCommits(id, warrants, slots)),
                ReplicaAction::SendViewChange { to, view_change } => {
                    let m = Message::ViewChange(*view_change);
                    let mut targets: Vec<Addr> = Vec::new();
                    if to.is_none() {
                        targets.extend(self.primaries.keys().map(|&p| Addr::Primary(p)));
                    }
                    let group = self.group_of(id);
                    for peer in self.members(group) {
                        if peer != id && to.is_none_or(|to| to == peer) {
                            targets.push(Addr::Replica(peer));
                        }
                    }
                    for to in targets {
                        self.send(to, Msg::Proto(m.clone()));
                    }
                }
                ReplicaAction::SendCheckpoint { to, checkpoint } => {
                    let m = Message::Checkpoint(checkpoint);
                    let ids: Vec<NodeId> = self.replicas.keys().copied().collect();
                    for peer in ids.into_iter().filter(|&p| p != id) {
                        if to.is_none_or(|to| to == peer) {
                            self.send(Addr::Replica(peer), Msg::Proto(m.clone()));
                        }
                    }
                }
                ReplicaAction::SendEpochClose(close) => {
                    let m = Message::EpochClose(close);
                    let ids: Vec<NodeId> = self.replicas.keys().copied().collect();
                    for peer in ids.into_iter().filter(|&p| p != id) {
                        self.send(Addr::Replica(peer), Msg::Proto(m.clone()));
                    }
                }
                ReplicaAction::EpochClosed => {}
                ReplicaAction::SendReqViewChange(req) => {
                    let m = Message::ReqViewChange(req);
                    let ids: Vec<NodeId> = self.replicas.keys().copied().collect();
                    for peer in ids.into_iter().filter(|&p| p != id) {
                        self.send(Addr::Replica(peer), Msg::Proto(m.clone()));
                    }
                }
                ReplicaAction::Persist { slot, .. } => {
                    if let Some((core, _)) = self.replicas.get_mut(&id) {
                        queue.extend(core.persisted(slot));
                    }
                }
                ReplicaAction::SendCommitDb {
                    to,
                    commit_db: mut cdb,
                } => {
                    if self.faulty(Fault::WrongCommitDb(id)) {
                        for e in &mut cdb.executions {
                            e.request.operation.push(0xee);
                        }
                        cdb = cdb.sign(&node_key(id));
                    }
                    if self.faulty(Fault::OutsiderCommitDb(id)) {
                        let mut outsider = cdb.clone();
                        outsider.group = GroupId((cdb.group.0 + 1) % self.scenario.groups);
                        let outsider = outsider.sign(&node_key(id));
                        self.send_to_dbs(to, Message::CommitDb(outsider));
                    }
                    self.send_to_dbs(to, Message::CommitDb(cdb));
                }
                ReplicaAction::SendJoin(join) => {
                    let candidates: Vec<NodeId> = self.primaries.keys().copied().collect();
                    for p in candidates {
                        self.send(Addr::Primary(p), Msg::Proto(Message::Join(join.clone())));
                    }
                }
                ReplicaAction::RequestRecovery => {
                    let request = RecoveryRequest {
                        replica: id,
                        signature: Signature([0; 64]),
                    }
                    .sign(&node_key(id));
                    let group = self.group_of(id);
                    for peer in self.members(group).into_iter().filter(|&p| p != id) {
                        let m = Message::RecoveryRequest(request.clone());
                        self.send(Addr::Replica(peer), Msg::Proto(m));
                    }
                }
                ReplicaAction::SendRecoveryState { to, mut state } => {
                    if self.faulty(Fault::ForgeRecoveryState(id)) {
                        state.witness = usig::MessageDigest::of(b"forged");
                        *state = state.clone().sign(&node_key(id));
                    }
                    self.send(Addr::Replica(to), Msg::Proto(Message::RecoveryState(state)));
                }
                ReplicaAction::SendReply(mut reply) => {
                    if self.faulty(Fault::WrongPage(id)) {
                        reply.page = b"<p>you have been hacked</p>".to_vec();
                        reply = reply.sign(&node_key(id));
                    }
                    self.send(
                        Addr::Client(reply.client),
                        Msg::Proto(Message::Reply(reply)),
                    );
                }
            }
        }
    }

    fn voter_actions(&mut self, id: NodeId, actions: Vec<VoterAction>) {
        let mut queue: std::collections::VecDeque<VoterAction> = actions.into();
        while let Some(action) = queue.pop_front() {
            match action {
                VoterAction::Execute(batch) => {
                    let Some((voter, db)) = self.voters.get_mut(&id) else {
                        return;
                    };
                    for e in batch {
                        let result = db.execute(&e);
                        queue.extend(voter.executed(e.order, result));
                    }
                }
                VoterAction::Reply { group, mut reply } => {
                    if self.faulty(Fault::WrongResult(id)) {
                        for (_, r) in &mut reply.results {
                            r.push(0xbd);
                        }
                        reply = reply.sign(&node_key(id));
                    }
                    for member in self.members(group) {
                        self.send(
                            Addr::Replica(member),
                            Msg::Proto(Message::ReplyCommitDb(reply.clone())),
                        );
                    }
                }
                // The simulation does not tick voters, so they never stall and nobody asks
                // them for their state (state transfer is tested in dbvote and across
                // processes).
                VoterAction::ToDbNodes { .. }
                | VoterAction::Snapshot { .. }
                | VoterAction::Install { .. } => {}
            }
        }
    }

    fn send_to_dbs(&mut self, to: Option<NodeId>, m: Message) {
        let ids: Vec<NodeId> = self.voters.keys().copied().collect();
        for db in ids.into_iter().filter(|db| to.is_none_or(|to| to == *db)) {
            self.send(Addr::Db(db), Msg::Proto(m.clone()));
        }
    }

    fn client_reply(&mut self, client: ClientId, reply: Reply) {
        let f = self.cluster.config.f;
        let Some(i) = self.clients.iter().position(|c| c.id == client) else {
            return;
        };
        let Some((request, _)) = self.clients[i].outstanding.clone() else {
            return;
        };
        let member = self
            .cluster
            .members(reply.group)
            .any(|r| r.id == reply.replica.0);
        let signed = self
            .cluster
            .node_key(reply.replica)
            .is_some_and(|k| reply.verify(k));
        if !member || !signed || reply.client != client || reply.timestamp != request.timestamp {
            self.rejected += 1;
            return;
        }
        let voters = self.clients[i]
            .votes
            .entry((reply.group, reply.page.clone()))
            .or_default();
        voters.insert(reply.replica);
        if voters.len() > f {
            self.accepted
                .insert((client, request.timestamp), reply.page);
            self.clients[i].outstanding = None;
            self.clients[i].done += 1;
            self.next_request(i);
        }
    }

    fn group_of(&self, id: NodeId) -> GroupId {
        self.cluster.group_of_replica(id).unwrap_or(GroupId(0))
    }

    fn primary_of_replica(&self, id: NodeId) -> NodeId {
        self.replicas
            .get(&id)
            .map_or(FIRST_PRIMARY, |(core, _)| core.primary())
    }

    fn members(&self, group: GroupId) -> Vec<NodeId> {
        self.cluster.members(group).map(|r| NodeId(r.id)).collect()
    }

    fn outcome(self) -> Outcome {
        let faulty_dbs: BTreeSet<NodeId> = self
            .scenario
            .faults
            .iter()
            .filter_map(|f| match f {
                Fault::WrongResult(id) => Some(*id),
                _ => None,
            })
            .collect();
        let correct = || {
            self.voters
                .iter()
                .filter(|(id, _)| !faulty_dbs.contains(id))
        };
        let up = || {
            self.replicas
                .iter()
                .filter(|(id, _)| !self.down(**id))
                .map(|(_, r)| r)
        };
        Outcome {
            completed: self.clients.iter().map(|c| (c.id, c.done)).collect(),
            db_states: correct().map(|(id, (_, db))| (*id, db.state())).collect(),
            max_executions: correct()
                .flat_map(|(_, (_, db))| db.executions.values().copied())
                .max()
                .unwrap_or(0),
            executed_orders: correct()
                .next()
                .map_or(0, |(_, (_, db))| db.executions.len()),
            correct_pages: correct_pages(&self.clients, correct().next().map(|(_, (_, db))| db)),
            accepted_pages: self.accepted.clone(),
            rejected_messages: self.rejected,
            open_agreements: up().map(|(r, _)| r.open_agreements()).sum(),
            commit_gaps: up().map(|(r, _)| r.commit_gaps()).sum(),
            views: self
                .replicas
                .iter()
                .filter(|(id, _)| !self.down(**id))
                .map(|(id, (r, _))| (*id, r.view()))
                .collect(),
            recovering: up().filter(|(r, _)| r.is_recovering()).count(),
            recoveries: up().map(|(r, _)| r.recoveries() as usize).sum(),
            refused_states: self.refused_states,
            retained: up()
                .map(|(r, _)| r.retained())
                .fold(Retained::default(), |a, b| Retained {
                    prepares: a.prepares.max(b.prepares),
                    log: a.log.max(b.log),
                    decided: a.decided.max(b.decided),
                    checkpoints: a.checkpoints.max(b.checkpoints),
                    stable: a.stable.max(b.stable),
                }),
            time: self.now,
        }
    }
}

fn correct_pages(clients: &[Client], db: Option<&ModelDb>) -> BTreeMap<(ClientId, u64), Vec<u8>> {
    let Some(db) = db else { return BTreeMap::new() };
    clients
        .iter()
        .flat_map(|c| c.sent.iter())
        .filter_map(|r| {
            let result = db.by_request.get(&(r.client, r.timestamp))?;
            Some(((r.client, r.timestamp), SimRenderer.render(r, result)))
        })
        .collect()
}
