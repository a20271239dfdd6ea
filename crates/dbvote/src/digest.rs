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
    let mut hash = Context::new(&SHA256);
    hash.update(b"cloudbft-dbvote state digest v1");
    for (table, order_by) in tables {
        put_bytes(&mut hash, table.as_bytes());
        let sql = format!("SELECT * FROM {table} ORDER BY {order_by}");
        let mut rows = sqlx::query(AssertSqlSafe(sql)).fetch(&mut *conn);
        let mut count: u64 = 0;
        while let Some(row) = rows.try_next().await? {
            hash.update(b"R");
            let columns = row.columns();
            hash.update(
                &u32::try_from(columns.len())
                    .unwrap_or(u32::MAX)
                    .to_be_bytes(),
            );
            if count == 0 {
                for column in columns {
                    put_bytes(&mut hash, column.name().as_bytes());
                }
            }
            for index in 0..columns.len() {
                put_value(&mut hash, &row, index)?;
            }
            count += 1;
        }
        hash.update(b"E");
        hash.update(&count.to_be_bytes());
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(hash.finish().as_ref());
    Ok(out)
}

fn put_bytes(hash: &mut Context, bytes: &[u8]) {
    hash.update(&(bytes.len() as u64).to_be_bytes());
    hash.update(bytes);
}

fn put_value(hash: &mut Context, row: &sqlx::any::AnyRow, index: usize) -> Result<(), sqlx::Error> {
    let raw = row.try_get_raw(index)?;
    if raw.is_null() {
        hash.update(&[0]);
        return Ok(());
    }
    let kind = raw.type_info().kind();
    match kind {
        AnyTypeInfoKind::Null => hash.update(&[0]),
        AnyTypeInfoKind::Bool => {
            hash.update(&[1]);
            hash.update(&i64::from(row.try_get::<bool, _>(index)?).to_be_bytes());
        }
        AnyTypeInfoKind::SmallInt | AnyTypeInfoKind::Integer | AnyTypeInfoKind::BigInt => {
            hash.update(&[1]);
            hash.update(&row.try_get::<i64, _>(index)?.to_be_bytes());
        }
        AnyTypeInfoKind::Real | AnyTypeInfoKind::Double => {
            hash.update(&[2]);
            hash.update(&row.try_get::<f64, _>(index)?.to_bits().to_be_bytes());
        }
        AnyTypeInfoKind::Text => {
            hash.update(&[3]);
            put_bytes(hash, row.try_get::<String, _>(index)?.as_bytes());
        }
        AnyTypeInfoKind::Blob => {
            hash.update(&[4]);
            put_bytes(hash, &row.try_get::<Vec<u8>, _>(index)?);
        }
    }
    Ok(())
}
