//! Stateless verification of one warrant against an identity's enrolled public key.
//!
//! This checks that the certificate is genuine for `(identity, epoch, counter, message)`. Order
//! (no reuse, no gaps, chain continuity) is the job of [`crate::order`], which builds on the
//! [`ChainLink`] returned here.

use crate::attest::{QuoteAttest, TPM_GENERATED_VALUE, TPM_ST_ATTEST_QUOTE};
use crate::warrant::{
    extend, sha256, soft_signed_bytes, tpm_entry, Certificate, DecodeError, Epoch, EpochOffset,
    MessageDigest, TpmCertificate, UniqueWarrant, UsigId, MAX_ATTEST_LEN,
};
use ring::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_FIXED};
use std::collections::HashMap;

/// What the cluster configuration records about one USIG identity, from enrollment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Enrollment {
    /// Soft backend: the identity's Ed25519 public key.
    Soft { public_key: [u8; 32] },
    /// TPM backend: the attestation key and its epoch offset, the PCR that holds this
    /// identity's chain, and the TPM it lives in (so that a group can refuse two members on one
    /// machine).
    Tpm {
        ak_public_key: [u8; 65],
        epoch_offset: EpochOffset,
        pcr: u8,
        tpm_identity: [u8; 32],
    },
}

/// Why a warrant was rejected. Every variant is a counted, recoverable rejection, never a panic.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    #[error("warrant names {claimed} but arrived from {sender}")]
    WrongSender { sender: UsigId, claimed: UsigId },
    #[error("{0} is not enrolled in this cluster")]
    UnknownIdentity(UsigId),
    #[error("{0} is enrolled with a different USIG kind than its certificate")]
    WrongKind(UsigId),
    #[error("counter 0 is never issued")]
    ZeroCounter,
    #[error("malformed certificate: {0}")]
    Malformed(#[from] DecodeError),
    #[error("certificate signature does not verify")]
    BadSignature,
    #[error("TPM quote does not match the warrant: {0}")]
    QuoteMismatch(&'static str),
    #[error("counter {counter} is already used (expected {expected} next): replay or reuse")]
    Replay { counter: u64, expected: u64 },
    #[error("two different messages for counter {counter}: equivocation")]
    Equivocation { counter: u64 },
    #[error("counter {counter} does not continue the chain of counter {previous}")]
    ChainBroken { counter: u64, previous: u64 },
    #[error("counter {counter} is too far ahead of {expected} to hold (window {window})")]
    OutOfWindow {
        counter: u64,
        expected: u64,
        window: u64,
    },
    #[error(
        "counter {counter} is beyond {ceiling}, the last the receiver takes from this sender now"
    )]
    BeyondCeiling { counter: u64, ceiling: u64 },
    #[error("sender moved from epoch {current} to {offered}; the protocol must accept it")]
    NewEpoch { current: Epoch, offered: Epoch },
    #[error("epoch {offered} is older than the current epoch {current}")]
    StaleEpoch { current: Epoch, offered: Epoch },
}

/// Chain values of a TPM warrant: the PCR before and after its entry. Consecutive warrants of one
/// identity must link (`next` of counter c is `prev` of counter c+1).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ChainLink {
    pub prev: [u8; 32],
    pub next: [u8; 32],
}

/// The enrolled identities of a cluster: everything needed to verify any warrant, with no TPM.
#[derive(Clone, Debug, Default)]
pub struct Directory {
    enrolled: HashMap<UsigId, Enrollment>,
}

impl Directory {
    /// An empty directory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces an identity.
    pub fn enroll(&mut self, identity: UsigId, enrollment: Enrollment) {
        self.enrolled.insert(identity, enrollment);
    }

    /// True when an enrolled identity already keeps its chain in `pcr` of the TPM that holds
    /// this attestation key.
    pub fn shares_chain(&self, ak_public_key: &[u8; 65], pcr: u8) -> bool {
        self.enrolled.values().any(|e| {
            matches!(e, Enrollment::Tpm { ak_public_key: k, pcr: p, .. } if k == ak_public_key && *p == pcr)
        })
    }

    /// The enrollment of `identity`, if any.
    pub fn get(&self, identity: UsigId) -> Option<&Enrollment> {
        self.enrolled.get(&identity)
    }

    /// Verifies that `warrant`, received from `sender`, certifies `message`.
    pub fn verify_ui(
        &self,
        sender: UsigId,
        message: &[u8],
        warrant: &UniqueWarrant,
    ) -> Result<Option<ChainLink>, VerifyError> {
        self.verify_digest(sender, &MessageDigest::of(message), warrant)
    }

    /// As [`Directory::verify_ui`], for a message already hashed.
    pub fn verify_digest(
        &self,
        sender: UsigId,
        digest: &MessageDigest,
        warrant: &UniqueWarrant,
    ) -> Result<Option<ChainLink>, VerifyError> {
        if warrant.identity != sender {
            return Err(VerifyError::WrongSender {
                sender,
                claimed: warrant.identity,
            });
        }
        if warrant.counter == 0 {
            return Err(VerifyError::ZeroCounter);
        }
        let enrollment = self
            .enrolled
            .get(&sender)
            .ok_or(VerifyError::UnknownIdentity(sender))?;
        match (&warrant.certificate, enrollment) {
            (Certificate::Soft { signature }, Enrollment::Soft { public_key }) => {
                // ZIP 215, as every other signature check (`zip215`'s doc says why): the
                // verdict does not depend on the implementation's edge cases, and the enrolled
                // key's point is decompressed once.
                let signed = soft_signed_bytes(sender, warrant.epoch, warrant.counter, digest);
                if !zip215::verify(public_key, &[&signed], signature) {
                    return Err(VerifyError::BadSignature);
                }
                Ok(None)
            }
            (
                Certificate::Tpm(cert),
                Enrollment::Tpm {
                    ak_public_key,
                    epoch_offset,
                    pcr,
                    ..
                },
            ) => verify_tpm(warrant, cert, digest, ak_public_key, *epoch_offset, *pcr).map(Some),
            _ => Err(VerifyError::WrongKind(sender)),
        }
    }
}

/// Checks a TPM certificate: the quote is a genuine TPM structure signed by the identity's
/// attestation key, covers only the identity's PCR, carries the warrant's entry as qualifying
/// data and the warrant's epoch as clock info, and attests `extend(prev, entry)`.
fn verify_tpm(
    warrant: &UniqueWarrant,
    cert: &TpmCertificate,
    digest: &MessageDigest,
    ak_public_key: &[u8; 65],
    epoch_offset: EpochOffset,
    pcr: u8,
) -> Result<ChainLink, VerifyError> {
    if cert.attest.len() > MAX_ATTEST_LEN {
        return Err(DecodeError::AttestLength(cert.attest.len()).into());
    }
    let quote = QuoteAttest::parse(&cert.attest)?;
    if quote.magic != TPM_GENERATED_VALUE || quote.attest_type != TPM_ST_ATTEST_QUOTE {
        return Err(VerifyError::QuoteMismatch("not a TPM-generated quote"));
    }
    let entry = tpm_entry(warrant.identity, warrant.counter, digest);
    if quote.extra_data != entry {
        return Err(VerifyError::QuoteMismatch(
            "qualifying data is not this warrant's entry",
        ));
    }
    if Epoch::from_attested(quote.reset_count, quote.restart_count, epoch_offset) != warrant.epoch {
        return Err(VerifyError::QuoteMismatch(
            "TPM epoch differs from the warrant's",
        ));
    }
    if !quote.selects_only(pcr) {
        return Err(VerifyError::QuoteMismatch(
            "quote does not cover exactly the identity's PCR",
        ));
    }
    if warrant.counter == 1 && cert.prev != [0u8; 32] {
        return Err(VerifyError::QuoteMismatch(
            "counter 1 must start from the PCR's reset value",
        ));
    }
    let next = extend(&cert.prev, &entry);
    if quote.pcr_digest != sha256(&next) {
        return Err(VerifyError::QuoteMismatch(
            "attested PCR value is not prev extended with the entry",
        ));
    }
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, ak_public_key)
        .verify(&cert.attest, &cert.signature)
        .map_err(|_| VerifyError::BadSignature)?;
    Ok(ChainLink {
        prev: cert.prev,
        next,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::attest::{tests::build, TPM_ALG_SHA256};
    use crate::soft::SoftUsig;
    use crate::Usig;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

    /// A software stand-in for a TPM's attestation key, to test the verifier's checks of quote
    /// contents (the real TPM path is tested against swtpm in tests/tpm.rs).
    pub(crate) struct FakeAk {
        key: EcdsaKeyPair,
        pub(crate) public: [u8; 65],
        pub(crate) offset: EpochOffset,
    }

    impl FakeAk {
        pub(crate) fn new() -> Self {
            let rng = SystemRandom::new();
            let pkcs8 =
                EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
            let key =
                EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
                    .unwrap();
            let public = key.public_key().as_ref().try_into().unwrap();
            let offset = EpochOffset {
                reset: 0xfff0_0000,
                restart: 77,
            };
            FakeAk {
                key,
                public,
                offset,
            }
        }

        pub(crate) fn sign(&self, attest: Vec<u8>, prev: [u8; 32]) -> Certificate {
            let sig = self.key.sign(&SystemRandom::new(), &attest).unwrap();
            Certificate::Tpm(TpmCertificate {
                prev,
                attest,
                signature: sig.as_ref().try_into().unwrap(),
            })
        }

        /// A directory where `identity` is enrolled with this key on `pcr`.
        pub(crate) fn directory(&self, identity: UsigId, pcr: u8) -> Directory {
            let mut dir = Directory::new();
            dir.enroll(
                identity,
                Enrollment::Tpm {
                    ak_public_key: self.public,
                    epoch_offset: self.offset,
                    pcr,
                    tpm_identity: [0; 32],
                },
            );
            dir
        }

        /// A well-formed warrant on `pcr`, as a TPM would produce it.
        pub(crate) fn warrant(
            &self,
            identity: UsigId,
            epoch: Epoch,
            counter: u64,
            prev: [u8; 32],
            digest: &MessageDigest,
            pcr: u8,
        ) -> UniqueWarrant {
            let entry = tpm_entry(identity, counter, digest);
            let next = extend(&prev, &entry);
            let mut bitmap = vec![0u8; 3];
            bitmap[usize::from(pcr / 8)] = 1 << (pcr % 8);
            let attest = build(
                &entry,
                ((epoch.0 >> 32) as u32).wrapping_add(self.offset.reset),
                (epoch.0 as u32).wrapping_add(self.offset.restart),
                &[(TPM_ALG_SHA256, bitmap)],
                &sha256(&next),
            );
            UniqueWarrant {
                identity,
                epoch,
                counter,
                certificate: self.sign(attest, prev),
            }
        }
    }

    const ID: UsigId = UsigId(7);

    fn soft_setup() -> (SoftUsig, Directory) {
        let usig = SoftUsig::in_memory(ID, [3; 32], Epoch(1));
        let mut dir = Directory::new();
        dir.enroll(
            ID,
            Enrollment::Soft {
                public_key: usig.public_key(),
            },
        );
        (usig, dir)
    }

    #[test]
    fn soft_warrant_verifies_and_any_change_is_rejected() {
        let (mut usig, dir) = soft_setup();
        let w = usig.create_ui(b"m").unwrap();
        assert_eq!(dir.verify_ui(ID, b"m", &w), Ok(None));
        assert_eq!(dir.verify_ui(ID, b"m'", &w), Err(VerifyError::BadSignature));
        let mut c = w.clone();
        c.counter += 1;
        assert_eq!(dir.verify_ui(ID, b"m", &c), Err(VerifyError::BadSignature));
        let mut e = w.clone();
        e.epoch = Epoch(2);
        assert_eq!(dir.verify_ui(ID, b"m", &e), Err(VerifyError::BadSignature));
        let mut i = w.clone();
        i.identity = UsigId(8);
        assert!(matches!(
            dir.verify_ui(ID, b"m", &i),
            Err(VerifyError::WrongSender { .. })
        ));
        assert_eq!(
            dir.verify_ui(UsigId(8), b"m", &i),
            Err(VerifyError::UnknownIdentity(UsigId(8)))
        );
        let mut s = w.clone();
        if let Certificate::Soft { signature } = &mut s.certificate {
            signature[10] ^= 1;
        }
        assert_eq!(dir.verify_ui(ID, b"m", &s), Err(VerifyError::BadSignature));
        let mut z = w;
        z.counter = 0;
        assert_eq!(dir.verify_ui(ID, b"m", &z), Err(VerifyError::ZeroCounter));
    }

    #[test]
    fn tpm_quote_contents_are_checked() {
        let ak = FakeAk::new();
        let dir = ak.directory(ID, 9);
        let d = MessageDigest::of(b"m");
        let epoch = Epoch::from_tpm(4, 1);
        let w1 = ak.warrant(ID, epoch, 1, [0; 32], &d, 9);
        let link = dir.verify_digest(ID, &d, &w1).unwrap().unwrap();
        let w2 = ak.warrant(ID, epoch, 2, link.next, &d, 9);
        assert_eq!(
            dir.verify_digest(ID, &d, &w2).unwrap().unwrap().prev,
            link.next
        );

        let mismatch = |w: &UniqueWarrant, digest: &MessageDigest| {
            matches!(
                dir.verify_digest(ID, digest, w),
                Err(VerifyError::QuoteMismatch(_))
            )
        };
        assert!(mismatch(&w1, &MessageDigest::of(b"other")));
        let mut later = w1.clone();
        later.epoch = Epoch::from_tpm(5, 0);
        assert!(mismatch(&later, &d));
        let mut counter = w2.clone();
        counter.counter = 3;
        assert!(mismatch(&counter, &d));
        assert!(mismatch(&ak.warrant(ID, epoch, 1, [1; 32], &d, 9), &d));
        assert!(mismatch(&ak.warrant(ID, epoch, 1, [0; 32], &d, 10), &d));
        let mut prev = w2.clone();
        if let Certificate::Tpm(t) = &mut prev.certificate {
            t.prev[0] ^= 1;
        }
        assert!(mismatch(&prev, &d));

        let other = FakeAk::new();
        let forged = other.warrant(ID, epoch, 1, [0; 32], &d, 9);
        assert_eq!(
            dir.verify_digest(ID, &d, &forged),
            Err(VerifyError::BadSignature)
        );
        let soft_dir = soft_setup().1;
        assert_eq!(
            soft_dir.verify_digest(ID, &d, &w1),
            Err(VerifyError::WrongKind(ID))
        );
        let mut garbled = w1;
        if let Certificate::Tpm(t) = &mut garbled.certificate {
            t.attest.truncate(20);
        }
        assert!(matches!(
            dir.verify_digest(ID, &d, &garbled),
            Err(VerifyError::Malformed(_))
        ));
    }
}
