//! The group replica's driver: PREPAREs in counter order, COMMITs with its own warrants,
//! durable decisions (a log thread that syncs once per batch of decisions, in parallel with
//! everything else), COMMIT-DBs to the database nodes and REPLYs to clients.

use crate::app::AppKind;
use crate::metrics::{self, Metrics};
use crate::page::{PageMode, PageStage};
use crate::peers::Peers;
use crate::usig::UsigWorker;
use crate::{NodeError, NodeOptions, Started};
use group::core::{Action, Reject, ReplicaCore};
use group::log::Segments;
use proto::config::Cluster;
use proto::{FetchCommits, FetchPrepares, Message, NodeId, Proposal, RecoveryRequest, Signature};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
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
}

/// Decisions written and synced by the log thread: their slots and the sync time.
type Synced = Result<(Vec<u64>, Duration), group::log::LogError>;

/// What the log thread does: append a slot's encoded decision, or start a new segment because
/// a checkpoint became stable.
enum LogCommand {
    Append(u64, Vec<u8>),
    Rotate,
}

type Appender = std::sync::mpsc::Sender<LogCommand>;

/// Starts the log thread over the configuration epoch's decision log. Returns whether an
/// earlier run of this configuration epoch used this data directory: the replica then forgot
/// what it warranted and must recover (docs/protocol.md, "Replica recovery").
fn start_log(
    data_dir: &Path,
    epoch: u64,
) -> Result<(Appender, mpsc::UnboundedReceiver<Synced>, bool), NodeError> {
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
    let (mut log, earlier) = Segments::open(data_dir, epoch)?;
    let restarted = restarted || earlier > 0;
    let (append, records) = std::sync::mpsc::channel::<LogCommand>();
    let (synced, results) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("decision-log".into())
        .spawn(move || {
            while let Ok(first) = records.recv() {
                let started = Instant::now();
                let batch: Vec<LogCommand> =
                    std::iter::once(first).chain(records.try_iter()).collect();
                let mut slots = Vec::new();
                let written = batch
                    .iter()
                    .try_for_each(|command| match command {
                        LogCommand::Append(slot, record) => {
                            slots.push(*slot);
                            log.append(record)
                        }
                        LogCommand::Rotate => log.rotate(),
                    })
                    .and_then(|()| log.sync())
                    .map(|()| (slots, started.elapsed()));
                let failed = written.is_err();
                if synced.send(written).is_err() || failed {
                    return;
                }
            }
        })
        .map_err(|source| group::log::LogError::Io {
            path: data_dir.to_path_buf(),
            source,
        })?;
    Ok((append, results, restarted))
}

/// How long a request may wait to be ordered before a replica asks for a view change.
const VIEW_TIMEOUT: Duration = Duration::from_secs(2);

/// [`VIEW_TIMEOUT`] in timer ticks.
fn view_timeout_ticks(tick: Duration) -> u64 {
    (VIEW_TIMEOUT.as_millis() / tick.as_millis().max(1)) as u64
}

/// Runs the replica until `shutdown` completes.
pub async fn run(
    options: ReplicaOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), NodeError> {
    let cluster = options.node.cluster.clone();
    let me = options.node.id;
    let usig = options.node.usig(&cluster.config.replicas)?;
    let app = AppKind::of(&cluster)?;
    let key = options.node.key()?;
    let mut core = ReplicaCore::new(
        cluster.clone(),
        app.rule(),
        app.renderer(),
        proto::SigningKey::from_seed(*key.seed()),
        me,
        view_timeout_ticks(options.node.tick),
    )
    .ok_or(NodeError::UnknownNode(me.0))?;
    let (append, mut synced, restarted) =
        start_log(&options.data_dir, cluster.config.config_epoch)?;
    let Started {
        metrics,
        peers,
        mut inbound,
    } = options.node.start().await?;
    let (usig, mut warranted) = UsigWorker::start(&options.usig_socket, usig, metrics.clone())?;
    let group = core.group();
    let mates: Vec<NodeId> = cluster
        .members(group)
        .map(|r| NodeId(r.id))
        .filter(|&id| id != me)
        .collect();
    let db_nodes: Vec<NodeId> = cluster
        .config
        .db_nodes
        .iter()
        .map(|d| NodeId(d.id))
        .collect();
    let candidates: Vec<NodeId> = cluster
        .config
        .primaries
        .iter()
        .map(|p| NodeId(p.id))
        .collect();
    // Every other replica (CHECKPOINTs), and every candidate too (REQ-VIEW-CHANGEs).
    let replicas: Vec<NodeId> = cluster
        .config
        .replicas
        .iter()
        .map(|r| NodeId(r.id))
        .filter(|&id| id != me)
        .collect();
    let everyone: Vec<NodeId> = replicas.iter().chain(&candidates).copied().collect();
    // When each order's decision became durable, for the decision-to-reply latency.
    let mut decided_at: BTreeMap<(proto::ClientId, u64), Instant> = BTreeMap::new();
    let mut stable = 0;
    let mut tick = tokio::time::interval(options.node.tick);
    let pages = PageStage::new(options.page_delay, options.page_workers, options.page_mode);
    tracing::info!(id = me.0, group = group.0, "replica running");
    let mut first = Vec::new();
    if restarted {
        tracing::warn!(
            id = me.0,
            "an earlier run of this configuration epoch used this data directory: rejoining \
             the group (JOIN, then state from a peer)"
        );
        first = core.recover();
    }
    tokio::pin!(shutdown);
    loop {
        let actions = if !first.is_empty() {
            std::mem::take(&mut first)
        } else {
            tokio::select! {
            _ = &mut shutdown => break,
            Some(inbound) = inbound.recv() => {
                on_frame(&mut core, &cluster, &metrics, &inbound.frame)
            }
            Some(result) = warranted.recv() => core.warranted(result?),
            Some(result) = synced.recv() => {
                let (slots, took) = result?;
                Metrics::observe(&metrics.persist_seconds, took);
                let mut actions = Vec::new();
                for slot in slots {
                    metrics.commits.inc();
                    actions.extend(core.persisted(slot));
                }
                actions
            }
            _ = tick.tick() => {
                metrics.transport.update(peers.transport());
                metrics.pages_queued.set(pages.queued() as u64);
                metrics.page_workers_busy.set(pages.busy() as u64);
                core.on_tick()
            }
            }
        };
        for action in actions {
            match action {
                Action::Warrant { bytes } => usig.warrant(bytes),
                Action::SendCommit { to, commit } => {
                    let m = Message::Commit(*commit);
                    match to {
                        Some(peer) => peers.to_node(peer, &m),
                        None => peers.to_nodes(mates.iter().copied(), &m),
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
                            peers.to_nodes(mates.iter().chain(&candidates).copied(), &m)
                        }
                    }
                }
                Action::SendCheckpoint { to, checkpoint } => {
                    let m = Message::Checkpoint(checkpoint);
                    match to {
                        Some(peer) => peers.to_node(peer, &m),
                        None => peers.to_nodes(replicas.iter().copied(), &m),
                    }
                }
                Action::SendReqViewChange(req) => {
                    tracing::warn!(
                        id = me.0,
                        next_view = req.next_view.0,
                        "a request waited too long: asking for a view change"
                    );
                    let m = Message::ReqViewChange(req);
                    peers.to_nodes(everyone.iter().copied(), &m);
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
                    for e in &executions {
                        decided_at.insert((e.request.client, e.request.timestamp), now);
                    }
                    // The record: the slot and our executions for it.
                    let record = wire::encode(&(slot, &executions)).unwrap_or_default();
                    if append.send(LogCommand::Append(slot, record)).is_err() {
                        tracing::error!("decision log thread stopped");
                    }
                }
                Action::SendCommitDb { to, commit_db } => {
                    let m = Message::CommitDb(commit_db);
                    match to {
                        Some(db) => peers.to_node(db, &m),
                        None => peers.to_nodes(db_nodes.iter().copied(), &m),
                    }
                }
                Action::SendJoin(join) => {
                    peers.to_nodes(candidates.iter().copied(), &Message::Join(join));
                }
                Action::RequestRecovery => {
                    let request = RecoveryRequest {
                        replica: me,
                        signature: Signature([0; 64]),
                    }
                    .sign(&key);
                    let m = Message::RecoveryRequest(request);
                    peers.to_nodes(mates.iter().copied(), &m);
                }
                Action::SendRecoveryState { to, state } => {
                    peers.to_node(to, &Message::RecoveryState(state));
                }
                Action::SendReply(reply) => {
                    if let Some(at) = decided_at.remove(&(reply.client, reply.timestamp)) {
                        Metrics::observe(&metrics.reply_seconds, at.elapsed());
                    }
                    metrics.replies.inc();
                    send_reply(&peers, reply, &pages);
                }
            }
        }
        metrics.recovering.set(u64::from(core.is_recovering()));
        if core.recoveries() > metrics.recoveries.get() {
            tracing::warn!(
                id = me.0,
                "rejoined the group from a peer's stable checkpoint"
            );
            metrics.recoveries.inc();
        }
        // A new stable checkpoint: decisions up to it need not stay on disk.
        if core.stable() > stable {
            stable = core.stable();
            tracing::debug!(id = me.0, stable, "checkpoint stable");
            if append.send(LogCommand::Rotate).is_err() {
                tracing::error!("decision log thread stopped");
            }
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

/// Sends a REPLY once its page went through the page stage (at once without one).
fn send_reply(peers: &Peers, reply: proto::Reply, pages: &PageStage) {
    let client = reply.client;
    if pages.is_instant() {
        peers.to_client(client, &Message::Reply(reply));
        return;
    }
    let (peers, pages) = (peers.clone(), pages.clone());
    tokio::spawn(async move {
        pages.render().await;
        peers.to_client(client, &Message::Reply(reply));
    });
}

fn reject_label(reject: &Reject) -> &'static str {
    match reject {
        Reject::WrongView => "wrong_view",
        Reject::WrongEpoch => "wrong_epoch",
        Reject::NotMember => "not_member",
        Reject::BadSignature => "bad_signature",
        // Answers to our own fetches, and PREPAREs carried again by COMMITs: harmless.
        Reject::Warrant(usig::VerifyError::Replay { .. }) => "duplicate_warrant",
        Reject::Warrant(_) => "bad_warrant",
        Reject::InvalidNewView => "invalid_new_view",
        Reject::AboveWatermark => "above_watermark",
        Reject::InvalidRecoveryState(_) => "invalid_recovery_state",
    }
}

fn on_frame(
    core: &mut ReplicaCore,
    cluster: &Cluster,
    metrics: &Metrics,
    frame: &[u8],
) -> Vec<Action> {
    let Some(message) = metrics.decode(frame) else {
        return Vec::new();
    };
    let result = match message {
        Message::Prepare(p) => core.on_proposal(Proposal::Prepare(p)),
        Message::NewView(nv) => core.on_proposal(Proposal::NewView(nv)),
        Message::Commit(c) => core.on_commit(c),
        Message::ViewChange(vc) => core.on_view_change(vc),
        Message::ReqViewChange(r) => core.on_req_view_change(&r),
        Message::Checkpoint(c) => core.on_checkpoint(c),
        Message::ReplyCommitDb(r) => core.on_reply_commit_db(r),
        Message::Request(r) => Ok(core.on_request(&r)),
        Message::FetchCommits(f) => {
            if from_mate(core, cluster, f.replica, |k| f.verify(k)) {
                Ok(core.on_fetch_commits(f.replica, f.warrants, &f.slots))
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
