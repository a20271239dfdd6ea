//! The handshake's messages and transcript, byte for byte. Each message carries a versioned
//! magic so that it can never be mistaken for another message or for a protocol frame.

use super::LinkError;

/// Start of a HELLO frame; a first frame starting with anything else opens a plain connection.
pub const HELLO_MAGIC: &[u8] = b"cloudbft/link-hello/v1";
/// Start of a REPLY frame.
pub const REPLY_MAGIC: &[u8] = b"cloudbft/link-reply/v1";
/// The whole ACCEPT frame: the acceptor checked the opener's signature and takes its frames.
pub const ACCEPT: &[u8] = b"cloudbft/link-accept/v1";
/// Start of the transcript both ends compute and the opener signs.
pub const TRANSCRIPT_MAGIC: &[u8] = b"cloudbft/link/v1";
/// HKDF info of the link key, binding the key to its single use.
pub const KEY_INFO: &[u8] = b"cloudbft/link-key/v1";
/// Bytes of an X25519 public key.
pub const PUBLIC_KEY_LEN: usize = 32;
/// Bytes of an Ed25519 signature (the AUTH frame's payload).
pub const SIGNATURE_LEN: usize = 64;
/// Exact payload length of a HELLO frame.
pub const HELLO_LEN: usize = HELLO_MAGIC.len() + 8 + 8 + PUBLIC_KEY_LEN;
/// Exact payload length of a REPLY frame.
pub const REPLY_LEN: usize = REPLY_MAGIC.len() + PUBLIC_KEY_LEN;

/// The opener's first frame: who it is, whom it expects to reach, and its ephemeral key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The opener's identity.
    pub opener: u64,
    /// The identity the opener expects at the address it connected to; an acceptor with
    /// another identity refuses, so a hello cannot be relayed to a third node.
    pub acceptor: u64,
    /// The opener's ephemeral X25519 public key.
    pub ephemeral: [u8; PUBLIC_KEY_LEN],
}

impl Hello {
    /// The HELLO frame's payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HELLO_LEN);
        out.extend_from_slice(HELLO_MAGIC);
        out.extend_from_slice(&self.opener.to_be_bytes());
        out.extend_from_slice(&self.acceptor.to_be_bytes());
        out.extend_from_slice(&self.ephemeral);
        out
    }

    /// Parses a frame that [`is_hello`]; anything but the exact length is malformed.
    pub fn parse(frame: &[u8]) -> Result<Hello, LinkError> {
        if frame.len() != HELLO_LEN || !is_hello(frame) {
            return Err(LinkError::MalformedHello { len: frame.len() });
        }
        // In bounds: the length is exactly that of magic, two ids and a key.
        let fields = &frame[HELLO_MAGIC.len()..];
        let mut ephemeral = [0u8; PUBLIC_KEY_LEN];
        ephemeral.copy_from_slice(&fields[16..]);
        Ok(Hello {
            opener: u64_be(&fields[..8]),
            acceptor: u64_be(&fields[8..16]),
            ephemeral,
        })
    }
}

/// True when `frame` claims to be a HELLO (starts with [`HELLO_MAGIC`]), well-formed or not.
pub fn is_hello(frame: &[u8]) -> bool {
    frame.starts_with(HELLO_MAGIC)
}

/// The REPLY frame's payload carrying the acceptor's ephemeral public key.
pub fn reply(ephemeral: &[u8; PUBLIC_KEY_LEN]) -> Vec<u8> {
    let mut out = Vec::with_capacity(REPLY_LEN);
    out.extend_from_slice(REPLY_MAGIC);
    out.extend_from_slice(ephemeral);
    out
}

/// The acceptor's ephemeral public key from a REPLY frame.
pub fn parse_reply(frame: &[u8]) -> Result<[u8; PUBLIC_KEY_LEN], LinkError> {
    frame
        .strip_prefix(REPLY_MAGIC)
        .and_then(|key| <[u8; PUBLIC_KEY_LEN]>::try_from(key).ok())
        .ok_or(LinkError::MalformedReply)
}

/// What the opener signs and both ends salt the link key with: both identities and both
/// ephemeral keys, so the signature is good for this connection to this acceptor only.
pub fn transcript(
    opener: u64,
    acceptor: u64,
    opener_ephemeral: &[u8; PUBLIC_KEY_LEN],
    acceptor_ephemeral: &[u8; PUBLIC_KEY_LEN],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(TRANSCRIPT_MAGIC.len() + 16 + 2 * PUBLIC_KEY_LEN);
    out.extend_from_slice(TRANSCRIPT_MAGIC);
    out.extend_from_slice(&opener.to_be_bytes());
    out.extend_from_slice(&acceptor.to_be_bytes());
    out.extend_from_slice(opener_ephemeral);
    out.extend_from_slice(acceptor_ephemeral);
    out
}

/// An 8-byte big-endian integer (callers pass exactly 8 bytes).
fn u64_be(bytes: &[u8]) -> u64 {
    let mut be = [0u8; 8];
    be.copy_from_slice(bytes);
    u64::from_be_bytes(be)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips_and_only_the_exact_length_parses() {
        let hello = Hello {
            opener: 7,
            acceptor: u64::MAX - 1,
            ephemeral: [9; 32],
        };
        let frame = hello.encode();
        assert_eq!(frame.len(), HELLO_LEN);
        assert!(is_hello(&frame));
        assert_eq!(Hello::parse(&frame).unwrap(), hello);
        for len in [HELLO_MAGIC.len(), HELLO_LEN - 1] {
            assert!(matches!(
                Hello::parse(&frame[..len]),
                Err(LinkError::MalformedHello { .. })
            ));
        }
        let mut long = frame.clone();
        long.push(0);
        assert!(is_hello(&long));
        assert!(Hello::parse(&long).is_err());
        assert!(!is_hello(b"cloudbft/link-hello/v"));
        assert!(!is_hello(&reply(&[1; 32])));
    }

    #[test]
    fn reply_round_trips_and_anything_else_is_refused() {
        assert_eq!(parse_reply(&reply(&[3; 32])).unwrap(), [3; 32]);
        assert_eq!(reply(&[3; 32]).len(), REPLY_LEN);
        let hello = Hello {
            opener: 1,
            acceptor: 2,
            ephemeral: [3; 32],
        };
        for bad in [&reply(&[3; 32])[..REPLY_LEN - 1], b"", &hello.encode()] {
            assert!(matches!(parse_reply(bad), Err(LinkError::MalformedReply)));
        }
    }

    #[test]
    fn transcript_layout() {
        let t = transcript(1, 2, &[3; 32], &[4; 32]);
        let mut expected = b"cloudbft/link/v1".to_vec();
        expected.extend_from_slice(&1u64.to_be_bytes());
        expected.extend_from_slice(&2u64.to_be_bytes());
        expected.extend_from_slice(&[3; 32]);
        expected.extend_from_slice(&[4; 32]);
        assert_eq!(t, expected);
    }
}
