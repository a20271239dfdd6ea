//! usigd configuration (TOML), validated with errors that name the field and the fix.

use crate::tpm::backend::pcr_is_usable;
use crate::warrant::UsigId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The whole usigd configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsigdConfig {
    /// Where keys, the attestation key blob and counter positions live.
    pub state_dir: PathBuf,
    /// Present: warrants come from this TPM. Absent: soft keys (development only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<TpmConfig>,
    /// The VM identities this machine hosts.
    #[serde(rename = "identity")]
    pub identities: Vec<IdentityConfig>,
}

/// The TPM usigd owns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TpmConfig {
    /// TSS TCTI string: "device:/dev/tpmrm0" in production, "swtpm:path=..." with swtpm.
    pub tcti: String,
}

/// One VM identity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityConfig {
    pub id: u64,
    /// Unix socket that only this identity's VM can reach.
    pub socket: PathBuf,
    /// TPM mode: the PCR (0-15) holding this identity's chain, unused by any other software.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcr: Option<u8>,
}

/// A configuration mistake, naming the field and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("{field}: {fix}")]
    Invalid { field: String, fix: String },
}

impl UsigdConfig {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and validates a configuration's text; `path` names where it came from in errors.
    /// [`UsigdConfig::load`] reads files through it, and the fuzz targets and property tests
    /// drive it directly, so they check exactly what usigd accepts.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let config: UsigdConfig = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every rule that a running usigd relies on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field: String, fix: &str| ConfigError::Invalid {
            field,
            fix: fix.to_string(),
        };
        if self.identities.is_empty() {
            return Err(invalid(
                "identity".into(),
                "add at least one [[identity]] table with id and socket",
            ));
        }
        let (mut ids, mut sockets, mut pcrs) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        for (i, identity) in self.identities.iter().enumerate() {
            let field = |name: &str| format!("identity[{i}].{name}");
            if !ids.insert(identity.id) {
                return Err(invalid(
                    field("id"),
                    "is used twice; give every VM its own id",
                ));
            }
            if !sockets.insert(&identity.socket) {
                return Err(invalid(
                    field("socket"),
                    "is used twice; each identity needs its own socket so a VM can only use its own",
                ));
            }
            match (&self.tpm, identity.pcr) {
                (Some(_), None) => {
                    return Err(invalid(
                        field("pcr"),
                        "is required with [tpm]: pick a free PCR in 0-15",
                    ))
                }
                (Some(_), Some(pcr)) if !pcr_is_usable(pcr) => {
                    return Err(invalid(
                        field("pcr"),
                        "must be in 0-15: PCRs 16-23 can be reset by software or are reserved",
                    ))
                }
                (Some(_), Some(pcr)) if !pcrs.insert(pcr) => {
                    return Err(invalid(
                        field("pcr"),
                        "is used twice; give each identity its own PCR",
                    ))
                }
                (None, Some(_)) => {
                    return Err(invalid(
                        field("pcr"),
                        "only applies with a [tpm] section; remove it for soft mode",
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The configured identities.
    pub fn identity_ids(&self) -> impl Iterator<Item = UsigId> + '_ {
        self.identities.iter().map(|i| UsigId(i.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<UsigdConfig, ConfigError> {
        UsigdConfig::parse(text, Path::new("t"))
    }

    #[test]
    fn errors_name_the_field() {
        let ok = r#"
            state_dir = "/s"
            [tpm]
            tcti = "device:/dev/tpmrm0"
            [[identity]]
            id = 1
            socket = "/r/1.sock"
            pcr = 8
        "#;
        assert!(parse(ok).is_ok());
        let err = parse(&ok.replace("pcr = 8", "pcr = 23")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("identity[0].pcr: must be in 0-15"),
            "{err}"
        );
        let err = parse(&ok.replace("pcr = 8", "")).unwrap_err();
        assert!(
            err.to_string().contains("identity[0].pcr: is required"),
            "{err}"
        );
        let soft = ok.replace("[tpm]\n            tcti = \"device:/dev/tpmrm0\"", "");
        let err = parse(&soft).unwrap_err();
        assert!(
            err.to_string().contains("only applies with a [tpm]"),
            "{err}"
        );
        let twice = format!("{ok}\n[[identity]]\nid = 1\nsocket = \"/r/2.sock\"\npcr = 9\n");
        assert!(parse(&twice)
            .unwrap_err()
            .to_string()
            .contains("identity[1].id"));
        assert!(matches!(
            parse("state_dir = 3"),
            Err(ConfigError::Parse { .. })
        ));
    }
}
