//! Fair admission: which admitted requests wait for the next PREPARE, and in what order.
//!
//! A client that sends far more than its share must not delay everyone else or grow the
//! primary's memory. So:
//!
//! - **One waiting request per client, its newest.** A newer request from a client replaces
//!   the one it has waiting (keeping that one's place in line). Replicas wait only for a
//!   client's newest request too, and an honest client has one request outstanding per identity
//!   (the client library's rule), so nothing an honest client waits for is dropped; a client that
//!   sends faster than it is ordered only overwrites itself.
//! - **Round robin across clients.** Clients wait in arrival order and a batch takes the first
//!   `max_batch` of them, at most one request each, so a flooding client gets one slot per batch
//!   like any other.
//! - **No more than a fair share of what is ordered.** One slot per batch is not enough on its
//!   own: when the primary is idle a batch goes out for every request that arrives, and a client
//!   sending open-loop would have all of them ordered and executed, ahead of everyone else's,
//!   by replicas and database nodes that are the real bottleneck (the primary cannot see their
//!   queues). So a client that had more requests ordered over the last one to two windows of
//!   [`WINDOW_TICKS`] ticks than twice the mean of the other active clients plus [`FLOOR`] waits
//!   (keeping only its newest request) until it is back under. Honest clients have one request
//!   outstanding each and so run at similar rates; a client alone is never held back. A held
//!   client's count decays within two windows (about a second), well within the replicas'
//!   view-change timer, so holding never looks like a faulty primary.
//! - **Bounded.** At most `max_clients` clients and `max_bytes` of operations wait; a request
//!   from a client not yet waiting is refused when either is full ([`Full`]). The client
//!   retransmits, and replicas forward requests they see unordered, so a refusal delays and
//!   never loses an honest client's request.

use proto::limits::{request_bytes, MAX_PREPARE_REQUEST_BYTES};
use proto::{ClientId, PrepareEntry};
use std::collections::{HashMap, VecDeque};

/// Clients that may wait at once by default: far above what a batch per warrant (64 requests
/// every few milliseconds) drains, far below what would strain memory.
pub const MAX_WAITING_CLIENTS: usize = 16_384;
/// Operation bytes that may wait at once by default (a request may be up to the transport's
/// 16 MiB frame, so a count alone would not bound memory).
pub const MAX_WAITING_BYTES: usize = 64 << 20;

/// Ticks per accounting window (the drivers tick every 50 ms: half a second).
pub const WINDOW_TICKS: u32 = 10;
/// Requests per window any client may have ordered whatever the others do, so that a client is
/// not held back just because the others are quiet (20 per second at 50 ms ticks).
pub const FLOOR: u64 = 10;

/// The queue was full: the request was not admitted (the client retransmits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// The waiting requests, one per client, in the order their clients got in line.
#[derive(Debug)]
pub struct Admission {
    line: VecDeque<ClientId>,
    waiting: HashMap<ClientId, PrepareEntry>,
    bytes: usize,
    max_clients: usize,
    max_bytes: usize,
    /// Requests each client had ordered in the previous and the current window (clients with
    /// none in either are forgotten).
    ordered: HashMap<ClientId, [u64; 2]>,
    ticks: u32,
}

impl Default for Admission {
    fn default() -> Self {
        Admission::new(MAX_WAITING_CLIENTS, MAX_WAITING_BYTES)
    }
}

/// What a waiting entry counts against the byte budget.
fn size(entry: &PrepareEntry) -> usize {
    entry.request.operation.len()
}

impl Admission {
    /// An empty queue holding at most `max_clients` clients' requests and `max_bytes` of
    /// operations (each at least 1).
    pub fn new(max_clients: usize, max_bytes: usize) -> Self {
        Admission {
            line: VecDeque::new(),
            waiting: HashMap::new(),
            bytes: 0,
            max_clients: max_clients.max(1),
            max_bytes: max_bytes.max(1),
            ordered: HashMap::new(),
            ticks: 0,
        }
    }

    /// Each waiting client's request timestamp.
    pub fn waiting(&self) -> impl Iterator<Item = (ClientId, u64)> + '_ {
        self.waiting
            .iter()
            .map(|(&client, e)| (client, e.request.timestamp))
    }

    /// Queues `entry`, replacing its client's waiting request if it has one (the caller has
    /// checked that `entry` is newer). Refused if its client is not waiting and the queue is
    /// full, or if it would take the byte budget over.
    pub fn push(&mut self, entry: PrepareEntry) -> Result<(), Full> {
        let client = entry.request.client;
        let replaced = self.waiting.get(&client);
        let alone = self.waiting.len() == usize::from(replaced.is_some());
        let bytes = self.bytes - replaced.map_or(0, size) + size(&entry);
        // One request always fits, so a single large one is never refused for good.
        if bytes > self.max_bytes && !alone {
            return Err(Full);
        }
        match self.waiting.insert(client, entry) {
            Some(_) => {}
            None if self.line.len() >= self.max_clients => {
                self.waiting.remove(&client);
                return Err(Full);
            }
            None => self.line.push_back(client),
        }
        self.bytes = bytes;
        Ok(())
    }

    /// The next batch: the first `max` clients in line that are within their share, one request
    /// each, in line order, as long as their requests stay within
    /// [`MAX_PREPARE_REQUEST_BYTES`] (the first always fits: replicas refuse a PREPARE over
    /// it, see [`proto::limits`]). Clients over their share go to the back of the line and keep
    /// waiting; the batch may then be empty although requests wait.
    pub fn take(&mut self, max: usize) -> Vec<PrepareEntry> {
        let counts: HashMap<ClientId, u64> = self
            .ordered
            .iter()
            .map(|(&client, [previous, current])| (client, previous + current))
            .collect();
        let total: u64 = counts.values().sum();
        // Active: had requests ordered lately, or waits now (a newcomer is protected at once).
        let active = counts.len()
            + self
                .waiting
                .keys()
                .filter(|c| !counts.contains_key(c))
                .count();
        let over_share = |client: &ClientId| {
            let mine = counts.get(client).copied().unwrap_or(0);
            let others = active.saturating_sub(1);
            others > 0 && mine >= 2 * (total - mine) / others as u64 + FLOOR
        };
        let mut batch = Vec::new();
        let mut held = Vec::new();
        let mut batch_bytes = 0;
        while batch.len() < max {
            let Some(client) = self.line.pop_front() else {
                break;
            };
            if over_share(&client) {
                held.push(client);
                continue;
            }
            let next = self
                .waiting
                .get(&client)
                .map_or(0, |e| request_bytes(&e.request));
            if !batch.is_empty() && batch_bytes + next > MAX_PREPARE_REQUEST_BYTES {
                // It keeps its place for the next batch.
                self.line.push_front(client);
                break;
            }
            if let Some(entry) = self.waiting.remove(&client) {
                batch_bytes += next;
                self.bytes -= size(&entry);
                self.ordered.entry(client).or_default()[1] += 1;
                batch.push(entry);
            }
        }
        self.line.extend(held);
        batch
    }

    /// Every waiting request, in line order, shares aside (the configuration epoch closed: they
    /// go to the next epoch's primary).
    pub fn drain(&mut self) -> Vec<PrepareEntry> {
        self.bytes = 0;
        let waiting = &mut self.waiting;
        self.line
            .drain(..)
            .filter_map(|client| waiting.remove(&client))
            .collect()
    }

    /// A timer tick: every [`WINDOW_TICKS`] the window moves on.
    pub fn tick(&mut self) {
        self.ticks += 1;
        if self.ticks % WINDOW_TICKS == 0 {
            self.ordered.retain(|_, counts| {
                *counts = [counts[1], 0];
                counts[0] > 0
            });
        }
    }

    /// Requests waiting (one per client).
    pub fn len(&self) -> usize {
        self.line.len()
    }

    pub fn is_empty(&self) -> bool {
        self.line.is_empty()
    }

    /// Operation bytes waiting.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The most clients that may wait at once.
    pub fn max_clients(&self) -> usize {
        self.max_clients
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Action, PrimaryCore, Rejection};
    use proto::testing::{request, usig, BytesArePartitions, TestCluster};
    use proto::{GroupId, NodeId, Proposal, View};
    use std::sync::Arc;
    use usig::Usig;

    fn entry(client: u64, timestamp: u64) -> PrepareEntry {
        PrepareEntry {
            group: GroupId(0),
            request: request(client, timestamp, &[0]),
        }
    }

    fn clients(batch: &[PrepareEntry]) -> Vec<(u64, u64)> {
        batch
            .iter()
            .map(|e| (e.request.client.0, e.request.timestamp))
            .collect()
    }

    /// A batch stops before its operations pass the PREPARE limit every replica applies; the
    /// first request always goes, and the one that did not fit keeps its place.
    #[test]
    fn a_batch_stops_at_the_prepare_byte_limit() {
        use proto::limits::MAX_OPERATION_BYTES;
        let mut queue = Admission::default();
        let big = |client| {
            let mut e = entry(client, 1);
            e.request.operation = vec![0; MAX_OPERATION_BYTES];
            e
        };
        let per_batch = MAX_PREPARE_REQUEST_BYTES / request_bytes(&big(1).request);
        for client in 1..=per_batch as u64 + 2 {
            queue.push(big(client)).unwrap();
        }
        let first = queue.take(64);
        assert_eq!(first.len(), per_batch);
        let second = queue.take(64);
        assert_eq!(
            clients(&second),
            vec![(per_batch as u64 + 1, 1), (per_batch as u64 + 2, 1)]
        );
        assert_eq!(queue.bytes(), 0);
    }

    /// A client sending 100 requests while three others send one each gets one slot per batch,
    /// its newest, and keeps its first place in line.
    #[test]
    fn a_flooding_client_gets_one_slot_per_batch_and_only_its_newest_waits() {
        let mut queue = Admission::default();
        queue.push(entry(9, 1)).unwrap();
        for (client, timestamp) in [(1, 1), (2, 1), (3, 1)] {
            queue.push(entry(client, timestamp)).unwrap();
        }
        for timestamp in 2..=100 {
            queue.push(entry(9, timestamp)).unwrap();
        }
        assert_eq!(queue.len(), 4);
        assert_eq!(
            clients(&queue.take(3)),
            vec![(9, 100), (1, 1), (2, 1)],
            "one per client, in line order"
        );
        for timestamp in 101..=200 {
            queue.push(entry(9, timestamp)).unwrap();
        }
        // The flooder goes to the back of the line behind the client that waited.
        assert_eq!(clients(&queue.take(3)), vec![(3, 1), (9, 200)]);
        assert!(queue.is_empty());
        assert_eq!(queue.bytes(), 0);
    }

    #[test]
    fn a_full_line_refuses_new_clients_but_lets_waiting_ones_replace_theirs() {
        let mut queue = Admission::new(2, usize::MAX);
        queue.push(entry(1, 1)).unwrap();
        queue.push(entry(2, 1)).unwrap();
        assert_eq!(queue.push(entry(3, 1)), Err(Full));
        queue.push(entry(1, 2)).unwrap();
        assert_eq!(queue.len(), 2);
        assert_eq!(clients(&queue.take(8)), vec![(1, 2), (2, 1)]);
        // Room again.
        queue.push(entry(3, 1)).unwrap();
        assert_eq!(queue.max_clients(), 2);
    }

    #[test]
    fn the_byte_budget_bounds_memory_but_always_admits_one_request() {
        let one = size(&entry(1, 1));
        assert!(one > 0);
        let mut queue = Admission::new(100, 2 * one);
        queue.push(entry(1, 1)).unwrap();
        queue.push(entry(2, 1)).unwrap();
        assert_eq!(queue.push(entry(3, 1)), Err(Full));
        // Replacing a waiting request of the same size stays within the budget.
        queue.push(entry(2, 2)).unwrap();
        assert_eq!(queue.bytes(), 2 * one);
        queue.take(2);
        let mut tiny = Admission::new(100, 1);
        tiny.push(entry(1, 1)).unwrap();
        assert_eq!(tiny.push(entry(2, 1)), Err(Full));
    }

    /// Eight clients with one request each per window and a client sending a request before
    /// every batch: once the window has history, the flooder gets at most twice the others' mean
    /// plus the floor per window, and the others everything they send.
    #[test]
    fn a_flooding_client_is_held_to_twice_the_others_mean_plus_the_floor() {
        let mut queue = Admission::default();
        let mut timestamp = 0;
        let mut flooder_per_window = Vec::new();
        for _window in 0..6 {
            let mut flooder = 0;
            for tick in 0..WINDOW_TICKS {
                if tick == 0 {
                    for client in 1..=8 {
                        queue.push(entry(client, 1 + timestamp)).unwrap();
                    }
                }
                // Many batches per tick: the primary is idle, the flooder never waits.
                for _ in 0..20 {
                    timestamp += 1;
                    queue.push(entry(99, timestamp)).unwrap();
                    flooder += queue
                        .take(64)
                        .iter()
                        .filter(|e| e.request.client.0 == 99)
                        .count() as u64;
                }
                queue.tick();
            }
            assert_eq!(queue.len(), 1, "only the flooder is left waiting");
            flooder_per_window.push(flooder);
        }
        // Others: 8 per window over two windows; mean per other client 1 or 2.
        for (window, &got) in flooder_per_window.iter().enumerate().skip(1) {
            assert!(
                got <= 2 * 2 + FLOOR,
                "window {window}: {flooder_per_window:?}"
            );
        }
        assert!(
            flooder_per_window[1..].iter().sum::<u64>() > 0,
            "never starved"
        );
    }

    #[test]
    fn a_client_alone_is_never_held_and_a_held_one_is_free_within_two_windows() {
        let mut queue = Admission::default();
        for timestamp in 1..=1000 {
            queue.push(entry(1, timestamp)).unwrap();
            assert_eq!(queue.take(64).len(), 1, "alone: request {timestamp}");
        }
        // Another client appears: client 1 is far over twice its mean plus the floor.
        queue.push(entry(2, 1)).unwrap();
        queue.push(entry(1, 1001)).unwrap();
        assert_eq!(clients(&queue.take(64)), vec![(2, 1)]);
        let mut ticks = 0;
        while queue.take(64).is_empty() {
            queue.tick();
            ticks += 1;
            assert!(ticks <= 2 * WINDOW_TICKS, "held for good");
        }
        assert!(queue.is_empty());
    }

    /// A primary candidate of view 0 in a cluster of 8 clients, batching up to 64.
    fn primary() -> PrimaryCore {
        let cluster = Arc::new(TestCluster::new(1, 2, 4, 8).cluster);
        PrimaryCore::new(
            cluster,
            Arc::new(BytesArePartitions),
            NodeId(0),
            View(0),
            64,
        )
    }

    /// Through the primary's core: while the USIG warrants a batch, a client floods 50 requests
    /// and four others send one each; the next PREPARE holds one request per client, the
    /// flooder's newest, and the flooder's older ones are never ordered.
    #[test]
    fn the_primary_orders_one_request_per_client_per_batch() {
        let mut core = primary();
        let warrant = |bytes: &[u8]| usig(NodeId(0)).create_ui(bytes).unwrap();
        let out = core.on_request(request(1, 1, &[0])).unwrap();
        let [Action::Warrant { bytes }] = out.as_slice() else {
            panic!("{out:?}")
        };
        for timestamp in 1..=50 {
            assert!(core
                .on_request(request(7, timestamp, &[1]))
                .unwrap()
                .is_empty());
        }
        for client in 2..=5 {
            core.on_request(request(client, 1, &[2])).unwrap();
        }
        assert_eq!(core.pending(), 5);
        let out = core.warranted(warrant(bytes));
        let [_, Action::Warrant { bytes }] = out.as_slice() else {
            panic!("{out:?}")
        };
        let out = core.warranted(warrant(bytes));
        let [Action::Broadcast(Proposal::Prepare(prepare))] = out.as_slice() else {
            panic!("{out:?}")
        };
        assert_eq!(
            clients(&prepare.entries),
            vec![(7, 50), (2, 1), (3, 1), (4, 1), (5, 1)]
        );
        // The flooder's superseded requests are older than what was ordered: duplicates now.
        assert_eq!(
            core.on_request(request(7, 10, &[1])),
            Err(Rejection::Duplicate)
        );
    }

    /// A request every replica would give no order, for its size, is not admitted.
    #[test]
    fn a_request_over_the_size_limit_is_refused() {
        use proto::limits::MAX_OPERATION_BYTES;
        use proto::testing::client_key;
        let mut core = primary();
        let sized = |client: u64, bytes: usize| {
            let client = proto::ClientId(client);
            let key = client_key(client);
            proto::Request::signed(client, 1, vec![0], vec![0; bytes], &key)
        };
        let big = sized(1, MAX_OPERATION_BYTES + 1);
        assert_eq!(core.on_request(big), Err(Rejection::TooLarge));
        assert!(core.on_request(sized(2, MAX_OPERATION_BYTES)).is_ok());
    }

    /// A request admission holds back is ordered by a later tick, without any new request
    /// arriving (nothing else would wake the primary, and replicas would suspect it).
    #[test]
    fn a_tick_orders_what_admission_held_back() {
        let mut core = primary();
        let mut usig = usig(NodeId(0));
        let mut run = |core: &mut PrimaryCore, mut actions: Vec<Action>| {
            let mut ordered = Vec::new();
            while let Some(action) = actions.pop() {
                match action {
                    Action::Warrant { bytes } => {
                        actions.extend(core.warranted(usig.create_ui(&bytes).unwrap()))
                    }
                    Action::Broadcast(Proposal::Prepare(p)) => ordered.extend(clients(&p.entries)),
                    Action::Broadcast(_) => {}
                }
            }
            ordered
        };
        for timestamp in 1..=100 {
            let out = core.on_request(request(1, timestamp, &[0])).unwrap();
            assert_eq!(run(&mut core, out), vec![(1, timestamp)]);
        }
        let out = core.on_request(request(2, 1, &[0])).unwrap();
        assert_eq!(run(&mut core, out), vec![(2, 1)]);
        let out = core.on_request(request(1, 101, &[0])).unwrap();
        assert!(run(&mut core, out).is_empty(), "client 1 is over its share");
        let mut ticks = 0;
        loop {
            ticks += 1;
            let out = core.on_tick();
            match run(&mut core, out).as_slice() {
                [] => assert!(ticks <= 2 * WINDOW_TICKS, "still held after {ticks} ticks"),
                ordered => {
                    assert_eq!(ordered, [(1, 101)]);
                    break;
                }
            }
        }
    }
}
