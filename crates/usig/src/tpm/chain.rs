//! The persisted position of one identity's chain in its PCR.
//!
//! The chain itself lives in the TPM; this record only lets usigd find its place again after a
//! process restart: which counter the PCR value corresponds to, and which message the last entry
//! (possibly extended but not yet quoted) was for. It is written with `pwrite` before and after
//! each extend and not fsynced: a process crash keeps page-cache writes, and a machine crash
//! resets the TPM, which starts a new epoch whose chain begins at the PCR's reset value anyway.

use crate::warrant::{extend, tpm_entry, Epoch, MessageDigest, UsigId};
use crate::UsigError;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"CBUT";
const LEN: usize = 4 + 8 + 1 + 8 + 8 + 32 + 32 + 32 + 1 + 32 + 4;

/// Where an identity's chain stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainPosition {
    pub identity: UsigId,
    pub pcr: u8,
    pub epoch: Epoch,
    /// Counter of the last entry known to be in the PCR (0: none in this epoch).
    pub counter: u64,
    /// The PCR value before that entry (what its warrant names as `prev`).
    pub prev: [u8; 32],
    /// The PCR value after that entry.
    pub value: [u8; 32],
    /// Digest of the message the entry at `counter` is for.
    pub digest: MessageDigest,
    /// The message digest for `counter + 1`, between writing the intent and confirming the extend.
    pub pending: Option<MessageDigest>,
}

impl ChainPosition {
    /// The start of a chain in `epoch`: the PCR at its reset value.
    pub fn fresh(identity: UsigId, pcr: u8, epoch: Epoch) -> Self {
        ChainPosition {
            identity,
            pcr,
            epoch,
            counter: 0,
            prev: [0; 32],
            value: [0; 32],
            digest: MessageDigest([0; 32]),
            pending: None,
        }
    }

    /// The entry and resulting PCR value for warranting `digest` as the next counter.
    pub fn next_entry(&self, digest: &MessageDigest) -> ([u8; 32], [u8; 32]) {
        let entry = tpm_entry(self.identity, self.counter + 1, digest);
        (entry, extend(&self.value, &entry))
    }

    /// Reconciles this record with the PCR value the TPM reports in `epoch`. Returns true when a
    /// pending entry turned out to be extended (its warrant was never handed out).
    pub fn reconcile(&mut self, epoch: Epoch, pcr_value: [u8; 32]) -> Result<bool, UsigError> {
        let tampered = UsigError::ChainTampered {
            identity: self.identity,
            pcr: self.pcr,
        };
        if epoch != self.epoch {
            // A new epoch starts a fresh chain. An entry for counter 1 that was pending when the
            // TPM reset may have landed in the new chain, where it is still counter 1.
            let pending = self.pending.filter(|_| self.counter == 0);
            *self = ChainPosition::fresh(self.identity, self.pcr, epoch);
            self.pending = pending;
        }
        if pcr_value == self.value {
            self.pending = None;
            return Ok(false);
        }
        if let Some(pending) = self.pending {
            if pcr_value == self.next_entry(&pending).1 {
                self.advance(pcr_value);
                return Ok(true);
            }
        }
        Err(tampered)
    }

    /// Records that the pending entry is now in the PCR, which holds `value`.
    pub fn advance(&mut self, value: [u8; 32]) {
        if let Some(pending) = self.pending.take() {
            self.digest = pending;
        }
        self.counter += 1;
        self.prev = self.value;
        self.value = value;
    }

    fn encode(&self) -> [u8; LEN] {
        let mut out = [0u8; LEN];
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        put(MAGIC);
        put(&self.identity.0.to_be_bytes());
        put(&[self.pcr]);
        put(&self.epoch.0.to_be_bytes());
        put(&self.counter.to_be_bytes());
        put(&self.prev);
        put(&self.value);
        put(&self.digest.0);
        put(&[u8::from(self.pending.is_some())]);
        put(&self.pending.map_or([0; 32], |d| d.0));
        let crc = crc32fast::hash(&out[..LEN - 4]);
        out[LEN - 4..].copy_from_slice(&crc.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8; LEN]) -> Option<Self> {
        let crc = u32::from_be_bytes(bytes[LEN - 4..].try_into().ok()?);
        if &bytes[..4] != MAGIC || crc32fast::hash(&bytes[..LEN - 4]) != crc {
            return None;
        }
        let u64_at = |at: usize| bytes[at..at + 8].try_into().ok().map(u64::from_be_bytes);
        let arr_at = |at: usize| -> Option<[u8; 32]> { bytes[at..at + 32].try_into().ok() };
        Some(ChainPosition {
            identity: UsigId(u64_at(4)?),
            pcr: bytes[12],
            epoch: Epoch(u64_at(13)?),
            counter: u64_at(21)?,
            prev: arr_at(29)?,
            value: arr_at(61)?,
            digest: MessageDigest(arr_at(93)?),
            pending: (bytes[125] != 0).then_some(MessageDigest(arr_at(126)?)),
        })
    }
}

/// A [`ChainPosition`] backed by its file.
pub struct ChainFile {
    file: File,
    path: PathBuf,
    pub position: ChainPosition,
}

impl ChainFile {
    /// Opens the identity's record, or starts one at `fresh` if there is none. A record for a
    /// different identity or PCR is a configuration error, not something to overwrite.
    pub fn open(path: &Path, fresh: ChainPosition) -> Result<Self, UsigError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| UsigError::state(path, e))?;
        let len = file
            .metadata()
            .map_err(|e| UsigError::state(path, e))?
            .len();
        let position = if len == 0 {
            fresh
        } else {
            let mut buf = [0u8; LEN];
            file.read_exact_at(&mut buf, 0)
                .map_err(|e| UsigError::state(path, e))?;
            let stored = ChainPosition::decode(&buf).ok_or_else(|| UsigError::CorruptState {
                path: path.to_path_buf(),
                why: "chain record fails its checksum",
            })?;
            if (stored.identity, stored.pcr) != (fresh.identity, fresh.pcr) {
                return Err(UsigError::CorruptState {
                    path: path.to_path_buf(),
                    why: "chain record belongs to another identity or PCR; an identity must keep its PCR",
                });
            }
            stored
        };
        let mut chain = ChainFile {
            file,
            path: path.to_path_buf(),
            position,
        };
        chain.save()?;
        Ok(chain)
    }

    /// Writes the current position (see the module doc for why without fsync).
    pub fn save(&mut self) -> Result<(), UsigError> {
        self.file
            .write_all_at(&self.position.encode(), 0)
            .map_err(|e| UsigError::state(&self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_and_detects_corruption() {
        let mut p = ChainPosition::fresh(UsigId(3), 9, Epoch(5));
        p.counter = 7;
        p.prev = [3; 32];
        p.value = [1; 32];
        p.digest = MessageDigest([2; 32]);
        p.pending = Some(MessageDigest([6; 32]));
        let mut bytes = p.encode();
        assert_eq!(ChainPosition::decode(&bytes), Some(p));
        bytes[30] ^= 1;
        assert_eq!(ChainPosition::decode(&bytes), None);
    }

    #[test]
    fn reconcile_follows_pending_extend_and_new_epochs() {
        let mut p = ChainPosition::fresh(UsigId(3), 9, Epoch(5));
        p.pending = Some(MessageDigest([4; 32]));
        let (_, after) = p.next_entry(&MessageDigest([4; 32]));
        assert!(p.reconcile(Epoch(5), after).unwrap());
        assert_eq!(
            (p.counter, p.prev, p.value, p.pending),
            (1, [0; 32], after, None)
        );
        assert_eq!(p.digest, MessageDigest([4; 32]));
        assert!(!p.reconcile(Epoch(5), after).unwrap());
        assert!(matches!(
            p.reconcile(Epoch(5), [9; 32]),
            Err(UsigError::ChainTampered { .. })
        ));
        assert!(!p.reconcile(Epoch(6), [0; 32]).unwrap());
        assert_eq!((p.epoch, p.counter, p.value), (Epoch(6), 0, [0; 32]));
        let mut q = p.clone();
        assert!(q.reconcile(Epoch(7), [1; 32]).is_err());
        // Counter 1 pending when the TPM reset, extended after it: counter 1 of the new epoch.
        p.pending = Some(MessageDigest([5; 32]));
        let (_, first) = p.next_entry(&MessageDigest([5; 32]));
        assert!(p.reconcile(Epoch(8), first).unwrap());
        assert_eq!((p.epoch, p.counter, p.value), (Epoch(8), 1, first));
        // A later pending entry cannot be counter 1 of a new epoch.
        p.pending = Some(MessageDigest([6; 32]));
        let (_, second) = p.next_entry(&MessageDigest([6; 32]));
        let (_, as_first) =
            ChainPosition::fresh(UsigId(3), 9, Epoch(9)).next_entry(&MessageDigest([6; 32]));
        assert_ne!(second, as_first);
        assert!(p.reconcile(Epoch(9), as_first).is_err());
    }
}
