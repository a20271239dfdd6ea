//! Ed25519 keys and signatures for clients and nodes, and domain-separated signing of message
//! fields.
//!
//! Signing is RFC 8032 (ring). Checking follows ZIP 215 (`zip215`, whose doc says why): a batch
//! check ([`verify_batch`]) accepts exactly the signatures that single checks accept. Replicas
//! derive the global order from which client REQUESTs verify, and one replica may check a
//! request alone while another checks it in a batch with others; under the RFC's rules
//! (cofactorless, as ring checks them) a client could craft a signature that one way accepts and
//! the other refuses, and split correct replicas' order books.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The domain of a node's signature over an authenticated link's handshake transcript
/// (`net::link`), apart from every protocol message's, so that neither can pass for the other.
/// Nodes sign with it and check it (node drivers), and so do client endpoints, which REPLYs
/// reach on links their replicas open.
pub const LINK_HANDSHAKE_DOMAIN: &[u8] = b"cloudbft/link-handshake/v1";

/// An Ed25519 signature.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
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
    /// Checks `signature` over `domain || message` (ZIP 215 rules, see the module's doc).
    pub fn verify(&self, domain: &[u8], message: &[u8], signature: &Signature) -> bool {
        zip215::verify(&self.0, &[domain, &[0], message], &signature.0)
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

/// One signature for [`verify_batch`]: `signature` by `key` over `domain || message`.
#[derive(Debug, Clone, Copy)]
pub struct Signed<'a> {
    pub key: &'a PublicKey,
    pub domain: &'a [u8],
    pub message: &'a [u8],
    pub signature: &'a Signature,
}

/// Checks many signatures at once and says which are valid, exactly as
/// [`PublicKey::verify`] would one by one (`zip215::verify_batch`: from about 8 signatures on,
/// each costs well under half a single check; a failed batch is checked one by one).
pub fn verify_batch(items: &[Signed<'_>]) -> Vec<bool> {
    let messages: Vec<[&[u8]; 3]> = items
        .iter()
        .map(|item| [item.domain, &[0], item.message])
        .collect();
    let batch: Vec<zip215::Signed<'_>> = items
        .iter()
        .zip(&messages)
        .map(|(item, message)| zip215::Signed {
            key: &item.key.0,
            message,
            signature: &item.signature.0,
        })
        .collect();
    zip215::verify_batch(&batch)
}

/// The bytes a signature covers: the domain, a zero byte, the message.
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
    fn a_batch_finds_exactly_the_bad_signatures() {
        let keys: Vec<SigningKey> = (0..12u8).map(|i| SigningKey::from_seed([i; 32])).collect();
        let publics: Vec<PublicKey> = keys.iter().map(SigningKey::public_key).collect();
        let messages: Vec<Vec<u8>> = (0..12u8).map(|i| vec![i; 40]).collect();
        let mut signatures: Vec<Signature> = keys
            .iter()
            .zip(&messages)
            .map(|(k, m)| k.sign(b"d", m))
            .collect();
        let items = |signatures: &[Signature]| -> Vec<bool> {
            let batch: Vec<Signed<'_>> = (0..12)
                .map(|i| Signed {
                    key: &publics[i],
                    domain: b"d",
                    message: &messages[i],
                    signature: &signatures[i],
                })
                .collect();
            verify_batch(&batch)
        };
        assert_eq!(items(&signatures), vec![true; 12]);
        // A signature over another message, one by another key, one with a flipped bit.
        signatures[3] = keys[3].sign(b"d", b"other");
        signatures[7] = keys[8].sign(b"d", &messages[7]);
        signatures[10].0[5] ^= 1;
        let expected: Vec<bool> = (0..12).map(|i| ![3, 7, 10].contains(&i)).collect();
        assert_eq!(items(&signatures), expected);
        assert!(verify_batch(&[]).is_empty());
    }

    #[test]
    fn a_non_canonical_s_is_refused_alone_and_in_a_batch() {
        // s + l: the same point equation, but s not reduced (RFC 8032 and ZIP 215 refuse it).
        const L: [u8; 32] = [
            0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9,
            0xde, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
        ];
        let key = SigningKey::from_seed([9; 32]);
        let good = key.sign(b"d", b"m");
        let mut high = good;
        let mut carry = 0u16;
        for (i, l) in L.iter().enumerate() {
            let sum = u16::from(good.0[32 + i]) + u16::from(*l) + carry;
            high.0[32 + i] = sum as u8;
            carry = sum >> 8;
        }
        let pk = key.public_key();
        assert!(!pk.verify(b"d", b"m", &high));
        let item = |signature| Signed {
            key: &pk,
            domain: b"d",
            message: b"m",
            signature,
        };
        assert_eq!(verify_batch(&[item(&good), item(&high)]), [true, false]);
    }

    /// The case RFC 8032's checkers and ZIP 215's disagree on: a public key with a small-order
    /// component (a Byzantine client may register one). ring refuses its signatures; ours
    /// accept them, alone and in every batch, so correct replicas never split on them.
    #[test]
    fn a_key_with_a_torsion_component_gets_the_same_verdict_alone_and_in_a_batch() {
        use curve25519_dalek::constants;
        use curve25519_dalek::edwards::EdwardsPoint;
        use curve25519_dalek::scalar::Scalar;
        use sha2::{Digest, Sha512};
        let a = Scalar::from_bytes_mod_order([3; 32]);
        let torsion = constants::EIGHT_TORSION[1];
        let public = PublicKey(
            (constants::ED25519_BASEPOINT_POINT * a + torsion)
                .compress()
                .0,
        );
        let message = domain_separated(b"d", b"m");
        let r = Scalar::from_bytes_mod_order([5; 32]);
        let big_r: EdwardsPoint = constants::ED25519_BASEPOINT_POINT * r;
        let k = Scalar::from_hash(
            Sha512::new()
                .chain_update(big_r.compress().as_bytes())
                .chain_update(public.0)
                .chain_update(&message),
        );
        let mut signature = Signature([0; 64]);
        signature.0[..32].copy_from_slice(big_r.compress().as_bytes());
        signature.0[32..].copy_from_slice((r + k * a).as_bytes());
        let ring_says =
            ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public.0)
                .verify(&message, &signature.0)
                .is_ok();
        // The cofactorless equation misses by k times the torsion point (of order 8): these
        // seeds make k odd, so RFC 8032's check refuses.
        assert_eq!(k.as_bytes()[0] % 2, 1);
        assert!(!ring_says);
        assert!(public.verify(b"d", b"m", &signature));
        let other = SigningKey::from_seed([1; 32]);
        let other_public = other.public_key();
        let other_signature = other.sign(b"d", b"m");
        let items = [
            Signed {
                key: &public,
                domain: b"d",
                message: b"m",
                signature: &signature,
            },
            Signed {
                key: &other_public,
                domain: b"d",
                message: b"m",
                signature: &other_signature,
            },
        ];
        assert_eq!(verify_batch(&items), [true, true]);
    }

    proptest::proptest! {
        #[test]
        fn batch_and_single_checks_agree(
            flips in proptest::collection::vec((0usize..8, 0usize..64, 0u8..8), 0..4),
        ) {
            let keys: Vec<SigningKey> = (0..8u8).map(|i| SigningKey::from_seed([i + 40; 32])).collect();
            let publics: Vec<PublicKey> = keys.iter().map(SigningKey::public_key).collect();
            let mut signatures: Vec<Signature> =
                keys.iter().map(|k| k.sign(b"d", b"same message")).collect();
            for (who, byte, bit) in flips {
                signatures[who].0[byte] ^= 1 << bit;
            }
            let batch: Vec<Signed<'_>> = (0..8)
                .map(|i| Signed { key: &publics[i], domain: b"d", message: b"same message", signature: &signatures[i] })
                .collect();
            let singles: Vec<bool> = batch.iter().map(|s| s.key.verify(s.domain, s.message, s.signature)).collect();
            let reference: Vec<bool> = batch.iter().map(zebra_says).collect();
            proptest::prop_assert_eq!(&singles, &reference);
            proptest::prop_assert_eq!(verify_batch(&batch), singles);
        }
    }

    /// ed25519-zebra's verdict: the ZIP 215 reference.
    fn zebra_says(item: &Signed<'_>) -> bool {
        ed25519_zebra::VerificationKey::try_from(item.key.0).is_ok_and(|key| {
            key.verify(
                &ed25519_zebra::Signature::from_bytes(&item.signature.0),
                &domain_separated(item.domain, item.message),
            )
            .is_ok()
        })
    }

    /// The encodings ZIP 215 is precise about: non-canonical `y` (at or above p), a sign bit
    /// on `x = 0`, small-order points, `s` at or above the group order. Every combination for
    /// `A` and `R` gets ed25519-zebra's verdict, alone and in a batch with a good signature.
    #[test]
    fn edge_encodings_get_the_reference_verdicts() {
        let with_last = |first: u8, middle: u8, last: u8| {
            let mut b = [middle; 32];
            b[0] = first;
            b[31] = last;
            b
        };
        let points = [
            with_last(1, 0, 0),          // the identity
            with_last(1, 0, 0x80),       // the identity, x = 0 with the sign bit
            with_last(0xee, 0xff, 0x7f), // p + 1: the identity, not canonical
            with_last(0, 0, 0),          // y = 0: order 4
            with_last(0xed, 0xff, 0x7f), // p: y = 0, not canonical
            with_last(0xec, 0xff, 0x7f), // p - 1: y = -1, order 2
            with_last(2, 0, 0),          // y = 2: not on the curve
            SigningKey::from_seed([7; 32]).public_key().0,
        ];
        const L: [u8; 32] = [
            0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9,
            0xde, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
        ];
        let mut l_minus_1 = L;
        l_minus_1[0] -= 1;
        let scalars = [[0; 32], with_last(1, 0, 0), l_minus_1, L];
        let good_key = SigningKey::from_seed([8; 32]);
        let good_public = good_key.public_key();
        let good_signature = good_key.sign(b"d", b"m");
        let good = Signed {
            key: &good_public,
            domain: b"d",
            message: b"m",
            signature: &good_signature,
        };
        let mut accepted = 0;
        for a in points {
            for r in points {
                for s in scalars {
                    let key = PublicKey(a);
                    let mut signature = Signature([0; 64]);
                    signature.0[..32].copy_from_slice(&r);
                    signature.0[32..].copy_from_slice(&s);
                    let item = Signed {
                        key: &key,
                        domain: b"d",
                        message: b"m",
                        signature: &signature,
                    };
                    let expected = zebra_says(&item);
                    accepted += usize::from(expected);
                    assert_eq!(
                        key.verify(b"d", b"m", &signature),
                        expected,
                        "A {a:02x?} R {r:02x?} s {s:02x?}"
                    );
                    assert_eq!(verify_batch(&[item, good]), [expected, true]);
                }
            }
        }
        // s = 0 with small-order A and R holds under the cofactored equation: the reference
        // accepts some of these, so the comparison covers both verdicts.
        assert!(accepted > 0);
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
