//! Warranting on a TPM: extend the identity's PCR with the warrant's entry, then quote it.
//!
//! [`TpmBackend`] serves several identities from one TPM, each on its own PCR, as usigd does for
//! the VMs of one physical machine. It keeps the attestation key's blob and each chain's position
//! in a state directory so that it continues after its own restart without reusing a counter, and
//! it reconnects and re-synchronises when the TPM connection breaks (for instance when the TPM
//! was reset, which starts a new epoch).

use super::chain::{ChainFile, ChainPosition};
use super::device::{AkBlob, AkPublicKey, TpmDevice};
use crate::attest::QuoteAttest;
use crate::credential;
use crate::enroll::TpmEvidence;
use crate::verify::Enrollment;
use crate::warrant::{
    sha256, tpm_entry, Certificate, Epoch, EpochOffset, MessageDigest, TpmCertificate,
    UniqueWarrant, UsigId,
};
use crate::{Usig, UsigError};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use tracing::{info, warn};

/// PCRs that software at locality 0 can reset (debug PCR 16, application PCR 23) or that are
/// reserved for dynamic launch (17-22): a chain there could be rewound, so they are refused.
pub fn pcr_is_usable(pcr: u8) -> bool {
    pcr < 16
}

struct Slot {
    chain: ChainFile,
    /// The last entry is in the PCR but its warrant was never handed out (found after a restart).
    unreturned: bool,
}

/// One TPM serving one chain per identity.
pub struct TpmBackend {
    tcti: String,
    state_dir: PathBuf,
    device: TpmDevice,
    ak: AkBlob,
    ak_public_key: AkPublicKey,
    tpm_identity: [u8; 32],
    epoch: Epoch,
    epoch_offset: EpochOffset,
    slots: BTreeMap<UsigId, Slot>,
    /// The evidence once checked: it holds as long as this AK (the EK never changes), and a VM
    /// asking for its enrollment again must not cost the TPM another activation.
    evidence: Option<TpmEvidence>,
}

impl TpmBackend {
    /// Connects to the TPM at `tcti` and loads the attestation key kept in `state_dir`, creating
    /// it on first use.
    pub fn open(tcti: &str, state_dir: &Path) -> Result<Self, UsigError> {
        fs::create_dir_all(state_dir).map_err(|e| UsigError::state(state_dir, e))?;
        let mut device = TpmDevice::connect(tcti)?;
        let ak_path = state_dir.join("ak.blob");
        let ak = if ak_path.exists() {
            let bytes = fs::read(&ak_path).map_err(|e| UsigError::state(&ak_path, e))?;
            let ak = AkBlob::from_bytes(&bytes)?;
            device.load_ak(&ak)?;
            ak
        } else {
            let ak = device.create_ak()?;
            write_durably(&ak_path, &ak.to_bytes())?;
            info!(path = %ak_path.display(), "created a new attestation key");
            ak
        };
        let ak_public_key = device.ak_public_key()?;
        let tpm_identity = device.tpm_identity()?;
        let (epoch, epoch_offset) = read_epoch(&mut device)?;
        Ok(TpmBackend {
            tcti: tcti.to_string(),
            state_dir: state_dir.to_path_buf(),
            device,
            ak,
            ak_public_key,
            tpm_identity,
            epoch,
            epoch_offset,
            slots: BTreeMap::new(),
            evidence: None,
        })
    }

    /// The TPM's current epoch.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// Starts serving `identity` on `pcr`, continuing its chain if it has one.
    pub fn add_identity(&mut self, identity: UsigId, pcr: u8) -> Result<(), UsigError> {
        if !pcr_is_usable(pcr) {
            return Err(UsigError::Config(format!(
                "pcr = {pcr} for {identity}: PCRs 16-23 can be reset or are reserved; use one of 0-15 that no other software extends"
            )));
        }
        if let Some((other, _)) = self.slots.iter().find(|(_, s)| s.chain.position.pcr == pcr) {
            return Err(UsigError::Config(format!(
                "pcr = {pcr} is assigned to both {other} and {identity}: give each identity its own PCR"
            )));
        }
        let path = self.state_dir.join(format!("chain-{}.state", identity.0));
        let chain = ChainFile::open(&path, ChainPosition::fresh(identity, pcr, self.epoch))?;
        let mut slot = Slot {
            chain,
            unreturned: false,
        };
        sync_slot(&mut self.device, self.epoch, &mut slot)?;
        info!(%identity, pcr, epoch = %self.epoch, counter = slot.chain.position.counter, "serving identity");
        self.slots.insert(identity, slot);
        Ok(())
    }

    /// What the cluster configuration must record to verify `identity`'s warrants.
    pub fn enrollment(&self, identity: UsigId) -> Option<Enrollment> {
        self.slots.get(&identity).map(|slot| Enrollment::Tpm {
            ak_public_key: self.ak_public_key.0,
            epoch_offset: self.epoch_offset,
            pcr: slot.chain.position.pcr,
            tpm_identity: self.tpm_identity,
        })
    }

    /// What a verifier needs to know which TPM this backend's attestation key lives in: the
    /// EK, its certificate if the TPM has one, and the AK's public area. Before handing it out
    /// the backend activates a credential made for that EK and AK (as a remote verifier would,
    /// [`crate::credential`]): evidence whose AK and EK are not in one TPM is never exported.
    pub fn evidence(&mut self) -> Result<TpmEvidence, UsigError> {
        if let Some(evidence) = &self.evidence {
            return Ok(evidence.clone());
        }
        let evidence = TpmEvidence {
            ek_public: self.device.ek_public()?,
            ek_certificate: self.device.ek_certificate()?,
            ak_public_area: self.device.ak_public_area()?,
        };
        let (challenge, expected) =
            credential::challenge(&evidence.ek_public, &evidence.ak_public_area)
                .map_err(|e| UsigError::Config(format!("credential challenge: {e}")))?;
        let answer = self.device.activate_credential(&challenge)?;
        expected
            .check(&answer)
            .map_err(|e| UsigError::Config(format!("this TPM's evidence: {e}")))?;
        self.evidence = Some(evidence.clone());
        Ok(evidence)
    }

    /// Warrants `digest` as `identity`'s next counter. If the TPM connection fails, reconnects
    /// once, re-synchronises every chain and retries.
    pub fn create(
        &mut self,
        identity: UsigId,
        digest: &MessageDigest,
    ) -> Result<UniqueWarrant, UsigError> {
        match self.try_create(identity, digest) {
            Err(
                e @ (UsigError::Tpm(_)
                | UsigError::ChainMoved { .. }
                | UsigError::TpmEpochChanged { .. }),
            ) => {
                warn!(error = %e, "reconnecting to the TPM and re-synchronising");
                self.reconnect()?;
                self.try_create(identity, digest)
            }
            other => other,
        }
    }

    /// The warrant for `identity`'s last entry, quoted again, with the digest it covers. Lets a
    /// client that lost a reply (usigd or the VM restarted) recover it instead of leaving a gap.
    pub fn last(
        &mut self,
        identity: UsigId,
    ) -> Result<Option<(MessageDigest, UniqueWarrant)>, UsigError> {
        let (epoch, offset) = (self.epoch, self.epoch_offset);
        let slot = self.slot(identity)?;
        let position = slot.chain.position.clone();
        if position.counter == 0 {
            return Ok(None);
        }
        let warrant = quote(&mut self.device, epoch, offset, &position)?;
        self.slot(identity)?.unreturned = false;
        Ok(Some((position.digest, warrant)))
    }

    fn try_create(
        &mut self,
        identity: UsigId,
        digest: &MessageDigest,
    ) -> Result<UniqueWarrant, UsigError> {
        let (epoch, offset) = (self.epoch, self.epoch_offset);
        let slot = self
            .slots
            .get_mut(&identity)
            .ok_or(UsigError::UnknownIdentity(identity))?;
        let position = &mut slot.chain.position;
        if slot.unreturned && position.digest == *digest {
            // Our own earlier attempt reached the PCR before the connection broke: hand out that
            // warrant rather than spend a second counter on the same message.
            slot.unreturned = false;
            return quote(&mut self.device, epoch, offset, position);
        }
        // A cheap read first: a PCR that is not where we left it means the TPM was reset (or
        // someone extended it), and extending now would put our entry in the wrong chain.
        if self.device.pcr_read(position.pcr)? != position.value {
            return Err(UsigError::ChainMoved {
                identity,
                pcr: position.pcr,
            });
        }
        let (entry, after) = position.next_entry(digest);
        position.pending = Some(*digest);
        slot.chain.save()?;
        self.device.pcr_extend(slot.chain.position.pcr, &entry)?;
        slot.chain.position.advance(after);
        slot.unreturned = false;
        slot.chain.save()?;
        quote(&mut self.device, epoch, offset, &slot.chain.position)
    }

    fn slot(&mut self, identity: UsigId) -> Result<&mut Slot, UsigError> {
        self.slots
            .get_mut(&identity)
            .ok_or(UsigError::UnknownIdentity(identity))
    }

    fn reconnect(&mut self) -> Result<(), UsigError> {
        self.device = TpmDevice::connect(&self.tcti)?;
        self.device.load_ak(&self.ak)?;
        let (epoch, offset) = read_epoch(&mut self.device)?;
        if offset != self.epoch_offset {
            return Err(UsigError::EpochOffsetChanged {
                was: self.epoch_offset,
                now: offset,
            });
        }
        if epoch != self.epoch {
            info!(was = %self.epoch, now = %epoch, "TPM was reset or restarted: new epoch");
            self.epoch = epoch;
        }
        for slot in self.slots.values_mut() {
            sync_slot(&mut self.device, epoch, slot)?;
        }
        Ok(())
    }
}

/// The TPM's true epoch and the loaded AK's obfuscation offset.
fn read_epoch(device: &mut TpmDevice) -> Result<(Epoch, EpochOffset), UsigError> {
    let (reset, restart) = device.epoch()?;
    let (offset_reset, offset_restart) = device.ak_epoch_offset()?;
    Ok((
        Epoch::from_tpm(reset, restart),
        EpochOffset {
            reset: offset_reset,
            restart: offset_restart,
        },
    ))
}

/// Aligns a chain record with its PCR in `epoch` (see [`ChainPosition::reconcile`]).
fn sync_slot(device: &mut TpmDevice, epoch: Epoch, slot: &mut Slot) -> Result<(), UsigError> {
    let value = device.pcr_read(slot.chain.position.pcr)?;
    slot.unreturned = slot.chain.position.reconcile(epoch, value)?;
    slot.chain.save()
}

/// Quotes the identity's PCR for its last entry and checks the quote says what we expect before
/// anyone else sees it.
fn quote(
    device: &mut TpmDevice,
    epoch: Epoch,
    offset: EpochOffset,
    position: &ChainPosition,
) -> Result<UniqueWarrant, UsigError> {
    let entry = tpm_entry(position.identity, position.counter, &position.digest);
    let quote = device.quote(position.pcr, &entry)?;
    let parsed = QuoteAttest::parse(&quote.attest)
        .map_err(|_| UsigError::Crypto("the TPM returned an attest that does not parse"))?;
    let quoted_epoch = Epoch::from_attested(parsed.reset_count, parsed.restart_count, offset);
    if quoted_epoch != epoch {
        return Err(UsigError::TpmEpochChanged {
            was: epoch,
            now: quoted_epoch,
        });
    }
    if parsed.pcr_digest != sha256(&position.value) {
        return Err(UsigError::ChainTampered {
            identity: position.identity,
            pcr: position.pcr,
        });
    }
    Ok(UniqueWarrant {
        identity: position.identity,
        epoch,
        counter: position.counter,
        certificate: Certificate::Tpm(TpmCertificate {
            prev: position.prev,
            attest: quote.attest,
            signature: quote.signature,
        }),
    })
}

/// Writes a file that must survive power loss: temporary file, fsync, rename, fsync directory.
pub(crate) fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), UsigError> {
    let tmp = path.with_extension("tmp");
    let result = (|| {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    result.map_err(|e| UsigError::state(path, e))
}

/// A single identity warranting directly on a TPM (no usigd): for benchmarks, tests and machines
/// that host one identity.
pub struct TpmUsig {
    backend: TpmBackend,
    identity: UsigId,
    enrollment: Enrollment,
}

impl TpmUsig {
    /// Opens the TPM at `tcti` and serves `identity` on `pcr`.
    pub fn open(
        tcti: &str,
        state_dir: &Path,
        identity: UsigId,
        pcr: u8,
    ) -> Result<Self, UsigError> {
        let mut backend = TpmBackend::open(tcti, state_dir)?;
        backend.add_identity(identity, pcr)?;
        let enrollment = backend
            .enrollment(identity)
            .ok_or(UsigError::UnknownIdentity(identity))?;
        Ok(TpmUsig {
            backend,
            identity,
            enrollment,
        })
    }

    /// The enrollment to put in the cluster configuration.
    pub fn enrollment(&self) -> &Enrollment {
        &self.enrollment
    }

    /// See [`TpmBackend::last`].
    pub fn last(&mut self) -> Result<Option<(MessageDigest, UniqueWarrant)>, UsigError> {
        self.backend.last(self.identity)
    }
}

impl Usig for TpmUsig {
    fn identity(&self) -> UsigId {
        self.identity
    }

    fn create_ui_for_digest(&mut self, digest: &MessageDigest) -> Result<UniqueWarrant, UsigError> {
        self.backend.create(self.identity, digest)
    }
}
