//! Crash-safe storage of a counter position: `(epoch, counter, digest)` in two CRC-protected
//! slots; the digest of the last warranted message lets a restarted USIG hand out its last
//! warrant again instead of leaving a gap.
//!
//! Writes alternate between the slots and each is synced before returning, so a torn write can
//! only damage the slot being written and loading picks the newest intact one.

use crate::warrant::{Epoch, MessageDigest};
use crate::UsigError;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"CBUC";
const RECORD: usize = 4 + 8 + 8 + 32 + 4;
const CRC_AT: usize = RECORD - 4;
/// Slot spacing: each slot in its own disk sector.
const SLOT: u64 = 512;

/// A durable `(epoch, counter)` high-water mark and the digest warranted at it.
pub struct CounterStore {
    file: File,
    path: PathBuf,
    last: Position,
}

/// Where a counter stands: epoch, last used counter, and the digest it was used for.
pub type Position = (Epoch, u64, MessageDigest);

impl CounterStore {
    /// Creates (or truncates) the store at `epoch`, counter 0, durably.
    pub fn create(path: &Path, epoch: Epoch) -> Result<Self, UsigError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| UsigError::state(path, e))?;
        let start = (epoch, 0, MessageDigest([0; 32]));
        let mut store = CounterStore {
            file,
            path: path.to_path_buf(),
            last: start,
        };
        store.write_slot(0, start)?;
        store.write_slot(1, start)?;
        Ok(store)
    }

    /// Opens an existing store at its newest intact slot.
    pub fn open(path: &Path) -> Result<Self, UsigError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| UsigError::state(path, e))?;
        let newest = [0, 1]
            .iter()
            .filter_map(|&slot| read_slot(&file, slot))
            .max_by_key(|&(epoch, counter, _)| (epoch, counter))
            .ok_or_else(|| UsigError::CorruptState {
                path: path.to_path_buf(),
                why: "no intact counter record",
            })?;
        Ok(CounterStore {
            file,
            path: path.to_path_buf(),
            last: newest,
        })
    }

    /// The stored position.
    pub fn state(&self) -> Position {
        self.last
    }

    /// Durably records that `counter` of `epoch` is used for `digest`; must be called before its
    /// warrant leaves the process.
    pub fn record(&mut self, position: Position) -> Result<(), UsigError> {
        self.write_slot(position.1 % 2, position)?;
        self.last = position;
        Ok(())
    }

    fn write_slot(
        &mut self,
        slot: u64,
        (epoch, counter, digest): Position,
    ) -> Result<(), UsigError> {
        let mut rec = [0u8; RECORD];
        rec[..4].copy_from_slice(MAGIC);
        rec[4..12].copy_from_slice(&epoch.0.to_be_bytes());
        rec[12..20].copy_from_slice(&counter.to_be_bytes());
        rec[20..52].copy_from_slice(&digest.0);
        let crc = crc32fast::hash(&rec[..CRC_AT]);
        rec[CRC_AT..].copy_from_slice(&crc.to_be_bytes());
        self.file
            .write_all_at(&rec, slot * SLOT)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| UsigError::state(&self.path, e))
    }
}

fn read_slot(file: &File, slot: u64) -> Option<Position> {
    let mut rec = [0u8; RECORD];
    file.read_exact_at(&mut rec, slot * SLOT).ok()?;
    let crc = u32::from_be_bytes(rec[CRC_AT..].try_into().ok()?);
    if &rec[..4] != MAGIC || crc32fast::hash(&rec[..CRC_AT]) != crc {
        return None;
    }
    let epoch = u64::from_be_bytes(rec[4..12].try_into().ok()?);
    let counter = u64::from_be_bytes(rec[12..20].try_into().ok()?);
    let digest = MessageDigest(rec[20..52].try_into().ok()?);
    Some((Epoch(epoch), counter, digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_intact_slot_wins_after_a_torn_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        let mut store = CounterStore::create(&path, Epoch(3)).unwrap();
        for counter in 1..=5 {
            store
                .record((Epoch(3), counter, MessageDigest([counter as u8; 32])))
                .unwrap();
        }
        drop(store);
        assert_eq!(CounterStore::open(&path).unwrap().state().1, 5);
        // Tear the newest slot (counter 5 lives in slot 1): the previous one is still there.
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&[0xff; 8], SLOT + 12).unwrap();
        let state = CounterStore::open(&path).unwrap().state();
        assert_eq!(state, (Epoch(3), 4, MessageDigest([4; 32])));
        file.write_all_at(&[0xff; 8], 12).unwrap();
        assert!(matches!(
            CounterStore::open(&path),
            Err(UsigError::CorruptState { .. })
        ));
    }
}
