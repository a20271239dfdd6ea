//! Fresh databases for the tests: a SQLite file in a temporary directory, or a PostgreSQL
//! database (at `CLOUDBFT_TEST_POSTGRES`, else the local CI server) dropped afterwards.
#![allow(unused_imports)]

pub use dbvote::testing::{fresh, Kind, TestDb};

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
