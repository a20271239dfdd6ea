//! A third, self-contained model: **group-replica recovery** (docs/protocol.md, "Replica
//! recovery"), for one group of 2f+1 = 3 replicas (f = 1): which VIEW-CHANGEs of a replica that
//! crashed and forgot what it warranted may count in a NEW-VIEW.
//!
//! A replica that crashes with amnesia forgets every COMMIT it warranted, including ones some
//! peers already counted toward a decision; its next VIEW-CHANGE cannot list them. It restarts
//! as a new *incarnation*: it warrants a JOIN, the primary orders it at some slot J (inside a
//! PREPARE), peers that processed slot J deliver only its new-incarnation messages, it takes
//! state from a stable checkpoint and goes on. The rule checked ([`Rule::Covers`] with slack
//! 0): **a VIEW-CHANGE of a restarted replica counts only if the stable checkpoint it shows is
//! at or above its JOIN** (`low ≥ J`). Every COMMIT it may have forgotten is for a slot below J
//! (it processed that slot's PREPARE before it crashed, the JOIN came after the crash, and the
//! PREPARE that orders the JOIN is warranted after it in the primary's counter order), so a
//! stable checkpoint at or above J keeps all of them, and the intersection argument of the
//! view change goes through for everything above.
//!
//! # What is modelled
//!
//! * **Slots** `1..=slots` (3 to 5), one PREPARE each (the primary's USIG: contents are fixed,
//!   as in [`crate::anchor`]). The old primary issues slots in order: a replica may process the
//!   next slot it has not processed as soon as the primary issued it or by issuing it (the
//!   primary's frontier `issued`). Slot J of a JOIN is a slot like the others (its PREPARE
//!   carries the JOIN): ordering a JOIN issues the slots up to J at once, J any slot above
//!   `issued` (the primary may order a JOIN late).
//! * **Correct replicas** ([`Replica`], [`Status::Up`]) process the PREPAREs in slot order and
//!   COMMIT (warranted) each slot they process. A replica decides a processed slot with f+1 = 2
//!   COMMITs of distinct members that it counts. Once it decided every slot up to its next
//!   checkpoint slot (multiples of K up to `checkpoints`), it may warrant its CHECKPOINT there;
//!   a slot is *certified* (a stable checkpoint) once f+1 members warranted CHECKPOINTs for it,
//!   in any incarnation.
//! * **Crash with amnesia** ([`Action::Crash`]): a correct replica loses everything except its
//!   durable decision log (which slots it decided, for [`Rule::DecisionLog`]); its COMMITs stay
//!   in the network as *old-incarnation* COMMITs, which a peer counts as long as it has not
//!   processed the slot of the crashed replica's JOIN (until then its ordered verifier is still
//!   at the old incarnation). It restarts at once and warrants a JOIN ([`Status::Joining`]);
//!   once the primary orders it at slot J ([`Action::OrderJoin`], [`Status::Awaiting`]), peers
//!   that processed slot J count its new-incarnation COMMITs. It installs a stable checkpoint c
//!   ([`Action::Install`]; c ≥ J in the design), marks the slots up to c decided, warrants its
//!   CHECKPOINT at c and goes on from slot c + 1 ([`Status::Up`] again).
//! * **The Byzantine replica** (optional, [`Recovery::byzantine`]: replica 2, and then no
//!   correct replica crashes) warrants, at any time, a COMMIT for any issued slot and a
//!   CHECKPOINT for any checkpoint slot, and may *reboot on purpose* ([`Action::ByzantineReboot`]):
//!   its COMMITs become old-incarnation ones (it "forgets" them) and it warrants a JOIN. Its
//!   VIEW-CHANGE shows any stable checkpoint `low` (or 0) and, of its current incarnation, the
//!   PREPAREs `low+1..=c` for its highest COMMIT c above `low` (a COMMIT chains the prefix before
//!   it, `crate::view_change::CommitRule::Chained`), and must be valid under the rule.
//! * **VIEW-CHANGE and NEW-VIEW** ([`Action::NewView`]): the NEW-VIEW takes f+1 = 2 valid
//!   VIEW-CHANGEs of distinct members. A correct replica's VIEW-CHANGE shows its installed
//!   checkpoint (0 for a first incarnation) or any stable checkpoint above, and the PREPAREs it
//!   processed above that; one that still awaits state shows any stable checkpoint and nothing
//!   above; one whose JOIN is not ordered yet has no valid VIEW-CHANGE (its incarnation is not
//!   known). A VIEW-CHANGE of a replica that ever restarted counts only if [`Rule`] allows it.
//!   The cut starts at the highest `low` among the two; a slot above is in it if one of them
//!   shows its PREPARE, else it is null (the new primary may order another request there).
//! * **After the NEW-VIEW** the replica whose VIEW-CHANGE it does not take goes on in view 0 (the
//!   NEW-VIEW has not reached it): it processes the issued slots, has its JOIN ordered, installs
//!   state and decides what it can, with the COMMITs warranted before the NEW-VIEW. Nobody else
//!   warrants anything more (the two others sent their VIEW-CHANGEs; peers drop a sender's
//!   view-0 messages after its VIEW-CHANGE).
//! * **Faults.** `f = 1` in total ([`Recovery::budget`]): a correct replica crashes only while
//!   every other one is correct and *covered* (never restarted, or its JOIN at or below a stable
//!   checkpoint), so a recovering replica counts as the group's faulty member until covered;
//!   with the Byzantine replica, no correct replica crashes. Without the budget (a check of
//!   what the budget is for), any replica crashes at any time, up to `crashes` times in all.
//!
//! **Property** ("no decided slot is lost", [`no_loss`]): once the NEW-VIEW exists, every slot
//! a correct replica decided (in any incarnation, before or after the NEW-VIEW) is at or below
//! the cut's checkpoint or in the cut. (A lost slot is null in the new view, so the new primary
//! can order another operation at the order a database node already executed: two nodes end
//! with different operations at one order.)
//!
//! # Abstractions and why they are sound enough
//!
//! * **The network is over-approximated, decisions are eager.** A replica counts every COMMIT a
//!   peer warranted that it may count at that moment (a peer's old-incarnation COMMITs until it
//!   processes the peer's JOIN slot, its new ones from then on), and decides at once ([`decide`]
//!   runs after every step). Decisions never disable an action (they only enable CHECKPOINTs)
//!   and the property only grows with them, so every real run, where messages arrive late or
//!   never (a crashed replica's unsent COMMITs), maps to a model run with the same actions and
//!   at least its decisions. A replica whose JOIN the primary ordered twice (two crashes) has
//!   the COMMITs of all its earlier incarnations counted until its latest JOIN: more decisions
//!   again. A certificate counts CHECKPOINTs of every incarnation (they were true when warranted).
//! * **A VIEW-CHANGE shows all its sender's current-incarnation COMMITs above its `low`.** Where
//!   its log may start within an incarnation is [`crate::anchor`]'s subject (the anchor rule
//!   keeps every counted COMMIT above `low` in the log), and a new incarnation's log starts at
//!   its JOIN at the earliest. What a log of the *current* incarnation cannot show is the old
//!   incarnations' COMMITs, which is what this model is about. A correct VIEW-CHANGE is its
//!   sender's state when the NEW-VIEW takes it (sending it earlier and then doing nothing is the
//!   same run), and may show any stable checkpoint at or above its own: more runs.
//! * **Processing and COMMITting a slot are one step**, and crash-restart-JOIN is one step: a
//!   replica that processed a slot but had not COMMITted it yet shows the same VIEW-CHANGE with
//!   fewer COMMITs in the network (fewer decisions), and a crashed replica that has not restarted
//!   does nothing that one waiting for its JOIN to be ordered could not.
//! * Contents are left out (one PREPARE per slot, CHECKPOINTs of one slot all match: f+1 of them
//!   include one of a replica that was correct when it warranted it, which decided every slot up
//!   to there on the history chained COMMITs fix). So slots at or below a stable checkpoint are
//!   safe, and the only way to lose a decided slot is the one modelled: a null above the cut's
//!   checkpoint. Database nodes, orders and clients are left out (the first model's subject).
//!
//! # Left out
//!
//! More than one group (the JOIN and the coverage are per group, and the other groups'
//! VIEW-CHANGEs only add PREPAREs to the cut), the watermark and log anchors (see above),
//! repeated view changes (among them a JOIN whose PREPARE a cut makes null: the design reads J
//! from the stable checkpoint's order book, so a JOIN counts only once under a stable
//! checkpoint, which every cut keeps), state installed without a certificate (a recovering
//! replica checks the f+1 CHECKPOINTs), garbage collection, the primary's own recovery (a candidate's
//! amnesia is the configured-first-incarnation point of docs/protocol.md: a Byzantine primary
//! that restarts its USIG could warrant two PREPAREs for one counter, which the model's fixed
//! contents exclude), the durable decision log's use for picking a peer (liveness), and the
//! contents of state transfer (a certified checkpoint is installed as a whole).
//!
//! # Result
//!
//! See the crate doc and `tests/replica_recovery.rs`: the rule holds with amnesia under the
//! fault budget (up to three crashes, K = 1 and 2), with a Byzantine replica that reboots on
//! purpose, and beyond the budget (three crashes at any time; the Byzantine replica and a
//! crash): the budget is needed for liveness (f+1 VIEW-CHANGEs that count), not for this
//! property, since a stable checkpoint at or above J includes a CHECKPOINT of a replica that
//! decided every slot below J. It also holds with slack 1 (`low ≥ J − 1`: the JOIN's own slot
//! is never forgotten) and with [`Rule::Replay`]. Counting a VIEW-CHANGE once the JOIN is
//! ordered, restarts without a JOIN, a covering checkpoint chosen by the durable decision log,
//! any stable checkpoint, and slack 2 all lose a decided slot.

use crate::anchor::{Slot, Slots};
use crate::F;
use stateright::{Model, Property};

/// Members of the group (2f+1).
pub const MEMBERS: usize = 2 * F + 1;
/// The Byzantine member's index, when there is one.
pub const BYZANTINE: usize = 2;

/// When a VIEW-CHANGE of a replica that restarted (crashed with amnesia, or a Byzantine one that
/// rebooted) counts, and which stable checkpoint a recovering replica installs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The design with `slack` 0: the VIEW-CHANGE shows a stable checkpoint `low ≥ J − slack`
    /// (J: the slot of its latest JOIN), and a recovering replica installs one at `J − slack` or
    /// above.
    Covers { slack: Slot },
    /// An alternative that needs no checkpoint: a recovering replica may install any stable
    /// checkpoint, or none (it then re-processes the history from slot 1), and its VIEW-CHANGE
    /// counts once the stable checkpoint it shows, or the PREPAREs of its current incarnation
    /// it shows, reach its JOIN (every slot below J is under `low` or shown).
    Replay,
    /// Wrong: it counts as soon as the primary ordered its JOIN (it installs a checkpoint at J
    /// or above before processing more, as designed).
    JoinOrdered,
    /// Wrong: no JOIN. A restarted replica starts a new log from scratch (say a new USIG epoch
    /// that verifiers accept as the first one they see) and processes the history from slot 1;
    /// its peers count its COMMITs of both logs; its VIEW-CHANGE counts.
    NoJoin,
    /// Wrong: it counts once the stable checkpoint it shows is at or above every slot its
    /// durable decision log says it decided (instead of its JOIN).
    DecisionLog,
    /// Wrong: a recovering replica installs any stable checkpoint its peers have (perhaps below
    /// its JOIN) and counts once its VIEW-CHANGE shows a stable checkpoint (`low ≥ K`).
    AnyStableCheckpoint,
}

impl Rule {
    /// Whether a VIEW-CHANGE of a replica that restarted, whose JOIN the primary ordered at
    /// `join` (if any), showing the stable checkpoint `low`, counts.
    /// `top`: the highest slot whose PREPARE it shows (`low` if none).
    pub fn valid(self, low: Slot, top: Slot, join: Option<Slot>, durable: Slots, k: Slot) -> bool {
        match self {
            Rule::Replay => join.is_some_and(|j| top >= j),
            Rule::Covers { slack } => join.is_some_and(|j| low + slack >= j),
            Rule::JoinOrdered => join.is_some(),
            Rule::NoJoin => true,
            Rule::DecisionLog => durable.iter().all(|s| s <= low),
            Rule::AnyStableCheckpoint => low >= k,
        }
    }

    /// The lowest checkpoint a recovering replica whose JOIN is at `join` installs.
    pub fn install_from(self, join: Slot, k: Slot) -> Slot {
        match self {
            Rule::Covers { slack } => join.saturating_sub(slack),
            Rule::AnyStableCheckpoint => k,
            Rule::Replay => 0,
            Rule::JoinOrdered | Rule::DecisionLog | Rule::NoJoin => join,
        }
    }
}

/// Where a member is in its incarnation.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Participates: processes, COMMITs, checkpoints.
    Up,
    /// Restarted and warranted a JOIN that the primary has not ordered yet.
    Joining,
    /// Its JOIN is ordered (at `join`); it waits for a stable checkpoint to install.
    Awaiting,
}

/// A member of the group (the Byzantine one's fields mean what it warranted).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Replica {
    pub status: Status,
    /// The checkpoint its current incarnation started from (0: slot 1).
    pub base: Slot,
    /// It processed the PREPAREs of slots `base+1..=processed` in its current incarnation.
    pub processed: Slot,
    /// COMMITs warranted in its current incarnation (`base+1..=processed` for a correct one).
    pub commits: Slots,
    /// COMMITs of its earlier incarnations, still in the network.
    pub old: Slots,
    /// The slot of its latest ordered JOIN.
    pub join: Option<Slot>,
    /// How many times it restarted.
    pub restarts: u8,
    /// Slots it decided (or installed) in its current incarnation.
    pub decided: Slots,
    /// Every slot it ever decided (its durable decision log; the property's subject).
    pub durable: Slots,
    /// Its highest CHECKPOINT of the current incarnation.
    pub checkpointed: Slot,
    /// Slots of every CHECKPOINT it warranted, in any incarnation.
    pub signed: Slots,
    /// Its VIEW-CHANGE is in the NEW-VIEW.
    pub in_new_view: bool,
}

impl Replica {
    fn new() -> Self {
        Replica {
            status: Status::Up,
            base: 0,
            processed: 0,
            commits: Slots::default(),
            old: Slots::default(),
            join: None,
            restarts: 0,
            decided: Slots::default(),
            durable: Slots::default(),
            checkpointed: 0,
            signed: Slots::default(),
            in_new_view: false,
        }
    }

    /// The COMMITs of this member that a correct peer that processed slots up to `processed`
    /// counts: the old incarnations' until it processed the JOIN, the current one's from then
    /// on (both without a JOIN, see [`Rule::NoJoin`]).
    pub fn counted_by(&self, processed: Slot) -> Slots {
        match (self.status, self.join) {
            (Status::Joining, _) => self.old,
            (_, Some(j)) if processed >= j => self.commits,
            (_, Some(_)) => self.old,
            (_, None) => self.commits.union(self.old),
        }
    }
}

/// The new view's cut.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Cut {
    /// The stable checkpoint it starts at (the highest its VIEW-CHANGEs show).
    pub low: Slot,
    /// Slots above `low` whose PREPARE a VIEW-CHANGE of the NEW-VIEW shows.
    pub held: Slots,
}

impl Cut {
    /// The slot is in the new view's history: at or below its checkpoint, or held.
    pub fn keeps(&self, s: Slot) -> bool {
        s <= self.low || self.held.contains(s)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    pub replicas: [Replica; MEMBERS],
    /// The old primary issued the PREPAREs of slots `1..=issued`.
    pub issued: Slot,
    pub new_view: Option<Cut>,
}

/// A VIEW-CHANGE in the NEW-VIEW: its sender and the stable checkpoint it shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViewChange {
    pub replica: usize,
    pub low: Slot,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A correct replica processes (and COMMITs) the PREPARE of `slot`, issued now if it was not.
    Process {
        replica: usize,
        slot: Slot,
    },
    /// A correct replica warrants its CHECKPOINT at `slot`.
    Checkpoint {
        replica: usize,
        slot: Slot,
    },
    /// A correct replica crashes, forgets, restarts and warrants a JOIN (a new log, without).
    Crash {
        replica: usize,
    },
    /// The primary orders the replica's JOIN at `slot`.
    OrderJoin {
        replica: usize,
        slot: Slot,
    },
    /// A recovering replica installs the stable checkpoint at `checkpoint`.
    Install {
        replica: usize,
        checkpoint: Slot,
    },
    ByzantineCommit {
        slot: Slot,
    },
    ByzantineCheckpoint {
        slot: Slot,
    },
    /// The Byzantine replica "forgets" its COMMITs and warrants a JOIN (a new log, without).
    ByzantineReboot,
    /// The new primary's NEW-VIEW with these two VIEW-CHANGEs.
    NewView {
        view_changes: [ViewChange; 2],
    },
}

/// The model's parameters.
#[derive(Clone, Debug)]
pub struct Recovery {
    /// Slots `1..=slots`.
    pub slots: Slot,
    /// The checkpoint interval.
    pub k: Slot,
    /// Replicas checkpoint the multiples of `k` up to this slot.
    pub checkpoints: Slot,
    pub rule: Rule,
    /// Replica 2 is Byzantine (then correct replicas crash only without the budget).
    pub byzantine: bool,
    /// The most crashes of correct replicas, in all.
    pub crashes: u8,
    /// The most reboots of the Byzantine replica.
    pub reboots: u8,
    /// f = 1 in total: a replica crashes (or the Byzantine one reboots) only while every other
    /// member is correct and covered.
    pub budget: bool,
}

impl Recovery {
    /// The design with amnesia only: `slots` slots, interval `k`, checkpoints below the last
    /// slot, `crashes` crashes within the fault budget.
    pub fn amnesia(rule: Rule, slots: Slot, k: Slot, crashes: u8) -> Self {
        Recovery {
            slots,
            k,
            checkpoints: slots - 1,
            rule,
            byzantine: false,
            crashes,
            reboots: 0,
            budget: true,
        }
    }

    /// The design with the Byzantine replica, which reboots up to `reboots` times.
    pub fn byzantine(rule: Rule, slots: Slot, k: Slot, reboots: u8) -> Self {
        Recovery {
            byzantine: true,
            crashes: 0,
            reboots,
            ..Self::amnesia(rule, slots, k, 0)
        }
    }

    fn is_byzantine(&self, r: usize) -> bool {
        self.byzantine && r == BYZANTINE
    }

    fn checkpoint_slots(&self) -> impl Iterator<Item = Slot> {
        (self.k..=self.checkpoints).step_by(self.k as usize)
    }

    /// Every checkpoint slot with CHECKPOINTs of f+1 distinct members.
    pub fn certified(&self, state: &State) -> Vec<Slot> {
        self.checkpoint_slots()
            .filter(|&y| {
                state
                    .replicas
                    .iter()
                    .filter(|r| r.signed.contains(y))
                    .count()
                    > F
            })
            .collect()
    }

    /// Whether member `r` counts toward f now: Byzantine, or restarted and not covered (its
    /// JOIN above every stable checkpoint, or no JOIN).
    pub fn faulty(&self, state: &State, r: usize) -> bool {
        let m = &state.replicas[r];
        if self.is_byzantine(r) {
            return true;
        }
        if m.restarts == 0 {
            return false;
        }
        let stable = self.certified(state).into_iter().max().unwrap_or(0);
        !(m.status != Status::Joining && m.join.is_some_and(|j| j <= stable))
    }

    fn may_fail(&self, state: &State, r: usize) -> bool {
        !self.budget || (0..MEMBERS).all(|q| q == r || !self.faulty(state, q))
    }

    /// The VIEW-CHANGEs member `r` may send now: the stable checkpoint each shows, and the
    /// slots above it whose PREPAREs it shows. Empty if none would count.
    pub fn view_changes(&self, state: &State, r: usize) -> Vec<(Slot, Slots)> {
        let m = &state.replicas[r];
        if m.status == Status::Joining {
            return Vec::new();
        }
        let certified = self.certified(state);
        let lows = std::iter::once(0).chain(certified);
        let mut out = Vec::new();
        for low in lows {
            let shown = if self.is_byzantine(r) {
                let top = m.commits.iter().filter(|&s| s > low).max().unwrap_or(low);
                Slots::range(low, top)
            } else if m.status == Status::Awaiting {
                Slots::default()
            } else if low >= m.base {
                Slots::range(low, m.processed.max(low))
            } else {
                continue;
            };
            let top = shown.iter().max().unwrap_or(low);
            let valid = m.restarts == 0 || self.rule.valid(low, top, m.join, m.durable, self.k);
            if valid {
                out.push((low, shown));
            }
        }
        out
    }
}

/// Every correct member that is up decides each slot it processed (and has not decided) for
/// which it counts COMMITs of f+1 distinct members, its own among them.
pub fn decide(model: &Recovery, state: &mut State) {
    for r in 0..MEMBERS {
        let m = &state.replicas[r];
        if model.is_byzantine(r) || m.status != Status::Up {
            continue;
        }
        let mut new = Slots::default();
        for s in m.base + 1..=m.processed {
            let peers = (0..MEMBERS).filter(|&q| q != r);
            let peers = peers.filter(|&q| state.replicas[q].counted_by(m.processed).contains(s));
            if !m.decided.contains(s) && m.commits.contains(s) && peers.count() >= F {
                new.insert(s);
            }
        }
        let m = &mut state.replicas[r];
        m.decided = m.decided.union(new);
        m.durable = m.durable.union(new);
    }
}

impl Model for Recovery {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            replicas: [Replica::new(), Replica::new(), Replica::new()],
            issued: 0,
            new_view: None,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let after = state.new_view.is_some();
        let certified = self.certified(state);
        for (replica, m) in state.replicas.iter().enumerate() {
            if after && m.in_new_view {
                continue;
            }
            if self.is_byzantine(replica) {
                if after {
                    continue;
                }
                if m.status == Status::Up {
                    for slot in 1..=state.issued {
                        if !m.commits.contains(slot) {
                            actions.push(Action::ByzantineCommit { slot });
                        }
                    }
                    for slot in self.checkpoint_slots() {
                        if !m.signed.contains(slot) {
                            actions.push(Action::ByzantineCheckpoint { slot });
                        }
                    }
                }
                if m.restarts < self.reboots
                    && m.status == Status::Up
                    && self.may_fail(state, replica)
                {
                    actions.push(Action::ByzantineReboot);
                }
                if m.status == Status::Joining {
                    for slot in state.issued + 1..=self.slots {
                        actions.push(Action::OrderJoin { replica, slot });
                    }
                }
                continue;
            }
            match m.status {
                Status::Up => {
                    let slot = m.processed + 1;
                    let limit = if after { state.issued } else { self.slots };
                    if slot <= limit {
                        actions.push(Action::Process { replica, slot });
                    }
                    let slot = m.checkpointed + self.k;
                    if !after
                        && slot <= self.checkpoints
                        && Slots::range(0, slot).intersection(m.decided) == Slots::range(0, slot)
                    {
                        actions.push(Action::Checkpoint { replica, slot });
                    }
                }
                Status::Joining => {
                    for slot in state.issued + 1..=self.slots {
                        actions.push(Action::OrderJoin { replica, slot });
                    }
                }
                Status::Awaiting => {
                    let join = m.join.expect("an ordered JOIN");
                    let from = self.rule.install_from(join, self.k);
                    let zero = (from == 0).then_some(0);
                    for checkpoint in zero.into_iter().chain(certified.iter().copied()) {
                        if checkpoint >= from {
                            actions.push(Action::Install {
                                replica,
                                checkpoint,
                            });
                        }
                    }
                }
            }
            let crashes: u8 = (0..MEMBERS)
                .filter(|&q| !self.is_byzantine(q))
                .map(|q| state.replicas[q].restarts)
                .sum();
            if !after && crashes < self.crashes && self.may_fail(state, replica) {
                actions.push(Action::Crash { replica });
            }
        }
        if after {
            return;
        }
        let options: Vec<Vec<(Slot, Slots)>> =
            (0..MEMBERS).map(|r| self.view_changes(state, r)).collect();
        for a in 0..MEMBERS {
            for b in a + 1..MEMBERS {
                for &(la, _) in &options[a] {
                    for &(lb, _) in &options[b] {
                        actions.push(Action::NewView {
                            view_changes: [
                                ViewChange {
                                    replica: a,
                                    low: la,
                                },
                                ViewChange {
                                    replica: b,
                                    low: lb,
                                },
                            ],
                        });
                    }
                }
            }
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let mut next = state.clone();
        match action {
            Action::Process { replica, slot } => {
                let m = &mut next.replicas[replica];
                m.processed = slot;
                m.commits.insert(slot);
                next.issued = next.issued.max(slot);
            }
            Action::Checkpoint { replica, slot } => {
                let m = &mut next.replicas[replica];
                m.checkpointed = slot;
                m.signed.insert(slot);
            }
            Action::Crash { replica } => {
                let m = &mut next.replicas[replica];
                m.old = m.old.union(m.commits);
                m.restarts += 1;
                m.base = 0;
                m.processed = 0;
                m.commits = Slots::default();
                m.decided = Slots::default();
                m.checkpointed = 0;
                m.status = match self.rule {
                    Rule::NoJoin => Status::Up,
                    _ => Status::Joining,
                };
            }
            Action::OrderJoin { replica, slot } => {
                let byzantine = self.is_byzantine(replica);
                let m = &mut next.replicas[replica];
                m.join = Some(slot);
                m.status = if byzantine {
                    Status::Up
                } else {
                    Status::Awaiting
                };
                next.issued = slot;
            }
            Action::Install {
                replica,
                checkpoint,
            } => {
                let m = &mut next.replicas[replica];
                m.status = Status::Up;
                m.base = checkpoint;
                m.processed = checkpoint;
                m.decided = Slots::range(0, checkpoint);
                m.checkpointed = checkpoint;
                if checkpoint > 0 {
                    m.signed.insert(checkpoint);
                }
            }
            Action::ByzantineCommit { slot } => next.replicas[BYZANTINE].commits.insert(slot),
            Action::ByzantineCheckpoint { slot } => next.replicas[BYZANTINE].signed.insert(slot),
            Action::ByzantineReboot => {
                let m = &mut next.replicas[BYZANTINE];
                m.old = m.old.union(m.commits);
                m.commits = Slots::default();
                m.restarts += 1;
                if self.rule != Rule::NoJoin {
                    m.status = Status::Joining;
                }
            }
            Action::NewView { view_changes } => {
                let mut cut = Cut {
                    low: 0,
                    held: Slots::default(),
                };
                for vc in view_changes {
                    let all = self.view_changes(state, vc.replica);
                    let (low, shown) = all.into_iter().find(|&(low, _)| low == vc.low)?;
                    cut.low = cut.low.max(low);
                    cut.held = cut.held.union(shown);
                    next.replicas[vc.replica].in_new_view = true;
                }
                next.new_view = Some(cut);
            }
        }
        decide(self, &mut next);
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(NO_LOSS, no_loss),
            Property::sometimes(
                "a restarted replica's VIEW-CHANGE is in a NEW-VIEW",
                |_, s: &State| {
                    s.new_view.is_some()
                        && s.replicas.iter().any(|r| r.in_new_view && r.restarts > 0)
                },
            ),
            Property::sometimes(
                "a slot decided with a forgotten COMMIT is kept only by the cut's checkpoint",
                |m, s: &State| {
                    let Some(cut) = s.new_view else {
                        return false;
                    };
                    decided(m, s).iter().any(|d| {
                        !cut.held.contains(d)
                            && d <= cut.low
                            && s.replicas.iter().any(|r| r.old.contains(d))
                    })
                },
            ),
            Property::sometimes(
                "a NEW-VIEW with a restarted replica keeps a slot decided above its checkpoint",
                |m, s: &State| {
                    s.new_view.is_some_and(|cut| {
                        s.replicas.iter().any(|r| r.in_new_view && r.restarts > 0)
                            && decided(m, s).iter().any(|d| d > cut.low)
                    })
                },
            ),
        ]
    }
}

/// The safety property's name.
pub const NO_LOSS: &str = "no decided slot is lost";

/// Every slot a correct replica decided, in any incarnation.
pub fn decided(m: &Recovery, s: &State) -> Slots {
    (0..MEMBERS)
        .filter(|&r| !m.is_byzantine(r))
        .fold(Slots::default(), |acc, r| acc.union(s.replicas[r].durable))
}

/// Once the NEW-VIEW exists, every slot a correct replica decided is at or below the cut's
/// checkpoint or in the cut.
pub fn no_loss(m: &Recovery, s: &State) -> bool {
    let Some(cut) = s.new_view else {
        return true;
    };
    decided(m, s).iter().all(|d| cut.keeps(d))
}

impl State {
    /// Correct members are interchangeable: the representative has them sorted (the
    /// Byzantine member, if any, stays last).
    pub fn representative(&self) -> State {
        let mut s = self.clone();
        s.replicas.sort();
        s
    }

    /// The representative when member 2 is Byzantine: only the two correct ones sorted.
    pub fn representative_byzantine(&self) -> State {
        let mut s = self.clone();
        s.replicas[..BYZANTINE].sort();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_count_the_old_incarnation_until_they_process_the_join() {
        let r = Replica {
            commits: Slots::range(3, 4),
            old: Slots::range(0, 2),
            join: Some(3),
            restarts: 1,
            ..Replica::new()
        };
        assert_eq!(r.counted_by(2), Slots::range(0, 2));
        assert_eq!(r.counted_by(3), Slots::range(3, 4));
        let joining = Replica {
            status: Status::Joining,
            ..r.clone()
        };
        assert_eq!(joining.counted_by(4), Slots::range(0, 2));
        let no_join = Replica { join: None, ..r };
        assert_eq!(
            no_join.counted_by(0),
            Slots::range(0, 2).union(Slots::range(3, 4))
        );
    }

    #[test]
    fn the_rules() {
        let none = Slots::default();
        let design = Rule::Covers { slack: 0 };
        assert!(design.valid(3, 3, Some(3), none, 1));
        assert!(!design.valid(2, 4, Some(3), none, 1));
        assert!(!design.valid(5, 5, None, none, 1));
        assert!(Rule::Replay.valid(0, 3, Some(3), none, 1));
        assert!(!Rule::Replay.valid(0, 2, Some(3), none, 1));
        assert!(Rule::JoinOrdered.valid(0, 0, Some(3), none, 1));
        assert!(Rule::DecisionLog.valid(1, 1, Some(3), Slots::range(0, 1), 1));
        assert!(!Rule::DecisionLog.valid(0, 0, Some(3), Slots::range(0, 1), 1));
        assert!(Rule::AnyStableCheckpoint.valid(2, 2, Some(5), none, 2));
        assert_eq!(design.install_from(3, 1), 3);
        assert_eq!(Rule::Covers { slack: 1 }.install_from(3, 1), 2);
        assert_eq!(Rule::AnyStableCheckpoint.install_from(3, 2), 2);
    }
}
