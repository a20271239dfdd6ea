//! Parses every `.tf` file of deploy/terraform (with hcl-rs, no terraform CLI needed) and
//! checks that every BFT group's instances are tied to an anti-affinity construct of their own:
//! one instance per node of the `nodes` module, each in the spread placement group, server group
//! or spread policy of its node's set, where the sets are one per group (plus the candidates'
//! and the database nodes'), or pinned to a Dedicated Host of the plan. Also checks the layout
//! the Terraform ecosystem expects. `deploy/terraform/check.sh` runs terraform itself.

use hcl::{Block, Body};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/terraform")
}

/// All `.tf` files of a directory, parsed and merged into one body (as terraform reads them).
fn module(dir: &Path) -> Body {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "tf"))
        .collect();
    files.sort();
    let mut blocks = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).expect("read .tf");
        let body: Body =
            hcl::parse(&text).unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
        blocks.extend(body.into_blocks());
    }
    Body::builder().add_blocks(blocks).build()
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_dir() && !p.ends_with(".terraform"))
        .collect();
    dirs.sort();
    dirs
}

/// An attribute's expression as HCL text.
fn attr(body: &Body, key: &str) -> Option<String> {
    body.attributes()
        .find(|a| a.key() == key)
        .map(|a| a.expr().to_string())
}

fn block<'a>(body: &'a Body, ident: &str) -> Option<&'a Block> {
    body.blocks().find(|b| b.identifier() == ident)
}

/// `resource "type" "name" { ... }` blocks: (type, name) → body.
fn resources(body: &Body) -> BTreeMap<(String, String), &Body> {
    body.blocks()
        .filter(|b| b.identifier() == "resource")
        .map(|b| {
            let labels: Vec<&str> = b.labels().iter().map(|l| l.as_str()).collect();
            ((labels[0].to_string(), labels[1].to_string()), b.body())
        })
        .collect()
}

const INSTANCE_TYPES: [&str; 3] = [
    "aws_instance",
    "openstack_compute_instance_v2",
    "google_compute_instance",
];

/// The resource name `kind.NAME[each.value.spread_set]...` refers to, if `expr` does so.
fn per_set_reference(expr: &str, kind: &str) -> Option<String> {
    let rest = &expr[expr.find(&format!("{kind}."))? + kind.len() + 1..];
    let (name, rest) = rest.split_once('[')?;
    rest.starts_with("each.value.spread_set]")
        .then(|| name.to_string())
}

/// Every way an instance of this module escapes anti-affinity, described.
fn anti_affinity_violations(body: &Body) -> Vec<String> {
    let resources = resources(body);
    let construct = |kind: &str, name: &str| resources.get(&(kind.to_string(), name.to_string()));
    let per_set = |kind: &str, name: &str, out: &mut Vec<String>| -> Option<&Body> {
        let Some(body) = construct(kind, name) else {
            out.push(format!("{kind}.{name} is not defined"));
            return None;
        };
        if attr(body, "for_each").as_deref() != Some("module.nodes.spread_sets") {
            out.push(format!(
                "{kind}.{name} is not one per anti-affinity set (for_each = module.nodes.spread_sets)"
            ));
        }
        Some(body)
    };
    let mut out = Vec::new();
    for ((kind, name), body) in &resources {
        if !INSTANCE_TYPES.contains(&kind.as_str()) {
            continue;
        }
        let me = format!("{kind}.{name}");
        if attr(body, "for_each").as_deref() != Some("module.nodes.nodes") {
            out.push(format!(
                "{me} is not one instance per node (for_each = module.nodes.nodes)"
            ));
        }
        match kind.as_str() {
            "aws_instance" => {
                let spread = attr(body, "placement_group")
                    .and_then(|e| per_set_reference(&e, "aws_placement_group"));
                let host = attr(body, "host_id").filter(|e| e.contains("aws_ec2_host."));
                match (spread, host) {
                    (Some(pg), None) => {
                        if let Some(pg) = per_set("aws_placement_group", &pg, &mut out) {
                            if attr(pg, "strategy").as_deref() != Some("\"spread\"") {
                                out.push(format!(
                                    "{me}: its placement group is not a spread group"
                                ));
                            }
                        }
                    }
                    (None, Some(host)) => {
                        let hosts = resources
                            .iter()
                            .filter(|((k, n), _)| {
                                k == "aws_ec2_host" && host.contains(&format!("aws_ec2_host.{n}["))
                            })
                            .collect::<Vec<_>>();
                        let closed = hosts
                            .iter()
                            .all(|(_, b)| attr(b, "auto_placement").as_deref() == Some("\"off\""));
                        if hosts.is_empty() || !closed {
                            out.push(format!(
                                "{me}: its Dedicated Host is undefined or open to other instances (auto_placement = \"off\")"
                            ));
                        }
                        if attr(body, "tenancy").as_deref() != Some("\"host\"") {
                            out.push(format!("{me}: tenancy is not \"host\""));
                        }
                    }
                    _ => out.push(format!(
                        "{me} is in no per-set spread placement group and on no Dedicated Host"
                    )),
                }
            }
            "openstack_compute_instance_v2" => {
                let group = block(body, "scheduler_hints")
                    .and_then(|b| attr(b.body(), "group"))
                    .and_then(|e| per_set_reference(&e, "openstack_compute_servergroup_v2"));
                match group {
                    Some(sg) => {
                        if let Some(sg) = per_set("openstack_compute_servergroup_v2", &sg, &mut out)
                        {
                            let policies = attr(sg, "policies").unwrap_or_default();
                            if policies.replace([' ', '\n'], "") != "[\"anti-affinity\"]" {
                                out.push(format!(
                                    "{me}: its server group's policy is not anti-affinity"
                                ));
                            }
                        }
                    }
                    None => out.push(format!("{me} has no per-set server group hint")),
                }
            }
            "google_compute_instance" => {
                let policy = attr(body, "resource_policies")
                    .and_then(|e| per_set_reference(&e, "google_compute_resource_policy"));
                match policy {
                    Some(p) => {
                        if let Some(p) = per_set("google_compute_resource_policy", &p, &mut out) {
                            let spread = block(p, "group_placement_policy").is_some_and(|g| {
                                attr(g.body(), "availability_domain_count").is_some()
                            });
                            if !spread {
                                out.push(format!(
                                    "{me}: its resource policy is not a spread placement policy"
                                ));
                            }
                        }
                    }
                    None => out.push(format!("{me} has no per-set spread placement policy")),
                }
            }
            _ => unreachable!(),
        }
    }
    out
}

fn modules() -> Vec<PathBuf> {
    subdirs(&root().join("modules"))
}

#[test]
fn every_groups_instances_are_tied_to_an_anti_affinity_construct() {
    let mut clouds = BTreeMap::new();
    for dir in modules() {
        let body = module(&dir);
        let violations = anti_affinity_violations(&body);
        assert!(violations.is_empty(), "{}: {violations:#?}", dir.display());
        for (kind, _) in resources(&body).keys() {
            if INSTANCE_TYPES.contains(&kind.as_str()) {
                *clouds.entry(kind.clone()).or_insert(0) += 1;
            }
        }
    }
    // AWS spread and AWS Dedicated Hosts, OpenStack, GCP.
    assert_eq!(
        clouds,
        BTreeMap::from([
            ("aws_instance".to_string(), 2),
            ("google_compute_instance".to_string(), 1),
            ("openstack_compute_instance_v2".to_string(), 1),
        ])
    );
}

#[test]
fn the_anti_affinity_sets_are_one_per_group() {
    let body = module(&root().join("modules/nodes"));
    let locals = block(&body, "locals").expect("locals");
    let replicas = attr(locals.body(), "replicas").expect("local.replicas");
    assert!(
        replicas.contains("for g in range(var.groups)") && replicas.contains("\"group-${g}\""),
        "every group must be a set of its own: {replicas}"
    );
    let sets = block(&body, "output")
        .into_iter()
        .chain(body.blocks().filter(|b| b.identifier() == "output"))
        .find(|b| b.labels()[0].as_str() == "spread_sets")
        .expect("output spread_sets");
    assert!(attr(sets.body(), "value")
        .expect("value")
        .contains("node.spread_set"));
}

#[test]
fn the_checker_catches_instances_without_anti_affinity() {
    let ok = r#"
        resource "aws_placement_group" "pg" {
          for_each = module.nodes.spread_sets
          strategy = "spread"
        }
        resource "aws_instance" "node" {
          for_each        = module.nodes.nodes
          placement_group = aws_placement_group.pg[each.value.spread_set].name
        }
    "#;
    let check = |text: &str| anti_affinity_violations(&hcl::parse(text).expect("parse"));
    assert_eq!(check(ok), Vec::<String>::new());
    let cases = [
        (
            ok.replace("\"spread\"", "\"cluster\""),
            "not a spread group",
        ),
        (
            ok.replace("[each.value.spread_set]", "[\"group-0\"]"),
            "in no per-set spread placement group",
        ),
        (
            ok.replace(
                "for_each = module.nodes.spread_sets",
                "for_each = toset([\"all\"])",
            ),
            "not one per anti-affinity set",
        ),
        (
            ok.replace(
                "placement_group = aws_placement_group.pg[each.value.spread_set].name",
                "",
            ),
            "in no per-set spread placement group and on no Dedicated Host",
        ),
        (
            ok.replace("for_each        = module.nodes.nodes", "count = 3"),
            "not one instance per node",
        ),
        (
            r#"
            resource "openstack_compute_servergroup_v2" "g" {
              for_each = module.nodes.spread_sets
              policies = ["soft-anti-affinity"]
            }
            resource "openstack_compute_instance_v2" "node" {
              for_each = module.nodes.nodes
              scheduler_hints {
                group = openstack_compute_servergroup_v2.g[each.value.spread_set].id
              }
            }"#
            .to_string(),
            "policy is not anti-affinity",
        ),
        (
            r#"
            resource "google_compute_instance" "node" {
              for_each = module.nodes.nodes
            }"#
            .to_string(),
            "no per-set spread placement policy",
        ),
        (
            r#"
            resource "aws_ec2_host" "m" {
              auto_placement = "on"
            }
            resource "aws_instance" "node" {
              for_each = module.nodes.nodes
              tenancy  = "host"
              host_id  = aws_ec2_host.m[each.key].id
            }"#
            .to_string(),
            "open to other instances",
        ),
    ];
    for (text, expected) in cases {
        let found = check(&text);
        assert!(
            found.iter().any(|v| v.contains(expected)),
            "{expected}: {found:?}"
        );
    }
}

/// modules/<m> and examples/<e> have the files the Terraform ecosystem expects, and every
/// variable says what it is for.
#[test]
fn layout_and_variables_are_documented() {
    for dir in modules()
        .into_iter()
        .chain(subdirs(&root().join("examples")))
    {
        let is_module = dir.parent().is_some_and(|p| p.ends_with("modules"));
        let mut needed = vec!["main.tf", "variables.tf", "outputs.tf", "versions.tf"];
        if is_module {
            needed.push("README.md");
        }
        for file in needed {
            assert!(dir.join(file).is_file(), "{} lacks {file}", dir.display());
        }
        let body = module(&dir);
        for v in body.blocks().filter(|b| b.identifier() == "variable") {
            let name = v.labels()[0].as_str();
            assert!(
                attr(v.body(), "description").is_some() && attr(v.body(), "type").is_some(),
                "{}: variable {name} needs a description and a type",
                dir.display()
            );
        }
        let versions = block(&body, "terraform").expect("terraform block");
        assert!(attr(versions.body(), "required_version").is_some());
    }
    assert!(root().join("README.md").is_file());
    assert!(root().join("check.sh").is_file());
}
