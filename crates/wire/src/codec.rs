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
}

/// Encodes `value` canonically.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    Ok(postcard::to_stdvec(value)?)
}

/// Decodes exactly one `T` from `bytes`; trailing bytes are an error.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, rest) = postcard::take_from_bytes(bytes)?;
    if rest.is_empty() {
        Ok(value)
    } else {
        Err(CodecError::TrailingBytes(rest.len()))
    }
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
