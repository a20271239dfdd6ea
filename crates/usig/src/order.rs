//! Per-sender ordered acceptance of warrants.
//!
//! MinBFT's receivers accept each sender's warrants strictly in counter order. An
//! [`OrderedVerifier`] verifies every offered warrant, delivers the next one at once, holds back
//! ones that arrived early (bounded by a window) and releases them when the gap is filled, and
//! rejects replays, reuse and equivocation. For the TPM backend it also checks that consecutive
//! warrants continue one PCR chain, which is what makes a hidden extra entry detectable.
//!
//! It never delivers two messages for one `(identity, epoch, counter)`: within an epoch the next
//! expected counter only grows, and epochs only grow, through [`OrderedVerifier::begin_epoch`].
//!
//! A receiver may also set a ceiling per sender ([`OrderedVerifier::set_ceiling`]): warrants
//! beyond it are verified and refused, as those beyond the window are, and fetched once the
//! ceiling rises ([`OrderedVerifier::missing`]). The window bounds what is held; the ceiling
//! bounds what is delivered, which the window does not (each delivery moves it on).

use crate::verify::{ChainLink, Directory, VerifyError};
use crate::warrant::{Epoch, MessageDigest, UniqueWarrant, UsigId};
use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;

/// Default number of counters beyond the next expected one that are held back.
pub const DEFAULT_WINDOW: u64 = 1024;

/// A payload released in counter order.
#[derive(Debug, PartialEq, Eq)]
pub struct Delivered<T> {
    pub epoch: Epoch,
    pub counter: u64,
    pub payload: T,
}

struct Held<T> {
    digest: MessageDigest,
    link: Option<ChainLink>,
    payload: T,
}

struct SenderState<T> {
    /// Unknown until the first verified warrant from this sender.
    epoch: Option<Epoch>,
    next: u64,
    /// Chain value after counter `next - 1` (the PCR reset value at the start of an epoch).
    chain: [u8; 32],
    held: BTreeMap<u64, Held<T>>,
    /// The highest verified counter that was too far ahead to hold: what [`OrderedVerifier::
    /// missing`] asks for, so that a receiver far behind catches up by fetching rather than
    /// waiting for a message that nothing will send again. Also the highest beyond the ceiling.
    beyond: Option<u64>,
    /// The last counter delivered or held, if the receiver set one.
    ceiling: Option<u64>,
}

impl<T> SenderState<T> {
    fn fresh(epoch: Option<Epoch>) -> Self {
        SenderState {
            epoch,
            next: 1,
            chain: [0; 32],
            held: BTreeMap::new(),
            beyond: None,
            ceiling: None,
        }
    }
}

/// Verifies warrants and delivers each sender's payloads in counter order.
pub struct OrderedVerifier<T> {
    directory: Directory,
    window: u64,
    senders: HashMap<UsigId, SenderState<T>>,
}

impl<T> OrderedVerifier<T> {
    /// A verifier over the enrolled identities, holding at most `window` early warrants per sender.
    pub fn new(directory: Directory, window: u64) -> Self {
        OrderedVerifier {
            directory,
            window: window.max(1),
            senders: HashMap::new(),
        }
    }

    /// The directory warrants are verified against.
    pub fn directory(&self) -> &Directory {
        &self.directory
    }

    /// Offers `payload`, whose digest `warrant` certifies, as received from `sender`. Returns the
    /// payloads that are now deliverable in counter order (empty when this one was held back).
    pub fn offer(
        &mut self,
        sender: UsigId,
        digest: MessageDigest,
        warrant: &UniqueWarrant,
        payload: T,
    ) -> Result<Vec<Delivered<T>>, VerifyError> {
        let link = self.directory.verify_digest(sender, &digest, warrant)?;
        let window = self.window;
        let state = self
            .senders
            .entry(sender)
            .or_insert_with(|| SenderState::fresh(None));
        let epoch = *state.epoch.get_or_insert(warrant.epoch);
        if warrant.epoch > epoch {
            return Err(VerifyError::NewEpoch {
                current: epoch,
                offered: warrant.epoch,
            });
        }
        if warrant.epoch < epoch {
            return Err(VerifyError::StaleEpoch {
                current: epoch,
                offered: warrant.epoch,
            });
        }
        let counter = warrant.counter;
        if counter < state.next {
            return Err(VerifyError::Replay {
                counter,
                expected: state.next,
            });
        }
        if let Some(ceiling) = state.ceiling.filter(|&c| counter > c) {
            state.beyond = state.beyond.max(Some(counter));
            return Err(VerifyError::BeyondCeiling { counter, ceiling });
        }
        if counter - state.next >= window {
            state.beyond = state.beyond.max(Some(counter));
            return Err(VerifyError::OutOfWindow {
                counter,
                expected: state.next,
                window,
            });
        }
        if let Some(held) = state.held.get(&counter) {
            return if held.digest == digest {
                Ok(Vec::new())
            } else {
                Err(VerifyError::Equivocation { counter })
            };
        }
        check_neighbours(state, counter, link)?;
        state.held.insert(
            counter,
            Held {
                digest,
                link,
                payload,
            },
        );
        Ok(release(state, epoch))
    }

    /// Counters the verifier waits for before it can deliver what it holds from `sender`, or up
    /// to a warrant it saw beyond its window or ceiling: the range to fetch, if any, never past
    /// the ceiling.
    pub fn missing(&self, sender: UsigId) -> Option<RangeInclusive<u64>> {
        let state = self.senders.get(&sender)?;
        let end = match state.held.first_key_value() {
            Some((&first_held, _)) => first_held - 1,
            None => state.beyond.filter(|&b| b >= state.next)?,
        };
        let end = state.ceiling.map_or(end, |c| end.min(c));
        (end >= state.next).then_some(state.next..=end)
    }

    /// Delivers and holds nothing from `sender` beyond `ceiling` (none: no ceiling) until it is
    /// set again; what is held already stays.
    pub fn set_ceiling(&mut self, sender: UsigId, ceiling: Option<u64>) {
        match self.senders.get_mut(&sender) {
            Some(state) => state.ceiling = ceiling,
            None if ceiling.is_some() => {
                let mut state = SenderState::fresh(None);
                state.ceiling = ceiling;
                self.senders.insert(sender, state);
            }
            None => {}
        }
    }

    /// The sender's current epoch and next expected counter, once known.
    pub fn expected(&self, sender: UsigId) -> Option<(Epoch, u64)> {
        let state = self.senders.get(&sender)?;
        state.epoch.map(|e| (e, state.next))
    }

    /// Follows `sender` into a newer epoch (after a restart the protocol has accepted): counters
    /// restart at 1 and everything held from the old epoch is dropped.
    pub fn begin_epoch(&mut self, sender: UsigId, epoch: Epoch) -> Result<(), VerifyError> {
        let state = self
            .senders
            .entry(sender)
            .or_insert_with(|| SenderState::fresh(None));
        if let Some(current) = state.epoch {
            if epoch <= current {
                return Err(VerifyError::StaleEpoch {
                    current,
                    offered: epoch,
                });
            }
        }
        *state = SenderState::fresh(Some(epoch));
        Ok(())
    }
    /// Moves `sender` to a later position of its warrant sequence that the protocol certified
    /// (a recovering replica's JOIN, or a position f+1 correct replicas vouch for): the next
    /// delivered warrant is `counter` of `epoch`, continuing the chain value `prev` (zero for
    /// warrants without a chain). Held warrants before it, or of another epoch, are dropped; held
    /// ones from it on are released. Never moves back, so no `(epoch, counter)` is delivered twice.
    pub fn resume_at(
        &mut self,
        sender: UsigId,
        epoch: Epoch,
        counter: u64,
        prev: [u8; 32],
    ) -> Result<Vec<Delivered<T>>, VerifyError> {
        let state = self
            .senders
            .entry(sender)
            .or_insert_with(|| SenderState::fresh(None));
        if let Some(current) = state.epoch {
            if epoch < current {
                return Err(VerifyError::StaleEpoch {
                    current,
                    offered: epoch,
                });
            }
            if epoch == current && counter < state.next {
                return Err(VerifyError::Replay {
                    counter,
                    expected: state.next,
                });
            }
            if epoch > current {
                state.held.clear();
                state.beyond = None;
            }
        }
        state.epoch = Some(epoch);
        state.next = counter.max(1);
        state.chain = prev;
        state.held = std::mem::take(&mut state.held).split_off(&state.next);
        // What is still held must continue the new position's chain.
        if let Some(first) = state.held.get(&state.next) {
            if first.link.is_some_and(|l| l.prev != prev) {
                state.held.clear();
            }
        }
        Ok(release(state, epoch))
    }

    /// [`OrderedVerifier::resume_at`] right after `warrant` (over `digest`), verified here.
    pub fn resume_after(
        &mut self,
        sender: UsigId,
        digest: &MessageDigest,
        warrant: &UniqueWarrant,
    ) -> Result<Vec<Delivered<T>>, VerifyError> {
        let link = self.directory.verify_digest(sender, digest, warrant)?;
        let next = link.map_or([0; 32], |l| l.next);
        self.resume_at(sender, warrant.epoch, warrant.counter + 1, next)
    }
}

/// Rejects a warrant whose chain link contradicts the delivered prefix or a held neighbour, so
/// that everything held always forms one consistent chain.
fn check_neighbours<T>(
    state: &SenderState<T>,
    counter: u64,
    link: Option<ChainLink>,
) -> Result<(), VerifyError> {
    let Some(link) = link else {
        return Ok(());
    };
    let left = if counter == state.next {
        Some(state.chain)
    } else {
        state
            .held
            .get(&(counter - 1))
            .and_then(|h| h.link.map(|l| l.next))
    };
    if left.is_some_and(|value| value != link.prev) {
        return Err(VerifyError::ChainBroken {
            counter,
            previous: counter - 1,
        });
    }
    let right = state.held.get(&(counter + 1)).and_then(|h| h.link);
    if right.is_some_and(|r| r.prev != link.next) {
        return Err(VerifyError::ChainBroken {
            counter: counter + 1,
            previous: counter,
        });
    }
    Ok(())
}

/// Delivers the held run that starts at the next expected counter.
fn release<T>(state: &mut SenderState<T>, epoch: Epoch) -> Vec<Delivered<T>> {
    let mut out = Vec::new();
    while let Some(held) = state.held.remove(&state.next) {
        if let Some(link) = held.link {
            state.chain = link.next;
        }
        out.push(Delivered {
            epoch,
            counter: state.next,
            payload: held.payload,
        });
        state.next += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soft::SoftUsig;
    use crate::verify::{tests::FakeAk, Enrollment};
    use crate::warrant::{extend, tpm_entry};
    use crate::Usig;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    const ID: UsigId = UsigId(1);
    const SEED: [u8; 32] = [9; 32];

    fn verifier(window: u64) -> OrderedVerifier<Vec<u8>> {
        let key = SoftUsig::in_memory(ID, SEED, Epoch(1)).public_key();
        let mut dir = Directory::new();
        dir.enroll(ID, Enrollment::Soft { public_key: key });
        OrderedVerifier::new(dir, window)
    }

    type Signed = Vec<(Vec<u8>, UniqueWarrant)>;

    fn warrants(epoch: u64, messages: &[&[u8]]) -> Signed {
        let mut usig = SoftUsig::in_memory(ID, SEED, Epoch(epoch));
        messages
            .iter()
            .map(|m| (m.to_vec(), usig.create_ui(m).unwrap()))
            .collect()
    }

    fn offer(
        v: &mut OrderedVerifier<Vec<u8>>,
        (m, w): &(Vec<u8>, UniqueWarrant),
    ) -> Result<Vec<u64>, VerifyError> {
        v.offer(ID, MessageDigest::of(m), w, m.clone())
            .map(|d| d.into_iter().map(|d| d.counter).collect())
    }

    #[test]
    fn in_order_replay_and_holdback() {
        let mut v = verifier(8);
        let ws = warrants(1, &[b"a", b"b", b"c", b"d"]);
        assert_eq!(offer(&mut v, &ws[0]), Ok(vec![1]));
        assert_eq!(
            offer(&mut v, &ws[0]),
            Err(VerifyError::Replay {
                counter: 1,
                expected: 2
            })
        );
        assert_eq!(offer(&mut v, &ws[3]), Ok(vec![]));
        assert_eq!(offer(&mut v, &ws[2]), Ok(vec![]));
        assert_eq!(
            offer(&mut v, &ws[2]),
            Ok(vec![]),
            "a retransmitted held warrant is harmless"
        );
        assert_eq!(v.missing(ID), Some(2..=2));
        assert_eq!(offer(&mut v, &ws[1]), Ok(vec![2, 3, 4]));
        assert_eq!(v.missing(ID), None);
        assert_eq!(v.expected(ID), Some((Epoch(1), 5)));
    }

    #[test]
    fn resuming_skips_forward_only_and_releases_what_is_held() {
        let mut v = verifier(8);
        let ws = warrants(1, &[b"a", b"b", b"c", b"d", b"e", b"f"]);
        assert_eq!(offer(&mut v, &ws[0]), Ok(vec![1]));
        assert_eq!(offer(&mut v, &ws[4]), Ok(vec![]));
        // The JOIN-like position: counter 4 warranted, so 5 is next and is released at once.
        let d = MessageDigest::of(&ws[3].0);
        let released: Vec<u64> = v
            .resume_after(ID, &d, &ws[3].1)
            .unwrap()
            .into_iter()
            .map(|d| d.counter)
            .collect();
        assert_eq!(released, vec![5]);
        assert!(matches!(
            offer(&mut v, &ws[2]),
            Err(VerifyError::Replay { .. })
        ));
        assert!(matches!(
            v.resume_at(ID, Epoch(1), 2, [0; 32]),
            Err(VerifyError::Replay { .. })
        ));
        assert_eq!(offer(&mut v, &ws[5]), Ok(vec![6]));
        // A new epoch through the protocol: its counters start wherever the position says.
        let new = warrants(2, &[b"x", b"y", b"z"]);
        assert!(matches!(
            offer(&mut v, &new[1]),
            Err(VerifyError::NewEpoch { .. })
        ));
        assert_eq!(v.resume_at(ID, Epoch(2), 2, [0; 32]).unwrap(), vec![]);
        assert_eq!(offer(&mut v, &new[1]), Ok(vec![2]));
        assert!(matches!(
            v.resume_at(ID, Epoch(1), 9, [0; 32]),
            Err(VerifyError::StaleEpoch { .. })
        ));
    }

    #[test]
    fn gaps_beyond_the_window_are_rejected() {
        let mut v = verifier(2);
        let ws = warrants(1, &[b"a", b"b", b"c"]);
        assert_eq!(
            offer(&mut v, &ws[2]),
            Err(VerifyError::OutOfWindow {
                counter: 3,
                expected: 1,
                window: 2
            })
        );
        assert_eq!(offer(&mut v, &ws[1]), Ok(vec![]));
    }

    /// A receiver far behind asks for everything up to the warrant it could not hold, and stops
    /// asking once it delivered that far.
    #[test]
    fn a_warrant_beyond_the_window_is_fetched_up_to() {
        let mut v = verifier(2);
        let ws = warrants(1, &[b"a", b"b", b"c", b"d", b"e"]);
        assert_eq!(v.missing(ID), None);
        assert!(offer(&mut v, &ws[4]).is_err());
        assert_eq!(v.missing(ID), Some(1..=5));
        assert_eq!(offer(&mut v, &ws[0]), Ok(vec![1]));
        assert_eq!(offer(&mut v, &ws[1]), Ok(vec![2]));
        assert_eq!(v.missing(ID), Some(3..=5));
        assert_eq!(offer(&mut v, &ws[3]), Ok(vec![]));
        assert_eq!(v.missing(ID), Some(3..=3), "a held warrant bounds the gap");
        assert_eq!(offer(&mut v, &ws[2]), Ok(vec![3, 4]));
        assert_eq!(v.missing(ID), Some(5..=5));
        assert_eq!(offer(&mut v, &ws[4]), Ok(vec![5]));
        assert_eq!(v.missing(ID), None);
    }

    /// Nothing past the ceiling is delivered, however close to the next counter: it is
    /// refused, and once the ceiling rises it is fetched up to the new ceiling only.
    #[test]
    fn nothing_past_the_ceiling_is_delivered_and_it_is_fetched_once_the_ceiling_rises() {
        let mut v = verifier(8);
        let ws = warrants(1, &[b"a", b"b", b"c", b"d", b"e"]);
        v.set_ceiling(ID, Some(2));
        assert_eq!(offer(&mut v, &ws[0]), Ok(vec![1]));
        assert_eq!(offer(&mut v, &ws[1]), Ok(vec![2]));
        let refused = Err(VerifyError::BeyondCeiling {
            counter: 3,
            ceiling: 2,
        });
        assert_eq!(offer(&mut v, &ws[2]), refused);
        assert!(offer(&mut v, &ws[4]).is_err());
        assert_eq!(v.missing(ID), None, "nothing to fetch below the ceiling");
        v.set_ceiling(ID, Some(4));
        assert_eq!(v.missing(ID), Some(3..=4));
        assert_eq!(offer(&mut v, &ws[3]), Ok(vec![]));
        assert_eq!(offer(&mut v, &ws[2]), Ok(vec![3, 4]));
        assert_eq!(v.missing(ID), None);
        v.set_ceiling(ID, None);
        assert_eq!(v.missing(ID), Some(5..=5));
        assert_eq!(offer(&mut v, &ws[4]), Ok(vec![5]));
    }

    #[test]
    fn equivocation_is_rejected() {
        let mut v = verifier(8);
        let honest = warrants(1, &[b"a", b"b", b"c"]);
        let forked = warrants(1, &[b"a", b"B", b"C"]);
        assert_eq!(offer(&mut v, &honest[2]), Ok(vec![]));
        assert_eq!(
            offer(&mut v, &forked[2]),
            Err(VerifyError::Equivocation { counter: 3 })
        );
        assert_eq!(offer(&mut v, &honest[0]), Ok(vec![1]));
        assert_eq!(offer(&mut v, &forked[1]), Ok(vec![2, 3]));
        assert_eq!(
            offer(&mut v, &honest[1]),
            Err(VerifyError::Replay {
                counter: 2,
                expected: 4
            })
        );
    }

    #[test]
    fn new_epochs_need_the_protocol() {
        let mut v = verifier(8);
        let old = warrants(1, &[b"a", b"b"]);
        let new = warrants(2, &[b"x"]);
        assert_eq!(offer(&mut v, &old[0]), Ok(vec![1]));
        assert_eq!(
            offer(&mut v, &new[0]),
            Err(VerifyError::NewEpoch {
                current: Epoch(1),
                offered: Epoch(2)
            })
        );
        v.begin_epoch(ID, Epoch(2)).unwrap();
        assert!(matches!(
            offer(&mut v, &old[1]),
            Err(VerifyError::StaleEpoch { .. })
        ));
        assert_eq!(offer(&mut v, &new[0]), Ok(vec![1]));
        assert!(v.begin_epoch(ID, Epoch(2)).is_err());
    }

    /// A verifier that resumes at a certified position (counter and chain value) follows that
    /// chain only: a warrant for the same counter on another branch of the host's PCR history
    /// is refused, and a resume after a TPM warrant continues from its PCR value.
    #[test]
    fn resuming_pins_the_chain_value() {
        let ak = FakeAk::new();
        let e = Epoch::from_tpm(1, 0);
        let d = |m: &[u8]| MessageDigest::of(m);
        let v1 = extend(&[0; 32], &tpm_entry(ID, 1, &d(b"a")));
        let w2 = ak.warrant(ID, e, 2, v1, &d(b"b"), 3);
        let branch = extend(&v1, &[0xee; 32]);
        let w2_branch = ak.warrant(ID, e, 2, branch, &d(b"B"), 3);
        let mut v: OrderedVerifier<()> = OrderedVerifier::new(ak.directory(ID, 3), 8);
        assert_eq!(v.resume_at(ID, e, 2, v1), Ok(Vec::new()));
        assert_eq!(
            v.offer(ID, d(b"B"), &w2_branch, ()).map(|x| x.len()),
            Err(VerifyError::ChainBroken {
                counter: 2,
                previous: 1
            })
        );
        assert_eq!(v.offer(ID, d(b"b"), &w2, ()).map(|x| x.len()), Ok(1));
        // Resuming after counter 2 (as after a JOIN) continues from its PCR value.
        let v2 = extend(&v1, &tpm_entry(ID, 2, &d(b"b")));
        let w3 = ak.warrant(ID, e, 3, v2, &d(b"c"), 3);
        let mut after: OrderedVerifier<()> = OrderedVerifier::new(ak.directory(ID, 3), 8);
        assert_eq!(after.resume_after(ID, &d(b"b"), &w2), Ok(Vec::new()));
        assert_eq!(after.expected(ID), Some((e, 3)));
        assert_eq!(after.offer(ID, d(b"c"), &w3, ()).map(|x| x.len()), Ok(1));
    }

    #[test]
    fn tpm_warrants_must_continue_one_chain() {
        let ak = FakeAk::new();
        let dir = ak.directory(ID, 3);
        let mut v: OrderedVerifier<()> = OrderedVerifier::new(dir, 8);
        let e = Epoch::from_tpm(1, 0);
        let d = |m: &[u8]| MessageDigest::of(m);
        let w1 = ak.warrant(ID, e, 1, [0; 32], &d(b"a"), 3);
        let v1 = extend(&[0; 32], &tpm_entry(ID, 1, &d(b"a")));
        let w2 = ak.warrant(ID, e, 2, v1, &d(b"b"), 3);
        // A hidden extra entry between counters 1 and 2 shifts the chain: counter 2 built on it
        // is valid on its own but does not link to counter 1.
        let hidden = extend(&v1, &[0xee; 32]);
        let w2_fork = ak.warrant(ID, e, 2, hidden, &d(b"B"), 3);
        let w3_fork = ak.warrant(
            ID,
            e,
            3,
            extend(&hidden, &tpm_entry(ID, 2, &d(b"B"))),
            &d(b"C"),
            3,
        );
        assert_eq!(v.offer(ID, d(b"C"), &w3_fork, ()).map(|x| x.len()), Ok(0));
        assert_eq!(
            v.offer(ID, d(b"b"), &w2, ()).map(|x| x.len()),
            Err(VerifyError::ChainBroken {
                counter: 3,
                previous: 2
            })
        );
        assert_eq!(v.offer(ID, d(b"a"), &w1, ()).map(|x| x.len()), Ok(1));
        assert_eq!(
            v.offer(ID, d(b"B"), &w2_fork, ()).map(|x| x.len()),
            Err(VerifyError::ChainBroken {
                counter: 2,
                previous: 1
            })
        );
        assert_eq!(
            v.offer(ID, d(b"b"), &w2, ()).map(|x| x.len()),
            Err(VerifyError::ChainBroken {
                counter: 3,
                previous: 2
            })
        );
    }

    proptest! {
        /// Whatever a Byzantine holder of the key signs (several messages per counter, two
        /// epochs) and however the network reorders and duplicates it, the verifier delivers at
        /// most one message per (epoch, counter), consecutively from 1 in each epoch.
        #[test]
        fn never_two_messages_for_one_counter(
            schedule in proptest::collection::vec((0usize..2, 0usize..3, 0usize..6), 1..120),
            switch_epoch_after in 0usize..120,
        ) {
            let mut v = verifier(4);
            let mut forks: Vec<Vec<Signed>> = Vec::new();
            for epoch in 1..=2 {
                forks.push((0..3).map(|f| {
                    let msgs: Vec<Vec<u8>> = (0..6).map(|c| format!("e{epoch}f{f}c{c}").into_bytes()).collect();
                    let refs: Vec<&[u8]> = msgs.iter().map(|m| m.as_slice()).collect();
                    warrants(epoch, &refs)
                }).collect());
            }
            let mut delivered: BTreeSet<(Epoch, u64)> = BTreeSet::new();
            let mut last: Option<(Epoch, u64)> = None;
            for (step, (epoch, fork, counter)) in schedule.into_iter().enumerate() {
                if step == switch_epoch_after {
                    let _ = v.begin_epoch(ID, Epoch(2));
                }
                let (m, w) = &forks[epoch][fork][counter];
                if let Ok(out) = v.offer(ID, MessageDigest::of(m), w, m.clone()) {
                    for d in out {
                        prop_assert!(delivered.insert((d.epoch, d.counter)), "delivered twice");
                        let expected = match last {
                            Some((e, c)) if e == d.epoch => c + 1,
                            _ => 1,
                        };
                        prop_assert_eq!(d.counter, expected);
                        prop_assert!(last.is_none_or(|(e, _)| e <= d.epoch));
                        last = Some((d.epoch, d.counter));
                    }
                }
            }
        }
    }
}
