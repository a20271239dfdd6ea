//! Properties of the database node's decoders (issue 17): state-transfer messages and the
//! shape check their rows pass before SQL (`transfer::check_rows`), and the bank and no-op
//! applications' operations and results. Encode → decode is the identity; arbitrary and
//! mutated bytes never panic, and what is accepted is canonical; `check_rows` accepts exactly
//! plain identifiers and rows of one value per column. The fuzz targets `state_chunk` and
//! `app_ops` check the same with coverage guidance.

use dbvote::noop::NoopOp;
use dbvote::transfer::check_rows;
use dbvote::{BankOp, BankResult};
use proptest::prelude::*;
use proto::{DbCheckpoint, NodeId, Signature, StateChunk, StateRequest, TableRows, Value};

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::Int),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(Value::Real),
        ".{0,8}".prop_map(Value::Text),
        proptest::collection::vec(any::<u8>(), 0..16).prop_map(Value::Bytes),
    ]
}

/// Column names: mostly plain identifiers, sometimes anything (quotes, spaces, SQL).
fn column() -> impl Strategy<Value = String> {
    prop_oneof![4 => "[a-z0-9_]{1,12}", 1 => ".{0,12}", 1 => "[a-z_]{60,70}"]
}

fn rows() -> impl Strategy<Value = TableRows> {
    (
        any::<u32>(),
        proptest::collection::vec(column(), 0..4),
        proptest::collection::vec(proptest::collection::vec(value(), 0..4), 0..4),
    )
        .prop_map(|(table, columns, rows)| TableRows {
            table,
            columns,
            rows,
        })
}

fn chunk() -> impl Strategy<Value = StateChunk> {
    (
        any::<u32>(),
        any::<u64>(),
        any::<u32>(),
        any::<bool>(),
        rows(),
    )
        .prop_map(|(node, order, index, last, rows)| StateChunk {
            db_node: NodeId(node),
            order,
            index,
            last,
            rows,
            signature: Signature([7; 64]),
        })
}

fn bank_op() -> impl Strategy<Value = BankOp> {
    prop_oneof![
        (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(branch, number, initial_cents)| {
            BankOp::Open {
                branch,
                number,
                initial_cents,
            }
        }),
        (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(branch, number, cents)| {
            BankOp::Deposit {
                branch,
                number,
                cents,
            }
        }),
        (any::<(u32, u32)>(), any::<(u32, u32)>(), any::<u64>())
            .prop_map(|(from, to, cents)| BankOp::Transfer { from, to, cents }),
        (any::<u32>(), any::<u32>())
            .prop_map(|(branch, number)| BankOp::Balance { branch, number }),
    ]
}

/// Whether every column is a plain lower-case identifier of at most 63 bytes and every row has
/// one value per column: the rule of docs/state-transfer.md, stated independently.
fn well_formed(rows: &TableRows) -> bool {
    let plain = |c: &String| {
        (1..=63).contains(&c.len())
            && c.bytes()
                .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
    };
    !rows.columns.is_empty()
        && rows.columns.iter().all(plain)
        && rows.rows.iter().all(|r| r.len() == rows.columns.len())
}

/// Runs every decoder of this crate on `bytes`; what one accepts must re-encode to `bytes`.
fn decode_all(bytes: &[u8]) {
    if let Ok(c) = wire::decode::<StateChunk>(bytes) {
        assert_eq!(wire::encode(&c).unwrap(), bytes);
        assert_eq!(check_rows(&c.rows).is_ok(), well_formed(&c.rows));
    }
    if let Ok(c) = wire::decode::<DbCheckpoint>(bytes) {
        assert_eq!(wire::encode(&c).unwrap(), bytes);
    }
    if let Ok(r) = wire::decode::<StateRequest>(bytes) {
        assert_eq!(wire::encode(&r).unwrap(), bytes);
    }
    if let Ok(op) = BankOp::decode(bytes) {
        assert_eq!(op.encode(), bytes);
    }
    if let Ok(op) = NoopOp::decode(bytes) {
        assert_eq!(op.encode(), bytes);
    }
    if let Ok(r) = BankResult::decode(bytes) {
        assert_eq!(r.encode(), bytes);
    }
}

proptest! {
    #[test]
    fn state_messages_round_trip(c in chunk(), target in any::<u64>(), digest in any::<Option<[u8; 32]>>()) {
        prop_assert_eq!(wire::decode::<StateChunk>(&wire::encode(&c).unwrap()).unwrap(), c);
        let cp = DbCheckpoint { db_node: NodeId(1), target, order: target, digest, signature: Signature([1; 64]) };
        prop_assert_eq!(wire::decode::<DbCheckpoint>(&wire::encode(&cp).unwrap()).unwrap(), cp);
        let r = StateRequest { db_node: NodeId(2), target_order: target, sender: NodeId(3), signature: Signature([2; 64]) };
        prop_assert_eq!(wire::decode::<StateRequest>(&wire::encode(&r).unwrap()).unwrap(), r);
    }

    #[test]
    fn check_rows_accepts_exactly_well_formed_rows(rows in rows()) {
        prop_assert_eq!(check_rows(&rows).is_ok(), well_formed(&rows), "{:?}", rows);
    }

    #[test]
    fn operations_and_results_round_trip(
        op in bank_op(), partitions in proptest::collection::btree_set(any::<u32>(), 1..4),
        payload in proptest::collection::vec(any::<u8>(), 0..16), balance_cents in any::<u64>()
    ) {
        prop_assert_eq!(BankOp::decode(&op.encode()).unwrap(), op);
        let noop = NoopOp { partitions: partitions.into_iter().collect(), payload };
        prop_assert_eq!(NoopOp::decode(&noop.encode()).unwrap(), noop);
        let result = BankResult::Ok { balance_cents };
        prop_assert_eq!(BankResult::decode(&result.encode()).unwrap(), result);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        decode_all(&bytes);
    }

    #[test]
    fn mutated_encodings_never_panic(c in chunk(), op in bank_op(), at in any::<usize>(), byte in any::<u8>()) {
        for mut bytes in [wire::encode(&c).unwrap(), op.encode()] {
            let at = at % bytes.len();
            bytes[at] ^= byte | 1;
            decode_all(&bytes);
            bytes.truncate(at);
            decode_all(&bytes);
        }
    }
}

/// Found by the fuzz target `app_ops`: postcard reads a varint with redundant continuation
/// bytes (`80 00` for 0), so one operation had many accepted encodings.
#[test]
fn redundant_varint_bytes_are_refused() {
    let op = BankOp::Balance {
        branch: 0,
        number: 5,
    };
    let canonical = op.encode();
    assert_eq!(canonical, [3, 0, 5]);
    assert_eq!(BankOp::decode(&canonical).unwrap(), op);
    for overlong in [
        &[3, 0x80, 0x00, 5][..],
        &[0x83, 0x00, 0, 5],
        &[3, 0, 0x85, 0x00],
    ] {
        assert!(BankOp::decode(overlong).is_err(), "{overlong:?}");
    }
}
