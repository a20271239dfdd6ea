//! The live cluster page (`/cluster`, its data at `/cluster.json`, its script at
//! `/cluster.js`): the groups with their members and machines and the partitions each serves,
//! the view and configuration epoch, per-group throughput and p95 of the requests this gateway
//! sent, the database nodes' executed order, replies that disagreed, the autoscaler's recent
//! decisions, and a chart of throughput, p95 and group count over time. The page updates
//! without a reload: its script fetches the data every two seconds.
//!
//! What the gateway cannot know from its own traffic and configuration (the view, the database
//! nodes' progress) it reads from the nodes' metrics endpoints, when told where they are
//! (`--node-metrics-offset`: a node's metrics port is its protocol port plus the offset, as
//! `cloudbft demo` runs them); the autoscaler's decisions come from its decisions file.

use crate::client::ClientEndpoint;
use proto::config::Cluster;
use proto::GroupId;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Requests counted for the per-group figures: those accepted in the last this long.
const WINDOW: Duration = Duration::from_secs(10);
/// One chart point per this long, the last [`HISTORY`] kept (ten minutes).
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(2);
const HISTORY: usize = 300;
/// Decisions of the autoscaler shown.
const DECISIONS: usize = 12;

/// Where the page's data beyond the gateway's own comes from.
#[derive(Clone, Debug, Default)]
pub struct StatusSources {
    /// A node's metrics port is its protocol port plus this (`cloudbft demo`: 1000).
    pub node_metrics_offset: Option<u16>,
    /// The autoscaler's decisions (JSON lines), e.g. `<cluster dir>/autoscaler.jsonl`.
    pub decisions: Option<PathBuf>,
}

#[derive(Clone, Debug, Serialize)]
struct Member {
    id: u32,
    machine: String,
    addr: String,
}

#[derive(Clone, Debug, Serialize)]
struct Group {
    id: u32,
    partitions: Vec<u32>,
    members: Vec<Member>,
    ops_per_sec: f64,
    p95_ms: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
struct DbNode {
    id: u32,
    machine: String,
    highest_order: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
struct Point {
    t: f64,
    ops_per_sec: f64,
    p95_ms: Option<f64>,
    groups: usize,
}

/// What `/cluster.json` serves.
#[derive(Clone, Debug, Serialize)]
struct Status {
    config_epoch: u64,
    f: usize,
    partitions: u32,
    view: Option<u64>,
    primaries: Vec<Member>,
    groups: Vec<Group>,
    db_nodes: Vec<DbNode>,
    disagreeing_replies: u64,
    decisions: Vec<serde_json::Value>,
    history: Vec<Point>,
    /// Whether node metrics were configured (otherwise view and progress are unknown).
    nodes_observed: bool,
}

/// Requests per second and p95 in milliseconds (none without requests).
type Figures = (f64, Option<f64>);

/// What the nodes' metrics said at the last sample.
#[derive(Clone, Debug, Default)]
struct Observed {
    view: Option<u64>,
    highest_order: BTreeMap<u32, u64>,
}

/// The gateway's record of its traffic and of what it observed, shared by the handlers and
/// the sampler.
pub(crate) struct ClusterStatus {
    sources: StatusSources,
    started: Instant,
    accepted: Mutex<VecDeque<(Instant, GroupId, Duration)>>,
    history: Mutex<VecDeque<Point>>,
    observed: Mutex<Observed>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ClusterStatus {
    pub(crate) fn new(sources: StatusSources) -> Arc<ClusterStatus> {
        Arc::new(ClusterStatus {
            sources,
            started: Instant::now(),
            accepted: Mutex::default(),
            history: Mutex::default(),
            observed: Mutex::default(),
        })
    }

    /// A page the gateway got accepted, by the group that vouched for it.
    pub(crate) fn accepted(&self, group: GroupId, latency: Duration) {
        let now = Instant::now();
        let mut accepted = lock(&self.accepted);
        accepted.push_back((now, group, latency));
        while accepted
            .front()
            .is_some_and(|&(at, _, _)| now.duration_since(at) > WINDOW)
        {
            accepted.pop_front();
        }
    }

    /// Throughput and p95 over the window, per group and in all.
    fn window(&self) -> (BTreeMap<u32, Figures>, Figures) {
        let now = Instant::now();
        let accepted = lock(&self.accepted);
        let recent: Vec<(GroupId, Duration)> = accepted
            .iter()
            .filter(|(at, _, _)| now.duration_since(*at) <= WINDOW)
            .map(|&(_, g, l)| (g, l))
            .collect();
        let figures = |latencies: Vec<Duration>| {
            let rate = latencies.len() as f64 / WINDOW.as_secs_f64();
            (rate, p95_ms(latencies))
        };
        let mut by_group: BTreeMap<u32, Vec<Duration>> = BTreeMap::new();
        for &(g, l) in &recent {
            by_group.entry(g.0).or_default().push(l);
        }
        let all = figures(recent.into_iter().map(|(_, l)| l).collect());
        (
            by_group.into_iter().map(|(g, l)| (g, figures(l))).collect(),
            all,
        )
    }

    /// Takes one chart point and reads the nodes' metrics (every [`SAMPLE_EVERY`]).
    pub(crate) async fn sample(&self, cluster: &Cluster) {
        let (_, (ops, p95)) = self.window();
        let point = Point {
            t: self.started.elapsed().as_secs_f64(),
            ops_per_sec: ops,
            p95_ms: p95,
            groups: cluster.config.groups.len(),
        };
        {
            let mut history = lock(&self.history);
            history.push_back(point);
            while history.len() > HISTORY {
                history.pop_front();
            }
        }
        let Some(offset) = self.sources.node_metrics_offset else {
            return;
        };
        let metrics_of = |addr: &str| -> Option<SocketAddr> {
            let addr: SocketAddr = addr.parse().ok()?;
            Some(SocketAddr::new(addr.ip(), addr.port().checked_add(offset)?))
        };
        let mut observed = Observed::default();
        for r in &cluster.config.replicas {
            if let Some(text) = scrape(metrics_of(&r.addr)).await {
                let view = value(&text, "cloudbft_view");
                observed.view = observed.view.max(view);
            }
        }
        for d in &cluster.config.db_nodes {
            if let Some(text) = scrape(metrics_of(&d.addr)).await {
                if let Some(order) = value(&text, "cloudbft_highest_order") {
                    observed.highest_order.insert(d.id, order);
                }
            }
        }
        *lock(&self.observed) = observed;
    }

    /// The page's data now.
    pub(crate) fn json(&self, endpoint: &ClientEndpoint) -> String {
        let cluster = endpoint.cluster();
        let c = &cluster.config;
        let (by_group, _) = self.window();
        let observed = lock(&self.observed).clone();
        let member = |id: u32, machine: &str, addr: &str| Member {
            id,
            machine: machine.to_owned(),
            addr: addr.to_owned(),
        };
        let status = Status {
            config_epoch: c.config_epoch,
            f: c.f,
            partitions: c.partitions,
            view: observed.view,
            primaries: c
                .primaries
                .iter()
                .map(|p| member(p.id, &p.machine, &p.addr))
                .collect(),
            groups: c
                .groups
                .iter()
                .map(|g| {
                    let (ops, p95) = by_group.get(&g.id).copied().unwrap_or((0.0, None));
                    Group {
                        id: g.id,
                        partitions: g.partitions.clone(),
                        members: cluster
                            .members(GroupId(g.id))
                            .map(|r| member(r.id, &r.machine, &r.addr))
                            .collect(),
                        ops_per_sec: ops,
                        p95_ms: p95,
                    }
                })
                .collect(),
            db_nodes: c
                .db_nodes
                .iter()
                .map(|d| DbNode {
                    id: d.id,
                    machine: d.machine.clone(),
                    highest_order: observed.highest_order.get(&d.id).copied(),
                })
                .collect(),
            disagreeing_replies: endpoint.stats().disagreeing_replies,
            decisions: self.decisions(),
            history: lock(&self.history).iter().cloned().collect(),
            nodes_observed: self.sources.node_metrics_offset.is_some(),
        };
        serde_json::to_string(&status).unwrap_or_else(|_| "{}".into())
    }

    /// The autoscaler's last decisions, newest last.
    fn decisions(&self) -> Vec<serde_json::Value> {
        let Some(path) = &self.sources.decisions else {
            return Vec::new();
        };
        let Ok(text) = std::fs::read_to_string(path) else {
            return Vec::new();
        };
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(DECISIONS)..]
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

fn p95_ms(mut latencies: Vec<Duration>) -> Option<f64> {
    if latencies.is_empty() {
        return None;
    }
    latencies.sort_unstable();
    let rank = ((latencies.len() as f64) * 0.95).ceil() as usize;
    let at = rank.clamp(1, latencies.len()) - 1;
    Some(latencies[at].as_secs_f64() * 1000.0)
}

/// A metric without labels from Prometheus text.
fn value(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (sample, v) = line.split_once(' ')?;
        (sample == name).then(|| v.trim().parse::<f64>().ok().map(|v| v as u64))?
    })
}

/// A node's Prometheus text, if it answers within a second.
async fn scrape(addr: Option<SocketAddr>) -> Option<String> {
    let addr = addr?;
    let read = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: metrics\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).await.ok()?;
        Some(text)
    };
    tokio::time::timeout(Duration::from_secs(1), read)
        .await
        .ok()
        .flatten()
}

/// The page itself: its structure; the script fills it.
pub(crate) const PAGE: &str = r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>CloudBFT cluster</title>
<script src="/cluster.js" defer></script>
</head>
<body>
<h1>CloudBFT cluster</h1>
<p><a href="/">Back to the forms</a>. This page updates every two seconds; throughput and p95
are of the requests this gateway sent in the last ten seconds.</p>
<p>Configuration epoch <b id="epoch">…</b>, view <b id="view">…</b>, f = <b id="f">…</b>,
<b id="group-count">…</b> group(s), <b id="partitions">…</b> partitions; replies that disagreed
with the agreed page: <b id="disagreeing">…</b>. Updated <span id="updated">never</span>.</p>
<h2>Groups</h2>
<table id="groups"><thead><tr><th>group</th><th>partitions</th><th>members (machine)</th>
<th>ops/s</th><th>p95 ms</th></tr></thead><tbody></tbody></table>
<h2>Primary candidates</h2>
<table id="primaries"><thead><tr><th>id</th><th>machine</th><th>address</th></tr></thead>
<tbody></tbody></table>
<h2>Database nodes</h2>
<table id="dbnodes"><thead><tr><th>id</th><th>machine</th><th>executed up to order</th></tr>
</thead><tbody></tbody></table>
<h2>Over time</h2>
<div id="chart"></div>
<h2>Autoscaler decisions</h2>
<table id="decisions"><thead><tr><th>at (s)</th><th>p95 ms</th><th>req/s</th><th>groups</th>
<th>decided</th><th>why</th><th>outcome</th></tr></thead><tbody></tbody></table>
</body>
</html>
"#;

/// The page's script: fetches `/cluster.json` and fills the tables and the chart through the
/// DOM (`textContent`, never markup), so nothing the data holds can inject anything.
pub(crate) const SCRIPT: &str = r##""use strict";
const SVG = "http://www.w3.org/2000/svg";
function cell(row, text) { const td = document.createElement("td"); td.textContent = text; row.appendChild(td); }
function fill(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren(...rows.map(values => { const tr = document.createElement("tr"); values.forEach(v => cell(tr, v)); return tr; }));
}
function ms(v) { return v === null || v === undefined ? "–" : v.toFixed(0); }
function set(id, text) { document.getElementById(id).textContent = text; }
function line(svg, points, x, y, colour) {
  const p = document.createElementNS(SVG, "polyline");
  p.setAttribute("fill", "none"); p.setAttribute("stroke", colour); p.setAttribute("stroke-width", "1.5");
  p.setAttribute("points", points.map(([t, v]) => x(t).toFixed(1) + "," + y(v).toFixed(1)).join(" "));
  svg.appendChild(p);
}
function label(svg, text, px, py, colour) {
  const t = document.createElementNS(SVG, "text");
  t.setAttribute("x", px); t.setAttribute("y", py); t.setAttribute("fill", colour); t.setAttribute("font-size", "12");
  t.textContent = text; svg.appendChild(t);
}
function chart(history) {
  const W = 640, H = 120, panels = [
    ["throughput (ops/s)", h => h.ops_per_sec, "#1f77b4"],
    ["p95 (ms)", h => h.p95_ms, "#d62728"],
    ["groups", h => h.groups, "#2ca02c"]];
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("id", "history"); svg.setAttribute("width", W); svg.setAttribute("height", panels.length * (H + 20));
  const t0 = history.length ? history[0].t : 0, t1 = history.length ? history[history.length - 1].t : 1;
  const x = t => 40 + (t - t0) / Math.max(1, t1 - t0) * (W - 60);
  panels.forEach(([name, get, colour], i) => {
    const top = i * (H + 20) + 16, points = history.filter(h => get(h) !== null).map(h => [h.t, get(h)]);
    const max = Math.max(1, ...points.map(p => p[1])) * 1.1;
    const y = v => top + H - v / max * H;
    const frame = document.createElementNS(SVG, "rect");
    frame.setAttribute("x", 40); frame.setAttribute("y", top); frame.setAttribute("width", W - 60); frame.setAttribute("height", H);
    frame.setAttribute("fill", "none"); frame.setAttribute("stroke", "#999"); svg.appendChild(frame);
    label(svg, name + " (max " + (max / 1.1).toFixed(0) + ")", 44, top - 3, colour);
    line(svg, points, x, y, colour);
  });
  document.getElementById("chart").replaceChildren(svg);
}
async function refresh() {
  try {
    const s = await (await fetch("/cluster.json", { cache: "no-store" })).json();
    set("epoch", s.config_epoch); set("f", s.f); set("partitions", s.partitions);
    set("view", s.view === null ? (s.nodes_observed ? "…" : "unknown") : s.view);
    set("group-count", s.groups.length); set("disagreeing", s.disagreeing_replies);
    set("updated", new Date().toLocaleTimeString());
    fill("groups", s.groups.map(g => [g.id, g.partitions.join(", "),
      g.members.map(m => m.id + " (" + m.machine + ")").join(", "), g.ops_per_sec.toFixed(1), ms(g.p95_ms)]));
    fill("primaries", s.primaries.map(p => [p.id, p.machine, p.addr]));
    fill("dbnodes", s.db_nodes.map(d => [d.id, d.machine, d.highest_order === null ? "unknown" : d.highest_order]));
    fill("decisions", s.decisions.slice().reverse().map(d => [d.at_secs.toFixed(0), ms(d.p95_ms),
      d.requests_per_second.toFixed(1), d.groups, d.decided, d.reason, d.outcome || ""]));
    chart(s.history);
  } catch (e) {
    set("updated", "failed (" + e + "); retrying");
  }
}
refresh();
setInterval(refresh, 2000);
"##;

/// The policy of the cluster page: its own script, and fetches of its data.
pub(crate) const PAGE_POLICY: &str = "default-src 'none'; script-src 'self'; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p95_is_the_ninety_fifth_percentile() {
        let ms = |v: u64| Duration::from_millis(v);
        assert_eq!(p95_ms(vec![]), None);
        assert_eq!(p95_ms(vec![ms(7)]), Some(7.0));
        let hundred: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!(p95_ms(hundred), Some(95.0));
    }

    #[test]
    fn metrics_are_read_by_name() {
        let text = "cloudbft_view 2\ncloudbft_view_changes 9\ncloudbft_highest_order 41\n";
        assert_eq!(value(text, "cloudbft_view"), Some(2));
        assert_eq!(value(text, "cloudbft_highest_order"), Some(41));
        assert_eq!(value(text, "cloudbft_missing"), None);
    }
}
