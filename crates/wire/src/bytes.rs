//! Byte strings as one piece: `#[serde(with = "wire::bytes")]` on a `Vec<u8>` field.
//!
//! serde writes a `Vec<u8>` as a sequence of `u8`s, one call per byte, and reads it back the
//! same way; for the operations, pages and results that every REQUEST, REPLY and
//! REPLY-COMMIT-DB carries that was a tenth of the load driver's CPU (`perf`, 2026-11-28).
//! postcard writes a byte string exactly as such a sequence (its length as a varint, then the
//! bytes), so these helpers change no encoding: what was signed or warranted before reads and
//! verifies the same. Readers that hand a sequence instead of bytes (JSON) still work.

use serde::de::{Error, SeqAccess, Visitor};
use serde::{Deserializer, Serialize, Serializer};
use std::fmt;

/// Borrowed bytes written as one byte string: for the tuples of fields that are encoded to be
/// signed (a REQUEST's operation), which serde would write byte by byte.
pub struct Bytes<'a>(pub &'a [u8]);

impl Serialize for Bytes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize(self.0, s)
    }
}

/// Writes `bytes` as one byte string.
pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(bytes)
}

/// Reads a byte string (or a sequence of bytes).
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    d.deserialize_byte_buf(ByteBuf)
}

struct ByteBuf;

impl<'de> Visitor<'de> for ByteBuf {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a byte string")
    }

    fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
        Ok(v.to_vec())
    }

    fn visit_byte_buf<E: Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
        Ok(v)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        // Bounded by what the reader holds, not by the length it was told.
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(byte) = seq.next_element()? {
            out.push(byte);
        }
        Ok(out)
    }
}

/// `#[serde(with = "wire::bytes::pairs")]` on a `Vec<(u64, Vec<u8>)>`: each pair's bytes as one
/// byte string, encoded as serde encodes the plain type.
pub mod pairs {
    use serde::ser::SerializeSeq;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize)]
    struct Out<'a>(u64, super::Bytes<'a>);

    #[derive(Deserialize)]
    struct In(u64, #[serde(with = "super")] Vec<u8>);

    /// Writes the pairs.
    pub fn serialize<S: Serializer>(pairs: &[(u64, Vec<u8>)], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(pairs.len()))?;
        for (n, bytes) in pairs {
            seq.serialize_element(&Out(*n, super::Bytes(bytes)))?;
        }
        seq.end()
    }

    /// Reads the pairs.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(u64, Vec<u8>)>, D::Error> {
        let pairs: Vec<In> = Vec::deserialize(d)?;
        Ok(pairs.into_iter().map(|In(n, bytes)| (n, bytes)).collect())
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Plain {
        a: u64,
        page: Vec<u8>,
        results: Vec<(u64, Vec<u8>)>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Whole {
        a: u64,
        #[serde(with = "crate::bytes")]
        page: Vec<u8>,
        #[serde(with = "crate::bytes::pairs")]
        results: Vec<(u64, Vec<u8>)>,
    }

    #[test]
    fn byte_strings_encode_exactly_as_sequences_of_bytes() {
        for len in [0usize, 1, 127, 128, 300, 20_000] {
            let page: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let results = vec![(3, page.clone()), (u64::MAX, Vec::new())];
            let plain = Plain {
                a: 9,
                page: page.clone(),
                results: results.clone(),
            };
            let whole = Whole {
                a: 9,
                page,
                results,
            };
            let bytes = crate::encode(&plain).unwrap();
            assert_eq!(crate::encode(&whole).unwrap(), bytes, "length {len}");
            assert_eq!(
                crate::encode(&(9u64, super::Bytes(&whole.page))).unwrap(),
                crate::encode(&(9u64, &whole.page)).unwrap(),
                "borrowed, length {len}"
            );
            assert_eq!(crate::decode::<Whole>(&bytes).unwrap(), whole);
        }
    }

    #[test]
    fn a_byte_string_longer_than_its_input_is_refused() {
        let mut bytes = crate::encode(&Whole {
            a: 1,
            page: vec![5; 10],
            results: Vec::new(),
        })
        .unwrap();
        bytes[1] = 200;
        assert!(crate::decode::<Whole>(&bytes).is_err());
    }
}
