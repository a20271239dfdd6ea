//! The endpoint's signer: one Ed25519 signature for all the requests that are ready together.
//!
//! Every request must be signed by its identity's key, and the primary and each replica of its
//! group check it. Identities of one endpoint usually share a key (`cloudbft keygen` gives one
//! per endpoint), so requests that become ready together (the requests that the REPLYs of one
//! batch release) are signed as one batch: one signature, and at each node one check, for all
//! of them (docs/protocol.md, "Batch-signed REQUESTs"). A request alone waits one turn of the
//! scheduler, no longer.

use proto::{PublicKey, Request, SigningKey};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Most requests taken from the queue for one round of signing.
const ROUND: usize = 1024;

/// A request to sign, with its identity's key and where to hand it back.
struct Job {
    request: Request,
    key: Arc<SigningKey>,
    done: oneshot::Sender<Request>,
}

/// The handle requests use; the task it feeds ends when every handle is dropped.
pub(crate) struct Signer {
    jobs: mpsc::UnboundedSender<Job>,
}

impl Signer {
    /// Starts the signing task on the current runtime.
    pub(crate) fn spawn() -> Signer {
        let (jobs, queue) = mpsc::unbounded_channel();
        tokio::spawn(run(queue));
        Signer { jobs }
    }

    /// `request` signed by `key`, with the other requests waiting now. `None` only if the
    /// signing task is gone (the runtime is shutting down).
    pub(crate) async fn sign(&self, request: Request, key: Arc<SigningKey>) -> Option<Request> {
        let (done, signed) = oneshot::channel();
        self.jobs.send(Job { request, key, done }).ok()?;
        signed.await.ok()
    }
}

async fn run(mut queue: mpsc::UnboundedReceiver<Job>) {
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
            for (request, done) in Request::sign_all(requests, &key).into_iter().zip(done) {
                // The caller may have given up (its future dropped): nothing to hand back.
                let _ = done.send(request);
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
    use proto::ClientId;

    fn unsigned(client: u64) -> Request {
        Request::unsigned(ClientId(client), 1, vec![0], b"op".to_vec())
    }

    /// Requests queued together come back signed under one signature per key, each verifying
    /// under its own identity's key.
    #[tokio::test]
    async fn requests_waiting_together_share_one_signature_per_key() {
        let shared = Arc::new(SigningKey::from_seed([1; 32]));
        let own = Arc::new(SigningKey::from_seed([2; 32]));
        let signer = Signer::spawn();
        let keys = [&shared, &shared, &own, &shared];
        let sign = |i: usize| signer.sign(unsigned(i as u64 + 1), Arc::clone(keys[i]));
        let (a, b, c, d) = tokio::join!(sign(0), sign(1), sign(2), sign(3));
        let signed: Vec<Request> = [a, b, c, d].into_iter().map(Option::unwrap).collect();
        for (request, key) in signed.iter().zip(keys) {
            assert!(request.verify(&key.public_key()));
        }
        assert_eq!(signed[0].signature.count, 3);
        assert_eq!(signed[0].signature.signature, signed[3].signature.signature);
        assert_eq!(signed[2].signature.count, 1);
        assert!(!signed[2].verify(&shared.public_key()));
    }
}
