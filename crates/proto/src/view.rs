//! The view-change messages (docs/protocol.md, "View change"): REQ-VIEW-CHANGE, VIEW-CHANGE and
//! NEW-VIEW.
//!
//! A VIEW-CHANGE names its base NEW-VIEW by [`Lineage`] when its stable checkpoint vouches for
//! it, and otherwise carries it as encoded bytes, not as a nested value: NEW-VIEWs contain
//! VIEW-CHANGEs, and decoding such a chain recursively would let a peer exhaust the stack with a
//! deeply nested frame. Validators decode one level at a time and stop at [`MAX_NESTED_VIEWS`].
//! A NEW-VIEW's encoding holds each carried base once, however many of its VIEW-CHANGEs carry
//! it, so a chain of view changes grows linearly, not by a factor of f+1 per group each view;
//! and each PREPARE its VIEW-CHANGEs show once, shared again when decoded.

use crate::crypto::{PublicKey, Signature, SigningKey};
use crate::ids::{ConfigEpoch, GroupId, NodeId, View};
use crate::message::{canonical, Commit, Prepare};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
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

/// How many slots past its stable checkpoint a VIEW-CHANGE may show PREPAREs for: one
/// interval. A replica COMMITs a PREPARE only within this span of its stable checkpoint, so
/// its VIEW-CHANGE can leave out the PREPAREs it processed beyond it, and a checker refuses one
/// that shows more. That bounds the PREPAREs a VIEW-CHANGE carries, which a primary running
/// ahead (a faulty one, or any while one group lags the stable checkpoint) would otherwise
/// make grow past a frame; and it keeps a new view's NEW-VIEW slot within the high watermark of
/// the CHECKPOINT every replica takes at the stable checkpoint, so a long cut cannot wait for
/// itself (docs/protocol.md, "Bounded VIEW-CHANGEs").
pub const VIEW_CHANGE_SPAN: u64 = CHECKPOINT_INTERVAL;

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
    /// Shared: the VIEW-CHANGEs of a NEW-VIEW mostly show the same stable checkpoint, and the
    /// book (an entry per client, up to [`crate::limits::MAX_CLIENTS`]) is most of it, so a
    /// NEW-VIEW's encoding holds each distinct book once.
    pub book: Arc<Vec<u8>>,
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
    /// the primary's counter order, up to [`VIEW_CHANGE_SPAN`] slots past its stable
    /// checkpoint. Shared: the VIEW-CHANGEs of a NEW-VIEW mostly show the same ones, and its
    /// encoding holds each once.
    pub prepares: Vec<Arc<Prepare>>,
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
    /// How many bytes it encodes to (a candidate builds its NEW-VIEW from the smallest).
    pub fn encoded_len(&self) -> usize {
        canonical(self).len()
    }

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
/// VIEW-CHANGE made each NEW-VIEW (f+1)·groups times the size of the one before. It stores each
/// distinct PREPARE its VIEW-CHANGEs show once too, and they refer to it by index: they show
/// mostly the same ones, up to [`VIEW_CHANGE_SPAN`] each, which (f+1)·groups times over would
/// not fit a frame. So too each distinct order book of their stable checkpoints. Digests and
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

    /// How many bytes a NEW-VIEW of `view_changes` encodes to besides its warrant: what a
    /// candidate checks against [`crate::limits::MAX_NEW_VIEW_BYTES`] before it warrants one.
    pub fn encoded_len(view_changes: &[ViewChange]) -> usize {
        let unwarranted = UniqueWarrant {
            identity: usig::UsigId(0),
            epoch: usig::Epoch(0),
            counter: 0,
            certificate: usig::Certificate::Soft { signature: [0; 64] },
        };
        let fields = (View(0), ConfigEpoch(0), NodeId(0));
        let without = canonical(&unwarranted).len();
        canonical(&NewViewEncoding::of(fields, view_changes, unwarranted)).len() - without
    }

    /// Decodes a base carried by a VIEW-CHANGE (one level: the VIEW-CHANGEs inside keep theirs
    /// encoded).
    pub fn decode(bytes: &[u8]) -> Option<NewView> {
        wire::decode(bytes).ok()
    }
}

/// The most bytes a NEW-VIEW's shared bases may expand to when decoded (four 16 MiB frames).
const MAX_EXPANDED_BASES: usize = 64 << 20;

/// [`NewView`] as encoded: carried bases once each, in `bases`, the PREPAREs its VIEW-CHANGEs
/// show once each, in `prepares`, and their stable checkpoints' order books once each, in
/// `books`.
#[derive(Serialize, Deserialize)]
struct NewViewEncoding {
    view: View,
    config_epoch: ConfigEpoch,
    primary: NodeId,
    bases: Vec<Vec<u8>>,
    prepares: Vec<Arc<Prepare>>,
    books: Vec<Arc<Vec<u8>>>,
    view_changes: Vec<SharedViewChange>,
    ui: UniqueWarrant,
}

/// A [`ViewChange`] inside a NEW-VIEW's encoding: its base a [`Base::Shared`] (or named), its
/// PREPAREs and its stable checkpoint's book indexes into the NEW-VIEW's tables.
#[derive(Serialize, Deserialize)]
struct SharedViewChange {
    replica: NodeId,
    group: GroupId,
    next_view: View,
    checkpoint: Option<SharedCheckpoint>,
    base: Option<Base>,
    prepares: Vec<u32>,
    log: Vec<Warranted>,
    anchor_proof: Vec<Checkpoint>,
    ui: UniqueWarrant,
}

/// A [`StableCheckpoint`] inside a NEW-VIEW's encoding: its book an index into the NEW-VIEW's
/// table.
#[derive(Serialize, Deserialize)]
struct SharedCheckpoint {
    certificate: Vec<Checkpoint>,
    book: u32,
}

/// A decoded table of items: it must hold distinct items, in the order of their first use, each
/// used (what `serialize` writes, so that a NEW-VIEW has one encoding). Items are told apart by
/// digest, so that a large table costs no comparison of every pair.
struct Table<T> {
    items: Vec<T>,
    /// The digests of the items introduced so far, to their index.
    index: BTreeMap<MessageDigest, u32>,
    /// How many items the references read so far have introduced.
    used: usize,
}

impl<T: Clone> Table<T> {
    fn new(items: Vec<T>) -> Self {
        Table {
            items,
            index: BTreeMap::new(),
            used: 0,
        }
    }

    /// The item a reference names: an earlier one, or the next one, which must differ
    /// from every earlier one.
    fn resolve<E: serde::de::Error>(
        &mut self,
        at: u32,
        what: &str,
        digest: impl Fn(&T) -> MessageDigest,
    ) -> Result<&T, E> {
        let i = at as usize;
        if i > self.used || i >= self.items.len() {
            return Err(E::custom(format!(
                "a VIEW-CHANGE names a {what} the NEW-VIEW lacks"
            )));
        }
        if i == self.used {
            if self.index.insert(digest(&self.items[i]), at).is_some() {
                return Err(E::custom(format!("a NEW-VIEW's shared {what}s repeat one")));
            }
            self.used += 1;
        }
        Ok(&self.items[i])
    }

    /// Decoding is done: every item was used.
    fn finish<E: serde::de::Error>(&self, what: &str) -> Result<(), E> {
        match self.used == self.items.len() {
            true => Ok(()),
            false => Err(E::custom(format!(
                "a NEW-VIEW holds a {what} no VIEW-CHANGE names"
            ))),
        }
    }
}

impl NewViewEncoding {
    /// The encoding of a NEW-VIEW with these fields: each carried base, each PREPARE and each
    /// book once.
    fn of(
        (view, config_epoch, primary): (View, ConfigEpoch, NodeId),
        view_changes: &[ViewChange],
        ui: UniqueWarrant,
    ) -> Self {
        let mut bases: Vec<Vec<u8>> = Vec::new();
        let mut books: Vec<Arc<Vec<u8>>> = Vec::new();
        let mut book_index = |book: &Arc<Vec<u8>>| {
            let at = books.iter().position(|b| b == book).unwrap_or_else(|| {
                books.push(book.clone());
                books.len() - 1
            });
            at as u32
        };
        let mut prepares: Vec<Arc<Prepare>> = Vec::new();
        // The PREPAREs in the table at each warrant position: only those can be equal.
        let mut by_position: BTreeMap<(NodeId, u64, u64), Vec<u32>> = BTreeMap::new();
        let mut prepare_index = |p: &Arc<Prepare>| {
            let position = (p.primary, p.ui.epoch.0, p.ui.counter);
            let same = by_position.entry(position).or_default();
            match same.iter().find(|&&i| prepares[i as usize] == *p) {
                Some(&i) => i,
                None => {
                    prepares.push(p.clone());
                    same.push(prepares.len() as u32 - 1);
                    prepares.len() as u32 - 1
                }
            }
        };
        let view_changes = view_changes
            .iter()
            .map(|vc| {
                let body = &vc.body;
                let base = body.base.as_ref().map(|base| match base {
                    Base::Carried(bytes) => {
                        let at = bases.iter().position(|b| b == bytes).unwrap_or_else(|| {
                            bases.push(bytes.clone());
                            bases.len() - 1
                        });
                        Base::Shared(at as u32)
                    }
                    other => other.clone(),
                });
                SharedViewChange {
                    replica: vc.replica,
                    group: vc.group,
                    next_view: vc.next_view,
                    checkpoint: body.checkpoint.as_ref().map(|c| SharedCheckpoint {
                        certificate: c.certificate.clone(),
                        book: book_index(&c.book),
                    }),
                    base,
                    prepares: body.prepares.iter().map(&mut prepare_index).collect(),
                    log: body.log.clone(),
                    anchor_proof: body.anchor_proof.clone(),
                    ui: vc.ui.clone(),
                }
            })
            .collect();
        NewViewEncoding {
            view,
            config_epoch,
            primary,
            bases,
            prepares,
            books,
            view_changes,
            ui,
        }
    }
}

impl Serialize for NewView {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = (self.view, self.config_epoch, self.primary);
        NewViewEncoding::of(fields, &self.view_changes, self.ui.clone()).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for NewView {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let e = NewViewEncoding::deserialize(deserializer)?;
        // Canonical only: each base, PREPARE and book once, in the order of first use, every one
        // used (as `serialize` writes them). Each VIEW-CHANGE gets its own copy of a base: bound
        // what a small frame may expand to. PREPAREs and books are shared, so they expand to
        // nothing.
        let mut bases = Table::new(e.bases);
        let mut prepares = Table::new(e.prepares);
        let mut books = Table::new(e.books);
        let mut expanded = 0usize;
        let mut view_changes = Vec::with_capacity(e.view_changes.len());
        for vc in e.view_changes {
            let base = match vc.base {
                Some(Base::Shared(at)) => {
                    let of = |bytes: &Vec<u8>| MessageDigest::of(bytes);
                    let bytes = bases.resolve::<D::Error>(at, "base", of)?;
                    expanded += bytes.len();
                    if expanded > MAX_EXPANDED_BASES {
                        return Err(serde::de::Error::custom(
                            "a NEW-VIEW's shared bases expand beyond the limit",
                        ));
                    }
                    Some(Base::Carried(bytes.clone()))
                }
                Some(Base::Carried(_)) => {
                    return Err(serde::de::Error::custom(
                        "a NEW-VIEW's VIEW-CHANGE carries its base outside the shared table",
                    ))
                }
                named => named,
            };
            let shown = vc.prepares.into_iter().map(|at| {
                let of = |p: &Arc<Prepare>| p.digest();
                prepares.resolve::<D::Error>(at, "PREPARE", of).cloned()
            });
            let checkpoint = match vc.checkpoint {
                Some(c) => {
                    let of = |b: &Arc<Vec<u8>>| MessageDigest::of(b);
                    let book = books.resolve::<D::Error>(c.book, "book", of)?.clone();
                    let certificate = c.certificate;
                    Some(StableCheckpoint { certificate, book })
                }
                None => None,
            };
            let body = ViewChangeBody {
                checkpoint,
                base,
                prepares: shown.collect::<Result<_, _>>()?,
                log: vc.log,
                anchor_proof: vc.anchor_proof,
            };
            view_changes.push(ViewChange {
                replica: vc.replica,
                group: vc.group,
                next_view: vc.next_view,
                body,
                ui: vc.ui,
            });
        }
        bases.finish::<D::Error>("base")?;
        prepares.finish::<D::Error>("PREPARE")?;
        books.finish::<D::Error>("book")?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{first_view_change, request, usig, warranted_prepare};
    use crate::PrepareEntry;
    use usig::Usig;

    /// `n` PREPAREs of view 0, each with one request of about 1 KB.
    fn prepares(n: u64) -> Vec<Arc<Prepare>> {
        let mut primary = usig(NodeId(0));
        (1..=n)
            .map(|ts| {
                let entries = vec![PrepareEntry {
                    group: GroupId(0),
                    request: request(1, ts, &[0; 1000]),
                }];
                let epoch = ConfigEpoch(1);
                Arc::new(warranted_prepare(
                    &mut primary,
                    View(0),
                    epoch,
                    NodeId(0),
                    entries,
                ))
            })
            .collect()
    }

    /// A NEW-VIEW of view 1 whose VIEW-CHANGEs show `shown[i]` each.
    fn new_view(shown: Vec<Vec<Arc<Prepare>>>) -> NewView {
        new_view_of(shown.into_iter().map(|prepares| (None, prepares)).collect())
    }

    /// What a test VIEW-CHANGE shows: a stable checkpoint (with no certificate) whose book is
    /// these bytes, and these PREPAREs.
    type Shown = (Option<Arc<Vec<u8>>>, Vec<Arc<Prepare>>);

    /// A NEW-VIEW of view 1 whose VIEW-CHANGEs show `shown[i]` each.
    fn new_view_of(shown: Vec<Shown>) -> NewView {
        let view_changes: Vec<ViewChange> = (shown.into_iter().enumerate())
            .map(|(i, (book, prepares))| {
                let checkpoint = book.map(|book| StableCheckpoint {
                    certificate: Vec::new(),
                    book,
                });
                let body = ViewChangeBody {
                    checkpoint,
                    base: None,
                    prepares,
                    log: Vec::new(),
                    anchor_proof: Vec::new(),
                };
                first_view_change(NodeId(101 + i as u32), GroupId(0), View(1), body)
            })
            .collect();
        let epoch = ConfigEpoch(1);
        let bytes = NewView::warranted_bytes(View(1), epoch, NodeId(1), &view_changes);
        NewView {
            view: View(1),
            config_epoch: epoch,
            primary: NodeId(1),
            view_changes,
            ui: usig(NodeId(1)).create_ui(&bytes).unwrap(),
        }
    }

    /// Four VIEW-CHANGEs showing the same 40 PREPAREs (one with the first 30 only) encode them
    /// once: the NEW-VIEW is about one VIEW-CHANGE's size, not four, and decodes to the same
    /// value, its VIEW-CHANGEs sharing each PREPARE.
    #[test]
    fn a_new_view_encodes_each_prepare_its_view_changes_show_once() {
        let all = prepares(40);
        let one_view_change = canonical(&all).len();
        let nv = new_view(vec![all.clone(), all.clone(), all[..30].to_vec(), all]);
        let encoded = nv.encode();
        assert!(
            encoded.len() < one_view_change * 11 / 10,
            "{}",
            encoded.len()
        );
        let decoded = NewView::decode(&encoded).unwrap();
        assert_eq!(decoded, nv);
        let [a, b] = [0, 3].map(|i| &decoded.view_changes[i].body.prepares[7]);
        assert!(Arc::ptr_eq(a, b));
    }

    /// Four VIEW-CHANGEs, three showing a stable checkpoint with the same 100 KB book and one
    /// with another: the NEW-VIEW holds each book once and decodes to the same value, the three
    /// sharing theirs.
    #[test]
    fn a_new_view_encodes_each_book_its_view_changes_show_once() {
        let (one, other) = (Arc::new(vec![7; 100_000]), Arc::new(vec![8; 100_000]));
        let shown = [&one, &other, &one, &one].map(|b| (Some(Arc::new(b.to_vec())), vec![]));
        let nv = new_view_of(shown.to_vec());
        let encoded = nv.encode();
        assert!(encoded.len() < 210_000, "{}", encoded.len());
        let decoded = NewView::decode(&encoded).unwrap();
        assert_eq!(decoded, nv);
        let book = |i: usize| {
            &decoded.view_changes[i]
                .body
                .checkpoint
                .as_ref()
                .unwrap()
                .book
        };
        assert!(Arc::ptr_eq(book(0), book(3)) && Arc::ptr_eq(book(2), book(3)));
        assert!(!Arc::ptr_eq(book(0), book(1)));
        let e: NewViewEncoding = wire::decode(&encoded).unwrap();
        assert_eq!(e.books, vec![one, other]);
    }

    /// The encoding of `nv` with its table and references rewritten by `edit`.
    fn edited(nv: &NewView, edit: impl FnOnce(&mut NewViewEncoding)) -> Vec<u8> {
        let mut e: NewViewEncoding = wire::decode(&nv.encode()).unwrap();
        edit(&mut e);
        canonical(&e)
    }

    /// Only the encoding `serialize` writes decodes: a PREPARE twice in the table, one no
    /// VIEW-CHANGE names, a reference past the entries introduced so far or past the table.
    #[test]
    fn a_prepare_table_other_than_the_canonical_one_is_refused() {
        let all = prepares(3);
        let nv = new_view(vec![all.clone(), all[..2].to_vec()]);
        assert_eq!(NewView::decode(&edited(&nv, |_| {})), Some(nv.clone()));
        let twice = edited(&nv, |e| {
            e.prepares.push(e.prepares[0].clone());
            e.view_changes[1].prepares[0] = 3;
        });
        let unused = edited(&nv, |e| e.prepares.push(prepares(4)[3].clone()));
        let ahead = edited(&nv, |e| e.view_changes[0].prepares.swap(0, 1));
        let past = edited(&nv, |e| e.view_changes[1].prepares[1] = 9);
        for refused in [twice, unused, ahead, past] {
            assert_eq!(NewView::decode(&refused), None);
        }
    }

    /// The same for the books: only the table `serialize` writes decodes.
    #[test]
    fn a_book_table_other_than_the_canonical_one_is_refused() {
        let [a, b] = [1, 2].map(|n| Some(Arc::new(vec![n; 10])));
        let nv = new_view_of(vec![
            (a.clone(), vec![]),
            (b, vec![]),
            (a, vec![]),
            (None, vec![]),
        ]);
        assert_eq!(NewView::decode(&edited(&nv, |_| {})), Some(nv.clone()));
        fn book_of(e: &mut NewViewEncoding, i: usize) -> &mut u32 {
            &mut e.view_changes[i].checkpoint.as_mut().unwrap().book
        }
        let twice = edited(&nv, |e| {
            e.books.push(e.books[0].clone());
            *book_of(e, 2) = 2;
        });
        let unused = edited(&nv, |e| e.books.push(Arc::new(vec![3; 10])));
        let ahead = edited(&nv, |e| *book_of(e, 0) = 1);
        let past = edited(&nv, |e| *book_of(e, 2) = 9);
        for refused in [twice, unused, ahead, past] {
            assert_eq!(NewView::decode(&refused), None);
        }
    }
}
