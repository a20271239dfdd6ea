//! The operator's side of an online reconfiguration (docs/protocol.md, "Reconfiguration"):
//! send the signed RECONFIGURE to the primary candidates, wait for the certificate of where the
//! epoch ended (f+1 matching EPOCH-CLOSEs of every group), ask every node where its USIG
//! sequence stands, write the next configuration and send it, signed, to every node and
//! gateway until the nodes acknowledge it.
//!
//! Every step is retried on a timer, so lost messages only delay it; the protocol makes the
//! operator unable to move the cut or to start an epoch anywhere but at the certified end.

use anyhow::{bail, Context, Result};
use group::order::OrderBook;
use net::{Inbound, Transport, TransportConfig};
use proto::config::{Cluster, ClusterConfig};
use proto::reconfig::{certified, check_successor, collect_close, next_configuration};
use proto::{
    Configure, Envelope, EpochClose, Message, NodeId, PositionReport, PositionRequest, Reconfigure,
    Signature, SigningKey,
};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How often an unanswered step is sent again.
const RESEND: Duration = Duration::from_millis(500);
/// How long the epoch may take to close after the RECONFIGURE was first sent.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long to wait for position reports once every candidate and continuing replica... (the
/// others rejoin with a JOIN).
const POSITION_TIMEOUT: Duration = Duration::from_secs(5);
/// How long nodes get to acknowledge the new epoch.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// What a reconfiguration did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The configuration the cluster runs now.
    pub config: ClusterConfig,
    /// The last global order of the previous epoch: everything ordered up to it completed under
    /// the old assignment, everything after it runs under the new one.
    pub cut_order: u64,
    /// From the first RECONFIGURE to the certificate, and to the last acknowledgement.
    pub closed_after: Duration,
    pub started_after: Duration,
    /// Replicas whose position was not reported: they rejoin with a JOIN.
    pub rejoining: Vec<u32>,
    /// Nodes that did not acknowledge the new epoch in time (down, or partitioned).
    pub silent: Vec<u32>,
    /// Where the USIG sequence of every replica that reported continues (removed replicas
    /// included: re-added later, they continue from there), with its USIG epoch.
    pub positions: proto::reconfig::Positions,
}

/// The operator: its key and a listening address for the nodes' answers.
pub struct Operator {
    key: SigningKey,
    transport: Transport,
    inbound: mpsc::Receiver<Inbound>,
    addr: SocketAddr,
}

impl Operator {
    /// Listens at `listen` (port 0: any free port) with the operator's key.
    pub async fn bind(listen: SocketAddr, key: SigningKey) -> Result<Operator> {
        let (transport, inbound) = Transport::bind(listen, TransportConfig::default())
            .await
            .with_context(|| format!("listening at {listen} for the nodes' answers"))?;
        let addr = transport.local_addr();
        Ok(Operator {
            key,
            transport,
            inbound,
            addr,
        })
    }

    fn send(&self, cluster: &Cluster, nodes: impl IntoIterator<Item = NodeId>, m: &Message) {
        let frame = Envelope::encode(m);
        for node in nodes {
            if let Some(addr) = cluster.node_addr(node).and_then(|a| a.parse().ok()) {
                self.transport.send(addr, frame.clone());
            }
        }
    }

    /// The next message from a node, if one arrives before `deadline`.
    async fn next(&mut self, until: Instant) -> Option<Message> {
        let wait = until.saturating_duration_since(Instant::now());
        let inbound = tokio::time::timeout(wait, self.inbound.recv())
            .await
            .ok()??;
        Envelope::decode(&inbound.frame).ok()
    }

    /// Moves `current` to the shape `next` (its epoch `current`'s + 1), reporting each step to
    /// `progress`.
    pub async fn reconfigure(
        &mut self,
        current: &Cluster,
        next: ClusterConfig,
        progress: &mut dyn FnMut(String),
    ) -> Result<Outcome> {
        check_successor(&current.config, &next)
            .map_err(|e| anyhow::anyhow!("the next configuration is refused: {e}"))?;
        let started = Instant::now();
        let candidates: Vec<NodeId> = ids(current.config.primaries.iter().map(|p| p.id));
        let reconfigure =
            Reconfigure::new(current.epoch(), &next, &self.addr.to_string(), &self.key);
        progress(format!(
            "RECONFIGURE of epoch {} sent to the primary candidates",
            current.epoch().0
        ));
        let certificate = self.close(current, &candidates, reconfigure).await?;
        let closed_after = started.elapsed();
        let (view, _, _, book_digest) = certified(current, &certificate)?;
        progress(format!(
            "epoch {} closed after {:.2} s (f+1 EPOCH-CLOSEs of every group)",
            current.epoch().0,
            closed_after.as_secs_f64()
        ));
        let (mut reports, book) = self.positions(current, &next, book_digest).await?;
        let book = OrderBook::start_of(&book, current)
            .map(|start| (start, book))
            .context("the certified order book does not decode (a bug)")?;
        let primary = group::view::primary_of(current, view);
        let shape = next.clone();
        let (config, rejoining, positions) =
            next_configuration(current, next, &reports, book.0.clone(), primary)
                .map_err(|e| anyhow::anyhow!("the next configuration is refused: {e}"))?;
        let cut_order = config.epoch_start.order;
        if !rejoining.is_empty() {
            progress(format!(
                "replicas {rejoining:?} did not report their position: they rejoin the new epoch \
                 with a JOIN"
            ));
        }
        let configure = Configure {
            config: toml::to_string(&config)?,
            certificate,
            book: book.1,
            reply_to: self.addr.to_string(),
            signature: Signature([0; 64]),
        }
        .sign(&self.key);
        let silent = self
            .start(current, &config, &configure, &mut reports)
            .await?;
        let started_after = started.elapsed();
        self.late_positions(current, &config, &mut reports).await;
        // With the reports of nodes that leave, which nobody waited for: where a removed
        // replica's sequence continues if it is added again (a late report that does not
        // verify leaves the positions as they were).
        let positions = next_configuration(current, shape, &reports, book.0, primary)
            .map_or(positions, |(_, _, late)| late);
        progress(format!(
            "epoch {} started after global order {cut_order}, {:.2} s after the RECONFIGURE",
            config.config_epoch,
            started_after.as_secs_f64()
        ));
        Ok(Outcome {
            config,
            cut_order,
            closed_after,
            started_after,
            rejoining,
            silent,
            positions,
        })
    }

    /// Sends the RECONFIGURE until f+1 matching EPOCH-CLOSEs of every group arrived.
    async fn close(
        &mut self,
        current: &Cluster,
        candidates: &[NodeId],
        reconfigure: Reconfigure,
    ) -> Result<Vec<EpochClose>> {
        let deadline = Instant::now() + CLOSE_TIMEOUT;
        let mut closes: BTreeMap<NodeId, EpochClose> = BTreeMap::new();
        let message = Message::Reconfigure(reconfigure);
        while Instant::now() < deadline {
            self.send(current, candidates.iter().copied(), &message);
            let round = Instant::now() + RESEND;
            while let Some(m) = self.next(round).await {
                let Message::EpochClose(close) = m else {
                    continue;
                };
                if let Some(certificate) = collect_close(current, &mut closes, close) {
                    return Ok(certificate);
                }
            }
        }
        bail!(
            "the epoch did not close within {CLOSE_TIMEOUT:?} ({} EPOCH-CLOSEs): is the primary \
             up, and are f+1 replicas of every group running? Nothing changed unless the \
             RECONFIGURE was ordered; running the command again resumes",
            closes.len()
        )
    }

    /// Asks every candidate and replica of the epoch where its USIG sequence stands; returns
    /// the reports and the order book at the epoch's end (from a replica whose book matches
    /// the certificate).
    async fn positions(
        &mut self,
        current: &Cluster,
        next: &ClusterConfig,
        book_digest: usig::MessageDigest,
    ) -> Result<(BTreeMap<NodeId, PositionReport>, Vec<u8>)> {
        let asked: Vec<NodeId> = ids(current
            .config
            .primaries
            .iter()
            .map(|p| p.id)
            .chain(current.config.replicas.iter().map(|r| r.id)));
        let needed: BTreeSet<NodeId> = ids(next
            .primaries
            .iter()
            .map(|p| p.id)
            .chain(next.replicas.iter().map(|r| r.id)))
        .into_iter()
        .filter(|id| asked.contains(id))
        .collect();
        let replicas: BTreeSet<NodeId> = ids(current.config.replicas.iter().map(|r| r.id))
            .into_iter()
            .collect();
        let request = self.position_request(current);
        let deadline = Instant::now() + POSITION_TIMEOUT;
        let mut reports: BTreeMap<NodeId, PositionReport> = BTreeMap::new();
        let mut book = None;
        while Instant::now() < deadline {
            let complete = needed.iter().all(|id| reports.contains_key(id));
            if complete && book.is_some() {
                break;
            }
            // The nodes that have not reported and, while no book came, the replicas that
            // reported without the certified one: a replica answers at once, and may not have
            // signed its EPOCH-CLOSE yet, or only one for an earlier end of its history (a new
            // view's cut ended it again later), and may learn the certified end from f+1
            // EPOCH-CLOSEs of every group meanwhile.
            let ask: Vec<NodeId> = asked
                .iter()
                .copied()
                .filter(|id| match reports.get(id) {
                    None => true,
                    Some(_) => book.is_none() && replicas.contains(id),
                })
                .collect();
            if ask.is_empty() {
                break;
            }
            self.send(current, ask, &request);
            let round = Instant::now() + RESEND;
            while let Some(m) = self.next(round).await {
                let Message::PositionReport(report) = m else {
                    continue;
                };
                if !valid_report(current, &report) {
                    continue;
                }
                if let Some(b) = &report.book {
                    if usig::MessageDigest::of(b) == book_digest {
                        book = Some(b.clone());
                    }
                }
                reports.insert(report.node, report);
                let complete = needed.iter().all(|id| reports.contains_key(id));
                if complete && book.is_some() {
                    break;
                }
            }
        }
        let book = book.context(
            "no replica sent the order book the certificate names: are the replicas that \
             closed the epoch still running? Run the command again to retry",
        )?;
        Ok((reports, book))
    }

    /// The signed request for every node's position at the end of `current`'s epoch.
    fn position_request(&self, current: &Cluster) -> Message {
        Message::PositionRequest(
            PositionRequest {
                config_epoch: current.epoch(),
                reply_to: self.addr.to_string(),
                signature: Signature([0; 64]),
            }
            .sign(&self.key),
        )
    }

    /// Once the new epoch runs: asks the replicas that left and have not reported their
    /// position yet once more, and waits one round for them. Nothing waits on this but the
    /// spares file (a removed replica is kept as a spare only with its position); a replica
    /// that is down costs one round.
    async fn late_positions(
        &mut self,
        current: &Cluster,
        next: &ClusterConfig,
        reports: &mut BTreeMap<NodeId, PositionReport>,
    ) {
        let missing: Vec<NodeId> = current
            .config
            .replicas
            .iter()
            .filter(|r| !next.replicas.iter().any(|n| n.id == r.id))
            .map(|r| NodeId(r.id))
            .filter(|id| !reports.contains_key(id))
            .collect();
        if missing.is_empty() {
            return;
        }
        self.send(
            current,
            missing.iter().copied(),
            &self.position_request(current),
        );
        let round = Instant::now() + RESEND;
        while let Some(m) = self.next(round).await {
            if let Message::PositionReport(report) = m {
                if valid_report(current, &report) {
                    reports.entry(report.node).or_insert(report);
                }
            }
            if missing.iter().all(|id| reports.contains_key(id)) {
                return;
            }
        }
    }

    /// Sends the CONFIGURE to every node of both epochs and every gateway until the nodes of
    /// the new epoch acknowledge it; returns the nodes that did not. Position reports that
    /// arrive meanwhile (nodes that leave answer the request too, but the new epoch does not
    /// wait for them) go to `reports`.
    async fn start(
        &mut self,
        current: &Cluster,
        config: &ClusterConfig,
        configure: &Configure,
        reports: &mut BTreeMap<NodeId, PositionReport>,
    ) -> Result<Vec<u32>> {
        let next = Cluster::new(config.clone())?;
        let everyone: BTreeSet<NodeId> = all_nodes(current)
            .into_iter()
            .chain(all_nodes(&next))
            .collect();
        let clients: BTreeSet<SocketAddr> = config
            .clients
            .iter()
            .filter_map(|c| c.addr.parse().ok())
            .collect();
        let message = Message::Configure(Box::new(configure.clone()));
        let mut acked = BTreeSet::new();
        let deadline = Instant::now() + START_TIMEOUT;
        let mut first = true;
        while Instant::now() < deadline {
            let waiting: Vec<NodeId> = all_nodes(&next)
                .into_iter()
                .filter(|id| !acked.contains(id))
                .collect();
            if waiting.is_empty() {
                return Ok(Vec::new());
            }
            if first {
                // Removed nodes and gateways once: nobody waits for them.
                self.send(current, everyone.iter().copied(), &message);
                self.send(&next, everyone.iter().copied(), &message);
                let frame = Envelope::encode(&message);
                for &addr in &clients {
                    self.transport.send(addr, frame.clone());
                }
                first = false;
            } else {
                self.send(&next, waiting, &message);
            }
            let round = Instant::now() + RESEND;
            while let Some(m) = self.next(round).await {
                let started = match m {
                    Message::EpochStarted(started) => started,
                    Message::PositionReport(report) => {
                        if valid_report(current, &report) {
                            reports.entry(report.node).or_insert(report);
                        }
                        continue;
                    }
                    _ => continue,
                };
                let valid = next
                    .node_key(started.node)
                    .is_some_and(|k| started.verify(k));
                if valid && started.config_epoch == next.epoch() {
                    acked.insert(started.node);
                    if all_nodes(&next).iter().all(|id| acked.contains(id)) {
                        return Ok(Vec::new());
                    }
                }
            }
        }
        Ok(all_nodes(&next)
            .into_iter()
            .filter(|id| !acked.contains(id))
            .map(|id| id.0)
            .collect())
    }
}

/// A position report signed by a node of `current` for its epoch.
fn valid_report(current: &Cluster, report: &PositionReport) -> bool {
    let signed = current
        .node_key(report.node)
        .is_some_and(|k| report.verify(k));
    signed && report.config_epoch == current.epoch()
}

fn ids(it: impl Iterator<Item = u32>) -> Vec<NodeId> {
    it.map(NodeId).collect()
}

fn all_nodes(cluster: &Cluster) -> Vec<NodeId> {
    let c = &cluster.config;
    ids(c
        .primaries
        .iter()
        .map(|p| p.id)
        .chain(c.replicas.iter().map(|r| r.id))
        .chain(c.db_nodes.iter().map(|d| d.id)))
}
