//! Transport tuning, with defaults that suit a cluster on one data-centre network.

use std::time::Duration;

/// How a [`Transport`](crate::Transport) bounds memory and paces reconnections.
///
/// Every limit is per connection or per destination so that one slow, dead or hostile peer cannot
/// exhaust memory or stall traffic to the others, except the cap on plain inbound connections,
/// which bounds what all unauthenticated openers together can hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportConfig {
    /// Largest frame payload accepted or sent, in bytes. Inbound connections announcing more are
    /// closed before anything is allocated; outbound frames over it are refused at
    /// [`send`](crate::Transport::send), since a peer with the same limit would reject them. On
    /// authenticated links the tag comes on top ([`link::TAG_LEN`](crate::link::TAG_LEN) bytes),
    /// so this is at most `u32::MAX` less the tag (the length prefix is 4 bytes).
    pub max_frame: usize,
    /// Frames waiting per destination while its connection is down or slow. When it is full new
    /// frames to that destination are dropped and counted: the protocol retransmits what matters,
    /// and dropping keeps memory bounded and `send` non-blocking.
    pub queue_per_peer: usize,
    /// Inbound frames buffered for the consumer of the inbound receiver. When it is full the read
    /// loops wait, so TCP flow control pushes back on the senders instead of frames piling up.
    pub inbound_queue: usize,
    /// Bytes of frames from plain connections that may be held at once, all such connections
    /// together: read or being read, queued, or with the consumer until it drops them. A
    /// connection reads a frame's payload only once the frame's announced length fits; until
    /// then it waits, and TCP pushes back on its sender. Without it the inbound queue bounded
    /// only the number of frames (4,096 of up to 16 MiB each), which whoever reaches the port
    /// could fill with frames slower to check than to send. At least `max_frame`.
    pub plain_inbound_bytes: usize,
    /// The same for each authenticated link, its own budget per link so that plain
    /// connections cannot hold links back (and one node's link cannot hold the others back).
    /// At least `max_frame` plus the link's tag ([`link::TAG_LEN`](crate::link::TAG_LEN)).
    pub link_inbound_bytes: usize,
    /// First delay before retrying a failed connection attempt; it doubles after each failure.
    pub connect_backoff_min: Duration,
    /// Cap on the reconnection delay, so a peer that comes back is reached again soon.
    pub connect_backoff_max: Duration,
    /// Upper bound on one connection attempt (a peer whose host is gone may never answer a SYN),
    /// on the wait for an inbound connection's first frame (a link hello, or a plain
    /// connection's first frame) from its accept, and on each side's wait for the other during
    /// an authenticated link's handshake: a peer that connects and then says nothing, or sends
    /// part of a frame, must not hold a connection forever. Correct openers write their first
    /// frame as soon as they are connected, so only a first frame that takes longer than this
    /// to transfer (by default, 16 MiB over a path slower than about 27 Mbit/s) is cut off.
    pub connect_timeout: Duration,
    /// Inbound connections that are not authenticated links (plain connections, and those
    /// whose first frame or link handshake is still to come) open at once. Beyond it a new
    /// connection is closed as soon as it is accepted and counted
    /// ([`Stats::connections_refused`](crate::Stats::connections_refused)), so that whoever
    /// reaches the port cannot take every file descriptor of the process. A connection stops
    /// counting once its link hello is accepted: links are bounded by the configured nodes
    /// instead, one per opener ([`Stats::links_replaced`](crate::Stats::links_replaced)). Each
    /// client endpoint, gateway or operator holds one plain connection to each node it sends
    /// to; keep the process's file descriptor limit above this plus its links and outbound
    /// connections.
    pub max_plain_connections: usize,
    /// How many of those may come from one IP address at once; beyond it a new one from that
    /// address is closed at once and counted like one beyond `max_plain_connections`. One host
    /// then cannot take every place and keep other clients, or a restarting node whose link
    /// counts as plain until its hello is accepted, out. A client endpoint holds one connection
    /// per node; many endpoints behind one NAT address need a higher value.
    pub max_plain_per_address: usize,
    /// How long data written to a connection may stay unacknowledged before the connection is
    /// given up and re-opened (`TCP_USER_TIMEOUT`). Without it a connection across a network
    /// partition stays open while TCP backs off its retransmissions exponentially (minutes
    /// between tries after a long partition), so after the partition heals the peer would hear
    /// from us only at TCP's next retry; re-opened, it hears within `connect_backoff_max` and
    /// `connect_timeout`. A peer that is alive but slow still acknowledges (even a zero window),
    /// so this does not cut it off.
    pub stall_timeout: Duration,
}

impl Default for TransportConfig {
    fn default() -> Self {
        Self {
            max_frame: 16 << 20,
            queue_per_peer: 4096,
            inbound_queue: 4096,
            plain_inbound_bytes: 64 << 20,
            link_inbound_bytes: 32 << 20,
            connect_backoff_min: Duration::from_millis(20),
            connect_backoff_max: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(5),
            stall_timeout: Duration::from_secs(5),
            max_plain_connections: 1024,
            max_plain_per_address: 64,
        }
    }
}

/// A configuration the transport cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The length prefix is a `u32`, so larger frames (with a link's tag) cannot be expressed.
    #[error("max_frame {0} exceeds the 4-byte length prefix (u32::MAX) less a link tag")]
    MaxFrameTooLarge(usize),
    /// A zero-capacity queue could never hold a frame.
    #[error("{0} must be at least 1")]
    EmptyQueue(&'static str),
    /// A zero initial backoff would retry a dead peer in a tight loop.
    #[error("connect_backoff_min must be positive")]
    ZeroBackoff,
    /// The cap must not be below the starting delay.
    #[error("connect_backoff_max ({max:?}) is below connect_backoff_min ({min:?})")]
    BackoffCapBelowMin { min: Duration, max: Duration },
    /// A zero timeout would fail every connection attempt.
    #[error("connect_timeout must be positive")]
    ZeroConnectTimeout,
    /// Zero would leave stalled connections to TCP's retransmission backoff; more than
    /// `u32::MAX` milliseconds is not expressible.
    #[error("stall_timeout must be between 1 ms and u32::MAX ms")]
    StallTimeout,
    /// Every inbound connection counts against the cap until its link hello is accepted, so
    /// with zero no connection, plain or link, could ever be accepted.
    #[error("max_plain_connections must be at least 1 (every inbound connection counts against it until its link hello is accepted)")]
    NoPlainConnections,
    /// The same, for one address's connections.
    #[error("max_plain_per_address must be at least 1 (every inbound connection counts against it until its link hello is accepted)")]
    NoPlainConnectionsPerAddress,
    /// A frame larger than its budget could never be read.
    #[error("{field} ({budget}) is below the largest frame it must hold ({frame}): raise {field} or lower max_frame")]
    BudgetBelowFrame {
        field: &'static str,
        budget: usize,
        frame: usize,
    },
}

impl TransportConfig {
    /// Checks the limits; [`Transport::bind`](crate::Transport::bind) refuses an invalid
    /// configuration rather than misbehaving later.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let largest = u32::MAX as usize - crate::link::TAG_LEN;
        if u32::try_from(self.max_frame).is_err() || self.max_frame > largest {
            return Err(ConfigError::MaxFrameTooLarge(self.max_frame));
        }
        if self.queue_per_peer == 0 {
            return Err(ConfigError::EmptyQueue("queue_per_peer"));
        }
        if self.inbound_queue == 0 {
            return Err(ConfigError::EmptyQueue("inbound_queue"));
        }
        if self.connect_backoff_min.is_zero() {
            return Err(ConfigError::ZeroBackoff);
        }
        if self.connect_backoff_max < self.connect_backoff_min {
            return Err(ConfigError::BackoffCapBelowMin {
                min: self.connect_backoff_min,
                max: self.connect_backoff_max,
            });
        }
        if self.connect_timeout.is_zero() {
            return Err(ConfigError::ZeroConnectTimeout);
        }
        let stall_ms = self.stall_timeout.as_millis();
        if stall_ms == 0 || u32::try_from(stall_ms).is_err() {
            return Err(ConfigError::StallTimeout);
        }
        if self.max_plain_connections == 0 {
            return Err(ConfigError::NoPlainConnections);
        }
        if self.max_plain_per_address == 0 {
            return Err(ConfigError::NoPlainConnectionsPerAddress);
        }
        let budgets = [
            (
                "plain_inbound_bytes",
                self.plain_inbound_bytes,
                self.max_frame,
            ),
            (
                "link_inbound_bytes",
                self.link_inbound_bytes,
                self.max_frame + crate::link::TAG_LEN,
            ),
        ];
        for (field, budget, frame) in budgets {
            if budget < frame {
                return Err(ConfigError::BudgetBelowFrame {
                    field,
                    budget,
                    frame,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_bad_limits_are_refused() {
        assert_eq!(TransportConfig::default().validate(), Ok(()));
        let bad = |f: fn(&mut TransportConfig)| {
            let mut c = TransportConfig::default();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert_eq!(
            bad(|c| c.queue_per_peer = 0),
            ConfigError::EmptyQueue("queue_per_peer")
        );
        assert_eq!(
            bad(|c| c.inbound_queue = 0),
            ConfigError::EmptyQueue("inbound_queue")
        );
        assert_eq!(
            bad(|c| c.connect_backoff_min = Duration::ZERO),
            ConfigError::ZeroBackoff
        );
        assert!(matches!(
            bad(|c| c.connect_backoff_max = Duration::from_millis(1)),
            ConfigError::BackoffCapBelowMin { .. }
        ));
        assert_eq!(
            bad(|c| c.connect_timeout = Duration::ZERO),
            ConfigError::ZeroConnectTimeout
        );
        assert_eq!(
            bad(|c| c.stall_timeout = Duration::from_micros(10)),
            ConfigError::StallTimeout
        );
        let refused = bad(|c| c.max_plain_connections = 0);
        assert_eq!(refused, ConfigError::NoPlainConnections);
        assert!(refused.to_string().starts_with("max_plain_connections "));
        let refused = bad(|c| c.max_plain_per_address = 0);
        assert_eq!(refused, ConfigError::NoPlainConnectionsPerAddress);
        assert!(refused.to_string().starts_with("max_plain_per_address "));
        #[cfg(target_pointer_width = "64")]
        assert!(matches!(
            bad(|c| c.max_frame = u32::MAX as usize + 1),
            ConfigError::MaxFrameTooLarge(_)
        ));
        // Room is left for the tag of an authenticated frame.
        assert!(matches!(
            bad(|c| c.max_frame = u32::MAX as usize - 15),
            ConfigError::MaxFrameTooLarge(_)
        ));
        let refused = bad(|c| c.plain_inbound_bytes = c.max_frame - 1);
        assert!(matches!(
            refused,
            ConfigError::BudgetBelowFrame {
                field: "plain_inbound_bytes",
                ..
            }
        ));
        assert!(refused
            .to_string()
            .contains("raise plain_inbound_bytes or lower max_frame"));
        let refused = bad(|c| c.link_inbound_bytes = c.max_frame);
        assert!(matches!(
            refused,
            ConfigError::BudgetBelowFrame {
                field: "link_inbound_bytes",
                ..
            }
        ));
        let largest = TransportConfig {
            max_frame: u32::MAX as usize - 16,
            plain_inbound_bytes: u32::MAX as usize,
            link_inbound_bytes: u32::MAX as usize,
            ..TransportConfig::default()
        };
        assert_eq!(largest.validate(), Ok(()));
    }
}
