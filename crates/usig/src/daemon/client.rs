//! The VM side of usigd: a [`Usig`] that asks usigd over the identity's socket.
//!
//! If usigd restarts, the client reconnects and first asks for the last warrant: when that
//! warrant is for the digest it was asking about and newer than anything it received, the
//! earlier request did go through and its warrant is returned instead of spending a second
//! counter on the same message (which would leave a gap at every verifier).

use super::protocol::{Request, Response, MAX_FRAME, PROTOCOL_VERSION};
use crate::enroll::EnrollmentRecord;
use crate::warrant::{Epoch, MessageDigest, UniqueWarrant, UsigId};
use crate::{Usig, UsigError};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a client keeps trying to reach a restarting usigd.
const RECONNECT_DEADLINE: Duration = Duration::from_secs(10);

/// A connection to usigd for one identity.
pub struct UsigdClient {
    socket: PathBuf,
    identity: UsigId,
    stream: Option<UnixStream>,
    /// Newest warrant position received, to recognise our own request after a reconnect.
    newest: Option<(Epoch, u64)>,
}

impl UsigdClient {
    /// Connects to usigd on `socket` as `identity`.
    pub fn connect(socket: &Path, identity: UsigId) -> Result<Self, UsigError> {
        let mut client = UsigdClient {
            socket: socket.to_path_buf(),
            identity,
            stream: None,
            newest: None,
        };
        client.reconnect(Duration::ZERO)?;
        Ok(client)
    }

    /// The last warrant usigd issued for this identity, with its digest.
    pub fn last(&mut self) -> Result<Option<(MessageDigest, UniqueWarrant)>, UsigError> {
        match self.call(&Request::Last)? {
            Response::Last { last: None } => Ok(None),
            Response::Last {
                last: Some((digest, warrant)),
            } => Ok(Some((
                MessageDigest(digest),
                self.decode_warrant(&warrant)?,
            ))),
            other => Err(unexpected(&other)),
        }
    }

    /// The USIG epoch this identity warrants in now, for the cluster configuration.
    pub fn epoch(&mut self) -> Result<Epoch, UsigError> {
        match self.call(&Request::Epoch)? {
            Response::Epoch { epoch } => Ok(Epoch(epoch)),
            other => Err(unexpected(&other)),
        }
    }

    /// This identity's enrollment record, for the cluster configuration.
    pub fn enrollment(&mut self) -> Result<EnrollmentRecord, UsigError> {
        match self.call(&Request::Enrollment)? {
            Response::Enrollment { toml } => toml::from_str(&toml)
                .map_err(|e| UsigError::Daemon(format!("bad enrollment from usigd: {e}"))),
            other => Err(unexpected(&other)),
        }
    }

    fn reconnect(&mut self, deadline: Duration) -> Result<(), UsigError> {
        self.stream = None;
        let until = Instant::now() + deadline;
        let mut backoff = Duration::from_millis(5);
        let mut stream = loop {
            match UnixStream::connect(&self.socket) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= until => {
                    return Err(UsigError::Daemon(format!(
                        "cannot reach usigd at {}: {e}; is usigd running and is this the identity's socket?",
                        self.socket.display()
                    )))
                }
                Err(_) => {
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(200));
                }
            }
        };
        let hello = Request::Hello {
            version: PROTOCOL_VERSION,
            identity: self.identity.0,
        };
        match round_trip(&mut stream, &hello)? {
            Response::Welcome => {
                self.stream = Some(stream);
                Ok(())
            }
            Response::Error { message } => Err(UsigError::Refused(message)),
            other => Err(unexpected(&other)),
        }
    }

    /// One request on the current connection (no retry). A transport failure drops the
    /// connection; an error answered by usigd leaves it open.
    fn call(&mut self, request: &Request) -> Result<Response, UsigError> {
        if self.stream.is_none() {
            self.reconnect(RECONNECT_DEADLINE)?;
        }
        let stream = self
            .stream
            .as_mut()
            .ok_or_else(|| UsigError::Daemon("not connected".into()))?;
        match round_trip(stream, request) {
            Ok(Response::Error { message }) => Err(UsigError::Refused(message)),
            Ok(response) => Ok(response),
            Err(transport) => {
                self.stream = None;
                Err(transport)
            }
        }
    }

    fn decode_warrant(&self, bytes: &[u8]) -> Result<UniqueWarrant, UsigError> {
        let warrant = UniqueWarrant::from_bytes(bytes)
            .map_err(|e| UsigError::Daemon(format!("usigd sent a malformed warrant: {e}")))?;
        if warrant.identity != self.identity {
            return Err(UsigError::Daemon(format!(
                "usigd sent a warrant for {} to {}",
                warrant.identity, self.identity
            )));
        }
        Ok(warrant)
    }

    fn create_once(&mut self, digest: &MessageDigest) -> Result<UniqueWarrant, UsigError> {
        match self.call(&Request::Create { digest: digest.0 })? {
            Response::Warrant { warrant } => self.decode_warrant(&warrant),
            other => Err(unexpected(&other)),
        }
    }

    fn is_newer(&self, warrant: &UniqueWarrant) -> bool {
        self.newest
            .is_none_or(|newest| (warrant.epoch, warrant.counter) > newest)
    }
}

impl Usig for UsigdClient {
    fn identity(&self) -> UsigId {
        self.identity
    }

    fn create_ui_for_digest(&mut self, digest: &MessageDigest) -> Result<UniqueWarrant, UsigError> {
        let deadline = Instant::now() + RECONNECT_DEADLINE;
        let mut result = self.create_once(digest);
        // A transport failure (usigd restarting) drops the connection; an answered error does not.
        while result.is_err() && self.stream.is_none() && Instant::now() < deadline {
            if let Err(e) = &result {
                tracing::warn!(error = %e, "usigd connection lost; reconnecting");
            }
            result = self
                .reconnect(deadline.saturating_duration_since(Instant::now()))
                .and_then(|()| self.recover_or_create(digest));
        }
        let warrant = result?;
        self.newest = Some((warrant.epoch, warrant.counter));
        Ok(warrant)
    }
}

impl UsigdClient {
    /// After a reconnect: the warrant of our lost request if it went through, else a new one.
    fn recover_or_create(&mut self, digest: &MessageDigest) -> Result<UniqueWarrant, UsigError> {
        match self.last()? {
            Some((d, w)) if d == *digest && self.is_newer(&w) => Ok(w),
            _ => self.create_once(digest),
        }
    }
}

fn round_trip(stream: &mut UnixStream, request: &Request) -> Result<Response, UsigError> {
    let io = |e: String| UsigError::Daemon(format!("usigd connection: {e}"));
    let bytes = wire::encode(request).map_err(|e| io(e.to_string()))?;
    wire::write_frame(stream, &bytes, MAX_FRAME).map_err(|e| io(e.to_string()))?;
    let frame = wire::read_frame(stream, MAX_FRAME)
        .map_err(|e| io(e.to_string()))?
        .ok_or_else(|| io("closed by usigd".into()))?;
    wire::decode::<Response>(&frame).map_err(|e| io(e.to_string()))
}

fn unexpected(response: &Response) -> UsigError {
    UsigError::Daemon(format!("unexpected answer from usigd: {response:?}"))
}
