//! The layers around the gateway's routes: security headers, error pages, the per-client rate
//! limit, cross-site request forgery protection, load shedding and body limits. Each is a tower
//! or tower-http layer (tower_governor for the rate limit); only the error-page rewrite is ours.
//!
//! Outermost first:
//! 1. security headers on every response (`nosniff`, no framing, a CSP that allows only what
//!    the application's pages use: no scripts, no styles, forms posting to the gateway itself;
//!    a response that sets its own CSP keeps it, as the cluster page does for its script);
//! 2. error pages: a refusal from any layer below (plain text or empty) becomes the gateway's
//!    HTML error page, which names no internals;
//! 3. the in-flight gauge;
//! 4. the per-client form rate (POST only), keyed by client address;
//! 5. CSRF: tower-http's `CsrfLayer` (Go 1.25's cross-origin protection: `Sec-Fetch-Site`, then
//!    `Origin` against `Host`), on POST;
//! 6. load shedding over a global concurrency limit: the request beyond the limit gets a 503
//!    at once instead of waiting in a queue;
//! 7. the body size limit and the body deadline.

use super::html;
use super::limits::{client_key, GatewayLimits, GatewayMetrics, Refusal};
use axum::body::Body;
use axum::error_handling::HandleErrorLayer;
use axum::extract::{ConnectInfo, Request};
use axum::http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};
use axum::response::IntoResponse;
use axum::Router;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::{BoxError, ServiceBuilder};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::KeyExtractor;
use tower_governor::{GovernorError, GovernorLayer};
use tower_http::csrf::{CsrfLayer, ProtectionError};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::RequestBodyDeadlineLayer;

/// The pages have no scripts, styles, images or frames, and their forms post to the gateway:
/// everything else is refused, so injected markup could do nothing even if escaping failed.
pub(crate) const CONTENT_SECURITY_POLICY: &str =
    "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// How often the rate limiter forgets clients whose budget is full again, so that its memory
/// is bounded by the clients of the last minute.
const FORGET_IDLE_CLIENTS: Duration = Duration::from_secs(60);

/// The client address a request is rate limited as: the connection's peer (IPv6: its /64), or,
/// for connections from the trusted proxy, the address the proxy appended last to
/// `X-Forwarded-For` (the earlier entries come from the client and may be forged).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClientAddress {
    pub(crate) trusted_proxy: Option<IpAddr>,
}

impl ClientAddress {
    pub(crate) fn of(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> IpAddr {
        // Without connection information (the router served by another server) every request
        // shares one budget: stricter, never looser.
        let peer = peer.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        if Some(peer) != self.trusted_proxy {
            return client_key(peer);
        }
        let forwarded = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .next_back()
            .and_then(|last| last.trim().parse::<IpAddr>().ok());
        client_key(forwarded.unwrap_or(peer))
    }
}

impl KeyExtractor for ClientAddress {
    type Key = IpAddr;

    fn extract<T>(&self, req: &axum::http::Request<T>) -> Result<IpAddr, GovernorError> {
        let peer = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip());
        Ok(self.of(peer, req.headers()))
    }
}

/// `router` with every protection of the module doc. Spawns the rate limiter's cleanup task
/// on the current runtime (it ends with the router).
pub(crate) fn protect(router: Router, limits: &GatewayLimits, metrics: &GatewayMetrics) -> Router {
    let governor = GovernorConfigBuilder::default()
        .period(limits.form_interval)
        .burst_size(limits.form_burst)
        .methods(vec![Method::POST])
        .key_extractor(ClientAddress {
            trusted_proxy: limits.trusted_proxy,
        })
        .finish()
        .map(Arc::new)
        .expect("validated limits: positive interval and burst");
    let limiter = Arc::downgrade(governor.limiter());
    tokio::spawn(async move {
        let mut every = tokio::time::interval(FORGET_IDLE_CLIENTS);
        every.tick().await;
        loop {
            every.tick().await;
            let Some(limiter) = limiter.upgrade() else {
                return;
            };
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    });
    let rate_metrics = metrics.clone();
    let rate_limit = GovernorLayer::new(governor).error_handler(move |error| {
        rate_metrics.refused(Refusal::RateLimited);
        let response: Response<Body> = error.into();
        response
    });

    let csrf_metrics = metrics.clone();
    let mut csrf = CsrfLayer::new();
    for origin in &limits.trusted_origins {
        csrf = csrf
            .add_trusted_origin(origin)
            .expect("validated limits: trusted origins parse");
    }
    let csrf = csrf.with_rejection_response(move |error: ProtectionError| {
        tracing::debug!(?error, "refusing a cross-origin form post");
        csrf_metrics.refused(Refusal::CrossOrigin);
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::FORBIDDEN;
        response
    });

    let shed_metrics = metrics.clone();
    let shed = HandleErrorLayer::new(move |error: BoxError| {
        let metrics = shed_metrics.clone();
        async move {
            if error.is::<tower::load_shed::error::Overloaded>() {
                metrics.refused(Refusal::Overloaded);
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                tracing::warn!(%error, "gateway request failed");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    });

    let count_metrics = metrics.clone();
    let counted =
        axum::middleware::from_fn(move |request: Request, next: axum::middleware::Next| {
            let metrics = count_metrics.clone();
            async move {
                metrics.request_started();
                let response = next.run(request).await;
                metrics.request_ended();
                if response.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    metrics.refused(Refusal::TooLarge);
                }
                response
            }
        });

    let header = |name, value: &'static str| {
        SetResponseHeaderLayer::overriding(name, HeaderValue::from_static(value))
    };
    router.layer(
        ServiceBuilder::new()
            .layer(header(header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
            .layer(header(header::X_FRAME_OPTIONS, "DENY"))
            // The cluster page sets its own (its script and data); every other page gets this.
            .layer(SetResponseHeaderLayer::if_not_present(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CONTENT_SECURITY_POLICY),
            ))
            // Same-origin requests keep their Referer (a fallback for old browsers' CSRF
            // checks); other sites learn nothing about the gateway's URLs.
            .layer(header(header::REFERRER_POLICY, "same-origin"))
            .layer(header(
                header::HeaderName::from_static("cross-origin-opener-policy"),
                "same-origin",
            ))
            .layer(header(
                header::HeaderName::from_static("cross-origin-resource-policy"),
                "same-origin",
            ))
            .layer(axum::middleware::map_response(error_page))
            .layer(counted)
            .layer(rate_limit)
            .layer(csrf)
            .layer(shed)
            .load_shed()
            .layer(GlobalConcurrencyLimitLayer::new(
                limits.max_concurrent_requests,
            ))
            .layer(RequestBodyLimitLayer::new(limits.max_body_bytes))
            .layer(RequestBodyDeadlineLayer::new(limits.body_timeout)),
    )
}

/// A refusal from a layer (plain text or empty) as the gateway's HTML error page, keeping its
/// status and headers such as `Retry-After`. The gateway's own pages pass untouched.
async fn error_page(response: Response<Body>) -> Response<Body> {
    let status = response.status();
    let is_html = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"text/html"));
    if !(status.is_client_error() || status.is_server_error()) || is_html {
        return response;
    }
    let (heading, advice) = refusal_text(status);
    let (mut parts, _) = response.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let page = super::html_response(status, html::error(heading, advice));
    let (page_parts, body) = page.into_parts();
    parts.headers.extend(page_parts.headers);
    Response::from_parts(parts, body)
}

/// What a person is told for a status the gateway refuses with: never why internally.
pub(crate) fn refusal_text(status: StatusCode) -> (&'static str, &'static str) {
    match status {
        StatusCode::NOT_FOUND => ("Not found", "There is no page here."),
        StatusCode::METHOD_NOT_ALLOWED => (
            "Method not allowed",
            "Use the forms of the gateway's index page.",
        ),
        StatusCode::FORBIDDEN => (
            "Forbidden",
            "The form was submitted from another site. Submit it from the gateway's own page.",
        ),
        StatusCode::PAYLOAD_TOO_LARGE => ("The request is too large", "Send less data."),
        StatusCode::TOO_MANY_REQUESTS => (
            "Too many requests",
            "This address submitted more forms than the gateway accepts from one client. \
             Wait a moment before submitting again.",
        ),
        StatusCode::SERVICE_UNAVAILABLE => ("The gateway is busy", "Try again in a moment."),
        s if s.is_server_error() => ("The gateway failed", "Try again later."),
        _ => ("Bad request", "Use the forms of the gateway's index page."),
    }
}

/// The 404 page for paths without a route.
pub(crate) async fn not_found() -> impl IntoResponse {
    StatusCode::NOT_FOUND
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_trusted_proxy_may_name_the_client_address() {
        let proxy: IpAddr = "10.0.0.1".parse().unwrap();
        let mut headers = HeaderMap::new();
        headers.append("x-forwarded-for", "1.1.1.1, 2.2.2.2".parse().unwrap());
        headers.append("x-forwarded-for", "3.3.3.3".parse().unwrap());
        let direct = ClientAddress {
            trusted_proxy: None,
        };
        let peer: IpAddr = "9.9.9.9".parse().unwrap();
        assert_eq!(direct.of(Some(peer), &headers), peer);
        let behind = ClientAddress {
            trusted_proxy: Some(proxy),
        };
        assert_eq!(behind.of(Some(peer), &headers), peer, "not the proxy");
        // The proxy appends the address it saw last; earlier entries are the client's word.
        assert_eq!(
            behind.of(Some(proxy), &headers),
            "3.3.3.3".parse::<IpAddr>().unwrap()
        );
        assert_eq!(behind.of(Some(proxy), &HeaderMap::new()), proxy);
        assert_eq!(direct.of(None, &headers), IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    }
}
