//! The order book a stable checkpoint carries (`OrderBook::decode`, from a VIEW-CHANGE or a
//! RECOVERY-STATE): accepted bytes are the book's canonical encoding, so its digest is the one
//! the CHECKPOINTs name.
#![no_main]

use group::order::OrderBook;
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

static CLUSTER: LazyLock<proto::testing::TestCluster> =
    LazyLock::new(cloudbft_fuzz::seeds::cluster);

fuzz_target!(|data: &[u8]| {
    if let Some(book) = OrderBook::decode(data, &CLUSTER.cluster) {
        assert_eq!(
            book.encode(),
            data,
            "an accepted order book is not canonical: {book:?}"
        );
    }
});
