//! What the fuzz targets share: the round-trip checks they make on whatever a decoder accepts,
//! and the seed inputs (`seeds`) that `examples/seeds.rs` writes to `fuzz/corpus/`.
//!
//! Every check panics on a violation, which is what libFuzzer records as a crash: accepting
//! bytes that do not re-encode to themselves means one message has two accepted encodings.

pub mod seeds;

use proto::{Message, NewView, MAX_NESTED_VIEWS};
use serde::{de::DeserializeOwned, Serialize};
use std::fmt::Debug;
use std::future::Future;
use std::task::{Context, Poll, Waker};

/// Decodes `bytes` with the wire decoder every role uses and, when it accepts them, checks that
/// the value re-encodes to exactly these bytes: anything accepted is the canonical encoding.
pub fn canonical<T>(bytes: &[u8]) -> Option<T>
where
    T: Serialize + DeserializeOwned + Debug,
{
    let value: T = wire::decode(bytes).ok()?;
    let again = wire::encode(&value).expect("an accepted value encodes");
    assert!(
        again == bytes,
        "accepted bytes are not the canonical encoding of {value:?}:\n accepted {bytes:02x?}\n canonical {again:02x?}"
    );
    Some(value)
}

/// Follows the encoded NEW-VIEWs a message carries (VIEW-CHANGE bases, a RECOVERY-STATE's base
/// and proposal) one level at a time, as validators do, down to [`MAX_NESTED_VIEWS`]: each
/// accepted one must be canonical too.
pub fn check_nested(message: &Message) {
    match message {
        Message::ViewChange(vc) => view_change_bases(std::slice::from_ref(vc), 0),
        Message::NewView(nv) => view_change_bases(&nv.view_changes, 0),
        Message::RecoveryState(state) => {
            if let proto::Proposal::NewView(nv) = &state.at {
                view_change_bases(&nv.view_changes, 0);
            }
            if let Some(base) = &state.base {
                nested_new_view(base, 0);
            }
        }
        _ => {}
    }
}

/// Decodes one encoded NEW-VIEW at `depth` as validators do, checks it, and follows its bases.
pub fn nested_new_view(bytes: &[u8], depth: usize) {
    if depth >= MAX_NESTED_VIEWS {
        return;
    }
    if let Some(nv) = NewView::decode(bytes) {
        assert!(
            nv.encode() == bytes,
            "a nested NEW-VIEW decodes from non-canonical bytes"
        );
        view_change_bases(&nv.view_changes, depth + 1);
    }
}

fn view_change_bases(view_changes: &[proto::ViewChange], depth: usize) {
    for vc in view_changes {
        if let Some(proto::Base::Carried(base)) = &vc.body.base {
            nested_new_view(base, depth);
        }
    }
}

/// Runs a future that never waits (an async reader over bytes in memory) to completion.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("a reader over bytes in memory waited"),
    }
}

/// Whether `name` is a column name the state install may put into SQL: the rule stated in
/// docs/state-transfer.md, written out here independently of `dbvote::transfer::check_rows`
/// so that the fuzz target checks the implementation against it.
pub fn plain_identifier(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
}

/// One step of the `voter_transfer` target: what a database node's voter core receives from
/// the network (STATE-CHUNKs, DB-CHECKPOINTs, STATE-REQUESTs from database node 11 + `from` % 3,
/// signed with that node's key unless `forged`; COMMIT-DBs of f+1 group members) or from its
/// own driver (ticks, executions, installs, snapshots). The target decodes a list of them with
/// the wire codec, so the fuzzer drives whole state transfers.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum VoterEvent {
    Chunk {
        from: u8,
        forged: bool,
        order: u64,
        index: u32,
        last: bool,
        rows: proto::TableRows,
    },
    Checkpoint {
        from: u8,
        forged: bool,
        target: u64,
        order: u64,
        digest: Option<[u8; 32]>,
    },
    Request {
        from: u8,
        target: u64,
        sender: u8,
    },
    /// Order `order` decided at `position` of partition `partition % 2`.
    Decide {
        order: u64,
        partition: u8,
        position: u64,
    },
    Ticks(u8),
    Executed(u64),
    Installed {
        order: u64,
        last_seq: Vec<u64>,
    },
    InstallFailed(u64),
    SnapshotPinned(u64),
}
