//! The USIG (unique sequential identifier generator) of MinBFT, as CloudBFT uses it.
//!
//! A USIG binds each message to a counter value of its identity, once: a verifier that accepts
//! counter c of an identity for one message can never be made to accept it for another. That is
//! what lets a group of 2f+1 replicas tolerate f Byzantine ones.
//!
//! - [`warrant`]: [`UniqueWarrant`] and its canonical encoding.
//! - [`verify`]: stateless verification against a [`Directory`] of enrolled identities, in
//!   software (no TPM needed on the verifying side).
//! - [`order`]: per-sender acceptance strictly in counter order.
//! - [`soft`]: Ed25519 backend for development and benchmarks.
//! - [`tpm`]: the TPM 2.0 backend (PCR hash chain + quote by a restricted attestation key).
//! - [`daemon`]: usigd, which owns a machine's TPM and serves its VMs, one chain per identity.
//! - [`credential`] and [`ekcert`]: proving that an identity's attestation key lives in a
//!   particular TPM (credential activation against its endorsement key, and the EK's
//!   certificate chain), so that a group can refuse two members on one TPM.
//!
//! `docs/usig.md` gives the construction and its threat model.

pub mod attest;
pub mod credential;
pub mod daemon;
pub mod ekcert;
pub mod enroll;
pub mod order;
pub mod soft;
pub mod store;
pub mod tpm;
pub mod verify;
pub mod warrant;

pub use enroll::{EnrollmentError, EnrollmentRecord, TpmEvidence};
pub use order::{Delivered, OrderedVerifier, DEFAULT_WINDOW};
pub use verify::{ChainLink, Directory, Enrollment, VerifyError};
pub use warrant::{
    Certificate, Epoch, EpochOffset, MessageDigest, TpmCertificate, UniqueWarrant, UsigId,
};

use std::path::{Path, PathBuf};

/// Creates unique warrants for one identity.
///
/// Synchronous on purpose: a warrant is a short call to a trusted component (a TPM or usigd) that
/// async drivers run on a blocking thread. Verification needs no trusted component and lives in
/// [`Directory::verify_ui`] and [`OrderedVerifier`].
pub trait Usig: Send {
    /// The identity whose counter this USIG advances.
    fn identity(&self) -> UsigId;

    /// Binds `message` to the next counter value. One warrant covers one message: callers that
    /// want to amortise the cost warrant a whole batch as one message.
    fn create_ui(&mut self, message: &[u8]) -> Result<UniqueWarrant, UsigError> {
        self.create_ui_for_digest(&MessageDigest::of(message))
    }

    /// As [`Usig::create_ui`], for a message already hashed with SHA-256.
    fn create_ui_for_digest(&mut self, digest: &MessageDigest) -> Result<UniqueWarrant, UsigError>;
}

impl<U: Usig + ?Sized> Usig for Box<U> {
    fn identity(&self) -> UsigId {
        (**self).identity()
    }

    fn create_ui_for_digest(&mut self, digest: &MessageDigest) -> Result<UniqueWarrant, UsigError> {
        (**self).create_ui_for_digest(digest)
    }
}

/// Why a warrant could not be created.
#[derive(Debug, thiserror::Error)]
pub enum UsigError {
    #[error("USIG state {path}: {source}")]
    State {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("USIG state {path} is corrupt ({why}); restore it or start a new epoch")]
    CorruptState { path: PathBuf, why: &'static str },
    #[error(
        "counter state of {identity} is missing at {path}: continuing could reuse counters; \
         restore the file, or start a new epoch deliberately (usigd --new-epoch)"
    )]
    CounterStateMissing { identity: UsigId, path: PathBuf },
    #[error("cryptography failure: {0}")]
    Crypto(&'static str),
    #[error("TPM: {0}")]
    Tpm(#[from] tpm::device::TpmError),
    #[error(
        "PCR {pcr} of {identity} holds an unexpected value: firmware, the boot loader, IMA or \
         another program extended it, so this identity cannot issue warrants until the TPM \
         resets (a new epoch); give the identity a PCR that no other software uses"
    )]
    ChainTampered { identity: UsigId, pcr: u8 },
    #[error("PCR {pcr} of {identity} moved since the last warrant; re-synchronising with the TPM")]
    ChainMoved { identity: UsigId, pcr: u8 },
    #[error(
        "the attestation key's epoch offset changed from {was:?} to {now:?}: the TPM's storage \
         hierarchy was cleared; enroll a new attestation key"
    )]
    EpochOffsetChanged {
        was: warrant::EpochOffset,
        now: warrant::EpochOffset,
    },
    #[error(
        "the TPM moved to epoch {now} while warranting in epoch {was}; retry in the new epoch"
    )]
    TpmEpochChanged { was: Epoch, now: Epoch },
    #[error("{0} is not served here")]
    UnknownIdentity(UsigId),
    #[error("configuration: {0}")]
    Config(String),
    #[error("usigd: {0}")]
    Daemon(String),
    #[error("usigd refused: {0}")]
    Refused(String),
}

impl UsigError {
    pub(crate) fn state(path: &Path, source: std::io::Error) -> Self {
        UsigError::State {
            path: path.to_path_buf(),
            source,
        }
    }
}
