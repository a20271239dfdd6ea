//! One Ed25519 signature for many messages: the signer signs the root of a Merkle tree over
//! the messages' digests, and each message carries its path to that root.
//!
//! A client endpoint (a gateway, a load driver) signs the REQUESTs of its many identities that
//! are ready together, and the primary and each replica of the group check every one of them.
//! Signing each was one Ed25519 signature per request and four checks with f = 1. With a batch
//! signature the endpoint signs once per batch; a verifier checks a request by hashing its way
//! up to the root and checking the root's signature, once per batch ([`RootCache`]). (REPLYs
//! were batch-signed too until protocol version 14, which moved them to authenticated links.)
//!
//! **Why it is as strong as one signature per message.** Leaves and inner nodes are hashed
//! with different prefixes (0 and 1), so a leaf can never pass for an inner node or the other
//! way round. A path that leads from a message to a signed root therefore names a leaf the
//! signer hashed, unless SHA-256 has a collision: the signature covers exactly the messages of
//! the batch. A verified root says nothing about other messages, so caching it is sound. The
//! root is signed with the tree's size under the message type's own domain, as a single
//! signature would be.

use crate::crypto::{verify_batch, PublicKey, Signature, Signed, SigningKey};
use ring::digest::{Context, SHA256};
use serde::{Deserialize, Serialize};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};

/// A SHA-256 hash of the tree.
pub type Hash = [u8; 32];

/// Most messages one signature covers; a batch larger than this is signed in several.
pub const MAX_BATCH: usize = 1 << 12;

/// A message's share of a batch signature: where it sits in the tree, the hashes that lead
/// from it to the root, and the signer's signature of the root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchSignature {
    /// How many messages the signature covers (1: a plain signature of this message's hash).
    pub count: u32,
    /// This message's position among them.
    pub index: u32,
    /// The sibling hashes from the leaf up, one per level where the node has a sibling.
    #[serde(with = "path_bytes")]
    pub path: Vec<Hash>,
    /// The signer's signature of (count, root).
    pub signature: Signature,
}

impl BatchSignature {
    /// A placeholder, to be replaced by [`sign_all`] (tests and messages being built).
    pub fn unsigned() -> Self {
        BatchSignature {
            count: 1,
            index: 0,
            path: Vec::new(),
            signature: Signature([0; 64]),
        }
    }

    /// The root this signature claims for `message`, or `None` if the path does not fit the
    /// claimed position (wrong length, index out of range, a batch over [`MAX_BATCH`]).
    pub fn root(&self, domain: &[u8], message: &[u8]) -> Option<Hash> {
        self.climb(leaf(domain, message), |_| None)
    }

    /// Hashes its way up from `node`, this message's leaf, to the root the path claims. Before
    /// hashing at each level, `shortcut` may give the root instead: [`claimed_roots`] does so
    /// where another message's path already went on from the same node with the same siblings.
    fn climb(
        &self,
        mut node: Hash,
        mut shortcut: impl FnMut(Step) -> Option<Hash>,
    ) -> Option<Hash> {
        let (count, index) = (self.count as usize, self.index as usize);
        if count == 0 || count > MAX_BATCH || index >= count {
            return None;
        }
        let (mut i, mut width, mut offset, mut level) = (index, count, 0, 0);
        while width > 1 {
            let step = Step {
                at: (self.count, level, i as u32),
                node,
                offset,
            };
            if let Some(root) = shortcut(step) {
                return Some(root);
            }
            if i % 2 == 1 {
                node = inner(self.path.get(offset)?, &node);
                offset += 1;
            } else if i + 1 < width {
                node = inner(&node, self.path.get(offset)?);
                offset += 1;
            }
            // else: the last node of an odd level goes up unchanged.
            i /= 2;
            width = width.div_ceil(2);
            level += 1;
        }
        (offset == self.path.len()).then_some(node)
    }

    /// True when the holder of `key` signed a batch containing exactly `message`.
    pub fn verify(&self, key: &PublicKey, domain: &[u8], message: &[u8]) -> bool {
        self.root(domain, message)
            .is_some_and(|root| verify_root(key, domain, self.count, &root, &self.signature))
    }
}

/// A path on the wire: its hashes as one byte string (protocol version 11). A sequence of
/// 32-byte arrays went through serde one byte at a time, which was 13% of the ordering cores'
/// time in one process (docs/performance.md, item 24).
mod path_bytes {
    use super::Hash;
    use serde::de::{Error, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(path: &[Hash], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(path.as_flattened())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Hash>, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Vec<Hash>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number of 32-byte hashes")
            }
            fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Vec<Hash>, E> {
                if v.len() % 32 != 0 {
                    return Err(E::invalid_length(v.len(), &self));
                }
                Ok(v.chunks_exact(32)
                    .map(|hash| hash.try_into().expect("chunks of 32"))
                    .collect())
            }
        }
        d.deserialize_bytes(V)
    }
}

/// Checks the signature of a batch root.
pub fn verify_root(
    key: &PublicKey,
    domain: &[u8],
    count: u32,
    root: &Hash,
    signature: &Signature,
) -> bool {
    key.verify(domain, &signed_root(count, root), signature)
}

/// Signs `messages` with one signature per [`MAX_BATCH`] of them; the result is in their order.
pub fn sign_all(key: &SigningKey, domain: &[u8], messages: &[Vec<u8>]) -> Vec<BatchSignature> {
    let mut out = Vec::with_capacity(messages.len());
    for chunk in messages.chunks(MAX_BATCH) {
        let count = chunk.len() as u32;
        let mut levels = vec![chunk.iter().map(|m| leaf(domain, m)).collect::<Vec<_>>()];
        while levels.last().is_some_and(|l| l.len() > 1) {
            let below = levels.last().expect("at least the leaves");
            let above = below
                .chunks(2)
                .map(|pair| match pair {
                    [l, r] => inner(l, r),
                    [alone] => *alone,
                    _ => unreachable!("chunks of two"),
                })
                .collect();
            levels.push(above);
        }
        let root = levels.last().expect("at least the leaves")[0];
        let signature = key.sign(domain, &signed_root(count, &root));
        for index in 0..chunk.len() {
            let mut path = Vec::with_capacity(levels.len() - 1);
            let mut i = index;
            for level in &levels[..levels.len() - 1] {
                if let Some(sibling) = level.get(i ^ 1) {
                    path.push(*sibling);
                }
                i /= 2;
            }
            out.push(BatchSignature {
                count,
                index: index as u32,
                path,
                signature,
            });
        }
    }
    out
}

/// A node a path passes on its way up, before the hash that leaves it.
#[derive(Clone, Copy)]
struct Step {
    /// The tree's size, the node's level (0: the leaves) and its position there.
    at: (u32, u32, u32),
    node: Hash,
    /// How many of the path's siblings lie below it.
    offset: usize,
}

/// A node a path went on from: its hash, the item whose path that was (and how many of the
/// path's siblings lie below the node), and the root the path reached.
type Passed = (Hash, usize, usize, Hash);

/// The roots `items` claim (their [`BatchSignature::root`]s), hashing each node that several of
/// them share once. Where a path reaches a node another one already passed (same tree size,
/// level, position and hash) and goes on with the same siblings, it ends at the same root, so
/// it takes that root after comparing bytes. The messages of one batch meet after a level or
/// two: about two hashes each instead of one per level.
fn claimed_roots(
    domain: &[u8],
    items: &[(&PublicKey, &[u8], &BatchSignature)],
) -> Vec<Option<Hash>> {
    let mut passed: HashMap<(u32, u32, u32), Passed> = HashMap::new();
    let mut steps = Vec::new();
    let mut roots = Vec::with_capacity(items.len());
    for (n, (_, message, signature)) in items.iter().enumerate() {
        steps.clear();
        let root = signature.climb(leaf(domain, message), |step| {
            if let Some((node, item, offset, root)) = passed.get(&step.at) {
                let theirs = &items[*item].2.path[*offset..];
                if *node == step.node && signature.path.get(step.offset..) == Some(theirs) {
                    return Some(*root);
                }
            }
            steps.push(step);
            None
        });
        if let Some(root) = root {
            for step in steps.drain(..) {
                passed.insert(step.at, (step.node, n, step.offset, root));
            }
        }
        roots.push(root);
    }
    roots
}

/// Each distinct key of `keyed` with the positions that carry it, in the order keys first
/// appear. A map finds a key's group: one hash and about one comparison per item. Looking for
/// it along the groups so far (as `RootCache::verify_many` did) cost a comparison per group, so
/// n distinct keys cost n²/2: a 16 MiB REQUESTS frame holds some 230,000 minimal requests,
/// and with as many made-up signatures they held an event loop for minutes.
fn group_alike<K: Clone + Eq + std::hash::Hash>(keyed: Vec<(usize, K)>) -> Vec<(K, Vec<usize>)> {
    let mut groups: Vec<(K, Vec<usize>)> = Vec::new();
    let mut index: HashMap<K, usize> = HashMap::new();
    for (i, key) in keyed {
        // The common case, a run of one client batch's requests, costs no hashing.
        if let Some((_, items)) = groups.last_mut().filter(|(last, _)| *last == key) {
            items.push(i);
            continue;
        }
        match index.entry(key) {
            Entry::Occupied(group) => groups[*group.get()].1.push(i),
            Entry::Vacant(slot) => {
                groups.push((slot.key().clone(), vec![i]));
                slot.insert(groups.len() - 1);
            }
        }
    }
    groups
}

fn leaf(domain: &[u8], message: &[u8]) -> Hash {
    hash(&[&[0], domain, &[0], message])
}

fn inner(left: &Hash, right: &Hash) -> Hash {
    hash(&[&[1], left, right])
}

fn signed_root(count: u32, root: &Hash) -> Vec<u8> {
    let mut bytes = count.to_be_bytes().to_vec();
    bytes.extend_from_slice(root);
    bytes
}

fn hash(parts: &[&[u8]]) -> Hash {
    let mut context = Context::new(&SHA256);
    for part in parts {
        context.update(part);
    }
    context
        .finish()
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes")
}

/// The batch roots a process has already checked, per signing key (not per node id: a root
/// vouches only for what that key signed), so that the other messages of a batch cost hashes
/// instead of a signature check. An entry is a root together with the signature that verified
/// on it: a message whose path leads to a known root but which carries other signature bytes is
/// checked in full, so a verdict never depends on what the cache holds (replicas derive the
/// order book from request verdicts). Bounded: the oldest entries go first.
#[derive(Debug)]
pub struct RootCache {
    capacity: usize,
    known: HashSet<Checked>,
    order: VecDeque<Checked>,
}

/// A root that verified: the key, the batch's size, the root and the signature.
type Checked = (PublicKey, u32, Hash, Signature);

/// Roots a process keeps by default: a few per signer and batch in flight is plenty.
pub const ROOTS_KEPT: usize = 4096;

impl Default for RootCache {
    fn default() -> Self {
        RootCache::new(ROOTS_KEPT)
    }
}

impl RootCache {
    /// A cache of at most `capacity` roots.
    pub fn new(capacity: usize) -> Self {
        RootCache {
            capacity: capacity.max(1),
            known: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    /// Checks `signature` on `message` as signed by `key`, checking the root's signature only
    /// if this cache has not seen it verified before.
    pub fn verify(
        &mut self,
        key: &PublicKey,
        domain: &[u8],
        message: &[u8],
        signature: &BatchSignature,
    ) -> bool {
        let Some(root) = signature.root(domain, message) else {
            return false;
        };
        let entry = (*key, signature.count, root, signature.signature);
        if self.known.contains(&entry) {
            return true;
        }
        let valid = verify_root(key, domain, signature.count, &root, &signature.signature);
        if valid {
            self.remember(entry);
        }
        valid
    }

    /// Checks many messages, each `(key, message, signature)`, as [`RootCache::verify`] would
    /// one by one: the roots not in the cache are checked in one batch
    /// ([`crate::crypto::verify_batch`], each distinct root once), and those that verify are
    /// remembered.
    pub fn verify_many(
        &mut self,
        domain: &[u8],
        items: &[(&PublicKey, &[u8], &BatchSignature)],
    ) -> Vec<bool> {
        let mut verdicts = vec![false; items.len()];
        let mut unknown = Vec::new();
        let roots = claimed_roots(domain, items);
        for (i, ((key, _, signature), root)) in items.iter().zip(roots).enumerate() {
            let Some(root) = root else {
                continue;
            };
            let entry = (**key, signature.count, root, signature.signature);
            if self.known.contains(&entry) {
                verdicts[i] = true;
            } else {
                unknown.push((i, entry));
            }
        }
        // For each distinct root to check, the items that wait for its verdict.
        let pending = group_alike(unknown);
        if pending.is_empty() {
            return verdicts;
        }
        let roots: Vec<Vec<u8>> = pending
            .iter()
            .map(|((_, count, root, _), _)| signed_root(*count, root))
            .collect();
        let signed: Vec<Signed<'_>> = pending
            .iter()
            .zip(&roots)
            .map(|((entry, _), message)| Signed {
                key: &entry.0,
                domain,
                message,
                signature: &entry.3,
            })
            .collect();
        let valid = verify_batch(&signed);
        for ((entry, waiting), ok) in pending.into_iter().zip(valid) {
            if !ok {
                continue;
            }
            for i in waiting {
                verdicts[i] = true;
            }
            self.remember(entry);
        }
        verdicts
    }

    fn remember(&mut self, entry: Checked) {
        if self.order.len() == self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.known.remove(&oldest);
            }
        }
        self.known.insert(entry);
        self.order.push_back(entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const D: &[u8] = b"test/batch";

    /// A path travels as one byte string: it round-trips, costs one length prefix, and a
    /// string that is not a whole number of hashes is refused, not cut.
    #[test]
    fn paths_travel_as_bytes_and_ragged_ones_are_refused() {
        let key = SigningKey::from_seed([3; 32]);
        let signed = sign_all(&key, D, &messages(5));
        let third = &signed[2];
        assert_eq!(third.path.len(), 3);
        let bytes = wire::encode(third).unwrap();
        assert_eq!(wire::decode::<BatchSignature>(&bytes).unwrap(), *third);
        // count, index (one byte each), the length 96, the hashes, the signature's 64 bytes.
        assert_eq!(bytes.len(), 1 + 1 + 1 + 96 + 1 + 64);
        let mut ragged = bytes.clone();
        ragged[2] = 95;
        ragged.remove(3);
        assert!(wire::decode::<BatchSignature>(&ragged).is_err());
    }

    fn messages(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!("message {i}").into_bytes())
            .collect()
    }

    #[test]
    fn every_message_of_every_size_verifies_and_no_other() {
        let key = SigningKey::from_seed([3; 32]);
        let other = SigningKey::from_seed([4; 32]).public_key();
        for n in 1..=33 {
            let ms = messages(n);
            let sigs = sign_all(&key, D, &ms);
            assert_eq!(sigs.len(), n);
            for (i, (m, s)) in ms.iter().zip(&sigs).enumerate() {
                assert!(s.verify(&key.public_key(), D, m), "n {n} i {i}");
                assert!(!s.verify(&other, D, m));
                assert!(!s.verify(&key.public_key(), b"other/domain", m));
                // Another message of the batch does not pass with this one's path.
                let j = (i + 1) % n;
                assert!(n == 1 || !s.verify(&key.public_key(), D, &ms[j]));
                // Paths are as short as the tree is deep.
                assert!(s.path.len() <= (usize::BITS - (n - 1).leading_zeros()) as usize);
            }
        }
    }

    #[test]
    fn a_single_message_is_a_signature_of_its_leaf() {
        let key = SigningKey::from_seed([3; 32]);
        let s = &sign_all(&key, D, &messages(1))[0];
        assert_eq!((s.count, s.index, s.path.len()), (1, 0, 0));
    }

    #[test]
    fn tampered_positions_and_paths_fail() {
        let key = SigningKey::from_seed([3; 32]);
        let ms = messages(7);
        let sigs = sign_all(&key, D, &ms);
        let pk = key.public_key();
        let mut s = sigs[2].clone();
        s.index = 3;
        assert!(!s.verify(&pk, D, &ms[2]));
        let mut s = sigs[2].clone();
        s.count = 8;
        assert!(!s.verify(&pk, D, &ms[2]));
        let mut s = sigs[2].clone();
        s.path.push([0; 32]);
        assert!(!s.verify(&pk, D, &ms[2]));
        let mut s = sigs[2].clone();
        s.path.pop();
        assert!(!s.verify(&pk, D, &ms[2]));
        let mut s = sigs[2].clone();
        s.path[0][0] ^= 1;
        assert!(!s.verify(&pk, D, &ms[2]));
        let mut s = sigs[6].clone();
        s.index = 7;
        assert!(s.root(D, &ms[6]).is_none());
        let mut s = sigs[0].clone();
        s.count = 0;
        assert!(s.root(D, &ms[0]).is_none());
        assert!(!BatchSignature::unsigned().verify(&pk, D, &ms[0]));
    }

    #[test]
    fn batches_over_the_limit_are_signed_in_several() {
        let key = SigningKey::from_seed([3; 32]);
        let ms = messages(MAX_BATCH + 3);
        let sigs = sign_all(&key, D, &ms);
        assert_eq!(sigs[MAX_BATCH - 1].count as usize, MAX_BATCH);
        assert_eq!((sigs[MAX_BATCH].count, sigs[MAX_BATCH].index), (3, 0));
        assert!(sigs[MAX_BATCH + 2].verify(&key.public_key(), D, &ms[MAX_BATCH + 2]));
    }

    #[test]
    fn the_cache_checks_a_root_once_and_refuses_what_does_not_verify() {
        let key = SigningKey::from_seed([3; 32]);
        let pk = key.public_key();
        let ms = messages(5);
        let sigs = sign_all(&key, D, &ms);
        let mut cache = RootCache::new(2);
        for (m, s) in ms.iter().zip(&sigs) {
            assert!(cache.verify(&pk, D, m, s));
        }
        assert_eq!(cache.order.len(), 1);
        // A forged signature on a root the cache has not seen fails, and is not remembered.
        let unseen = messages(6);
        let mut forged = sign_all(&SigningKey::from_seed([9; 32]), D, &unseen)[0].clone();
        assert!(!cache.verify(&pk, D, &unseen[0], &forged));
        assert!(!cache.verify(&pk, D, &unseen[0], &forged));
        // A known root with a path to another message fails: the root is per message.
        forged = sigs[0].clone();
        assert!(!cache.verify(&pk, D, b"not in the batch", &forged));
        // The same root under another key is checked again (and fails).
        let other = SigningKey::from_seed([5; 32]).public_key();
        assert!(!cache.verify(&other, D, &ms[0], &sigs[0]));
        // Bounded.
        for n in 1..5 {
            let ms = messages(n);
            let s = &sign_all(&key, D, &ms)[0];
            assert!(cache.verify(&pk, D, &ms[0], s));
        }
        assert_eq!(cache.order.len(), 2);
        assert_eq!(cache.known.len(), 2);
    }

    /// A key that counts the comparisons made with it.
    #[derive(Clone, Debug)]
    struct Counted<'a>(u64, &'a std::cell::Cell<u64>);

    impl PartialEq for Counted<'_> {
        fn eq(&self, other: &Self) -> bool {
            self.1.set(self.1.get() + 1);
            self.0 == other.0
        }
    }

    impl Eq for Counted<'_> {}

    impl std::hash::Hash for Counted<'_> {
        fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
            self.0.hash(state);
        }
    }

    /// Grouping the roots to check costs about one comparison per item, however many distinct
    /// ones there are (looking along the groups so far cost 25 million comparisons for these
    /// 10,000 items), and keeps each key's items in order, keys in first-seen order.
    #[test]
    fn distinct_roots_are_grouped_with_a_comparison_or_so_each() {
        let comparisons = std::cell::Cell::new(0);
        let n = 5_000;
        // Every key twice, the second time after all the others.
        let keyed: Vec<(usize, Counted<'_>)> = (0..2 * n)
            .map(|i| (i, Counted((i % n) as u64, &comparisons)))
            .collect();
        let groups = group_alike(keyed);
        assert_eq!(groups.len(), n);
        for (k, (key, items)) in groups.iter().enumerate() {
            assert_eq!((key.0, items.as_slice()), (k as u64, &[k, k + n][..]));
        }
        assert!(
            comparisons.get() <= 2 * 2 * n as u64,
            "{} comparisons for {} items",
            comparisons.get(),
            2 * n
        );
    }

    /// `verify_many` says what `verify` says of each item, whatever mix of valid, forged,
    /// repeated and cached roots it gets, and remembers exactly the valid roots.
    #[test]
    fn verifying_many_gives_each_item_the_verdict_of_verifying_it_alone() {
        let key = SigningKey::from_seed([3; 32]);
        let pk = key.public_key();
        let ms = messages(12);
        let good = sign_all(&key, D, &ms[..6]);
        let other = sign_all(&key, D, &ms[6..]);
        let forged = sign_all(&SigningKey::from_seed([9; 32]), D, &ms[6..]);
        let mut items: Vec<(&PublicKey, &[u8], &BatchSignature)> = Vec::new();
        for round in 0..2 {
            for i in 0..6 {
                items.push((&pk, &ms[i], &good[i]));
                items.push((&pk, &ms[6 + i], &forged[i]));
                if round == 1 {
                    items.push((&pk, &ms[6 + i], &other[i]));
                    // A valid path under a root to a message outside the batch.
                    items.push((&pk, &ms[(i + 1) % 6], &good[i]));
                }
            }
        }
        let mut cache = RootCache::new(16);
        // The first batch's root is cached already, the second's not.
        assert!(cache.verify(&pk, D, &ms[0], &good[0]));
        let verdicts = cache.verify_many(D, &items);
        let alone: Vec<bool> = (items.iter()).map(|(k, m, s)| s.verify(k, D, m)).collect();
        assert_eq!(verdicts, alone);
        assert_eq!(verdicts.iter().filter(|&&v| v).count(), 2 * 6 + 6);
        assert_eq!(cache.order.len(), 2, "the two valid roots, once each");
    }

    proptest! {
        #[test]
        fn any_position_of_any_batch_verifies(n in 1usize..300, pick in 0usize..300) {
            let key = SigningKey::from_seed([7; 32]);
            let ms = messages(n);
            let i = pick % n;
            let s = &sign_all(&key, D, &ms)[i];
            prop_assert!(s.verify(&key.public_key(), D, &ms[i]));
        }

        /// Sharing nodes between paths changes the cost, never a root: for any mix of items
        /// from two batches of one size, some altered (message, position, a sibling, a path
        /// cut short or too long), some repeated, in any order, `claimed_roots` gives each
        /// item its own `root`.
        #[test]
        fn shared_nodes_give_every_item_its_own_root(
            n in 1usize..40,
            picks in proptest::collection::vec((0usize..80, 0u8..6), 1..120),
        ) {
            let key = SigningKey::from_seed([7; 32]);
            let pk = key.public_key();
            let batches = [messages(n), messages(n + 1)[1..].to_vec()];
            let sigs = batches.each_ref().map(|ms| sign_all(&key, D, ms));
            let items: Vec<(Vec<u8>, BatchSignature)> = picks
                .iter()
                .map(|&(pick, change)| {
                    let (b, i) = (pick % 2, (pick / 2) % n);
                    let (mut m, mut s) = (batches[b][i].clone(), sigs[b][i].clone());
                    match change {
                        1 => m.push(b'!'),
                        2 => s.index = (s.index + 1) % s.count,
                        3 => match s.path.last_mut() {
                            Some(top) => top[0] ^= 1,
                            None => s.path.push([0; 32]),
                        },
                        4 => { s.path.pop(); }
                        5 => s.path.push([0; 32]),
                        _ => {}
                    }
                    (m, s)
                })
                .collect();
            let refs: Vec<(&PublicKey, &[u8], &BatchSignature)> =
                items.iter().map(|(m, s)| (&pk, m.as_slice(), s)).collect();
            let shared = claimed_roots(D, &refs);
            for ((m, s), root) in items.iter().zip(shared) {
                prop_assert_eq!(root, s.root(D, m));
            }
        }

        #[test]
        fn no_claimed_position_panics(count in any::<u32>(), index in any::<u32>(),
                                      depth in 0usize..40) {
            let s = BatchSignature { count, index, path: vec![[1; 32]; depth],
                                     signature: Signature([0; 64]) };
            let _ = s.root(D, b"m");
        }
    }
}
