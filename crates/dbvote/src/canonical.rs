//! The canonical encoding of application operations and results: postcard over serde, with
//! trailing bytes refused, so that a value has exactly one encoding and correct nodes compare
//! results byte for byte.

use crate::error::AppError;
use serde::{Deserialize, Serialize};

/// The canonical postcard bytes of an operation or result.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serialising enums of integers into a growable vector cannot fail.
    postcard::to_stdvec(value).unwrap_or_default()
}

/// Decodes postcard bytes of application `app`, rejecting trailing bytes and any encoding but
/// the canonical one (postcard also reads varints with redundant continuation bytes), so that
/// a value has one encoding.
pub fn decode_exact<'a, T: Deserialize<'a> + Serialize>(
    app: &'static str,
    bytes: &'a [u8],
) -> Result<T, AppError> {
    let malformed = |reason: String| AppError::Malformed {
        app,
        len: bytes.len(),
        reason,
    };
    match postcard::take_from_bytes(bytes) {
        Ok((value, [])) if encode(&value) == bytes => Ok(value),
        Ok((_, [])) => Err(malformed("not the canonical encoding".into())),
        Ok((_, rest)) => Err(malformed(format!("{} trailing bytes", rest.len()))),
        Err(e) => Err(malformed(e.to_string())),
    }
}
