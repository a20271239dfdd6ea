//! Database-node state transfer (docs/state-transfer.md): STATE-REQUEST, DB-CHECKPOINT and
//! STATE-CHUNK.
//!
//! A database node that cannot catch up from re-sent COMMIT-DBs asks the others for their state
//! after a global order; each answers with its signed state digest there, and one of them,
//! named in the request, streams its rows. The lagging node installs the rows only if they
//! hash to a digest that f+1 distinct database nodes signed.

use crate::crypto::{PublicKey, Signature, SigningKey};
use crate::ids::NodeId;
use crate::message::canonical;
use serde::{Deserialize, Serialize};

/// The most rows' bytes a sender puts in one STATE-CHUNK: far below the transport's frame
/// limit (16 MiB), so that one chunk never blocks a connection for long.
pub const MAX_CHUNK_BYTES: usize = 256 << 10;

/// `db_node` asks every other database node for its state after global order `target_order`,
/// and `sender` (one of them, rotated on each attempt) to stream the rows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRequest {
    pub db_node: NodeId,
    pub target_order: u64,
    pub sender: NodeId,
    pub signature: Signature,
}

/// A database node's answer to a STATE-REQUEST for `target`.
///
/// With a digest, `order == target` and the digest is the node's state digest (SHA-256 over
/// every state table and the progress table in key order) after executing exactly the orders
/// `1..=order` (global orders are dense, so that state is the same on every correct node). Without one the node
/// had already released orders up to `order > target` to its executor and cannot produce the
/// state at `target` any more: the requester asks again with a higher target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DbCheckpoint {
    pub db_node: NodeId,
    pub target: u64,
    pub order: u64,
    pub digest: Option<[u8; 32]>,
    pub signature: Signature,
}

/// One value of a row, in the types the state digest distinguishes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Value {
    Null,
    Int(i64),
    Bool(bool),
    /// A floating-point number's bits (applications should not use them; present so that no
    /// column is skipped).
    Real(u64),
    Text(String),
    Bytes(Vec<u8>),
}

impl Value {
    /// Roughly what the value costs on the wire, to size chunks.
    pub fn weight(&self) -> usize {
        match self {
            Value::Text(s) => s.len() + 9,
            Value::Bytes(b) => b.len() + 9,
            _ => 9,
        }
    }
}

/// Consecutive rows, in key order, of one table of the transferred state: the application's
/// state tables in their digest order, then the executor's progress table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableRows {
    /// Index of the table in that list.
    pub table: u32,
    /// Column names, in the order of each row's values.
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Value>>,
}

/// The `index`-th chunk (from 0) of the rows that `db_node` streams of its state after `order`;
/// `last` on the final one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateChunk {
    pub db_node: NodeId,
    pub order: u64,
    pub index: u32,
    pub last: bool,
    pub rows: TableRows,
    pub signature: Signature,
}

crate::node_signed!(StateRequest, b"cloudbft/state-request/v1", |m| (
    m.db_node,
    m.target_order,
    m.sender
));
crate::node_signed!(DbCheckpoint, b"cloudbft/db-checkpoint/v1", |m| (
    m.db_node, m.target, m.order, m.digest
));
crate::node_signed!(StateChunk, b"cloudbft/state-chunk/v1", |m| (
    m.db_node, m.order, m.index, m.last, &m.rows
));

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Envelope, Message};

    fn chunk(key: &SigningKey) -> StateChunk {
        StateChunk {
            db_node: NodeId(11),
            order: 7,
            index: 0,
            last: true,
            rows: TableRows {
                table: 1,
                columns: vec!["id".into(), "name".into()],
                rows: vec![vec![Value::Int(1), Value::Text("a".into())]],
            },
            signature: Signature([0; 64]),
        }
        .sign(key)
    }

    #[test]
    fn signatures_cover_every_field() {
        let key = SigningKey::from_seed([5; 32]);
        let pk = key.public_key();
        let c = chunk(&key);
        assert!(c.verify(&pk));
        let mut tampered = c.clone();
        tampered.rows.rows[0][0] = Value::Int(2);
        assert!(!tampered.verify(&pk));
        for t in [
            StateChunk {
                index: 1,
                ..c.clone()
            },
            StateChunk {
                last: false,
                ..c.clone()
            },
            StateChunk {
                order: 8,
                ..c.clone()
            },
        ] {
            assert!(!t.verify(&pk));
        }
        let cp = DbCheckpoint {
            db_node: NodeId(12),
            target: 7,
            order: 7,
            digest: Some([1; 32]),
            signature: Signature([0; 64]),
        }
        .sign(&key);
        assert!(cp.verify(&pk));
        assert!(!DbCheckpoint {
            digest: Some([2; 32]),
            ..cp.clone()
        }
        .verify(&pk));
        assert!(!DbCheckpoint {
            digest: None,
            ..cp.clone()
        }
        .verify(&pk));
        assert!(!DbCheckpoint { target: 6, ..cp }.verify(&pk));
        let req = StateRequest {
            db_node: NodeId(13),
            target_order: 7,
            sender: NodeId(11),
            signature: Signature([0; 64]),
        }
        .sign(&key);
        assert!(req.verify(&pk));
        assert!(!StateRequest {
            sender: NodeId(12),
            ..req.clone()
        }
        .verify(&pk));
        assert!(!StateRequest {
            target_order: 8,
            ..req
        }
        .verify(&pk));
    }

    #[test]
    fn a_full_chunk_fits_a_frame_and_round_trips() {
        let key = SigningKey::from_seed([5; 32]);
        let mut c = chunk(&key);
        c.rows.rows = vec![vec![Value::Bytes(vec![7; MAX_CHUNK_BYTES])]];
        let message = Message::StateChunk(c.sign(&key));
        let bytes = Envelope::encode(&message);
        assert!(bytes.len() < 1 << 20);
        assert_eq!(Envelope::decode(&bytes).unwrap(), message);
    }
}
