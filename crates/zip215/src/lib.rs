//! Ed25519 signature checks under ZIP 215, for every signature a cloudbft node checks: client
//! REQUESTs and node messages (`proto::crypto`) and soft-USIG warrants (`usig::verify`).
//!
//! ZIP 215 (checked on curve25519-dalek as ed25519-zebra checks it; `proto::crypto`'s tests hold
//! it to ed25519-zebra's verdicts): the cofactored equation `[8][s]B = [8]R + [8][k]A`,
//! canonical `s`, any encoding of a curve point for `R` and `A`. Every signature RFC 8032
//! signers make passes it. It is chosen for one property: a batch check ([`verify_batch`])
//! accepts exactly the signatures that single checks ([`verify`]) accept, so that whether a
//! replica checked a signature alone or with others never changes its verdict (under the RFC's
//! cofactorless rules a crafted signature can pass one way and fail the other).
//!
//! Public keys are decompressed once per process and kept ([`KeyPoints`]): a node checks
//! signatures of the same few hundred keys (clients, nodes, USIG identities) all the time, and
//! decompressing a key costs about a sixth of a batch check per signature.
//!
//! The workspace builds curve25519-dalek with its AVX-512 IFMA backend
//! (`.cargo/config.toml`), chosen at run time where the CPU has it: a check then costs about half
//! as much as with AVX2 (docs/performance.md, item 33). Both backends compute the same points,
//! so the verdicts do not depend on the CPU.
//!
//! A signed message is given in parts (`&[&[u8]]`), hashed one after the other as if
//! concatenated, so that callers that sign `domain || 0 || message` need not copy it.

use curve25519_dalek::constants::ED25519_BASEPOINT_POINT;
use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::{IsIdentity, VartimeMultiscalarMul};
use sha2::{Digest, Sha512};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// One signature for [`verify_batch`]: `signature` by `key` over the concatenation of `message`.
#[derive(Debug, Clone, Copy)]
pub struct Signed<'a> {
    pub key: &'a [u8; 32],
    pub message: &'a [&'a [u8]],
    pub signature: &'a [u8; 64],
}

/// Checks `signature` by `key` over the concatenation of `message` (ZIP 215 rules).
pub fn verify(key: &[u8; 32], message: &[&[u8]], signature: &[u8; 64]) -> bool {
    let Some(a) = KeyPoints::shared().point(key) else {
        return false;
    };
    let (Some(r), Some(s)) = (r_point(signature), s_scalar(signature)) else {
        return false;
    };
    let k = challenge(signature, key, message);
    // [8]R = [8]([s]B - [k]A), as ZIP 215 states it.
    let r_prime = EdwardsPoint::vartime_double_scalar_mul_basepoint(&k, &-a, &s);
    (r - r_prime).mul_by_cofactor().is_identity()
}

/// Checks many signatures at once and says which are valid, exactly as [`verify`] would one by
/// one.
///
/// A batch shares one multi-scalar multiplication: from about 8 signatures on, each costs well
/// under half a single check (docs/performance.md). When the batch fails, at least one signature
/// is bad and each is checked alone to find out which, so a sender of bad signatures makes its
/// batch cost a little more than checking each alone. The batch's random coefficients come from
/// the system's generator; an attacker who cannot predict them passes a bad signature with
/// probability about 2^-128.
pub fn verify_batch(items: &[Signed<'_>]) -> Vec<bool> {
    let single = |item: &Signed<'_>| verify(item.key, item.message, item.signature);
    if items.len() >= 2 && batch_holds(items) {
        vec![true; items.len()]
    } else {
        items.iter().map(single).collect()
    }
}

/// Whether `[8](-(sum z_i s_i)B + sum z_i R_i + sum (z_i k_i)A_i)` is the identity for random
/// 128-bit `z_i`: then every signature holds, but for probability about 2^-128. False if any
/// signature or key cannot even be decoded, or the system's generator fails (each is then
/// checked alone: slower, never less safe). A key's signatures share one term.
fn batch_holds(items: &[Signed<'_>]) -> bool {
    let mut random = vec![0u8; 16 * items.len()];
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut random).is_err() {
        return false;
    }
    let mut b_coefficient = Scalar::ZERO;
    let mut r_points = Vec::with_capacity(items.len());
    let mut r_coefficients = Vec::with_capacity(items.len());
    let mut key_slots: HashMap<&[u8; 32], usize> = HashMap::new();
    let mut a_points = Vec::new();
    let mut a_coefficients = Vec::new();
    let points = KeyPoints::shared();
    for (item, z) in items.iter().zip(random.chunks_exact(16)) {
        let (Some(r), Some(s)) = (r_point(item.signature), s_scalar(item.signature)) else {
            return false;
        };
        let slot = match key_slots.get(item.key) {
            Some(&slot) => slot,
            None => {
                let Some(a) = points.point(item.key) else {
                    return false;
                };
                a_points.push(a);
                a_coefficients.push(Scalar::ZERO);
                key_slots.insert(item.key, a_points.len() - 1);
                a_points.len() - 1
            }
        };
        let mut z_bytes = [0u8; 16];
        z_bytes.copy_from_slice(z);
        let z = Scalar::from(u128::from_le_bytes(z_bytes));
        let k = challenge(item.signature, item.key, item.message);
        b_coefficient -= z * s;
        a_coefficients[slot] += z * k;
        r_points.push(r);
        r_coefficients.push(z);
    }
    let sum = EdwardsPoint::vartime_multiscalar_mul(
        std::iter::once(&b_coefficient)
            .chain(&a_coefficients)
            .chain(&r_coefficients),
        std::iter::once(&ED25519_BASEPOINT_POINT)
            .chain(&a_points)
            .chain(&r_points),
    );
    sum.mul_by_cofactor().is_identity()
}

/// `R`, any encoding of a curve point (ZIP 215).
fn r_point(signature: &[u8; 64]) -> Option<EdwardsPoint> {
    let mut r = [0u8; 32];
    r.copy_from_slice(&signature[..32]);
    CompressedEdwardsY(r).decompress()
}

/// `s`, only below the group order (ZIP 215, as RFC 8032).
fn s_scalar(signature: &[u8; 64]) -> Option<Scalar> {
    let mut s = [0u8; 32];
    s.copy_from_slice(&signature[32..]);
    Scalar::from_canonical_bytes(s).into()
}

/// `k = SHA-512(R || A || message)` mod the group order, the message's parts hashed in turn.
fn challenge(signature: &[u8; 64], key: &[u8; 32], message: &[&[u8]]) -> Scalar {
    let mut hash = Sha512::new()
        .chain_update(&signature[..32])
        .chain_update(key);
    for part in message {
        hash.update(part);
    }
    Scalar::from_hash(hash)
}

/// The decompressed points of the public keys this process has checked signatures of (only
/// keys that are points: a key that is not fails every check and is decompressed each time).
/// Keys come from the configuration and client registrations, so the map stays small; it is
/// emptied if it ever reaches [`KeyPoints::MOST`] all the same.
struct KeyPoints(Mutex<HashMap<[u8; 32], EdwardsPoint>>);

impl KeyPoints {
    const MOST: usize = 8192;

    fn shared() -> &'static KeyPoints {
        static SHARED: OnceLock<KeyPoints> = OnceLock::new();
        SHARED.get_or_init(|| KeyPoints(Mutex::new(HashMap::new())))
    }

    /// The key's point (ZIP 215: any encoding of a curve point), `None` if it is not one.
    fn point(&self, key: &[u8; 32]) -> Option<EdwardsPoint> {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(point) = map.get(key) {
            return Some(*point);
        }
        let point = CompressedEdwardsY(*key).decompress()?;
        if map.len() >= Self::MOST {
            map.clear();
        }
        map.insert(*key, point);
        Some(point)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{Ed25519KeyPair, KeyPair};

    fn pair(seed: u8) -> (Ed25519KeyPair, [u8; 32]) {
        let pair = Ed25519KeyPair::from_seed_unchecked(&[seed; 32]).unwrap();
        let public = pair.public_key().as_ref().try_into().unwrap();
        (pair, public)
    }

    fn sign(pair: &Ed25519KeyPair, message: &[u8]) -> [u8; 64] {
        pair.sign(message).as_ref().try_into().unwrap()
    }

    /// RFC 8032 signatures (ring's) pass; the message's parts are one message, however split;
    /// another message, key or a flipped bit fails.
    #[test]
    fn rfc8032_signatures_pass_over_their_message_in_any_split() {
        let (signer, key) = pair(1);
        let (_, other_key) = pair(2);
        let signature = sign(&signer, b"cloudbft/warrant\x00message");
        for split in [
            &[&b"cloudbft/warrant\x00message"[..]][..],
            &[b"cloudbft/warrant", b"\x00", b"message"],
            &[b"", b"cloudbft/warrant\x00mess", b"age"],
        ] {
            assert!(verify(&key, split, &signature));
        }
        assert!(!verify(&key, &[b"cloudbft/warrant\x00messagf"], &signature));
        assert!(!verify(
            &other_key,
            &[b"cloudbft/warrant\x00message"],
            &signature
        ));
        let mut flipped = signature;
        flipped[40] ^= 1;
        assert!(!verify(&key, &[b"cloudbft/warrant\x00message"], &flipped));
    }

    /// A batch gives each signature the verdict a single check gives it.
    #[test]
    fn a_batch_finds_exactly_the_bad_signatures() {
        let keys: Vec<_> = (1..=3).map(pair).collect();
        let messages: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 10 + usize::from(i)]).collect();
        let mut signatures: Vec<[u8; 64]> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| sign(&keys[i % 3].0, m))
            .collect();
        signatures[4][0] ^= 1;
        let parts: Vec<[&[u8]; 1]> = messages.iter().map(|m| [m.as_slice()]).collect();
        let items: Vec<Signed<'_>> = (0..6)
            .map(|i| Signed {
                key: &keys[i % 3].1,
                message: &parts[i],
                signature: &signatures[i],
            })
            .collect();
        assert_eq!(verify_batch(&items), [true, true, true, true, false, true]);
        assert_eq!(verify_batch(&items[..4]), [true; 4]);
    }
}
