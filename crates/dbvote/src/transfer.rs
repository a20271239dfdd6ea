//! State transfer at the executor (docs/state-transfer.md): a read snapshot that streams the
//! state's rows in key order and its digest, and the install of received rows in one
//! transaction that commits only if they hash to the digest f+1 database nodes signed.
//!
//! The transferred state is every [state table](crate::Application::state_tables) and the
//! progress table, in the [digest](crate::digest)'s order; the results table is not
//! transferred (it is not part of the digest). Instead the install records the order it
//! transferred up to, so that the voter never asks to execute, or look up the result of, an
//! order at or below it.

use futures_util::TryStreamExt;
use proto::{TableRows, Value, MAX_CHUNK_BYTES};
use sqlx::{AnyConnection, AssertSqlSafe};
use tracing::{info, warn};

use crate::app::Application;
use crate::bookkeeping as bk;
use crate::digest::{row_values, Digest};
use crate::error::DbError;
use crate::executor::{Executor, PartitionProgress};

/// A read-only snapshot of a database node's state, pinned when [`Executor::snapshot`]
/// returns: executions that commit afterwards are not in it.
pub struct Snapshot {
    tx: sqlx::Transaction<'static, sqlx::Any>,
    tables: Vec<(&'static str, &'static str)>,
    url: String,
}

impl<A: Application> Executor<A> {
    /// The tables the digest and the state transfer cover, in their order.
    pub(crate) fn transferred_tables(&self) -> Vec<(&'static str, &'static str)> {
        let mut tables = self.app().state_tables();
        tables.push(bk::PROGRESS_TABLE);
        tables
    }

    /// Opens a read snapshot (PostgreSQL `REPEATABLE READ READ ONLY`, SQLite a WAL read
    /// transaction). Both take the snapshot at the first read, not at `BEGIN`, so this reads
    /// before returning: once it returns, the caller may let executions go on.
    pub async fn snapshot(&self) -> Result<Snapshot, DbError> {
        let mut tx = self
            .begin(
                bk::begin_snapshot(self.backend()),
                "opening a state snapshot",
            )
            .await?;
        sqlx::query(bk::SELECT_ALL_PROGRESS)
            .fetch_all(&mut *tx)
            .await
            .map_err(self.sql("pinning a state snapshot"))?;
        Ok(Snapshot {
            tx,
            tables: self.transferred_tables(),
            url: self.url().to_owned(),
        })
    }

    /// Replaces the state with the received rows in **one** transaction and commits only if
    /// the result's digest is `digest`: deletes every state and progress row, inserts the rows
    /// (tables named by their index in the transferred list, columns checked to be plain
    /// identifiers), recomputes the digest inside the transaction, checks that no partition
    /// moves back, records that orders up to `order` were transferred, and commits. Any failure
    /// rolls back and leaves the old state (so does a crash: nothing is committed before the
    /// end). Returns the installed progress.
    ///
    /// The caller must not run executions meanwhile (the voter holds them).
    pub async fn install(
        &self,
        order: u64,
        digest: [u8; 32],
        parts: &[TableRows],
    ) -> Result<Vec<PartitionProgress>, DbError> {
        let tables = self.transferred_tables();
        let order_id = self.signed(order, order, "order id")?;
        let _writer = self.lock_writer().await;
        let mut tx = self
            .begin(
                bk::begin_write(self.backend()),
                "installing a transferred state",
            )
            .await?;
        let before = self.locked_progress(&mut tx).await?;
        for (table, _) in &tables {
            sqlx::query(AssertSqlSafe(format!("DELETE FROM {table}")))
                .execute(&mut *tx)
                .await
                .map_err(self.sql("deleting the old state"))?;
        }
        let invalid = |reason: String| DbError::InvalidState { order, reason };
        for part in parts {
            let (table, _) = tables
                .get(part.table as usize)
                .ok_or_else(|| invalid(format!("no table {}", part.table)))?;
            insert_rows(&mut tx, table, part)
                .await
                .map_err(|reason| invalid(format!("table {table}: {reason}")))?;
        }
        let installed = crate::digest::state_digest(&mut tx, &tables)
            .await
            .map_err(self.sql("hashing the transferred state"))?;
        if installed != digest {
            let _ = tx.rollback().await;
            warn!(
                order,
                "transferred rows do not hash to the agreed digest; rolled back"
            );
            return Err(DbError::StateMismatch { order });
        }
        let after = self.read_all_progress(&mut tx).await?;
        let partitions = after.iter().map(|p| p.partition).collect::<Vec<_>>();
        if partitions != (0..self.partitions()).collect::<Vec<_>>() {
            return Err(invalid(format!(
                "progress rows for partitions {partitions:?}"
            )));
        }
        for (old, new) in before.iter().zip(&after) {
            if new.last_seq < old.last_seq || new.last_order > order {
                return Err(DbError::Conflict {
                    order,
                    reason: format!(
                        "the transferred state has partition {} at sequence {} (order {}), this \
                         node is at {} (order {})",
                        new.partition, new.last_seq, new.last_order, old.last_seq, old.last_order
                    ),
                });
            }
        }
        self.set_without_results_through(&mut tx, order_id, "recording the transfer")
            .await?;
        tx.commit()
            .await
            .map_err(self.sql("committing the transferred state"))?;
        info!(order, "installed a transferred state");
        Ok(after)
    }

    async fn locked_progress(
        &self,
        tx: &mut AnyConnection,
    ) -> Result<Vec<PartitionProgress>, DbError> {
        let rows = sqlx::query(bk::select_progress(self.backend(), false, true))
            .fetch_all(&mut *tx)
            .await
            .map_err(self.sql("locking the progress"))?;
        self.progress_rows(&rows)
    }
}

impl Snapshot {
    /// Reads every transferred row in key order and returns the state digest over them. With
    /// `rows`, also hands them to `chunk` in pieces of about [`MAX_CHUNK_BYTES`] (never mixing
    /// tables), reading on only once `chunk`'s future completes (so a sender can go at its
    /// receivers' pace); a table without rows gives no chunk.
    pub async fn stream<F: std::future::Future<Output = ()>>(
        mut self,
        rows: bool,
        mut chunk: impl FnMut(TableRows) -> F,
    ) -> Result<[u8; 32], DbError> {
        let sql = |source| DbError::Sql {
            url: self.url.clone(),
            during: "reading a state snapshot",
            source,
        };
        let mut digest = Digest::new();
        for (index, (table, order_by)) in self.tables.iter().enumerate() {
            digest.table(table);
            let query = format!("SELECT * FROM {table} ORDER BY {order_by}");
            let mut stream = sqlx::query(AssertSqlSafe(query)).fetch(&mut *self.tx);
            let mut part = TableRows {
                table: index as u32,
                columns: Vec::new(),
                rows: Vec::new(),
            };
            let mut bytes = 0;
            while let Some(row) = stream.try_next().await.map_err(sql)? {
                let (columns, values) = row_values(&row).map_err(sql)?;
                digest.row(&columns, &values);
                if !rows {
                    continue;
                }
                bytes += values.iter().map(Value::weight).sum::<usize>();
                part.columns = columns;
                part.rows.push(values);
                if bytes >= MAX_CHUNK_BYTES {
                    bytes = 0;
                    chunk(TableRows {
                        table: part.table,
                        columns: part.columns.clone(),
                        rows: std::mem::take(&mut part.rows),
                    })
                    .await;
                }
            }
            if !part.rows.is_empty() {
                chunk(part).await;
            }
        }
        let _ = self.tx.rollback().await;
        Ok(digest.finish())
    }
}

/// Checks the shape of one received part before any of it reaches SQL: column names come from
/// the network, so only plain lower-case identifiers are accepted, and every row has one value
/// per column. Public so that the fuzz targets and property tests check what the install
/// checks.
pub fn check_rows(part: &TableRows) -> Result<(), String> {
    let plain = |c: &String| {
        !c.is_empty()
            && c.len() <= 63
            && c.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    };
    if part.columns.is_empty() || !part.columns.iter().all(plain) {
        return Err(format!("invalid column names {:?}", part.columns));
    }
    match part.rows.iter().find(|row| row.len() != part.columns.len()) {
        Some(row) => Err(format!(
            "a row of {} values for {} columns",
            row.len(),
            part.columns.len()
        )),
        None => Ok(()),
    }
}

/// Inserts one part's rows once [`check_rows`] accepts them; values are bound, except `NULL`,
/// written literally (a typed null parameter would not fit every column type on PostgreSQL).
async fn insert_rows(tx: &mut AnyConnection, table: &str, part: &TableRows) -> Result<(), String> {
    check_rows(part)?;
    let columns = part.columns.join(", ");
    for row in &part.rows {
        let mut placeholders = Vec::with_capacity(row.len());
        let mut bound = 0;
        for value in row {
            if *value == Value::Null {
                placeholders.push("NULL".to_owned());
            } else {
                bound += 1;
                placeholders.push(format!("${bound}"));
            }
        }
        let sql = format!(
            "INSERT INTO {table} ({columns}) VALUES ({})",
            placeholders.join(", ")
        );
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for value in row {
            query = match value {
                Value::Null => query,
                Value::Int(i) => query.bind(*i),
                Value::Bool(b) => query.bind(*b),
                Value::Real(bits) => query.bind(f64::from_bits(*bits)),
                Value::Text(t) => query.bind(t.as_str()),
                Value::Bytes(b) => query.bind(b.as_slice()),
            };
        }
        query.execute(&mut *tx).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}
