//! `cloudbft gateway`: the HTTP gateway browsers use, holding the client identities of one
//! client endpoint.

use anyhow::{Context, Result};
use clap::Args;
use client_plugin::client::{ClientEndpoint, ClientMetrics, ClientOptions};
use client_plugin::gateway::{
    Gateway, GatewayLimits, GatewayMetrics, GatewayOptions, StatusSources,
};
use proto::config::Cluster;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Async runtime worker threads; 0: one per core. With 1 the gateway runs on one thread,
    /// which costs the least CPU per page when it shares a machine (a benchmark's).
    #[arg(long, default_value_t = 0)]
    pub worker_threads: u16,
    /// For the cluster page (/cluster): a node's metrics port is its protocol port plus this
    /// (`cloudbft demo` runs them so, with 1000); without it the page shows no view and no
    /// database progress.
    #[arg(long)]
    pub node_metrics_offset: Option<u16>,
    /// For the cluster page: the autoscaler's decisions file (default: autoscaler.jsonl next to
    /// the configuration, if it exists).
    #[arg(long)]
    pub decisions: Option<PathBuf>,
}

/// The gateway's limits (docs/operations.md, "The gateway's limits"); defaults from
/// [`GatewayLimits::default`].
#[derive(Args, Debug, Clone)]
pub struct LimitArgs {
    /// Forms one client address (IPv6: one /64) may submit per second, on average.
    #[arg(long, default_value_t = 10.0)]
    pub forms_per_second: f64,
    /// Forms one client address may submit in a burst.
    #[arg(long, default_value_t = 20)]
    pub form_burst: u32,
    /// Requests served at once; more get a 503 at once.
    #[arg(long, default_value_t = 256)]
    pub max_concurrent: usize,
    /// Open connections at once.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Open connections from one client address.
    #[arg(long, default_value_t = 32)]
    pub max_connections_per_client: usize,
    /// Seconds a client has to send a request's headers (slowloris protection).
    #[arg(long, default_value_t = 10)]
    pub header_timeout_secs: u64,
    /// Largest form body in bytes.
    #[arg(long, default_value_t = 16 * 1024)]
    pub max_body_bytes: usize,
    /// The reverse proxy in front of the gateway (TLS terminator): its connections are rate
    /// limited by the last X-Forwarded-For address it appends.
    #[arg(long)]
    pub trusted_proxy: Option<IpAddr>,
    /// The public origin browsers see (https://shop.example.com) when a proxy rewrites Host;
    /// may be repeated.
    #[arg(long = "public-origin")]
    pub public_origins: Vec<String>,
}

impl LimitArgs {
    /// The limits these flags set; `--forms-per-second` must be positive.
    pub fn limits(&self) -> Result<GatewayLimits> {
        if !(self.forms_per_second.is_finite() && self.forms_per_second > 0.0) {
            anyhow::bail!(
                "--forms-per-second {}: must be a positive number",
                self.forms_per_second
            );
        }
        Ok(GatewayLimits {
            max_body_bytes: self.max_body_bytes,
            header_read_timeout: Duration::from_secs(self.header_timeout_secs),
            body_timeout: Duration::from_secs(self.header_timeout_secs),
            max_concurrent_requests: self.max_concurrent,
            max_connections: self.max_connections,
            max_connections_per_client: self.max_connections_per_client,
            form_interval: Duration::from_secs_f64(1.0 / self.forms_per_second),
            form_burst: self.form_burst,
            trusted_proxy: self.trusted_proxy,
            trusted_origins: self.public_origins.clone(),
        })
    }
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
    let limits = args.limits.limits()?;
    let runtime = crate::nodes::runtime(args.worker_threads)?;
    runtime.block_on(async {
        let mut registry = crate::metrics_registry();
        let options = ClientOptions {
            metrics: ClientMetrics::register(&mut registry),
            ..ClientOptions::default()
        };
        let gateway_options = GatewayOptions {
            limits,
            metrics: GatewayMetrics::register(&mut registry),
            status: StatusSources {
                node_metrics_offset: args.node_metrics_offset,
                decisions: Some(args.decisions.clone().unwrap_or_else(|| {
                    args.config
                        .parent()
                        .unwrap_or(std::path::Path::new("."))
                        .join("autoscaler.jsonl")
                })),
            },
        };
        let client = ClientEndpoint::open(cluster, &keys, &endpoint, options).await?;
        let gateway =
            Gateway::serve(args.listen, client, Arc::new(registry), gateway_options).await?;
        eprintln!("gateway at http://{}/", gateway.local_addr());
        crate::nodes::stop_signal()?.await;
        gateway.shutdown().await;
        Ok(())
    })
}
