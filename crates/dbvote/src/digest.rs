//! The state digest: one SHA-256 that every correct database node agrees on.
//!
//! The design (decision 4) compares the state of every database node after a run; this is what
//! is compared. It covers every row of every [state table](crate::Application::state_tables) in
//! key order, then the executor's progress table, read in one snapshot, in an encoding that
//! depends only on the values and not on the backend:
//!
//! ```text
//! "cloudbft-dbvote state digest v1"
//! per table:  bytes(table name)
//!             per row:  'R', u32 column count, [bytes(column name) on the first row], values
//!             'E', u64 row count
//! value:      0x00                      NULL
//!             0x01 i64                  any integer or boolean (SQLite has no separate bool)
//!             0x02 f64 bits             any floating point number (applications should not
//!                                       use them; present so that nothing is skipped)
//!             0x03 bytes(UTF-8)         text
//!             0x04 bytes                byte string
//! bytes(x):   u64 length, x;            all integers big-endian
//! ```
//!
//! Integers are widened to `i64` so that an `INTEGER` column on SQLite and a `BIGINT` column on
//! PostgreSQL give the same digest. Key order must not depend on collation: order by integer
//! columns (PostgreSQL sorts text by the database's locale, SQLite by bytes).

use futures_util::TryStreamExt;
use proto::Value;
use ring::digest::{Context, SHA256};
use sqlx::any::AnyTypeInfoKind;
use sqlx::{AnyConnection, AssertSqlSafe, Column, Row, ValueRef};

/// The digest [`Executor::digest`](crate::Executor::digest) computes, from a plain connection
/// to a database node's database: for tools that compare nodes without opening the database as
/// an executor (which writes). `app_tables` are the application's
/// [state tables](crate::Application::state_tables); the executor's progress table is included
/// when the database has one.
pub async fn of_database(
    conn: &mut AnyConnection,
    app_tables: &[(&'static str, &'static str)],
) -> Result<[u8; 32], sqlx::Error> {
    use sqlx::Connection;
    let backend = crate::Backend::of(conn).unwrap_or(crate::Backend::Sqlite);
    // Probed outside the snapshot: a failed statement would abort a PostgreSQL transaction.
    let has_progress = sqlx::query("SELECT 1 FROM cloudbft_progress LIMIT 1")
        .fetch_optional(&mut *conn)
        .await
        .is_ok();
    let mut tables = app_tables.to_vec();
    if has_progress {
        tables.push(crate::bookkeeping::PROGRESS_TABLE);
    }
    let mut tx = conn
        .begin_with(crate::bookkeeping::begin_snapshot(backend))
        .await?;
    let digest = state_digest(&mut tx, &tables).await?;
    tx.rollback().await?;
    Ok(digest)
}

/// Hashes the given tables (name and `ORDER BY` clause) through `conn`, which should be inside
/// a snapshot transaction.
pub(crate) async fn state_digest(
    conn: &mut AnyConnection,
    tables: &[(&'static str, &'static str)],
) -> Result<[u8; 32], sqlx::Error> {
    let mut digest = Digest::new();
    for (table, order_by) in tables {
        digest.table(table);
        let sql = format!("SELECT * FROM {table} ORDER BY {order_by}");
        let mut rows = sqlx::query(AssertSqlSafe(sql)).fetch(&mut *conn);
        while let Some(row) = rows.try_next().await? {
            let (columns, values) = row_values(&row)?;
            digest.row(&columns, &values);
        }
    }
    Ok(digest.finish())
}

/// The digest computed incrementally, table by table and row by row in key order (the state
/// transfer hashes the rows it streams with it, so that what it sends is what it signs).
pub(crate) struct Digest {
    hash: Context,
    /// Rows of the current table so far (`None` before the first table).
    count: Option<u64>,
}

impl Digest {
    pub(crate) fn new() -> Digest {
        let mut hash = Context::new(&SHA256);
        hash.update(b"cloudbft-dbvote state digest v1");
        Digest { hash, count: None }
    }

    /// Starts the next table.
    pub(crate) fn table(&mut self, name: &str) {
        self.end_table();
        put_bytes(&mut self.hash, name.as_bytes());
        self.count = Some(0);
    }

    pub(crate) fn row(&mut self, columns: &[String], values: &[Value]) {
        let count = self.count.get_or_insert(0);
        self.hash.update(b"R");
        self.hash.update(
            &u32::try_from(values.len())
                .unwrap_or(u32::MAX)
                .to_be_bytes(),
        );
        if *count == 0 {
            for column in columns {
                put_bytes(&mut self.hash, column.as_bytes());
            }
        }
        for value in values {
            put_value(&mut self.hash, value);
        }
        *count += 1;
    }

    fn end_table(&mut self) {
        if let Some(count) = self.count.take() {
            self.hash.update(b"E");
            self.hash.update(&count.to_be_bytes());
        }
    }

    pub(crate) fn finish(mut self) -> [u8; 32] {
        self.end_table();
        let mut out = [0u8; 32];
        out.copy_from_slice(self.hash.finish().as_ref());
        out
    }
}

fn put_bytes(hash: &mut Context, bytes: &[u8]) {
    hash.update(&(bytes.len() as u64).to_be_bytes());
    hash.update(bytes);
}

fn put_value(hash: &mut Context, value: &Value) {
    match value {
        Value::Null => hash.update(&[0]),
        Value::Bool(b) => {
            hash.update(&[1]);
            hash.update(&i64::from(*b).to_be_bytes());
        }
        Value::Int(i) => {
            hash.update(&[1]);
            hash.update(&i.to_be_bytes());
        }
        Value::Real(bits) => {
            hash.update(&[2]);
            hash.update(&bits.to_be_bytes());
        }
        Value::Text(text) => {
            hash.update(&[3]);
            put_bytes(hash, text.as_bytes());
        }
        Value::Bytes(bytes) => {
            hash.update(&[4]);
            put_bytes(hash, bytes);
        }
    }
}

/// A row's column names and values, in the backend-independent types the digest covers.
pub(crate) fn row_values(
    row: &sqlx::any::AnyRow,
) -> Result<(Vec<String>, Vec<Value>), sqlx::Error> {
    let columns = row.columns().iter().map(|c| c.name().to_owned()).collect();
    let values = (0..row.columns().len())
        .map(|index| value(row, index))
        .collect::<Result<_, _>>()?;
    Ok((columns, values))
}

fn value(row: &sqlx::any::AnyRow, index: usize) -> Result<Value, sqlx::Error> {
    let raw = row.try_get_raw(index)?;
    if raw.is_null() {
        return Ok(Value::Null);
    }
    Ok(match raw.type_info().kind() {
        AnyTypeInfoKind::Null => Value::Null,
        AnyTypeInfoKind::Bool => Value::Bool(row.try_get::<bool, _>(index)?),
        AnyTypeInfoKind::SmallInt | AnyTypeInfoKind::Integer | AnyTypeInfoKind::BigInt => {
            Value::Int(row.try_get::<i64, _>(index)?)
        }
        AnyTypeInfoKind::Real | AnyTypeInfoKind::Double => {
            Value::Real(row.try_get::<f64, _>(index)?.to_bits())
        }
        AnyTypeInfoKind::Text => Value::Text(row.try_get::<String, _>(index)?),
        AnyTypeInfoKind::Blob => Value::Bytes(row.try_get::<Vec<u8>, _>(index)?),
    })
}
