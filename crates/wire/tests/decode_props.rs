//! Properties of the two wire decoders (issue 17): for arbitrary valid values and frame
//! streams, encode → decode is the identity; no input, arbitrary or a mutated valid encoding,
//! makes them panic; and whatever the codec accepts is the canonical encoding of what it
//! decoded (one accepted encoding per message). The fuzz targets `frames` and `envelope`
//! check the same on the real message types.

use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use wire::testing::mutated;

/// Every shape the protocol's messages use: integers of each width (varints), signed ones
/// (zigzag), strings, bytes, options, sequences, maps, nested enums, fixed arrays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Sample {
    small: u16,
    id: u32,
    counter: u64,
    signed: i64,
    flag: bool,
    name: String,
    bytes: Vec<u8>,
    digest: [u8; 4],
    maybe: Option<u64>,
    list: Vec<Kind>,
    map: BTreeMap<u32, u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum Kind {
    Unit,
    Pair(u64, i32),
    Named {
        text: String,
        range: std::ops::RangeInclusive<u64>,
    },
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Unit),
        (any::<u64>(), any::<i32>()).prop_map(|(a, b)| Kind::Pair(a, b)),
        (".{0,8}", any::<u64>(), any::<u64>())
            .prop_map(|(text, a, b)| Kind::Named { text, range: a..=b }),
    ]
}

fn sample() -> impl Strategy<Value = Sample> {
    (
        (
            any::<u16>(),
            any::<u32>(),
            any::<u64>(),
            any::<i64>(),
            any::<bool>(),
        ),
        (
            ".{0,16}",
            proptest::collection::vec(any::<u8>(), 0..32),
            any::<[u8; 4]>(),
        ),
        (
            any::<Option<u64>>(),
            proptest::collection::vec(kind(), 0..4),
            proptest::collection::btree_map(any::<u32>(), any::<u64>(), 0..4),
        ),
    )
        .prop_map(
            |((small, id, counter, signed, flag), (name, bytes, digest), (maybe, list, map))| {
                Sample {
                    small,
                    id,
                    counter,
                    signed,
                    flag,
                    name,
                    bytes,
                    digest,
                    maybe,
                    list,
                    map,
                }
            },
        )
}

/// Decodes and, when accepted, checks that the bytes were the canonical encoding.
fn decode_checked(bytes: &[u8]) -> Option<Sample> {
    let value: Sample = wire::decode(bytes).ok()?;
    assert_eq!(
        wire::encode(&value).unwrap(),
        bytes,
        "accepted a non-canonical encoding"
    );
    Some(value)
}

proptest! {
    #[test]
    fn encode_then_decode_is_the_identity(value in sample()) {
        let bytes = wire::encode(&value).unwrap();
        prop_assert_eq!(wire::decode::<Sample>(&bytes).unwrap(), value);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_accepted_ones_are_canonical(
        bytes in proptest::collection::vec(any::<u8>(), 0..256)
    ) {
        decode_checked(&bytes);
    }

    #[test]
    fn mutated_encodings_never_panic_and_accepted_ones_are_canonical(
        value in sample(), at in any::<usize>(), byte in any::<u8>(), how in any::<u8>()
    ) {
        let bytes = wire::encode(&value).unwrap();
        decode_checked(&mutated(&bytes, at, byte, how));
    }

    #[test]
    fn every_strict_prefix_is_refused(value in sample()) {
        let bytes = wire::encode(&value).unwrap();
        for cut in 0..bytes.len() {
            prop_assert!(wire::decode::<Sample>(&bytes[..cut]).is_err());
        }
    }

    #[test]
    fn written_frames_read_back_in_order(
        payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8)
    ) {
        let mut stream = Vec::new();
        for p in &payloads {
            wire::write_frame(&mut stream, p, 64).unwrap();
        }
        let mut r = &stream[..];
        let mut read = Vec::new();
        while let Some(frame) = wire::read_frame(&mut r, 64).unwrap() {
            read.push(frame);
        }
        prop_assert_eq!(read, payloads);
    }

    #[test]
    fn arbitrary_streams_never_panic_nor_exceed_the_limit(
        stream in proptest::collection::vec(any::<u8>(), 0..256), max in 0usize..64
    ) {
        let mut r = &stream[..];
        while let Ok(Some(frame)) = wire::read_frame(&mut r, max) {
            prop_assert!(frame.len() <= max);
        }
    }
}
