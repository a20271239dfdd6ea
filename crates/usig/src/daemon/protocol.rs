//! The usigd socket protocol: length-prefixed frames carrying postcard-encoded requests and
//! responses. Only a message digest crosses the socket, never the message.

use serde::{Deserialize, Serialize};

/// Bumped on any incompatible change; a client and usigd must agree at `Hello`.
pub const PROTOCOL_VERSION: u16 = 1;
/// Largest frame either side sends or accepts (a TPM warrant is about 300 bytes; an
/// enrollment record with the TPM's evidence, in hex, up to a few KiB with a large EK
/// certificate).
pub const MAX_FRAME: usize = 16384;

/// What a VM asks usigd.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// First request on a connection: the identity the VM believes it has. usigd refuses a
    /// connection whose claimed identity is not the one its socket serves.
    Hello { version: u16, identity: u64 },
    /// Warrant this SHA-256 message digest with the next counter.
    Create { digest: [u8; 32] },
    /// The last warrant issued, with its digest (to recover a reply lost in a restart).
    Last,
    /// The identity's enrollment record as TOML.
    Enrollment,
    /// The USIG epoch the identity warrants in now (for the cluster configuration).
    Epoch,
}

/// What usigd answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Welcome,
    /// A canonically encoded [`crate::UniqueWarrant`].
    Warrant {
        warrant: Vec<u8>,
    },
    Last {
        last: Option<([u8; 32], Vec<u8>)>,
    },
    Enrollment {
        toml: String,
    },
    Epoch {
        epoch: u64,
    },
    /// The request failed; the connection stays usable unless the request was malformed.
    Error {
        message: String,
    },
}
