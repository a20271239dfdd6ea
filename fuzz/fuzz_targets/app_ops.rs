//! The applications' operations and results, which every replica and database node decodes
//! from a client's request or a database node's reply: bank, no-op and TPC-C. Accepted bytes
//! are canonical, and each application's partition rule returns sorted, distinct partitions.
#![no_main]

use dbvote::noop::{Noop, NoopOp};
use dbvote::{Application, Bank, BankOp, BankResult};
use libfuzzer_sys::fuzz_target;
use tpcc::txn::{TpccOp, TpccResult};

fn check_partitions(app: &dyn Fn(&[u8]) -> Option<Vec<u32>>, data: &[u8]) {
    if let Some(partitions) = app(data) {
        assert!(partitions.windows(2).all(|w| w[0] < w[1]), "{partitions:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(op) = BankOp::decode(data) {
        assert_eq!(op.encode(), data, "{op:?}");
    }
    if let Ok(op) = NoopOp::decode(data) {
        assert_eq!(op.encode(), data, "{op:?}");
    }
    if let Ok(op) = TpccOp::decode(data) {
        assert_eq!(op.encode(), data, "{op:?}");
        let _ = op.validate(4);
    }
    if let Ok(result) = BankResult::decode(data) {
        assert_eq!(result.encode(), data, "{result:?}");
    }
    if let Ok(result) = TpccResult::decode(data) {
        assert_eq!(result.encode(), data, "{result:?}");
    }
    check_partitions(&|op| Bank.partitions(op).ok(), data);
    check_partitions(&|op| Noop.partitions(op).ok(), data);
    check_partitions(&|op| tpcc::Tpcc.partitions(op).ok(), data);
});
