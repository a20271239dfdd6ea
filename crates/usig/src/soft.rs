//! Soft backend: an Ed25519 key and a counter in this process.
//!
//! For development, simulation and benchmarks. It is not equivocation-proof against whoever
//! controls the process (they hold the key), but it never reuses a counter by mistake: with a
//! [`CounterStore`], each counter value is on disk (fdatasync) before its warrant is released, so
//! a restart continues after the last released counter in the same epoch.

use crate::store::CounterStore;
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
        let key_path = key_path(dir, identity);
        let counter_path = counter_path(dir, identity);
        if !key_path.exists() {
            fs::create_dir_all(dir).map_err(|e| UsigError::state(dir, e))?;
            let seed = generate_seed(&key_path)?;
            let store = CounterStore::create(&counter_path, Epoch(1))?;
            return Ok(Self::with_store(identity, &seed, store));
        }
        let seed = read_seed(&key_path)?;
        if !counter_path.exists() {
            return Err(UsigError::CounterStateMissing {
                identity,
                path: counter_path,
            });
        }
        let store = CounterStore::open(&counter_path)?;
        Ok(Self::with_store(identity, &seed, store))
    }

    /// Opens the identity's key with a fresh counter state in an epoch newer than any it can have
    /// used before (the wall clock in milliseconds, or one more than the stored epoch).
    pub fn open_new_epoch(dir: &Path, identity: UsigId) -> Result<Self, UsigError> {
        let seed = read_seed(&key_path(dir, identity))?;
        let counter_path = counter_path(dir, identity);
        let old = CounterStore::open(&counter_path)
            .map(|s| s.state().0 .0)
            .unwrap_or(0);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let store = CounterStore::create(&counter_path, Epoch(old.max(now_ms) + 1))?;
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
