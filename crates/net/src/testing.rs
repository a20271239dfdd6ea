//! Helpers for tests that need an address before anything listens there.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

/// Ports handed out by [`unused_loopback_addr`]: above Linux's ephemeral range (32768-60999)
/// and the port blocks of cloudbft's multi-process tests (61000-63999).
const FIRST: u16 = 64_000;
const COUNT: u16 = 1_500;

/// A loopback address nobody listens on now, for a test that must name an address (in a
/// configuration, or as an absent peer) before it binds it.
///
/// Asking the kernel for port 0 and releasing it races: the port lies in the ephemeral range,
/// so any outgoing connection of a test running in parallel may take it as its source port
/// (binding it later fails with "address in use", and connecting to it may even connect the
/// socket to itself). Ports here lie outside that range; each call of one process takes the
/// next one, from a start that depends on the process id, and skips ports that are busy.
pub fn unused_loopback_addr() -> SocketAddr {
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id();
    for _ in 0..COUNT {
        let offset = start.wrapping_add(CALLS.fetch_add(1, Ordering::Relaxed)) % u32::from(COUNT);
        let port = FIRST + offset as u16;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        if TcpListener::bind(addr).is_ok() {
            return addr;
        }
    }
    panic!("no free port in 127.0.0.1:{FIRST}-{}", FIRST + COUNT - 1)
}
