//! CloudBFT's protocol messages (REQUEST, PREPARE, COMMIT, COMMIT-DB, REPLY-COMMIT-DB, REPLY, the
//! view change's, and the database nodes' state transfer), the
//! keys that authenticate them, and the cluster configuration. `docs/protocol.md` describes the
//! protocol these types carry.

pub mod batch;
pub mod config;
pub mod crypto;
pub mod ids;
pub mod keys;
pub mod limits;
pub mod message;
pub mod reconfig;
pub mod recovery;
pub mod state;
pub mod testing;
pub mod view;

pub use batch::BatchSignature;
pub use crypto::{PublicKey, Signature, SigningKey};
pub use ids::{ClientId, ConfigEpoch, GroupId, NodeId, PartitionId, View};
pub use message::{
    chain, chain_start, Commit, CommitDb, Decided, Envelope, Execution, FetchCommits,
    FetchPrepares, Message, PartitionRule, Prepare, PrepareEntry, Reply, ReplyCommitDb, Request,
    RequestBody,
};
pub use reconfig::{
    ConfigRequest, Configure, EpochClose, EpochStarted, PositionReport, PositionRequest,
    Reconfigure,
};
pub use recovery::{Incarnation, Join, RecoveryRequest, RecoveryState};
pub use state::{DbCheckpoint, StateChunk, StateRequest, TableRows, Value, MAX_CHUNK_BYTES};
pub use view::{
    Anchor, Base, Checkpoint, Lineage, NewView, Proposal, ReqViewChange, StableCheckpoint,
    ViewChange, ViewChangeBody, Warranted, CHECKPOINT_INTERVAL, MAX_NESTED_VIEWS, VIEW_CHANGE_SPAN,
};
