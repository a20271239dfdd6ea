//! CloudBFT's protocol messages (REQUEST, PREPARE, COMMIT, COMMIT-DB, REPLY-COMMIT-DB, REPLY), the
//! keys that authenticate them, and the cluster configuration. `docs/protocol.md` describes the
//! protocol these types carry.

pub mod config;
pub mod crypto;
pub mod ids;
pub mod keys;
pub mod message;
pub mod testing;

pub use crypto::{PublicKey, Signature, SigningKey};
pub use ids::{ClientId, ConfigEpoch, GroupId, NodeId, PartitionId, View};
pub use message::{
    Commit, CommitDb, Envelope, Execution, FetchCommits, FetchPrepares, Message, PartitionRule,
    Prepare, PrepareEntry, Reply, ReplyCommitDb, Request,
};
