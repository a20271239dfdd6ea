//! Scaling a Terraform deployment of the cluster (deploy/terraform): the cloud side of the
//! autoscaler's decision. [`Terraform::plan_groups`] changes the group count in the variables
//! `cloudbft place --tfvars` wrote (re-planning the Dedicated Hosts layout incrementally when
//! the deployment has one) and runs `terraform plan`; the [`PendingScale`] it returns says what
//! would change and applies exactly that plan, or puts the variables back. [`Terraform::nodes`]
//! reads the machines' addresses back (`terraform output -json nodes`), and [`destroys_in_use`]
//! finds planned destroys of machines a configuration still uses. `cloudbft place
//! --scale-groups` ([`scale_groups`]) and the autoscaler's cloud provider
//! (crate::cloud_provider) are built on them: the same decision ("run G groups") scales the demo
//! and a cloud.
//!
//! The Terraform directory must be initialised (`terraform init`) and hold the cloud's own
//! variables (terraform.tfvars); this module only ever touches [`TFVARS_FILE`], the plan file
//! next to it and the saved plan it applies. The terraform program is a parameter (a wrapper
//! script, another version, a test double).

use crate::place_cmd::{PlanFile, PLAN_FILE};
use anyhow::{bail, Context, Result};
use proto::config::ClusterConfig;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The variables file `cloudbft place --tfvars` writes: auto-loaded by Terraform, and separate
/// from the operator's terraform.tfvars.
pub const TFVARS_FILE: &str = "cloudbft.auto.tfvars.json";
/// The saved plan a [`PendingScale`] applies (so that apply does exactly what plan showed).
const SAVED_PLAN: &str = "cloudbft-scale.tfplan";
/// What a scaling step did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleOutcome {
    pub groups_before: usize,
    pub groups_after: usize,
    /// With a Dedicated Hosts layout: nodes the new plan moved (0: only new groups were
    /// placed, or removed groups dropped).
    pub moved_nodes: Option<usize>,
    /// Resources Terraform creates, updates, replaces or deletes (no-ops left out).
    pub changes: Vec<ResourceChange>,
    /// Whether `terraform apply` ran (and succeeded).
    pub applied: bool,
}

/// One resource that changes, as `terraform show -json` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceChange {
    /// The resource address, e.g. `module.cloudbft.aws_instance.node["node-301"]`.
    pub address: String,
    /// Terraform's actions: `["create"]`, `["delete"]`, `["update"]`, `["delete", "create"]`...
    pub actions: Vec<String>,
}

impl ScaleOutcome {
    /// Resources with `action` among their actions.
    pub fn with_action<'a>(
        &'a self,
        action: &'a str,
    ) -> impl Iterator<Item = &'a ResourceChange> + 'a {
        self.changes
            .iter()
            .filter(move |c| c.actions.iter().any(|a| a == action))
    }
}

impl fmt::Display for ScaleOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "groups {} -> {}: {} to create, {} to update, {} to delete{}",
            self.groups_before,
            self.groups_after,
            self.with_action("create").count(),
            self.with_action("update").count(),
            self.with_action("delete").count(),
            if self.applied {
                " (applied)"
            } else {
                " (planned only)"
            }
        )?;
        if let Some(moved) = self.moved_nodes {
            writeln!(f, "re-planned: {moved} placed node(s) moved")?;
        }
        for c in &self.changes {
            writeln!(f, "  {:<16} {}", c.actions.join("+"), c.address)?;
        }
        Ok(())
    }
}

/// A Terraform root module (deploy/terraform/examples/<cloud>, or any module with the same
/// variables and a `nodes` output) and the program that runs terraform in it.
#[derive(Clone, Debug)]
pub struct Terraform {
    program: PathBuf,
    dir: PathBuf,
}

impl Terraform {
    /// `program` (e.g. `terraform`, looked up on PATH) run in `dir`.
    pub fn new(program: impl Into<PathBuf>, dir: impl Into<PathBuf>) -> Terraform {
        Terraform {
            program: program.into(),
            dir: dir.into(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn tfvars_path(&self) -> PathBuf {
        self.dir.join(TFVARS_FILE)
    }

    /// The variables `cloudbft place --tfvars` wrote, as text and parsed.
    fn read_vars(&self) -> Result<(String, Map<String, Value>)> {
        let path = self.tfvars_path();
        let text = fs::read_to_string(&path).with_context(|| {
            format!(
                "reading {}: run `cloudbft place --tfvars {}` first",
                path.display(),
                self.dir.display()
            )
        })?;
        let vars =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        Ok((text, vars))
    }

    /// The number variable `name` of [`TFVARS_FILE`] (`f`, `groups`, `primaries`).
    pub fn var(&self, name: &str) -> Result<usize> {
        let (_, vars) = self.read_vars()?;
        number(&vars, name, &self.tfvars_path())
    }

    /// Sets the deployment to `groups` groups and runs `terraform plan`, saving the plan. The
    /// variables say `groups` until the returned [`PendingScale`] is applied, discarded or
    /// dropped; if the plan fails they are put back and nothing changed.
    ///
    /// When [`TFVARS_FILE`] also holds a Dedicated Hosts placement (`cloudbft place --tfvars
    /// --dedicated`), the plan in [`PLAN_FILE`] is redone incrementally first: new groups go to
    /// free slots, nothing placed moves.
    pub fn plan_groups(&self, groups: usize) -> Result<PendingScale> {
        if groups == 0 {
            bail!("groups: a cluster needs at least one group");
        }
        let tfvars_path = self.tfvars_path();
        let (original, mut vars) = self.read_vars()?;
        let groups_before = number(&vars, "groups", &tfvars_path)?;
        let plan_path = self.dir.join(PLAN_FILE);
        let mut moved_nodes = None;
        let mut new_plan = None;
        if vars.contains_key("placement") {
            let previous = PlanFile::read(&plan_path)?;
            let demand = placement::Demand {
                groups,
                ..previous.demand
            };
            let file = PlanFile::make(demand, previous.machines, Some(&previous.plan))
                .with_context(|| {
                    format!(
                        "re-planning {groups} groups on the machines of {}",
                        plan_path.display()
                    )
                })?;
            moved_nodes = Some(file.plan.moves_from(&previous.plan));
            dedicated_vars(&mut vars, &file)?;
            new_plan = Some(file);
        }
        vars.insert("groups".into(), json!(groups));
        write_json(&tfvars_path, &Value::Object(vars))?;
        // From here on, dropping `pending` puts the variables back.
        let mut pending = PendingScale {
            terraform: self.clone(),
            original,
            new_plan,
            outcome: ScaleOutcome {
                groups_before,
                groups_after: groups,
                moved_nodes,
                changes: Vec::new(),
                applied: false,
            },
            finished: false,
        };
        let planned = self
            .run(&[
                "plan",
                "-input=false",
                "-no-color",
                "-lock-timeout=60s",
                &format!("-out={SAVED_PLAN}"),
            ])
            .and_then(|_| self.run(&["show", "-json", SAVED_PLAN]))
            .and_then(|json| parse_changes(&json));
        match planned {
            Ok(changes) => {
                pending.outcome.changes = changes;
                Ok(pending)
            }
            Err(e) => Err(e.context(format!(
                "terraform plan in {} failed; {TFVARS_FILE} restored, nothing changed",
                self.dir.display()
            ))),
        }
    }

    /// The cluster's machines as the root module's `nodes` output lists them (`terraform
    /// output -json nodes`), by node id.
    pub fn nodes(&self) -> Result<BTreeMap<u32, TfNode>> {
        let json = self.run(&["output", "-no-color", "-json", "nodes"])?;
        parse_nodes(&json).with_context(|| {
            format!(
                "the `nodes` output of {} (deploy/terraform/examples/<cloud>/outputs.tf has it)",
                self.dir.display()
            )
        })
    }

    /// Runs terraform in the directory; its stdout on success, its stderr in the error
    /// otherwise.
    fn run(&self, args: &[&str]) -> Result<String> {
        let output = Command::new(&self.program)
            .args(args)
            .current_dir(&self.dir)
            .env("TF_IN_AUTOMATION", "1")
            .output()
            .with_context(|| {
                format!(
                    "cannot run {} (is the terraform CLI installed? --terraform-cmd names \
                     another program)",
                    self.program.display()
                )
            })?;
        if !output.status.success() {
            bail!(
                "`{} {}` in {} failed ({}): {}",
                self.program.display(),
                args.join(" "),
                self.dir.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        String::from_utf8(output.stdout).context("terraform printed non-UTF-8")
    }
}

fn number(vars: &Map<String, Value>, name: &str, path: &Path) -> Result<usize> {
    vars.get(name)
        .and_then(Value::as_u64)
        .map(|n| n as usize)
        .with_context(|| {
            format!(
                "{}: no \"{name}\" number: run `cloudbft place --tfvars` to write it",
                path.display()
            )
        })
}

/// A planned change of the group count: the variables say the new count and the saved plan
/// waits. [`PendingScale::apply`] applies exactly that plan; [`PendingScale::discard`], or
/// dropping it, puts the variables back and deletes the saved plan.
#[must_use = "dropping a pending scale puts the variables back"]
pub struct PendingScale {
    terraform: Terraform,
    /// The variables file as it was.
    original: String,
    /// With a Dedicated Hosts layout: the plan file to keep once applied.
    new_plan: Option<PlanFile>,
    /// What the plan changes (`applied` false).
    pub outcome: ScaleOutcome,
    finished: bool,
}

impl PendingScale {
    /// Applies the saved plan. If terraform fails, the variables are put back: they keep
    /// describing the group count the cluster runs, and the error says what may exist
    /// part-way.
    pub fn apply(mut self) -> Result<ScaleOutcome> {
        let tf = self.terraform.clone();
        let applied = tf.run(&[
            "apply",
            "-input=false",
            "-no-color",
            "-lock-timeout=60s",
            SAVED_PLAN,
        ]);
        if let Err(e) = applied {
            self.restore();
            return Err(e.context(format!(
                "terraform apply in {} failed: {TFVARS_FILE} is back at {} groups; resources \
                 it created or destroyed before failing stay so (`terraform plan` there shows \
                 them, `terraform apply` returns them to {} groups)",
                tf.dir.display(),
                self.outcome.groups_before,
                self.outcome.groups_before
            )));
        }
        self.finished = true;
        let _ = fs::remove_file(tf.dir.join(SAVED_PLAN));
        if let Some(file) = &self.new_plan {
            file.write(&tf.dir.join(PLAN_FILE))?;
        }
        self.outcome.applied = true;
        Ok(self.outcome.clone())
    }

    /// Puts the variables back; returns what the plan would have changed.
    pub fn discard(mut self) -> ScaleOutcome {
        self.restore();
        self.outcome.clone()
    }

    fn restore(&mut self) {
        self.finished = true;
        let tf = &self.terraform;
        let _ = fs::remove_file(tf.dir.join(SAVED_PLAN));
        if let Err(e) = fs::write(tf.tfvars_path(), &self.original) {
            tracing::error!(path = %tf.tfvars_path().display(), error = %e, "cannot restore the Terraform variables");
        }
    }
}

impl Drop for PendingScale {
    fn drop(&mut self) {
        if !self.finished {
            self.restore();
        }
    }
}

/// Sets the deployment in `workdir` to `groups` groups and runs `terraform plan` (and
/// `terraform apply` of that very plan when `apply`), with `terraform` (`cloudbft place
/// --scale-groups`).
///
/// Without `apply` it is a preview: the outcome lists what would change, and the variables are
/// left as they were. With `apply`, the variables keep the new count once the apply
/// succeeded; if the plan or the apply fails they are put back.
pub fn scale_groups(
    terraform: &Path,
    workdir: &Path,
    groups: usize,
    apply: bool,
) -> Result<ScaleOutcome> {
    let pending = Terraform::new(terraform, workdir).plan_groups(groups)?;
    if apply {
        pending.apply()
    } else {
        Ok(pending.discard())
    }
}

/// One node of the `nodes` output (deploy/terraform/modules/*/outputs.tf): its id as
/// `cloudbft keygen` numbers them, its address (host, no port) and its machine (what
/// cluster.toml's `machine` fields say: an instance id, or a Dedicated Host's plan name).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct TfNode {
    pub id: u32,
    pub address: String,
    pub machine: String,
}

/// `terraform output -json nodes` (`node-<id>` → node), by id. A node whose machine does not
/// exist yet has no address: refused.
pub fn parse_nodes(json: &str) -> Result<BTreeMap<u32, TfNode>> {
    #[derive(Deserialize)]
    struct Raw {
        id: u32,
        address: Option<String>,
        machine: Option<String>,
    }
    let raw: BTreeMap<String, Raw> = serde_json::from_str(json)
        .context("expected `terraform output -json nodes`: node-<id> → { id, address, machine }")?;
    raw.into_iter()
        .map(|(name, n)| {
            let field = |v: Option<String>, what: &str| {
                v.filter(|s| !s.is_empty()).with_context(|| {
                    format!("{name}: no {what} (is its machine created? run `terraform apply`)")
                })
            };
            let node = TfNode {
                id: n.id,
                address: field(n.address, "address")?,
                machine: field(n.machine, "machine")?,
            };
            Ok((node.id, node))
        })
        .collect()
}

/// The destroys in `changes` (a delete, or a replacement) of resources that `next` still
/// needs, each with the reason: a node that runs in `next` (`…["node-<id>"]`), the
/// anti-affinity construct of a group or set it keeps (`…["group-<g>"]`, `["primaries"]`,
/// `["dbnodes"]`), a machine one of its nodes is on (Dedicated Hosts, keyed by the plan's
/// machine), or a resource that cannot be tied to what `current` → `next` removes. Empty when
/// the plan only destroys what the change releases.
pub fn destroys_in_use(
    changes: &[ResourceChange],
    current: &ClusterConfig,
    next: &ClusterConfig,
) -> Vec<String> {
    let nodes = |c: &ClusterConfig| -> Vec<(u32, String)> {
        c.primaries
            .iter()
            .map(|p| (p.id, p.machine.clone()))
            .chain(c.replicas.iter().map(|r| (r.id, r.machine.clone())))
            .chain(c.db_nodes.iter().map(|d| (d.id, d.machine.clone())))
            .collect()
    };
    let kept = nodes(next);
    let kept_ids: BTreeSet<u32> = kept.iter().map(|(id, _)| *id).collect();
    let kept_machines: BTreeSet<&str> = kept.iter().map(|(_, m)| m.as_str()).collect();
    let kept_groups: BTreeSet<u32> = next.groups.iter().map(|g| g.id).collect();
    let current_nodes = nodes(current);
    let released_machines: BTreeSet<&str> = current_nodes
        .iter()
        .filter(|(id, m)| !kept_ids.contains(id) && !kept_machines.contains(m.as_str()))
        .map(|(_, m)| m.as_str())
        .collect();
    let mut refused = Vec::new();
    for change in changes
        .iter()
        .filter(|c| c.actions.iter().any(|a| a == "delete"))
    {
        let key = instance_key(&change.address);
        let why = if let Some(id) = key.and_then(|k| k.strip_prefix("node-")) {
            match id.parse::<u32>() {
                Ok(id) if kept_ids.contains(&id) => Some(format!("node {id} runs in it")),
                Ok(_) => None,
                Err(_) => Some("not a node of the configuration".into()),
            }
        } else if let Some(g) = key.and_then(|k| k.strip_prefix("group-")) {
            match g.parse::<u32>() {
                Ok(g) if kept_groups.contains(&g) => Some(format!("group {g} serves in it")),
                Ok(_) => None,
                Err(_) => Some("not a group of the configuration".into()),
            }
        } else {
            match key {
                Some(k @ ("primaries" | "dbnodes")) => Some(format!("the {k} stay")),
                Some(k) if kept_machines.contains(k) => Some(format!("machine {k} runs its nodes")),
                Some(k) if released_machines.contains(k) => None,
                _ => {
                    Some("it cannot be tied to a node, group or machine the change removes".into())
                }
            }
        };
        if let Some(why) = why {
            refused.push(format!(
                "{} ({}): {why}",
                change.address,
                change.actions.join("+")
            ));
        }
    }
    refused
}

/// The last instance key of a resource address: `node-101` in
/// `module.cloudbft.aws_instance.node["node-101"]`; none for unkeyed or counted resources.
fn instance_key(address: &str) -> Option<&str> {
    let inner = address.strip_suffix("\"]")?;
    let start = inner.rfind("[\"")?;
    Some(&inner[start + 2..])
}

/// The changing resources of `terraform show -json <plan>`.
fn parse_changes(json: &str) -> Result<Vec<ResourceChange>> {
    #[derive(Deserialize)]
    struct Shown {
        #[serde(default)]
        resource_changes: Vec<Changed>,
    }
    #[derive(Deserialize)]
    struct Changed {
        address: String,
        change: Change,
    }
    #[derive(Deserialize)]
    struct Change {
        actions: Vec<String>,
    }
    let shown: Shown = serde_json::from_str(json).context("parsing `terraform show -json`")?;
    Ok(shown
        .resource_changes
        .into_iter()
        .filter(|c| !c.change.actions.iter().all(|a| a == "no-op" || a == "read"))
        .map(|c| ResourceChange {
            address: c.address,
            actions: c.change.actions,
        })
        .collect())
}

/// Writes [`TFVARS_FILE`] in `dir` for `file`'s plan: f, groups and primaries, and with
/// `dedicated` the used machines (zone, slots) and the placement, for modules/aws-dedicated.
/// Other variables already in the file are kept.
pub fn write_tfvars(dir: &Path, file: &PlanFile, dedicated: bool) -> Result<PathBuf> {
    let path = dir.join(TFVARS_FILE);
    let mut vars: Map<String, Value> = match fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .with_context(|| format!("parsing the existing {}", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Map::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    vars.insert("f".into(), json!(file.demand.f));
    vars.insert("groups".into(), json!(file.demand.groups));
    vars.insert("primaries".into(), json!(file.demand.primaries));
    if dedicated {
        dedicated_vars(&mut vars, file)?;
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    write_json(&path, &Value::Object(vars))?;
    Ok(path)
}

/// `machines` (the machines the plan uses: one Dedicated Host each) and `placement`.
fn dedicated_vars(vars: &mut Map<String, Value>, file: &PlanFile) -> Result<()> {
    let load = file.plan.load();
    let mut machines = Map::new();
    for m in file
        .machines
        .iter()
        .filter(|m| load.contains_key(m.id.as_str()))
    {
        let zone = m.zone.as_deref().with_context(|| {
            format!(
                "machine {}.zone: a Dedicated Host needs the availability zone it is allocated in",
                m.id
            )
        })?;
        machines.insert(m.id.clone(), json!({ "zone": zone, "slots": m.slots }));
    }
    vars.insert("machines".into(), Value::Object(machines));
    vars.insert("placement".into(), serde_json::to_value(&file.plan)?);
    Ok(())
}

/// Writes JSON through a temporary file and a rename, so a crash leaves the old or the new
/// file, never half of one.
fn write_json(path: &Path, value: &Value) -> Result<()> {
    let tmp = path.with_extension("json.tmp");
    fs::write(&tmp, serde_json::to_string_pretty(value)? + "\n")
        .with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use placement::{Demand, Machine};

    /// Trimmed from a real `terraform show -json` of a plan that removes a group.
    const SHOWN: &str = r#"{"format_version":"1.2","terraform_version":"1.11.4",
      "resource_changes":[
        {"address":"terraform_data.group[\"0\"]","mode":"managed","type":"terraform_data",
         "name":"group","index":"0","change":{"actions":["no-op"]}},
        {"address":"terraform_data.group[\"1\"]","mode":"managed","type":"terraform_data",
         "name":"group","index":"1","change":{"actions":["delete"]}},
        {"address":"data.aws_ami.selected","mode":"data","change":{"actions":["read"]}},
        {"address":"aws_instance.node[\"node-301\"]","change":{"actions":["delete","create"]}}]}"#;

    #[test]
    fn plan_json_yields_the_changing_resources() {
        let changes = parse_changes(SHOWN).expect("parse");
        assert_eq!(
            changes,
            vec![
                ResourceChange {
                    address: "terraform_data.group[\"1\"]".into(),
                    actions: vec!["delete".into()],
                },
                ResourceChange {
                    address: "aws_instance.node[\"node-301\"]".into(),
                    actions: vec!["delete".into(), "create".into()],
                },
            ]
        );
        assert!(parse_changes("{\"resource_changes\": 3}").is_err());
        assert_eq!(parse_changes("{}").expect("no changes"), vec![]);
    }

    fn dedicated_file(groups: usize) -> PlanFile {
        let demand = Demand::new(1, groups, 1);
        let machines: Vec<Machine> = (0..8)
            .map(|i| Machine {
                zone: Some(format!("eu-west-1{}", ["a", "b", "c"][i % 3])),
                ..Machine::new(format!("h{i}"), 3)
            })
            .collect();
        PlanFile::make(demand, machines, None).expect("plan")
    }

    #[test]
    fn tfvars_keep_other_variables_and_carry_the_dedicated_layout() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(
            dir.path().join(TFVARS_FILE),
            r#"{"ami_id": "ami-1", "groups": 9}"#,
        )
        .expect("write");
        let file = dedicated_file(2);
        write_tfvars(dir.path(), &file, true).expect("write");
        let vars: Value =
            serde_json::from_str(&fs::read_to_string(dir.path().join(TFVARS_FILE)).expect("read"))
                .expect("json");
        assert_eq!(vars["ami_id"], "ami-1");
        assert_eq!(vars["groups"], 2);
        assert_eq!(vars["f"], 1);
        let used = file.plan.load().len();
        assert_eq!(vars["machines"].as_object().expect("machines").len(), used);
        assert_eq!(vars["placement"]["groups"][1], json!(file.plan.groups[1]));

        let mut no_zone = dedicated_file(1);
        no_zone.machines.iter_mut().for_each(|m| m.zone = None);
        let err = write_tfvars(dir.path(), &no_zone, true).expect_err("zone needed");
        assert!(
            err.to_string().contains(".zone: a Dedicated Host needs"),
            "{err}"
        );
    }

    /// Without a terraform to run, nothing changes and the error says what to install.
    #[test]
    fn a_failed_plan_restores_the_variables() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dedicated_file(2);
        write_tfvars(dir.path(), &file, true).expect("write");
        file.write(&dir.path().join(PLAN_FILE)).expect("plan file");
        let before = fs::read_to_string(dir.path().join(TFVARS_FILE)).expect("read");
        let missing = dir.path().join("no-such-terraform");
        let err = scale_groups(&missing, dir.path(), 3, false).expect_err("no terraform");
        let text = format!("{err:#}");
        assert!(text.contains("is the terraform CLI installed?"), "{text}");
        assert!(text.contains("restored, nothing changed"), "{text}");
        assert_eq!(
            fs::read_to_string(dir.path().join(TFVARS_FILE)).expect("read"),
            before
        );
        assert_eq!(
            PlanFile::read(&dir.path().join(PLAN_FILE)).expect("plan"),
            file
        );
    }

    /// A stand-in for terraform: `plan` and `show` succeed (the plan creates one resource),
    /// `apply` fails when the file `fail-apply` exists.
    fn fake_terraform(dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("fake-terraform");
        fs::write(
            &path,
            "#!/bin/sh\necho \"$1\" >> invocations\ncase \"$1\" in\n\
             plan) : > cloudbft-scale.tfplan ;;\n\
             show) echo '{\"resource_changes\":[{\"address\":\"terraform_data.node[\\\"node-201\\\"]\",\"change\":{\"actions\":[\"create\"]}}]}' ;;\n\
             apply) if [ -e fail-apply ]; then echo 'Error: quota exceeded' >&2; exit 1; fi ;;\n\
             esac\n",
        )
        .expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    #[test]
    fn a_failed_apply_and_a_dropped_plan_put_the_variables_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let terraform = Terraform::new(fake_terraform(dir.path()), dir.path());
        write_tfvars(dir.path(), &dedicated_file(1), false).expect("write");
        let vars = || fs::read_to_string(dir.path().join(TFVARS_FILE)).expect("read");
        let before = vars();

        let pending = terraform.plan_groups(2).expect("plan");
        assert!(
            vars().contains("\"groups\": 2"),
            "the plan sees the new count"
        );
        assert_eq!(pending.outcome.with_action("create").count(), 1);
        drop(pending);
        assert_eq!(vars(), before, "dropped: back to one group");
        assert!(!dir.path().join(SAVED_PLAN).exists());

        fs::write(dir.path().join("fail-apply"), "").expect("write");
        let err = terraform
            .plan_groups(2)
            .expect("plan")
            .apply()
            .expect_err("apply fails");
        let text = format!("{err:#}");
        assert!(
            text.contains("terraform apply in") && text.contains("back at 1 groups"),
            "{text}"
        );
        assert!(
            text.contains("quota exceeded"),
            "terraform's own words: {text}"
        );
        assert_eq!(vars(), before);

        fs::remove_file(dir.path().join("fail-apply")).expect("rm");
        let outcome = terraform
            .plan_groups(2)
            .expect("plan")
            .apply()
            .expect("apply");
        assert!(outcome.applied && outcome.groups_after == 2);
        assert_eq!(terraform.var("groups").expect("groups"), 2);
        assert_eq!(
            fs::read_to_string(dir.path().join("invocations")).expect("log"),
            "plan\nshow\nplan\nshow\napply\nplan\nshow\napply\n"
        );
    }

    #[test]
    fn the_nodes_output_gives_addresses_and_machines_by_id() {
        // As modules/aws prints it (extra fields, null groups), trimmed to three nodes.
        let json = r#"{
          "node-0": {"id": 0, "role": "primary", "group": null, "address": "10.0.0.5",
                     "machine": "i-0a", "zone": "eu-west-1a", "spread_set": "primaries"},
          "node-101": {"id": 101, "role": "replica", "group": 0, "address": "10.0.1.7",
                       "machine": "i-0b", "zone": "eu-west-1b", "spread_set": "group-0"},
          "node-11": {"id": 11, "role": "dbnode", "group": null, "address": "10.0.2.9",
                      "machine": "i-0c", "zone": "eu-west-1c", "spread_set": "dbnodes"}}"#;
        let nodes = parse_nodes(json).expect("parse");
        assert_eq!(nodes.keys().copied().collect::<Vec<_>>(), [0, 11, 101]);
        assert_eq!(
            nodes[&101],
            TfNode {
                id: 101,
                address: "10.0.1.7".into(),
                machine: "i-0b".into()
            }
        );
        let err = parse_nodes(r#"{"node-201": {"id": 201, "address": null, "machine": "i-1"}}"#)
            .expect_err("no address yet");
        assert!(
            format!("{err:#}").contains("node-201: no address"),
            "{err:#}"
        );
        assert!(parse_nodes("[1, 2]").is_err());
    }

    fn change(address: &str, actions: &[&str]) -> ResourceChange {
        ResourceChange {
            address: address.into(),
            actions: actions.iter().map(|a| a.to_string()).collect(),
        }
    }

    #[test]
    fn destroys_of_what_the_next_configuration_uses_are_found() {
        let three = proto::testing::TestCluster::new(1, 3, 3, 1).cluster.config;
        let mut two = three.clone();
        two.groups.retain(|g| g.id < 2);
        two.replicas.retain(|r| r.group < 2);
        let m = |c: &ClusterConfig, id: u32| {
            c.replicas
                .iter()
                .find(|r| r.id == id)
                .map(|r| r.machine.clone())
                .expect("replica")
        };
        // Going from three groups to two: group 2's nodes, set and machines may go.
        let fine = [
            change("module.c.aws_instance.node[\"node-301\"]", &["delete"]),
            change("aws_placement_group.spread[\"group-2\"]", &["delete"]),
            change("aws_instance.node[\"node-101\"]", &["update"]),
            change("aws_instance.node[\"node-401\"]", &["create"]),
        ];
        assert_eq!(destroys_in_use(&fine, &three, &two), Vec::<String>::new());
        let bad = [
            change("aws_instance.node[\"node-101\"]", &["delete", "create"]),
            change("aws_placement_group.spread[\"group-1\"]", &["delete"]),
            change("aws_placement_group.spread[\"dbnodes\"]", &["delete"]),
            change("aws_security_group.cluster", &["delete"]),
            change(
                &format!("aws_ec2_host.machine[\"{}\"]", m(&two, 101)),
                &["delete"],
            ),
            change("aws_instance.node[0]", &["delete"]),
        ];
        let refused = destroys_in_use(&bad, &three, &two);
        assert_eq!(refused.len(), bad.len(), "{refused:#?}");
        assert!(refused[0].contains("node 101 runs in it"), "{}", refused[0]);
        assert!(refused[0].contains("(delete+create)"), "{}", refused[0]);
        assert!(
            refused[1].contains("group 1 serves in it"),
            "{}",
            refused[1]
        );
        assert!(refused[3].contains("cannot be tied"), "{}", refused[3]);
        // Growing, nothing may be destroyed that runs now.
        let up = [change("aws_instance.node[\"node-301\"]", &["delete"])];
        assert_eq!(destroys_in_use(&up, &two, &three).len(), 1);
        assert_eq!(instance_key("a.b[\"x\"].c[\"node-7\"]"), Some("node-7"));
        assert_eq!(instance_key("a.b[3]"), None);
    }
}
