//! The gateway's HTTP/1.1 server loop: hyper with a header read timeout, and connection limits
//! (in total and per client address) checked at accept.
//!
//! `axum::serve` sets neither: a slowloris client that opens connections and sends its headers
//! a byte at a time would hold them for ever. Connections are a transport-level resource, below
//! what tower layers see (they act on requests), hence this loop.

use super::limits::{client_key, GatewayLimits, GatewayMetrics, Refusal};
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Semaphore};
use tower::ServiceExt;

/// What a refused connection is told before it is closed (written without waiting: a client
/// that does not read it just gets the close).
const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n\
    content-length: 29\r\nretry-after: 1\r\nconnection: close\r\n\r\nToo many connections, retry.\n";

/// How long connections may finish their requests once the gateway stops.
const DRAIN: Duration = Duration::from_secs(10);

/// Open connections per client address, each counted by a [`Slot`] while it lives.
#[derive(Default)]
struct PerClient(Mutex<HashMap<IpAddr, usize>>);

/// One connection's place in [`PerClient`], given back on drop.
struct Slot {
    table: Arc<PerClient>,
    key: Option<IpAddr>,
}

impl PerClient {
    /// A slot for a connection from `peer`, or `None` if its address already has `max` open.
    /// The trusted proxy carries many clients' connections, so it is not counted.
    fn enter(
        table: &Arc<PerClient>,
        peer: IpAddr,
        max: usize,
        trusted_proxy: Option<IpAddr>,
    ) -> Option<Slot> {
        if Some(peer) == trusted_proxy {
            return Some(Slot {
                table: Arc::clone(table),
                key: None,
            });
        }
        let key = client_key(peer);
        let mut open = table.0.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(key).or_default();
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(Slot {
            table: Arc::clone(table),
            key: Some(key),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Some(key) = self.key else { return };
        let mut open = self.table.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&key);
            }
        }
    }
}

/// Serves `app` on `listener` until `stop` fires (or its sender is dropped), then lets open
/// connections finish their requests for at most [`DRAIN`].
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: GatewayLimits,
    metrics: GatewayMetrics,
    mut stop: oneshot::Receiver<()>,
) -> io::Result<()> {
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let per_client = Arc::new(PerClient::default());
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, or a connection reset before accept: wait a
                    // little rather than spin.
                    tracing::warn!(%error, "gateway accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let permit = Arc::clone(&connections).try_acquire_owned().ok();
        let slot = PerClient::enter(
            &per_client,
            peer.ip(),
            limits.max_connections_per_client,
            limits.trusted_proxy,
        );
        let (Some(permit), Some(slot)) = (permit, slot) else {
            metrics.refused(Refusal::Connections);
            refuse(stream);
            continue;
        };
        let service = app
            .clone()
            .map_request(move |mut request: hyper::Request<Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            });
        let connection = graceful
            .watch(http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service)));
        let metrics = metrics.clone();
        metrics.connection_opened();
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                if error.is_timeout() {
                    metrics.refused(Refusal::HeaderTimeout);
                }
                tracing::debug!(%peer, %error, "gateway connection ended");
            }
            metrics.connection_closed();
            drop((permit, slot));
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("gateway connections still open after {DRAIN:?}: closing them");
    }
    Ok(())
}

fn refuse(stream: TcpStream) {
    let _ = stream.try_write(REFUSED);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_client_slots_are_capped_and_given_back() {
        let table = Arc::new(PerClient::default());
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        let first = PerClient::enter(&table, a, 2, None).unwrap();
        let _second = PerClient::enter(&table, a, 2, None).unwrap();
        assert!(PerClient::enter(&table, a, 2, None).is_none());
        assert!(PerClient::enter(&table, b, 2, None).is_some());
        drop(first);
        assert!(PerClient::enter(&table, a, 2, None).is_some());
        // The trusted proxy is never capped.
        let proxied: Vec<_> = (0..5)
            .map(|_| PerClient::enter(&table, b, 1, Some(b)).unwrap())
            .collect();
        drop(proxied);
        assert!(table.0.lock().unwrap().get(&b).is_none());
    }
}
