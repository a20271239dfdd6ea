//! Soft backend: an Ed25519 key and a counter in this process.
//!
//! For development, simulation and benchmarks. It is not equivocation-proof against whoever
//! controls the process (they hold the key), but it never reuses a counter by mistake: with a
//! [`CounterStore`], each counter value is written before its warrant is released, so a restart
//! in the same boot continues after the last released counter in the same epoch, and a restart
//! after the machine's (whose unsynced writes may be lost) starts a new epoch, as a TPM does
//! after a reset (docs/usig.md, "Soft backend").

use crate::store::{current_boot, BootId, CounterStore};
use crate::warrant::{soft_signed_bytes, Certificate, Epoch, MessageDigest, UniqueWarrant, UsigId};
use crate::{Usig, UsigError};
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{Ed25519KeyPair, KeyPair};
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A soft USIG for one identity.
pub struct SoftUsig {
    identity: UsigId,
    key: Ed25519KeyPair,
    epoch: Epoch,
    counter: u64,
    /// Digest warranted at `counter`, so the last warrant can be handed out again.
    last_digest: MessageDigest,
    store: Option<CounterStore>,
}

impl SoftUsig {
    /// An in-memory USIG from a seed: deterministic, for simulation and tests. Nothing is
    /// persisted, so a "restart" must use a new epoch.
    pub fn in_memory(identity: UsigId, seed: [u8; 32], epoch: Epoch) -> Self {
        SoftUsig {
            identity,
            key: key_from_seed(&seed),
            epoch,
            counter: 0,
            last_digest: MessageDigest([0; 32]),
            store: None,
        }
    }

    /// Opens the identity's key and counter in `dir`, creating both on first use. Refuses to
    /// start when the key exists but its counter state is gone, since continuing could reuse
    /// counters; [`SoftUsig::open_new_epoch`] is the explicit way out.
    pub fn open(dir: &Path, identity: UsigId) -> Result<Self, UsigError> {
        Self::open_in_boot(dir, identity, current_boot()?)
    }

    /// [`SoftUsig::open`] in boot `boot`: a counter written in another boot moves to a new epoch.
    fn open_in_boot(dir: &Path, identity: UsigId, boot: BootId) -> Result<Self, UsigError> {
        let key_path = key_path(dir, identity);
        let counter_path = counter_path(dir, identity);
        if !key_path.exists() {
            fs::create_dir_all(dir).map_err(|e| UsigError::state(dir, e))?;
            let seed = generate_seed(&key_path)?;
            let store = CounterStore::create(&counter_path, Epoch(1), boot)?;
            return Ok(Self::with_store(identity, &seed, store));
        }
        let seed = read_seed(&key_path)?;
        if !counter_path.exists() {
            return Err(UsigError::CounterStateMissing {
                identity,
                path: counter_path,
            });
        }
        let mut store = CounterStore::open(&counter_path, boot)?;
        if !store.same_boot() {
            let (old, counter, _) = store.state();
            let epoch = after(old);
            tracing::info!(
                identity = identity.0,
                old = old.0,
                counter,
                new = epoch.0,
                "the machine restarted since this USIG's last warrant, whose record may not have \
                 reached the disk: starting a new epoch, as a TPM does after a reset"
            );
            store = CounterStore::create(&counter_path, epoch, boot)?;
        }
        Ok(Self::with_store(identity, &seed, store))
    }

    /// Opens the identity's key with a fresh counter state in an epoch newer than any it can have
    /// used before (the wall clock in milliseconds, or one more than the stored epoch).
    pub fn open_new_epoch(dir: &Path, identity: UsigId) -> Result<Self, UsigError> {
        let seed = read_seed(&key_path(dir, identity))?;
        let counter_path = counter_path(dir, identity);
        let boot = current_boot()?;
        let old = CounterStore::open(&counter_path, boot)
            .map(|s| s.state().0)
            .unwrap_or(Epoch(0));
        let store = CounterStore::create(&counter_path, after(old), boot)?;
        Ok(Self::with_store(identity, &seed, store))
    }

    fn with_store(identity: UsigId, seed: &[u8; 32], store: CounterStore) -> Self {
        let (epoch, counter, last_digest) = store.state();
        SoftUsig {
            identity,
            key: key_from_seed(seed),
            epoch,
            counter,
            last_digest,
            store: Some(store),
        }
    }

    /// The last warrant again (Ed25519 is deterministic, so it is the same bytes), with the
    /// digest it covers; `None` before the first warrant of the epoch.
    pub fn last(&self) -> Option<(MessageDigest, UniqueWarrant)> {
        (self.counter > 0).then(|| (self.last_digest, self.sign(self.counter, &self.last_digest)))
    }

    fn sign(&self, counter: u64, digest: &MessageDigest) -> UniqueWarrant {
        let signed = soft_signed_bytes(self.identity, self.epoch, counter, digest);
        let mut signature = [0u8; 64];
        signature.copy_from_slice(self.key.sign(&signed).as_ref());
        UniqueWarrant {
            identity: self.identity,
            epoch: self.epoch,
            counter,
            certificate: Certificate::Soft { signature },
        }
    }

    /// The Ed25519 public key to enroll.
    pub fn public_key(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        out.copy_from_slice(self.key.public_key().as_ref());
        out
    }

    /// The current epoch.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }
}

impl Usig for SoftUsig {
    fn identity(&self) -> UsigId {
        self.identity
    }

    fn create_ui_for_digest(&mut self, digest: &MessageDigest) -> Result<UniqueWarrant, UsigError> {
        let counter = self.counter + 1;
        if let Some(store) = &mut self.store {
            store.record((self.epoch, counter, *digest))?;
        }
        self.counter = counter;
        self.last_digest = *digest;
        Ok(self.sign(counter, digest))
    }
}

/// An epoch newer than `old` and than any this identity can have used: the wall clock in
/// milliseconds, or one more than `old`.
fn after(old: Epoch) -> Epoch {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    Epoch(old.0.max(now_ms) + 1)
}

fn key_path(dir: &Path, identity: UsigId) -> PathBuf {
    dir.join(format!("soft-{}.key", identity.0))
}

fn counter_path(dir: &Path, identity: UsigId) -> PathBuf {
    dir.join(format!("soft-{}.counter", identity.0))
}

fn key_from_seed(seed: &[u8; 32]) -> Ed25519KeyPair {
    // A 32-byte seed is always a valid Ed25519 private key; only the length could be wrong.
    Ed25519KeyPair::from_seed_unchecked(seed).expect("32-byte Ed25519 seed")
}

fn generate_seed(path: &Path) -> Result<[u8; 32], UsigError> {
    let mut seed = [0u8; 32];
    SystemRandom::new()
        .fill(&mut seed)
        .map_err(|_| UsigError::Crypto("system random number generator failed"))?;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| UsigError::state(path, e))?;
    file.write_all(&seed)
        .and_then(|()| file.sync_all())
        .map_err(|e| UsigError::state(path, e))?;
    Ok(seed)
}

fn read_seed(path: &Path) -> Result<[u8; 32], UsigError> {
    let bytes = fs::read(path).map_err(|e| UsigError::state(path, e))?;
    bytes.try_into().map_err(|_| UsigError::CorruptState {
        path: path.to_path_buf(),
        why: "a soft key file holds exactly 32 bytes",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: BootId = [1; 16];

    fn warrant(usig: &mut SoftUsig, n: u8) -> UniqueWarrant {
        usig.create_ui_for_digest(&MessageDigest([n; 32])).unwrap()
    }

    #[test]
    fn a_restart_in_the_same_boot_continues_the_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let mut usig = SoftUsig::open_in_boot(dir.path(), UsigId(4), BOOT).unwrap();
        let first = warrant(&mut usig, 1);
        let second = warrant(&mut usig, 2);
        drop(usig);
        let mut usig = SoftUsig::open_in_boot(dir.path(), UsigId(4), BOOT).unwrap();
        assert_eq!(usig.epoch(), first.epoch);
        assert_eq!(usig.last(), Some((MessageDigest([2; 32]), second)));
        assert_eq!(warrant(&mut usig, 3).counter, 3);
    }

    #[test]
    fn a_restart_after_the_machines_starts_a_newer_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let mut usig = SoftUsig::open_in_boot(dir.path(), UsigId(4), BOOT).unwrap();
        let before = warrant(&mut usig, 1);
        let key = usig.public_key();
        drop(usig);
        let mut usig = SoftUsig::open_in_boot(dir.path(), UsigId(4), [2; 16]).unwrap();
        assert!(
            usig.epoch() > before.epoch,
            "counters restart only in a new epoch"
        );
        assert_eq!(usig.last(), None);
        assert_eq!(usig.public_key(), key, "same identity, same key");
        let after = warrant(&mut usig, 1);
        assert_eq!((after.epoch, after.counter), (usig.epoch(), 1));
        drop(usig);
        // The new epoch was stored: a restart in that boot continues it.
        let usig = SoftUsig::open_in_boot(dir.path(), UsigId(4), [2; 16]).unwrap();
        assert_eq!((usig.epoch(), usig.counter), (after.epoch, 1));
    }
}
