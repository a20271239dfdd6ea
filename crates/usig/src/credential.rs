//! Proving that an attestation key lives in the TPM of a given endorsement key, by credential
//! activation (TPM 2.0 Part 1, "Credential Protection"), with the verifier's side in software.
//!
//! The verifier knows the TPM's endorsement key (EK, from its certificate or from enrollment)
//! and the AK's public area. It encrypts a random secret to the EK, bound to the AK's name
//! ([`challenge`], which is what `TPM2_MakeCredential` computes). Only a TPM that holds the EK's
//! private key *and* has an object with exactly that name loaded returns the secret
//! (`TPM2_ActivateCredential`): the TPM checks the name itself, so an AK of another TPM (or an
//! unrestricted key under this EK) cannot answer. The EK is a restricted decryption key in the
//! endorsement hierarchy: software cannot make it decrypt anything else, and its private key
//! never leaves the TPM.
//!
//! The proof convinces the party that made the challenge and saw the answer; it is interactive
//! by nature (a recorded transcript proves nothing to a third party: whoever made the challenge
//! knew the secret). `TPM2_Certify` of the EK by the AK would not do either: a host can load any
//! EK's public area into its own TPM with `TPM2_LoadExternal` and have it certified.
//!
//! The EK is the TCG default ECC NIST P-256 EK (template L-2: nameAlg SHA-256, AES-128-CFB), the
//! one whose public key [`crate::tpm::device::TpmDevice::tpm_identity`] hashes.

use aes::cipher::{BlockEncrypt, KeyInit};
use ring::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey, ECDH_P256};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// What the verifier sends to the machine: `TPM2_ActivateCredential`'s inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// Contents of the TPM2B_ID_OBJECT: integrity HMAC (as a TPM2B) and the encrypted secret.
    pub credential_blob: Vec<u8>,
    /// Contents of the TPM2B_ENCRYPTED_SECRET: the verifier's ephemeral ECC point (TPMS_ECC_POINT).
    pub encrypted_secret: Vec<u8>,
}

/// What the verifier keeps: the secret the right TPM returns.
#[derive(Debug)]
pub struct Expected {
    secret: [u8; 32],
}

/// Why a challenge could not be made or was not answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("the endorsement key is not an uncompressed NIST P-256 point")]
    BadEndorsementKey,
    #[error("the system random number generator failed")]
    Random,
    #[error(
        "the TPM returned another secret: the attestation key is not loaded in the TPM of this \
         endorsement key"
    )]
    WrongAnswer,
}

/// The TPM name of a public area with nameAlg SHA-256: `0x000b || SHA-256(TPMT_PUBLIC)`.
pub fn name_of(public_area: &[u8]) -> Vec<u8> {
    let mut name = vec![0x00, 0x0b];
    name.extend_from_slice(ring::digest::digest(&ring::digest::SHA256, public_area).as_ref());
    name
}

/// A fresh challenge for the AK whose public area is `ak_public_area` in the TPM whose EK is
/// `ek_public` (SEC1 uncompressed P-256 point), and the secret the right TPM will return.
pub fn challenge(
    ek_public: &[u8; 65],
    ak_public_area: &[u8],
) -> Result<(Challenge, Expected), CredentialError> {
    let rng = SystemRandom::new();
    let mut secret = [0u8; 32];
    rng.fill(&mut secret).map_err(|_| CredentialError::Random)?;
    let ephemeral =
        EphemeralPrivateKey::generate(&ECDH_P256, &rng).map_err(|_| CredentialError::Random)?;
    let q_e = ephemeral
        .compute_public_key()
        .map_err(|_| CredentialError::Random)?;
    let q_e: [u8; 65] = q_e
        .as_ref()
        .try_into()
        .map_err(|_| CredentialError::Random)?;
    let z = agreement::agree_ephemeral(
        ephemeral,
        &UnparsedPublicKey::new(&ECDH_P256, ek_public),
        |z| <[u8; 32]>::try_from(z).ok(),
    )
    .ok()
    .flatten()
    .ok_or(CredentialError::BadEndorsementKey)?;
    let challenge = make_credential(&z, &q_e, ek_public, &name_of(ak_public_area), &secret);
    Ok((challenge, Expected { secret }))
}

impl Expected {
    /// Checks the machine's answer.
    pub fn check(&self, answer: &[u8]) -> Result<(), CredentialError> {
        // Not secret after this point, so a plain comparison is fine.
        if answer == self.secret {
            Ok(())
        } else {
            Err(CredentialError::WrongAnswer)
        }
    }
}

/// `TPM2_MakeCredential` for an ECC P-256 EK with nameAlg SHA-256 and AES-128-CFB, given the
/// ECDH shared secret `z` with ephemeral point `q_e`.
fn make_credential(
    z: &[u8; 32],
    q_e: &[u8; 65],
    ek: &[u8; 65],
    name: &[u8],
    secret: &[u8; 32],
) -> Challenge {
    // seed = KDFe(SHA-256, Z, "IDENTITY", Qe.x, QEK.x, 256)
    let seed = sha256(&[
        &1u32.to_be_bytes(),
        z,
        b"IDENTITY\0",
        &q_e[1..33],
        &ek[1..33],
    ]);
    let sym_key: [u8; 16] = kdfa(&seed, b"STORAGE\0", name, 128)[..16]
        .try_into()
        .expect("16 bytes");
    let hmac_key = kdfa(&seed, b"INTEGRITY\0", &[], 256);
    // encIdentity = AES-128-CFB(symKey, IV = 0, TPM2B_DIGEST(secret))
    let mut plain = Vec::with_capacity(34);
    plain.extend_from_slice(&32u16.to_be_bytes());
    plain.extend_from_slice(secret);
    let enc_identity = aes128_cfb_encrypt(&sym_key, &plain);
    let mut mac = hmac::Context::with_key(&hmac::Key::new(hmac::HMAC_SHA256, &hmac_key));
    mac.update(&enc_identity);
    mac.update(name);
    let outer = mac.sign();
    let mut credential_blob = Vec::with_capacity(2 + 32 + enc_identity.len());
    credential_blob.extend_from_slice(&32u16.to_be_bytes());
    credential_blob.extend_from_slice(outer.as_ref());
    credential_blob.extend_from_slice(&enc_identity);
    // TPMS_ECC_POINT: TPM2B x, TPM2B y.
    let mut encrypted_secret = Vec::with_capacity(68);
    for coordinate in [&q_e[1..33], &q_e[33..]] {
        encrypted_secret.extend_from_slice(&32u16.to_be_bytes());
        encrypted_secret.extend_from_slice(coordinate);
    }
    Challenge {
        credential_blob,
        encrypted_secret,
    }
}

fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    parts.iter().for_each(|p| ctx.update(p));
    ctx.finish().as_ref().try_into().expect("32 bytes")
}

/// KDFa (SP 800-108 counter mode with HMAC-SHA-256), as the TPM specification defines it:
/// `HMAC(key, [i] || label || contextU || contextV || [bits])` with the label's NUL included
/// and an empty contextV.
fn kdfa(key: &[u8], label: &[u8], context_u: &[u8], bits: u32) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut out = Vec::new();
    let mut i = 1u32;
    while out.len() * 8 < bits as usize {
        let mut mac = hmac::Context::with_key(&key);
        mac.update(&i.to_be_bytes());
        mac.update(label);
        mac.update(context_u);
        mac.update(&bits.to_be_bytes());
        out.extend_from_slice(mac.sign().as_ref());
        i += 1;
    }
    out.truncate(bits as usize / 8);
    out
}

/// AES-128 in CFB mode with full-block feedback and a zero IV (what the TPM uses for
/// credentials); the last block may be partial.
fn aes128_cfb_encrypt(key: &[u8; 16], plain: &[u8]) -> Vec<u8> {
    let cipher = aes::Aes128::new(key.into());
    let mut feedback = [0u8; 16];
    let mut out = Vec::with_capacity(plain.len());
    for chunk in plain.chunks(16) {
        let mut block = aes::Block::from(feedback);
        cipher.encrypt_block(&mut block);
        let start = out.len();
        out.extend(chunk.iter().zip(block.iter()).map(|(p, k)| p ^ k));
        if chunk.len() == 16 {
            feedback.copy_from_slice(&out[start..]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NIST SP 800-38A F.3.13 (CFB128-AES128): the first ciphertext block is P1 XOR E(IV), and
    /// each further block feeds the previous ciphertext block back. The TPM's ActivateCredential
    /// on swtpm checks the whole construction (tests/ek.rs).
    #[test]
    fn cfb_follows_the_nist_construction() {
        let key: [u8; 16] = hex::decode("2b7e151628aed2a6abf7158809cf4f3c")
            .expect("hex")
            .try_into()
            .expect("16");
        let cipher = aes::Aes128::new((&key).into());
        let iv: [u8; 16] = hex::decode("000102030405060708090a0b0c0d0e0f")
            .expect("hex")
            .try_into()
            .expect("16");
        let mut block = aes::Block::from(iv);
        cipher.encrypt_block(&mut block);
        let p1 = hex::decode("6bc1bee22e409f96e93d7e117393172a").expect("hex");
        let c1: Vec<u8> = p1.iter().zip(block.iter()).map(|(p, k)| p ^ k).collect();
        assert_eq!(hex::encode(c1), "3b3fd92eb72dad20333449f8e83cfb4a");

        let plain: Vec<u8> = (0..34).collect();
        let ours = aes128_cfb_encrypt(&key, &plain);
        let mut feedback = aes::Block::default();
        for (i, chunk) in plain.chunks(16).enumerate() {
            cipher.encrypt_block(&mut feedback);
            let expected: Vec<u8> = chunk
                .iter()
                .zip(feedback.iter())
                .map(|(p, k)| p ^ k)
                .collect();
            assert_eq!(
                ours[i * 16..i * 16 + chunk.len()],
                expected[..],
                "block {i}"
            );
            if chunk.len() == 16 {
                let next: [u8; 16] = ours[i * 16..i * 16 + 16].try_into().expect("16");
                feedback = aes::Block::from(next);
            }
        }
    }

    #[test]
    fn challenges_are_fresh_and_refuse_a_bad_ek() {
        let ek = {
            let rng = SystemRandom::new();
            let k = EphemeralPrivateKey::generate(&ECDH_P256, &rng).expect("key");
            <[u8; 65]>::try_from(k.compute_public_key().expect("public").as_ref()).expect("65")
        };
        let (a, expected) = challenge(&ek, b"ak area").expect("challenge");
        let (b, _) = challenge(&ek, b"ak area").expect("challenge");
        assert_ne!(a, b);
        assert_eq!(a.credential_blob.len(), 2 + 32 + 34);
        assert_eq!(a.encrypted_secret.len(), 68);
        assert_eq!(expected.check(&[0; 32]), Err(CredentialError::WrongAnswer));
        assert!(expected.check(&expected.secret).is_ok());
        let mut off_curve = ek;
        off_curve[64] ^= 1;
        assert_eq!(
            challenge(&off_curve, b"ak area").unwrap_err(),
            CredentialError::BadEndorsementKey
        );
    }
}
