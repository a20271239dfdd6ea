//! Port blocks for the multi-process tests, reserved across processes.
//!
//! A cluster listens on fixed ports (its nodes from a base, their metrics at base + 1000, the
//! gateway at base + 2000). Tests of one binary run in parallel, and test binaries of other
//! checkouts (or a developer's own cluster) may run on the same machine at the same time, so a
//! test takes a block by holding an exclusive `flock` on a file named after it and by checking
//! that the block's ports are free: no two holders ever share a block, and a block left busy by
//! a stray process is skipped instead of failing the test with "address in use".
//!
//! The blocks lie above Linux's ephemeral range (32768-60999, where outgoing connections get
//! their ports) and swtpm's (10000-32766).

use std::fs::{File, OpenOptions};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// First node port of the first block.
const FIRST_BASE: u16 = 61_000;
/// Ports per block: enough for the nodes of the largest test cluster (f=1, three groups).
const BLOCK: u16 = 50;
/// Blocks: bases 61000-61950, metrics 62000-62999, gateways 63000-63950.
const BLOCKS: u16 = 20;
/// How long to wait for a free block when every block is held by other tests.
const WAIT: Duration = Duration::from_secs(600);

/// A reserved block of ports, released when the last clone is dropped (a [`super::Demo`] keeps
/// one, so a restarted cluster can take the same ports).
#[derive(Clone)]
pub struct Ports {
    /// The first node port (`--base-port`).
    pub base: u16,
    /// The gateway's port.
    pub gateway: u16,
    _lock: Arc<File>,
}

impl Ports {
    /// Reserves a free block, waiting while every block is held by another test.
    pub fn reserve() -> Ports {
        let dir = std::env::temp_dir().join("cloudbft-test-ports");
        std::fs::create_dir_all(&dir).expect("creating the port-lock directory");
        let started = Instant::now();
        loop {
            for block in 0..BLOCKS {
                let base = FIRST_BASE + block * BLOCK;
                if let Some(lock) = try_lock(dir.join(format!("{base}.lock"))) {
                    if all_free(base) {
                        return Ports {
                            base,
                            gateway: base + 2000,
                            _lock: Arc::new(lock),
                        };
                    }
                }
            }
            assert!(
                started.elapsed() < WAIT,
                "no free block of test ports in {FIRST_BASE}-{} for {WAIT:?}: other test runs \
                 hold them all, or stray `cloudbft` processes listen there (see `ss -ltnp`)",
                FIRST_BASE + BLOCKS * BLOCK + 2000
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// An exclusive lock on `path`, or `None` if another process (or test) holds it. The kernel
/// releases it when the holder exits, however it exits.
fn try_lock(path: PathBuf) -> Option<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    // SAFETY: flock(2) on a file descriptor we own.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    locked.then_some(file)
}

/// Whether every port of the block (nodes, metrics, gateway) can be bound now.
fn all_free(base: u16) -> bool {
    (0..BLOCK)
        .flat_map(|i| [base + i, base + 1000 + i])
        .chain([base + 2000])
        .all(|port| TcpListener::bind(("127.0.0.1", port)).is_ok())
}
