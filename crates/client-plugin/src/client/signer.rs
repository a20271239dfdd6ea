//! The endpoint's signer: one Ed25519 signature for all the requests that are ready together,
//! and one frame per destination for them.
//!
//! Every request must be signed by its identity's key, and the primary and each replica of its
//! group check it. Identities of one endpoint usually share a key (`cloudbft keygen` gives one
//! per endpoint), so requests that become ready together (the requests that the REPLYs of one
//! batch release) are signed as one batch: one signature, and at each node one check, for all
//! of them (docs/protocol.md, "Batch-signed REQUESTs"). They also go out together: one
//! REQUESTS frame per destination instead of one frame per request, each frame a wake-up, a
//! link tag and a decode at the node. A request alone waits one turn of the scheduler, no
//! longer.

use super::configs::Configs;
use super::metrics::Recorder;
use net::Transport;
use proto::{Envelope, Message, PublicKey, Request, SigningKey};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Most requests taken from the queue for one round of signing.
const ROUND: usize = 1024;

/// A request signed and sent, or the size of one too large to send (encoded, against the
/// transport's `max_frame`).
pub(crate) type Sent = Result<Request, (usize, usize)>;

/// A request to sign, with its identity's key and where to hand it back.
struct Job {
    request: Request,
    key: Arc<SigningKey>,
    done: oneshot::Sender<Sent>,
}

/// The handle requests use; the task it feeds ends when every handle is dropped.
pub(crate) struct Signer {
    jobs: mpsc::UnboundedSender<Job>,
}

impl Signer {
    /// Starts the signing task on the current runtime; it sends what it signed with
    /// `dispatch`.
    pub(crate) fn spawn(dispatch: Dispatch) -> Signer {
        let (jobs, queue) = mpsc::unbounded_channel();
        tokio::spawn(run(queue, dispatch));
        Signer { jobs }
    }

    /// `request` signed by `key`, with the other requests waiting now, and sent. `None` only
    /// if the signing task is gone (the runtime is shutting down).
    pub(crate) async fn sign(&self, request: Request, key: Arc<SigningKey>) -> Option<Sent> {
        let (done, signed) = oneshot::channel();
        self.jobs.send(Job { request, key, done }).ok()?;
        signed.await.ok()
    }
}

/// Where signed requests go: every primary candidate and the replicas of the group serving
/// each request's first partition ([`Configs::destinations`]).
pub(crate) struct Dispatch {
    pub(crate) transport: Transport,
    pub(crate) configs: Arc<Configs>,
    /// Counts each request as sent when its frames go out, whether or not its caller is
    /// still waiting for it.
    pub(crate) recorder: Arc<Recorder>,
}

impl Dispatch {
    /// Sends `requests`, those with the same destinations in one frame (in several if one
    /// would pass `max_frame`), and hands each back, or its size if it is too large to send
    /// even alone.
    fn send(&self, requests: Vec<Request>) -> Vec<Sent> {
        let mut groups: Vec<(Vec<SocketAddr>, Vec<usize>, Vec<Request>)> = Vec::new();
        for (i, request) in requests.into_iter().enumerate() {
            let to = self.configs.destinations(&request.partitions);
            match groups.iter_mut().find(|(d, _, _)| *d == to) {
                Some((_, indices, members)) => {
                    indices.push(i);
                    members.push(request);
                }
                None => groups.push((to, vec![i], vec![request])),
            }
        }
        let mut out: Vec<(usize, Sent)> = Vec::new();
        for (to, indices, members) in groups {
            let sent = self.send_together(&to, members);
            out.extend(indices.into_iter().zip(sent));
        }
        out.sort_by_key(|(i, _)| *i);
        out.into_iter().map(|(_, sent)| sent).collect()
    }

    /// One frame for `requests` to each of `to`, or halves of them while it is too large.
    fn send_together(&self, to: &[SocketAddr], requests: Vec<Request>) -> Vec<Sent> {
        let max = self.transport.config().max_frame;
        let frames = Envelope::encode_together(requests, max, Message::Requests, |m| match m {
            Message::Requests(requests) => requests,
            _ => unreachable!("wrapped as REQUESTS"),
        });
        let mut sent = Vec::new();
        for (frame, requests) in frames {
            match frame {
                Ok(frame) => {
                    for addr in to {
                        self.transport.send(*addr, frame.clone());
                    }
                    for request in &requests {
                        self.recorder.sent(request.signature.index == 0);
                    }
                    sent.extend(requests.into_iter().map(Ok));
                }
                Err(len) => sent.extend(requests.iter().map(|_| Err((len, max)))),
            }
        }
        sent
    }
}

async fn run(mut queue: mpsc::UnboundedReceiver<Job>, dispatch: Dispatch) {
    let mut jobs = Vec::with_capacity(ROUND);
    while queue.recv_many(&mut jobs, ROUND).await > 0 {
        // Let the tasks that are ready now (those the same burst of REPLYs released) queue
        // their requests too; a request alone waits for one turn of the scheduler only.
        tokio::task::yield_now().await;
        while jobs.len() < ROUND {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        for (key, batch) in by_key(std::mem::take(&mut jobs)) {
            let (requests, done): (Vec<Request>, Vec<_>) =
                batch.into_iter().map(|j| (j.request, j.done)).unzip();
            let signed = Request::sign_all(requests, &key);
            for (sent, done) in dispatch.send(signed).into_iter().zip(done) {
                // The caller may have given up (its future dropped): nothing to hand back.
                let _ = done.send(sent);
            }
        }
    }
}

/// The jobs grouped by signing key, in order of each key's first job.
fn by_key(jobs: Vec<Job>) -> Vec<(Arc<SigningKey>, Vec<Job>)> {
    let mut groups: Vec<(PublicKey, Arc<SigningKey>, Vec<Job>)> = Vec::new();
    for job in jobs {
        let public = job.key.public_key();
        match groups.iter_mut().find(|(k, _, _)| *k == public) {
            Some((_, _, batch)) => batch.push(job),
            None => groups.push((public, Arc::clone(&job.key), vec![job])),
        }
    }
    groups
        .into_iter()
        .map(|(_, key, jobs)| (key, jobs))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::configs::Destinations;
    use net::{Inbound, TransportConfig};
    use proto::testing::TestCluster;
    use proto::ClientId;

    fn unsigned(client: u64, operation: &[u8]) -> Request {
        Request::unsigned(ClientId(client), 1, vec![0], operation.to_vec())
    }

    type Nodes = [(Transport, mpsc::Receiver<Inbound>); 2];

    /// A signer whose destinations are two listening nodes (a primary candidate and the one
    /// group's replica), sending with frames of at most `max_frame` bytes, and what it counts.
    async fn signer(max_frame: usize) -> (Signer, Nodes, Arc<Recorder>) {
        let listen = "127.0.0.1:0".parse().unwrap();
        let (primary, primary_in) = Transport::bind(listen, TransportConfig::default())
            .await
            .unwrap();
        let (replica, replica_in) = Transport::bind(listen, TransportConfig::default())
            .await
            .unwrap();
        let mut destinations = Destinations::default();
        destinations.add_primary(primary.local_addr());
        destinations.add_replica(proto::GroupId(0), replica.local_addr());
        let cluster = Arc::new(TestCluster::new(1, 1, 4, 1).cluster);
        let asker = (ClientId(1), Arc::new(SigningKey::from_seed([1; 32])));
        let config = TransportConfig {
            max_frame,
            ..TransportConfig::default()
        };
        let (transport, _) = Transport::bind(listen, config).await.unwrap();
        let configs = Arc::new(Configs::new(cluster, destinations, asker));
        let recorder = Arc::new(Recorder::new(Default::default()));
        let signer = Signer::spawn(Dispatch {
            transport,
            configs,
            recorder: Arc::clone(&recorder),
        });
        (
            signer,
            [(primary, primary_in), (replica, replica_in)],
            recorder,
        )
    }

    /// Requests queued together come back signed under one signature per key, each verifying
    /// under its own identity's key.
    #[tokio::test]
    async fn requests_waiting_together_share_one_signature_per_key() {
        let shared = Arc::new(SigningKey::from_seed([1; 32]));
        let own = Arc::new(SigningKey::from_seed([2; 32]));
        let (signer, _nodes, _) = signer(TransportConfig::default().max_frame).await;
        let keys = [&shared, &shared, &own, &shared];
        let sign = |i: usize| signer.sign(unsigned(i as u64 + 1, b"op"), Arc::clone(keys[i]));
        let (a, b, c, d) = tokio::join!(sign(0), sign(1), sign(2), sign(3));
        let signed: Vec<Request> = [a, b, c, d]
            .into_iter()
            .map(|sent| sent.unwrap().unwrap())
            .collect();
        for (request, key) in signed.iter().zip(keys) {
            assert!(request.verify(&key.public_key()));
        }
        assert_eq!(signed[0].signature.count, 3);
        assert_eq!(signed[0].signature.signature, signed[3].signature.signature);
        assert_eq!(signed[2].signature.count, 1);
        assert!(!signed[2].verify(&shared.public_key()));
    }

    /// Requests signed together reach each destination in few frames, not one each: in one
    /// REQUESTS frame while it fits `max_frame`, in halves when it does not; a request too
    /// large to send alone is handed back as too large, sent nowhere and not counted as sent.
    #[tokio::test]
    async fn requests_signed_together_share_frames_within_the_limit() {
        let key = Arc::new(SigningKey::from_seed([1; 32]));
        let (signer, mut nodes, recorder) = signer(2048).await;
        let sign = |client: u64, operation: &[u8]| {
            signer.sign(unsigned(client, operation), Arc::clone(&key))
        };
        let big = vec![7; 4096];
        let (a, b, c, d) = tokio::join!(sign(1, b"a"), sign(2, b"b"), sign(3, b"c"), sign(4, &big));
        let sent: Vec<Request> = [a, b, c].into_iter().map(|s| s.unwrap().unwrap()).collect();
        let Err((len, 2048)) = d.unwrap() else {
            panic!("a request larger than max_frame was sent");
        };
        assert!(len > 4096);
        // Sent after the others, so it arrives after anything sent before it.
        let last = sign(5, b"e").await.unwrap().unwrap();
        let counted = recorder.snapshot();
        assert_eq!(counted.requests_sent, 4, "a, b, c and e");
        assert_eq!(counted.request_signatures, 2, "{{a, b, c, big}} and {{e}}");
        for (_, node) in &mut nodes {
            let mut arrived = Vec::new();
            let mut frames = 0;
            while arrived.len() < sent.len() {
                let inbound = node.recv().await.unwrap();
                frames += 1;
                match Envelope::decode(&inbound.frame).unwrap() {
                    Message::Requests(rs) => arrived.extend(rs),
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert_eq!(arrived, sent);
            // {a, b} together, then {c} (the half {c, big} was too large, and big alone).
            assert_eq!(frames, 2);
            let next = Envelope::decode(&node.recv().await.unwrap().frame).unwrap();
            assert_eq!(
                next,
                Message::Requests(vec![last.clone()]),
                "the large request was sent"
            );
        }
    }
}
