//! The view-change messages (docs/protocol.md, "View change"): REQ-VIEW-CHANGE, VIEW-CHANGE and
//! NEW-VIEW.
//!
//! A VIEW-CHANGE names its base NEW-VIEW by [`Lineage`] when its stable checkpoint vouches for
//! it, and otherwise carries it as encoded bytes, not as a nested value: NEW-VIEWs contain
//! VIEW-CHANGEs, and decoding such a chain recursively would let a peer exhaust the stack with a
//! deeply nested frame. Validators decode one level at a time and stop at [`MAX_NESTED_VIEWS`].
//! A NEW-VIEW's encoding holds each carried base once, however many of its VIEW-CHANGEs carry
//! it, so a chain of view changes grows linearly, not by a factor of f+1 per group each view.

use crate::crypto::{PublicKey, Signature, SigningKey};
use crate::ids::{ConfigEpoch, GroupId, NodeId, View};
use crate::message::{canonical, Commit, Prepare};
use serde::{Deserialize, Serialize};
use usig::{MessageDigest, UniqueWarrant};

/// How many accepted NEW-VIEWs a VIEW-CHANGE may carry inside one another (view changes that
/// follow each other with no stable checkpoint taken in the latest view); deeper ones are
/// refused. A checkpoint in the base's view ends the chain (the base is then only named).
pub const MAX_NESTED_VIEWS: usize = 16;

/// Replicas checkpoint their history every this many slots. A replica COMMITs slot s only once
/// it has warranted its own CHECKPOINT for the multiple of this interval two intervals below
/// (the high watermark), so a VIEW-CHANGE's log can start at that CHECKPOINT and still hold
/// every COMMIT after the stable checkpoint.
pub const CHECKPOINT_INTERVAL: u64 = 128;

/// How many slots past its stable checkpoint a VIEW-CHANGE may show PREPAREs for: three
/// intervals. A replica COMMITs a PREPARE only within this span of its stable checkpoint, so
/// its VIEW-CHANGE can leave out the PREPAREs it processed beyond it, and a checker refuses one
/// that shows more. That bounds the PREPAREs a VIEW-CHANGE carries, which a primary running
/// ahead (a faulty one, or any while one group lags the stable checkpoint) would otherwise
/// make grow past a frame (docs/protocol.md, "Bounded VIEW-CHANGEs").
pub const VIEW_CHANGE_SPAN: u64 = 3 * CHECKPOINT_INTERVAL;

/// A replica's request timer expired: it asks to move to `next_view`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReqViewChange {
    pub replica: NodeId,
    pub next_view: View,
    pub signature: Signature,
}

crate::node_signed!(ReqViewChange, b"cloudbft/req-view-change/v1", |m| (
    m.replica,
    m.next_view
));

/// A replica's history after `slot`: its running digest and the order book's digest, sent once
/// every slot of its group up to there is decided and executed (f+1 matching results). f+1
/// matching CHECKPOINTs from every group make it stable: every slot up to it is then committed,
/// so histories and logs before it can go.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub replica: NodeId,
    pub slot: u64,
    pub chain: MessageDigest,
    pub book: MessageDigest,
    /// The history it was taken on: a VIEW-CHANGE may show it only with a base of that view or
    /// a later one (docs/protocol.md, "As implemented").
    pub lineage: Lineage,
    /// For each member of the sender's group (itself included), the warrant of that member's
    /// first CHECKPOINT at `slot - CHECKPOINT_INTERVAL`, as the sender delivered it: f+1 of these
    /// let a VIEW-CHANGE's log start there (docs/protocol.md, "Anchors").
    pub anchors: Vec<Anchor>,
    /// The primary candidates the sender followed, in its view of `lineage` and not changing
    /// view, through each one's latest proposal that the order book at `slot` records: f+1 of
    /// these from one group let a recovering replica follow the candidate from there
    /// (docs/protocol.md, "Replica recovery").
    pub followed: Vec<NodeId>,
    /// The replica's warrant over [`Checkpoint::warranted_bytes`].
    pub ui: UniqueWarrant,
}

/// Which view's history a checkpoint was taken on: the view, the digest of the NEW-VIEW that
/// started it, and that NEW-VIEW's warrant counter and slot (all zero in view 0). Two valid
/// NEW-VIEWs of one view (a Byzantine primary's) are two lineages. The counter and slot let a
/// stable checkpoint vouch for everything a VIEW-CHANGE needs of its base ([`Base::Named`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Lineage {
    pub view: View,
    pub new_view: MessageDigest,
    pub counter: u64,
    pub slot: u64,
}

impl Lineage {
    /// View 0's history, which no NEW-VIEW started.
    pub const GENESIS: Lineage = Lineage {
        view: View(0),
        new_view: MessageDigest([0; 32]),
        counter: 0,
        slot: 0,
    };

    /// The history a NEW-VIEW starts, its cut ending at `slot` (the NEW-VIEW's own).
    pub fn of(new_view: &NewView, slot: u64) -> Lineage {
        Lineage {
            view: new_view.view,
            new_view: new_view.digest(),
            counter: new_view.ui.counter,
            slot,
        }
    }
}

/// Where a replica's first CHECKPOINT at a slot sits in its warrant sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Anchor {
    pub replica: NodeId,
    /// The warrant's USIG epoch.
    pub epoch: u64,
    pub counter: u64,
    /// The TPM chain value the warrant continues (zero for software warrants): with it, a
    /// recovering replica can follow the member from exactly this position (docs/protocol.md,
    /// "Replica recovery").
    pub chain: [u8; 32],
}

impl Anchor {
    /// The position of `replica`'s message warranted by `ui`.
    pub fn of(replica: NodeId, ui: &UniqueWarrant) -> Self {
        let chain = match &ui.certificate {
            usig::Certificate::Tpm(tpm) => tpm.prev,
            usig::Certificate::Soft { .. } => [0; 32],
        };
        Anchor {
            replica,
            epoch: ui.epoch.0,
            counter: ui.counter,
            chain,
        }
    }
}

impl Checkpoint {
    /// What the replica's USIG warrants.
    pub fn warranted_bytes(
        replica: NodeId,
        slot: u64,
        chain: &MessageDigest,
        book: &MessageDigest,
        lineage: &Lineage,
        anchors: &[Anchor],
        followed: &[NodeId],
    ) -> Vec<u8> {
        canonical(&(
            b"cloudbft/checkpoint/v5",
            replica,
            slot,
            chain.0,
            book.0,
            lineage,
            anchors,
            followed,
        ))
    }

    /// This CHECKPOINT's warranted bytes.
    pub fn own_warranted_bytes(&self) -> Vec<u8> {
        Self::warranted_bytes(
            self.replica,
            self.slot,
            &self.chain,
            &self.book,
            &self.lineage,
            &self.anchors,
            &self.followed,
        )
    }

    /// Whether it vouches that `anchor` is its replica's first CHECKPOINT an interval below.
    pub fn reports(&self, anchor: &Anchor) -> bool {
        self.anchors.contains(anchor)
    }
}

/// A stable checkpoint as a VIEW-CHANGE carries it: the matching CHECKPOINTs (f+1 from every
/// group) and the encoded order book whose digest they name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StableCheckpoint {
    pub certificate: Vec<Checkpoint>,
    pub book: Vec<u8>,
}

/// One message a replica warranted, as its VIEW-CHANGE lists it. Nearly every entry is a
/// COMMIT, so boxing that variant would only add an allocation each.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Warranted {
    /// A COMMIT, without the PREPARE it carried.
    Commit(Commit),
    /// An earlier VIEW-CHANGE, by the digest of its body.
    ViewChange {
        next_view: View,
        body: MessageDigest,
        ui: UniqueWarrant,
    },
    Checkpoint(Checkpoint),
}

impl Warranted {
    /// The warrant.
    pub fn ui(&self) -> &UniqueWarrant {
        match self {
            Warranted::Commit(c) => &c.ui,
            Warranted::ViewChange { ui, .. } => ui,
            Warranted::Checkpoint(c) => &c.ui,
        }
    }
}

/// A replica leaves its view: its history since its stable checkpoint, and every message it
/// warranted since its own CHECKPOINT one interval before that, so that nothing it committed
/// after the stable checkpoint can be left out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewChange {
    pub replica: NodeId,
    pub group: GroupId,
    pub next_view: View,
    pub body: ViewChangeBody,
    /// The replica's warrant over [`ViewChange::warranted_bytes`].
    pub ui: UniqueWarrant,
}

/// What a VIEW-CHANGE reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewChangeBody {
    /// The replica's latest stable checkpoint (none before the first); its history starts after.
    pub checkpoint: Option<StableCheckpoint>,
    /// The [`NewView`] the replica last accepted (its history starts with that view's cut), or
    /// `None` while it is in view 0.
    pub base: Option<Base>,
    /// The PREPAREs of the base's view (view 0 without a base) it processed after the base, in
    /// the primary's counter order.
    pub prepares: Vec<Prepare>,
    /// Every message it warranted before this VIEW-CHANGE, in counter order: from its first
    /// warrant, or from its own CHECKPOINT at least one interval below the stable checkpoint.
    pub log: Vec<Warranted>,
    /// When the log starts at a CHECKPOINT: f+1 CHECKPOINTs of its group, an interval above
    /// that one, each reporting it as the sender's first at its slot ([`Checkpoint::anchors`]);
    /// empty when the log starts at the first warrant.
    pub anchor_proof: Vec<Checkpoint>,
}

/// A VIEW-CHANGE's base NEW-VIEW.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Base {
    /// Named only, when the stable checkpoint shown was taken on its history at or after its
    /// slot: f+1 CHECKPOINTs of every group then vouch for its digest, counter and slot, and
    /// none of its cut lies after the checkpoint. This ends the chain of nested NEW-VIEWs.
    Named(Lineage),
    /// Carried, encoded ([`NewView::encode`]), for a validator to compute its cut.
    Carried(Vec<u8>),
    /// Only inside an encoded NEW-VIEW: the same bytes as that NEW-VIEW's carried base with this
    /// index (see [`NewView`]'s encoding). Decoding restores [`Base::Carried`].
    Shared(u32),
}

impl ViewChangeBody {
    /// Identifies the body (the warrant covers it through this digest).
    pub fn digest(&self) -> MessageDigest {
        MessageDigest::of(&canonical(self))
    }
}

impl ViewChange {
    /// What the replica's USIG warrants.
    pub fn warranted_bytes(
        replica: NodeId,
        group: GroupId,
        next_view: View,
        body: &MessageDigest,
    ) -> Vec<u8> {
        canonical(&(
            b"cloudbft/view-change/v1",
            replica,
            group,
            next_view,
            body.0,
        ))
    }

    /// This VIEW-CHANGE's warranted bytes.
    pub fn own_warranted_bytes(&self) -> Vec<u8> {
        Self::warranted_bytes(
            self.replica,
            self.group,
            self.next_view,
            &self.body.digest(),
        )
    }
}

/// The new primary's announcement of `view`: the VIEW-CHANGEs it collected (f+1 from every
/// group), from which every replica computes the same cut of the old history.
///
/// Its encoding stores each distinct carried base once ([`Base::Shared`] in the VIEW-CHANGEs):
/// the VIEW-CHANGEs of one view usually carry the same base, and writing it once per
/// VIEW-CHANGE made each NEW-VIEW (f+1)·groups times the size of the one before. Digests and
/// warrants are over the decoded value, so the encoding changes nothing they cover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewView {
    pub view: View,
    pub config_epoch: ConfigEpoch,
    pub primary: NodeId,
    pub view_changes: Vec<ViewChange>,
    /// The new primary's warrant over [`NewView::warranted_bytes`].
    pub ui: UniqueWarrant,
}

impl NewView {
    /// What the new primary's USIG warrants.
    pub fn warranted_bytes(
        view: View,
        config_epoch: ConfigEpoch,
        primary: NodeId,
        view_changes: &[ViewChange],
    ) -> Vec<u8> {
        let changes = MessageDigest::of(&canonical(&view_changes));
        canonical(&(
            b"cloudbft/new-view/v1",
            view,
            config_epoch,
            primary,
            changes.0,
        ))
    }

    /// This NEW-VIEW's warranted bytes.
    pub fn own_warranted_bytes(&self) -> Vec<u8> {
        Self::warranted_bytes(
            self.view,
            self.config_epoch,
            self.primary,
            &self.view_changes,
        )
    }

    /// Identifies this exact NEW-VIEW (its fields and the warrant).
    pub fn digest(&self) -> MessageDigest {
        let mut bytes = self.own_warranted_bytes();
        bytes.extend_from_slice(&self.ui.to_bytes());
        MessageDigest::of(&bytes)
    }

    /// The encoding a VIEW-CHANGE carries as its base.
    pub fn encode(&self) -> Vec<u8> {
        canonical(self)
    }

    /// Decodes a base carried by a VIEW-CHANGE (one level: the VIEW-CHANGEs inside keep theirs
    /// encoded).
    pub fn decode(bytes: &[u8]) -> Option<NewView> {
        wire::decode(bytes).ok()
    }
}

/// The most bytes a NEW-VIEW's shared bases may expand to when decoded (four 16 MiB frames).
const MAX_EXPANDED_BASES: usize = 64 << 20;

/// [`NewView`] as encoded: carried bases once each, in `bases`.
#[derive(Serialize, Deserialize)]
struct NewViewEncoding {
    view: View,
    config_epoch: ConfigEpoch,
    primary: NodeId,
    bases: Vec<Vec<u8>>,
    view_changes: Vec<ViewChange>,
    ui: UniqueWarrant,
}

impl Serialize for NewView {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut bases: Vec<Vec<u8>> = Vec::new();
        let view_changes = self
            .view_changes
            .iter()
            .map(|vc| {
                let mut vc = vc.clone();
                if let Some(Base::Carried(bytes)) = &vc.body.base {
                    let at = match bases.iter().position(|b| b == bytes) {
                        Some(at) => at,
                        None => {
                            bases.push(bytes.clone());
                            bases.len() - 1
                        }
                    };
                    vc.body.base = Some(Base::Shared(at as u32));
                }
                vc
            })
            .collect();
        NewViewEncoding {
            view: self.view,
            config_epoch: self.config_epoch,
            primary: self.primary,
            bases,
            view_changes,
            ui: self.ui.clone(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for NewView {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let e = NewViewEncoding::deserialize(deserializer)?;
        let mut view_changes = e.view_changes;
        // Canonical only: each base once, in the order of first use, every one used (as
        // `serialize` writes them). Each VIEW-CHANGE gets its own copy: bound what a small
        // frame may expand to.
        let non_canonical =
            || serde::de::Error::custom("a NEW-VIEW's shared bases are not canonical");
        let (mut used, mut expanded) = (0usize, 0usize);
        for vc in &mut view_changes {
            match &vc.body.base {
                Some(Base::Shared(at)) => {
                    let at = *at as usize;
                    let bytes = e.bases.get(at).filter(|_| at <= used).ok_or_else(|| {
                        serde::de::Error::custom("a VIEW-CHANGE names a base the NEW-VIEW lacks")
                    })?;
                    if at == used {
                        if e.bases[..used].contains(bytes) {
                            return Err(non_canonical());
                        }
                        used += 1;
                    }
                    expanded += bytes.len();
                    if expanded > MAX_EXPANDED_BASES {
                        return Err(serde::de::Error::custom(
                            "a NEW-VIEW's shared bases expand beyond the limit",
                        ));
                    }
                    vc.body.base = Some(Base::Carried(bytes.clone()));
                }
                Some(Base::Carried(_)) => {
                    return Err(serde::de::Error::custom(
                        "a NEW-VIEW's VIEW-CHANGE carries its base outside the shared table",
                    ))
                }
                Some(Base::Named(_)) | None => {}
            }
        }
        if used != e.bases.len() {
            return Err(non_canonical());
        }
        Ok(NewView {
            view: e.view,
            config_epoch: e.config_epoch,
            primary: e.primary,
            view_changes,
            ui: e.ui,
        })
    }
}

/// What a primary candidate warrants. Every replica processes each candidate's messages in its
/// counter order, so all correct replicas that accept a NEW-VIEW of a view accept the same one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Proposal {
    Prepare(Prepare),
    NewView(NewView),
}

impl Proposal {
    /// The candidate that warranted it.
    pub fn primary(&self) -> NodeId {
        match self {
            Proposal::Prepare(p) => p.primary,
            Proposal::NewView(nv) => nv.primary,
        }
    }

    /// The warrant.
    pub fn ui(&self) -> &UniqueWarrant {
        match self {
            Proposal::Prepare(p) => &p.ui,
            Proposal::NewView(nv) => &nv.ui,
        }
    }

    /// The configuration epoch it belongs to.
    pub fn config_epoch(&self) -> ConfigEpoch {
        match self {
            Proposal::Prepare(p) => p.config_epoch,
            Proposal::NewView(nv) => nv.config_epoch,
        }
    }

    /// Identifies this exact proposal (what a history's slot holds).
    pub fn digest(&self) -> MessageDigest {
        match self {
            Proposal::Prepare(p) => p.digest(),
            Proposal::NewView(nv) => nv.digest(),
        }
    }

    /// The digest its warrant covers and its own ([`Self::digest`]), from one encoding: a
    /// replica needs both for every PREPARE.
    pub fn digests(&self) -> (MessageDigest, MessageDigest) {
        MessageDigest::of_and_followed(&self.warranted_bytes(), &self.ui().to_bytes())
    }

    /// The bytes its warrant covers.
    pub fn warranted_bytes(&self) -> Vec<u8> {
        match self {
            Proposal::Prepare(p) => p.own_warranted_bytes(),
            Proposal::NewView(nv) => nv.own_warranted_bytes(),
        }
    }

    /// As a wire message.
    pub fn into_message(self) -> crate::Message {
        match self {
            Proposal::Prepare(p) => crate::Message::Prepare(p),
            Proposal::NewView(nv) => crate::Message::NewView(nv),
        }
    }
}
