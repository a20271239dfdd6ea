//! Properties of the group replica's decoders (issue 17): the decision-log reader and the
//! order book a stable checkpoint carries. Framed records read back as themselves (with a torn
//! tail cut off); arbitrary and mutated bytes never panic, and what is accepted is exactly the
//! kept bytes or the canonical book. The fuzz targets `decision_log` and `order_book` check the
//! same with coverage guidance.

use group::log::{frame_record, read_records};
use group::order::OrderBook;
use proptest::prelude::*;
use proto::testing::TestCluster;
use proto::{Anchor, ClientId, Incarnation, NodeId};
use std::collections::BTreeMap;

fn records() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..48), 0..6)
}

fn log(records: &[Vec<u8>]) -> Vec<u8> {
    records.iter().flat_map(|r| frame_record(r)).collect()
}

/// What `read_records` promises for any input: the kept records framed again are the kept
/// bytes, and damage is reported inside the input.
fn check_reader(bytes: &[u8]) {
    match read_records(bytes) {
        Ok((records, kept)) => {
            assert_eq!(log(&records), bytes[..kept as usize]);
            assert!(records.iter().all(|r| !r.is_empty()));
        }
        Err(offset) => assert!((offset as usize) < bytes.len()),
    }
}

/// A book as its fields encode (postcard encodes a struct as its fields in order): partitions,
/// next order, next sequence per partition, client table, incarnations, closed.
type BookFields = (
    u32,
    u64,
    Vec<u64>,
    BTreeMap<ClientId, u64>,
    BTreeMap<NodeId, Incarnation>,
    BTreeMap<NodeId, Anchor>,
    bool,
);

fn book_fields(partitions: u32) -> impl Strategy<Value = BookFields> {
    (
        any::<u64>(),
        proptest::collection::vec(any::<u64>(), partitions as usize),
        proptest::collection::btree_map(any::<u64>().prop_map(ClientId), any::<u64>(), 0..4),
        proptest::collection::btree_map(
            any::<u32>().prop_map(NodeId),
            (any::<u64>(), any::<u64>())
                .prop_map(|(epoch, counter)| Incarnation { epoch, counter }),
            0..4,
        ),
        proptest::collection::btree_map(
            any::<u32>().prop_map(NodeId),
            (any::<u32>(), any::<u64>(), any::<u64>(), any::<[u8; 32]>()).prop_map(
                |(replica, epoch, counter, chain)| Anchor {
                    replica: NodeId(replica),
                    epoch,
                    counter,
                    chain,
                },
            ),
            0..3,
        ),
        any::<bool>(),
    )
        .prop_map(
            move |(next_order, next_seq, clients, incarnations, prepares, closed)| {
                (
                    partitions,
                    next_order,
                    next_seq,
                    clients,
                    incarnations,
                    prepares,
                    closed,
                )
            },
        )
}

proptest! {
    #[test]
    fn framed_records_read_back_as_themselves(records in records()) {
        let bytes = log(&records);
        prop_assert_eq!(read_records(&bytes), Ok((records, bytes.len() as u64)));
    }

    #[test]
    fn a_torn_last_record_is_cut_off(records in records(), cut in any::<usize>()) {
        prop_assume!(!records.is_empty());
        let bytes = log(&records);
        let before = log(&records[..records.len() - 1]).len();
        let end = before + cut % (bytes.len() - before);
        let (kept, len) = read_records(&bytes[..end]).unwrap();
        prop_assert_eq!(kept, records[..records.len() - 1].to_vec());
        prop_assert_eq!(len as usize, before);
    }

    #[test]
    fn arbitrary_logs_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        check_reader(&bytes);
    }

    #[test]
    fn mutated_logs_never_panic(records in records(), at in any::<usize>(), byte in any::<u8>()) {
        let mut bytes = log(&records);
        if !bytes.is_empty() {
            let at = at % bytes.len();
            bytes[at] ^= byte | 1;
        }
        check_reader(&bytes);
    }

    #[test]
    fn order_books_round_trip(fields in book_fields(4)) {
        let cluster = TestCluster::new(1, 2, 4, 2).cluster;
        let bytes = wire::encode(&fields).unwrap();
        let book = OrderBook::decode(&bytes, &cluster).expect("a book of the cluster's partitions");
        prop_assert_eq!(book.encode(), bytes);
    }

    #[test]
    fn books_of_other_clusters_and_garbage_are_refused_without_panic(
        fields in book_fields(3), garbage in proptest::collection::vec(any::<u8>(), 0..200)
    ) {
        let cluster = TestCluster::new(1, 2, 4, 2).cluster;
        prop_assert!(OrderBook::decode(&wire::encode(&fields).unwrap(), &cluster).is_none());
        if let Some(book) = OrderBook::decode(&garbage, &cluster) {
            prop_assert_eq!(book.encode(), garbage);
        }
    }
}
