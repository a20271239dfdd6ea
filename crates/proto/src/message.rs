//! The protocol messages of `docs/protocol.md`, their signed and warranted byte strings, and the
//! envelope that carries them on the wire.

use crate::batch::{self, BatchSignature, RootCache};
use crate::crypto::{verify_batch, PublicKey, Signature, Signed, SigningKey};
use crate::ids::{ClientId, ConfigEpoch, GroupId, NodeId, PartitionId, View};
use serde::{Deserialize, Serialize};
use std::ops::RangeInclusive;
use std::sync::Arc;
use usig::{MessageDigest, UniqueWarrant};

/// Version written in every envelope; a peer speaking another version is refused. 2: PREPAREs
/// carry JOINs, CHECKPOINTs their lineage and anchors' chain values, and the recovery messages.
/// 3: PREPAREs carry RECONFIGUREs, REPLYs their configuration epoch, and the reconfiguration
/// messages. 4: CHECKPOINTs name the candidates their sender followed. 5: lineages carry their
/// NEW-VIEW's counter and slot, VIEW-CHANGEs may name their base, NEW-VIEWs share carried bases.
/// 6: REPLYs carry a batch signature (one signature per batch of replies, and a Merkle path).
/// 7: the same messages, but Ed25519 signatures are checked under ZIP 215 (`crypto`): nodes of
/// version 6 check under RFC 8032's rules and could disagree with 7 on a crafted signature.
/// 8: COMMIT-DB and REPLY-COMMIT-DB unsigned, on authenticated links.
/// 9: DECIDED, the replicas' pacing hint to the primary.
/// 10: REQUESTs carry a batch signature (a client endpoint signs its ready requests together).
/// 11: a batch signature's path is one byte string. 12: REQUESTS and REPLIES, the requests a
/// client endpoint signed together and the replies a replica has ready for one endpoint, each
/// in one frame. 13: a COMMIT-DB's executions carry their requests without the client's
/// signature. 14: REPLYs unsigned, on the authenticated link of their replica. 15: a NEW-VIEW's
/// encoding holds each PREPARE its VIEW-CHANGEs show once; a VIEW-CHANGE shows at most
/// `VIEW_CHANGE_SPAN` slots past its stable checkpoint.
pub const PROTOCOL_VERSION: u16 = 16;

/// A client's request. `timestamp` is the client's own increasing request number.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub client: ClientId,
    pub timestamp: u64,
    /// The partitions the operation declares it touches.
    pub partitions: Vec<PartitionId>,
    /// The application's encoding of the operation.
    #[serde(with = "wire::bytes")]
    pub operation: Vec<u8>,
    /// The client's key signed a batch of requests that holds this one
    /// (docs/protocol.md, "Batch-signed REQUESTs").
    pub signature: BatchSignature,
}

impl Request {
    const DOMAIN: &'static [u8] = b"cloudbft/request/v1";

    /// A request signed by `key` alone (a batch of one).
    pub fn signed(
        client: ClientId,
        timestamp: u64,
        partitions: Vec<PartitionId>,
        operation: Vec<u8>,
        key: &SigningKey,
    ) -> Self {
        let request = Request::unsigned(client, timestamp, partitions, operation);
        let mut signed = Self::sign_all(vec![request], key);
        signed.pop().expect("one request in, one out")
    }

    /// A request still to be signed ([`Request::sign_all`]).
    pub fn unsigned(
        client: ClientId,
        timestamp: u64,
        partitions: Vec<PartitionId>,
        operation: Vec<u8>,
    ) -> Self {
        Request {
            client,
            timestamp,
            partitions,
            operation,
            signature: BatchSignature::unsigned(),
        }
    }

    /// Signs `requests` with one signature (per [`batch::MAX_BATCH`]): each carries its path
    /// to the signed root. All must be requests of identities whose key is `key`.
    pub fn sign_all(mut requests: Vec<Request>, key: &SigningKey) -> Vec<Request> {
        let bytes: Vec<Vec<u8>> = requests.iter().map(Request::signed_bytes).collect();
        for (request, signature) in
            requests
                .iter_mut()
                .zip(batch::sign_all(key, Self::DOMAIN, &bytes))
        {
            request.signature = signature;
        }
        requests
    }

    fn signed_bytes(&self) -> Vec<u8> {
        canonical(&(
            self.client,
            self.timestamp,
            &self.partitions,
            wire::bytes::Bytes(&self.operation),
        ))
    }

    /// True when the client's key signed this request (in a batch).
    pub fn verify(&self, client_key: &PublicKey) -> bool {
        self.signature
            .verify(client_key, Self::DOMAIN, &self.signed_bytes())
    }

    /// Checks many requests' signatures: for each, true when `client_key` knows its client and
    /// that key signed it, exactly as [`Request::verify`] would say. Each batch root is checked
    /// once per `roots`, and the roots not checked before in one batch
    /// ([`RootCache::verify_many`]).
    pub fn verify_many<'a>(
        requests: &[&Request],
        client_key: impl Fn(ClientId) -> Option<&'a PublicKey>,
        roots: &mut RootCache,
    ) -> Vec<bool> {
        let keyed: Vec<(usize, &PublicKey, Vec<u8>)> = requests
            .iter()
            .enumerate()
            .filter_map(|(i, r)| Some((i, client_key(r.client)?, r.signed_bytes())))
            .collect();
        let items: Vec<(&PublicKey, &[u8], &BatchSignature)> = keyed
            .iter()
            .map(|(i, key, bytes)| (*key, bytes.as_slice(), &requests[*i].signature))
            .collect();
        let mut valid = vec![false; requests.len()];
        for ((i, _, _), ok) in keyed.iter().zip(roots.verify_many(Self::DOMAIN, &items)) {
            valid[*i] = ok;
        }
        valid
    }
}

/// For each message, true when `key` names its signer's key and that key signed it: the
/// signatures checked in one batch, with the verdicts of single checks.
pub(crate) fn verify_each<'a, T>(
    messages: &[&T],
    key: impl Fn(&T) -> Option<&'a PublicKey>,
    domain: &[u8],
    signed_bytes: impl Fn(&T) -> Vec<u8>,
    signature: impl Fn(&T) -> &Signature,
) -> Vec<bool> {
    let keyed: Vec<(usize, &PublicKey, Vec<u8>)> = messages
        .iter()
        .enumerate()
        .filter_map(|(i, m)| Some((i, key(m)?, signed_bytes(m))))
        .collect();
    let items: Vec<Signed<'_>> = keyed
        .iter()
        .map(|(i, key, bytes)| Signed {
            key,
            domain,
            message: bytes,
            signature: signature(messages[*i]),
        })
        .collect();
    let mut valid = vec![false; messages.len()];
    for ((i, _, _), ok) in keyed.iter().zip(verify_batch(&items)) {
        valid[*i] = ok;
    }
    valid
}

/// Derives the partitions an operation touches: the application's rule, applied by the primary,
/// the replicas and the database nodes alike, so that a client cannot declare partitions its
/// operation does not keep to. Returns them sorted and without repetition, or `None` for an
/// operation that does not decode.
pub trait PartitionRule: Send + Sync {
    fn partitions(&self, operation: &[u8]) -> Option<Vec<PartitionId>>;
}

impl Request {
    /// True when the declared partitions are exactly what `rule` derives from the operation.
    pub fn declares_truthfully(&self, rule: &dyn PartitionRule) -> bool {
        declares_truthfully(rule, &self.partitions, &self.operation)
    }

    /// The request without its signature, as a decided operation carries it.
    pub fn body(&self) -> RequestBody {
        RequestBody {
            client: self.client,
            timestamp: self.timestamp,
            partitions: self.partitions.clone(),
            operation: self.operation.clone(),
        }
    }
}

/// A client's request without its signature: what the database tier executes and what a page is
/// rendered from.
///
/// The signature stays behind at the group: a database node executes an operation only when
/// f+1 members of its group sent the same one, so at least one correct member ordered it, and
/// a correct member orders only requests whose signature it checked (docs/protocol.md, "What
/// a COMMIT-DB carries"). The signature would vouch for nothing more there, and it is most of
/// a small request's bytes (its batch path and the signature itself).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestBody {
    pub client: ClientId,
    pub timestamp: u64,
    /// The partitions the operation declares it touches.
    pub partitions: Vec<PartitionId>,
    /// The application's encoding of the operation.
    #[serde(with = "wire::bytes")]
    pub operation: Vec<u8>,
}

impl RequestBody {
    /// True when the declared partitions are exactly what `rule` derives from the operation.
    pub fn declares_truthfully(&self, rule: &dyn PartitionRule) -> bool {
        declares_truthfully(rule, &self.partitions, &self.operation)
    }
}

fn declares_truthfully(
    rule: &dyn PartitionRule,
    partitions: &[PartitionId],
    operation: &[u8],
) -> bool {
    rule.partitions(operation).as_deref() == Some(partitions)
}

/// One request of a PREPARE batch and the group that executes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrepareEntry {
    pub group: GroupId,
    pub request: Request,
}

/// The primary's ordered batch, certified by one unique warrant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prepare {
    pub view: View,
    pub config_epoch: ConfigEpoch,
    pub primary: NodeId,
    pub entries: Vec<PrepareEntry>,
    /// Restarted replicas' JOINs, ordered here (docs/protocol.md, "Replica recovery").
    pub joins: Vec<crate::Join>,
    /// The operator's RECONFIGURE: this PREPARE is then the epoch's last (docs/protocol.md,
    /// "Reconfiguration").
    pub reconfigure: Option<Box<crate::Reconfigure>>,
    /// The primary's warrant over [`Prepare::warranted_bytes`].
    pub ui: UniqueWarrant,
}

impl Prepare {
    /// What the primary's USIG warrants: everything but the warrant itself.
    pub fn warranted_bytes(
        view: View,
        config_epoch: ConfigEpoch,
        primary: NodeId,
        entries: &[PrepareEntry],
        joins: &[crate::Join],
        reconfigure: Option<&crate::Reconfigure>,
    ) -> Vec<u8> {
        canonical(&(
            b"cloudbft/prepare/v3",
            view,
            config_epoch,
            primary,
            entries,
            joins,
            reconfigure,
        ))
    }

    /// This PREPARE's warranted bytes.
    pub fn own_warranted_bytes(&self) -> Vec<u8> {
        Self::warranted_bytes(
            self.view,
            self.config_epoch,
            self.primary,
            &self.entries,
            &self.joins,
            self.reconfigure.as_deref(),
        )
    }

    /// Identifies this exact warranted PREPARE (its fields and the primary's warrant).
    pub fn digest(&self) -> MessageDigest {
        let mut bytes = self.own_warranted_bytes();
        bytes.extend_from_slice(&self.ui.to_bytes());
        MessageDigest::of(&bytes)
    }
}

/// A group member's agreement to what is at one slot of its history (a PREPARE, or the NEW-VIEW
/// that starts a view), certified by its own unique warrant. Chained: it also vouches for the
/// whole history before the slot (`prefix`), so a VIEW-CHANGE that contains it must contain that
/// history (docs/protocol.md, "View change").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commit {
    pub view: View,
    pub replica: NodeId,
    /// Position in the history: PREPAREs and NEW-VIEWs in the order every replica processes them.
    pub slot: u64,
    /// Digest of what is at the slot ([`Prepare::digest`] or [`crate::NewView::digest`]).
    pub proposal: MessageDigest,
    /// Running digest of the history `1..=slot` ([`chain`]).
    pub prefix: MessageDigest,
    /// The PREPARE, so that a peer that missed it learns it (MinBFT); `None` for a NEW-VIEW slot
    /// and in the log of a VIEW-CHANGE. Shared: a replica keeps it in its agreement, its COMMIT
    /// and the COMMIT it keeps for peers' fetches (encoded as the PREPARE itself).
    pub prepare: Option<Arc<Prepare>>,
    /// The replica's warrant over [`Commit::warranted_bytes`].
    pub ui: UniqueWarrant,
}

impl Commit {
    /// What the replica's USIG warrants.
    pub fn warranted_bytes(
        view: View,
        replica: NodeId,
        slot: u64,
        proposal: &MessageDigest,
        prefix: &MessageDigest,
    ) -> Vec<u8> {
        canonical(&(
            b"cloudbft/commit/v2",
            view,
            replica,
            slot,
            proposal.0,
            prefix.0,
        ))
    }

    /// This COMMIT's warranted bytes.
    pub fn own_warranted_bytes(&self) -> Vec<u8> {
        Self::warranted_bytes(
            self.view,
            self.replica,
            self.slot,
            &self.proposal,
            &self.prefix,
        )
    }

    /// The COMMIT without the PREPARE it carries, as a VIEW-CHANGE logs it.
    pub fn stub(&self) -> Commit {
        Commit {
            view: self.view,
            replica: self.replica,
            slot: self.slot,
            proposal: self.proposal,
            prefix: self.prefix,
            prepare: None,
            ui: self.ui.clone(),
        }
    }
}

/// The running digest of a history: `chain(previous, slot)` extends the digest of the slots
/// before with the digest of what is at this one. (The byte 1 before it marked a slot that was
/// not null, when histories had null slots; it stays, so that digests are what they were.)
pub fn chain(previous: &MessageDigest, slot: &MessageDigest) -> MessageDigest {
    let mut bytes = b"cloudbft/chain/v1".to_vec();
    bytes.extend_from_slice(&previous.0);
    bytes.push(1);
    bytes.extend_from_slice(&slot.0);
    MessageDigest::of(&bytes)
}

/// The digest of the empty history of a configuration epoch.
pub fn chain_start(config_epoch: ConfigEpoch) -> MessageDigest {
    MessageDigest::of(&canonical(&(b"cloudbft/chain-start/v1", config_epoch)))
}

/// A decided operation: its global order, its position on each partition it holds, and the
/// client's request without its signature ([`RequestBody`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Execution {
    pub order: u64,
    /// Sorted by partition; every partition of the configuration for a multi-partition request.
    pub positions: Vec<(PartitionId, u64)>,
    pub request: RequestBody,
}

/// A group member's decided operations for the database nodes.
///
/// Not signed: it only has to convince the database node it is sent to, which counts f+1 of
/// them and shows them to nobody, so it travels on an authenticated link and the receiver
/// takes its sender from the link (docs/protocol.md, "Authenticated links").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitDb {
    pub config_epoch: ConfigEpoch,
    pub group: GroupId,
    /// The sender; a receiver refuses it unless the link it came on is this node's.
    pub replica: NodeId,
    pub executions: Vec<Execution>,
}

/// A database node's results for executed orders.
///
/// Not signed, like [`CommitDb`]: the group member it goes to counts f+1 of them and forwards
/// none, so the link it arrives on authenticates it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyCommitDb {
    /// The sender; a receiver refuses it unless the link it came on is this node's.
    pub db_node: NodeId,
    /// (order, canonical result bytes).
    #[serde(with = "wire::bytes::pairs")]
    pub results: Vec<(u64, Vec<u8>)>,
}

/// A replica's pacing hint to the primary of `view`: it decided the PREPARE with this warrant
/// counter (and, as far as it knows, every earlier one with work for its group).
///
/// The primary keeps at most a few PREPAREs undecided and lets requests gather meanwhile, so
/// that batches grow with the load (docs/protocol.md, "Pacing"). It proves nothing and decides
/// nothing: not signed, it counts only from the link of a replica of the configuration, and
/// the primary takes a counter as decided in a group once f+1 of its replicas said so.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decided {
    pub view: View,
    pub counter: u64,
}

/// A group member's page for a client's request. Not signed: it travels on the authenticated
/// link its replica opens to the client's endpoint, and counts only if it names the node at the
/// other end of that link (docs/protocol.md, "REPLYs on authenticated links").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// The configuration epoch it was ordered in: a gateway that does not know it yet asks for
    /// the configuration (docs/protocol.md, "Reconfiguration").
    pub config_epoch: ConfigEpoch,
    pub view: View,
    pub group: GroupId,
    pub replica: NodeId,
    pub client: ClientId,
    pub timestamp: u64,
    /// The rendered HTML page.
    #[serde(with = "wire::bytes")]
    pub page: Vec<u8>,
}

/// A replica asks the primary to send again the PREPAREs with these counters (it saw a gap).
/// Signed, so that nobody can make the primary re-send its log to a replica at will.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchPrepares {
    pub replica: NodeId,
    pub counters: RangeInclusive<u64>,
    pub signature: Signature,
}

/// A replica asks a group peer to send again the messages with these warrant counters (a gap in
/// the peer's sequence) and its COMMITs for these slots (agreements short of f+1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchCommits {
    pub replica: NodeId,
    pub warrants: Option<RangeInclusive<u64>>,
    pub slots: Vec<u64>,
    pub signature: Signature,
}

/// Implements signing for a node-authenticated message whose last field is `signature`.
#[macro_export]
#[doc(hidden)]
macro_rules! node_signed {
    ($ty:ident, $domain:literal, |$m:ident| $fields:expr) => {
        impl $ty {
            const DOMAIN: &'static [u8] = $domain;

            fn signed_bytes(&self) -> Vec<u8> {
                let $m = self;
                canonical(&$fields)
            }

            /// Signs the message with the sending node's key.
            pub fn sign(mut self, key: &SigningKey) -> Self {
                self.signature = key.sign(Self::DOMAIN, &self.signed_bytes());
                self
            }

            /// True when the holder of `key` signed exactly this message.
            pub fn verify(&self, key: &PublicKey) -> bool {
                key.verify(Self::DOMAIN, &self.signed_bytes(), &self.signature)
            }

            /// For each message, true when `key` names its sender's key and that key signed
            /// it, as [`Self::verify`] would say: the signatures checked in one batch.
            pub fn verify_many<'a>(
                messages: &[&Self],
                key: impl Fn(&Self) -> Option<&'a PublicKey>,
            ) -> Vec<bool> {
                $crate::message::verify_each(messages, key, Self::DOMAIN, Self::signed_bytes, |m| {
                    &m.signature
                })
            }
        }
    };
}

node_signed!(FetchPrepares, b"cloudbft/fetch-prepares/v1", |m| (
    m.replica,
    &m.counters
));
node_signed!(FetchCommits, b"cloudbft/fetch-commits/v1", |m| (
    m.replica,
    &m.warrants,
    &m.slots
));

/// Every message a cloudbft node sends or receives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    Request(Request),
    Prepare(Prepare),
    Commit(Commit),
    CommitDb(CommitDb),
    ReplyCommitDb(ReplyCommitDb),
    Reply(Reply),
    FetchPrepares(FetchPrepares),
    FetchCommits(FetchCommits),
    ReqViewChange(crate::ReqViewChange),
    ViewChange(crate::ViewChange),
    NewView(crate::NewView),
    Checkpoint(crate::Checkpoint),
    StateRequest(crate::StateRequest),
    DbCheckpoint(crate::DbCheckpoint),
    StateChunk(crate::StateChunk),
    Join(crate::Join),
    RecoveryRequest(crate::RecoveryRequest),
    RecoveryState(Box<crate::RecoveryState>),
    Reconfigure(crate::Reconfigure),
    EpochClose(crate::EpochClose),
    Configure(Box<crate::Configure>),
    PositionRequest(crate::PositionRequest),
    PositionReport(crate::PositionReport),
    ConfigRequest(crate::ConfigRequest),
    EpochStarted(crate::reconfig::EpochStarted),
    Decided(Decided),
    /// Several REQUESTs in one frame: those a client endpoint signed together, for the same
    /// nodes (docs/protocol.md, "Batch-signed REQUESTs"). Each is taken as if it came alone.
    Requests(Vec<Request>),
    /// Several REPLYs in one frame: those a replica has ready together for one client endpoint.
    /// Each is taken as if it came alone.
    Replies(Vec<Reply>),
}

/// One envelope of [`Envelope::encode_together`] and the items it carries, or `Err` of the
/// envelope's length for an item too large to fit alone (then the only item).
pub type Together<T> = (Result<Vec<u8>, usize>, Vec<T>);

/// What travels in one frame: the protocol version and one message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    pub version: u16,
    pub message: Message,
}

/// Why bytes are not an envelope we accept.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    #[error(transparent)]
    Codec(#[from] wire::CodecError),
    #[error("protocol version {0} is not {PROTOCOL_VERSION}; upgrade the older node")]
    Version(u16),
}

impl Envelope {
    /// Encodes `message` in the current protocol version.
    pub fn encode(message: &Message) -> Vec<u8> {
        canonical(&(PROTOCOL_VERSION, message))
    }

    /// Envelopes that carry `items` together, as few as fit in `max` bytes each: one `wrap`
    /// message of all of them while it fits, else each half the same way. Each envelope comes
    /// with the items it carries (taken back out with `unwrap`); an item too large to fit even
    /// alone comes with `Err` of its envelope's length instead, and is in no envelope.
    pub fn encode_together<T>(
        items: Vec<T>,
        max: usize,
        wrap: fn(Vec<T>) -> Message,
        unwrap: fn(Message) -> Vec<T>,
    ) -> Vec<Together<T>> {
        if items.is_empty() {
            return Vec::new();
        }
        let message = wrap(items);
        let frame = Self::encode(&message);
        let mut items = unwrap(message);
        if frame.len() <= max {
            return vec![(Ok(frame), items)];
        }
        if items.len() == 1 {
            return vec![(Err(frame.len()), items)];
        }
        let second = items.split_off(items.len() / 2);
        let mut out = Self::encode_together(items, max, wrap, unwrap);
        out.extend(Self::encode_together(second, max, wrap, unwrap));
        out
    }

    /// Decodes one envelope, refusing other protocol versions.
    pub fn decode(bytes: &[u8]) -> Result<Message, EnvelopeError> {
        let envelope: Envelope = wire::decode(bytes)?;
        if envelope.version != PROTOCOL_VERSION {
            return Err(EnvelopeError::Version(envelope.version));
        }
        Ok(envelope.message)
    }
}

/// The canonical encoding of in-memory values (postcard cannot fail on these types).
pub(crate) fn canonical<T: Serialize>(value: &T) -> Vec<u8> {
    wire::encode(value).expect("postcard encodes plain data into a Vec")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use usig::soft::SoftUsig;
    use usig::{Directory, Enrollment, Epoch, UsigId};

    fn request(ts: u64) -> Request {
        Request::signed(
            ClientId(3),
            ts,
            vec![1],
            b"op".to_vec(),
            &SigningKey::from_seed([3; 32]),
        )
    }

    #[test]
    fn request_signature_covers_every_field() {
        let key = SigningKey::from_seed([3; 32]).public_key();
        let r = request(9);
        assert!(r.verify(&key));
        let tampered = [
            Request {
                client: ClientId(4),
                ..r.clone()
            },
            Request {
                timestamp: 10,
                ..r.clone()
            },
            Request {
                partitions: vec![2],
                ..r.clone()
            },
            Request {
                operation: b"oq".to_vec(),
                ..r.clone()
            },
        ];
        for t in tampered {
            assert!(!t.verify(&key), "{t:?}");
        }
    }

    #[test]
    fn a_batch_check_of_requests_says_what_single_checks_say() {
        let key = SigningKey::from_seed([3; 32]).public_key();
        let good: Vec<Request> = (1..=5).map(request).collect();
        let forged = Request {
            operation: b"forged".to_vec(),
            ..request(6)
        };
        let stranger = Request {
            client: ClientId(99),
            ..request(7)
        };
        let all: Vec<&Request> = good.iter().chain([&forged, &stranger]).collect();
        let known = |c: ClientId| (c == ClientId(3)).then_some(&key);
        let verdicts = Request::verify_many(&all, known, &mut RootCache::new(16));
        assert_eq!(verdicts, [true, true, true, true, true, false, false]);
        let singles: Vec<bool> = all
            .iter()
            .map(|r| known(r.client).is_some_and(|k| r.verify(k)))
            .collect();
        assert_eq!(verdicts, singles);
    }

    /// Requests of several identities signed together with their shared key: each verifies
    /// alone, a change to any of them does not, and a cache that knows the root gives every
    /// request the verdict a fresh check gives, whatever its signature bytes.
    #[test]
    fn batch_signed_requests_verify_alone_and_the_cache_changes_no_verdict() {
        let signer = SigningKey::from_seed([3; 32]);
        let key = signer.public_key();
        let unsigned: Vec<Request> = (1..=6)
            .map(|c| Request::unsigned(ClientId(c), 10 + c, vec![1], b"op".to_vec()))
            .collect();
        let signed = Request::sign_all(unsigned, &signer);
        assert!(signed
            .iter()
            .all(|r| r.verify(&key) && r.signature.count == 6));
        assert_eq!(signed[0].signature.signature, signed[5].signature.signature);

        let mut altered = signed[2].clone();
        altered.timestamp += 1;
        let mut other_bytes = signed[3].clone();
        other_bytes.signature.signature.0[0] ^= 1;
        let mut swapped = signed[4].clone();
        swapped.signature.index = 5;
        let all: Vec<&Request> = signed
            .iter()
            .chain([&altered, &other_bytes, &swapped])
            .collect();
        let known = |_: ClientId| Some(&key);
        let fresh = Request::verify_many(&all, known, &mut RootCache::new(16));
        let mut warm = RootCache::new(16);
        assert!(Request::verify_many(&[&signed[0]], known, &mut warm)[0]);
        let cached = Request::verify_many(&all, known, &mut warm);
        let singles: Vec<bool> = all.iter().map(|r| r.verify(&key)).collect();
        assert_eq!(
            fresh,
            [true, true, true, true, true, true, false, false, false]
        );
        assert_eq!(cached, fresh);
        assert_eq!(singles, fresh);
        // Another key's batch does not pass for these identities.
        let stranger = SigningKey::from_seed([4; 32]);
        let forged = Request::signed(ClientId(1), 99, vec![1], b"op".to_vec(), &stranger);
        assert_eq!(Request::verify_many(&[&forged], known, &mut warm), [false]);
    }

    fn prepare() -> (Prepare, Directory) {
        let mut usig = SoftUsig::in_memory(UsigId(100), [7; 32], Epoch(1));
        let entries = vec![PrepareEntry {
            group: GroupId(0),
            request: request(1),
        }];
        let p = crate::testing::warranted_prepare(
            &mut usig,
            View(0),
            ConfigEpoch(1),
            NodeId(0),
            entries,
        );
        let mut dir = Directory::new();
        dir.enroll(
            UsigId(100),
            Enrollment::Soft {
                public_key: usig.public_key(),
            },
        );
        (p, dir)
    }

    #[test]
    fn prepare_warrant_covers_view_epoch_and_entries() {
        let (p, dir) = prepare();
        assert!(dir
            .verify_ui(UsigId(100), &p.own_warranted_bytes(), &p.ui)
            .is_ok());
        let later = Prepare {
            view: View(1),
            ..p.clone()
        };
        assert!(dir
            .verify_ui(UsigId(100), &later.own_warranted_bytes(), &later.ui)
            .is_err());
        let mut other = p.clone();
        other.entries[0].group = GroupId(1);
        assert!(dir
            .verify_ui(UsigId(100), &other.own_warranted_bytes(), &other.ui)
            .is_err());
        assert_ne!(p.digest(), other.digest());
        // The replicas take both digests from one encoding.
        assert_eq!(
            crate::Proposal::Prepare(p.clone()).digests(),
            (MessageDigest::of(&p.own_warranted_bytes()), p.digest())
        );
    }

    #[test]
    fn node_signatures_cover_every_field() {
        let key = SigningKey::from_seed([8; 32]);
        let pk = key.public_key();
        let fetch = FetchCommits {
            replica: NodeId(10),
            warrants: Some(3..=5),
            slots: vec![7],
            signature: Signature([0; 64]),
        }
        .sign(&key);
        assert!(fetch.verify(&pk));
        assert!(!FetchCommits {
            replica: NodeId(11),
            ..fetch.clone()
        }
        .verify(&pk));
        assert!(!FetchCommits {
            slots: vec![8],
            ..fetch
        }
        .verify(&pk));
    }

    #[test]
    fn node_signed_messages_checked_in_a_batch_get_the_verdicts_of_single_checks() {
        let keys: Vec<SigningKey> = (20..24u8).map(|i| SigningKey::from_seed([i; 32])).collect();
        let publics: Vec<PublicKey> = keys.iter().map(SigningKey::public_key).collect();
        let fetch = |node: u8, counter: u64, signer: &SigningKey| {
            FetchPrepares {
                replica: NodeId(u32::from(node)),
                counters: counter..=counter,
                signature: Signature([0; 64]),
            }
            .sign(signer)
        };
        let mut altered = fetch(21, 3, &keys[1]);
        altered.counters = 3..=4;
        let fetches = [
            fetch(20, 1, &keys[0]),
            fetch(21, 1, &keys[1]),
            fetch(22, 2, &keys[0]), // signed with another node's key
            altered,
            fetch(23, 1, &keys[3]),
            fetch(99, 1, &keys[3]), // no such node
            fetch(20, 2, &keys[0]),
        ];
        let key = |f: &FetchPrepares| {
            let i = usize::try_from(f.replica.0).ok()?.checked_sub(20)?;
            publics.get(i)
        };
        let all: Vec<&FetchPrepares> = fetches.iter().collect();
        let verdicts = FetchPrepares::verify_many(&all, key);
        assert_eq!(verdicts, [true, true, false, false, true, false, true]);
        let singles: Vec<bool> = fetches
            .iter()
            .map(|f| key(f).is_some_and(|k| f.verify(k)))
            .collect();
        assert_eq!(verdicts, singles);
    }

    #[test]
    fn envelopes_round_trip_and_refuse_other_versions() {
        let (p, _) = prepare();
        let message = Message::Prepare(p);
        let bytes = Envelope::encode(&message);
        assert_eq!(Envelope::decode(&bytes).unwrap(), message);
        let older = PROTOCOL_VERSION - 1;
        let other = wire::encode(&Envelope {
            version: older,
            message,
        })
        .unwrap();
        assert!(matches!(
            Envelope::decode(&other),
            Err(EnvelopeError::Version(v)) if v == older
        ));
    }

    /// A COMMIT shares its PREPARE (an `Arc`), but its encoding carries the PREPARE itself, field
    /// by field as before: signed COMMITs, stored logs and peers of the same version read alike.
    #[test]
    fn a_commit_encodes_its_shared_prepare_as_the_prepare_itself() {
        let (p, _) = prepare();
        let prefix = chain(&chain_start(ConfigEpoch(1)), &p.digest());
        let commit = Commit {
            view: View(0),
            replica: NodeId(1),
            slot: 1,
            proposal: p.digest(),
            prefix,
            prepare: Some(Arc::new(p.clone())),
            ui: p.ui.clone(),
        };
        let fields = (
            View(0),
            NodeId(1),
            1u64,
            p.digest(),
            prefix,
            Some(&p),
            &p.ui,
        );
        assert_eq!(
            wire::encode(&commit).unwrap(),
            wire::encode(&fields).unwrap()
        );
        assert_eq!(
            wire::decode::<Commit>(&wire::encode(&commit).unwrap()).unwrap(),
            commit
        );
    }

    proptest! {
        #[test]
        fn garbage_and_truncations_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = Envelope::decode(&bytes);
            let (p, _) = prepare();
            let good = Envelope::encode(&Message::Commit(Commit {
                view: View(0),
                replica: NodeId(1),
                slot: 1,
                proposal: p.digest(),
                prefix: chain(&chain_start(ConfigEpoch(1)), &p.digest()),
                ui: p.ui.clone(),
                prepare: Some(Arc::new(p)),
            }));
            for cut in 0..good.len() {
                prop_assert!(Envelope::decode(&good[..cut]).is_err());
            }
        }
    }
}
