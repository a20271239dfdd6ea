//! Size limits on what a PREPARE may carry, so that every message that carries one fits in a
//! frame (docs/protocol.md, "Byzantine input": "Requests too large to carry").
//!
//! A request travels inside its PREPARE, inside every COMMIT that carries that PREPARE, and in
//! the VIEW-CHANGEs that show it; a frame holds at most the transport's `max_frame` (16 MiB by
//! default), and a message too large for it is dropped at the sender. Without limits one client's
//! request just under 16 MiB made a PREPARE that fits and a COMMIT that does not: peers waited for
//! that COMMIT's warrant counter for ever, every VIEW-CHANGE was too large as well, and the whole
//! cluster stopped for good. So the client endpoint refuses to send an operation over
//! [`MAX_OPERATION_BYTES`], the primary refuses to order one, and every replica gives none an
//! order; a correct primary's batch holds at most [`MAX_PREPARE_REQUEST_BYTES`] of requests
//! and [`MAX_PREPARE_ENTRIES`] of them, and a replica refuses the primary of a PREPARE over
//! [`Prepare::within_limits`], as it refuses one that spends a counter on anything but its
//! view's next PREPARE.

use crate::batch::MAX_BATCH;
use crate::config::Cluster;
use crate::message::{Prepare, Request};

/// The largest operation a request may carry, in bytes: the gateway's largest form body, and
/// some fifty times a TPC-C New-Order's.
pub const MAX_OPERATION_BYTES: usize = 16 << 10;

/// The most partitions a request may declare: a TPC-C New-Order touches at most 16 warehouses.
pub const MAX_REQUEST_PARTITIONS: usize = 256;

/// The most request bytes ([`request_bytes`]) a correct primary puts in one PREPARE; it always
/// takes at least one request, which is at most [`MAX_OPERATION_BYTES`] and its overhead. About
/// three times what 64 TPC-C New-Orders count at most, so batching is not cut short by it in
/// practice; small enough that the [`crate::VIEW_CHANGE_SPAN`] PREPAREs a VIEW-CHANGE may show
/// fit a third of a 16 MiB frame (docs/protocol.md, "Bounded VIEW-CHANGEs").
pub const MAX_PREPARE_REQUEST_BYTES: usize = 64 << 10;

/// The most clients a configuration may name (and the most an epoch's start may list). The
/// order book holds the newest ordered timestamp of each, at most 20 bytes encoded, and every
/// stable checkpoint a VIEW-CHANGE shows carries the book: at this bound it is under 330 KiB,
/// so a VIEW-CHANGE fits its frame beside its PREPAREs, and a NEW-VIEW's (f+1)·groups of them
/// (each distinct book once) fit theirs (docs/protocol.md, "Bounded VIEW-CHANGEs"). Clients
/// are gateways and application servers, not their users: thousands at most in practice.
pub const MAX_CLIENTS: usize = 16 << 10;

/// The most bytes a NEW-VIEW's encoding may take besides its warrant: a primary candidate
/// warrants one only within it, under the transport's 16 MiB frame with a MiB to spare for the
/// envelope and the warrant (a NEW-VIEW over the frame would never be sent, and its view never
/// start).
pub const MAX_NEW_VIEW_BYTES: usize = 15 << 20;

/// The most requests of one PREPARE, and so the largest `--max-batch` a primary may be started
/// with (as many as the request bytes allow at the least overhead); and the most JOINs (a
/// correct primary's are one per replica at most).
pub const MAX_PREPARE_ENTRIES: usize = MAX_PREPARE_REQUEST_BYTES / REQUEST_OVERHEAD;

/// The deepest Merkle path of a client's batch signature (of at most [`MAX_BATCH`] requests).
const MAX_PATH_HASHES: usize = MAX_BATCH.trailing_zeros() as usize;

/// A request's encoding besides its operation, its partitions and its path, at most: client
/// and timestamp varints, the batch signature's count, index and 64-byte signature, lengths.
const REQUEST_OVERHEAD: usize = 128;

/// An upper bound of `request`'s encoded size, which the batch limit counts.
pub fn request_bytes(request: &Request) -> usize {
    request.operation.len()
        + 5 * request.partitions.len()
        + 32 * request.signature.path.len()
        + REQUEST_OVERHEAD
}

impl Request {
    /// Whether the request is small enough to be ordered in a cluster of `partitions`
    /// partitions: its operation at most [`MAX_OPERATION_BYTES`], at most one partition
    /// declared per partition of the cluster and [`MAX_REQUEST_PARTITIONS`] in all, and a
    /// batch-signature path no deeper than a batch of [`MAX_BATCH`]. The same at every correct
    /// node, so every correct replica gives an entry over it no order.
    pub fn within_limits(&self, partitions: u32) -> bool {
        self.operation.len() <= MAX_OPERATION_BYTES
            && self.partitions.len() <= (partitions as usize).min(MAX_REQUEST_PARTITIONS)
            && self.signature.path.len() <= MAX_PATH_HASHES
    }
}

impl Prepare {
    /// Whether a correct primary of `cluster` could have made this PREPARE: at most
    /// [`MAX_PREPARE_ENTRIES`] requests, at most one JOIN per replica, every request
    /// [`Request::within_limits`], and at most [`MAX_PREPARE_REQUEST_BYTES`] of requests
    /// unless it holds a single one. Its encoding then stays under about 100 KB besides the
    /// JOINs' bounded warrants, and so does a COMMIT that carries it.
    pub fn within_limits(&self, cluster: &Cluster) -> bool {
        let partitions = cluster.config.partitions;
        let requests = || self.entries.iter().map(|e| &e.request);
        self.entries.len() <= MAX_PREPARE_ENTRIES
            && self.joins.len() <= cluster.config.replicas.len()
            && requests().all(|r| r.within_limits(partitions))
            && (self.entries.len() == 1
                || requests().map(request_bytes).sum::<usize>() <= MAX_PREPARE_REQUEST_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{client_key, warranted_prepare};
    use crate::{ClientId, ConfigEpoch, GroupId, NodeId, PrepareEntry, View};

    fn request(bytes: usize) -> Request {
        Request::signed(
            ClientId(1),
            1,
            vec![0],
            vec![7; bytes],
            &client_key(ClientId(1)),
        )
    }

    /// Four partitions.
    fn cluster() -> Cluster {
        crate::testing::TestCluster::new(1, 1, 2, 4).cluster
    }

    fn prepare(requests: Vec<Request>) -> Prepare {
        let entries = requests
            .into_iter()
            .map(|request| PrepareEntry {
                group: GroupId(0),
                request,
            })
            .collect();
        let mut usig = crate::testing::usig(NodeId(0));
        warranted_prepare(&mut usig, View(0), ConfigEpoch(1), NodeId(0), entries)
    }

    #[test]
    fn an_operation_over_the_limit_is_refused() {
        assert!(request(MAX_OPERATION_BYTES).within_limits(4));
        assert!(!request(MAX_OPERATION_BYTES + 1).within_limits(4));
    }

    #[test]
    fn more_partitions_than_the_cluster_has_are_refused() {
        let mut r = request(10);
        r.partitions = vec![0, 1, 2, 3];
        assert!(r.within_limits(4));
        r.partitions.push(4);
        assert!(!r.within_limits(4));
        r.partitions = (0..MAX_REQUEST_PARTITIONS as u32 + 1).collect();
        assert!(!r.within_limits(100_000));
        r.partitions.pop();
        assert!(r.within_limits(100_000));
    }

    /// A PREPARE at the limits of an eight-group cluster: `requests`, and a JOIN of every
    /// replica (what a faulty primary can put in each one).
    fn at_the_limits(cluster: &Cluster, requests: Vec<Request>) -> Prepare {
        let mut prepare = prepare(requests);
        let epoch = cluster.epoch();
        prepare.joins = (cluster.config.replicas.iter())
            .map(|r| {
                let replica = NodeId(r.id);
                let bytes = crate::Join::warranted_bytes(replica, epoch);
                let ui = usig::Usig::create_ui(&mut crate::testing::usig(replica), &bytes);
                crate::Join {
                    replica,
                    config_epoch: epoch,
                    ui: ui.unwrap(),
                }
            })
            .collect();
        assert!(prepare.within_limits(cluster));
        prepare
    }

    /// The [`crate::VIEW_CHANGE_SPAN`] PREPAREs a VIEW-CHANGE may show, each as large as the
    /// limits let it encode, fit a third of a 16 MiB frame: the rest is for its log, stable
    /// checkpoint, anchors and base (docs/protocol.md, "Bounded VIEW-CHANGEs").
    #[test]
    fn the_prepares_a_view_change_may_show_fit_a_third_of_a_frame() {
        let cluster = crate::testing::TestCluster::new(1, 8, 16, 4).cluster;
        // The most entries (requests of the least counted size), and one request as large as
        // any may be, declaring every partition.
        let least = request(0);
        let many = vec![least.clone(); MAX_PREPARE_REQUEST_BYTES / request_bytes(&least)];
        let mut largest = request(MAX_OPERATION_BYTES);
        largest.partitions = (0..16).collect();
        let encoded = [many, vec![largest]]
            .map(|requests| crate::message::canonical(&at_the_limits(&cluster, requests)).len());
        let shown = *encoded.iter().max().unwrap() * crate::VIEW_CHANGE_SPAN as usize;
        assert!(shown <= (16 << 20) / 3, "{encoded:?}: {shown} bytes");
    }

    #[test]
    fn a_prepare_over_the_batch_limits_is_refused() {
        let big = request(MAX_OPERATION_BYTES);
        let full = MAX_PREPARE_REQUEST_BYTES / request_bytes(&big);
        assert!(prepare(vec![big.clone(); full]).within_limits(&cluster()));
        assert!(!prepare(vec![big; full + 1]).within_limits(&cluster()));
        assert!(prepare(vec![request(MAX_OPERATION_BYTES)]).within_limits(&cluster()));
        assert!(!prepare(vec![request(MAX_OPERATION_BYTES + 1)]).within_limits(&cluster()));
        let small = MAX_PREPARE_REQUEST_BYTES / request_bytes(&request(1));
        assert!(prepare(vec![request(1); small]).within_limits(&cluster()));
        assert!(!prepare(vec![request(1); small + 1]).within_limits(&cluster()));
        assert!(!prepare(vec![request(1); MAX_PREPARE_ENTRIES + 1]).within_limits(&cluster()));
    }
}
