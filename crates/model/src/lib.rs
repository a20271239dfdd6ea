//! A model check (stateright) of CloudBFT's commit rule and view-change rule as designed in
//! docs/protocol.md ("View change, checkpoints and recovery"), for f = 1, of where a
//! VIEW-CHANGE's log may start after checkpoints ([`anchor`]), of when a VIEW-CHANGE of a
//! replica that crashed with amnesia and recovered may count ([`recovery`]), of repeated
//! view changes with the rules as implemented ([`repeated`]), and of the cut-over of online
//! reconfiguration ([`cutover`]).
//!
//! # What is modelled
//!
//! * **PREPARE** ([`prepare`]): the old primary's counters `1..=n` (n = 2 or 3), each one PREPARE
//!   carrying one request routed to one group. The USIG gives one PREPARE per counter, so the
//!   content is fixed in the initial state (every content up to renaming); the Byzantine old
//!   primary delivers each counter to any correct replica at any time or never (skipping a
//!   counter is never delivering it). Correct replicas process counters in order.
//! * **COMMIT** ([`commit`]): groups of 2f+1 = 3 replicas, two correct and one Byzantine. A
//!   correct replica COMMITs (warranted) every PREPARE of its group it processes; the Byzantine
//!   one COMMITs any subset of its group's PREPAREs, in any order, until it sends a VIEW-CHANGE.
//!   A correct replica decides a PREPARE with f+1 COMMITs of its group, its own included.
//! * **COMMIT-DB** ([`commit_db`]): a deciding replica sends `(order, request)`, the order
//!   derived deterministically from the PREPAREs in counter order ([`prepare::derive_orders`]);
//!   a database node executes an `(order, request)` once f+1 members of one group sent it (the
//!   Byzantine member sends anything, so one correct member suffices).
//! * **VIEW-CHANGE** ([`view_change`]): each correct replica, whenever f+1 members of a group
//!   asked for it, stops view 0 and sends its log, every PREPARE it processed. A Byzantine
//!   replica may never send one, or send a log whose warranted part is forced
//!   ([`view_change::CommitRule`]) and whose other PREPAREs are any it chooses.
//! * **NEW-VIEW** ([`new_view`]): the new primary includes any VIEW-CHANGEs the quorum rule
//!   allows (f+1 per group in the design); every replica computes `S` (per old counter: the
//!   PREPARE if an included log holds it, else null), re-derives the orders over `S` with the
//!   same function, and sends COMMIT-DB for its group's entries of `S`; the new primary then may
//!   issue one PREPARE in view 1 (any request `S` does not order already, e.g. one whose counter
//!   became null and whose client retransmits it; any group), ordered after `S`.
//!
//! # Abstractions and why they are sound enough
//!
//! * Messages are never lost, only delayed: fetches and retransmissions only re-deliver what a
//!   node could have received anyway. Delay is modelled by the freedom of interleaving.
//! * Decisions and the COMMIT-DBs they cause are taken eagerly ([`commit::decide`]), and a
//!   replica whose VIEW-CHANGE is included accepts the NEW-VIEW at once: both only add
//!   COMMIT-DBs and decisions, and every property below is monotone in those, so no violation
//!   is lost. A correct replica that sent no VIEW-CHANGE keeps deciding in view 0 until it
//!   chooses to accept the NEW-VIEW: late decisions are in the model.
//! * Database nodes (all correct; a Byzantine one cannot make a correct one execute anything)
//!   are summarised by the set of executions some correct node can perform
//!   ([`commit_db::executable`]): the network can hold a node back until any one execution is
//!   available, so with three nodes every pair of executions in that set is performed by one
//!   node or by two.
//! * Exactly one Byzantine replica per group (f = 1): a Byzantine replica can behave correctly,
//!   so this covers fewer. Its VIEW-CHANGE either is not sent or holds its forced log plus any
//!   subset of the other PREPAREs (it colludes with the old primary and knows them all).
//! * REQ-VIEW-CHANGE is not a separate step: a correct replica's timer can expire at any moment
//!   (the model has no time) and the Byzantine member of its group always joins it, so f+1
//!   members of a group can ask at any moment, and every replica may then move to view 1 (or
//!   stay in view 0 for as long as the network keeps the requests from it).
//!
//! # Left out
//!
//! Checkpoints (`low` = 0, logs start at counter 1), loss and retransmission, more than one view
//! change (and VIEW-CHANGEs that carry an earlier NEW-VIEW: see [`repeated`]), batches and per-partition positions
//! (one request per PREPARE, one global order), client timestamps (a duplicate is the same
//! integer), a database node waiting for predecessors, REPLY-COMMIT-DB and REPLY, recovery and
//! state transfer, configuration epochs. The new primary's view-1 PREPAREs are limited to one.
//!
//! # Result
//!
//! **The rule as written ([`view_change::CommitRule::AsDesigned`]) is refuted**, with one group
//! and with two, and no Byzantine primary is needed. The intersection argument keeps every
//! committed PREPARE in `S`, but not its order id: the order of counter c depends on every
//! PREPARE `1..c`, and a Byzantine member of the VIEW-CHANGE quorum only has to show the COMMITs
//! it warranted. With PREPAREs 1 (request 1) and 2 (request 2): a correct member processes both,
//! the Byzantine one COMMITs only 2, so 2 is decided at order 2 and executed; the NEW-VIEW takes
//! the VIEW-CHANGEs of the Byzantine member (COMMIT 2 only) and of a correct member that had
//! received nothing yet; `S` = [null, PREPARE 2], request 2 gets order 1 (and executes again
//! there), and the new primary orders request 1 at order 2, which database nodes that executed
//! request 2 there disagree with. With two groups PREPARE 1 is the other group's, about which
//! the Byzantine member never warranted anything.
//!
//! [`view_change::CommitRule::Chained`] (a COMMIT for counter c vouches for the PREPAREs
//! `1..=c`, e.g. by a running digest of the PREPAREs in counter order that matching COMMITs must
//! agree on, so a valid VIEW-CHANGE must contain them) restores all three properties in every
//! configuration checked. The checks also confirm that f VIEW-CHANGEs per group, 2f+1 from the
//! whole cluster, or counting a peer's COMMIT warranted after its VIEW-CHANGE
//! ([`CloudBft::commits_after_view_change`]) lose decisions.
//!
//! # Checkpoint anchors ([`anchor`])
//!
//! A second, self-contained model checks where a VIEW-CHANGE's log may start once replicas
//! take checkpoints (docs/protocol.md, "Open safety gap"): one group of three (one Byzantine),
//! three slots, checkpoint interval 1 (the watermark is slot s − 2), and a Byzantine replica
//! that warrants COMMITs and CHECKPOINTs for any slot in any order. **The old rule (a log may
//! start at any own CHECKPOINT at slot ≤ low − K) is refuted**: the Byzantine replica warrants
//! CHECKPOINT 2, COMMIT 3, CHECKPOINT 1 (or CHECKPOINT 1, COMMIT 3, CHECKPOINT 1 again) and
//! starts its log at the last one under the stable checkpoint 2; with a correct VIEW-CHANGE
//! that holds slots 1 and 2 only, slot 3 is null in the cut, while the other correct replica
//! decides it with the Byzantine COMMIT.
//! **Anchor reports** (a log starts at counter 1 or at the sender's CHECKPOINT at x ≤ low − K
//! that f+1 CHECKPOINTs at x + K report as its first at x, counting only CHECKPOINTs whose
//! slot goes above every earlier one of their sender) keep every decided slot, exhaustively
//! with up to 5 Byzantine messages (7, and 4 slots, in `examples/anchor_deep_check.rs`).
//! Reports from f members, reports that let a sender's CHECKPOINT slots go down, and
//! receivers that count a peer's COMMIT without its CHECKPOINT at the watermark before it are
//! refuted: the rule needs all three. **The span** (docs/protocol.md, "Bounded VIEW-CHANGEs",
//! item 3: COMMITs and the PREPAREs a VIEW-CHANGE shows within one interval of the stable
//! checkpoint, VIEW-CHANGEs showing more refused) keeps them too, checked with and without it;
//! with it, a correct VIEW-CHANGE that showed a lower checkpoint than its own stable one would
//! lose the slots it COMMITted within its span, which is refuted.
//!
//! # Replica recovery ([`recovery`])
//!
//! A third self-contained model checks the recovery design (docs/protocol.md, "Replica
//! recovery"): one group of three, up to 4 or 5 slots, K = 1 or 2; a replica that crashes
//! forgets every COMMIT it warranted (some peers may have counted them, others receive them
//! later or never), restarts, warrants a JOIN that the primary orders at some slot J, installs
//! a stable checkpoint and goes on; optionally the group's Byzantine member reboots on purpose to
//! forget its COMMITs. **The rule (a restarted replica's VIEW-CHANGE counts only if the stable
//! checkpoint it shows is at or above its JOIN) keeps every decided slot**, exhaustively: with
//! amnesia within f = 1 (up to three successive crashes, a recovering replica counting as
//! faulty until covered), with K = 2, with a Byzantine member that reboots twice, and also beyond
//! the fault budget (crashes at any time, or a crash besides the Byzantine member): the budget
//! is needed for liveness (f+1 VIEW-CHANGEs that count), not for this property, because coverage
//! needs a certificate with a CHECKPOINT of a replica that decided the forgotten slots. A
//! checkpoint at J − 1 and re-processing the history up to J instead of a checkpoint also hold.
//! Counting a VIEW-CHANGE as soon as the JOIN is ordered, restarting with a new log and no
//! JOIN, covering the slots the durable decision log says were decided instead of the JOIN,
//! installing any stable checkpoint, and a checkpoint at J − 2 are refuted: a COMMIT the
//! restarted replica forgot helped a correct replica decide a slot that the cut then loses.
//!
//! # Repeated view changes ([`repeated`])
//!
//! A fourth self-contained model checks view 0 → view 1 → view 2 with the rules as
//! `group::view` and `group::core` implement them (docs/protocol.md, "As implemented"): one
//! group of three (one Byzantine), 1 or 2 old PREPAREs, a Byzantine view-1 primary that after
//! its NEW-VIEW warrants PREPAREs of any content, null messages, or a second NEW-VIEW of view
//! 1; replicas COMMIT the NEW-VIEW slot and view-1 PREPAREs and decide in view 1, each moves to
//! view 1 or view 2 at any moment and accepts a NEW-VIEW whenever it arrives (or decides late
//! in its old view); a VIEW-CHANGE for view 2 carries its sender's base NEW-VIEW and the base
//! view's PREPAREs it processed, the Byzantine member's any valid one (a COMMIT of a view after
//! its base is refused, its COMMITs of its base view chain the prefix it must show). The
//! view-2 cut takes the VIEW-CHANGEs of the highest base view and, among those, of the
//! NEW-VIEW with the lowest counter, and merges their histories slot by slot. Abstractions as
//! above (eager decisions, the network's freedom as interleavings, every COMMIT-DB of a correct
//! member executable with the Byzantine member's), and the view-2 NEW-VIEW slot decided once a
//! correct replica enters (the Byzantine member COMMITs it).
//!
//! **Without checkpoints the implemented rules keep everything**: exhaustively, nothing decided in
//! view 0 is lost by the view-1 cut, nothing decided in view 0 or view 1 (the NEW-VIEW slot's
//! executions included) by the view-2 cut, no order id gets two requests and no request two order
//! ids (one group: 2 old PREPAREs and 1 view-1 message, about 1.7 M states, and 1 of each with a
//! second NEW-VIEW of view 1, about 0.11 M, in the test suite; 2 view-1 messages, or 2 old PREPAREs
//! with a second NEW-VIEW, in `examples/repeated_deep_check.rs`). Refuted with shortest
//! counterexamples: merging the VIEW-CHANGEs of the highest base view whatever NEW-VIEW they name
//! (a Byzantine base on the second NEW-VIEW of view 1 displaces the decided cut), merging every
//! VIEW-CHANGE whatever its base view (a view-0 history fills a null slot of the view-1 cut and
//! shifts a decided order id), counting a peer's view-1 COMMIT warranted after its VIEW-CHANGE for
//! view 2, and sending a new view's cut to the database nodes without f+1 COMMITs of its NEW-VIEW
//! slot (a later cut of base view 0 differs from it).
//!
//! **Stable checkpoints between the view changes** ([`repeated::Repeated::checkpoints`], in
//! `tests/checkpoint_between_views.rs`): a checkpoint of view 1 at or after the NEW-VIEW slot
//! becomes stable (f+1 CHECKPOINTs, one of a correct replica that decided up to there), and
//! VIEW-CHANGEs for view 2 show one and their history above it only; the Byzantine member's
//! any valid one, its log holding every COMMIT above its checkpoint ([`anchor`]'s result) and
//! possibly none at or below it; a replica enters view 2 from the later of the cut's checkpoint
//! and its own (`group::core`'s `enter`) and orders the view-2 primary's first request.
//! **Refuted for the implemented rules**: a Byzantine VIEW-CHANGE of base view 0 may carry a
//! view-1 stable checkpoint (its view-1 COMMIT is at or below it, left out by an anchored log)
//! and show an old PREPARE above it, so the cut puts that PREPARE on a slot that a correct
//! replica's higher stable checkpoint holds as a view-1 null; that replica keeps its own order
//! book, the other installs the cut's, and the next request gets two order ids (agreement at
//! the database lost; nothing decided is lost). The mixed-view `low` alone is safe: with
//! replicas that re-derive from the cut's checkpoint every property holds. Requiring a
//! VIEW-CHANGE's stable checkpoint to lie on its base's history keeps every property (with 1
//! or 2 old PREPAREs, 1 or 2 view-1 messages, a second NEW-VIEW of view 1;
//! `examples/checkpoint_deep_check.rs`). A cut from the lowest stable checkpoint (as "The new
//! view" in docs/protocol.md still says) and checkpoints stable with f CHECKPOINTs are refuted.
//!
//! # The cut-over of online reconfiguration ([`cutover`])
//!
//! A fifth self-contained model checks where a configuration epoch ends (docs/protocol.md,
//! "Reconfiguration"): a Byzantine old primary (requests, JOINs and RECONFIGUREs in any order,
//! forged ones, different prefixes to different replicas), two groups with a Byzantine member
//! each that COMMITs, shows VIEW-CHANGEs, signs EPOCH-CLOSEs and votes at the database nodes
//! as it likes, a view change at any moment, certificates of f+1 EPOCH-CLOSEs per group,
//! epoch e+1 started from any certified end, and database nodes that count votes by the
//! epochs' order ranges and assignments. **With the rules as implemented every certificate
//! names the same book, nothing decided before the cut is lost or moved after it, and every
//! order executes under one assignment** (0.23 M states in the suite, 6.3 M in
//! `examples/cutover_deep_check.rs`), after two fixes the model found: database nodes kept the
//! votes they counted for orders after the cut before they knew it (votes of two groups of two
//! epochs made f+1), and order books recorded a JOIN after the closing RECONFIGURE when a new
//! view's cut held one (two books for one end). f EPOCH-CLOSEs per group, f+1 from the
//! cluster, no group agreeing on the RECONFIGURE, replicas that order after it and database
//! nodes that count any group of either epoch are refuted; one group agreeing on it instead of
//! every group holds.

pub mod anchor;
pub mod commit;
pub mod commit_db;
pub mod cutover;
pub mod harness;
pub mod new_view;
pub mod prepare;
pub mod recovery;
pub mod repeated;
pub mod view_change;

use commit_db::{executable, view0_orders, view1_orders};
use new_view::{Quorum, Sender};
use prepare::{old_primary_prepares, Counter, Counters, Group, Prepare};
use stateright::{Model, Property};
use view_change::CommitRule;

/// Faults tolerated per group.
pub const F: usize = 1;
/// Correct members per group (2f+1 minus the f Byzantine ones).
pub const CORRECT_PER_GROUP: usize = F + 1;

/// The model's parameters.
#[derive(Clone, Debug)]
pub struct CloudBft {
    /// Number of groups (1 or 2).
    pub groups: usize,
    /// Number of old-primary counters (PREPAREs) in view 0.
    pub prepares: usize,
    pub commit_rule: CommitRule,
    pub quorum: Quorum,
    /// A wrong rule: a replica still in view 0 counts a peer's COMMIT that the peer warranted
    /// after its VIEW-CHANGE. (Right: peers process a replica's warranted messages in its USIG
    /// order, so they see its VIEW-CHANGE first and must then drop its view-0 COMMITs.)
    pub commits_after_view_change: bool,
}

impl CloudBft {
    /// The rule as docs/protocol.md designs it: COMMITs vouch for their own PREPARE, f+1
    /// VIEW-CHANGEs per group.
    pub fn as_designed(groups: usize, prepares: usize) -> Self {
        CloudBft {
            groups,
            prepares,
            commit_rule: CommitRule::AsDesigned,
            quorum: Quorum::PerGroup(F + 1),
            commits_after_view_change: false,
        }
    }

    /// The design with chained COMMITs ([`CommitRule::Chained`]).
    pub fn chained(groups: usize, prepares: usize) -> Self {
        CloudBft {
            commit_rule: CommitRule::Chained,
            ..Self::as_designed(groups, prepares)
        }
    }
}

/// Where a correct replica is in the view change.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// View 0: processes PREPAREs, COMMITs, decides.
    Normal,
    /// Sent its VIEW-CHANGE (log frozen), waits for the NEW-VIEW.
    ViewChange,
    /// Accepted the NEW-VIEW and sent COMMIT-DB for its group's entries of `S`.
    NewView,
}

/// A correct replica.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct CorrectReplica {
    pub phase: Phase,
    /// It processed (and, for its group's, COMMITted) the old PREPAREs `1..=processed`.
    pub processed: Counter,
    /// Old counters it decided in view 0 (and sent COMMIT-DB for).
    pub decided: Counters,
}

/// The Byzantine member of a group.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct ByzantineReplica {
    /// Old counters it warranted a COMMIT for.
    pub commits: Counters,
    /// The log of the VIEW-CHANGE it sent, if it sent one.
    pub view_change: Option<Counters>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// The old primary's PREPARE for each counter `1..=n` (index `c - 1`).
    pub prepares: Vec<Prepare>,
    /// Correct replicas, group by group: `g * CORRECT_PER_GROUP + k`.
    pub correct: Vec<CorrectReplica>,
    /// The Byzantine member of each group.
    pub byzantine: Vec<ByzantineReplica>,
    /// The NEW-VIEW of view 1, as the `S` it determines (counters whose PREPARE is in `S`).
    pub new_view: Option<Counters>,
    /// The new primary's PREPARE in view 1.
    pub view1_prepare: Option<Prepare>,
}

/// The group of correct replica `r` (correct replicas are numbered group by group).
pub fn group_of(r: usize) -> Group {
    (r / CORRECT_PER_GROUP) as Group
}

/// The correct members of a group.
pub fn members(g: Group) -> std::ops::Range<usize> {
    let first = g as usize * CORRECT_PER_GROUP;
    first..first + CORRECT_PER_GROUP
}

impl State {
    pub fn group_of(&self, r: usize) -> Group {
        group_of(r)
    }

    pub fn members(&self, g: Group) -> std::ops::Range<usize> {
        members(g)
    }

    /// The correct members of a group are interchangeable: the representative of a state's
    /// symmetry class has them sorted (for `CheckerBuilder::symmetry_fn`).
    pub fn representative(&self) -> State {
        let mut s = self.clone();
        for g in 0..s.byzantine.len() {
            let members = s.members(g as Group);
            s.correct[members].sort();
        }
        s
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The old primary delivers its next counter to a correct replica, which processes it and,
    /// if its group is named, COMMITs it.
    Prepare { replica: usize, counter: Counter },
    /// A Byzantine replica warrants a COMMIT for a PREPARE of its group.
    ByzantineCommit { group: Group, counter: Counter },
    /// A correct replica leaves view 0 and sends its VIEW-CHANGE (f+1 members of its group asked
    /// for the view change: see the crate doc).
    ViewChange { replica: usize },
    /// A Byzantine replica sends a VIEW-CHANGE with this log.
    ByzantineViewChange { group: Group, log: Counters },
    /// The new primary issues NEW-VIEW with these VIEW-CHANGEs.
    NewView { view_changes: Vec<Sender> },
    /// A correct replica still in view 0 accepts the NEW-VIEW.
    AcceptNewView { replica: usize },
    /// The new primary orders one more request in view 1.
    PrepareInView1(Prepare),
}

impl Model for CloudBft {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        old_primary_prepares(self.groups, self.prepares)
            .into_iter()
            .map(|prepares| State {
                prepares,
                correct: vec![
                    CorrectReplica {
                        phase: Phase::Normal,
                        processed: 0,
                        decided: Counters::default(),
                    };
                    self.groups * CORRECT_PER_GROUP
                ],
                byzantine: vec![
                    ByzantineReplica {
                        commits: Counters::default(),
                        view_change: None,
                    };
                    self.groups
                ],
                new_view: None,
                view1_prepare: None,
            })
            .collect()
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let n = self.prepares as Counter;
        for (replica, r) in state.correct.iter().enumerate() {
            if r.phase == Phase::Normal && r.processed < n {
                let counter = r.processed + 1;
                actions.push(Action::Prepare { replica, counter });
            }
        }
        for (g, b) in state.byzantine.iter().enumerate() {
            if b.view_change.is_some() && !self.commits_after_view_change {
                continue;
            }
            for counter in 1..=n {
                let ours = state.prepares[counter as usize - 1].group as usize == g;
                if ours && !b.commits.contains(counter) {
                    let group = g as Group;
                    actions.push(Action::ByzantineCommit { group, counter });
                }
            }
        }
        if state.new_view.is_none() {
            for (replica, r) in state.correct.iter().enumerate() {
                if r.phase == Phase::Normal {
                    actions.push(Action::ViewChange { replica });
                }
            }
            for (g, b) in state.byzantine.iter().enumerate() {
                if b.view_change.is_some() {
                    continue;
                }
                let forced = self.commit_rule.forced_log(b.commits);
                let mut logs: Vec<Counters> = (0..1u8 << n)
                    .map(|extra| forced.union(Counters(extra)))
                    .collect();
                logs.sort_by_key(|l| l.0);
                logs.dedup();
                for log in logs {
                    let group = g as Group;
                    actions.push(Action::ByzantineViewChange { group, log });
                }
            }
            let sent = new_view::sent(state);
            for view_changes in new_view::choices(self.quorum, self.groups, &sent) {
                actions.push(Action::NewView { view_changes });
            }
        }
        if state.new_view.is_some() {
            for (replica, r) in state.correct.iter().enumerate() {
                if r.phase == Phase::Normal {
                    actions.push(Action::AcceptNewView { replica });
                }
            }
            if state.view1_prepare.is_none() {
                // A request `S` already ordered would get no order (a duplicate): left out.
                let ordered = |q| {
                    let entries = commit_db::view1_entries(state);
                    entries.iter().flatten().any(|p| p.request == q)
                };
                for request in (1..=n + 1).filter(|&q| !ordered(q)) {
                    for group in 0..self.groups as Group {
                        actions.push(Action::PrepareInView1(Prepare { request, group }));
                    }
                }
            }
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let mut next = state.clone();
        match action {
            Action::Prepare { replica, .. } => next.correct[replica].processed += 1,
            Action::ByzantineCommit { group, counter } => {
                next.byzantine[group as usize].commits.insert(counter)
            }
            Action::ViewChange { replica } => next.correct[replica].phase = Phase::ViewChange,
            Action::ByzantineViewChange { group, log } => {
                next.byzantine[group as usize].view_change = Some(log)
            }
            Action::NewView { view_changes } => {
                next.new_view = Some(new_view::sequence(state, &view_changes));
                // Replicas waiting in view change accept it at once (see the crate doc).
                for r in next.correct.iter_mut() {
                    if r.phase == Phase::ViewChange {
                        r.phase = Phase::NewView;
                    }
                }
            }
            Action::AcceptNewView { replica } => next.correct[replica].phase = Phase::NewView,
            Action::PrepareInView1(p) => next.view1_prepare = Some(p),
        }
        commit::decide(&mut next);
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("agreement at the database", |_, s: &State| {
                let execs = executable(s, true);
                execs.windows(2).all(|w| w[0].order != w[1].order)
            }),
            Property::always("no loss across the view change", |_, s: &State| no_loss(s)),
            Property::always("no double execution", |_, s: &State| {
                let execs = executable(s, true);
                execs
                    .iter()
                    .all(|e| execs.iter().all(|o| o.request != e.request || o == e))
            }),
            Property::sometimes("a view change completes", |_, s: &State| {
                s.correct.iter().any(|r| r.phase == Phase::NewView)
            }),
            Property::sometimes("a request executes in view 0", |_, s: &State| {
                !executable(s, false).is_empty()
            }),
            Property::sometimes(
                "a request executes after the view change",
                |_, s: &State| {
                    let view0 = executable(s, false);
                    executable(s, true).iter().any(|e| !view0.contains(e))
                },
            ),
        ]
    }
}

/// Property 2: once the NEW-VIEW exists, every counter a correct replica decided in view 0 is in
/// `S` and gets the same order id (or the same "none" for a duplicate) from `S` as it got in
/// view 0. Every view-0 execution at a database node was decided by a correct replica (one of
/// the f+1 matching COMMIT-DBs is correct), so this covers executions too.
fn no_loss(s: &State) -> bool {
    let Some(seq) = s.new_view else {
        return true;
    };
    let (before, after) = (view0_orders(s), view1_orders(s));
    s.correct.iter().all(|r| {
        r.decided
            .iter()
            .all(|c| seq.contains(c) && before[c as usize - 1] == after[c as usize - 1])
    })
}
