//! The [`Executor`]: runs ordered operations exactly once, in order per partition, over SQLite or
//! PostgreSQL.
//!
//! # Order and parallelism
//!
//! Each [`Execution`] carries its global order id and, for every partition it touches, its
//! sequence number on that partition. It may run when every one of those partitions has executed
//! exactly the sequence number before it. Sequence numbers are dense per partition, so at most
//! one execution is ready per partition at any time, and executions on disjoint partitions run
//! concurrently. A multi-partition operation carries a position on every partition of the
//! configuration, so it waits for everything ordered before it and everything after it waits for
//! it: the paper's global lock, expressed as ordering rather than as a lock table.
//!
//! # Exactly once
//!
//! One database transaction holds the operation's own writes, the new progress of each of its
//! partitions and its result (with its positions and a hash of the operation). A crash before
//! the commit leaves nothing of it; after the commit everything. A repeated request for an
//! executed order returns the stored result and runs nothing.
//!
//! # Locking
//!
//! The progress rows are the partition locks. On PostgreSQL the transaction (`READ COMMITTED`,
//! so that statements after the lock see the predecessor's committed writes) takes them with
//! `SELECT ... FOR UPDATE` in partition order, so multi-partition operations cannot deadlock.
//! SQLite has one writer at a time anyway: a transaction starts with `BEGIN IMMEDIATE`, and
//! writers of this process queue on an async mutex instead of SQLite's busy-wait.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ring::digest::{digest, SHA256};
use serde::{Deserialize, Serialize};
use sqlx::any::AnyPoolOptions;
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, AssertSqlSafe, Connection, Row};
use tokio::sync::Mutex;
use tracing::{debug, info, warn};

use crate::app::{Application, Backend, BatchFailure, PartitionId};
use crate::bookkeeping as bk;
use crate::error::{DbError, ExecError};
use crate::voter::StoredResult;

/// An operation as ordered, ready to be executed on a database node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Execution {
    /// Global order id: dense from 1 across all partitions.
    pub order: u64,
    /// For each partition the operation touches, its sequence number there (dense from 1 per
    /// partition); sorted by partition, each partition once. A multi-partition operation names
    /// every partition of the configuration.
    pub positions: Vec<(PartitionId, u64)>,
    /// The application's operation bytes.
    pub operation: Vec<u8>,
}

/// What [`Executor::execute`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Executed now; the canonical result bytes.
    Executed(Vec<u8>),
    /// This order was executed before (now or in an earlier life of the node); its stored
    /// result. Nothing ran.
    AlreadyExecuted(Vec<u8>),
    /// A predecessor on some partition has not been executed yet. Nothing ran; try again when
    /// an earlier execution on one of these partitions has completed.
    NotReady {
        /// The partitions that are behind.
        gaps: Vec<Gap>,
    },
}

/// A partition that has not reached an execution's predecessor yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    /// The partition.
    pub partition: PartitionId,
    /// The last sequence number it executed.
    pub last_executed: u64,
    /// The execution's sequence number on it.
    pub position: u64,
}

/// Where the node stands, to resume after a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Every partition, in order.
    pub partitions: Vec<PartitionProgress>,
    /// The highest order id executed (0 if none).
    pub highest_order: u64,
    /// Every order up to this one has executed here (or was transferred): where the voter's
    /// barriers for state transfer count from.
    pub executed_through: u64,
    /// Orders up to this one arrived by state transfer, without stored results (0 if none).
    pub transferred_through: u64,
    /// Orders executed here above `executed_through`, in order: chains of different partitions
    /// commit concurrently, so a crash can leave a gap below some of them. Without them the
    /// voter's `executed_through` would stop at the gap for good once it is filled, since
    /// these orders never execute again.
    pub executed_above: Vec<u64>,
}

impl Progress {
    /// The last executed sequence number of a partition.
    pub fn last_seq(&self, partition: PartitionId) -> Option<u64> {
        self.partitions
            .iter()
            .find(|p| p.partition == partition)
            .map(|p| p.last_seq)
    }
}

/// The last execution on one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionProgress {
    /// The partition.
    pub partition: PartitionId,
    /// Its last executed sequence number (0 if none).
    pub last_seq: u64,
    /// The order id executed at that sequence number (0 if none).
    pub last_order: u64,
}

/// The URL of an SQLite database file that is created if missing, for [`Executor::open`].
///
/// `%`, `?` and `#` in the path are percent-encoded; a path that is not UTF-8 is converted
/// lossily.
pub fn sqlite_url(path: &Path) -> String {
    let mut encoded = String::new();
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => encoded.push_str("%25"),
            '?' => encoded.push_str("%3F"),
            '#' => encoded.push_str("%23"),
            c => encoded.push(c),
        }
    }
    format!("sqlite:{encoded}?mode=rwc")
}

/// Executes one application's ordered operations on one database, exactly once and in order.
///
/// Cheap to clone (the clones share the connection pool), so that one executor serves many
/// tasks.
pub struct Executor<A: Application> {
    inner: Arc<Inner<A>>,
}

impl<A: Application> Clone for Executor<A> {
    fn clone(&self) -> Self {
        Executor {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Inner<A> {
    pool: AnyPool,
    app: A,
    backend: Backend,
    partitions: u32,
    /// The URL with its password removed, for messages.
    url: String,
    /// SQLite only: the writers of this process, one at a time, and what the executions'
    /// writer keeps between batches.
    writer: Option<Mutex<Writer>>,
    /// SQLite: batches that ran in one hand-off ([`Executor::batches_in_one_handoff`]).
    one_handoff: AtomicU64,
}

/// SQLite: what [`Executor::execute_batch`] keeps between batches, under the writer lock.
#[derive(Default)]
pub(crate) struct Writer {
    /// The connection, taken out while a batch runs, so that a cancelled or failed batch drops
    /// it, which closes it and rolls its transaction back. Kept, it costs no acquisition from
    /// the pool and no ping on release, each a hand-off to SQLite's thread and back.
    conn: Option<PoolConnection<Any>>,
    /// Every partition's progress as the last batch on `conn` committed it. Taken out while a
    /// batch runs and put back only after its commit, and cleared whenever anything else takes
    /// the writer lock ([`Executor::lock_writer`]: a state transfer's install moves the
    /// progress), so it is what the database holds: the executor is the file's one writer.
    committed: Option<TxProgress>,
}

/// A validated execution, in the database's integer types.
struct Plan {
    order: u64,
    positions: Vec<(PartitionId, u64)>,
    positions_bytes: Vec<u8>,
    operation_hash: Vec<u8>,
}

/// The progress of the partitions one transaction has locked, as that transaction sees it:
/// what it read, moved forward by the executions it ran. The writes are deferred to
/// [`Executor::flush_progress`], before any new read and before the commit, so a chain of n
/// executions on one partition costs one progress read and one update instead of n each, with
/// progress and effects still in the same transaction. On SQLite the transaction reads every
/// partition once at its start, so a whole batch costs one read and one UPDATE.
#[derive(Default)]
struct TxProgress {
    /// Partition → (last_seq as read from the database, progress now).
    known: BTreeMap<PartitionId, (u64, PartitionProgress)>,
}

impl TxProgress {
    /// The plan's partitions' progress, if this transaction knows every one of them.
    fn rows(&self, plan: &Plan) -> Option<Vec<PartitionProgress>> {
        plan.positions
            .iter()
            .map(|(p, _)| self.known.get(p).map(|(_, now)| *now))
            .collect()
    }

    /// Progress just read from the database (no moves pending for these partitions).
    fn learn(&mut self, rows: &[PartitionProgress]) {
        for row in rows {
            self.known.insert(row.partition, (row.last_seq, *row));
        }
    }

    /// The plan executed: each of its partitions is now at its position, by its order.
    fn advance(&mut self, plan: &Plan) {
        for &(partition, seq) in &plan.positions {
            if let Some((_, now)) = self.known.get_mut(&partition) {
                now.last_seq = seq;
                now.last_order = plan.order;
            }
        }
    }

    /// How many partitions moved since they were read or last written.
    fn moved(&self) -> usize {
        let moved = self
            .known
            .values()
            .filter(|(found, now)| *found != now.last_seq);
        moved.count()
    }

    /// The partitions moved since they were read or last written: (partition, last_seq in
    /// the database, progress now). Afterwards the database holds what this transaction sees.
    fn take_moved(&mut self) -> Vec<Moved> {
        let mut moved = Vec::new();
        for (&partition, (found, now)) in &mut self.known {
            if *found != now.last_seq {
                moved.push((partition, *found, *now));
                *found = now.last_seq;
            }
        }
        moved
    }
}

/// A partition a transaction moved: (partition, last_seq in the database, progress now).
type Moved = (PartitionId, u64, PartitionProgress);

/// A statement with its parameters, as sqlx builds it for the `Any` driver.
type AnyQuery<'q> = sqlx::query::Query<'q, Any, sqlx::any::AnyArguments>;

/// Whether `error` is a NOT NULL violation: [`bk::update_progress`]'s refusal to move a
/// partition from where the transaction did not find it.
fn is_not_null_violation(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .is_some_and(|e| e.kind() == sqlx::error::ErrorKind::NotNullViolation)
}

/// Why a batch's transaction stopped.
enum Failure {
    Db(DbError),
    /// Storing these executions' results (indices into the plans) failed: the caller rolls
    /// back and then looks for the stored result that the INSERT collided with.
    Store {
        storing: Vec<usize>,
        source: sqlx::Error,
    },
}

impl From<DbError> for Failure {
    fn from(e: DbError) -> Self {
        Failure::Db(e)
    }
}

/// How an execution relates to the current progress of its partitions.
enum Readiness {
    Ready,
    Behind(Vec<Gap>),
    Taken(String),
}

impl<A: Application> Executor<A> {
    /// Opens (creating if needed) the database at `url` for `app` with `partitions` partitions.
    ///
    /// `sqlite:PATH?mode=rwc` (see [`sqlite_url`]) uses a local file in WAL mode with
    /// `synchronous=FULL`, so a commit survives power loss; `postgres://USER:PASSWORD@HOST/DB`
    /// uses a PostgreSQL database. Creates the application's schema and the bookkeeping tables,
    /// and refuses a database created for another application or partition count.
    ///
    /// Uses sqlx's `Any` driver (see [`crate::app`] for why) and installs its default drivers.
    pub async fn open(url: &str, app: A, partitions: u32) -> Result<Self, DbError> {
        sqlx::any::install_default_drivers();
        let shown = redact(url);
        let backend =
            Backend::from_url(url).ok_or_else(|| DbError::UnsupportedUrl { url: shown.clone() })?;
        if partitions == 0 {
            return Err(DbError::Config(
                "a configuration needs at least one partition".into(),
            ));
        }
        if backend == Backend::Sqlite {
            enable_wal(url, &shown).await?;
        }
        let pool = AnyPoolOptions::new()
            .max_connections(match backend {
                Backend::Sqlite => 4,
                Backend::Postgres => 8,
            })
            .acquire_timeout(Duration::from_secs(30))
            // sqlx pings a connection before handing it out: on SQLite that is a hand-off to
            // the connection's thread and back for every chain, and a local file cannot have
            // gone away. A PostgreSQL connection can, so it is still checked there.
            .test_before_acquire(backend == Backend::Postgres)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        sqlx::raw_sql("PRAGMA synchronous = FULL; PRAGMA busy_timeout = 10000")
                            .execute(conn)
                            .await?;
                    }
                    Ok(())
                })
            })
            .connect(url)
            .await
            .map_err(|source| DbError::Connect {
                url: shown.clone(),
                source,
            })?;
        let executor = Executor {
            inner: Arc::new(Inner {
                pool,
                app,
                backend,
                partitions,
                url: shown,
                writer: (backend == Backend::Sqlite).then(|| Mutex::new(Writer::default())),
                one_handoff: AtomicU64::new(0),
            }),
        };
        executor.create_schema().await?;
        info!(
            url = %executor.inner.url,
            app = executor.inner.app.name(),
            partitions,
            "database node executor open"
        );
        Ok(executor)
    }

    /// The application.
    pub fn app(&self) -> &A {
        &self.inner.app
    }

    /// The backend, from the URL.
    pub fn backend(&self) -> Backend {
        self.inner.backend
    }

    /// The number of partitions of the configuration.
    pub fn partitions(&self) -> u32 {
        self.inner.partitions
    }

    /// The database URL, password removed (for messages).
    pub(crate) fn url(&self) -> &str {
        &self.inner.url
    }

    /// Closes the connections (waits for executions in progress to give theirs back).
    pub async fn close(&self) {
        // The pool waits for every connection it handed out, the writer's too.
        if let Some(mut writer) = self.lock_writer().await {
            writer.conn.take();
        }
        self.inner.pool.close().await;
    }

    async fn create_schema(&self) -> Result<(), DbError> {
        let inner = &self.inner;
        let statements = bk::schema(inner.backend)
            .into_iter()
            .chain(inner.app.schema(inner.backend));
        for statement in statements {
            sqlx::raw_sql(AssertSqlSafe(statement.clone()))
                .execute(&inner.pool)
                .await
                .map_err(|source| DbError::Schema {
                    url: inner.url.clone(),
                    statement,
                    source,
                })?;
        }
        let _writer = self.lock_writer().await;
        let mut tx = self
            .begin(bk::begin_write(inner.backend), "initialising")
            .await?;
        let expected = [
            ("application", inner.app.name().to_owned()),
            ("partitions", inner.partitions.to_string()),
        ];
        for (name, value) in &expected {
            sqlx::query(bk::INSERT_META)
                .bind(*name)
                .bind(value.as_str())
                .execute(&mut *tx)
                .await
                .map_err(self.sql("recording the configuration"))?;
            let found: String = sqlx::query_scalar(bk::SELECT_META)
                .bind(*name)
                .fetch_one(&mut *tx)
                .await
                .map_err(self.sql("reading the configuration"))?;
            if &found != value {
                return Err(DbError::Mismatch {
                    url: inner.url.clone(),
                    what: if *name == "application" {
                        "the application"
                    } else {
                        "the partition count"
                    },
                    found,
                    expected: value.clone(),
                });
            }
        }
        for partition in 0..inner.partitions {
            sqlx::query(bk::INSERT_PARTITION)
                .bind(i64::from(partition))
                .execute(&mut *tx)
                .await
                .map_err(self.sql("creating the progress rows"))?;
        }
        tx.commit()
            .await
            .map_err(self.sql("committing the schema"))?;
        Ok(())
    }

    /// Per-partition last executed sequence numbers and the highest executed order id, read in
    /// one snapshot: where to resume after a restart.
    pub async fn progress(&self) -> Result<Progress, DbError> {
        let mut tx = self
            .begin(
                bk::begin_snapshot(self.inner.backend),
                "reading the progress",
            )
            .await?;
        let partitions = self.read_all_progress(&mut tx).await?;
        let highest: i64 = sqlx::query_scalar(bk::HIGHEST_ORDER)
            .fetch_one(&mut *tx)
            .await
            .map_err(self.sql("reading the highest order"))?;
        let transferred = self.without_results_through(&mut tx).await?;
        // The run of stored results right after the transferred orders ends where the first
        // order is missing (executions of different partitions commit concurrently, so the
        // highest order may stand behind a gap).
        let next: i64 = sqlx::query_scalar(bk::HAS_RESULT)
            .bind(transferred + 1)
            .fetch_one(&mut *tx)
            .await
            .map_err(self.sql("reading the executed orders"))?;
        let executed = if next == 0 {
            transferred
        } else {
            sqlx::query_scalar(bk::END_OF_RUN)
                .bind(transferred)
                .fetch_one(&mut *tx)
                .await
                .map_err(self.sql("reading the executed orders"))?
        };
        let above: Vec<i64> = sqlx::query_scalar(bk::RESULTS_ABOVE)
            .bind(executed)
            .fetch_all(&mut *tx)
            .await
            .map_err(self.sql("reading the executed orders"))?;
        tx.rollback()
            .await
            .map_err(self.sql("ending the progress snapshot"))?;
        Ok(Progress {
            partitions,
            highest_order: self.unsigned(highest, "highest order id")?,
            executed_through: self.unsigned(executed, "executed order id")?,
            transferred_through: self.unsigned(transferred, "transferred order id")?,
            executed_above: above
                .into_iter()
                .map(|o| self.unsigned(o, "executed order id"))
                .collect::<Result<_, _>>()?,
        })
    }

    /// The order up to which every order is in the state without a stored result: it arrived
    /// by state transfer, or its result was forgotten (the `transferred_through` entry).
    async fn without_results_through(&self, tx: &mut AnyConnection) -> Result<i64, DbError> {
        let text: Option<String> = sqlx::query_scalar(bk::SELECT_META)
            .bind(bk::TRANSFERRED)
            .fetch_optional(&mut *tx)
            .await
            .map_err(self.sql("reading the transferred order"))?;
        match text {
            None => Ok(0),
            Some(text) => text.parse().map_err(|_| DbError::Corrupt {
                url: self.inner.url.clone(),
                reason: format!("{} is `{text}`, not an order id", bk::TRANSFERRED),
            }),
        }
    }

    /// Records, in `tx`, that every order up to `through` is in the state without a result.
    pub(crate) async fn set_without_results_through(
        &self,
        tx: &mut AnyConnection,
        through: i64,
        during: &'static str,
    ) -> Result<(), DbError> {
        sqlx::query(bk::UPSERT_META)
            .bind(bk::TRANSFERRED)
            .bind(through.to_string())
            .execute(&mut *tx)
            .await
            .map_err(self.sql(during))?;
        Ok(())
    }

    /// Forgets the stored results of every order up to `order` (all executed), in one
    /// transaction that also records them as orders without results, like transferred ones:
    /// the voter then skips their retransmissions and never runs or looks them up again. This
    /// bounds the results table (docs/operations.md, "Soak"). Returns the rows removed.
    pub async fn forget_results_through(&self, order: u64) -> Result<u64, DbError> {
        let through = self.signed(order, order, "order id")?;
        let _writer = self.lock_writer().await;
        let mut tx = self
            .begin(bk::begin_write(self.inner.backend), "forgetting results")
            .await?;
        if self.without_results_through(&mut tx).await? >= through {
            return Ok(0);
        }
        let removed = sqlx::query(bk::DELETE_RESULTS_THROUGH)
            .bind(through)
            .execute(&mut *tx)
            .await
            .map_err(self.sql("forgetting results"))?
            .rows_affected();
        self.set_without_results_through(&mut tx, through, "recording the forgotten results")
            .await?;
        tx.commit()
            .await
            .map_err(self.sql("committing the forgotten results"))?;
        Ok(removed)
    }

    /// The stored result of an executed order and the positions it ran at, if it was executed
    /// and its result is kept.
    pub async fn stored_result(&self, order: u64) -> Result<Option<StoredResult>, DbError> {
        let signed = self.signed(order, order, "order id")?;
        let row: Option<(Vec<u8>, Vec<u8>, Vec<u8>)> = sqlx::query_as(bk::SELECT_RESULT)
            .bind(signed)
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(self.sql("reading a stored result"))?;
        let Some((positions, _, result)) = row else {
            return Ok(None);
        };
        let positions = self.stored_positions(order, &positions)?;
        Ok(Some(StoredResult { positions, result }))
    }

    /// Decodes the positions stored with `order`'s result.
    fn stored_positions(
        &self,
        order: u64,
        bytes: &[u8],
    ) -> Result<Vec<(PartitionId, u64)>, DbError> {
        decode_positions(bytes).map_err(|reason| DbError::Corrupt {
            url: self.inner.url.clone(),
            reason: format!("stored positions of order {order}: {reason}"),
        })
    }

    /// Executes `execution` if every one of its positions is the next on its partition.
    ///
    /// Returns [`Outcome::Executed`] with the result, [`Outcome::AlreadyExecuted`] with the
    /// stored result if this order was executed before, or [`Outcome::NotReady`] if a
    /// predecessor on some partition is missing; in the last two cases nothing runs. An
    /// execution that contradicts what was executed (this order with other positions or
    /// another operation, or a position already used by another order) is a
    /// [`DbError::Conflict`]; malformed operation bytes are a [`DbError::Malformed`].
    ///
    /// Safe to call concurrently from many tasks and to cancel: a cancelled call leaves the
    /// database before the operation.
    pub async fn execute(&self, execution: &Execution) -> Result<Outcome, DbError> {
        let mut outcomes = self.execute_batch(std::slice::from_ref(execution)).await?;
        Ok(outcomes.pop().expect("one outcome per execution"))
    }

    /// Executes `executions` in this order in **one** database transaction (one commit, one
    /// fsync), each as [`execute`](Self::execute) would: a later one may follow an earlier one
    /// on the same partition. All or nothing: an error leaves the database before the batch.
    /// Returns one outcome per execution.
    pub async fn execute_batch(&self, executions: &[Execution]) -> Result<Vec<Outcome>, DbError> {
        let plans = executions
            .iter()
            .map(|e| self.plan(e))
            .collect::<Result<Vec<_>, _>>()?;
        if self.inner.backend == Backend::Sqlite {
            return self.execute_batch_sqlite(&plans, executions).await;
        }
        let mut conn = self.acquire().await?;

        // A single execution is looked at without locks first, so that a repeat or an early
        // one does not hold its partitions' locks against running executions. A partition
        // that is behind now was behind at this moment of the call (progress only moves
        // forward), and stored results never change, so both answers hold without the locks.
        if let [plan] = plans.as_slice() {
            let rows = self.read_progress(&mut conn, plan, false).await?;
            let unlocked = readiness(&rows, plan);
            if !matches!(unlocked, Readiness::Ready) {
                if let Some(outcome) = self.stored_outcome(&mut conn, plan).await? {
                    return Ok(vec![outcome]);
                }
            }
            if let Readiness::Behind(gaps) = unlocked {
                debug!(order = plan.order, ?gaps, "not ready");
                return Ok(vec![Outcome::NotReady { gaps }]);
            }
        }

        let mut tx = conn
            .begin_with(bk::begin_write(self.inner.backend))
            .await
            .map_err(self.sql("beginning an execution"))?;
        let mut progress = TxProgress::default();
        let mut unstored = Vec::new();
        let run = async {
            let outcomes = self
                .run_locked(&mut tx, &plans, executions, &mut progress, &mut unstored)
                .await?;
            self.store_results(&mut tx, &plans, &outcomes, &mut unstored)
                .await?;
            if let Some(last) = plans.last() {
                self.flush_progress(&mut tx, &mut progress, last.order)
                    .await?;
            }
            Ok(outcomes)
        };
        match run.await {
            Ok(outcomes) => {
                tx.commit()
                    .await
                    .map_err(self.sql("committing an execution"))?;
                Ok(outcomes)
            }
            Err(Failure::Db(e)) => Err(e),
            Err(Failure::Store { storing, source }) => {
                let _ = tx.rollback().await;
                Err(self.store_failed(&mut conn, &plans, &storing, source).await)
            }
        }
    }

    /// [`execute_batch`](Self::execute_batch) on SQLite, whose one writer holds the write lock
    /// for the whole transaction. On the writer's kept connection, and in two hand-offs to
    /// SQLite's thread besides the operations' own statements: one opens the transaction and
    /// reads every partition's progress, one stores the results, moves the progress and
    /// commits (up to [`bk::EXACT_ROWS`] results and [`bk::MOST_PARTITIONS_PER_UPDATE`]
    /// partitions; more take their own statements first). The checks are the same as on
    /// PostgreSQL, and all come before the commit: a result stored twice fails the INSERT,
    /// a partition moved from elsewhere fails the UPDATE, and SQLite runs nothing of the list
    /// after a failed statement. A batch of an application without statements may take one
    /// hand-off instead ([`in_one_handoff`](Self::in_one_handoff)).
    async fn execute_batch_sqlite(
        &self,
        plans: &[Plan],
        executions: &[Execution],
    ) -> Result<Vec<Outcome>, DbError> {
        let writer = self.inner.writer.as_ref().expect("SQLite has one writer");
        let mut writer = writer.lock().await;
        let committed = writer.committed.take();
        let mut conn = match writer.conn.take() {
            Some(conn) => conn,
            None => {
                let mut conn = self.acquire().await?;
                // Dropped only if a batch fails or is cancelled, perhaps inside its
                // transaction: then closed (SQLite rolls back), never returned to the pool.
                conn.close_on_drop();
                conn
            }
        };
        if let Some(committed) = committed {
            let at_once = self.in_one_handoff(&mut conn, plans, executions, committed);
            match at_once.await {
                Ok(None) => {}
                Ok(Some((outcomes, progress))) => {
                    writer.conn = Some(conn);
                    writer.committed = Some(progress);
                    self.inner.one_handoff.fetch_add(1, Ordering::Relaxed);
                    return Ok(outcomes);
                }
                // The application refused before anything reached the database.
                Err(e) => {
                    writer.conn = Some(conn);
                    return Err(e);
                }
            }
        }
        let rows = sqlx::query(bk::BEGIN_AND_READ_ALL_PROGRESS)
            .fetch_all(&mut *conn)
            .await
            .map_err(self.sql("beginning an execution"))?;
        let mut progress = TxProgress::default();
        progress.learn(&self.progress_rows(&rows)?);
        let mut unstored = Vec::new();
        let run = async {
            let outcomes = self
                .run_locked(&mut conn, plans, executions, &mut progress, &mut unstored)
                .await?;
            self.store_move_commit(
                &mut conn,
                bk::store_move_commit,
                plans,
                &outcomes,
                &mut unstored,
                &mut progress,
            )
            .await?;
            Ok(outcomes)
        };
        match run.await {
            Ok(outcomes) => {
                writer.conn = Some(conn);
                writer.committed = Some(progress);
                Ok(outcomes)
            }
            Err(Failure::Db(e)) => Err(e),
            Err(Failure::Store { storing, source }) => {
                if sqlx::query("ROLLBACK").execute(&mut *conn).await.is_err() {
                    return Err((self.sql("storing the results"))(source));
                }
                let error = self.store_failed(&mut conn, plans, &storing, source).await;
                writer.conn = Some(conn);
                Err(error)
            }
        }
    }

    /// SQLite: the whole batch in one hand-off to the connection's thread, when the
    /// application computes its results without the database
    /// ([`Application::results_without_database`]) and `committed`, the progress the writer's
    /// last batch committed, shows every plan ready. One list then opens the transaction,
    /// stores the results, moves the progress from where `committed` says it is and commits
    /// ([`bk::begin_store_move_commit`]), with the same checks as the two hand-offs: the
    /// INSERT refuses a result stored before and the UPDATE a partition that is not where
    /// `committed` says, before the COMMIT. Returns the outcomes and the committed progress,
    /// or `None` when the batch does not qualify or its list failed (rolled back: the caller
    /// then runs the batch the usual way, which reads the progress and finds out why).
    async fn in_one_handoff(
        &self,
        conn: &mut AnyConnection,
        plans: &[Plan],
        executions: &[Execution],
        mut progress: TxProgress,
    ) -> Result<Option<(Vec<Outcome>, TxProgress)>, DbError> {
        if plans.len() > bk::EXACT_ROWS {
            return Ok(None);
        }
        for plan in plans {
            match progress.rows(plan) {
                Some(rows) if matches!(readiness(&rows, plan), Readiness::Ready) => {
                    progress.advance(plan)
                }
                _ => return Ok(None),
            }
        }
        if progress.moved() > bk::MOST_PARTITIONS_PER_UPDATE {
            return Ok(None);
        }
        let operations: Vec<&[u8]> = executions.iter().map(|e| e.operation.as_slice()).collect();
        let Some(results) = self.inner.app.results_without_database(&operations) else {
            return Ok(None);
        };
        let all: Vec<usize> = (0..plans.len()).collect();
        let results = self.app_results(plans, &all, results)?;
        let outcomes: Vec<Outcome> = results.into_iter().map(Outcome::Executed).collect();
        let mut unstored = all;
        let stored = self.store_move_commit(
            conn,
            bk::begin_store_move_commit,
            plans,
            &outcomes,
            &mut unstored,
            &mut progress,
        );
        match stored.await {
            Ok(()) => Ok(Some((outcomes, progress))),
            Err(failure) => {
                let why = match failure {
                    Failure::Db(e) => e.to_string(),
                    Failure::Store { source, .. } => source.to_string(),
                };
                debug!(%why, "batch in one hand-off refused; running it the usual way");
                // Nothing to roll back if the BEGIN itself failed; a broken connection shows
                // in the usual way's first statement.
                let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
                Ok(None)
            }
        }
    }

    async fn acquire(&self) -> Result<PoolConnection<Any>, DbError> {
        self.inner
            .pool
            .acquire()
            .await
            .map_err(self.sql("acquiring a connection"))
    }

    /// Why storing the results of `storing` failed, after the rollback: most likely an order
    /// was executed at other positions, and then its stored result says so.
    async fn store_failed(
        &self,
        conn: &mut AnyConnection,
        plans: &[Plan],
        storing: &[usize],
        source: sqlx::Error,
    ) -> DbError {
        for &i in storing {
            if let Err(conflict @ DbError::Conflict { .. }) =
                self.stored_outcome(conn, &plans[i]).await
            {
                return conflict;
            }
        }
        (self.sql("storing the results"))(source)
    }

    /// The body of [`execute_batch`](Self::execute_batch)'s transaction: one outcome per plan,
    /// in order. The caller stores what is left in `unstored`, writes what `progress` moved
    /// and commits. On SQLite `progress` already knows every partition (read when the
    /// transaction began, under the one write lock), so no plan needs another read.
    async fn run_locked(
        &self,
        tx: &mut AnyConnection,
        plans: &[Plan],
        executions: &[Execution],
        progress: &mut TxProgress,
        unstored: &mut Vec<usize>,
    ) -> Result<Vec<Outcome>, Failure> {
        let mut outcomes = Vec::with_capacity(plans.len());
        // Plans found ready whose operations have not run yet: they run together, as one
        // batch for the application, before any other statement of this transaction.
        let mut ready = Vec::new();
        for plan in plans {
            // Lock first, then look for a stored result: on PostgreSQL a concurrent execution
            // of the same order may have held the locks, and only statements after the lock see
            // its commit. When every position is the next one, this order cannot have run at
            // these positions; that it ran at others shows when its result is stored (primary
            // key). Partitions this transaction already locked and moved need no new read.
            let rows = match progress.rows(plan) {
                Some(rows) => rows,
                None => {
                    self.run_ready(tx, plans, executions, &mut ready, &mut outcomes, unstored)
                        .await?;
                    self.flush_progress(tx, progress, plan.order).await?;
                    let rows = self.read_progress(tx, plan, true).await?;
                    progress.learn(&rows);
                    rows
                }
            };
            let locked = readiness(&rows, plan);
            if !matches!(locked, Readiness::Ready) {
                self.run_ready(tx, plans, executions, &mut ready, &mut outcomes, unstored)
                    .await?;
                self.store_results(tx, plans, &outcomes, unstored).await?;
                if let Some(outcome) = self.stored_outcome(tx, plan).await? {
                    outcomes.push(outcome);
                    continue;
                }
            }
            match locked {
                Readiness::Ready => {}
                Readiness::Behind(gaps) => {
                    outcomes.push(Outcome::NotReady { gaps });
                    continue;
                }
                Readiness::Taken(reason) => {
                    warn!(order = plan.order, %reason, "conflicting execution");
                    return Err(Failure::Db(DbError::Conflict {
                        order: plan.order,
                        reason,
                    }));
                }
            }
            progress.advance(plan);
            ready.push(outcomes.len());
            outcomes.push(Outcome::Executed(Vec::new()));
        }
        self.run_ready(tx, plans, executions, &mut ready, &mut outcomes, unstored)
            .await?;
        Ok(outcomes)
    }

    /// Runs the operations of the plans `ready` names (indices into `plans`, `executions` and
    /// `outcomes`, in order) in one [`Application::execute_all`], fills in their outcomes, and
    /// hands them to `unstored`.
    async fn run_ready(
        &self,
        tx: &mut AnyConnection,
        plans: &[Plan],
        executions: &[Execution],
        ready: &mut Vec<usize>,
        outcomes: &mut [Outcome],
        unstored: &mut Vec<usize>,
    ) -> Result<(), Failure> {
        if ready.is_empty() {
            return Ok(());
        }
        let operations: Vec<&[u8]> = ready
            .iter()
            .map(|&i| executions[i].operation.as_slice())
            .collect();
        let results = self.inner.app.execute_all(tx, &operations).await;
        let results = self.app_results(plans, ready, results)?;
        for (&i, result) in ready.iter().zip(results) {
            debug!(order = plans[i].order, positions = ?plans[i].positions, "executed");
            outcomes[i] = Outcome::Executed(result);
        }
        unstored.append(ready);
        Ok(())
    }

    /// The application's results for the plans `ready` names (indices into `plans`), or the
    /// error that stops the batch: an operation that could not run, or a result lost or made
    /// up (then nothing of the batch may be kept).
    fn app_results(
        &self,
        plans: &[Plan],
        ready: &[usize],
        results: Result<Vec<Vec<u8>>, BatchFailure>,
    ) -> Result<Vec<Vec<u8>>, DbError> {
        let results = results.map_err(|failure| DbError::Execute {
            order: plans[ready[failure.index.min(ready.len() - 1)]].order,
            url: self.inner.url.clone(),
            source: failure.error,
        })?;
        if results.len() != ready.len() {
            return Err(DbError::Execute {
                order: plans[ready[0]].order,
                url: self.inner.url.clone(),
                source: ExecError::Corrupt(format!(
                    "the application returned {} results for {} operations",
                    results.len(),
                    ready.len()
                )),
            });
        }
        Ok(results)
    }

    /// Stores the results of the executions `unstored` names (indices into `plans` and
    /// `outcomes`, each an [`Outcome::Executed`]) in multi-row INSERTs, and empties it. Deferred
    /// to here, before anything reads the results table and before the commit, so that a chain
    /// of n executions costs about log2(n) statements instead of n (each statement is a hand-off
    /// to the database's thread and back); they stay in the executions' transaction.
    async fn store_results(
        &self,
        tx: &mut AnyConnection,
        plans: &[Plan],
        outcomes: &[Outcome],
        unstored: &mut Vec<usize>,
    ) -> Result<(), Failure> {
        let mut rest: &[usize] = unstored;
        while !rest.is_empty() {
            let rows = bk::insert_results_rows(rest.len());
            let (now, later) = rest.split_at(rows);
            let query = self.bind_results(
                sqlx::query(bk::insert_results(self.inner.backend, rows)),
                plans,
                outcomes,
                now,
            )?;
            if let Err(source) = query.execute(&mut *tx).await {
                return Err(Failure::Store {
                    storing: now.to_vec(),
                    source,
                });
            }
            rest = later;
        }
        unstored.clear();
        Ok(())
    }

    /// SQLite: the end of [`execute_batch_sqlite`](Self::execute_batch_sqlite)'s transaction.
    /// Stores the results `unstored` names, writes what `progress` moved and commits, the
    /// last INSERT and UPDATE in one list with the COMMIT (`list`: [`bk::store_move_commit`],
    /// or [`bk::begin_store_move_commit`], which opens the transaction too, for batches that
    /// need no other statement). The UPDATE's rows count is not checked, as
    /// [`flush_progress`](Self::flush_progress) does: it would be known only after the commit,
    /// and every partition moved was read in this transaction or is where the writer's last
    /// commit left it, under SQLite's one write lock, so none can be missing.
    async fn store_move_commit(
        &self,
        conn: &mut AnyConnection,
        list: fn(usize, usize) -> &'static str,
        plans: &[Plan],
        outcomes: &[Outcome],
        unstored: &mut Vec<usize>,
        progress: &mut TxProgress,
    ) -> Result<(), Failure> {
        if unstored.len() > bk::EXACT_ROWS {
            self.store_results(conn, plans, outcomes, unstored).await?;
        }
        let order = plans.last().map_or(0, |plan| plan.order);
        let mut moved = progress.take_moved();
        if moved.len() > bk::MOST_PARTITIONS_PER_UPDATE {
            self.write_moved(conn, &moved, order).await?;
            moved.clear();
        }
        let query = sqlx::query(list(unstored.len(), moved.len()));
        let query = self.bind_results(query, plans, outcomes, unstored)?;
        let query = self.bind_moved(query, &moved, order)?;
        match query.execute(&mut *conn).await {
            Ok(_) => {
                unstored.clear();
                Ok(())
            }
            Err(source) if is_not_null_violation(&source) => {
                Err(Failure::Db(self.moved_elsewhere(&moved)))
            }
            Err(source) => Err(Failure::Store {
                storing: std::mem::take(unstored),
                source,
            }),
        }
    }

    /// Binds [`bk::insert_results`]'s parameters for the executions `indices` names (indices
    /// into `plans` and `outcomes`, each an [`Outcome::Executed`]).
    fn bind_results<'q>(
        &self,
        mut query: AnyQuery<'q>,
        plans: &'q [Plan],
        outcomes: &'q [Outcome],
        indices: &[usize],
    ) -> Result<AnyQuery<'q>, DbError> {
        for &i in indices {
            let plan = &plans[i];
            let Outcome::Executed(result) = &outcomes[i] else {
                unreachable!("only executed orders wait to be stored")
            };
            query = query
                .bind(self.signed(plan.order, plan.order, "order id")?)
                .bind(plan.positions_bytes.as_slice())
                .bind(plan.operation_hash.as_slice())
                .bind(result.as_slice());
        }
        Ok(query)
    }

    /// Binds [`bk::update_progress`]'s parameters for `moved`, in the statement's order.
    /// `order` names the execution in errors.
    fn bind_moved<'q>(
        &self,
        mut query: AnyQuery<'q>,
        moved: &[Moved],
        order: u64,
    ) -> Result<AnyQuery<'q>, DbError> {
        for &(partition, found, now) in moved {
            query = query
                .bind(i64::from(partition))
                .bind(self.signed(found, order, "sequence number")?)
                .bind(self.signed(now.last_seq, order, "sequence number")?);
        }
        for &(partition, _, now) in moved {
            query = query.bind(i64::from(partition)).bind(self.signed(
                now.last_order,
                order,
                "order id",
            )?);
        }
        for &(partition, _, _) in moved {
            query = query.bind(i64::from(partition));
        }
        Ok(query)
    }

    /// Writes the progress this transaction moved (one UPDATE for up to
    /// [`bk::MOST_PARTITIONS_PER_UPDATE`] partitions, however many executions moved them).
    /// `order` names the execution in errors.
    async fn flush_progress(
        &self,
        tx: &mut AnyConnection,
        progress: &mut TxProgress,
        order: u64,
    ) -> Result<(), DbError> {
        self.write_moved(tx, &progress.take_moved(), order).await
    }

    /// The UPDATEs of [`flush_progress`](Self::flush_progress), checking that each partition
    /// was still where the transaction found it (the rows are locked, so anything else means
    /// a writer bypassed the locks).
    async fn write_moved(
        &self,
        tx: &mut AnyConnection,
        moved: &[Moved],
        order: u64,
    ) -> Result<(), DbError> {
        for chunk in moved.chunks(bk::MOST_PARTITIONS_PER_UPDATE) {
            let query = self.bind_moved(
                sqlx::query(bk::update_progress(self.inner.backend, chunk.len())),
                chunk,
                order,
            )?;
            match query.execute(&mut *tx).await {
                Ok(done) if done.rows_affected() == chunk.len() as u64 => {}
                Ok(_) => return Err(self.moved_elsewhere(chunk)),
                Err(source) if is_not_null_violation(&source) => {
                    return Err(self.moved_elsewhere(chunk))
                }
                Err(source) => return Err((self.sql("recording the progress"))(source)),
            }
        }
        Ok(())
    }

    fn moved_elsewhere(&self, moved: &[Moved]) -> DbError {
        let partitions: Vec<PartitionId> = moved.iter().map(|m| m.0).collect();
        DbError::Corrupt {
            url: self.inner.url.clone(),
            reason: format!(
                "progress of partitions {partitions:?} changed while locked (another writer \
                 without the executor's locks?)"
            ),
        }
    }

    /// SHA-256 over every row of every state table in key order and the progress table, read
    /// in one snapshot: identical on every correct node at the same progress, whichever
    /// backend it runs (see [`crate::digest`]).
    pub async fn digest(&self) -> Result<[u8; 32], DbError> {
        let mut tx = self
            .begin(
                bk::begin_snapshot(self.inner.backend),
                "computing the digest",
            )
            .await?;
        let digest = crate::digest::state_digest(&mut tx, &self.transferred_tables())
            .await
            .map_err(self.sql("reading the state for the digest"))?;
        tx.rollback()
            .await
            .map_err(self.sql("ending the digest snapshot"))?;
        Ok(digest)
    }

    fn plan(&self, execution: &Execution) -> Result<Plan, DbError> {
        let order = execution.order;
        let invalid = |reason: String| DbError::InvalidExecution { order, reason };
        if order == 0 || i64::try_from(order).is_err() {
            return Err(invalid("order ids run from 1 to 2^63-1".into()));
        }
        let positions = &execution.positions;
        if positions.is_empty() {
            return Err(invalid("no positions".into()));
        }
        for pair in positions.windows(2) {
            if pair[0].0 >= pair[1].0 {
                return Err(invalid(
                    "positions must be sorted by partition, each partition once".into(),
                ));
            }
        }
        for &(partition, seq) in positions {
            if partition >= self.inner.partitions {
                return Err(invalid(format!(
                    "partition {partition} is outside the configuration of {} partitions",
                    self.inner.partitions
                )));
            }
            if seq == 0 || i64::try_from(seq).is_err() {
                return Err(invalid(format!(
                    "sequence number {seq} on partition {partition}: they run from 1 to 2^63-1"
                )));
            }
        }
        let all = positions.len() == self.inner.partitions as usize;
        if positions.len() != 1 && !all {
            return Err(invalid(format!(
                "positions name {} of {} partitions: a single-partition operation names one, a \
                 multi-partition operation all",
                positions.len(),
                self.inner.partitions
            )));
        }
        let declared = self
            .inner
            .app
            .partitions(&execution.operation)
            .map_err(|source| DbError::Malformed { order, source })?;
        for partition in declared {
            if !positions.iter().any(|&(p, _)| p == partition) {
                return Err(invalid(format!(
                    "the operation touches partition {partition}, which has no position"
                )));
            }
        }
        Ok(Plan {
            order,
            positions: positions.clone(),
            positions_bytes: encode_positions(positions),
            operation_hash: digest(&SHA256, &execution.operation).as_ref().to_vec(),
        })
    }

    async fn stored_outcome(
        &self,
        conn: &mut AnyConnection,
        plan: &Plan,
    ) -> Result<Option<Outcome>, DbError> {
        let order = self.signed(plan.order, plan.order, "order id")?;
        let row: Option<(Vec<u8>, Vec<u8>, Vec<u8>)> = sqlx::query_as(bk::SELECT_RESULT)
            .bind(order)
            .fetch_optional(&mut *conn)
            .await
            .map_err(self.sql("looking up a stored result"))?;
        let Some((positions, operation_hash, result)) = row else {
            return Ok(None);
        };
        if positions != plan.positions_bytes {
            let stored = self.stored_positions(plan.order, &positions)?;
            return Err(DbError::Conflict {
                order: plan.order,
                reason: format!(
                    "it was executed at positions {stored:?}, not {:?}",
                    plan.positions
                ),
            });
        }
        if operation_hash != plan.operation_hash {
            return Err(DbError::Conflict {
                order: plan.order,
                reason: "it was executed with another operation".into(),
            });
        }
        Ok(Some(Outcome::AlreadyExecuted(result)))
    }

    /// The progress rows of the execution's partitions (one, or all), locked if `lock`.
    async fn read_progress(
        &self,
        conn: &mut AnyConnection,
        plan: &Plan,
        lock: bool,
    ) -> Result<Vec<PartitionProgress>, DbError> {
        let one = plan.positions.len() == 1 && self.inner.partitions != 1;
        let mut query = sqlx::query(bk::select_progress(self.inner.backend, one, lock));
        if one {
            query = query.bind(i64::from(plan.positions[0].0));
        }
        let rows = query
            .fetch_all(&mut *conn)
            .await
            .map_err(self.sql("reading the progress"))?;
        let progress = self.progress_rows(&rows)?;
        let found: Vec<PartitionId> = progress.iter().map(|p| p.partition).collect();
        let wanted: Vec<PartitionId> = plan.positions.iter().map(|&(p, _)| p).collect();
        if found != wanted {
            return Err(DbError::Corrupt {
                url: self.inner.url.clone(),
                reason: format!("progress rows {found:?}, expected {wanted:?}"),
            });
        }
        Ok(progress)
    }

    pub(crate) async fn read_all_progress(
        &self,
        conn: &mut AnyConnection,
    ) -> Result<Vec<PartitionProgress>, DbError> {
        let rows = sqlx::query(bk::SELECT_ALL_PROGRESS)
            .fetch_all(&mut *conn)
            .await
            .map_err(self.sql("reading the progress"))?;
        self.progress_rows(&rows)
    }

    pub(crate) fn progress_rows(
        &self,
        rows: &[sqlx::any::AnyRow],
    ) -> Result<Vec<PartitionProgress>, DbError> {
        rows.iter()
            .map(|row| {
                let get = |column: &str| -> Result<i64, DbError> {
                    row.try_get::<i64, _>(column)
                        .map_err(self.sql("decoding the progress"))
                };
                let partition = get("partition_id")?;
                let partition = PartitionId::try_from(partition).map_err(|_| DbError::Corrupt {
                    url: self.inner.url.clone(),
                    reason: format!("progress row for partition {partition}"),
                })?;
                if partition >= self.inner.partitions {
                    return Err(DbError::NoSuchPartition {
                        partition,
                        partitions: self.inner.partitions,
                    });
                }
                Ok(PartitionProgress {
                    partition,
                    last_seq: self.unsigned(get("last_seq")?, "sequence number")?,
                    last_order: self.unsigned(get("last_order")?, "order id")?,
                })
            })
            .collect()
    }

    /// SQLite: the writer lock, for a writer other than the executions' (it may move the
    /// progress, so the executions' writer reads it again afterwards). `None` on PostgreSQL.
    pub(crate) async fn lock_writer(&self) -> Option<tokio::sync::MutexGuard<'_, Writer>> {
        let mut writer = self.inner.writer.as_ref()?.lock().await;
        writer.committed = None;
        Some(writer)
    }

    /// SQLite: how many batches ran in one hand-off to SQLite's thread (an application
    /// without statements, every execution ready by the last committed progress).
    pub fn batches_in_one_handoff(&self) -> u64 {
        self.inner.one_handoff.load(Ordering::Relaxed)
    }

    pub(crate) async fn begin(
        &self,
        statement: &'static str,
        during: &'static str,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>, DbError> {
        self.inner
            .pool
            .begin_with(statement)
            .await
            .map_err(|source| DbError::Sql {
                url: self.inner.url.clone(),
                during,
                source,
            })
    }

    pub(crate) fn sql(&self, during: &'static str) -> impl Fn(sqlx::Error) -> DbError + '_ {
        move |source| DbError::Sql {
            url: self.inner.url.clone(),
            during,
            source,
        }
    }

    pub(crate) fn signed(&self, value: u64, order: u64, what: &str) -> Result<i64, DbError> {
        i64::try_from(value).map_err(|_| DbError::InvalidExecution {
            order,
            reason: format!("{what} {value} does not fit a BIGINT"),
        })
    }

    fn unsigned(&self, value: i64, what: &str) -> Result<u64, DbError> {
        u64::try_from(value).map_err(|_| DbError::Corrupt {
            url: self.inner.url.clone(),
            reason: format!("negative {what} {value}"),
        })
    }
}

/// Compares an execution's positions with the progress of its partitions (same order).
fn readiness(rows: &[PartitionProgress], plan: &Plan) -> Readiness {
    let mut gaps = Vec::new();
    for (row, &(partition, seq)) in rows.iter().zip(&plan.positions) {
        if row.last_seq >= seq {
            return Readiness::Taken(format!(
                "position {seq} on partition {partition} is taken: the partition executed up to \
                 {} (last order {})",
                row.last_seq, row.last_order
            ));
        }
        if row.last_seq + 1 < seq {
            gaps.push(Gap {
                partition,
                last_executed: row.last_seq,
                position: seq,
            });
        } else if row.last_order >= plan.order {
            return Readiness::Taken(format!(
                "partition {partition} already executed the later order {} at sequence {}",
                row.last_order, row.last_seq
            ));
        }
    }
    if gaps.is_empty() {
        Readiness::Ready
    } else {
        Readiness::Behind(gaps)
    }
}

fn encode_positions(positions: &[(PartitionId, u64)]) -> Vec<u8> {
    // A vector of integer pairs always serialises.
    postcard::to_stdvec(positions).unwrap_or_default()
}

fn decode_positions(bytes: &[u8]) -> Result<Vec<(PartitionId, u64)>, String> {
    postcard::from_bytes(bytes).map_err(|e| e.to_string())
}

/// Opens the file once to switch it to write-ahead logging (a property of the file that every
/// later connection sees) and checks that SQLite accepted it.
async fn enable_wal(url: &str, shown: &str) -> Result<(), DbError> {
    let connect = |source| DbError::Connect {
        url: shown.to_owned(),
        source,
    };
    let mut conn = AnyConnection::connect(url).await.map_err(connect)?;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode = WAL")
        .fetch_one(&mut conn)
        .await
        .map_err(connect)?;
    conn.close().await.map_err(connect)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(DbError::NoWal {
            url: shown.to_owned(),
            mode,
        });
    }
    Ok(())
}

/// The URL without its password, for messages and logs.
pub(crate) fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &authority[..at];
    let user = userinfo.split(':').next().unwrap_or_default();
    if user.len() == userinfo.len() {
        return url.to_owned();
    }
    format!("{}{user}:***{}", &url[..scheme_end + 3], &rest[at..])
}

/// How many executed orders a database keeps a result of, and the bytes of those results with
/// their positions and operation hashes (not counting the table's own overhead). Nothing
/// deletes them yet: they grow by one row per executed order, which `cloudbft soak` reports
/// (docs/operations.md, "Soak").
pub async fn stored_results(conn: &mut AnyConnection) -> Result<(u64, u64), sqlx::Error> {
    let (rows, bytes): (i64, i64) = sqlx::query_as(bk::RESULTS_SIZE).fetch_one(conn).await?;
    Ok((rows.max(0) as u64, bytes.max(0) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::noop::Noop;
    use crate::Bank;

    /// A bank executor over a SQLite file in `dir`.
    async fn sqlite(dir: &tempfile::TempDir, partitions: u32) -> Executor<Bank> {
        sqlite_for(dir, Bank, partitions).await
    }

    /// An executor of `app` over the SQLite file in `dir`.
    async fn sqlite_for<A: Application>(
        dir: &tempfile::TempDir,
        app: A,
        partitions: u32,
    ) -> Executor<A> {
        Executor::open(&sqlite_url(&dir.path().join("n.sqlite")), app, partitions)
            .await
            .unwrap()
    }

    /// The bank, but its batches lose their last result.
    struct Forgetful;

    impl Application for Forgetful {
        fn name(&self) -> &'static str {
            Bank.name()
        }

        fn schema(&self, backend: Backend) -> Vec<String> {
            Bank.schema(backend)
        }

        fn partitions(&self, operation: &[u8]) -> Result<Vec<PartitionId>, crate::AppError> {
            Bank.partitions(operation)
        }

        async fn execute(
            &self,
            tx: &mut AnyConnection,
            operation: &[u8],
        ) -> Result<Vec<u8>, ExecError> {
            Bank.execute(tx, operation).await
        }

        async fn execute_all(
            &self,
            tx: &mut AnyConnection,
            operations: &[&[u8]],
        ) -> Result<Vec<Vec<u8>>, crate::BatchFailure> {
            let mut results = Bank.execute_all(tx, operations).await?;
            results.pop();
            Ok(results)
        }

        fn state_tables(&self) -> Vec<(&'static str, &'static str)> {
            Bank.state_tables()
        }
    }

    /// An application whose batch returns fewer results than operations fails the transaction:
    /// no execution is kept with a result it never had.
    #[tokio::test]
    async fn a_batch_short_of_results_keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let url = sqlite_url(&dir.path().join("n.sqlite"));
        let exec = Executor::open(&url, Forgetful, 1).await.unwrap();
        let mut seq = crate::testing::Sequencer::new(1);
        let open = |number| crate::BankOp::Open {
            branch: 0,
            number,
            initial_cents: 5,
        };
        let batch = [seq.bank(&open(1)), seq.bank(&open(2))];
        let digest = exec.digest().await.unwrap();
        match exec.execute_batch(&batch).await {
            Err(DbError::Execute {
                order: 1,
                source: ExecError::Corrupt(reason),
                ..
            }) => assert!(reason.contains("1 results for 2 operations"), "{reason}"),
            other => panic!("expected a corrupt batch, got {other:?}"),
        }
        assert_eq!(exec.digest().await.unwrap(), digest);
        assert_eq!(exec.progress().await.unwrap().last_seq(0), Some(0));
        exec.close().await;
    }

    /// The durability settings are in force on the pool's connections, not just requested.
    #[tokio::test]
    async fn sqlite_runs_wal_with_full_sync() {
        let dir = tempfile::tempdir().unwrap();
        let exec = sqlite(&dir, 2).await;
        let mut conn = exec.inner.pool.acquire().await.unwrap();
        assert_eq!(Backend::of(&conn), Some(Backend::Sqlite));
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(mode, "wal");
        let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(synchronous, 2, "FULL");
        let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(busy, 10_000);
        drop(conn);
        exec.close().await;
    }

    /// On SQLite the progress and results tables are keyed by their rowid: no index beside
    /// them for a commit to write too. A database an earlier build created with `BIGINT` keys
    /// (a rowid and an index each) works as before: it executes, refuses a second execution at
    /// a taken position and answers a repeat from its stored result.
    #[tokio::test]
    async fn sqlite_keys_are_rowids_and_older_bigint_keys_still_work() {
        let dir = tempfile::tempdir().unwrap();
        let exec = sqlite(&dir, 1).await;
        let indexes = |exec: &Executor<Bank>| {
            let pool = exec.inner.pool.clone();
            async move {
                let count: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' \
                     AND tbl_name IN ('cloudbft_progress', 'cloudbft_results')",
                )
                .fetch_one(&pool)
                .await
                .unwrap();
                count
            }
        };
        assert_eq!(indexes(&exec).await, 0);
        exec.close().await;

        let old = tempfile::tempdir().unwrap();
        let url = sqlite_url(&old.path().join("n.sqlite"));
        let pool = sqlx::AnyPool::connect(&url).await.unwrap();
        for table in [
            "CREATE TABLE cloudbft_progress (partition_id BIGINT PRIMARY KEY, \
             last_seq BIGINT NOT NULL, last_order BIGINT NOT NULL)",
            "CREATE TABLE cloudbft_results (order_id BIGINT PRIMARY KEY, positions BLOB NOT \
             NULL, operation_sha256 BLOB NOT NULL, result BLOB NOT NULL)",
        ] {
            sqlx::query(table).execute(&pool).await.unwrap();
        }
        pool.close().await;
        let exec = Executor::open(&url, Bank, 1).await.unwrap();
        let open = |order: u64, number: u32| Execution {
            order,
            positions: vec![(0, order)],
            operation: crate::BankOp::Open {
                branch: 0,
                number,
                initial_cents: 5,
            }
            .encode(),
        };
        let first = exec.execute_batch(&[open(1, 1), open(2, 2)]).await.unwrap();
        assert!(matches!(first[1], Outcome::Executed(_)), "{first:?}");
        let again = exec.execute(&open(2, 2)).await.unwrap();
        let Outcome::Executed(result) = &first[1] else {
            unreachable!()
        };
        assert_eq!(again, Outcome::AlreadyExecuted(result.clone()));
        assert!(matches!(
            exec.execute(&Execution {
                order: 3,
                ..open(2, 3)
            })
            .await,
            Err(DbError::Conflict { order: 3, .. })
        ));
        assert_eq!(exec.progress().await.unwrap().last_seq(0), Some(2));
        assert_eq!(
            indexes(&exec).await,
            2,
            "the older tables kept their indexes"
        );
        exec.close().await;
    }

    fn at(partition: PartitionId, last_seq: u64, last_order: u64) -> PartitionProgress {
        PartitionProgress {
            partition,
            last_seq,
            last_order,
        }
    }

    /// A transaction that read partition 0 at 0 and partition 2 at `found`, and moved both by
    /// one (orders 7 and 8).
    fn moved(found: u64) -> TxProgress {
        let mut progress = TxProgress::default();
        progress.learn(&[at(0, 0, 0), at(2, found, 0)]);
        progress.known.get_mut(&0).unwrap().1 = at(0, 1, 7);
        progress.known.get_mut(&2).unwrap().1 = at(2, found + 1, 8);
        progress
    }

    /// One UPDATE moves several partitions, and fails the transaction (naming them) when any
    /// one of them is no longer where the transaction found it.
    #[tokio::test]
    async fn one_progress_update_moves_partitions_only_from_where_they_were_found() {
        let dir = tempfile::tempdir().unwrap();
        let exec = sqlite(&dir, 3).await;
        let mut tx = exec
            .begin(bk::begin_write(Backend::Sqlite), "test")
            .await
            .unwrap();
        match exec.flush_progress(&mut tx, &mut moved(5), 8).await {
            Err(DbError::Corrupt { reason, .. }) => assert!(reason.contains("[0, 2]"), "{reason}"),
            other => panic!("a stale partition must refuse the move, got {other:?}"),
        }
        // The error ends the transaction (execute_batch drops it: a rollback), as here.
        tx.rollback().await.unwrap();
        let mut tx = exec
            .begin(bk::begin_write(Backend::Sqlite), "test")
            .await
            .unwrap();
        exec.flush_progress(&mut tx, &mut moved(0), 8)
            .await
            .unwrap();
        let rows = exec.read_all_progress(&mut tx).await.unwrap();
        assert_eq!(rows, [at(0, 1, 7), at(1, 0, 0), at(2, 1, 8)]);
        tx.rollback().await.unwrap();
        exec.close().await;
    }

    /// SQLite ends a batch's transaction with one list of statements (INSERT, UPDATE,
    /// COMMIT): a partition not where the transaction found it fails the UPDATE, so neither
    /// the INSERT before it nor the COMMIT after it takes effect.
    #[tokio::test]
    async fn a_stale_partition_stops_the_list_before_its_commit() {
        let dir = tempfile::tempdir().unwrap();
        let exec = sqlite(&dir, 3).await;
        let plans = [exec
            .plan(&Execution {
                order: 8,
                positions: vec![(2, 1)],
                operation: crate::BankOp::Open {
                    branch: 2,
                    number: 0,
                    initial_cents: 1,
                }
                .encode(),
            })
            .unwrap()];
        let outcomes = [Outcome::Executed(b"result".to_vec())];
        let mut conn = exec.inner.pool.acquire().await.unwrap();
        let begin = sqlx::query(bk::BEGIN_AND_READ_ALL_PROGRESS);
        begin.fetch_all(&mut *conn).await.unwrap();
        let mut unstored = vec![0];
        match exec
            .store_move_commit(
                &mut conn,
                bk::store_move_commit,
                &plans,
                &outcomes,
                &mut unstored,
                &mut moved(5),
            )
            .await
        {
            Err(Failure::Db(DbError::Corrupt { reason, .. })) => {
                assert!(reason.contains("[0, 2]"), "{reason}")
            }
            Err(Failure::Db(e)) => panic!("a stale partition must stop the list, got {e}"),
            Err(Failure::Store { source, .. }) => panic!("not a storing error: {source}"),
            Ok(()) => panic!("a stale partition must stop the list"),
        }
        // Still inside the transaction: the COMMIT did not run, and the rollback undoes the
        // INSERT.
        sqlx::query("ROLLBACK").execute(&mut *conn).await.unwrap();
        assert_eq!(exec.stored_result(8).await.unwrap(), None);
        let untouched = [at(0, 0, 0), at(1, 0, 0), at(2, 0, 0)];
        assert_eq!(exec.read_all_progress(&mut conn).await.unwrap(), untouched);

        let begin = sqlx::query(bk::BEGIN_AND_READ_ALL_PROGRESS);
        begin.fetch_all(&mut *conn).await.unwrap();
        let mut unstored = vec![0];
        exec.store_move_commit(
            &mut conn,
            bk::store_move_commit,
            &plans,
            &outcomes,
            &mut unstored,
            &mut moved(0),
        )
        .await
        .unwrap_or_else(|_| panic!("the partitions were where they were found"));
        assert!(unstored.is_empty());
        assert!(
            sqlx::query("ROLLBACK").execute(&mut *conn).await.is_err(),
            "the list commits"
        );
        assert_eq!(
            exec.stored_result(8).await.unwrap().map(|s| s.result),
            Some(b"result".to_vec())
        );
        let moved = [at(0, 1, 7), at(1, 0, 0), at(2, 1, 8)];
        assert_eq!(exec.read_all_progress(&mut conn).await.unwrap(), moved);
        drop(conn);
        exec.close().await;
    }

    /// A SQLite batch dropped while it waits on its transaction leaves nothing open: its
    /// connection closes (a rollback) instead of going back to the pool, and the next batch
    /// runs on a new one.
    #[tokio::test]
    async fn a_cancelled_sqlite_batch_leaves_no_transaction_open() {
        let dir = tempfile::tempdir().unwrap();
        let exec = sqlite(&dir, 1).await;
        let open = |order: u64| Execution {
            order,
            positions: vec![(0, order)],
            operation: crate::BankOp::Open {
                branch: 0,
                number: order as u32,
                initial_cents: 1,
            }
            .encode(),
        };
        exec.execute_batch(&[open(1)]).await.unwrap();
        // Another connection holds the write lock, so the batch cannot get past its BEGIN.
        let mut other = exec.inner.pool.acquire().await.unwrap();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *other)
            .await
            .unwrap();
        let second = [open(2)];
        let waiting = exec.execute_batch(&second);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), waiting)
                .await
                .is_err(),
            "the batch ran past another writer's lock"
        );
        assert!(exec.lock_writer().await.unwrap().conn.is_none());
        sqlx::query("ROLLBACK").execute(&mut *other).await.unwrap();
        drop(other);
        let outcomes = exec.execute_batch(&[open(2), open(3)]).await.unwrap();
        assert!(
            matches!(
                outcomes.as_slice(),
                [Outcome::Executed(_), Outcome::Executed(_)]
            ),
            "{outcomes:?}"
        );
        assert_eq!(exec.progress().await.unwrap().last_seq(0), Some(3));
        exec.close().await;
    }

    /// The no-op application, but computing its results inside the transaction, as any
    /// application with statements must: the usual two hand-offs per batch.
    struct NoopInTransaction;

    impl Application for NoopInTransaction {
        fn name(&self) -> &'static str {
            Noop.name()
        }

        fn schema(&self, backend: Backend) -> Vec<String> {
            Noop.schema(backend)
        }

        fn partitions(&self, operation: &[u8]) -> Result<Vec<PartitionId>, crate::AppError> {
            Noop.partitions(operation)
        }

        async fn execute(
            &self,
            tx: &mut AnyConnection,
            operation: &[u8],
        ) -> Result<Vec<u8>, ExecError> {
            Noop.execute(tx, operation).await
        }

        fn state_tables(&self) -> Vec<(&'static str, &'static str)> {
            Noop.state_tables()
        }
    }

    /// The no-op execution of `order` at `positions`, with a payload of `order` bytes.
    fn noop(order: u64, positions: &[(PartitionId, u64)]) -> Execution {
        let partitions = positions.iter().map(|&(p, _)| p).collect();
        Execution {
            order,
            positions: positions.to_vec(),
            operation: crate::noop::NoopOp {
                partitions,
                payload: vec![7; order as usize],
            }
            .encode(),
        }
    }

    async fn open_at<A: Application>(dir: &tempfile::TempDir, app: A) -> Executor<A> {
        sqlite_for(dir, app, 3).await
    }

    /// Batches of an application without statements run in one hand-off once the writer
    /// knows the progress it committed, and leave exactly the results, progress and state
    /// digest that the usual two hand-offs leave.
    #[tokio::test]
    async fn batches_in_one_handoff_leave_what_two_handoffs_leave() {
        let batches = [
            vec![noop(1, &[(0, 1)]), noop(2, &[(1, 1)]), noop(3, &[(0, 2)])],
            vec![noop(4, &[(0, 3), (1, 2), (2, 1)])],
            vec![noop(5, &[(2, 2)]), noop(6, &[(2, 3)])],
            // A repeat and an early one: neither is ready by the committed progress.
            vec![noop(6, &[(2, 3)]), noop(8, &[(1, 4)])],
            vec![noop(7, &[(1, 3)]), noop(8, &[(1, 4)])],
        ];
        let (one_dir, two_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let one = open_at(&one_dir, Noop).await;
        let two = open_at(&two_dir, NoopInTransaction).await;
        for batch in &batches {
            let (a, b) = (
                one.execute_batch(batch).await,
                two.execute_batch(batch).await,
            );
            assert_eq!(a.unwrap(), b.unwrap());
        }
        // The first batch reads the progress; the repeat and the early one make the fourth
        // take the usual way, which reads it again.
        assert_eq!(one.batches_in_one_handoff(), 3);
        assert_eq!(two.batches_in_one_handoff(), 0);
        assert_eq!(one.progress().await.unwrap(), two.progress().await.unwrap());
        assert_eq!(one.digest().await.unwrap(), two.digest().await.unwrap());
        for order in 1..=8 {
            let stored = one.stored_result(order).await.unwrap();
            assert_eq!(stored, two.stored_result(order).await.unwrap());
            assert!(stored.is_some(), "order {order} has no stored result");
        }
        one.close().await;
        two.close().await;
    }

    /// Another writer of the file (outside the executor's lock: another process, say) makes
    /// the committed progress stale. The one-hand-off list's INSERT refuses an order executed
    /// meanwhile and its UPDATE a position taken meanwhile, both before the COMMIT; the batch
    /// then runs the usual way, which reads the progress. Nothing executes twice.
    #[tokio::test]
    async fn a_stale_committed_progress_executes_nothing_twice() {
        let dir = tempfile::tempdir().unwrap();
        let exec = open_at(&dir, Noop).await;
        exec.execute_batch(&[noop(1, &[(0, 1)])]).await.unwrap();
        let other = open_at(&dir, NoopInTransaction).await;
        let two = noop(2, &[(0, 2)]);
        let executed = other.execute_batch(std::slice::from_ref(&two)).await;
        other.close().await;
        let Outcome::Executed(result) = &executed.unwrap()[0] else {
            panic!("order 2 did not execute")
        };

        // Order 2 again: the INSERT collides, the usual way finds the stored result.
        let outcomes = exec
            .execute_batch(std::slice::from_ref(&two))
            .await
            .unwrap();
        assert_eq!(outcomes, vec![Outcome::AlreadyExecuted(result.clone())]);
        assert_eq!(exec.batches_in_one_handoff(), 0);

        // Another order at a position taken meanwhile: the UPDATE refuses it.
        exec.execute_batch(&[noop(3, &[(1, 1)])]).await.unwrap();
        assert_eq!(exec.batches_in_one_handoff(), 1);
        let other = open_at(&dir, NoopInTransaction).await;
        other.execute_batch(&[noop(4, &[(1, 2)])]).await.unwrap();
        other.close().await;
        let taken = exec.execute_batch(&[noop(5, &[(1, 2)])]).await;
        assert!(
            matches!(taken, Err(DbError::Conflict { order: 5, .. })),
            "{taken:?}"
        );
        assert_eq!(exec.stored_result(5).await.unwrap(), None);
        assert_eq!(exec.progress().await.unwrap().last_seq(1), Some(2));
        assert_eq!(exec.batches_in_one_handoff(), 1);
        exec.close().await;
    }

    /// Any other writer under the lock (a state transfer's install, forgetting results)
    /// makes the executions' writer read the progress again.
    #[tokio::test]
    async fn another_writer_under_the_lock_clears_the_committed_progress() {
        let dir = tempfile::tempdir().unwrap();
        let exec = open_at(&dir, Noop).await;
        exec.execute_batch(&[noop(1, &[(0, 1)])]).await.unwrap();
        exec.execute_batch(&[noop(2, &[(0, 2)])]).await.unwrap();
        assert_eq!(exec.batches_in_one_handoff(), 1);
        assert_eq!(exec.forget_results_through(2).await.unwrap(), 2);
        exec.execute_batch(&[noop(3, &[(0, 3)])]).await.unwrap();
        assert_eq!(exec.batches_in_one_handoff(), 1);
        exec.execute_batch(&[noop(4, &[(0, 4)])]).await.unwrap();
        assert_eq!(exec.batches_in_one_handoff(), 2);
        exec.close().await;
    }

    #[test]
    fn redact_removes_only_the_password() {
        assert_eq!(
            redact("postgres://cloudbft:secret@127.0.0.1:5432/db"),
            "postgres://cloudbft:***@127.0.0.1:5432/db"
        );
        assert_eq!(
            redact("postgres://cloudbft@host/db"),
            "postgres://cloudbft@host/db"
        );
        assert_eq!(
            redact("sqlite:/tmp/x.db?mode=rwc"),
            "sqlite:/tmp/x.db?mode=rwc"
        );
    }

    #[test]
    fn sqlite_url_escapes_query_characters() {
        assert_eq!(
            sqlite_url(Path::new("/tmp/a?b#c%d.db")),
            "sqlite:/tmp/a%3Fb%23c%25d.db?mode=rwc"
        );
    }
}
