//! Where `cloudbft keygen` keeps signing keys in a cluster directory, and loading them.
//!
//! A key file holds the 32-byte Ed25519 seed, readable by its owner only (mode 0600).

use crate::crypto::{PublicKey, SigningKey};
use crate::ids::{ClientId, NodeId};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why a key could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read key {path}: {source} (run `cloudbft keygen` or pass the right --config)")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("key {path} is {len} bytes, not a 32-byte seed: the file is damaged, re-run keygen")]
    Length { path: String, len: usize },
    #[error("key {path} is readable by others (mode {mode:o}): chmod 600 it")]
    Exposed { path: String, mode: u32 },
    #[error("key {path} does not match the public key in the cluster configuration")]
    Mismatch { path: String },
}

/// The key file of a node in the `keys/` directory.
pub fn node_key_path(keys: &Path, node: NodeId) -> PathBuf {
    keys.join(format!("node-{}.key", node.0))
}

/// The key file of a client identity in the `keys/` directory.
pub fn client_key_path(keys: &Path, client: ClientId) -> PathBuf {
    keys.join(format!("client-{}.key", client.0))
}

/// Loads a key and checks it against the public key the configuration names for it.
pub fn load(path: &Path, expected: Option<&PublicKey>) -> Result<SigningKey, KeyError> {
    let shown = path.display().to_string();
    let read = |source| KeyError::Read {
        path: shown.clone(),
        source,
    };
    let mode = std::fs::metadata(path).map_err(read)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyError::Exposed { path: shown, mode });
    }
    let bytes = std::fs::read(path).map_err(read)?;
    let seed: [u8; 32] = bytes.as_slice().try_into().map_err(|_| KeyError::Length {
        path: shown.clone(),
        len: bytes.len(),
    })?;
    let key = SigningKey::from_seed(seed);
    if expected.is_some_and(|e| *e != key.public_key()) {
        return Err(KeyError::Mismatch { path: shown });
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    fn write(path: &Path, bytes: &[u8], mode: u32) {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn loads_checks_length_mode_and_public_key() {
        let dir = std::env::temp_dir().join(format!("cloudbft-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = node_key_path(&dir, NodeId(7));
        let key = SigningKey::from_seed([7; 32]);
        write(&path, key.seed(), 0o600);
        assert!(load(&path, Some(&key.public_key())).is_ok());
        let other = SigningKey::from_seed([8; 32]).public_key();
        assert!(matches!(
            load(&path, Some(&other)),
            Err(KeyError::Mismatch { .. })
        ));
        write(&path, key.seed(), 0o644);
        assert!(matches!(load(&path, None), Err(KeyError::Exposed { .. })));
        write(&path, &[1; 31], 0o600);
        assert!(matches!(
            load(&path, None),
            Err(KeyError::Length { len: 31, .. })
        ));
        assert!(matches!(
            load(&dir.join("missing.key"), None),
            Err(KeyError::Read { .. })
        ));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
