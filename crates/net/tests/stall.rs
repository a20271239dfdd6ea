//! A connection across a partition: the peer neither acknowledges nor closes (its packets
//! vanish), unlike a peer that crashed or restarted. The transport must give such a connection
//! up after `stall_timeout` and re-open it, so that once the partition heals the peer hears from
//! us within the reconnection backoff, not at TCP's next exponentially delayed retransmission
//! (which, left alone, keeps the dead connection for about 15 minutes). The partition test
//! (crates/cloudbft/tests/partitions.rs) found this: replicas and database nodes cut off for
//! 20 s heard from their peers again only 5 to 25 s after the heal.
//!
//! The black hole is an nftables rule in a network namespace of the test thread's own (loopback
//! only), so the test needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and `nft`; without them it
//! fails and says so.

use net::{Transport, TransportConfig};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::time::timeout;

/// Upper bound for any single expected event.
const WAIT: Duration = Duration::from_secs(30);

/// Runs `program args` (in this thread's network namespace), feeding it `input`; panics if it
/// fails.
fn run(program: &str, args: &[&str], input: &str) {
    use std::io::Write;
    let path = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .map(|dir| std::path::Path::new(dir).join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("this test needs `{program}` (iproute2, nftables)"));
    let mut child = Command::new(path)
        .args(args)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn nft(script: &str) {
    run("nft", &["-f", "-"], script);
}

#[test]
fn a_connection_into_a_black_hole_is_reopened_after_the_stall_timeout() {
    std::thread::spawn(|| {
        // SAFETY: unshare(2) of this thread's network namespace only.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(
            rc,
            0,
            "this test needs a network namespace of its own (run it as root): {}",
            std::io::Error::last_os_error()
        );
        run("ip", &["link", "set", "dev", "lo", "up"], "");
        // Dropped on the way in, as a partition loses them: a packet dropped on the way out
        // would fail its send locally, which TCP treats as congestion of its own and retries
        // without ever timing out.
        nft("table inet hole {\n chain input { type filter hook input priority 0; }\n}\n");
        // The runtime's only thread is this one, in the new namespace.
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(black_hole());
    })
    .join()
    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
}

async fn black_hole() {
    let config = TransportConfig {
        connect_backoff_min: Duration::from_millis(10),
        connect_backoff_max: Duration::from_millis(100),
        connect_timeout: Duration::from_millis(300),
        stall_timeout: Duration::from_millis(500),
        ..TransportConfig::default()
    };
    let any = "127.0.0.1:0".parse().unwrap();
    let (receiver, mut inbound) = Transport::bind(any, config.clone()).await.unwrap();
    let (sender, _) = Transport::bind(any, config).await.unwrap();
    let to = receiver.local_addr();
    let recv = async |inbound: &mut tokio::sync::mpsc::Receiver<net::Inbound>| {
        timeout(WAIT, inbound.recv())
            .await
            .expect("timed out waiting for a frame")
            .expect("inbound closed")
            .frame
    };
    sender.send(to, b"before".to_vec());
    assert_eq!(recv(&mut inbound).await, b"before");

    // The partition: everything to the receiver's port vanishes, data and SYNs alike.
    nft(&format!(
        "add rule inet hole input tcp dport {} drop\n",
        to.port()
    ));
    // Frames written into the partition stay unacknowledged: the connection stalls and is given
    // up; the transport re-opens connections lazily, so it tries again (and fails, while the
    // partition lasts) at the next frame.
    timeout(WAIT, async {
        while sender.stats().connect_failures == 0 {
            sender.send(to, b"during".to_vec());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the stalled connection was not given up (no attempt to re-open it): {:?}",
            sender.stats()
        )
    });

    nft("flush chain inet hole input\n");
    sender.send(to, b"after".to_vec());
    // Frames written into the stalled connection are lost with it (the protocol above
    // retransmits what matters); those queued meanwhile and "after" come on a new connection.
    while recv(&mut inbound).await != b"after" {}
    assert!(
        sender.stats().reconnects >= 1,
        "the frame after the partition came on the stalled connection: {:?}",
        sender.stats()
    );
}
