//! Enrollment records: how an identity's public verification data is written in a cluster
//! configuration (TOML), and read back with errors that name the field and the fix.

use crate::verify::{Directory, Enrollment};
use crate::warrant::{EpochOffset, UsigId};
use serde::{Deserialize, Serialize};

/// One `[[usig_enrollment]]` table of a cluster configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrollmentRecord {
    pub id: u64,
    /// "soft" or "tpm".
    pub kind: String,
    /// Soft: hex Ed25519 public key (32 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// TPM: hex SEC1 uncompressed P-256 attestation key (65 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ak_public_key: Option<String>,
    /// TPM: what the TPM adds to [resetCount, restartCount] in the AK's attests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch_offset: Option<[u32; 2]>,
    /// TPM: the PCR that holds this identity's chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcr: Option<u8>,
    /// TPM: hex SHA-256 of the TPM's endorsement key (which machine the identity is on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm_identity: Option<String>,
    /// TPM evidence: hex SEC1 uncompressed P-256 endorsement key (65 bytes). With it,
    /// `tpm_identity` must be its hash: the identity is derived, not claimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ek_public: Option<String>,
    /// TPM evidence: hex DER of the EK certificate the TPM's manufacturer stored, if any
    /// (checked against the configuration's `ek_roots`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ek_certificate: Option<String>,
    /// TPM evidence: hex of the AK's public area (TPMT_PUBLIC), whose hash is the name a
    /// credential-activation challenge binds (crate::credential); it must hold `ak_public_key`
    /// as a restricted fixedTPM signing key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ak_public_area: Option<String>,
}

/// What a verifier needs to know which TPM an identity's attestation key lives in: the TPM's
/// endorsement key, its certificate if the manufacturer stored one, and the AK's public area
/// (for a credential-activation challenge, [`crate::credential::challenge`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TpmEvidence {
    pub ek_public: [u8; 65],
    pub ek_certificate: Option<Vec<u8>>,
    pub ak_public_area: Vec<u8>,
}

/// A configuration mistake in an enrollment record.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("usig id {id}: field `{field}`: {fix}")]
pub struct EnrollmentError {
    pub id: u64,
    pub field: &'static str,
    pub fix: String,
}

impl EnrollmentRecord {
    /// The record for an identity's enrollment.
    pub fn new(identity: UsigId, enrollment: &Enrollment) -> Self {
        let mut record = EnrollmentRecord {
            id: identity.0,
            kind: String::new(),
            public_key: None,
            ak_public_key: None,
            epoch_offset: None,
            pcr: None,
            tpm_identity: None,
            ek_public: None,
            ek_certificate: None,
            ak_public_area: None,
        };
        match enrollment {
            Enrollment::Soft { public_key } => {
                record.kind = "soft".into();
                record.public_key = Some(hex::encode(public_key));
            }
            Enrollment::Tpm {
                ak_public_key,
                epoch_offset,
                pcr,
                tpm_identity,
            } => {
                record.kind = "tpm".into();
                record.ak_public_key = Some(hex::encode(ak_public_key));
                record.epoch_offset = Some([epoch_offset.reset, epoch_offset.restart]);
                record.pcr = Some(*pcr);
                record.tpm_identity = Some(hex::encode(tpm_identity));
            }
        }
        record
    }

    /// The record with the TPM evidence of its identity's machine.
    pub fn with_evidence(mut self, evidence: &TpmEvidence) -> Self {
        self.ek_public = Some(hex::encode(evidence.ek_public));
        self.ek_certificate = evidence.ek_certificate.as_ref().map(hex::encode);
        self.ak_public_area = Some(hex::encode(&evidence.ak_public_area));
        self
    }

    /// The TPM evidence, if the record carries it (checked against the rest of the record by
    /// [`EnrollmentRecord::parse`]).
    pub fn evidence(&self) -> Result<Option<TpmEvidence>, EnrollmentError> {
        let err = |field, fix: &str| EnrollmentError {
            id: self.id,
            field,
            fix: fix.to_string(),
        };
        let (ek, area) = match (&self.ek_public, &self.ak_public_area) {
            (None, None) if self.ek_certificate.is_none() => return Ok(None),
            (Some(_), Some(area)) => (self.hex_field::<65>("ek_public", &self.ek_public)?, area),
            _ => {
                return Err(err(
                    "ek_public",
                    "TPM evidence needs ek_public and ak_public_area together, as `cloudbft usigd enroll` prints them",
                ))
            }
        };
        let bytes = |field, text: &str| {
            hex::decode(text)
                .map_err(|_| err(field, "must be hex, as `cloudbft usigd enroll` prints it"))
        };
        Ok(Some(TpmEvidence {
            ek_public: ek,
            ek_certificate: self
                .ek_certificate
                .as_deref()
                .map(|c| bytes("ek_certificate", c))
                .transpose()?,
            ak_public_area: bytes("ak_public_area", area)?,
        }))
    }

    /// Checks the evidence against the record: the TPM identity is the EK's hash, the AK's
    /// public area holds the enrolled AK as a restricted fixedTPM signing key, and an EK
    /// certificate certifies this EK.
    fn check_evidence(&self, enrollment: &Enrollment) -> Result<(), EnrollmentError> {
        let (
            Some(evidence),
            Enrollment::Tpm {
                ak_public_key,
                tpm_identity,
                ..
            },
        ) = (self.evidence()?, enrollment)
        else {
            return Ok(());
        };
        let err = |field, fix: String| EnrollmentError {
            id: self.id,
            field,
            fix,
        };
        if crate::tpm::device::tpm_identity_of(&evidence.ek_public) != *tpm_identity {
            return Err(err(
                "tpm_identity",
                "is not the SHA-256 of ek_public: the record claims another TPM than its endorsement key; enroll again".into(),
            ));
        }
        let area_key = crate::tpm::device::ak_key_of_public_area(&evidence.ak_public_area)
            .map_err(|e| err("ak_public_area", e.to_string()))?;
        if area_key != *ak_public_key {
            return Err(err(
                "ak_public_area",
                "holds another key than ak_public_key; enroll again".into(),
            ));
        }
        if let Some(cert) = &evidence.ek_certificate {
            // Only that it certifies this EK here; the chain is checked against the
            // configuration's pinned roots.
            match crate::ekcert::verify_ek_certificate(cert, &evidence.ek_public, &[]) {
                Err(crate::ekcert::EkCertError::Untrusted) => {}
                Err(e) => return Err(err("ek_certificate", e.to_string())),
                Ok(()) => unreachable!("no pinned roots"),
            }
        }
        Ok(())
    }

    /// Validates the record.
    pub fn parse(&self) -> Result<(UsigId, Enrollment), EnrollmentError> {
        let parsed = self.parse_fields()?;
        self.check_evidence(&parsed.1)?;
        Ok(parsed)
    }

    fn parse_fields(&self) -> Result<(UsigId, Enrollment), EnrollmentError> {
        let err = |field, fix: &str| EnrollmentError {
            id: self.id,
            field,
            fix: fix.to_string(),
        };
        let enrollment = match self.kind.as_str() {
            "soft" => Enrollment::Soft {
                public_key: self.hex_field("public_key", &self.public_key)?,
            },
            "tpm" => {
                let pcr = self
                    .pcr
                    .ok_or_else(|| err("pcr", "required for kind = \"tpm\""))?;
                if pcr >= 16 {
                    return Err(err("pcr", "must be one of the non-resettable PCRs 0-15"));
                }
                let ak_public_key: [u8; 65] =
                    self.hex_field("ak_public_key", &self.ak_public_key)?;
                if ak_public_key[0] != 0x04 {
                    return Err(err(
                        "ak_public_key",
                        "must be an uncompressed SEC1 point (starts with 04), as `cloudbft usigd enroll` prints it",
                    ));
                }
                let [reset, restart] = self.epoch_offset.ok_or_else(|| {
                    err(
                        "epoch_offset",
                        "required for kind = \"tpm\": copy it from `cloudbft usigd enroll`",
                    )
                })?;
                Enrollment::Tpm {
                    ak_public_key,
                    epoch_offset: EpochOffset { reset, restart },
                    pcr,
                    tpm_identity: self.hex_field("tpm_identity", &self.tpm_identity)?,
                }
            }
            _ => return Err(err("kind", "must be \"soft\" or \"tpm\"")),
        };
        Ok((UsigId(self.id), enrollment))
    }

    fn hex_field<const N: usize>(
        &self,
        field: &'static str,
        value: &Option<String>,
    ) -> Result<[u8; N], EnrollmentError> {
        let fix = format!("must be {N} bytes in hex, as `cloudbft usigd enroll` prints it");
        let err = || EnrollmentError {
            id: self.id,
            field,
            fix: fix.clone(),
        };
        let text = value.as_deref().ok_or_else(err)?;
        hex::decode(text)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(err)
    }
}

impl Directory {
    /// A directory of all `records`; duplicate identities are refused.
    pub fn from_records(records: &[EnrollmentRecord]) -> Result<Self, EnrollmentError> {
        let mut directory = Directory::new();
        for record in records {
            let (identity, enrollment) = record.parse()?;
            if directory.get(identity).is_some() {
                return Err(EnrollmentError {
                    id: record.id,
                    field: "id",
                    fix: "is enrolled twice; every identity needs its own id".into(),
                });
            }
            if let Enrollment::Tpm {
                ak_public_key, pcr, ..
            } = &enrollment
            {
                if directory.shares_chain(ak_public_key, *pcr) {
                    return Err(EnrollmentError {
                        id: record.id,
                        field: "pcr",
                        fix: "is already the chain of another identity on the same TPM; \
                              each identity needs its own PCR"
                            .into(),
                    });
                }
            }
            directory.enroll(identity, enrollment);
        }
        Ok(directory)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_errors_name_the_field() {
        let tpm = Enrollment::Tpm {
            ak_public_key: [4; 65],
            epoch_offset: EpochOffset {
                reset: 3,
                restart: u32::MAX,
            },
            pcr: 9,
            tpm_identity: [1; 32],
        };
        let record = EnrollmentRecord::new(UsigId(5), &tpm);
        let text = toml::to_string(&record).unwrap();
        let back: EnrollmentRecord = toml::from_str(&text).unwrap();
        assert_eq!(back.parse().unwrap(), (UsigId(5), tpm.clone()));

        let mut bad = back.clone();
        bad.pcr = Some(23);
        assert_eq!(bad.parse().unwrap_err().field, "pcr");
        let mut bad = back.clone();
        bad.ak_public_key = Some("04zz".into());
        assert_eq!(bad.parse().unwrap_err().field, "ak_public_key");
        let mut bad = back;
        bad.kind = "hsm".into();
        assert_eq!(bad.parse().unwrap_err().field, "kind");

        let soft = EnrollmentRecord::new(
            UsigId(6),
            &Enrollment::Soft {
                public_key: [2; 32],
            },
        );
        assert!(Directory::from_records(&[soft.clone(), soft]).is_err());
        let one = EnrollmentRecord::new(UsigId(5), &tpm);
        let mut same_pcr = one.clone();
        same_pcr.id = 7;
        assert_eq!(
            Directory::from_records(&[one, same_pcr]).unwrap_err().field,
            "pcr"
        );
    }
}
