//! One simulated run: a primary, every group's replicas, the database nodes and closed-loop
//! clients, over the faulty network.

use crate::model::ModelDb;
use crate::net::{Faults, Network, Rng};
use crate::operator::{Operator, Reconfigured, To, OPERATOR_ADDR};
use dbvote::voter::{VoterAction, VoterCore};
use group::core::{Action as ReplicaAction, ReplicaCore, Retained};
use group::order::OrderBook;
use group::render::Renderer;
use primary::core::{Action as PrimaryAction, PrimaryCore};
use proto::config::{Cluster, ClusterConfig, GroupConfig, ReplicaConfig};
use proto::reconfig::{check_successor, replace_member, EpochStarted, PositionReport};
use proto::testing::{client_key, node_key, usig, usig_in_epoch, warranted_prepare, TestCluster};
use proto::{
    ClientId, CommitDb, ConfigRequest, Configure, Decided, GroupId, Message, NodeId, PartitionId,
    PartitionRule, PrepareEntry, Proposal, RecoveryRequest, Reply, ReplyCommitDb, Request,
    RequestBody, Signature, View,
};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::sync::Arc;
use usig::soft::SoftUsig;
use usig::{MessageDigest, UniqueWarrant, Usig};

/// Byzantine behaviour to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// This replica sends every client a different page, in its own name and, on its own link,
    /// in the name of each of its group's other members (as if f+1 of them had sent it).
    WrongPage(NodeId),
    /// This replica sends the database nodes a different operation.
    WrongCommitDb(NodeId),
    /// This database node answers with a wrong result.
    WrongResult(NodeId),
    /// This database node answers three times: with a wrong result twice (as if one vote could
    /// count twice and reach f+1 alone), then with the right one (a changed vote).
    ChangedResult(NodeId),
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
    /// The primary of view 0 spends a counter on a PREPARE of another view before its third
    /// warrant and every fifth after, and sends it: a null slot of every replica's history, had
    /// they taken it.
    MisnamedPrepares,
    /// The primary of view 0 sends each PREPARE to a random subset of the replicas and answers
    /// no fetches.
    PrepareToSubset,
    /// The primary of view 0 follows each PREPARE with this many PREPAREs of its view that order
    /// nothing (valid, each the next counter), which it keeps for no fetch: histories run far
    /// ahead of what the groups can decide (docs/protocol.md, "Bounded VIEW-CHANGEs").
    RunAhead(u64),
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
    /// The network cuts this replica or primary candidate off from everyone from `from` to
    /// `until` (it keeps its state and its USIG).
    Isolate { node: NodeId, from: u64, until: u64 },
    /// The primary of view 0 crashes when the operator's RECONFIGURE reaches it, before it
    /// orders it.
    CrashPrimaryBeforeReconfigure,
    /// The primary of view 0 orders the RECONFIGURE, sends its PREPARE (only to this group's
    /// replicas if one is named: it crashed halfway through the broadcast) and crashes.
    CrashPrimaryAfterReconfigure(Option<GroupId>),
    /// The primary of view 0 orders a RECONFIGURE the operator did not sign (its own key, and
    /// another shape) instead of the operator's, and then orders nothing more.
    ForgedReconfigure,
    /// The primary of view 0 goes on ordering client requests after the RECONFIGURE it ordered,
    /// in the epoch it closed; in later epochs it orders nothing.
    OrderAfterReconfigure,
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
    /// Share of messages lost, until every client finished (the grace period after loses none).
    pub loss: f64,
    pub duplicate: f64,
    pub max_delay: u64,
    pub faults: Vec<Fault>,
    /// Give up after this much simulated time.
    pub max_time: u64,
    /// Groups' worth of spare replicas, enrolled and serving no group (as `cloudbft keygen
    /// --max-groups` makes them): group `groups + i` of [`TestCluster::operated`].
    pub spare_groups: u32,
    /// Online reconfigurations, one after the other: at `at` (or once the previous one is
    /// done), the operator moves the cluster to `groups`.
    pub reconfigurations: Vec<Reshape>,
}

/// A reconfiguration: the next shape as every group's id and partitions. A group that exists
/// keeps its members, but for those `replace` names; a new one takes the replicas of that group
/// id in the layout (spares, or the members it had before it was removed).
#[derive(Clone, Debug)]
pub struct Reshape {
    pub at: u64,
    pub groups: Vec<(u32, Vec<PartitionId>)>,
    /// Members replaced (a retired or failed machine): (member, newcomer), the newcomer being
    /// the layout's replica 100(g+1)+k on machine mk ([`proto::testing::member`]) for a k the
    /// group does not use, with a fresh USIG.
    pub replace: Vec<(NodeId, NodeId)>,
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
            spare_groups: 0,
            reconfigurations: Vec::new(),
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
    /// The largest VIEW-CHANGE or NEW-VIEW sent, encoded, in bytes.
    pub largest_view_message: usize,
    /// The most PREPAREs any replica held past its stable checkpoint (or its view's NEW-VIEW
    /// slot) at a tick.
    pub most_history: usize,
    /// Replicas up at the end and still recovering after a restart.
    pub recovering: usize,
    /// Recoveries completed (restarted replicas, and replicas that fell too far behind).
    pub recoveries: usize,
    /// Recovery states a recovering replica refused.
    pub refused_states: u64,
    /// Times a replica (of any epoch, since its last restart) refused its view's primary: only
    /// a primary that warrants something other than its view's next PREPARE deserves it.
    pub refused_primaries: u64,
    /// The reconfigurations the operator completed.
    pub reconfigurations: Vec<Reconfigured>,
    /// The configuration epoch each running node (candidate, replica, database node) and each
    /// client ended in.
    pub node_epochs: BTreeMap<NodeId, u64>,
    pub client_epochs: BTreeMap<ClientId, u64>,
    /// Orders that replicas decided under two different assignments (epochs, groups or
    /// executions): must be 0.
    pub decided_twice: usize,
    /// Orders decided outside their epoch's range, or by a group that epoch does not assign
    /// their first partition to: must be 0.
    pub misassigned: usize,
    /// Orders some replica decided that a correct database node never executed: must be 0.
    pub lost: usize,
    /// Pages clients accepted, by the epoch and group whose f+1 replies made them.
    pub served: BTreeMap<(u64, GroupId), u64>,
    /// Warrants asked for by a core after it told the operator where its USIG stands: must be 0.
    pub frozen_warrants: u64,
    /// Client requests a correct primary candidate ordered after the RECONFIGURE of its epoch:
    /// must be 0.
    pub ordered_after_close: u64,
    /// PREPAREs with client requests a Byzantine primary made after the epoch's last one.
    pub prepares_after_close: u64,
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
    fn render(&self, request: &RequestBody, result: &[u8]) -> Vec<u8> {
        format!(
            "<p>client {} request {}: {}</p>",
            request.client.0,
            request.timestamp,
            hex::encode(result)
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
    Operator,
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
    /// A COMMIT-DB on the authenticated link of the replica that sent it (the first field): a
    /// Byzantine node can put anything in the message, but not another node's link.
    CommitDb(NodeId, CommitDb),
    /// A REPLY-COMMIT-DB on the authenticated link of the database node that sent it.
    ReplyCommitDb(NodeId, ReplyCommitDb),
    /// A DECIDED on the authenticated link of the replica that sent it.
    Decided(NodeId, Decided),
    /// A REPLY on the authenticated link of the replica that sent it.
    Reply(NodeId, Reply),
}

struct Client {
    id: ClientId,
    next_ts: u64,
    outstanding: Option<(Request, u64)>,
    /// Replies to the outstanding request, by the epoch and group that sent them and the page.
    votes: BTreeMap<(u64, GroupId, Vec<u8>), BTreeSet<NodeId>>,
    done: u64,
    sent: Vec<Request>,
    /// The configuration requests go under, and the earlier ones (replies of requests ordered
    /// in an earlier epoch are checked against it).
    cluster: Arc<Cluster>,
    earlier: BTreeMap<u64, Arc<Cluster>>,
    /// When the client last asked a node for its configuration.
    asked_at: Option<u64>,
}

/// A group replica of a configuration epoch.
struct ReplicaNode {
    core: ReplicaCore,
    usig: SoftUsig,
    cluster: Arc<Cluster>,
    /// The operator asked where our USIG sequence stands and we have not answered yet.
    asked: bool,
    frozen: bool,
    /// The CONFIGURE that started our epoch (none for the first), for clients that ask.
    started_by: Option<Configure>,
}

/// A primary candidate of a configuration epoch.
struct PrimaryNode {
    core: PrimaryCore,
    usig: SoftUsig,
    cluster: Arc<Cluster>,
    /// The next configuration's shape, from a valid RECONFIGURE of this epoch.
    shape: Option<ClusterConfig>,
    started_by: Option<Configure>,
    /// The operator asked where our USIG sequence stands.
    frozen: bool,
    /// The warrant counter at which our epoch closed (the RECONFIGURE's PREPARE, or the
    /// NEW-VIEW whose cut holds it), as seen by the simulation.
    closed_at: Option<u64>,
}

/// A database node.
struct DbNode {
    voter: VoterCore,
    db: ModelDb,
    cluster: Arc<Cluster>,
}

struct World {
    scenario: Scenario,
    /// The first configuration.
    cluster: Arc<Cluster>,
    rng: Rng,
    net: Network<Addr, Msg>,
    now: u64,
    primaries: BTreeMap<NodeId, PrimaryNode>,
    /// Counters the faulty primary warranted and never sent.
    skipped: BTreeSet<u64>,
    /// Warrants the first primary asked for.
    first_primary_warrants: u64,
    /// The highest counter of the first primary's PREPAREs that PREPAREs running ahead followed
    /// ([`Fault::RunAhead`]): a PREPARE sent again is not followed again.
    ran_ahead_after: u64,
    replicas: BTreeMap<NodeId, ReplicaNode>,
    /// Replicas started for the next epoch, waiting for its CONFIGURE: the shape they were
    /// started with and their fresh USIG.
    newcomers: BTreeMap<NodeId, (Arc<Cluster>, SoftUsig)>,
    /// The USIGs of removed replicas (a re-added one goes on with it).
    retired_usigs: BTreeMap<NodeId, SoftUsig>,
    /// Each replica's core of the epoch it last closed (a removed replica's too), frozen and
    /// kept for [`FINISH_FOR`] after the switch: it re-sends its decisions to database nodes
    /// that have not answered and answers clients' retransmissions from its reply cache.
    finishing: BTreeMap<NodeId, (ReplicaCore, Arc<Cluster>, u64)>,
    /// Every replica of the layout, spares included.
    pool: Vec<ReplicaConfig>,
    operator: Operator,
    /// Reconfigurations not started yet.
    reshapes: std::collections::VecDeque<Reshape>,
    /// When the first primary crashed at a reconfiguration (see the faults).
    crashed_at: Option<u64>,
    /// The first primary stopped ordering (a Byzantine fault at a reconfiguration).
    byzantine_stall: bool,
    /// How often each replica restarted.
    runs: BTreeMap<NodeId, u32>,
    refused_states: u64,
    voters: BTreeMap<NodeId, DbNode>,
    clients: Vec<Client>,
    accepted: BTreeMap<(ClientId, u64), Vec<u8>>,
    served: BTreeMap<(u64, GroupId), u64>,
    /// What replicas decided for each order: the epoch, the group, the digest of the
    /// execution and its first partition.
    decisions: BTreeMap<u64, BTreeSet<(u64, GroupId, MessageDigest, PartitionId)>>,
    frozen_warrants: u64,
    ordered_after_close: u64,
    prepares_after_close: u64,
    rejected: u64,
    largest_view_message: usize,
    most_history: usize,
}

const TICK: u64 = 50;
/// Simulated time after the last client finished, for lagging nodes to catch up over a network
/// that no longer loses messages: longer than a replica's longest wait before it re-sends a
/// COMMIT-DB to a database node that has not answered (4 << 5 ticks of 50), or a node that lost
/// one late in a lossy run is still behind when the run ends (seed 1108 of `many_seeds` in
/// tests/simulation.rs).
const GRACE: u64 = 8_000;
const CLIENT_TIMEOUT: u64 = 200;
/// How long a replica keeps its closed epoch's core after the switch (the node driver's 60 s
/// against its clients' 1 s retransmissions): long enough for every client whose replies were
/// lost to ask again.
const FINISH_FOR: u64 = 60 * CLIENT_TIMEOUT;
/// Ticks a replica lets a request wait before it asks for a view change.
const VIEW_TIMEOUT_TICKS: u64 = 20;
/// The primary of view 0, the one the primary faults apply to.
const FIRST_PRIMARY: NodeId = NodeId(0);

/// Runs a scenario to completion (every client done and every reconfiguration finished) or to
/// its time limit.
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
            // The network stops losing messages (it still duplicates and reorders): a lagging
            // node is owed its catch-up only once messages arrive, as after partial synchrony's
            // global stabilisation time. While it went on losing one in ten, a replica's
            // re-sends of one COMMIT-DB to one database node were all lost six times running
            // (p = 10^-6, met once in 2,200 runs of `many_seeds`: seed 14030), and the seventh
            // came after the end.
            w.net.faults.loss = 0.0;
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

/// The seeds an exploration test runs: `SEEDS` of them from `FIRST_SEED` (20 from 100 unless
/// the environment says otherwise), so that a failure's seed can be replayed alone.
pub fn explored_seeds() -> std::ops::Range<u64> {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let first = var("FIRST_SEED", 100);
    first..first + var("SEEDS", 20)
}

impl World {
    fn new(scenario: Scenario) -> Self {
        let (cluster, spares) = TestCluster::operated(
            scenario.f,
            scenario.groups,
            scenario.spare_groups,
            scenario.partitions,
            scenario.clients,
        );
        let cluster = Arc::new(cluster);
        let pool = cluster
            .config
            .replicas
            .iter()
            .cloned()
            .chain(spares)
            .collect();
        let replicas = cluster
            .config
            .replicas
            .iter()
            .map(|r| {
                let id = NodeId(r.id);
                (id, ReplicaNode::new(&cluster, id, usig(id), None))
            })
            .collect();
        let voters = cluster
            .config
            .db_nodes
            .iter()
            .map(|d| {
                let id = NodeId(d.id);
                let last = vec![0; scenario.partitions as usize];
                let voter = VoterCore::new(cluster.clone(), rule(), node_key(id), id, last);
                let db = ModelDb::default();
                let cluster = cluster.clone();
                (id, DbNode { voter, db, cluster })
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
                cluster: cluster.clone(),
                earlier: BTreeMap::new(),
                asked_at: None,
            })
            .collect();
        let primaries = cluster
            .config
            .primaries
            .iter()
            .map(|p| {
                let id = NodeId(p.id);
                (
                    id,
                    PrimaryNode::new(&cluster, id, usig(id), scenario.max_batch),
                )
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
            primaries,
            skipped: BTreeSet::new(),
            first_primary_warrants: 0,
            ran_ahead_after: 0,
            replicas,
            newcomers: BTreeMap::new(),
            retired_usigs: BTreeMap::new(),
            finishing: BTreeMap::new(),
            pool,
            operator: Operator::new(cluster.clone()),
            reshapes: scenario.reconfigurations.iter().cloned().collect(),
            crashed_at: None,
            byzantine_stall: false,
            runs: BTreeMap::new(),
            refused_states: 0,
            voters,
            clients,
            accepted: BTreeMap::new(),
            served: BTreeMap::new(),
            decisions: BTreeMap::new(),
            frozen_warrants: 0,
            ordered_after_close: 0,
            prepares_after_close: 0,
            rejected: 0,
            largest_view_message: 0,
            most_history: 0,
            cluster,
            scenario,
        }
    }

    fn faulty(&self, fault: Fault) -> bool {
        self.scenario.faults.contains(&fault)
    }

    fn send(&mut self, to: Addr, msg: Msg) {
        if let Msg::Proto(m @ (Message::ViewChange(_) | Message::NewView(_))) = &msg {
            let size = wire::encode(m).map_or(0, |b| b.len());
            self.largest_view_message = self.largest_view_message.max(size);
        }
        self.net.send(&mut self.rng, self.now, to, msg);
    }

    fn all_done(&self) -> bool {
        self.clients
            .iter()
            .all(|c| c.done >= self.scenario.requests_per_client)
            && self.reshapes.is_empty()
            && self.operator.idle()
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
        self.broadcast_request(i, request, false);
    }

    /// Sends a client's request to every primary candidate and every replica of the epoch the
    /// client knows; a retransmission also to the replicas of the earlier epochs it keeps: a
    /// request ordered in an earlier epoch is answered only by the group that served it there,
    /// from its closed epoch's reply cache, and that group may be gone from the current epoch.
    fn broadcast_request(&mut self, i: usize, request: Request, retransmission: bool) {
        let c = &self.clients[i];
        let mut to = destinations(&c.cluster);
        if retransmission {
            for earlier in c.earlier.values() {
                for addr in destinations(earlier) {
                    if !to.contains(&addr) {
                        to.push(addr);
                    }
                }
            }
        }
        for to in to {
            self.send(to, Msg::Proto(Message::Request(request.clone())));
        }
    }

    fn tick(&mut self) {
        // A stalled first primary orders nothing new, not even what it admitted before.
        let stalled = self.stalled() || self.byzantine_stall;
        let ids: Vec<NodeId> = self.primaries.keys().copied().collect();
        let ids: Vec<NodeId> = ids
            .into_iter()
            .filter(|&id| !(self.crashed(id) || id == FIRST_PRIMARY && stalled))
            .collect();
        for id in ids {
            let actions = self
                .primaries
                .get_mut(&id)
                .map(|p| p.core.on_tick())
                .unwrap_or_default();
            self.primary_actions(id, actions);
        }
        self.restart_replicas();
        let ids: Vec<NodeId> = self.replicas.keys().copied().collect();
        let ids: Vec<NodeId> = ids.into_iter().filter(|&id| !self.down(id)).collect();
        for id in ids {
            let Some(r) = self.replicas.get_mut(&id) else {
                continue;
            };
            let held = r.core.retained().prepares;
            self.most_history = self.most_history.max(held);
            let actions = r.core.on_tick();
            self.replica_actions(id, actions);
        }
        let finishing: Vec<NodeId> = self.finishing.keys().copied().collect();
        let finishing: Vec<NodeId> = finishing.into_iter().filter(|&id| !self.down(id)).collect();
        for id in finishing {
            let Some((core, _, until)) = self.finishing.get_mut(&id) else {
                continue;
            };
            if self.now >= *until {
                self.finishing.remove(&id);
                continue;
            }
            let actions = core.on_tick();
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
                self.broadcast_request(i, request, true);
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
            forged.signature.signature = Signature([7; 64]);
            self.broadcast_request(0, forged, false);
        }
        if self.faulty(Fault::ReplayRequests) {
            let old: Vec<(usize, Request)> = self
                .clients
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.sent.first().cloned().map(|r| (i, r)))
                .collect();
            for (i, r) in old {
                self.broadcast_request(i, r, true);
            }
        }
        self.operate();
    }

    /// The operator's turn: starts the next reconfiguration when its time came and the one
    /// before is done, and re-sends what went unanswered.
    fn operate(&mut self) {
        let due = self
            .reshapes
            .front()
            .is_some_and(|r| r.at <= self.now && self.operator.idle());
        let mut out = Vec::new();
        if due {
            let reshape = self.reshapes.pop_front().expect("a due reconfiguration");
            let next = self.next_shape(&reshape);
            self.start_newcomers(&next);
            out = self.operator.reconfigure(self.now, next);
        }
        out.extend(self.operator.on_tick(self.now));
        self.operator_sends(out);
    }

    fn operator_sends(&mut self, out: Vec<(To, Message)>) {
        for (to, m) in out {
            match to {
                To::Clients => {
                    let ids: Vec<ClientId> = self.clients.iter().map(|c| c.id).collect();
                    for c in ids {
                        self.send(Addr::Client(c), Msg::Proto(m.clone()));
                    }
                }
                To::Node(id) => {
                    let addr = self.addr_of(id);
                    self.send(addr, Msg::Proto(m));
                }
            }
        }
    }

    /// A node's address: candidates, database nodes and (running, waiting or spare) replicas.
    fn addr_of(&self, id: NodeId) -> Addr {
        if self.primaries.contains_key(&id) {
            Addr::Primary(id)
        } else if self.voters.contains_key(&id) {
            Addr::Db(id)
        } else {
            Addr::Replica(id)
        }
    }

    /// The next configuration's shape: the current one with the reshape's groups; a group that
    /// exists keeps its members, a new one takes the layout's replicas of that group id (with
    /// the position they stopped at if they served before).
    fn next_shape(&self, reshape: &Reshape) -> ClusterConfig {
        let current = &self.operator.current.config;
        // Replacements first, with the same function as `cloudbft group replace`.
        let mut base = current.clone();
        for &(old, new) in &reshape.replace {
            let group = base
                .replicas
                .iter()
                .find(|r| r.id == old.0)
                .map(|r| r.group)
                .expect("the scenario replaces a member");
            let (spare, enrollment) = proto::testing::member(new.0 / 100 - 1, new.0 % 100);
            base = replace_member(&base, group, old.0, spare, Some(enrollment))
                .expect("the scenario's replacement is valid");
            base.config_epoch = current.config_epoch;
        }
        let current = &base;
        let mut next = current.clone();
        next.config_epoch += 1;
        next.groups = reshape
            .groups
            .iter()
            .map(|(id, partitions)| GroupConfig {
                id: *id,
                partitions: partitions.clone(),
            })
            .collect();
        next.replicas = reshape
            .groups
            .iter()
            .flat_map(|(g, _)| {
                let kept: Vec<ReplicaConfig> = current
                    .replicas
                    .iter()
                    .filter(|r| r.group == *g)
                    .cloned()
                    .collect();
                if !kept.is_empty() {
                    return kept;
                }
                self.pool
                    .iter()
                    .filter(|r| r.group == *g)
                    .map(|r| {
                        let mut r = r.clone();
                        if let Some((start, epoch)) = self.operator.positions.get(&r.id) {
                            r.usig_start = start.clone();
                            r.usig_epoch = Some(*epoch);
                        }
                        r
                    })
                    .collect()
            })
            .collect();
        check_successor(&self.operator.current.config, &next)
            .expect("the scenario's next shape is a valid successor");
        next
    }

    /// Starts the replicas the next shape adds, waiting for its CONFIGURE (`cloudbft replica
    /// --await-epoch`): a spare with a fresh USIG, or a removed replica with its own.
    fn start_newcomers(&mut self, next: &ClusterConfig) {
        let shape = Arc::new(Cluster::new(next.clone()).expect("a valid next shape"));
        for r in &next.replicas {
            let id = NodeId(r.id);
            if self.replicas.contains_key(&id) {
                continue;
            }
            let usig = self.retired_usigs.remove(&id).unwrap_or_else(|| usig(id));
            self.newcomers.insert(id, (shape.clone(), usig));
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
            let Some(node) = self.replicas.get_mut(&id) else {
                continue;
            };
            node.core = replica_core(&node.cluster, id);
            if new_epoch {
                node.usig = usig_in_epoch(id, usig::Epoch(2));
            }
            let actions = node.core.recover();
            self.replica_actions(id, actions);
        }
    }

    /// Whether the network cuts this replica or candidate off now.
    fn isolated(&self, id: NodeId) -> bool {
        self.scenario.faults.iter().any(|f| {
            matches!(*f, Fault::Isolate { node, from, until }
                if node == id && from <= self.now && self.now < until)
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
            (Addr::Primary(id), _) if self.crashed(id) || self.isolated(id) => {}
            (Addr::Replica(id), _) if self.down(id) => {}
            (Addr::Replica(id), Msg::Proto(_) | Msg::FetchCommits(..) | Msg::ReplyCommitDb(..))
                if self.isolated(id) => {}
            (Addr::Operator, Msg::Proto(m)) => {
                let out = self.operator.on_message(self.now, m);
                self.operator_sends(out);
            }
            (Addr::Client(c), Msg::Reply(from, r)) => self.client_reply(c, from, r),
            (Addr::Client(c), Msg::Proto(Message::Configure(configure))) => {
                self.client_configure(c, &configure)
            }
            (Addr::Primary(id), Msg::Proto(m)) => self.primary_message(id, m),
            (Addr::Primary(id), Msg::Decided(from, decided)) => {
                let Some(p) = self.primaries.get_mut(&id) else {
                    return;
                };
                match p.core.on_decided(from, decided) {
                    Ok(actions) => self.primary_actions(id, actions),
                    Err(_) => self.rejected += 1,
                }
            }
            (Addr::Primary(id), Msg::FetchPrepares(from, range)) => {
                if id == FIRST_PRIMARY && !self.answers(from) {
                    return;
                }
                let Some(p) = self.primaries.get(&id) else {
                    return;
                };
                let proposals: Vec<Proposal> = p
                    .core
                    .on_fetch(range)
                    .into_iter()
                    .filter(|p| id != FIRST_PRIMARY || !self.skipped.contains(&p.ui().counter))
                    .collect();
                for p in proposals {
                    self.send(Addr::Replica(from), Msg::Proto(p.into_message()));
                }
            }
            (Addr::Replica(id), Msg::Proto(Message::Configure(configure))) => {
                self.replica_configure(id, &configure)
            }
            (Addr::Replica(id), Msg::Warranted(run, ui)) => {
                if run != self.runs.get(&id).copied().unwrap_or(0) {
                    return;
                }
                if let Some(node) = self.replicas.get_mut(&id) {
                    let actions = node.core.warranted(ui);
                    self.replica_actions(id, actions);
                }
                self.report_position(id);
            }
            (Addr::Replica(id), Msg::FetchCommits(from, warrants, prepares)) => {
                let actions = self
                    .replicas
                    .get(&id)
                    .and_then(|r| r.core.on_fetch_commits(from, warrants, &prepares).ok())
                    .unwrap_or_default();
                self.replica_actions(id, actions);
            }
            (Addr::Replica(id), Msg::Proto(m)) => {
                self.finish_message(id, &m);
                self.replica_message(id, m);
                self.report_position(id);
            }
            (Addr::Replica(id), Msg::ReplyCommitDb(from, reply)) => {
                if let Some((core, _, _)) = self.finishing.get_mut(&id) {
                    let actions = core
                        .on_reply_commit_db(from, reply.clone())
                        .unwrap_or_default();
                    self.replica_actions(id, actions);
                }
                if self.newcomers.contains_key(&id) {
                    self.rejected += 1;
                } else if let Some(node) = self.replicas.get_mut(&id) {
                    match node.core.on_reply_commit_db(from, reply) {
                        Ok(actions) => self.replica_actions(id, actions),
                        Err(_) => self.rejected += 1,
                    }
                }
                self.report_position(id);
            }
            (Addr::Db(id), Msg::CommitDb(from, c)) => {
                let Some(d) = self.voters.get_mut(&id) else {
                    return;
                };
                match d.voter.on_commit_db(from, c) {
                    Ok((actions, malformed)) => {
                        self.rejected += malformed as u64;
                        self.voter_actions(id, actions);
                    }
                    Err(_) => self.rejected += 1,
                }
            }
            (Addr::Db(id), Msg::Proto(Message::Configure(configure))) => {
                self.db_configure(id, &configure)
            }
            (Addr::Db(_), Msg::Proto(Message::PositionRequest(_))) => {}
            _ => self.rejected += 1,
        }
    }

    fn primary_message(&mut self, id: NodeId, m: Message) {
        if id == FIRST_PRIMARY && self.byzantine_first_primary(&m) {
            return;
        }
        let Some(p) = self.primaries.get_mut(&id) else {
            return;
        };
        let result = match m {
            Message::Join(join) => p.core.on_join(join).map_err(drop),
            Message::Request(r) => p.core.on_request(r).map_err(drop),
            Message::ViewChange(vc) => p.core.on_view_change(vc).map_err(drop),
            Message::ReqViewChange(_) | Message::EpochClose(_) => Ok(Vec::new()),
            Message::Reconfigure(r) => {
                let next = r.next.clone();
                let result = p.core.on_reconfigure(r).map_err(drop);
                if result.is_ok() {
                    p.shape = toml::from_str(&next).ok();
                }
                result
            }
            Message::PositionRequest(request) => {
                let signed = p.cluster.operator_key().is_some_and(|k| request.verify(&k));
                if !signed || request.config_epoch != p.cluster.epoch() {
                    Err(())
                } else {
                    p.core.freeze();
                    p.frozen = true;
                    // The primary's warrants are made at once here: nothing is in flight.
                    let report = position_report(id, &p.cluster, p.usig.last(), None);
                    self.send(Addr::Operator, Msg::Proto(report));
                    Ok(Vec::new())
                }
            }
            Message::Configure(configure) => return self.primary_configure(id, &configure),
            Message::ConfigRequest(request) => {
                let answer = answer_config(&p.cluster, p.started_by.as_ref(), &request);
                self.send_answer(request.client, answer);
                Ok(Vec::new())
            }
            _ => Err(()),
        };
        match result {
            Ok(actions) => self.primary_actions(id, actions),
            Err(()) => self.rejected += 1,
        }
    }

    /// The scenario's faults of the first primary at a reconfiguration; true when they took the
    /// message.
    fn byzantine_first_primary(&mut self, m: &Message) -> bool {
        let Some(p) = self.primaries.get(&FIRST_PRIMARY) else {
            return false;
        };
        let first_epoch = p.cluster.epoch() == self.cluster.epoch();
        let (closed, primary) = (p.core.is_closed(), p.core.is_primary());
        match m {
            Message::Request(r) => {
                if self.stalled() || self.byzantine_stall {
                    return true;
                }
                if self.faulty(Fault::OrderAfterReconfigure) && closed && first_epoch {
                    self.order_after_close(r.clone());
                    return true;
                }
                false
            }
            Message::Reconfigure(r) if first_epoch && !closed => {
                if self.faulty(Fault::CrashPrimaryBeforeReconfigure) {
                    self.crashed_at = Some(self.now);
                    return true;
                }
                if self.faulty(Fault::ForgedReconfigure) && primary && !self.byzantine_stall {
                    self.order_forged(r);
                    return true;
                }
                self.byzantine_stall || self.stalled()
            }
            _ => false,
        }
    }

    /// A node's answer to a client's CONFIG-REQUEST, if it has one.
    fn send_answer(&mut self, client: ClientId, answer: Option<Message>) {
        if let Some(m) = answer {
            self.send(Addr::Client(client), Msg::Proto(m));
        }
    }

    /// The operator's CONFIGURE at a candidate: checked against its epoch, then a fresh core
    /// for the next one, which orders the requests the old one held.
    fn primary_configure(&mut self, id: NodeId, configure: &Configure) {
        let Some(p) = self.primaries.get_mut(&id) else {
            return;
        };
        if p.started_by.as_ref() == Some(configure) {
            let ack = acknowledgement(id, &p.cluster);
            return self.send(Addr::Operator, Msg::Proto(ack));
        }
        let checked = configure.check(&p.cluster, p.shape.as_ref(), |book| {
            OrderBook::start_of(book, &p.cluster)
        });
        let Ok(next) = checked else {
            self.rejected += 1;
            return;
        };
        let next = Arc::new(Cluster::new(next).expect("checked"));
        let pending = p.core.take_pending();
        *p = PrimaryNode::new(
            &next,
            id,
            std::mem::replace(&mut p.usig, usig(id)),
            self.scenario.max_batch,
        );
        p.started_by = Some(configure.clone());
        let ack = acknowledgement(id, &next);
        self.send(Addr::Operator, Msg::Proto(ack));
        for request in pending {
            self.primary_message(id, Message::Request(request));
        }
    }

    /// The Byzantine first primary orders a RECONFIGURE the operator did not sign, alone in a
    /// PREPARE, and then stops ordering.
    fn order_forged(&mut self, real: &proto::Reconfigure) {
        let Some(p) = self.primaries.get_mut(&FIRST_PRIMARY) else {
            return;
        };
        let mut shape: ClusterConfig = toml::from_str(&real.next).expect("the operator's shape");
        shape.groups.truncate(1);
        shape.groups[0].partitions = (0..shape.partitions).collect();
        let group = shape.groups[0].id;
        shape.replicas.retain(|r| r.group == group);
        let forged = proto::Reconfigure::new(
            real.config_epoch,
            &shape,
            OPERATOR_ADDR,
            &node_key(FIRST_PRIMARY),
        );
        let bytes = proto::Prepare::warranted_bytes(
            p.core.view(),
            p.cluster.epoch(),
            FIRST_PRIMARY,
            &[],
            &[],
            Some(&forged),
        );
        let ui = p.usig.create_ui(&bytes).expect("soft usig");
        let prepare = proto::Prepare {
            view: p.core.view(),
            config_epoch: p.cluster.epoch(),
            primary: FIRST_PRIMARY,
            entries: Vec::new(),
            joins: Vec::new(),
            reconfigure: Some(Box::new(forged)),
            ui,
        };
        self.byzantine_stall = true;
        self.broadcast_proposal(FIRST_PRIMARY, Proposal::Prepare(prepare));
    }

    /// The Byzantine first primary orders a client request after the RECONFIGURE it ordered,
    /// in the epoch that RECONFIGURE closed.
    fn order_after_close(&mut self, request: Request) {
        let Some(p) = self.primaries.get_mut(&FIRST_PRIMARY) else {
            return;
        };
        let Some(group) = request
            .partitions
            .first()
            .and_then(|&part| p.cluster.group_of(part))
        else {
            return;
        };
        let entries = vec![PrepareEntry { group, request }];
        let (view, epoch) = (p.core.view(), p.cluster.epoch());
        let prepare = warranted_prepare(&mut p.usig, view, epoch, FIRST_PRIMARY, entries);
        self.prepares_after_close += 1;
        self.broadcast_proposal(FIRST_PRIMARY, Proposal::Prepare(prepare));
    }

    /// Results and client retransmissions also go to the replica's core of the epoch it closed,
    /// if that core has work left.
    fn finish_message(&mut self, id: NodeId, m: &Message) {
        let Some((core, _, _)) = self.finishing.get_mut(&id) else {
            return;
        };
        let actions = match m {
            Message::Request(r) => core.on_request(r),
            _ => return,
        };
        self.replica_actions(id, actions);
    }

    fn replica_message(&mut self, id: NodeId, m: Message) {
        if self.newcomers.contains_key(&id) {
            // Waiting for the CONFIGURE of its epoch: everything else is dropped.
            self.rejected += 1;
            return;
        }
        let Some(node) = self.replicas.get_mut(&id) else {
            return;
        };
        let core = &mut node.core;
        let result = match m {
            Message::Prepare(p) => core.on_proposal(Proposal::Prepare(p)).map_err(drop),
            Message::NewView(nv) => core.on_proposal(Proposal::NewView(nv)).map_err(drop),
            Message::Commit(c) => core.on_commit(c).map_err(drop),
            Message::ViewChange(vc) => core.on_view_change(vc).map_err(drop),
            Message::ReqViewChange(r) => core.on_req_view_change(&r).map_err(drop),
            Message::Checkpoint(c) => core.on_checkpoint(c).map_err(drop),
            Message::EpochClose(c) => core.on_epoch_close(c).map_err(drop),
            Message::Request(r) => Ok(core.on_request(&r)),
            Message::RecoveryRequest(r) => {
                let signed = node
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
                result.map_err(drop)
            }
            Message::PositionRequest(request) => {
                let signed = node
                    .cluster
                    .operator_key()
                    .is_some_and(|k| request.verify(&k));
                if signed && request.config_epoch == node.cluster.epoch() {
                    core.freeze();
                    node.frozen = true;
                    node.asked = true;
                    Ok(Vec::new())
                } else {
                    Err(())
                }
            }
            Message::ConfigRequest(request) => {
                let answer = answer_config(&node.cluster, node.started_by.as_ref(), &request);
                self.send_answer(request.client, answer);
                Ok(Vec::new())
            }
            _ => Err(()),
        };
        match result {
            Ok(actions) => self.replica_actions(id, actions),
            Err(()) => self.rejected += 1,
        }
    }

    /// A frozen replica answers the operator once the warrant in flight (if any) is back, with
    /// its USIG's last warrant and the order book of the certified end if it holds it.
    fn report_position(&mut self, id: NodeId) {
        let Some(node) = self.replicas.get_mut(&id) else {
            return;
        };
        if !node.asked || node.core.warrant_in_flight() {
            return;
        }
        node.asked = false;
        let book = node.core.closing_book().cloned();
        let report = position_report(id, &node.cluster, node.usig.last(), book);
        self.send(Addr::Operator, Msg::Proto(report));
    }

    /// The operator's CONFIGURE at a replica: a waiting newcomer checks it against the shape
    /// it was started with; a running replica against its epoch (and the shape its ordered
    /// RECONFIGURE named), then starts the next epoch with a fresh core, or stops if the next
    /// epoch has no place for it.
    fn replica_configure(&mut self, id: NodeId, configure: &Configure) {
        if let Some((shape, _)) = self.newcomers.get(&id) {
            let Ok(next) = configure.check_as_newcomer(shape) else {
                self.rejected += 1;
                return;
            };
            let (_, usig) = self.newcomers.remove(&id).expect("a newcomer");
            let next = Arc::new(Cluster::new(next).expect("checked"));
            return self.start_replica(id, next, usig, configure);
        }
        let Some(node) = self.replicas.get(&id) else {
            return;
        };
        if node.started_by.as_ref() == Some(configure) {
            let ack = acknowledgement(id, &node.cluster);
            return self.send(Addr::Operator, Msg::Proto(ack));
        }
        let shape = node.core.reconfiguration().map(|(_, next)| next);
        let checked = configure.check(&node.cluster, shape, |book| {
            OrderBook::start_of(book, &node.cluster)
        });
        let Ok(next) = checked else {
            self.rejected += 1;
            return;
        };
        let next = Arc::new(Cluster::new(next).expect("checked"));
        let mut node = self.replicas.remove(&id).expect("a running replica");
        // The closed epoch's core finishes its work there, warranting nothing.
        node.core.freeze();
        let until = self.now + FINISH_FOR;
        self.finishing.insert(id, (node.core, node.cluster, until));
        if next.group_of_replica(id).is_none() {
            // Removed: it stops once the closed epoch's work is done.
            self.retired_usigs.insert(id, node.usig);
            return;
        }
        self.start_replica(id, next, node.usig, configure);
    }

    fn start_replica(&mut self, id: NodeId, next: Arc<Cluster>, usig: SoftUsig, by: &Configure) {
        let ack = acknowledgement(id, &next);
        self.send(Addr::Operator, Msg::Proto(ack));
        let mut node = ReplicaNode::new(&next, id, usig, Some(by.clone()));
        let actions = if next.rejoins(id) {
            node.core.recover()
        } else {
            Vec::new()
        };
        self.replicas.insert(id, node);
        // Warrants of the run before are not this core's.
        *self.runs.entry(id).or_default() += 1;
        self.replica_actions(id, actions);
    }

    fn db_configure(&mut self, id: NodeId, configure: &Configure) {
        let Some(d) = self.voters.get_mut(&id) else {
            return;
        };
        let next: Option<ClusterConfig> = toml::from_str(&configure.config).ok();
        if next.is_some_and(|n| n.config_epoch == d.cluster.config.config_epoch) {
            let ack = acknowledgement(id, &d.cluster);
            return self.send(Addr::Operator, Msg::Proto(ack));
        }
        let checked = configure.check(&d.cluster, None, |book| {
            OrderBook::start_of(book, &d.cluster)
        });
        let Ok(next) = checked else {
            self.rejected += 1;
            return;
        };
        let next = Arc::new(Cluster::new(next).expect("checked"));
        d.voter.reconfigure(next.clone());
        d.cluster = next.clone();
        let ack = acknowledgement(id, &next);
        self.send(Addr::Operator, Msg::Proto(ack));
    }

    fn primary_actions(&mut self, id: NodeId, mut actions: Vec<PrimaryAction>) {
        while let Some(action) = actions.pop() {
            match action {
                PrimaryAction::Warrant { bytes } => {
                    let Some(p) = self.primaries.get_mut(&id) else {
                        return;
                    };
                    if p.frozen {
                        self.frozen_warrants += 1;
                    }
                    if id == FIRST_PRIMARY {
                        self.first_primary_warrants += 1;
                    }
                    let misnamed = id == FIRST_PRIMARY
                        && self.scenario.faults.contains(&Fault::MisnamedPrepares)
                        && self.first_primary_warrants % 5 == 3;
                    let misnamed = misnamed.then(|| {
                        let epoch = p.cluster.epoch();
                        let prepare = warranted_prepare(&mut p.usig, View(7), epoch, id, vec![]);
                        Proposal::Prepare(prepare)
                    });
                    let ui = p.usig.create_ui(&bytes).expect("soft usig");
                    actions.extend(p.core.warranted(ui));
                    if let Some(misnamed) = misnamed {
                        self.broadcast_proposal(id, misnamed);
                    }
                }
                PrimaryAction::Broadcast(proposal) => {
                    if let Proposal::Prepare(prepare) = &proposal {
                        // Counted by warrant counter: the batch at the USIG when the
                        // RECONFIGURE came is broadcast after it here (actions are processed
                        // last first), and is fine.
                        let counter = prepare.ui.counter;
                        let after = self.primaries.get_mut(&id).is_some_and(|p| {
                            if prepare.reconfigure.is_some() {
                                p.closed_at = Some(p.closed_at.map_or(counter, |c| c.min(counter)));
                            }
                            p.closed_at.is_some_and(|c| counter > c)
                        });
                        if after && !prepare.entries.is_empty() {
                            self.ordered_after_close += 1;
                        }
                    }
                    if let Proposal::NewView(nv) = &proposal {
                        // A new view whose cut holds the RECONFIGURE closes the epoch at its
                        // NEW-VIEW.
                        if let Some(p) = self.primaries.get_mut(&id) {
                            if p.core.is_closed() && p.closed_at.is_none() {
                                p.closed_at = Some(nv.ui.counter);
                            }
                        }
                    }
                    let reconfigure =
                        matches!(&proposal, Proposal::Prepare(p) if p.reconfigure.is_some());
                    let ahead = self.run_ahead(id, &proposal);
                    self.broadcast_proposal(id, proposal);
                    for prepare in ahead {
                        self.broadcast_proposal(id, Proposal::Prepare(prepare));
                    }
                    if id == FIRST_PRIMARY && reconfigure {
                        if let Some(Fault::CrashPrimaryAfterReconfigure(_)) = self
                            .scenario
                            .faults
                            .iter()
                            .find(|f| matches!(f, Fault::CrashPrimaryAfterReconfigure(_)))
                        {
                            self.crashed_at = Some(self.now);
                        }
                    }
                }
            }
        }
    }

    /// The PREPAREs that order nothing a primary running ahead sends after `proposal`
    /// ([`Fault::RunAhead`]).
    fn run_ahead(&mut self, from: NodeId, proposal: &Proposal) -> Vec<proto::Prepare> {
        let Some(n) = self.scenario.faults.iter().find_map(|f| match f {
            Fault::RunAhead(n) => Some(*n),
            _ => None,
        }) else {
            return Vec::new();
        };
        let (Proposal::Prepare(prepare), Some(p)) = (proposal, self.primaries.get_mut(&from))
        else {
            return Vec::new();
        };
        if from != FIRST_PRIMARY || prepare.ui.counter <= self.ran_ahead_after {
            return Vec::new();
        }
        let (view, epoch) = (prepare.view, p.cluster.epoch());
        let ahead: Vec<proto::Prepare> = (0..n)
            .map(|_| warranted_prepare(&mut p.usig, view, epoch, from, Vec::new()))
            .collect();
        self.ran_ahead_after = ahead.last().map_or(0, |p| p.ui.counter);
        ahead
    }

    /// Sends a candidate's PREPARE or NEW-VIEW to every replica of its epoch, as the
    /// scenario's faults of the first primary allow.
    fn broadcast_proposal(&mut self, from: NodeId, proposal: Proposal) {
        if self.isolated(from) {
            return;
        }
        if from == FIRST_PRIMARY && self.faulty(Fault::SkipCounters) {
            // Every fifth counter is warranted and never sent: a hole no fetch can fill.
            let counter = proposal.ui().counter;
            if counter.is_multiple_of(5) {
                self.skipped.insert(counter);
                return;
            }
        }
        let Some(cluster) = self.primaries.get(&from).map(|p| p.cluster.clone()) else {
            return;
        };
        let only_to = self.scenario.faults.iter().find_map(|f| match f {
            Fault::CrashPrimaryAfterReconfigure(g) => *g,
            _ => None,
        });
        let reconfigure = matches!(&proposal, Proposal::Prepare(p) if p.reconfigure.is_some());
        let ids: Vec<NodeId> = cluster
            .config
            .replicas
            .iter()
            .map(|r| NodeId(r.id))
            .collect();
        for id in ids {
            if from == FIRST_PRIMARY {
                if !self.answers(id) {
                    continue;
                }
                if self.faulty(Fault::PrepareToSubset) && self.rng.chance(0.5) {
                    continue;
                }
                if reconfigure && only_to.is_some_and(|g| cluster.group_of_replica(id) != Some(g)) {
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
            && (self.crashed_at.is_some()
                || self
                    .scenario
                    .faults
                    .iter()
                    .any(|f| matches!(f, Fault::CrashPrimary(at) if self.now >= *at)))
    }

    fn stalled(&self) -> bool {
        self.scenario
            .faults
            .iter()
            .any(|f| matches!(f, Fault::StallPrimary(at) if self.now >= *at))
            || (self.faulty(Fault::OrderAfterReconfigure)
                && self
                    .primaries
                    .get(&FIRST_PRIMARY)
                    .is_some_and(|p| p.cluster.epoch() != self.cluster.epoch()))
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
            let running = self.replicas.get(&id).map(|r| r.cluster.clone());
            let finishing = || self.finishing.get(&id).map(|(_, c, _)| c.clone());
            let Some(cluster) = running.or_else(finishing) else {
                return;
            };
            let group = cluster.group_of_replica(id).unwrap_or(GroupId(0));
            let mates: Vec<NodeId> = cluster
                .members(group)
                .map(|r| NodeId(r.id))
                .filter(|&p| p != id)
                .collect();
            let others: Vec<NodeId> = cluster
                .config
                .replicas
                .iter()
                .map(|r| NodeId(r.id))
                .filter(|&p| p != id)
                .collect();
            match action {
                ReplicaAction::Warrant { bytes } => {
                    let Some(node) = self.replicas.get_mut(&id) else {
                        return;
                    };
                    if node.frozen {
                        self.frozen_warrants += 1;
                    }
                    let ui = node.usig.create_ui(&bytes).expect("soft usig");
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
                    for peer in mates {
                        if to.is_none_or(|to| to == peer) {
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
                    for peer in mates {
                        if to.is_none_or(|to| to == peer) {
                            targets.push(Addr::Replica(peer));
                        }
                    }
                    for to in targets {
                        self.send(to, Msg::Proto(m.clone()));
                    }
                }
                ReplicaAction::SendCheckpoint { to, checkpoint } => {
                    let m = Message::Checkpoint(checkpoint);
                    for peer in others {
                        if to.is_none_or(|to| to == peer) {
                            self.send(Addr::Replica(peer), Msg::Proto(m.clone()));
                        }
                    }
                }
                ReplicaAction::SendEpochClose(close) => {
                    let m = Message::EpochClose(close);
                    for peer in others {
                        self.send(Addr::Replica(peer), Msg::Proto(m.clone()));
                    }
                    // The RECONFIGURE names where the operator listens.
                    self.send(Addr::Operator, Msg::Proto(m));
                }
                ReplicaAction::EpochClosed => {}
                ReplicaAction::SendReqViewChange(req) => {
                    let m = Message::ReqViewChange(req);
                    for peer in others {
                        self.send(Addr::Replica(peer), Msg::Proto(m.clone()));
                    }
                }
                ReplicaAction::SendDecided { to, decided } => {
                    self.send(Addr::Primary(to), Msg::Decided(id, decided))
                }
                ReplicaAction::Persist { slot, executions } => {
                    drop(executions);
                    if let Some(node) = self.replicas.get_mut(&id) {
                        queue.extend(node.core.persisted(slot));
                    }
                }
                ReplicaAction::SendCommitDb {
                    to,
                    commit_db: mut cdb,
                } => {
                    for e in &cdb.executions {
                        let digest = MessageDigest::of(&wire_bytes(e));
                        let first = e.request.partitions.first().copied().unwrap_or(0);
                        self.decisions.entry(e.order).or_default().insert((
                            cdb.config_epoch.0,
                            cdb.group,
                            digest,
                            first,
                        ));
                    }
                    if self.faulty(Fault::WrongCommitDb(id)) {
                        for e in &mut cdb.executions {
                            e.request.operation.push(0xee);
                        }
                    }
                    if self.faulty(Fault::OutsiderCommitDb(id)) {
                        let mut outsider = cdb.clone();
                        let groups = cluster.config.groups.len() as u32;
                        outsider.group = GroupId((cdb.group.0 + 1) % groups.max(1));
                        self.send_to_dbs(id, to, outsider);
                    }
                    self.send_to_dbs(id, to, cdb);
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
                    for peer in mates {
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
                        for peer in &mates {
                            let impersonated = Reply {
                                replica: *peer,
                                ..reply.clone()
                            };
                            let to = Addr::Client(reply.client);
                            self.send(to, Msg::Reply(id, impersonated));
                        }
                    }
                    self.send(Addr::Client(reply.client), Msg::Reply(id, reply));
                }
            }
        }
    }

    fn voter_actions(&mut self, id: NodeId, actions: Vec<VoterAction>) {
        let mut queue: std::collections::VecDeque<VoterAction> = actions.into();
        while let Some(action) = queue.pop_front() {
            match action {
                VoterAction::Execute(batch) => {
                    let Some(d) = self.voters.get_mut(&id) else {
                        return;
                    };
                    let results = batch.iter().map(|e| (e.order, d.db.execute(e))).collect();
                    queue.extend(d.voter.executed_all(results));
                }
                VoterAction::LookUp { orders } => {
                    let Some(d) = self.voters.get_mut(&id) else {
                        return;
                    };
                    let found = orders.iter().map(|&o| (o, d.db.stored(o))).collect();
                    queue.extend(d.voter.looked_up(found).actions);
                }
                VoterAction::Reply { group, mut reply } => {
                    if self.faulty(Fault::WrongResult(id)) {
                        for (_, r) in &mut reply.results {
                            r.push(0xbd);
                        }
                    }
                    let members = self
                        .voters
                        .get(&id)
                        .map(|d| d.voter.members_of(group))
                        .unwrap_or_default();
                    for member in members {
                        if self.faulty(Fault::ChangedResult(id)) {
                            let mut wrong = reply.clone();
                            for (_, r) in &mut wrong.results {
                                r.push(0xbd);
                            }
                            for _ in 0..2 {
                                let wrong = Msg::ReplyCommitDb(id, wrong.clone());
                                self.send(Addr::Replica(member), wrong);
                            }
                        }
                        self.send(Addr::Replica(member), Msg::ReplyCommitDb(id, reply.clone()));
                    }
                }
                // The simulation does not tick voters, so they never stall and nobody asks
                // them for their state (state transfer is tested in dbvote and across
                // processes). Its runs execute far fewer orders than a voter keeps results for.
                VoterAction::ToDbNodes { .. }
                | VoterAction::Snapshot { .. }
                | VoterAction::Install { .. }
                | VoterAction::ForgetResults { .. } => {}
            }
        }
    }

    /// Replica `from`'s COMMIT-DB to database node `to`, or to all of them.
    fn send_to_dbs(&mut self, from: NodeId, to: Option<NodeId>, commit_db: CommitDb) {
        let ids: Vec<NodeId> = self.voters.keys().copied().collect();
        for db in ids.into_iter().filter(|db| to.is_none_or(|to| to == *db)) {
            self.send(Addr::Db(db), Msg::CommitDb(from, commit_db.clone()));
        }
    }

    /// A REPLY at a client: checked against the configuration of the epoch it names (a later
    /// epoch the client does not know yet makes it ask a node for its configuration).
    /// A REPLY on the link of node `from`: it counts only if it names that node.
    fn client_reply(&mut self, client: ClientId, from: NodeId, reply: Reply) {
        let Some(i) = self.clients.iter().position(|c| c.id == client) else {
            return;
        };
        let Some((request, _)) = self.clients[i].outstanding.clone() else {
            return;
        };
        let c = &self.clients[i];
        let cluster = if reply.config_epoch == c.cluster.epoch() {
            Some(c.cluster.clone())
        } else {
            c.earlier.get(&reply.config_epoch.0).cloned()
        };
        let Some(cluster) = cluster else {
            if reply.config_epoch > c.cluster.epoch() {
                self.ask_configuration(i);
            }
            self.rejected += 1;
            return;
        };
        let f = cluster.config.f;
        let member = cluster
            .members(reply.group)
            .any(|r| r.id == reply.replica.0);
        let linked = from == reply.replica;
        if !member || !linked || reply.client != client || reply.timestamp != request.timestamp {
            self.rejected += 1;
            return;
        }
        let key = (reply.config_epoch.0, reply.group, reply.page.clone());
        let voters = self.clients[i].votes.entry(key).or_default();
        voters.insert(reply.replica);
        if voters.len() > f {
            self.accepted
                .insert((client, request.timestamp), reply.page);
            *self
                .served
                .entry((reply.config_epoch.0, reply.group))
                .or_default() += 1;
            self.clients[i].outstanding = None;
            self.clients[i].done += 1;
            self.next_request(i);
        }
    }

    /// Asks every node the client knows for its configuration (at most once per client
    /// timeout): one signed CONFIGURE is enough.
    fn ask_configuration(&mut self, i: usize) {
        let c = &mut self.clients[i];
        if c.asked_at.is_some_and(|at| self.now < at + CLIENT_TIMEOUT) {
            return;
        }
        c.asked_at = Some(self.now);
        let request = ConfigRequest {
            client: c.id,
            config_epoch: c.cluster.epoch(),
            signature: Signature([0; 64]),
        }
        .sign(&client_key(c.id));
        for to in destinations(&c.cluster) {
            self.send(to, Msg::Proto(Message::ConfigRequest(request.clone())));
        }
    }

    /// A CONFIGURE at a client (pushed by the operator, or a node's answer): taken if it is
    /// later than the client's epoch, signed by the operator and a configuration that may
    /// follow the client's. Its outstanding request goes to the new epoch's nodes.
    fn client_configure(&mut self, client: ClientId, configure: &Configure) {
        let Some(i) = self.clients.iter().position(|c| c.id == client) else {
            return;
        };
        let c = &mut self.clients[i];
        let signed = c
            .cluster
            .operator_key()
            .is_some_and(|k| configure.verify(&k));
        let next: Option<ClusterConfig> = toml::from_str(&configure.config).ok();
        let Some(next) = next.filter(|n| signed && n.config_epoch > c.cluster.config.config_epoch)
        else {
            return;
        };
        // A client that missed epochs checks what stays the same across any number of them.
        let mut check = c.cluster.config.clone();
        check.config_epoch = next.config_epoch - 1;
        if check_successor(&check, &next).is_err() {
            self.rejected += 1;
            return;
        }
        let next = Arc::new(Cluster::new(next).expect("checked"));
        let previous = std::mem::replace(&mut c.cluster, next);
        c.earlier.insert(previous.epoch().0, previous);
        if let Some((request, _)) = c.outstanding.clone() {
            c.outstanding = Some((request.clone(), self.now));
            self.broadcast_request(i, request, true);
        }
    }

    fn group_of(&self, id: NodeId) -> GroupId {
        self.replicas
            .get(&id)
            .and_then(|r| r.cluster.group_of_replica(id))
            .unwrap_or(GroupId(0))
    }

    fn primary_of_replica(&self, id: NodeId) -> NodeId {
        self.replicas
            .get(&id)
            .map_or(FIRST_PRIMARY, |r| r.core.primary())
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
        // Replicas up at the end in the latest epoch (a removed replica that missed its
        // CONFIGURE keeps the closed epoch's state).
        let latest = self.operator.current.epoch();
        let up = || {
            self.replicas
                .iter()
                .filter(|(id, r)| !self.down(**id) && r.cluster.epoch() == latest)
                .map(|(_, r)| &r.core)
        };
        // Every epoch's configuration, to check where each decided order belongs.
        let epochs = &self.operator.epochs;
        let misassigned = self
            .decisions
            .iter()
            .filter(|(&order, decided)| {
                decided.iter().any(|&(epoch, group, _, partition)| {
                    let Some(i) = epochs.iter().position(|c| c.epoch().0 == epoch) else {
                        return true;
                    };
                    let start = epochs[i].config.epoch_start.order;
                    let end = epochs.get(i + 1).map(|c| c.config.epoch_start.order);
                    order <= start
                        || end.is_some_and(|end| order > end)
                        || epochs[i].group_of(partition) != Some(group)
                })
            })
            .count();
        let executed: Vec<&BTreeMap<u64, u32>> = correct().map(|(_, d)| &d.db.executions).collect();
        let lost = self
            .decisions
            .keys()
            .filter(|order| executed.iter().any(|e| !e.contains_key(order)))
            .count();
        Outcome {
            completed: self.clients.iter().map(|c| (c.id, c.done)).collect(),
            db_states: correct().map(|(id, d)| (*id, d.db.state())).collect(),
            max_executions: correct()
                .flat_map(|(_, d)| d.db.executions.values().copied())
                .max()
                .unwrap_or(0),
            executed_orders: correct().next().map_or(0, |(_, d)| d.db.executions.len()),
            correct_pages: correct_pages(&self.clients, correct().next().map(|(_, d)| &d.db)),
            accepted_pages: self.accepted.clone(),
            rejected_messages: self.rejected,
            largest_view_message: self.largest_view_message,
            most_history: self.most_history,
            open_agreements: up().map(|r| r.open_agreements()).sum(),
            commit_gaps: up().map(|r| r.commit_gaps()).sum(),
            views: self
                .replicas
                .iter()
                .filter(|(id, r)| !self.down(**id) && r.cluster.epoch() == latest)
                .map(|(id, r)| (*id, r.core.view()))
                .collect(),
            recovering: up().filter(|r| r.is_recovering()).count(),
            recoveries: up().map(|r| r.recoveries() as usize).sum(),
            refused_states: self.refused_states,
            refused_primaries: (self.replicas.values())
                .map(|r| r.core.refused_primaries())
                .sum(),
            retained: up()
                .map(|r| r.retained())
                .fold(Retained::default(), |a, b| Retained {
                    prepares: a.prepares.max(b.prepares),
                    log: a.log.max(b.log),
                    decided: a.decided.max(b.decided),
                    checkpoints: a.checkpoints.max(b.checkpoints),
                    stable: a.stable.max(b.stable),
                }),
            reconfigurations: self.operator.done.clone(),
            // Nodes of the last configuration (a removed replica that lost its CONFIGURE,
            // sent once, stays in the epoch it closed, as a real one would until its VM goes).
            node_epochs: self
                .primaries
                .iter()
                .filter(|(id, _)| !self.crashed(**id))
                .map(|(id, p)| (*id, p.cluster.epoch().0))
                .chain(
                    self.replicas
                        .iter()
                        .map(|(id, r)| (*id, r.cluster.epoch().0)),
                )
                .chain(self.voters.iter().map(|(id, d)| (*id, d.cluster.epoch().0)))
                .chain(self.newcomers.keys().map(|id| (*id, 0)))
                .filter(|(id, _)| self.operator.current.node_key(*id).is_some())
                .collect(),
            client_epochs: self
                .clients
                .iter()
                .map(|c| (c.id, c.cluster.epoch().0))
                .collect(),
            decided_twice: self.decisions.values().filter(|d| d.len() > 1).count(),
            misassigned,
            lost,
            served: self.served.clone(),
            frozen_warrants: self.frozen_warrants,
            ordered_after_close: self.ordered_after_close,
            prepares_after_close: self.prepares_after_close,
            time: self.now,
        }
    }
}

impl ReplicaNode {
    fn new(cluster: &Arc<Cluster>, id: NodeId, usig: SoftUsig, by: Option<Configure>) -> Self {
        ReplicaNode {
            core: replica_core(cluster, id),
            usig,
            cluster: cluster.clone(),
            asked: false,
            frozen: false,
            started_by: by,
        }
    }
}

impl PrimaryNode {
    fn new(cluster: &Arc<Cluster>, id: NodeId, usig: SoftUsig, max_batch: usize) -> Self {
        PrimaryNode {
            core: PrimaryCore::new(cluster.clone(), rule(), id, View(0), max_batch)
                .with_pipeline(primary::pacing::DEFAULT_DEPTH),
            usig,
            cluster: cluster.clone(),
            shape: None,
            started_by: None,
            frozen: false,
            closed_at: None,
        }
    }
}

pub(crate) fn rule() -> Arc<dyn PartitionRule> {
    Arc::new(SimRule)
}

pub(crate) fn replica_core(cluster: &Arc<Cluster>, id: NodeId) -> ReplicaCore {
    ReplicaCore::new(
        cluster.clone(),
        rule(),
        Arc::new(SimRenderer),
        node_key(id),
        id,
        VIEW_TIMEOUT_TICKS,
    )
    .expect("replica in the cluster")
}

/// Where a client sends requests: every primary candidate and every replica of its epoch.
fn destinations(cluster: &Cluster) -> Vec<Addr> {
    let c = &cluster.config;
    c.primaries
        .iter()
        .map(|p| Addr::Primary(NodeId(p.id)))
        .chain(c.replicas.iter().map(|r| Addr::Replica(NodeId(r.id))))
        .collect()
}

/// A node's POSITION-REPORT for the operator.
fn position_report(
    id: NodeId,
    cluster: &Cluster,
    last: Option<(MessageDigest, UniqueWarrant)>,
    book: Option<Vec<u8>>,
) -> Message {
    Message::PositionReport(
        PositionReport {
            node: id,
            config_epoch: cluster.epoch(),
            last,
            book,
            signature: Signature([0; 64]),
        }
        .sign(&node_key(id)),
    )
}

/// A node's EPOCH-STARTED for the operator.
fn acknowledgement(id: NodeId, cluster: &Cluster) -> Message {
    Message::EpochStarted(
        EpochStarted {
            node: id,
            config_epoch: cluster.epoch(),
            signature: Signature([0; 64]),
        }
        .sign(&node_key(id)),
    )
}

/// A node's answer to a client's CONFIG-REQUEST: the CONFIGURE that started its epoch, if the
/// client's is earlier.
fn answer_config(
    cluster: &Cluster,
    started_by: Option<&Configure>,
    request: &ConfigRequest,
) -> Option<Message> {
    let signed = cluster
        .client_key(request.client)
        .is_some_and(|k| request.verify(k));
    let configure = started_by.filter(|_| signed && request.config_epoch < cluster.epoch())?;
    Some(Message::Configure(Box::new(configure.clone())))
}

fn wire_bytes(e: &proto::Execution) -> Vec<u8> {
    wire::encode(e).expect("postcard encodes plain data")
}

fn correct_pages(clients: &[Client], db: Option<&ModelDb>) -> BTreeMap<(ClientId, u64), Vec<u8>> {
    let Some(db) = db else { return BTreeMap::new() };
    clients
        .iter()
        .flat_map(|c| c.sent.iter())
        .filter_map(|r| {
            let result = db.by_request.get(&(r.client, r.timestamp))?;
            Some((
                (r.client, r.timestamp),
                SimRenderer.render(&r.body(), result),
            ))
        })
        .collect()
}
