//! Properties of TPC-C's operation and result decoders (issue 17), which every replica and
//! database node runs on a client's request and a database node's reply: encode → decode is the
//! identity for arbitrary operations; arbitrary and mutated bytes never panic, and what is
//! accepted is canonical, with partitions that are sorted and distinct. The fuzz target
//! `app_ops` checks the same with coverage guidance.

use proptest::prelude::*;
use tpcc::txn::{
    CustomerSelector, Delivery, InvalidInput, NewOrder, NewOrderLine, OrderStatus, Payment,
    StockLevel, TpccOp, TpccResult,
};

fn customer() -> impl Strategy<Value = CustomerSelector> {
    prop_oneof![
        any::<u32>().prop_map(CustomerSelector::Id),
        ".{0,16}".prop_map(CustomerSelector::LastName),
    ]
}

fn op() -> impl Strategy<Value = TpccOp> {
    let line =
        (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(i_id, supply_w_id, quantity)| {
            NewOrderLine {
                i_id,
                supply_w_id,
                quantity,
            }
        });
    prop_oneof![
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<i64>(),
            proptest::collection::vec(line, 0..16)
        )
            .prop_map(
                |(w_id, d_id, c_id, entry_d, lines)| TpccOp::NewOrder(NewOrder {
                    w_id,
                    d_id,
                    c_id,
                    entry_d,
                    lines
                })
            ),
        (any::<[u32; 4]>(), customer(), any::<i64>(), any::<i64>()).prop_map(
            |([w_id, d_id, c_w_id, c_d_id], customer, h_amount, h_date)| TpccOp::Payment(Payment {
                w_id,
                d_id,
                c_w_id,
                c_d_id,
                customer,
                h_amount,
                h_date
            })
        ),
        (any::<u32>(), any::<u32>(), customer()).prop_map(|(w_id, d_id, customer)| {
            TpccOp::OrderStatus(OrderStatus {
                w_id,
                d_id,
                customer,
            })
        }),
        (any::<u32>(), any::<u32>(), any::<i64>()).prop_map(|(w_id, o_carrier_id, delivery_d)| {
            TpccOp::Delivery(Delivery {
                w_id,
                o_carrier_id,
                delivery_d,
            })
        }),
        (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(w_id, d_id, threshold)| {
            TpccOp::StockLevel(StockLevel {
                w_id,
                d_id,
                threshold,
            })
        }),
    ]
}

fn decode_all(bytes: &[u8]) {
    if let Ok(op) = TpccOp::decode(bytes) {
        assert_eq!(op.encode(), bytes, "accepted a non-canonical operation");
        if let Ok(partitions) = op.partitions() {
            assert!(partitions.windows(2).all(|w| w[0] < w[1]), "{partitions:?}");
        }
        let _ = op.validate(4);
    }
    if let Ok(result) = TpccResult::decode(bytes) {
        assert_eq!(result.encode(), bytes, "accepted a non-canonical result");
    }
}

proptest! {
    #[test]
    fn operations_round_trip(op in op()) {
        prop_assert_eq!(TpccOp::decode(&op.encode()).unwrap(), op);
    }

    #[test]
    fn results_round_trip(field in "[a-z_]{1,8}", problem in ".{0,32}", ids in any::<[i64; 4]>()) {
        let [w_id, d_id, c_id, o_id] = ids;
        for result in [
            TpccResult::Invalid(InvalidInput { field: field.clone(), problem: problem.clone() }),
            TpccResult::NewOrderRolledBack { w_id, d_id, c_id, o_id, c_last: problem.clone(), c_credit: field.clone() },
        ] {
            prop_assert_eq!(TpccResult::decode(&result.encode()).unwrap(), result);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        decode_all(&bytes);
    }

    #[test]
    fn mutated_operations_never_panic(op in op(), at in any::<usize>(), byte in any::<u8>()) {
        let mut bytes = op.encode();
        let at = at % bytes.len();
        bytes[at] ^= byte | 1;
        decode_all(&bytes);
        bytes.insert(at, byte);
        decode_all(&bytes);
    }
}
