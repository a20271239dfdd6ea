//! Counters of what the transport did, for operators and tests: a best-effort transport must say
//! what it dropped and why.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of the transport's counters since [`bind`](crate::Transport::bind). Each counter is
/// read independently, so a snapshot taken while traffic flows is not one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames entirely handed to the operating system on an outbound connection. (TCP may still
    /// lose the last ones if the connection breaks; the protocol retransmits.)
    pub frames_sent: u64,
    /// Complete inbound frames read and handed to the inbound receiver.
    pub frames_received: u64,
    /// Frames dropped by [`send`](crate::Transport::send) because the destination's queue was
    /// full, or because the transport was shut down.
    pub dropped: u64,
    /// Frames refused by [`send`](crate::Transport::send) because they exceed `max_frame`.
    pub oversized: u64,
    /// Inbound connections closed for a bad stream: a length prefix over `max_frame` (including
    /// garbage read as a length) or a stream ending in the middle of a frame.
    pub malformed: u64,
    /// Inbound connections accepted (not counting those closed at once for the cap,
    /// [`connections_refused`](Stats::connections_refused)).
    pub accepted: u64,
    /// Inbound connections closed as soon as accepted because
    /// [`max_plain_connections`](crate::TransportConfig::max_plain_connections) connections
    /// that are not authenticated links were open.
    pub connections_refused: u64,
    /// Inbound connections closed because their first frame had not arrived whole within
    /// [`connect_timeout`](crate::TransportConfig::connect_timeout) of the accept.
    pub first_frame_timeouts: u64,
    /// First successful outbound connection to a destination.
    pub connects: u64,
    /// Later successful outbound connections to a destination whose previous one broke.
    pub reconnects: u64,
    /// Outbound connection attempts that failed or timed out (each is followed by a backoff),
    /// including those whose link handshake failed on our side (no valid reply in time).
    pub connect_failures: u64,
    /// Authenticated inbound connections established: the opener proved its identity.
    pub links: u64,
    /// Inbound connections closed by link authentication: a hello refused (no link keys here,
    /// another acceptor named, malformed), a handshake that failed or did not complete in time
    /// (unknown opener, bad signature), or a data frame with a wrong tag (forged, tampered,
    /// replayed, reordered, or recorded on another connection).
    pub link_refused: u64,
    /// Authenticated inbound connections closed because the same opener established a newer
    /// link: its old connection is dead (it restarted, or gave the connection up across a
    /// partition) even if no FIN ever arrived here.
    pub links_replaced: u64,
}

/// The live counters behind [`Stats`], shared by every task of one transport.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub frames_sent: AtomicU64,
    pub frames_received: AtomicU64,
    pub dropped: AtomicU64,
    pub oversized: AtomicU64,
    pub malformed: AtomicU64,
    pub accepted: AtomicU64,
    pub connections_refused: AtomicU64,
    pub first_frame_timeouts: AtomicU64,
    pub connects: AtomicU64,
    pub reconnects: AtomicU64,
    pub connect_failures: AtomicU64,
    pub links: AtomicU64,
    pub link_refused: AtomicU64,
    pub links_replaced: AtomicU64,
}

/// Adds `n` to a counter. Relaxed: counters order nothing else.
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn snapshot(&self) -> Stats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            frames_sent: get(&self.frames_sent),
            frames_received: get(&self.frames_received),
            dropped: get(&self.dropped),
            oversized: get(&self.oversized),
            malformed: get(&self.malformed),
            accepted: get(&self.accepted),
            connections_refused: get(&self.connections_refused),
            first_frame_timeouts: get(&self.first_frame_timeouts),
            connects: get(&self.connects),
            reconnects: get(&self.reconnects),
            connect_failures: get(&self.connect_failures),
            links: get(&self.links),
            link_refused: get(&self.link_refused),
            links_replaced: get(&self.links_replaced),
        }
    }
}
