//! The VM side of usigd: a [`Usig`] that asks usigd over the identity's socket.
//!
//! If usigd restarts, the client reconnects and first asks for the last warrant: when that
//! warrant is for the digest it was asking about and newer than anything it received, the
//! earlier request did go through and its warrant is returned instead of spending a second
//! counter on the same message (which would leave a gap at every verifier).
//!
//! A caller with its own event loop (a node) can take the connected socket out
//! ([`UsigdClient::take_stream`]), send [`UsigdClient::create_frame`] on it, hand the answer to
//! [`UsigdClient::accept_warrant`], and call [`UsigdClient::recover`] when its transport fails:
//! the checks and the recovery stay here, in one place.

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

    /// Takes the connected socket out, for a caller that drives it from its own event loop;
    /// `None` when not connected. The client reconnects on its next own request.
    pub fn take_stream(&mut self) -> Option<UnixStream> {
        self.stream.take()
    }

    /// The whole frame (length prefix and payload) that asks usigd for a warrant over `digest`
    /// on a taken stream.
    pub fn create_frame(digest: &MessageDigest) -> Result<Vec<u8>, UsigError> {
        let bytes = wire::encode(&Request::Create { digest: digest.0 })
            .map_err(|e| UsigError::Daemon(format!("usigd request: {e}")))?;
        let mut frame = Vec::with_capacity(bytes.len() + 4);
        wire::write_frame(&mut frame, &bytes, MAX_FRAME)
            .map_err(|e| UsigError::Daemon(format!("usigd request: {e}")))?;
        Ok(frame)
    }

    /// The warrant in usigd's answer (one frame's payload, at most [`MAX_FRAME`] bytes) to a
    /// [`UsigdClient::create_frame`] sent on a taken stream, checked as this client checks its
    /// own.
    pub fn accept_warrant(&mut self, payload: &[u8]) -> Result<UniqueWarrant, UsigError> {
        let response = wire::decode::<Response>(payload)
            .map_err(|e| UsigError::Daemon(format!("usigd connection: {e}")))?;
        let warrant = match response {
            Response::Warrant { warrant } => self.decode_warrant(&warrant)?,
            Response::Error { message } => return Err(UsigError::Refused(message)),
            other => return Err(unexpected(&other)),
        };
        self.newest = Some((warrant.epoch, warrant.counter));
        Ok(warrant)
    }

    /// After a taken stream failed (`cause`) with a warrant over `digest` asked for and not
    /// received: reconnects (for up to [`RECONNECT_DEADLINE`]) and returns that warrant if
    /// usigd made it, else a new one. Blocks while usigd restarts.
    pub fn recover(
        &mut self,
        digest: &MessageDigest,
        cause: UsigError,
    ) -> Result<UniqueWarrant, UsigError> {
        self.stream = None;
        self.retry(digest, Instant::now() + RECONNECT_DEADLINE, Err(cause))
    }

    /// Reconnects and recovers until a warrant is had, usigd answers an error, or `deadline`.
    fn retry(
        &mut self,
        digest: &MessageDigest,
        deadline: Instant,
        first: Result<UniqueWarrant, UsigError>,
    ) -> Result<UniqueWarrant, UsigError> {
        let mut result = first;
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
        let first = self.create_once(digest);
        self.retry(digest, deadline, first)
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
