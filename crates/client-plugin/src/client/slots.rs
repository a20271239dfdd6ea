//! The endpoint's client identities: a pool that lends each to one request at a time, and the
//! slot of each identity that routes inbound REPLYs to the request waiting for them.
//!
//! One outstanding request per identity is a protocol rule: replicas cache only the last reply of
//! each client, and order a client's requests by timestamp.

use super::metrics::{Recorder, RejectReason};
use super::tally::{Counted, Tally};
use proto::config::Cluster;
use proto::{ClientId, Reply, SigningKey};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// A client identity and the last timestamp it used.
pub(crate) struct Identity {
    id: ClientId,
    key: Arc<SigningKey>,
    last_timestamp: u64,
}

impl Identity {
    pub(crate) fn new(id: ClientId, key: Arc<SigningKey>) -> Self {
        Identity {
            id,
            key,
            last_timestamp: 0,
        }
    }

    /// The identity and its key (for messages the endpoint signs outside requests).
    pub(crate) fn signer(&self) -> (ClientId, Arc<SigningKey>) {
        (self.id, Arc::clone(&self.key))
    }

    /// The next timestamp: the wall clock in microseconds, or one more than the last if the clock
    /// has not moved on (or went back). Timestamps thus keep increasing across restarts of the
    /// process without being stored, as long as a restart takes more than a microsecond per
    /// request sent before it.
    pub(crate) fn next_timestamp(&mut self, now_micros: u64) -> u64 {
        self.last_timestamp = now_micros.max(self.last_timestamp.saturating_add(1));
        self.last_timestamp
    }
}

/// Free identities. The semaphore counts them, so waiters are served in arrival order and a
/// closed pool wakes every waiter.
pub(crate) struct Pool {
    free: Mutex<Vec<Identity>>,
    available: Arc<Semaphore>,
}

impl Pool {
    pub(crate) fn new(identities: Vec<Identity>) -> Self {
        Pool {
            available: Arc::new(Semaphore::new(identities.len())),
            free: Mutex::new(identities),
        }
    }

    /// Waits for a free identity; `None` once the pool is closed.
    pub(crate) async fn acquire(self: &Arc<Self>) -> Option<(Identity, Permit)> {
        let permit = Arc::clone(&self.available).acquire_owned().await.ok()?;
        let identity = lock(&self.free).pop()?;
        Some((
            identity,
            Permit {
                pool: Arc::clone(self),
                _permit: permit,
            },
        ))
    }

    /// Refuses further leases and wakes everyone waiting for one.
    pub(crate) fn close(&self) {
        self.available.close();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.available.is_closed()
    }

    fn give_back(&self, identity: Identity) {
        lock(&self.free).push(identity);
    }
}

/// The right to hold one identity; see [`Lease`].
pub(crate) struct Permit {
    pool: Arc<Pool>,
    _permit: OwnedSemaphorePermit,
}

/// What a request waits on for its replies: routed to it by the endpoint's reader.
pub(crate) type ReplyQueue = mpsc::Receiver<Reply>;

/// What the slot of an identity expects.
enum State {
    /// No request in progress; replies for `timestamp` are late.
    Idle,
    /// A request is waiting for its replies.
    Waiting(mpsc::Sender<Reply>),
    /// The request was accepted; further replies are checked against the final vote, so that a
    /// replica that disagrees after the quorum formed is still counted. It holds the accepted
    /// page's digest alone and takes nothing from later replies, so an identity left idle keeps
    /// a few dozen bytes here however much was sent to it.
    Done(Tally),
}

struct Slot {
    /// The identity's latest request (0 before the first).
    timestamp: u64,
    state: State,
}

/// Replies queued per waiting request before further ones are dropped: far more than the 2f+1
/// per transmission a correct group sends, so only a flood hits it.
const REPLY_BACKLOG: usize = 256;

/// Every identity's slot.
pub(crate) struct Slots {
    slots: Mutex<HashMap<ClientId, Slot>>,
}

impl Slots {
    pub(crate) fn new(clients: impl IntoIterator<Item = ClientId>) -> Self {
        let slots = clients
            .into_iter()
            .map(|c| {
                (
                    c,
                    Slot {
                        timestamp: 0,
                        state: State::Idle,
                    },
                )
            })
            .collect();
        Slots {
            slots: Mutex::new(slots),
        }
    }

    /// Starts waiting for the replies to `(client, timestamp)`; replies for its earlier requests
    /// become late.
    pub(crate) fn wait(&self, client: ClientId, timestamp: u64) -> ReplyQueue {
        let (tx, rx) = mpsc::channel(REPLY_BACKLOG);
        lock(&self.slots).insert(
            client,
            Slot {
                timestamp,
                state: State::Waiting(tx),
            },
        );
        rx
    }

    /// Records the final vote of an accepted request. Its reply queue gets nothing more (its
    /// sender is dropped here, under the lock [`Slots::route`] sends under), so what the caller
    /// then finds in it is all that was routed before.
    pub(crate) fn done(&self, client: ClientId, timestamp: u64, tally: Tally) {
        if let Some(slot) = lock(&self.slots).get_mut(&client) {
            if slot.timestamp == timestamp {
                slot.state = State::Done(tally);
            }
        }
    }

    /// Stops waiting for `(client, timestamp)` if it still is (the request gave up or its caller
    /// went away).
    pub(crate) fn abandon(&self, client: ClientId, timestamp: u64) {
        if let Some(slot) = lock(&self.slots).get_mut(&client) {
            if slot.timestamp == timestamp && matches!(slot.state, State::Waiting(_)) {
                slot.state = State::Idle;
            }
        }
    }

    /// Stops every waiting request (their queues close): the endpoint is shutting down.
    pub(crate) fn abandon_all(&self) {
        for slot in lock(&self.slots).values_mut() {
            if matches!(slot.state, State::Waiting(_)) {
                slot.state = State::Idle;
            }
        }
    }

    /// A reply of a configuration epoch the endpoint does not know yet cannot be checked: it
    /// is dropped (counted), and the request's retransmission gets it again once the endpoint
    /// follows the epoch.
    pub(crate) fn route_unverified(&self, _reply: Reply, recorder: &Recorder) {
        recorder.rejected(RejectReason::UnknownEpoch);
    }

    /// Routes an inbound reply: to the request waiting for it, or to the final vote of an
    /// accepted one; anything else is late or rejected.
    pub(crate) fn route(&self, reply: Reply, cluster: &Cluster, recorder: &Recorder) {
        let mut slots = lock(&self.slots);
        let Some(slot) = slots.get_mut(&reply.client) else {
            recorder.rejected(RejectReason::UnknownClient);
            return;
        };
        if reply.timestamp > slot.timestamp {
            // Never sent: a forgery, or a replica confused about this client.
            recorder.rejected(RejectReason::WrongTimestamp);
            return;
        }
        if reply.timestamp < slot.timestamp {
            recorder.late();
            return;
        }
        match &mut slot.state {
            State::Waiting(queue) => match queue.try_send(reply) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    recorder.rejected(RejectReason::Overflow);
                }
                // The request just went away; its lease will mark the slot idle.
                Err(mpsc::error::TrySendError::Closed(_)) => recorder.late(),
            },
            State::Done(tally) => record(tally.add(reply, cluster), recorder),
            State::Idle => recorder.late(),
        }
    }
}

/// Counts the outcome of a reply that arrived after its request was accepted.
fn record(counted: Result<Counted, RejectReason>, recorder: &Recorder) {
    match counted {
        Ok(Counted::Disagreeing) => recorder.disagreeing(1),
        Ok(Counted::Late | Counted::Duplicate | Counted::Recorded) => recorder.late(),
        // Cannot happen once a page is accepted: the tally accepts once.
        Ok(Counted::Accepted { .. }) => recorder.late(),
        Err(reason) => recorder.rejected(reason),
    }
}

/// One identity lent to one request. Dropping it (accepted, failed, or the caller's future
/// dropped) stops routing replies to the request and returns the identity to the pool.
pub(crate) struct Lease {
    identity: Identity,
    permit: Permit,
    slots: Arc<Slots>,
    /// The request in progress (0 before [`Lease::begin`]).
    timestamp: u64,
}

impl Lease {
    pub(crate) fn new(identity: Identity, permit: Permit, slots: Arc<Slots>) -> Self {
        Lease {
            identity,
            permit,
            slots,
            timestamp: 0,
        }
    }

    pub(crate) fn client(&self) -> ClientId {
        self.identity.id
    }

    pub(crate) fn key(&self) -> Arc<SigningKey> {
        Arc::clone(&self.identity.key)
    }

    /// Takes the next timestamp and starts waiting for its replies.
    pub(crate) fn begin(&mut self, now_micros: u64) -> (u64, ReplyQueue) {
        let timestamp = self.identity.next_timestamp(now_micros);
        self.timestamp = timestamp;
        (timestamp, self.slots.wait(self.identity.id, timestamp))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.slots.abandon(self.identity.id, self.timestamp);
        // Given back before the permit is released (fields drop after this), so that the waiter
        // the permit wakes finds it.
        self.permit.pool.give_back(Identity {
            id: self.identity.id,
            key: Arc::clone(&self.identity.key),
            last_timestamp: self.identity.last_timestamp,
        });
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_follow_the_clock_and_never_repeat() {
        let mut id = Identity::new(ClientId(1), Arc::new(SigningKey::from_seed([1; 32])));
        assert_eq!(id.next_timestamp(1_000), 1_000);
        assert_eq!(id.next_timestamp(1_000), 1_001);
        // The clock went back: still increasing.
        assert_eq!(id.next_timestamp(500), 1_002);
        assert_eq!(id.next_timestamp(5_000), 5_000);
    }
}
