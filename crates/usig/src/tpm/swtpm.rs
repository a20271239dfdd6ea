//! Launcher for a real `swtpm` process, for tests, the demo and benches.
//!
//! Transport: TCP on 127.0.0.1, not unix sockets. libtss2-tcti-swtpm 3.2.1
//! itself understands `path=` (control socket `<path>.ctrl`), but tss-esapi
//! 7.7's `TctiNameConf` only forwards `host=` and `port=` for the swtpm TCTI
//! and silently drops `path=` (it would connect to localhost:2321 instead).
//!
//! The TCTI talks to the TPM on `port` and to the control channel on `port+1`.
//! To be safe with tests running in parallel we bind the control listener
//! ourselves (port `Q = P + 1` for a random even `P` outside the ephemeral
//! range, see [`bind_ctrl_listener`]) and hand it to swtpm as its stdin
//! (`--ctrl type=tcp,fd=0`); swtpm binds the data port `P = Q-1` itself.
//! swtpm binds its data port before it serves the control channel, so once our
//! own control listener answers, the data port is known to belong to our
//! child and not to some other process. If `Q-1` is taken swtpm exits with
//! "Address already in use" and we retry with another pair. The control
//! listener stays open in this process for the lifetime of [`Swtpm`], so
//! [`Swtpm::restart`] reuses the same ports.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const INSTALL_HINT: &str = "install swtpm (Debian: apt-get install swtpm swtpm-tools)";
const LOG_FILE: &str = "swtpm.log";
const READY_DEADLINE: Duration = Duration::from_secs(10);
/// Read timeout per poll of the control probe; the probe keeps its one
/// connection and polls the child in between, so a slow start is not abandoned.
const PROBE_POLL: Duration = Duration::from_millis(20);
const MAX_BACKOFF: Duration = Duration::from_millis(100);
const PORT_ATTEMPTS: usize = 16;
/// swtpm control channel command CMD_GET_CAPABILITY (big-endian u32).
const CMD_GET_CAPABILITY: [u8; 4] = [0, 0, 0, 1];
/// TPM2_GetRandom(8) with TPM_ST_NO_SESSIONS: the "does the TPM answer" probe.
const TPM2_GET_RANDOM_8: [u8; 12] = [
    0x80, 0x01, 0x00, 0x00, 0x00, 0x0c, 0x00, 0x00, 0x01, 0x7b, 0x00, 0x08,
];

/// Errors starting or restarting swtpm.
#[derive(thiserror::Error, Debug)]
pub enum SwtpmError {
    /// The `swtpm` binary could not be executed.
    #[error("cannot run swtpm: {source}; {INSTALL_HINT}")]
    NotInstalled {
        #[source]
        source: io::Error,
    },
    /// Local I/O around the process (state dir, log file, sockets).
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// The state directory cannot be passed on swtpm's command line.
    #[error("unusable swtpm state directory {path:?}: {reason}")]
    BadStateDir { path: PathBuf, reason: &'static str },
    /// swtpm died before it answered.
    #[error("swtpm exited during startup ({status}); log {log:?}: {tail}")]
    Exited {
        status: ExitStatus,
        log: PathBuf,
        tail: String,
    },
    /// swtpm is running but did not answer in time.
    #[error("swtpm did not answer within {timeout:?}; see log {log:?}")]
    NotReady { timeout: Duration, log: PathBuf },
    /// Every candidate data port was already taken.
    #[error("no free TCP port pair on 127.0.0.1 after {attempts} attempts; see log {log:?}")]
    NoFreePorts { attempts: usize, log: PathBuf },
    /// swtpm_localca refused to issue a certificate.
    #[error("swtpm_localca failed ({status}): {output}")]
    LocalCa { status: ExitStatus, output: String },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> SwtpmError {
    let what = what.into();
    move |source| SwtpmError::Io { what, source }
}

/// An endorsement-key certificate authority of swtpm's own: `swtpm_localca`, the tool
/// `swtpm_setup --create-ek-cert` runs (swtpm_setup itself certifies only the RSA-2048 and
/// P-384 EKs, and the ECC P-256 EK is the one a USIG identity's TPM identity hashes), with its
/// state in a directory of its own instead of /var/lib/swtpm-localca. It makes a software TPM
/// look like one with a manufacturer's EK certificate, for tests and development.
#[derive(Debug)]
pub struct LocalCa {
    dir: PathBuf,
}

impl LocalCa {
    /// A CA in `dir` (created); its root and issuing certificates appear with the first
    /// certificate it issues.
    pub fn new(dir: &Path) -> Result<Self, SwtpmError> {
        fs::create_dir_all(dir).map_err(io_err(format!("cannot create {dir:?}")))?;
        let conf = format!(
            "statedir = {0}\nsigningkey = {0}/signkey.pem\nissuercert = {0}/issuercert.pem\n\
             certserial = {0}/certserial\n",
            dir.display()
        );
        fs::write(dir.join("localca.conf"), conf)
            .and_then(|()| fs::write(dir.join("localca.options"), ""))
            .map_err(io_err(format!(
                "cannot write the CA configuration in {dir:?}"
            )))?;
        Ok(LocalCa {
            dir: dir.to_path_buf(),
        })
    }

    /// Issues a DER EK certificate for the ECC P-256 endorsement key `ek_public` (uncompressed
    /// SEC1 point), naming swtpm as the TPM's manufacturer and model.
    pub fn issue_ek_certificate(&self, ek_public: &[u8; 65]) -> Result<Vec<u8>, SwtpmError> {
        let out = self.dir.join(format!("issue-{:016x}", random()));
        fs::create_dir_all(&out).map_err(io_err(format!("cannot create {out:?}")))?;
        let ek = format!(
            "x={},y={},id=secp256r1",
            hex::encode(&ek_public[1..33]),
            hex::encode(&ek_public[33..])
        );
        let output = Command::new("swtpm_localca")
            .args(["--type", "ek", "--ek", &ek, "--dir"])
            .arg(&out)
            .args(["--tpm2", "--configfile"])
            .arg(self.dir.join("localca.conf"))
            .arg("--optsfile")
            .arg(self.dir.join("localca.options"))
            .args([
                "--tpm-manufacturer",
                "id:00001014",
                "--tpm-model",
                "swtpm",
                "--tpm-version",
                "id:20191023",
                "--tpm-spec-family",
                "2.0",
                "--tpm-spec-level",
                "0",
                "--tpm-spec-revision",
                "164",
            ])
            .output()
            .map_err(|source| match source.kind() {
                io::ErrorKind::NotFound => SwtpmError::NotInstalled { source },
                _ => io_err("cannot run swtpm_localca")(source),
            })?;
        if !output.status.success() {
            return Err(SwtpmError::LocalCa {
                status: output.status,
                output: String::from_utf8_lossy(&[output.stdout, output.stderr].concat())
                    .trim()
                    .to_string(),
            });
        }
        let cert = fs::read(out.join("ek.cert")).map_err(io_err(format!(
            "swtpm_localca wrote no {:?}",
            out.join("ek.cert")
        )))?;
        let _ = fs::remove_dir_all(&out);
        Ok(cert)
    }

    /// The CA's root and issuing certificates (PEM): what a cluster pins as `ek_roots`.
    pub fn certificates_pem(&self) -> Result<String, SwtpmError> {
        let read = |name: &str| {
            fs::read_to_string(self.dir.join(name))
                .map_err(io_err(format!("cannot read {:?}", self.dir.join(name))))
        };
        Ok(read("swtpm-localca-rootca-cert.pem")? + &read("issuercert.pem")?)
    }
}

/// A running `swtpm socket --tpm2` child process, killed on Drop.
///
/// Give the TPM one user at a time (see `TpmDevice`). If this process dies
/// without unwinding (SIGKILL), the child is orphaned and keeps its two ports
/// until killed; we do not use PR_SET_PDEATHSIG because it fires when the
/// spawning *thread* exits, which would kill swtpm under a live `Swtpm`.
#[derive(Debug)]
pub struct Swtpm {
    state_dir: PathBuf,
    /// Control listener (port `data_port + 1`); kept so restarts reuse the ports.
    ctrl: TcpListener,
    data_port: u16,
    child: Option<Child>,
}

/// Why one launch attempt failed: either retry on other ports, or give up.
enum LaunchError {
    PortInUse,
    Fatal(SwtpmError),
}

impl From<SwtpmError> for LaunchError {
    fn from(e: SwtpmError) -> Self {
        LaunchError::Fatal(e)
    }
}

impl Swtpm {
    /// Starts swtpm with its state in `state_dir` (created if missing) and
    /// returns once the TPM answers a command.
    ///
    /// Listens on 127.0.0.1 only, on randomly chosen ports (see module docs for
    /// why not unix sockets). swtpm's log and stderr go to
    /// `state_dir/swtpm.log`.
    pub fn start(state_dir: &Path) -> Result<Self, SwtpmError> {
        check_state_dir(state_dir)?;
        fs::create_dir_all(state_dir).map_err(io_err(format!(
            "cannot create swtpm state dir {state_dir:?}"
        )))?;
        let (ctrl, data_port, child) = launch_on_fresh_ports(state_dir)?;
        tracing::debug!(?state_dir, data_port, "swtpm started");
        Ok(Swtpm {
            state_dir: state_dir.to_path_buf(),
            ctrl,
            data_port,
            child: Some(child),
        })
    }

    /// TCTI string for `TpmDevice::connect`: `swtpm:host=127.0.0.1,port=<data port>`
    /// (the TCTI uses `port+1` for the control channel).
    ///
    /// Call it again after [`Swtpm::restart`]: in the rare case the data port
    /// was taken while swtpm was down, the restart moves to new ports.
    pub fn tcti(&self) -> String {
        format!("swtpm:host=127.0.0.1,port={}", self.data_port)
    }

    /// Directory holding the TPM state and `swtpm.log`.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Simulates a power cycle: kills swtpm (SIGKILL, no orderly TPM shutdown)
    /// and starts it again on the same state. The next TPM2_Startup(CLEAR) is a
    /// TPM Reset: resetCount increments and PCRs return to their reset values.
    /// Returns when the TPM answers again. Existing TPM connections are dead
    /// afterwards; reconnect.
    pub fn restart(&mut self) -> Result<(), SwtpmError> {
        self.stop();
        match launch(&self.state_dir, &self.ctrl, self.data_port) {
            Ok(child) => self.child = Some(child),
            Err(LaunchError::Fatal(e)) => return Err(e),
            Err(LaunchError::PortInUse) => {
                tracing::warn!(
                    port = self.data_port,
                    "swtpm data port taken during restart; moving to new ports"
                );
                let (ctrl, data_port, child) = launch_on_fresh_ports(&self.state_dir)?;
                self.ctrl = ctrl;
                self.data_port = data_port;
                self.child = Some(child);
            }
        }
        tracing::debug!(state_dir = ?self.state_dir, "swtpm restarted");
        Ok(())
    }

    /// Kills swtpm and reaps it. Idempotent.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Err(e) = child.kill() {
                tracing::warn!(error = %e, "cannot kill swtpm");
            }
            if let Err(e) = child.wait() {
                tracing::warn!(error = %e, "cannot reap swtpm");
            }
        }
    }

    fn log_path(&self) -> PathBuf {
        log_path(&self.state_dir)
    }
}

impl Drop for Swtpm {
    fn drop(&mut self) {
        self.stop();
        tracing::trace!(log = ?self.log_path(), "swtpm stopped");
    }
}

/// swtpm's `--tpmstate dir=...` is a comma-separated option string.
fn check_state_dir(dir: &Path) -> Result<(), SwtpmError> {
    let bad = |reason| SwtpmError::BadStateDir {
        path: dir.to_path_buf(),
        reason,
    };
    let s = dir.to_str().ok_or_else(|| bad("path is not UTF-8"))?;
    if s.contains(',') {
        return Err(bad(
            "path contains ',' which swtpm's option parser splits on",
        ));
    }
    Ok(())
}

fn log_path(state_dir: &Path) -> PathBuf {
    state_dir.join(LOG_FILE)
}

/// Picks a new port pair and launches, retrying while the data port is taken.
fn launch_on_fresh_ports(state_dir: &Path) -> Result<(TcpListener, u16, Child), SwtpmError> {
    for _ in 0..PORT_ATTEMPTS {
        let (ctrl, data_port) = bind_ctrl_listener()?;
        match launch(state_dir, &ctrl, data_port) {
            Ok(child) => return Ok((ctrl, data_port, child)),
            Err(LaunchError::PortInUse) => continue,
            Err(LaunchError::Fatal(e)) => return Err(e),
        }
    }
    Err(SwtpmError::NoFreePorts {
        attempts: PORT_ATTEMPTS,
        log: log_path(state_dir),
    })
}

/// Binds the control listener on `Q = P + 1` for a random even data port `P` below the kernel's
/// ephemeral range (32768 and up on Linux). Outside that range no outgoing connection (the
/// swtpm TCTI opens one per command) can be holding `P`; with `P` even, the pairs of parallel
/// swtpm instances never overlap, and a pair in use fails our bind of `Q` and is skipped.
fn bind_ctrl_listener() -> Result<(TcpListener, u16), SwtpmError> {
    const LOW: u64 = 10_000;
    const PAIRS: u64 = (32_766 - LOW) / 2;
    let mut last_error = None;
    for _ in 0..PORT_ATTEMPTS * 4 {
        let data_port = (LOW + 2 * (random() % PAIRS)) as u16;
        match TcpListener::bind((Ipv4Addr::LOCALHOST, data_port + 1)) {
            Ok(listener) => return Ok((listener, data_port)),
            Err(e) => last_error = Some(e),
        }
    }
    Err(SwtpmError::Io {
        what: "cannot bind a swtpm control port on 127.0.0.1 (all tried ports busy)".into(),
        source: last_error.unwrap_or_else(|| io::Error::from(io::ErrorKind::AddrInUse)),
    })
}

/// A random number from the standard library's randomly keyed hasher.
fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// One launch: spawn swtpm on `data_port` with our control listener, wait for it.
fn launch(state_dir: &Path, ctrl: &TcpListener, data_port: u16) -> Result<Child, LaunchError> {
    let log = log_path(state_dir);
    let log_start = fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let mut child = spawn(state_dir, ctrl, data_port)?;
    match wait_ready(&mut child, data_port, &log) {
        Ok(()) => Ok(child),
        Err(e) => {
            kill_quietly(&mut child);
            Err(classify_failure(e, &log, log_start))
        }
    }
}

fn spawn(state_dir: &Path, ctrl: &TcpListener, data_port: u16) -> Result<Child, SwtpmError> {
    let log = log_path(state_dir);
    let stderr = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(io_err(format!("cannot open swtpm log {log:?}")))?;
    let ctrl_fd = OwnedFd::from(
        ctrl.try_clone()
            .map_err(io_err("cannot duplicate control listener"))?,
    );
    Command::new("swtpm")
        // Its own process group: a Ctrl-C meant for our process must not kill the TPM under
        // it before we have shut down cleanly; we stop swtpm ourselves (Drop).
        .process_group(0)
        .arg("socket")
        .arg("--tpm2")
        .arg("--tpmstate")
        .arg(format!("dir={}", state_dir.display()))
        .arg("--server")
        .arg(format!("type=tcp,port={data_port},bindaddr=127.0.0.1"))
        .arg("--ctrl")
        .arg("type=tcp,fd=0")
        .arg("--flags")
        .arg("not-need-init,startup-clear")
        .arg("--log")
        .arg(format!("file={}", log.display()))
        .stdin(Stdio::from(ctrl_fd))
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr))
        .spawn()
        .map_err(|source| match source.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied => {
                SwtpmError::NotInstalled { source }
            }
            _ => SwtpmError::Io {
                what: "cannot spawn swtpm".into(),
                source,
            },
        })
}

fn kill_quietly(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Turns a startup failure into "retry on other ports" when swtpm says so.
fn classify_failure(e: SwtpmError, log: &Path, log_start: u64) -> LaunchError {
    match e {
        SwtpmError::Exited { status, .. } => {
            let tail = read_log_from(log, log_start);
            if tail.contains("Address already in use") {
                LaunchError::PortInUse
            } else {
                LaunchError::Fatal(SwtpmError::Exited {
                    status,
                    log: log.to_path_buf(),
                    tail,
                })
            }
        }
        other => LaunchError::Fatal(other),
    }
}

/// What swtpm logged since `start`, trimmed, for error messages.
fn read_log_from(log: &Path, start: u64) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(log) {
        if f.seek(SeekFrom::Start(start)).is_ok() {
            let _ = f.take(4096).read_to_string(&mut text);
        }
    }
    text.trim().to_owned()
}

/// Polls until our swtpm answers on the control channel and then on the TPM
/// channel, or it exits, or the deadline passes.
fn wait_ready(child: &mut Child, data_port: u16, log: &Path) -> Result<(), SwtpmError> {
    let deadline = Instant::now() + READY_DEADLINE;
    wait_ctrl(child, data_port + 1, deadline, log)?;
    let mut backoff = Duration::from_millis(1);
    loop {
        check_alive(child, log)?;
        match probe_tpm(data_port) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                tracing::debug!(error = %e, "swtpm TPM probe failed");
                return Err(not_ready(log));
            }
            Err(_) => sleep_backoff(&mut backoff),
        }
    }
}

fn not_ready(log: &Path) -> SwtpmError {
    SwtpmError::NotReady {
        timeout: READY_DEADLINE,
        log: log.to_path_buf(),
    }
}

fn sleep_backoff(backoff: &mut Duration) {
    thread::sleep(*backoff);
    *backoff = (*backoff * 2).min(MAX_BACKOFF);
}

fn check_alive(child: &mut Child, log: &Path) -> Result<(), SwtpmError> {
    match child.try_wait() {
        Ok(None) => Ok(()),
        Ok(Some(status)) => Err(SwtpmError::Exited {
            status,
            log: log.to_path_buf(),
            tail: String::new(),
        }),
        Err(e) => Err(io_err("cannot poll swtpm process")(e)),
    }
}

/// The control listener is ours, so the connection always lands in its
/// queue; swtpm answers only once it reached its main loop, i.e. after it
/// bound the data port. One connection, polled, so we never leave stale
/// half-sent commands for swtpm to answer.
fn wait_ctrl(
    child: &mut Child,
    ctrl_port: u16,
    deadline: Instant,
    log: &Path,
) -> Result<(), SwtpmError> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, ctrl_port));
    let mut stream =
        TcpStream::connect(addr).map_err(io_err("cannot connect to own swtpm control port"))?;
    stream
        .set_read_timeout(Some(PROBE_POLL))
        .and_then(|()| stream.write_all(&CMD_GET_CAPABILITY))
        .map_err(io_err("cannot send swtpm control probe"))?;
    let mut buf = [0u8; 16];
    loop {
        check_alive(child, log)?;
        match stream.read(&mut buf) {
            Ok(n) if n > 0 => return Ok(()),
            Ok(_) => {
                return Err(io_err("swtpm closed control probe")(
                    io::ErrorKind::UnexpectedEof.into(),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if is_timeout(&e) && Instant::now() < deadline => continue,
            Err(e) if is_timeout(&e) => return Err(not_ready(log)),
            Err(e) => return Err(io_err("swtpm control probe failed")(e)),
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Sends TPM2_GetRandom and expects a TPM_RC_SUCCESS response. Reads the
/// whole response so swtpm sees an orderly close.
fn probe_tpm(data_port: u16) -> io::Result<()> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, data_port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(&TPM2_GET_RANDOM_8)?;
    let mut header = [0u8; 10];
    stream.read_exact(&mut header)?;
    let size = u32::from_be_bytes([header[2], header[3], header[4], header[5]]);
    let rc = u32::from_be_bytes([header[6], header[7], header[8], header[9]]);
    if header[..2] != [0x80, 0x01] || rc != 0 || !(10..=64).contains(&size) {
        return Err(io::Error::other(format!("TPM probe answered rc={rc:#x}")));
    }
    let mut body = vec![0u8; size as usize - header.len()];
    stream.read_exact(&mut body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_keeps_the_tcti_and_the_tpm_answers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut swtpm = Swtpm::start(&dir.path().join("s")).expect("start");
        let tcti = swtpm.tcti();
        assert!(tcti.starts_with("swtpm:host=127.0.0.1,port="), "{tcti}");
        swtpm.restart().expect("restart");
        assert_eq!(swtpm.tcti(), tcti);
        probe_tpm(swtpm.data_port).expect("TPM answers after restart");
        swtpm.stop();
        swtpm.stop();
        assert!(
            probe_tpm(swtpm.data_port).is_err(),
            "stopped swtpm must not answer"
        );
    }

    #[test]
    fn state_dir_swtpm_cannot_parse_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = Swtpm::start(&dir.path().join("a,b")).expect_err("comma");
        assert!(matches!(err, SwtpmError::BadStateDir { .. }), "{err}");
    }

    #[test]
    fn parallel_instances_get_distinct_ports() {
        let dirs: Vec<_> = (0..4)
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        let tpms: Vec<_> = dirs
            .iter()
            .map(|d| Swtpm::start(d.path()).expect("start"))
            .collect();
        let mut tctis: Vec<_> = tpms.iter().map(Swtpm::tcti).collect();
        tctis.sort();
        tctis.dedup();
        assert_eq!(tctis.len(), tpms.len());
    }
}
