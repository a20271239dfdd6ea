//! What a node's event loop takes from the transport: frames decoded into messages, with the
//! client REQUESTs (alone or in REQUESTS frames), REPLY-COMMIT-DBs or COMMIT-DBs of a burst of
//! frames handed over together (those its core takes in batches, [`Batches`]): the core checks
//! the requests' signatures in
//! one batch (`proto::crypto::verify_batch`: from about 8 signatures on, each costs well under
//! half a single check), and sends the REPLYs that a burst of results completes in one frame
//! per endpoint.
//!
//! REPLY-COMMIT-DBs, COMMIT-DBs and DECIDEDs are not signed: they count only with the node
//! whose authenticated link they came on (`net::Inbound::link`), which goes with each of them to
//! the core. One that came on a plain connection is counted (`unlinked_…`) and dropped.
//!
//! The batched messages of a burst go ahead of the other messages that arrived in it. Nothing
//! depends on that order: a signature check has the same outcome whenever it runs, a PREPARE
//! that carries a request the replica has not seen directly is checked on its own, a database
//! node answers only orders the replica already decided, and COMMIT-DBs count as votes in any
//! order.

use crate::metrics::Metrics;
use proto::{CommitDb, Decided, Message, NodeId, ReplyCommitDb, Request};
use std::collections::VecDeque;
use tokio::sync::mpsc;

/// Frames taken from the transport at once, at most: a batch check gains little beyond this,
/// and a core should not hold other messages back for long.
const BURST: usize = 64;
/// A burst takes no more frames once it holds this many bytes (it always takes one): what its
/// frames decode to is held until the core took it, and a frame of minimal items decodes to
/// 15 to 25 times its size, so 64 frames of up to 16 MiB each could decode to gigabytes. Under
/// load a burst's frames are a few kilobytes each, far below it.
const BURST_BYTES: usize = 4 << 20;

/// One step of work for the event loop. (Not boxed: an item lives for one step, on the stack,
/// and most are messages.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Item {
    /// A message, and the length of its frame.
    Message(Message, usize),
    /// The client requests of one burst, in arrival order.
    Requests(Vec<Request>),
    /// The REPLY-COMMIT-DBs of one burst, in arrival order, each with the node whose link it
    /// came on.
    ReplyCommitDbs(Vec<(NodeId, ReplyCommitDb)>),
    /// The COMMIT-DBs of one burst, in arrival order, each with the node whose link it came on.
    CommitDbs(Vec<(NodeId, CommitDb)>),
    /// A replica's pacing hint, with the node whose link it came on.
    Decided(NodeId, Decided),
}

/// The messages a node's core takes in batches; the others come one by one.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Batches {
    pub requests: bool,
    pub reply_commit_dbs: bool,
    pub commit_dbs: bool,
    /// Not batched, but taken with its link (a primary's pacing hints).
    pub decided: bool,
}

/// The decoding end of a node's inbound frames.
#[derive(Debug)]
pub(crate) struct Intake {
    inbound: mpsc::Receiver<net::Inbound>,
    batches: Batches,
    frames: Vec<net::Inbound>,
    ready: VecDeque<Item>,
}

impl Intake {
    pub fn new(inbound: mpsc::Receiver<net::Inbound>, batches: Batches) -> Self {
        Intake {
            inbound,
            batches,
            frames: Vec::with_capacity(BURST),
            ready: VecDeque::new(),
        }
    }

    /// The next message, or the batched messages of one kind of the next burst; `None` once
    /// the transport is gone. Frames that do not decode are counted (`metrics`) and skipped.
    ///
    /// Cancel-safe (for `select!`): the only await is the receiver's `recv`, and nothing
    /// taken from it is held across an await.
    pub async fn next(&mut self, metrics: &Metrics) -> Option<Item> {
        loop {
            if let Some(item) = self.ready.pop_front() {
                return Some(item);
            }
            let first = self.inbound.recv().await?;
            let mut bytes = first.frame.len();
            self.frames.push(first);
            while self.frames.len() < BURST && bytes < BURST_BYTES {
                let Ok(next) = self.inbound.try_recv() else {
                    break;
                };
                bytes += next.frame.len();
                self.frames.push(next);
            }
            let (mut requests, mut replies, mut commit_dbs) = (Vec::new(), Vec::new(), Vec::new());
            let mut others = Vec::new();
            let batches = self.batches;
            for inbound in self.frames.drain(..) {
                let link = inbound
                    .link
                    .and_then(|id| u32::try_from(id).ok())
                    .map(NodeId);
                match (metrics.decode(&inbound.frame), link) {
                    (Some(Message::Request(r)), _) if batches.requests => requests.push(r),
                    (Some(Message::Requests(rs)), _) if batches.requests => requests.extend(rs),
                    (Some(Message::ReplyCommitDb(r)), Some(from)) if batches.reply_commit_dbs => {
                        replies.push((from, r))
                    }
                    (Some(Message::CommitDb(c)), Some(from)) if batches.commit_dbs => {
                        commit_dbs.push((from, c))
                    }
                    (Some(Message::ReplyCommitDb(_)), None) if batches.reply_commit_dbs => {
                        metrics.reject("unlinked_reply_commit_db")
                    }
                    (Some(Message::CommitDb(_)), None) if batches.commit_dbs => {
                        metrics.reject("unlinked_commit_db")
                    }
                    (Some(Message::Decided(d)), Some(from)) if batches.decided => {
                        others.push(Item::Decided(from, d))
                    }
                    (Some(Message::Decided(_)), None) if batches.decided => {
                        metrics.reject("unlinked_decided")
                    }
                    (Some(message), _) => others.push(Item::Message(message, inbound.frame.len())),
                    (None, _) => {}
                }
            }
            if !requests.is_empty() {
                self.ready.push_back(Item::Requests(requests));
            }
            if !replies.is_empty() {
                self.ready.push_back(Item::ReplyCommitDbs(replies));
            }
            if !commit_dbs.is_empty() {
                self.ready.push_back(Item::CommitDbs(commit_dbs));
            }
            self.ready.extend(others);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::{ConfigEpoch, Envelope, GroupId};

    fn inbound(message: &Message, link: Option<u64>) -> net::Inbound {
        net::Inbound {
            from: "127.0.0.1:9".parse().unwrap(),
            frame: Envelope::encode(message),
            link,
            reserved: net::Reserved::default(),
        }
    }

    /// A COMMIT-DB, REPLY-COMMIT-DB or DECIDED goes to the core with the node whose link it
    /// came on; one that came on a plain connection is counted and dropped.
    #[tokio::test]
    async fn linked_messages_carry_their_link_and_unlinked_ones_are_dropped() {
        let metrics = Metrics::register(&mut net::metrics::Registry::default());
        let commit_db = Message::CommitDb(CommitDb {
            config_epoch: ConfigEpoch(1),
            group: GroupId(0),
            replica: NodeId(101),
            executions: Vec::new(),
        });
        let reply = Message::ReplyCommitDb(ReplyCommitDb {
            db_node: NodeId(11),
            results: vec![(1, vec![1])],
        });
        let decided = Decided {
            view: proto::View(0),
            counter: 3,
        };
        let (tx, rx) = mpsc::channel(8);
        for frame in [
            inbound(&commit_db, Some(101)),
            inbound(&commit_db, None),
            inbound(&reply, None),
            inbound(&reply, Some(11)),
            inbound(&Message::Decided(decided), None),
            inbound(&Message::Decided(decided), Some(102)),
        ] {
            tx.send(frame).await.unwrap();
        }
        let batches = Batches {
            requests: true,
            reply_commit_dbs: true,
            commit_dbs: true,
            decided: true,
        };
        let mut intake = Intake::new(rx, batches);
        let Some(Item::ReplyCommitDbs(replies)) = intake.next(&metrics).await else {
            panic!("the burst's REPLY-COMMIT-DBs first");
        };
        assert_eq!(replies.len(), 1);
        assert_eq!(replies[0].0, NodeId(11));
        let Some(Item::CommitDbs(commit_dbs)) = intake.next(&metrics).await else {
            panic!("then its COMMIT-DBs");
        };
        assert_eq!(commit_dbs.len(), 1);
        assert_eq!(commit_dbs[0].0, NodeId(101));
        let Some(Item::Decided(from, d)) = intake.next(&metrics).await else {
            panic!("then the DECIDED that came on a link");
        };
        assert_eq!((from, d), (NodeId(102), decided));
        assert_eq!(metrics.rejected("unlinked_commit_db"), 1);
        assert_eq!(metrics.rejected("unlinked_reply_commit_db"), 1);
        assert_eq!(metrics.rejected("unlinked_decided"), 1);
    }

    /// The requests of a REQUESTS frame join the burst's REQUESTs in frame order, as if each
    /// had come alone; a node that does not batch requests gets the frame as it is.
    #[tokio::test]
    async fn a_requests_frame_joins_the_bursts_requests() {
        let metrics = Metrics::register(&mut net::metrics::Registry::default());
        let key = proto::SigningKey::from_seed([1; 32]);
        let request = |client| {
            proto::Request::signed(proto::ClientId(client), 1, vec![0], b"op".to_vec(), &key)
        };
        let together = Message::Requests(vec![request(2), request(3)]);
        let burst = [
            Message::Request(request(1)),
            together.clone(),
            Message::Request(request(4)),
        ];
        let (tx, rx) = mpsc::channel(8);
        for message in &burst {
            tx.send(inbound(message, None)).await.unwrap();
        }
        let batches = Batches {
            requests: true,
            reply_commit_dbs: false,
            commit_dbs: false,
            decided: false,
        };
        let Some(Item::Requests(requests)) = Intake::new(rx, batches).next(&metrics).await else {
            panic!("the burst's requests together");
        };
        assert_eq!(requests, (1..=4).map(request).collect::<Vec<_>>());

        let (tx, rx) = mpsc::channel(8);
        tx.send(inbound(&together, None)).await.unwrap();
        let batches = Batches {
            requests: false,
            ..batches
        };
        let Some(Item::Message(message, _)) = Intake::new(rx, batches).next(&metrics).await else {
            panic!("the frame as it is");
        };
        assert_eq!(message, together);
    }

    /// A burst takes no more frames once it holds `BURST_BYTES`: the rest wait for the next.
    #[tokio::test]
    async fn a_burst_stops_at_its_byte_bound() {
        let metrics = Metrics::register(&mut net::metrics::Registry::default());
        let key = proto::SigningKey::from_seed([1; 32]);
        let request = |client, size| {
            proto::Request::signed(proto::ClientId(client), 1, vec![0], vec![7; size], &key)
        };
        let (tx, rx) = mpsc::channel(8);
        let large = BURST_BYTES * 3 / 4;
        for (client, size) in [(1, large), (2, large), (3, 8)] {
            let frame = inbound(&Message::Request(request(client, size)), None);
            tx.send(frame).await.unwrap();
        }
        let batches = Batches {
            requests: true,
            ..Batches::default()
        };
        let mut intake = Intake::new(rx, batches);
        let mut bursts = Vec::new();
        for _ in 0..2 {
            let Some(Item::Requests(requests)) = intake.next(&metrics).await else {
                panic!("requests");
            };
            bursts.push(requests.iter().map(|r| r.client.0).collect::<Vec<_>>());
        }
        assert_eq!(bursts, [vec![1, 2], vec![3]]);
    }
}
