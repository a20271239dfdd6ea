//! `cloudbft gateway`: the HTTP gateway browsers use, holding the client identities of one
//! client endpoint.

use anyhow::{Context, Result};
use clap::Args;
use client_plugin::client::{ClientEndpoint, ClientMetrics, ClientOptions};
use client_plugin::gateway::Gateway;
use net::metrics::Registry;
use proto::config::Cluster;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct GatewayArgs {
    /// The cluster configuration written by `cloudbft keygen`.
    #[arg(long)]
    pub config: PathBuf,
    /// The keys directory (default: keys/ next to the configuration).
    #[arg(long)]
    pub keys: Option<PathBuf>,
    /// Where browsers connect.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The client endpoint (a `[[client]] addr` of the configuration) whose identities the
    /// gateway uses; default: the first client's.
    #[arg(long)]
    pub endpoint: Option<String>,
}

pub fn gateway(args: GatewayArgs) -> Result<()> {
    let cluster = Arc::new(Cluster::load(&args.config)?);
    let keys = args.keys.clone().unwrap_or_else(|| {
        args.config
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join("keys")
    });
    let endpoint = match &args.endpoint {
        Some(e) => e.clone(),
        None => cluster
            .config
            .clients
            .first()
            .map(|c| c.addr.clone())
            .context("the configuration has no [[client]]: re-run keygen with --clients")?,
    };
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let mut registry = Registry::default();
        let options = ClientOptions {
            metrics: ClientMetrics::register(&mut registry),
            ..ClientOptions::default()
        };
        let client = ClientEndpoint::open(cluster, &keys, &endpoint, options).await?;
        let gateway = Gateway::serve(args.listen, client, Arc::new(registry)).await?;
        eprintln!("gateway at http://{}/", gateway.local_addr());
        crate::nodes::stop_signal()?.await;
        gateway.shutdown().await;
        Ok(())
    })
}
