//! The seeded network.

pub use proto::testing::Rng;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// How the network misbehaves.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    pub loss: f64,
    pub duplicate: f64,
    /// Delays are uniform in 1..=max_delay time units, which also reorders.
    pub max_delay: u64,
}

/// A message in the queue: delivery time, send sequence number, message.
type Slot<A, M> = Reverse<(u64, u64, Envelope<A, M>)>;

/// Messages in flight, delivered in time order (ties by send order).
pub struct Network<A, M> {
    queue: BinaryHeap<Slot<A, M>>,
    sent: u64,
    pub faults: Faults,
}

/// A message to an address.
pub struct Envelope<A, M> {
    pub to: A,
    pub message: M,
}

impl<A, M> PartialEq for Envelope<A, M> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<A, M> Eq for Envelope<A, M> {}
impl<A, M> PartialOrd for Envelope<A, M> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<A, M> Ord for Envelope<A, M> {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl<A, M: Clone> Network<A, M> {
    pub fn new(faults: Faults) -> Self {
        Network {
            queue: BinaryHeap::new(),
            sent: 0,
            faults,
        }
    }

    /// Sends through the faulty network.
    pub fn send(&mut self, rng: &mut Rng, now: u64, to: A, message: M)
    where
        A: Clone,
    {
        if rng.chance(self.faults.loss) {
            return;
        }
        if rng.chance(self.faults.duplicate) {
            let at = now + rng.between(1, self.faults.max_delay);
            self.push(at, to.clone(), message.clone());
        }
        let at = now + rng.between(1, self.faults.max_delay);
        self.push(at, to, message);
    }

    /// A process's own asynchronous work finishing (its USIG thread answering): after a random
    /// delay, never lost or duplicated.
    pub fn local(&mut self, rng: &mut Rng, now: u64, to: A, message: M) {
        let at = now + rng.between(1, self.faults.max_delay);
        self.push(at, to, message);
    }

    fn push(&mut self, at: u64, to: A, message: M) {
        self.sent += 1;
        self.queue
            .push(Reverse((at, self.sent, Envelope { to, message })));
    }

    /// The next delivery, if any, with its time.
    pub fn pop(&mut self) -> Option<(u64, Envelope<A, M>)> {
        self.queue.pop().map(|Reverse((at, _, e))| (at, e))
    }

    /// Time of the next delivery.
    pub fn peek_time(&self) -> Option<u64> {
        self.queue.peek().map(|Reverse((at, _, _))| *at)
    }
}
