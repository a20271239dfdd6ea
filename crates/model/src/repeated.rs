//! A fourth, self-contained model: **repeated view changes**, view 0 → view 1 → view 2, with
//! the rules as `group::view` and `group::core` implement them (docs/protocol.md, "As
//! implemented"), for f = 1 and groups of 2f+1 = 3 replicas (two correct, one Byzantine).
//!
//! # What is modelled
//!
//! * **Histories and slots** ([`Slot`]). In view 0 slot c is the old primary's PREPARE with
//!   counter c (`1..=n0`, content fixed in the initial state as in [`crate::prepare`]). The
//!   NEW-VIEW of view v replaces the history with its cut followed by one slot for the NEW-VIEW
//!   itself; in view 1 the new primary's k-th message after its NEW-VIEW takes the slot k after
//!   the NEW-VIEW's. Order ids are derived over a history by [`derive_orders`] (null slots,
//!   NEW-VIEW slots and duplicates get none), so a slot's order id is a function of the history
//!   up to it.
//! * **The view-1 primary** is Byzantine within the USIG's powers: after its NEW-VIEW it
//!   warrants up to `view1_messages` messages, one per counter, each a PREPARE of any request
//!   (a new one or a repeat, up to renaming) for any group, or something else (a null slot
//!   for whoever processes it), or, with [`Repeated::second_new_view`], a second NEW-VIEW of
//!   view 1 over another valid choice of VIEW-CHANGEs. Correct replicas process its messages in
//!   counter order, so all accept its first NEW-VIEW of view 1 and treat the second as a null
//!   slot; only the Byzantine replica can show the second as its base. The view-2 primary
//!   chooses any VIEW-CHANGEs the quorum rule allows (f+1 per group), listed in any order.
//! * **Correct replicas** ([`Replica`]) process PREPAREs in counter order and COMMIT (chained
//!   with the prefix digest) every slot of their group they process; on entering view v they
//!   COMMIT the NEW-VIEW slot. They decide a slot with f+1 matching COMMITs of their group,
//!   their own included, and then send COMMIT-DB: for a PREPARE its execution, for a NEW-VIEW
//!   slot their group's entries of the cut they had not decided at that slot with that
//!   proposal (`enter`'s `decided` check). A replica may move to view 1 or view 2 at any
//!   moment (f+1 members of a group asked: the Byzantine one always joins), sending a
//!   VIEW-CHANGE that shows its base NEW-VIEW (the last it accepted) and the base view's
//!   PREPAREs it processed after it; it accepts a NEW-VIEW of a view at least as high as the
//!   one it asked for, whenever the network delivers it, or keeps deciding in its view until
//!   then (late decisions).
//! * **The Byzantine member** ([`Byzantine`]) COMMITs any slot of its group in view 0 and, on
//!   the true view-1 history, in view 1 (COMMITs on another history never match a correct
//!   one's, so they decide nothing and are left out), until it sends a VIEW-CHANGE that leaves
//!   the view (peers process its messages in its warrant order and then drop its COMMITs of
//!   the view it left, unless [`Repeated::commits_after_view_change`]). Its VIEW-CHANGEs are any
//!   valid ones: for view 1 its forced prefix (its highest view-0 COMMIT chains every PREPARE
//!   before it) plus any PREPAREs; for view 2 the base view 0 (only without view-1 COMMITs: a
//!   COMMIT of a view after the base is refused), the first NEW-VIEW of view 1 with every
//!   view-1 PREPARE up to its highest view-1 COMMIT plus any others, or the second NEW-VIEW of
//!   view 1 (only without view-1 COMMITs, which would not match its history) with any of the
//!   PREPAREs after it.
//! * **The cuts** ([`CutRule`]): the NEW-VIEW of view 1 merges the logs of its f+1 VIEW-CHANGEs
//!   per group (all of base view 0); the NEW-VIEW of view 2 takes the VIEW-CHANGEs of the
//!   highest base view and, among those, of the NEW-VIEW with the lowest counter, and merges
//!   their histories slot by slot (the implemented rule, `group::view::combine`).
//! * **View 2** is the last: its NEW-VIEW slot is decided as soon as one correct replica enters
//!   (the Byzantine member's COMMIT completes the f+1), and its executions count.
//!
//! # Properties
//!
//! * **Agreement at the database**: no two executable COMMIT-DBs with one order id and
//!   different requests. As in the crate's first model, a COMMIT-DB of one correct member plus
//!   its group's Byzantine member make f+1, so every COMMIT-DB a correct replica sent is
//!   executable by some correct database node, and every pair by one node or by two.
//! * **No loss across the view changes**: once the NEW-VIEW of view 1 exists, every execution
//!   a correct replica sent in view 0 has the same order id in its cut; once the NEW-VIEW of
//!   view 2 exists, every execution sent in view 0 or view 1 (the NEW-VIEW slot's included) has
//!   the same order id in the view-2 cut (with checkpoints: in the history its stable
//!   checkpoint certifies followed by its merged slots, so slots the checkpoint covers count).
//! * **No double execution**: no request executable at two order ids.
//!
//! # Abstractions and why they are sound enough
//!
//! * Decisions are eager (taken in the step that completes their COMMITs) and the view-2
//!   NEW-VIEW slot is decided on entry: both only add COMMIT-DBs, and every property is monotone
//!   in those. A correct replica that processed a slot COMMITs it in the same step: one that
//!   processed it but left the view before its USIG warranted the COMMIT shows the same
//!   VIEW-CHANGE and helps fewer decisions.
//! * The VIEW-CHANGEs of correct replicas are their state when they leave the view (they
//!   process nothing more); a VIEW-CHANGE for view 1 stays valid for the NEW-VIEW of view 1
//!   after its sender moved on to view 2.
//! * VIEW-CHANGEs for view 1 are not sent once its first NEW-VIEW exists, so the cuts a second
//!   NEW-VIEW of view 1 may have are those of the VIEW-CHANGEs sent before it (the Byzantine
//!   member's with any log it could warrant).
//! * Without [`Repeated::checkpoints`] every log starts at counter 1; with it, see below.
//!
//! # Checkpoints between the view changes ([`Repeated::checkpoints`], one group)
//!
//! * **Stable checkpoints of view 1** ([`State::stable`]): a correct replica in view 1 that
//!   decided every slot of its history up to slot L that needs an agreement (the NEW-VIEW slot,
//!   and PREPAREs that order something; nulls and duplicates need none) CHECKPOINTs L, and the
//!   Byzantine member's CHECKPOINT makes it stable: f+1, one correct, so it certifies the true
//!   view-1 history up to L. K = 1 from the NEW-VIEW slot on (checkpoints inside the cut or in
//!   view 0 are left out: the anchor model covers one view change).
//! * **VIEW-CHANGEs for view 2** show a stable checkpoint `low` ([`Low`]) and their history
//!   above it only. A correct replica in view 1 shows any stable checkpoint its history passed,
//!   or none (it may not have the votes yet). The Byzantine member shows any stable checkpoint
//!   with any base under the first rule ([`Repeated::checkpoint_on_base`] = false: `group::view`
//!   checked the certificate, not that it lies on the base's history), and only one on its
//!   base's history under the lineage rule, as implemented now; valid if every COMMIT its
//!   log holds passes `group::view`'s checks: none of a view after the base; each of the base's
//!   view above `low` matches the shown history, chained from the checkpoint's running digest.
//!   Its log holds all its COMMITs above `low` ([`crate::anchor`]: a log starting at a proven
//!   anchor shows every COMMIT above the stable checkpoint that a correct replica counted) and
//!   may leave out those at or below `low` (an anchored start at x ≤ low − K after them, which
//!   needs low ≥ 2K: [`Repeated::min_anchored_low`] is 1 by default, a slot standing for an
//!   interval of any K, and 2 for K = 1 literally).
//! * **The view-2 cut** ([`Repeated::cut2`], [`LowRule::Highest`] as implemented): the history
//!   the highest stable checkpoint among all its VIEW-CHANGEs certifies, then the histories of
//!   the highest base view and its lowest NEW-VIEW counter merged slot by slot above it.
//! * **Entering view 2** a replica re-derives its order book from the later of the cut's
//!   checkpoint and a stable checkpoint of its own ([`Repeated::enter_from_own_checkpoint`], as
//!   `group::core`'s `enter`), sends its group's executions of the cut above that, then
//!   processes the view-2 primary's first PREPARE, of a fresh request ([`Slot::Fresh`]), which
//!   it decides with the Byzantine member's COMMIT: replicas that enter with different order
//!   books give it different order ids, a disagreement at the database.
//!
//! **Result.** The first rule (before CHECKPOINTs named their lineage) loses agreement
//! (`tests/checkpoint_between_views.rs`, replayed; a shortest counterexample in
//! `examples/checkpoint_deep_check.rs`): the Byzantine
//! member's VIEW-CHANGE of base view 0 carries the view-1 stable checkpoint at the NEW-VIEW
//! slot (valid: its view-1 COMMIT is at or below it, before its anchor), and shows an old
//! PREPARE for the slot above; the view-2 cut is that checkpoint followed by the old PREPARE.
//! Nothing decided is lost, but a correct replica whose own stable checkpoint covers that slot
//! as a view-1 null keeps its own book: the two correct replicas then give the next request
//! different order ids. The mixed-view `low` alone is safe (exhaustively, with replicas that
//! re-derive from the cut's checkpoint: nothing decided in view 1 is above a checkpoint a
//! base-0 VIEW-CHANGE can show), but it puts another history above a committed stable
//! checkpoint. Requiring a VIEW-CHANGE's stable checkpoint to lie on its base's history
//! ([`Repeated::checkpoint_on_base`]: a CHECKPOINT names the lineage of the history it was
//! taken on, docs/protocol.md "Lineage"; implemented after this result) keeps every property, also with a second NEW-VIEW of view 1; so does entering from
//! the cut's checkpoint. A cut from the lowest stable checkpoint ([`LowRule::Lowest`]) and
//! checkpoints stable with f CHECKPOINTs lose decided slots. In the test suite (1 old PREPARE,
//! 1 view-1 message): the lineage rule, about 0.26 M states (0.34 M with a second NEW-VIEW), and the
//! first rule, 0.28 M, hold (an old PREPARE above a view-1 checkpoint needs two). In
//! `examples/checkpoint_deep_check.rs`: the lineage rule with 2 old PREPAREs (5.2 M), 2 view-1 messages
//! (6.2 M), 2 old PREPAREs and a second NEW-VIEW (7.1 M), entering from the cut's checkpoint
//! (4.7 M), and the shortest counterexample for the first rule (depth 13).

use crate::prepare::{derive_orders, old_primary_prepares, Counter, Counters, Group, Order};
use crate::prepare::{Prepare, Request};
use crate::{CORRECT_PER_GROUP, F};
use stateright::{Model, Property};

/// One slot of a history.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Slot {
    /// A counter nobody's history holds, or a primary message that is not a PREPARE. The
    /// implementation has no null slots (docs/protocol.md, "No null slots"): its replicas refuse
    /// such a primary and its checkers such a gap, runs this model covers too.
    Null,
    /// The old primary's PREPARE with this counter.
    Old(Counter),
    /// The view-1 primary's k-th message after its first NEW-VIEW, a PREPARE.
    New(u8),
    /// The NEW-VIEW of `view`; `after` is 0 for the first NEW-VIEW of view 1 and k for a
    /// second one warranted as the primary's k-th message after it.
    NewView { view: u8, after: u8 },
    /// The view-2 primary's first PREPARE after its NEW-VIEW: a fresh request ([`FRESH`]) for
    /// group 0 (only with [`Repeated::checkpoints`]).
    Fresh,
}

/// The request of [`Slot::Fresh`]: one nobody else orders.
pub const FRESH: Request = 8;

/// What the view-1 primary warranted after its (first) NEW-VIEW.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum View1Message {
    Prepare(Prepare),
    /// Anything that is not a PREPARE of view 1: a null slot.
    Other,
    /// A second NEW-VIEW of view 1, merging these old counters.
    NewView(Counters),
}

/// The base of a VIEW-CHANGE for view 2.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Base {
    /// No NEW-VIEW: the history is view 0's.
    View0,
    /// A NEW-VIEW of view 1, `after` as in [`Slot::NewView`].
    View1 { after: u8 },
}

/// The stable checkpoint a VIEW-CHANGE for view 2 shows: its slot (0: none, the history from
/// the start) and the history it certifies, the true view-1 history up to `at` with the slots
/// in `nulled` made null (a forgery, possible only with [`Repeated::checkpoint_quorum`] = f).
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Low {
    pub at: u8,
    pub nulled: Counters,
}

/// A VIEW-CHANGE for view 2: its base, its stable checkpoint, and the PREPAREs of the base view
/// it shows above the checkpoint (old counters for [`Base::View0`], the view-1 primary's
/// message numbers for [`Base::View1`]).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct ViewChange2 {
    pub base: Base,
    pub low: Low,
    pub shows: Counters,
}

/// Where the view-2 cut starts, from the stable checkpoints its VIEW-CHANGEs show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LowRule {
    /// As implemented (`group::view::combine`): the highest among all its VIEW-CHANGEs.
    Highest,
    /// Wrong (docs/protocol.md, "The new view", as first designed): the lowest.
    Lowest,
    /// The highest among the VIEW-CHANGEs whose histories the cut merges.
    HighestOfMerged,
}

/// Which VIEW-CHANGEs of the view-2 NEW-VIEW the cut merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutRule {
    /// As implemented: the highest base view and, among those, the NEW-VIEW with the lowest
    /// counter.
    Implemented,
    /// Wrong: every VIEW-CHANGE of the highest base view, whatever NEW-VIEW it names.
    HighestViewAnyNewView,
    /// Wrong: every VIEW-CHANGE, whatever its base, merged slot by slot in the NEW-VIEW's order.
    AllBases,
}

/// A correct replica.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Replica {
    /// The view it is in (its base: the last NEW-VIEW it accepted).
    pub view: u8,
    /// The view its latest VIEW-CHANGE asks for (0: none since it entered `view`).
    pub changing_to: u8,
    /// It sent a VIEW-CHANGE for view 1 (it stays valid for that NEW-VIEW).
    pub asked_view1: bool,
    /// Old counters processed (and COMMITted if of its group): `1..=processed0`.
    pub processed0: Counter,
    /// Since entering view 1 (`None`: never entered): the view-1 primary's messages `1..=k`
    /// processed (its COMMIT of the NEW-VIEW slot is sent on entering).
    pub processed1: Option<u8>,
    /// What it decided, by slot of its histories (as `group::core`'s `decided`).
    pub decided: Vec<(u8, Slot)>,
    /// The executions it sent COMMIT-DB for, in views 0, 1 and 2.
    pub sent: [Execs; 3],
    /// The slot of the stable checkpoint its VIEW-CHANGE for view 2 shows (0: none).
    pub low: u8,
    /// Entering view 2: the slot of the stable checkpoint it re-derived its order book from
    /// (the cut's, or its own if that is higher: `group::core`'s `enter`).
    pub start2: u8,
}

/// The Byzantine member of a group.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Byzantine {
    /// Old counters it COMMITted in view 0.
    pub commits0: Counters,
    /// View-1 positions it COMMITted (on the true view-1 history): 1 for the NEW-VIEW slot,
    /// k + 1 for the primary's k-th message after it.
    pub commits1: Counters,
    pub view_change1: Option<Counters>,
    pub view_change2: Option<ViewChange2>,
}

/// A set of executions `(order, request)` (orders and requests `1..=8`).
#[derive(Clone, Copy, Default, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Execs(pub u64);

impl std::fmt::Debug for Execs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl Execs {
    pub fn insert(&mut self, order: Order, request: Request) {
        self.0 |= 1 << ((order - 1) * 8 + (request - 1));
    }
    pub fn union(self, other: Execs) -> Execs {
        Execs(self.0 | other.0)
    }
    pub fn is_subset(self, other: Execs) -> bool {
        self.0 & !other.0 == 0
    }
    pub fn iter(self) -> impl Iterator<Item = (Order, Request)> {
        (0..64)
            .filter(move |i| self.0 & (1 << i) != 0)
            .map(|i| (i / 8 + 1, i % 8 + 1))
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// The old primary's PREPAREs, counter `c` at index `c - 1`.
    pub prepares: Vec<Prepare>,
    /// Correct replicas, group by group: `g * CORRECT_PER_GROUP + k`.
    pub correct: Vec<Replica>,
    pub byzantine: Vec<Byzantine>,
    /// The (first) NEW-VIEW of view 1, as the old counters its cut holds.
    pub new_view1: Option<Counters>,
    /// The cuts a second NEW-VIEW of view 1 could have (bit `c.0` for cut `c`): every choice
    /// of VIEW-CHANGEs the first could have taken, fixed with the first (VIEW-CHANGEs for view
    /// 1 are not sent after it).
    pub second_cuts: u8,
    /// The view-1 primary's messages after its first NEW-VIEW.
    pub view1: Vec<View1Message>,
    /// The NEW-VIEW of view 2, as its cut (without its own slot): the history its stable
    /// checkpoint certifies up to `low2`, then the merged histories.
    pub new_view2: Option<Vec<Slot>>,
    /// The slot of the view-2 cut's stable checkpoint (0: none).
    pub low2: u8,
    /// Slots of the true view-1 history with a stable checkpoint: a correct replica decided
    /// every slot up to there and CHECKPOINTed it (the Byzantine member adds the f+1-th).
    pub stable: Counters,
}

impl State {
    pub fn group_of(&self, r: usize) -> Group {
        crate::group_of(r)
    }

    pub fn members(&self, g: Group) -> std::ops::Range<usize> {
        crate::members(g)
    }

    /// Correct members of a group are interchangeable: sorted in the representative. What can
    /// no longer matter is forgotten there too: VIEW-CHANGEs for a view whose NEW-VIEW exists
    /// (only that they were sent, which stops the Byzantine member's COMMITs), and the
    /// decisions of a replica in view 2 (its last).
    pub fn representative(&self) -> State {
        let mut s = self.clone();
        if s.new_view1.is_some() {
            for r in s.correct.iter_mut() {
                r.asked_view1 = false;
            }
            for b in s.byzantine.iter_mut() {
                b.view_change1 = b.view_change1.map(|_| Counters::default());
            }
        }
        if s.new_view2.is_some() {
            for b in s.byzantine.iter_mut() {
                b.view_change2 = b.view_change2.map(|_| ViewChange2 {
                    base: Base::View0,
                    low: Low::default(),
                    shows: Counters::default(),
                });
            }
            for r in s.correct.iter_mut() {
                r.low = 0;
            }
        }
        for r in s.correct.iter_mut().filter(|r| r.view == 2) {
            r.decided
                .retain(|&(_, slot)| matches!(slot, Slot::NewView { view: 2, .. }));
        }
        for g in 0..s.byzantine.len() {
            let members = s.members(g as Group);
            s.correct[members].sort();
        }
        s
    }

    /// The PREPARE a slot holds, if any.
    pub fn prepare_at(&self, slot: Slot) -> Option<Prepare> {
        match slot {
            Slot::Old(c) => Some(self.prepares[c as usize - 1]),
            Slot::New(k) => match self.view1[k as usize - 1] {
                View1Message::Prepare(p) => Some(p),
                _ => None,
            },
            Slot::Fresh => Some(Prepare {
                request: FRESH,
                group: 0,
            }),
            Slot::Null | Slot::NewView { .. } => None,
        }
    }

    /// The order id of every slot of a history.
    pub fn orders(&self, history: &[Slot]) -> Vec<Option<Order>> {
        derive_orders(
            history
                .iter()
                .map(|&s| self.prepare_at(s).map(|p| p.request)),
        )
    }

    /// The executions a history orders (every group's).
    pub fn executions(&self, history: &[Slot]) -> Execs {
        let mut out = Execs::default();
        for (&slot, order) in history.iter().zip(self.orders(history)) {
            if let (Some(p), Some(order)) = (self.prepare_at(slot), order) {
                out.insert(order, p.request);
            }
        }
        out
    }

    /// The history of a NEW-VIEW of view 1 merging these old counters: its cut and its slot.
    pub fn cut1_history(cut: Counters, after: u8) -> Vec<Slot> {
        let mut h: Vec<Slot> = (1..=cut.max())
            .map(|c| match cut.contains(c) {
                true => Slot::Old(c),
                false => Slot::Null,
            })
            .collect();
        h.push(Slot::NewView { view: 1, after });
        h
    }

    /// The true view-1 history up to the primary's message `upto` (after its first NEW-VIEW).
    pub fn view1_history(&self, upto: u8) -> Vec<Slot> {
        let mut h = State::cut1_history(self.new_view1.unwrap_or_default(), 0);
        h.extend((1..=upto).map(|k| match self.view1[k as usize - 1] {
            View1Message::Prepare(_) => Slot::New(k),
            _ => Slot::Null,
        }));
        h
    }

    /// The whole true view-1 history (the first NEW-VIEW's, every message of its primary).
    pub fn true_history(&self) -> Vec<Slot> {
        self.view1_history(self.view1.len() as u8)
    }

    /// The history a stable checkpoint certifies.
    pub fn checkpoint_history(&self, low: Low) -> Vec<Slot> {
        let mut h = self.true_history();
        h.truncate(low.at as usize);
        for c in low.nulled.iter() {
            h[c as usize - 1] = Slot::Null;
        }
        h
    }

    /// The history a VIEW-CHANGE for view 2 shows: its stable checkpoint's, then its base's
    /// with the PREPAREs it shows.
    pub fn shown_history(&self, vc: ViewChange2) -> Vec<Slot> {
        let mut h = self.checkpoint_history(vc.low);
        h.extend(self.base_history(vc).into_iter().skip(vc.low.at as usize));
        h
    }

    /// The slot a PREPARE of the base (an old counter, or the view-1 primary's message number)
    /// takes in the base's history.
    pub fn slot_of(&self, base: Base, k: u8) -> u8 {
        match base {
            Base::View0 => k,
            Base::View1 { after } => self.base_cut(after).max() + 1 + k - after,
        }
    }

    /// The old counters of the cut of the NEW-VIEW of view 1 warranted `after` the first.
    fn base_cut(&self, after: u8) -> Counters {
        match after {
            0 => self.new_view1.unwrap_or_default(),
            k => match self.view1[k as usize - 1] {
                View1Message::NewView(cut) => cut,
                _ => unreachable!("a base is a NEW-VIEW"),
            },
        }
    }

    /// The history of a VIEW-CHANGE's base from the start, with the PREPAREs it shows.
    pub fn base_history(&self, vc: ViewChange2) -> Vec<Slot> {
        match vc.base {
            Base::View0 => State::cut1_history(vc.shows, 0)[..vc.shows.max() as usize].to_vec(),
            Base::View1 { after } => {
                let mut h = State::cut1_history(self.base_cut(after), after);
                h.extend(
                    (after + 1..=vc.shows.max()).map(|k| match vc.shows.contains(k) {
                        true => Slot::New(k),
                        false => Slot::Null,
                    }),
                );
                h
            }
        }
    }

    /// The VIEW-CHANGE for view 2 a correct replica sent (its state once it left its view).
    pub fn correct_view_change2(&self, r: usize) -> ViewChange2 {
        let replica = &self.correct[r];
        let low = Low {
            at: replica.low,
            nulled: Counters::default(),
        };
        let (base, shown) = match replica.processed1 {
            Some(k) => {
                let mut shows = Counters::default();
                for i in 1..=k {
                    if matches!(self.view1[i as usize - 1], View1Message::Prepare(_)) {
                        shows.insert(i);
                    }
                }
                (Base::View1 { after: 0 }, shows)
            }
            None => (Base::View0, Counters::up_to(replica.processed0)),
        };
        ViewChange2 {
            base,
            low,
            shows: self.above(base, low, shown),
        }
    }

    /// The PREPAREs of `shows` whose slots are above the stable checkpoint.
    pub fn above(&self, base: Base, low: Low, shows: Counters) -> Counters {
        let mut out = Counters::default();
        for k in shows.iter().filter(|&k| self.slot_of(base, k) > low.at) {
            out.insert(k);
        }
        out
    }

    /// Every execution some correct replica sent COMMIT-DB for (all executable: see the module
    /// doc).
    pub fn executable(&self) -> Execs {
        let sent = self.correct.iter().flat_map(|r| r.sent);
        sent.fold(Execs::default(), Execs::union)
    }
}

/// A sender of a VIEW-CHANGE: a correct replica or the Byzantine member of a group.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Sender {
    Correct(usize),
    Byzantine(Group),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A correct replica processes (and COMMITs) the old primary's next counter.
    Prepare0 {
        replica: usize,
    },
    /// A correct replica in view 1 processes the view-1 primary's next message.
    Prepare1 {
        replica: usize,
    },
    /// A correct replica leaves its view and sends a VIEW-CHANGE for view `to`, showing the
    /// stable checkpoint at `low` (0: none).
    ViewChange {
        replica: usize,
        to: u8,
        low: u8,
    },
    /// A correct replica accepts the NEW-VIEW of `view`; entering view 2 it re-derives its
    /// order book from the stable checkpoint at `start` (the cut's, or a higher one of its own).
    Accept {
        replica: usize,
        view: u8,
        start: u8,
    },
    ByzantineCommit0 {
        group: Group,
        counter: Counter,
    },
    /// Position 1 is the NEW-VIEW slot of view 1, k + 1 the primary's k-th message after it.
    ByzantineCommit1 {
        group: Group,
        position: u8,
    },
    ByzantineViewChange1 {
        group: Group,
        log: Counters,
    },
    ByzantineViewChange2 {
        group: Group,
        view_change: ViewChange2,
    },
    NewView1 {
        view_changes: Vec<Sender>,
    },
    View1Message(View1Message),
    NewView2 {
        view_changes: Vec<Sender>,
    },
}

/// The model's parameters.
#[derive(Clone, Debug)]
pub struct Repeated {
    pub groups: usize,
    /// The old primary's counters.
    pub prepares: usize,
    /// The view-1 primary's messages after its NEW-VIEW.
    pub view1_messages: usize,
    /// The view-1 primary may warrant a second NEW-VIEW of view 1.
    pub second_new_view: bool,
    pub cut_rule: CutRule,
    /// Wrong: peers count the Byzantine member's view-1 COMMITs warranted after its
    /// VIEW-CHANGE for view 2.
    pub commits_after_view_change: bool,
    /// Right: a NEW-VIEW slot is decided with f+1 COMMITs before its executions go out. Wrong
    /// (`false`): a replica entering a view sends COMMIT-DB for its cut at once.
    pub commit_new_view_slot: bool,
    /// Stable checkpoints in view 1, VIEW-CHANGEs for view 2 based on them, and one PREPARE of
    /// the view-2 primary (see the module doc).
    pub checkpoints: bool,
    pub low_rule: LowRule,
    /// CHECKPOINTs that make a checkpoint stable: f+1 (right; one is a correct replica's) or f
    /// (wrong: the Byzantine member alone certifies any history).
    pub checkpoint_quorum: usize,
    /// The lineage rule, as implemented since this model found the gap: a VIEW-CHANGE's stable
    /// checkpoint must lie on its base's history (a view-1 checkpoint only with the first
    /// NEW-VIEW of view 1 as its base). `false`: the first rule, any stable checkpoint with any
    /// base.
    pub checkpoint_on_base: bool,
    /// As implemented (`group::core`'s `enter`): a replica whose own stable checkpoint is above
    /// the cut's re-derives its order book from its own. `false`: from the cut's.
    pub enter_from_own_checkpoint: bool,
    /// The Byzantine member's VIEW-CHANGE log may leave out its COMMITs at or below the stable
    /// checkpoint `low` it shows once `low` is at least this (its log starts at an anchored
    /// CHECKPOINT, which needs `low ≥ 2K`: 2 with K = 1; 1 over-approximates, standing for
    /// checkpoint intervals of any K).
    pub min_anchored_low: u8,
}

impl Repeated {
    /// The rules as implemented.
    pub fn implemented(groups: usize, prepares: usize, view1_messages: usize) -> Self {
        Repeated {
            groups,
            prepares,
            view1_messages,
            second_new_view: false,
            cut_rule: CutRule::Implemented,
            commits_after_view_change: false,
            commit_new_view_slot: true,
            checkpoints: false,
            low_rule: LowRule::Highest,
            checkpoint_quorum: F + 1,
            checkpoint_on_base: true,
            enter_from_own_checkpoint: true,
            min_anchored_low: 1,
        }
    }

    /// The rules as implemented (the lineage rule included), with stable checkpoints in view 1
    /// (one group).
    pub fn with_checkpoints(prepares: usize, view1_messages: usize) -> Self {
        Repeated {
            checkpoints: true,
            ..Repeated::implemented(1, prepares, view1_messages)
        }
    }

    /// [`Repeated::with_checkpoints`] with the first rule, before the lineage rule
    /// ([`Repeated::checkpoint_on_base`] false).
    pub fn with_checkpoints_before_lineage(prepares: usize, view1_messages: usize) -> Self {
        Repeated {
            checkpoint_on_base: false,
            ..Repeated::with_checkpoints(prepares, view1_messages)
        }
    }

    /// The VIEW-CHANGEs for `view` sent so far, with their groups.
    fn sent(&self, s: &State, view: u8) -> Vec<(Sender, Group)> {
        let correct = (0..s.correct.len())
            .filter(|&r| match view {
                1 => s.correct[r].asked_view1,
                _ => s.correct[r].changing_to == 2,
            })
            .map(|r| (Sender::Correct(r), s.group_of(r)));
        let byzantine = (0..s.byzantine.len())
            .filter(|&g| match view {
                1 => s.byzantine[g].view_change1.is_some(),
                _ => s.byzantine[g].view_change2.is_some(),
            })
            .map(|g| (Sender::Byzantine(g as Group), g as Group));
        correct.chain(byzantine).collect()
    }

    /// Every choice of f+1 VIEW-CHANGEs per group.
    fn quorums(&self, sent: &[(Sender, Group)]) -> Vec<Vec<Sender>> {
        (0u32..1 << sent.len())
            .filter(|mask| {
                (0..self.groups).all(|g| {
                    let in_group = (0..sent.len())
                        .filter(|&i| mask & (1 << i) != 0 && sent[i].1 as usize == g);
                    in_group.count() == F + 1
                })
            })
            .map(|mask| {
                (0..sent.len())
                    .filter(|&i| mask & (1 << i) != 0)
                    .map(|i| sent[i].0)
                    .collect()
            })
            .collect()
    }

    /// The cut of a NEW-VIEW of view 1: the old counters its VIEW-CHANGEs hold.
    fn cut1(&self, s: &State, view_changes: &[Sender]) -> Counters {
        let log = |&v: &Sender| match v {
            Sender::Correct(r) => Counters::up_to(s.correct[r].processed0),
            Sender::Byzantine(g) => s.byzantine[g as usize].view_change1.unwrap_or_default(),
        };
        view_changes
            .iter()
            .map(log)
            .fold(Counters::default(), Counters::union)
    }

    /// The cut of the NEW-VIEW of view 2 (without its own slot) and the slot of its stable
    /// checkpoint, by the cut rule and the low rule, merging in the order the NEW-VIEW lists
    /// the VIEW-CHANGEs.
    pub fn cut2(&self, s: &State, view_changes: &[Sender]) -> (Vec<Slot>, u8) {
        let shown: Vec<ViewChange2> = view_changes
            .iter()
            .map(|&v| match v {
                Sender::Correct(r) => s.correct_view_change2(r),
                Sender::Byzantine(g) => s.byzantine[g as usize].view_change2.unwrap(),
            })
            .collect();
        let top = shown.iter().map(|v| v.base).max().unwrap_or(Base::View0);
        let lowest = shown
            .iter()
            .map(|v| v.base)
            .filter(|b| b != &Base::View0)
            .min()
            .unwrap_or(Base::View0);
        let take = |b: Base| match self.cut_rule {
            CutRule::Implemented => b == lowest,
            CutRule::HighestViewAnyNewView => (b == Base::View0) == (top == Base::View0),
            CutRule::AllBases => true,
        };
        // `max_by_key` keeps the last maximum, as `combine` does.
        let low = match self.low_rule {
            LowRule::Highest => shown.iter().map(|v| v.low).max_by_key(|l| l.at),
            LowRule::Lowest => shown.iter().map(|v| v.low).min_by_key(|l| l.at),
            LowRule::HighestOfMerged => shown
                .iter()
                .filter(|v| take(v.base))
                .map(|v| v.low)
                .max_by_key(|l| l.at),
        };
        let low = low.unwrap_or_default();
        let mut merged: Vec<Slot> = s.checkpoint_history(low);
        for v in shown.into_iter().filter(|v| take(v.base)) {
            let from = v.low.at.max(low.at) as usize;
            for (i, slot) in s.shown_history(v).into_iter().enumerate().skip(from) {
                if merged.len() <= i {
                    merged.resize(i + 1, Slot::Null);
                }
                if merged[i] == Slot::Null {
                    merged[i] = slot;
                }
            }
        }
        (merged, low.at)
    }

    /// The correct replica's history in its view (view 0, 1 or 2).
    fn history(&self, s: &State, r: usize) -> Vec<Slot> {
        let replica = &s.correct[r];
        match replica.view {
            0 => (1..=replica.processed0).map(Slot::Old).collect(),
            1 => s.view1_history(replica.processed1.unwrap_or(0)),
            _ => {
                let cut = s.new_view2.clone().unwrap_or_default();
                let start = replica.start2 as usize;
                let mut h = match start > s.low2 as usize {
                    // Its own stable checkpoint (on the true view-1 history), then the cut's
                    // slots above it.
                    true => {
                        let mut h = s.true_history();
                        h.truncate(start);
                        h.extend(cut.into_iter().skip(start));
                        h
                    }
                    false => cut,
                };
                h.push(Slot::NewView { view: 2, after: 0 });
                if self.checkpoints {
                    // The view-2 primary's first PREPARE, processed on entering (eagerly, as
                    // every decision).
                    h.push(Slot::Fresh);
                }
                h
            }
        }
    }

    /// COMMITs of group `g` for position `p` of the view (1-based slot in view 0; in view 1,
    /// 1 for the NEW-VIEW slot and k + 1 for the primary's k-th message).
    fn commits(&self, s: &State, g: Group, view: u8, p: u8) -> usize {
        let correct = s.members(g).filter(|&r| {
            let replica = &s.correct[r];
            match view {
                0 => replica.processed0 >= p,
                _ => replica.processed1.is_some_and(|k| k + 1 >= p),
            }
        });
        let byzantine = &s.byzantine[g as usize];
        let z = match view {
            0 => byzantine.commits0.contains(p),
            _ => byzantine.commits1.contains(p),
        };
        correct.count() + usize::from(z)
    }

    /// Decides, for every correct replica that has not left its view, every slot it processed
    /// with f+1 COMMITs of its group, and sends its COMMIT-DBs.
    fn decide(&self, s: &mut State) {
        for r in 0..s.correct.len() {
            let replica = &s.correct[r];
            if replica.changing_to != 0 {
                continue;
            }
            let (g, view) = (s.group_of(r), replica.view);
            let history = self.history(s, r);
            let orders = s.orders(&history);
            // The NEW-VIEW slot of views 1 and 2: its executions are the cut's entries of the
            // group that this replica had not decided there with that proposal.
            let nv_slot = match view {
                0 => None,
                1 => Some(s.new_view1.unwrap_or_default().max() as usize + 1),
                _ => Some(history.len() - usize::from(self.checkpoints)),
            };
            // Slots up to the stable checkpoint it entered view 2 from were executed before.
            let executed = match view {
                2 => replica.start2.max(s.low2) as usize,
                _ => 0,
            };
            let mut decided = replica.decided.clone();
            let mut sent = replica.sent[view as usize];
            if let Some(end) = nv_slot {
                let agreed = match view {
                    1 => !self.commit_new_view_slot || self.commits(s, g, 1, 1) > F,
                    _ => true,
                };
                let at = end as u8;
                if agreed && !decided.contains(&(at, history[end - 1])) {
                    for i in executed..end - 1 {
                        let (slot, at) = (history[i], i as u8 + 1);
                        match (s.prepare_at(slot), orders[i]) {
                            (Some(p), Some(order))
                                if p.group == g && !decided.contains(&(at, slot)) =>
                            {
                                sent.insert(order, p.request)
                            }
                            _ => {}
                        }
                    }
                    record(&mut decided, at, history[end - 1]);
                }
            }
            let first = nv_slot.unwrap_or(0);
            for i in first..history.len() {
                let (slot, at) = (history[i], i as u8 + 1);
                let Some(p) = s.prepare_at(slot) else {
                    continue;
                };
                let position = match view {
                    0 => at,
                    _ => (i - first) as u8 + 2,
                };
                // View 2 is the last: the Byzantine member's COMMIT decides its PREPARE.
                if p.group != g
                    || decided.contains(&(at, slot))
                    || (view < 2 && self.commits(s, g, view, position) <= F)
                {
                    continue;
                }
                record(&mut decided, at, slot);
                if let Some(order) = orders[i] {
                    sent.insert(order, p.request);
                }
            }
            decided.sort();
            if self.checkpoints && view == 1 {
                let stable = through(&history, &orders, &decided, nv_slot.unwrap_or(0));
                s.stable = s.stable.union(stable);
            }
            let replica = &mut s.correct[r];
            replica.decided = decided;
            replica.sent[view as usize] = sent;
        }
    }

    /// The valid VIEW-CHANGEs for view 2 the Byzantine member of `g` can send: any stable
    /// checkpoint, any base it can show (view 0, or a NEW-VIEW of view 1), any of the base's
    /// PREPAREs above the checkpoint, as long as every COMMIT its log holds is valid
    /// ([`Repeated::valid_view_change2`]).
    fn byzantine_view_changes2(&self, s: &State, g: usize) -> Vec<ViewChange2> {
        let mut lows = vec![Low::default()];
        if self.checkpoints {
            let true_len = s.true_history().len() as u8;
            lows.extend(s.stable.iter().map(|at| Low {
                at,
                nulled: Counters::default(),
            }));
            if self.checkpoint_quorum <= F && s.new_view1.is_some() {
                // Its CHECKPOINT alone certifies any history at any slot: here the true one
                // with any PREPAREs made null.
                let h = s.true_history();
                for at in 1..=true_len {
                    let mut prepares = Counters::default();
                    for (i, slot) in h.iter().enumerate().take(at as usize) {
                        if s.prepare_at(*slot).is_some() {
                            prepares.insert(i as u8 + 1);
                        }
                    }
                    for nulled in subsets(prepares) {
                        lows.push(Low { at, nulled });
                    }
                }
            }
        }
        let mut bases = vec![(Base::View0, Counters::up_to(self.prepares as Counter))];
        if s.new_view1.is_some() {
            let mut prepares = Counters::default();
            for (i, m) in s.view1.iter().enumerate() {
                if matches!(m, View1Message::Prepare(_)) {
                    prepares.insert(i as u8 + 1);
                }
            }
            bases.push((Base::View1 { after: 0 }, prepares));
            let second = s
                .view1
                .iter()
                .position(|m| matches!(m, View1Message::NewView(_)));
            if let Some(j) = second {
                let after = j as u8 + 1;
                let later = Counters(prepares.0 & !Counters::up_to(after).0);
                bases.push((Base::View1 { after }, later));
            }
        }
        let mut out = Vec::new();
        for &low in &lows {
            for &(base, prepares) in &bases {
                for shows in subsets(s.above(base, low, prepares)) {
                    let vc = ViewChange2 { base, low, shows };
                    if self.valid_view_change2(s, g, vc) {
                        out.push(vc);
                    }
                }
            }
        }
        out.sort_by_key(|v| (v.base, v.low, v.shows));
        out.dedup();
        out
    }

    /// Whether the Byzantine member of `g` can send this VIEW-CHANGE for view 2 (`group::view`'s
    /// checks): every COMMIT its log holds is of the base's view or an earlier one, and one of
    /// the base's view above the stable checkpoint matches the history shown up to its slot
    /// (chained prefix). Its log holds all its COMMITs, except those at or below the checkpoint
    /// once [`Repeated::min_anchored_low`] allows an anchored start (every COMMIT above the
    /// checkpoint that a correct replica counted comes after the anchor: [`crate::anchor`]).
    fn valid_view_change2(&self, s: &State, g: usize, vc: ViewChange2) -> bool {
        let b = &s.byzantine[g];
        let low = vc.low.at;
        if self.checkpoint_on_base && low > 0 && vc.base != (Base::View1 { after: 0 }) {
            return false;
        }
        let h = s.shown_history(vc);
        let anchored = low > 0 && low >= self.min_anchored_low;
        let in_log = |slot: u8| !(anchored && slot <= low);
        let matches = |slot: u8, history: &[Slot]| {
            let n = slot as usize;
            h.len() >= n && history.len() >= n && h[..n] == history[..n]
        };
        let view0: Vec<Slot> = (1..=self.prepares as Counter).map(Slot::Old).collect();
        for c in b.commits0.iter().filter(|&c| in_log(c)) {
            if vc.base == Base::View0 && c > low && !matches(c, &view0) {
                return false;
            }
        }
        let m1 = s.new_view1.unwrap_or_default().max();
        let view1 = s.true_history();
        for p in b.commits1.iter() {
            let slot = m1 + p;
            if !in_log(slot) {
                continue;
            }
            let valid = match vc.base {
                Base::View0 => false,
                Base::View1 { .. } => slot <= low || matches(slot, &view1),
            };
            if !valid {
                return false;
            }
        }
        true
    }
}

/// Every subset of a set of counters.
fn subsets(within: Counters) -> impl Iterator<Item = Counters> {
    (0..=within.0)
        .filter(move |m| m & !within.0 == 0)
        .map(Counters)
}

impl Model for Repeated {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let replica = Replica {
            view: 0,
            changing_to: 0,
            asked_view1: false,
            processed0: 0,
            processed1: None,
            decided: Vec::new(),
            sent: Default::default(),
            low: 0,
            start2: 0,
        };
        let byzantine = Byzantine {
            commits0: Counters::default(),
            commits1: Counters::default(),
            view_change1: None,
            view_change2: None,
        };
        old_primary_prepares(self.groups, self.prepares)
            .into_iter()
            .map(|prepares| State {
                prepares,
                correct: vec![replica.clone(); self.groups * CORRECT_PER_GROUP],
                byzantine: vec![byzantine; self.groups],
                new_view1: None,
                second_cuts: 0,
                view1: Vec::new(),
                new_view2: None,
                low2: 0,
                stable: Counters::default(),
            })
            .collect()
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let n0 = self.prepares as Counter;
        for (replica, r) in s.correct.iter().enumerate() {
            if r.changing_to != 0 {
                // Waiting for a NEW-VIEW: it may still move on to view 2.
            } else if r.view == 0 && r.processed0 < n0 {
                actions.push(Action::Prepare0 { replica });
            } else if r.view == 1 && r.processed1.unwrap_or(0) < s.view1.len() as u8 {
                actions.push(Action::Prepare1 { replica });
            }
            if r.view == 0 && r.changing_to == 0 && s.new_view1.is_none() {
                actions.push(Action::ViewChange {
                    replica,
                    to: 1,
                    low: 0,
                });
            }
            // The stable checkpoints on its history (its CHECKPOINT or its peer's, and the
            // Byzantine member's): it shows one, or none yet.
            let passed = match r.processed1 {
                Some(k) if r.view == 1 => s.new_view1.unwrap_or_default().max() + 1 + k,
                _ => 0,
            };
            let known: Vec<u8> = s.stable.iter().filter(|&at| at <= passed).collect();
            if r.view < 2 && r.changing_to < 2 && s.new_view2.is_none() {
                for low in std::iter::once(0).chain(known.iter().copied()) {
                    actions.push(Action::ViewChange {
                        replica,
                        to: 2,
                        low,
                    });
                }
            }
            if r.view == 0 && r.changing_to <= 1 && s.new_view1.is_some() {
                actions.push(Action::Accept {
                    replica,
                    view: 1,
                    start: 0,
                });
            }
            if r.view < 2 && s.new_view2.is_some() {
                let own = known
                    .iter()
                    .copied()
                    .filter(|&at| self.enter_from_own_checkpoint && at > s.low2);
                for start in std::iter::once(s.low2).chain(own) {
                    actions.push(Action::Accept {
                        replica,
                        view: 2,
                        start,
                    });
                }
            }
        }
        for (g, b) in s.byzantine.iter().enumerate() {
            let group = g as Group;
            let left0 = b.view_change1.is_some() || b.view_change2.is_some();
            if !left0 {
                for counter in 1..=n0 {
                    if s.prepares[counter as usize - 1].group == group
                        && !b.commits0.contains(counter)
                    {
                        actions.push(Action::ByzantineCommit0 { group, counter });
                    }
                }
            }
            let left1 = b.view_change2.is_some() && !self.commits_after_view_change;
            if s.new_view1.is_some() && !left1 {
                let ours = |k: usize| match s.view1[k - 1] {
                    View1Message::Prepare(p) => p.group == group,
                    _ => false,
                };
                for k in 0..=s.view1.len() {
                    let position = k as u8 + 1;
                    if (k == 0 || ours(k)) && !b.commits1.contains(position) {
                        actions.push(Action::ByzantineCommit1 { group, position });
                    }
                }
            }
            if b.view_change1.is_none() && s.new_view1.is_none() {
                let forced = Counters::up_to(b.commits0.max());
                let mut logs: Vec<Counters> = (0..1u8 << n0)
                    .map(|extra| forced.union(Counters(extra)))
                    .collect();
                logs.sort();
                logs.dedup();
                for log in logs {
                    actions.push(Action::ByzantineViewChange1 { group, log });
                }
            }
            if b.view_change2.is_none() && s.new_view2.is_none() {
                for view_change in self.byzantine_view_changes2(s, g) {
                    actions.push(Action::ByzantineViewChange2 { group, view_change });
                }
            }
        }
        if s.new_view1.is_none() {
            for view_changes in self.quorums(&self.sent(s, 1)) {
                actions.push(Action::NewView1 { view_changes });
            }
        } else if s.view1.len() < self.view1_messages {
            let fresh = s
                .prepares
                .iter()
                .chain(s.view1.iter().filter_map(|m| match m {
                    View1Message::Prepare(p) => Some(p),
                    _ => None,
                }));
            let fresh = fresh.map(|p| p.request).max().unwrap_or(0) + 1;
            for request in 1..=fresh {
                for group in 0..self.groups as Group {
                    let p = Prepare { request, group };
                    actions.push(Action::View1Message(View1Message::Prepare(p)));
                }
            }
            actions.push(Action::View1Message(View1Message::Other));
            let second = s
                .view1
                .iter()
                .any(|m| matches!(m, View1Message::NewView(_)));
            if !second {
                for cut in (0..8).filter(|c| s.second_cuts & (1 << c) != 0) {
                    let m = View1Message::NewView(Counters(cut));
                    actions.push(Action::View1Message(m));
                }
            }
        }
        if s.new_view2.is_none() {
            for q in self.quorums(&self.sent(s, 2)) {
                actions.push(Action::NewView2 {
                    view_changes: q.clone(),
                });
                if q.len() == 2 && self.cut_rule != CutRule::Implemented {
                    actions.push(Action::NewView2 {
                        view_changes: vec![q[1], q[0]],
                    });
                }
            }
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut next = s.clone();
        match action {
            Action::Prepare0 { replica } => next.correct[replica].processed0 += 1,
            Action::Prepare1 { replica } => {
                let r = &mut next.correct[replica];
                r.processed1 = Some(r.processed1.unwrap_or(0) + 1);
            }
            Action::ViewChange { replica, to, low } => {
                let r = &mut next.correct[replica];
                r.changing_to = to;
                r.asked_view1 |= to == 1;
                r.low = low;
            }
            Action::Accept {
                replica,
                view,
                start,
            } => {
                let end = match view {
                    1 => s.new_view1.unwrap_or_default().max() + 1,
                    _ => s.new_view2.as_ref().map_or(0, Vec::len) as u8 + 1,
                };
                let r = &mut next.correct[replica];
                r.view = view;
                r.changing_to = 0;
                if view == 1 {
                    r.processed1 = Some(0);
                }
                r.start2 = start;
                r.decided.retain(|&(at, _)| at < end);
            }
            Action::ByzantineCommit0 { group, counter } => {
                next.byzantine[group as usize].commits0.insert(counter)
            }
            Action::ByzantineCommit1 { group, position } => {
                next.byzantine[group as usize].commits1.insert(position)
            }
            Action::ByzantineViewChange1 { group, log } => {
                next.byzantine[group as usize].view_change1 = Some(log)
            }
            Action::ByzantineViewChange2 { group, view_change } => {
                next.byzantine[group as usize].view_change2 = Some(view_change)
            }
            Action::NewView1 { view_changes } => {
                next.new_view1 = Some(self.cut1(s, &view_changes));
                if self.second_new_view {
                    // The Byzantine member may warrant another VIEW-CHANGE for view 1 (its log
                    // shows the first): any log with its forced prefix.
                    let mut other = s.clone();
                    for extra in 0..1u8 << self.prepares {
                        for b in other.byzantine.iter_mut() {
                            let forced = Counters::up_to(b.commits0.max());
                            b.view_change1 = b.view_change1.map(|_| forced.union(Counters(extra)));
                        }
                        for q in self.quorums(&self.sent(&other, 1)) {
                            next.second_cuts |= 1 << self.cut1(&other, &q).0;
                        }
                    }
                }
            }
            Action::View1Message(m) => next.view1.push(m),
            Action::NewView2 { view_changes } => {
                let (cut, low) = self.cut2(s, &view_changes);
                next.new_view2 = Some(cut);
                next.low2 = low;
            }
        }
        self.decide(&mut next);
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(AGREEMENT, |_, s: &State| agreement(s)),
            Property::always(NO_LOSS, |_, s: &State| no_loss(s)),
            Property::always(NO_DOUBLE, |_, s: &State| {
                let execs: Vec<_> = s.executable().iter().collect();
                execs
                    .iter()
                    .all(|e| execs.iter().all(|o| o.1 != e.1 || o == e))
            }),
            Property::sometimes("view 2 is entered", |_, s: &State| {
                s.correct.iter().any(|r| r.view == 2)
            }),
            Property::sometimes("a view-1 PREPARE is decided", |_, s: &State| {
                let decided = s.correct.iter().flat_map(|r| r.decided.iter());
                decided
                    .clone()
                    .any(|(_, slot)| matches!(slot, Slot::New(_)))
            }),
            Property::sometimes(
                "view 1 executes a request, view 2 keeps it, a view-2 cut adds one",
                |_, s: &State| {
                    let (view1, view2) = s
                        .correct
                        .iter()
                        .fold((Execs::default(), Execs::default()), |(a, b), r| {
                            (a.union(r.sent[1]), b.union(r.sent[2]))
                        });
                    s.new_view2.is_some() && view1.0 != 0 && !view2.is_subset(view1)
                },
            ),
        ];
        if self.checkpoints {
            properties.push(Property::sometimes(
                "view 2 starts at a view-1 stable checkpoint, and executes",
                |_, s: &State| {
                    let nv1 = s.new_view1.unwrap_or_default().max();
                    let executed = s.correct.iter().any(|r| r.sent[2].0 != 0);
                    s.low2 > nv1 && executed
                },
            ));
            if self.enter_from_own_checkpoint {
                properties.push(Property::sometimes(
                    "a replica enters view 2 from its own checkpoint above the cut's",
                    |_, s: &State| s.correct.iter().any(|r| r.view == 2 && r.start2 > s.low2),
                ));
            }
        }
        properties
    }
}

/// The slots of a view-1 history, from its NEW-VIEW slot `nv` on, up to which a replica
/// decided every slot that needs an agreement (the NEW-VIEW slot, and its group's PREPAREs
/// that order something: nulls and duplicates need none), so it CHECKPOINTs them.
fn through(
    history: &[Slot],
    orders: &[Option<Order>],
    decided: &[(u8, Slot)],
    nv: usize,
) -> Counters {
    let mut out = Counters::default();
    for end in nv..=history.len() {
        let i = end - 1;
        let needs = i + 1 == nv || orders[i].is_some();
        if needs && !decided.contains(&(end as u8, history[i])) {
            break;
        }
        out.insert(end as u8);
    }
    out
}

/// Records a decision at `at`, replacing an earlier one there (a map by slot, as
/// `group::core`'s `decided`).
fn record(decided: &mut Vec<(u8, Slot)>, at: u8, slot: Slot) {
    decided.retain(|&(a, _)| a != at);
    decided.push((at, slot));
}

pub const AGREEMENT: &str = "agreement at the database";
pub const NO_LOSS: &str = "no loss across the view changes";
pub const NO_DOUBLE: &str = "no double execution";

/// No two executable COMMIT-DBs with one order id and different requests.
pub fn agreement(s: &State) -> bool {
    let execs: Vec<_> = s.executable().iter().collect();
    execs.windows(2).all(|w| w[0].0 != w[1].0)
}

/// Every execution sent in view 0 keeps its order id in the cut of view 1; every execution sent
/// in view 0 or 1 keeps it in the cut of view 2.
pub fn no_loss(s: &State) -> bool {
    let (view0, view1) = s
        .correct
        .iter()
        .fold((Execs::default(), Execs::default()), |(a, b), r| {
            (a.union(r.sent[0]), b.union(r.sent[1]))
        });
    let kept1 = s.new_view1.is_none_or(|cut| {
        let h = State::cut1_history(cut, 0);
        view0.is_subset(s.executions(&h))
    });
    let kept2 = s
        .new_view2
        .as_ref()
        .is_none_or(|cut| view0.union(view1).is_subset(s.executions(cut)));
    kept1 && kept2
}
