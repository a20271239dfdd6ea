//! Addresses from the cluster configuration, parsed once, and the node's transport.

use crate::links::{LinkAddresses, Links};
use crate::NodeError;
use net::{Inbound, Transport, TransportConfig};
use proto::config::Cluster;
use proto::{ClientId, Envelope, Message, NodeId, SigningKey};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Where every node and client of the cluster listens, and the transport to reach them
/// (authenticated links to and from nodes, and to client endpoints).
#[derive(Clone)]
pub struct Peers {
    transport: Transport,
    links: Arc<Links>,
    nodes: BTreeMap<NodeId, SocketAddr>,
    clients: BTreeMap<ClientId, SocketAddr>,
}

fn parse(field: String, addr: &str) -> Result<SocketAddr, NodeError> {
    addr.parse().map_err(|_| NodeError::Config {
        field,
        fix: format!("\"{addr}\" is not an IP:port address (for example 127.0.0.1:7100)"),
    })
}

type Addresses = (BTreeMap<NodeId, SocketAddr>, BTreeMap<ClientId, SocketAddr>);

/// Every configured node's and client's address.
fn addresses(cluster: &Cluster) -> Result<Addresses, NodeError> {
    let c = &cluster.config;
    let mut nodes = BTreeMap::new();
    let listed = c
        .primaries
        .iter()
        .map(|p| ("primary", p.id, &p.addr))
        .chain(c.replicas.iter().map(|r| ("replica", r.id, &r.addr)))
        .chain(c.db_nodes.iter().map(|d| ("dbnode", d.id, &d.addr)));
    for (role, id, addr) in listed {
        nodes.insert(NodeId(id), parse(format!("{role} {id}.addr"), addr)?);
    }
    let mut clients = BTreeMap::new();
    for client in &c.clients {
        clients.insert(
            ClientId(client.id),
            parse(format!("client {}.addr", client.id), &client.addr)?,
        );
    }
    Ok((nodes, clients))
}

/// Who listens at each node and client endpoint address (endpoint addresses parsed as
/// `addresses` parsed the clients').
fn by_address(nodes: &BTreeMap<NodeId, SocketAddr>, cluster: &Cluster) -> LinkAddresses {
    LinkAddresses {
        nodes: nodes.iter().map(|(&node, &addr)| (addr, node)).collect(),
        endpoints: cluster
            .endpoints()
            .into_iter()
            .filter_map(|(addr, identity)| Some((addr.parse().ok()?, identity)))
            .collect(),
    }
}

impl Peers {
    /// Parses every address and binds `me`'s listen address, for authenticated links with
    /// `key` (`me`'s configured key).
    pub async fn bind(
        cluster: &Cluster,
        me: NodeId,
        key: SigningKey,
    ) -> Result<(Peers, mpsc::Receiver<Inbound>), NodeError> {
        let (nodes, clients) = addresses(cluster)?;
        let listen = *nodes.get(&me).ok_or(NodeError::UnknownNode(me.0))?;
        let links = Arc::new(Links::new(me, key, &by_address(&nodes, cluster), cluster));
        let (transport, inbound) =
            Transport::bind_with_links(listen, TransportConfig::default(), links.clone())
                .await
                .map_err(|source| NodeError::Bind {
                    addr: listen.to_string(),
                    source,
                })?;
        Ok((
            Peers {
                transport,
                links,
                nodes,
                clients,
            },
            inbound,
        ))
    }

    /// Sends to a configured node (unknown ids are a driver bug and only logged).
    pub fn to_node(&self, node: NodeId, message: &Message) {
        match self.nodes.get(&node) {
            Some(&addr) => self.transport.send(addr, Envelope::encode(message)),
            None => tracing::error!(node = node.0, "no address for node"),
        }
    }

    /// Sends the same message to several nodes, encoding it once.
    pub fn to_nodes(&self, nodes: impl IntoIterator<Item = NodeId>, message: &Message) {
        let frame = Envelope::encode(message);
        for node in nodes {
            if let Some(&addr) = self.nodes.get(&node) {
                self.transport.send(addr, frame.clone());
            }
        }
    }

    /// Sends to configured nodes, waiting while a destination's queue is full (bulk transfers
    /// that must go at the receivers' pace; see `net::Transport::send_paced`).
    pub async fn to_nodes_paced(&self, nodes: &[NodeId], message: &Message) {
        let frame = Envelope::encode(message);
        for node in nodes {
            if let Some(&addr) = self.nodes.get(node) {
                self.transport.send_paced(addr, frame.clone()).await;
            }
        }
    }

    /// Sends to a client's configured reply address; a client without one gets nothing.
    pub fn to_client(&self, client: ClientId, message: &Message) {
        if let Some(&addr) = self.clients.get(&client) {
            self.transport.send(addr, Envelope::encode(message));
        }
    }

    /// Sends REPLYs to their clients' reply addresses, those for one address (a gateway or a
    /// load driver serves many clients) together in REPLIES frames, as few as fit `max_frame`:
    /// a frame is a wake-up, a link-free read and a decode at the endpoint, whatever it holds.
    pub fn replies_to_clients(&self, replies: Vec<proto::Reply>) {
        let mut by_addr: Vec<(SocketAddr, Vec<proto::Reply>)> = Vec::new();
        for reply in replies {
            let Some(&addr) = self.clients.get(&reply.client) else {
                continue;
            };
            match by_addr.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, together)) => together.push(reply),
                None => by_addr.push((addr, vec![reply])),
            }
        }
        let max = self.transport.config().max_frame;
        for (addr, replies) in by_addr {
            let frames = Envelope::encode_together(replies, max, Message::Replies, |m| match m {
                Message::Replies(replies) => replies,
                _ => unreachable!("wrapped as REPLIES"),
            });
            for (frame, replies) in frames {
                match frame {
                    Ok(frame) => self.transport.send(addr, frame),
                    // Too large even alone: the transport refuses it, counted and logged.
                    Err(_) => {
                        for reply in replies {
                            self.to_client(reply.client, &Message::Reply(reply));
                        }
                    }
                }
            }
        }
    }

    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The addresses of a new configuration epoch (nodes added or moved). Nodes it no longer
    /// has keep their address: a removed group's members and a replaced member finish their
    /// closed epoch's work (database nodes answer their COMMIT-DBs) before they stop.
    pub fn update(&mut self, cluster: &Cluster) -> Result<(), NodeError> {
        let (nodes, clients) = addresses(cluster)?;
        self.links.learn(&by_address(&nodes, cluster), cluster);
        self.nodes.extend(nodes);
        self.clients = clients;
        Ok(())
    }

    /// Sends to an address the operator named in a message it signed (its own listen address
    /// during a reconfiguration); an address that does not parse gets nothing.
    pub fn to_addr(&self, addr: &str, message: &Message) {
        match addr.parse::<SocketAddr>() {
            Ok(addr) => self.transport.send(addr, Envelope::encode(message)),
            Err(_) => tracing::warn!(addr, "the operator's address does not parse"),
        }
    }

    /// Stops the transport.
    pub async fn shutdown(self) {
        self.transport.shutdown().await;
    }
}
