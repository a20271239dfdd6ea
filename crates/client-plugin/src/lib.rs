//! CloudBFT's client side, "plugged" into whatever talks to users: the [`client`] library that
//! signs requests and accepts a page only once f+1 replicas of one group vouched for it, and the
//! HTTP [`gateway`] that browsers use, which shows exactly that page.
//!
//! The gateway is the trust boundary towards users: a page reaches a browser only if a correct
//! replica rendered it, whatever f replicas of the group (and f database nodes) do.

pub mod client;
pub mod gateway;

pub use client::{
    Accepted, ClientEndpoint, ClientError, ClientMetrics, ClientOptions, ClientStats,
};
pub use gateway::{Gateway, GatewayError, GatewayLimits, GatewayMetrics, GatewayOptions};
