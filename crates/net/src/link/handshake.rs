//! The two sides of the handshake over any byte stream. Neither bounds its own duration: the
//! transport wraps each in [`TransportConfig::connect_timeout`](crate::TransportConfig).

use super::messages::{
    parse_reply, reply, transcript, Hello, ACCEPT, HELLO_LEN, REPLY_LEN, SIGNATURE_LEN,
};
use super::{Ephemeral, LinkError, LinkKeys, Sealer, Unsealer};
use crate::frame;
use tokio::io::{AsyncRead, AsyncWrite};

/// The opener's side on a freshly opened `stream`: sends HELLO naming `acceptor`, reads the
/// REPLY, sends AUTH, waits for the ACCEPT, and returns the sealer for the connection's data
/// frames.
///
/// Reads exactly the reply's and the accept's bytes, nothing beyond. Waiting for the ACCEPT
/// costs half a round trip per connection, and makes a refused signature a failed connection
/// (retried with backoff) rather than one that seems up until the acceptor closes it.
pub async fn open_link<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    keys: &dyn LinkKeys,
    acceptor: u64,
) -> Result<Sealer, LinkError> {
    let me = keys.me();
    let ephemeral = Ephemeral::generate()?;
    let hello = Hello {
        opener: me,
        acceptor,
        ephemeral: ephemeral.public(),
    };
    frame::write_frame(stream, &hello.encode(), HELLO_LEN).await?;
    let answer = frame::read_frame(stream, REPLY_LEN)
        .await?
        .ok_or(LinkError::Closed)?;
    let theirs = parse_reply(&answer)?;
    let transcript = transcript(me, acceptor, &hello.ephemeral, &theirs);
    let key = ephemeral.agree(&theirs, &transcript)?;
    frame::write_frame(stream, &keys.sign(&transcript), SIGNATURE_LEN).await?;
    let accepted = frame::read_frame(stream, ACCEPT.len())
        .await?
        .ok_or(LinkError::Closed)?;
    if accepted != ACCEPT {
        return Err(LinkError::MalformedReply);
    }
    Ok(Sealer::new(key))
}

/// The acceptor's side, once the connection's first frame `hello` turned out to start with the
/// hello magic: refuses it without `keys`, when malformed or naming another acceptor; otherwise
/// replies, reads AUTH and checks it. Returns the opener's identity and the unsealer for its
/// data frames.
pub(crate) async fn accept_link<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    hello: &[u8],
    keys: Option<&dyn LinkKeys>,
) -> Result<(u64, Unsealer), LinkError> {
    let keys = keys.ok_or(LinkError::NoKeys)?;
    let hello = Hello::parse(hello)?;
    let me = keys.me();
    if hello.acceptor != me {
        return Err(LinkError::WrongAcceptor {
            named: hello.acceptor,
            me,
        });
    }
    let ephemeral = Ephemeral::generate()?;
    let ours = ephemeral.public();
    frame::write_frame(stream, &reply(&ours), REPLY_LEN).await?;
    let transcript = transcript(hello.opener, me, &hello.ephemeral, &ours);
    let key = ephemeral.agree(&hello.ephemeral, &transcript)?;
    let auth = frame::read_frame(stream, SIGNATURE_LEN)
        .await?
        .ok_or(LinkError::Closed)?;
    let signature = <[u8; SIGNATURE_LEN]>::try_from(auth.as_slice())
        .map_err(|_| LinkError::MalformedAuth { len: auth.len() })?;
    if !keys.verify(hello.opener, &transcript, &signature) {
        return Err(LinkError::Unauthenticated(hello.opener));
    }
    frame::write_frame(stream, ACCEPT, ACCEPT.len()).await?;
    Ok((hello.opener, Unsealer::new(key)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{self, Ed25519KeyPair, KeyPair};
    use std::net::SocketAddr;

    /// Node `me` with an Ed25519 key from a fixed seed, trusting the nodes in `known`.
    #[derive(Debug)]
    struct Keys {
        me: u64,
        pair: Ed25519KeyPair,
        known: Vec<u64>,
    }

    fn pair(id: u64) -> Ed25519KeyPair {
        Ed25519KeyPair::from_seed_unchecked(&[id as u8; 32]).unwrap()
    }

    fn keys(me: u64, known: &[u64]) -> Keys {
        Keys {
            me,
            pair: pair(me),
            known: known.to_vec(),
        }
    }

    impl LinkKeys for Keys {
        fn me(&self) -> u64 {
            self.me
        }
        fn identity_at(&self, _: SocketAddr) -> Option<u64> {
            None
        }
        fn sign(&self, transcript: &[u8]) -> [u8; 64] {
            self.pair.sign(transcript).as_ref().try_into().unwrap()
        }
        fn verify(&self, identity: u64, transcript: &[u8], sig: &[u8; 64]) -> bool {
            self.known.contains(&identity)
                && signature::UnparsedPublicKey::new(
                    &signature::ED25519,
                    pair(identity).public_key().as_ref(),
                )
                .verify(transcript, sig)
                .is_ok()
        }
    }

    /// Runs both sides over an in-memory pipe; the acceptor reads the first frame like the
    /// transport does.
    async fn handshake(
        opener: &Keys,
        acceptor: Option<&Keys>,
        expected: u64,
    ) -> (
        Result<Sealer, LinkError>,
        Result<(u64, Unsealer), LinkError>,
    ) {
        let (mut a, mut b) = tokio::io::duplex(4096);
        let open = async {
            let sealer = open_link(&mut a, opener, expected).await;
            drop(a);
            sealer
        };
        let accept = async {
            let first = frame::read_frame(&mut b, 1024).await.unwrap().unwrap();
            let accepted = accept_link(&mut b, &first, acceptor.map(|k| k as &dyn LinkKeys)).await;
            drop(b);
            accepted
        };
        tokio::join!(open, accept)
    }

    #[tokio::test]
    async fn a_known_opener_gets_a_link_whose_frames_open() {
        let (opened, accepted) = handshake(&keys(1, &[]), Some(&keys(2, &[1])), 2).await;
        let mut sealer = opened.unwrap();
        let (opener, mut unsealer) = accepted.unwrap();
        assert_eq!(opener, 1);
        for payload in [&b"a"[..], b"bb"] {
            assert_eq!(unsealer.open(sealer.seal(payload)).unwrap(), payload);
        }
    }

    #[tokio::test]
    async fn refusals() {
        let (opener, acceptor) = (keys(1, &[]), keys(2, &[1]));
        let (opened, accepted) = handshake(&opener, Some(&keys(2, &[3])), 2).await;
        assert!(matches!(accepted, Err(LinkError::Unauthenticated(1))));
        // No ACCEPT: the opener's connection attempt fails.
        assert!(matches!(opened, Err(LinkError::Closed)));

        let (opened, accepted) = handshake(&opener, Some(&acceptor), 3).await;
        assert!(matches!(
            accepted,
            Err(LinkError::WrongAcceptor { named: 3, me: 2 })
        ));
        assert!(matches!(opened, Err(LinkError::Closed)));

        let (opened, accepted) = handshake(&opener, None, 2).await;
        assert!(matches!(accepted, Err(LinkError::NoKeys)));
        assert!(matches!(opened, Err(LinkError::Closed)));

        // An impostor signing with its own key in node 1's name.
        let impostor = Keys {
            me: 1,
            pair: pair(9),
            known: vec![],
        };
        let (_, accepted) = handshake(&impostor, Some(&acceptor), 2).await;
        assert!(matches!(accepted, Err(LinkError::Unauthenticated(1))));
    }
}
