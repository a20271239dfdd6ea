//! A private network of Linux network namespaces for the partition tests: one namespace per host
//! (a node, or the test's own load driver), each with one veth pair into a bridge that lives in a
//! namespace of its own (the "switch"). Nothing touches the machine's own network namespace:
//! the hosts reach each other and nothing else, whatever addresses they use.
//!
//! Faults are nftables rules on the switch's bridge (family `bridge`, hook `forward`), matched by
//! the bridge port a frame comes in on or goes out of, so that one rule set expresses any
//! partition between hosts, in one direction or both, and random loss (`numgen random`): the
//! kernel here has no `sch_netem`, so there is no netem delay or loss; a slow link is a `tbf`
//! rate limit on the host's bridge port and its own interface.
//!
//! Everything is created by [`Network::new`] and removed when the [`Network`] is dropped, also
//! when the test panics; namespaces left by a test process that was killed outright are removed
//! by the next one (their names carry the creating process's id). The test needs root (or
//! CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2 and nftables: without them it fails at once and
//! says what is missing; it never passes without running.

use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Condvar, Mutex};

/// Prefix of every namespace these tests create: `cbft-<pid>-<host>`.
const PREFIX: &str = "cbft-";
/// The hosts' subnet. It exists only on the test's own bridge, which no interface of the
/// machine's network namespace is attached to.
const SUBNET: [u8; 3] = [10, 213, 0];
/// The nftables table and chain of the faults, in the switch's namespace.
const TABLE: &str = "bridge cbft";
const CHAIN: &str = "links";

/// A running private network. Dropping it removes every namespace (and with them every veth,
/// the bridge and the rules).
pub struct Network {
    /// One network per test process at a time: namespace names carry only the process id, and
    /// two clusters under load at once would starve a 2-core machine.
    _turn: Turn,
    prefix: String,
    hosts: Vec<String>,
    /// Namespaces created so far (all of them once `new` returned).
    created: Vec<String>,
    /// Hosts whose links have a rate limit now.
    limited: Vec<String>,
}

/// The one [`Network`] of this process may be created while this is held.
struct Turn;

static BUSY: Mutex<bool> = Mutex::new(false);
static FREED: Condvar = Condvar::new();

impl Turn {
    /// Waits until no other test of this process holds a network.
    fn take() -> Turn {
        // A test that panicked holding a turn has given it back in its unwinding.
        let mut busy = BUSY.lock().unwrap_or_else(|e| e.into_inner());
        while *busy {
            busy = FREED.wait(busy).unwrap_or_else(|e| e.into_inner());
        }
        *busy = true;
        Turn
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        *BUSY.lock().unwrap_or_else(|e| e.into_inner()) = false;
        FREED.notify_one();
    }
}

/// Where `tool` is: on PATH, or in the system directories a non-login root shell may lack.
fn tool(tool: &str) -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(Into::into))
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| tool.into())
}

/// What is missing for the partition tests, or `None` when everything is there.
fn missing_tools() -> Option<String> {
    let mut missing = Vec::new();
    for (tool, args, package) in [
        ("ip", &["-V"][..], "iproute2"),
        ("tc", &["-V"][..], "iproute2"),
        ("nft", &["--version"][..], "nftables"),
    ] {
        let ok = Command::new(self::tool(tool))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            missing.push(format!("`{tool}` (Debian package {package})"));
        }
    }
    (!missing.is_empty()).then(|| missing.join(", "))
}

/// Runs `program args`, panicking with its output if it fails: a network the test cannot set
/// up or change is a failed test, never a skipped one.
fn run(program: &str, args: &[&str]) {
    run_with_input(program, args, None);
}

fn run_with_input(program: &str, args: &[&str], input: Option<&str>) {
    use std::io::Write;
    let mut child = Command::new(tool(program))
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program} {args:?}: {e}"));
    if let Some(input) = input {
        child
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(input.as_bytes())
            .expect("writing to nft");
    }
    let out = child
        .wait_with_output()
        .expect("waiting for a network tool");
    assert!(
        out.status.success(),
        "`{program} {}` failed ({}): {}{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout),
        input.map(|i| format!("\ninput:\n{i}")).unwrap_or_default()
    );
}

/// Removes the namespaces of earlier test processes that no longer exist (killed before their
/// `Network` was dropped).
fn remove_stale() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new(tool("ip"))
                .args(["netns", "delete", &name])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The namespace file of `netns`, for `setns(2)`.
fn open_netns(netns: &str) -> File {
    File::open(format!("/run/netns/{netns}"))
        .unwrap_or_else(|e| panic!("opening network namespace {netns}: {e}"))
}

fn setns(file: &File) -> std::io::Result<()> {
    // SAFETY: setns(2) on a namespace file we hold open; it changes only the calling thread.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Network {
    /// Creates the switch and one namespace per host, `hosts[i]` with address 10.213.0.(i+1)/24.
    /// Host names are interface names too: at most 15 characters.
    pub fn new(hosts: &[&str]) -> Network {
        if let Some(missing) = missing_tools() {
            panic!(
                "the partition test needs {missing}: install them (`.ci/run` does) and run it \
                 as root; it does not skip"
            );
        }
        let turn = Turn::take();
        remove_stale();
        let mut net = Network {
            _turn: turn,
            prefix: format!("{PREFIX}{}-", std::process::id()),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            created: Vec::new(),
            limited: Vec::new(),
        };
        let switch = net.netns("switch");
        net.add_netns(&switch);
        run("ip", &["-n", &switch, "link", "set", "dev", "lo", "up"]);
        run(
            "ip",
            &[
                "-n", &switch, "link", "add", "name", "br0", "type", "bridge",
            ],
        );
        run("ip", &["-n", &switch, "link", "set", "dev", "br0", "up"]);
        for (i, host) in hosts.iter().enumerate() {
            assert!(host.len() <= 15, "host name {host} is too long");
            let ns = net.netns(host);
            net.add_netns(&ns);
            run(
                "ip",
                &[
                    "-n", &switch, "link", "add", "name", host, "type", "veth", "peer", "name",
                    "eth0", "netns", &ns,
                ],
            );
            run(
                "ip",
                &["-n", &switch, "link", "set", "dev", host, "master", "br0"],
            );
            run("ip", &["-n", &switch, "link", "set", "dev", host, "up"]);
            let addr = format!("{}/24", net.ip_of(i));
            run("ip", &["-n", &ns, "addr", "add", &addr, "dev", "eth0"]);
            run("ip", &["-n", &ns, "link", "set", "dev", "eth0", "up"]);
            run("ip", &["-n", &ns, "link", "set", "dev", "lo", "up"]);
        }
        net.nft(&format!(
            "table {TABLE} {{\n  chain {CHAIN} {{ type filter hook forward priority 0; policy accept; }}\n}}\n"
        ));
        net
    }

    fn netns(&self, host: &str) -> String {
        format!("{}{host}", self.prefix)
    }

    fn add_netns(&mut self, name: &str) {
        run("ip", &["netns", "add", name]);
        self.created.push(name.to_string());
    }

    fn index(&self, host: &str) -> usize {
        self.hosts
            .iter()
            .position(|h| h == host)
            .unwrap_or_else(|| panic!("no host {host} in this network"))
    }

    fn ip_of(&self, index: usize) -> Ipv4Addr {
        let [a, b, c] = SUBNET;
        Ipv4Addr::new(a, b, c, index as u8 + 1)
    }

    /// The address of `host`.
    pub fn ip(&self, host: &str) -> Ipv4Addr {
        self.ip_of(self.index(host))
    }

    /// Moves the calling thread into `host`'s namespace: the sockets it opens from now on, the
    /// threads it starts (a tokio runtime's workers) and the processes it spawns are there.
    pub fn enter(&self, host: &str) {
        let ns = self.netns(&self.hosts[self.index(host)]);
        setns(&open_netns(&ns)).unwrap_or_else(|e| panic!("entering {ns}: {e}"));
    }

    /// Makes `command` run in `host`'s namespace.
    pub fn place(&self, command: &mut Command, host: &str) {
        let file = open_netns(&self.netns(&self.hosts[self.index(host)]));
        // SAFETY: setns(2) is async-signal-safe and changes only the child.
        unsafe { command.pre_exec(move || setns(&file)) };
    }

    fn nft(&self, script: &str) {
        let switch = self.netns("switch");
        let nft = tool("nft").display().to_string();
        run_with_input(
            "ip",
            &["netns", "exec", &switch, &nft, "-f", "-"],
            Some(script),
        );
    }

    /// Adds fault rules (each an nftables rule body, see [`Fault`]) on top of those in force.
    pub fn apply(&mut self, fault: &Fault) {
        let script: String = fault
            .rules
            .iter()
            .map(|rule| format!("add rule {TABLE} {CHAIN} {rule}\n"))
            .collect();
        self.nft(&script);
        for host in &fault.rate_limited {
            self.limit(host, &fault.rate);
            self.limited.push(host.clone());
        }
    }

    /// Removes every fault: all links work again.
    pub fn heal(&mut self) {
        self.nft(&format!("flush chain {TABLE} {CHAIN}\n"));
        let switch = self.netns("switch");
        for host in std::mem::take(&mut self.limited) {
            let ns = self.netns(&host);
            run("tc", &["-n", &switch, "qdisc", "del", "dev", &host, "root"]);
            run("tc", &["-n", &ns, "qdisc", "del", "dev", "eth0", "root"]);
        }
    }

    /// A token-bucket rate limit on both directions of `host`'s link.
    fn limit(&self, host: &str, rate: &str) {
        let tbf = [
            "root", "tbf", "rate", rate, "burst", "32kb", "latency", "400ms",
        ];
        let switch = self.netns("switch");
        let ns = self.netns(host);
        run(
            "tc",
            &[&["-n", &switch, "qdisc", "add", "dev", host][..], &tbf].concat(),
        );
        run(
            "tc",
            &[&["-n", &ns, "qdisc", "add", "dev", "eth0"][..], &tbf].concat(),
        );
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Deleting a namespace deletes its ends of the veth pairs, and so the pairs; the switch
        // goes last. Processes still in a namespace keep it alive until they exit: the caller
        // stops its processes before dropping the network.
        for ns in self.created.iter().rev() {
            let _ = Command::new(tool("ip"))
                .args(["netns", "delete", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Links to cut, loss to inject or links to slow down: nftables rules on the switch, matched
/// by bridge port (= host).
#[derive(Default, Clone, Debug)]
pub struct Fault {
    rules: Vec<String>,
    rate_limited: Vec<String>,
    rate: String,
}

fn set(hosts: &[&str]) -> String {
    let quoted: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
    format!("{{ {} }}", quoted.join(", "))
}

impl Fault {
    /// `host` reaches nobody and nobody reaches it.
    pub fn isolate(host: &str) -> Fault {
        Fault {
            rules: vec![
                format!("iifname \"{host}\" drop"),
                format!("oifname \"{host}\" drop"),
            ],
            ..Fault::default()
        }
    }

    /// Hosts of `a` and hosts of `b` do not reach each other; every other link works.
    pub fn split(a: &[&str], b: &[&str]) -> Fault {
        Fault {
            rules: vec![
                format!("iifname {} oifname {} drop", set(a), set(b)),
                format!("iifname {} oifname {} drop", set(b), set(a)),
            ],
            ..Fault::default()
        }
    }

    /// `percent`% of the frames `host` sends are lost; what it receives arrives.
    pub fn loss_from(host: &str, percent: u32) -> Fault {
        Fault {
            rules: vec![format!(
                "iifname \"{host}\" numgen random mod 100 < {percent} drop"
            )],
            ..Fault::default()
        }
    }

    /// `host`'s link carries at most `rate` (tc's syntax, e.g. `2mbit`) each way.
    pub fn slow_link(host: &str, rate: &str) -> Fault {
        Fault {
            rate_limited: vec![host.to_string()],
            rate: rate.to_string(),
            ..Fault::default()
        }
    }
}
