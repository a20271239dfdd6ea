//! Canonical message encoding (postcard) with strict decoding.

use serde::{de::DeserializeOwned, Serialize};

/// A message that could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The bytes are not a valid encoding of the expected message type.
    #[error("malformed message: {0}")]
    Malformed(#[from] postcard::Error),
    /// A valid message was followed by extra bytes: rejected so that every accepted message has
    /// one encoding and nothing can be smuggled after it.
    #[error("malformed message: {0} trailing bytes after the message")]
    TrailingBytes(usize),
    /// The bytes decode, but are not how the message encodes (postcard also reads a varint with
    /// redundant continuation bytes, such as `80 00` for 0): rejected so that every accepted
    /// message has exactly one encoding, whatever a peer or a digest over the bytes assumes.
    #[error("malformed message: not the canonical encoding of the message")]
    NonCanonical,
}

/// Encodes `value` canonically.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    encode_into(value, Vec::with_capacity(FIRST_CAPACITY))
}

/// What an encoding's buffer starts with: most messages fit, so they are written without the
/// copies of a buffer that doubles from a few bytes up.
const FIRST_CAPACITY: usize = 256;

/// Encodes `value` at the end of `buffer`.
fn encode_into<T: Serialize>(value: &T, buffer: Vec<u8>) -> Result<Vec<u8>, CodecError> {
    Ok(postcard::serialize_with_flavor(value, Buffer(buffer))?)
}

/// postcard's output into a `Vec` that may already hold the room it needs.
struct Buffer(Vec<u8>);

impl postcard::ser_flavors::Flavor for Buffer {
    type Output = Vec<u8>;

    #[inline(always)]
    fn try_push(&mut self, byte: u8) -> postcard::Result<()> {
        self.0.push(byte);
        Ok(())
    }

    #[inline(always)]
    fn try_extend(&mut self, bytes: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<Vec<u8>> {
        Ok(self.0)
    }
}

/// Decodes exactly one `T` from `bytes`, which must be its canonical encoding: trailing bytes
/// and any other encoding of the same value (see [`CodecError::NonCanonical`]) are errors.
pub fn decode<T: Serialize + DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, rest) = postcard::take_from_bytes(bytes)?;
    if !rest.is_empty() {
        return Err(CodecError::TrailingBytes(rest.len()));
    }
    // Re-encoding costs one pass over the message, far less than checking its signatures; the
    // canonical encoding is exactly as long as the input, so its buffer never grows.
    if encode_into(&value, Vec::with_capacity(bytes.len()))? != bytes {
        return Err(CodecError::NonCanonical);
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Sample {
        A { x: u64, name: String },
        B(Vec<u8>),
    }

    #[test]
    fn round_trip_and_trailing_bytes() {
        let v = Sample::A {
            x: 7,
            name: "n".into(),
        };
        let mut bytes = encode(&v).unwrap();
        assert_eq!(decode::<Sample>(&bytes).unwrap(), v);
        bytes.push(0);
        assert!(matches!(
            decode::<Sample>(&bytes),
            Err(CodecError::TrailingBytes(1))
        ));
    }

    #[test]
    fn redundant_varint_bytes_are_refused() {
        // Found by the fuzz targets: `80 00` is a 0 that postcard reads, but never writes.
        let v = Sample::B(Vec::new());
        assert_eq!(encode(&v).unwrap(), [1, 0]);
        for overlong in [
            &[1, 0x80, 0x00][..],
            &[0x81, 0x00, 0x00],
            &[1, 0x80, 0x80, 0x00],
        ] {
            assert!(matches!(
                decode::<Sample>(overlong),
                Err(CodecError::NonCanonical)
            ));
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode::<Sample>(&bytes);
        }

        #[test]
        fn truncation_is_an_error(payload in proptest::collection::vec(any::<u8>(), 1..64)) {
            let bytes = encode(&Sample::B(payload)).unwrap();
            for cut in 0..bytes.len() {
                prop_assert!(decode::<Sample>(&bytes[..cut]).is_err());
            }
        }
    }
}
