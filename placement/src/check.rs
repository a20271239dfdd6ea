//! Checking a placement someone else made (a hand-written cluster configuration, or one from an
//! older planner) against the same rules the planner follows.

use crate::{Constraint, Level, Machine, Plan};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// One broken rule of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub constraint: Option<Constraint>,
    /// What breaks it, naming the role, its index and the machines.
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.constraint {
            Some(c) => write!(f, "{}: breaks \"{c}\"", self.what),
            None => f.write_str(&self.what),
        }
    }
}

/// Every rule `plan` breaks on `machines` at `isolation`, for `f`: group size 2f+1 and
/// database nodes 2f+1, machines known and within their slots, domains distinct per role (an
/// unlabelled machine counts as a domain of its own), primary candidates on hosts without
/// group replicas, and no two members of one group, two candidates or two database nodes on one
/// TPM. Empty when the plan is valid.
pub fn check(machines: &[Machine], isolation: Level, f: usize, plan: &Plan) -> Vec<Violation> {
    let mut out = Vec::new();
    let bad = |out: &mut Vec<Violation>, constraint, what: String| {
        out.push(Violation { constraint, what })
    };
    let by_id: BTreeMap<&str, &Machine> = machines.iter().map(|m| (m.id.as_str(), m)).collect();
    let n = 2 * f + 1;
    for (id, load) in plan.load() {
        match by_id.get(id) {
            None => bad(
                &mut out,
                None,
                format!("machine {id} is not in the machine list"),
            ),
            Some(m) if load > m.slots as usize => bad(
                &mut out,
                None,
                format!("machine {id} runs {load} VMs but has {} slots", m.slots),
            ),
            Some(_) => {}
        }
    }
    let domain = |id: &str, level: Level| -> String {
        by_id
            .get(id)
            .and_then(|m| m.domain(level))
            .unwrap_or(id)
            .to_string()
    };
    let tpm = |id: &str| by_id.get(id).and_then(|m| m.tpm.clone());
    let spread = |out: &mut Vec<Violation>, constraint, role: &str, ids: &[String]| {
        let mut domains = BTreeMap::new();
        let mut tpms = BTreeMap::new();
        for (i, id) in ids.iter().enumerate() {
            if let Some(j) = domains.insert(domain(id, isolation), i) {
                bad(
                    out,
                    Some(constraint),
                    format!(
                        "{role} {j} and {role} {i} share {isolation} {} (machines {} and {id})",
                        domain(id, isolation),
                        ids[j]
                    ),
                );
            }
            if let Some(t) = tpm(id) {
                if let Some(j) = tpms.insert(t.clone(), i) {
                    bad(
                        out,
                        Some(constraint),
                        format!("{role} {j} and {role} {i} use one TPM {t}"),
                    );
                }
            }
        }
    };
    for (g, members) in plan.groups.iter().enumerate() {
        if members.len() != n {
            bad(
                &mut out,
                Some(Constraint::GroupSpread),
                format!("group {g} has {} members; 2f+1 = {n}", members.len()),
            );
        }
        spread(
            &mut out,
            Constraint::GroupSpread,
            &format!("group {g} member"),
            members,
        );
    }
    spread(
        &mut out,
        Constraint::PrimarySpread,
        "primary candidate",
        &plan.primaries,
    );
    spread(
        &mut out,
        Constraint::DbSpread,
        "database node",
        &plan.db_nodes,
    );
    if plan.db_nodes.len() != n {
        bad(
            &mut out,
            Some(Constraint::DbSpread),
            format!("{} database nodes; 2f+1 = {n}", plan.db_nodes.len()),
        );
    }
    if plan.primaries.is_empty() {
        bad(
            &mut out,
            Some(Constraint::PrimarySpread),
            "no primary candidate".to_string(),
        );
    }
    let group_hosts: BTreeSet<String> = plan
        .groups
        .iter()
        .flatten()
        .map(|id| domain(id, Level::Host))
        .collect();
    for (i, id) in plan.primaries.iter().enumerate() {
        if group_hosts.contains(&domain(id, Level::Host)) {
            bad(
                &mut out,
                Some(Constraint::PrimarySpread),
                format!(
                    "primary candidate {i} runs on host {} with group replicas",
                    domain(id, Level::Host)
                ),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machines() -> Vec<Machine> {
        (0..5)
            .map(|i| Machine {
                rack: Some(format!("r{}", i / 2)),
                ..Machine::new(format!("m{i}"), 2)
            })
            .collect()
    }

    fn plan(groups: &[&[&str]], primaries: &[&str], dbs: &[&str]) -> Plan {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        Plan {
            groups: groups.iter().map(|g| v(g)).collect(),
            primaries: v(primaries),
            db_nodes: v(dbs),
        }
    }

    #[test]
    fn each_rule_is_reported() {
        let ms = machines();
        let ok = plan(&[&["m1", "m2", "m3"]], &["m0"], &["m1", "m2", "m3"]);
        assert_eq!(check(&ms, Level::Host, 1, &ok), vec![]);
        // At rack level m1 (r0) and... m0, m1 share r0; m2, m3 share r1.
        let v = check(&ms, Level::Rack, 1, &ok);
        assert!(v
            .iter()
            .any(|v| v.constraint == Some(Constraint::GroupSpread)
                && v.what.contains("share rack r1")));

        let cases = [
            (
                plan(&[&["m1", "m1", "m3"]], &["m0"], &["m1", "m2", "m3"]),
                "share host m1",
            ),
            (
                plan(&[&["m1", "m2", "m3"]], &["m1"], &["m0", "m2", "m3"]),
                "runs on host m1 with group replicas",
            ),
            (
                plan(&[&["m1", "m2"]], &["m0"], &["m1", "m2", "m3"]),
                "has 2 members",
            ),
            (
                plan(&[&["m1", "m2", "m3"]], &["m0"], &["m1", "m2", "m2"]),
                "database node 1 and database node 2 share host m2",
            ),
            (
                plan(&[&["m1", "m2", "m9"]], &["m0"], &["m1", "m2", "m3"]),
                "m9 is not in the machine list",
            ),
            (
                plan(
                    &[&["m1", "m2", "m3"], &["m1", "m2", "m3"]],
                    &["m0"],
                    &["m1", "m2", "m3"],
                ),
                "runs 3 VMs but has 2 slots",
            ),
            (
                plan(&[&["m1", "m2", "m3"]], &["m0", "m0"], &["m1", "m2", "m3"]),
                "primary candidate 0 and primary candidate 1 share host m0",
            ),
        ];
        for (p, expected) in cases {
            let v = check(&ms, Level::Host, 1, &p);
            assert!(
                v.iter().any(|v| v.to_string().contains(expected)),
                "{expected}: {v:?}"
            );
        }
    }

    #[test]
    fn one_tpm_under_two_names_is_one_machine() {
        let mut ms = machines();
        ms[3].tpm = Some("aa".into());
        ms[4].tpm = Some("aa".into());
        let p = plan(&[&["m1", "m3", "m4"]], &["m0"], &["m1", "m2", "m3"]);
        let v = check(&ms, Level::Host, 1, &p);
        assert!(v.iter().any(|v| v.what.contains("use one TPM aa")), "{v:?}");
    }
}
