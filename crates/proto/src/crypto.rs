//! Ed25519 keys and signatures for clients and nodes, and domain-separated signing of message
//! fields.

use serde::{Deserialize, Serialize};
use std::fmt;

/// An Ed25519 signature.
#[derive(Copy, Clone, PartialEq, Eq)]
pub struct Signature(pub [u8; 64]);

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature({}..)", hex::encode(&self.0[..8]))
    }
}

impl Serialize for Signature {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Signature {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Signature;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("64 signature bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Signature, E> {
                v.try_into()
                    .map(Signature)
                    .map_err(|_| E::invalid_length(v.len(), &self))
            }
        }
        d.deserialize_bytes(V)
    }
}

/// An Ed25519 public key.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct PublicKey(pub [u8; 32]);

impl PublicKey {
    /// Checks `signature` over `domain || message`.
    pub fn verify(&self, domain: &[u8], message: &[u8], signature: &Signature) -> bool {
        let key = ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, self.0);
        key.verify(&domain_separated(domain, message), &signature.0)
            .is_ok()
    }

    /// Lower-case hex, as configuration files hold it.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses lower- or upper-case hex of 32 bytes.
    pub fn from_hex(text: &str) -> Option<Self> {
        hex::decode(text).ok()?.try_into().ok().map(PublicKey)
    }
}

/// An Ed25519 signing key, kept as its 32-byte seed.
pub struct SigningKey {
    seed: [u8; 32],
    pair: ring::signature::Ed25519KeyPair,
}

impl SigningKey {
    /// The key for a seed (from `cloudbft keygen`, or fixed in tests and simulations).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        // Any 32 bytes are a valid Ed25519 seed; ring only rejects other lengths.
        let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed)
            .expect("32-byte Ed25519 seed");
        SigningKey { seed, pair }
    }

    /// A new random key.
    pub fn generate() -> Result<Self, ring::error::Unspecified> {
        let mut seed = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut seed)?;
        Ok(Self::from_seed(seed))
    }

    /// The seed, to store the key.
    pub fn seed(&self) -> &[u8; 32] {
        &self.seed
    }

    /// The public half.
    pub fn public_key(&self) -> PublicKey {
        use ring::signature::KeyPair;
        let mut out = [0u8; 32];
        out.copy_from_slice(self.pair.public_key().as_ref());
        PublicKey(out)
    }

    /// Signs `domain || message`.
    pub fn sign(&self, domain: &[u8], message: &[u8]) -> Signature {
        let mut out = [0u8; 64];
        out.copy_from_slice(self.pair.sign(&domain_separated(domain, message)).as_ref());
        Signature(out)
    }
}

fn domain_separated(domain: &[u8], message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(domain.len() + 1 + message.len());
    out.extend_from_slice(domain);
    out.push(0);
    out.extend_from_slice(message);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_bind_domain_and_message() {
        let key = SigningKey::from_seed([5; 32]);
        let sig = key.sign(b"d", b"m");
        let pk = key.public_key();
        assert!(pk.verify(b"d", b"m", &sig));
        assert!(!pk.verify(b"e", b"m", &sig));
        assert!(!pk.verify(b"d", b"n", &sig));
        assert!(!SigningKey::from_seed([6; 32])
            .public_key()
            .verify(b"d", b"m", &sig));
        assert_eq!(PublicKey::from_hex(&pk.to_hex()), Some(pk));
        assert_eq!(PublicKey::from_hex("abcd"), None);
    }

    #[test]
    fn signature_serde_checks_length() {
        let sig = SigningKey::from_seed([1; 32]).sign(b"d", b"m");
        let bytes = wire::encode(&sig).unwrap();
        assert_eq!(wire::decode::<Signature>(&bytes).unwrap(), sig);
        let short = wire::encode(&serde_bytes_of(&[1u8; 63])).unwrap();
        assert!(wire::decode::<Signature>(&short).is_err());
    }

    fn serde_bytes_of(b: &[u8]) -> Vec<u8> {
        b.to_vec()
    }
}
