//! The global order and per-partition positions, derived identically by every replica from the
//! sequence of PREPAREs (docs/protocol.md, "Global order and partitions").

use proto::batch::RootCache;
use proto::config::Cluster;
use proto::{
    Anchor, ClientId, Execution, GroupId, Incarnation, Join, NodeId, PartitionId, PartitionRule,
    Prepare, Request,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use usig::MessageDigest;

/// Where the derivation stands. Checkpoints carry it (encoded), so that a replica can continue
/// the derivation from a stable checkpoint without the history before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderBook {
    partitions: u32,
    next_order: u64,
    /// Next sequence number per partition.
    next_seq: Vec<u64>,
    /// Newest ordered timestamp per client.
    last_ordered: BTreeMap<ClientId, u64>,
    /// The incarnation of every replica whose JOIN was ordered (docs/protocol.md, "Replica
    /// recovery"); the others are in their configured first one.
    incarnations: BTreeMap<NodeId, Incarnation>,
    /// Where each primary candidate's latest PREPARE in the history sits in its warrant
    /// sequence: a recovering replica follows the candidates from there when
    /// f+1 members of a group vouch that they did (docs/protocol.md, "Replica recovery").
    prepares: BTreeMap<NodeId, Anchor>,
    /// A valid RECONFIGURE was ordered: the configuration epoch ends here and nothing more is
    /// ordered in it (docs/protocol.md, "Reconfiguration"). Checkpoints certify it with the rest.
    closed: bool,
}

impl OrderBook {
    /// The start of the configuration epoch: right after its `epoch_start`.
    pub fn new(cluster: &Cluster) -> Self {
        let partitions = cluster.config.partitions;
        let start = &cluster.config.epoch_start;
        OrderBook {
            partitions,
            next_order: start.order + 1,
            next_seq: (0..partitions as usize)
                .map(|p| start.positions.get(p).copied().unwrap_or(0) + 1)
                .collect(),
            last_ordered: start
                .clients
                .iter()
                .map(|&(client, timestamp)| (ClientId(client), timestamp))
                .collect(),
            incarnations: BTreeMap::new(),
            prepares: BTreeMap::new(),
            closed: false,
        }
    }

    /// Whether the epoch's last PREPARE (a valid RECONFIGURE) has been ordered.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Where the next configuration epoch starts if this epoch ends here: the last order, the
    /// last position of every partition, and the client table (docs/protocol.md,
    /// "Reconfiguration").
    pub fn epoch_start(&self) -> proto::config::EpochStart {
        proto::config::EpochStart {
            order: self.next_order - 1,
            positions: self.next_seq.iter().map(|s| s - 1).collect(),
            clients: self
                .last_ordered
                .iter()
                .map(|(client, &timestamp)| (client.0, timestamp))
                .collect(),
        }
    }

    /// The incarnation of `replica` whose JOIN was ordered last, if any.
    pub fn incarnation(&self, replica: NodeId) -> Option<Incarnation> {
        self.incarnations.get(&replica).copied()
    }

    /// Where `candidate`'s latest PREPARE in the history sits in its warrant sequence, if it
    /// made one in this configuration epoch.
    pub fn latest_prepare(&self, candidate: NodeId) -> Option<Anchor> {
        self.prepares.get(&candidate).copied()
    }

    /// Orders a JOIN carried by a PREPARE: true when it starts a newer incarnation of a replica
    /// of the configuration (valid warrant, this epoch, later than its current incarnation)
    /// and the book is not closed.
    /// Every replica decides this alike, so checkpoints certify the result.
    pub fn join(&mut self, cluster: &Cluster, join: &Join) -> bool {
        // Nothing is ordered after the epoch's last PREPARE, JOINs included. Replicas refuse
        // later PREPAREs in their view, but a new view's cut may hold one (a Byzantine
        // member's VIEW-CHANGE shows what a Byzantine primary sent after the RECONFIGURE), and
        // re-deriving the book over the cut must not record what the replicas that closed the
        // epoch in the earlier view never did: the book at the end would get two digests.
        if self.closed {
            return false;
        }
        let incarnation = join.incarnation();
        let current = self.incarnation(join.replica).unwrap_or(Incarnation {
            epoch: cluster.usig_epoch_of(join.replica).map_or(0, |e| e.0),
            counter: cluster.usig_start_of(join.replica).0,
        });
        if incarnation <= current || !join.is_valid_in(cluster) {
            return false;
        }
        self.incarnations.insert(join.replica, incarnation);
        true
    }

    /// The canonical encoding a checkpoint carries.
    pub fn encode(&self) -> Vec<u8> {
        wire::encode(self).expect("postcard encodes plain data into a Vec")
    }

    /// What a CHECKPOINT names.
    pub fn digest(&self) -> MessageDigest {
        MessageDigest::of(&self.encode())
    }

    /// Decodes a book a checkpoint carries, if it fits the configuration.
    pub fn decode(bytes: &[u8], cluster: &Cluster) -> Option<Self> {
        let book: OrderBook = wire::decode(bytes).ok()?;
        let partitions = cluster.config.partitions;
        (book.partitions == partitions && book.next_seq.len() == partitions as usize)
            .then_some(book)
    }

    /// Where the next configuration epoch starts after the encoded book `bytes` (a
    /// certificate's), if it decodes for `cluster`: what a CONFIGURE's `epoch_start` must equal.
    pub fn start_of(bytes: &[u8], cluster: &Cluster) -> Option<proto::config::EpochStart> {
        Self::decode(bytes, cluster).map(|b| b.epoch_start())
    }

    /// True when the request is newer than its client's last ordered one.
    pub fn is_newer(&self, request: &Request) -> bool {
        self.last_ordered
            .get(&request.client)
            .is_none_or(|&last| request.timestamp > last)
    }

    /// Orders the entries of the next PREPARE (in primary counter order) and returns each
    /// ordered entry's group and execution. Entries every correct replica must refuse (bad
    /// client signature, over the size limits of [`proto::limits`], untruthful or unknown
    /// partitions, not newer than the client's last
    /// ordered request) get no order, so a Byzantine primary cannot make anything execute twice
    /// or break partition isolation. `verified` names requests whose signature this replica
    /// has already checked (byte for byte the same request), which are not checked again: the
    /// outcome is the same, so every correct replica still derives the same book. The others
    /// are checked in one batch, whose verdicts are those of single checks; `roots` holds the
    /// client batch roots this replica checked before, which change no verdict either.
    pub fn order(
        &mut self,
        cluster: &Cluster,
        rule: &dyn PartitionRule,
        prepare: &Prepare,
        verified: &dyn Fn(&Request) -> bool,
        roots: &mut RootCache,
    ) -> Vec<(GroupId, Execution)> {
        let mut out = Vec::new();
        if self.closed {
            return out;
        }
        let latest = Anchor::of(prepare.primary, &prepare.ui);
        self.prepares.insert(prepare.primary, latest);
        // The signatures not checked yet, in one batch (same verdicts as one by one).
        let seen: Vec<bool> = prepare
            .entries
            .iter()
            .map(|e| verified(&e.request))
            .collect();
        let unchecked: Vec<&Request> = prepare
            .entries
            .iter()
            .zip(&seen)
            .filter(|(_, &seen)| !seen)
            .map(|(e, _)| &e.request)
            .collect();
        let mut verdicts =
            Request::verify_many(&unchecked, |c| cluster.client_key(c), roots).into_iter();
        for (entry, seen) in prepare.entries.iter().zip(seen) {
            let request = &entry.request;
            let signed = seen || verdicts.next().unwrap_or(false);
            let valid = signed
                && request.within_limits(self.partitions)
                && request.declares_truthfully(rule)
                && !request.partitions.is_empty()
                && request.partitions.iter().all(|&p| p < self.partitions)
                && self
                    .last_ordered
                    .get(&request.client)
                    .is_none_or(|&last| request.timestamp > last)
                // Routed to the group that serves its (first) partition, as database nodes
                // check too: a Byzantine primary cannot hand a partition to another group.
                && cluster.group_of(request.partitions[0]) == Some(entry.group);
            if !valid {
                continue;
            }
            self.last_ordered.insert(request.client, request.timestamp);
            let touched: Vec<PartitionId> = if request.partitions.len() == 1 {
                request.partitions.clone()
            } else {
                (0..self.partitions).collect()
            };
            let positions = touched
                .into_iter()
                .map(|p| {
                    let seq = &mut self.next_seq[p as usize];
                    *seq += 1;
                    (p, *seq - 1)
                })
                .collect();
            out.push((
                entry.group,
                Execution {
                    order: self.next_order,
                    positions,
                    request: request.body(),
                },
            ));
            self.next_order += 1;
        }
        // A RECONFIGURE that every correct replica accepts ends the epoch after this PREPARE.
        if prepare
            .reconfigure
            .as_ref()
            .is_some_and(|r| r.check(cluster).is_ok())
        {
            self.closed = true;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::testing::{
        client_key, request, usig, warranted_prepare, BytesArePartitions, TestCluster,
    };
    use proto::{ConfigEpoch, NodeId, PrepareEntry, View};
    use usig::Usig;

    /// The book of the most clients a configuration may have, each with the largest id and
    /// timestamp, encodes within what `proto::limits::MAX_CLIENTS` promises: under 330 KiB,
    /// which every stable checkpoint a VIEW-CHANGE shows carries.
    #[test]
    fn the_book_of_the_most_clients_fits_its_bound() {
        let mut config = TestCluster::new(1, 8, 16, 4).cluster.config;
        let most = proto::limits::MAX_CLIENTS as u64;
        config.epoch_start.clients = (0..most).map(|i| (u64::MAX - i, u64::MAX)).collect();
        let cluster = Cluster::new(config).unwrap();
        let encoded = OrderBook::new(&cluster).encode().len();
        assert!(encoded < 330 << 10, "{encoded} bytes");
    }

    /// A PREPARE of the requests, each routed to the group serving its first partition.
    fn prepare(cluster: &Cluster, requests: Vec<Request>) -> Prepare {
        let routed = requests
            .into_iter()
            .map(|request| {
                let group = request
                    .partitions
                    .first()
                    .and_then(|&p| cluster.group_of(p))
                    .unwrap_or(GroupId(0));
                (group, request)
            })
            .collect();
        prepare_routed(routed)
    }

    /// Orders `prepare` with no request checked before and no batch root known.
    fn order_unchecked(
        book: &mut OrderBook,
        cluster: &Cluster,
        prepare: &Prepare,
    ) -> Vec<(GroupId, Execution)> {
        let mut roots = RootCache::default();
        book.order(
            cluster,
            &BytesArePartitions,
            prepare,
            &|_| false,
            &mut roots,
        )
    }

    fn prepare_routed(routed: Vec<(GroupId, Request)>) -> Prepare {
        let entries: Vec<PrepareEntry> = routed
            .into_iter()
            .map(|(group, request)| PrepareEntry { group, request })
            .collect();
        let mut primary = usig(NodeId(0));
        warranted_prepare(&mut primary, View(0), ConfigEpoch(1), NodeId(0), entries)
    }

    #[test]
    fn single_partition_positions_are_independent_and_multi_partition_takes_all() {
        let cluster = TestCluster::new(1, 2, 3, 4).cluster;
        let mut book = OrderBook::new(&cluster);
        let p = prepare(
            &cluster,
            vec![
                request(1, 1, &[0]),
                request(2, 1, &[1]),
                request(3, 1, &[0, 2]),
                request(4, 1, &[0]),
            ],
        );
        let out = order_unchecked(&mut book, &cluster, &p);
        let summary: Vec<(u64, Vec<(u32, u64)>)> = out
            .iter()
            .map(|(_, e)| (e.order, e.positions.clone()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (1, vec![(0, 1)]),
                (2, vec![(1, 1)]),
                (3, vec![(0, 2), (1, 2), (2, 1)]),
                (4, vec![(0, 3)]),
            ]
        );
    }

    #[test]
    fn invalid_and_duplicate_entries_get_no_order() {
        let cluster = TestCluster::new(1, 1, 2, 4).cluster;
        let mut book = OrderBook::new(&cluster);
        let mut forged = request(1, 2, &[0]);
        forged.timestamp = 3;
        let lying = Request::signed(ClientId(2), 1, vec![0], vec![1], &client_key(ClientId(2)));
        let unknown_partition = request(3, 1, &[5]);
        let operation = vec![0; proto::limits::MAX_OPERATION_BYTES + 1];
        let too_large =
            Request::signed(ClientId(5), 1, vec![0], operation, &client_key(ClientId(5)));
        let p = prepare(
            &cluster,
            vec![
                request(1, 1, &[0]),
                request(1, 1, &[0]),
                forged,
                lying,
                unknown_partition,
                too_large,
                request(4, 1, &[1]),
            ],
        );
        let out = order_unchecked(&mut book, &cluster, &p);
        let orders: Vec<(u64, ClientId)> = out
            .iter()
            .map(|(_, e)| (e.order, e.request.client))
            .collect();
        assert_eq!(orders, vec![(1, ClientId(1)), (2, ClientId(4))]);
    }

    /// Which requests a replica checked on arrival changes nothing: the others are checked in a
    /// batch, and every replica derives the same book.
    #[test]
    fn the_book_is_the_same_whichever_requests_were_checked_before() {
        let cluster = TestCluster::new(1, 1, 2, 12).cluster;
        let mut forged = request(10, 2, &[0]);
        forged.timestamp = 3;
        let requests: Vec<Request> = (1..=9)
            .map(|c| request(c, 1, &[(c % 2) as u8]))
            .chain([forged])
            .collect();
        let p = prepare(&cluster, requests.clone());
        let books: Vec<(Vec<(GroupId, Execution)>, MessageDigest)> = [0usize, 1, 4, 9]
            .into_iter()
            .map(|seen| {
                let mut book = OrderBook::new(&cluster);
                let checked = &requests[..seen];
                let out = book.order(
                    &cluster,
                    &BytesArePartitions,
                    &p,
                    &|r| checked.contains(r),
                    &mut RootCache::default(),
                );
                (out, book.digest())
            })
            .collect();
        assert_eq!(books[0].0.len(), 9, "the forged request gets no order");
        assert!(books.iter().all(|b| *b == books[0]));
    }

    /// Requests signed together by their endpoint's key: a PREPARE of them orders exactly the
    /// authentic ones, whether this replica checked their batch's root before or not. An entry
    /// whose bytes were altered, or whose path leads to the checked root under other signature
    /// bytes, gets no order either way.
    #[test]
    fn batch_signed_requests_get_the_same_orders_with_or_without_known_roots() {
        let cluster = TestCluster::new(1, 1, 2, 8).one_endpoint().cluster;
        let unsigned: Vec<Request> = (1..=8)
            .map(|c| Request::unsigned(ClientId(c), 1, vec![(c % 2) as u32], vec![(c % 2) as u8]))
            .collect();
        let mut requests = Request::sign_all(unsigned, &proto::testing::endpoint_key());
        requests[3].timestamp = 2;
        requests[5].signature.signature.0[9] ^= 1;
        let p = prepare(&cluster, requests.clone());
        let mut warm = RootCache::default();
        let key = cluster.client_key(ClientId(1)).expect("configured");
        assert!(Request::verify_many(&[&requests[0]], |_| Some(key), &mut warm)[0]);
        let books: Vec<(Vec<(GroupId, Execution)>, MessageDigest)> = [RootCache::default(), warm]
            .into_iter()
            .map(|mut roots| {
                let mut book = OrderBook::new(&cluster);
                let out = book.order(&cluster, &BytesArePartitions, &p, &|_| false, &mut roots);
                (out, book.digest())
            })
            .collect();
        let ordered: Vec<u64> = books[0].0.iter().map(|(_, e)| e.request.client.0).collect();
        assert_eq!(
            ordered,
            [1, 2, 3, 5, 7, 8],
            "the altered and re-signed entries get no order"
        );
        assert_eq!(books[0], books[1]);
    }

    /// The book records where each candidate's latest PREPARE sits (a recovering replica
    /// follows the candidate from there), the empty ones too, and it is part of the digest.
    #[test]
    fn the_latest_prepare_of_each_candidate_is_recorded() {
        let cluster = TestCluster::new(1, 1, 2, 4).cluster;
        let mut book = OrderBook::new(&cluster);
        assert_eq!(book.latest_prepare(NodeId(0)), None);
        let before = book.digest();
        let p = prepare(&cluster, Vec::new());
        order_unchecked(&mut book, &cluster, &p);
        let latest = book.latest_prepare(NodeId(0)).expect("recorded");
        assert_eq!((latest.epoch, latest.counter), (p.ui.epoch.0, p.ui.counter));
        assert_eq!(book.latest_prepare(NodeId(1)), None);
        assert_ne!(book.digest(), before);
    }

    /// A closed book records no JOIN. The model check of the cut-over
    /// (`crates/model/src/cutover.rs`) found two certificates of the end of one epoch naming two
    /// books: a Byzantine primary orders a JOIN after the RECONFIGURE, which every correct
    /// replica refuses; the replicas of both groups close at the RECONFIGURE and sign; a view
    /// change follows whose cut holds the JOIN (a Byzantine member's VIEW-CHANGE shows it), and
    /// the replicas that enter the new view recorded it when they re-derived the book over the
    /// cut, then signed again with that book. Both certificates had f+1 of every group.
    #[test]
    fn a_closed_book_records_no_join() {
        let (cluster, _) = TestCluster::operated(1, 1, 0, 2, 4);
        let mut next = cluster.config.clone();
        next.config_epoch += 1;
        let reconfigure = proto::Reconfigure::new(
            ConfigEpoch(1),
            &next,
            "127.0.0.1:9",
            &proto::testing::operator_key(),
        );
        let mut closing = prepare(&cluster, Vec::new());
        closing.reconfigure = Some(Box::new(reconfigure));
        let bytes = Join::warranted_bytes(NodeId(101), cluster.epoch());
        let mut rebooted = proto::testing::usig_in_epoch(NodeId(101), usig::Epoch(2));
        let join = Join {
            replica: NodeId(101),
            config_epoch: cluster.epoch(),
            ui: rebooted.create_ui(&bytes).unwrap(),
        };
        assert!(
            OrderBook::new(&cluster).join(&cluster, &join),
            "a valid JOIN"
        );
        let mut book = OrderBook::new(&cluster);
        order_unchecked(&mut book, &cluster, &closing);
        assert!(book.is_closed());
        let at_the_end = book.digest();
        assert!(!book.join(&cluster, &join));
        assert_eq!(book.digest(), at_the_end);
    }

    /// A Byzantine primary cannot hand a partition to another group: the entry gets no order,
    /// at every correct replica alike.
    #[test]
    fn entries_routed_to_another_group_get_no_order() {
        let cluster = TestCluster::new(1, 2, 4, 4).cluster;
        let serving = cluster.group_of(1).unwrap();
        let other = GroupId(1 - serving.0);
        let mut book = OrderBook::new(&cluster);
        let p = prepare_routed(vec![
            (other, request(1, 1, &[1])),
            (serving, request(2, 1, &[1])),
        ]);
        let out = order_unchecked(&mut book, &cluster, &p);
        let ordered: Vec<(GroupId, ClientId)> =
            out.iter().map(|(g, e)| (*g, e.request.client)).collect();
        assert_eq!(ordered, vec![(serving, ClientId(2))]);
    }
}
