//! `cloudbft responders`: stand-ins for a no-op cluster's primary candidates and replicas, so
//! that a load driver or a gateway can be measured alone (`cloudbft bench --responders`).
//!
//! Every primary candidate and replica of the configuration is bound at its address with its
//! configured key, as the node would be, and nothing else runs: no ordering, no warrants, no
//! database. A replica answers each REQUEST it receives for its own group at once with the
//! REPLY a correct replica would send, the no-op page rendered from the no-op's result, on its
//! authenticated link to the client's endpoint (the REPLYs of one frame together, as a replica
//! sends those it has ready). The endpoint therefore does all its usual work, signing requests
//! in batches, sending them to the primary candidates and the group, checking links and
//! matching f+1 pages, against a "cluster" that costs almost nothing. What a run then measures
//! is the most that endpoint can drive on this machine.
//!
//! It is a measuring instrument, never a cluster: it checks no signature and orders nothing.

use anyhow::{bail, Context, Result};
use clap::Args;
use dbvote::noop::Noop;
use dbvote::Application;
use node::app::AppKind;
use node::peers::Peers;
use proto::config::Cluster;
use proto::{ConfigEpoch, Envelope, Message, NodeId, Reply, Request, View};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct RespondersArgs {
    /// The cluster configuration written by `cloudbft keygen` (application "noop").
    #[arg(long)]
    pub config: PathBuf,
}

/// Binds every primary candidate and replica of the configuration and answers until stopped.
pub fn responders(args: RespondersArgs) -> Result<()> {
    let cluster = Arc::new(Cluster::load(&args.config)?);
    if AppKind::of(&cluster)? != AppKind::Noop {
        bail!(
            "responders answer no-op requests only; the configuration's application is \"{}\"",
            cluster.config.application
        );
    }
    let keys = args
        .config
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .join("keys");
    // One thread, as a node with one worker runs: the responders take at most one core.
    let runtime = crate::nodes::runtime(1)?;
    runtime.block_on(async {
        let nodes: Vec<NodeId> = stand_ins(&cluster).map(|(id, _)| id).collect();
        for id in nodes {
            let key =
                proto::keys::load(&proto::keys::node_key_path(&keys, id), cluster.node_key(id))?;
            let (peers, mut inbound) = Peers::bind(&cluster, id, key)
                .await
                .with_context(|| format!("binding node {}'s address", id.0))?;
            let cluster = Arc::clone(&cluster);
            tokio::spawn(async move {
                let responder = Responder::new(&cluster, id);
                while let Some(frame) = inbound.recv().await {
                    let replies = responder.answer(&frame.frame);
                    if !replies.is_empty() {
                        peers.replies_to_clients(replies);
                    }
                }
            });
        }
        eprintln!("responders ready");
        crate::nodes::stop_signal()?.await;
        Ok(())
    })
}

/// The nodes the responders stand in for, at their addresses: every primary candidate and
/// replica of the configuration.
pub(crate) fn stand_ins(cluster: &Cluster) -> impl Iterator<Item = (NodeId, &str)> {
    let c = &cluster.config;
    let primaries = c.primaries.iter().map(|p| (NodeId(p.id), p.addr.as_str()));
    primaries.chain(c.replicas.iter().map(|r| (NodeId(r.id), r.addr.as_str())))
}

/// What one stand-in node answers: nothing at a primary candidate, its group's REPLYs at a
/// replica.
struct Responder {
    id: NodeId,
    /// The replica's group, if `id` is a replica.
    group: Option<proto::GroupId>,
    cluster: Arc<Cluster>,
    pages: Arc<dyn group::render::Renderer>,
}

impl Responder {
    fn new(cluster: &Arc<Cluster>, id: NodeId) -> Responder {
        Responder {
            id,
            group: cluster.group_of_replica(id),
            cluster: Arc::clone(cluster),
            pages: AppKind::Noop.renderer(),
        }
    }

    /// The REPLYs to the requests of one inbound frame; anything else gets none.
    fn answer(&self, frame: &[u8]) -> Vec<Reply> {
        let Some(group) = self.group else {
            return Vec::new();
        };
        let requests = match Envelope::decode(frame) {
            Ok(Message::Request(request)) => vec![request],
            Ok(Message::Requests(requests)) => requests,
            _ => return Vec::new(),
        };
        requests
            .iter()
            .filter(|r| {
                r.partitions
                    .first()
                    .is_some_and(|&p| self.cluster.group_of(p) == Some(group))
            })
            .filter_map(|r| self.reply(group, r))
            .collect()
    }

    /// The REPLY a correct replica of `group` sends for a no-op request: its page rendered
    /// from the result the database nodes would return (the no-op computes it without its
    /// database). A request whose operation is no no-op gets none.
    fn reply(&self, group: proto::GroupId, request: &Request) -> Option<Reply> {
        let result = Noop
            .results_without_database(&[&request.operation])?
            .ok()?
            .pop()?;
        Some(Reply {
            config_epoch: ConfigEpoch(self.cluster.config.config_epoch),
            view: View(0),
            group,
            replica: self.id,
            client: request.client,
            timestamp: request.timestamp,
            page: self.pages.render(&request.body(), &result),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::testing::{client_key, TestCluster};
    use proto::{ClientId, GroupId};

    fn noop(client: u64, partition: u32, payload: &[u8]) -> Request {
        let op = dbvote::noop::NoopOp {
            partitions: vec![partition],
            payload: payload.to_vec(),
        };
        let id = ClientId(client);
        Request::signed(id, 7, vec![partition], op.encode(), &client_key(id))
    }

    #[test]
    fn a_replica_answers_its_own_groups_requests_as_a_correct_replica_would() {
        // Two groups: partitions 0 and 2 are group 0's, 1 and 3 group 1's.
        let cluster = Arc::new(TestCluster::new(1, 2, 4, 2).cluster);
        let ours = noop(1, 2, b"abc");
        let frame = Envelope::encode(&Message::Requests(vec![ours.clone(), noop(2, 1, b"")]));
        let member = NodeId(cluster.members(GroupId(0)).nth(1).unwrap().id);
        let replies = Responder::new(&cluster, member).answer(&frame);
        assert_eq!(replies.len(), 1, "only group 0's request is answered");
        let reply = &replies[0];
        assert_eq!(
            (reply.group, reply.replica, reply.client, reply.timestamp),
            (GroupId(0), member, ours.client, ours.timestamp)
        );
        assert_eq!(reply.config_epoch, ConfigEpoch(1));
        // The page a replica renders from the database nodes' no-op result: the payload's
        // length, 3.
        let page = AppKind::Noop
            .renderer()
            .render(&ours.body(), &3u64.to_be_bytes());
        assert_eq!(reply.page, page);
    }

    #[test]
    fn primaries_and_anything_but_requests_get_no_answer() {
        let cluster = Arc::new(TestCluster::new(1, 1, 2, 1).cluster);
        let frame = Envelope::encode(&Message::Request(noop(1, 0, b"")));
        let primary = NodeId(cluster.config.primaries[0].id);
        assert!(Responder::new(&cluster, primary).answer(&frame).is_empty());
        let replica = NodeId(cluster.config.replicas[0].id);
        assert_eq!(Responder::new(&cluster, replica).answer(&frame).len(), 1);
        assert!(Responder::new(&cluster, replica)
            .answer(b"not a frame")
            .is_empty());
        // A request whose operation is no no-op (TestCluster's operations are partition bytes).
        let other = Envelope::encode(&Message::Request(proto::testing::request(1, 1, &[0])));
        assert!(Responder::new(&cluster, replica).answer(&other).is_empty());
    }
}
