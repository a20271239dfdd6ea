//! The tokio drivers of cloudbft's node roles: each runs one sans-IO protocol core
//! ([`primary::core::PrimaryCore`], [`group::core::ReplicaCore`], [`dbvote::voter::VoterCore`])
//! over the TCP transport, with the USIG behind `usigd`, the decision log, the database
//! executor and a Prometheus endpoint.
//!
//! The cores decide; the drivers only move bytes, call the trusted component and the disk, and
//! feed completions back. Every inbound frame is decoded and authenticated by the core (or, for
//! fetch requests, here); anything malformed is counted and dropped.
//!
//! - [`app`]: the cluster's application (partition rule, pages, transaction programs);
//! - [`epoch`]: what every driver does at an online reconfiguration;
//! - [`peers`]: the configured addresses and the node's outbound side;
//! - [`usig`]: the USIG on a blocking thread;
//! - [`metrics`]: what every role counts;
//! - [`page`]: the page-generation stage that costs a replica capacity;
//! - [`primary`], [`replica`], [`dbnode`]: the three drivers.

pub mod app;
pub mod dbnode;
pub mod epoch;
mod intake;
mod links;
pub mod metrics;
pub mod page;
pub mod peers;
pub mod primary;
pub mod replica;
pub mod usig;
mod writer;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use proto::config::Cluster;
pub use proto::NodeId;

/// Why a node could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("node {0} is not in the cluster configuration as this role: check --id")]
    UnknownNode(u32),
    #[error("{field}: {fix}")]
    Config { field: String, fix: String },
    #[error(transparent)]
    Key(#[from] proto::keys::KeyError),
    #[error("binding {addr}: {source} (is another process using the port?)")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("USIG at {socket}: {source} (is usigd running for this machine?)")]
    Usig {
        socket: String,
        source: ::usig::UsigError,
    },
    #[error(transparent)]
    Log(#[from] group::log::LogError),
    #[error(transparent)]
    Db(#[from] dbvote::error::DbError),
}

/// What every role needs to start.
#[derive(Clone)]
pub struct NodeOptions {
    pub cluster: Arc<Cluster>,
    /// The `keys/` directory written by `cloudbft keygen`.
    pub keys: PathBuf,
    pub id: NodeId,
    /// Prometheus endpoint (`None`: no endpoint).
    pub metrics: Option<std::net::SocketAddr>,
    /// Timer period: retransmission, fetches of lost messages, metrics refresh.
    pub tick: Duration,
    /// The configuration file the node runs (rewritten when an online reconfiguration starts a
    /// new epoch); none in tests.
    pub config_path: Option<PathBuf>,
    /// The build this process runs, served as `cloudbft_build_info` (the binary's build script
    /// knows it; this crate does not, so that an edit anywhere does not rebuild it).
    pub build: &'static str,
}

/// What every driver starts with: its metrics (already served) and its transport.
pub(crate) struct Started {
    pub metrics: Arc<metrics::Metrics>,
    pub peers: peers::Peers,
    pub inbound: tokio::sync::mpsc::Receiver<net::Inbound>,
}

impl NodeOptions {
    /// Serves the metrics endpoint and binds the node's address.
    pub(crate) async fn start(&self) -> Result<Started, NodeError> {
        let mut registry = net::metrics::Registry::default();
        net::metrics::register_build_info(&mut registry, self.build);
        let metrics = metrics::Metrics::register(&mut registry);
        metrics::serve(self.metrics, registry).await?;
        let (peers, inbound) = peers::Peers::bind(&self.cluster, self.id, self.key()?).await?;
        Ok(Started {
            metrics,
            peers,
            inbound,
        })
    }

    /// This node's USIG identity, if it is one of `role`'s nodes.
    pub(crate) fn usig(&self, role: &[impl HasUsig]) -> Result<::usig::UsigId, NodeError> {
        role.iter()
            .find(|n| n.id() == self.id.0)
            .map(|n| ::usig::UsigId(n.usig()))
            .ok_or(NodeError::UnknownNode(self.id.0))
    }

    /// Loads this node's signing key, checked against the configuration.
    fn key(&self) -> Result<proto::SigningKey, NodeError> {
        let path = proto::keys::node_key_path(&self.keys, self.id);
        Ok(proto::keys::load(&path, self.cluster.node_key(self.id))?)
    }
}

/// A configured node with a USIG identity (primary candidates and replicas).
pub(crate) trait HasUsig {
    fn id(&self) -> u32;
    fn usig(&self) -> u64;
}

impl HasUsig for proto::config::NodeConfig {
    fn id(&self) -> u32 {
        self.id
    }
    fn usig(&self) -> u64 {
        self.usig
    }
}

impl HasUsig for proto::config::ReplicaConfig {
    fn id(&self) -> u32 {
        self.id
    }
    fn usig(&self) -> u64 {
        self.usig
    }
}
