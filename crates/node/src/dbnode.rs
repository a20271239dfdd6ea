//! The database node's driver: the voter decides, the executor runs decided operations on the
//! node's own database (concurrently across partitions, as the voter releases them), and the
//! results go back to the deciding group as REPLY-COMMIT-DBs.

use crate::app::AppKind;
use crate::metrics::{self, Metrics};
use crate::{NodeError, NodeOptions, Started};
use dbvote::executor::{Executor, Outcome};
use dbvote::voter::{VoterAction, VoterCore, VoterReject};
use dbvote::Application;
use proto::{Message, NodeId};
use std::future::Future;
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
}

/// A batch finished: the batch, and each execution's result or why it must all run again.
type Done = (Batch, Result<(Vec<Vec<u8>>, Duration), String>);

/// Executions to run in order in one database transaction.
type Batch = Vec<dbvote::executor::Execution>;

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
        dbvote::executor::create_database_if_missing(url).await?;
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
    let cluster = options.node.cluster.clone();
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
    dbvote::executor::create_database_if_missing(&url).await?;
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
    );
    let Started {
        metrics,
        peers,
        mut inbound,
    } = options.node.start().await?;
    metrics.highest_order.set(progress.highest_order);
    let (done, mut finished) = mpsc::unbounded_channel::<Done>();
    let mut tick = tokio::time::interval(options.node.tick);
    tokio::pin!(shutdown);
    loop {
        let actions = tokio::select! {
            _ = &mut shutdown => break,
            Some(inbound) = inbound.recv() => on_frame(&mut voter, &metrics, &inbound.frame),
            Some((batch, result)) = finished.recv() => match result {
                Ok((results, took)) => {
                    Metrics::observe(&metrics.execution_seconds, took);
                    metrics.batch_size.observe(batch.len() as f64);
                    let mut actions = Vec::new();
                    for (execution, result) in batch.iter().zip(results) {
                        metrics.executions.inc();
                        if execution.order > metrics.highest_order.get() {
                            metrics.highest_order.set(execution.order);
                        }
                        actions.extend(voter.executed(execution.order, result));
                    }
                    actions
                }
                Err(why) => {
                    let orders: Vec<u64> = batch.iter().map(|e| e.order).collect();
                    tracing::warn!(?orders, %why, "execution failed; retrying");
                    metrics.reject("execution_failed");
                    spawn_batch(&executor, batch, &done, RETRY);
                    Vec::new()
                }
            },
            _ = tick.tick() => {
                metrics.transport.update(peers.transport());
                Vec::new()
            }
        };
        for action in actions {
            match action {
                VoterAction::Execute(batch) => {
                    let batch = batch
                        .into_iter()
                        .map(|e| dbvote::executor::Execution {
                            order: e.order,
                            positions: e.positions,
                            operation: e.request.operation,
                        })
                        .collect();
                    spawn_batch(&executor, batch, &done, Duration::ZERO);
                }
                VoterAction::Reply { group, reply } => {
                    metrics.replies.inc();
                    let members = cluster.members(group).map(|r| NodeId(r.id));
                    peers.to_nodes(members, &Message::ReplyCommitDb(reply));
                }
            }
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
        tokio::time::sleep(delay).await;
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

fn on_frame(voter: &mut VoterCore, metrics: &Metrics, frame: &[u8]) -> Vec<VoterAction> {
    let Some(message) = metrics.decode(frame) else {
        return Vec::new();
    };
    let Message::CommitDb(commit_db) = message else {
        metrics.reject(format!("unexpected_{}", metrics::kind(&message)));
        return Vec::new();
    };
    match voter.on_commit_db(&commit_db) {
        Ok((actions, malformed)) => {
            for _ in 0..malformed {
                metrics.reject("malformed_execution");
            }
            actions
        }
        Err(reject) => {
            metrics.reject(match reject {
                VoterReject::NotMember => "not_member",
                VoterReject::WrongEpoch => "wrong_epoch",
                VoterReject::Malformed => "malformed_commit_db",
            });
            Vec::new()
        }
    }
}
