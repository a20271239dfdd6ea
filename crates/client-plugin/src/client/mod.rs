//! The client side of the protocol: sign a REQUEST, send it to the primary and to every group
//! replica, and accept the page only once f+1 members of one group sent it.
//!
//! A [`ClientEndpoint`] is one process's share of the cluster's `[[client]]` identities: all those
//! configured at one address. Each request borrows a free identity, so many tasks can invoke
//! concurrently while each identity has at most one request outstanding (replicas cache only a
//! client's last reply and order its requests by timestamp).

mod configs;
mod links;
mod metrics;
mod signer;
mod slots;
mod tally;

pub use metrics::{ClientMetrics, ClientStats, RejectReason, Rejected};

use net::{Inbound, Transport, TransportConfig};
use proto::config::Cluster;
use proto::keys::{self, KeyError};
use proto::{ClientId, Envelope, GroupId, Message, PartitionId, Request, SigningKey};
use slots::{Identity, Lease, Pool, Slots};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tally::{Counted, Tally};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How patient an endpoint is. The defaults suit a cluster on one data-centre network.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Wait before the first retransmission; it doubles after each one. Retransmitting is how a
    /// client recovers lost requests and replies (replicas answer from their reply cache).
    pub retransmit: Duration,
    /// Cap on the wait between retransmissions, so a cluster that comes back is noticed soon.
    pub max_retransmit: Duration,
    /// When an invoke gives up, counted from the call (waiting for a free identity included).
    pub deadline: Duration,
    /// The endpoint's transport.
    pub transport: TransportConfig,
    /// Where the endpoint counts; pass [`ClientMetrics::register`]'s result to export them.
    pub metrics: ClientMetrics,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            retransmit: Duration::from_secs(1),
            max_retransmit: Duration::from_secs(8),
            deadline: Duration::from_secs(60),
            transport: TransportConfig::default(),
            metrics: ClientMetrics::default(),
        }
    }
}

impl ClientOptions {
    fn validate(&self) -> Result<(), ClientError> {
        let invalid = |field: &str, fix: &str| {
            Err(ClientError::Config {
                field: format!("options.{field}"),
                fix: fix.into(),
            })
        };
        if self.retransmit.is_zero() {
            return invalid("retransmit", "must be positive");
        }
        if self.max_retransmit < self.retransmit {
            return invalid("max_retransmit", "must not be below retransmit");
        }
        if self.deadline.is_zero() {
            return invalid("deadline", "must be positive");
        }
        Ok(())
    }
}

/// A page the cluster vouched for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The page, exactly as f+1 members of `group` rendered and sent it.
    pub page: Vec<u8>,
    /// The group whose members vouched for it, and the configuration epoch they served it in.
    pub group: GroupId,
    pub config_epoch: proto::ConfigEpoch,
    /// The identity that sent the request.
    pub client: ClientId,
    /// The request's timestamp.
    pub timestamp: u64,
    /// From the call to acceptance (waiting for a free identity included).
    pub latency: Duration,
    /// How many times the request was re-sent.
    pub retransmissions: u32,
}

/// Why an endpoint could not open, or a request got no accepted page.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The configuration or the options cannot work; `field` names what to fix.
    #[error("{field}: {fix}")]
    Config { field: String, fix: String },
    /// A configured address is not a usable `host:port`.
    #[error("{field} = {addr:?} does not resolve to an address: {reason}")]
    Resolve {
        field: String,
        addr: String,
        reason: String,
    },
    /// An identity's key file is missing, exposed, damaged or not the configured key.
    #[error("client {client}: {source}")]
    Key { client: ClientId, source: KeyError },
    /// The endpoint address cannot be bound (in use, or not an address of this machine).
    #[error("cannot listen on {endpoint}: {source}")]
    Bind { endpoint: String, source: io::Error },
    /// No page had f+1 votes of one group by the deadline. The request may still execute.
    #[error(
        "no page from f+1 members of one group within {waited:?} ({retransmissions} retransmissions): \
         the cluster is down or unreachable, or more than f replicas of the group are faulty"
    )]
    Timeout {
        waited: Duration,
        retransmissions: u32,
    },
    /// No identity became free before the deadline: more concurrent callers than identities.
    #[error(
        "all {identities} client identities of this endpoint stayed busy for {waited:?}: \
         add [[client]] entries at this address for more concurrent requests"
    )]
    Busy { waited: Duration, identities: usize },
    /// The operation is larger than any replica orders ([`proto::limits::MAX_OPERATION_BYTES`]).
    #[error(
        "the operation is {len} bytes, more than the {max} bytes a replica orders: split it \
         into smaller operations"
    )]
    OperationTooLarge { len: usize, max: usize },
    /// The encoded request exceeds what the transport (and every node) accepts.
    #[error("the request is {len} bytes encoded, more than the transport's max_frame of {max}")]
    TooLarge { len: usize, max: usize },
    /// [`ClientEndpoint::shutdown`] was called.
    #[error("the client endpoint is shut down")]
    Closed,
}

/// What the reader task shares with the requests.
struct Shared {
    /// The configuration epochs the endpoint knows; requests go to the current one's nodes.
    configs: Arc<configs::Configs>,
    slots: Arc<Slots>,
    recorder: Arc<metrics::Recorder>,
    transport: Transport,
    /// Signs the requests that are ready together under one signature, and sends them.
    signer: signer::Signer,
}

struct Inner {
    shared: Arc<Shared>,
    transport: Transport,
    pool: Arc<Pool>,
    identities: usize,
    options: ClientOptions,
    reader: Mutex<Option<JoinHandle<()>>>,
}

/// One process's client identities, their transport, and the task that routes inbound REPLYs.
///
/// Cloning is cheap; all clones share the identities. [`shutdown`](ClientEndpoint::shutdown)
/// stops it for every clone.
#[derive(Clone)]
pub struct ClientEndpoint {
    inner: Arc<Inner>,
}

impl ClientEndpoint {
    /// Opens the endpoint at `endpoint`, which must be the `addr` of at least one `[[client]]`
    /// entry: replicas send replies only to configured addresses. Takes every identity
    /// configured there, with its key from `keys_dir` (checked against the configuration).
    pub async fn open(
        cluster: Arc<Cluster>,
        keys_dir: &Path,
        endpoint: &str,
        options: ClientOptions,
    ) -> Result<ClientEndpoint, ClientError> {
        options.validate()?;
        let clients: Vec<ClientId> = cluster
            .config
            .clients
            .iter()
            .filter(|c| c.addr == endpoint)
            .map(|c| ClientId(c.id))
            .collect();
        if clients.is_empty() {
            return Err(ClientError::Config {
                field: "client.addr".into(),
                fix: format!(
                    "no [[client]] has addr = {endpoint:?}; open the endpoint at a configured \
                     client address, or add [[client]] entries for it (cloudbft keygen)"
                ),
            });
        }
        // Identities with one key share it, so that the signer sees one key.
        let mut keys_seen: HashMap<proto::PublicKey, Arc<SigningKey>> = HashMap::new();
        let identities = clients
            .iter()
            .map(|&client| {
                let path = keys::client_key_path(keys_dir, client);
                let key = keys::load(&path, cluster.client_key(client))
                    .map_err(|source| ClientError::Key { client, source })?;
                let key = keys_seen
                    .entry(key.public_key())
                    .or_insert_with(|| Arc::new(key));
                Ok(Identity::new(client, Arc::clone(key)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let destinations = destinations(&cluster).await?;
        let asker = identities
            .first()
            .map(Identity::signer)
            .expect("an endpoint has at least one identity");
        let me = cluster
            .endpoint_identity(endpoint)
            .expect("a configured client address is an endpoint");
        let configs = Arc::new(configs::Configs::new(cluster, destinations, asker.clone()));
        let stranger = Arc::new(Notify::new());
        let links = Arc::new(links::EndpointLinks {
            me,
            key: asker.1,
            configs: Arc::clone(&configs),
            stranger: Arc::clone(&stranger),
        });
        let listen = resolve("client.addr".into(), endpoint).await?;
        let (transport, inbound) =
            Transport::bind_with_links(listen, options.transport.clone(), links)
                .await
                .map_err(|source| ClientError::Bind {
                    endpoint: endpoint.into(),
                    source,
                })?;
        let recorder = Arc::new(metrics::Recorder::new(options.metrics.clone()));
        let shared = Arc::new(Shared {
            slots: Arc::new(Slots::new(clients.iter().copied())),
            recorder: Arc::clone(&recorder),
            configs: Arc::clone(&configs),
            transport: transport.clone(),
            signer: signer::Signer::spawn(signer::Dispatch {
                transport: transport.clone(),
                configs,
                recorder,
            }),
        });
        let reader = tokio::spawn(read_loop(inbound, stranger, Arc::clone(&shared)));
        tracing::info!(
            endpoint,
            local_addr = %transport.local_addr(),
            identities = clients.len(),
            "client endpoint open"
        );
        Ok(ClientEndpoint {
            inner: Arc::new(Inner {
                shared,
                transport,
                pool: Arc::new(Pool::new(identities)),
                identities: clients.len(),
                options,
                reader: Mutex::new(Some(reader)),
            }),
        })
    }

    /// Sends `operation` (declaring `partitions`) and returns the page once f+1 members of one
    /// group sent the same one. Waits for a free identity if all are busy; re-sends on timeout;
    /// gives up at [`ClientOptions::deadline`].
    pub async fn invoke(
        &self,
        partitions: Vec<PartitionId>,
        operation: Vec<u8>,
    ) -> Result<Accepted, ClientError> {
        let max = proto::limits::MAX_OPERATION_BYTES;
        if operation.len() > max {
            let len = operation.len();
            return Err(ClientError::OperationTooLarge { len, max });
        }
        let inner = &*self.inner;
        let shared = &*inner.shared;
        let recorder = &shared.recorder;
        let options = &inner.options;
        let started = Instant::now();
        let deadline = started + options.deadline;
        let (identity, permit) = match tokio::time::timeout_at(deadline, inner.pool.acquire()).await
        {
            Ok(Some(lent)) => lent,
            Ok(None) => return Err(ClientError::Closed),
            Err(_) => {
                recorder.timed_out();
                return Err(ClientError::Busy {
                    waited: options.deadline,
                    identities: inner.identities,
                });
            }
        };
        let mut lease = Lease::new(identity, permit, Arc::clone(&shared.slots));
        let (timestamp, mut replies) = lease.begin(unix_micros());
        if inner.pool.is_closed() {
            // Shutdown cleared the slots before this request began to wait.
            return Err(ClientError::Closed);
        }
        let client = lease.client();
        let mut tally = Tally::new(
            client,
            timestamp,
            partitions.first().copied(),
            shared.configs.current().config.f,
        );
        let unsigned = Request::unsigned(client, timestamp, partitions, operation);
        // The signer sends it, with the requests signed together.
        let request = match shared.signer.sign(unsigned, lease.key()).await {
            None => return Err(ClientError::Closed),
            Some(Err((len, max))) => return Err(ClientError::TooLarge { len, max }),
            Some(Ok(request)) => request,
        };
        tracing::trace!(%client, timestamp, "request sent");
        // Encoded alone for retransmissions, when the first one comes.
        let mut request = Some(request);
        let mut frame = Vec::new();

        let mut wait = options.retransmit;
        let mut retransmissions = 0u32;
        let timer = tokio::time::sleep_until(deadline.min(Instant::now() + wait));
        tokio::pin!(timer);
        loop {
            tokio::select! {
                reply = replies.recv() => {
                    let Some(reply) = reply else {
                        return Err(ClientError::Closed);
                    };
                    let Some(cluster) = shared.configs.of_epoch(reply.config_epoch) else {
                        // A reply of an epoch we do not know yet: the reader asked for it, and
                        // our retransmission gets the reply again.
                        recorder.rejected(RejectReason::UnknownEpoch);
                        continue;
                    };
                    match tally.add(reply, &cluster) {
                        Ok(Counted::Accepted { epoch, group, page, disagreeing }) => {
                            if disagreeing > 0 {
                                recorder.disagreeing(disagreeing);
                            }
                            let latency = started.elapsed();
                            recorder.accepted(latency);
                            shared.slots.done(client, timestamp, tally);
                            // Replies queued behind the one that completed the quorum are
                            // counted against the final vote, as later ones will be.
                            while let Ok(reply) = replies.try_recv() {
                                deliver(shared, reply);
                            }
                            tracing::debug!(%client, timestamp, %group, ?latency, retransmissions, "page accepted");
                            return Ok(Accepted {
                                page,
                                group,
                                config_epoch: epoch,
                                client,
                                timestamp,
                                latency,
                                retransmissions,
                            });
                        }
                        Ok(Counted::Recorded | Counted::Duplicate) => {}
                        Ok(Counted::Disagreeing) => recorder.disagreeing(1),
                        Ok(Counted::Late) => recorder.late(),
                        Err(reason) => recorder.rejected(reason),
                    }
                }
                () = &mut timer => {
                    let now = Instant::now();
                    if now >= deadline {
                        recorder.timed_out();
                        tracing::warn!(%client, timestamp, retransmissions, "request timed out");
                        return Err(ClientError::Timeout {
                            waited: options.deadline,
                            retransmissions,
                        });
                    }
                    retransmissions += 1;
                    recorder.retransmitted();
                    if let Some(request) = request.take() {
                        frame = Envelope::encode(&Message::Request(request));
                    }
                    for to in shared.configs.retransmit_destinations() {
                        inner.transport.send(to, frame.clone());
                    }
                    tracing::debug!(%client, timestamp, retransmissions, "request re-sent");
                    wait = (wait * 2).min(options.max_retransmit);
                    timer.as_mut().reset(deadline.min(now + wait));
                }
            }
        }
    }

    /// The configuration this endpoint sends requests under (the latest epoch it knows).
    pub fn cluster(&self) -> Arc<Cluster> {
        self.inner.shared.configs.current()
    }

    /// How many identities (hence concurrent requests) the endpoint holds.
    pub fn identities(&self) -> usize {
        self.inner.identities
    }

    /// Where the endpoint receives replies.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.transport.local_addr()
    }

    /// The counters since the endpoint opened.
    pub fn stats(&self) -> ClientStats {
        self.inner.shared.recorder.snapshot()
    }

    /// Copies the transport's counters into the metrics' `transport_*` gauges; call it before
    /// rendering the registry (the gateway does on every scrape).
    pub fn refresh_metrics(&self) {
        self.inner
            .shared
            .recorder
            .update_transport(&self.inner.transport);
    }

    /// Stops the endpoint: requests in progress and waiting for an identity fail with
    /// [`ClientError::Closed`], the transport releases its address, and the reader ends.
    pub async fn shutdown(self) {
        let inner = &self.inner;
        inner.pool.close();
        inner.transport.clone().shutdown().await;
        let reader = inner
            .reader
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(reader) = reader {
            // The transport's end closed the inbound channel, so the reader returns.
            if let Err(error) = reader.await {
                tracing::warn!(%error, "client reader task failed");
            }
        }
        inner.shared.slots.abandon_all();
        tracing::info!(local_addr = %inner.transport.local_addr(), "client endpoint shut down");
    }
}

/// Routes every inbound frame until the transport stops. Counting votes happens in the
/// requests' own tasks, so this one task only decodes, authenticates and routes; it also takes
/// the operator's new configurations, and asks the nodes for one when a REPLY names an epoch it
/// does not know or a node it does not know tried to open a link (`stranger`).
async fn read_loop(
    mut inbound: mpsc::Receiver<Inbound>,
    stranger: Arc<Notify>,
    shared: Arc<Shared>,
) {
    loop {
        // The frame's place in its connection's budget goes back after this round.
        let Inbound {
            from,
            frame,
            link,
            reserved: _reserved,
        } = tokio::select! {
            inbound = inbound.recv() => match inbound {
                Some(inbound) => inbound,
                None => return,
            },
            () = stranger.notified() => {
                ask_for_configuration(&shared);
                continue;
            }
        };
        match Envelope::decode(&frame) {
            Ok(Message::Reply(reply)) => route(&shared, reply, link),
            Ok(Message::Replies(replies)) => {
                for reply in replies {
                    route(&shared, reply, link);
                }
            }
            Ok(Message::Configure(configure)) => match shared.configs.adopt(&configure) {
                Ok(_) | Err(configs::Refused::NotNewer) => {}
                Err(configs::Refused::Invalid(why)) => {
                    shared.recorder.rejected(RejectReason::BadConfigure);
                    tracing::warn!(%from, why, "CONFIGURE refused");
                }
            },
            Ok(_) => {
                shared.recorder.rejected(RejectReason::UnexpectedMessage);
                tracing::debug!(%from, "dropping a message other than REPLY");
            }
            Err(error) => {
                shared.recorder.rejected(RejectReason::Malformed);
                tracing::debug!(%from, %error, "dropping a malformed frame");
            }
        }
    }
}

/// Hands a REPLY that came on the authenticated link of the replica it names (`link`: the
/// node that opened the connection) to the request waiting for it; refuses any other. Asks the
/// nodes for the configuration of an epoch it names that the endpoint does not know yet.
fn route(shared: &Shared, reply: proto::Reply, link: Option<u64>) {
    if link != Some(u64::from(reply.replica.0)) {
        shared.recorder.rejected(RejectReason::Unauthenticated);
        return;
    }
    if reply.config_epoch > shared.configs.current().epoch() {
        ask_for_configuration(shared);
    }
    deliver(shared, reply);
}

/// Hands an authenticated REPLY to its identity's slot, under the configuration of its epoch.
fn deliver(shared: &Shared, reply: proto::Reply) {
    match shared.configs.of_epoch(reply.config_epoch) {
        Some(cluster) => shared.slots.route(reply, &cluster, &shared.recorder),
        None => shared.slots.route_unverified(reply, &shared.recorder),
    }
}

/// Asks the nodes for the newest configuration (at most once a second, `Configs::ask`).
fn ask_for_configuration(shared: &Shared) {
    if let Some((request, to)) = shared.configs.ask() {
        for addr in to {
            shared.transport.send(addr, request.clone());
        }
    }
}

/// Every primary candidate and every group's replicas. Sending to every candidate follows view
/// changes without tracking them: only the current view's primary orders (the others drop the
/// request before any signature check), and a candidate that becomes primary sees the
/// retransmissions.
async fn destinations(cluster: &Cluster) -> Result<configs::Destinations, ClientError> {
    let mut out = configs::Destinations::default();
    for primary in &cluster.config.primaries {
        out.add_primary(resolve(format!("primary {}.addr", primary.id), &primary.addr).await?);
    }
    for replica in &cluster.config.replicas {
        let addr = resolve(format!("replica {}.addr", replica.id), &replica.addr).await?;
        out.add_replica(GroupId(replica.group), addr);
    }
    Ok(out)
}

/// The first address `addr` (host:port) resolves to.
async fn resolve(field: String, addr: &str) -> Result<SocketAddr, ClientError> {
    let failed = |reason: String| ClientError::Resolve {
        field: field.clone(),
        addr: addr.into(),
        reason,
    };
    tokio::net::lookup_host(addr)
        .await
        .map_err(|e| failed(e.to_string()))?
        .next()
        .ok_or_else(|| failed("no address".into()))
}

/// Microseconds since the Unix epoch (0 if the clock is before it: timestamps then count up
/// from the last one).
fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
