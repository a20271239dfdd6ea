//! The group replica's driver: PREPAREs in counter order, COMMITs with its own warrants,
//! decisions appended to the decision log (an audit trail synced at each stable checkpoint),
//! COMMIT-DBs to the database nodes and REPLYs to clients.

use crate::app::AppKind;
use crate::epoch::Epochs;
use crate::intake::{Batches, Intake, Item};
use crate::metrics::{self, Metrics, Stage, Timings};
use crate::page::{Admit, PageMode, PageStage};
use crate::peers::Peers;
use crate::usig::UsigWorker;
use crate::{NodeError, NodeOptions, Started};
use group::core::{Action, Reject, ReplicaCore};
use group::log::Segments;
use proto::config::Cluster;
use proto::{
    FetchCommits, FetchPrepares, GroupId, Message, NodeId, Proposal, RecoveryRequest,
    ReplyCommitDb, Request, Signature,
};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The replica's settings.
#[derive(Clone)]
pub struct ReplicaOptions {
    pub node: NodeOptions,
    /// usigd's socket for this replica's identity.
    pub usig_socket: PathBuf,
    /// Where the decision log lives.
    pub data_dir: PathBuf,
    /// The paper's page-generation stage before each REPLY (docs: crate::page): its duration
    /// per page (zero by default: no stage), its workers and how they spend the time.
    pub page_delay: Duration,
    pub page_workers: usize,
    pub page_mode: PageMode,
    /// Started for a configuration epoch that has not begun (its configuration file is that
    /// epoch's shape): wait for the operator's CONFIGURE of it (docs/protocol.md,
    /// "Reconfiguration").
    pub await_epoch: bool,
}

/// Opens the configuration epoch's decision log. Returns whether an earlier run of this
/// configuration epoch used this data directory: the replica then forgot what it warranted and
/// must recover (docs/protocol.md, "Replica recovery").
fn open_log(data_dir: &Path, epoch: u64) -> Result<(Segments, bool), NodeError> {
    let io = |source| group::log::LogError::Io {
        path: data_dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(data_dir).map_err(io)?;
    // Written before our first warrant: its presence means an earlier run of this epoch.
    let marker = data_dir.join(format!("started-epoch-{epoch}"));
    let restarted = marker.exists();
    std::fs::File::create(&marker)
        .and_then(|f| f.sync_all())
        .map_err(io)?;
    // A new configuration epoch starts the protocol afresh; earlier epochs' logs stay for audit.
    let (log, earlier) = Segments::open(data_dir, epoch)?;
    Ok((log, restarted || earlier > 0))
}

/// How long a request may wait to be ordered before a replica asks for a view change.
const VIEW_TIMEOUT: Duration = Duration::from_secs(2);

/// [`VIEW_TIMEOUT`] in timer ticks.
fn view_timeout_ticks(tick: Duration) -> u64 {
    (VIEW_TIMEOUT.as_millis() / tick.as_millis().max(1)) as u64
}

/// Who a replica talks to in one configuration epoch.
struct Roles {
    /// The other members of our group (COMMITs, recovery).
    mates: Vec<NodeId>,
    db_nodes: Vec<NodeId>,
    candidates: Vec<NodeId>,
    /// Every other replica (CHECKPOINTs, EPOCH-CLOSEs).
    replicas: Vec<NodeId>,
    /// Every other replica and every candidate (REQ-VIEW-CHANGEs, EPOCH-CLOSEs).
    everyone: Vec<NodeId>,
}

impl Roles {
    fn of(cluster: &Cluster, me: NodeId, group: GroupId) -> Roles {
        let ids = |it: &mut dyn Iterator<Item = u32>| it.map(NodeId).collect::<Vec<_>>();
        let c = &cluster.config;
        let mates = ids(&mut cluster
            .members(group)
            .map(|r| r.id)
            .filter(|&id| id != me.0));
        let db_nodes = ids(&mut c.db_nodes.iter().map(|d| d.id));
        let candidates = ids(&mut c.primaries.iter().map(|p| p.id));
        let replicas = ids(&mut c.replicas.iter().map(|r| r.id).filter(|&id| id != me.0));
        let everyone = replicas.iter().chain(&candidates).copied().collect();
        Roles {
            mates,
            db_nodes,
            candidates,
            replicas,
            everyone,
        }
    }
}

/// What a replica runs in one configuration epoch: the core, the epoch's decision log and who
/// it talks to.
struct InEpoch {
    cluster: Arc<Cluster>,
    core: ReplicaCore,
    /// The epoch's decision log: an audit trail, written as decisions are made and synced at
    /// each stable checkpoint (docs/protocol.md, "The decision log").
    log: Segments,
    roles: Roles,
    /// The latest stable checkpoint's slot (decisions up to it may leave the disk).
    stable: u64,
}

impl InEpoch {
    /// Starts `cluster`'s epoch: a fresh core from the configuration (its order book and
    /// where every USIG sequence starts) and the epoch's decision log. The first actions are
    /// the recovery's if an earlier run of this epoch used the data directory, or if the epoch
    /// began without knowing where our sequence stood.
    fn start(
        options: &ReplicaOptions,
        cluster: Arc<Cluster>,
        app: &AppKind,
        key: &proto::SigningKey,
    ) -> Result<(InEpoch, Vec<Action>), NodeError> {
        let me = options.node.id;
        let mut core = ReplicaCore::new(
            cluster.clone(),
            app.rule(),
            app.renderer(),
            proto::SigningKey::from_seed(*key.seed()),
            me,
            view_timeout_ticks(options.node.tick),
        )
        .ok_or(NodeError::UnknownNode(me.0))?;
        let (log, restarted) = open_log(&options.data_dir, cluster.config.config_epoch)?;
        let mut first = Vec::new();
        if restarted || cluster.rejoins(me) {
            tracing::warn!(
                id = me.0,
                "an earlier run of this configuration epoch used this data directory, or the \
                 epoch began without our position: rejoining the group (JOIN, then state from a \
                 peer)"
            );
            first = core.recover();
        }
        let roles = Roles::of(&cluster, me, core.group());
        tracing::info!(
            id = me.0,
            group = core.group().0,
            epoch = cluster.epoch().0,
            "replica running"
        );
        Ok((
            InEpoch {
                cluster,
                core,
                log,
                roles,
                stable: 0,
            },
            first,
        ))
    }
}

/// How long a closed epoch's core goes on after the next epoch started: clients whose replies
/// were lost retransmit within it (a request ordered in the closed epoch is answered only from
/// that epoch's reply cache), and a database node that has not answered by then catches up by
/// state transfer.
const FINISH_FOR: Duration = Duration::from_secs(60);

/// The core of the epoch this replica closed, kept after the next one started to finish its
/// work there (docs/protocol.md, "Reconfiguration", step 5): frozen, it warrants nothing, but
/// re-sends its decisions to the database nodes that have not answered (nobody else can: the
/// next epoch's cores start empty) and answers retransmitted requests from its reply cache.
struct Finishing {
    core: ReplicaCore,
    db_nodes: Vec<NodeId>,
    until: Instant,
}

impl Finishing {
    fn new(mut core: ReplicaCore, roles: &Roles) -> Finishing {
        core.freeze();
        Finishing {
            core,
            db_nodes: roles.db_nodes.clone(),
            until: Instant::now() + FINISH_FOR,
        }
    }

    fn done(&self) -> bool {
        Instant::now() >= self.until
    }

    /// Results go to it too.
    fn offer_results(
        &mut self,
        replies: &[(NodeId, ReplyCommitDb)],
        peers: &Peers,
        pages: &PageStage,
    ) {
        let actions = self.core.on_reply_commit_dbs(replies.to_vec());
        self.core.take_refusals();
        self.send(actions, peers, pages);
    }

    /// Client retransmissions go to it too (it answers from its reply cache).
    fn offer_requests(&mut self, requests: &[Request], peers: &Peers, pages: &PageStage) {
        let actions = self.core.on_requests(requests);
        self.send(actions, peers, pages);
    }

    fn tick(&mut self, peers: &Peers, pages: &PageStage) {
        let actions = self.core.on_tick();
        self.send(actions, peers, pages);
    }

    /// What a frozen core sends: COMMIT-DBs and REPLYs.
    fn send(&self, actions: Vec<Action>, peers: &Peers, pages: &PageStage) {
        let mut ready = Vec::new();
        for action in actions {
            match action {
                Action::SendCommitDb { to, commit_db } => {
                    let m = Message::CommitDb(commit_db);
                    match to {
                        Some(db) => peers.to_node(db, &m),
                        None => peers.to_nodes(self.db_nodes.iter().copied(), &m),
                    }
                }
                Action::SendReply(reply) => send_reply(peers, reply, pages, &mut ready),
                _ => {}
            }
        }
        peers.replies_to_clients(ready);
    }
}

/// Waits for the operator's CONFIGURE of the epoch this replica was started for (`cloudbft
/// replica --await-epoch`), checked against the shape it was started with.
async fn await_configure(
    (peers, me, key): (&Peers, NodeId, &proto::SigningKey),
    shape: &Arc<Cluster>,
    epochs: &mut Epochs,
    metrics: &Metrics,
    inbound: &mut mpsc::Receiver<net::Inbound>,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Option<Arc<Cluster>> {
    tracing::info!(
        epoch = shape.epoch().0,
        "waiting for the operator's CONFIGURE of configuration epoch {}",
        shape.epoch().0
    );
    loop {
        tokio::select! {
            _ = shutdown.as_mut() => return None,
            Some(frame) = inbound.recv() => {
                let Some(Message::Configure(configure)) = metrics.decode(&frame.frame) else {
                    continue;
                };
                match epochs.on_configure_as_newcomer((peers, me, key), shape, &configure) {
                    Ok(cluster) => return Some(cluster),
                    Err(e) => {
                        tracing::warn!(error = %e, "CONFIGURE refused");
                        metrics.reject("bad_configure");
                    }
                }
            }
        }
    }
}

/// Runs the replica until `shutdown` completes, or until a configuration epoch starts without
/// it (it was removed).
pub async fn run(
    options: ReplicaOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), NodeError> {
    let me = options.node.id;
    let shape = options.node.cluster.clone();
    let usig = options.node.usig(&shape.config.replicas)?;
    let app = AppKind::of(&shape)?;
    let key = options.node.key()?;
    let Started {
        metrics,
        mut peers,
        mut inbound,
    } = options.node.start().await?;
    let mut epochs = Epochs::new(options.node.config_path.clone(), &shape);
    tokio::pin!(shutdown);
    if options.await_epoch && epochs.adopted() {
        tracing::info!(
            epoch = shape.epoch().0,
            "configuration epoch {} was already adopted (a restart): running it",
            shape.epoch().0
        );
    }
    let cluster = if options.await_epoch && !epochs.adopted() {
        let node = (&peers, me, &key);
        match await_configure(
            node,
            &shape,
            &mut epochs,
            &metrics,
            &mut inbound,
            &mut shutdown,
        )
        .await
        {
            Some(cluster) => {
                peers.update(&cluster)?;
                cluster
            }
            None => {
                peers.shutdown().await;
                return Ok(());
            }
        }
    } else {
        shape
    };
    let batches = Batches {
        requests: true,
        reply_commit_dbs: true,
        ..Batches::default()
    };
    let mut intake = Intake::new(inbound, batches);
    let (usig, mut warranted) = UsigWorker::start(&options.usig_socket, usig, metrics.clone())?;
    let (mut e, mut first) = InEpoch::start(&options, cluster, &app, &key)?;
    // When each order was decided, for the decision-to-reply latency.
    let mut decided_at: BTreeMap<(proto::ClientId, u64), Instant> = BTreeMap::new();
    let mut tick = tokio::time::interval(options.node.tick);
    let pages = PageStage::new(options.page_delay, options.page_workers, options.page_mode)
        .with_metrics(metrics.clone());
    // When our group's requests arrived in a PREPARE (until decided) and when their COMMIT-DB
    // went out (until f+1 database nodes answered), for the time-per-stage metrics.
    let mut proposed = Timings::default();
    let mut executing = Timings::default();
    // The closed epoch's core while it finishes; for a removed replica, the running one.
    let mut finishing: Option<Finishing> = None;
    let mut leaving: Option<Instant> = None;
    'events: loop {
        let actions = if !first.is_empty() {
            std::mem::take(&mut first)
        } else {
            tokio::select! {
            _ = &mut shutdown => break,
            Some(item) = intake.next(&metrics) => 'took: {
                let message = match item {
                    Item::Message(message, _) => message,
                    Item::Requests(requests) => {
                        if let Some(f) = finishing.as_mut() {
                            f.offer_requests(&requests, &peers, &pages);
                        }
                        let arrived = Instant::now();
                        let actions = e.core.on_requests(&requests);
                        metrics.stage(Stage::Handle, arrived.elapsed());
                        break 'took actions
                    }
                    Item::ReplyCommitDbs(replies) => {
                        if let Some(f) = finishing.as_mut() {
                            f.offer_results(&replies, &peers, &pages);
                        }
                        let arrived = Instant::now();
                        let actions = e.core.on_reply_commit_dbs(replies);
                        for reject in e.core.take_refusals() {
                            metrics.reject(reject_label(&reject));
                        }
                        metrics.stage(Stage::Handle, arrived.elapsed());
                        break 'took actions
                    }
                    Item::CommitDbs(_) | Item::Decided(..) => {
                        unreachable!("a replica's intake takes neither COMMIT-DBs nor DECIDEDs")
                    }
                };
                match message {
                    Message::Configure(configure) => {
                        let shape = e.core.reconfiguration().map(|(_, next)| next);
                        let node = (&peers, me, &key);
                        match epochs.on_configure(node, &e.cluster, shape, &configure) {
                            None => Vec::new(),
                            Some(Ok(next)) => {
                                if next.group_of_replica(me).is_none() {
                                    tracing::info!(
                                        id = me.0,
                                        epoch = next.epoch().0,
                                        "removed from the configuration at epoch {}: stopping \
                                         once our work in the previous epoch is done",
                                        next.epoch().0
                                    );
                                    e.core.freeze();
                                    leaving = Some(Instant::now() + FINISH_FOR);
                                    continue 'events;
                                }
                                peers.update(&next)?;
                                metrics.epoch_closed.set(0);
                                let (next, actions) = InEpoch::start(&options, next, &app, &key)?;
                                let mut closed = std::mem::replace(&mut e, next);
                                // The closed epoch's decision log is complete: sync it now
                                // rather than at a checkpoint that will not come.
                                closed.log.sync()?;
                                finishing = Some(Finishing::new(closed.core, &closed.roles));
                                first = actions;
                                continue 'events;
                            }
                            Some(Err(err)) => {
                                tracing::debug!(id = me.0, error = %err, "CONFIGURE refused");
                                metrics.reject("bad_configure");
                                Vec::new()
                            }
                        }
                    }
                    Message::PositionRequest(request) => {
                        if epochs.position_request(&e.cluster, request) {
                            e.core.freeze();
                        } else {
                            metrics.reject("bad_position_request");
                        }
                        Vec::new()
                    }
                    Message::ConfigRequest(request) => {
                        if !epochs.answer(&peers, &e.cluster, &request) {
                            metrics.reject("bad_config_request");
                        }
                        Vec::new()
                    }
                    message => {
                        let arrived = Instant::now();
                        if let Message::Prepare(prepare) = &message {
                            let ours = prepare.entries.iter().filter(|p| p.group == e.core.group());
                            for entry in ours {
                                let key = (entry.request.client, entry.request.timestamp);
                                proposed.start(key, arrived);
                            }
                        }
                        let actions = on_message(&mut e.core, &e.cluster, &metrics, message);
                        metrics.stage(Stage::Handle, arrived.elapsed());
                        actions
                    }
                }
            },
            Some(result) = warranted.recv() => e.core.warranted(result?),
            _ = tick.tick() => {
                metrics.transport.update(peers.transport());
                metrics.pages_queued.set(pages.queued() as u64);
                metrics.page_workers_busy.set(pages.busy() as u64);
                if let Some(f) = finishing.as_mut() {
                    f.tick(&peers, &pages);
                }
                if finishing.as_ref().is_some_and(Finishing::done) {
                    finishing = None;
                }
                e.core.on_tick()
            }
            }
        };
        let (core, roles) = (&mut e.core, &e.roles);
        let mut actions = std::collections::VecDeque::from(actions);
        // REPLYs whose pages are ready, sent together after the actions.
        let mut ready = Vec::new();
        while let Some(action) = actions.pop_front() {
            match action {
                Action::Warrant { bytes } => usig.warrant(bytes),
                Action::SendCommit { to, commit } => {
                    let m = Message::Commit(*commit);
                    match to {
                        Some(peer) => peers.to_node(peer, &m),
                        None => peers.to_nodes(roles.mates.iter().copied(), &m),
                    }
                }
                Action::FetchPrepares { from, counters } => {
                    let fetch = FetchPrepares {
                        replica: me,
                        counters,
                        signature: Signature([0; 64]),
                    }
                    .sign(&key);
                    peers.to_node(from, &Message::FetchPrepares(fetch));
                }
                Action::ForwardRequest(request) => {
                    peers.to_node(core.primary(), &Message::Request(request));
                }
                Action::SendViewChange { to, view_change } => {
                    let m = Message::ViewChange(*view_change);
                    match to {
                        Some(peer) => peers.to_node(peer, &m),
                        None => {
                            tracing::warn!(id = me.0, "view change: VIEW-CHANGE sent");
                            let to = roles.mates.iter().chain(&roles.candidates).copied();
                            peers.to_nodes(to, &m)
                        }
                    }
                }
                Action::SendCheckpoint { to, checkpoint } => {
                    let m = Message::Checkpoint(checkpoint);
                    match to {
                        Some(peer) => peers.to_node(peer, &m),
                        None => peers.to_nodes(roles.replicas.iter().copied(), &m),
                    }
                }
                Action::SendReqViewChange(req) => {
                    tracing::warn!(
                        id = me.0,
                        next_view = req.next_view.0,
                        "a request waited too long: asking for a view change"
                    );
                    let m = Message::ReqViewChange(req);
                    peers.to_nodes(roles.everyone.iter().copied(), &m);
                }
                Action::FetchCommits {
                    from,
                    warrants,
                    slots,
                } => {
                    let fetch = FetchCommits {
                        replica: me,
                        warrants,
                        slots,
                        signature: Signature([0; 64]),
                    }
                    .sign(&key);
                    peers.to_node(from, &Message::FetchCommits(fetch));
                }
                Action::Persist { slot, executions } => {
                    let now = Instant::now();
                    for e in executions.iter() {
                        let key = (e.request.client, e.request.timestamp);
                        if let Some(took) = proposed.finish(&key) {
                            metrics.stage(Stage::Agree, took);
                        }
                        decided_at.insert(key, now);
                    }
                    // The record: the slot and our executions for it. Recovery does not read
                    // it, so the COMMIT-DBs go out without waiting for a sync.
                    let record = wire::encode(&(slot, &*executions)).unwrap_or_default();
                    drop(executions);
                    e.log.append(&record)?;
                    Metrics::observe(&metrics.persist_seconds, now.elapsed());
                    metrics.commits.inc();
                    actions.extend(core.persisted(slot));
                }
                Action::SendCommitDb { to, commit_db } => {
                    if to.is_none() {
                        let now = Instant::now();
                        for e in &commit_db.executions {
                            executing.start((e.request.client, e.request.timestamp), now);
                        }
                    }
                    let m = Message::CommitDb(commit_db);
                    match to {
                        Some(db) => peers.to_node(db, &m),
                        None => peers.to_nodes(roles.db_nodes.iter().copied(), &m),
                    }
                }
                Action::SendDecided { to, decided } => {
                    peers.to_node(to, &Message::Decided(decided));
                }
                Action::SendJoin(join) => {
                    peers.to_nodes(roles.candidates.iter().copied(), &Message::Join(join));
                }
                Action::RequestRecovery => {
                    let request = RecoveryRequest {
                        replica: me,
                        signature: Signature([0; 64]),
                    }
                    .sign(&key);
                    let m = Message::RecoveryRequest(request);
                    peers.to_nodes(roles.mates.iter().copied(), &m);
                }
                Action::SendRecoveryState { to, state } => {
                    peers.to_node(to, &Message::RecoveryState(state));
                }
                Action::SendReply(reply) => {
                    if let Some(took) = executing.finish(&(reply.client, reply.timestamp)) {
                        metrics.stage(Stage::Database, took);
                    }
                    if let Some(at) = decided_at.remove(&(reply.client, reply.timestamp)) {
                        Metrics::observe(&metrics.reply_seconds, at.elapsed());
                    }
                    metrics.replies.inc();
                    send_reply(&peers, reply, &pages, &mut ready);
                }
                Action::SendEpochClose(close) => {
                    let m = Message::EpochClose(close);
                    peers.to_nodes(roles.everyone.iter().copied(), &m);
                    if let Some((reconfigure, _)) = core.reconfiguration() {
                        peers.to_addr(&reconfigure.reply_to, &m);
                    }
                }
                Action::EpochClosed => {
                    metrics.epoch_closed.set(1);
                }
            }
        }
        peers.replies_to_clients(ready);
        metrics.recovering.set(u64::from(core.is_recovering()));
        metrics.config_epoch.set(e.cluster.epoch().0);
        metrics.view.set(core.view().0);
        if core.recoveries() > metrics.recoveries.get() {
            tracing::warn!(
                id = me.0,
                "rejoined the group from a peer's stable checkpoint"
            );
            metrics.recoveries.inc();
        }
        if core.refused_primaries() > metrics.refused_primaries.get() {
            tracing::warn!(
                id = me.0,
                view = core.view().0,
                primary = core.primary().0,
                "refused the view's primary: it warranted something other than the view's next \
                 PREPARE (a faulty candidate); asking for the next view"
            );
            metrics.refused_primaries.inc();
        }
        // A new stable checkpoint: decisions up to it need not stay on disk.
        if core.stable() > e.stable {
            e.stable = core.stable();
            tracing::debug!(id = me.0, stable = e.stable, "checkpoint stable");
            e.log.rotate()?;
        }
        // Frozen for the operator: answer once the warrant in flight (if any) is made.
        if epochs.asked.is_some() && !usig.busy() {
            let book = core.closing_book().cloned();
            epochs.report(&peers, me, &e.cluster, &key, usig.last(), book);
        }
        if leaving.is_some_and(|until| Instant::now() >= until) {
            tracing::info!(id = me.0, "our work in the closed epoch is done");
            drain(&pages, &peers).await;
            break;
        }
        // Orders whose reply never came (a client that vanished) must not pile up.
        while decided_at.len() > 65_536 {
            decided_at.pop_first();
        }
    }
    tracing::info!(id = me.0, "replica stopping");
    peers.shutdown().await;
    Ok(())
}

/// How long a removed replica waits, at the end, for its last pages and replies to go out.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Waits until the page stage is idle and the transport has handed every queued frame to its
/// connection (at most [`DRAIN_TIMEOUT`]): a replica that leaves the configuration still owes
/// its clients the replies of the requests it executed.
async fn drain(pages: &PageStage, peers: &Peers) {
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    while Instant::now() < deadline {
        let idle = pages.queued() == 0 && pages.busy() == 0;
        if idle && peers.transport().queue_depths().outbound == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::warn!("stopping with replies still queued (a client unreachable?)");
}

/// Sends a REPLY once its page went through the page stage (at once without one, or when the
/// page went through before: the core sends a cached REPLY again for a client's retransmission).
fn send_reply(
    peers: &Peers,
    reply: proto::Reply,
    pages: &PageStage,
    ready: &mut Vec<proto::Reply>,
) {
    let (client, timestamp) = (reply.client, reply.timestamp);
    let admit = if pages.is_instant() {
        Admit::Rendered
    } else {
        pages.admit(client, timestamp)
    };
    match admit {
        Admit::Rendered => ready.push(reply),
        Admit::InStage => {}
        Admit::Render => {
            let (peers, pages) = (peers.clone(), pages.clone());
            tokio::spawn(async move {
                pages.render().await;
                pages.rendered(client, timestamp);
                peers.to_client(client, &Message::Reply(reply));
            });
        }
    }
}

fn reject_label(reject: &Reject) -> &'static str {
    match reject {
        Reject::WrongView => "wrong_view",
        Reject::WrongEpoch => "wrong_epoch",
        Reject::NotMember => "not_member",
        Reject::BadSignature => "bad_signature",
        Reject::WrongLink => "wrong_link",
        // Answers to our own fetches, and PREPAREs carried again by COMMITs: harmless.
        Reject::Warrant(usig::VerifyError::Replay { .. }) => "duplicate_warrant",
        // Our primary's PREPAREs past `PREPARE_HORIZON`: fetched once the checkpoint moves.
        Reject::Warrant(usig::VerifyError::BeyondCeiling { .. }) => "prepare_beyond_horizon",
        Reject::Warrant(_) => "bad_warrant",
        Reject::InvalidNewView => "invalid_new_view",
        Reject::AboveWatermark => "above_watermark",
        Reject::InvalidRecoveryState(_) => "invalid_recovery_state",
        Reject::BadEpochClose => "bad_epoch_close",
        Reject::BadFetch => "bad_fetch_range",
        Reject::BeyondHorizon => "beyond_horizon",
    }
}

fn on_message(
    core: &mut ReplicaCore,
    cluster: &Cluster,
    metrics: &Metrics,
    message: Message,
) -> Vec<Action> {
    let result = match message {
        Message::Prepare(p) => core.on_proposal(Proposal::Prepare(p)),
        Message::NewView(nv) => core.on_proposal(Proposal::NewView(nv)),
        Message::Commit(c) => core.on_commit(c),
        Message::ViewChange(vc) => core.on_view_change(vc),
        Message::ReqViewChange(r) => core.on_req_view_change(&r),
        Message::Checkpoint(c) => core.on_checkpoint(c),
        Message::Request(r) => Ok(core.on_request(&r)),
        Message::Requests(rs) => Ok(core.on_requests(&rs)),
        Message::FetchCommits(f) => {
            if from_mate(core, cluster, f.replica, |k| f.verify(k)) {
                core.on_fetch_commits(f.replica, f.warrants, &f.slots)
            } else {
                Err(Reject::BadSignature)
            }
        }
        Message::RecoveryRequest(r) => {
            if from_mate(core, cluster, r.replica, |k| r.verify(k)) {
                Ok(core.on_recovery_request(r.replica))
            } else {
                Err(Reject::BadSignature)
            }
        }
        Message::RecoveryState(state) => core.on_recovery_state(*state),
        Message::EpochClose(close) => core.on_epoch_close(close),
        other => {
            metrics.reject(format!("unexpected_{}", metrics::kind(&other)));
            return Vec::new();
        }
    };
    for reject in core.take_refusals() {
        metrics.reject(reject_label(&reject));
    }
    result.unwrap_or_else(|reject| {
        if let Reject::Warrant(e) = &reject {
            tracing::debug!(error = %e, "warrant refused");
        }
        metrics.reject(reject_label(&reject));
        Vec::new()
    })
}

/// Whether a node-signed message is from a member of our group, with a valid signature.
fn from_mate(
    core: &ReplicaCore,
    cluster: &Cluster,
    sender: NodeId,
    verify: impl Fn(&proto::PublicKey) -> bool,
) -> bool {
    let mate = cluster.members(core.group()).any(|r| r.id == sender.0);
    cluster
        .node_key(sender)
        .filter(|_| mate)
        .is_some_and(verify)
}
