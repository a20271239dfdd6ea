//! Machines from a Terraform deployment (deploy/terraform) for the operator's commands and the
//! autoscaler (`--provider terraform`; docs/operations.md, "Autoscaling on a cloud with
//! Terraform"): the same decision that starts local processes in the demo changes the group
//! count of the deployment here.
//!
//! Adding groups: `terraform plan` for the new count, refused if it destroys anything the
//! cluster still uses; `terraform apply` of that plan; the new machines' addresses from the
//! `nodes` output. Each new replica keeps the identity `cloudbft keygen --max-groups` made for
//! it (node id, key, USIG id, port: a spare), but its USIG enrollment comes from the machine it
//! now runs on: the machine hook runs `cloudbft usigd enroll --epochs` there and the records it
//! prints replace the spare's (which described no machine of the cloud). The hook then installs
//! the next configuration's shape and the node's key on the machine, whose replica waits for
//! the operator's CONFIGURE (`--await-epoch`), and the reconfiguration runs as with any
//! provider.
//!
//! Removing groups: `terraform plan` for the smaller count first (refused as above: then
//! nothing changed), the reconfiguration, and only then `terraform apply` of the saved plan.
//!
//! Every failure here is marked [`NeedsOperator`]: the autoscaler stops on it.

use crate::provider::{wait_listening, NeedsOperator, Provider};
use crate::terraform::{destroys_in_use, PendingScale, Terraform, TFVARS_FILE};
use crate::usig_cmd::MachineEnrollment;
use anyhow::{bail, Context, Result};
use proto::config::{ClusterConfig, ReplicaConfig};
use proto::reconfig::check_successor;
use std::ffi::OsStr;
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a replica installed by the machine hook is started with: the unit
/// deploy/systemd/cloudbft-replica.service reads it from /etc/cloudbft/replica.env.
pub const REPLICA_ENV: &str = "REPLICA_ARGS=--await-epoch\n";

/// The provider of a Terraform deployment.
pub struct TerraformProvider {
    terraform: Terraform,
    /// Enrolls a machine's TPM and installs a node on it (see [`TerraformProvider::new`]).
    hook: PathBuf,
    /// The cluster's directory: `keys/node-<id>.key` of the new replicas.
    dir: PathBuf,
    /// The shrink planned before a reconfiguration that removes groups, applied after it.
    pending: Option<PendingScale>,
}

impl TerraformProvider {
    /// The deployment `terraform` (its directory holds the variables `cloudbft place --tfvars`
    /// wrote) for the cluster whose keys are in `dir/keys`. `hook` is run as
    ///
    /// - `HOOK enroll ID ADDRESS MACHINE`: prints what `cloudbft usigd enroll --epochs` prints
    ///   on that machine (its usigd stopped): the `[[usig_enrollment]]` and `[[usig_epoch]]`
    ///   records of the node's USIG identity;
    /// - `HOOK install ID ADDRESS MACHINE BUNDLE`: copies the files in the directory BUNDLE
    ///   (`cluster.toml`, `keys/node-ID.key`, `replica.env`) to /etc/cloudbft/ on the machine,
    ///   cluster.toml last, which starts the node (deploy/systemd/cloudbft-config.path).
    ///
    /// Both exit 0 on success; deploy/terraform/machine-hook-ssh.sh does it over ssh.
    pub fn new(terraform: Terraform, hook: PathBuf, dir: PathBuf) -> TerraformProvider {
        TerraformProvider {
            terraform,
            hook,
            dir,
            pending: None,
        }
    }

    /// Plans `next`'s group count and refuses a plan that destroys what `next` still uses.
    fn plan(&self, current: &ClusterConfig, next: &ClusterConfig) -> Result<PendingScale> {
        let ids: Vec<u32> = next.groups.iter().map(|g| g.id).collect();
        if ids.iter().copied().ne(0..ids.len() as u32) {
            bail!(
                "the next configuration has groups {ids:?}, but a Terraform deployment runs \
                 groups 0 to G-1 (modules/nodes: range(var.groups)): change the group count \
                 with `cloudbft scale --groups N`, which removes the highest group, rather than \
                 `group add --group`/`group remove` of another one"
            );
        }
        let f = self.terraform.var("f")?;
        if f != next.f {
            bail!(
                "{}: f = {f}, but the cluster tolerates f = {}: run `cloudbft place --f {} \
                 --tfvars {}` (this deployment is not the cluster's)",
                self.terraform.dir().join(TFVARS_FILE).display(),
                next.f,
                next.f,
                self.terraform.dir().display()
            );
        }
        let pending = self.terraform.plan_groups(ids.len())?;
        let refused = destroys_in_use(&pending.outcome.changes, current, next);
        if !refused.is_empty() {
            bail!(
                "terraform plan in {} destroys machines the cluster still uses, so nothing was \
                 applied and the cluster did not change:\n  {}\n(`terraform plan` there shows \
                 why: a changed variable or module that replaces instances?)",
                self.terraform.dir().display(),
                refused.join("\n  ")
            );
        }
        print!("  terraform plan: {}", pending.outcome);
        Ok(pending)
    }

    /// Gives the new replicas their machines' addresses and enrollments, and installs them.
    fn join(
        &self,
        current: &ClusterConfig,
        next: &mut ClusterConfig,
        new: &[u32],
        shape: &Path,
    ) -> Result<()> {
        let nodes = self.terraform.nodes()?;
        for r in next.replicas.iter_mut().filter(|r| new.contains(&r.id)) {
            let node = nodes.get(&r.id).with_context(|| {
                format!(
                    "terraform's `nodes` output has no node {} (it lists {:?}): is {} the \
                     cluster's deployment?",
                    r.id,
                    nodes.keys().collect::<Vec<_>>(),
                    self.terraform.dir().display()
                )
            })?;
            let port = r
                .addr
                .rsplit_once(':')
                .map(|(_, port)| port.to_string())
                .with_context(|| format!("replica {}.addr {:?} has no port", r.id, r.addr))?;
            r.addr = if node.address.contains(':') {
                format!("[{}]:{port}", node.address)
            } else {
                format!("{}:{port}", node.address)
            };
            r.machine = node.machine.clone();
        }
        for r in next.replicas.iter_mut().filter(|r| new.contains(&r.id)) {
            let enrolled = self.enroll(r)?;
            let record = enrolled
                .usig_enrollment
                .iter()
                .find(|e| e.id == r.usig)
                .cloned()
                .with_context(|| {
                    format!(
                        "machine {} (replica {}) enrolled no usig#{}: its \
                         /etc/cloudbft/usigd.toml must serve the identity 1000 + node id",
                        r.machine, r.id, r.usig
                    )
                })?;
            let epoch = enrolled
                .usig_epoch
                .iter()
                .find(|e| e.id == r.usig)
                .map(|e| e.epoch);
            let slot = next.enrollments.iter_mut().find(|e| e.id == r.usig);
            // Its USIG sequence continues where it stopped only on the same TPM state in the
            // same epoch; a new machine starts a new chain.
            let same = slot.as_deref() == Some(&record) && r.usig_epoch == epoch;
            if !same {
                r.usig_start = None;
            }
            r.usig_epoch = epoch;
            match slot {
                Some(slot) => *slot = record,
                None => next.enrollments.push(record),
            }
        }
        check_successor(current, next).map_err(|e| {
            anyhow::anyhow!("the configuration with the new machines is refused: {e}")
        })?;
        std::fs::write(shape, toml::to_string(next)?)
            .with_context(|| format!("writing {}", shape.display()))?;
        for r in next.replicas.iter().filter(|r| new.contains(&r.id)) {
            self.install(r, shape)?;
        }
        for r in next.replicas.iter().filter(|r| new.contains(&r.id)) {
            let addr: SocketAddr = r
                .addr
                .parse()
                .with_context(|| format!("replica {}.addr", r.id))?;
            wait_listening(&format!("replica {} on machine {}", r.id, r.machine), addr)?;
        }
        Ok(())
    }

    /// The enrollment the machine of `r` prints.
    fn enroll(&self, r: &ReplicaConfig) -> Result<MachineEnrollment> {
        let id = r.id.to_string();
        let host = host_of(&r.addr);
        let text = self.run_hook(&[
            "enroll".as_ref(),
            id.as_ref(),
            host.as_ref(),
            r.machine.as_ref(),
        ])?;
        toml::from_str(&text).with_context(|| {
            format!(
                "`{} enroll {id} ...` printed no enrollment records (expected what \
                 `cloudbft usigd enroll --epochs` prints): {text}",
                self.hook.display()
            )
        })
    }

    /// Installs `r`'s shape, key and start arguments on its machine.
    fn install(&self, r: &ReplicaConfig, shape: &Path) -> Result<()> {
        let bundle = tempfile::Builder::new()
            .prefix(&format!("install-node-{}-", r.id))
            .tempdir_in(&self.dir)
            .with_context(|| format!("making a directory in {}", self.dir.display()))?;
        std::fs::set_permissions(bundle.path(), std::fs::Permissions::from_mode(0o700))?;
        std::fs::copy(shape, bundle.path().join("cluster.toml"))?;
        std::fs::write(bundle.path().join("replica.env"), REPLICA_ENV)?;
        let name = format!("node-{}", r.id);
        let key = crate::keygen::key_path(&self.dir, &name);
        let seed = std::fs::read(&key).with_context(|| {
            format!(
                "reading {}: the spare's key (made by `cloudbft keygen --max-groups`)",
                key.display()
            )
        })?;
        std::fs::create_dir(bundle.path().join("keys"))?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(crate::keygen::key_path(bundle.path(), &name))
            .and_then(|mut f| std::io::Write::write_all(&mut f, &seed))?;
        let id = r.id.to_string();
        let host = host_of(&r.addr);
        self.run_hook(&[
            "install".as_ref(),
            id.as_ref(),
            host.as_ref(),
            r.machine.as_ref(),
            bundle.path().as_os_str(),
        ])?;
        Ok(())
    }

    /// Runs the hook; its stdout on success.
    fn run_hook(&self, args: &[&OsStr]) -> Result<String> {
        let shown = || {
            args.iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let output = Command::new(&self.hook)
            .args(args)
            .output()
            .with_context(|| format!("cannot run the machine hook {}", self.hook.display()))?;
        if !output.status.success() {
            bail!(
                "`{} {}` failed ({}): {}",
                self.hook.display(),
                shown(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        String::from_utf8(output.stdout).context("the machine hook printed non-UTF-8")
    }
}

/// The host part of `host:port` (brackets of an IPv6 address removed).
fn host_of(addr: &str) -> String {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_string()
}

impl Provider for TerraformProvider {
    fn start(
        &mut self,
        current: &ClusterConfig,
        next: &mut ClusterConfig,
        new: &[u32],
        shape: &Path,
    ) -> Result<()> {
        let applied = match self.pending {
            Some(_) => Err(anyhow::anyhow!(
                "the terraform provider adds or removes groups, not both in one change: \
                 change the group count with `cloudbft scale --groups N`"
            )),
            None => self.plan(current, next).and_then(PendingScale::apply),
        }
        .context(NeedsOperator)?;
        println!(
            "  terraform apply: groups {} -> {} applied",
            applied.groups_before, applied.groups_after
        );
        self.join(current, next, new, shape)
            .map_err(|e| {
                e.context(format!(
                    "the new machines exist (terraform applied {} groups) but the cluster does \
                     not use them yet and did not change: fix this and run the same change \
                     again (the plan will be empty), or `cloudbft place --scale-groups {} \
                     --terraform-dir {} --apply` to remove them",
                    applied.groups_after,
                    current.groups.len(),
                    self.terraform.dir().display()
                ))
            })
            .context(NeedsOperator)
    }

    fn prepare_release(&mut self, current: &ClusterConfig, next: &ClusterConfig) -> Result<()> {
        self.pending = Some(self.plan(current, next).context(NeedsOperator)?);
        Ok(())
    }

    fn release(&mut self, config: &ClusterConfig) -> Result<()> {
        let Some(pending) = self.pending.take() else {
            return Ok(());
        };
        let applied = pending.apply().with_context(|| {
            format!(
                "the cluster runs configuration epoch {} with {} group(s) without the removed \
                 replicas, but their machines still run: remove them with `cloudbft place \
                 --scale-groups {} --terraform-dir {} --apply` once terraform works",
                config.config_epoch,
                config.groups.len(),
                config.groups.len(),
                self.terraform.dir().display()
            )
        });
        let applied = applied.context(NeedsOperator)?;
        println!(
            "  terraform apply: groups {} -> {} applied, the removed replicas' machines released",
            applied.groups_before, applied.groups_after
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usig_cmd::EpochRecord;
    use proto::testing::TestCluster;

    #[test]
    fn the_hook_prints_what_usigd_enroll_prints() {
        let config = TestCluster::new(1, 1, 1, 1).cluster.config;
        let record = config.enrollments[0].clone();
        let printed = toml::to_string(&MachineEnrollment {
            usig_enrollment: vec![record.clone()],
            usig_epoch: vec![EpochRecord {
                id: record.id,
                epoch: 3,
            }],
        })
        .expect("toml");
        assert!(printed.starts_with("[[usig_enrollment]]"), "{printed}");
        let parsed: MachineEnrollment = toml::from_str(&printed).expect("parse");
        assert_eq!(parsed.usig_enrollment, std::slice::from_ref(&record));
        assert_eq!(parsed.usig_epoch[0].epoch, 3);
        // `cloudbft usig enrollment` then `[[usig_epoch]]` by hand, in either order.
        let by_hand = format!(
            "[[usig_epoch]]\nid = {}\nepoch = 4\n\n[[usig_enrollment]]\n{}",
            record.id,
            toml::to_string(&record).expect("toml")
        );
        let parsed: MachineEnrollment = toml::from_str(&by_hand).expect("parse");
        assert_eq!(parsed.usig_enrollment, [record]);
        assert!(toml::from_str::<MachineEnrollment>("usig_epochs = 3").is_err());
    }

    #[test]
    fn addresses_lose_their_port_and_brackets() {
        assert_eq!(host_of("10.0.1.7:7103"), "10.0.1.7");
        assert_eq!(host_of("[fd00::7]:7103"), "fd00::7");
    }

    /// Shapes a Terraform deployment cannot take are refused before terraform runs.
    #[test]
    fn group_ids_and_f_must_match_the_deployment() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join(TFVARS_FILE),
            r#"{"f": 2, "groups": 2, "primaries": 2}"#,
        )
        .expect("write");
        let provider = TerraformProvider::new(
            Terraform::new(dir.path().join("no-terraform"), dir.path()),
            dir.path().join("no-hook"),
            dir.path().to_path_buf(),
        );
        let current = TestCluster::new(1, 3, 3, 1).cluster.config;
        let mut gap = current.clone();
        gap.groups.retain(|g| g.id != 1);
        gap.replicas.retain(|r| r.group != 1);
        let err = provider.plan(&current, &gap).err().expect("refused");
        assert!(err.to_string().contains("groups [0, 2]"), "{err}");
        let err = provider.plan(&current, &current).err().expect("refused");
        assert!(
            err.to_string()
                .contains("f = 2, but the cluster tolerates f = 1"),
            "{err}"
        );
    }
}
