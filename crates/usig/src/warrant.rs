//! The unique warrant (MinBFT's UI) and its canonical byte encoding.
//!
//! A warrant binds one message digest to one `(identity, epoch, counter)`. Its encoding is fixed
//! width where possible and strictly checked on decode, because warrants travel inside messages
//! from Byzantine senders: every byte string has at most one decoding, and a truncated, padded or
//! garbled encoding is an error, never a panic.

use ring::digest::{Context, SHA256};
use std::fmt;

/// Identity of one USIG instance: one per VM (group replica) or primary, never shared.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UsigId(pub u64);

impl fmt::Display for UsigId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "usig#{}", self.0)
    }
}

/// One incarnation of an identity's counter sequence. Counters restart at 1 in a new epoch, so
/// verifiers must notice an epoch change and let the protocol decide whether to follow it.
///
/// TPM backend: `resetCount << 32 | restartCount`, attested by the TPM, so a TPM reset or restart
/// is always a higher epoch. Soft backend: an incarnation number kept with the counter.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Epoch(pub u64);

impl Epoch {
    /// The epoch a TPM is in, from its true clock counters.
    pub fn from_tpm(reset_count: u32, restart_count: u32) -> Self {
        Epoch((u64::from(reset_count) << 32) | u64::from(restart_count))
    }

    /// The epoch of counters as an attest signed by an AK shows them: the TPM adds the AK's
    /// obfuscation offset, which is taken off here (see docs/usig.md).
    pub fn from_attested(reset_count: u32, restart_count: u32, offset: EpochOffset) -> Self {
        Self::from_tpm(
            reset_count.wrapping_sub(offset.reset),
            restart_count.wrapping_sub(offset.restart),
        )
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

/// What a TPM adds (wrapping) to resetCount and restartCount in the attests of one storage
/// hierarchy key; fixed for the key's lifetime and recorded at enrollment.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct EpochOffset {
    pub reset: u32,
    pub restart: u32,
}

/// SHA-256 of the message a warrant covers. Only the digest crosses the usigd socket.
#[derive(
    Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct MessageDigest(pub [u8; 32]);

impl MessageDigest {
    /// Digest of a whole message.
    pub fn of(message: &[u8]) -> Self {
        Self::from_ring(ring::digest::digest(&SHA256, message))
    }

    /// Digests of `message` and of `message` followed by `suffix`, hashing `message` once: a
    /// warrant covers a proposal's fields, and the proposal is named by those and its warrant.
    pub fn of_and_followed(message: &[u8], suffix: &[u8]) -> (Self, Self) {
        let mut context = ring::digest::Context::new(&SHA256);
        context.update(message);
        let mut followed = context.clone();
        followed.update(suffix);
        (
            Self::from_ring(context.finish()),
            Self::from_ring(followed.finish()),
        )
    }

    fn from_ring(d: ring::digest::Digest) -> Self {
        let mut out = [0u8; 32];
        out.copy_from_slice(d.as_ref());
        MessageDigest(out)
    }
}

/// Proof that the holder of an identity's USIG bound the message to this counter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Certificate {
    /// Ed25519 signature over [`soft_signed_bytes`].
    Soft { signature: [u8; 64] },
    /// A TPM quote of the identity's PCR after the message's entry was extended into it.
    Tpm(TpmCertificate),
}

/// The TPM certificate: the chain value before this warrant's entry, and the TPM's signed quote
/// of the value after it (see docs/usig.md for why this is equivocation-proof).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TpmCertificate {
    /// PCR value before the entry was extended; all zero for counter 1 of an epoch.
    pub prev: [u8; 32],
    /// Marshalled TPMS_ATTEST (a TPM2_Quote) exactly as the TPM signed it.
    pub attest: Vec<u8>,
    /// ECDSA P-256 signature by the restricted attestation key: r || s.
    pub signature: [u8; 64],
}

/// A unique warrant: `(identity, epoch, counter)` plus the certificate binding a message to them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UniqueWarrant {
    pub identity: UsigId,
    pub epoch: Epoch,
    /// Starts at 1 in every epoch and grows by exactly one per warrant.
    pub counter: u64,
    pub certificate: Certificate,
}

/// Why bytes are not a warrant.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("warrant encoding truncated: needed {needed} more bytes")]
    Truncated { needed: usize },
    #[error("unsupported warrant encoding version {0}")]
    Version(u8),
    #[error("unknown certificate kind {0}")]
    Kind(u8),
    #[error("TPM attest of {0} bytes is outside 1..={MAX_ATTEST_LEN}")]
    AttestLength(usize),
    #[error("{0} trailing bytes")]
    Trailing(usize),
    #[error("{what}: {count} exceeds the limit of {max}")]
    Limit {
        what: &'static str,
        count: u64,
        max: u64,
    },
}

/// Encoding version written first in every warrant.
const VERSION: u8 = 1;
const KIND_SOFT: u8 = 1;
const KIND_TPM: u8 = 2;
/// Upper bound for a quote's TPMS_ATTEST; real ones are about 150 bytes.
pub const MAX_ATTEST_LEN: usize = 1024;

impl UniqueWarrant {
    /// Canonical encoding: version, identity, epoch, counter (big-endian u64s), kind, certificate.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        out.push(VERSION);
        out.extend_from_slice(&self.identity.0.to_be_bytes());
        out.extend_from_slice(&self.epoch.0.to_be_bytes());
        out.extend_from_slice(&self.counter.to_be_bytes());
        match &self.certificate {
            Certificate::Soft { signature } => {
                out.push(KIND_SOFT);
                out.extend_from_slice(signature);
            }
            Certificate::Tpm(tpm) => {
                out.push(KIND_TPM);
                out.extend_from_slice(&tpm.prev);
                // MAX_ATTEST_LEN fits in u16; longer attests are never constructed by decode and
                // are rejected by the verifier, so truncating the length here cannot be accepted.
                out.extend_from_slice(&(tpm.attest.len() as u16).to_be_bytes());
                out.extend_from_slice(&tpm.attest);
                out.extend_from_slice(&tpm.signature);
            }
        }
        out
    }

    /// Decodes exactly one warrant; anything else in `bytes` is an error.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader(bytes);
        let version = r.u8()?;
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        let identity = UsigId(r.u64()?);
        let epoch = Epoch(r.u64()?);
        let counter = r.u64()?;
        let certificate = match r.u8()? {
            KIND_SOFT => Certificate::Soft {
                signature: r.array()?,
            },
            KIND_TPM => {
                let prev = r.array()?;
                let len = usize::from(u16::from_be_bytes(r.array()?));
                if len == 0 || len > MAX_ATTEST_LEN {
                    return Err(DecodeError::AttestLength(len));
                }
                let attest = r.take(len)?.to_vec();
                let signature = r.array()?;
                Certificate::Tpm(TpmCertificate {
                    prev,
                    attest,
                    signature,
                })
            }
            other => return Err(DecodeError::Kind(other)),
        };
        if !r.0.is_empty() {
            return Err(DecodeError::Trailing(r.0.len()));
        }
        Ok(UniqueWarrant {
            identity,
            epoch,
            counter,
            certificate,
        })
    }
}

/// Warrants travel inside protocol messages as their canonical encoding.
impl serde::Serialize for UniqueWarrant {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.to_bytes())
    }
}

impl<'de> serde::Deserialize<'de> for UniqueWarrant {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Bytes;
        impl serde::de::Visitor<'_> for Bytes {
            type Value = UniqueWarrant;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a canonically encoded unique warrant")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<UniqueWarrant, E> {
                UniqueWarrant::from_bytes(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_bytes(Bytes)
    }
}

/// Bounds-checked reader over hostile bytes.
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError::Truncated {
                needed: n - self.0.len(),
            });
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
}

/// What the soft backend signs: domain tag, identity, epoch, counter, message digest.
pub fn soft_signed_bytes(
    identity: UsigId,
    epoch: Epoch,
    counter: u64,
    digest: &MessageDigest,
) -> [u8; 8 + 24 + 32] {
    let mut out = [0u8; 64];
    out[..8].copy_from_slice(b"cbft-us1");
    out[8..16].copy_from_slice(&identity.0.to_be_bytes());
    out[16..24].copy_from_slice(&epoch.0.to_be_bytes());
    out[24..32].copy_from_slice(&counter.to_be_bytes());
    out[32..].copy_from_slice(&digest.0);
    out
}

/// The entry the TPM backend extends into the identity's PCR for one warrant: a domain-separated
/// hash of identity, counter and message digest. It is also the quote's qualifying data. The
/// epoch is not in it: the quote's clock information attests the epoch, and leaving it out lets
/// an entry extended just after a TPM reset still count as counter 1 of the new epoch.
pub fn tpm_entry(identity: UsigId, counter: u64, digest: &MessageDigest) -> [u8; 32] {
    let mut ctx = Context::new(&SHA256);
    ctx.update(b"cbft-ut1");
    ctx.update(&identity.0.to_be_bytes());
    ctx.update(&counter.to_be_bytes());
    ctx.update(&digest.0);
    sha256_out(ctx)
}

/// PCR extend semantics: `new = SHA-256(old || entry)`.
pub fn extend(prev: &[u8; 32], entry: &[u8; 32]) -> [u8; 32] {
    let mut ctx = Context::new(&SHA256);
    ctx.update(prev);
    ctx.update(entry);
    sha256_out(ctx)
}

pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    MessageDigest::of(bytes).0
}

fn sha256_out(ctx: Context) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_warrant() -> impl Strategy<Value = UniqueWarrant> {
        let soft = any::<[u8; 32]>().prop_map(|half| {
            let mut signature = [0u8; 64];
            signature[..32].copy_from_slice(&half);
            Certificate::Soft { signature }
        });
        let tpm = (
            any::<[u8; 32]>(),
            proptest::collection::vec(any::<u8>(), 1..200),
            any::<[u8; 32]>(),
        )
            .prop_map(|(prev, attest, half)| {
                let mut signature = [7u8; 64];
                signature[32..].copy_from_slice(&half);
                Certificate::Tpm(TpmCertificate {
                    prev,
                    attest,
                    signature,
                })
            });
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            prop_oneof![soft, tpm],
        )
            .prop_map(|(i, e, c, certificate)| UniqueWarrant {
                identity: UsigId(i),
                epoch: Epoch(e),
                counter: c,
                certificate,
            })
    }

    proptest! {
        #[test]
        fn a_message_and_its_continuation_hash_as_if_apart(
            message in proptest::collection::vec(any::<u8>(), 0..300),
            suffix in proptest::collection::vec(any::<u8>(), 0..100),
        ) {
            let whole = [message.as_slice(), suffix.as_slice()].concat();
            prop_assert_eq!(
                MessageDigest::of_and_followed(&message, &suffix),
                (MessageDigest::of(&message), MessageDigest::of(&whole))
            );
        }

        #[test]
        fn encoding_round_trips(w in arb_warrant()) {
            prop_assert_eq!(UniqueWarrant::from_bytes(&w.to_bytes()).unwrap(), w);
        }

        #[test]
        fn every_truncation_and_extension_is_rejected(w in arb_warrant(), extra in 1u8..255) {
            let bytes = w.to_bytes();
            for cut in 0..bytes.len() {
                prop_assert!(UniqueWarrant::from_bytes(&bytes[..cut]).is_err());
            }
            let mut longer = bytes.clone();
            longer.push(extra);
            prop_assert_eq!(UniqueWarrant::from_bytes(&longer), Err(DecodeError::Trailing(1)));
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = UniqueWarrant::from_bytes(&bytes);
        }

        #[test]
        fn serde_carries_the_canonical_encoding(w in arb_warrant()) {
            let bytes = wire::encode(&w).unwrap();
            prop_assert_eq!(wire::decode::<UniqueWarrant>(&bytes).unwrap(), w);
        }
    }

    #[test]
    fn bad_version_kind_and_lengths_are_named() {
        let w = UniqueWarrant {
            identity: UsigId(1),
            epoch: Epoch(2),
            counter: 3,
            certificate: Certificate::Soft { signature: [0; 64] },
        };
        let mut bytes = w.to_bytes();
        bytes[0] = 9;
        assert_eq!(
            UniqueWarrant::from_bytes(&bytes),
            Err(DecodeError::Version(9))
        );
        let mut bytes = w.to_bytes();
        bytes[25] = 3;
        assert_eq!(UniqueWarrant::from_bytes(&bytes), Err(DecodeError::Kind(3)));
        let mut tpm = w.clone();
        tpm.certificate = Certificate::Tpm(TpmCertificate {
            prev: [0; 32],
            attest: vec![1],
            signature: [0; 64],
        });
        let mut bytes = tpm.to_bytes();
        bytes[26 + 32..26 + 34].copy_from_slice(&0u16.to_be_bytes());
        assert_eq!(
            UniqueWarrant::from_bytes(&bytes),
            Err(DecodeError::AttestLength(0))
        );
    }
}
