//! What one client, and all clients together, may ask of the gateway, and what it counts when
//! it refuses.
//!
//! The gateway is the cluster's front door: every form it accepts costs a signed request, a
//! warrant at the primary and an execution on every database node. Without limits one browser
//! (or one script) could take every client identity of the gateway, and a slowloris client
//! (connections that send their headers a byte at a time) could hold every connection slot.

use net::metrics::Registry;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// The gateway's limits. The defaults suit a gateway that browsers reach directly; see
/// docs/operations.md ("The gateway's limits") for when to change them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayLimits {
    /// Largest request body (a form) in bytes; larger ones get a 413 before they are read.
    /// The biggest form (New-Order with 15 lines) is under 1 KiB.
    pub max_body_bytes: usize,
    /// Time a client has to send a request's whole header block; a connection still sending
    /// (or idle between requests) after it is closed. This is what defeats slowloris.
    pub header_read_timeout: Duration,
    /// Time a client has to send a request's whole body once its headers arrived.
    pub body_timeout: Duration,
    /// Requests served at once; more are refused at once with a 503 rather than queued (the
    /// client identities are the real bound: each request in flight holds one).
    pub max_concurrent_requests: usize,
    /// Open connections at once; more are answered with a 503 and closed.
    pub max_connections: usize,
    /// Open connections from one client address (IPv6: one /64) at once.
    pub max_connections_per_client: usize,
    /// Each client address (IPv6: one /64) may submit one form per `form_interval` on average,
    /// in bursts of at most `form_burst`; faster submissions get a 429 with `Retry-After`.
    /// Pages and metrics (GET) are not rate limited: they cost the cluster nothing.
    pub form_interval: Duration,
    pub form_burst: u32,
    /// A reverse proxy (TLS terminator) in front of the gateway: connections from this address
    /// are limited by the client address the proxy appends to `X-Forwarded-For` instead of
    /// their own, and are exempt from the per-client connection limit. Headers from any other
    /// peer are ignored (they are trivially forged).
    pub trusted_proxy: Option<IpAddr>,
    /// Origins (`https://shop.example.com`, as a browser sends them) whose cross-origin form
    /// posts are accepted: needed only when a proxy rewrites the `Host` header. Same-origin
    /// posts are always accepted.
    pub trusted_origins: Vec<String>,
}

impl Default for GatewayLimits {
    fn default() -> Self {
        GatewayLimits {
            max_body_bytes: 16 << 10,
            header_read_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_concurrent_requests: 256,
            max_connections: 1024,
            max_connections_per_client: 32,
            form_interval: Duration::from_millis(100),
            form_burst: 20,
            trusted_proxy: None,
            trusted_origins: Vec::new(),
        }
    }
}

/// A limit the gateway cannot run with: `field` names it, `fix` says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {fix}")]
pub struct InvalidLimit {
    pub field: &'static str,
    pub fix: String,
}

impl GatewayLimits {
    /// Refuses limits that would refuse every request or never time out.
    pub fn validate(&self) -> Result<(), InvalidLimit> {
        let positive = |field: &'static str, ok: bool| {
            if ok {
                Ok(())
            } else {
                Err(InvalidLimit {
                    field,
                    fix: "must be positive".into(),
                })
            }
        };
        positive("max_body_bytes", self.max_body_bytes > 0)?;
        positive("header_read_timeout", !self.header_read_timeout.is_zero())?;
        positive("body_timeout", !self.body_timeout.is_zero())?;
        positive("max_concurrent_requests", self.max_concurrent_requests > 0)?;
        positive("max_connections", self.max_connections > 0)?;
        positive(
            "max_connections_per_client",
            self.max_connections_per_client > 0,
        )?;
        positive("form_interval", !self.form_interval.is_zero())?;
        positive("form_burst", self.form_burst > 0)?;
        for origin in &self.trusted_origins {
            let _valid = tower_http::csrf::CsrfLayer::new()
                .add_trusted_origin(origin)
                .map_err(|e| InvalidLimit {
                    field: "trusted_origins",
                    fix: format!("{origin:?} is not an origin such as https://example.com: {e}"),
                })?;
        }
        Ok(())
    }
}

/// The unit a client is limited as: its IPv4 address, or the /64 of its IPv6 address (one
/// host usually holds a whole /64, so limiting single IPv6 addresses would limit nothing).
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(Ipv6Addr::from(prefix))
            }
        },
    }
}

/// Why the gateway refused a request or a connection (`gateway_refused_total{reason}`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Refusal {
    /// A client address over its form rate (429).
    RateLimited,
    /// More requests in progress than `max_concurrent_requests` (503).
    Overloaded,
    /// A form posted from another site (403).
    CrossOrigin,
    /// A body over `max_body_bytes` (413).
    TooLarge,
    /// A connection over `max_connections` or `max_connections_per_client`.
    Connections,
    /// A connection closed for sending its headers too slowly.
    HeaderTimeout,
}

impl Refusal {
    fn label(self) -> &'static str {
        match self {
            Refusal::RateLimited => "rate_limited",
            Refusal::Overloaded => "overloaded",
            Refusal::CrossOrigin => "cross_origin",
            Refusal::TooLarge => "too_large",
            Refusal::Connections => "connections",
            Refusal::HeaderTimeout => "header_timeout",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

/// The gateway's own metrics (`gateway_*`): what it refused and why, how many connections are
/// open, and the limits in force, so a dashboard shows how close to them it runs.
#[derive(Clone, Debug, Default)]
pub struct GatewayMetrics {
    refused: Family<Reason, Counter>,
    connections: Gauge<u64, AtomicU64>,
    max_connections: Gauge<u64, AtomicU64>,
    in_flight: Gauge<u64, AtomicU64>,
    max_concurrent_requests: Gauge<u64, AtomicU64>,
}

impl GatewayMetrics {
    /// Registers the metrics under `gateway_` (unregistered ones still count, for tests).
    pub fn register(registry: &mut Registry) -> Self {
        let m = GatewayMetrics::default();
        let r = registry.sub_registry_with_prefix("gateway");
        r.register(
            "refused",
            "Requests or connections refused, by reason (rate_limited, overloaded, \
             cross_origin, too_large, connections, header_timeout)",
            m.refused.clone(),
        );
        r.register("connections", "Open connections", m.connections.clone());
        r.register(
            "max_connections",
            "Limit on open connections",
            m.max_connections.clone(),
        );
        r.register("in_flight", "Requests being served", m.in_flight.clone());
        r.register(
            "max_concurrent_requests",
            "Limit on requests served at once (more get a 503)",
            m.max_concurrent_requests.clone(),
        );
        m
    }

    pub(crate) fn limits(&self, limits: &GatewayLimits) {
        self.max_connections.set(limits.max_connections as u64);
        self.max_concurrent_requests
            .set(limits.max_concurrent_requests as u64);
    }

    pub(crate) fn refused(&self, why: Refusal) {
        self.refused
            .get_or_create(&Reason {
                reason: why.label(),
            })
            .inc();
    }

    /// How many were refused for `why` so far.
    pub fn refused_total(&self, why: Refusal) -> u64 {
        self.refused
            .get_or_create(&Reason {
                reason: why.label(),
            })
            .get()
    }

    pub(crate) fn connection_opened(&self) {
        self.connections.inc();
    }

    pub(crate) fn connection_closed(&self) {
        self.connections.dec();
    }

    pub(crate) fn request_started(&self) {
        self.in_flight.inc();
    }

    pub(crate) fn request_ended(&self) {
        self.in_flight.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_clients_are_limited_per_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(other));
        assert_eq!(
            client_key("::ffff:10.1.2.3".parse().unwrap()),
            "10.1.2.3".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            client_key("10.1.2.3".parse().unwrap()),
            "10.1.2.3".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn defaults_are_valid_and_zero_limits_name_their_field() {
        assert_eq!(GatewayLimits::default().validate(), Ok(()));
        let zero_burst = GatewayLimits {
            form_burst: 0,
            ..GatewayLimits::default()
        };
        assert_eq!(zero_burst.validate().unwrap_err().field, "form_burst");
        let bad_origin = GatewayLimits {
            trusted_origins: vec!["example.com/path".into()],
            ..GatewayLimits::default()
        };
        assert_eq!(bad_origin.validate().unwrap_err().field, "trusted_origins");
    }
}
