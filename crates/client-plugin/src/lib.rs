//! CloudBFT's client side: the [`client`] library that signs requests and accepts a page only
//! once f+1 replicas of one group vouched for it.

pub mod client;

pub use client::{
    Accepted, ClientEndpoint, ClientError, ClientMetrics, ClientOptions, ClientStats,
};
