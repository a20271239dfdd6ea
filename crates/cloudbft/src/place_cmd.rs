//! `cloudbft place`: plan where every node runs (crate `placement`), print the plan, write the
//! cluster configuration's placement part and the Terraform variables; check an existing
//! configuration's placement; put Terraform's addresses into a configuration; scale the groups
//! of a Terraform deployment.
//!
//! Node ids follow `cloudbft keygen` (crates/cloudbft/src/keygen.rs): primary candidate c is
//! node c, replica k (1..=2f+1) of group g is node 100 + 100 g + k, database node k is 10 + k.

use anyhow::{bail, Context, Result};
use clap::Args;
use placement::{Demand, Level, Machine, Plan};
use proto::config::{Cluster, ClusterConfig};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use usig::{Enrollment, EnrollmentRecord};

#[derive(Args, Debug)]
pub struct PlaceArgs {
    /// Byzantine faults tolerated per group and among the database nodes.
    #[arg(long, default_value_t = 1)]
    f: usize,
    /// Groups of 2f+1 replicas.
    #[arg(long, default_value_t = 2)]
    groups: usize,
    /// Primary candidates.
    #[arg(long, default_value_t = 2)]
    candidates: usize,
    /// Which failure domains must differ within a group: host, rack or zone.
    #[arg(long, default_value = "host")]
    isolation: Level,
    /// The machines (TOML: [[machine]] tables with id, slots and optionally host, rack, zone,
    /// tpm). Without it: as many machines m0, m1, ... as needed, of --slots slots each.
    #[arg(long)]
    machines: Option<PathBuf>,
    /// VM slots of each machine when there is no --machines file (default: one replica of
    /// every group plus a database node, the paper's layout).
    #[arg(long)]
    slots: Option<u32>,
    /// The previous plan (cloudbft-plan.json): keep everything it placed where it can (adding
    /// groups moves nothing; a removed machine's nodes are replaced).
    #[arg(long)]
    previous: Option<PathBuf>,
    /// Write cloudbft-plan.json and placement.toml (the configuration's placement part) here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Write cloudbft.auto.tfvars.json (and cloudbft-plan.json) into this Terraform directory
    /// (e.g. deploy/terraform/examples/aws).
    #[arg(long)]
    tfvars: Option<PathBuf>,
    /// With --tfvars: also write the machines and the plan, for modules/aws-dedicated (one
    /// Dedicated Host per machine; every machine needs a zone).
    #[arg(long)]
    dedicated: bool,
    /// Verify the placement of an existing cluster configuration instead of planning (with
    /// --machines, against their labels at --isolation).
    #[arg(long, value_name = "CLUSTER_TOML", conflicts_with_all = ["out", "tfvars", "previous", "addresses", "scale_groups"])]
    check: Option<PathBuf>,
    /// `terraform output -json nodes`: write each node's address and machine into --config.
    #[arg(long, requires = "config", conflicts_with_all = ["out", "tfvars", "previous", "scale_groups"])]
    addresses: Option<PathBuf>,
    /// The cluster configuration --addresses rewrites.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Change the group count of the Terraform deployment in --terraform-dir and run
    /// `terraform plan` (and `apply` with --apply): what the autoscaler does.
    #[arg(long, requires = "terraform_dir", conflicts_with_all = ["out", "tfvars", "previous"])]
    scale_groups: Option<usize>,
    #[arg(long)]
    terraform_dir: Option<PathBuf>,
    /// With --scale-groups: apply the plan.
    #[arg(long)]
    apply: bool,
}

pub fn place(args: PlaceArgs) -> Result<()> {
    if let Some(cluster) = &args.check {
        return check(&args, cluster);
    }
    if let Some(addresses) = &args.addresses {
        let config = args.config.as_deref().expect("clap requires --config");
        let changed = apply_addresses(addresses, config)?;
        println!("{}: {changed} node(s) updated", config.display());
        return Ok(());
    }
    if let Some(groups) = args.scale_groups {
        let dir = args.terraform_dir.as_deref().expect("clap requires it");
        let scale =
            crate::terraform::scale_groups(Path::new("terraform"), dir, groups, args.apply)?;
        print!("{scale}");
        return Ok(());
    }
    let demand = Demand::new(args.f, args.groups, args.candidates).at(args.isolation);
    let machines = match &args.machines {
        Some(path) => read_machines(path)?,
        None => default_fleet(&demand, args.slots),
    };
    let previous = args.previous.as_deref().map(PlanFile::read).transpose()?;
    let file = PlanFile::make(demand, machines, previous.as_ref().map(|p| &p.plan))?;
    print!("{}", table(&file.machines, &demand, &file.plan));
    if let Some(previous) = &previous {
        println!(
            "moved from the previous plan: {} node(s)",
            file.plan.moves_from(&previous.plan)
        );
    }
    if let Some(out) = &args.out {
        fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        file.write(&out.join(PLAN_FILE))?;
        let path = out.join("placement.toml");
        fs::write(&path, placement_toml(&file)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!(
            "wrote {} and {}",
            out.join(PLAN_FILE).display(),
            path.display()
        );
    }
    if let Some(dir) = &args.tfvars {
        let path = crate::terraform::write_tfvars(dir, &file, args.dedicated)?;
        file.write(&dir.join(PLAN_FILE))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The plan file: what was asked, on which machines, and the answer. `--previous` and
/// [`crate::terraform::scale_groups`] re-plan incrementally from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanFile {
    pub demand: Demand,
    pub machines: Vec<Machine>,
    pub plan: Plan,
}

/// Name of the plan file next to placement.toml or the Terraform variables.
pub const PLAN_FILE: &str = "cloudbft-plan.json";

impl PlanFile {
    /// Plans `demand` on `machines` (keeping what `previous` placed, see [`placement::plan`]).
    pub fn make(
        demand: Demand,
        machines: Vec<Machine>,
        previous: Option<&Plan>,
    ) -> Result<Self, placement::PlacementError> {
        let plan = placement::plan(&machines, &demand, previous)?;
        Ok(PlanFile {
            demand,
            machines,
            plan,
        })
    }

    pub fn read(path: &Path) -> Result<Self> {
        let text =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        fs::write(path, serde_json::to_string_pretty(self)? + "\n")
            .with_context(|| format!("writing {}", path.display()))
    }
}

/// `[[machine]]` tables.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct MachinesFile {
    #[serde(rename = "machine")]
    machines: Vec<Machine>,
}

fn read_machines(path: &Path) -> Result<Vec<Machine>> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file: MachinesFile =
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    Ok(file.machines)
}

/// Enough machines m0, m1, ... (keygen's names) for any plan: one per VM.
fn default_fleet(demand: &Demand, slots: Option<u32>) -> Vec<Machine> {
    let slots = slots.unwrap_or(demand.groups as u32 + 1);
    (0..demand.total_vms())
        .map(|k| Machine::new(format!("m{k}"), slots))
        .collect()
}

/// Keygen's node ids for a plan's roles.
fn primary_id(c: usize) -> u32 {
    c as u32
}
fn replica_id(g: usize, k: usize) -> u32 {
    100 + 100 * g as u32 + k as u32 + 1
}
fn db_id(k: usize) -> u32 {
    10 + k as u32 + 1
}

/// The plan as a table, one machine per line, and a summary against the lower bound.
fn table(machines: &[Machine], demand: &Demand, plan: &Plan) -> String {
    // Per machine: its primary candidates, group replicas and database nodes.
    type Roles = (Vec<String>, Vec<String>, Vec<String>);
    let mut rows: BTreeMap<&str, Roles> = BTreeMap::new();
    for (c, m) in plan.primaries.iter().enumerate() {
        rows.entry(m).or_default().0.push(primary_id(c).to_string());
    }
    for (g, members) in plan.groups.iter().enumerate() {
        for (k, m) in members.iter().enumerate() {
            let r = rows.entry(m).or_default();
            r.1.push(format!("g{g}:{}", replica_id(g, k)));
        }
    }
    for (k, m) in plan.db_nodes.iter().enumerate() {
        rows.entry(m).or_default().2.push(db_id(k).to_string());
    }
    let by_id: BTreeMap<&str, &Machine> = machines.iter().map(|m| (m.id.as_str(), m)).collect();
    let dash = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(" ")
        }
    };
    let lines: Vec<[String; 6]> = rows
        .iter()
        .map(|(id, (p, r, d))| {
            let m = by_id.get(id);
            let label = |l: Level| m.and_then(|m| m.domain(l)).unwrap_or("-").to_string();
            let slots = m.map_or("?".into(), |m| m.slots.to_string());
            [
                id.to_string(),
                format!("{}/{}", label(Level::Rack), label(Level::Zone)),
                format!("{}/{slots}", p.len() + r.len() + d.len()),
                dash(p),
                dash(r),
                dash(d),
            ]
        })
        .collect();
    let header = [
        "machine",
        "rack/zone",
        "VMs/slots",
        "primary",
        "replicas (group:node)",
        "dbnode",
    ]
    .map(String::from);
    let widths: Vec<usize> = (0..6)
        .map(|i| {
            lines
                .iter()
                .chain([&header])
                .map(|l| l[i].len())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in [&header].into_iter().chain(&lines) {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:w$}"))
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    let _ = writeln!(
        out,
        "{} machines for f={}, {} group(s), {} candidate(s), {} database nodes at {} isolation \
         (lower bound {})",
        plan.machines_used(),
        demand.f,
        demand.groups,
        demand.primaries,
        demand.db_nodes,
        demand.isolation,
        placement::lower_bound(machines, demand)
    );
    out
}

/// The configuration's placement part: every node's id and machine (as cluster.toml's
/// `[[primary]]`, `[[replica]]` and `[[dbnode]]` entries need them) and the machine list.
fn placement_toml(file: &PlanFile) -> Result<String> {
    #[derive(Serialize)]
    struct Node {
        id: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        group: Option<u32>,
        machine: String,
    }
    #[derive(Serialize)]
    struct Part<'a> {
        f: usize,
        isolation: Level,
        #[serde(rename = "primary")]
        primaries: Vec<Node>,
        #[serde(rename = "replica")]
        replicas: Vec<Node>,
        #[serde(rename = "dbnode")]
        db_nodes: Vec<Node>,
        #[serde(rename = "machine")]
        machines: &'a [Machine],
    }
    let plan = &file.plan;
    let part = Part {
        f: file.demand.f,
        isolation: file.demand.isolation,
        primaries: plan
            .primaries
            .iter()
            .enumerate()
            .map(|(c, m)| Node {
                id: primary_id(c),
                group: None,
                machine: m.clone(),
            })
            .collect(),
        replicas: plan
            .groups
            .iter()
            .enumerate()
            .flat_map(|(g, members)| {
                members.iter().enumerate().map(move |(k, m)| Node {
                    id: replica_id(g, k),
                    group: Some(g as u32),
                    machine: m.clone(),
                })
            })
            .collect(),
        db_nodes: plan
            .db_nodes
            .iter()
            .enumerate()
            .map(|(k, m)| Node {
                id: db_id(k),
                group: None,
                machine: m.clone(),
            })
            .collect(),
        machines: &file.machines,
    };
    Ok(format!(
        "# The placement part of a cluster configuration, from cloudbft place: copy each node's\n\
         # machine into its [[primary]], [[replica]] or [[dbnode]] entry of cluster.toml.\n{}",
        toml::to_string(&part)?
    ))
}

/// The TPM identity each USIG identity's enrollment proves or reports.
fn tpm_of(records: &[EnrollmentRecord]) -> BTreeMap<u64, String> {
    records
        .iter()
        .filter_map(|r| match r.parse() {
            Ok((id, Enrollment::Tpm { tpm_identity, .. })) => {
                Some((id.0, hex::encode(tpm_identity)))
            }
            _ => None,
        })
        .collect()
}

/// A configuration's placement as a plan (groups' members in id order) and its machines:
/// from the --machines file if given, else one machine per name, with the TPM its nodes'
/// enrollments name when they all name one.
fn plan_of(config: &ClusterConfig, machines: Option<Vec<Machine>>) -> (Plan, Vec<Machine>) {
    let mut groups: BTreeMap<u32, Vec<(u32, String)>> =
        config.groups.iter().map(|g| (g.id, Vec::new())).collect();
    for r in &config.replicas {
        groups
            .entry(r.group)
            .or_default()
            .push((r.id, r.machine.clone()));
    }
    let plan = Plan {
        groups: groups
            .into_values()
            .map(|mut members| {
                members.sort();
                members.into_iter().map(|(_, m)| m).collect()
            })
            .collect(),
        primaries: config.primaries.iter().map(|p| p.machine.clone()).collect(),
        db_nodes: config.db_nodes.iter().map(|d| d.machine.clone()).collect(),
    };
    let machines = machines.unwrap_or_else(|| {
        let tpms = tpm_of(&config.enrollments);
        let mut seen: BTreeMap<&str, BTreeSet<&String>> = BTreeMap::new();
        let usig_nodes = config
            .primaries
            .iter()
            .map(|p| (&p.machine, p.usig))
            .chain(config.replicas.iter().map(|r| (&r.machine, r.usig)));
        for (machine, usig) in usig_nodes {
            let entry = seen.entry(machine).or_default();
            entry.extend(tpms.get(&usig));
        }
        for d in &config.db_nodes {
            seen.entry(&d.machine).or_default();
        }
        let load = plan.load();
        seen.into_iter()
            .map(|(id, tpms)| Machine {
                // A cloud vTPM is per VM: a machine whose nodes show several TPMs has none.
                tpm: (tpms.len() == 1)
                    .then(|| tpms.into_iter().next().cloned().unwrap_or_default()),
                ..Machine::new(id, load.get(id).copied().unwrap_or(0) as u32)
            })
            .collect()
    });
    (plan, machines)
}

fn check(args: &PlaceArgs, path: &Path) -> Result<()> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let config: ClusterConfig =
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let machines = args.machines.as_deref().map(read_machines).transpose()?;
    let (plan, machines) = plan_of(&config, machines);
    let demand = Demand {
        f: config.f,
        groups: plan.groups.len(),
        primaries: plan.primaries.len(),
        db_nodes: plan.db_nodes.len(),
        isolation: args.isolation,
    };
    print!("{}", table(&machines, &demand, &plan));
    let mut problems: Vec<String> = placement::check(&machines, args.isolation, config.f, &plan)
        .iter()
        .map(ToString::to_string)
        .collect();
    // One TPM under two machine names is one physical machine.
    let mut by_tpm: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for m in &machines {
        if let Some(t) = &m.tpm {
            by_tpm.entry(t).or_default().push(&m.id);
        }
    }
    for (tpm, names) in by_tpm.iter().filter(|(_, n)| n.len() > 1) {
        problems.push(format!(
            "machines {} have one TPM ({tpm}): they are one physical machine",
            names.join(", ")
        ));
    }
    if let Err(e) = Cluster::new(config) {
        problems.push(format!("the configuration does not load: {e}"));
    }
    if problems.is_empty() {
        println!(
            "{}: placement OK at {} isolation",
            path.display(),
            args.isolation
        );
        return Ok(());
    }
    for p in &problems {
        println!("VIOLATION: {p}");
    }
    bail!(
        "{}: {} placement violation(s)",
        path.display(),
        problems.len()
    )
}

/// Writes the address (host part; the port stays) and machine of every node in `addresses`
/// (`terraform output -json nodes`) into the configuration at `config`. Returns how many
/// nodes changed.
fn apply_addresses(addresses: &Path, config: &Path) -> Result<usize> {
    let text = fs::read_to_string(addresses)
        .with_context(|| format!("reading {}", addresses.display()))?;
    let by_id = crate::terraform::parse_nodes(&text)
        .with_context(|| format!("parsing {}", addresses.display()))?;
    let text =
        fs::read_to_string(config).with_context(|| format!("reading {}", config.display()))?;
    let mut cluster: ClusterConfig =
        toml::from_str(&text).with_context(|| format!("parsing {}", config.display()))?;
    let mut changed = 0;
    let mut seen = BTreeSet::new();
    let mut update = |id: u32, addr: &mut String, machine: &mut String| -> Result<()> {
        let Some(node) = by_id.get(&id) else {
            return Ok(());
        };
        let port = addr
            .rsplit_once(':')
            .map(|(_, p)| p.to_string())
            .with_context(|| format!("node {id}: addr {addr:?} has no port"))?;
        *addr = format!("{}:{port}", node.address);
        *machine = node.machine.clone();
        changed += 1;
        seen.insert(id);
        Ok(())
    };
    for p in &mut cluster.primaries {
        update(p.id, &mut p.addr, &mut p.machine)?;
    }
    for r in &mut cluster.replicas {
        update(r.id, &mut r.addr, &mut r.machine)?;
    }
    for d in &mut cluster.db_nodes {
        update(d.id, &mut d.addr, &mut d.machine)?;
    }
    if let Some(missing) = by_id.keys().find(|id| !seen.contains(*id)) {
        bail!(
            "{}: node {missing} of {} is not in the configuration: was it made with the same \
             --f, --groups and --candidates?",
            config.display(),
            addresses.display()
        );
    }
    fs::write(config, toml::to_string(&cluster)?)
        .with_context(|| format!("writing {}", config.display()))?;
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `cloudbft keygen --out <out>` with its defaults (f=1, 2 groups, 2 candidates, soft).
    fn keygen_args(out: &Path) -> crate::keygen::KeygenArgs {
        let cli = crate::Cli::try_parse_from([
            "cloudbft",
            "keygen",
            "--out",
            out.to_str().expect("utf-8"),
        ])
        .expect("parse");
        match cli.command {
            crate::Command::Keygen(args) => args,
            _ => unreachable!(),
        }
    }

    fn plan_file(groups: usize) -> PlanFile {
        let demand = Demand::new(1, groups, 2);
        PlanFile::make(demand, default_fleet(&demand, None), None).expect("plan")
    }

    #[test]
    fn the_table_names_every_node_and_the_bound() {
        let file = plan_file(2);
        let text = table(&file.machines, &file.demand, &file.plan);
        for id in ["g0:101", "g0:102", "g0:103", "g1:201", "g1:203"] {
            assert!(text.contains(id), "{id} missing:\n{text}");
        }
        assert!(
            text.contains("5 machines for f=1, 2 group(s), 2 candidate(s), 3 database nodes at host isolation (lower bound 5)"),
            "{text}"
        );
    }

    /// The placement part written for a keygen-shaped cluster passes `--check`, and a
    /// configuration that puts two members of a group on one machine does not.
    #[test]
    fn keygen_configurations_pass_the_check_and_a_bad_one_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("c");
        let keygen = keygen_args(&out);
        let cluster = crate::keygen::keygen(&keygen).expect("keygen");
        let args = |extra: &[&str]| {
            let mut v = vec![
                "cloudbft",
                "place",
                "--check",
                cluster.to_str().expect("utf-8"),
            ];
            v.extend(extra);
            crate::Cli::try_parse_from(v).expect("parse")
        };
        let crate::Command::Place(a) = args(&[]).command else {
            unreachable!()
        };
        check(&a, &cluster).expect("keygen's layout is valid");

        let text = fs::read_to_string(&cluster).expect("read");
        let mut config: ClusterConfig = toml::from_str(&text).expect("parse");
        let second = config.replicas[1].machine.clone();
        config.replicas[0].machine = second;
        let bad = dir.path().join("bad.toml");
        fs::write(&bad, toml::to_string(&config).expect("toml")).expect("write");
        let err = check(&a, &bad).expect_err("two members on one machine");
        assert!(err.to_string().contains("placement violation"), "{err}");
    }

    #[test]
    fn addresses_from_terraform_go_into_the_configuration() {
        let dir = tempfile::tempdir().expect("tempdir");
        let keygen = keygen_args(&dir.path().join("c"));
        let cluster = crate::keygen::keygen(&keygen).expect("keygen");
        let nodes = dir.path().join("nodes.json");
        fs::write(
            &nodes,
            r#"{"node-101": {"id": 101, "role": "replica", "group": 0, "address": "10.0.1.7",
                "machine": "i-0abc", "spread_set": "group-0"},
               "node-11": {"id": 11, "role": "dbnode", "group": null, "address": "10.0.2.9",
                "machine": "i-0def", "spread_set": "dbnodes"}}"#,
        )
        .expect("write");
        assert_eq!(apply_addresses(&nodes, &cluster).expect("apply"), 2);
        let config: ClusterConfig =
            toml::from_str(&fs::read_to_string(&cluster).expect("read")).expect("parse");
        let r = config.replicas.iter().find(|r| r.id == 101).expect("101");
        assert!(r.addr.starts_with("10.0.1.7:"), "{}", r.addr);
        assert_eq!(r.machine, "i-0abc");
        let d = config.db_nodes.iter().find(|d| d.id == 11).expect("11");
        assert!(d.addr.starts_with("10.0.2.9:") && d.machine == "i-0def");

        fs::write(
            &nodes,
            r#"{"node-999": {"id": 999, "address": "10.0.0.1", "machine": "x"}}"#,
        )
        .expect("write");
        let err = apply_addresses(&nodes, &cluster).expect_err("unknown node");
        assert!(err.to_string().contains("node 999"), "{err}");
    }

    #[test]
    fn placement_toml_uses_keygen_ids() {
        let text = placement_toml(&plan_file(2)).expect("toml");
        let value: toml::Value = toml::from_str(&text).expect("parse");
        let replicas = value["replica"].as_array().expect("replicas");
        let ids: Vec<i64> = replicas
            .iter()
            .map(|r| r["id"].as_integer().expect("id"))
            .collect();
        assert_eq!(ids, [101, 102, 103, 201, 202, 203]);
        assert_eq!(value["dbnode"][0]["id"].as_integer(), Some(11));
        assert_eq!(value["primary"][1]["id"].as_integer(), Some(1));
    }

    /// Every ExecStart of deploy/systemd parses as this binary's command line: the units stay
    /// in step with the CLI's flags.
    #[test]
    fn systemd_units_use_flags_the_cli_has() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/systemd");
        let mut seen = 0;
        for entry in fs::read_dir(&dir).expect("deploy/systemd") {
            let path = entry.expect("entry").path();
            let text = fs::read_to_string(&path).expect("read");
            for line in text.lines().filter_map(|l| l.strip_prefix("ExecStart=")) {
                let line = line
                    .replace("${NODE_ID}", "101")
                    .replace("${METRICS_ADDR}", "0.0.0.0:9100")
                    .replace("${GATEWAY_LISTEN}", "0.0.0.0:8080")
                    .replace(
                        "$REPLICA_ARGS",
                        crate::cloud_provider::REPLICA_ENV
                            .trim()
                            .trim_start_matches("REPLICA_ARGS="),
                    );
                let mut words: Vec<&str> = line.split_whitespace().collect();
                assert_eq!(words[0], "/usr/local/bin/cloudbft", "{}", path.display());
                words[0] = "cloudbft";
                if let Err(e) = crate::Cli::try_parse_from(&words) {
                    panic!("{}: {line}: {e}", path.display());
                }
                seen += 1;
            }
        }
        assert_eq!(seen, 5, "usigd, primary, replica, dbnode, gateway");
    }
}
