//! An in-memory database node for the simulation: per-partition hash chains, with the
//! executor's exactly-once contract (a repeated execution returns the stored result).

use dbvote::voter::StoredResult;
use proto::{ClientId, Execution, PartitionId};
use std::collections::BTreeMap;

/// The model database of one node.
#[derive(Default)]
pub struct ModelDb {
    /// Per partition: (last sequence number, state hash).
    partitions: BTreeMap<PartitionId, (u64, [u8; 32])>,
    results: BTreeMap<u64, StoredResult>,
    /// Result of each client request, to check the pages clients accepted.
    pub by_request: BTreeMap<(ClientId, u64), Vec<u8>>,
    /// How many times each order really executed (must be 1).
    pub executions: BTreeMap<u64, u32>,
}

impl ModelDb {
    /// The stored result of an order that ran, with the positions it ran at.
    pub fn stored(&self, order: u64) -> Option<StoredResult> {
        self.results.get(&order).cloned()
    }

    /// Executes, or returns the stored result of an order that already ran. Panics if the
    /// voter asked for an execution whose predecessors have not run (a protocol bug).
    pub fn execute(&mut self, e: &Execution) -> Vec<u8> {
        if let Some(stored) = self.results.get(&e.order) {
            return stored.result.clone();
        }
        let mut acc = ring::digest::Context::new(&ring::digest::SHA256);
        for &(p, s) in &e.positions {
            let (last, state) = self.partitions.entry(p).or_insert((0, [0; 32]));
            assert_eq!(
                *last + 1,
                s,
                "order {} executed before its predecessor on partition {p}",
                e.order
            );
            let mut h = ring::digest::Context::new(&ring::digest::SHA256);
            h.update(state);
            h.update(&e.request.operation);
            state.copy_from_slice(h.finish().as_ref());
            *last = s;
            acc.update(state);
        }
        let result = acc.finish().as_ref().to_vec();
        let stored = StoredResult {
            positions: e.positions.clone(),
            result: result.clone(),
        };
        self.results.insert(e.order, stored);
        self.by_request
            .insert((e.request.client, e.request.timestamp), result.clone());
        *self.executions.entry(e.order).or_default() += 1;
        result
    }

    /// The whole state, for comparing nodes.
    pub fn state(&self) -> Vec<(PartitionId, u64, [u8; 32])> {
        self.partitions
            .iter()
            .map(|(p, (s, h))| (*p, *s, *h))
            .collect()
    }
}
