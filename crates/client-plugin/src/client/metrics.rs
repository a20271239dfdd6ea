//! What an endpoint counts: plain counters for tests and load drivers ([`ClientStats`]) and the
//! same figures as Prometheus metrics for operators ([`ClientMetrics`]).
//!
//! A client is where Byzantine behaviour becomes visible to the outside (forged, misaddressed or
//! disagreeing replies), so every reply that does not help accept a page is counted with the
//! reason it did not.

use net::metrics::{Registry, TransportMetrics};
use net::Transport;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Unit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Why an inbound frame did not count as a vote for any page.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// Not a protocol envelope of our version.
    Malformed,
    /// A valid message, but not a REPLY (nodes send clients nothing else).
    UnexpectedMessage,
    /// A REPLY for a client identity this endpoint does not hold.
    UnknownClient,
    /// A REPLY for a timestamp this endpoint never sent for that client.
    WrongTimestamp,
    /// The replica named is not a member of the group named.
    NotMember,
    /// The group named does not serve the request in the epoch named (it does not serve the
    /// request's first partition there), so none of its members ordered or answered it.
    NotServing,
    /// A REPLY that did not come on the authenticated link of the replica it names: on a plain
    /// connection, or on another node's link (docs/protocol.md, "REPLYs on authenticated
    /// links").
    Unauthenticated,
    /// More replies queued for one request than any correct group sends: a flood, dropped.
    Overflow,
    /// A REPLY of a configuration epoch the endpoint does not know yet (it asks the nodes for
    /// the configuration; the retransmission gets the reply again).
    UnknownEpoch,
    /// A CONFIGURE not signed by the operator, or not a configuration that may follow ours.
    BadConfigure,
}

impl RejectReason {
    /// Every reason, in the order of [`ClientStats::rejected`]'s fields.
    const ALL: [RejectReason; 10] = [
        RejectReason::Malformed,
        RejectReason::UnexpectedMessage,
        RejectReason::UnknownClient,
        RejectReason::WrongTimestamp,
        RejectReason::NotMember,
        RejectReason::NotServing,
        RejectReason::Unauthenticated,
        RejectReason::Overflow,
        RejectReason::UnknownEpoch,
        RejectReason::BadConfigure,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::Malformed => "malformed",
            RejectReason::UnexpectedMessage => "unexpected_message",
            RejectReason::UnknownClient => "unknown_client",
            RejectReason::WrongTimestamp => "wrong_timestamp",
            RejectReason::NotMember => "not_member",
            RejectReason::NotServing => "not_serving",
            RejectReason::Unauthenticated => "unauthenticated",
            RejectReason::Overflow => "overflow",
            RejectReason::UnknownEpoch => "unknown_epoch",
            RejectReason::BadConfigure => "bad_configure",
        }
    }

    /// Position in [`RejectReason::ALL`] (the variants are declared in that order).
    fn index(self) -> usize {
        self as usize
    }
}

/// Rejected inbound frames, by reason (see [`RejectReason`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rejected {
    /// [`RejectReason::Malformed`].
    pub malformed: u64,
    /// [`RejectReason::UnexpectedMessage`].
    pub unexpected_message: u64,
    /// [`RejectReason::UnknownClient`].
    pub unknown_client: u64,
    /// [`RejectReason::WrongTimestamp`].
    pub wrong_timestamp: u64,
    /// [`RejectReason::NotMember`].
    pub not_member: u64,
    /// [`RejectReason::NotServing`].
    pub not_serving: u64,
    /// [`RejectReason::Unauthenticated`].
    pub unauthenticated: u64,
    /// [`RejectReason::Overflow`].
    pub overflow: u64,
    /// [`RejectReason::UnknownEpoch`].
    pub unknown_epoch: u64,
    /// [`RejectReason::BadConfigure`].
    pub bad_configure: u64,
}

impl Rejected {
    /// All rejections.
    pub fn total(&self) -> u64 {
        self.malformed
            + self.unexpected_message
            + self.unknown_client
            + self.wrong_timestamp
            + self.not_member
            + self.not_serving
            + self.unauthenticated
            + self.overflow
            + self.unknown_epoch
            + self.bad_configure
    }
}

/// A snapshot of an endpoint's counters since it was opened (each read independently).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Requests sent (first transmissions; one per invoke that got an identity).
    pub requests_sent: u64,
    /// Signatures those requests carry: requests signed together share one, so
    /// `requests_sent / request_signatures` is the mean batch the endpoint signed.
    pub request_signatures: u64,
    /// Requests whose page f+1 members of one group vouched for.
    pub accepted: u64,
    /// Re-sendings after a timeout.
    pub retransmissions: u64,
    /// Invokes that gave up at the deadline (waiting for replies or for a free identity).
    pub timeouts: u64,
    /// Authentic replies whose page differs from the accepted one or from the same replica's
    /// earlier reply: evidence of a faulty replica (or of a faulty database quorum).
    pub disagreeing_replies: u64,
    /// Replies that arrived after their request was settled (accepted, given up, or superseded
    /// by the identity's next request). Normal: a group sends 2f+1 replies and f+1 settle it.
    pub late_replies: u64,
    /// Frames that could not count as votes, by reason.
    pub rejected: Rejected,
}

/// The endpoint's Prometheus metrics. [`Default`] gives unregistered metrics (counted, never
/// exported); [`ClientMetrics::register`] exports them.
#[derive(Clone)]
pub struct ClientMetrics {
    requests_sent: Counter,
    request_signatures: Counter,
    accepted: Counter,
    retransmissions: Counter,
    timeouts: Counter,
    rejected: Family<[(&'static str, &'static str); 1], Counter>,
    disagreeing: Counter,
    late: Counter,
    latency: Histogram,
    transport: TransportMetrics,
}

impl Default for ClientMetrics {
    fn default() -> Self {
        ClientMetrics {
            requests_sent: Counter::default(),
            request_signatures: Counter::default(),
            accepted: Counter::default(),
            retransmissions: Counter::default(),
            timeouts: Counter::default(),
            rejected: Family::default(),
            disagreeing: Counter::default(),
            late: Counter::default(),
            // 1 ms to about 33 s: a LAN round trip up to the slowest retransmission.
            latency: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            transport: TransportMetrics::default(),
        }
    }
}

impl std::fmt::Debug for ClientMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientMetrics")
            .field("requests_sent", &self.requests_sent.get())
            .field("accepted", &self.accepted.get())
            .finish_non_exhaustive()
    }
}

impl ClientMetrics {
    /// Registers the metrics under `client_*`, and the endpoint's transport gauges under
    /// `transport_*` (see [`TransportMetrics`]).
    pub fn register(registry: &mut Registry) -> Self {
        let transport = TransportMetrics::register(registry);
        let m = ClientMetrics {
            transport,
            ..ClientMetrics::default()
        };
        let r = registry.sub_registry_with_prefix("client");
        r.register(
            "requests_sent",
            "Requests sent (first transmissions)",
            m.requests_sent.clone(),
        );
        r.register(
            "request_signatures",
            "Signatures on the requests sent (requests signed together share one)",
            m.request_signatures.clone(),
        );
        r.register(
            "accepted",
            "Requests whose page f+1 members of one group vouched for",
            m.accepted.clone(),
        );
        r.register(
            "retransmissions",
            "Requests re-sent after a timeout",
            m.retransmissions.clone(),
        );
        r.register(
            "timeouts",
            "Requests given up at the deadline",
            m.timeouts.clone(),
        );
        r.register(
            "rejected_replies",
            "Inbound frames that could not count as votes, by reason",
            m.rejected.clone(),
        );
        r.register(
            "disagreeing_replies",
            "Authentic replies whose page differs from the accepted one or from the replica's earlier one",
            m.disagreeing.clone(),
        );
        r.register(
            "late_replies",
            "Replies for requests already settled",
            m.late.clone(),
        );
        r.register_with_unit(
            "latency",
            "Time from invoke to acceptance",
            Unit::Seconds,
            m.latency.clone(),
        );
        m
    }
}

/// Counts into both the plain counters and the metrics.
#[derive(Debug)]
pub(crate) struct Recorder {
    metrics: ClientMetrics,
    requests_sent: AtomicU64,
    request_signatures: AtomicU64,
    accepted: AtomicU64,
    retransmissions: AtomicU64,
    timeouts: AtomicU64,
    disagreeing: AtomicU64,
    late: AtomicU64,
    rejected: [AtomicU64; RejectReason::ALL.len()],
}

/// Adds `n` to a counter. Relaxed: counters order nothing else.
fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Recorder {
    pub(crate) fn new(metrics: ClientMetrics) -> Self {
        Recorder {
            metrics,
            requests_sent: AtomicU64::new(0),
            request_signatures: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            retransmissions: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            disagreeing: AtomicU64::new(0),
            late: AtomicU64::new(0),
            rejected: Default::default(),
        }
    }

    /// A request went out; `first_of_batch`: it is the first of the requests its signature
    /// covers (so each signature counts once).
    pub(crate) fn sent(&self, first_of_batch: bool) {
        add(&self.requests_sent, 1);
        self.metrics.requests_sent.inc();
        if first_of_batch {
            add(&self.request_signatures, 1);
            self.metrics.request_signatures.inc();
        }
    }

    pub(crate) fn retransmitted(&self) {
        add(&self.retransmissions, 1);
        self.metrics.retransmissions.inc();
    }

    pub(crate) fn accepted(&self, latency: Duration) {
        add(&self.accepted, 1);
        self.metrics.accepted.inc();
        self.metrics.latency.observe(latency.as_secs_f64());
    }

    pub(crate) fn timed_out(&self) {
        add(&self.timeouts, 1);
        self.metrics.timeouts.inc();
    }

    pub(crate) fn disagreeing(&self, n: u64) {
        add(&self.disagreeing, n);
        self.metrics.disagreeing.inc_by(n);
    }

    pub(crate) fn late(&self) {
        add(&self.late, 1);
        self.metrics.late.inc();
    }

    pub(crate) fn rejected(&self, reason: RejectReason) {
        add(&self.rejected[reason.index()], 1);
        self.metrics
            .rejected
            .get_or_create(&[("reason", reason.as_str())])
            .inc();
    }

    pub(crate) fn update_transport(&self, transport: &Transport) {
        self.metrics.transport.update(transport);
    }

    pub(crate) fn snapshot(&self) -> ClientStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let rejected = |r: RejectReason| get(&self.rejected[r.index()]);
        ClientStats {
            requests_sent: get(&self.requests_sent),
            request_signatures: get(&self.request_signatures),
            accepted: get(&self.accepted),
            retransmissions: get(&self.retransmissions),
            timeouts: get(&self.timeouts),
            disagreeing_replies: get(&self.disagreeing),
            late_replies: get(&self.late),
            rejected: Rejected {
                malformed: rejected(RejectReason::Malformed),
                unexpected_message: rejected(RejectReason::UnexpectedMessage),
                unknown_client: rejected(RejectReason::UnknownClient),
                wrong_timestamp: rejected(RejectReason::WrongTimestamp),
                not_member: rejected(RejectReason::NotMember),
                not_serving: rejected(RejectReason::NotServing),
                unauthenticated: rejected(RejectReason::Unauthenticated),
                overflow: rejected(RejectReason::Overflow),
                unknown_epoch: rejected(RejectReason::UnknownEpoch),
                bad_configure: rejected(RejectReason::BadConfigure),
            },
        }
    }
}
