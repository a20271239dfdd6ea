//! The primary's driver: admits client requests, has each batch warranted by its USIG and
//! broadcasts the PREPAREs to every group replica; answers replicas' fetches of lost PREPAREs;
//! orders the operator's RECONFIGURE and starts the next configuration epoch on its CONFIGURE.

use crate::app::AppKind;
use crate::epoch::Epochs;
use crate::intake::{Batches, Intake, Item};
use crate::metrics::{self, Metrics, Stage, Timings};
use crate::peers::Peers;
use crate::usig::UsigWorker;
use crate::{NodeError, NodeOptions, Started};
use primary::core::{Action, PrimaryCore, Rejection};
use proto::config::{Cluster, ClusterConfig};
use proto::{ClientId, FetchPrepares, Message, NodeId, Proposal, Request, View};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// At most this many PREPAREs answer one fetch (a replica further behind asks again).
const MAX_FETCH: u64 = 256;

/// The primary's settings.
#[derive(Clone)]
pub struct PrimaryOptions {
    pub node: NodeOptions,
    /// usigd's socket for this primary's identity.
    pub usig_socket: PathBuf,
    /// Most requests per PREPARE (1 turns batching off).
    pub max_batch: usize,
    /// Most PREPAREs undecided by the groups at once (0: no limit; `primary::pacing`).
    pub pipeline: usize,
}

/// Runs the primary until `shutdown` completes.
pub async fn run(
    options: PrimaryOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), NodeError> {
    let mut cluster = options.node.cluster.clone();
    let me = options.node.id;
    let usig = options.node.usig(&cluster.config.primaries)?;
    let app = AppKind::of(&cluster)?;
    let key = options.node.key()?;
    let Started {
        metrics,
        mut peers,
        inbound,
    } = options.node.start().await?;
    let batches = Batches {
        requests: true,
        decided: true,
        ..Batches::default()
    };
    let mut intake = Intake::new(inbound, batches);
    let (usig, mut warranted) = UsigWorker::start(&options.usig_socket, usig, metrics.clone())?;
    let new_core = |cluster: &Arc<Cluster>| {
        PrimaryCore::new(
            cluster.clone(),
            app.rule(),
            me,
            View(0),
            options.max_batch.max(1),
        )
        .with_pipeline(options.pipeline)
    };
    let mut core = new_core(&cluster);
    let mut epochs = Epochs::new(options.node.config_path.clone(), &cluster);
    // The next configuration's shape, from a valid RECONFIGURE of this epoch.
    let mut shape: Option<ClusterConfig> = None;
    let mut tick = tokio::time::interval(options.node.tick);
    // When each admitted request arrived, until the PREPARE that orders it goes out.
    let mut arrivals = Timings::default();
    tracing::info!(
        id = me.0,
        max_batch = options.max_batch,
        pipeline = options.pipeline,
        "primary running"
    );
    tokio::pin!(shutdown);
    loop {
        let actions = tokio::select! {
            _ = &mut shutdown => break,
            Some(item) = intake.next(&metrics) => 'took: {
                let message = match item {
                    Item::Message(message, _) => message,
                    Item::Requests(requests) => {
                        break 'took on_requests(&mut core, &metrics, &mut arrivals, requests)
                    }
                    Item::Decided(from, decided) => {
                        break 'took handled(&metrics, core.on_decided(from, decided))
                    }
                    Item::ReplyCommitDbs(_) | Item::CommitDbs(_) => {
                        unreachable!("the primary's intake batches requests only")
                    }
                };
                match message {
                    Message::Reconfigure(r) => on_reconfigure(&mut core, &metrics, &mut shape, r),
                    Message::PositionRequest(request) => {
                        if epochs.position_request(&cluster, request) {
                            core.freeze();
                        } else {
                            metrics.reject("bad_position_request");
                        }
                        Vec::new()
                    }
                    Message::Configure(configure) => {
                        let node = (&peers, me, &key);
                        match epochs.on_configure(node, &cluster, shape.as_ref(), &configure) {
                            None => Vec::new(),
                            Some(Ok(next)) => {
                                let pending = core.take_pending();
                                tracing::info!(
                                    id = me.0,
                                    epoch = next.epoch().0,
                                    held = pending.len(),
                                    "configuration epoch {} starts: {} requests held for it",
                                    next.epoch().0,
                                    pending.len()
                                );
                                cluster = next;
                                peers.update(&cluster)?;
                                metrics.config_epoch.set(cluster.epoch().0);
                                core = new_core(&cluster);
                                shape = None;
                                core.on_requests(pending)
                                    .into_iter()
                                    .filter_map(Result::ok)
                                    .flatten()
                                    .collect()
                            }
                            Some(Err(e)) => {
                                tracing::warn!(id = me.0, error = %e, "CONFIGURE refused");
                                metrics.reject("bad_configure");
                                Vec::new()
                            }
                        }
                    }
                    Message::ConfigRequest(request) => {
                        if !epochs.answer(&peers, &cluster, &request) {
                            metrics.reject("bad_config_request");
                        }
                        Vec::new()
                    }
                    message => {
                        let arrived = Instant::now();
                        let actions = on_message(&mut core, &cluster, &peers, &metrics, message);
                        metrics.stage(Stage::Handle, arrived.elapsed());
                        actions
                    }
                }
            },
            Some(result) = warranted.recv() => core.warranted(result?),
            _ = tick.tick() => {
                metrics.transport.update(peers.transport());
                metrics.admission(core.pending(), core.pending_capacity());
                let actions = core.on_tick();
                if metrics.new_views_too_large(core.new_views_too_large()) > 0 {
                    tracing::warn!(
                        id = me.0,
                        "the smallest VIEW-CHANGEs held would make a NEW-VIEW over the frame: \
                         waiting for more (a member may be padding its VIEW-CHANGE)"
                    );
                }
                let expired = metrics.pacing(core.undecided(), core.pacing_expired());
                if expired > 0 {
                    tracing::debug!(
                        id = me.0,
                        expired,
                        "PREPAREs expired undecided: no DECIDED from f+1 replicas of a group \
                         within two ticks (start-up, lost hints, or slow replicas)"
                    );
                }
                actions
            }
        };
        let replicas = cluster.config.replicas.iter().map(|r| NodeId(r.id));
        for action in actions {
            match action {
                Action::Warrant { bytes } => usig.warrant(bytes),
                Action::Broadcast(proposal) => {
                    if let Proposal::Prepare(prepare) = &proposal {
                        metrics.batches.inc();
                        metrics.batch_size.observe(prepare.entries.len() as f64);
                        for entry in &prepare.entries {
                            let key = (entry.request.client, entry.request.timestamp);
                            if let Some(took) = arrivals.finish(&key) {
                                metrics.stage(Stage::Order, took);
                            }
                        }
                        if prepare.reconfigure.is_some() {
                            tracing::info!(
                                id = me.0,
                                counter = prepare.ui.counter,
                                "RECONFIGURE ordered: the configuration epoch's last PREPARE"
                            );
                        }
                    } else {
                        tracing::info!(id = me.0, view = core.view().0, "new view: primary now");
                    }
                    peers.to_nodes(replicas.clone(), &proposal.into_message());
                }
            }
        }
        // Frozen for the operator: answer once the warrant in flight (if any) is made.
        if epochs.asked.is_some() && !usig.busy() {
            epochs.report(&peers, me, &cluster, &key, usig.last(), None);
        }
    }
    tracing::info!(id = me.0, "primary stopping");
    peers.shutdown().await;
    Ok(())
}

/// The operator's RECONFIGURE: remembered as the next shape once valid, ordered if we are the
/// primary; a refused one is logged with the reason (the operator's command shows it too).
fn on_reconfigure(
    core: &mut PrimaryCore,
    metrics: &Metrics,
    shape: &mut Option<ClusterConfig>,
    reconfigure: proto::Reconfigure,
) -> Vec<Action> {
    let next = reconfigure.next.clone();
    match core.on_reconfigure(reconfigure) {
        Ok(actions) => {
            *shape = toml::from_str(&next).ok();
            actions
        }
        Err(e) => {
            tracing::warn!(error = %e, "RECONFIGURE refused");
            metrics.reject("bad_reconfigure");
            Vec::new()
        }
    }
}

/// Client requests of one burst (their signatures checked together), timed from now until
/// the PREPARE that orders them goes out.
fn on_requests(
    core: &mut PrimaryCore,
    metrics: &Metrics,
    arrivals: &mut Timings<(ClientId, u64)>,
    requests: Vec<Request>,
) -> Vec<Action> {
    let arrived = Instant::now();
    let keys: Vec<_> = requests.iter().map(|r| (r.client, r.timestamp)).collect();
    let mut actions = Vec::new();
    for (key, result) in keys.into_iter().zip(core.on_requests(requests)) {
        if result.is_ok() {
            metrics.requests.inc();
            arrivals.start(key, arrived);
        }
        actions.extend(handled(metrics, result));
    }
    metrics.stage(Stage::Handle, arrived.elapsed());
    actions
}

fn on_message(
    core: &mut PrimaryCore,
    cluster: &Cluster,
    peers: &Peers,
    metrics: &Metrics,
    message: Message,
) -> Vec<Action> {
    let result = match message {
        Message::Join(join) => {
            tracing::info!(
                replica = join.replica.0,
                "a restarted replica asks to rejoin"
            );
            core.on_join(join)
        }
        Message::FetchPrepares(fetch) => {
            on_fetch(core, cluster, peers, metrics, fetch);
            Ok(Vec::new())
        }
        Message::ViewChange(vc) => Ok(core.on_view_change(vc).unwrap_or_else(|invalid| {
            tracing::debug!(error = %invalid, "VIEW-CHANGE refused");
            metrics.reject("invalid_view_change");
            Vec::new()
        })),
        // Replicas tell candidates too; the VIEW-CHANGEs that follow are what counts here.
        // EPOCH-CLOSEs matter to replicas and the operator.
        Message::ReqViewChange(_) | Message::EpochClose(_) => Ok(Vec::new()),
        other => {
            metrics.reject(format!("unexpected_{}", metrics::kind(&other)));
            Ok(Vec::new())
        }
    };
    handled(metrics, result)
}

/// The actions of a message the core took, or nothing for one it refused (counted by reason).
fn handled(metrics: &Metrics, result: Result<Vec<Action>, Rejection>) -> Vec<Action> {
    result.unwrap_or_else(|rejection| {
        let label = match rejection {
            Rejection::UnknownClient => "unknown_client",
            Rejection::BadSignature => "bad_client_signature",
            Rejection::BadPartitions => "bad_partitions",
            Rejection::TooLarge => "request_too_large",
            Rejection::Duplicate => "duplicate_request",
            // Clients send every request to every candidate: a standby one drops it,
            // and that is no sign of a faulty peer.
            // Replicas send JOINs to every candidate too.
            Rejection::NotPrimary => return Vec::new(),
            Rejection::BadJoin => "bad_join",
            Rejection::NotReplica => "decided_from_non_replica",
            // A full admission queue: the client retransmits (crates/primary's admission).
            Rejection::Overloaded => "admission_full",
        };
        metrics.reject(label);
        Vec::new()
    })
}

/// Answers a replica's signed fetch with the PREPAREs it lost, at its configured address.
fn on_fetch(
    core: &mut PrimaryCore,
    cluster: &Cluster,
    peers: &Peers,
    metrics: &Metrics,
    fetch: FetchPrepares,
) {
    let is_replica = cluster.group_of_replica(fetch.replica).is_some();
    let key = cluster.node_key(fetch.replica).filter(|_| is_replica);
    if !key.is_some_and(|k| fetch.verify(k)) {
        metrics.reject("bad_fetch_signature");
        return;
    }
    if fetch.counters.is_empty() {
        metrics.reject("bad_fetch_range");
        return;
    }
    let start = *fetch.counters.start();
    let end = (*fetch.counters.end()).min(start.saturating_add(MAX_FETCH - 1));
    for proposal in core.on_fetch_from(fetch.replica, start..=end) {
        peers.to_node(fetch.replica, &proposal.into_message());
    }
}
