//! A fifth, self-contained model: the **cut-over of online reconfiguration** (docs/protocol.md,
//! "Reconfiguration"): one configuration epoch e ending at an ordered RECONFIGURE and epoch e+1
//! continuing from the certified end, with a Byzantine primary, a Byzantine member in each of
//! two groups of 2f+1 = 3 (f = 1), a view change in the middle, and database nodes that switch
//! epochs at the certified cut.
//!
//! # What is modelled
//!
//! * **Requests and partitions.** Two partitions; a request is a small integer with a
//!   partition ([`State::partitions`]). Epoch e assigns partition p to group p; epoch e+1 to
//!   [`Cutover::next_assignment`] (by default the two groups swap partitions, so every request
//!   changes group at the cut: the hardest case for "one assignment per order"; `[1, 1]`
//!   removes group 0). A request routed to a group that does not serve its partition gets no
//!   order at any correct replica (`OrderBook::order`), the same as a slot without work, so
//!   routing is no choice of the model.
//! * **The old primary** (view 0) is Byzantine within its USIG: one PREPARE per counter
//!   `1..=prepares`, whose contents ([`Content`]: a request, the operator's RECONFIGURE, a
//!   RECONFIGURE that does not verify, a JOIN) are fixed in the initial state, every sequence
//!   up to renaming requests (and partitions, where [`Cutover::symmetric`]); it delivers
//!   each counter to any correct replica at any time or never (stopping, or giving groups
//!   different prefixes). So it may order requests and JOINs after the RECONFIGURE, several
//!   RECONFIGUREs, a forged one, or none.
//! * **Correct replicas** process PREPAREs in counter order and derive the order book
//!   ([`Cutover::derive`], as `group::order::OrderBook`): consecutive orders for new requests,
//!   none for duplicates; the first valid RECONFIGURE closes the book and nothing is ordered
//!   after it, and a replica processes no PREPARE after it ([`AfterClose::Refuse`],
//!   `delivered_prepare`). A slot needs an agreement of the group its request is routed to,
//!   and the closing slot one of every group ([`ReconfigureAgreement::EveryGroup`]). A replica
//!   COMMITs (chained with the prefix) each slot of its group it processes and decides it with
//!   f+1 COMMITs of its group, its own included. Once its book is closed and it decided every
//!   slot of its group up to the end of its history, it signs **EPOCH-CLOSE** for that end
//!   ([`Point`], `sign_epoch_close`), and again for the end of its history in view 1.
//! * **The Byzantine member** of each group COMMITs any slot of its group in view 0 until its
//!   VIEW-CHANGE; its VIEW-CHANGE shows its forced prefix (its highest COMMIT chains every
//!   PREPARE before it) plus any PREPAREs, also those after the RECONFIGURE that correct
//!   replicas refused; it signs EPOCH-CLOSE for anything and sends COMMIT-DBs for any order
//!   and request in either epoch.
//! * **One view change** (view 0 → 1), as the crate's first model with chained COMMITs: any
//!   correct replica may leave view 0 at any moment; the new primary's NEW-VIEW takes f+1
//!   VIEW-CHANGEs of every group (any valid choice: a Byzantine new primary chooses, a correct
//!   one takes what arrives first), and its cut `S` merges their logs counter by counter
//!   (`group::view::combine`; nulls where no log holds a counter). A replica entering view 1
//!   re-derives its book over `S` (`enter`), decides the NEW-VIEW slot (every group agrees on
//!   it) and with it its group's executions of `S`. If `S` closes the book, correct replicas
//!   order nothing more in epoch e; otherwise the (possibly Byzantine) new primary orders up
//!   to `view1_prepares` PREPAREs (requests old or new, the RECONFIGURE the operator sends
//!   again), which replicas in view 1 process and decide. Correct replicas still in view 0
//!   go on processing, deciding and signing there until they accept the NEW-VIEW.
//! * **Certificates** ([`Certificate`]): f+1 matching EPOCH-CLOSEs of every group
//!   (`proto::reconfig::certified`). The operator starts epoch e+1 from any certified point
//!   ([`Action::StartNext`]): e+1's orders continue after the certified book's last order (the
//!   cut) and its client table makes every request the book holds a duplicate; e+1 orders up
//!   to `next_orders` requests the book does not hold, decided by the group e+1 assigns (e+1 is
//!   one instance of the protocol, which the other models check).
//! * **Database nodes** ([`Voter`], `dbvote::voter`): a node counts a COMMIT-DB of epoch e for
//!   any order while it knows only e; at the CONFIGURE of e+1 (with the cut e+1 started from)
//!   it drops the votes for orders after the cut, and then counts a COMMIT-DB of epoch e only
//!   for an order at or below the cut and one of e+1 only above it, in both only from members
//!   of the group that epoch assigns the request's partition to; it executes an order once f+1
//!   distinct members sent the same execution.
//!
//! # Properties
//!
//! * [`ONE_CUT`]: every certificate that can form names the same order book (so every node
//!   starts e+1 from the same cut and client table).
//! * [`NO_LOSS`]: every execution a correct replica decided in epoch e, in either view (so
//!   everything a correct database node executed under e and everything acknowledged to a
//!   client), is in every certified book at its order: at or below the cut, and a duplicate in
//!   e+1.
//! * [`ONE_ASSIGNMENT`]: every f+1 COMMIT-DBs with which a correct database node can execute
//!   an order are of the epoch the cut assigns that order to and from the group that epoch
//!   assigns the request to (so one of them is a correct member's, which decided it there).
//! * [`DB_AGREEMENT`]: no two executions that correct database nodes can perform give one order
//!   two requests or one request two orders.
//!
//! # Abstractions and why they are sound enough
//!
//! * **Database nodes are derived, not simulated** ([`Cutover::quorums`]). A node executes an
//!   order with the first f+1 matching votes it counts, and the network can hold back every
//!   other COMMIT-DB and the CONFIGURE for as long as it likes. So some correct node can
//!   execute `(order, request)` exactly when f+1 distinct members can each have a vote for it
//!   counted, early (before the CONFIGURE reached the node) or late (after it), as the voter
//!   rule combines them: a correct member's vote for what it decided, a Byzantine member's for
//!   any request a client sent, at any order (orders above every decided one behave alike, so
//!   the next one stands for them). Each pair of executions in that set can be performed by one
//!   node or by two (there are three), which is what [`DB_AGREEMENT`] needs. A node learns the
//!   cut of the one CONFIGURE the operator sends; that it is every certificate's is
//!   [`ONE_CUT`].
//! * **Eager decisions and EPOCH-CLOSEs** (taken in the step that allows them; in view 1 the
//!   Byzantine member's COMMIT completes every f+1): decisions and signatures change nothing
//!   in the model but the properties and the certified points, and all four properties only
//!   get harder with more of them, so every real run is matched by a model run that decided
//!   and signed at least as much. EPOCH-CLOSE also waits for f+1 results of the group's
//!   executions in the implementation; that only delays it.
//! * **A Byzantine VIEW-CHANGE is sent when the NEW-VIEW takes it**: sending it earlier only
//!   stops its COMMITs earlier (peers drop those after it). A Byzantine member whose
//!   VIEW-CHANGE the NEW-VIEW does not take may go on COMMITting in view 0.
//! * **Byzantine EPOCH-CLOSEs** count for every point: with f+1 per group a correct member of
//!   every group must have signed; under the wrong rules in which the Byzantine members alone
//!   make a certificate, their points are the ends of every prefix of view 0 (books of any
//!   length, the empty one included) and of view 1.
//! * **The view change is abstracted to what the cut-over needs**: a cut merged from f+1
//!   VIEW-CHANGEs of every group whose correct senders show every PREPARE they processed and
//!   whose Byzantine senders must show their forced prefix. Request timers are replaced by
//!   "any correct replica may leave view 0 at any moment", more than the implementation allows
//!   (a closed book stops a replica's timers). Checkpoints and anchors (`low` = 0, logs from
//!   counter 1), JOIN-based recovery and a second view change are left out: [`crate::anchor`],
//!   [`crate::recovery`] and [`crate::repeated`] check that they keep every decided slot with
//!   its prefix, and the closing slot is a decided slot like any other, so they change where a
//!   log starts, not which book a cut derives.
//! * **Order books** hold the orders with the client table (a request stands for one client's
//!   timestamp), whether they are closed, and whether they recorded a JOIN (one rejoining
//!   replica's incarnation); positions per partition follow the orders of each partition.
//!
//! # Left out
//!
//! A view change in e+1 (its own instance), more than two groups, members that change at the
//! cut (kept replicas are the hard case for counting votes; new members have no votes of e),
//! Byzantine database nodes (they cannot make a correct one execute anything), the USIG
//! positions of e+1 (each node's own, checked by the operator), and state transfer.
//!
//! # Result
//!
//! **The rules as implemented hold** exhaustively: 2 old PREPAREs, 1 of the new primary and 1
//! order of e+1 in the test suite (about 0.23 M states); 3 old PREPAREs (6.3 M states, also
//! with group 0 removed at the cut) and 2 of each (2.1 M) in `examples/cutover_deep_check.rs`.
//! Two rules had to change first, both found by this model: database nodes kept the votes of
//! epoch e counted for orders after the cut before they knew it
//! ([`Voter::KeepsVotesAcrossTheCut`]: a Byzantine member of the old group and one of the new
//! group made f+1, and request 1 executed again at order 2), and order books recorded a JOIN
//! after the closing RECONFIGURE when a new view's cut held it ([`Cutover::joins_after_close`]:
//! two certificates of one end with two books). Refuted with shortest counterexamples: f
//! EPOCH-CLOSEs per group and f+1 from the whole cluster (the Byzantine members certify an
//! empty book under a decided request), no group agreeing on the RECONFIGURE's slot (a cut
//! without it reopens the epoch after a certified end), replicas that keep ordering after the
//! RECONFIGURE (a request decided after the certified cut), and database nodes that count
//! votes of any group of either epoch (request 1 executed at two orders). One group agreeing
//! on the RECONFIGURE's slot instead of every group also holds: a certificate needs f+1
//! EPOCH-CLOSEs of that group, whose correct signer decided the slot.

use crate::new_view::{self, Quorum, Sender};
use crate::prepare::{Counter, Counters, Group, Order, Request};
use crate::{group_of, members, ByzantineReplica, Phase, CORRECT_PER_GROUP, F};
use stateright::{Model, Property};

/// Groups in both epochs.
pub const GROUPS: usize = 2;
/// A data partition (0 or 1).
pub type Partition = u8;

/// The content of one PREPARE.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Content {
    /// A client request (its partition in [`State::partitions`]).
    Request(Request),
    /// The operator's RECONFIGURE, valid for this epoch: the first one ends it.
    Reconfigure,
    /// A RECONFIGURE that does not verify (forged, or not a valid successor): every correct
    /// replica orders nothing for it, and no group agrees on its slot.
    Forged,
    /// A restarted replica's JOIN alone: no group agrees on its slot, but the order book
    /// records the replica's new incarnation (`OrderBook::join`), so the book's digest changes.
    Join,
}

/// Where a history ends, as an EPOCH-CLOSE names it (with the history's digest and book).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Point {
    /// After view-0 counter `c` (0: before the first, only a Byzantine member's word).
    View0(Counter),
    /// In view 1: after the NEW-VIEW slot (0) or after the new primary's i-th PREPARE.
    View1(u8),
}

/// A set of [`Point`]s: view-0 ends 1..=8 in bits 0..8, view-1 ends 0..8 in bits 8..16.
#[derive(Clone, Copy, Default, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Points(pub u16);

impl std::fmt::Debug for Points {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl Points {
    fn bit(p: Point) -> u16 {
        match p {
            Point::View0(c) => 1 << (c - 1),
            Point::View1(i) => 1 << (8 + i),
        }
    }
    pub fn contains(self, p: Point) -> bool {
        p != Point::View0(0) && self.0 & Self::bit(p) != 0
    }
    pub fn insert(&mut self, p: Point) {
        self.0 |= Self::bit(p);
    }
    pub fn iter(self) -> impl Iterator<Item = Point> {
        let view0 = (1..=8).map(Point::View0);
        let view1 = (0..8).map(Point::View1);
        view0.chain(view1).filter(move |&p| self.contains(p))
    }
}

/// How many EPOCH-CLOSEs certify the end of the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Certificate {
    /// This many matching ones from every group (the rule: f+1).
    PerGroup(usize),
    /// This many matching ones from the whole cluster, whatever their groups (a wrong rule).
    Cluster(usize),
}

/// Which groups agree (COMMIT, decide) on the slot of the RECONFIGURE that closes the book.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconfigureAgreement {
    /// Every group (the rule, as on a NEW-VIEW slot).
    EveryGroup,
    /// Only this group; the others pass the slot like one without work.
    OneGroup(Group),
    /// None: the slot passes like one without work everywhere.
    NoGroup,
}

/// What a correct replica does with the PREPAREs after the one that closed its book.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterClose {
    /// Refuses them: its history ends at the closing slot (the rule, `delivered_prepare`).
    Refuse,
    /// Keeps processing and ordering them (a wrong rule): its history, and the end its
    /// EPOCH-CLOSE names, move on.
    Order,
}

/// Which COMMIT-DBs a database node counts, and with which.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Voter {
    /// The rule: before the CONFIGURE, votes of epoch e of its assigned group for any order;
    /// at the CONFIGURE, votes above the cut are dropped, and after it, votes of e only at or
    /// below the cut and of e+1 only above it, each from the group its epoch assigns.
    DropsVotesAboveTheCut,
    /// As `dbvote::voter` was first built: the same ranges for votes that arrive after the
    /// CONFIGURE, but the votes of epoch e counted before it stay and add up with votes of
    /// e+1 for the same order.
    KeepsVotesAcrossTheCut,
    /// A wrong rule: once it knows both epochs, a vote of any group of either epoch counts for
    /// any order.
    AnyGroupOfEitherEpoch,
}

/// The model's parameters.
#[derive(Clone, Debug)]
pub struct Cutover {
    /// The old primary's counters in view 0.
    pub prepares: usize,
    /// The new primary's PREPAREs in view 1 (when the cut did not close the book).
    pub view1_prepares: usize,
    /// Requests epoch e+1 orders after the cut.
    pub next_orders: usize,
    /// The group each partition has in epoch e+1 (epoch e: partition p in group p).
    pub next_assignment: [Group; 2],
    pub certificate: Certificate,
    pub agreement: ReconfigureAgreement,
    pub after_close: AfterClose,
    /// The order book records a JOIN after the closing RECONFIGURE (as `OrderBook::join` was
    /// first built: replicas refuse such a PREPARE in their view, but a new view's cut may hold
    /// it, and `enter` orders the cut's JOINs).
    pub joins_after_close: bool,
    pub voter: Voter,
}

impl Cutover {
    /// The rules as implemented, with `prepares` view-0 counters, `view1_prepares` PREPAREs of
    /// the new primary and `next_orders` orders of epoch e+1; the groups swap partitions.
    pub fn implemented(prepares: usize, view1_prepares: usize, next_orders: usize) -> Self {
        Cutover {
            prepares,
            view1_prepares,
            next_orders,
            next_assignment: [1, 0],
            certificate: Certificate::PerGroup(F + 1),
            agreement: ReconfigureAgreement::EveryGroup,
            after_close: AfterClose::Refuse,
            joins_after_close: false,
            voter: Voter::DropsVotesAboveTheCut,
        }
    }
}

/// A correct replica.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Replica {
    pub phase: Phase,
    /// It processed (and COMMITted, where its group agrees) view-0 counters `1..=processed`.
    pub processed: Counter,
    /// View-0 counters it decided in view 0.
    pub decided: Counters,
    /// In view 1: it processed the new primary's PREPAREs `1..=processed1`.
    pub processed1: u8,
    /// The ends it signed an EPOCH-CLOSE for.
    pub closes: Points,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// The partition of each request (index `request - 1`).
    pub partitions: Vec<Partition>,
    /// The old primary's PREPARE for each counter (index `counter - 1`).
    pub prepares: Vec<Content>,
    /// Correct replicas, group by group ([`crate::members`]).
    pub correct: Vec<Replica>,
    /// The Byzantine member of each group.
    pub byzantine: Vec<ByzantineReplica>,
    /// The NEW-VIEW of view 1, as its cut `S` (the view-0 counters some included log holds).
    pub new_view: Option<Counters>,
    /// The new primary's PREPAREs in view 1.
    pub view1: Vec<Content>,
    /// The certified end epoch e+1 started from (the CONFIGURE's).
    pub next: Option<Point>,
    /// The requests epoch e+1 ordered, at the cut + 1, + 2, ...
    pub next_orders: Vec<Request>,
}

/// One slot of a history as the order book derives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Derived {
    /// The order and request it gives, if any.
    pub ordered: Option<(Order, Request)>,
    /// It holds the RECONFIGURE that closed the book.
    pub closes: bool,
}

/// An order book: the request of each order (index `order - 1`, with the client table: the
/// requests it holds), whether it is closed, and whether it recorded a JOIN.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Book {
    pub orders: Vec<Request>,
    pub closed: bool,
    pub joined: bool,
}

impl Book {
    /// The cut: the last order.
    pub fn cut(&self) -> Order {
        self.orders.len() as Order
    }
}

/// What every correct replica decided, in both epochs ([`Cutover::decisions`]).
#[derive(Clone, Debug)]
pub struct Decisions {
    /// Per correct replica, its executions of epoch e.
    pub this: Vec<Vec<(Order, Request)>>,
    /// Epoch e+1's executions and the group it assigns each to.
    pub next: Vec<(Order, Request, Group)>,
    /// The cut epoch e+1 started from.
    pub cut: Option<Order>,
    /// The orders worth checking: every order decided so far and the next one.
    pub orders: std::ops::RangeInclusive<Order>,
}

impl Decisions {
    /// The cuts a database node may know: none yet, or the one e+1 started from.
    pub fn cuts(&self) -> impl Iterator<Item = Option<Order>> {
        std::iter::once(None).chain(self.cut.map(Some))
    }
}

/// The epoch a COMMIT-DB is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epoch {
    /// Epoch e, which the RECONFIGURE ends.
    This,
    /// Epoch e+1.
    Next,
}

/// A COMMIT-DB a database node may count for one `(order, request)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vote {
    pub voter: Sender,
    pub epoch: Epoch,
    /// The group it names (its sender's).
    pub group: Group,
    /// Counted before the node learned the cut (else after).
    pub early: bool,
    /// Still counted after the node learned the cut (late votes, and early ones at or below
    /// the cut, which are of epoch e).
    pub kept: bool,
}

impl State {
    fn partition(&self, q: Request) -> Partition {
        self.partitions[q as usize - 1]
    }

    /// The two correct members of each group are interchangeable: the representative has them
    /// sorted. Once the NEW-VIEW exists and no correct member of a group is left in view 0,
    /// what its members processed and COMMITted in view 0 decides nothing more (their
    /// decisions are kept).
    pub fn representative(&self) -> State {
        let mut s = self.clone();
        for g in 0..GROUPS {
            let members = members(g as Group);
            let in_view0 = s.correct[members.clone()]
                .iter()
                .any(|r| r.phase == Phase::Normal);
            if s.new_view.is_some() && !in_view0 {
                for r in &mut s.correct[members.clone()] {
                    r.processed = 0;
                }
                s.byzantine[g].commits = Counters::default();
            }
            s.correct[members].sort();
        }
        s
    }

    /// The view-0 history of a correct replica that processed counters `1..=processed`.
    fn view0(&self, processed: Counter) -> impl Iterator<Item = Option<Content>> + '_ {
        self.prepares[..processed as usize].iter().map(|&c| Some(c))
    }

    /// The view-1 history (the cut `S`, counter by counter, then the new primary's first
    /// `processed1` PREPAREs; the NEW-VIEW slot orders nothing), if the NEW-VIEW exists.
    fn view1_history(&self, processed1: u8) -> Option<Vec<Option<Content>>> {
        let s = self.new_view?;
        let cut = (1..=s.max()).map(|c| s.contains(c).then(|| self.prepares[c as usize - 1]));
        let after = self.view1[..processed1 as usize].iter().map(|&c| Some(c));
        Some(cut.chain(after).collect())
    }

    /// Requests that exist so far (ordered or sent by clients).
    fn requests(&self) -> std::ops::RangeInclusive<Request> {
        1..=self.partitions.len() as Request
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The old primary's next counter reaches a correct replica, which processes it.
    Prepare { replica: usize },
    /// A Byzantine member warrants a COMMIT for a view-0 slot of its group.
    ByzantineCommit { group: Group, counter: Counter },
    /// A correct replica leaves view 0 and sends its VIEW-CHANGE.
    ViewChange { replica: usize },
    /// The new primary's NEW-VIEW with these VIEW-CHANGEs (each sender's log).
    NewView {
        view_changes: Vec<(Sender, Counters)>,
    },
    /// A correct replica still in view 0 accepts the NEW-VIEW.
    AcceptNewView { replica: usize },
    /// The new primary warrants a PREPARE in view 1 (a new request: `partition` is its).
    View1Prepare {
        content: Content,
        partition: Option<Partition>,
    },
    /// A correct replica in view 1 processes the new primary's next PREPARE.
    Process1 { replica: usize },
    /// The operator sends the CONFIGURE of e+1 with the certificate of this end.
    StartNext(Point),
    /// Epoch e+1 orders (and the group it assigns decides) a request.
    NextOrder {
        request: Request,
        partition: Option<Partition>,
    },
}

impl Cutover {
    /// The group epoch e assigns request `q` to.
    fn group_this(&self, s: &State, q: Request) -> Group {
        s.partition(q)
    }

    /// The group epoch e+1 assigns request `q` to.
    fn group_next(&self, s: &State, q: Request) -> Group {
        self.next_assignment[s.partition(q) as usize]
    }

    /// Derives the order book over a history, slot by slot.
    pub fn derive(
        &self,
        history: impl IntoIterator<Item = Option<Content>>,
    ) -> (Vec<Derived>, Book) {
        let mut book = Book::default();
        let slots = history
            .into_iter()
            .map(|content| {
                let mut slot = Derived {
                    ordered: None,
                    closes: false,
                };
                match content {
                    Some(Content::Request(q)) => {
                        let refused = book.closed && self.after_close == AfterClose::Refuse;
                        if !refused && !book.orders.contains(&q) {
                            book.orders.push(q);
                            slot.ordered = Some((book.cut(), q));
                        }
                    }
                    Some(Content::Reconfigure) if !book.closed => {
                        book.closed = true;
                        slot.closes = true;
                    }
                    Some(Content::Join) if !book.closed || self.joins_after_close => {
                        book.joined = true;
                    }
                    _ => {}
                }
                slot
            })
            .collect();
        (slots, book)
    }

    /// Whether group `g` agrees on a slot.
    fn agrees(&self, s: &State, slot: &Derived, g: Group) -> bool {
        let work = slot
            .ordered
            .is_some_and(|(_, q)| self.group_this(s, q) == g);
        let closing = slot.closes
            && match self.agreement {
                ReconfigureAgreement::EveryGroup => true,
                ReconfigureAgreement::OneGroup(one) => one == g,
                ReconfigureAgreement::NoGroup => false,
            };
        work || closing
    }

    /// Whether correct replica `r` may process the next view-0 counter.
    fn may_process(&self, s: &State, r: usize) -> bool {
        let replica = &s.correct[r];
        replica.phase == Phase::Normal
            && (replica.processed as usize) < self.prepares
            && (self.after_close == AfterClose::Order
                || !self.derive(s.view0(replica.processed)).1.closed)
    }

    /// Decides, for every correct replica in view 0, every processed slot of its group with
    /// f+1 COMMITs (correct members that processed it, COMMITs warranted before any
    /// VIEW-CHANGE, and the Byzantine member's).
    fn decide(&self, s: &mut State) {
        let (slots, _) = self.derive(s.prepares.iter().map(|&c| Some(c)));
        for r in 0..s.correct.len() {
            let replica = s.correct[r];
            if replica.phase != Phase::Normal {
                continue;
            }
            let g = group_of(r);
            for c in 1..=replica.processed {
                if !self.agrees(s, &slots[c as usize - 1], g) {
                    continue;
                }
                let correct = members(g).filter(|&m| s.correct[m].processed >= c).count();
                let byzantine = s.byzantine[g as usize].commits.contains(c);
                if correct + usize::from(byzantine) > F {
                    s.correct[r].decided.insert(c);
                }
            }
        }
    }

    /// Every correct replica signs EPOCH-CLOSE for the end of its history once its book is
    /// closed there and it decided every slot of its group up to it (`sign_epoch_close`).
    fn sign(&self, s: &mut State) {
        for r in 0..s.correct.len() {
            let replica = s.correct[r];
            let point = match replica.phase {
                Phase::Normal => {
                    let (slots, book) = self.derive(s.view0(replica.processed));
                    let g = group_of(r);
                    let undecided = (1..=replica.processed).any(|c| {
                        self.agrees(s, &slots[c as usize - 1], g) && !replica.decided.contains(c)
                    });
                    if !book.closed || undecided {
                        continue;
                    }
                    Point::View0(replica.processed)
                }
                Phase::ViewChange => continue,
                Phase::NewView => {
                    let history = s.view1_history(replica.processed1).expect("a NEW-VIEW");
                    if !self.derive(history).1.closed {
                        continue;
                    }
                    Point::View1(replica.processed1)
                }
            };
            s.correct[r].closes.insert(point);
        }
    }

    /// The book a point names: the derivation over the history up to it.
    pub fn book(&self, s: &State, point: Point) -> Option<Book> {
        match point {
            Point::View0(c) => Some(self.derive(s.view0(c)).1),
            Point::View1(i) => Some(self.derive(s.view1_history(i)?).1),
        }
    }

    /// The points some certificate can name now.
    pub fn certified(&self, s: &State) -> Vec<Point> {
        let view0 = (0..=self.prepares as Counter).map(Point::View0);
        let view1 = s
            .new_view
            .map(|_| (0..=s.view1.len() as u8).map(Point::View1));
        view0
            .chain(view1.into_iter().flatten())
            .filter(|&p| {
                let signed = |g: Group| {
                    let correct = members(g)
                        .filter(|&r| s.correct[r].closes.contains(p))
                        .count();
                    correct + 1 // the Byzantine member signs anything
                };
                match self.certificate {
                    Certificate::PerGroup(k) => (0..GROUPS as Group).all(|g| signed(g) >= k),
                    Certificate::Cluster(k) => (0..GROUPS as Group).map(signed).sum::<usize>() >= k,
                }
            })
            .collect()
    }

    /// The executions correct replica `r` decided in epoch e (and sent COMMIT-DBs for): its
    /// view-0 decisions and, in view 1, its group's executions of the cut (the NEW-VIEW slot)
    /// and of the view-1 PREPAREs it processed.
    pub fn decided_this(&self, s: &State, r: usize) -> Vec<(Order, Request)> {
        let replica = &s.correct[r];
        let g = group_of(r);
        let (slots, _) = self.derive(s.prepares.iter().map(|&c| Some(c)));
        let mut out: Vec<_> = replica
            .decided
            .iter()
            .filter_map(|c| slots[c as usize - 1].ordered)
            .collect();
        if replica.phase == Phase::NewView {
            let history = s.view1_history(replica.processed1).expect("a NEW-VIEW");
            let (slots, _) = self.derive(history);
            out.extend(
                slots
                    .iter()
                    .filter_map(|slot| slot.ordered)
                    .filter(|&(_, q)| self.group_this(s, q) == g),
            );
        }
        out
    }

    /// The executions epoch e+1 decided: `(order, request)` and the group it assigns.
    pub fn decided_next(&self, s: &State) -> Vec<(Order, Request, Group)> {
        let Some(point) = s.next else {
            return Vec::new();
        };
        let cut = self.book(s, point).expect("a certified point").cut();
        (1..)
            .zip(&s.next_orders)
            .map(|(i, &q)| (cut + i, q, self.group_next(s, q)))
            .collect()
    }

    /// What the database nodes' votes follow from: every correct replica's decisions in both
    /// epochs and the cut e+1 started from.
    pub fn decisions(&self, s: &State) -> Decisions {
        let this: Vec<Vec<(Order, Request)>> = (0..s.correct.len())
            .map(|r| self.decided_this(s, r))
            .collect();
        let next = self.decided_next(s);
        let cut = s.next.and_then(|p| self.book(s, p)).map(|b| b.cut());
        let highest = this.iter().flatten().map(|&(o, _)| o);
        let highest = highest
            .chain(next.iter().map(|&(o, _, _)| o))
            .chain(cut)
            .max()
            .unwrap_or(0);
        Decisions {
            this,
            next,
            cut,
            orders: 1..=highest + 1,
        }
    }

    /// The COMMIT-DBs a database node can count for `(order, request)`, knowing the cut `cut`
    /// (`None`: it knows only epoch e).
    pub fn votes(
        &self,
        s: &State,
        d: &Decisions,
        order: Order,
        q: Request,
        cut: Option<Order>,
    ) -> Vec<Vote> {
        let this = self.group_this(s, q);
        let next = self.group_next(s, q);
        let mut out = Vec::new();
        let mut vote = |voter, epoch, group, early: bool| {
            let kept = !early || cut.is_some_and(|c| order <= c);
            out.push(Vote {
                voter,
                epoch,
                group,
                early,
                kept,
            })
        };
        // Whether a vote naming this epoch and group counts after the CONFIGURE.
        let late = |epoch: Epoch, group: Group| -> bool {
            let Some(cut) = cut else { return false };
            match (self.voter, epoch) {
                (Voter::AnyGroupOfEitherEpoch, _) => true,
                (_, Epoch::This) => order <= cut && group == this,
                (_, Epoch::Next) => order > cut && group == next,
            }
        };
        for r in 0..s.correct.len() {
            let g = group_of(r);
            let voter = Sender::Correct(r);
            if d.this[r].contains(&(order, q)) {
                // Sent before the node learned the cut, or after it.
                vote(voter, Epoch::This, g, true);
                if late(Epoch::This, g) {
                    vote(voter, Epoch::This, g, false);
                }
            }
            if d.next.contains(&(order, q, g)) && late(Epoch::Next, g) {
                vote(voter, Epoch::Next, g, false);
            }
        }
        for g in 0..GROUPS as Group {
            let voter = Sender::Byzantine(g);
            if g == this {
                vote(voter, Epoch::This, g, true);
            }
            for epoch in [Epoch::This, Epoch::Next] {
                if late(epoch, g) {
                    vote(voter, epoch, g, false);
                }
            }
        }
        out
    }

    /// Every pair of `votes` (f+1 = 2 from distinct members, for one execution) with which a
    /// database node executes it.
    pub fn quorums(&self, votes: &[Vote]) -> Vec<[Vote; 2]> {
        let mut out = Vec::new();
        for (i, a) in votes.iter().enumerate() {
            for b in &votes[i + 1..] {
                let together = match self.voter {
                    // At the CONFIGURE the votes above the cut go: votes counted before it
                    // add up with those counted after it only if they are kept.
                    Voter::DropsVotesAboveTheCut => (a.early && b.early) || (a.kept && b.kept),
                    Voter::KeepsVotesAcrossTheCut | Voter::AnyGroupOfEitherEpoch => true,
                };
                if a.voter != b.voter && together {
                    out.push([*a, *b]);
                }
            }
        }
        out
    }

    /// The first quorum that makes a correct database node execute an order under another
    /// assignment than its cut gives it: the cut, the order, the request and the votes.
    pub fn foreign_quorum(&self, s: &State) -> Option<(Order, Order, Request, [Vote; 2])> {
        let d = self.decisions(s);
        // Before the CONFIGURE a node counts only votes of epoch e from the group e assigns
        // (and it counts them still at the CONFIGURE: the quorums below include them).
        let cut = d.cut?;
        for order in d.orders.clone() {
            let epoch = if order > cut {
                Epoch::Next
            } else {
                Epoch::This
            };
            for q in s.requests() {
                let group = match epoch {
                    Epoch::This => self.group_this(s, q),
                    Epoch::Next => self.group_next(s, q),
                };
                let foreign = |v: &Vote| v.epoch != epoch || v.group != group;
                if let Some(quorum) = self
                    .quorums(&self.votes(s, &d, order, q, Some(cut)))
                    .into_iter()
                    .find(|pair| pair.iter().any(foreign))
                {
                    return Some((cut, order, q, quorum));
                }
            }
        }
        None
    }

    /// Every `(order, request)` some correct database node can execute.
    pub fn executable(&self, s: &State) -> Vec<(Order, Request)> {
        let d = self.decisions(s);
        let mut out = Vec::new();
        for cut in d.cuts() {
            for order in d.orders.clone() {
                for q in s.requests() {
                    let votes = self.votes(s, &d, order, q, cut);
                    if !out.contains(&(order, q)) && !self.quorums(&votes).is_empty() {
                        out.push((order, q));
                    }
                }
            }
        }
        out
    }

    /// A decided execution of epoch e that a certified book does not hold at its order.
    pub fn lost(&self, s: &State) -> Option<(Point, Order, Request)> {
        let decided: Vec<(Order, Request)> = (0..s.correct.len())
            .flat_map(|r| self.decided_this(s, r))
            .collect();
        for point in self.certified(s) {
            let book = self.book(s, point)?;
            for &(o, q) in &decided {
                if book.orders.get(o as usize - 1) != Some(&q) {
                    return Some((point, o, q));
                }
            }
        }
        None
    }

    /// Two certified points whose books differ.
    pub fn two_cuts(&self, s: &State) -> Option<(Point, Point)> {
        let points = self.certified(s);
        let books: Vec<Book> = points.iter().filter_map(|&p| self.book(s, p)).collect();
        (1..books.len())
            .find(|&i| books[i] != books[0])
            .map(|i| (points[0], points[i]))
    }

    /// Whether renaming partition 0 and group 0 to 1 and back maps the model to itself: both
    /// epochs' assignments and the agreement rule then treat the two alike.
    fn symmetric(&self) -> bool {
        self.next_assignment[0] != self.next_assignment[1]
            && !matches!(self.agreement, ReconfigureAgreement::OneGroup(_))
    }

    /// New contents: an existing request, a new one in either partition (the first request in
    /// partition 0 if the model is [`Cutover::symmetric`]), the RECONFIGURE, and for the old
    /// primary a forged one and a JOIN.
    fn contents(&self, partitions: &[Partition], old: bool) -> Vec<(Content, Option<Partition>)> {
        let fresh = partitions.len() as Request + 1;
        let mut out: Vec<_> = (1..fresh).map(|q| (Content::Request(q), None)).collect();
        let new_partitions: &[Partition] = match partitions.is_empty() && self.symmetric() {
            true => &[0],
            false => &[0, 1],
        };
        out.extend(
            new_partitions
                .iter()
                .map(|&p| (Content::Request(fresh), Some(p))),
        );
        out.push((Content::Reconfigure, None));
        if old {
            out.push((Content::Forged, None));
            out.push((Content::Join, None));
        }
        out
    }
}

impl Model for Cutover {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut sequences = vec![(Vec::new(), Vec::new())];
        for _ in 0..self.prepares {
            let mut longer = Vec::new();
            for (partitions, prepares) in &sequences {
                for (content, partition) in self.contents(partitions, true) {
                    let mut partitions: Vec<Partition> = partitions.clone();
                    partitions.extend(partition);
                    let mut prepares: Vec<Content> = prepares.clone();
                    prepares.push(content);
                    longer.push((partitions, prepares));
                }
            }
            sequences = longer;
        }
        let replica = Replica {
            phase: Phase::Normal,
            processed: 0,
            decided: Counters::default(),
            processed1: 0,
            closes: Points::default(),
        };
        sequences
            .into_iter()
            .map(|(partitions, prepares)| State {
                partitions,
                prepares,
                correct: vec![replica; GROUPS * CORRECT_PER_GROUP],
                byzantine: vec![
                    ByzantineReplica {
                        commits: Counters::default(),
                        view_change: None,
                    };
                    GROUPS
                ],
                new_view: None,
                view1: Vec::new(),
                next: None,
                next_orders: Vec::new(),
            })
            .collect()
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for replica in 0..s.correct.len() {
            if self.may_process(s, replica) {
                actions.push(Action::Prepare { replica });
            }
        }
        let (slots, _) = self.derive(s.prepares.iter().map(|&c| Some(c)));
        for (g, b) in s.byzantine.iter().enumerate() {
            let group = g as Group;
            // After the NEW-VIEW its COMMITs matter only to correct members still in view 0.
            let in_view0 = members(group).any(|r| s.correct[r].phase == Phase::Normal);
            if b.view_change.is_some() || (s.new_view.is_some() && !in_view0) {
                continue;
            }
            for counter in 1..=self.prepares as Counter {
                if !b.commits.contains(counter)
                    && self.agrees(s, &slots[counter as usize - 1], group)
                {
                    actions.push(Action::ByzantineCommit { group, counter });
                }
            }
        }
        if s.new_view.is_none() {
            for (replica, r) in s.correct.iter().enumerate() {
                if r.phase == Phase::Normal {
                    actions.push(Action::ViewChange { replica });
                }
            }
            // A Byzantine member sends its VIEW-CHANGE when the NEW-VIEW takes it (sending it
            // earlier only stops its COMMITs earlier): its forced prefix plus any PREPAREs.
            let sent: Vec<(Sender, Group)> = (0..s.correct.len())
                .filter(|&r| s.correct[r].phase == Phase::ViewChange)
                .map(|r| (Sender::Correct(r), group_of(r)))
                .chain((0..GROUPS as Group).map(|g| (Sender::Byzantine(g), g)))
                .collect();
            for senders in new_view::choices(Quorum::PerGroup(F + 1), GROUPS, &sent) {
                let mut choices: Vec<Vec<(Sender, Counters)>> = vec![Vec::new()];
                for sender in senders {
                    let logs = match sender {
                        Sender::Correct(r) => vec![Counters::up_to(s.correct[r].processed)],
                        Sender::Byzantine(g) => {
                            let forced = Counters::up_to(s.byzantine[g as usize].commits.max());
                            let mut logs: Vec<Counters> = (0..1u8 << self.prepares)
                                .map(|extra| forced.union(Counters(extra)))
                                .collect();
                            logs.sort();
                            logs.dedup();
                            logs
                        }
                    };
                    choices = choices
                        .into_iter()
                        .flat_map(|prefix| {
                            logs.iter().map(move |&log| {
                                let mut c = prefix.clone();
                                c.push((sender, log));
                                c
                            })
                        })
                        .collect();
                }
                for view_changes in choices {
                    actions.push(Action::NewView { view_changes });
                }
            }
        } else {
            for (replica, r) in s.correct.iter().enumerate() {
                match r.phase {
                    Phase::Normal => actions.push(Action::AcceptNewView { replica }),
                    Phase::NewView => {
                        let history = s.view1_history(r.processed1).expect("a NEW-VIEW");
                        let closed = self.derive(history).1.closed;
                        let may = self.after_close == AfterClose::Order || !closed;
                        if (r.processed1 as usize) < s.view1.len() && may {
                            actions.push(Action::Process1 { replica });
                        }
                    }
                    Phase::ViewChange => {}
                }
            }
            let history = s.view1_history(s.view1.len() as u8).expect("a NEW-VIEW");
            let closed = self.derive(history).1.closed;
            // After the book closed, PREPAREs of the new primary reach no correct replica's
            // history (they refuse them), unless the rule lets them keep ordering.
            if s.view1.len() < self.view1_prepares
                && (!closed || self.after_close == AfterClose::Order)
            {
                for (content, partition) in self.contents(&s.partitions, false) {
                    actions.push(Action::View1Prepare { content, partition });
                }
            }
        }
        match s.next {
            None => {
                for point in self.certified(s) {
                    actions.push(Action::StartNext(point));
                }
            }
            Some(point) if s.next_orders.len() < self.next_orders => {
                let book = self.book(s, point).expect("a certified point");
                for (content, partition) in self.contents(&s.partitions, false) {
                    if let Content::Request(request) = content {
                        if !book.orders.contains(&request) && !s.next_orders.contains(&request) {
                            actions.push(Action::NextOrder { request, partition });
                        }
                    }
                }
            }
            Some(_) => {}
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut next = s.clone();
        match action {
            Action::Prepare { replica } => next.correct[replica].processed += 1,
            Action::ByzantineCommit { group, counter } => {
                next.byzantine[group as usize].commits.insert(counter)
            }
            Action::ViewChange { replica } => next.correct[replica].phase = Phase::ViewChange,
            Action::NewView { view_changes } => {
                let mut cut = Counters::default();
                for (sender, log) in view_changes {
                    cut = cut.union(log);
                    if let Sender::Byzantine(g) = sender {
                        // Its view-0 COMMITs after its VIEW-CHANGE count nowhere.
                        next.byzantine[g as usize].view_change = Some(Counters::default());
                    }
                }
                next.new_view = Some(cut);
                // Replicas waiting in the view change accept it at once.
                for r in next.correct.iter_mut() {
                    if r.phase == Phase::ViewChange {
                        r.phase = Phase::NewView;
                    }
                }
            }
            Action::AcceptNewView { replica } => next.correct[replica].phase = Phase::NewView,
            Action::View1Prepare { content, partition } => {
                next.partitions.extend(partition);
                next.view1.push(content);
            }
            Action::Process1 { replica } => next.correct[replica].processed1 += 1,
            Action::StartNext(point) => next.next = Some(point),
            Action::NextOrder { request, partition } => {
                next.partitions.extend(partition);
                next.next_orders.push(request);
            }
        }
        self.decide(&mut next);
        self.sign(&mut next);
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_CUT, |m: &Cutover, s: &State| m.two_cuts(s).is_none()),
            Property::always(NO_LOSS, |m: &Cutover, s: &State| m.lost(s).is_none()),
            Property::always(ONE_ASSIGNMENT, |m: &Cutover, s: &State| {
                m.foreign_quorum(s).is_none()
            }),
            Property::always(DB_AGREEMENT, |m: &Cutover, s: &State| {
                let execs = m.executable(s);
                execs
                    .iter()
                    .all(|&(o, q)| execs.iter().all(|&(o2, q2)| (o == o2) == (q == q2)))
            }),
            Property::sometimes("the epoch's end is certified", |m: &Cutover, s: &State| {
                !m.certified(s).is_empty()
            }),
            Property::sometimes(
                "ends certified in view 0 and in view 1",
                |m: &Cutover, s: &State| {
                    let points = m.certified(s);
                    points.iter().any(|p| matches!(p, Point::View0(_)))
                        && points.iter().any(|p| matches!(p, Point::View1(_)))
                },
            ),
            Property::sometimes(
                "a RECONFIGURE ordered again in view 1 ends the epoch",
                |m: &Cutover, s: &State| {
                    m.certified(s)
                        .iter()
                        .any(|p| matches!(p, Point::View1(i) if *i > 0))
                },
            ),
            Property::sometimes(
                "requests execute on both sides of the cut",
                |m: &Cutover, s: &State| {
                    let Some(cut) = s.next.and_then(|p| m.book(s, p)).map(|b| b.cut()) else {
                        return false;
                    };
                    let execs = m.executable(s);
                    execs.iter().any(|&(o, _)| o <= cut) && execs.iter().any(|&(o, _)| o > cut)
                },
            ),
        ]
    }
}

/// The property that no two certificates name different books.
pub const ONE_CUT: &str = "every certificate names the same order book";
/// The property that every execution decided in epoch e is in every certified book.
pub const NO_LOSS: &str = "nothing decided before the cut is lost or moved after it";
/// The property that every execution counts only votes of its order's assignment.
pub const ONE_ASSIGNMENT: &str = "no order is executed under two assignments";
/// The property that executions correct database nodes can perform agree.
pub const DB_AGREEMENT: &str = "correct database nodes agree";
