//! The simulation's operator: the steps of `cloudbft`'s operator (crates/cloudbft/src/operator.rs,
//! docs/protocol.md, "Reconfiguration") as a deterministic state machine driven by the simulated
//! clock and network. It sends the signed RECONFIGURE to the primary candidates until f+1
//! matching EPOCH-CLOSEs of every group certify the epoch's end, asks every node of the epoch
//! where its USIG sequence stands, builds the next configuration with the same function as the
//! real operator ([`proto::reconfig::next_configuration`]), and sends the signed CONFIGURE to
//! every node and client until the nodes of the new epoch acknowledge it. Every step is re-sent
//! on a timer, as the real operator does, so lost messages only delay it.

use group::order::OrderBook;
use group::view::primary_of;
use proto::config::{Cluster, ClusterConfig};
use proto::reconfig::{certified, collect_close, next_configuration, EpochStarted};
use proto::testing::operator_key;
use proto::{
    Configure, EpochClose, Message, NodeId, PositionReport, PositionRequest, Reconfigure,
    Signature, View,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Where the operator listens (the `reply_to` of its messages).
pub const OPERATOR_ADDR: &str = "sim:operator";
/// Simulated time between re-sends of an unanswered step (the real operator's 500 ms against
/// its nodes' 2 s request timer: a quarter of the replicas' view timer here).
const RESEND: u64 = 250;
/// How long position reports are awaited once the epoch is closed (the others rejoin).
const POSITION_TIMEOUT: u64 = 2_500;
/// How long the nodes of the new epoch get to acknowledge it.
const START_TIMEOUT: u64 = 20_000;

/// Whom the operator sends a message to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum To {
    Node(NodeId),
    /// Every client (their configured addresses).
    Clients,
}

/// One reconfiguration as it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconfigured {
    /// The epoch that started.
    pub epoch: u64,
    /// The last global order of the epoch before (everything up to it under the old
    /// assignment).
    pub cut_order: u64,
    /// The view whose history ended the epoch, and its primary (first in the new epoch).
    pub closing_view: View,
    pub closing_primary: NodeId,
    /// When the RECONFIGURE was first sent, the certificate formed and the last node
    /// acknowledged (or the wait ended).
    pub sent_at: u64,
    pub certified_at: u64,
    pub started_at: u64,
    /// How often the RECONFIGURE was sent.
    pub reconfigure_sends: u32,
    /// Replicas whose position was not reported: they rejoin with a JOIN.
    pub rejoining: Vec<u32>,
    /// Nodes of the new epoch that did not acknowledge it in time.
    pub silent: Vec<u32>,
}

enum Phase {
    Idle,
    Closing {
        next: ClusterConfig,
        reconfigure: Reconfigure,
        closes: BTreeMap<NodeId, EpochClose>,
        sends: u32,
    },
    Positions {
        next: ClusterConfig,
        certificate: Vec<EpochClose>,
        view: View,
        book_digest: usig::MessageDigest,
        reports: BTreeMap<NodeId, PositionReport>,
        book: Option<Vec<u8>>,
        deadline: u64,
    },
    Starting {
        next: Arc<Cluster>,
        configure: Box<Configure>,
        acked: BTreeSet<NodeId>,
        deadline: u64,
    },
}

/// The operator's state.
pub struct Operator {
    /// The configuration the cluster runs (as far as the operator started it).
    pub current: Arc<Cluster>,
    phase: Phase,
    /// Of the reconfiguration in progress: when it began, when the certificate formed, how
    /// often the RECONFIGURE went out, and its closing view.
    record: Option<Reconfigured>,
    last_sent: u64,
    /// Every reconfiguration done.
    pub done: Vec<Reconfigured>,
    /// The configuration of every epoch so far, the first one first.
    pub epochs: Vec<Arc<Cluster>>,
    /// Where the USIG sequence of every replica stopped when it was last reported: a replica
    /// removed and later re-added continues from there.
    pub positions: proto::reconfig::Positions,
}

impl Operator {
    pub fn new(current: Arc<Cluster>) -> Self {
        Operator {
            current: current.clone(),
            phase: Phase::Idle,
            record: None,
            last_sent: 0,
            done: Vec::new(),
            epochs: vec![current.clone()],
            positions: BTreeMap::new(),
        }
    }

    /// Whether no reconfiguration is in progress.
    pub fn idle(&self) -> bool {
        matches!(self.phase, Phase::Idle)
    }

    /// Starts moving the cluster to `next` (a valid successor of the current configuration).
    pub fn reconfigure(&mut self, now: u64, next: ClusterConfig) -> Vec<(To, Message)> {
        let reconfigure =
            Reconfigure::new(self.current.epoch(), &next, OPERATOR_ADDR, &operator_key());
        self.record = Some(Reconfigured {
            epoch: next.config_epoch,
            cut_order: 0,
            closing_view: View(0),
            closing_primary: NodeId(0),
            sent_at: now,
            certified_at: 0,
            started_at: 0,
            reconfigure_sends: 0,
            rejoining: Vec::new(),
            silent: Vec::new(),
        });
        self.phase = Phase::Closing {
            next,
            reconfigure,
            closes: BTreeMap::new(),
            sends: 0,
        };
        self.last_sent = now;
        self.resend()
    }

    /// A timer tick: re-sends the current step if it went unanswered, and moves on when the
    /// position reports' wait or the acknowledgements' wait is over.
    pub fn on_tick(&mut self, now: u64) -> Vec<(To, Message)> {
        if matches!(self.phase, Phase::Idle) {
            return Vec::new();
        }
        let mut out = Vec::new();
        if let Phase::Positions { deadline, book, .. } = &self.phase {
            if now >= *deadline && book.is_some() {
                out.extend(self.build(now));
                return out;
            }
        }
        if let Phase::Starting { deadline, .. } = &self.phase {
            if now >= *deadline {
                self.finish(now);
                return out;
            }
        }
        if now >= self.last_sent + RESEND {
            self.last_sent = now;
            out.extend(self.resend());
        }
        out
    }

    /// What the current step sends (again).
    fn resend(&mut self) -> Vec<(To, Message)> {
        let candidates = || {
            self.current
                .config
                .primaries
                .iter()
                .map(|p| To::Node(NodeId(p.id)))
                .collect::<Vec<_>>()
        };
        match &mut self.phase {
            Phase::Idle => Vec::new(),
            Phase::Closing {
                reconfigure, sends, ..
            } => {
                *sends += 1;
                let m = Message::Reconfigure(reconfigure.clone());
                candidates().into_iter().map(|to| (to, m.clone())).collect()
            }
            // The nodes that have not reported and, while no book came, every replica (as
            // `cloudbft reconfigure` does): a replica may answer before it signed its
            // EPOCH-CLOSE, and asked no more, it left the operator waiting for ever
            // (reconfiguration `many_seeds`, seed 8002).
            Phase::Positions { reports, book, .. } => {
                let m = Message::PositionRequest(position_request(&self.current));
                let replica =
                    |id: &NodeId| self.current.config.replicas.iter().any(|r| r.id == id.0);
                asked(&self.current)
                    .into_iter()
                    .filter(|id| match reports.get(id) {
                        None => true,
                        Some(_) => book.is_none() && replica(id),
                    })
                    .map(|id| (To::Node(id), m.clone()))
                    .collect()
            }
            Phase::Starting {
                next,
                configure,
                acked,
                ..
            } => {
                let m = Message::Configure(configure.clone());
                all_nodes(next)
                    .into_iter()
                    .filter(|id| !acked.contains(id))
                    .map(|id| (To::Node(id), m.clone()))
                    .collect()
            }
        }
    }

    /// A message at the operator's address.
    pub fn on_message(&mut self, now: u64, message: Message) -> Vec<(To, Message)> {
        match message {
            Message::EpochClose(close) => self.on_epoch_close(now, close),
            Message::PositionReport(report) => self.on_report(now, report),
            Message::EpochStarted(started) => {
                self.on_started(now, started);
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    fn on_epoch_close(&mut self, now: u64, close: EpochClose) -> Vec<(To, Message)> {
        let current = self.current.clone();
        let Phase::Closing {
            next,
            closes,
            sends,
            ..
        } = &mut self.phase
        else {
            return Vec::new();
        };
        let Some(matching) = collect_close(&current, closes, close) else {
            return Vec::new();
        };
        let (view, _, _, book_digest) =
            certified(&current, &matching).expect("collect_close returns a certificate");
        if let Some(r) = self.record.as_mut() {
            r.certified_at = now;
            r.closing_view = view;
            r.reconfigure_sends = *sends;
        }
        self.phase = Phase::Positions {
            next: next.clone(),
            certificate: matching,
            view,
            book_digest,
            reports: BTreeMap::new(),
            book: None,
            deadline: now + POSITION_TIMEOUT,
        };
        self.last_sent = now;
        self.resend()
    }

    fn on_report(&mut self, now: u64, report: PositionReport) -> Vec<(To, Message)> {
        let current = self.current.clone();
        let Phase::Positions {
            next,
            reports,
            book,
            book_digest,
            ..
        } = &mut self.phase
        else {
            return Vec::new();
        };
        let valid = current
            .node_key(report.node)
            .is_some_and(|k| report.verify(k));
        if !valid || report.config_epoch != current.epoch() {
            return Vec::new();
        }
        if let Some(b) = &report.book {
            if usig::MessageDigest::of(b) == *book_digest {
                *book = Some(b.clone());
            }
        }
        reports.insert(report.node, report);
        let asked = asked(&current);
        let needed = asked.iter().filter(|id| {
            next.primaries.iter().any(|p| p.id == id.0)
                || next.replicas.iter().any(|r| r.id == id.0)
        });
        let complete = needed.clone().all(|id| reports.contains_key(id));
        if (complete || reports.len() == asked.len()) && book.is_some() {
            return self.build(now);
        }
        Vec::new()
    }

    /// Builds, signs and sends the CONFIGURE of the next epoch.
    fn build(&mut self, now: u64) -> Vec<(To, Message)> {
        let phase = std::mem::replace(&mut self.phase, Phase::Idle);
        let Phase::Positions {
            next,
            certificate,
            view,
            reports,
            book: Some(book),
            ..
        } = phase
        else {
            self.phase = phase;
            return Vec::new();
        };
        let current = &self.current;
        let start = OrderBook::start_of(&book, current)
            .expect("the certified order book decodes (checked by f+1 correct replicas)");
        let primary = primary_of(current, view);
        let (config, rejoining, positions) =
            next_configuration(current, next, &reports, start, primary)
                .expect("the operator's next configuration is valid");
        self.positions.extend(positions);
        if let Some(r) = self.record.as_mut() {
            r.cut_order = config.epoch_start.order;
            r.closing_primary = primary;
            r.rejoining = rejoining;
        }
        let configure = Configure {
            config: toml::to_string(&config).expect("a configuration serializes"),
            certificate,
            book,
            reply_to: OPERATOR_ADDR.into(),
            signature: Signature([0; 64]),
        }
        .sign(&operator_key());
        let next = Arc::new(Cluster::new(config).expect("checked by next_configuration"));
        // Every node of both epochs and every client once; then the new epoch's nodes until
        // they acknowledge.
        let everyone: BTreeSet<NodeId> = all_nodes(current)
            .into_iter()
            .chain(all_nodes(&next))
            .collect();
        let m = Message::Configure(Box::new(configure.clone()));
        let mut out: Vec<(To, Message)> = everyone
            .into_iter()
            .map(|id| (To::Node(id), m.clone()))
            .collect();
        out.push((To::Clients, m));
        self.phase = Phase::Starting {
            next,
            configure: Box::new(configure),
            acked: BTreeSet::new(),
            deadline: now + START_TIMEOUT,
        };
        self.last_sent = now;
        out
    }

    fn on_started(&mut self, now: u64, started: EpochStarted) {
        let Phase::Starting { next, acked, .. } = &mut self.phase else {
            return;
        };
        let valid = next
            .node_key(started.node)
            .is_some_and(|k| started.verify(k));
        if valid && started.config_epoch == next.epoch() {
            acked.insert(started.node);
        }
        if all_nodes(next).iter().all(|id| acked.contains(id)) {
            self.finish(now);
        }
    }

    /// The new epoch runs (or the wait for its acknowledgements is over).
    fn finish(&mut self, now: u64) {
        let Phase::Starting { next, acked, .. } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            return;
        };
        if let Some(mut r) = self.record.take() {
            r.started_at = now;
            r.silent = all_nodes(&next)
                .into_iter()
                .filter(|id| !acked.contains(id))
                .map(|id| id.0)
                .collect();
            self.done.push(r);
        }
        self.epochs.push(next.clone());
        self.current = next;
    }
}

/// The operator's signed POSITION-REQUEST for `cluster`'s epoch.
fn position_request(cluster: &Cluster) -> PositionRequest {
    PositionRequest {
        config_epoch: cluster.epoch(),
        reply_to: OPERATOR_ADDR.into(),
        signature: Signature([0; 64]),
    }
    .sign(&operator_key())
}

/// The nodes asked for their position: every candidate and replica of the epoch.
fn asked(cluster: &Cluster) -> Vec<NodeId> {
    let c = &cluster.config;
    c.primaries
        .iter()
        .map(|p| NodeId(p.id))
        .chain(c.replicas.iter().map(|r| NodeId(r.id)))
        .collect()
}

/// Every node of an epoch: candidates, replicas and database nodes.
fn all_nodes(cluster: &Cluster) -> Vec<NodeId> {
    asked(cluster)
        .into_iter()
        .chain(cluster.config.db_nodes.iter().map(|d| NodeId(d.id)))
        .collect()
}
