//! The HTTP gateway: the forms of the cluster's application for browsers, each submission
//! turned into one signed request, and the page f+1 replicas of one group agreed on sent back
//! byte for byte.
//!
//! Routes:
//! - `GET /`: the index, one form per operation;
//! - `POST /bank/open`, `/bank/deposit`, `/bank/transfer`, `/bank/balance` (application
//!   `bank`), `POST /noop` (application `noop`), or `POST /tpcc/new-order`, `/tpcc/payment`,
//!   `/tpcc/order-status`, `/tpcc/delivery`, `/tpcc/stock-level` (application `tpcc`),
//!   `application/x-www-form-urlencoded`;
//! - `GET /metrics`: Prometheus text; `GET /healthz`: `ok`.
//!
//! Input is validated before anything is signed: a bad field gets a 400 page naming it and
//! nothing reaches the cluster. A request without an accepted page before the deadline gets a
//! 504 (the operation may still have executed).
//!
//! The gateway faces the Internet, so every route sits behind [`protect`]'s layers (security
//! headers, CSRF protection, a per-client form rate, load shedding, body limits) and the
//! [`server`] loop's header timeout and connection limits, all set by [`GatewayLimits`]. Error
//! pages say what the person can do, never what failed inside (that goes to the log).

mod cluster;
mod forms;
mod html;
mod limits;
mod protect;
mod server;

pub use cluster::StatusSources;
pub use limits::{GatewayLimits, GatewayMetrics, InvalidLimit, Refusal};

use crate::client::{ClientEndpoint, ClientError};
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use forms::{App, FormSpec};
use net::metrics::Registry;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const HTML: &str = "text/html; charset=utf-8";

/// Why the gateway cannot start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The cluster runs an application the gateway has no forms for.
    #[error(
        "application = {0:?}: the gateway has forms for \"bank\", \"noop\" and \"tpcc\" \
         only; fix the cluster configuration"
    )]
    UnknownApplication(String),
    /// The HTTP address cannot be bound.
    #[error("cannot listen on {listen}: {source}")]
    Bind {
        listen: SocketAddr,
        source: io::Error,
    },
    /// A limit cannot work (zero, or an origin that is not one).
    #[error("gateway limit {0}")]
    Limits(#[from] InvalidLimit),
}

/// How a gateway protects itself and where it counts.
#[derive(Clone, Debug, Default)]
pub struct GatewayOptions {
    pub limits: GatewayLimits,
    /// Pass [`GatewayMetrics::register`]'s result to export them.
    pub metrics: GatewayMetrics,
    /// Where the cluster page reads what the gateway does not see itself.
    pub status: StatusSources,
}

struct Gate {
    endpoint: ClientEndpoint,
    status: Arc<cluster::ClusterStatus>,
    registry: Arc<Registry>,
    app: App,
    partitions: u32,
}

/// The gateway's routes over `endpoint` with every request-level protection of `options`, for
/// callers that serve them themselves (serve them with
/// `into_make_service_with_connect_info::<SocketAddr>()`, or all clients share one form rate;
/// header timeouts and connection limits are the server's: see [`Gateway::serve`]). `registry`
/// (with the endpoint's [`ClientMetrics`](crate::client::ClientMetrics) registered, typically)
/// is rendered at `/metrics`. Call it inside a tokio runtime.
pub fn router(
    endpoint: ClientEndpoint,
    registry: Arc<Registry>,
    options: &GatewayOptions,
) -> Result<Router, GatewayError> {
    options.limits.validate()?;
    options.metrics.limits(&options.limits);
    let config = &endpoint.cluster().config;
    let app = App::from_name(&config.application)
        .ok_or_else(|| GatewayError::UnknownApplication(config.application.clone()))?;
    let status = cluster::ClusterStatus::new(options.status.clone());
    {
        let (status, endpoint) = (status.clone(), endpoint.clone());
        tokio::spawn(async move {
            let mut every = tokio::time::interval(cluster::SAMPLE_EVERY);
            loop {
                every.tick().await;
                status.sample(&endpoint.cluster()).await;
            }
        });
    }
    let gate = Arc::new(Gate {
        partitions: config.partitions,
        status,
        endpoint,
        registry,
        app,
    });
    let mut router = Router::new()
        .route("/", get(index))
        .route("/metrics", get(metrics))
        .route("/cluster", get(cluster_page))
        .route("/cluster.js", get(cluster_script))
        .route("/cluster.json", get(cluster_data))
        .route("/healthz", get(|| async { "ok" }));
    for spec in app.forms() {
        router = router.route(
            spec.action,
            post(
                move |State(gate): State<Arc<Gate>>,
                      form: Result<Form<HashMap<String, String>>, FormRejection>| {
                    submit(gate, spec, form)
                },
            ),
        );
    }
    let router = router
        .fallback(protect::not_found)
        .method_not_allowed_fallback(|| async { StatusCode::METHOD_NOT_ALLOWED })
        .with_state(gate);
    Ok(protect::protect(router, &options.limits, &options.metrics))
}

/// An operation's declared partitions and its bytes, as the gateway signs and sends them.
pub type FormOperation = (Vec<proto::PartitionId>, Vec<u8>);

/// What the gateway of a cluster running `application` (with `partitions` partitions) makes of
/// a form posted to `action` with these fields, as [`router`]'s handlers do: the operation's
/// partitions and bytes that it would sign and send, or the refusal shown to the user; `None`
/// when no form of the application posts there. Public so that the fuzz targets and property
/// tests check exactly what the gateway would send (`now`: the clock, in Unix seconds).
pub fn form_operation(
    application: &str,
    action: &str,
    values: &HashMap<String, String>,
    partitions: u32,
    now: i64,
) -> Option<Result<FormOperation, String>> {
    let spec = App::from_name(application)?
        .forms()
        .iter()
        .find(|spec| spec.action == action)?;
    Some(
        spec.operation(values, partitions, now)
            .map(|op| (op.partitions, op.bytes))
            .map_err(|bad| bad.to_string()),
    )
}

/// A running gateway.
pub struct Gateway {
    local_addr: SocketAddr,
    endpoint: ClientEndpoint,
    stop: oneshot::Sender<()>,
    server: JoinHandle<io::Result<()>>,
}

impl Gateway {
    /// Serves the gateway's routes on `listen` (port 0 picks a free port; see
    /// [`local_addr`](Gateway::local_addr)) until [`shutdown`](Gateway::shutdown), within
    /// `options`' limits.
    pub async fn serve(
        listen: SocketAddr,
        endpoint: ClientEndpoint,
        registry: Arc<Registry>,
        options: GatewayOptions,
    ) -> Result<Gateway, GatewayError> {
        let router = router(endpoint.clone(), registry, &options)?;
        let bind = |source| GatewayError::Bind { listen, source };
        let listener = TcpListener::bind(listen).await.map_err(bind)?;
        let local_addr = listener.local_addr().map_err(bind)?;
        // A dropped sender stops the server as well.
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(server::serve(
            listener,
            router,
            options.limits,
            options.metrics,
            stopped,
        ));
        tracing::info!(%local_addr, "gateway serving http://{local_addr}/");
        Ok(Gateway {
            local_addr,
            endpoint,
            stop,
            server,
        })
    }

    /// The address the gateway listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The endpoint the gateway sends requests through.
    pub fn endpoint(&self) -> &ClientEndpoint {
        &self.endpoint
    }

    /// Stops the endpoint first (requests in progress are answered with a 503 rather than
    /// waited for), then the HTTP server once its connections have finished.
    pub async fn shutdown(self) {
        self.endpoint.shutdown().await;
        let _ = self.stop.send(());
        match self.server.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "gateway server failed"),
            Err(error) => tracing::warn!(%error, "gateway server task failed"),
        }
        tracing::info!(local_addr = %self.local_addr, "gateway shut down");
    }
}

async fn index(State(gate): State<Arc<Gate>>) -> Response {
    html_response(StatusCode::OK, html::index(gate.app, gate.partitions))
}

/// The live cluster page (gateway::cluster), with the policy that lets it run its own script.
async fn cluster_page() -> Response {
    (
        [
            (header::CONTENT_TYPE, HTML),
            (header::CONTENT_SECURITY_POLICY, cluster::PAGE_POLICY),
        ],
        cluster::PAGE,
    )
        .into_response()
}

async fn cluster_script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        cluster::SCRIPT,
    )
        .into_response()
}

async fn cluster_data(State(gate): State<Arc<Gate>>) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        gate.status.json(&gate.endpoint),
    )
        .into_response()
}

async fn metrics(State(gate): State<Arc<Gate>>) -> Response {
    gate.endpoint.refresh_metrics();
    let text = net::metrics::render(&gate.registry);
    ([(header::CONTENT_TYPE, net::metrics::CONTENT_TYPE)], text).into_response()
}

/// One form submission: validate, invoke, and return the accepted page untouched.
async fn submit(
    gate: Arc<Gate>,
    spec: &'static FormSpec,
    form: Result<Form<HashMap<String, String>>, FormRejection>,
) -> Response {
    let values = match form {
        Ok(Form(values)) => values,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            let (heading, advice) = protect::refusal_text(StatusCode::PAYLOAD_TOO_LARGE);
            return error_page(StatusCode::PAYLOAD_TOO_LARGE, heading, advice);
        }
        Err(rejection) => {
            return error_page(
                StatusCode::BAD_REQUEST,
                "Bad request",
                &format!(
                    "The form must be posted as application/x-www-form-urlencoded: {}",
                    rejection.body_text()
                ),
            );
        }
    };
    let operation = match spec.operation(&values, gate.partitions, unix_now()) {
        Ok(operation) => operation,
        Err(bad) => {
            tracing::debug!(form = spec.id, %bad, "refusing form input");
            return error_page(
                StatusCode::BAD_REQUEST,
                "Bad request",
                &format!("{}: {bad}", spec.title),
            );
        }
    };
    match gate
        .endpoint
        .invoke(operation.partitions, operation.bytes)
        .await
    {
        Ok(accepted) => {
            gate.status.accepted(accepted.group, accepted.latency);
            (
                StatusCode::OK,
                [
                    (header::CONTENT_TYPE, HTML),
                    // A result belongs to one submission; it must not be replayed from a cache.
                    (header::CACHE_CONTROL, "no-store"),
                ],
                accepted.page,
            )
                .into_response()
        }
        Err(error) => {
            tracing::warn!(form = spec.id, %error, "no accepted page");
            failure(&error)
        }
    }
}

/// The gateway's clock in seconds since the Unix epoch, for the dates an operation carries (a
/// clock before 1970 reads as the epoch).
fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        })
}

/// The page for a request that got no accepted page. It tells the person what to do and
/// nothing about the cluster (identities, retransmissions, paths): the `error` is in the log.
fn failure(error: &ClientError) -> Response {
    let (status, heading, advice) = match error {
        ClientError::Timeout { .. } => (
            StatusCode::GATEWAY_TIMEOUT,
            "The cluster did not answer in time",
            "The operation may still have been executed: check (for instance the balance) \
             before submitting it again.",
        ),
        ClientError::Busy { .. } => (
            StatusCode::SERVICE_UNAVAILABLE,
            "The gateway is busy",
            "Try again in a moment.",
        ),
        ClientError::Closed => (
            StatusCode::SERVICE_UNAVAILABLE,
            "The gateway is shutting down",
            "Try again in a moment.",
        ),
        ClientError::TooLarge { .. } | ClientError::OperationTooLarge { .. } => (
            StatusCode::PAYLOAD_TOO_LARGE,
            "The request is too large",
            "Send less data.",
        ),
        ClientError::Config { .. }
        | ClientError::Resolve { .. }
        | ClientError::Key { .. }
        | ClientError::Bind { .. } => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "The gateway failed",
            "Try again later.",
        ),
    };
    error_page(status, heading, advice)
}

fn error_page(status: StatusCode, heading: &str, message: &str) -> Response {
    html_response(status, html::error(heading, message))
}

fn html_response(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, HTML)], body).into_response()
}
