//! Authenticated links: a handshake at the start of a connection, then a MAC on every frame, so
//! that the receiver knows which node opened the connection and that each frame is the next one
//! that node sent on it.
//!
//! Point-to-point protocol messages (COMMIT-DB, REPLY-COMMIT-DB) go to exactly one node, so a
//! signature that anybody could check is more than they need: a MAC under a key only the two
//! ends share proves the sender to the receiver at a fraction of the cost of an Ed25519
//! signature per message. The long-term Ed25519 keys are used once per connection, in the
//! handshake, through [`LinkKeys`] (implemented by the node driver, which holds them).
//!
//! # Handshake
//!
//! Every message is an ordinary length-prefixed frame ([`crate::frame`]). The opener speaks
//! first, so plain openers (clients, the operator) keep working: an acceptor whose first frame
//! does not start with [`HELLO_MAGIC`] treats the connection as plain.
//!
//! 1. HELLO, opener → acceptor: [`HELLO_MAGIC`] ‖ opener id (u64 BE) ‖ acceptor id the opener
//!    expects (u64 BE) ‖ the opener's fresh X25519 public key (32 bytes). See [`Hello`].
//! 2. REPLY, acceptor → opener: [`REPLY_MAGIC`] ‖ the acceptor's fresh X25519 public key.
//!    The acceptor refuses (closes) instead if it has no keys, if the hello names another
//!    acceptor, or if the hello is malformed.
//! 3. AUTH, opener → acceptor: the opener's Ed25519 signature over the [`transcript`]
//!    ([`TRANSCRIPT_MAGIC`] ‖ opener id ‖ acceptor id ‖ opener key ‖ acceptor key). The
//!    acceptor accepts when [`LinkKeys::verify`] does.
//! 4. ACCEPT, acceptor → opener: the frame [`ACCEPT`], after which the opener sends data. An
//!    acceptor that refuses the signature closes the connection instead, so the opener counts
//!    a failed connection attempt and backs off (a node that another does not know yet, in a
//!    reconfiguration, retries at the backoff's pace, not in a loop).
//!
//! Both ends then derive the link key ([`derive_key`]): HKDF-SHA256 of the X25519 shared secret,
//! salted with SHA-256 of the transcript, info [`KEY_INFO`].
//!
//! # Frames
//!
//! Each data frame's payload is `payload ‖ tag`, the tag being the first [`TAG_LEN`] bytes of
//! HMAC-SHA256(link key, seq (u64 BE) ‖ payload), where seq counts the data frames of the
//! connection from 0 ([`Sealer`], [`Unsealer`]). A wrong tag closes the connection.
//!
//! # Why this is enough
//!
//! - The acceptor's ephemeral key is fresh for every connection, so the transcript, the
//!   signature and the link key are too: a handshake or frame recorded on one connection is
//!   useless on another (its tag is under another key).
//! - The sequence number in every tag stops a frame from being replayed, reordered or dropped
//!   within one connection without the receiver noticing.
//! - The signed transcript names the acceptor, so a node that receives a handshake cannot relay
//!   it to a third node to open a link in the opener's name: the third node sees its own id is
//!   not the one signed for.
//! - Both ephemeral keys are in the signed transcript, so a man in the middle cannot substitute
//!   his own to learn the link key: the acceptor would check the opener's signature over a
//!   transcript that is not the one signed.
//! - Only the opener signs. Links are one-way (the acceptor sends nothing but its reply and its
//!   accept) and frames are not secret (they are not encrypted), so an impostor acceptor could
//!   only drop what it receives, which any network attacker can do anyway.

mod crypto;
mod handshake;
mod messages;

pub use crypto::{derive_key, Ephemeral, LinkKey, Sealer, Unsealer};
pub(crate) use handshake::accept_link;
pub use handshake::open_link;
pub use messages::{
    is_hello, parse_reply, reply, transcript, Hello, ACCEPT, HELLO_LEN, HELLO_MAGIC, KEY_INFO,
    PUBLIC_KEY_LEN, REPLY_LEN, REPLY_MAGIC, SIGNATURE_LEN, TRANSCRIPT_MAGIC,
};

use crate::frame::FrameError;
use std::net::SocketAddr;

/// Bytes of the MAC appended to each data frame on an authenticated link: 128 bits, far beyond
/// what an attacker can guess before the first wrong guess closes the connection.
pub const TAG_LEN: usize = 16;

/// Who this node is on authenticated links and how it proves it (implemented by node drivers
/// with their configured Ed25519 keys).
///
/// The transport never holds long-term keys itself: signing and verifying stay with the node
/// driver, which already owns the keys and the cluster's membership.
pub trait LinkKeys: Send + Sync + std::fmt::Debug + 'static {
    /// This node's identity (its node id number).
    fn me(&self) -> u64;
    /// The identity that listens at `addr` when connections to it must be authenticated;
    /// `None` opens a plain connection (clients, the operator, unknown addresses).
    fn identity_at(&self, addr: SocketAddr) -> Option<u64>;
    /// This node's Ed25519 signature over a handshake transcript.
    fn sign(&self, transcript: &[u8]) -> [u8; 64];
    /// True when `identity` may open links to this node and `signature` is its signature over
    /// `transcript` (false for unknown identities).
    fn verify(&self, identity: u64, transcript: &[u8], signature: &[u8; 64]) -> bool;
}

/// Why a link handshake or an authenticated frame was refused. Each closes its connection.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// A frame starting with [`HELLO_MAGIC`] that is not exactly a hello.
    #[error("malformed link hello ({len} bytes)")]
    MalformedHello { len: usize },
    /// A hello arrived at a transport bound without link keys.
    #[error("link hello refused: this transport has no link keys")]
    NoKeys,
    /// The hello was meant for another node (perhaps relayed by it).
    #[error("link hello names acceptor {named}, but this node is {me}")]
    WrongAcceptor { named: u64, me: u64 },
    /// The acceptor's answer is not a reply.
    #[error("malformed link reply or accept")]
    MalformedReply,
    /// The opener's authentication is not a 64-byte signature.
    #[error("malformed link authentication ({len} bytes)")]
    MalformedAuth { len: usize },
    /// [`LinkKeys::verify`] refused the opener: unknown identity or bad signature.
    #[error("node {0} is not allowed to open links here or its handshake signature is invalid")]
    Unauthenticated(u64),
    /// The X25519 agreement or key derivation failed (an invalid public key, or no randomness).
    #[error("link key agreement failed")]
    KeyAgreement,
    /// A data frame whose tag is wrong: forged, tampered with, replayed, reordered, from another
    /// connection, or after a dropped frame.
    #[error("wrong tag on an authenticated frame")]
    BadTag,
    /// The peer did not complete its side of the handshake in time.
    #[error("link handshake timed out")]
    Timeout,
    /// The connection ended during the handshake.
    #[error("connection closed during the link handshake")]
    Closed,
    /// A handshake frame could not be read or written.
    #[error(transparent)]
    Frame(#[from] FrameError),
}
