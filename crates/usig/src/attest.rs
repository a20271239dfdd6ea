//! Parser for the TPMS_ATTEST structure of a TPM2_Quote (TPM 2.0 Part 2, 10.12).
//!
//! Verifiers parse attests in software from bytes that a Byzantine sender chose, so the parser
//! is bounds-checked everywhere and rejects anything but a well-formed quote with no trailing
//! bytes. The signature over these bytes is checked separately (see `verify`).

use crate::warrant::{DecodeError, Reader};

/// TPM_GENERATED_VALUE: every structure a TPM signs with a restricted key starts with it, and a
/// restricted key refuses to sign external data that does.
pub const TPM_GENERATED_VALUE: u32 = 0xff54_4347;
/// TPM_ST_ATTEST_QUOTE.
pub const TPM_ST_ATTEST_QUOTE: u16 = 0x8018;
/// TPM_ALG_SHA256.
pub const TPM_ALG_SHA256: u16 = 0x000b;

/// The fields of a quote that verification needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuoteAttest {
    pub magic: u32,
    pub attest_type: u16,
    /// The caller's qualifying data, echoed by the TPM.
    pub extra_data: Vec<u8>,
    pub reset_count: u32,
    pub restart_count: u32,
    /// (hash algorithm, PCR bitmap) pairs.
    pub pcr_select: Vec<(u16, Vec<u8>)>,
    /// Hash of the concatenated selected PCR values.
    pub pcr_digest: Vec<u8>,
}

/// Most PCR banks a selection may list; TPMs have a handful of banks at most.
const MAX_BANKS: u32 = 8;
/// Longest PCR bitmap (TPM 2.0 allows up to PCR_SELECT_MAX, 4 bytes on PC clients).
const MAX_SELECT: u8 = 4;

impl QuoteAttest {
    /// Parses a marshalled TPMS_ATTEST that must be a quote.
    pub fn parse(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader(bytes);
        let magic = r.u32()?;
        let attest_type = r.u16()?;
        let _qualified_signer = sized(&mut r)?;
        let extra_data = sized(&mut r)?.to_vec();
        let _clock = r.u64()?;
        let reset_count = r.u32()?;
        let restart_count = r.u32()?;
        let _safe = r.u8()?;
        let _firmware_version = r.u64()?;
        let banks = r.u32()?;
        if banks > MAX_BANKS {
            return Err(DecodeError::Limit {
                what: "PCR banks in a quote",
                count: banks.into(),
                max: MAX_BANKS.into(),
            });
        }
        let mut pcr_select = Vec::with_capacity(banks as usize);
        for _ in 0..banks {
            let hash = r.u16()?;
            let size = r.u8()?;
            if size > MAX_SELECT {
                return Err(DecodeError::Limit {
                    what: "PCR bitmap bytes",
                    count: size.into(),
                    max: MAX_SELECT.into(),
                });
            }
            pcr_select.push((hash, r.take(usize::from(size))?.to_vec()));
        }
        let pcr_digest = sized(&mut r)?.to_vec();
        if !r.0.is_empty() {
            return Err(DecodeError::Trailing(r.0.len()));
        }
        Ok(QuoteAttest {
            magic,
            attest_type,
            extra_data,
            reset_count,
            restart_count,
            pcr_select,
            pcr_digest,
        })
    }

    /// True when the quote covers exactly one PCR, `pcr`, in the SHA-256 bank.
    pub fn selects_only(&self, pcr: u8) -> bool {
        let [(hash, bitmap)] = self.pcr_select.as_slice() else {
            return false;
        };
        *hash == TPM_ALG_SHA256
            && bitmap.iter().enumerate().all(|(i, byte)| {
                let want = if i == usize::from(pcr / 8) {
                    1u8 << (pcr % 8)
                } else {
                    0
                };
                *byte == want
            })
            && bitmap.len() > usize::from(pcr / 8)
    }
}

/// A TPM2B: u16 size then that many bytes.
fn sized<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], DecodeError> {
    let len = usize::from(r.u16()?);
    r.take(len)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Builds a quote attest the way a TPM marshals it (for tests of the layers above).
    pub(crate) fn build(
        extra: &[u8],
        reset: u32,
        restart: u32,
        select: &[(u16, Vec<u8>)],
        digest: &[u8],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&TPM_GENERATED_VALUE.to_be_bytes());
        out.extend_from_slice(&TPM_ST_ATTEST_QUOTE.to_be_bytes());
        let name = [0x00, 0x0b, 1, 2, 3];
        out.extend_from_slice(&(name.len() as u16).to_be_bytes());
        out.extend_from_slice(&name);
        out.extend_from_slice(&(extra.len() as u16).to_be_bytes());
        out.extend_from_slice(extra);
        out.extend_from_slice(&42u64.to_be_bytes());
        out.extend_from_slice(&reset.to_be_bytes());
        out.extend_from_slice(&restart.to_be_bytes());
        out.push(1);
        out.extend_from_slice(&7u64.to_be_bytes());
        out.extend_from_slice(&(select.len() as u32).to_be_bytes());
        for (hash, bitmap) in select {
            out.extend_from_slice(&hash.to_be_bytes());
            out.push(bitmap.len() as u8);
            out.extend_from_slice(bitmap);
        }
        out.extend_from_slice(&(digest.len() as u16).to_be_bytes());
        out.extend_from_slice(digest);
        out
    }

    #[test]
    fn parses_a_quote_and_checks_selection() {
        let bytes = build(&[9; 32], 3, 1, &[(TPM_ALG_SHA256, vec![0, 2, 0])], &[5; 32]);
        let q = QuoteAttest::parse(&bytes).unwrap();
        assert_eq!(
            (q.magic, q.attest_type),
            (TPM_GENERATED_VALUE, TPM_ST_ATTEST_QUOTE)
        );
        assert_eq!((q.reset_count, q.restart_count), (3, 1));
        assert_eq!(q.extra_data, vec![9; 32]);
        assert!(q.selects_only(9));
        assert!(!q.selects_only(8));
        let two = build(&[], 0, 0, &[(TPM_ALG_SHA256, vec![0, 6, 0])], &[]);
        assert!(!QuoteAttest::parse(&two).unwrap().selects_only(9));
        let sha1 = build(&[], 0, 0, &[(4, vec![0, 2, 0])], &[]);
        assert!(!QuoteAttest::parse(&sha1).unwrap().selects_only(9));
        let short = build(&[], 0, 0, &[(TPM_ALG_SHA256, vec![0])], &[]);
        assert!(!QuoteAttest::parse(&short).unwrap().selects_only(9));
    }

    proptest! {
        #[test]
        fn truncations_and_garbage_are_errors(extra in proptest::collection::vec(any::<u8>(), 0..40),
                                               garbage in proptest::collection::vec(any::<u8>(), 0..300)) {
            let bytes = build(&extra, 1, 2, &[(TPM_ALG_SHA256, vec![1, 0, 0])], &[3; 32]);
            for cut in 0..bytes.len() {
                prop_assert!(QuoteAttest::parse(&bytes[..cut]).is_err());
            }
            let mut longer = bytes.clone();
            longer.push(0);
            prop_assert!(QuoteAttest::parse(&longer).is_err());
            let _ = QuoteAttest::parse(&garbage);
        }
    }
}
