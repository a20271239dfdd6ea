//! Crash-safe storage of a counter position: `(epoch, counter, digest)` in two CRC-protected
//! slots, with the boot they were written in; the digest of the last warranted message lets a
//! restarted USIG hand out its last warrant again instead of leaving a gap.
//!
//! Writes alternate between the slots, so a torn write can only damage the slot being written
//! and loading picks the newest intact one. A counter record is written with `pwrite` and not
//! synced, as the TPM backend's chain record is: a process crash keeps page-cache writes, so a
//! restart in the same boot finds the last counter. A machine crash may lose unsynced records,
//! so a store written in another boot ([`CounterStore::same_boot`] false) must not be continued:
//! the USIG starts a new epoch instead, as a TPM does after a reset. A new epoch is written and
//! synced before its first warrant, so no later boot can pick an epoch already used.

use crate::warrant::{Epoch, MessageDigest};
use crate::UsigError;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"CBU2";
const RECORD: usize = 4 + 8 + 8 + 32 + 16 + 4;
const CRC_AT: usize = RECORD - 4;
/// The record of earlier versions, synced per counter and without a boot: read as written in
/// another boot, so such a store moves to a new epoch once.
const MAGIC_V1: &[u8; 4] = b"CBUC";
const RECORD_V1: usize = 4 + 8 + 8 + 32 + 4;
/// Slot spacing: each slot in its own disk sector.
const SLOT: u64 = 512;
/// Where Linux says which boot this is (a random UUID per boot).
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// Which boot of the machine a record was written in.
pub type BootId = [u8; 16];

/// A `(epoch, counter)` high-water mark and the digest warranted at it.
pub struct CounterStore {
    file: File,
    path: PathBuf,
    last: Position,
    /// The boot the newest record was written in, and the current one.
    written_in: BootId,
    boot: BootId,
}

/// Where a counter stands: epoch, last used counter, and the digest it was used for.
pub type Position = (Epoch, u64, MessageDigest);

/// This boot's id, from [`BOOT_ID`].
pub fn current_boot() -> Result<BootId, UsigError> {
    let text =
        std::fs::read_to_string(BOOT_ID).map_err(|e| UsigError::state(Path::new(BOOT_ID), e))?;
    let hex: Vec<u8> = text.trim().bytes().filter(|b| *b != b'-').collect();
    let corrupt = || UsigError::CorruptState {
        path: PathBuf::from(BOOT_ID),
        why: "a boot id is a UUID (32 hexadecimal digits)",
    };
    if hex.len() != 32 {
        return Err(corrupt());
    }
    let mut boot = [0u8; 16];
    for (byte, pair) in boot.iter_mut().zip(hex.chunks(2)) {
        let pair = std::str::from_utf8(pair).map_err(|_| corrupt())?;
        *byte = u8::from_str_radix(pair, 16).map_err(|_| corrupt())?;
    }
    Ok(boot)
}

impl CounterStore {
    /// Starts the store at `epoch`, counter 0, durably, in boot `boot`. An existing file is
    /// overwritten in place, not truncated: a crash before the sync then leaves each slot with
    /// its old record or the new one, never a file without any (no warrant of `epoch` exists
    /// before this returns, so finding either is safe).
    pub fn create(path: &Path, epoch: Epoch, boot: BootId) -> Result<Self, UsigError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| UsigError::state(path, e))?;
        let start = (epoch, 0, MessageDigest([0; 32]));
        let mut store = CounterStore {
            file,
            path: path.to_path_buf(),
            last: start,
            written_in: boot,
            boot,
        };
        store.write_slot(0, start)?;
        store.write_slot(1, start)?;
        store
            .file
            .sync_data()
            .map_err(|e| UsigError::state(path, e))?;
        Ok(store)
    }

    /// Opens an existing store at its newest intact slot, in boot `boot`. A store of this boot
    /// is synced once here, so that a write the kernel failed to store since is an error now
    /// rather than a counter that goes back after the next crash.
    pub fn open(path: &Path, boot: BootId) -> Result<Self, UsigError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| UsigError::state(path, e))?;
        let (last, written_in) = [0, 1]
            .iter()
            .filter_map(|&slot| read_slot(&file, slot))
            .max_by_key(|&((epoch, counter, _), _)| (epoch, counter))
            .ok_or_else(|| UsigError::CorruptState {
                path: path.to_path_buf(),
                why: "no intact counter record",
            })?;
        if written_in == boot {
            file.sync_data().map_err(|e| UsigError::state(path, e))?;
        }
        Ok(CounterStore {
            file,
            path: path.to_path_buf(),
            last,
            written_in,
            boot,
        })
    }

    /// Whether the newest record was written in this boot, so that no record since can have
    /// been lost; if not, the counter must move to a new epoch.
    pub fn same_boot(&self) -> bool {
        self.written_in == self.boot
    }

    /// The stored position.
    pub fn state(&self) -> Position {
        self.last
    }

    /// Records that `counter` of `epoch` is used for `digest`, for a restart in this boot; must be
    /// called before its warrant leaves the process.
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
        rec[52..68].copy_from_slice(&self.boot);
        let crc = crc32fast::hash(&rec[..CRC_AT]);
        rec[CRC_AT..].copy_from_slice(&crc.to_be_bytes());
        self.written_in = self.boot;
        self.file
            .write_all_at(&rec, slot * SLOT)
            .map_err(|e| UsigError::state(&self.path, e))
    }
}

/// The intact record in `slot` and the boot it was written in (all zeros: an earlier version's).
fn read_slot(file: &File, slot: u64) -> Option<(Position, BootId)> {
    let mut rec = [0u8; RECORD];
    // A file of the earlier version ends after its second, shorter record.
    let read = file.read_at(&mut rec, slot * SLOT).ok()?;
    let (crc_at, boot) = match &rec[..4] {
        m if m == MAGIC && read == RECORD => (CRC_AT, rec[52..68].try_into().ok()?),
        m if m == MAGIC_V1 && read >= RECORD_V1 => (RECORD_V1 - 4, [0; 16]),
        _ => return None,
    };
    let crc = u32::from_be_bytes(rec[crc_at..crc_at + 4].try_into().ok()?);
    if crc32fast::hash(&rec[..crc_at]) != crc {
        return None;
    }
    let epoch = u64::from_be_bytes(rec[4..12].try_into().ok()?);
    let counter = u64::from_be_bytes(rec[12..20].try_into().ok()?);
    let digest = MessageDigest(rec[20..52].try_into().ok()?);
    Some(((Epoch(epoch), counter, digest), boot))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: BootId = [7; 16];
    const NEXT_BOOT: BootId = [8; 16];

    #[test]
    fn newest_intact_slot_wins_after_a_torn_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        let mut store = CounterStore::create(&path, Epoch(3), BOOT).unwrap();
        for counter in 1..=5 {
            store
                .record((Epoch(3), counter, MessageDigest([counter as u8; 32])))
                .unwrap();
        }
        drop(store);
        assert_eq!(CounterStore::open(&path, BOOT).unwrap().state().1, 5);
        // Tear the newest slot (counter 5 lives in slot 1): the previous one is still there.
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&[0xff; 8], SLOT + 12).unwrap();
        let state = CounterStore::open(&path, BOOT).unwrap().state();
        assert_eq!(state, (Epoch(3), 4, MessageDigest([4; 32])));
        file.write_all_at(&[0xff; 8], 12).unwrap();
        assert!(matches!(
            CounterStore::open(&path, BOOT),
            Err(UsigError::CorruptState { .. })
        ));
    }

    #[test]
    fn a_store_of_another_boot_is_not_the_same_boot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        let mut store = CounterStore::create(&path, Epoch(3), BOOT).unwrap();
        store.record((Epoch(3), 1, MessageDigest([1; 32]))).unwrap();
        drop(store);
        let same = CounterStore::open(&path, BOOT).unwrap();
        assert!(same.same_boot());
        assert_eq!(same.state(), (Epoch(3), 1, MessageDigest([1; 32])));
        drop(same);
        let next = CounterStore::open(&path, NEXT_BOOT).unwrap();
        assert!(!next.same_boot(), "the machine restarted since");
        assert_eq!(
            next.state().0,
            Epoch(3),
            "the epoch that must not be used again"
        );
    }

    /// A counter file of the earlier version (synced records, no boot) loads, as another boot's.
    #[test]
    fn an_earlier_versions_record_reads_as_another_boot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)
            .unwrap();
        for (slot, counter) in [(0u64, 4u64), (1, 5)] {
            let mut rec = [0u8; RECORD_V1];
            rec[..4].copy_from_slice(MAGIC_V1);
            rec[4..12].copy_from_slice(&9u64.to_be_bytes());
            rec[12..20].copy_from_slice(&counter.to_be_bytes());
            rec[20..52].copy_from_slice(&[counter as u8; 32]);
            let crc = crc32fast::hash(&rec[..RECORD_V1 - 4]);
            rec[RECORD_V1 - 4..].copy_from_slice(&crc.to_be_bytes());
            file.write_all_at(&rec, slot * SLOT).unwrap();
        }
        let store = CounterStore::open(&path, BOOT).unwrap();
        assert_eq!(store.state(), (Epoch(9), 5, MessageDigest([5; 32])));
        assert!(!store.same_boot());
    }

    #[test]
    fn this_machine_has_a_boot_id() {
        let boot = current_boot().expect("Linux names its boot");
        assert_ne!(boot, [0; 16]);
        assert_eq!(current_boot().unwrap(), boot, "one boot, one id");
    }
}
