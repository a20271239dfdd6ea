//! Cost of a checkpoint at a replica: the snapshot of the order book taken every
//! CHECKPOINT_INTERVAL slots, and its encoding and digest for the CHECKPOINT (the warrant is
//! one more USIG call, measured in `cargo bench -p cloudbft-usig`).
//!
//! `cargo bench -p cloudbft-group`.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use group::order::OrderBook;
use proto::testing::{request, usig, warranted_prepare, BytesArePartitions, TestCluster};
use proto::{ConfigEpoch, GroupId, NodeId, PrepareEntry, View};

/// An order book that has ordered one request of each of `clients` clients.
fn book(clients: u64) -> OrderBook {
    let cluster = TestCluster::new(1, 2, 4, clients).cluster;
    let entries: Vec<PrepareEntry> = (1..=clients)
        .map(|c| PrepareEntry {
            group: GroupId(0),
            request: request(c, 1, &[(c % 4) as u8]),
        })
        .collect();
    let mut primary = usig(NodeId(0));
    let prepare = warranted_prepare(&mut primary, View(0), ConfigEpoch(1), NodeId(0), entries);
    let mut book = OrderBook::new(&cluster);
    book.order(
        &cluster,
        &BytesArePartitions,
        &prepare,
        &|_| false,
        &mut proto::batch::RootCache::default(),
    );
    book
}

fn checkpoint(c: &mut Criterion) {
    let mut g = c.benchmark_group("checkpoint");
    for clients in [100u64, 10_000] {
        let book = book(clients);
        g.bench_function(format!("snapshot/{clients}-clients"), |b| {
            b.iter(|| book.clone())
        });
        g.bench_function(format!("digest/{clients}-clients"), |b| {
            b.iter_batched(|| book.clone(), |b| b.digest(), BatchSize::SmallInput)
        });
    }
    g.finish();
}

criterion_group!(benches, checkpoint);
criterion_main!(benches);
