//! Scaling through Terraform across processes (docs/operations.md, "Autoscaling on a cloud
//! with Terraform"): `cloudbft scale` and `cloudbft autoscale` with `--provider terraform`
//! against a real `cloudbft demo` cluster. Only the cloud is stood in for: the terraform
//! program is a script that records its invocations and prints what the real CLI prints (or,
//! in the second test, the real terraform CLI on a module of `terraform_data` resources), and
//! the machine hook, instead of ssh to a new VM, asks the demo's usigd of the machine for the
//! enrollment and starts the replica process as the VM's systemd would. The cluster side
//! (reconfiguration, usigd, the new replicas, requests served by the new group) is real.

mod common;

use common::{Demo, Ports};
use dbvote::bank::BankOp;
use proto::config::Cluster;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The terraform stand-in: one resource per replica, the deployed group count in
/// `fake-state`; `fail-<command>` makes that command fail, `destroy-in-use` adds a replacement
/// of node 101 to every plan. Each invocation is logged with the cluster's group count then.
const FAKE_TERRAFORM: &str = r#"#!/usr/bin/env bash
set -euo pipefail
cluster_groups=$(grep -c '^\[\[group\]\]' "$CLUSTER_CONFIG" || true)
echo "$1 (cluster: $cluster_groups groups)" >> invocations
if [ -e "fail-$1" ]; then echo "Error: the stand-in was told to fail $1" >&2; exit 1; fi
state=$(cat fake-state)
plan_file="${@: -1}"
case "$1" in
plan)
    wanted=$(sed -n 's/.*"groups": *\([0-9]*\).*/\1/p' cloudbft.auto.tfvars.json)
    echo "$state $wanted" > cloudbft-scale.tfplan ;;
show)
    read -r from to < "$plan_file"
    sep=
    printf '{"format_version":"1.2","resource_changes":['
    if [ -e destroy-in-use ]; then
        printf '{"address":"terraform_data.node[\\"node-101\\"]","change":{"actions":["delete","create"]}}'
        sep=,
    fi
    for ((g = 0; g < (from > to ? from : to); g++)); do
        for k in 1 2 3; do
            if ((g >= from)); then a=create; elif ((g >= to)); then a=delete; else a=no-op; fi
            printf '%s{"address":"terraform_data.node[\\"node-%d\\"]","change":{"actions":["%s"]}}' \
                "$sep" $((100 + 100 * g + k)) "$a"
            sep=,
        done
    done
    printf ']}\n' ;;
apply)
    read -r from to < "$plan_file"
    echo "$to" > fake-state ;;
output)
    sep=
    printf '{'
    for ((g = 0; g < state; g++)); do
        for k in 1 2 3; do
            id=$((100 + 100 * g + k))
            printf '%s"node-%d":{"id":%d,"role":"replica","group":%d,"address":"127.0.0.1","machine":"m%d"}' \
                "$sep" "$id" "$id" "$g" "$k"
            sep=,
        done
    done
    printf '}\n' ;;
*) echo "the stand-in does not know $1" >&2; exit 1 ;;
esac
"#;

/// The machine hook's stand-in: the "machine" is the demo's simulated machine of that name,
/// whose usigd serves the node's identity; installing starts the replica as systemd would
/// (after the one of an earlier install exited: a destroyed machine).
const HOOK: &str = r#"#!/usr/bin/env bash
set -euo pipefail
echo "$*" >> "$HOOK_DIR/hook.log"
action=$1 id=$2 machine=$4
sock="$CLUSTER_DIR/usigd/$machine/node-$id.sock"
usig=$((1000 + id))
case "$action" in
enroll)
    "$CLOUDBFT_BIN" usig enrollment --socket "$sock" --identity "$usig"
    printf '[[usig_epoch]]\nid = %d\n' "$usig"
    "$CLOUDBFT_BIN" usig epoch --socket "$sock" --identity "$usig" | sed 's/^usig_epoch/epoch/' ;;
install)
    m="$HOOK_DIR/machines/node-$id"
    if [ -f "$m/pid" ]; then
        for _ in $(seq 600); do kill -0 "$(cat "$m/pid")" 2>/dev/null || break; sleep 0.2; done
    fi
    rm -rf "$m"; mkdir -p "$m"; cp -r "$5"/. "$m"/
    . "$m/replica.env"
    setsid "$CLOUDBFT_BIN" replica --config "$m/cluster.toml" --keys "$m/keys" --id "$id" \
        --usig-socket "$sock" --data-dir "$m/data" $REPLICA_ARGS </dev/null >"$m/replica.log" 2>&1 &
    echo $! > "$m/pid" ;;
esac
"#;

fn script(path: &Path, text: &str) -> PathBuf {
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    path.to_path_buf()
}

/// A test's cloud: the Terraform directory, the terraform program, the machine hook, and the
/// replicas the hook started (stopped when it is dropped).
struct Cloud {
    tf: PathBuf,
    terraform: PathBuf,
    hook_dir: PathBuf,
    hook: PathBuf,
    config: PathBuf,
    /// More environment of every command (terraform's settings).
    env: Vec<(String, String)>,
}

impl Cloud {
    fn new(root: &Path, demo: &Demo, terraform: PathBuf) -> Cloud {
        let tf = root.join("tf");
        let hook_dir = root.join("hook");
        fs::create_dir_all(&tf).unwrap();
        fs::create_dir_all(&hook_dir).unwrap();
        let hook = script(&hook_dir.join("hook"), HOOK);
        let cloud = Cloud {
            tf,
            terraform,
            hook_dir,
            hook,
            config: demo.config(),
            env: Vec::new(),
        };
        let out = cloud.cloudbft(
            &["place", "--f", "1", "--groups", "1", "--candidates", "2"],
            &["--tfvars"],
        );
        assert!(out.status.success(), "cloudbft place: {}", text(&out));
        cloud
    }

    /// `cloudbft` with the environment the stand-ins read and the cloud's own.
    fn command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cloudbft"));
        command
            .env("RUST_LOG", "warn")
            .env("CLUSTER_CONFIG", &self.config)
            .env("CLUSTER_DIR", self.config.parent().unwrap())
            .env("HOOK_DIR", &self.hook_dir)
            .env("CLOUDBFT_BIN", env!("CARGO_BIN_EXE_cloudbft"))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        command
    }

    /// `cloudbft <args> [<dir_flag> <tf dir>]`.
    fn cloudbft(&self, args: &[&str], dir_flag: &[&str]) -> Output {
        let mut command = self.command();
        command.args(args);
        for flag in dir_flag {
            command.arg(flag).arg(&self.tf);
        }
        command.output().expect("running cloudbft")
    }

    /// The operator's and autoscaler's flags for this cloud.
    fn provider_args(&self) -> Vec<String> {
        [
            "--config",
            self.config.to_str().unwrap(),
            "--provider",
            "terraform",
            "--terraform-dir",
            self.tf.to_str().unwrap(),
            "--terraform-cmd",
            self.terraform.to_str().unwrap(),
            "--machine-hook",
            self.hook.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec()
    }

    /// `cloudbft scale --groups N --provider terraform ...`.
    fn scale(&self, groups: usize) -> Output {
        let n = groups.to_string();
        let mut args = vec!["scale", "--groups", &n];
        let provider = self.provider_args();
        args.extend(provider.iter().map(String::as_str));
        let out = self.cloudbft(&args, &[]);
        eprintln!("cloudbft scale --groups {groups}:\n{}", text(&out));
        out
    }

    fn tfvars_groups(&self) -> u64 {
        let vars: serde_json::Value = serde_json::from_str(
            &fs::read_to_string(self.tf.join("cloudbft.auto.tfvars.json")).unwrap(),
        )
        .unwrap();
        vars["groups"].as_u64().unwrap()
    }

    /// The lines of a log in the Terraform or hook directory since the last call (the file is
    /// emptied).
    fn take(&self, path: &Path) -> Vec<String> {
        let lines = fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect();
        let _ = fs::remove_file(path);
        lines
    }

    fn invocations(&self) -> Vec<String> {
        self.take(&self.tf.join("invocations"))
    }

    fn hook_calls(&self) -> Vec<String> {
        self.take(&self.hook_dir.join("hook.log"))
    }
}

impl Drop for Cloud {
    fn drop(&mut self) {
        // The replicas the hook started (removed ones have stopped by themselves).
        let Ok(machines) = fs::read_dir(self.hook_dir.join("machines")) else {
            return;
        };
        for m in machines.flatten() {
            if let Some(pid) = fs::read_to_string(m.path().join("pid"))
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok())
            {
                // SAFETY: kill(2) on a replica this test's hook started.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn cluster(config: &Path) -> Cluster {
    Cluster::load(config).unwrap()
}

/// Asks for a balance in each branch (one per partition) and returns the group that served
/// each.
fn serving_groups(config: &Path) -> Vec<u32> {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let client = common::load_driver_client(config).await;
        let mut groups = Vec::new();
        for branch in 0..cluster(config).config.partitions {
            let op = BankOp::Balance { branch, number: 7 };
            let accepted = tokio::time::timeout(
                Duration::from_secs(60),
                client.invoke(op.partitions(), op.encode()),
            )
            .await
            .unwrap_or_else(|_| panic!("{op:?}: no reply within 60 s"))
            .unwrap_or_else(|e| panic!("{op:?}: {e}"));
            groups.push(accepted.group.0);
        }
        client.shutdown().await;
        groups
    })
}

/// A one-group demo cluster with spare identities for a second group.
fn demo(data: &Path, ports: &Ports) -> Demo {
    Demo::start(
        data,
        ports,
        &[
            "--application",
            "bank",
            "--groups",
            "1",
            "--max-groups",
            "2",
            "--partitions",
            "2",
        ],
    )
}

/// Gives the spare replicas enrollment records that are well-formed but belong to no machine
/// (fresh keys): scaling must take the records the machines print instead.
fn garble_spare_enrollments(data: &Path) -> Vec<String> {
    let path = data.join("spares.toml");
    let mut spares: toml::Value = toml::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    let mut garbled = Vec::new();
    for record in spares["usig_enrollment"].as_array_mut().unwrap() {
        let key = proto::SigningKey::generate().unwrap().public_key().to_hex();
        record["public_key"] = toml::Value::String(key.clone());
        garbled.push(key);
    }
    fs::write(&path, toml::to_string(&spares).unwrap()).unwrap();
    garbled
}

/// What usigd of `machine` reports as the enrollment of `usig`.
fn usigd_enrollment(data: &Path, machine: &str, node: u32) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cloudbft"))
        .args([
            "usig",
            "enrollment",
            "--identity",
            &(1000 + node).to_string(),
        ])
        .arg("--socket")
        .arg(data.join(format!("usigd/{machine}/node-{node}.sock")))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let record: toml::Value = toml::from_str(&String::from_utf8_lossy(&out.stdout)).unwrap();
    record["usig_enrollment"][0]["public_key"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Checks that group 1 joined on the machines Terraform reported, with the enrollments their
/// usigd printed, and serves its partition.
fn check_group_one_joined(data: &Path, config: &Path, garbled: &[String]) {
    let c = cluster(config).config;
    assert_eq!(c.groups.len(), 2);
    for (k, id) in [201u32, 202, 203].into_iter().enumerate() {
        let r = c.replicas.iter().find(|r| r.id == id).unwrap();
        let machine = format!("m{}", k + 1);
        assert_eq!(r.machine, machine);
        assert!(r.addr.starts_with("127.0.0.1:"), "{}", r.addr);
        assert!(r.usig_epoch.is_some(), "the machine's epoch is pinned");
        let record = c.enrollments.iter().find(|e| e.id == r.usig).unwrap();
        let key = record.public_key.clone().unwrap();
        assert_eq!(key, usigd_enrollment(data, &machine, id));
        assert!(!garbled.contains(&key), "the spare's record was replaced");
    }
    assert_eq!(serving_groups(config), [0, 1], "group 1 serves partition 1");
}

#[test]
fn scaling_through_a_stand_in_for_terraform() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cluster");
    let ports = Ports::reserve();
    let demo = demo(&data, &ports);
    let config = demo.config();
    let terraform = script(&dir.path().join("fake-terraform"), FAKE_TERRAFORM);
    let cloud = Cloud::new(dir.path(), &demo, terraform);
    fs::write(cloud.tf.join("fake-state"), "1\n").unwrap();
    let garbled = garble_spare_enrollments(&data);
    let epoch = || cluster(&config).config.config_epoch;
    assert_eq!(epoch(), 1);

    // Terraform fails to apply: the command fails, saying so, and nothing changed.
    fs::write(cloud.tf.join("fail-apply"), "").unwrap();
    let out = cloud.scale(2);
    let said = text(&out);
    assert!(!out.status.success());
    assert!(
        said.contains("told to fail apply") && said.contains("back at 1 groups"),
        "{said}"
    );
    assert_eq!((epoch(), cloud.tfvars_groups()), (1, 1));
    assert_eq!(
        cloud.invocations(),
        [
            "plan (cluster: 1 groups)",
            "show (cluster: 1 groups)",
            "apply (cluster: 1 groups)"
        ]
    );
    assert!(cloud.hook_calls().is_empty(), "no machine was touched");
    fs::remove_file(cloud.tf.join("fail-apply")).unwrap();

    // The plan replaces a machine the cluster uses: refused before anything is applied.
    fs::write(cloud.tf.join("destroy-in-use"), "").unwrap();
    let out = cloud.scale(2);
    let said = text(&out);
    assert!(!out.status.success());
    assert!(
        said.contains("destroys machines the cluster still uses")
            && said
                .contains("terraform_data.node[\"node-101\"] (delete+create): node 101 runs in it"),
        "{said}"
    );
    assert_eq!((epoch(), cloud.tfvars_groups()), (1, 1));
    assert_eq!(
        cloud.invocations(),
        ["plan (cluster: 1 groups)", "show (cluster: 1 groups)"]
    );
    fs::remove_file(cloud.tf.join("destroy-in-use")).unwrap();

    // Scale up: terraform first, then the machines enroll and install, then the cluster.
    let out = cloud.scale(2);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("epoch 2 runs"), "{}", text(&out));
    assert_eq!(
        cloud.invocations(),
        [
            "plan (cluster: 1 groups)",
            "show (cluster: 1 groups)",
            "apply (cluster: 1 groups)",
            "output (cluster: 1 groups)"
        ]
    );
    let calls = cloud.hook_calls();
    let actions: Vec<&str> = calls.iter().map(|c| c.split(' ').next().unwrap()).collect();
    assert_eq!(
        actions,
        ["enroll", "enroll", "enroll", "install", "install", "install"],
        "{calls:?}"
    );
    assert!(calls[0].starts_with("enroll 201 127.0.0.1 m1"), "{calls:?}");
    assert_eq!(cloud.tfvars_groups(), 2);
    check_group_one_joined(&data, &config, &garbled);

    // Its machine restarts replica 201 (systemd's Restart=, same command line, --await-epoch
    // included): it runs the epoch it adopted instead of waiting for a CONFIGURE sent long ago.
    let machine = cloud.hook_dir.join("machines/node-201");
    let shape = machine.join("cluster.toml");
    let args = common::kill(&shape, "replica", 201);
    assert!(args.iter().any(|a| a == "--await-epoch"), "{args:?}");
    // Its address is free once the process is gone.
    let c = cluster(&config).config;
    let addr = c
        .replicas
        .iter()
        .find(|r| r.id == 201)
        .unwrap()
        .addr
        .clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpListener::bind(&addr).is_err() {
        assert!(Instant::now() < deadline, "replica 201 still holds {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = machine.join("restarted.log");
    let mut restarted = Command::new(&args[0])
        .args(&args[1..])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(fs::File::create(&log).unwrap())
        .stderr(fs::File::create(machine.join("restarted.err")).unwrap())
        .spawn()
        .unwrap();
    fs::write(machine.join("pid"), restarted.id().to_string()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let said = || {
        fs::read_to_string(&log).unwrap_or_default()
            + &fs::read_to_string(machine.join("restarted.err")).unwrap_or_default()
    };
    while !said().contains("replica running") {
        assert!(
            Instant::now() < deadline,
            "the restarted replica does not run: {}",
            said()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        said().contains("configuration epoch 2 was already adopted"),
        "{}",
        said()
    );
    assert!(
        !said().contains("waiting for the operator's CONFIGURE"),
        "{}",
        said()
    );
    assert_eq!(serving_groups(&config), [0, 1]);
    restarted.kill().unwrap();
    restarted.wait().unwrap();

    let autoscale = || {
        cloud
            .command()
            .arg("autoscale")
            .args(cloud.provider_args())
            .args([
                "--min-groups",
                "1",
                "--max-groups",
                "1",
                "--interval-secs",
                "1",
            ])
            .args(["--scale-down-window-secs", "0", "--cooldown-secs", "0"])
            // The last port of this test's block, where nothing listens: no latency readings,
            // so the scaler goes to --min-groups.
            .args(["--latency-from", &format!("127.0.0.1:{}", ports.base + 49)])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };

    // The autoscaler decides to remove a group; terraform cannot plan: it stops, with the
    // error, and the cluster keeps its two groups.
    fs::write(cloud.tf.join("fail-plan"), "").unwrap();
    let started = Instant::now();
    let out = autoscale().wait_with_output().unwrap();
    let said = text(&out);
    eprintln!("cloudbft autoscale (plan fails):\n{said}");
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("the autoscaler stopped with 2 group(s) serving"),
        "{said}"
    );
    assert!(said.contains("told to fail plan"), "{said}");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!((epoch(), cloud.tfvars_groups()), (2, 2));
    assert_eq!(cloud.invocations(), ["plan (cluster: 2 groups)"]);
    fs::remove_file(cloud.tf.join("fail-plan")).unwrap();

    // The same decision with terraform working: plan, the reconfiguration, then apply.
    let mut scaler = autoscale();
    let deadline = Instant::now() + Duration::from_secs(120);
    while fs::read_to_string(cloud.tf.join("fake-state"))
        .unwrap()
        .trim()
        != "1"
    {
        assert!(
            Instant::now() < deadline,
            "the autoscaler did not scale down"
        );
        assert!(
            scaler.try_wait().unwrap().is_none(),
            "the autoscaler exited"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(scaler.id() as i32, libc::SIGINT) };
    let out = scaler.wait_with_output().unwrap();
    eprintln!("cloudbft autoscale:\n{}", text(&out));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(cluster(&config).config.groups.len(), 1);
    assert_eq!((epoch(), cloud.tfvars_groups()), (3, 1));
    assert_eq!(
        cloud.invocations(),
        [
            "plan (cluster: 2 groups)",
            "show (cluster: 2 groups)",
            "apply (cluster: 1 groups)"
        ],
        "the machines go only after the reconfiguration removed their group"
    );
    assert_eq!(serving_groups(&config), [0, 0]);
    drop(cloud);
    demo.stop();
}

/// The real terraform CLI: `CLOUDBFT_TEST_TERRAFORM`, else `terraform` on PATH. Missing, the
/// test fails: it never passes without having run.
fn terraform_cli() -> PathBuf {
    let program = std::env::var_os("CLOUDBFT_TEST_TERRAFORM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("terraform"));
    match Command::new(&program).arg("version").output() {
        Ok(out) if out.status.success() => program,
        other => panic!(
            "this test runs the real terraform CLI and cannot run without it: {} gave {other:?}; \
             install terraform >= 1.7 on PATH (.ci/run requires it) or set \
             CLOUDBFT_TEST_TERRAFORM to its path",
            program.display()
        ),
    }
}

#[test]
fn scaling_through_the_real_terraform_cli() {
    let terraform = terraform_cli();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cluster");
    let ports = Ports::reserve();
    let demo = demo(&data, &ports);
    let config = demo.config();
    let mut cloud = Cloud::new(dir.path(), &demo, terraform.clone());
    // deploy/terraform/tests/scale: terraform_data resources, built into terraform (no
    // provider to download), and the cloud modules' `nodes` output.
    let module =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/terraform/tests/scale/main.tf");
    fs::copy(module, cloud.tf.join("main.tf")).unwrap();
    let rc = dir.path().join("terraformrc");
    fs::write(&rc, "").unwrap();
    cloud.env = vec![
        ("TF_CLI_CONFIG_FILE".into(), rc.display().to_string()),
        ("CHECKPOINT_DISABLE".into(), "1".into()),
    ];
    let tf = |args: &[&str]| {
        let out = Command::new(&terraform)
            .args(args)
            .current_dir(&cloud.tf)
            .envs(cloud.env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        assert!(out.status.success(), "terraform {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    tf(&["init", "-input=false", "-no-color"]);
    tf(&["apply", "-input=false", "-no-color", "-auto-approve"]);
    let state = || {
        tf(&["state", "list"])
            .lines()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(state(), ["terraform_data.group[\"group-0\"]"]);
    let garbled = garble_spare_enrollments(&data);

    // A changed variable that replaces the running group's machine: refused, nothing applied.
    fs::write(
        cloud.tf.join("generation.auto.tfvars.json"),
        r#"{"generation": 1}"#,
    )
    .unwrap();
    let out = cloud.scale(2);
    let said = text(&out);
    assert!(!out.status.success());
    assert!(
        said.contains("terraform_data.group[\"group-0\"] (delete+create): group 0 serves in it"),
        "{said}"
    );
    assert_eq!(state(), ["terraform_data.group[\"group-0\"]"]);
    assert_eq!(
        (cluster(&config).config.config_epoch, cloud.tfvars_groups()),
        (1, 1)
    );
    fs::remove_file(cloud.tf.join("generation.auto.tfvars.json")).unwrap();

    let out = cloud.scale(2);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        state(),
        [
            "terraform_data.group[\"group-0\"]",
            "terraform_data.group[\"group-1\"]"
        ]
    );
    check_group_one_joined(&data, &config, &garbled);

    let out = cloud.scale(1);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("machines released"), "{}", text(&out));
    assert_eq!(state(), ["terraform_data.group[\"group-0\"]"]);
    assert_eq!(cluster(&config).config.groups.len(), 1);
    assert_eq!(serving_groups(&config), [0, 0]);
    drop(cloud);
    demo.stop();
}
