//! Wire encoding shared by every cloudbft role.
//!
//! Two layers, both hostile-input safe:
//! - [`frame`]: length-prefixed frames on a byte stream, with a hard size limit so that a peer
//!   cannot make us allocate more than we agreed to read;
//! - [`codec`]: the canonical encoding of a message inside a frame (postcard over serde), which
//!   rejects trailing bytes so that one message has exactly one accepted encoding prefix;
//!   [`bytes`] writes byte strings in one piece.

pub mod bytes;
pub mod codec;
pub mod frame;
pub mod testing;

pub use codec::{decode, encode, CodecError};
pub use frame::{read_frame, write_frame, FrameError};
