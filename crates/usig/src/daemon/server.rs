//! The usigd server: one listening socket per identity, one thread per connection, and one
//! backend (TPM or soft) behind a mutex, since a TPM executes one command at a time anyway.

use super::config::UsigdConfig;
use super::protocol::{Request, Response, MAX_FRAME, PROTOCOL_VERSION};
use crate::enroll::EnrollmentRecord;
use crate::soft::SoftUsig;
use crate::tpm::TpmBackend;
use crate::verify::Enrollment;
use crate::warrant::{MessageDigest, UniqueWarrant, UsigId};
use crate::{Usig, UsigError};
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use tracing::{info, warn};

/// The warrant source usigd serves from.
pub enum UsigdBackend {
    Soft(BTreeMap<UsigId, SoftUsig>),
    Tpm(Box<TpmBackend>),
}

impl UsigdBackend {
    /// Opens the backend the configuration names, with every configured identity.
    pub fn open(config: &UsigdConfig, new_epoch: bool) -> Result<Self, UsigError> {
        match &config.tpm {
            Some(tpm) => {
                let mut backend = TpmBackend::open(&tpm.tcti, &config.state_dir)?;
                for identity in &config.identities {
                    let pcr = identity.pcr.ok_or_else(|| {
                        UsigError::Config(format!(
                            "identity {}: pcr is required with [tpm]",
                            identity.id
                        ))
                    })?;
                    backend.add_identity(UsigId(identity.id), pcr)?;
                }
                Ok(UsigdBackend::Tpm(Box::new(backend)))
            }
            None => {
                let mut soft = BTreeMap::new();
                for identity in config.identity_ids() {
                    let usig = if new_epoch {
                        SoftUsig::open_new_epoch(&config.state_dir, identity)?
                    } else {
                        SoftUsig::open(&config.state_dir, identity)?
                    };
                    soft.insert(identity, usig);
                }
                Ok(UsigdBackend::Soft(soft))
            }
        }
    }

    /// Warrants `digest` for `identity`.
    pub fn create(
        &mut self,
        identity: UsigId,
        digest: &MessageDigest,
    ) -> Result<UniqueWarrant, UsigError> {
        match self {
            UsigdBackend::Soft(soft) => soft_usig(soft, identity)?.create_ui_for_digest(digest),
            UsigdBackend::Tpm(tpm) => tpm.create(identity, digest),
        }
    }

    /// The identity's last warrant and its digest.
    pub fn last(
        &mut self,
        identity: UsigId,
    ) -> Result<Option<(MessageDigest, UniqueWarrant)>, UsigError> {
        match self {
            UsigdBackend::Soft(soft) => Ok(soft_usig(soft, identity)?.last()),
            UsigdBackend::Tpm(tpm) => tpm.last(identity),
        }
    }

    /// The epoch `identity` warrants in now.
    pub fn epoch(&mut self, identity: UsigId) -> Result<crate::Epoch, UsigError> {
        match self {
            UsigdBackend::Soft(soft) => Ok(soft_usig(soft, identity)?.epoch()),
            UsigdBackend::Tpm(tpm) => Ok(tpm.epoch()),
        }
    }

    /// What the cluster configuration must record for `identity`.
    /// With a TPM the record carries the TPM's evidence (EK, EK certificate, AK public area),
    /// checked by a credential activation on this TPM first.
    pub fn enrollment(&mut self, identity: UsigId) -> Result<EnrollmentRecord, UsigError> {
        match self {
            UsigdBackend::Soft(soft) => Ok(EnrollmentRecord::new(
                identity,
                &Enrollment::Soft {
                    public_key: soft_usig(soft, identity)?.public_key(),
                },
            )),
            UsigdBackend::Tpm(tpm) => {
                let enrollment = tpm
                    .enrollment(identity)
                    .ok_or(UsigError::UnknownIdentity(identity))?;
                let evidence = tpm.evidence()?;
                Ok(EnrollmentRecord::new(identity, &enrollment).with_evidence(&evidence))
            }
        }
    }
}

fn soft_usig(
    soft: &mut BTreeMap<UsigId, SoftUsig>,
    identity: UsigId,
) -> Result<&mut SoftUsig, UsigError> {
    soft.get_mut(&identity)
        .ok_or(UsigError::UnknownIdentity(identity))
}

/// Counters of what usigd did and refused, for logs and metrics.
#[derive(Debug, Default)]
pub struct UsigdStats {
    pub warrants: AtomicU64,
    /// Frames that were not a valid request (dropped, connection closed).
    pub malformed: AtomicU64,
    /// Connections refused at `Hello` (wrong identity or protocol version).
    pub refused: AtomicU64,
    /// Requests the backend could not serve.
    pub failures: AtomicU64,
}

struct Shared {
    backend: Mutex<Option<UsigdBackend>>,
    stats: UsigdStats,
    stopping: AtomicBool,
    /// Open connections, so that shutdown can close them; each removes itself when it ends.
    connections: Mutex<HashMap<u64, UnixStream>>,
    next_connection: AtomicU64,
}

/// A running usigd.
pub struct Usigd {
    shared: Arc<Shared>,
    sockets: Vec<PathBuf>,
    acceptors: Vec<JoinHandle<()>>,
}

impl Usigd {
    /// Opens the backend and starts serving every identity on its socket.
    pub fn start(config: &UsigdConfig, new_epoch: bool) -> Result<Self, UsigError> {
        let backend = UsigdBackend::open(config, new_epoch)?;
        let shared = Arc::new(Shared {
            backend: Mutex::new(Some(backend)),
            stats: UsigdStats::default(),
            stopping: AtomicBool::new(false),
            connections: Mutex::new(HashMap::new()),
            next_connection: AtomicU64::new(0),
        });
        let mut usigd = Usigd {
            shared,
            sockets: Vec::new(),
            acceptors: Vec::new(),
        };
        for identity in &config.identities {
            let listener = bind(&identity.socket)?;
            let shared = Arc::clone(&usigd.shared);
            let id = UsigId(identity.id);
            usigd.sockets.push(identity.socket.clone());
            usigd.acceptors.push(std::thread::spawn(move || {
                accept_loop(listener, id, shared)
            }));
            info!(identity = %id, socket = %identity.socket.display(), "usigd serving");
        }
        Ok(usigd)
    }

    /// What usigd did and refused so far.
    pub fn stats(&self) -> &UsigdStats {
        &self.shared.stats
    }

    /// Stops accepting, closes every connection and releases the TPM.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        for socket in &self.sockets {
            // Wake the acceptor blocked in accept(); it sees `stopping` and exits.
            let _ = UnixStream::connect(socket);
        }
        for acceptor in self.acceptors.drain(..) {
            let _ = acceptor.join();
        }
        for (_, conn) in lock(&self.shared.connections).drain() {
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
        lock(&self.shared.backend).take();
        for socket in &self.sockets {
            let _ = fs::remove_file(socket);
        }
    }
}

impl Drop for Usigd {
    fn drop(&mut self) {
        if !self.acceptors.is_empty() {
            self.stop();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the backend inconsistent (every state change
    // is persisted before the next step), so a poisoned lock is still safe to use.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Binds an identity's socket, removing a stale one left by a previous run but refusing to take
/// over a socket that a live usigd still answers on.
fn bind(path: &Path) -> Result<UnixListener, UsigError> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(UsigError::Config(format!(
                "{} is in use by a running usigd; stop it first",
                path.display()
            )));
        }
        fs::remove_file(path).map_err(|e| UsigError::state(path, e))?;
    }
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| UsigError::state(dir, e))?;
    }
    let listener = UnixListener::bind(path).map_err(|e| UsigError::state(path, e))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .map_err(|e| UsigError::state(path, e))?;
    Ok(listener)
}

fn accept_loop(listener: UnixListener, identity: UsigId, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                warn!(%identity, error = %e, "accept failed");
                continue;
            }
        };
        let id = shared.next_connection.fetch_add(1, Ordering::Relaxed);
        if let Ok(clone) = stream.try_clone() {
            lock(&shared.connections).insert(id, clone);
        }
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || {
            serve(stream, identity, &shared);
            lock(&shared.connections).remove(&id);
        });
    }
}

/// Serves one connection until the client leaves or misbehaves.
fn serve(mut stream: UnixStream, identity: UsigId, shared: &Shared) {
    let mut greeted = false;
    loop {
        wait_readable(&stream);
        let request = match wire::read_frame(&mut stream, MAX_FRAME) {
            Ok(Some(frame)) => wire::decode::<Request>(&frame).map_err(|e| e.to_string()),
            Ok(None) => return,
            Err(e) => Err(e.to_string()),
        };
        let (response, keep_open) = match request {
            Err(why) => {
                shared.stats.malformed.fetch_add(1, Ordering::Relaxed);
                warn!(%identity, %why, "malformed request dropped");
                (error(format!("malformed request: {why}")), false)
            }
            Ok(Request::Hello {
                version,
                identity: claimed,
            }) => {
                if version != PROTOCOL_VERSION || claimed != identity.0 {
                    shared.stats.refused.fetch_add(1, Ordering::Relaxed);
                    warn!(%identity, claimed, version, "refused a client for another identity or version");
                    let why = format!(
                        "this socket serves {identity} with protocol {PROTOCOL_VERSION}; \
                         you asked for usig#{claimed} with protocol {version}"
                    );
                    (error(why), false)
                } else {
                    greeted = true;
                    (Response::Welcome, true)
                }
            }
            Ok(_) if !greeted => {
                shared.stats.refused.fetch_add(1, Ordering::Relaxed);
                (error("send Hello first".into()), false)
            }
            Ok(request) => (handle(request, identity, shared), true),
        };
        let sent = wire::encode(&response)
            .map_err(|e| e.to_string())
            .and_then(|bytes| {
                wire::write_frame(&mut stream, &bytes, MAX_FRAME).map_err(|e| e.to_string())
            });
        if sent.is_err() || !keep_open {
            return;
        }
    }
}

/// Blocks until `stream` has something to read, has closed or has failed (what the read after
/// it then finds). Waiting here rather than in the read saves a wake-up per warrant: a thread
/// blocked in a Unix socket's read is woken each time its peer reads what the thread sent (the
/// socket has room to write again), then finds nothing and blocks again, while `poll` asked for
/// input alone sleeps through that wake-up.
fn wait_readable(stream: &UnixStream) {
    let mut waiting = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid `pollfd` for an open descriptor `stream` owns, for the whole call.
    while unsafe { libc::poll(&mut waiting, 1, -1) } < 0
        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
    {}
}

fn handle(request: Request, identity: UsigId, shared: &Shared) -> Response {
    let mut guard = lock(&shared.backend);
    let Some(backend) = guard.as_mut() else {
        return error("usigd is shutting down".into());
    };
    let result = match request {
        Request::Create { digest } => backend.create(identity, &MessageDigest(digest)).map(|w| {
            shared.stats.warrants.fetch_add(1, Ordering::Relaxed);
            Response::Warrant {
                warrant: w.to_bytes(),
            }
        }),
        Request::Last => backend.last(identity).map(|last| Response::Last {
            last: last.map(|(d, w)| (d.0, w.to_bytes())),
        }),
        Request::Enrollment => backend.enrollment(identity).and_then(|record| {
            toml::to_string(&record)
                .map(|toml| Response::Enrollment { toml })
                .map_err(|e| UsigError::Daemon(e.to_string()))
        }),
        Request::Epoch => backend
            .epoch(identity)
            .map(|e| Response::Epoch { epoch: e.0 }),
        Request::Hello { .. } => Ok(Response::Welcome),
    };
    result.unwrap_or_else(|e| {
        shared.stats.failures.fetch_add(1, Ordering::Relaxed);
        warn!(%identity, error = %e, "request failed");
        error(e.to_string())
    })
}

fn error(message: String) -> Response {
    Response::Error { message }
}
