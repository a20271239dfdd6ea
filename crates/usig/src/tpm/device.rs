//! A small safe wrapper over tss-esapi for what unique warrants need from a
//! TPM 2.0: one sha256-bank PCR per VM identity used as a hash chain, and
//! TPM2_Quote over exactly that PCR with a restricted ECC P-256 attestation
//! key (AK).
//!
//! The AK lives in the storage hierarchy (its parent is an SRK primary,
//! re-derived from a fixed ECC P-256 template whenever needed) so that
//! TPM2_Clear, which zeroes resetCount/restartCount and could thus make an old
//! epoch number come back, also destroys the AK (it replaces the storage seed).
//! For such keys the TPM adds a per-key constant to resetCount/restartCount in
//! attests (privacy obfuscation); [`TpmDevice::ak_epoch_offset`] measures it
//! against a signing key of the endorsement hierarchy, whose attests carry the
//! true counters ([`TpmDevice::epoch`]).
//!
//! Every command authorises with a plain password session (the keys' and
//! PCRs' auth values are empty): nothing here is secret, and an HMAC session
//! with parameter encryption per command, as tss-esapi's nullauth helper
//! starts, would cost three extra TPM round trips and several hashes.
//!
//! Without a resource manager (swtpm direct, `/dev/tpm0`) transient objects
//! and sessions outlive our connection, so [`TpmDevice::connect`] flushes
//! whatever a previous (crashed) user left behind. That is only safe because
//! we must be the sole user of the TPM; use `/dev/tpmrm0` on real machines,
//! where the kernel resource manager isolates and cleans up per connection.

use std::str::FromStr;

use crate::credential::Challenge;
use tss_esapi::{
    abstraction::{ek, AsymmetricAlgorithmSelection},
    attributes::NvIndexAttributesBuilder,
    attributes::{ObjectAttributes, ObjectAttributesBuilder},
    constants::{
        tss::{TPM2_LOADED_SESSION_FIRST, TPM2_TRANSIENT_FIRST},
        CapabilityType, SessionType,
    },
    handles::{
        AuthHandle, KeyHandle, NvIndexTpmHandle, ObjectHandle, PcrHandle, SessionHandle, TpmHandle,
    },
    interface_types::{
        algorithm::{HashingAlgorithm, PublicAlgorithm},
        ecc::EccCurve,
        resource_handles::{Hierarchy, NvAuth, Provision},
        session_handles::{AuthSession, PolicySession},
    },
    structures::{
        Attest, CapabilityData, Data, Digest, DigestValues, EccPoint, EccScheme, EncryptedSecret,
        HashScheme, IdObject, KeyDerivationFunctionScheme, MaxNvBuffer, NvPublicBuilder,
        PcrSelectionList, PcrSelectionListBuilder, PcrSlot, Private, Public, PublicBuilder,
        PublicEccParametersBuilder, Signature, SignatureScheme, SymmetricDefinition,
        SymmetricDefinitionObject,
    },
    tcti_ldr::TctiNameConf,
    traits::{Marshall, UnMarshall},
    Context,
};

/// TCG NV index of the certificate of the ECC NIST P-256 EK (EK Credential Profile).
const EK_CERT_P256_NV_INDEX: u32 = 0x01c0_000a;
/// Highest PCR index of a PC-client TPM (24 PCRs per bank).
const MAX_PCR: u8 = 23;
/// How many leftover handles of one kind we look at on connect.
const MAX_LEFTOVER_HANDLES: u32 = 64;

/// Errors from the TPM or from data that should have come from it.
#[derive(thiserror::Error, Debug)]
pub enum TpmError {
    /// The TCTI string cannot be used.
    #[error("invalid TCTI {tcti:?}: {reason}")]
    InvalidTcti { tcti: String, reason: String },
    /// Opening the TCTI/ESAPI context failed.
    #[error(
        "cannot connect to TPM at {tcti}: {source}; is swtpm running (or the TPM device \
         accessible, e.g. /dev/tpmrm0 with tss group membership)?"
    )]
    Connect {
        tcti: String,
        #[source]
        source: tss_esapi::Error,
    },
    /// A TPM command (or its tss-esapi conversion) failed.
    #[error("TPM {op} failed: {source}")]
    Command {
        op: &'static str,
        #[source]
        source: tss_esapi::Error,
    },
    /// An operation needs the AK but none is loaded on this connection.
    #[error("no attestation key loaded on this TPM connection: call create_ak or load_ak first")]
    NoAk,
    /// PCR index outside the TPM's PCR bank.
    #[error("PCR index {0} out of range: a PC-client TPM has PCRs 0..={MAX_PCR}")]
    InvalidPcr(u8),
    /// The TPM answered, but not with what we asked for.
    #[error("unexpected TPM answer to {op}: {what}")]
    Unexpected { op: &'static str, what: String },
    /// An [`AkBlob`] is malformed or does not describe a usable AK.
    #[error("invalid AK blob: {0}; re-create the AK with create_ak")]
    InvalidBlob(String),
}

/// SHA-256 of an EK point's `x || y`: the TPM identity enrollment records carry.
pub fn tpm_identity_of(ek_public: &[u8; 65]) -> [u8; 32] {
    ring::digest::digest(&ring::digest::SHA256, &ek_public[1..])
        .as_ref()
        .try_into()
        .expect("32 bytes")
}

/// The AK public key in a marshalled TPMT_PUBLIC, refused unless the area is the restricted
/// fixedTPM ECDSA-SHA256 P-256 signing key verifiers expect (software only: no TPM needed).
pub fn ak_key_of_public_area(area: &[u8]) -> Result<[u8; 65], TpmError> {
    let public = Public::unmarshall(area)
        .map_err(|e| TpmError::InvalidBlob(format!("AK public area: {e}")))?;
    if public.marshall().ok().as_deref() != Some(area) {
        return Err(TpmError::InvalidBlob(
            "AK public area has trailing or non-canonical bytes".into(),
        ));
    }
    check_ak_template(&public)?;
    ecc_point(&public, "AK public area")
}

/// Attaches the name of the failed operation to a tss-esapi error.
fn cmd(op: &'static str) -> impl FnOnce(tss_esapi::Error) -> TpmError {
    move |source| TpmError::Command { op, source }
}

fn unexpected(op: &'static str, what: impl Into<String>) -> TpmError {
    TpmError::Unexpected {
        op,
        what: what.into(),
    }
}

/// A persisted AK: enough to reload the same key into the same TPM after a
/// reconnect or TPM reset (the TPM-wrapped private part is only usable under
/// this TPM's EK).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AkBlob {
    /// Marshalled TPMT_PUBLIC (contents of TPM2B_PUBLIC, no size prefix).
    pub public: Vec<u8>,
    /// Contents of TPM2B_PRIVATE (no size prefix): the TPM-wrapped private key.
    pub private: Vec<u8>,
}

/// The AK public key as SEC1 uncompressed P-256 point `0x04 || X || Y`, each
/// coordinate left-padded to 32 bytes: the form
/// `ring::signature::ECDSA_P256_SHA256_FIXED` verifies against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AkPublicKey(pub [u8; 65]);

/// A TPM2_Quote as verifiers need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quote {
    /// Exactly the marshalled TPMS_ATTEST the TPM signed (contents of
    /// TPM2B_ATTEST, no size prefix); the signature covers sha256 of these bytes.
    pub attest: Vec<u8>,
    /// ECDSA signature `r || s`, each left-padded to 32 bytes.
    pub signature: [u8; 64],
}

/// What we keep about the loaded AK, so key queries need no TPM round trip.
#[derive(Debug)]
struct LoadedAk {
    handle: KeyHandle,
    name: Vec<u8>,
    key: AkPublicKey,
    /// Marshalled TPMT_PUBLIC: what a verifier hashes to the AK's name.
    public_area: Vec<u8>,
}

/// One connection to a TPM. Owns the ESAPI context.
///
/// The TPM must have no other user: [`TpmDevice::connect`] flushes every
/// transient object and session, and swtpm does not serialise users for us
/// (its TCTI opens a fresh socket per command, so two connections interleave
/// commands). For the same reason an old `TpmDevice` keeps working after a
/// swtpm restart, except that its AK is gone: reconnect and `load_ak`.
#[derive(Debug)]
pub struct TpmDevice {
    ctx: Context,
    ak: Option<LoadedAk>,
}

impl TpmDevice {
    /// Connects to the TPM behind `tcti`, a tss TCTI string, e.g.
    /// `"swtpm:host=127.0.0.1,port=2321"` or `"device:/dev/tpmrm0"`, and
    /// flushes transient objects and sessions left behind by earlier users.
    ///
    /// For the swtpm/mssim TCTIs only `host=` and `port=` are accepted:
    /// tss-esapi 7.7 silently drops any other key (e.g. `path=`), which would
    /// connect to the wrong TPM.
    pub fn connect(tcti: &str) -> Result<Self, TpmError> {
        let conf = parse_tcti(tcti)?;
        let mut ctx = Context::new(conf).map_err(|source| TpmError::Connect {
            tcti: tcti.to_owned(),
            source,
        })?;
        flush_leftovers(&mut ctx)?;
        tracing::debug!(tcti, "connected to TPM");
        Ok(TpmDevice { ctx, ak: None })
    }

    /// Creates a new AK under the SRK (storage hierarchy), loads it, and
    /// returns its blob for [`TpmDevice::load_ak`] after restarts.
    pub fn create_ak(&mut self) -> Result<AkBlob, TpmError> {
        let template = signing_key_template()?;
        let (public, private) = self.with_srk(|ctx, srk| {
            let created = ctx
                .execute_with_session(Some(AuthSession::Password), |ctx| {
                    ctx.create(srk, template, None, None, None, None)
                })
                .map_err(cmd("create AK"))?;
            Ok((created.out_public, created.out_private))
        })?;
        let blob = AkBlob {
            public: public.marshall().map_err(cmd("marshal AK public"))?,
            private: private.value().to_vec(),
        };
        self.load_parsed_ak(public, private)?;
        Ok(blob)
    }

    /// Loads a previously created AK (after a reconnect or TPM reset; the SRK
    /// is re-derived from its template, which yields the same key as long as
    /// the storage seed is unchanged). Replaces any AK already loaded on this
    /// connection.
    pub fn load_ak(&mut self, blob: &AkBlob) -> Result<(), TpmError> {
        let public = Public::unmarshall(&blob.public)
            .map_err(|e| TpmError::InvalidBlob(format!("public part: {e}")))?;
        check_ak_template(&public)?;
        let private = Private::try_from(blob.private.as_slice())
            .map_err(|e| TpmError::InvalidBlob(format!("private part: {e}")))?;
        self.load_parsed_ak(public, private)
    }

    /// Public key of the loaded AK.
    pub fn ak_public_key(&self) -> Result<AkPublicKey, TpmError> {
        Ok(self.loaded_ak()?.key)
    }

    /// TPM name of the loaded AK: nameAlg (0x000b, sha256) || sha256(TPMT_PUBLIC).
    /// Binds the key to its attributes (restricted, fixedTPM) at enrollment.
    pub fn ak_name(&self) -> Result<Vec<u8>, TpmError> {
        Ok(self.loaded_ak()?.name.clone())
    }

    /// A stable identity for this TPM: sha256 of the EK public key's `x || y`
    /// (coordinates left-padded to 32 bytes). Used at enrollment.
    pub fn tpm_identity(&mut self) -> Result<[u8; 32], TpmError> {
        Ok(tpm_identity_of(&self.ek_public()?))
    }

    /// The public key of the TPM's endorsement key (the TCG default ECC NIST P-256 EK, which
    /// the TPM re-derives from its endorsement seed: the same key for the TPM's lifetime), as an
    /// uncompressed SEC1 point.
    pub fn ek_public(&mut self) -> Result<[u8; 65], TpmError> {
        let ek_public = self.with_ek(|ctx, ek| {
            let (public, _, _) = ctx.read_public(ek).map_err(cmd("read EK public"))?;
            Ok(public)
        })?;
        ecc_point(&ek_public, "read EK public")
    }

    /// The EK certificate the TPM's manufacturer stored at the TCG index for the ECC P-256 EK
    /// (0x01c0000a), if there is one.
    pub fn ek_certificate(&mut self) -> Result<Option<Vec<u8>>, TpmError> {
        let present = list_handles(&mut self.ctx, EK_CERT_P256_NV_INDEX)?
            .iter()
            .any(|h| u32::from(*h) == EK_CERT_P256_NV_INDEX);
        if !present {
            return Ok(None);
        }
        ek::retrieve_ek_pubcert(
            &mut self.ctx,
            AsymmetricAlgorithmSelection::Ecc(EccCurve::NistP256),
        )
        .map(Some)
        .map_err(cmd("read EK certificate"))
    }

    /// Stores `certificate` (DER) as the EK certificate at the TCG index (0x01c0000a), as a
    /// manufacturer does: for software TPMs and tests (swtpm_localca issues the certificate).
    /// Owner authorisation (empty) is used; an existing certificate is kept and refused.
    pub fn store_ek_certificate(&mut self, certificate: &[u8]) -> Result<(), TpmError> {
        let index = NvIndexTpmHandle::new(EK_CERT_P256_NV_INDEX).map_err(cmd("NV index"))?;
        let attributes = NvIndexAttributesBuilder::new()
            .with_owner_write(true)
            .with_owner_read(true)
            .with_auth_read(true)
            .with_no_da(true)
            .build()
            .map_err(cmd("NV attributes"))?;
        let size = u16::try_from(certificate.len())
            .map_err(|_| unexpected("NV_DefineSpace", "certificate larger than 64 KiB"))?;
        let public = NvPublicBuilder::new()
            .with_nv_index(index)
            .with_index_name_algorithm(HashingAlgorithm::Sha256)
            .with_index_attributes(attributes)
            .with_data_area_size(usize::from(size))
            .build()
            .map_err(cmd("NV public"))?;
        let handle = self
            .ctx
            .execute_with_session(Some(AuthSession::Password), |ctx| {
                ctx.nv_define_space(Provision::Owner, None, public)
            })
            .map_err(cmd("NV_DefineSpace"))?;
        for (i, chunk) in certificate.chunks(512).enumerate() {
            let data = MaxNvBuffer::try_from(chunk.to_vec()).map_err(cmd("NV_Write"))?;
            self.ctx
                .execute_with_session(Some(AuthSession::Password), |ctx| {
                    ctx.nv_write(NvAuth::Owner, handle, data, (i * 512) as u16)
                })
                .map_err(cmd("NV_Write"))?;
        }
        self.ctx
            .tr_close(&mut ObjectHandle::from(handle))
            .map_err(cmd("close NV handle"))
    }

    /// Marshalled TPMT_PUBLIC of the loaded AK: what a verifier needs for the AK's name.
    pub fn ak_public_area(&self) -> Result<Vec<u8>, TpmError> {
        Ok(self.loaded_ak()?.public_area.clone())
    }

    /// `TPM2_ActivateCredential` of `challenge` with the loaded AK and the EK: the secret,
    /// which the TPM releases only if the challenge was made for this EK and the AK's name.
    pub fn activate_credential(&mut self, challenge: &Challenge) -> Result<Vec<u8>, TpmError> {
        let ak = self.loaded_ak()?.handle;
        let blob = IdObject::try_from(challenge.credential_blob.clone())
            .map_err(cmd("ActivateCredential blob"))?;
        let secret = EncryptedSecret::try_from(challenge.encrypted_secret.clone())
            .map_err(cmd("ActivateCredential secret"))?;
        self.with_ek(|ctx, ek| {
            // The EK's policy: PolicySecret(TPM_RH_ENDORSEMENT), with the (empty) endorsement
            // authorisation.
            let session = ctx
                .start_auth_session(
                    None,
                    None,
                    None,
                    SessionType::Policy,
                    SymmetricDefinition::Null,
                    HashingAlgorithm::Sha256,
                )
                .map_err(cmd("start policy session"))?
                .ok_or_else(|| unexpected("StartAuthSession", "no session"))?;
            let activated = PolicySession::try_from(session)
                .map_err(cmd("policy session"))
                .and_then(|policy| {
                    ctx.execute_with_session(Some(AuthSession::Password), |ctx| {
                        ctx.policy_secret(
                            policy,
                            AuthHandle::Endorsement,
                            Default::default(),
                            Default::default(),
                            Default::default(),
                            None,
                        )
                    })
                    .map_err(cmd("PolicySecret"))
                })
                .and_then(|_| {
                    ctx.execute_with_sessions(
                        (Some(AuthSession::Password), Some(session), None),
                        |ctx| ctx.activate_credential(ak, ek, blob, secret),
                    )
                    .map_err(cmd("ActivateCredential"))
                });
            if let Err(e) = ctx.flush_context(SessionHandle::from(session).into()) {
                tracing::warn!(error = %e, "cannot flush the policy session");
            }
            Ok(activated?.value().to_vec())
        })
    }

    /// The true `(resetCount, restartCount)` of the TPM: the warrant epoch.
    ///
    /// tss-esapi 7.7 has no TPM2_ReadClock, so this reads the clockInfo of a
    /// quote over an *empty* PCR selection (which can never pass as a
    /// warrant) signed by a transient signing primary of the endorsement
    /// hierarchy, whose attests are not obfuscated.
    pub fn epoch(&mut self) -> Result<(u32, u32), TpmError> {
        let template = signing_key_template()?;
        let key = self
            .ctx
            .execute_with_session(Some(AuthSession::Password), |ctx| {
                ctx.create_primary(Hierarchy::Endorsement, template, None, None, None, None)
            })
            .map_err(cmd("create endorsement signing primary"))?
            .key_handle;
        let quoted = self.quote_with(key, PcrSelectionList::default(), &[0u8; 32]);
        self.flush_quietly(key.into());
        Ok(clock_counts(&quoted?.0))
    }

    /// What the TPM adds (wrapping) to resetCount and restartCount in the
    /// loaded AK's attests. Constant for the AK's lifetime: it derives from
    /// the storage hierarchy's proof value and the AK's name, and only
    /// TPM2_Clear changes the former (which also destroys the AK).
    pub fn ak_epoch_offset(&mut self) -> Result<(u32, u32), TpmError> {
        let (attest, _) = self.raw_quote(PcrSelectionList::default(), &[0u8; 32])?;
        let (obf_reset, obf_restart) = clock_counts(&attest);
        let (reset, restart) = self.epoch()?;
        Ok((
            obf_reset.wrapping_sub(reset),
            obf_restart.wrapping_sub(restart),
        ))
    }

    /// Reads `pcr` in the sha256 bank.
    pub fn pcr_read(&mut self, pcr: u8) -> Result<[u8; 32], TpmError> {
        let selection = sha256_selection(pcr)?;
        let (_, read, digests) = self
            .ctx
            .execute_without_session(|ctx| ctx.pcr_read(selection.clone()))
            .map_err(cmd("PCR_Read"))?;
        if read != selection || digests.len() != 1 {
            return Err(unexpected(
                "PCR_Read",
                "PCR not returned (sha256 bank missing?)",
            ));
        }
        to_32("PCR_Read", digests.value()[0].value())
    }

    /// Extends `pcr` in the sha256 bank only (other banks are left alone):
    /// new = sha256(old || digest).
    pub fn pcr_extend(&mut self, pcr: u8, digest: &[u8; 32]) -> Result<(), TpmError> {
        let handle = pcr_handle(pcr)?;
        let mut values = DigestValues::new();
        let digest = Digest::try_from(digest.as_slice()).map_err(cmd("PCR_Extend"))?;
        values.set(HashingAlgorithm::Sha256, digest);
        self.ctx
            .execute_with_session(Some(AuthSession::Password), |ctx| {
                ctx.pcr_extend(handle, values)
            })
            .map_err(cmd("PCR_Extend"))
    }

    /// Quotes exactly sha256:{pcr} with the AK (its ECDSA-SHA256 scheme) and
    /// `qualifying_data` as extraData.
    ///
    /// tss-esapi 7.7 hands back the attest parsed, so `attest` is its
    /// re-marshalling with libtss2-mu; that is byte-identical to what the TPM
    /// signed (fixed-layout fields, tested by verifying the signature). Were it
    /// ever not, the warrant would fail verification rather than pass wrongly.
    pub fn quote(&mut self, pcr: u8, qualifying_data: &[u8; 32]) -> Result<Quote, TpmError> {
        let selection = sha256_selection(pcr)?;
        let (attest, signature) = self.raw_quote(selection, qualifying_data)?;
        Ok(Quote {
            attest: attest.marshall().map_err(cmd("marshal quote attest"))?,
            signature: ecdsa_fixed(signature)?,
        })
    }

    fn raw_quote(
        &mut self,
        selection: PcrSelectionList,
        qualifying_data: &[u8; 32],
    ) -> Result<(Attest, Signature), TpmError> {
        let ak = self.loaded_ak()?.handle;
        self.quote_with(ak, selection, qualifying_data)
    }

    fn quote_with(
        &mut self,
        key: KeyHandle,
        selection: PcrSelectionList,
        qualifying_data: &[u8; 32],
    ) -> Result<(Attest, Signature), TpmError> {
        let data = Data::try_from(qualifying_data.as_slice()).map_err(cmd("Quote"))?;
        self.ctx
            .execute_with_session(Some(AuthSession::Password), |ctx| {
                ctx.quote(key, data, SignatureScheme::Null, selection)
            })
            .map_err(cmd("Quote"))
    }

    fn loaded_ak(&self) -> Result<&LoadedAk, TpmError> {
        self.ak.as_ref().ok_or(TpmError::NoAk)
    }

    /// Creates the EK primary, runs `f` with it and always flushes it again:
    /// without a resource manager it would otherwise occupy one of the TPM's
    /// few object slots.
    fn with_ek<T>(
        &mut self,
        f: impl FnOnce(&mut Context, KeyHandle) -> Result<T, TpmError>,
    ) -> Result<T, TpmError> {
        let ek = ek::create_ek_object_2(
            &mut self.ctx,
            AsymmetricAlgorithmSelection::Ecc(EccCurve::NistP256),
            None,
        )
        .map_err(cmd("create EK primary"))?;
        let result = f(&mut self.ctx, ek);
        if let Err(e) = self.ctx.flush_context(ek.into()) {
            tracing::warn!(error = %e, "cannot flush EK; it is flushed on next connect");
        }
        result
    }

    /// Creates the SRK primary (storage hierarchy), runs `f` with it and
    /// flushes it again, like [`TpmDevice::with_ek`].
    fn with_srk<T>(
        &mut self,
        f: impl FnOnce(&mut Context, KeyHandle) -> Result<T, TpmError>,
    ) -> Result<T, TpmError> {
        let template = srk_template()?;
        let srk = self
            .ctx
            .execute_with_session(Some(AuthSession::Password), |ctx| {
                ctx.create_primary(Hierarchy::Owner, template, None, None, None, None)
            })
            .map_err(cmd("create SRK primary"))?
            .key_handle;
        let result = f(&mut self.ctx, srk);
        self.flush_quietly(srk.into());
        result
    }

    fn load_parsed_ak(&mut self, public: Public, private: Private) -> Result<(), TpmError> {
        let handle = self.with_srk(|ctx, srk| {
            ctx.execute_with_session(Some(AuthSession::Password), |ctx| {
                ctx.load(srk, private, public)
            })
            .map_err(cmd("load AK"))
        })?;
        let loaded = self.describe_ak(handle);
        if loaded.is_err() {
            self.flush_quietly(handle.into());
        }
        self.replace_ak(loaded?);
        Ok(())
    }

    /// Reads back what the TPM says about the loaded key (name, public point).
    fn describe_ak(&mut self, handle: KeyHandle) -> Result<LoadedAk, TpmError> {
        let (public, name, _) = self
            .ctx
            .read_public(handle)
            .map_err(cmd("read AK public"))?;
        check_ak_template(&public)?;
        Ok(LoadedAk {
            handle,
            name: name.value().to_vec(),
            key: AkPublicKey(ecc_point(&public, "read AK public")?),
            public_area: public.marshall().map_err(cmd("marshal AK public"))?,
        })
    }

    fn replace_ak(&mut self, ak: LoadedAk) {
        if let Some(old) = self.ak.replace(ak) {
            self.flush_quietly(old.handle.into());
        }
    }

    fn flush_quietly(&mut self, handle: ObjectHandle) {
        if let Err(e) = self.ctx.flush_context(handle) {
            tracing::warn!(error = %e, "cannot flush TPM object; it is flushed on next connect");
        }
    }
}

fn clock_counts(attest: &Attest) -> (u32, u32) {
    let clock = attest.clock_info();
    (clock.reset_count(), clock.restart_count())
}

/// Attributes shared by the AK and the SRK: bound to this TPM, generated
/// inside it, usable with an empty password, and exempt from dictionary-attack
/// lockout (their auth is empty, so DA protection guards nothing, but it would
/// lock the AK after a few non-orderly shutdowns such as power loss).
fn tpm_bound_attributes() -> ObjectAttributesBuilder {
    ObjectAttributesBuilder::new()
        .with_fixed_tpm(true)
        .with_fixed_parent(true)
        .with_sensitive_data_origin(true)
        .with_user_with_auth(true)
        .with_no_da(true)
        .with_restricted(true)
}

/// The attestation key template: restricted ECDSA-SHA256 P-256 signing key
/// (it signs only structures the TPM generates). Also used for the transient
/// endorsement-hierarchy key that reads the true epoch.
fn signing_key_template() -> Result<Public, TpmError> {
    let attributes: ObjectAttributes = tpm_bound_attributes()
        .with_sign_encrypt(true)
        .with_decrypt(false)
        .build()
        .map_err(cmd("AK template"))?;
    ecc_template(
        attributes,
        SymmetricDefinitionObject::Null,
        EccScheme::EcDsa(HashScheme::new(HashingAlgorithm::Sha256)),
    )
}

/// The storage root key template: restricted ECC P-256 decryption key with
/// AES-128-CFB, the usual TCG SRK shape.
fn srk_template() -> Result<Public, TpmError> {
    let attributes = tpm_bound_attributes()
        .with_decrypt(true)
        .with_sign_encrypt(false)
        .build()
        .map_err(cmd("SRK template"))?;
    ecc_template(
        attributes,
        SymmetricDefinitionObject::AES_128_CFB,
        EccScheme::Null,
    )
}

fn ecc_template(
    attributes: ObjectAttributes,
    symmetric: SymmetricDefinitionObject,
    scheme: EccScheme,
) -> Result<Public, TpmError> {
    let parameters = PublicEccParametersBuilder::new()
        .with_symmetric(symmetric)
        .with_ecc_scheme(scheme)
        .with_curve(EccCurve::NistP256)
        .with_key_derivation_function_scheme(KeyDerivationFunctionScheme::Null)
        .with_is_signing_key(attributes.sign_encrypt())
        .with_is_decryption_key(attributes.decrypt())
        .with_restricted(attributes.restricted())
        .build()
        .map_err(cmd("ECC key template"))?;
    PublicBuilder::new()
        .with_public_algorithm(PublicAlgorithm::Ecc)
        .with_name_hashing_algorithm(HashingAlgorithm::Sha256)
        .with_object_attributes(attributes)
        .with_ecc_parameters(parameters)
        .with_ecc_unique_identifier(EccPoint::default())
        .build()
        .map_err(cmd("ECC key template"))
}

/// Parses a TCTI string, refusing swtpm/mssim options tss-esapi would ignore.
fn parse_tcti(tcti: &str) -> Result<TctiNameConf, TpmError> {
    let invalid = |reason: String| TpmError::InvalidTcti {
        tcti: tcti.to_owned(),
        reason,
    };
    if let Some((name @ ("swtpm" | "mssim"), conf)) = tcti.split_once(':') {
        for option in conf.split(',').filter(|o| !o.is_empty()) {
            let key = option.split_once('=').map_or(option, |(k, _)| k);
            if key != "host" && key != "port" {
                return Err(invalid(format!(
                    "tss-esapi only passes host= and port= to the {name} TCTI and would \
                     silently ignore {key}=; use {name}:host=127.0.0.1,port=N"
                )));
            }
        }
    }
    TctiNameConf::from_str(tcti).map_err(|e| invalid(e.to_string()))
}

/// Flushes transient objects and loaded sessions a previous connection left.
fn flush_leftovers(ctx: &mut Context) -> Result<(), TpmError> {
    for first in [TPM2_TRANSIENT_FIRST, TPM2_LOADED_SESSION_FIRST] {
        for handle in list_handles(ctx, first)? {
            flush_leftover(ctx, handle);
        }
    }
    Ok(())
}

fn list_handles(ctx: &mut Context, first: u32) -> Result<Vec<TpmHandle>, TpmError> {
    let (data, _more) = ctx
        .execute_without_session(|ctx| {
            ctx.get_capability(CapabilityType::Handles, first, MAX_LEFTOVER_HANDLES)
        })
        .map_err(cmd("GetCapability(handles)"))?;
    match data {
        CapabilityData::Handles(list) => Ok(list.into_inner()),
        other => Err(unexpected("GetCapability(handles)", format!("{other:?}"))),
    }
}

/// Best effort: a handle we cannot flush is logged, and the TPM will report
/// out-of-memory later if it really matters.
fn flush_leftover(ctx: &mut Context, handle: TpmHandle) {
    let raw = u32::from(handle);
    let result = ctx
        .execute_without_session(|ctx| ctx.tr_from_tpm_public(handle))
        .and_then(|object| ctx.flush_context(object));
    match result {
        Ok(()) => tracing::info!(
            handle = format_args!("{raw:#010x}"),
            "flushed leftover TPM handle"
        ),
        Err(e) => tracing::warn!(
            handle = format_args!("{raw:#010x}"),
            error = %e,
            "cannot flush leftover TPM handle"
        ),
    }
}

fn check_pcr(pcr: u8) -> Result<(), TpmError> {
    if pcr > MAX_PCR {
        return Err(TpmError::InvalidPcr(pcr));
    }
    Ok(())
}

fn sha256_selection(pcr: u8) -> Result<PcrSelectionList, TpmError> {
    check_pcr(pcr)?;
    let slot = PcrSlot::try_from(1u32 << pcr).map_err(cmd("PCR selection"))?;
    PcrSelectionListBuilder::new()
        .with_selection(HashingAlgorithm::Sha256, &[slot])
        .build()
        .map_err(cmd("PCR selection"))
}

fn pcr_handle(pcr: u8) -> Result<PcrHandle, TpmError> {
    check_pcr(pcr)?;
    // ESYS_TR_PCRn == n.
    PcrHandle::try_from(u32::from(pcr)).map_err(cmd("PCR handle"))
}

/// Refuses keys that are not the restricted ECDSA-SHA256 P-256 signing key
/// verifiers expect, so a wrong blob fails at load, not at verification.
fn check_ak_template(public: &Public) -> Result<(), TpmError> {
    let Public::Ecc {
        object_attributes: attrs,
        parameters,
        ..
    } = public
    else {
        return Err(TpmError::InvalidBlob("AK is not an ECC key".into()));
    };
    let sig_ok = attrs.restricted() && attrs.sign_encrypt() && !attrs.decrypt();
    let tpm_ok = attrs.fixed_tpm() && attrs.fixed_parent() && attrs.sensitive_data_origin();
    let scheme_ok =
        parameters.ecc_scheme() == EccScheme::EcDsa(HashScheme::new(HashingAlgorithm::Sha256));
    if !(sig_ok && tpm_ok && scheme_ok && parameters.ecc_curve() == EccCurve::NistP256) {
        return Err(TpmError::InvalidBlob(
            "AK is not a fixedTPM restricted ECDSA-SHA256 NIST P-256 signing key".into(),
        ));
    }
    Ok(())
}

/// SEC1 uncompressed point of an ECC P-256 public area.
fn ecc_point(public: &Public, op: &'static str) -> Result<[u8; 65], TpmError> {
    let Public::Ecc { unique, .. } = public else {
        return Err(unexpected(op, "not an ECC key"));
    };
    let mut point = [0u8; 65];
    point[0] = 0x04;
    point[1..33].copy_from_slice(&left_pad_32(op, unique.x().value())?);
    point[33..].copy_from_slice(&left_pad_32(op, unique.y().value())?);
    Ok(point)
}

/// ECDSA `r || s` in the fixed-width form ring expects.
fn ecdsa_fixed(signature: Signature) -> Result<[u8; 64], TpmError> {
    let Signature::EcDsa(sig) = signature else {
        return Err(unexpected("Quote", "signature is not ECDSA"));
    };
    if sig.hashing_algorithm() != HashingAlgorithm::Sha256 {
        return Err(unexpected("Quote", "signature hash is not sha256"));
    }
    let mut out = [0u8; 64];
    out[..32].copy_from_slice(&left_pad_32("Quote", sig.signature_r().value())?);
    out[32..].copy_from_slice(&left_pad_32("Quote", sig.signature_s().value())?);
    Ok(out)
}

/// Left-pads a big-endian integer to 32 bytes (leading zeros beyond 32 are fine).
fn left_pad_32(op: &'static str, bytes: &[u8]) -> Result<[u8; 32], TpmError> {
    let first_nonzero = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
    let significant = &bytes[first_nonzero..];
    if significant.len() > 32 {
        return Err(unexpected(op, format!("{}-byte ECC value", bytes.len())));
    }
    let mut out = [0u8; 32];
    out[32 - significant.len()..].copy_from_slice(significant);
    Ok(out)
}

fn to_32(op: &'static str, bytes: &[u8]) -> Result<[u8; 32], TpmError> {
    bytes
        .try_into()
        .map_err(|_| unexpected(op, format!("{}-byte digest, expected 32", bytes.len())))
}

/// `AKB1 || u32 len || public || u32 len || private`, big-endian lengths.
const BLOB_MAGIC: &[u8; 4] = b"AKB1";
/// TPM2B_PUBLIC / TPM2B_PRIVATE contents are far smaller; bounds garbage input.
const MAX_BLOB_PART: usize = 4096;

impl AkBlob {
    /// Serialises the blob for storage next to the USIG state.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(12 + self.public.len() + self.private.len());
        out.extend_from_slice(BLOB_MAGIC);
        put_part(&mut out, &self.public);
        put_part(&mut out, &self.private);
        out
    }

    /// Parses [`AkBlob::to_bytes`] output; a wrong header, truncated,
    /// oversized or trailing input is an error. Whether the parts form a
    /// valid AK is checked by [`TpmDevice::load_ak`].
    pub fn from_bytes(b: &[u8]) -> Result<Self, TpmError> {
        let rest = b
            .strip_prefix(BLOB_MAGIC)
            .ok_or_else(|| TpmError::InvalidBlob("missing AKB1 header".into()))?;
        let (public, rest) = take_part(rest, "public")?;
        let (private, rest) = take_part(rest, "private")?;
        if !rest.is_empty() {
            return Err(TpmError::InvalidBlob(format!(
                "{} trailing bytes",
                rest.len()
            )));
        }
        Ok(AkBlob {
            public: public.to_vec(),
            private: private.to_vec(),
        })
    }
}

fn put_part(out: &mut Vec<u8>, part: &[u8]) {
    // A Vec longer than u32::MAX cannot come from a TPM; from_bytes rejects
    // the (then inconsistent) result instead of misparsing it.
    let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(part);
}

fn take_part<'a>(b: &'a [u8], what: &str) -> Result<(&'a [u8], &'a [u8]), TpmError> {
    let truncated = || TpmError::InvalidBlob(format!("truncated {what} part"));
    let (len, rest) = b.split_first_chunk::<4>().ok_or_else(truncated)?;
    let len = u32::from_be_bytes(*len) as usize;
    if len == 0 || len > MAX_BLOB_PART {
        return Err(TpmError::InvalidBlob(format!(
            "{what} part length {len} outside 1..={MAX_BLOB_PART}"
        )));
    }
    if rest.len() < len {
        return Err(truncated());
    }
    Ok(rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tpm::swtpm::Swtpm;
    use ring::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_FIXED};

    const PCR: u8 = 7;
    const TPM_GENERATED_VALUE: [u8; 4] = [0xff, 0x54, 0x43, 0x47];
    const TPM_ST_ATTEST_QUOTE: [u8; 2] = [0x80, 0x18];

    /// Field order is drop order: connection, then swtpm, then its directory.
    struct Fixture {
        dev: TpmDevice,
        swtpm: Swtpm,
        _dir: tempfile::TempDir,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let swtpm = Swtpm::start(&dir.path().join("tpm")).expect("start swtpm");
        let dev = TpmDevice::connect(&swtpm.tcti()).expect("connect");
        Fixture {
            dev,
            swtpm,
            _dir: dir,
        }
    }

    fn sha256(parts: &[&[u8]]) -> [u8; 32] {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        parts.iter().for_each(|p| ctx.update(p));
        ctx.finish().as_ref().try_into().expect("32 bytes")
    }

    fn verify(key: &AkPublicKey, quote: &Quote) -> bool {
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, key.0)
            .verify(&quote.attest, &quote.signature)
            .is_ok()
    }

    /// Splits a TPM2B at `at`: (contents, offset after it).
    fn tpm2b(b: &[u8], at: usize) -> (&[u8], usize) {
        let len = usize::from(u16::from_be_bytes([b[at], b[at + 1]]));
        (&b[at + 2..at + 2 + len], at + 2 + len)
    }

    /// extraData and (resetCount, restartCount) of a marshalled TPMS_ATTEST.
    fn parse_attest(a: &[u8]) -> (&[u8], u32, u32) {
        let (_signer, at) = tpm2b(a, 6);
        let (extra, at) = tpm2b(a, at);
        let u32_at = |i: usize| u32::from_be_bytes(a[i..i + 4].try_into().expect("4"));
        (extra, u32_at(at + 8), u32_at(at + 12))
    }

    #[test]
    fn quote_verifies_with_ring_over_the_exact_attest_bytes() {
        let mut f = fixture();
        f.dev.create_ak().expect("create_ak");
        let key = f.dev.ak_public_key().expect("key");
        let e = sha256(&[b"entry"]);
        f.dev.pcr_extend(PCR, &e).expect("extend");
        let quote = f.dev.quote(PCR, &e).expect("quote");

        assert!(
            verify(&key, &quote),
            "signature must cover the attest bytes"
        );
        assert_eq!(quote.attest[..4], TPM_GENERATED_VALUE);
        assert_eq!(quote.attest[4..6], TPM_ST_ATTEST_QUOTE);
        let (extra, _, _) = parse_attest(&quote.attest);
        assert_eq!(extra, e);
        // TPMS_QUOTE_INFO ends the attest: count=1, sha256, sizeofSelect 3, bitmap, pcrDigest.
        let pcr = f.dev.pcr_read(PCR).expect("read");
        let tail = &quote.attest[quote.attest.len() - 44..];
        assert_eq!(tail[..12], [0, 0, 0, 1, 0x00, 0x0b, 3, 0x80, 0, 0, 0, 32]);
        assert_eq!(tail[12..], sha256(&[&pcr]));

        let mut tampered = quote.clone();
        tampered.attest[10] ^= 1;
        assert!(!verify(&key, &tampered));
    }

    #[test]
    fn pcr_extend_hash_chains_in_the_sha256_bank() {
        let mut f = fixture();
        let old = f.dev.pcr_read(PCR).expect("read");
        assert_eq!(old, [0; 32]);
        let e = sha256(&[b"one"]);
        f.dev.pcr_extend(PCR, &e).expect("extend");
        let new = f.dev.pcr_read(PCR).expect("read");
        assert_eq!(new, sha256(&[&old, &e]));
        assert!(matches!(f.dev.pcr_read(24), Err(TpmError::InvalidPcr(24))));
        assert!(matches!(
            f.dev.pcr_extend(200, &e),
            Err(TpmError::InvalidPcr(200))
        ));
    }

    #[test]
    fn restart_bumps_reset_count_resets_pcr_and_reloads_the_same_ak() {
        let mut f = fixture();
        let blob = f.dev.create_ak().expect("create_ak");
        let key = f.dev.ak_public_key().expect("key");
        let name = f.dev.ak_name().expect("name");
        let identity = f.dev.tpm_identity().expect("identity");
        let (reset, restart) = f.dev.epoch().expect("epoch");
        let offset = f.dev.ak_epoch_offset().expect("offset");
        assert_ne!(
            offset,
            (0, 0),
            "a storage-hierarchy AK's counters are obfuscated"
        );
        f.dev.pcr_extend(PCR, &[1; 32]).expect("extend");

        f.swtpm.restart().expect("restart");
        // The swtpm TCTI reconnects per command, so the old connection still
        // works, but the reset flushed its AK.
        assert_eq!(f.dev.pcr_read(PCR).expect("read"), [0; 32]);
        assert!(
            f.dev.quote(PCR, &[0; 32]).is_err(),
            "AK is gone after reset"
        );
        f.dev = TpmDevice::connect(&f.swtpm.tcti()).expect("reconnect");
        assert!(matches!(f.dev.ak_epoch_offset(), Err(TpmError::NoAk)));
        f.dev.load_ak(&blob).expect("load_ak");

        assert_eq!(f.dev.epoch().expect("epoch"), (reset + 1, restart));
        assert_eq!(f.dev.pcr_read(PCR).expect("read"), [0; 32]);
        assert_eq!(f.dev.ak_public_key().expect("key"), key);
        assert_eq!(f.dev.ak_name().expect("name"), name);
        assert_eq!(f.dev.tpm_identity().expect("identity"), identity);
        let e = [9; 32];
        let quote = f.dev.quote(PCR, &e).expect("quote");
        assert!(verify(&key, &quote));
        let (extra, obf_reset, obf_restart) = parse_attest(&quote.attest);
        assert_eq!(extra, &e[..]);
        assert_eq!(
            f.dev.ak_epoch_offset().expect("offset"),
            offset,
            "offset is fixed per AK"
        );
        assert_eq!(
            (
                obf_reset.wrapping_sub(offset.0),
                obf_restart.wrapping_sub(offset.1)
            ),
            (reset + 1, restart)
        );
    }

    #[test]
    fn repeated_power_loss_does_not_lock_out_the_ak() {
        let mut f = fixture();
        let blob = f.dev.create_ak().expect("create_ak");
        let (reset, _) = f.dev.epoch().expect("epoch");
        for i in 1..=5 {
            // Using a DA-protected key and then losing power counts as a
            // failed authorization; without noDA this locks out after a few.
            f.dev.quote(PCR, &[3; 32]).expect("quote");
            f.swtpm.restart().expect("restart");
            f.dev = TpmDevice::connect(&f.swtpm.tcti()).expect("reconnect");
            f.dev.load_ak(&blob).expect("load_ak");
            assert_eq!(f.dev.epoch().expect("epoch"), (reset + i, 0));
        }
    }

    #[test]
    fn ak_name_is_sha256_name_of_the_blob_public_area() {
        let mut f = fixture();
        let blob = f.dev.create_ak().expect("create_ak");
        let name = f.dev.ak_name().expect("name");
        let mut expected = vec![0x00, 0x0b];
        expected.extend_from_slice(&sha256(&[&blob.public]));
        assert_eq!(name, expected);
        let key = f.dev.ak_public_key().expect("key");
        assert_eq!(key.0[0], 0x04);
    }

    #[test]
    fn each_create_ak_makes_a_new_key_and_reloading_swaps_back() {
        let mut f = fixture();
        let first = f.dev.create_ak().expect("first");
        let first_key = f.dev.ak_public_key().expect("key");
        f.dev.create_ak().expect("second");
        assert_ne!(f.dev.ak_public_key().expect("key"), first_key);
        for _ in 0..5 {
            // Repeated loads must not leak object slots (swtpm has only a few).
            f.dev.load_ak(&first).expect("reload");
        }
        assert_eq!(f.dev.ak_public_key().expect("key"), first_key);
    }

    #[test]
    fn connect_flushes_objects_and_sessions_left_behind() {
        let mut f = fixture();
        leak_objects_and_sessions(&f.swtpm.tcti());
        // swtpm holds only 3 loaded sessions: without the cleanup the policy
        // session create_ak needs would fail with TPM_RC_SESSION_MEMORY.
        assert_eq!(count_handles(&mut f.dev), 5);
        f.dev = TpmDevice::connect(&f.swtpm.tcti()).expect("reconnect");
        assert_eq!(count_handles(&mut f.dev), 0);
        f.dev.create_ak().expect("create_ak after cleanup");
        f.dev.quote(PCR, &[0; 32]).expect("quote after cleanup");
    }

    /// Creates two EKs and three sessions on a second connection and forgets that
    /// connection without flushing, as a crashed process would.
    fn leak_objects_and_sessions(tcti: &str) {
        let mut ctx = Context::new(parse_tcti(tcti).expect("tcti")).expect("context");
        let ecc = AsymmetricAlgorithmSelection::Ecc(EccCurve::NistP256);
        for _ in 0..2 {
            ek::create_ek_object_2(&mut ctx, ecc, None).expect("ek");
        }
        for kind in [SessionType::Hmac, SessionType::Hmac, SessionType::Policy] {
            ctx.start_auth_session(
                None,
                None,
                None,
                kind,
                SymmetricDefinition::AES_128_CFB,
                HashingAlgorithm::Sha256,
            )
            .expect("session")
            .expect("some session");
        }
        std::mem::forget(ctx);
    }

    fn count_handles(dev: &mut TpmDevice) -> usize {
        [TPM2_TRANSIENT_FIRST, TPM2_LOADED_SESSION_FIRST]
            .iter()
            .map(|&first| list_handles(&mut dev.ctx, first).expect("list").len())
            .sum()
    }

    /// The attacks a compromised host would try on the AK and the PCRs directly, with the whole
    /// TSS at hand: the restricted AK refuses to sign anything the TPM did not generate, and the
    /// chain PCRs cannot be reset from software (which is why usigd refuses PCR 16).
    #[test]
    fn restricted_ak_and_static_pcrs_resist_a_host_with_the_tss() {
        use tss_esapi::{
            constants::tss::{TPM2_RH_NULL, TPM2_ST_HASHCHECK},
            structures::{HashcheckTicket, MaxBuffer},
            tss2_esys::TPMT_TK_HASHCHECK,
        };
        let mut f = fixture();
        f.dev.create_ak().expect("create_ak");
        let ak = f.dev.loaded_ak().expect("ak").handle;
        // A fabricated quote claiming whatever PCR value the attacker likes.
        let mut forged = TPM_GENERATED_VALUE.to_vec();
        forged.extend_from_slice(&TPM_ST_ATTEST_QUOTE);
        forged.extend_from_slice(&[0x42; 100]);
        let buffer = MaxBuffer::try_from(forged.clone()).expect("buffer");
        let (digest, ticket) = f
            .dev
            .ctx
            .execute_without_session(|c| c.hash(buffer, HashingAlgorithm::Sha256, Hierarchy::Owner))
            .expect("hash");
        let signed = f.dev.ctx.execute_with_nullauth_session(|c| {
            c.sign(ak, digest.clone(), SignatureScheme::Null, ticket)
        });
        assert!(
            signed.is_err(),
            "TPM_GENERATED_VALUE data gets no hashcheck ticket"
        );
        let null_ticket = HashcheckTicket::try_from(TPMT_TK_HASHCHECK {
            tag: TPM2_ST_HASHCHECK,
            hierarchy: TPM2_RH_NULL,
            digest: Default::default(),
        })
        .expect("ticket");
        let signed = f.dev.ctx.execute_with_nullauth_session(|c| {
            c.sign(ak, digest, SignatureScheme::Null, null_ticket)
        });
        assert!(signed.is_err(), "a restricted key signs no external digest");

        f.dev.pcr_extend(8, &[1; 32]).expect("extend");
        let reset = f
            .dev
            .ctx
            .execute_with_nullauth_session(|c| c.pcr_reset(PcrHandle::Pcr8));
        assert!(reset.is_err(), "PCR 8 cannot be reset from locality 0");
        assert_ne!(f.dev.pcr_read(8).expect("read"), [0; 32]);
        f.dev.pcr_extend(16, &[1; 32]).expect("extend");
        f.dev
            .ctx
            .execute_with_nullauth_session(|c| c.pcr_reset(PcrHandle::Pcr16))
            .expect("PCR 16 is resettable, so it must never hold a chain");
        assert_eq!(f.dev.pcr_read(16).expect("read"), [0; 32]);
    }

    #[test]
    fn operations_needing_the_ak_fail_cleanly_without_one() {
        let mut f = fixture();
        assert!(matches!(f.dev.quote(PCR, &[0; 32]), Err(TpmError::NoAk)));
        assert!(matches!(f.dev.ak_public_key(), Err(TpmError::NoAk)));
        assert!(matches!(f.dev.ak_name(), Err(TpmError::NoAk)));
        let garbage = AkBlob {
            public: vec![1, 2, 3],
            private: vec![4],
        };
        assert!(matches!(
            f.dev.load_ak(&garbage),
            Err(TpmError::InvalidBlob(_))
        ));
    }

    #[test]
    fn tcti_options_tss_esapi_would_drop_are_refused() {
        for tcti in [
            "swtpm:path=/tmp/x/server.sock",
            "mssim:host=localhost,path=/x",
        ] {
            let err = TpmDevice::connect(tcti).expect_err("must refuse");
            assert!(matches!(err, TpmError::InvalidTcti { .. }), "{err}");
        }
        let err = TpmDevice::connect("bogus:thing").expect_err("must refuse");
        assert!(matches!(err, TpmError::InvalidTcti { .. }), "{err}");
    }

    #[test]
    fn connect_to_nothing_says_what_failed() {
        // Port 1 on loopback: nothing listens there.
        let err = TpmDevice::connect("swtpm:host=127.0.0.1,port=1").expect_err("no TPM");
        let msg = err.to_string();
        assert!(
            msg.contains("cannot connect to TPM at swtpm:host=127.0.0.1,port=1"),
            "{msg}"
        );
    }

    #[test]
    fn blob_bytes_round_trip_and_reject_malformed_input() {
        let blob = AkBlob {
            public: (0..90).collect(),
            private: (0..126).rev().collect(),
        };
        let bytes = blob.to_bytes();
        assert_eq!(AkBlob::from_bytes(&bytes).expect("parse"), blob);
        for len in 0..bytes.len() {
            assert!(
                AkBlob::from_bytes(&bytes[..len]).is_err(),
                "truncated at {len}"
            );
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(AkBlob::from_bytes(&trailing).is_err());
        let mut huge = bytes.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(AkBlob::from_bytes(&huge).is_err());
        assert!(AkBlob::from_bytes(b"garbage garbage garbage").is_err());
    }

    #[test]
    fn device_can_move_between_threads() {
        fn assert_send<T: Send>() {}
        assert_send::<TpmDevice>();
    }
}
