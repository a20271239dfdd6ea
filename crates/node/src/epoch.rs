//! What every driver does at an online reconfiguration (docs/protocol.md, "Reconfiguration"):
//! check the operator's CONFIGURE against the epoch it ends, keep the new configuration on disk
//! for restarts, answer the operator's position request and gateways' configuration requests.

use crate::peers::Peers;
use group::order::OrderBook;
use proto::config::{Cluster, ClusterConfig};
use proto::reconfig::ReconfigError;
use proto::{
    ConfigRequest, Configure, EpochStarted, Message, NodeId, PositionReport, PositionRequest,
    Signature, SigningKey,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use usig::{MessageDigest, UniqueWarrant};

/// A node's view of its configuration epochs.
pub struct Epochs {
    /// Where the node's configuration file is (rewritten when an epoch starts); none in tests.
    config_path: Option<PathBuf>,
    /// The CONFIGURE that started the current epoch (none for the first), for gateways that ask.
    started_by: Option<Configure>,
    /// The operator's position request, while this node waits to answer it.
    pub asked: Option<PositionRequest>,
}

impl Epochs {
    /// Reads the CONFIGURE kept next to `config_path` by an earlier run, if it started the
    /// configuration there.
    pub fn new(config_path: Option<PathBuf>, cluster: &Cluster) -> Epochs {
        let started_by = config_path
            .as_deref()
            .and_then(|p| std::fs::read(configure_path(p)).ok())
            .and_then(|bytes| wire::decode::<Configure>(&bytes).ok())
            .filter(|c| {
                toml::from_str::<ClusterConfig>(&c.config)
                    .is_ok_and(|next| next.config_epoch == cluster.config.config_epoch)
            });
        Epochs {
            config_path,
            started_by,
            asked: None,
        }
    }

    /// Whether the configuration this node loaded was started by the operator's CONFIGURE kept
    /// next to it: a replica that joined its epoch with `--await-epoch` and was restarted (by
    /// systemd, say) runs that epoch instead of waiting for a CONFIGURE sent long ago.
    pub fn adopted(&self) -> bool {
        self.started_by.is_some()
    }

    /// The operator's CONFIGURE. If it starts the epoch we run already (a retransmission), we
    /// acknowledge it again and return `None`; otherwise we check it against the epoch it ends
    /// (`shape`: the next configuration the ordered RECONFIGURE named, if we processed it),
    /// keep the new configuration on disk, acknowledge it and return it.
    pub fn on_configure(
        &mut self,
        node: (&Peers, NodeId, &SigningKey),
        current: &Cluster,
        shape: Option<&ClusterConfig>,
        configure: &Configure,
    ) -> Option<Result<Arc<Cluster>, ReconfigError>> {
        if self.started_by.as_ref() == Some(configure) {
            acknowledge(node, current, configure);
            return None;
        }
        let adopted = configure
            .check(current, shape, |book| OrderBook::start_of(book, current))
            .and_then(|next| self.keep(configure, &next));
        if let Ok(next) = &adopted {
            acknowledge(node, next, configure);
        }
        Some(adopted)
    }

    /// The same for a node that was not in the previous epoch and waits to join (`cloudbft
    /// replica --await-epoch`): it knows only the shape it was started with, so it checks the
    /// operator's signature with the shape's operator key, the epoch and the shape.
    pub fn on_configure_as_newcomer(
        &mut self,
        node: (&Peers, NodeId, &SigningKey),
        shape: &Cluster,
        configure: &Configure,
    ) -> Result<Arc<Cluster>, ReconfigError> {
        let next = configure.check_as_newcomer(shape)?;
        let next = self.keep(configure, &next)?;
        acknowledge(node, &next, configure);
        Ok(next)
    }

    fn keep(
        &mut self,
        configure: &Configure,
        next: &ClusterConfig,
    ) -> Result<Arc<Cluster>, ReconfigError> {
        let cluster = Arc::new(Cluster::new(next.clone())?);
        if let Some(path) = &self.config_path {
            // Written atomically, so a crash leaves the old file or the new one; a node
            // restarted from it runs the new epoch.
            if let Err(e) = write_atomically(path, configure.config.as_bytes())
                .and_then(|()| write_atomically(&configure_path(path), &wire_bytes(configure)))
            {
                tracing::error!(path = %path.display(), error = %e, "cannot keep the new configuration on disk; a restart would run the old one");
            }
        }
        self.started_by = Some(configure.clone());
        self.asked = None;
        Ok(cluster)
    }

    /// The operator's position request, if it is signed by the operator for this epoch.
    pub fn position_request(&mut self, cluster: &Cluster, request: PositionRequest) -> bool {
        let signed = cluster.operator_key().is_some_and(|k| request.verify(&k));
        let valid = signed && request.config_epoch == cluster.epoch();
        if valid {
            self.asked = Some(request);
        }
        valid
    }

    /// Answers the pending position request with our last warrant (and the book of the epoch's
    /// end, if we have it), at the operator's address.
    pub fn report(
        &mut self,
        peers: &Peers,
        me: NodeId,
        cluster: &Cluster,
        key: &SigningKey,
        last: Option<(MessageDigest, UniqueWarrant)>,
        book: Option<Vec<u8>>,
    ) {
        let Some(asked) = self.asked.take() else {
            return;
        };
        let report = PositionReport {
            node: me,
            config_epoch: cluster.epoch(),
            last,
            book,
            signature: Signature([0; 64]),
        }
        .sign(key);
        tracing::info!(
            id = me.0,
            counter = report.last.as_ref().map_or(0, |(_, ui)| ui.counter),
            "told the operator where our USIG sequence stands; nothing more is warranted in this epoch"
        );
        peers.to_addr(&asked.reply_to, &Message::PositionReport(report));
    }

    /// A gateway asks for our configuration: the CONFIGURE that started our epoch, if it is
    /// later than the one the gateway knows, at the gateway's configured address.
    pub fn answer(&self, peers: &Peers, cluster: &Cluster, request: &ConfigRequest) -> bool {
        let signed = cluster
            .client_key(request.client)
            .is_some_and(|k| request.verify(k));
        if !signed {
            return false;
        }
        if let Some(configure) = self
            .started_by
            .as_ref()
            .filter(|_| request.config_epoch < cluster.epoch())
        {
            peers.to_client(
                request.client,
                &Message::Configure(Box::new(configure.clone())),
            );
        }
        true
    }
}

/// Tells the operator that we run the epoch `configure` started.
fn acknowledge(
    (peers, me, key): (&Peers, NodeId, &SigningKey),
    cluster: &Cluster,
    configure: &Configure,
) {
    let started = EpochStarted {
        node: me,
        config_epoch: cluster.epoch(),
        signature: Signature([0; 64]),
    }
    .sign(key);
    peers.to_addr(&configure.reply_to, &Message::EpochStarted(started));
}

/// Where the CONFIGURE that started the epoch of the configuration at `config` is kept.
fn configure_path(config: &Path) -> PathBuf {
    let mut name = config.file_name().unwrap_or_default().to_os_string();
    name.push(".configure");
    config.with_file_name(name)
}

fn wire_bytes(configure: &Configure) -> Vec<u8> {
    wire::encode(configure).expect("postcard encodes plain data into a Vec")
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_os_string();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}
