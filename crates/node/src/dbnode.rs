//! The database node's driver: the voter decides, the executor runs decided operations on the
//! node's own database (concurrently across partitions, as the voter releases them), and the
//! results go back to the deciding group as REPLY-COMMIT-DBs.
//!
//! Database nodes also talk to each other for state transfer (docs/state-transfer.md): the
//! voter says when to ask, when to take a snapshot and when to install; this driver opens the
//! snapshot, streams its rows as signed STATE-CHUNKs, signs its digest, and installs.

use crate::app::AppKind;
use crate::epoch::Epochs;
use crate::intake::{Batches, Intake, Item};
use crate::metrics::{self, Metrics, Stage, Timings};
use crate::peers::Peers;
use crate::writer::OneWriter;
use crate::{NodeError, NodeOptions, Started};
use dbvote::executor::{Executor, Outcome};
use dbvote::voter::{StoredResult, VoterAction, VoterCore, VoterReject};
use dbvote::{Application, Backend};
use proto::{
    CommitDb, DbCheckpoint, Message, NodeId, Signature, SigningKey, StateChunk, TableRows,
};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Pause before running an execution again after the database failed it.
const RETRY: Duration = Duration::from_millis(200);

/// The database node's settings.
#[derive(Clone)]
pub struct DbNodeOptions {
    pub node: NodeOptions,
    /// The database URL; `None` takes the one in the cluster configuration.
    pub database: Option<String>,
    /// Stored results kept below the executed orders (`dbvote::voter::STORED_RESULTS_KEPT`).
    pub keep_results: u64,
}

/// A batch finished: the batch, and each execution's result or why it must all run again.
type Done = (Batch, Result<(Vec<Vec<u8>>, Duration), String>);

/// Executions to run in order in one database transaction.
type Batch = Vec<dbvote::executor::Execution>;

/// The stored results a lookup found, by order (`None`: none stored).
type LookedUp = Vec<(u64, Option<StoredResult>)>;

/// A state-transfer step finished on its own task.
enum Transfer {
    /// The snapshot for this order is pinned (or could not be opened): executions may go on.
    Pinned(u64),
    /// The install for this order ended: the installed progress, or why it failed.
    Installed(u64, Result<Vec<u64>, String>),
}

/// Runs the database node until `shutdown` completes.
pub async fn run(
    options: DbNodeOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), NodeError> {
    match AppKind::of(&options.node.cluster)? {
        AppKind::Bank => run_app(options, dbvote::bank::Bank, shutdown).await,
        AppKind::Noop => run_app(options, dbvote::noop::Noop, shutdown).await,
        AppKind::Tpcc => run_app(options, tpcc::Tpcc, shutdown).await,
    }
}

/// Where the database at `url` stands (to start a new configuration epoch after it).
pub async fn progress(
    cluster: &proto::config::Cluster,
    url: &str,
) -> Result<dbvote::executor::Progress, NodeError> {
    async fn read<A: Application>(
        app: A,
        url: &str,
        partitions: u32,
    ) -> Result<dbvote::executor::Progress, NodeError> {
        dbvote::postgres::create_database_if_missing(url).await?;
        let executor = Executor::open(url, app, partitions).await?;
        let progress = executor.progress().await;
        executor.close().await;
        Ok(progress?)
    }
    let partitions = cluster.config.partitions;
    match AppKind::of(cluster)? {
        AppKind::Bank => read(dbvote::bank::Bank, url, partitions).await,
        AppKind::Noop => read(dbvote::noop::Noop, url, partitions).await,
        AppKind::Tpcc => read(tpcc::Tpcc, url, partitions).await,
    }
}

async fn run_app<A: Application>(
    options: DbNodeOptions,
    app: A,
    shutdown: impl Future<Output = ()>,
) -> Result<(), NodeError> {
    let mut cluster = options.node.cluster.clone();
    let me = options.node.id;
    let configured = cluster
        .config
        .db_nodes
        .iter()
        .find(|d| d.id == me.0)
        .ok_or(NodeError::UnknownNode(me.0))?;
    let url = options
        .database
        .clone()
        .unwrap_or_else(|| configured.database.clone());
    let kind = AppKind::of(&cluster)?;
    dbvote::postgres::create_database_if_missing(&url).await?;
    let executor = Executor::open(&url, app, cluster.config.partitions).await?;
    let progress = executor.progress().await?;
    let last_seq = progress.partitions.iter().map(|p| p.last_seq).collect();
    tracing::info!(
        id = me.0,
        highest_order = progress.highest_order,
        "database node resuming"
    );
    let mut voter = VoterCore::new(
        cluster.clone(),
        kind.rule(),
        options.node.key()?,
        me,
        last_seq,
    )
    .keep_stored_results(options.keep_results)
    .resume(&progress);
    let key = Arc::new(options.node.key()?);
    let Started {
        metrics,
        mut peers,
        inbound,
    } = options.node.start().await?;
    let batches = Batches {
        commit_dbs: true,
        ..Batches::default()
    };
    let mut intake = Intake::new(inbound, batches);
    let mut epochs = Epochs::new(options.node.config_path.clone(), &cluster);
    metrics.highest_order.set(progress.highest_order);
    metrics.config_epoch.set(cluster.epoch().0);
    let (done, mut finished) = mpsc::unbounded_channel::<Done>();
    let (transfers, mut transferred) = mpsc::unbounded_channel::<Transfer>();
    let (lookups, mut looked_up) = mpsc::unbounded_channel::<LookedUp>();
    // When the transfer in progress sent its first STATE-REQUEST.
    let mut transfer_began: Option<Instant> = None;
    let mut tick = tokio::time::interval(options.node.tick);
    // When each order's first COMMIT-DB arrived, until it is handed to the executor.
    let mut voting = Timings::default();
    let mut writer = OneWriter::default();
    tokio::pin!(shutdown);
    loop {
        let actions = tokio::select! {
            _ = &mut shutdown => break,
            Some(item) = intake.next(&metrics) => 'took: {
                let (message, len) = match item {
                    Item::Message(message, len) => (message, len),
                    Item::CommitDbs(commit_dbs) => {
                        break 'took on_commit_dbs(&mut voter, &metrics, &mut voting, commit_dbs)
                    }
                    Item::Requests(_) | Item::ReplyCommitDbs(_) | Item::Decided(..) => {
                        unreachable!("a database node's intake batches COMMIT-DBs only")
                    }
                };
                match message {
                    Message::Configure(configure) => {
                        let node = (&peers, me, key.as_ref());
                        match epochs.on_configure(node, &cluster, None, &configure) {
                            None => {}
                            Some(Ok(next)) => {
                                tracing::info!(
                                    id = me.0,
                                    epoch = next.epoch().0,
                                    after = next.config.epoch_start.order,
                                    "configuration epoch {} starts after global order {}",
                                    next.epoch().0,
                                    next.config.epoch_start.order
                                );
                                peers.update(&next)?;
                                voter.reconfigure(next.clone());
                                metrics.config_epoch.set(next.epoch().0);
                                cluster = next;
                            }
                            Some(Err(e)) => {
                                tracing::debug!(id = me.0, error = %e, "CONFIGURE refused");
                                metrics.reject("bad_configure");
                            }
                        }
                        Vec::new()
                    }
                    Message::ConfigRequest(request) => {
                        if !epochs.answer(&peers, &cluster, &request) {
                            metrics.reject("bad_config_request");
                        }
                        Vec::new()
                    }
                    message => {
                        let arrived = Instant::now();
                        let actions = on_message(&mut voter, &metrics, message, len);
                        metrics.stage(Stage::Handle, arrived.elapsed());
                        actions
                    }
                }
            },
            Some((batch, result)) = finished.recv() => match result {
                Ok((results, took)) => {
                    Metrics::observe(&metrics.execution_seconds, took);
                    metrics.batch_size.observe(batch.len() as f64);
                    metrics.executions.inc_by(batch.len() as u64);
                    let at_once = executor.batches_in_one_handoff();
                    let counted = metrics.transactions_in_one_handoff.get();
                    metrics.transactions_in_one_handoff.inc_by(at_once.saturating_sub(counted));
                    if let Some(last) = batch.iter().map(|e| e.order).max() {
                        if last > metrics.highest_order.get() {
                            metrics.highest_order.set(last);
                        }
                    }
                    let orders = batch.iter().map(|e| e.order);
                    writer.executed();
                    voter.executed_all(orders.zip(results).collect())
                }
                Err(why) => {
                    let orders: Vec<u64> = batch.iter().map(|e| e.order).collect();
                    tracing::warn!(?orders, %why, "execution failed; retrying");
                    metrics.reject("execution_failed");
                    spawn_batch(&executor, batch, &done, RETRY);
                    Vec::new()
                }
            },
            Some(found) = looked_up.recv() => {
                let looked_up = voter.looked_up(found);
                for _ in 0..looked_up.missing {
                    metrics.reject("no_stored_result");
                }
                for _ in 0..looked_up.mismatched {
                    metrics.reject("malformed_execution");
                }
                looked_up.actions
            }
            Some(step) = transferred.recv() => match step {
                Transfer::Pinned(order) => voter.snapshot_pinned(order),
                Transfer::Installed(order, Ok(last_seq)) => {
                    metrics.state_transfers_completed.inc();
                    let took = transfer_began.take().map(|t| t.elapsed()).unwrap_or_default();
                    Metrics::observe(&metrics.state_transfer_seconds, took);
                    if order > metrics.highest_order.get() {
                        metrics.highest_order.set(order);
                    }
                    tracing::info!(
                        order,
                        seconds = took.as_secs_f64(),
                        "state transfer complete: installed the state after order {order}, \
                         verified against f+1 matching digests; executing from there"
                    );
                    voter.installed(order, last_seq)
                }
                Transfer::Installed(order, Err(why)) => {
                    metrics.state_transfers_failed.inc();
                    tracing::warn!(
                        order,
                        %why,
                        "state transfer not installed (the old state is intact); asking another \
                         database node to send the rows"
                    );
                    voter.install_failed(order)
                }
            },
            _ = tick.tick() => {
                metrics.transport.update(peers.transport());
                let actions = voter.tick();
                for _ in 0..voter.take_transferred_skips() {
                    metrics.reject("transferred_order");
                }
                for _ in 0..voter.take_evicted_votes() {
                    metrics.reject("evicted_vote");
                }
                for _ in 0..voter.take_refused_lookups() {
                    metrics.reject("lookup_refused");
                }
                actions
            }
        };
        // SQLite has one writer: the chains released while a batch runs go together in the
        // next (`writer`). PostgreSQL runs each chain on its own connection, in parallel per
        // partition.
        let merge = executor.backend() == Backend::Sqlite;
        for action in actions {
            match action {
                VoterAction::Execute(batch) => {
                    for execution in &batch {
                        if let Some(took) = voting.finish(&execution.order) {
                            metrics.stage(Stage::Vote, took);
                        }
                    }
                    let batch = batch.into_iter().map(|e| dbvote::executor::Execution {
                        order: e.order,
                        positions: e.positions,
                        operation: e.request.operation,
                    });
                    if merge {
                        writer.release(batch);
                    } else {
                        spawn_batch(&executor, batch.collect(), &done, Duration::ZERO);
                    }
                }
                VoterAction::ForgetResults { through } => {
                    // One DELETE per 4,096 orders, awaited here: the next step waits for it.
                    match executor.forget_results_through(through).await {
                        Ok(rows) => tracing::debug!(through, rows, "forgot stored results"),
                        Err(e) => tracing::warn!(
                            through,
                            error = %e,
                            "could not forget stored results (the table keeps growing; the \
                             next step tries again)"
                        ),
                    }
                }
                VoterAction::Reply { group, reply } => {
                    metrics.replies.inc();
                    let members = voter.members_of(group);
                    peers.to_nodes(members, &Message::ReplyCommitDb(reply));
                }
                VoterAction::ToDbNodes { to, message } => {
                    if let Message::StateRequest(request) = message.as_ref() {
                        metrics.state_transfers_started.inc();
                        transfer_began.get_or_insert_with(Instant::now);
                        tracing::info!(
                            target_order = request.target_order,
                            sender = request.sender.0,
                            "this database node is behind (decided executions wait for \
                             predecessors it will not receive): asking the other database \
                             nodes for their state after order {}",
                            request.target_order
                        );
                    }
                    peers.to_nodes(to, &message);
                }
                VoterAction::Snapshot {
                    order,
                    answer,
                    stream,
                } => {
                    metrics.state_snapshots_served.inc();
                    let serve = Serve {
                        me,
                        key: key.clone(),
                        peers: peers.clone(),
                        answer,
                        stream,
                    };
                    spawn_snapshot(&executor, order, serve, &transfers);
                }
                VoterAction::Install {
                    order,
                    digest,
                    parts,
                } => spawn_install(&executor, order, digest, parts, &transfers),
                VoterAction::LookUp { orders } => spawn_lookup(&executor, orders, &lookups),
            }
        }
        if let Some(batch) = writer.next() {
            spawn_batch(&executor, batch, &done, Duration::ZERO);
        }
        if transfer_began.is_some() && voter.transferring().is_none() {
            transfer_began = None;
            tracing::info!(
                "this database node caught up on its own (the missing executions arrived): \
                 state transfer dropped"
            );
        }
    }
    tracing::info!(id = me.0, "database node stopping");
    peers.shutdown().await;
    executor.close().await;
    Ok(())
}

/// Runs one batch on its own task (after `delay`), in one transaction; the executor runs each
/// execution exactly once and in order, so a retry or a repeat only looks up stored results.
fn spawn_batch<A: Application>(
    executor: &Executor<A>,
    batch: Batch,
    done: &mpsc::UnboundedSender<Done>,
    delay: Duration,
) {
    let executor = executor.clone();
    let done = done.clone();
    tokio::spawn(async move {
        // Only a retry waits: tokio's timer rounds even a zero sleep up to its next 1 ms tick,
        // which every batch would otherwise wait for.
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let started = Instant::now();
        let result = match executor.execute_batch(&batch).await {
            Ok(outcomes) => outcomes
                .into_iter()
                .map(|outcome| match outcome {
                    Outcome::Executed(r) | Outcome::AlreadyExecuted(r) => Ok(r),
                    Outcome::NotReady { gaps } => Err(format!(
                        "predecessors not executed yet ({gaps:?}): the voter and the database \
                         disagree on progress"
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|results| (results, started.elapsed())),
            Err(e) => Err(e.to_string()),
        };
        let _ = done.send((batch, result));
    });
}

/// Reads the stored results of `orders` on a task of its own, outside the writer's
/// transactions; a failed read counts as no result (the member asks again). The voter bounds
/// the orders in flight per member (`dbvote::voter::MAX_LOOKUPS_PER_MEMBER`), and with them
/// these tasks: a member naming made-up orders starts no more reads than that at once.
fn spawn_lookup<A: Application>(
    executor: &Executor<A>,
    orders: Vec<u64>,
    done: &mpsc::UnboundedSender<LookedUp>,
) {
    let executor = executor.clone();
    let done = done.clone();
    tokio::spawn(async move {
        let mut found = Vec::with_capacity(orders.len());
        for order in orders {
            let result = executor.stored_result(order).await.unwrap_or_else(|e| {
                tracing::warn!(order, error = %e, "could not read a stored result");
                None
            });
            found.push((order, result));
        }
        let _ = done.send(found);
    });
}

/// How long a STATE-CHUNK may wait for room in a destination's queue before the transfer is
/// given up (a requester that died must not keep our snapshot open).
const CHUNK_STALL: Duration = Duration::from_secs(10);

/// Signs STATE-CHUNK `index` of the snapshot at `order` and sends it to `serve.stream`, waiting
/// for room in their queues; false if a destination stalled for [`CHUNK_STALL`].
async fn send_chunk(serve: &Serve, order: u64, rows: TableRows, index: u32, last: bool) -> bool {
    let chunk = StateChunk {
        db_node: serve.me,
        order,
        index,
        last,
        rows,
        signature: Signature([0; 64]),
    }
    .sign(&serve.key);
    let message = Message::StateChunk(chunk);
    let paced = serve.peers.to_nodes_paced(&serve.stream, &message);
    let sent = tokio::time::timeout(CHUNK_STALL, paced).await.is_ok();
    if !sent {
        tracing::warn!(
            order,
            index,
            "a database node behind stopped taking STATE-CHUNKs"
        );
    }
    sent
}

/// Who a snapshot is for, and how to reach and sign for them.
struct Serve {
    me: NodeId,
    key: Arc<SigningKey>,
    peers: Peers,
    answer: Vec<NodeId>,
    stream: Vec<NodeId>,
}

/// Opens a snapshot for `order` (reporting it pinned at once, so that executions go on),
/// streams its rows as signed STATE-CHUNKs to `stream` (one chunk behind the reading, so that
/// the last one can say so, and each only once the destinations' queues take it: a large state
/// goes at the receivers' pace instead of overflowing their queues), and sends the signed digest
/// to `answer` after the last chunk.
fn spawn_snapshot<A: Application>(
    executor: &Executor<A>,
    order: u64,
    serve: Serve,
    pinned: &mpsc::UnboundedSender<Transfer>,
) {
    let executor = executor.clone();
    let pinned = pinned.clone();
    tokio::spawn(async move {
        let snapshot = executor.snapshot().await;
        let _ = pinned.send(Transfer::Pinned(order));
        let started = Instant::now();
        let serve = Arc::new(serve);
        let (chunks, mut to_send) = mpsc::channel::<TableRows>(2);
        let sender = {
            let serve = serve.clone();
            tokio::spawn(async move {
                let mut held: Option<TableRows> = None;
                let mut index = 0;
                while let Some(rows) = to_send.recv().await {
                    if let Some(previous) = held.replace(rows) {
                        if !send_chunk(&serve, order, previous, index, false).await {
                            // Dropping the receiver lets the reading finish without sending.
                            return index;
                        }
                        index += 1;
                    }
                }
                if let Some(last) = held {
                    if send_chunk(&serve, order, last, index, true).await {
                        index += 1;
                    }
                }
                index
            })
        };
        let streamed = match snapshot {
            Ok(snapshot) => {
                snapshot
                    .stream(!serve.stream.is_empty(), |rows| {
                        let chunks = chunks.clone();
                        async move {
                            let _ = chunks.send(rows).await;
                        }
                    })
                    .await
            }
            Err(e) => Err(e),
        };
        drop(chunks);
        if streamed.is_err() {
            // No last chunk: the requester's attempt fails and it asks again.
            sender.abort();
        }
        let sent = sender.await.unwrap_or(0);
        match streamed {
            Ok(digest) => {
                let checkpoint = DbCheckpoint {
                    db_node: serve.me,
                    target: order,
                    order,
                    digest: Some(digest),
                    signature: Signature([0; 64]),
                }
                .sign(&serve.key);
                let answer = serve.answer.iter().copied();
                serve
                    .peers
                    .to_nodes(answer, &Message::DbCheckpoint(checkpoint));
                tracing::info!(
                    order,
                    answer = ?serve.answer,
                    stream = ?serve.stream,
                    chunks = sent,
                    seconds = started.elapsed().as_secs_f64(),
                    "served a state snapshot to database nodes that are behind"
                );
            }
            Err(e) => tracing::warn!(
                order,
                error = %e,
                "could not read a state snapshot for a database node that is behind; it will \
                 ask again"
            ),
        }
    });
}

/// Installs transferred rows in one transaction (the executor checks them against the agreed
/// digest) and reports the installed progress.
fn spawn_install<A: Application>(
    executor: &Executor<A>,
    order: u64,
    digest: [u8; 32],
    parts: Vec<TableRows>,
    done: &mpsc::UnboundedSender<Transfer>,
) {
    let executor = executor.clone();
    let done = done.clone();
    tokio::spawn(async move {
        let result = executor
            .install(order, digest, &parts)
            .await
            .map(|progress| progress.iter().map(|p| p.last_seq).collect())
            .map_err(|e| e.to_string());
        let _ = done.send(Transfer::Installed(order, result));
    });
}

/// The COMMIT-DBs of one burst with the links they came on, each execution timed from now
/// until it is handed to the executor.
fn on_commit_dbs(
    voter: &mut VoterCore,
    metrics: &Metrics,
    voting: &mut Timings<u64>,
    commit_dbs: Vec<(NodeId, CommitDb)>,
) -> Vec<VoterAction> {
    let arrived = Instant::now();
    for execution in commit_dbs.iter().flat_map(|(_, c)| &c.executions) {
        voting.start(execution.order, arrived);
    }
    let mut actions = Vec::new();
    for (from, commit_db) in commit_dbs {
        actions.extend(commit_db_outcome(
            metrics,
            voter.on_commit_db(from, commit_db),
        ));
    }
    metrics.stage(Stage::Handle, arrived.elapsed());
    actions
}

fn on_message(
    voter: &mut VoterCore,
    metrics: &Metrics,
    message: Message,
    frame_len: usize,
) -> Vec<VoterAction> {
    let (result, what) = match message {
        Message::StateRequest(request) => (voter.on_state_request(&request), "state_request"),
        Message::DbCheckpoint(checkpoint) => (voter.on_db_checkpoint(&checkpoint), "db_checkpoint"),
        Message::StateChunk(chunk) => {
            let rows = chunk.rows.rows.len() as u64;
            let result = voter.on_state_chunk(chunk);
            if result.is_ok() {
                metrics.state_rows_received.inc_by(rows);
                metrics.state_bytes_received.inc_by(frame_len as u64);
            }
            (result, "state_chunk")
        }
        other => {
            metrics.reject(format!("unexpected_{}", metrics::kind(&other)));
            return Vec::new();
        }
    };
    result.unwrap_or_else(|reject| {
        rejected(metrics, reject, what);
        Vec::new()
    })
}

/// The actions of a COMMIT-DB the voter took (its malformed executions counted), or nothing.
fn commit_db_outcome(
    metrics: &Metrics,
    result: Result<(Vec<VoterAction>, usize), VoterReject>,
) -> Vec<VoterAction> {
    match result {
        Ok((actions, malformed)) => {
            for _ in 0..malformed {
                metrics.reject("malformed_execution");
            }
            actions
        }
        Err(reject) => {
            rejected(metrics, reject, "commit_db");
            Vec::new()
        }
    }
}

/// Counts a refused message of kind `what` by reason.
fn rejected(metrics: &Metrics, reject: VoterReject, what: &str) {
    metrics.reject(match (reject, what) {
        (VoterReject::NotMember, _) => "not_member".to_owned(),
        (VoterReject::WrongEpoch, _) => "wrong_epoch".to_owned(),
        (VoterReject::Malformed, "commit_db") => "malformed_commit_db".to_owned(),
        (VoterReject::Malformed, what) => format!("malformed_{what}"),
        (VoterReject::Stale, what) => format!("stale_{what}"),
        (VoterReject::RateLimited, what) => format!("rate_limited_{what}"),
        (VoterReject::Oversized, what) => format!("oversized_{what}"),
    });
}
