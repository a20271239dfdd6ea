//! The decision log: an append-only file of length- and CRC-framed records, the replica's audit
//! trail of what it decided.
//!
//! Recovery does not read it (a restarted replica recovers from a peer's stable checkpoint,
//! docs/protocol.md, "Replica recovery"), and what a client was told is durable in the database
//! nodes. So a replica appends each decision as it is made and sends the COMMIT-DBs without
//! waiting, and a segment is synced when the next stable checkpoint closes it (docs/protocol.md,
//! "The decision log"). On open the log replays every complete record; a torn record at the end
//! (a crash in the middle of a write) is cut off, while damage anywhere before the end is
//! refused, so that a reader never takes a log with a hole for a whole one. [`Segments::open`]
//! keeps such a segment as it is: after a machine crash, the part written since the last sync
//! may be damaged anywhere.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Largest record accepted; decisions are far smaller (a batch of requests).
pub const MAX_RECORD: usize = 16 << 20;
const HEADER: usize = 8;

/// Why the log cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("decision log {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "decision log {path} is damaged at byte {offset} (before its end, so not a torn write): \
         restore it from a backup or rebuild the replica from its peers"
    )]
    Corrupt { path: PathBuf, offset: u64 },
    #[error("a record of {0} bytes is outside 1..={MAX_RECORD}")]
    Size(usize),
}

/// An open decision log.
pub struct DecisionLog {
    file: File,
    path: PathBuf,
    /// Appended since the last sync.
    dirty: bool,
}

impl DecisionLog {
    /// Opens (or creates) the log at `path` and returns it with every complete record, in order.
    pub fn open(path: &Path) -> Result<(Self, Vec<Vec<u8>>), LogError> {
        let io = |source| LogError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let (records, good) = read_records(&bytes).map_err(|offset| LogError::Corrupt {
            path: path.to_path_buf(),
            offset,
        })?;
        if good < bytes.len() as u64 {
            tracing::warn!(path = %path.display(), cut = bytes.len() as u64 - good, "cutting a torn record off the end of the decision log");
            file.set_len(good).map_err(io)?;
            file.sync_data().map_err(io)?;
        }
        file.seek(SeekFrom::End(0)).map_err(io)?;
        let log = DecisionLog {
            file,
            path: path.to_path_buf(),
            dirty: false,
        };
        Ok((log, records))
    }

    /// Appends a non-empty record (not yet durable: see [`DecisionLog::sync`]).
    pub fn append(&mut self, record: &[u8]) -> Result<(), LogError> {
        if record.is_empty() || record.len() > MAX_RECORD {
            return Err(LogError::Size(record.len()));
        }
        self.file
            .write_all(&frame_record(record))
            .map_err(|source| LogError::Io {
                path: self.path.clone(),
                source,
            })?;
        self.dirty = true;
        Ok(())
    }

    /// Makes everything appended so far durable, with one `fdatasync`.
    pub fn sync(&mut self) -> Result<(), LogError> {
        if self.dirty {
            self.file.sync_data().map_err(|source| LogError::Io {
                path: self.path.clone(),
                source,
            })?;
            self.dirty = false;
        }
        Ok(())
    }
}

/// The decision log of one configuration epoch as numbered segments
/// (`decisions-<epoch>.<n>.log`): a new segment starts at each stable checkpoint, and segments
/// older than the previous one are deleted, since every decision in them is at or below a
/// stable checkpoint (the previous segment may still hold decisions above it). Disk use stays
/// within about two checkpoint intervals however long the replica runs.
pub struct Segments {
    dir: PathBuf,
    epoch: u64,
    number: u64,
    current: DecisionLog,
}

impl Segments {
    /// Opens a new segment after any of this epoch's in `dir`, and returns it with how many
    /// decisions the earlier segments of the epoch hold.
    pub fn open(dir: &Path, epoch: u64) -> Result<(Self, usize), LogError> {
        let mut earlier = 0;
        let mut last = None;
        for n in Self::numbers(dir, epoch)? {
            let path = Self::path(dir, epoch, n);
            earlier += match DecisionLog::open(&path) {
                Ok((_, records)) => records.len(),
                Err(LogError::Corrupt { offset, .. }) => {
                    tracing::warn!(
                        path = %path.display(),
                        offset,
                        "a decision log segment is damaged after byte {offset} (a machine \
                         crash before its sync at the next stable checkpoint?): kept as it is \
                         for audit; recovery does not read it"
                    );
                    1
                }
                Err(e) => return Err(e),
            };
            last = Some(n);
        }
        let number = last.map_or(0, |n| n + 1);
        let (current, _) = DecisionLog::open(&Self::path(dir, epoch, number))?;
        let segments = Segments {
            dir: dir.to_path_buf(),
            epoch,
            number,
            current,
        };
        Ok((segments, earlier))
    }

    fn path(dir: &Path, epoch: u64, number: u64) -> PathBuf {
        dir.join(format!("decisions-{epoch}.{number}.log"))
    }

    /// The segment numbers of `epoch` in `dir`, ascending.
    fn numbers(dir: &Path, epoch: u64) -> Result<Vec<u64>, LogError> {
        let io = |source| LogError::Io {
            path: dir.to_path_buf(),
            source,
        };
        let prefix = format!("decisions-{epoch}.");
        let mut numbers = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let name = entry.map_err(io)?.file_name();
            let number: Option<u64> = name
                .to_str()
                .and_then(|n| n.strip_prefix(&prefix))
                .and_then(|n| n.strip_suffix(".log"))
                .and_then(|n| n.parse().ok());
            numbers.extend(number);
        }
        numbers.sort_unstable();
        Ok(numbers)
    }

    /// Appends to the current segment (see [`DecisionLog::append`]).
    pub fn append(&mut self, record: &[u8]) -> Result<(), LogError> {
        self.current.append(record)
    }

    /// Makes the current segment durable (see [`DecisionLog::sync`]).
    pub fn sync(&mut self) -> Result<(), LogError> {
        self.current.sync()
    }

    /// A checkpoint became stable: sync the current segment (the audit trail is durable up to
    /// here), start a new one and delete those before the previous.
    pub fn rotate(&mut self) -> Result<(), LogError> {
        self.current.sync()?;
        self.number += 1;
        self.current = DecisionLog::open(&Self::path(&self.dir, self.epoch, self.number))?.0;
        for n in Self::numbers(&self.dir, self.epoch)? {
            if n + 1 < self.number {
                let path = Self::path(&self.dir, self.epoch, n);
                std::fs::remove_file(&path).map_err(|source| LogError::Io { path, source })?;
            }
        }
        Ok(())
    }
}

/// A record as the log stores it: its length and CRC-32, then the record. Public, with
/// [`read_records`], so that the fuzz targets and property tests check the log's own framing.
pub fn frame_record(record: &[u8]) -> Vec<u8> {
    let mut framed = Vec::with_capacity(HEADER + record.len());
    framed.extend_from_slice(&(record.len() as u32).to_be_bytes());
    framed.extend_from_slice(&crc32fast::hash(record).to_be_bytes());
    framed.extend_from_slice(record);
    framed
}

/// Reads a log file's bytes as [`DecisionLog::open`] does: the complete records and the length
/// they occupy (what follows is a torn tail to cut off), or `Err(offset)` for damage before the
/// end. Public so that the fuzz targets and property tests drive the reader the replica uses.
pub fn read_records(bytes: &[u8]) -> Result<(Vec<Vec<u8>>, u64), u64> {
    let mut records = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let Some(header) = bytes.get(at..at + HEADER) else {
            break; // torn header at the end
        };
        let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
        let body_end = at + HEADER + len;
        if len == 0 || len > MAX_RECORD {
            // Zeros where a record should start: space the file system allocated but the crash
            // left unwritten. Anything else is damage.
            if bytes[at..].iter().all(|&b| b == 0) {
                break;
            }
            return Err(at as u64);
        }
        let Some(body) = bytes.get(at + HEADER..body_end) else {
            break; // torn body at the end
        };
        if crc32fast::hash(body) != crc {
            if body_end == bytes.len() {
                break; // the last record was being written
            }
            return Err(at as u64);
        }
        records.push(body.to_vec());
        at = body_end;
    }
    Ok((records, at as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reopen(path: &Path) -> Vec<Vec<u8>> {
        DecisionLog::open(path).unwrap().1
    }

    #[test]
    fn records_survive_reopen_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("decisions.log");
        let (mut log, none) = DecisionLog::open(&path).unwrap();
        assert!(none.is_empty());
        assert!(matches!(log.append(b""), Err(LogError::Size(0))));
        for i in 0..100u32 {
            log.append(&i.to_be_bytes().repeat(1 + i as usize % 7))
                .unwrap();
        }
        log.sync().unwrap();
        drop(log);
        let records = reopen(&path);
        assert_eq!(records.len(), 100);
        assert_eq!(records[9], 9u32.to_be_bytes().repeat(3));
        let (mut log, _) = DecisionLog::open(&path).unwrap();
        log.append(b"more").unwrap();
        log.sync().unwrap();
        assert_eq!(reopen(&path).last().unwrap(), b"more");
    }

    #[test]
    fn a_torn_tail_is_cut_and_damage_before_it_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("decisions.log");
        let (mut log, _) = DecisionLog::open(&path).unwrap();
        for r in [&b"first"[..], b"second", b"third"] {
            log.append(r).unwrap();
        }
        log.sync().unwrap();
        drop(log);
        let full = std::fs::read(&path).unwrap();
        // Every cut inside the last record leaves the first two.
        for cut in full.len() - 12..full.len() {
            std::fs::write(&path, &full[..cut]).unwrap();
            assert_eq!(reopen(&path), vec![b"first".to_vec(), b"second".to_vec()]);
            assert_eq!(
                std::fs::metadata(&path).unwrap().len(),
                (2 * HEADER + 11) as u64
            );
        }
        // Zeros after the last record (allocated, never written) are cut too.
        let mut zeros = full.clone();
        zeros.extend_from_slice(&[0; 64]);
        std::fs::write(&path, &zeros).unwrap();
        assert_eq!(reopen(&path).len(), 3);
        let mut damaged = full.clone();
        damaged[HEADER + 1] ^= 0xff;
        std::fs::write(&path, &damaged).unwrap();
        assert!(matches!(
            DecisionLog::open(&path),
            Err(LogError::Corrupt { offset: 0, .. })
        ));
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = read_records(&bytes);
        }
    }

    #[test]
    fn segments_rotate_at_stable_checkpoints_and_keep_two() {
        let dir = tempfile::tempdir().unwrap();
        let count = || std::fs::read_dir(dir.path()).unwrap().count();
        let (mut log, earlier) = Segments::open(dir.path(), 3).unwrap();
        assert_eq!(earlier, 0);
        for round in 0..5u8 {
            log.append(&[round + 1]).unwrap();
            log.rotate().unwrap();
            assert!(count() <= 2, "{} segments after rotation {round}", count());
        }
        log.append(b"last").unwrap();
        drop(log);
        // A restart of the same epoch counts what the kept segments hold and starts a new one.
        let (_, earlier) = Segments::open(dir.path(), 3).unwrap();
        assert_eq!(earlier, 2, "the previous segment's record and the last one");
        assert_eq!(count(), 3);
    }

    /// A segment damaged before its end (what a machine crash may leave of the part written
    /// since the last sync) does not stop the replica: it is kept as it is and counts as a run
    /// that decided something.
    #[test]
    fn a_damaged_segment_is_kept_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = Segments::open(dir.path(), 1).unwrap();
        for r in [&b"first"[..], b"second"] {
            log.append(r).unwrap();
        }
        drop(log);
        let path = Segments::path(dir.path(), 1, 0);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[HEADER + 1] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let (_, earlier) = Segments::open(dir.path(), 1).unwrap();
        assert_eq!(earlier, 1);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "the damaged segment is kept"
        );
        assert!(
            Segments::path(dir.path(), 1, 1).exists(),
            "a new segment after it"
        );
    }
}
