//! The configurations a client endpoint knows (docs/protocol.md, "Reconfiguration"): the
//! current one, where requests go, and the few before it, against which replies of requests
//! ordered in an earlier epoch are checked. A new epoch comes as the operator's CONFIGURE,
//! pushed to the endpoint or fetched from a node when a REPLY names a later epoch; its operator
//! signature makes one copy enough.

use proto::config::{Cluster, ClusterConfig};
use proto::SigningKey;
use proto::{
    ClientId, ConfigEpoch, ConfigRequest, Configure, Envelope, GroupId, Message, PartitionId,
    Signature,
};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

/// How many earlier epochs are kept for late replies.
const KEEP_EARLIER: usize = 4;
/// Least time between two requests for the configuration.
const ASK_EVERY: Duration = Duration::from_secs(1);

struct Known {
    current: Arc<Cluster>,
    earlier: BTreeMap<u64, Arc<Cluster>>,
    /// The current epoch's primary candidates and each group's replicas.
    destinations: Destinations,
    asked: Option<Instant>,
}

/// Why a CONFIGURE is not taken.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not later than the epoch the endpoint runs.
    NotNewer,
    /// Not signed by the operator key of the endpoint's configuration, or not a configuration
    /// that may follow it.
    Invalid(String),
}

pub(crate) struct Configs {
    known: RwLock<Known>,
    /// The identity that signs requests for the configuration.
    asker: (ClientId, Arc<SigningKey>),
}

impl Configs {
    pub(crate) fn new(
        cluster: Arc<Cluster>,
        destinations: Destinations,
        asker: (ClientId, Arc<SigningKey>),
    ) -> Configs {
        Configs {
            known: RwLock::new(Known {
                current: cluster,
                earlier: BTreeMap::new(),
                destinations,
                asked: None,
            }),
            asker,
        }
    }

    fn read<T>(&self, f: impl FnOnce(&Known) -> T) -> T {
        f(&self.known.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The configuration requests are sent under.
    pub(crate) fn current(&self) -> Arc<Cluster> {
        self.read(|k| k.current.clone())
    }

    /// The configuration of `epoch`, if known.
    pub(crate) fn of_epoch(&self, epoch: ConfigEpoch) -> Option<Arc<Cluster>> {
        self.read(|k| {
            if k.current.epoch() == epoch {
                Some(k.current.clone())
            } else {
                k.earlier.get(&epoch.0).cloned()
            }
        })
    }

    /// A node's key in the newest epoch that has the node, if one does: REPLYs of a closed
    /// epoch's members still count, against that epoch's configuration.
    pub(crate) fn node_key(&self, node: proto::NodeId) -> Option<proto::PublicKey> {
        self.read(|k| {
            std::iter::once(&k.current)
                .chain(k.earlier.values().rev())
                .find_map(|cluster| cluster.node_key(node).copied())
        })
    }

    /// Where a request declaring `partitions` goes now: every primary candidate and the
    /// replicas of the group that serves its first partition, which orders and executes it.
    /// Other groups' replicas would only check its signature for nothing (with G groups that
    /// multiplied the request path's costliest step by G).
    pub(crate) fn destinations(&self, partitions: &[PartitionId]) -> Vec<SocketAddr> {
        self.read(|k| {
            let group = partitions.first().and_then(|&p| k.current.group_of(p));
            k.destinations.of_group(group)
        })
    }

    /// Where retransmissions go: the current nodes and those of the earlier epochs kept. A
    /// request ordered in an earlier epoch whose reply was lost is answered only from that
    /// epoch's reply caches (its replicas keep their closed epoch's core for a while, docs/
    /// protocol.md "Reconfiguration"); in the new epoch it is a duplicate.
    pub(crate) fn retransmit_destinations(&self) -> Vec<SocketAddr> {
        self.read(|k| {
            let mut out = k.destinations.all();
            for earlier in k.earlier.values() {
                for addr in destinations(earlier).all() {
                    if !out.contains(&addr) {
                        out.push(addr);
                    }
                }
            }
            out
        })
    }

    /// Takes the operator's CONFIGURE if it starts a later epoch than ours, is signed by our
    /// configuration's operator key, keeps what a configuration may never change online, and
    /// is valid on its own. Returns the new epoch.
    pub(crate) fn adopt(&self, configure: &Configure) -> Result<ConfigEpoch, Refused> {
        let current = self.current();
        let invalid = |why: String| Refused::Invalid(why);
        let key = current
            .operator_key()
            .ok_or_else(|| invalid("our configuration has no operator key".into()))?;
        if !configure.verify(&key) {
            return Err(invalid("not signed by the operator".into()));
        }
        let next: ClusterConfig =
            toml::from_str(&configure.config).map_err(|e| invalid(e.to_string()))?;
        if next.config_epoch <= current.config.config_epoch {
            return Err(Refused::NotNewer);
        }
        // An endpoint that missed epochs checks what stays the same across any number of them.
        proto::reconfig::check_descendant(&current.config, &next)
            .map_err(|e| invalid(e.to_string()))?;
        let next = Arc::new(Cluster::new(next).map_err(|e| invalid(e.to_string()))?);
        let destinations = destinations(&next);
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        let previous = std::mem::replace(&mut known.current, next.clone());
        known.earlier.insert(previous.epoch().0, previous);
        while known.earlier.len() > KEEP_EARLIER {
            known.earlier.pop_first();
        }
        known.destinations = destinations;
        tracing::info!(
            epoch = next.epoch().0,
            "client endpoint follows a new configuration epoch"
        );
        Ok(next.epoch())
    }

    /// A signed CONFIG-REQUEST to send to every node we know, at most once per [`ASK_EVERY`].
    pub(crate) fn ask(&self) -> Option<(Vec<u8>, Vec<SocketAddr>)> {
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        if known.asked.is_some_and(|at| at.elapsed() < ASK_EVERY) {
            return None;
        }
        known.asked = Some(Instant::now());
        let (client, key) = &self.asker;
        let request = ConfigRequest {
            client: *client,
            config_epoch: known.current.epoch(),
            signature: Signature([0; 64]),
        }
        .sign(key);
        let frame = Envelope::encode(&Message::ConfigRequest(request));
        Some((frame, known.destinations.all()))
    }
}

/// Where a configuration's nodes listen: the primary candidates and each group's replicas.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Destinations {
    primaries: Vec<SocketAddr>,
    groups: BTreeMap<GroupId, Vec<SocketAddr>>,
}

impl Destinations {
    pub(crate) fn add_primary(&mut self, addr: SocketAddr) {
        if !self.primaries.contains(&addr) {
            self.primaries.push(addr);
        }
    }

    pub(crate) fn add_replica(&mut self, group: GroupId, addr: SocketAddr) {
        let members = self.groups.entry(group).or_default();
        if !members.contains(&addr) {
            members.push(addr);
        }
    }

    /// Every primary candidate, then every replica.
    pub(crate) fn all(&self) -> Vec<SocketAddr> {
        self.of_group(None)
    }

    /// Every primary candidate, then the replicas of `group` (of every group if None or if
    /// the configuration has no such group: the nodes then refuse the request themselves).
    pub(crate) fn of_group(&self, group: Option<GroupId>) -> Vec<SocketAddr> {
        let mut out = self.primaries.clone();
        let chosen: Vec<&Vec<SocketAddr>> = match group.and_then(|g| self.groups.get(&g)) {
            Some(members) => vec![members],
            None => self.groups.values().collect(),
        };
        for addr in chosen.into_iter().flatten() {
            if !out.contains(addr) {
                out.push(*addr);
            }
        }
        out
    }
}

/// The destinations of `cluster` (configured addresses are IP:port; one that is not is
/// skipped, the configuration's own check names it).
pub(crate) fn destinations(cluster: &Cluster) -> Destinations {
    let mut out = Destinations::default();
    let c = &cluster.config;
    for addr in c.primaries.iter().filter_map(|p| p.addr.parse().ok()) {
        out.add_primary(addr);
    }
    for r in &c.replicas {
        if let Ok(addr) = r.addr.parse() {
            out.add_replica(GroupId(r.group), addr);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_goes_to_the_candidates_and_its_own_groups_replicas() {
        let addr = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        let mut d = Destinations::default();
        d.add_primary(addr(1));
        d.add_primary(addr(2));
        for (group, port) in [(0, 10), (0, 11), (1, 20), (1, 21), (0, 10)] {
            d.add_replica(GroupId(group), addr(port));
        }
        assert_eq!(d.of_group(Some(GroupId(1))), [1, 2, 20, 21].map(addr));
        assert_eq!(d.of_group(Some(GroupId(0))), [1, 2, 10, 11].map(addr));
        // No such group (the nodes refuse the request themselves), or every node.
        assert_eq!(
            d.of_group(Some(GroupId(7))),
            [1, 2, 10, 11, 20, 21].map(addr)
        );
        assert_eq!(d.all(), [1, 2, 10, 11, 20, 21].map(addr));
    }
}
