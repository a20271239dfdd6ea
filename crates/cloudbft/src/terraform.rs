//! Scaling a Terraform deployment of the cluster (deploy/terraform): the cloud side of the
//! autoscaler's decision. [`scale_groups`] changes the group count in the variables
//! `cloudbft place --tfvars` wrote (re-planning the Dedicated Hosts layout incrementally when
//! the deployment has one), runs `terraform plan`, and `terraform apply` when asked, and says
//! what changed. It is self-contained so that the autoscaler's machine-provider trait can wrap
//! it: the same decision ("run G groups") scales the demo and a cloud.
//!
//! The Terraform directory must be initialised (`terraform init`) and hold the cloud's own
//! variables (terraform.tfvars); this module only ever touches [`TFVARS_FILE`] and the plan file
//! next to it.

use crate::place_cmd::{PlanFile, PLAN_FILE};
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The variables file `cloudbft place --tfvars` writes: auto-loaded by Terraform, and separate
/// from the operator's terraform.tfvars.
pub const TFVARS_FILE: &str = "cloudbft.auto.tfvars.json";
/// The saved plan [`scale_groups`] applies (so that apply does exactly what plan showed).
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

/// Sets the deployment in `workdir` to `groups` groups and runs `terraform plan` (and
/// `terraform apply` of that very plan when `apply`), with the `terraform` on PATH.
///
/// Without `apply` it is a preview: the outcome lists what would change, and the variables are
/// left as they were. With `apply`, the variables keep the new count once `terraform plan`
/// succeeded, so a failed apply is finished by running `terraform apply` again.
///
/// The group count lives in [`TFVARS_FILE`]; when that file also holds a Dedicated Hosts
/// placement (`cloudbft place --tfvars --dedicated`), the plan in [`PLAN_FILE`] is redone
/// incrementally first: new groups go to free slots, nothing placed moves. If `terraform plan`
/// fails, the variables are restored and nothing changed.
pub fn scale_groups(workdir: &Path, groups: usize, apply: bool) -> Result<ScaleOutcome> {
    scale_groups_with(Path::new("terraform"), workdir, groups, apply)
}

/// [`scale_groups`] with an explicit terraform program (a wrapper script, another version).
pub fn scale_groups_with(
    terraform: &Path,
    workdir: &Path,
    groups: usize,
    apply: bool,
) -> Result<ScaleOutcome> {
    if groups == 0 {
        bail!("--scale-groups: a cluster needs at least one group");
    }
    let tfvars_path = workdir.join(TFVARS_FILE);
    let original = fs::read_to_string(&tfvars_path).with_context(|| {
        format!(
            "reading {}: run `cloudbft place --tfvars {}` first",
            tfvars_path.display(),
            workdir.display()
        )
    })?;
    let mut vars: Map<String, Value> = serde_json::from_str(&original)
        .with_context(|| format!("parsing {}", tfvars_path.display()))?;
    let groups_before = vars
        .get("groups")
        .and_then(Value::as_u64)
        .with_context(|| format!("{}: no \"groups\" number", tfvars_path.display()))?
        as usize;
    let plan_path = workdir.join(PLAN_FILE);
    let mut moved_nodes = None;
    let mut new_plan = None;
    if vars.contains_key("placement") {
        let previous = PlanFile::read(&plan_path)?;
        let demand = placement::Demand {
            groups,
            ..previous.demand
        };
        let file =
            PlanFile::make(demand, previous.machines, Some(&previous.plan)).with_context(|| {
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
    let restore = || {
        if let Err(e) = fs::write(&tfvars_path, &original) {
            tracing::error!(path = %tfvars_path.display(), error = %e, "cannot restore the Terraform variables");
        }
    };
    let planned = run(
        terraform,
        workdir,
        &[
            "plan",
            "-input=false",
            "-no-color",
            "-lock-timeout=60s",
            &format!("-out={SAVED_PLAN}"),
        ],
    )
    .and_then(|_| run(terraform, workdir, &["show", "-json", SAVED_PLAN]))
    .and_then(|json| parse_changes(&json));
    let changes = match planned {
        Ok(changes) => changes,
        Err(e) => {
            restore();
            let _ = fs::remove_file(workdir.join(SAVED_PLAN));
            return Err(e.context(format!(
                "terraform plan in {} failed; {} restored",
                workdir.display(),
                TFVARS_FILE
            )));
        }
    };
    if !apply {
        // A preview changes nothing: the variables go back to what they were.
        restore();
        let _ = fs::remove_file(workdir.join(SAVED_PLAN));
        return Ok(ScaleOutcome {
            groups_before,
            groups_after: groups,
            moved_nodes,
            changes,
            applied: false,
        });
    }
    if let Some(file) = &new_plan {
        file.write(&plan_path)?;
    }
    let applied = run(
        terraform,
        workdir,
        &[
            "apply",
            "-input=false",
            "-no-color",
            "-lock-timeout=60s",
            SAVED_PLAN,
        ],
    );
    let _ = fs::remove_file(workdir.join(SAVED_PLAN));
    applied.with_context(|| {
        format!(
            "terraform apply in {} failed part-way: {} already says {groups} groups; \
             run `terraform apply` there to finish",
            workdir.display(),
            TFVARS_FILE
        )
    })?;
    Ok(ScaleOutcome {
        groups_before,
        groups_after: groups,
        moved_nodes,
        changes,
        applied: true,
    })
}

/// Runs terraform in `dir`; its stdout on success, its stderr in the error otherwise.
fn run(terraform: &Path, dir: &Path, args: &[&str]) -> Result<String> {
    let output = Command::new(terraform)
        .args(args)
        .current_dir(dir)
        .env("TF_IN_AUTOMATION", "1")
        .output()
        .with_context(|| {
            format!(
                "cannot run {} (is the terraform CLI installed?)",
                terraform.display()
            )
        })?;
    if !output.status.success() {
        bail!(
            "`{} {}` failed ({}): {}",
            terraform.display(),
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    String::from_utf8(output.stdout).context("terraform printed non-UTF-8")
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
        let err = scale_groups_with(&missing, dir.path(), 3, false).expect_err("no terraform");
        let text = format!("{err:#}");
        assert!(text.contains("is the terraform CLI installed?"), "{text}");
        assert!(text.contains("restored"), "{text}");
        assert_eq!(
            fs::read_to_string(dir.path().join(TFVARS_FILE)).expect("read"),
            before
        );
        assert_eq!(
            PlanFile::read(&dir.path().join(PLAN_FILE)).expect("plan"),
            file
        );
    }
}
