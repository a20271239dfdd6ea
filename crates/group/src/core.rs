//! The group replica's protocol core (sans-IO).
//!
//! Inputs: PREPAREs and NEW-VIEWs from the primary candidates, COMMITs and VIEW-CHANGEs from
//! group peers, our own USIG's warrants, durable log completions, REPLY-COMMIT-DBs from database
//! nodes, client requests, REQ-VIEW-CHANGEs and timer ticks. Outputs: [`Action`]s for the driver.
//! Every replica processes every PREPARE, in the primary's counter order, to derive the global
//! order; only the PREPARE's named groups agree on it. A replica whose request timer expires
//! asks for a view change; f+1 members of one group asking moves it to the next view
//! (docs/protocol.md, "View change").

use crate::checkpoint::{Checkpoints, Point};
use crate::order::OrderBook;
use crate::render::Renderer;
use crate::view::{
    genesis_counter, in_configured_epoch, primary_of, stable, Checker, Cut, Low, Slot,
};
use proto::batch::RootCache;
use proto::config::Cluster;
use proto::{
    chain, chain_start, Anchor, Base, Checkpoint, ClientId, Commit, CommitDb, Decided, EpochClose,
    Execution, GroupId, Join, Lineage, NewView, NodeId, PartitionRule, Prepare, Proposal,
    RecoveryState, Reply, ReplyCommitDb, ReqViewChange, Request, RequestBody, Signature,
    SigningKey, View, ViewChange, ViewChangeBody, Warranted, CHECKPOINT_INTERVAL, VIEW_CHANGE_SPAN,
};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::RangeInclusive;
use std::sync::Arc;
use usig::{
    Delivered, Epoch, MessageDigest, OrderedVerifier, UniqueWarrant, UsigId, VerifyError,
    DEFAULT_WINDOW,
};

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Ask our USIG for a warrant over `bytes`, then call [`ReplicaCore::warranted`].
    Warrant { bytes: Vec<u8> },
    /// Send to the other members of our group, or to `to` alone when it asked for it again.
    SendCommit {
        to: Option<NodeId>,
        commit: Box<Commit>,
    },
    /// Send to every primary candidate and to the other members of our group, or to `to` alone
    /// when it asked for it again.
    SendViewChange {
        to: Option<NodeId>,
        view_change: Box<ViewChange>,
    },
    /// Send to every group replica and every primary candidate.
    SendReqViewChange(ReqViewChange),
    /// Send to every other group replica, of every group, or to `to` alone when it asked for it
    /// again.
    SendCheckpoint {
        to: Option<NodeId>,
        checkpoint: Checkpoint,
    },
    /// Send a client's request that is not ordered yet to the primary of our view.
    ForwardRequest(Request),
    /// Ask a primary candidate to send its PREPAREs or NEW-VIEWs with these counters again.
    FetchPrepares {
        from: NodeId,
        counters: RangeInclusive<u64>,
    },
    /// Ask a peer to send its messages again: those with these warrant counters (a gap in its
    /// sequence) and its COMMITs for these slots (agreements still short of f+1).
    FetchCommits {
        from: NodeId,
        warrants: Option<RangeInclusive<u64>>,
        slots: Vec<u64>,
    },
    /// Tell primary candidate `to` that f+1 COMMITs decided its PREPARE here: a pacing hint,
    /// nothing else depends on it (`primary::pacing`).
    SendDecided { to: NodeId, decided: Decided },
    /// Record the decision for this slot in the decision log, then call
    /// [`ReplicaCore::persisted`]. The record need not be durable first: recovery does not read
    /// it (docs/protocol.md, "The decision log"). The executions are shared with the core:
    /// drop them before that call, and the core sends them on without a copy.
    Persist {
        slot: u64,
        executions: Arc<Vec<Execution>>,
    },
    /// Send to database node `to`, or to every database node.
    SendCommitDb {
        to: Option<NodeId>,
        commit_db: CommitDb,
    },
    /// Send to the client.
    SendReply(Reply),
    /// Send our JOIN to every primary candidate (we restarted and forgot what we warranted).
    SendJoin(Join),
    /// Ask the other members of our group for their stable state (signed by the driver).
    RequestRecovery,
    /// Send our stable state to a recovering member of our group.
    SendRecoveryState {
        to: NodeId,
        state: Box<RecoveryState>,
    },
    /// Send our EPOCH-CLOSE to every node of the epoch and to the operator (docs/protocol.md,
    /// "Reconfiguration").
    SendEpochClose(EpochClose),
    /// f+1 matching EPOCH-CLOSEs of every group arrived: the epoch ended there.
    EpochClosed,
}

/// Why a message was dropped (counted by the driver).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reject {
    /// Not from a primary candidate, or a COMMIT for another view.
    WrongView,
    /// For another configuration epoch.
    WrongEpoch,
    /// A COMMIT or VIEW-CHANGE from a node that is not a member of our group.
    NotMember,
    /// A node-signed message whose signature does not verify, or from an unknown node.
    BadSignature,
    /// A message authenticated by its link (REPLY-COMMIT-DB) that names another sender than
    /// the node whose link it came on, or that no database node sent.
    WrongLink,
    /// The warrant does not verify or is out of order (replay, equivocation, gap too large).
    Warrant(VerifyError),
    /// A NEW-VIEW that is not valid (crate::view::Invalid says why).
    InvalidNewView,
    /// A peer's COMMIT for a slot above the high watermark of its CHECKPOINTs so far.
    AboveWatermark,
    /// A recovery state that does not check out (crate::core::Unusable says why).
    InvalidRecoveryState(Unusable),
    /// An EPOCH-CLOSE from no replica of the epoch, or with a bad signature.
    BadEpochClose,
    /// A FETCH-COMMITS no correct peer sends ([`fetch_is_sound`]).
    BadFetch,
    /// A peer's COMMIT for a slot [`AGREEMENT_HORIZON`] or more beyond our history, where no
    /// agreement is open.
    BeyondHorizon,
}

/// Why a recovering replica cannot use a peer's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// Not f+1 CHECKPOINTs of every group for the book carried.
    Checkpoint,
    /// The proposal at the stable slot, with the witness, does not hash to the checkpoint's
    /// running digest, or its warrant or its view's NEW-VIEW does not verify.
    Proposal,
}

/// A message a group member warranted for its peers.
#[derive(Clone)]
enum FromPeer {
    Commit(Commit),
    ViewChange(ViewChange),
    Checkpoint(Checkpoint),
}

struct Agreement {
    proposal: MessageDigest,
    prefix: MessageDigest,
    /// Our executions once the slot was processed here (shared with the decision log's record).
    executions: Option<Arc<Vec<Execution>>>,
    /// The PREPARE, carried in our COMMIT (none for a NEW-VIEW slot).
    prepare: Option<Arc<Prepare>>,
    /// Each member's COMMIT for the slot (proposal and prefix), its latest in its warrant
    /// order, ours included: a COMMIT for something else that came first (a Byzantine peer's)
    /// must not cost a correct peer's matching one its vote.
    votes: BTreeMap<NodeId, (MessageDigest, MessageDigest)>,
    accepted: bool,
    /// Tick at which we started on it, or last asked peers for their COMMITs.
    asked: u64,
}

impl Agreement {
    /// An agreement on `slot` opened at tick `now`, for `proposal` with `prefix` until our
    /// own PREPARE says what the slot holds.
    fn open(proposal: MessageDigest, prefix: MessageDigest, now: u64) -> Self {
        Agreement {
            proposal,
            prefix,
            executions: None,
            prepare: None,
            votes: BTreeMap::new(),
            accepted: false,
            asked: now,
        }
    }

    /// Members whose COMMIT is for what this agreement holds.
    fn matching(&self) -> usize {
        let ours = (self.proposal, self.prefix);
        self.votes.values().filter(|&&v| v == ours).count()
    }
}

struct Awaiting {
    /// The slot it was decided at (a checkpoint waits for its results).
    slot: u64,
    execution: Execution,
    /// Each database node's result, as an index into `results`: its first one counts.
    votes: BTreeMap<NodeId, usize>,
    /// The distinct results, compared by value (at most one per database node): hashing each
    /// one cost more than comparing a few short byte strings.
    results: Vec<Vec<u8>>,
    replied: bool,
    /// Tick at which the COMMIT-DB was last sent.
    sent: u64,
    /// How often it was re-sent: each re-send waits twice as long as the one before.
    resends: u32,
}

/// A client's request that reached us directly and is not ordered yet.
struct Waiting {
    request: Request,
    /// Tick at which its timer started (restarted when we enter a new view).
    since: u64,
    /// Whether we forwarded it to our view's primary already.
    forwarded: bool,
}

/// What our USIG is warranting now.
enum Warranting {
    Commit {
        slot: u64,
        proposal: MessageDigest,
        prefix: MessageDigest,
        prepare: Option<Arc<Prepare>>,
    },
    ViewChange {
        next_view: View,
        body: ViewChangeBody,
    },
    Checkpoint {
        point: Point,
        anchors: Vec<Anchor>,
        followed: Vec<NodeId>,
    },
    Join,
}

/// A restarted replica on its way back (docs/protocol.md, "Replica recovery").
struct Recovering {
    /// Our JOIN, once warranted.
    join: Option<Join>,
    /// Tick at which we last sent it and asked our peers for their state.
    asked: u64,
}

/// What a recovering peer needs to follow the primary from a checkpoint slot: the proposal
/// that filled it, the running digest before it, and the NEW-VIEW of its view.
struct Witness {
    before: MessageDigest,
    at: Proposal,
    base: Option<Vec<u8>>,
}

/// Where this replica's history stands: the NEW-VIEW it last accepted (the history starts with
/// that view's cut) and the PREPAREs of the view since.
struct History {
    /// The encoded NEW-VIEW, none in view 0.
    base: Option<Vec<u8>>,
    /// The NEW-VIEW's slot and warrant counter (0 and 0 in view 0): the view's PREPARE with
    /// counter c takes slot `base_slot + c - base_counter`.
    base_slot: u64,
    base_counter: u64,
    /// The view's PREPAREs since `base`, shared with their agreements and our COMMITs.
    since_base: Vec<Arc<Prepare>>,
    /// Running digest of slots `1..next_slot`.
    chain: MessageDigest,
    next_slot: u64,
    /// The view and NEW-VIEW this history is of (our CHECKPOINTs name it).
    lineage: Lineage,
}

/// Decided executions kept for database nodes that have not answered yet (a lagging node
/// catches up from them); older ones are left to state transfer.
const KEEP_DECIDED: usize = 4096;
/// Our COMMITs kept for peers that lost them.
const KEEP_COMMITS: usize = 4096;
/// Peers' COMMITs of a view we have not entered yet, kept until we do.
const KEEP_FUTURE: usize = 4096;
/// How far beyond our history a peer's COMMIT may open an agreement: 1,024 slots, eight
/// checkpoint intervals. A correct peer COMMITs at most two intervals beyond its own CHECKPOINTs
/// (the high watermark), and a replica further behind than this is past what fetching repairs
/// anyway (an ordered verifier holds 1,024 counters): it catches up by state transfer.
pub const AGREEMENT_HORIZON: u64 = 8 * CHECKPOINT_INTERVAL;
/// How far past the later of its stable checkpoint and its view's NEW-VIEW slot a replica
/// processes its primary's PREPAREs: 512 slots, four checkpoint intervals. It COMMITs none
/// beyond [`VIEW_CHANGE_SPAN`] (one interval) anyway, and a correct primary, paced by the
/// groups' decisions, runs at most a few batches per group past what they decided; so only a
/// faulty primary's flood reaches this far. Its later PREPAREs are refused unprocessed and
/// fetched once the stable checkpoint moves, so the history it makes a replica keep is bounded
/// (docs/protocol.md, "Bounded VIEW-CHANGEs").
pub const PREPARE_HORIZON: u64 = 4 * CHECKPOINT_INTERVAL;
/// Ticks without progress before we ask again for COMMITs or re-send a COMMIT-DB: under load
/// an agreement or an execution legitimately takes a few ticks, and asking every tick would
/// multiply the work of the very nodes that are behind.
const RETRY_TICKS: u64 = 4;

/// The most counters one fetch asks a candidate or a peer for (a candidate answers at most 256
/// PREPAREs; an ordered verifier holds 1,024 counters).
const FETCH_BATCH: u64 = 256;
/// The most slots one FETCH-COMMITS is answered for, its lowest: one per slot within
/// [`AGREEMENT_HORIZON`]. A correct replica asks for its agreements short of f+1, lowest first,
/// and one further behind than the horizon catches up by state transfer instead; if it still
/// asks for more, the rest are asked for again [`RETRY_TICKS`] later, once the lowest are
/// decided.
pub const MAX_FETCHED_SLOTS: usize = AGREEMENT_HORIZON as usize;
/// The counters after the last we have that a quiet primary is asked for while a peer's gap
/// stays open ([`ReplicaCore::probe_primary`]): a lost tail of its sequence is a PREPARE or
/// two, and the probe must stay small where nothing was lost.
const PROBE_BATCH: u64 = 8;
/// A COMMIT-DB is re-sent after `RETRY_TICKS << min(resends, MAX_BACKOFF)` ticks: a database
/// node that is merely busy answers the first COMMIT-DB, and re-sending everything in flight
/// every few ticks would bury it in duplicates.
const MAX_BACKOFF: u32 = 5;
/// The request timer doubles with each consecutive view change, up to this many times.
const MAX_TIMER_DOUBLING: u32 = 6;
/// Ticks between a recovering replica's re-sent JOINs and requests for state.
const RECOVERY_RETRY_TICKS: u64 = 10;
/// Ticks without progress, while f+1 members of our group report CHECKPOINTs two intervals
/// ahead of us, after which we start over like a restarted replica: we are too far behind to
/// catch up by fetching (beyond the verifier window or what the primary keeps).
const BEHIND_TICKS: u64 = 40;

/// What a replica keeps of its history ([`ReplicaCore::retained`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retained {
    /// PREPAREs of the history after the stable checkpoint.
    pub prepares: usize,
    /// Warranted messages its VIEW-CHANGE would list.
    pub log: usize,
    /// Slots decided and remembered.
    pub decided: usize,
    /// Checkpoint snapshots, vote points and own CHECKPOINTs.
    pub checkpoints: usize,
    /// The stable checkpoint's slot.
    pub stable: u64,
}

/// A group replica's state.
pub struct ReplicaCore {
    cluster: Arc<Cluster>,
    rule: Arc<dyn PartitionRule>,
    renderer: Arc<dyn Renderer>,
    key: SigningKey,
    me: NodeId,
    group: GroupId,
    view: View,
    /// The view we sent our VIEW-CHANGE for, until its NEW-VIEW; we take part in no view meanwhile.
    changing_to: Option<View>,
    /// Tick at which we sent it.
    changing_since: u64,
    /// View changes since a request was last ordered: the request timer doubles with each.
    consecutive_changes: u32,
    /// Ticks a request may wait to be ordered before we ask for a view change.
    timeout: u64,
    /// The candidates' proposals in counter order, each with its digest (taken with the
    /// warrant's, from one encoding).
    primaries: OrderedVerifier<(Proposal, MessageDigest)>,
    peers: OrderedVerifier<FromPeer>,
    checker: Checker,
    book: OrderBook,
    history: History,
    /// Slots decided here and what was at them: a new view's cut re-decides only the others.
    decided: BTreeMap<u64, MessageDigest>,
    agreements: BTreeMap<u64, Agreement>,
    /// Agreements that got a vote or our executions since [`ReplicaCore::try_accept_all`] last
    /// looked (with repeats; its capacity is reused): only these can have become acceptable.
    /// Looking at every open agreement on every message cost each message as many steps as a
    /// Byzantine peer kept agreements open.
    touched: Vec<u64>,
    to_warrant: VecDeque<u64>,
    /// What our COMMITs still queued in `to_warrant` say, for slots decided before we got to
    /// them: those COMMITs still go out. A peer may have missed one of the f+1 COMMITs that
    /// decided the slot here, and if that COMMIT's sender then crashed, ours is the only one it
    /// can still get (cleared with `to_warrant`).
    decided_unwarranted: BTreeMap<u64, (MessageDigest, MessageDigest, Option<Arc<Prepare>>)>,
    /// Our VIEW-CHANGE, to warrant once the USIG is free.
    view_change_due: Option<View>,
    /// What our USIG is warranting. Kept here, not looked up in `agreements`: the agreement may
    /// be decided (by f+1 peers) while the warrant is made, and the COMMIT must still go out, or
    /// peers would wait forever for its counter.
    warranting: Option<Warranting>,
    /// Every message we warranted since our CHECKPOINT an interval below the stable one (or
    /// since the first), for our VIEW-CHANGEs.
    log: Vec<Warranted>,
    /// Where `log` starts: the warrant counter of its first entry when that is a proven anchor,
    /// with the f+1 CHECKPOINTs that report it (0 and none while it starts at our first warrant).
    log_start: (u64, Vec<Checkpoint>),
    checkpoints: Checkpoints,
    /// Our CHECKPOINTs to warrant (before any COMMIT: the high watermark may wait for them).
    checkpoint_due: VecDeque<Point>,
    awaiting: BTreeMap<u64, Awaiting>,
    /// Decided executions without f+1 matching results yet, by slot.
    unreplied: BTreeMap<u64, usize>,
    /// The slots (by order) of the executions a new view's cut left to decide with its
    /// NEW-VIEW slot: checkpoints at or above them wait for that decision.
    cut_slots: BTreeMap<u64, u64>,
    replies: BTreeMap<ClientId, Reply>,
    /// Our warranted messages by warrant counter, and our COMMITs' counters by slot.
    sent: BTreeMap<u64, FromPeer>,
    sent_for: BTreeMap<u64, u64>,
    /// Client requests that reached us and are not ordered yet.
    waiting: BTreeMap<ClientId, Waiting>,
    /// The client batch roots already checked, on arrival and in PREPAREs (docs/protocol.md,
    /// "Batch-signed REQUESTs").
    roots: RootCache,
    /// The highest view we asked to move to.
    requested: View,
    /// A view whose primary spent a counter of our history on something other than the view's
    /// next PREPARE (a correct one never does): we take none of its PREPAREs from there on, so
    /// that our history has no null slot and our VIEW-CHANGE shows every slot after its
    /// checkpoint, and we ask for the next view.
    refused_view: Option<View>,
    /// How often that happened.
    refused_primaries: u64,
    /// REQ-VIEW-CHANGEs: for each view, who asked, by group.
    asked: BTreeMap<View, BTreeMap<GroupId, BTreeSet<NodeId>>>,
    /// Peers whose VIEW-CHANGE we processed: their later COMMITs of earlier views are ignored.
    left: BTreeMap<NodeId, View>,
    /// Peers' COMMITs of views we have not entered yet.
    future: Vec<Commit>,
    /// Timer ticks so far.
    ticks: u64,
    /// See [`ReplicaCore::take_refusals`].
    refusals: Vec<Reject>,
    /// Set while we recover after a restart: we take part in nothing until we installed a
    /// peer's stable state that covers our JOIN.
    recovering: Option<Recovering>,
    /// For checkpoint slots from the stable one on, what a recovering peer needs.
    witnesses: BTreeMap<u64, Witness>,
    /// A rejoined peer's messages released by its JOIN, to process after the PREPARE.
    released: Vec<Delivered<FromPeer>>,
    /// Candidates' proposals released by the ordered verifier and not processed yet, in counter
    /// order; `delivering` while a call works through them (see [`ReplicaCore::on_proposal`]).
    proposals_due: VecDeque<Delivered<(Proposal, MessageDigest)>>,
    delivering: bool,
    /// The highest CHECKPOINT slot each member of our group warranted, as far as we saw (their
    /// warrants checked on their own, whatever our ordered verifiers hold back).
    ahead: BTreeMap<NodeId, u64>,
    /// Our latest CHECKPOINT's slot at the tick it last moved.
    progress: (u64, u64),
    /// The warrant in flight when we started over is not ours any more: drop it, then JOIN.
    discard_warrant: bool,
    /// Peer states installed so far (see [`ReplicaCore::recoveries`]).
    recoveries: u64,
    /// When we last sent each recovering member our state: at most once per retry interval,
    /// so a Byzantine member cannot make us send it at will.
    answered: BTreeMap<NodeId, u64>,
    /// Our last fetch from each candidate or peer: when, and the last counter it asked for.
    fetched: BTreeMap<UsigId, (u64, u64)>,
    /// The tick at which a candidate's proposal last reached us (see
    /// [`ReplicaCore::probe_primary`]).
    proposal_heard: u64,
    /// The end of our history we signed an EPOCH-CLOSE for, once the epoch's last PREPARE is
    /// ordered (a new view's cut may end it again later, with its NEW-VIEW slot).
    closed_at: Option<u64>,
    /// Our latest EPOCH-CLOSE and the tick we last sent it: re-sent until the operator asks for
    /// our position (it then holds the certificate).
    own_close: Option<(EpochClose, u64)>,
    /// The latest EPOCH-CLOSE of every replica of the epoch.
    closes: BTreeMap<NodeId, EpochClose>,
    /// The order book digest that f+1 matching EPOCH-CLOSEs of every group name, once they
    /// arrived.
    certificate: Option<MessageDigest>,
    /// Our book at each end of history we signed an EPOCH-CLOSE for, by its digest.
    closing_books: BTreeMap<MessageDigest, Vec<u8>>,
    /// We told the operator where our USIG sequence stands: we warrant nothing more.
    frozen: bool,
    /// The RECONFIGURE that ended the epoch in our history, and the next configuration's shape.
    reconfiguration: Option<(proto::Reconfigure, proto::config::ClusterConfig)>,
}

impl ReplicaCore {
    /// A replica `me` of `cluster`, in view 0, asking for a view change when a request it holds
    /// waits `timeout` ticks.
    pub fn new(
        cluster: Arc<Cluster>,
        rule: Arc<dyn PartitionRule>,
        renderer: Arc<dyn Renderer>,
        key: SigningKey,
        me: NodeId,
        timeout: u64,
    ) -> Option<Self> {
        let group = GroupId(cluster.config.replicas.iter().find(|r| r.id == me.0)?.group);
        let directory = cluster.directory.clone();
        let checkpoints = Checkpoints::new(cluster.clone(), me, group);
        let mut primaries = OrderedVerifier::new(directory.clone(), DEFAULT_WINDOW);
        let mut peers = OrderedVerifier::new(directory, DEFAULT_WINDOW);
        // Configured epochs are the only ones followed (docs/protocol.md, "Replica recovery").
        for p in &cluster.config.primaries {
            pin_start(&cluster, &mut primaries, NodeId(p.id));
        }
        for r in cluster.members(group) {
            pin_start(&cluster, &mut peers, NodeId(r.id));
        }
        Some(ReplicaCore {
            book: OrderBook::new(&cluster),
            history: History {
                base: None,
                base_slot: 0,
                base_counter: genesis_counter(&cluster),
                since_base: Vec::new(),
                chain: chain_start(cluster.epoch()),
                next_slot: 1,
                lineage: Lineage::GENESIS,
            },
            checker: Checker::new(cluster.clone()),
            cluster,
            rule,
            renderer,
            key,
            me,
            group,
            view: View(0),
            changing_to: None,
            changing_since: 0,
            consecutive_changes: 0,
            timeout: timeout.max(1),
            primaries,
            peers,
            decided: BTreeMap::new(),
            agreements: BTreeMap::new(),
            touched: Vec::new(),
            to_warrant: VecDeque::new(),
            decided_unwarranted: BTreeMap::new(),
            view_change_due: None,
            warranting: None,
            log: Vec::new(),
            log_start: (0, Vec::new()),
            checkpoints,
            checkpoint_due: VecDeque::new(),
            awaiting: BTreeMap::new(),
            unreplied: BTreeMap::new(),
            cut_slots: BTreeMap::new(),
            replies: BTreeMap::new(),
            sent: BTreeMap::new(),
            sent_for: BTreeMap::new(),
            waiting: BTreeMap::new(),
            roots: RootCache::default(),
            requested: View(0),
            refused_view: None,
            refused_primaries: 0,
            asked: BTreeMap::new(),
            left: BTreeMap::new(),
            future: Vec::new(),
            ticks: 0,
            refusals: Vec::new(),
            recovering: None,
            witnesses: BTreeMap::new(),
            released: Vec::new(),
            proposals_due: VecDeque::new(),
            delivering: false,
            ahead: BTreeMap::new(),
            progress: (0, 0),
            discard_warrant: false,
            recoveries: 0,
            answered: BTreeMap::new(),
            fetched: BTreeMap::new(),
            proposal_heard: 0,
            closed_at: None,
            own_close: None,
            closes: BTreeMap::new(),
            certificate: None,
            closing_books: BTreeMap::new(),
            frozen: false,
            reconfiguration: None,
        })
    }

    /// We are too far behind our group to catch up: start over with an empty state and
    /// recover like a restarted replica (JOIN, then a peer's stable state). What we warranted
    /// so far is given up, as after a crash.
    fn start_over(&mut self) -> Vec<Action> {
        let fresh = ReplicaCore::new(
            self.cluster.clone(),
            self.rule.clone(),
            self.renderer.clone(),
            SigningKey::from_seed(*self.key.seed()),
            self.me,
            self.timeout,
        );
        let Some(mut fresh) = fresh else {
            return Vec::new();
        };
        tracing::warn!(
            id = self.me.0,
            next_slot = self.history.next_slot,
            "too far behind the group to catch up: starting over (JOIN, then a peer's state)"
        );
        fresh.ticks = self.ticks;
        fresh.recoveries = self.recoveries;
        let in_flight = self.warranting.is_some();
        *self = fresh;
        if in_flight {
            self.discard_warrant = true;
            self.recovering = Some(Recovering {
                join: None,
                asked: self.ticks,
            });
            return Vec::new();
        }
        self.recover()
    }

    /// Whether f+1 members of our group warranted CHECKPOINTs two intervals beyond our own
    /// latest one (we are not deciding: our history may have caught up while our peers'
    /// COMMITs never can) and ours has not moved for [`BEHIND_TICKS`].
    fn far_behind(&mut self) -> bool {
        let ours = self.checkpoints.own_highest();
        if ours != self.progress.0 {
            self.progress = (ours, self.ticks);
            return false;
        }
        let ahead = self
            .ahead
            .values()
            .filter(|&&slot| slot >= ours + 2 * CHECKPOINT_INTERVAL)
            .count();
        ahead > self.f() && self.ticks - self.progress.1 >= BEHIND_TICKS
    }

    /// Starts recovering after a restart: we forgot what we warranted, so we warrant a JOIN
    /// and take part in nothing until a peer's stable state covers it.
    pub fn recover(&mut self) -> Vec<Action> {
        self.recovering = Some(Recovering {
            join: None,
            asked: self.ticks,
        });
        self.warranting = Some(Warranting::Join);
        vec![Action::Warrant {
            bytes: Join::warranted_bytes(self.me, self.cluster.epoch()),
        }]
    }

    /// True while recovering after a restart.
    pub fn is_recovering(&self) -> bool {
        self.recovering.is_some()
    }

    /// How often this replica installed a peer's state (after a restart, or after it fell too
    /// far behind).
    pub fn recoveries(&self) -> u64 {
        self.recoveries
    }

    /// How often this replica refused its view's primary for warranting something other than
    /// the view's next PREPARE (a correct primary never does).
    pub fn refused_primaries(&self) -> u64 {
        self.refused_primaries
    }

    /// The primary this replica follows (its current view's).
    pub fn primary(&self) -> NodeId {
        primary_of(&self.cluster, self.view)
    }

    /// The view this replica is in.
    pub fn view(&self) -> View {
        self.view
    }

    /// Peers of the group whose messages we hold out of order behind a missing counter.
    pub fn commit_gaps(&self) -> usize {
        self.cluster
            .members(self.group)
            .filter(|r| r.id != self.me.0)
            .filter_map(|r| self.cluster.usig_of(NodeId(r.id)))
            .filter(|&usig| self.peers.missing(usig).is_some())
            .count()
    }

    /// Agreements not yet decided: zero once the cluster is idle (anything else would be
    /// fetched again on every retry and kept forever).
    pub fn open_agreements(&self) -> usize {
        self.agreements.len()
    }

    /// The slot of the latest stable checkpoint (decisions up to it may leave the disk).
    pub fn stable(&self) -> u64 {
        self.checkpoints.stable().slot
    }

    /// How much history this replica keeps: bounded by a few checkpoint intervals once
    /// checkpoints become stable, however long it runs.
    pub fn retained(&self) -> Retained {
        Retained {
            prepares: self.history.since_base.len(),
            log: self.log.len(),
            decided: self.decided.len(),
            checkpoints: self.checkpoints.retained(),
            stable: self.stable(),
        }
    }

    /// The group this replica belongs to.
    pub fn group(&self) -> GroupId {
        self.group
    }

    fn f(&self) -> usize {
        self.cluster.config.f
    }

    /// A PREPARE or NEW-VIEW from a primary candidate (or a PREPARE carried by a peer's COMMIT).
    /// Each candidate's messages are processed in its counter order, whatever their view.
    pub fn on_proposal(&mut self, proposal: Proposal) -> Result<Vec<Action>, Reject> {
        // A recovering replica does not know where the candidates' sequences stand yet.
        if self.recovering.is_some() {
            return Ok(Vec::new());
        }
        let sender = proposal.primary();
        if !self
            .cluster
            .config
            .primaries
            .iter()
            .any(|p| p.id == sender.0)
        {
            return Err(Reject::WrongView);
        }
        // Before the warrant is looked at: a message of an earlier configuration epoch (whose
        // USIG epochs and counters started over) must not reach the ordered verifier.
        if proposal.config_epoch() != self.cluster.epoch() {
            return Err(Reject::WrongEpoch);
        }
        let usig = self.usig(sender)?;
        self.bound_primaries();
        let (warranted, digest) = proposal.digests();
        let ui = proposal.ui().clone();
        let delivered = match self
            .primaries
            .offer(usig, warranted, &ui, (proposal, digest))
        {
            Ok(d) => {
                self.proposal_heard = self.ticks;
                d
            }
            // Processed already, e.g. carried again by a peer's COMMIT.
            Err(VerifyError::Replay { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(Reject::Warrant(e)),
        };
        // Strictly in counter order, also when processing one of them offers more: entering a
        // view processes the COMMITs kept for it, whose PREPAREs come back here while the ones
        // released before them still wait. Those later ones queue behind; processed at once,
        // they would fill the earlier slots as null ones, and our history would part from the
        // group's for good.
        self.proposals_due.extend(delivered);
        let mut actions = Vec::new();
        let mut invalid = false;
        let refused_before = self.refused_view;
        if !std::mem::replace(&mut self.delivering, true) {
            while let Some(d) = self.proposals_due.pop_front() {
                match d.payload {
                    (Proposal::Prepare(p), digest) => self.delivered_prepare(d.counter, p, digest),
                    (Proposal::NewView(nv), _) => match self.delivered_new_view(nv) {
                        Ok(more) => actions.extend(more),
                        Err(_) => invalid = true,
                    },
                }
            }
            self.delivering = false;
        }
        actions.extend(self.fetch_proposals(sender));
        if self.refused_view != refused_before {
            actions.extend(self.request_view(View(self.view.0 + 1)));
        }
        let released = std::mem::take(&mut self.released);
        actions.extend(self.process_peer_messages(released));
        actions.extend(self.next_warrant());
        actions.extend(self.try_accept_all());
        if invalid {
            return Err(Reject::InvalidNewView);
        }
        Ok(actions)
    }

    /// Sets how far the verifier delivers each candidate's proposals: our view's primary's up to
    /// [`PREPARE_HORIZON`] slots past the stable checkpoint or the view's NEW-VIEW slot,
    /// whichever is later. The other candidates', and all while we change view, have no
    /// ceiling: a NEW-VIEW may come at any counter, and nothing is added to our history then.
    fn bound_primaries(&mut self) {
        let h = &self.history;
        let last = self.stable().max(h.base_slot) + PREPARE_HORIZON;
        let ceiling = h.base_counter + (last - h.base_slot);
        let primary = self.changing_to.is_none().then(|| self.primary());
        for candidate in &self.cluster.config.primaries {
            let Some(usig) = self.cluster.usig_of(NodeId(candidate.id)) else {
                continue;
            };
            let bound = (primary == Some(NodeId(candidate.id))).then_some(ceiling);
            self.primaries.set_ceiling(usig, bound);
        }
    }

    /// The fetch of our primary's PREPAREs that were refused beyond [`PREPARE_HORIZON`] and are
    /// within it now that the stable checkpoint moved, if any.
    fn fetch_held_back(&mut self) -> Option<Action> {
        self.bound_primaries();
        self.fetch_proposals(self.primary())
    }

    /// The fetch of what candidate `from`'s sequence misses here, if one is due
    /// ([`Self::fetch`]).
    fn fetch_proposals(&mut self, from: NodeId) -> Option<Action> {
        let usig = self.cluster.usig_of(from)?;
        let counters = self.fetch(usig, self.primaries.missing(usig))?;
        Some(Action::FetchPrepares { from, counters })
    }

    /// A PREPARE in its primary's counter order: ours to order if it is of our view and takes
    /// the next slot of our history.
    fn delivered_prepare(&mut self, counter: u64, prepare: Prepare, digest: MessageDigest) {
        let h = &self.history;
        // After the epoch's last PREPARE nothing is ordered in this epoch.
        if self.changing_to.is_some()
            || self.book.is_closed()
            || prepare.primary != self.primary()
            || counter <= h.base_counter
            || self.refused_view == Some(self.view)
        {
            return;
        }
        // After its NEW-VIEW a correct primary warrants only its view's PREPAREs, until a
        // NEW-VIEW of a later view (which we entered, or we would be changing view). Anything
        // else at a counter of our history (another view's PREPARE here, or a gap left by a
        // NEW-VIEW we did not enter) proves it faulty (docs/protocol.md, "No null slots").
        // A PREPARE over the size limits is refused the same way: a correct primary never makes
        // one, and the COMMITs and VIEW-CHANGEs that carry it could exceed a frame (docs/protocol.md,
        // "Requests too large to carry").
        let slot = h.base_slot + (counter - h.base_counter);
        let within = prepare.within_limits(&self.cluster);
        if prepare.view != self.view || slot != h.next_slot || !within {
            self.refused_view = Some(self.view);
            self.refused_primaries += 1;
            return;
        }
        if slot % CHECKPOINT_INTERVAL == 0 {
            let witness = Witness {
                before: self.history.chain,
                at: Proposal::Prepare(prepare.clone()),
                base: self.history.base.clone(),
            };
            self.witnesses.insert(slot, witness);
        }
        self.history.chain = chain(&self.history.chain, &digest);
        self.history.next_slot = slot + 1;
        let prepare = Arc::new(prepare);
        self.history.since_base.push(Arc::clone(&prepare));
        let prefix = self.history.chain;
        let mine = self.order(&prepare);
        self.passed(slot);
        // Every group agrees on the epoch's last PREPARE, so that a view change keeps it
        // whichever group decided it (docs/protocol.md, "Reconfiguration").
        if mine.is_empty() && !self.book.is_closed() {
            // Peers' COMMITs for a slot without work for our group (a Byzantine peer's) must not
            // leave an agreement open forever: it would hold back our checkpoints.
            self.agreements.remove(&slot);
        } else {
            self.agree(slot, digest, prefix, Some(prepare), mine);
        }
    }

    /// Our history reached `slot` (the order book and running digest are after it).
    fn passed(&mut self, slot: u64) {
        if let Some(stable) =
            self.checkpoints
                .passed(slot, self.history.chain, &self.book, self.history.lineage)
        {
            self.collect_garbage(stable);
        }
    }

    /// Queues our CHECKPOINTs whose slots are decided and executed for our group: no open
    /// agreement up to the slot, and f+1 matching results for every execution decided there.
    fn queue_checkpoints(&mut self) {
        let (agreements, unreplied) = (&self.agreements, &self.unreplied);
        let cut_from = self.cut_slots.values().min().copied();
        let done = |slot: u64| {
            agreements.range(..=slot).next().is_none()
                && unreplied.range(..=slot).next().is_none()
                && cut_from.is_none_or(|from| from > slot)
        };
        while let Some(point) = self.checkpoints.due(done) {
            self.checkpoint_due.push_back(point);
        }
    }

    /// A checkpoint became stable: histories, logs and decisions up to it can go.
    fn collect_garbage(&mut self, stable: u64) {
        let h = &mut self.history;
        let (base_slot, base_counter) = (h.base_slot, h.base_counter);
        h.since_base
            .retain(|p| base_slot + (p.ui.counter - base_counter) > stable);
        self.decided.retain(|&slot, _| slot > stable);
        self.agreements.retain(|&slot, _| slot > stable);
        self.decided_unwarranted.retain(|&slot, _| slot > stable);
        self.unreplied.retain(|&slot, _| slot > stable);
        self.witnesses.retain(|&slot, _| slot >= stable);
        self.vouch_for_stable();
        if let Some((anchor, proof)) = self.checkpoints.anchor() {
            if let Some(start) = self.log.iter().position(|e| e.ui().counter == anchor) {
                self.log.drain(..start);
                self.log_start = (anchor, proof);
            }
        }
    }

    /// The high watermark counts our own CHECKPOINTs: once a checkpoint is stable (by our peers'
    /// votes, a new view's cut or a recovery) above all of ours, we vouch for it with our own
    /// CHECKPOINT, or we could never COMMIT two intervals beyond it. It is committed, so it is
    /// what every correct replica holds there.
    fn vouch_for_stable(&mut self) {
        let stable = self.checkpoints.stable();
        let Some(proof) = &stable.proof else {
            return;
        };
        let queued = self
            .checkpoint_due
            .iter()
            .any(|&(s, _, _, _)| s >= stable.slot);
        if !self.checkpoints.own_at_or_above(stable.slot) && !queued {
            let book = MessageDigest::of(&proof.book);
            let point = (stable.slot, stable.chain, book, stable.lineage());
            self.checkpoint_due.push_back(point);
        }
    }

    /// Orders a PREPARE's entries in the order book, cancels the timers of the requests it
    /// orders, and returns our group's executions.
    fn order(&mut self, prepare: &Prepare) -> Vec<Execution> {
        for join in &prepare.joins {
            if self.book.join(&self.cluster, join) {
                self.rejoined(join);
            }
        }
        let was_closed = self.book.is_closed();
        // A request waiting here was checked when it arrived from its client.
        let waiting = &self.waiting;
        let verified = |r: &Request| waiting.get(&r.client).is_some_and(|w| w.request == *r);
        let ordered = self.book.order(
            &self.cluster,
            self.rule.as_ref(),
            prepare,
            &verified,
            &mut self.roots,
        );
        if !was_closed && self.book.is_closed() && self.reconfiguration.is_none() {
            self.reconfiguration = prepare
                .reconfigure
                .as_ref()
                .and_then(|r| Some(((**r).clone(), r.check(&self.cluster).ok()?)));
        }
        let mut mine = Vec::new();
        for (g, e) in ordered {
            let client = e.request.client;
            if self
                .waiting
                .get(&client)
                .is_some_and(|w| w.request.timestamp <= e.request.timestamp)
            {
                self.waiting.remove(&client);
                self.consecutive_changes = 0;
            }
            if g == self.group {
                mine.push(e);
            }
        }
        mine
    }

    /// A JOIN was ordered: a peer of our group restarted, so we follow its new warrant sequence
    /// from the JOIN on and forget its earlier CHECKPOINTs.
    fn rejoined(&mut self, join: &Join) {
        let peer = join.replica;
        let mate = self.cluster.members(self.group).any(|r| r.id == peer.0);
        let Some(usig) = self
            .cluster
            .usig_of(peer)
            .filter(|_| mate && peer != self.me)
        else {
            return;
        };
        let digest = MessageDigest::of(&join.own_warranted_bytes());
        match self.peers.resume_after(usig, &digest, &join.ui) {
            Ok(released) => self.released.extend(released),
            // Only an incarnation before the one we follow: nothing to do.
            Err(e) => tracing::debug!(peer = peer.0, error = %e, "JOIN behind the peer's sequence"),
        }
        self.checkpoints.rejoined(peer);
        tracing::info!(peer = peer.0, "a peer of our group rejoined");
    }

    /// Opens (or completes) the agreement on a slot with our executions and queues our COMMIT.
    fn agree(
        &mut self,
        slot: u64,
        proposal: MessageDigest,
        prefix: MessageDigest,
        prepare: Option<Arc<Prepare>>,
        executions: Vec<Execution>,
    ) {
        let now = self.ticks;
        let agreement =
            (self.agreements.entry(slot)).or_insert_with(|| Agreement::open(proposal, prefix, now));
        // What we hold is what counts: peers' COMMITs for something else stay, and count
        // for nothing.
        agreement.proposal = proposal;
        agreement.prefix = prefix;
        agreement.prepare = prepare;
        agreement.executions = Some(Arc::new(executions));
        self.touched.push(slot);
        self.to_warrant.push_back(slot);
    }

    /// Starts warranting our VIEW-CHANGE, a CHECKPOINT that is due, or our next COMMIT if the
    /// USIG is free.
    fn next_warrant(&mut self) -> Vec<Action> {
        let closing = self.sign_epoch_close();
        if self.warranting.is_some() || self.recovering.is_some() || self.frozen {
            return closing.into_iter().collect();
        }
        let mut actions: Vec<Action> = closing.into_iter().collect();
        actions.extend(self.next_warrant_now());
        actions
    }

    /// Signs our EPOCH-CLOSE once the epoch's last PREPARE is ordered and our history up to its
    /// end is decided and executed for our group (the checkpoint condition), or again when a
    /// new view's cut ended it later.
    fn sign_epoch_close(&mut self) -> Option<Action> {
        let end = self.history.next_slot - 1;
        if !self.book.is_closed() || self.closed_at == Some(end) || self.recovering.is_some() {
            return None;
        }
        let cut_from = self.cut_slots.values().min().copied();
        let done = self.agreements.range(..=end).next().is_none()
            && self.unreplied.range(..=end).next().is_none()
            && cut_from.is_none_or(|from| from > end);
        if !done {
            return None;
        }
        self.closed_at = Some(end);
        let book = self.book.encode();
        let digest = MessageDigest::of(&book);
        self.closing_books.insert(digest, book);
        let close = EpochClose {
            replica: self.me,
            config_epoch: self.cluster.epoch(),
            view: self.view,
            slot: end,
            chain: self.history.chain,
            book: digest,
            signature: Signature([0; 64]),
        }
        .sign(&self.key);
        tracing::info!(
            id = self.me.0,
            slot = end,
            "configuration epoch ends here: EPOCH-CLOSE signed"
        );
        self.record_close(close.clone());
        self.own_close = Some((close.clone(), self.ticks));
        Some(Action::SendEpochClose(close))
    }

    /// An EPOCH-CLOSE of a replica of the epoch (ours included): kept as its latest, and the
    /// certificate formed once f+1 of every group match.
    pub fn on_epoch_close(&mut self, close: EpochClose) -> Result<Vec<Action>, Reject> {
        let key = self.cluster.node_key(close.replica);
        let replica = self.cluster.group_of_replica(close.replica).is_some();
        if close.config_epoch != self.cluster.epoch()
            || !replica
            || !key.is_some_and(|k| close.verify(k))
        {
            return Err(Reject::BadEpochClose);
        }
        Ok(self.record_close(close).into_iter().collect())
    }

    fn record_close(&mut self, close: EpochClose) -> Option<Action> {
        self.closes.insert(close.replica, close.clone());
        if self.certificate.is_some() {
            return None;
        }
        let matching: Vec<EpochClose> = self
            .closes
            .values()
            .filter(|c| c.point() == close.point())
            .cloned()
            .collect();
        proto::reconfig::certified(&self.cluster, &matching).ok()?;
        tracing::info!(
            id = self.me.0,
            slot = close.slot,
            "configuration epoch closed: f+1 EPOCH-CLOSEs of every group"
        );
        self.certificate = Some(close.book);
        Some(Action::EpochClosed)
    }

    /// The order book our position report carries: the one the certificate names (f+1
    /// matching EPOCH-CLOSEs of every group) if our history ended there, or else the one our
    /// latest EPOCH-CLOSE names. The operator takes a book only if it hashes to the digest of
    /// the certificate it holds, so offering ours before we hold one costs nothing; and we may
    /// never hold one: the operator's certificate can form from EPOCH-CLOSEs we lost, and once
    /// it asks for our position we re-send ours no more, nor do our peers. Until 2026-12-07
    /// only a replica holding the certificate offered the book, and with every correct one
    /// short of it the operator asked for ever (reconfiguration `many_seeds`, seed 11011).
    pub fn closing_book(&self) -> Option<&Vec<u8>> {
        let own = || self.own_close.as_ref().map(|(close, _)| close.book);
        let certified = self.certificate.and_then(|d| self.closing_books.get(&d));
        certified.or_else(|| own().and_then(|d| self.closing_books.get(&d)))
    }

    /// Whether the epoch's last PREPARE is ordered in our history.
    pub fn is_closing(&self) -> bool {
        self.book.is_closed()
    }

    /// The RECONFIGURE that ends the epoch and the next configuration's shape, once we
    /// processed it.
    pub fn reconfiguration(&self) -> Option<&(proto::Reconfigure, proto::config::ClusterConfig)> {
        self.reconfiguration.as_ref()
    }

    /// Stops warranting anything in this epoch: the operator asked where our USIG sequence
    /// stands, and the next epoch continues right after our last warrant. Messages warranted
    /// already still go out. A frozen core still re-sends its decided executions to the
    /// database nodes that have not answered and answers clients from its reply cache: the
    /// driver keeps it for a while after the next epoch started, to finish its epoch's work.
    pub fn freeze(&mut self) {
        self.frozen = true;
        self.to_warrant.clear();
        self.decided_unwarranted.clear();
        self.checkpoint_due.clear();
        self.view_change_due = None;
    }

    /// Whether our USIG is warranting something now (a frozen replica reports its position only
    /// once that warrant is back).
    pub fn warrant_in_flight(&self) -> bool {
        self.warranting.is_some()
    }

    fn next_warrant_now(&mut self) -> Vec<Action> {
        self.queue_checkpoints();
        if let Some(next_view) = self.view_change_due.take() {
            let stable = self.checkpoints.stable();
            let h = &self.history;
            // Named when our stable checkpoint vouches for it, which ends the chain of nested
            // NEW-VIEWs; carried otherwise (docs/protocol.md, "Bounded VIEW-CHANGEs").
            let named = stable.lineage() == h.lineage && stable.slot >= h.base_slot;
            let base = h.base.as_ref().map(|bytes| match named {
                true => Base::Named(h.lineage),
                false => Base::Carried(bytes.clone()),
            });
            // Up to the span: we committed none beyond it.
            let last = stable.slot.saturating_add(VIEW_CHANGE_SPAN);
            let body = ViewChangeBody {
                checkpoint: stable.proof.clone(),
                base,
                prepares: h
                    .since_base
                    .iter()
                    .take_while(|p| h.base_slot + (p.ui.counter - h.base_counter) <= last)
                    .cloned()
                    .collect(),
                log: self.log.clone(),
                anchor_proof: self.log_start.1.clone(),
            };
            let bytes = ViewChange::warranted_bytes(self.me, self.group, next_view, &body.digest());
            self.warranting = Some(Warranting::ViewChange { next_view, body });
            return vec![Action::Warrant { bytes }];
        }
        if let Some(point) = self.checkpoint_due.pop_front() {
            let (slot, chain, book, lineage) = point;
            let anchors = self.checkpoints.anchors_for(slot);
            let followed = self.followed(slot, &lineage);
            let bytes = Checkpoint::warranted_bytes(
                self.me, slot, &chain, &book, &lineage, &anchors, &followed,
            );
            self.warranting = Some(Warranting::Checkpoint {
                point,
                anchors,
                followed,
            });
            return vec![Action::Warrant { bytes }];
        }
        if self.changing_to.is_some() {
            return Vec::new();
        }
        while let Some(&slot) = self.to_warrant.front() {
            // The high watermark: wait for our CHECKPOINT two intervals below; and for a stable
            // checkpoint within the span our VIEW-CHANGE may show.
            if !self.checkpoints.may_commit(slot) || !self.within_span(slot) {
                return Vec::new();
            }
            self.to_warrant.pop_front();
            let (proposal, prefix, prepare) = match self.agreements.get(&slot) {
                Some(a) => (a.proposal, a.prefix, a.prepare.clone()),
                None => match self.decided_unwarranted.remove(&slot) {
                    Some(decided) => decided,
                    None => continue,
                },
            };
            let bytes = Commit::warranted_bytes(self.view, self.me, slot, &proposal, &prefix);
            self.warranting = Some(Warranting::Commit {
                slot,
                proposal,
                prefix,
                prepare,
            });
            return vec![Action::Warrant { bytes }];
        }
        Vec::new()
    }

    /// Whether we may COMMIT `slot`: our view's NEW-VIEW slot, or a PREPARE's within
    /// [`VIEW_CHANGE_SPAN`] of our stable checkpoint. Our VIEW-CHANGE then shows every PREPARE
    /// we committed and leaves out those beyond the span, which a checker would refuse
    /// (docs/protocol.md, "Bounded VIEW-CHANGEs").
    fn within_span(&self, slot: u64) -> bool {
        let stable = self.checkpoints.stable().slot;
        slot <= self.history.base_slot || slot <= stable.saturating_add(VIEW_CHANGE_SPAN)
    }

    /// The candidates our CHECKPOINT at `slot` (of `lineage`) says we followed: those whose
    /// latest PREPARE in the book at `slot` our verifier has delivered, reported only while we
    /// are in that lineage's view and not changing view. Then no valid NEW-VIEW of a later view
    /// came before that proposal in the candidate's counter order, or we would have entered it;
    /// a recovering replica may skip what came before (docs/protocol.md, "Replica recovery").
    fn followed(&self, slot: u64, lineage: &Lineage) -> Vec<NodeId> {
        let Some(book) = self.checkpoints.book_at(slot) else {
            return Vec::new();
        };
        if self.changing_to.is_some() || self.history.lineage != *lineage {
            return Vec::new();
        }
        self.cluster
            .config
            .primaries
            .iter()
            .map(|p| NodeId(p.id))
            .filter(|&p| {
                let Some(latest) = book.latest_prepare(p) else {
                    return false;
                };
                let next = self.usig(p).ok().and_then(|u| self.primaries.expected(u));
                next.is_some_and(|(epoch, next)| (epoch.0, next) > (latest.epoch, latest.counter))
            })
            .collect()
    }

    /// Our USIG warranted the message in flight.
    pub fn warranted(&mut self, ui: UniqueWarrant) -> Vec<Action> {
        if std::mem::take(&mut self.discard_warrant) {
            return self.recover();
        }
        let mut actions = match self.warranting.take() {
            None => return Vec::new(),
            Some(Warranting::Join) => {
                let join = Join {
                    replica: self.me,
                    config_epoch: self.cluster.epoch(),
                    ui,
                };
                if let Some(r) = self.recovering.as_mut() {
                    r.join = Some(join.clone());
                    r.asked = self.ticks;
                }
                return vec![Action::SendJoin(join), Action::RequestRecovery];
            }
            Some(Warranting::Commit {
                slot,
                proposal,
                prefix,
                prepare,
            }) => {
                let commit = Commit {
                    view: self.view,
                    replica: self.me,
                    slot,
                    proposal,
                    prefix,
                    prepare,
                    ui,
                };
                if let Some(agreement) = self.agreements.get_mut(&slot) {
                    agreement.votes.insert(self.me, (proposal, prefix));
                    self.touched.push(slot);
                }
                self.log.push(Warranted::Commit(commit.stub()));
                self.sent_for.insert(slot, commit.ui.counter);
                self.keep_sent(FromPeer::Commit(commit.clone()));
                vec![Action::SendCommit {
                    to: None,
                    commit: Box::new(commit),
                }]
            }
            Some(Warranting::ViewChange { next_view, body }) => {
                let view_change = ViewChange {
                    replica: self.me,
                    group: self.group,
                    next_view,
                    body,
                    ui,
                };
                self.log.push(Warranted::ViewChange {
                    next_view,
                    body: view_change.body.digest(),
                    ui: view_change.ui.clone(),
                });
                self.keep_sent(FromPeer::ViewChange(view_change.clone()));
                vec![Action::SendViewChange {
                    to: None,
                    view_change: Box::new(view_change),
                }]
            }
            Some(Warranting::Checkpoint {
                point: (slot, chain, book, lineage),
                anchors,
                followed,
            }) => {
                let checkpoint = Checkpoint {
                    replica: self.me,
                    slot,
                    chain,
                    book,
                    lineage,
                    anchors,
                    followed,
                    ui,
                };
                self.log.push(Warranted::Checkpoint(checkpoint.clone()));
                self.keep_sent(FromPeer::Checkpoint(checkpoint.clone()));
                if let Some(stable) = self.checkpoints.warranted(&checkpoint) {
                    self.collect_garbage(stable);
                }
                vec![Action::SendCheckpoint {
                    to: None,
                    checkpoint,
                }]
            }
        };
        actions.extend(self.next_warrant());
        actions.extend(self.try_accept_all());
        actions
    }

    fn keep_sent(&mut self, message: FromPeer) {
        let counter = match &message {
            FromPeer::Commit(c) => c.ui.counter,
            FromPeer::ViewChange(vc) => vc.ui.counter,
            FromPeer::Checkpoint(c) => c.ui.counter,
        };
        self.sent.insert(counter, message);
        while self.sent.len() > KEEP_COMMITS {
            if let Some((counter, FromPeer::Commit(old))) = self.sent.pop_first() {
                if self.sent_for.get(&old.slot) == Some(&counter) {
                    self.sent_for.remove(&old.slot);
                }
            }
        }
    }

    /// A COMMIT from a peer.
    pub fn on_commit(&mut self, commit: Commit) -> Result<Vec<Action>, Reject> {
        if commit
            .prepare
            .as_ref()
            .is_some_and(|p| p.config_epoch != self.cluster.epoch())
        {
            return Err(Reject::WrongEpoch);
        }
        let bytes = commit.own_warranted_bytes();
        let (replica, ui) = (commit.replica, commit.ui.clone());
        self.on_peer_message(replica, &bytes, ui, FromPeer::Commit(commit))
    }

    /// A VIEW-CHANGE from a peer of our group (it goes through the same counter order as its
    /// COMMITs, so its later COMMITs of the view it left are recognised and ignored).
    pub fn on_view_change(&mut self, vc: ViewChange) -> Result<Vec<Action>, Reject> {
        if vc.group != self.group {
            return Err(Reject::NotMember);
        }
        let bytes = vc.own_warranted_bytes();
        let (replica, ui) = (vc.replica, vc.ui.clone());
        self.on_peer_message(replica, &bytes, ui, FromPeer::ViewChange(vc))
    }

    /// A CHECKPOINT from a replica: from our group in its counter order (it shares the counter
    /// sequence of its COMMITs), from another group checked on its own.
    pub fn on_checkpoint(&mut self, checkpoint: Checkpoint) -> Result<Vec<Action>, Reject> {
        if self.recovering.is_some() {
            return Ok(Vec::new());
        }
        let replica = checkpoint.replica;
        let bytes = checkpoint.own_warranted_bytes();
        if self.cluster.members(self.group).any(|r| r.id == replica.0) {
            self.note_ahead(&checkpoint, &bytes);
            let ui = checkpoint.ui.clone();
            return self.on_peer_message(replica, &bytes, ui, FromPeer::Checkpoint(checkpoint));
        }
        let is_replica = self.cluster.group_of_replica(replica).is_some();
        let usig = self.usig(replica).ok().filter(|_| is_replica);
        let usig = usig.ok_or(Reject::NotMember)?;
        self.cluster
            .directory
            .verify_ui(usig, &bytes, &checkpoint.ui)
            .map_err(Reject::Warrant)?;
        if let Some(stable) = self.checkpoints.vote(checkpoint) {
            self.collect_garbage(stable);
            // COMMITs may be waiting for the span to move, PREPAREs for the horizon.
            let mut actions = self.next_warrant();
            actions.extend(self.fetch_held_back());
            return Ok(actions);
        }
        Ok(Vec::new())
    }

    /// Remembers how far a member of our group is, from a CHECKPOINT whose warrant verifies
    /// (checked here only when it is beyond what we knew of that member).
    fn note_ahead(&mut self, checkpoint: &Checkpoint, bytes: &[u8]) {
        let replica = checkpoint.replica;
        let known = self.ahead.get(&replica).copied().unwrap_or(0);
        if replica == self.me || checkpoint.slot <= known {
            return;
        }
        let warranted = self.cluster.usig_of(replica).is_some_and(|usig| {
            self.cluster
                .directory
                .verify_ui(usig, bytes, &checkpoint.ui)
                .is_ok()
        });
        if warranted {
            self.ahead.insert(replica, checkpoint.slot);
        }
    }

    fn on_peer_message(
        &mut self,
        replica: NodeId,
        bytes: &[u8],
        ui: UniqueWarrant,
        message: FromPeer,
    ) -> Result<Vec<Action>, Reject> {
        if !self.cluster.members(self.group).any(|r| r.id == replica.0) || replica == self.me {
            return Err(Reject::NotMember);
        }
        if self.recovering.is_some() {
            return Ok(Vec::new());
        }
        let sender = self.usig(replica)?;
        let digest = MessageDigest::of(bytes);
        let delivered = self
            .peers
            .offer(sender, digest, &ui, message)
            .map_err(Reject::Warrant)?;
        let mut actions = self.process_peer_messages(delivered);
        actions.extend(self.try_accept_all());
        Ok(actions)
    }

    /// Peers' messages released in their counter order.
    fn process_peer_messages(&mut self, delivered: Vec<Delivered<FromPeer>>) -> Vec<Action> {
        let mut actions = Vec::new();
        // Everything released goes through, even after one is refused (the verifier will not
        // release it again); refusals are counted through `take_refusals`.
        for d in delivered {
            match d.payload {
                // The high watermark as the peer's warrant order shows it.
                FromPeer::Commit(c) if !self.checkpoints.peer_may_commit(c.replica, c.slot) => {
                    self.refusals.push(Reject::AboveWatermark);
                }
                FromPeer::Commit(c) => match self.delivered_commit(c) {
                    Ok(more) => actions.extend(more),
                    Err(reject) => self.refusals.push(reject),
                },
                FromPeer::ViewChange(vc) => {
                    let left = self.left.entry(vc.replica).or_insert(vc.next_view);
                    *left = (*left).max(vc.next_view);
                    actions.extend(self.asked_for(vc.next_view, self.group, vc.replica));
                }
                FromPeer::Checkpoint(c) => {
                    self.checkpoints.delivered(&c);
                    if let Some(stable) = self.checkpoints.vote(c) {
                        self.collect_garbage(stable);
                        actions.extend(self.next_warrant());
                        actions.extend(self.fetch_held_back());
                    }
                }
            }
        }
        actions
    }

    /// Messages refused after their warrant was accepted (a peer's messages released in its
    /// counter order together), for the driver to count.
    pub fn take_refusals(&mut self) -> Vec<Reject> {
        std::mem::take(&mut self.refusals)
    }

    /// A peer's COMMIT in its counter order.
    fn delivered_commit(&mut self, commit: Commit) -> Result<Vec<Action>, Reject> {
        if self
            .left
            .get(&commit.replica)
            .is_some_and(|&v| commit.view < v)
        {
            return Ok(Vec::new());
        }
        if commit.view > self.view || (commit.view == self.view && self.changing_to.is_some()) {
            if self.future.len() < KEEP_FUTURE {
                self.future.push(commit);
            }
            return Ok(Vec::new());
        }
        if commit.view < self.view {
            return Ok(Vec::new());
        }
        let mut actions = Vec::new();
        if let Some(prepare) = &commit.prepare {
            // The PREPARE may reach us first through this COMMIT (MinBFT). Usually we processed
            // it already: then skip verifying its warrant again (the costliest step here).
            let seen = self
                .cluster
                .usig_of(prepare.primary)
                .and_then(|p| self.primaries.expected(p))
                .is_some_and(|(epoch, next)| {
                    prepare.ui.epoch == epoch && prepare.ui.counter < next
                });
            if !seen {
                match self.on_proposal(Proposal::Prepare((**prepare).clone())) {
                    Ok(more) => actions.extend(more),
                    // Beyond our horizon: the PREPARE is fetched once we reach it, and the COMMIT
                    // still counts.
                    Err(Reject::Warrant(
                        VerifyError::Replay { .. } | VerifyError::BeyondCeiling { .. },
                    )) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let slot = commit.slot;
        // A slot we processed has its agreement already, unless it had no work for our group or
        // was decided since: a late COMMIT must not start an agreement that would never
        // complete (and be fetched again forever).
        if slot < self.history.next_slot && !self.agreements.contains_key(&slot) {
            return Ok(actions);
        }
        // A peer's COMMIT opens an agreement only within a horizon of our history: a Byzantine
        // peer whose CHECKPOINT claims a slot far ahead passes the high watermark everywhere,
        // and must not open an agreement per warrant it spends. A correct peer that far ahead
        // leaves us behind for good; we catch up by state transfer (`far_behind`).
        if slot >= self.history.next_slot.saturating_add(AGREEMENT_HORIZON)
            && !self.agreements.contains_key(&slot)
        {
            return Err(Reject::BeyondHorizon);
        }
        let now = self.ticks;
        let agreement = (self.agreements.entry(slot))
            .or_insert_with(|| Agreement::open(commit.proposal, commit.prefix, now));
        (agreement.votes).insert(commit.replica, (commit.proposal, commit.prefix));
        self.touched.push(slot);
        Ok(actions)
    }

    /// Accepts every slot with f+1 matching COMMITs that this replica has processed (of those
    /// touched since the last look).
    fn try_accept_all(&mut self) -> Vec<Action> {
        let quorum = self.f() + 1;
        let mut actions = Vec::new();
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        touched.dedup();
        for slot in touched.drain(..) {
            let Some(agreement) = self.agreements.get_mut(&slot) else {
                continue;
            };
            if agreement.accepted || agreement.matching() < quorum {
                continue;
            }
            if let Some(executions) = &agreement.executions {
                agreement.accepted = true;
                actions.push(Action::Persist {
                    slot,
                    executions: Arc::clone(executions),
                });
                // The primary's pacing hint: decided, whether or not durable yet (it proves
                // nothing, and the log's fsync competes with the databases' for the disk).
                if let Some(p) = &agreement.prepare {
                    actions.push(Action::SendDecided {
                        to: p.primary,
                        decided: Decided {
                            view: p.view,
                            counter: p.ui.counter,
                        },
                    });
                }
            }
        }
        self.touched = touched;
        actions
    }

    /// The decision for `slot` is recorded: send it to the database nodes.
    pub fn persisted(&mut self, slot: u64) -> Vec<Action> {
        let Some(agreement) = self.agreements.remove(&slot) else {
            return Vec::new();
        };
        self.decided.insert(slot, agreement.proposal);
        if self.to_warrant.contains(&slot) {
            let commit = (
                agreement.proposal,
                agreement.prefix,
                agreement.prepare.clone(),
            );
            self.decided_unwarranted.insert(slot, commit);
        }
        let executions = agreement
            .executions
            .map(Arc::unwrap_or_clone)
            .unwrap_or_default();
        if executions.is_empty() {
            return self.next_warrant();
        }
        for e in &executions {
            // A new view's cut decides executions of earlier slots with its NEW-VIEW slot.
            let slot = self.cut_slots.remove(&e.order).unwrap_or(slot);
            *self.unreplied.entry(slot).or_default() += 1;
            self.awaiting.insert(
                e.order,
                Awaiting {
                    slot,
                    execution: e.clone(),
                    votes: BTreeMap::new(),
                    results: Vec::new(),
                    replied: false,
                    sent: self.ticks,
                    resends: 0,
                },
            );
        }
        while self.awaiting.len() > KEEP_DECIDED {
            if let Some((_, old)) = self.awaiting.pop_first() {
                if !old.replied {
                    settle(&mut self.unreplied, old.slot);
                }
            }
        }
        let mut actions = vec![Action::SendCommitDb {
            to: None,
            commit_db: self.commit_db(executions),
        }];
        actions.extend(self.next_warrant());
        actions
    }

    fn commit_db(&self, executions: Vec<Execution>) -> CommitDb {
        CommitDb {
            config_epoch: self.cluster.epoch(),
            group: self.group,
            replica: self.me,
            executions,
        }
    }

    /// Results from a database node, arrived on the authenticated link of node `from`
    /// (REPLY-COMMIT-DBs are not signed: docs/protocol.md, "Authenticated links").
    pub fn on_reply_commit_db(
        &mut self,
        from: NodeId,
        reply: ReplyCommitDb,
    ) -> Result<Vec<Action>, Reject> {
        if !self.sent_by_db_node(from, &reply) {
            return Err(Reject::WrongLink);
        }
        let pages = self.count_results(reply);
        Ok(self.answer(pages))
    }

    /// Several REPLY-COMMIT-DBs with the links they came on, as
    /// [`ReplicaCore::on_reply_commit_db`] takes one, and the REPLYs of the pages they complete
    /// (drivers gather those of a burst of frames, and send the REPLYs for one endpoint in one
    /// frame). Those that name another sender than their link are refused (see
    /// [`ReplicaCore::take_refusals`]).
    pub fn on_reply_commit_dbs(&mut self, replies: Vec<(NodeId, ReplyCommitDb)>) -> Vec<Action> {
        let mut pages = Vec::new();
        for (from, reply) in replies {
            if self.sent_by_db_node(from, &reply) {
                pages.extend(self.count_results(reply));
            } else {
                self.refusals.push(Reject::WrongLink);
            }
        }
        self.answer(pages)
    }

    /// True when `reply` names the node whose link it came on, and that node is a database node.
    fn sent_by_db_node(&self, from: NodeId, reply: &ReplyCommitDb) -> bool {
        from == reply.db_node && self.cluster.config.db_nodes.iter().any(|d| d.id == from.0)
    }

    /// Counts a database node's results; returns the requests and results of the pages that
    /// now have f+1 matching results.
    fn count_results(&mut self, reply: ReplyCommitDb) -> Vec<(RequestBody, Vec<u8>)> {
        let quorum = self.f() + 1;
        let db_nodes = self.cluster.config.db_nodes.len();
        let mut pages = Vec::new();
        for (order, result) in reply.results {
            let Some(awaiting) = self.awaiting.get_mut(&order) else {
                continue;
            };
            let Entry::Vacant(vote) = awaiting.votes.entry(reply.db_node) else {
                continue;
            };
            let index = match awaiting.results.iter().position(|r| *r == result) {
                Some(index) => index,
                None => {
                    awaiting.results.push(result);
                    awaiting.results.len() - 1
                }
            };
            vote.insert(index);
            let agreeing = awaiting.votes.values().filter(|i| **i == index).count();
            if agreeing >= quorum && !awaiting.replied {
                awaiting.replied = true;
                settle(&mut self.unreplied, awaiting.slot);
                pages.push((
                    awaiting.execution.request.clone(),
                    awaiting.results[index].clone(),
                ));
            }
            // Kept until every database node answered, so that a lagging one still gets it.
            if awaiting.votes.len() == db_nodes {
                // Every node answered and no f+1 agreed: nothing more will come.
                if !awaiting.replied {
                    settle(&mut self.unreplied, awaiting.slot);
                }
                self.awaiting.remove(&order);
            }
        }
        pages
    }

    /// REPLYs with these pages (unsigned: the driver sends them on this replica's authenticated
    /// links, docs/protocol.md "REPLYs on authenticated links"), and the next warrant if one
    /// waits.
    fn answer(&mut self, pages: Vec<(RequestBody, Vec<u8>)>) -> Vec<Action> {
        let mut actions: Vec<Action> = pages
            .iter()
            .map(|(request, result)| {
                let reply = self.reply(request, result);
                self.cache_reply(&reply);
                Action::SendReply(reply)
            })
            .collect();
        actions.extend(self.next_warrant());
        actions
    }

    /// The REPLY that carries the page for `request`.
    fn reply(&self, request: &RequestBody, result: &[u8]) -> Reply {
        Reply {
            config_epoch: self.cluster.epoch(),
            view: self.view,
            group: self.group,
            replica: self.me,
            client: request.client,
            timestamp: request.timestamp,
            page: self.renderer.render(request, result),
        }
    }

    /// Keeps `reply` as its client's latest, to send again when the client retransmits.
    fn cache_reply(&mut self, reply: &Reply) {
        let newer = self
            .replies
            .get(&reply.client)
            .is_none_or(|cached| cached.timestamp < reply.timestamp);
        if newer {
            self.replies.insert(reply.client, reply.clone());
        }
    }

    /// A client's request reached us directly: re-send the cached reply if it is a
    /// retransmission; otherwise, if it is valid and not ordered yet, start its timer. Clients
    /// send to the primary themselves, so it is forwarded to the primary only once it has
    /// waited (see [`ReplicaCore::on_tick`]).
    pub fn on_request(&mut self, request: &Request) -> Vec<Action> {
        self.on_requests(std::slice::from_ref(request))
    }

    /// Several requests that reached us directly, as [`ReplicaCore::on_request`] takes one, with
    /// their signatures checked in one batch (drivers gather the requests of a burst of
    /// frames). The verdicts are those of single checks, so which requests arrive together
    /// changes nothing but the cost.
    pub fn on_requests(&mut self, requests: &[Request]) -> Vec<Action> {
        if self.recovering.is_some() {
            return Vec::new();
        }
        let mut actions = Vec::new();
        // The cheap checks first: retransmissions and ordered requests cost no signature check.
        let mut candidates = Vec::new();
        for request in requests {
            if let Some(reply) = self.replies.get(&request.client) {
                if reply.timestamp == request.timestamp {
                    actions.push(Action::SendReply(reply.clone()));
                    continue;
                }
            }
            if self.is_new(request) && request.declares_truthfully(self.rule.as_ref()) {
                candidates.push(request);
            }
        }
        let cluster = &self.cluster;
        let verdicts =
            Request::verify_many(&candidates, |c| cluster.client_key(c), &mut self.roots);
        for (request, valid) in candidates.into_iter().zip(verdicts) {
            // Checked again: two requests of one client may arrive together.
            if valid && self.is_new(request) {
                let waiting = Waiting {
                    request: request.clone(),
                    since: self.ticks,
                    forwarded: false,
                };
                self.waiting.insert(request.client, waiting);
            }
        }
        actions
    }

    /// Not ordered yet, and newer than what waits for this client.
    fn is_new(&self, request: &Request) -> bool {
        self.book.is_newer(request)
            && self
                .waiting
                .get(&request.client)
                .is_none_or(|w| w.request.timestamp < request.timestamp)
    }

    /// A peer asks for messages it lost. What only a faulty peer asks for is refused whole
    /// ([`fetch_is_sound`]), and at most [`MAX_FETCHED_SLOTS`] slots are answered: a peer's
    /// fetch costs us at most `FETCH_BATCH + MAX_FETCHED_SLOTS` messages, not one per entry it
    /// lists.
    pub fn on_fetch_commits(
        &self,
        from: NodeId,
        warrants: Option<RangeInclusive<u64>>,
        slots: &[u64],
    ) -> Result<Vec<Action>, Reject> {
        if !fetch_is_sound(warrants.as_ref(), slots) {
            return Err(Reject::BadFetch);
        }
        let by_warrant = warrants
            .into_iter()
            .flat_map(|range| self.sent.range(range).map(|(_, m)| m));
        let by_slot = (slots.iter().take(MAX_FETCHED_SLOTS))
            .filter_map(|s| self.sent_for.get(s).and_then(|w| self.sent.get(w)));
        Ok(by_warrant
            .chain(by_slot)
            .map(|message| match message {
                FromPeer::Commit(commit) => Action::SendCommit {
                    to: Some(from),
                    commit: Box::new(commit.clone()),
                },
                FromPeer::ViewChange(vc) => Action::SendViewChange {
                    to: Some(from),
                    view_change: Box::new(vc.clone()),
                },
                FromPeer::Checkpoint(c) => Action::SendCheckpoint {
                    to: Some(from),
                    checkpoint: c.clone(),
                },
            })
            .collect())
    }

    /// A REQ-VIEW-CHANGE from a replica (of any group).
    pub fn on_req_view_change(&mut self, req: &ReqViewChange) -> Result<Vec<Action>, Reject> {
        if self.recovering.is_some() {
            return Ok(Vec::new());
        }
        let group = self.cluster.group_of_replica(req.replica);
        let key = self.cluster.node_key(req.replica);
        let (Some(group), Some(key)) = (group, key) else {
            return Err(Reject::BadSignature);
        };
        if !req.verify(key) {
            return Err(Reject::BadSignature);
        }
        Ok(self.asked_for(req.next_view, group, req.replica))
    }

    /// `replica` of `group` asked to move to `next_view`: we move once f+1 members of one group
    /// asked (so f Byzantine replicas cannot force view changes).
    fn asked_for(&mut self, next_view: View, group: GroupId, replica: NodeId) -> Vec<Action> {
        if next_view <= self.view || self.changing_to.is_some_and(|v| v >= next_view) {
            return Vec::new();
        }
        // Requests for views far ahead are not kept: a Byzantine replica could fill memory.
        if next_view.0 > self.view.0 + 64 {
            return Vec::new();
        }
        let askers = self
            .asked
            .entry(next_view)
            .or_default()
            .entry(group)
            .or_default();
        askers.insert(replica);
        if askers.len() > self.f() {
            self.start_view_change(next_view)
        } else {
            Vec::new()
        }
    }

    /// Leaves our view: no more COMMITs in it; our VIEW-CHANGE goes out once the USIG is free.
    fn start_view_change(&mut self, next_view: View) -> Vec<Action> {
        self.changing_to = Some(next_view);
        self.changing_since = self.ticks;
        self.consecutive_changes = self.consecutive_changes.saturating_add(1);
        self.asked.retain(|v, _| *v > next_view);
        self.to_warrant.clear();
        self.decided_unwarranted.clear();
        self.view_change_due = Some(next_view);
        let mut actions = self.request_view(next_view);
        actions.extend(self.next_warrant());
        actions
    }

    /// Asks every replica and candidate to move to `next_view` (once per view).
    fn request_view(&mut self, next_view: View) -> Vec<Action> {
        if next_view <= self.requested {
            return Vec::new();
        }
        self.requested = next_view;
        let req = ReqViewChange {
            replica: self.me,
            next_view,
            signature: Signature([0; 64]),
        }
        .sign(&self.key);
        let mut actions = vec![Action::SendReqViewChange(req)];
        actions.extend(self.asked_for(next_view, self.group, self.me));
        actions
    }

    /// A NEW-VIEW in its primary's counter order: the first valid one of a later view is ours.
    fn delivered_new_view(&mut self, nv: NewView) -> Result<Vec<Action>, Reject> {
        // Not a view before one we sent a VIEW-CHANGE for: that VIEW-CHANGE does not show it.
        if nv.view <= self.view
            || self.changing_to.is_some_and(|v| nv.view < v)
            || nv.primary != primary_of(&self.cluster, nv.view)
        {
            return Ok(Vec::new());
        }
        let cut = self
            .checker
            .new_view(&nv)
            .map_err(|_| Reject::InvalidNewView)?;
        Ok(self.enter(nv, &cut))
    }

    /// Enters the NEW-VIEW's view: re-derives the order book over its cut (from the later of
    /// its stable checkpoint and ours: slots up to a stable checkpoint are committed, the same in
    /// every history), and agrees (with a COMMIT of the NEW-VIEW slot) on our group's executions
    /// of the cut not decided here yet.
    fn enter(&mut self, nv: NewView, cut: &Cut) -> Vec<Action> {
        self.view = nv.view;
        self.changing_to = None;
        self.view_change_due = None;
        self.asked.retain(|v, _| *v > nv.view);
        self.left.retain(|_, v| *v > nv.view);
        self.agreements.clear();
        self.to_warrant.clear();
        self.decided_unwarranted.clear();
        self.sent_for.clear();
        let end = cut.end();
        self.decided.retain(|&slot, _| slot < end);
        if cut.low.slot > self.checkpoints.stable().slot {
            self.checkpoints.install(cut.low.clone());
        }
        // Snapshots of the old history must not become our CHECKPOINTs.
        self.checkpoints.restart();
        self.cut_slots.clear();
        self.vouch_for_stable();
        let start = self.checkpoints.stable().clone();
        self.book = start.book(&self.cluster);
        self.history = History {
            base: Some(nv.encode()),
            base_slot: end,
            base_counter: nv.ui.counter,
            since_base: Vec::new(),
            chain: start.chain,
            next_slot: end + 1,
            lineage: Lineage::of(&nv, end),
        };
        let mut executions = Vec::new();
        for (i, slot) in cut.slots.iter().enumerate() {
            let at = cut.low.slot + i as u64 + 1;
            if at <= start.slot {
                continue;
            }
            let before = self.history.chain;
            self.history.chain = chain(&before, &slot.digest());
            if at == end && at % CHECKPOINT_INTERVAL == 0 {
                let witness = Witness {
                    before,
                    at: Proposal::NewView(nv.clone()),
                    base: None,
                };
                self.witnesses.insert(at, witness);
            }
            if let Slot::Prepare(p) = slot {
                let mine = self.order(p);
                if self.decided.get(&at) != Some(&p.digest()) {
                    self.cut_slots.extend(mine.iter().map(|e| (e.order, at)));
                    executions.extend(mine);
                }
            }
            self.passed(at);
        }
        let now = self.ticks;
        for w in self.waiting.values_mut() {
            w.since = now;
            w.forwarded = false;
        }
        self.agree(end, nv.digest(), self.history.chain, None, executions);
        let future = std::mem::take(&mut self.future);
        let mut actions = Vec::new();
        for commit in future {
            if let Ok(more) = self.delivered_commit(commit) {
                actions.extend(more);
            }
        }
        actions.extend(self.next_warrant());
        actions.extend(self.try_accept_all());
        actions
    }

    /// A recovering member of our group asks for our stable state (its signature checked by the
    /// driver): the stable checkpoint and what follows the primary from it.
    pub fn on_recovery_request(&mut self, from: NodeId) -> Vec<Action> {
        let stable = self.checkpoints.stable();
        let witness = self.witnesses.get(&stable.slot);
        let (Some(proof), Some(w)) = (&stable.proof, witness) else {
            return Vec::new();
        };
        let recent = self
            .answered
            .get(&from)
            .is_some_and(|&at| self.ticks < at + RECOVERY_RETRY_TICKS);
        if self.recovering.is_some() || from == self.me || recent {
            return Vec::new();
        }
        self.answered.insert(from, self.ticks);
        let state = RecoveryState {
            replica: self.me,
            stable: proof.clone(),
            witness: w.before,
            at: w.at.clone(),
            base: w.base.clone(),
            signature: Signature([0; 64]),
        }
        .sign(&self.key);
        vec![Action::SendRecoveryState {
            to: from,
            state: Box::new(state),
        }]
    }

    /// A peer's stable state while we recover. Used once it is a stable checkpoint that covers
    /// our JOIN and tells where to follow every peer from; we then continue from it like any
    /// replica that reached that checkpoint, vouching for it with our own CHECKPOINT.
    pub fn on_recovery_state(&mut self, state: RecoveryState) -> Result<Vec<Action>, Reject> {
        let Some(join) = self.recovering.as_ref().and_then(|r| r.join.clone()) else {
            return Ok(Vec::new());
        };
        let mate = self
            .cluster
            .members(self.group)
            .any(|r| r.id == state.replica.0);
        let key = self.cluster.node_key(state.replica).filter(|_| mate);
        if state.replica == self.me || !key.is_some_and(|k| state.verify(k)) {
            return Err(Reject::BadSignature);
        }
        let unusable = Reject::InvalidRecoveryState;
        let low =
            stable(&self.cluster, &state.stable).map_err(|_| unusable(Unusable::Checkpoint))?;
        let (lineage, base, base_slot, base_counter) = self
            .continue_from(&state, &low)
            .ok_or(unusable(Unusable::Proposal))?;
        let view = lineage.view;
        let book = low.book(&self.cluster);
        // Not covering our JOIN yet, or not proving where every peer stands: a later one will.
        if book.incarnation(self.me) != Some(join.incarnation()) {
            return Ok(Vec::new());
        }
        let Some(anchors) = self.anchors_in(&low, &book) else {
            return Ok(Vec::new());
        };
        let primary = self.usig(state.at.primary())?;
        let digest = MessageDigest::of(&state.at.warranted_bytes());
        self.primaries
            .resume_after(primary, &digest, state.at.ui())
            .map_err(|_| unusable(Unusable::Proposal))?;
        self.follow_candidates(&low, &book, state.at.primary());
        for a in &anchors {
            let resumed = self.usig(a.replica).map(|usig| {
                self.peers
                    .resume_at(usig, Epoch(a.epoch), a.counter, a.chain)
            });
            if let Ok(Err(e)) = resumed {
                tracing::warn!(peer = a.replica.0, error = %e, "cannot follow a peer from its anchor");
            }
        }
        let slot = low.slot;
        self.history = History {
            base,
            base_slot,
            base_counter,
            since_base: Vec::new(),
            chain: low.chain,
            next_slot: slot + 1,
            lineage,
        };
        self.checkpoints.install(low);
        self.vouch_for_stable();
        self.book = book;
        self.view = view;
        self.requested = view;
        self.witnesses.insert(
            slot,
            Witness {
                before: state.witness,
                at: state.at,
                base: state.base,
            },
        );
        self.recovering = None;
        self.recoveries += 1;
        tracing::info!(
            slot,
            view = view.0,
            "recovered from a peer's stable checkpoint"
        );
        Ok(self.next_warrant())
    }

    /// Moves our verifier for every candidate other than `current` (the stable proposal's) to
    /// its latest PREPARE in the stable checkpoint's book, where f+1 CHECKPOINTs of one group in
    /// the certificate say their senders followed it: at least one is correct, so no valid
    /// NEW-VIEW of a view after the checkpoint's came before that PREPARE, and what came before
    /// cannot matter to us. We fetch the candidate's messages from that PREPARE on when its next
    /// one arrives. Without such reports we follow it from where we are, as before
    /// (docs/protocol.md, "Replica recovery").
    fn follow_candidates(&mut self, low: &Low, book: &crate::order::OrderBook, current: NodeId) {
        let Some(proof) = low.proof.as_ref() else {
            return;
        };
        let quorum = self.f() + 1;
        for p in &self.cluster.config.primaries {
            let candidate = NodeId(p.id);
            let (Some(latest), Ok(usig)) = (book.latest_prepare(candidate), self.usig(candidate))
            else {
                continue;
            };
            let vouched = self.cluster.config.groups.iter().any(|g| {
                let reporters: BTreeSet<NodeId> = proof
                    .certificate
                    .iter()
                    .filter(|c| c.followed.contains(&candidate))
                    .filter(|c| self.cluster.group_of_replica(c.replica) == Some(GroupId(g.id)))
                    .map(|c| c.replica)
                    .collect();
                reporters.len() >= quorum
            });
            if candidate == current || !vouched {
                continue;
            }
            let epoch = Epoch(latest.epoch);
            match self
                .primaries
                .resume_at(usig, epoch, latest.counter, latest.chain)
            {
                Ok(_) => tracing::info!(
                    candidate = candidate.0,
                    counter = latest.counter,
                    "following a primary candidate from its latest PREPARE in the checkpoint"
                ),
                // We followed it further already.
                Err(e) => tracing::debug!(candidate = candidate.0, error = %e, "not moved"),
            }
        }
    }

    /// Where the stable checkpoint's CHECKPOINTs of our group put each other member: the anchor
    /// all f+1 of them report (a position correct replicas followed the member through), unless
    /// the member rejoined since.
    fn anchors_in(&self, low: &Low, book: &crate::order::OrderBook) -> Option<Vec<Anchor>> {
        let proof = low.proof.as_ref()?;
        let members: BTreeSet<NodeId> = self
            .cluster
            .members(self.group)
            .map(|r| NodeId(r.id))
            .collect();
        let reporters: Vec<&Checkpoint> = proof
            .certificate
            .iter()
            .filter(|c| members.contains(&c.replica))
            .collect();
        if reporters.len() <= self.f() {
            return None;
        }
        let mut anchors = Vec::new();
        for &member in members.iter().filter(|&&m| m != self.me) {
            let find = |c: &&Checkpoint| c.anchors.iter().find(|a| a.replica == member).copied();
            let first = find(&reporters[0])?;
            if !reporters.iter().all(|c| find(c) == Some(first)) {
                return None;
            }
            let at = proto::Incarnation {
                epoch: first.epoch,
                counter: first.counter,
            };
            if book.incarnation(member).is_some_and(|joined| joined > at) {
                return None;
            }
            anchors.push(first);
        }
        Some(anchors)
    }

    /// Checks the proposal at the stable slot against the checkpoint's running digest, and its
    /// view's NEW-VIEW against the lineage the checkpoint's CHECKPOINTs name; returns that
    /// lineage, the NEW-VIEW, and the NEW-VIEW's slot and counter to continue from.
    fn continue_from(
        &mut self,
        state: &RecoveryState,
        low: &Low,
    ) -> Option<(Lineage, Option<Vec<u8>>, u64, u64)> {
        let at = &state.at;
        let primary = at.primary();
        let warranted = self.cluster.usig_of(primary).is_some_and(|usig| {
            self.cluster
                .directory
                .verify_ui(usig, &at.warranted_bytes(), at.ui())
                .is_ok()
        });
        if chain(&state.witness, &at.digest()) != low.chain
            || !warranted
            || at.config_epoch() != self.cluster.epoch()
            || !in_configured_epoch(&self.cluster, primary, at.ui())
        {
            return None;
        }
        match at {
            Proposal::NewView(nv) => {
                let cut = self.checker.new_view(nv).ok()?;
                let lineage = Lineage::of(nv, cut.end());
                let fits = cut.end() == low.slot && low.lineage() == lineage;
                fits.then(|| (lineage, Some(nv.encode()), low.slot, nv.ui.counter))
            }
            Proposal::Prepare(p) => {
                if p.primary != primary_of(&self.cluster, p.view) {
                    return None;
                }
                let (lineage, base_slot, base_counter) = match &state.base {
                    None if p.view == View(0) => (Lineage::GENESIS, 0, 0),
                    None => return None,
                    Some(bytes) => {
                        let nv = NewView::decode(bytes)?;
                        let cut = self.checker.new_view(&nv).ok()?;
                        if nv.view != p.view {
                            return None;
                        }
                        (Lineage::of(&nv, cut.end()), cut.end(), nv.ui.counter)
                    }
                };
                // The stable checkpoint names the NEW-VIEW its history started with: a second
                // valid one of the view (a Byzantine primary's) is not it.
                let fits = p.ui.counter > base_counter
                    && base_slot + (p.ui.counter - base_counter) == low.slot
                    && low.lineage() == lineage;
                fits.then(|| (lineage, state.base.clone(), base_slot, base_counter))
            }
        }
    }

    /// The request timer, doubled for each consecutive view change.
    fn timer(&self) -> u64 {
        self.timeout << self.consecutive_changes.min(MAX_TIMER_DOUBLING)
    }

    /// A timer tick: ask again for what we miss, re-send decisions to database nodes that
    /// have not answered, and ask for a view change when a request waited too long (or the view
    /// change we are in does not complete).
    pub fn on_tick(&mut self) -> Vec<Action> {
        self.ticks += 1;
        let now = self.ticks;
        if let Some(r) = self.recovering.as_mut() {
            let Some(join) = r
                .join
                .clone()
                .filter(|_| now - r.asked >= RECOVERY_RETRY_TICKS)
            else {
                return Vec::new();
            };
            r.asked = now;
            return vec![Action::SendJoin(join), Action::RequestRecovery];
        }
        // Frozen for the operator, and kept by the driver after the next epoch started: it
        // warrants nothing more, but its epoch's decisions still go to the database nodes that
        // have not answered (nobody else can send them any more: the next epoch's cores start
        // empty), and its reply cache still answers retransmissions.
        if self.frozen {
            return self.resend_commit_dbs(now);
        }
        if self.far_behind() {
            return self.start_over();
        }
        let mut actions = self.next_warrant();
        // Sent once, an EPOCH-CLOSE that the operator (or a peer) lost would never come again:
        // the epoch could not close, and nothing else would replace it (request timers are off
        // once the epoch's last PREPARE is ordered).
        if let Some((close, sent)) = self.own_close.as_mut() {
            if now - *sent >= RECOVERY_RETRY_TICKS {
                *sent = now;
                actions.push(Action::SendEpochClose(close.clone()));
            }
        }
        let timer = self.timer();
        match self.changing_to {
            // Requests that reach us after the epoch's last PREPARE wait for the next epoch:
            // their timers must not ask for view changes.
            None if self.book.is_closed() => {}
            None => {
                let expired = self.waiting.values().any(|w| now - w.since >= timer);
                if expired {
                    actions.extend(self.request_view(View(self.view.0 + 1)));
                }
                // A request still not ordered after a few ticks may never have reached our
                // primary (a client that sent it only to replicas, or one that does not know
                // the view yet): forward it, once per view.
                for w in self.waiting.values_mut() {
                    if !w.forwarded && now - w.since >= RETRY_TICKS {
                        w.forwarded = true;
                        actions.push(Action::ForwardRequest(w.request.clone()));
                    }
                }
            }
            Some(v) if now - self.changing_since >= timer => {
                actions.extend(self.request_view(View(v.0 + 1)));
            }
            Some(_) => {}
        }
        // From every candidate, not only our view's primary: a NEW-VIEW we lost shows as a gap
        // before the new primary's PREPAREs. Within the horizon as it stands now.
        self.bound_primaries();
        let candidates: Vec<NodeId> = (self.cluster.config.primaries.iter())
            .map(|c| NodeId(c.id))
            .collect();
        for from in candidates {
            actions.extend(self.fetch_proposals(from));
        }
        actions.extend(self.probe_primary(now));
        // Agreements on slots we processed: one that only peers' COMMITs opened waits for the
        // PREPARE (fetched from the primary above), and asking peers for more COMMITs there
        // would only repeat a Byzantine peer's made-up slots to everyone.
        let mut short = Vec::new();
        for (&slot, agreement) in self.agreements.range_mut(..self.history.next_slot) {
            if !agreement.accepted && now - agreement.asked >= RETRY_TICKS {
                agreement.asked = now;
                short.push(slot);
            }
        }
        let peers: Vec<NodeId> = self
            .cluster
            .members(self.group)
            .map(|r| NodeId(r.id))
            .filter(|&id| id != self.me)
            .collect();
        for from in peers {
            let warrants = (self.cluster.usig_of(from))
                .and_then(|usig| self.fetch(usig, self.peers.missing(usig)));
            if warrants.is_some() || !short.is_empty() {
                actions.push(Action::FetchCommits {
                    from,
                    warrants,
                    slots: short.clone(),
                });
            }
        }
        actions.extend(self.resend_commit_dbs(now));
        actions
    }

    /// The part of `gap` to fetch from `usig` now, if any: at most [`FETCH_BATCH`] counters, and
    /// only once the last fetch from it was delivered or went [`RETRY_TICKS`] unanswered. Asking
    /// again on every message while a gap remained made each answer's messages ask for the whole
    /// gap again: a rejoined replica refused 3,873 duplicates in 10 s and took seconds to follow
    /// its view's primary (docs/operations.md, "Network partitions and slow links").
    fn fetch(
        &mut self,
        usig: UsigId,
        gap: Option<RangeInclusive<u64>>,
    ) -> Option<RangeInclusive<u64>> {
        let gap = gap?;
        let start = *gap.start();
        if let Some(&(at, last)) = self.fetched.get(&usig) {
            if start <= last && self.ticks < at + RETRY_TICKS {
                return None;
            }
        }
        let end = (*gap.end()).min(start.saturating_add(FETCH_BATCH - 1));
        self.fetched.insert(usig, (self.ticks, end));
        Some(start..=end)
    }

    /// Asks a quiet primary for what follows the last proposal we have, while a peer's gap
    /// stays open. A PREPARE that starts no agreement here (only JOINs, or only other groups'
    /// work) is carried by no peer's COMMIT, so a lost one shows only as a gap before the
    /// primary's next PREPARE. If it held a restarted peer's JOIN, we go on waiting for the
    /// counters that peer's crash lost, and in an idle cluster no next PREPARE comes. Under
    /// load the primary is never quiet for [`RETRY_TICKS`] and nothing is asked; a probe asks
    /// for at most [`PROBE_BATCH`] counters, at most once per [`RETRY_TICKS`]
    /// (docs/protocol.md, "Replica recovery").
    fn probe_primary(&mut self, now: u64) -> Option<Action> {
        let quiet = now - self.proposal_heard >= RETRY_TICKS;
        if self.changing_to.is_some() || !quiet || self.commit_gaps() == 0 {
            return None;
        }
        let from = self.primary();
        let usig = self.cluster.usig_of(from)?;
        // A gap known in the primary's own sequence is fetched by the loop above.
        if self.primaries.missing(usig).is_some() {
            return None;
        }
        let (_, next) = self.primaries.expected(usig)?;
        let counters = self.fetch(usig, Some(next..=next + PROBE_BATCH - 1))?;
        Some(Action::FetchPrepares { from, counters })
    }

    /// Re-sends decisions to the database nodes that have not answered, with backoff.
    fn resend_commit_dbs(&mut self, now: u64) -> Vec<Action> {
        let mut actions = Vec::new();
        let stale: Vec<u64> = self
            .awaiting
            .iter()
            .filter(|(_, a)| now - a.sent >= RETRY_TICKS << a.resends.min(MAX_BACKOFF))
            .map(|(&order, _)| order)
            .collect();
        for db in self.cluster.config.db_nodes.iter().map(|d| NodeId(d.id)) {
            let missing: Vec<Execution> = stale
                .iter()
                .filter_map(|order| self.awaiting.get(order))
                .filter(|a| !a.votes.contains_key(&db))
                .map(|a| a.execution.clone())
                .collect();
            if !missing.is_empty() {
                actions.push(Action::SendCommitDb {
                    to: Some(db),
                    commit_db: self.commit_db(missing),
                });
            }
        }
        for order in stale {
            if let Some(a) = self.awaiting.get_mut(&order) {
                a.sent = now;
                a.resends += 1;
            }
        }
        actions
    }

    fn usig(&self, node: NodeId) -> Result<UsigId, Reject> {
        self.cluster.usig_of(node).ok_or(Reject::BadSignature)
    }
}

/// Makes `verifier` follow only the configured USIG epoch of `node`, if the configuration
/// names one.
/// Follows `node`'s warrants from where the configuration starts them: its USIG epoch, after
/// its configured start position if the epoch began by an online reconfiguration.
fn pin_start<T>(cluster: &Cluster, verifier: &mut OrderedVerifier<T>, node: NodeId) {
    let (Some(usig), Some(epoch)) = (cluster.usig_of(node), cluster.usig_epoch_of(node)) else {
        return;
    };
    let (counter, chain) = cluster.usig_start_of(node);
    // A fresh verifier follows any epoch, from any position.
    let _ = if counter == 0 {
        verifier.begin_epoch(usig, epoch)
    } else {
        verifier
            .resume_at(usig, epoch, counter + 1, chain)
            .map(drop)
    };
}

/// Whether a correct peer may have sent this FETCH-COMMITS: a range of at most [`FETCH_BATCH`]
/// warrant counters, its start not after its end (`BTreeMap::range` panics on a reversed one),
/// and strictly ascending slots (its agreements short of f+1, in slot order). A Byzantine
/// member's `slots: vec![s; N]`, with N in the millions in one frame, or its range of every
/// counter, was answered with a message per entry.
fn fetch_is_sound(warrants: Option<&RangeInclusive<u64>>, slots: &[u64]) -> bool {
    let range_ok = warrants.is_none_or(|r| !r.is_empty() && r.end() - r.start() < FETCH_BATCH);
    range_ok && slots.windows(2).all(|pair| pair[0] < pair[1])
}

/// One execution decided at `slot` got its results (or never will).
fn settle(unreplied: &mut BTreeMap<u64, usize>, slot: u64) {
    if let Some(n) = unreplied.get_mut(&slot) {
        *n -= 1;
        if *n == 0 {
            unreplied.remove(&slot);
        }
    }
}
