//! The link's cryptography: the ephemeral X25519 agreement, the key derivation, and the tags
//! that seal each data frame to its connection and position.

use super::messages::{KEY_INFO, PUBLIC_KEY_LEN};
use super::{LinkError, TAG_LEN};
use crate::frame::{self, FrameError};
use ring::{agreement, digest, hkdf, hmac, rand};

/// Bytes of the derived HMAC-SHA256 key.
const KEY_LEN: usize = 32;

/// One end's fresh X25519 key pair for one handshake. Consumed by [`agree`](Ephemeral::agree),
/// so it can never serve two connections.
#[derive(Debug)]
pub struct Ephemeral {
    private: agreement::EphemeralPrivateKey,
    public: [u8; PUBLIC_KEY_LEN],
}

impl Ephemeral {
    /// A new key pair from the system's secure randomness.
    pub fn generate() -> Result<Ephemeral, LinkError> {
        let rng = rand::SystemRandom::new();
        let private = agreement::EphemeralPrivateKey::generate(&agreement::X25519, &rng)
            .map_err(|_| LinkError::KeyAgreement)?;
        let public = private
            .compute_public_key()
            .map_err(|_| LinkError::KeyAgreement)?;
        let public = <[u8; PUBLIC_KEY_LEN]>::try_from(public.as_ref())
            .map_err(|_| LinkError::KeyAgreement)?;
        Ok(Ephemeral { private, public })
    }

    /// The public key to send to the peer.
    pub fn public(&self) -> [u8; PUBLIC_KEY_LEN] {
        self.public
    }

    /// Agrees with the peer's ephemeral public key and derives the link key for `transcript`
    /// ([`derive_key`]). Fails on a public key X25519 refuses.
    pub fn agree(
        self,
        peer: &[u8; PUBLIC_KEY_LEN],
        transcript: &[u8],
    ) -> Result<LinkKey, LinkError> {
        let peer = agreement::UnparsedPublicKey::new(&agreement::X25519, peer);
        agreement::agree_ephemeral(self.private, &peer, |secret| derive_key(secret, transcript))
            .map_err(|_| LinkError::KeyAgreement)?
    }
}

/// The HMAC-SHA256 key of one authenticated connection, known to its two ends only.
#[derive(Debug, Clone)]
pub struct LinkKey(hmac::Key);

impl LinkKey {
    /// The tag of data frame number `seq`: the first [`TAG_LEN`] bytes of
    /// HMAC-SHA256(key, seq (u64 BE) ‖ payload).
    pub fn tag(&self, seq: u64, payload: &[u8]) -> [u8; TAG_LEN] {
        let mut mac = hmac::Context::with_key(&self.0);
        mac.update(&seq.to_be_bytes());
        mac.update(payload);
        let full = mac.sign();
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&full.as_ref()[..TAG_LEN]);
        tag
    }
}

/// The link key from the X25519 shared secret: HKDF-SHA256 with salt SHA-256(`transcript`) and
/// info [`KEY_INFO`], 32 bytes. Salting with the transcript ties the key to both identities and
/// both ephemeral keys of this handshake.
pub fn derive_key(shared_secret: &[u8], transcript: &[u8]) -> Result<LinkKey, LinkError> {
    let salt = digest::digest(&digest::SHA256, transcript);
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt.as_ref()).extract(shared_secret);
    let mut key = [0u8; KEY_LEN];
    prk.expand(&[KEY_INFO], hmac::HMAC_SHA256)
        .and_then(|okm| okm.fill(&mut key))
        .map_err(|_| LinkError::KeyAgreement)?;
    Ok(LinkKey(hmac::Key::new(hmac::HMAC_SHA256, &key)))
}

/// The sending end of an authenticated connection: appends to each frame the tag for its
/// position on the connection.
#[derive(Debug, Clone)]
pub struct Sealer {
    key: LinkKey,
    next: u64,
}

impl Sealer {
    /// Seals the connection's frames from number 0.
    pub fn new(key: LinkKey) -> Sealer {
        Sealer { key, next: 0 }
    }

    /// `payload ‖ tag` for the next frame: the frame payload to send.
    pub fn seal(&mut self, payload: &[u8]) -> Vec<u8> {
        let mut sealed = Vec::with_capacity(payload.len() + TAG_LEN);
        sealed.extend_from_slice(payload);
        sealed.extend_from_slice(&self.next_tag(payload));
        sealed
    }

    /// Appends the next frame, sealed and length-prefixed, to `buf` (for writers that batch
    /// frames). Refuses a `payload` over `max` (the tag does not count against it) and then
    /// consumes no sequence number.
    pub fn seal_frame_into(
        &mut self,
        buf: &mut Vec<u8>,
        payload: &[u8],
        max: usize,
    ) -> Result<(), FrameError> {
        if payload.len() > max {
            return Err(FrameError::TooLarge {
                len: payload.len(),
                max,
            });
        }
        let header = frame::header(payload.len() + TAG_LEN, max.saturating_add(TAG_LEN))?;
        buf.reserve(frame::HEADER_LEN + payload.len() + TAG_LEN);
        buf.extend_from_slice(&header);
        buf.extend_from_slice(payload);
        buf.extend_from_slice(&self.next_tag(payload));
        Ok(())
    }

    fn next_tag(&mut self, payload: &[u8]) -> [u8; TAG_LEN] {
        let tag = self.key.tag(self.next, payload);
        self.next += 1;
        tag
    }
}

/// The receiving end of an authenticated connection: checks and strips each frame's tag, in
/// order.
#[derive(Debug, Clone)]
pub struct Unsealer {
    key: LinkKey,
    next: u64,
}

impl Unsealer {
    /// Expects the connection's frames from number 0.
    pub fn new(key: LinkKey) -> Unsealer {
        Unsealer { key, next: 0 }
    }

    /// The payload of the next frame, if `frame` carries its tag. Any error means the stream
    /// can no longer be trusted: close the connection.
    pub fn open(&mut self, mut frame: Vec<u8>) -> Result<Vec<u8>, LinkError> {
        let Some(split) = frame.len().checked_sub(TAG_LEN) else {
            return Err(LinkError::BadTag);
        };
        let expected = self.key.tag(self.next, &frame[..split]);
        if !constant_time_eq(&expected, &frame[split..]) {
            return Err(LinkError::BadTag);
        }
        self.next += 1;
        frame.truncate(split);
        Ok(frame)
    }
}

/// Compares without an early exit, so the time taken does not tell an attacker how many leading
/// bytes of a forged tag are right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(secret: &[u8]) -> LinkKey {
        derive_key(secret, b"transcript").unwrap()
    }

    #[test]
    fn both_ends_of_an_agreement_derive_the_same_key() {
        let (a, b) = (
            Ephemeral::generate().unwrap(),
            Ephemeral::generate().unwrap(),
        );
        assert_ne!(a.public(), b.public());
        let (a_pub, b_pub) = (a.public(), b.public());
        let ka = a.agree(&b_pub, b"t").unwrap();
        let kb = b.agree(&a_pub, b"t").unwrap();
        assert_eq!(ka.tag(0, b"x"), kb.tag(0, b"x"));
    }

    #[test]
    fn the_key_depends_on_secret_and_transcript() {
        let base = key(b"secret").tag(0, b"x");
        assert_ne!(key(b"other").tag(0, b"x"), base);
        assert_ne!(derive_key(b"secret", b"other").unwrap().tag(0, b"x"), base);
    }

    #[test]
    fn frames_open_in_order_and_tampering_replay_or_reordering_fail() {
        let mut sealer = Sealer::new(key(b"k"));
        let frames: Vec<Vec<u8>> = [&b"one"[..], b"", b"three"]
            .iter()
            .map(|p| sealer.seal(p))
            .collect();
        assert_eq!(frames[0].len(), 3 + TAG_LEN);

        let mut unsealer = Unsealer::new(key(b"k"));
        assert_eq!(unsealer.open(frames[0].clone()).unwrap(), b"one");
        // Replayed.
        assert!(unsealer.clone().open(frames[0].clone()).is_err());
        // Reordered (frame 1 dropped).
        assert!(unsealer.clone().open(frames[2].clone()).is_err());
        assert_eq!(unsealer.open(frames[1].clone()).unwrap(), b"");
        // Tampered payload, tampered tag, truncated, another key.
        let mut payload = frames[2].clone();
        payload[0] ^= 1;
        let mut tag = frames[2].clone();
        *tag.last_mut().unwrap() ^= 0x80;
        for bad in [payload, tag, frames[2][..TAG_LEN - 1].to_vec()] {
            assert!(matches!(unsealer.clone().open(bad), Err(LinkError::BadTag)));
        }
        assert!(Unsealer::new(key(b"other"))
            .open(frames[0].clone())
            .is_err());
        assert_eq!(unsealer.open(frames[2].clone()).unwrap(), b"three");
    }

    #[test]
    fn sealed_frames_are_length_prefixed_and_bounded_by_the_payload() {
        let mut sealer = Sealer::new(key(b"k"));
        let mut buf = Vec::new();
        sealer.seal_frame_into(&mut buf, &[5; 8], 8).unwrap();
        assert!(matches!(
            sealer.seal_frame_into(&mut buf, &[5; 9], 8),
            Err(FrameError::TooLarge { len: 9, max: 8 })
        ));
        assert_eq!(buf.len(), frame::HEADER_LEN + 8 + TAG_LEN);
        assert_eq!(buf[..4], ((8 + TAG_LEN) as u32).to_be_bytes());
        // The refused frame consumed no sequence number.
        let mut unsealer = Unsealer::new(key(b"k"));
        assert_eq!(unsealer.open(buf[4..].to_vec()).unwrap(), [5; 8]);
        assert_eq!(unsealer.open(sealer.seal(b"next")).unwrap(), b"next");
    }

    #[test]
    fn constant_time_eq_compares_lengths_and_bytes() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
