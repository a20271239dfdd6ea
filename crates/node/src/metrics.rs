//! What the roles count, exported in Prometheus format (`cloudbft_*`).
//!
//! One set of metrics for all roles keeps names uniform across processes; each role updates
//! the ones that concern it (a primary has no executions, a database node no batches).

use net::metrics::{Registry, TransportMetrics};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// A label with one value: the message kind or the rejection reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Kind {
    pub kind: String,
}

/// A role's metrics.
#[derive(Clone)]
pub struct Metrics {
    /// Frames received, by message kind.
    pub received: Family<Kind, Counter>,
    /// Frames or messages dropped, by reason.
    pub rejected: Family<Kind, Counter>,
    /// Client requests the primary accepted (new ones and retransmissions of ordered ones).
    pub requests: Counter,
    /// PREPAREs sent (primary).
    pub batches: Counter,
    pub batch_size: Histogram,
    /// Warrants created by this node's USIG.
    pub warrants: Counter,
    pub warrant_seconds: Histogram,
    /// Decisions recorded in the decision log and sent to the database nodes (replica).
    pub commits: Counter,
    pub persist_seconds: Histogram,
    /// Operations executed (database node).
    pub executions: Counter,
    pub execution_seconds: Histogram,
    /// Database transactions that took one hand-off to SQLite's thread (database node).
    pub transactions_in_one_handoff: Counter,
    /// Highest global order executed (database node): compare across nodes to see a lagging one.
    pub highest_order: Gauge<u64, AtomicU64>,
    /// REPLYs sent (replica) or REPLY-COMMIT-DBs sent (database node).
    pub replies: Counter,
    /// From the first sight of an order's decision to its REPLY (replica), in seconds.
    pub reply_seconds: Histogram,
    /// State-transfer attempts this database node started (STATE-REQUESTs sent).
    pub state_transfers_started: Counter,
    /// State transfers installed here.
    pub state_transfers_completed: Counter,
    /// Installs refused (rows that did not hash to the agreed digest) or failed.
    pub state_transfers_failed: Counter,
    /// Rows and frame bytes of accepted STATE-CHUNKs.
    pub state_rows_received: Counter,
    pub state_bytes_received: Counter,
    /// From the first STATE-REQUEST of a transfer to its install, in seconds.
    pub state_transfer_seconds: Histogram,
    /// Snapshots this node took for other database nodes.
    pub state_snapshots_served: Counter,
    /// 1 while a restarted replica recovers (JOIN sent, no peer's state installed yet), else 0.
    pub recovering: Gauge<u64, AtomicU64>,
    /// Recoveries this replica completed since it started (0 or 1).
    pub recoveries: Counter,
    /// Views whose primary this replica refused (it warranted something other than the view's
    /// next PREPARE).
    pub refused_primaries: Counter,
    /// Requests waiting for the primary's next batch (one per client), and the most that may.
    pub admission_waiting: Gauge<u64, AtomicU64>,
    pub admission_capacity: Gauge<u64, AtomicU64>,
    /// The primary's PREPAREs undecided now, and those that expired undecided (`primary::pacing`).
    pub pacing_undecided: Gauge<u64, AtomicU64>,
    pub pacing_expired: Counter,
    /// Choices of VIEW-CHANGEs a primary candidate did not make a NEW-VIEW of, being over
    /// `proto::limits::MAX_NEW_VIEW_BYTES` (docs/protocol.md, "Bounded VIEW-CHANGEs").
    pub new_views_too_large: Counter,
    /// 1 once f+1 EPOCH-CLOSEs of every group certify the end of this configuration epoch
    /// (replica; docs/protocol.md, "Reconfiguration").
    pub epoch_closed: Gauge<u64, AtomicU64>,
    /// The configuration epoch the node runs.
    pub config_epoch: Gauge<u64, AtomicU64>,
    /// The view the replica is in.
    pub view: Gauge<u64, AtomicU64>,
    /// Pages waiting for a page worker, and workers busy (replica; see crate::page).
    pub pages_queued: Gauge<u64, AtomicU64>,
    pub page_workers_busy: Gauge<u64, AtomicU64>,
    /// Time per request in each stage of the pipeline, by stage (see [`Stage`]): what the
    /// benchmarks' time-per-stage breakdown reads (docs/results/paper.md, Fig. 6).
    pub stage_seconds: Family<StageLabel, Histogram, fn() -> Histogram>,
    pub transport: TransportMetrics,
}

/// The stages a request goes through, as timed by the node that sees each one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Primary: from a client's REQUEST arriving to the PREPARE that orders it being sent
    /// (signature check, waiting for the batch, the warrant).
    Order,
    /// Any node: the protocol core's time on one inbound message (signature and warrant
    /// checks, mostly), per message.
    Handle,
    /// Replica: from the PREPARE that carries a request arriving to the group's decision on
    /// it (PREPARE's warrant checked, our COMMIT warranted, f+1 COMMITs received and checked).
    Agree,
    /// Replica: from the COMMIT-DB going out to f+1 matching REPLY-COMMIT-DBs (the database
    /// nodes' vote, execution and replies, and the network both ways).
    Database,
    /// Replica: a page waiting for a page worker, and a worker's time on it.
    PageQueue,
    PageWork,
    /// Database node: from an order's first COMMIT-DB to its execution starting (waiting for
    /// f+1 matching COMMIT-DBs and for its predecessors on its partitions).
    Vote,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Order => "order",
            Stage::Handle => "handle",
            Stage::Agree => "agree",
            Stage::Database => "database",
            Stage::PageQueue => "page_queue",
            Stage::PageWork => "page_work",
            Stage::Vote => "vote",
        }
    }
}

/// When each request (or order) entered a stage, until it leaves it: the driver calls
/// [`Timings::start`] where a stage begins and [`Timings::finish`] where it ends. Entries that
/// never finish (a request another node completed, a client that vanished) are dropped once
/// there are too many, smallest key first.
pub struct Timings<K: Ord> {
    started: std::collections::BTreeMap<K, std::time::Instant>,
}

impl<K: Ord> Default for Timings<K> {
    fn default() -> Self {
        Timings {
            started: std::collections::BTreeMap::new(),
        }
    }
}

impl<K: Ord> Timings<K> {
    /// Most entries kept.
    const MAX: usize = 65_536;

    /// Notes that `key` entered the stage at `at`, unless it already had.
    pub fn start(&mut self, key: K, at: std::time::Instant) {
        self.started.entry(key).or_insert(at);
        while self.started.len() > Self::MAX {
            self.started.pop_first();
        }
    }

    /// How long `key` has been in the stage, if it was started; forgets it.
    pub fn finish(&mut self, key: &K) -> Option<Duration> {
        self.started.remove(key).map(|at| at.elapsed())
    }
}

/// The `stage` label of [`Metrics::stage_seconds`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabel {
    pub stage: &'static str,
}

fn seconds() -> Histogram {
    // 100 µs to ~52 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 20))
}

impl Metrics {
    /// Registers everything under `cloudbft_`.
    pub fn register(registry: &mut Registry) -> Arc<Metrics> {
        let m = Metrics {
            received: Family::default(),
            rejected: Family::default(),
            requests: Counter::default(),
            batches: Counter::default(),
            batch_size: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            warrants: Counter::default(),
            warrant_seconds: seconds(),
            commits: Counter::default(),
            persist_seconds: seconds(),
            executions: Counter::default(),
            execution_seconds: seconds(),
            transactions_in_one_handoff: Counter::default(),
            highest_order: Gauge::default(),
            replies: Counter::default(),
            reply_seconds: seconds(),
            state_transfers_started: Counter::default(),
            state_transfers_completed: Counter::default(),
            state_transfers_failed: Counter::default(),
            state_rows_received: Counter::default(),
            state_bytes_received: Counter::default(),
            state_transfer_seconds: seconds(),
            state_snapshots_served: Counter::default(),
            recovering: Gauge::default(),
            recoveries: Counter::default(),
            refused_primaries: Counter::default(),
            admission_waiting: Gauge::default(),
            admission_capacity: Gauge::default(),
            pacing_undecided: Gauge::default(),
            pacing_expired: Counter::default(),
            new_views_too_large: Counter::default(),
            epoch_closed: Gauge::default(),
            config_epoch: Gauge::default(),
            view: Gauge::default(),
            pages_queued: Gauge::default(),
            page_workers_busy: Gauge::default(),
            stage_seconds: Family::new_with_constructor(seconds),
            transport: TransportMetrics::register(registry),
        };
        let r = registry.sub_registry_with_prefix("cloudbft");
        r.register(
            "received",
            "Frames received by message kind",
            m.received.clone(),
        );
        r.register("rejected", "Messages dropped by reason", m.rejected.clone());
        r.register(
            "requests",
            "Client requests accepted (new, or retransmissions of ordered ones)",
            m.requests.clone(),
        );
        r.register("batches", "PREPARE batches sent", m.batches.clone());
        r.register(
            "batch_size",
            "Requests per PREPARE (primary) or executions per transaction (database node)",
            m.batch_size.clone(),
        );
        r.register("warrants", "Unique warrants created", m.warrants.clone());
        r.register(
            "warrant_seconds",
            "Time per warrant",
            m.warrant_seconds.clone(),
        );
        r.register("commits", "Decisions made", m.commits.clone());
        r.register(
            "persist_seconds",
            "Time to append a decision to the decision log",
            m.persist_seconds.clone(),
        );
        r.register("executions", "Operations executed", m.executions.clone());
        r.register(
            "execution_seconds",
            "Time per database transaction (a batch of executions)",
            m.execution_seconds.clone(),
        );
        r.register(
            "transactions_in_one_handoff",
            "SQLite transactions opened, written and committed in one hand-off (an application \
             without statements, every execution ready by the last committed progress)",
            m.transactions_in_one_handoff.clone(),
        );
        r.register(
            "highest_order",
            "Highest global order executed here",
            m.highest_order.clone(),
        );
        r.register("replies", "Replies sent", m.replies.clone());
        r.register(
            "reply_seconds",
            "From decision to reply, per order",
            m.reply_seconds.clone(),
        );
        r.register(
            "state_transfers_started",
            "State-transfer attempts started (STATE-REQUESTs sent by a database node behind)",
            m.state_transfers_started.clone(),
        );
        r.register(
            "state_transfers_completed",
            "State transfers installed",
            m.state_transfers_completed.clone(),
        );
        r.register(
            "state_transfers_failed",
            "Transferred states refused (digest mismatch) or not installed",
            m.state_transfers_failed.clone(),
        );
        r.register(
            "state_rows_received",
            "Rows received in accepted STATE-CHUNKs",
            m.state_rows_received.clone(),
        );
        r.register(
            "state_bytes_received",
            "Frame bytes of accepted STATE-CHUNKs",
            m.state_bytes_received.clone(),
        );
        r.register(
            "state_transfer_seconds",
            "From a transfer's first STATE-REQUEST to its install",
            m.state_transfer_seconds.clone(),
        );
        r.register(
            "state_snapshots_served",
            "State snapshots taken for other database nodes",
            m.state_snapshots_served.clone(),
        );
        r.register(
            "recovering",
            "1 while this restarted replica rejoins its group (JOIN sent, no state installed)",
            m.recovering.clone(),
        );
        r.register(
            "recoveries",
            "Times this replica installed a peer's state after a restart",
            m.recoveries.clone(),
        );
        r.register(
            "refused_primaries",
            "Views whose primary this replica refused for warranting something other than the view's next PREPARE (a faulty primary candidate)",
            m.refused_primaries.clone(),
        );
        r.register(
            "admission_waiting",
            "Client requests waiting for the primary's next batch (one per client)",
            m.admission_waiting.clone(),
        );
        r.register(
            "admission_capacity",
            "Most client requests that may wait at the primary (more are refused and retransmitted)",
            m.admission_capacity.clone(),
        );
        r.register(
            "pacing_undecided",
            "The primary's PREPAREs that f+1 replicas of a group have not said DECIDED for yet",
            m.pacing_undecided.clone(),
        );
        r.register(
            "pacing_expired",
            "PREPAREs that stopped holding back the next one without their DECIDEDs (hints lost or withheld)",
            m.pacing_expired.clone(),
        );
        r.register(
            "new_views_too_large",
            "Choices of VIEW-CHANGEs a primary candidate waited on, their NEW-VIEW being over the limit (a member may pad its VIEW-CHANGE)",
            m.new_views_too_large.clone(),
        );
        r.register(
            "epoch_closed",
            "1 once this configuration epoch's end is certified (an online reconfiguration)",
            m.epoch_closed.clone(),
        );
        r.register("view", "The view this replica is in", m.view.clone());
        r.register(
            "config_epoch",
            "The configuration epoch this node runs",
            m.config_epoch.clone(),
        );
        r.register(
            "pages_queued",
            "Pages waiting for a page worker (the page-generation stage)",
            m.pages_queued.clone(),
        );
        r.register(
            "page_workers_busy",
            "Page workers busy with a page",
            m.page_workers_busy.clone(),
        );
        r.register(
            "stage_seconds",
            "Time per request in a stage of the pipeline, by stage",
            m.stage_seconds.clone(),
        );
        Arc::new(m)
    }

    /// Records `elapsed` in `stage`.
    pub fn stage(&self, stage: Stage, elapsed: Duration) {
        self.stage_seconds
            .get_or_create(&StageLabel {
                stage: stage.name(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// The primary's admission queue: `waiting` of at most `capacity`.
    pub fn admission(&self, waiting: usize, capacity: usize) {
        self.admission_waiting.set(waiting as u64);
        self.admission_capacity.set(capacity as u64);
    }

    /// The primary's pacing window: PREPAREs undecided now, and expired since the start.
    /// Returns how many expired since the last call.
    pub fn pacing(&self, undecided: usize, expired: u64) -> u64 {
        self.pacing_undecided.set(undecided as u64);
        let new = expired.saturating_sub(self.pacing_expired.get());
        self.pacing_expired.inc_by(new);
        new
    }

    /// The candidate's NEW-VIEWs found too large since the start. Returns how many since the
    /// last call.
    pub fn new_views_too_large(&self, total: u64) -> u64 {
        let new = total.saturating_sub(self.new_views_too_large.get());
        self.new_views_too_large.inc_by(new);
        new
    }

    /// Counts a received frame of this kind.
    pub fn received(&self, kind: &str) {
        self.received
            .get_or_create(&Kind { kind: kind.into() })
            .inc();
    }

    /// Counts a dropped message for this reason.
    pub fn reject(&self, reason: impl Into<String>) {
        let reason = reason.into();
        tracing::debug!(%reason, "message rejected");
        self.rejected.get_or_create(&Kind { kind: reason }).inc();
    }

    /// Rejections counted for this reason so far (tests and logs).
    pub fn rejected(&self, reason: &str) -> u64 {
        self.rejected
            .get_or_create(&Kind {
                kind: reason.into(),
            })
            .get()
    }

    /// Decodes an inbound frame and counts it by kind; an undecodable one is counted as
    /// `malformed` and dropped.
    pub fn decode(&self, frame: &[u8]) -> Option<proto::Message> {
        match proto::Envelope::decode(frame) {
            Ok(message) => {
                self.received(kind(&message));
                Some(message)
            }
            Err(e) => {
                tracing::debug!(error = %e, "undecodable frame");
                self.reject("malformed");
                None
            }
        }
    }

    pub fn observe(histogram: &Histogram, elapsed: Duration) {
        histogram.observe(elapsed.as_secs_f64());
    }
}

/// The name of a message's kind, for labels.
pub fn kind(message: &proto::Message) -> &'static str {
    use proto::Message::*;
    match message {
        Request(_) => "request",
        Prepare(_) => "prepare",
        Commit(_) => "commit",
        CommitDb(_) => "commit_db",
        ReplyCommitDb(_) => "reply_commit_db",
        Reply(_) => "reply",
        FetchPrepares(_) => "fetch_prepares",
        FetchCommits(_) => "fetch_commits",
        ReqViewChange(_) => "req_view_change",
        ViewChange(_) => "view_change",
        NewView(_) => "new_view",
        Checkpoint(_) => "checkpoint",
        StateRequest(_) => "state_request",
        DbCheckpoint(_) => "db_checkpoint",
        StateChunk(_) => "state_chunk",
        Join(_) => "join",
        RecoveryRequest(_) => "recovery_request",
        RecoveryState(_) => "recovery_state",
        Reconfigure(_) => "reconfigure",
        EpochClose(_) => "epoch_close",
        Configure(_) => "configure",
        PositionRequest(_) => "position_request",
        PositionReport(_) => "position_report",
        ConfigRequest(_) => "config_request",
        EpochStarted(_) => "epoch_started",
        Decided(_) => "decided",
        Requests(_) => "requests",
        Replies(_) => "replies",
    }
}

/// Starts the registry's endpoint if the node has one.
pub async fn serve(
    addr: Option<std::net::SocketAddr>,
    registry: Registry,
) -> Result<(), crate::NodeError> {
    if let Some(addr) = addr {
        net::metrics::serve(addr, Arc::new(registry))
            .await
            .map_err(|source| crate::NodeError::Bind {
                addr: addr.to_string(),
                source,
            })?;
    }
    Ok(())
}

/// A database node's `cloudbft_highest_order`, read from its metrics endpoint (the launcher
/// waits on it before a stop, and tests on a restarted node's catching up).
pub fn highest_order(metrics: std::net::SocketAddr) -> Option<u64> {
    value(metrics, "cloudbft_highest_order").map(|v| v as u64)
}

/// The value of the first sample named exactly `name` (a series without labels) that a
/// metrics endpoint serves: for the launcher, the soak test and tests that wait on a node.
pub fn value(metrics: std::net::SocketAddr, name: &str) -> Option<f64> {
    scrape(metrics)?.lines().find_map(|line| {
        let (sample, value) = line.split_once(' ')?;
        (sample == name).then(|| value.trim().parse().ok())?
    })
}

/// The Prometheus text a metrics endpoint serves (`None` if it does not answer within a few
/// seconds): for the launcher, the autoscaler and tests.
pub fn scrape(metrics: std::net::SocketAddr) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream =
        std::net::TcpStream::connect_timeout(&metrics, std::time::Duration::from_secs(1)).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: metrics\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    Some(text)
}
