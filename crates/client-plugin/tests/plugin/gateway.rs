//! The HTTP gateway over fake replicas, driven by a minimal HTTP/1.1 client.

use crate::harness::{Harness, WAIT};
use client_plugin::{
    ClientMetrics, ClientOptions, Gateway, GatewayError, GatewayLimits, GatewayMetrics,
    GatewayOptions,
};
use dbvote::bank::BankOp;
use dbvote::noop::NoopOp;
use net::metrics::Registry;
use proto::Request;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tpcc::txn::TpccOp;

pub const FORM: &str = "application/x-www-form-urlencoded";

pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One HTTP/1.1 exchange on its own connection (`Connection: close`, so the body ends at EOF and
/// must match Content-Length).
async fn http(to: SocketAddr, method: &str, path: &str, form: Option<(&str, &str)>) -> Response {
    exchange(&Ask::new(to, method, path, form)).await
}

/// A connection to `to` from the loopback address `from` (every 127/8 address is this machine,
/// so a test can be several clients).
pub async fn connect_from(from: IpAddr, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    socket.connect(to).await.unwrap()
}

/// An HTTP request to make: [`http`]'s, from a chosen address and with extra headers.
pub struct Ask<'a> {
    pub to: SocketAddr,
    pub from: IpAddr,
    pub method: &'a str,
    pub path: &'a str,
    pub form: Option<(&'a str, &'a str)>,
    pub headers: Vec<(&'a str, String)>,
}

impl<'a> Ask<'a> {
    pub fn new(
        to: SocketAddr,
        method: &'a str,
        path: &'a str,
        form: Option<(&'a str, &'a str)>,
    ) -> Self {
        Ask {
            to,
            from: IpAddr::from([127, 0, 0, 1]),
            method,
            path,
            form,
            headers: Vec::new(),
        }
    }

    pub fn post(to: SocketAddr, path: &'a str, body: &'a str) -> Self {
        Ask::new(to, "POST", path, Some((FORM, body)))
    }

    pub fn from(self, from: [u8; 4]) -> Self {
        Ask {
            from: IpAddr::from(from),
            ..self
        }
    }

    pub fn header(mut self, name: &'a str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

pub async fn exchange(ask: &Ask<'_>) -> Response {
    let Ask {
        to,
        from,
        method,
        path,
        form,
        ..
    } = *ask;
    let mut stream = connect_from(from, to).await;
    let (content_type, body) = form.unwrap_or(("", ""));
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {to}\r\nConnection: close\r\n");
    for (name, value) in &ask.headers {
        request += &format!("{name}: {value}\r\n");
    }
    if form.is_some() {
        request += &format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            body.len()
        );
    }
    request += "\r\n";
    request += body;
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut raw))
        .await
        .expect("the gateway answers")
        .unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a header block");
    let head = String::from_utf8(raw[..split].to_vec()).unwrap();
    let body = raw[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|line| {
            let (name, value) = line.split_once(':').unwrap();
            (name.trim().to_owned(), value.trim().to_owned())
        })
        .collect();
    let response = Response {
        status,
        headers,
        body,
    };
    let length: usize = response
        .header("content-length")
        .expect("a content length")
        .parse()
        .unwrap();
    assert_eq!(length, response.body.len());
    response
}

pub async fn post(to: SocketAddr, path: &str, body: &str) -> Response {
    http(to, "POST", path, Some((FORM, body))).await
}

/// A gateway over `h`'s fake cluster with the default limits, its metrics registered.
async fn gateway(h: &Harness, options: ClientOptions) -> Gateway {
    gateway_with(h, options, GatewayLimits::default()).await.0
}

/// A gateway over `h`'s fake cluster within `limits`, and its metrics.
pub async fn gateway_with(
    h: &Harness,
    options: ClientOptions,
    limits: GatewayLimits,
) -> (Gateway, GatewayMetrics) {
    let mut registry = Registry::default();
    let options = ClientOptions {
        metrics: ClientMetrics::register(&mut registry),
        ..options
    };
    let metrics = GatewayMetrics::register(&mut registry);
    let endpoint = h.open(options).await;
    let gateway = Gateway::serve(
        "127.0.0.1:0".parse().unwrap(),
        endpoint,
        Arc::new(registry),
        GatewayOptions {
            limits,
            metrics: metrics.clone(),
            status: Default::default(),
        },
    )
    .await
    .unwrap();
    (gateway, metrics)
}

/// A page with bytes a gateway must not touch: non-ASCII, a byte that is not UTF-8, CRLF.
pub fn render(request: &Request) -> Vec<u8> {
    let mut page = format!("<!DOCTYPE html>\r\n<p>café {}</p>", request.timestamp).into_bytes();
    page.push(0xff);
    page
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_has_a_form_per_bank_operation() {
    let h = Harness::new("bank", 2).await;
    let gateway = gateway(&h, ClientOptions::default()).await;
    let at = gateway.local_addr();

    let index = http(at, "GET", "/", None).await;
    assert_eq!(index.status, 200);
    assert_eq!(
        index.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let page = index.text();
    assert!(page.starts_with("<!DOCTYPE html>"));
    let forms: [(&str, &[&str]); 4] = [
        ("open", &["branch", "number", "cents"]),
        ("deposit", &["branch", "number", "cents"]),
        (
            "transfer",
            &[
                "from_branch",
                "from_number",
                "to_branch",
                "to_number",
                "cents",
            ],
        ),
        ("balance", &["branch", "number"]),
    ];
    for (form, inputs) in forms {
        assert!(
            page.contains(&format!(
                "<form id=\"{form}\" method=\"post\" action=\"/bank/{form}\">"
            )),
            "{form}"
        );
        for input in inputs {
            assert!(
                page.contains(&format!("<input id=\"{form}-{input}\" name=\"{input}\"")),
                "{form} {input}"
            );
        }
        assert!(page.contains(&format!("<button id=\"{form}-submit\" type=\"submit\">")));
    }
    assert!(!page.contains("<script") && !page.contains("http://") && !page.contains("https://"));

    let health = http(at, "GET", "/healthz", None).await;
    assert_eq!((health.status, health.text().as_str()), (200, "ok"));
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_returns_exactly_the_page_the_replicas_agreed_on() {
    let mut h = Harness::new("bank", 2).await;
    let mut sent = h.respond(render);
    let gateway = gateway(&h, ClientOptions::default()).await;
    let at = gateway.local_addr();

    let response = post(at, "/bank/deposit", "branch=1&number=7&cents=250").await;
    let (request, page) = sent.recv().await.unwrap();
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(
        response.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(response.body, page);
    assert_eq!(request.partitions, vec![1]);
    assert_eq!(
        BankOp::decode(&request.operation).unwrap(),
        BankOp::Deposit {
            branch: 1,
            number: 7,
            cents: 250
        }
    );

    let response = post(
        at,
        "/bank/transfer",
        "from_branch=3&from_number=1&to_branch=0&to_number=2&cents=5",
    )
    .await;
    let (request, page) = sent.recv().await.unwrap();
    assert_eq!((response.status, response.body), (200, page));
    assert_eq!(request.partitions, vec![0, 3]);

    let metrics = http(at, "GET", "/metrics", None).await;
    assert_eq!(metrics.status, 200);
    let text = metrics.text();
    for line in [
        "client_requests_sent_total 2",
        "client_accepted_total 2",
        "client_latency_seconds_count 2",
        "client_disagreeing_replies_total 0",
        "transport_frames_sent ",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_400_naming_the_field_and_sends_nothing() {
    let h = Harness::new("bank", 2).await;
    let gateway = gateway(&h, ClientOptions::default()).await;
    let at = gateway.local_addr();

    for (path, body, field) in [
        ("/bank/open", "branch=4&number=1&cents=100", "branch"),
        ("/bank/open", "branch=1&number=x&cents=100", "number"),
        ("/bank/deposit", "branch=1&number=1", "cents"),
        (
            "/bank/transfer",
            "from_branch=0&from_number=1&to_branch=9&to_number=1&cents=1",
            "to_branch",
        ),
        ("/bank/balance", "branch=1&number=-3", "number"),
    ] {
        let response = post(at, path, body).await;
        assert_eq!(response.status, 400, "{path} {body}");
        assert_eq!(
            response.header("content-type"),
            Some("text/html; charset=utf-8")
        );
        let page = response.text();
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains(&format!("{field}:")), "{field} in {page}");
    }
    let wrong_type = http(at, "POST", "/bank/open", Some(("text/plain", "branch=1"))).await;
    assert_eq!(wrong_type.status, 400);
    assert!(wrong_type
        .text()
        .contains("application/x-www-form-urlencoded"));
    // Markup in a value is shown as text.
    let markup = post(at, "/bank/open", "branch=%3Cb%3E&number=1&cents=1").await;
    assert!(
        markup.text().contains("&quot;&lt;b&gt;&quot;"),
        "{}",
        markup.text()
    );

    assert_eq!(gateway.endpoint().stats().requests_sent, 0);
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_noop_cluster_gets_the_noop_form_only() {
    let mut h = Harness::new("noop", 2).await;
    let mut sent = h.respond(render);
    let gateway = gateway(&h, ClientOptions::default()).await;
    let at = gateway.local_addr();

    let index = http(at, "GET", "/", None).await.text();
    assert!(index.contains("<form id=\"noop\" method=\"post\" action=\"/noop\">"));
    assert!(index.contains("<input id=\"noop-partition\" name=\"partition\""));
    assert!(index.contains("<input id=\"noop-payload\" name=\"payload\""));
    assert!(!index.contains("/bank/"));

    let response = post(at, "/noop", "partition=2&payload=hello+world").await;
    let (request, page) = sent.recv().await.unwrap();
    assert_eq!((response.status, response.body), (200, page));
    let op = NoopOp::decode(&request.operation).unwrap();
    assert_eq!(
        (op.partitions, op.payload),
        (vec![2], b"hello world".to_vec())
    );

    assert_eq!(
        post(at, "/bank/open", "branch=1&number=1&cents=1")
            .await
            .status,
        404
    );
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tpcc_cluster_gets_the_five_transaction_forms() {
    let mut h = Harness::new("tpcc", 2).await;
    let mut sent = h.respond(render);
    let gateway = gateway(&h, ClientOptions::default()).await;
    let at = gateway.local_addr();

    let index = http(at, "GET", "/", None).await.text();
    for (form, action) in [
        ("new_order", "new-order"),
        ("payment", "payment"),
        ("order_status", "order-status"),
        ("delivery", "delivery"),
        ("stock_level", "stock-level"),
    ] {
        assert!(index.contains(&format!("<a href=\"#{form}\">")), "{form}");
        assert!(
            index.contains(&format!(
                "<form id=\"{form}\" method=\"post\" action=\"/tpcc/{action}\">"
            )),
            "{form}"
        );
    }
    assert!(!index.contains("/bank/"));

    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let response = post(
        at,
        "/tpcc/new-order",
        "w_id=2&d_id=3&c_id=4&ol_i_id_1=7&ol_supply_w_id_1=&ol_quantity_1=5\
         &ol_i_id_2=8&ol_supply_w_id_2=4&ol_quantity_2=1&ol_i_id_3=&ol_quantity_3=",
    )
    .await;
    let after = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (request, page) = sent.recv().await.unwrap();
    assert_eq!((response.status, response.body), (200, page));
    // Warehouse w is partition w - 1.
    assert_eq!(request.partitions, vec![1, 3]);
    let TpccOp::NewOrder(order) = TpccOp::decode(&request.operation).unwrap() else {
        panic!("not a New-Order");
    };
    assert_eq!((order.w_id, order.d_id, order.c_id), (2, 3, 4));
    let lines: Vec<_> = order
        .lines
        .iter()
        .map(|l| (l.i_id, l.supply_w_id, l.quantity))
        .collect();
    assert_eq!(lines, vec![(7, 2, 5), (8, 4, 1)]);
    // The entry date is the gateway's clock, carried in the operation.
    let entry_d = u64::try_from(order.entry_d).unwrap();
    assert!((before..=after).contains(&entry_d), "{entry_d}");

    for (path, body, field) in [
        (
            "/tpcc/new-order",
            "w_id=5&d_id=1&c_id=1&ol_i_id_1=1&ol_quantity_1=1",
            "w_id",
        ),
        (
            "/tpcc/new-order",
            "w_id=1&d_id=1&c_id=1&ol_i_id_1=1&ol_quantity_1=11",
            "ol_quantity_1",
        ),
        ("/tpcc/new-order", "w_id=1&d_id=1&c_id=1", "ol_cnt"),
        (
            "/tpcc/payment",
            "w_id=1&d_id=1&c_w_id=1&c_d_id=1&c_id=1&h_amount=12.345",
            "h_amount",
        ),
        (
            "/tpcc/stock-level",
            "w_id=1&d_id=1&threshold=30",
            "threshold",
        ),
    ] {
        let response = post(at, path, body).await;
        assert_eq!(response.status, 400, "{path} {body}");
        let page = response.text();
        assert!(page.contains(&format!("{field}:")), "{field} in {page}");
    }
    assert_eq!(gateway.endpoint().stats().requests_sent, 1);
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_that_does_not_answer_gets_a_504() {
    let h = Harness::new("bank", 1).await;
    let options = ClientOptions {
        deadline: Duration::from_millis(100),
        retransmit: Duration::from_millis(20),
        ..ClientOptions::default()
    };
    let gateway = gateway(&h, options).await;
    let response = post(gateway.local_addr(), "/bank/balance", "branch=0&number=1").await;
    assert_eq!(response.status, 504);
    assert!(
        response.text().contains("did not answer in time"),
        "{}",
        response.text()
    );
    // What failed inside (retransmissions, quorums, identities) is for the log only.
    for internal in ["retransmission", "f+1", "replica", "identit"] {
        assert!(!response.text().contains(internal), "{}", response.text());
    }
    assert_eq!(gateway.endpoint().stats().timeouts, 1);
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_without_forms_is_refused() {
    let h = Harness::new("chess", 1).await;
    let endpoint = h.open(ClientOptions::default()).await;
    let error = Gateway::serve(
        "127.0.0.1:0".parse().unwrap(),
        endpoint.clone(),
        Arc::new(Registry::default()),
        GatewayOptions::default(),
    )
    .await
    .err()
    .expect("no forms for chess");
    assert!(matches!(&error, GatewayError::UnknownApplication(name) if name == "chess"));
    endpoint.shutdown().await;
}
