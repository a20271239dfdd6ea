//! A second, self-contained model: where a VIEW-CHANGE's log may start once replicas take
//! checkpoints (docs/protocol.md, "Checkpoints and garbage collection", "Open safety gap"), for
//! one group of 2f+1 = 3 replicas (f = 1: two correct, one Byzantine).
//!
//! A VIEW-CHANGE lists every message its sender warranted from some start on, with consecutive
//! USIG counters, so it cannot leave out a COMMIT *after* that start. Checkpoints let the start
//! move up, and the question is which starts keep every COMMIT that helped decide a slot above
//! the new view's stable checkpoint. The USIG makes counters unique, not contents: a Byzantine
//! replica can warrant a second CHECKPOINT for an old slot after some of its COMMITs and start
//! its log there. The rule checked ("anchor reports", [`LogStart::Reported`]):
//!
//! * every CHECKPOINT of a replica P at slot y reports, for each member Q of its group whose
//!   CHECKPOINT at y − K P delivered (in Q's counter order), the counter of Q's first CHECKPOINT
//!   at y − K; P never reports a CHECKPOINT of Q whose slot is not above every CHECKPOINT of Q
//!   it delivered before ([`report`], [`Anchors::increasing_slots`]);
//! * a VIEW-CHANGE's log starts at counter 1, or at a CHECKPOINT of its sender at slot
//!   x ≤ low − K (low: the stable checkpoint it shows) together with f+1 CHECKPOINTs at x + K
//!   from distinct members of the group that each report the log's first counter.
//!
//! # What is modelled
//!
//! * **Slots** `1..=3` and the checkpoint interval K = 1 ([`K`]), so every slot is a checkpoint
//!   slot and the high watermark ([`watermark`]) is s − 2: a COMMIT for slot 3 needs its
//!   sender's CHECKPOINT at 1. Slot 0 is the start of the epoch (no CHECKPOINT; a log from
//!   counter 1). A log can start at a CHECKPOINT at 1 only under a stable checkpoint at 2, and
//!   slot 3 is then the slot it could hide: the smallest instance with a watermark, an anchor
//!   and a slot above the stable checkpoint. CHECKPOINTs are taken at slots 1 and 2 (one at the
//!   last slot would be stable above everything, or report an anchor only a stable checkpoint
//!   above everything could use).
//! * **Correct replicas** ([`Correct`]) follow the protocol. They process the PREPAREs in slot
//!   order (the primary delivers each to any replica at any time) and COMMIT each processed
//!   slot in order once the watermark allows (their own CHECKPOINT at `watermark(s)` or above is
//!   warranted). A replica decides a processed slot with f+1 COMMITs of distinct members that it
//!   counts, its own among them or not (as `group::core` accepts), and counts a peer's COMMIT
//!   for slot s only if, in the peer's counter order, a CHECKPOINT of the peer at
//!   `watermark(s)` or above came before it (`Checkpoints::peer_may_commit`: the receivers
//!   enforce the watermark). Once it decided every slot up to its next checkpoint slot it
//!   warrants its CHECKPOINT there, reporting the Byzantine replica's first CHECKPOINT an
//!   interval below ([`report`]) in whatever prefix of the Byzantine messages it delivered.
//! * **The Byzantine replica** warrants, in any order, up to `byzantine_messages` messages
//!   before the NEW-VIEW: a COMMIT for any slot, a CHECKPOINT for any checkpoint slot (repeats
//!   and lower slots allowed: that is the attack). Correct peers see its messages in its
//!   counter order. Its CHECKPOINTs report whatever suits it, so each counts as a report of any
//!   anchor of its own.
//! * **The span** ([`Anchors::span`], K in the design): a correct replica takes any slot that
//!   f+1 CHECKPOINTs certify as its stable checkpoint at any time ([`Action::Stable`]; it never
//!   goes down), COMMITs a slot only within the span of it, and its VIEW-CHANGE shows its
//!   stable checkpoint and its PREPAREs up to the span past it; a Byzantine VIEW-CHANGE whose
//!   log forces PREPAREs past the span of the checkpoint it shows is refused.
//!   [`Anchors::without_span`] is the model as it was before the span.
//! * **VIEW-CHANGE and NEW-VIEW** ([`Action::NewView`]): the NEW-VIEW takes f+1 = 2
//!   VIEW-CHANGEs of the group, from both correct replicas or from one and the Byzantine one. A
//!   correct replica's VIEW-CHANGE shows a stable checkpoint `low` and the PREPAREs of slots
//!   `low+1..=processed`; its log is honest (counter 1 is always a valid start). The Byzantine
//!   one shows any `low` that f+1 CHECKPOINTs of the group certify (or 0), starts its log at
//!   counter 1 or wherever [`LogStart`] allows, and shows the fewest PREPAREs it may: slots
//!   `low+1..=c` for the highest COMMIT c above `low` in its log (a COMMIT chains the prefix
//!   before it, `crate::view_change::CommitRule::Chained`), none if there is none. The cut
//!   starts at the highest `low` among the two; a slot above is in it if one of them shows its
//!   PREPARE, else it is null.
//! * **After the NEW-VIEW** a correct replica whose VIEW-CHANGE it does not take goes on in view
//!   0 (the NEW-VIEW has not reached it): it processes every slot and COMMITs, checkpoints and
//!   decides all it can ([`Anchors::catch_up`]). Nobody else warrants anything more (the other
//!   two sent their VIEW-CHANGEs, and peers drop a sender's view-0 messages after its
//!   VIEW-CHANGE).
//!
//! **Property** ("no decided slot is lost", [`no_loss`]): once the NEW-VIEW exists, every slot
//! a correct replica decided, before or after it, is at or below the cut's checkpoint or in
//! the cut.
//!
//! # Abstractions and why they are sound enough
//!
//! * **The network is over-approximated.** A correct replica decides over everything its peers
//!   warranted so far, and its CHECKPOINT reports from any prefix of the Byzantine messages so
//!   far; the prefixes one replica sees need not grow from one step to the next. A correct
//!   VIEW-CHANGE shows any certified checkpoint (or 0) rather than the highest it holds, and is
//!   its sender's state when the NEW-VIEW takes it (sending it earlier and then doing nothing
//!   is the same run). Every real schedule is among these runs, so the rule holding here holds
//!   for every schedule. The counterexamples the tests print were checked by hand to be runs
//!   of the protocol: each decision and report in them follows from a delivery order (in the
//!   one without increasing slots the correct VIEW-CHANGE would show checkpoint 2 instead of 0,
//!   which gives the same cut). What the argument for the
//!   rule needs is kept: the reporter and the decider each see a prefix of the same sequence
//!   (one message per counter), and the decider counts a COMMIT only behind a CHECKPOINT at its
//!   watermark.
//! * **More decisions are never fewer violations.** The property only grows with decisions,
//!   so the replica left out of the NEW-VIEW catching up to the most it can decide loses no
//!   violation; the Byzantine VIEW-CHANGE showing only what its log forces loses none either.
//! * Contents are left out: one PREPARE per slot (the primary's USIG; how contents fix order
//!   ids is the first model's subject), and CHECKPOINTs of one slot all match (f+1 matching ones
//!   include a correct one, which decided every slot up to there on the history chained
//!   COMMITs fix). So slots at or below a stable checkpoint are safe, and the only way to lose
//!   a decided slot is the one modelled: a null above the cut's start.
//! * Correct replicas report only the Byzantine replica's CHECKPOINTs: reports of a correct
//!   replica's CHECKPOINTs only decide where *its* honest log may start, and its VIEW-CHANGE
//!   shows its processed PREPAREs wherever its log starts.
//! * The Byzantine replica COMMITs each slot at most once: COMMITs count alike at every
//!   receiver (by its own counter order), so a second COMMIT for a slot matters only if the
//!   first never counts, and dropping the first only removes something its log might have to
//!   show. It warrants no CHECKPOINT at the last slot: one at the second-to-last slot at the
//!   same counter lets exactly the same COMMITs count, blocks exactly the same reports and
//!   only adds options (a stable checkpoint at the last slot keeps every slot).
//!
//! # Left out
//!
//! More than one group (the log start is a per-group matter: a checkpoint is stable only with
//! f+1 CHECKPOINTs from every group, and the other groups' VIEW-CHANGEs only add PREPAREs to
//! the cut, since every replica processes every PREPARE), K > 1 (for s above a stable
//! checkpoint `low`, `watermark(s) ≥ low − K` whatever K is) and longer
//! histories in the test suite (`examples/anchor_deep_check.rs` runs 4 slots, and 7 Byzantine
//! messages), repeated view changes and VIEW-CHANGEs that carry an earlier NEW-VIEW, garbage
//! collection (a replica that keeps more never shows less), the size of logs (whether a correct
//! replica finds a proven anchor is liveness), recovery and state transfer. The Byzantine
//! replica's messages are bounded: 5 in the test suite (every attack the refutations find needs
//! 3).
//!
//! # Result
//!
//! See the crate doc: the rule with f+1 reports holds, with the span and without it; the old
//! rule
//! ([`LogStart::AnyOwnCheckpoint`]), f reports, reports without the increasing-slots rule, and
//! receivers that do not enforce the watermark on a peer's COMMITs
//! ([`Anchors::receivers_check_watermark`]) lose a decided slot.

use crate::F;
use stateright::{Model, Property};

/// A slot of the history (1-based; 0 is the start of the epoch).
pub type Slot = u8;
/// A warrant counter of the Byzantine replica's USIG (1-based).
pub type Counter = u8;

/// The checkpoint interval, in slots.
pub const K: Slot = 1;

/// The slot of the CHECKPOINT its sender must have warranted before a COMMIT for `slot` (the
/// multiple of K two intervals below `slot`'s, `⌊(s−1)/K⌋·K − K`; 0 needs none), as
/// `group::checkpoint::watermark`.
pub fn watermark(slot: Slot) -> Slot {
    (slot.saturating_sub(1) / K).saturating_sub(1) * K
}

/// A set of slots `1..=8` (bit `s - 1`).
#[derive(Clone, Copy, Default, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Slots(pub u8);

impl std::fmt::Debug for Slots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl Slots {
    /// `from+1..=to`.
    pub fn range(from: Slot, to: Slot) -> Self {
        let mut s = Slots::default();
        for slot in from + 1..=to {
            s.insert(slot);
        }
        s
    }
    pub fn contains(self, s: Slot) -> bool {
        (1..=8).contains(&s) && self.0 & (1 << (s - 1)) != 0
    }
    pub fn insert(&mut self, s: Slot) {
        self.0 |= 1 << (s - 1);
    }
    pub fn union(self, other: Slots) -> Slots {
        Slots(self.0 | other.0)
    }
    pub fn intersection(self, other: Slots) -> Slots {
        Slots(self.0 & other.0)
    }
    pub fn iter(self) -> impl Iterator<Item = Slot> {
        (1..=8).filter(move |&s| self.contains(s))
    }
}

/// A message the Byzantine replica warranted. Its counter is its position in the sequence,
/// plus one.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Msg {
    Commit(Slot),
    /// Its reports are whatever suits it: it counts as reporting any anchor of its own.
    Checkpoint(Slot),
}

/// A correct member of the group.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Correct {
    /// It processed the PREPAREs of slots `1..=processed` (they are in its history).
    pub processed: Slot,
    /// It COMMITted slots `1..=committed` (≤ `processed`: the watermark may hold COMMITs back).
    pub committed: Slot,
    /// Its CHECKPOINTs at K, 2K, ... in order, each with what it reports of the Byzantine
    /// replica: the counter of its first CHECKPOINT an interval below ([`report`]).
    pub checkpoints: Vec<Option<Counter>>,
    /// Its stable checkpoint: a slot that f+1 CHECKPOINTs certify, taken at any time once they
    /// exist ([`Action::Stable`]), never lower than before (0 until then).
    pub stable: Slot,
}

impl Correct {
    /// The slot of its highest CHECKPOINT (0 if none).
    pub fn checkpointed(&self) -> Slot {
        self.checkpoints.len() as Slot * K
    }
}

/// The new view's cut.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Cut {
    /// The stable checkpoint it starts at (the highest its VIEW-CHANGEs show).
    pub low: Slot,
    /// Slots whose PREPARE a VIEW-CHANGE of the NEW-VIEW shows.
    pub held: Slots,
    /// The slot of the Byzantine replica's CHECKPOINT its log starts at, if its VIEW-CHANGE is
    /// in the NEW-VIEW and starts at one.
    pub anchor: Option<Slot>,
}

impl Cut {
    /// The slot is in the new view's history: at or below its checkpoint, or held.
    pub fn keeps(&self, s: Slot) -> bool {
        s <= self.low || self.held.contains(s)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// The two correct members (interchangeable: see [`State::representative`]).
    pub correct: [Correct; 2],
    /// The Byzantine replica's warranted messages, in counter order.
    pub byzantine: Vec<Msg>,
    pub new_view: Option<Cut>,
}

impl State {
    /// The slots correct member `r` decided: slots it processed with f+1 = 2 COMMITs of
    /// distinct members that it counts (its own among them or not), over everything its peers
    /// warranted (see the module doc). `watermark`: it counts a peer's COMMIT only behind the
    /// peer's CHECKPOINT at its watermark ([`counted_commits`]).
    pub fn decided(&self, r: usize, watermark: bool) -> Slots {
        let [a, b] = [&self.correct[r], &self.correct[1 - r]];
        let byzantine = counted_commits(&self.byzantine, watermark);
        let mut out = Slots::default();
        for s in 1..=a.processed {
            let commits = [a.committed >= s, b.committed >= s, byzantine.contains(s)];
            if commits.iter().filter(|&&c| c).count() > F {
                out.insert(s);
            }
        }
        out
    }

    /// Every slot with CHECKPOINTs of f+1 distinct members.
    pub fn certified(&self) -> Vec<Slot> {
        (K..=8)
            .step_by(K as usize)
            .filter(|&y| {
                let correct = self.correct.iter().filter(|r| r.checkpointed() >= y);
                let byzantine = self.byzantine.contains(&Msg::Checkpoint(y));
                correct.count() + usize::from(byzantine) > F
            })
            .collect()
    }

    /// The two correct members are interchangeable: the representative has them sorted.
    pub fn representative(&self) -> State {
        let mut s = self.clone();
        s.correct.sort();
        s
    }
}

/// The COMMITs of the Byzantine replica's messages (a prefix, in counter order) that a correct
/// receiver counts: those after one of its CHECKPOINTs at their watermark or above (all of
/// them without `check`).
pub fn counted_commits(msgs: &[Msg], check: bool) -> Slots {
    let mut highest = 0;
    let mut out = Slots::default();
    for m in msgs {
        match *m {
            Msg::Checkpoint(slot) => highest = highest.max(slot),
            Msg::Commit(s) if !check || highest >= watermark(s) => out.insert(s),
            Msg::Commit(_) => {}
        }
    }
    out
}

/// What a correct replica's CHECKPOINT at `slot` reports of the Byzantine replica, given the
/// prefix of its messages it delivered: the counter of its first CHECKPOINT at `slot − K`,
/// and (`increasing`) only if that is above every CHECKPOINT of it delivered before (as
/// `group::checkpoint::Checkpoints::delivered` records `first`).
pub fn report(delivered: &[Msg], slot: Slot, increasing: bool) -> Option<Counter> {
    let below = slot.checked_sub(K).filter(|&b| b > 0)?;
    let mut highest = 0;
    for (i, m) in delivered.iter().enumerate() {
        if let Msg::Checkpoint(y) = *m {
            if y == below && (!increasing || y > highest) {
                return Some(i as Counter + 1);
            }
            highest = highest.max(y);
        }
    }
    None
}

/// Where a VIEW-CHANGE's log may start, besides counter 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogStart {
    /// The rule before the fix: at any CHECKPOINT of the sender at slot ≤ low − K.
    AnyOwnCheckpoint,
    /// The fix: at a CHECKPOINT of the sender at slot x ≤ low − K that this many CHECKPOINTs at
    /// x + K from distinct members of the group report as its first at x (f+1 in the design).
    Reported(usize),
}

/// A VIEW-CHANGE in the NEW-VIEW: who sent it, the stable checkpoint it shows and, for the
/// Byzantine replica, its log's first counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sender {
    Correct { replica: usize, low: Slot },
    Byzantine { low: Slot, start: Counter },
}

impl Sender {
    /// The stable checkpoint the VIEW-CHANGE shows.
    pub fn low(&self) -> Slot {
        match *self {
            Sender::Correct { low, .. } | Sender::Byzantine { low, .. } => low,
        }
    }
}

/// The model's parameters.
#[derive(Clone, Debug)]
pub struct Anchors {
    /// Slots `1..=slots`.
    pub slots: Slot,
    /// Correct replicas checkpoint slots up to this one.
    pub checkpoints: Slot,
    /// The most messages the Byzantine replica warrants.
    pub byzantine_messages: usize,
    pub log_start: LogStart,
    /// Correct replicas report a CHECKPOINT only if its slot is above every earlier one of its
    /// sender (the design); `false`: the first at the slot, whatever came before.
    pub increasing_slots: bool,
    /// Restricts the Byzantine replica to CHECKPOINT slots that never go down (to show that
    /// repeating a slot suffices for the attack).
    pub byzantine_slots_never_decrease: bool,
    /// Correct replicas count a peer's COMMIT only behind the peer's CHECKPOINT at its
    /// watermark (the design; `Checkpoints::peer_may_commit`).
    pub receivers_check_watermark: bool,
    /// The span (`proto::VIEW_CHANGE_SPAN`, one interval in the design): correct replicas COMMIT
    /// a slot only within it of their stable checkpoint, their VIEW-CHANGEs show PREPAREs no
    /// further than it past the checkpoint they show, and a VIEW-CHANGE that shows more is
    /// refused. `None`: no span (the protocol before 2026-12-07).
    pub span: Option<Slot>,
    /// A correct VIEW-CHANGE shows its own stable checkpoint (the design); `false`: any
    /// certified one or none, as the model without a span lets it (with a span, it then leaves
    /// out PREPAREs it COMMITted within the span of a higher one).
    pub shows_own_stable: bool,
}

impl Anchors {
    /// The rule being implemented (f+1 reports, increasing slots) with 3 slots, checkpoints at
    /// 1 and 2, and `byzantine_messages` messages of the Byzantine replica.
    pub fn reported(byzantine_messages: usize) -> Self {
        Anchors {
            slots: 3,
            checkpoints: 2,
            byzantine_messages,
            log_start: LogStart::Reported(F + 1),
            increasing_slots: true,
            byzantine_slots_never_decrease: false,
            receivers_check_watermark: true,
            span: Some(K),
            shows_own_stable: true,
        }
    }

    /// The rule without the span, as it was checked before the span existed: a correct
    /// VIEW-CHANGE shows any certified checkpoint and every PREPARE it processed above it.
    pub fn without_span(byzantine_messages: usize) -> Self {
        Anchors {
            span: None,
            shows_own_stable: false,
            ..Self::reported(byzantine_messages)
        }
    }

    /// Whether the span lets a replica whose stable checkpoint is `stable` COMMIT `slot`.
    pub fn within_span(&self, stable: Slot, slot: Slot) -> bool {
        self.span.is_none_or(|span| slot <= stable + span)
    }

    /// The PREPAREs a correct VIEW-CHANGE showing the checkpoint `low` shows, of those its
    /// sender processed: up to the span past `low`.
    pub fn shown_by_correct(&self, low: Slot, processed: Slot) -> Slots {
        let top = self
            .span
            .map_or(processed, |span| processed.min(low + span));
        Slots::range(low, top.max(low))
    }

    /// The stable checkpoints correct member `r`'s VIEW-CHANGE may show now.
    fn correct_lows(&self, state: &State, r: usize) -> Vec<Slot> {
        match self.shows_own_stable {
            true => vec![state.correct[r].stable],
            false => std::iter::once(0).chain(state.certified()).collect(),
        }
    }

    /// The rule before the fix: a log may start at any own CHECKPOINT at slot ≤ low − K.
    pub fn any_own_checkpoint(byzantine_messages: usize) -> Self {
        Anchors {
            log_start: LogStart::AnyOwnCheckpoint,
            ..Self::reported(byzantine_messages)
        }
    }

    /// The VIEW-CHANGEs the Byzantine replica may send now: the stable checkpoint it shows, its
    /// log's first counter, and the slots whose PREPAREs it must show (`low+1..=c` for the
    /// highest COMMIT c above `low` in its log: chained COMMITs).
    pub fn byzantine_view_changes(&self, state: &State) -> Vec<(Sender, Slots)> {
        let msgs = &state.byzantine;
        let lows = std::iter::once(0).chain(state.certified());
        let mut out = Vec::new();
        for low in lows {
            let anchors = (1..=msgs.len()).filter(|&start| match msgs[start - 1] {
                Msg::Checkpoint(x) => start > 1 && x + K <= low && self.allowed(state, x, start),
                Msg::Commit(_) => false,
            });
            for start in std::iter::once(1).chain(anchors) {
                let top = msgs[start - 1..]
                    .iter()
                    .filter_map(|m| match *m {
                        Msg::Commit(s) if s > low => Some(s),
                        _ => None,
                    })
                    .max()
                    .unwrap_or(low);
                // The checker refuses a VIEW-CHANGE that shows PREPAREs past the span.
                if !self.within_span(low, top) {
                    continue;
                }
                let start = start as Counter;
                out.push((Sender::Byzantine { low, start }, Slots::range(low, top)));
            }
        }
        out
    }

    /// The slots correct member `r` decided ([`State::decided`]).
    pub fn decided(&self, state: &State, r: usize) -> Slots {
        state.decided(r, self.receivers_check_watermark)
    }

    /// After the NEW-VIEW: a correct replica that sent no VIEW-CHANGE goes on in view 0 and
    /// processes, COMMITs and checkpoints all it can (nobody else warrants anything more).
    /// Each step only adds to what it decided, so the end is the most it can decide.
    pub fn catch_up(&self, state: &mut State, replica: usize) {
        state.correct[replica].processed = self.slots;
        loop {
            let decided = self.decided(state, replica);
            let certified = state.certified().into_iter().max().unwrap_or(0);
            let r = &mut state.correct[replica];
            let checkpoint = r.checkpointed() + K;
            let next = r.committed + 1;
            if certified > r.stable {
                r.stable = certified;
            } else if checkpoint <= self.checkpoints
                && Slots::range(0, checkpoint).intersection(decided) == Slots::range(0, checkpoint)
            {
                r.checkpoints.push(None);
            } else if r.committed < r.processed
                && r.checkpointed() >= watermark(next)
                && self.within_span(r.stable, next)
            {
                r.committed = next;
            } else {
                break;
            }
        }
    }

    /// Whether the rule lets the Byzantine replica's log start at its CHECKPOINT at slot `x`
    /// with counter `start`.
    fn allowed(&self, state: &State, x: Slot, start: usize) -> bool {
        match self.log_start {
            LogStart::AnyOwnCheckpoint => true,
            LogStart::Reported(needed) => {
                let at = (x + K) / K;
                let correct = state.correct.iter().filter(|r| {
                    r.checkpoints.get(at as usize - 1) == Some(&Some(start as Counter))
                });
                let own = state.byzantine.contains(&Msg::Checkpoint(x + K));
                correct.count() + usize::from(own) >= needed
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A correct replica processes the PREPARE of `slot`.
    Prepare { replica: usize, slot: Slot },
    /// A correct replica COMMITs `slot` (processed, and the watermark and the span allow).
    Commit { replica: usize, slot: Slot },
    /// A correct replica takes `slot`, which f+1 CHECKPOINTs certify, as its stable checkpoint.
    Stable { replica: usize, slot: Slot },
    /// A correct replica warrants its CHECKPOINT, reporting the Byzantine replica's CHECKPOINT
    /// with this counter.
    Checkpoint {
        replica: usize,
        slot: Slot,
        report: Option<Counter>,
    },
    /// The Byzantine replica warrants a message.
    Byzantine { counter: Counter, msg: Msg },
    /// The new primary's NEW-VIEW with these two VIEW-CHANGEs.
    NewView { view_changes: [Sender; 2] },
}

impl Model for Anchors {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let r = Correct {
            processed: 0,
            committed: 0,
            checkpoints: Vec::new(),
            stable: 0,
        };
        vec![State {
            correct: [r.clone(), r],
            byzantine: Vec::new(),
            new_view: None,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.new_view.is_some() {
            return;
        }
        for (replica, r) in state.correct.iter().enumerate() {
            let slot = r.processed + 1;
            if slot <= self.slots {
                actions.push(Action::Prepare { replica, slot });
            }
            let slot = r.committed + 1;
            let span = self.within_span(r.stable, slot);
            if slot <= r.processed && r.checkpointed() >= watermark(slot) && span {
                actions.push(Action::Commit { replica, slot });
            }
            // Only the span and the VIEW-CHANGE read it: without them it would only multiply
            // the states.
            if self.span.is_some() || self.shows_own_stable {
                for slot in state.certified().into_iter().filter(|&y| y > r.stable) {
                    actions.push(Action::Stable { replica, slot });
                }
            }
            let slot = r.checkpointed() + K;
            let decided = self.decided(state, replica);
            if slot <= self.checkpoints
                && Slots::range(0, slot).intersection(decided) == Slots::range(0, slot)
            {
                let msgs = &state.byzantine;
                let mut reports: Vec<_> = (0..=msgs.len())
                    .map(|delivered| report(&msgs[..delivered], slot, self.increasing_slots))
                    .collect();
                reports.dedup();
                for report in reports {
                    actions.push(Action::Checkpoint {
                        replica,
                        slot,
                        report,
                    });
                }
            }
        }
        if state.byzantine.len() < self.byzantine_messages {
            let counter = state.byzantine.len() as Counter + 1;
            for slot in 1..=self.slots {
                if !state.byzantine.contains(&Msg::Commit(slot)) {
                    let msg = Msg::Commit(slot);
                    actions.push(Action::Byzantine { counter, msg });
                }
            }
            let highest = state.byzantine.iter().filter_map(|m| match *m {
                Msg::Checkpoint(y) => Some(y),
                Msg::Commit(_) => None,
            });
            let lowest = match self.byzantine_slots_never_decrease {
                true => highest.max().unwrap_or(K),
                false => K,
            };
            for slot in (lowest..=self.checkpoints).step_by(K as usize) {
                let msg = Msg::Checkpoint(slot);
                actions.push(Action::Byzantine { counter, msg });
            }
        }
        let lows = [0, 1].map(|r| self.correct_lows(state, r));
        let correct = |replica: usize| {
            lows[replica]
                .iter()
                .map(move |&low| Sender::Correct { replica, low })
        };
        for a in correct(0) {
            for b in correct(1) {
                actions.push(Action::NewView {
                    view_changes: [a, b],
                });
            }
        }
        let byzantine = self.byzantine_view_changes(state);
        for replica in 0..2 {
            for a in correct(replica) {
                for &(b, _) in &byzantine {
                    actions.push(Action::NewView {
                        view_changes: [a, b],
                    });
                }
            }
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let mut next = state.clone();
        match action {
            Action::Prepare { replica, slot } => next.correct[replica].processed = slot,
            Action::Commit { replica, slot } => next.correct[replica].committed = slot,
            Action::Stable { replica, slot } => next.correct[replica].stable = slot,
            Action::Checkpoint {
                replica, report, ..
            } => next.correct[replica].checkpoints.push(report),
            Action::Byzantine { msg, .. } => next.byzantine.push(msg),
            Action::NewView { view_changes } => {
                let mut cut = Cut {
                    low: 0,
                    held: Slots::default(),
                    anchor: None,
                };
                for vc in view_changes {
                    let (low, shown) = match vc {
                        Sender::Correct { replica, low } => (
                            low,
                            self.shown_by_correct(low, state.correct[replica].processed),
                        ),
                        Sender::Byzantine { low, start } => {
                            let all = self.byzantine_view_changes(state);
                            let (_, shown) = all.into_iter().find(|(b, _)| *b == vc)?;
                            if start > 1 {
                                if let Msg::Checkpoint(x) = state.byzantine[start as usize - 1] {
                                    cut.anchor = Some(x);
                                }
                            }
                            (low, shown)
                        }
                    };
                    cut.low = cut.low.max(low);
                    cut.held = cut.held.union(shown);
                }
                next.new_view = Some(cut);
                for replica in 0..2 {
                    let included = |vc: &Sender| {
                        *vc == Sender::Correct {
                            replica,
                            low: vc.low(),
                        }
                    };
                    if !view_changes.iter().any(included) {
                        self.catch_up(&mut next, replica);
                    }
                }
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(NO_LOSS, no_loss),
            Property::sometimes(
                "a NEW-VIEW keeps a slot decided above its checkpoint",
                |m, s: &State| s.new_view.is_some_and(|cut| decided_above(m, s, cut)),
            ),
            Property::sometimes(
                "a log starts at an anchor below a slot decided above the checkpoint",
                |m, s: &State| {
                    s.new_view
                        .is_some_and(|cut| cut.anchor.is_some() && decided_above(m, s, cut))
                },
            ),
        ]
    }
}

/// The safety property's name.
pub const NO_LOSS: &str = "no decided slot is lost";

/// Once the NEW-VIEW exists, every slot a correct replica decided is at or below the cut's
/// checkpoint or in the cut.
pub fn no_loss(m: &Anchors, s: &State) -> bool {
    let Some(cut) = s.new_view else {
        return true;
    };
    (0..2).all(|r| m.decided(s, r).iter().all(|d| cut.keeps(d)))
}

fn decided_above(m: &Anchors, s: &State, cut: Cut) -> bool {
    (0..2).any(|r| m.decided(s, r).iter().any(|d| d > cut.low))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_is_two_intervals_below() {
        assert_eq!((1..=5).map(watermark).collect::<Vec<_>>(), [0, 0, 1, 2, 3]);
    }

    #[test]
    fn reports_name_the_first_checkpoint_above_every_earlier_one() {
        use Msg::{Checkpoint as Cp, Commit};
        let msgs = [Cp(1), Commit(3), Cp(1), Cp(2), Cp(1)];
        assert_eq!(report(&msgs, 2, true), Some(1));
        assert_eq!(report(&msgs[1..], 2, true), Some(2));
        assert_eq!(report(&msgs[3..], 2, true), None);
        assert_eq!(report(&msgs[3..], 2, false), Some(2));
        assert_eq!(report(&msgs, 1, true), None);
    }

    #[test]
    fn commits_count_after_the_watermark() {
        use Msg::{Checkpoint as Cp, Commit};
        let msgs = [Commit(3), Cp(1), Commit(2), Commit(1)];
        assert_eq!(counted_commits(&msgs, true), Slots::range(0, 2));
        assert_eq!(counted_commits(&msgs, false), Slots::range(0, 3));
        assert_eq!(
            counted_commits(&[Cp(2), Commit(3)], true),
            Slots::range(2, 3)
        );
    }
}
