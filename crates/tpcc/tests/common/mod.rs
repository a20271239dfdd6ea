//! Fresh databases for the tests: a SQLite file in a temporary directory, or a PostgreSQL
//! database (at `CLOUDBFT_TEST_POSTGRES`, else the local CI server) dropped afterwards.
#![allow(unused_imports)]

pub use dbvote::testing::{fresh, Kind, TestDb};
