//! Fresh databases for the tests: a SQLite file in a temporary directory, or a PostgreSQL
//! database (at `CLOUDBFT_TEST_POSTGRES`, else the local CI server) dropped afterwards.
#![allow(unused_imports, dead_code)] // Each test file uses part of it.

pub use dbvote::testing::{fresh, Kind, TestDb};
use sqlx::any::AnyTypeInfoKind;
use sqlx::{AnyConnection, AssertSqlSafe, Row, ValueRef};
use tpcc::schema;

/// Each named `async fn NAME(kind: Kind)` of the test file as a test on SQLite (in module
/// `sqlite`) and on PostgreSQL (in module `postgres`).
#[allow(unused_macros)] // Not every test file runs on both backends.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(Kind::Sqlite).await;
                }
            )*
        }
        mod postgres {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(Kind::Postgres).await;
                }
            )*
        }
    };
}
pub(crate) use on_both_backends;

/// Every table's rows in key order, each value tagged with its kind so that NULL, integers and
/// text cannot be confused.
pub async fn dump(conn: &mut AnyConnection) -> Vec<String> {
    let mut out = Vec::new();
    for &(table, order) in schema::TABLES {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT * FROM {table} ORDER BY {order}"
        )))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
        for row in rows {
            let mut line = format!("{table}:");
            for i in 0..row.len() {
                let raw = row.try_get_raw(i).unwrap();
                if raw.is_null() {
                    line.push_str(" NULL");
                    continue;
                }
                let value = match raw.type_info().kind() {
                    AnyTypeInfoKind::SmallInt
                    | AnyTypeInfoKind::Integer
                    | AnyTypeInfoKind::BigInt => format!(" i{}", row.get::<i64, _>(i)),
                    AnyTypeInfoKind::Text => format!(" t{:?}", row.get::<String, _>(i)),
                    other => panic!("unexpected column type {other:?} in {table}"),
                };
                line.push_str(&value);
            }
            out.push(line);
        }
    }
    out
}
