//! The gateway's protections over real TCP: security headers, cross-site request forgery,
//! body size, per-client form rate, load shedding, slowloris and connection limits. Clients on
//! different loopback addresses (127.0.0.2, ...) are different clients to the gateway.

use crate::gateway::{exchange, gateway_with, post, render, Ask};
use crate::harness::{poll_until, Harness, WAIT};
use client_plugin::gateway::Refusal;
use client_plugin::{ClientOptions, Gateway, GatewayLimits, GatewayMetrics};
use proto::Request;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc::UnboundedReceiver;

const DEPOSIT: &str = "branch=1&number=7&cents=250";

/// A bank gateway within `limits` over a fake cluster that answers every request (kept here so
/// that it lives as long as the test).
struct Gated {
    gateway: Gateway,
    metrics: GatewayMetrics,
    at: SocketAddr,
    _cluster: Harness,
    _answered: UnboundedReceiver<(Request, Vec<u8>)>,
}

async fn gated(limits: GatewayLimits) -> Gated {
    let mut h = Harness::new("bank", 4).await;
    let answered = h.respond(render);
    let (gateway, metrics) = gateway_with(&h, ClientOptions::default(), limits).await;
    Gated {
        at: gateway.local_addr(),
        gateway,
        metrics,
        _cluster: h,
        _answered: answered,
    }
}

fn assert_security_headers(response: &crate::gateway::Response, what: &str) {
    for (name, value) in [
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "same-origin"),
        (
            "content-security-policy",
            "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    ] {
        assert_eq!(response.header(name), Some(value), "{name} on {what}");
    }
}

/// Every response carries the security headers, and refusals from any layer are the gateway's
/// HTML error page, which names nothing internal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_has_security_headers_and_errors_are_plain_pages() {
    let limits = GatewayLimits {
        max_body_bytes: 1024,
        ..GatewayLimits::default()
    };
    let g = gated(limits).await;
    let at = g.at;

    let index = exchange(&Ask::new(at, "GET", "/", None)).await;
    assert_security_headers(&index, "the index");
    let page = exchange(&Ask::post(at, "/bank/deposit", DEPOSIT)).await;
    assert_eq!(page.status, 200, "{}", page.text());
    assert_security_headers(&page, "a replica page");

    let big = "x".repeat(2000);
    let cases = [
        (Ask::new(at, "GET", "/nowhere", None), 404, "Not found"),
        (
            Ask::new(at, "GET", "/bank/deposit", None),
            405,
            "Method not allowed",
        ),
        (Ask::post(at, "/bank/deposit", "branch=9"), 400, "branch:"),
        (Ask::post(at, "/bank/deposit", &big), 413, "too large"),
    ];
    for (ask, status, says) in &cases {
        let response = exchange(ask).await;
        let what = format!("{} {}", ask.method, ask.path);
        assert_eq!(response.status, *status, "{what}: {}", response.text());
        assert_security_headers(&response, &what);
        assert_eq!(
            response.header("content-type"),
            Some("text/html; charset=utf-8"),
            "{what}"
        );
        let text = response.text();
        assert!(
            text.starts_with("<!DOCTYPE html>") && text.contains(says),
            "{what}: {text}"
        );
        for internal in ["axum", "hyper", "tower", "length limit", "Failed to"] {
            assert!(
                !text.contains(internal),
                "{what} reveals {internal}: {text}"
            );
        }
    }
    assert_eq!(g.metrics.refused_total(Refusal::TooLarge), 1);
    g.gateway.shutdown().await;
}

/// Cross-site form posts are refused before anything is signed; same-origin ones (as a browser
/// sends them from the gateway's own page) and non-browser clients pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_form_posts_are_refused_and_same_origin_ones_pass() {
    let limits = GatewayLimits {
        trusted_origins: vec!["https://shop.example.com".into()],
        ..GatewayLimits::default()
    };
    let g = gated(limits).await;
    let at = g.at;
    let post = || Ask::post(at, "/bank/deposit", DEPOSIT);

    let refused = [
        post().header("Sec-Fetch-Site", "cross-site"),
        post().header("Sec-Fetch-Site", "same-site"),
        post().header("Origin", "https://evil.example"),
        post().header("Origin", "null"),
        post().header("Origin", format!("http://127.0.0.2:{}", at.port())),
    ];
    for ask in &refused {
        let response = exchange(ask).await;
        assert_eq!(response.status, 403, "{:?}", ask.headers);
        assert!(
            response.text().contains("another site"),
            "{}",
            response.text()
        );
    }
    assert_eq!(g.metrics.refused_total(Refusal::CrossOrigin), 5);
    assert_eq!(
        g.gateway.endpoint().stats().requests_sent,
        0,
        "nothing signed"
    );

    let accepted = [
        post().header("Sec-Fetch-Site", "same-origin"),
        post()
            .header("Sec-Fetch-Site", "same-origin")
            .header("Origin", format!("http://{at}")),
        // An older browser without Fetch Metadata: Origin against Host.
        post().header("Origin", format!("http://{at}")),
        // The public origin behind a proxy that rewrites Host.
        post().header("Origin", "https://shop.example.com"),
        // Not a browser (curl, scripts): no ambient credentials to abuse.
        post(),
    ];
    for ask in &accepted {
        let response = exchange(ask).await;
        assert_eq!(
            response.status,
            200,
            "{:?}: {}",
            ask.headers,
            response.text()
        );
    }
    // Reading is never refused.
    let index =
        exchange(&Ask::new(at, "GET", "/", None).header("Sec-Fetch-Site", "cross-site")).await;
    assert_eq!(index.status, 200);
    g.gateway.shutdown().await;
}

/// One address over its form rate gets 429s with Retry-After while another address is served;
/// GETs are not rate limited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_over_its_form_rate_is_refused_and_others_are_not() {
    let limits = GatewayLimits {
        form_interval: Duration::from_secs(3600),
        form_burst: 3,
        ..GatewayLimits::default()
    };
    let g = gated(limits).await;
    let at = g.at;

    for _ in 0..3 {
        let ok = exchange(&Ask::post(at, "/bank/deposit", DEPOSIT).from([127, 0, 0, 2])).await;
        assert_eq!(ok.status, 200, "{}", ok.text());
    }
    let refused = exchange(&Ask::post(at, "/bank/deposit", DEPOSIT).from([127, 0, 0, 2])).await;
    assert_eq!(refused.status, 429);
    assert!(
        refused
            .header("retry-after")
            .and_then(|s| s.parse::<u64>().ok())
            .is_some_and(|s| s > 0),
        "{:?}",
        refused.headers
    );
    assert!(refused.text().contains("Too many requests"));
    assert_eq!(g.gateway.endpoint().stats().requests_sent, 3);
    let index = exchange(&Ask::new(at, "GET", "/", None).from([127, 0, 0, 2])).await;
    assert_eq!(index.status, 200, "pages are not rate limited");
    let other = exchange(&Ask::post(at, "/bank/deposit", DEPOSIT).from([127, 0, 0, 3])).await;
    assert_eq!(other.status, 200, "another client has its own budget");
    assert_eq!(g.metrics.refused_total(Refusal::RateLimited), 1);
    g.gateway.shutdown().await;
}

/// Beyond `max_concurrent_requests` a request is refused at once (503) instead of queueing
/// behind the ones waiting for the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_concurrency_limit_are_shed_at_once() {
    // Nobody answers: the first request waits for its deadline.
    let h = Harness::new("bank", 2).await;
    let options = ClientOptions {
        deadline: Duration::from_secs(3),
        ..ClientOptions::default()
    };
    let limits = GatewayLimits {
        max_concurrent_requests: 1,
        ..GatewayLimits::default()
    };
    let (gateway, metrics) = gateway_with(&h, options, limits).await;
    let at = gateway.local_addr();
    let waiting = tokio::spawn(async move { post(at, "/bank/balance", "branch=0&number=1").await });
    crate::harness::wait_until(gateway.endpoint(), "the first request is sent", |stats| {
        stats.requests_sent == 1
    })
    .await;
    // Refused, not queued: a queued request would have waited for the first and then timed out
    // itself (504).
    let shed = post(at, "/bank/balance", "branch=0&number=2").await;
    assert_eq!(shed.status, 503, "{}", shed.text());
    assert!(shed.text().contains("busy"));
    assert_eq!(waiting.await.unwrap().status, 504);
    assert_eq!(metrics.refused_total(Refusal::Overloaded), 1);
    gateway.shutdown().await;
}

/// A slowloris client (headers a byte at a time, never finishing) is cut off after the header
/// timeout; connections over the per-client limit are refused while other clients connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_connections_time_out_and_one_client_cannot_take_every_connection() {
    let limits = GatewayLimits {
        header_read_timeout: Duration::from_millis(500),
        max_connections_per_client: 4,
        ..GatewayLimits::default()
    };
    let g = gated(limits).await;
    let at = g.at;
    let slow = [127, 0, 0, 9];

    let mut held = Vec::new();
    for _ in 0..4 {
        let mut stream = crate::gateway::connect_from(slow.into(), at).await;
        stream
            .write_all(b"POST /bank/deposit HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        held.push(stream);
    }
    // The fifth connection from the same address is refused at once.
    let mut fifth = crate::gateway::connect_from(slow.into(), at).await;
    let mut refused = String::new();
    tokio::time::timeout(WAIT, fifth.read_to_string(&mut refused))
        .await
        .expect("refused at once")
        .ok();
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");

    // Others are served while the slow connections are held.
    let ok = exchange(&Ask::post(at, "/bank/deposit", DEPOSIT).from([127, 0, 0, 10])).await;
    assert_eq!(ok.status, 200);

    // Trickling more header bytes does not keep a connection: the timeout covers the whole
    // header block.
    for stream in &mut held {
        let _ = stream.write_all(b"X-Slow: 1\r\n").await;
    }
    // Closed by the header timeout (counted below), not by the test's own patience.
    for mut stream in held {
        let mut rest = Vec::new();
        tokio::time::timeout(WAIT, stream.read_to_end(&mut rest))
            .await
            .expect("the gateway closes a slow connection")
            .ok();
    }
    // Each is counted by its connection's task once hyper gave the connection up, which the
    // client may see first (a busy machine made this assertion fail when it was immediate).
    let timeouts = || g.metrics.refused_total(Refusal::HeaderTimeout);
    poll_until("the four header timeouts are counted", timeouts, |&n| {
        n >= 4
    })
    .await;
    assert_eq!(timeouts(), 4);
    assert_eq!(g.metrics.refused_total(Refusal::Connections), 1);
    // Their slots are free again.
    let again = exchange(&Ask::new(at, "GET", "/healthz", None).from(slow)).await;
    assert_eq!(again.status, 200);
    g.gateway.shutdown().await;
}
