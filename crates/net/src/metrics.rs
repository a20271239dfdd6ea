//! The Prometheus endpoint every cloudbft process serves (`GET /metrics`, text exposition
//! format), and the transport's counters as metrics.
//!
//! Roles register their own counters and histograms in a [`Registry`] and hand it to
//! [`serve`]; [`TransportMetrics`] mirrors a [`Transport`]'s counters into it.

use crate::{Stats, Transport};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
pub use prometheus_client::registry::Registry;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Content type of the text exposition format (the gateway serves it too).
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves `registry` on `addr` (port 0 picks one) until the runtime stops; returns the address
/// bound. The registry is read on every scrape; updates need no lock on it.
pub async fn serve(addr: SocketAddr, registry: Arc<Registry>) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let registry = Arc::clone(&registry);
            async move { ([("content-type", CONTENT_TYPE)], render(&registry)) }
        }),
    );
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::warn!(%error, "metrics endpoint stopped");
        }
    });
    tracing::info!(%local, "metrics at http://{local}/metrics");
    Ok(local)
}

/// The registry in the text exposition format.
pub fn render(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut text, registry);
    text
}

/// The labels of `cloudbft_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    build: &'static str,
}

/// Registers `cloudbft_build_info{version, build} 1`: which release and which build (the commit
/// the binary was built from, as `cloudbft --version` names it) this process runs. During a
/// rolling upgrade one scrape of every node shows which ones still run the old build, and a
/// dashboard can mark when a build changed.
pub fn register_build_info(registry: &mut Registry, build: &'static str) {
    let info = Family::<BuildLabels, Gauge>::default();
    info.get_or_create(&BuildLabels {
        version: env!("CARGO_PKG_VERSION"),
        build,
    })
    .set(1);
    registry.register(
        "cloudbft_build_info",
        "The release and build this process runs (always 1)",
        info,
    );
}

/// Gauges mirroring a transport's counters (refreshed by [`TransportMetrics::update`], which
/// drivers call on every timer tick).
#[derive(Clone, Default)]
pub struct TransportMetrics {
    frames_sent: Gauge<u64, AtomicU64>,
    frames_received: Gauge<u64, AtomicU64>,
    dropped: Gauge<u64, AtomicU64>,
    oversized: Gauge<u64, AtomicU64>,
    malformed: Gauge<u64, AtomicU64>,
    accepted: Gauge<u64, AtomicU64>,
    connections_refused: Gauge<u64, AtomicU64>,
    first_frame_timeouts: Gauge<u64, AtomicU64>,
    connects: Gauge<u64, AtomicU64>,
    reconnects: Gauge<u64, AtomicU64>,
    connect_failures: Gauge<u64, AtomicU64>,
    links: Gauge<u64, AtomicU64>,
    link_refused: Gauge<u64, AtomicU64>,
    links_replaced: Gauge<u64, AtomicU64>,
    inbound_connections: Gauge<u64, AtomicU64>,
    plain_connections: Gauge<u64, AtomicU64>,
    plain_capacity: Gauge<u64, AtomicU64>,
    queue_capacity: Gauge<u64, AtomicU64>,
    queued: Gauge<u64, AtomicU64>,
    queue_deepest: Gauge<u64, AtomicU64>,
    inbound_capacity: Gauge<u64, AtomicU64>,
    inbound_queued: Gauge<u64, AtomicU64>,
    plain_inbound_bytes: Gauge<u64, AtomicU64>,
    plain_inbound_capacity: Gauge<u64, AtomicU64>,
}

impl TransportMetrics {
    /// Registers the gauges under `transport_*`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = TransportMetrics::default();
        let r = registry.sub_registry_with_prefix("transport");
        r.register(
            "frames_sent",
            "Frames written to peers",
            m.frames_sent.clone(),
        );
        r.register(
            "frames_received",
            "Frames read from peers",
            m.frames_received.clone(),
        );
        r.register(
            "dropped",
            "Frames dropped: peer queue full or shut down",
            m.dropped.clone(),
        );
        r.register(
            "oversized",
            "Frames refused by send: over max_frame",
            m.oversized.clone(),
        );
        r.register(
            "malformed",
            "Inbound connections closed on an oversized or truncated frame",
            m.malformed.clone(),
        );
        r.register(
            "accepted",
            "Inbound connections accepted",
            m.accepted.clone(),
        );
        r.register(
            "connections_refused",
            "Inbound connections closed at once: max_plain_connections connections that are not authenticated links were open",
            m.connections_refused.clone(),
        );
        r.register(
            "first_frame_timeouts",
            "Inbound connections closed without a complete first frame within connect_timeout",
            m.first_frame_timeouts.clone(),
        );
        r.register(
            "connects",
            "Destinations connected to for the first time",
            m.connects.clone(),
        );
        r.register(
            "reconnects",
            "Connections re-opened to a destination after the previous one broke",
            m.reconnects.clone(),
        );
        r.register(
            "connect_failures",
            "Failed outbound connection attempts",
            m.connect_failures.clone(),
        );
        r.register(
            "links",
            "Authenticated inbound connections established",
            m.links.clone(),
        );
        r.register(
            "link_refused",
            "Inbound connections closed by link authentication: hello or handshake refused, or a frame with a wrong tag",
            m.link_refused.clone(),
        );
        r.register(
            "links_replaced",
            "Authenticated inbound connections closed because the same node opened a newer link",
            m.links_replaced.clone(),
        );
        r.register(
            "inbound_connections",
            "Inbound connections open: plain ones and authenticated links",
            m.inbound_connections.clone(),
        );
        r.register(
            "plain_connections",
            "Inbound connections open that are not authenticated links (yet)",
            m.plain_connections.clone(),
        );
        r.register(
            "plain_capacity",
            "Inbound connections that are not authenticated links open at once (more are refused)",
            m.plain_capacity.clone(),
        );
        r.register(
            "queue_capacity",
            "Frames each destination's outbound queue holds (more are dropped)",
            m.queue_capacity.clone(),
        );
        r.register(
            "queued",
            "Frames waiting in all outbound queues",
            m.queued.clone(),
        );
        r.register(
            "queue_deepest",
            "Frames waiting in the fullest outbound queue",
            m.queue_deepest.clone(),
        );
        r.register(
            "inbound_capacity",
            "Inbound frames buffered before the read loops wait (TCP then pushes back)",
            m.inbound_capacity.clone(),
        );
        r.register(
            "inbound_queued",
            "Inbound frames waiting for the consumer",
            m.inbound_queued.clone(),
        );
        r.register(
            "plain_inbound_bytes",
            "Bytes of frames from plain connections held now: read or being read, queued or with the consumer",
            m.plain_inbound_bytes.clone(),
        );
        r.register(
            "plain_inbound_capacity",
            "Bytes of frames plain connections may hold together before their read loops wait (TCP then pushes back)",
            m.plain_inbound_capacity.clone(),
        );
        m
    }

    /// Copies the transport's counters (every one: the destructuring names them all, so a new
    /// counter cannot be left out) and how many connections are open.
    pub fn update(&self, transport: &Transport) {
        let Stats {
            frames_sent,
            frames_received,
            dropped,
            oversized,
            malformed,
            accepted,
            connections_refused,
            first_frame_timeouts,
            connects,
            reconnects,
            connect_failures,
            links,
            link_refused,
            links_replaced,
        } = transport.stats();
        self.frames_sent.set(frames_sent);
        self.frames_received.set(frames_received);
        self.dropped.set(dropped);
        self.oversized.set(oversized);
        self.malformed.set(malformed);
        self.accepted.set(accepted);
        self.connections_refused.set(connections_refused);
        self.first_frame_timeouts.set(first_frame_timeouts);
        self.connects.set(connects);
        self.reconnects.set(reconnects);
        self.connect_failures.set(connect_failures);
        self.links.set(links);
        self.link_refused.set(link_refused);
        self.links_replaced.set(links_replaced);
        let connections = transport.inbound_connections();
        self.inbound_connections.set(connections.open as u64);
        self.plain_connections.set(connections.plain as u64);
        let depths = transport.queue_depths();
        let config = transport.config();
        self.queue_capacity.set(config.queue_per_peer as u64);
        self.queued.set(depths.outbound as u64);
        self.queue_deepest.set(depths.deepest_outbound as u64);
        self.inbound_capacity.set(config.inbound_queue as u64);
        self.inbound_queued.set(depths.inbound as u64);
        self.plain_inbound_bytes
            .set(depths.plain_inbound_bytes as u64);
        self.plain_inbound_capacity
            .set(config.plain_inbound_bytes as u64);
        self.plain_capacity.set(config.max_plain_connections as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_info_names_release_and_build() {
        let mut registry = Registry::default();
        register_build_info(&mut registry, "0123456789ab-dirty");
        let text = render(&registry);
        let expected = format!(
            "cloudbft_build_info{{version=\"{}\",build=\"0123456789ab-dirty\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&expected), "{text}");
        assert!(text.contains("# TYPE cloudbft_build_info gauge"), "{text}");
    }
}
