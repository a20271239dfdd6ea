//! The planner: validate the fleet, keep what the previous plan placed where it is still
//! valid, then place what is missing: primary candidates, group members, database nodes.
//!
//! Group members are where machine count and balance are decided. The planner opens (starts
//! using) as few machines as it can: it finds the smallest number of extra machines with which
//! every missing member fits (binary search over a fixed opening order: largest machines
//! first, alternating between domains), and within the open machines gives each group the
//! domains with the most free slots left. Filling the emptiest domains first is what makes the
//! groups fit whenever the domains' capacities allow (a domain holds at most one member of each
//! group) and keeps the load even.

use crate::{invalid, Constraint, Demand, Level, Machine, MachineKind, PlacementError, Plan};
use std::collections::HashMap;

/// Places `demand` on `machines`.
///
/// With `previous`, every VM it placed on a machine that is still listed (with room, and still
/// in a valid domain) stays where it is; only the rest is placed: new groups or candidates, and
/// the members of machines that were removed. Groups beyond `demand.groups` are dropped from
/// the end.
pub fn plan(
    machines: &[Machine],
    demand: &Demand,
    previous: Option<&Plan>,
) -> Result<Plan, PlacementError> {
    match plan_inner(machines, demand, previous) {
        Ok(plan) => Ok(plan),
        Err(Failure::Invalid(e)) => Err(e),
        Err(Failure::Infeasible(constraint, detail)) => {
            let kind = MachineKind {
                slots: machines.iter().map(|m| m.slots).max().unwrap_or(1).max(1),
                level: demand.isolation,
            };
            let missing = missing_machines(machines, demand, previous, kind);
            Err(PlacementError::Infeasible {
                constraint,
                detail,
                missing,
                kind,
            })
        }
    }
}

enum Failure {
    Invalid(PlacementError),
    Infeasible(Constraint, String),
}

impl From<PlacementError> for Failure {
    fn from(e: PlacementError) -> Self {
        Failure::Invalid(e)
    }
}

/// The fewest fresh machines of `kind` (each its own host, rack and zone) that make the demand
/// feasible, found by trying: exact for this planner, whatever constraint failed first.
fn missing_machines(
    machines: &[Machine],
    demand: &Demand,
    previous: Option<&Plan>,
    kind: MachineKind,
) -> usize {
    let fits = |k: usize| {
        let mut extended = machines.to_vec();
        extended.extend((1..=k).map(|i| {
            let id = format!("+new-{i}");
            Machine {
                rack: Some(id.clone()),
                zone: Some(id.clone()),
                ..Machine::new(id, kind.slots)
            }
        }));
        plan_inner(&extended, demand, previous).is_ok()
    };
    // Enough for anything: every VM on a machine of its own.
    let cap = demand.total_vms() + demand.group_size();
    let mut hi = 1;
    while hi < cap && !fits(hi) {
        hi = (hi * 2).min(cap);
    }
    let mut lo = hi / 2; // fits(lo) is false (or lo = 0, which failed already)
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fits(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// The machines, indexed, with their domain at the isolation level and their host.
struct Fleet<'a> {
    machines: &'a [Machine],
    index: HashMap<&'a str, usize>,
    domain: Vec<usize>,
    host: Vec<usize>,
    /// Machines per domain, for tie-breaking.
    domain_size: Vec<usize>,
}

fn fleet<'a>(machines: &'a [Machine], demand: &Demand) -> Result<Fleet<'a>, PlacementError> {
    if demand.db_nodes != demand.group_size() {
        return Err(invalid(
            "db_nodes",
            format!(
                "must be 2f+1 = {}: the cluster configuration requires exactly that many",
                demand.group_size()
            ),
        ));
    }
    if demand.primaries == 0 {
        return Err(invalid("primaries", "needs at least one primary candidate"));
    }
    let mut index = HashMap::new();
    let mut domains: HashMap<&str, usize> = HashMap::new();
    let mut hosts: HashMap<&str, usize> = HashMap::new();
    let (mut domain, mut host, mut domain_size) = (Vec::new(), Vec::new(), Vec::new());
    for (i, m) in machines.iter().enumerate() {
        if m.id.is_empty() || index.insert(m.id.as_str(), i).is_some() {
            return Err(invalid(
                format!("machine {:?}.id", m.id),
                "is empty or listed twice: give every machine its own id",
            ));
        }
        let label = m.domain(demand.isolation).ok_or_else(|| {
            invalid(
                format!("machine {}.{}", m.id, demand.isolation),
                format!(
                    "isolation = {0} needs a {0} label on every machine",
                    demand.isolation
                ),
            )
        })?;
        let next = domains.len();
        let d = *domains.entry(label).or_insert(next);
        if d == domain_size.len() {
            domain_size.push(0);
        }
        domain_size[d] += 1;
        domain.push(d);
        let next = hosts.len();
        host.push(
            *hosts
                .entry(m.domain(Level::Host).unwrap_or(&m.id))
                .or_insert(next),
        );
    }
    check_hierarchy(machines)?;
    Ok(Fleet {
        machines,
        index,
        domain,
        host,
        domain_size,
    })
}

impl Fleet<'_> {
    /// The domains of the machines placed so far in `slots`.
    fn domains_of(&self, slots: &[Option<usize>]) -> Vec<usize> {
        slots.iter().flatten().map(|&m| self.domain[m]).collect()
    }
}

/// Labels must nest: one host is in one rack and one zone, one rack in one zone, and one TPM
/// is in one host (two machines reporting one TPM are one physical machine).
fn check_hierarchy(machines: &[Machine]) -> Result<(), PlacementError> {
    type Seen<'a> = HashMap<(&'static str, &'static str, &'a str), (&'a str, &'a str)>;
    fn check<'a>(
        seen: &mut Seen<'a>,
        kind: &'static str,
        key: Option<&'a str>,
        what: &'static str,
        value: Option<&'a str>,
        id: &'a str,
    ) -> Result<(), PlacementError> {
        let (Some(key), Some(value)) = (key, value) else {
            return Ok(());
        };
        match seen.insert((kind, what, key), (value, id)) {
            Some((other, other_id)) if other != value => Err(invalid(
                format!("machine {id}.{what}"),
                format!(
                    "is {value:?} but machine {other_id} on the same {kind} {key:?} says {other:?}: \
                     one {kind} is in one {what}"
                ),
            )),
            _ => Ok(()),
        }
    }
    let mut seen = Seen::new();
    for m in machines {
        let host = m.domain(Level::Host);
        check(&mut seen, "host", host, "rack", m.rack.as_deref(), &m.id)?;
        check(&mut seen, "host", host, "zone", m.zone.as_deref(), &m.id)?;
        check(
            &mut seen,
            "rack",
            m.rack.as_deref(),
            "zone",
            m.zone.as_deref(),
            &m.id,
        )?;
        check(&mut seen, "TPM", m.tpm.as_deref(), "host", host, &m.id)?;
    }
    Ok(())
}

/// Placement in progress: machine indices.
#[derive(Clone)]
struct State {
    free: Vec<u32>,
    open: Vec<bool>,
    host_groups: Vec<u32>,
    host_primaries: Vec<u32>,
    groups: Vec<Vec<Option<usize>>>,
    primaries: Vec<Option<usize>>,
    dbs: Vec<Option<usize>>,
}

impl State {
    fn put(&mut self, m: usize) {
        self.free[m] -= 1;
        self.open[m] = true;
    }
}

fn plan_inner(
    machines: &[Machine],
    demand: &Demand,
    previous: Option<&Plan>,
) -> Result<Plan, Failure> {
    let fleet = fleet(machines, demand)?;
    let n_hosts = fleet.host.iter().max().map_or(0, |h| h + 1);
    let mut state = State {
        free: machines.iter().map(|m| m.slots).collect(),
        open: vec![false; machines.len()],
        host_groups: vec![0; n_hosts],
        host_primaries: vec![0; n_hosts],
        groups: vec![vec![None; demand.group_size()]; demand.groups],
        primaries: vec![None; demand.primaries],
        dbs: vec![None; demand.db_nodes],
    };
    if let Some(previous) = previous {
        keep_previous(&fleet, &mut state, previous);
    }
    place_primaries(&fleet, &mut state)?;
    state = place_groups_and_dbs(&fleet, state)?;
    let name = |m: &Option<usize>| machines[m.expect("every slot placed")].id.clone();
    Ok(Plan {
        groups: state
            .groups
            .iter()
            .map(|g| g.iter().map(name).collect())
            .collect(),
        primaries: state.primaries.iter().map(name).collect(),
        db_nodes: state.dbs.iter().map(name).collect(),
    })
}

/// Pins what the previous plan placed, where it is still allowed: on a listed machine with a
/// free slot, in a domain no earlier member of the same role uses, primaries and group replicas
/// never on one host. Anything else is left for the planner to place again.
fn keep_previous(fleet: &Fleet, state: &mut State, previous: &Plan) {
    let lookup = |id: &String| fleet.index.get(id.as_str()).copied();
    let mut used = Vec::new();
    for (slot, id) in state.primaries.iter_mut().zip(&previous.primaries) {
        if let Some(m) = lookup(id).filter(|&m| {
            state.free[m] > 0 && !used.contains(&fleet.domain[m]) && {
                state.host_groups[fleet.host[m]] == 0
            }
        }) {
            used.push(fleet.domain[m]);
            state.host_primaries[fleet.host[m]] += 1;
            state.free[m] -= 1;
            state.open[m] = true;
            *slot = Some(m);
        }
    }
    for (members, old) in state.groups.iter_mut().zip(&previous.groups) {
        let mut used = Vec::new();
        for (slot, id) in members.iter_mut().zip(old) {
            if let Some(m) = lookup(id).filter(|&m| {
                state.free[m] > 0
                    && !used.contains(&fleet.domain[m])
                    && state.host_primaries[fleet.host[m]] == 0
            }) {
                used.push(fleet.domain[m]);
                state.host_groups[fleet.host[m]] += 1;
                state.free[m] -= 1;
                state.open[m] = true;
                *slot = Some(m);
            }
        }
    }
    let mut used = Vec::new();
    for (i, id) in previous.db_nodes.iter().enumerate().take(state.dbs.len()) {
        if let Some(m) =
            lookup(id).filter(|&m| state.free[m] > 0 && !used.contains(&fleet.domain[m]))
        {
            used.push(fleet.domain[m]);
            state.put(m);
            state.dbs[i] = Some(m);
        }
    }
}

/// Candidates go on machines whose host runs no group replica: one already in use if there is
/// one, else the smallest free machine in the largest domain (big machines are worth more to
/// the groups, and a large domain misses one machine least).
fn place_primaries(fleet: &Fleet, state: &mut State) -> Result<(), Failure> {
    for i in 0..state.primaries.len() {
        if state.primaries[i].is_some() {
            continue;
        }
        let used = fleet.domains_of(&state.primaries);
        let best = (0..fleet.machines.len())
            .filter(|&m| {
                state.free[m] > 0
                    && state.host_groups[fleet.host[m]] == 0
                    && !used.contains(&fleet.domain[m])
            })
            .min_by_key(|&m| {
                (
                    !state.open[m],
                    fleet.machines[m].slots,
                    std::cmp::Reverse(fleet.domain_size[fleet.domain[m]]),
                    m,
                )
            });
        let Some(m) = best else {
            return Err(Failure::Infeasible(
                Constraint::PrimarySpread,
                format!(
                    "candidate {i} finds no machine with a free slot, no group replica on its \
                     host and a domain apart from the other {} candidate(s)",
                    used.len()
                ),
            ));
        };
        state.host_primaries[fleet.host[m]] += 1;
        state.put(m);
        state.primaries[i] = Some(m);
    }
    Ok(())
}

/// Places the missing group members and database nodes on as few newly opened machines as
/// possible. Two ways compete: the fewest machines for the replicas, with database nodes
/// opening more if the replicas left too few distinct free slots; or the fewest machines for
/// replicas and database nodes together. The one using fewer machines wins (the first on a
/// tie).
fn place_groups_and_dbs(fleet: &Fleet, state: State) -> Result<State, Failure> {
    if state.groups.iter().flatten().all(Option::is_some) {
        let mut state = state;
        place_dbs(fleet, &mut state, true)?;
        return Ok(state);
    }
    let order = opening_order(fleet, &state);
    // With the first `extra` machines of `order` opened: groups, then database nodes (opening
    // further machines only if `dbs_may_open`).
    let attempt = |extra: usize, dbs_may_open: bool| {
        let mut s = state.clone();
        for &m in &order[..extra] {
            s.open[m] = true;
        }
        fill_groups(fleet, &mut s)?;
        // Opened for nothing: machines the attempt opened but left empty are closed again.
        for &m in &order[..extra] {
            if s.free[m] == fleet.machines[m].slots {
                s.open[m] = false;
            }
        }
        place_dbs(fleet, &mut s, dbs_may_open)?;
        Ok::<_, Failure>(s)
    };
    // The smallest `extra` that works (more open machines never hurt): doubling from one, then
    // bisection. An attempt costs about (members to place) x (open machines), so the small
    // attempts that fail come cheap.
    let smallest = |dbs_may_open: bool| -> Result<State, Failure> {
        let (mut lo, mut hi) = (0usize, 1usize.min(order.len()));
        let mut best = loop {
            match attempt(hi, dbs_may_open) {
                Ok(s) => break s,
                Err(e) if hi == order.len() => return Err(e),
                Err(_) => (lo, hi) = (hi + 1, (hi * 2).min(order.len())),
            }
        };
        while lo < hi {
            let mid = (lo + hi) / 2;
            match attempt(mid, dbs_may_open) {
                Ok(s) => {
                    best = s;
                    hi = mid;
                }
                Err(_) => lo = mid + 1,
            }
        }
        Ok(best)
    };
    let replicas_first = smallest(true)?;
    match smallest(false) {
        Ok(together) if used(&together) < used(&replicas_first) => Ok(together),
        _ => Ok(replicas_first),
    }
}

fn used(state: &State) -> usize {
    state.open.iter().filter(|&&o| o).count()
}

/// Machines that may take group replicas and are not in use yet: largest first, alternating
/// between domains so that the first few opened reach as many domains as possible.
fn opening_order(fleet: &Fleet, state: &State) -> Vec<usize> {
    let mut closed: Vec<usize> = (0..fleet.machines.len())
        .filter(|&m| {
            !state.open[m] && state.free[m] > 0 && state.host_primaries[fleet.host[m]] == 0
        })
        .collect();
    closed.sort_by_key(|&m| (std::cmp::Reverse(fleet.machines[m].slots), m));
    // Round-robin over domains, each domain's machines in the order above.
    let mut rank_in_domain = HashMap::new();
    let mut keyed: Vec<(usize, usize, usize)> = closed
        .iter()
        .enumerate()
        .map(|(pos, &m)| {
            let r = rank_in_domain.entry(fleet.domain[m]).or_insert(0);
            *r += 1;
            (*r, pos, m)
        })
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, _, m)| m).collect()
}

/// Fills every missing group member from the open machines: for each member, the domain (not
/// yet in the group) with the most free slots, and there its freest machine.
fn fill_groups(fleet: &Fleet, state: &mut State) -> Result<(), Failure> {
    let n_domains = fleet.domain_size.len();
    // Best machine and total free slots per domain, among open machines that take replicas.
    let mut best: Vec<Option<usize>> = vec![None; n_domains];
    let mut total: Vec<u64> = vec![0; n_domains];
    // Machines that may take replicas: open, on a host without a candidate (fixed during the
    // fill, so computed once).
    let takers: Vec<usize> = (0..fleet.machines.len())
        .filter(|&m| state.open[m] && state.host_primaries[fleet.host[m]] == 0)
        .collect();
    for g in 0..state.groups.len() {
        let mut in_group = fleet.domains_of(&state.groups[g]);
        for slot in 0..state.groups[g].len() {
            if state.groups[g][slot].is_some() {
                continue;
            }
            for &m in &takers {
                best[fleet.domain[m]] = None;
                total[fleet.domain[m]] = 0;
            }
            for &m in &takers {
                let d = fleet.domain[m];
                if state.free[m] == 0 || in_group.contains(&d) {
                    continue;
                }
                total[d] += u64::from(state.free[m]);
                if best[d].is_none_or(|b| state.free[m] > state.free[b]) {
                    best[d] = Some(m);
                }
            }
            let Some(d) = takers
                .iter()
                .map(|&m| fleet.domain[m])
                .filter(|&d| best[d].is_some())
                .max_by_key(|&d| (total[d], std::cmp::Reverse(d)))
            else {
                return Err(Failure::Infeasible(
                    Constraint::GroupSpread,
                    format!(
                        "group {g} has {} of its {} members placed and no further domain with a \
                         free slot on a host without a primary candidate",
                        in_group.len(),
                        state.groups[g].len()
                    ),
                ));
            };
            let m = best[d].expect("filtered");
            in_group.push(d);
            state.host_groups[fleet.host[m]] += 1;
            state.put(m);
            state.groups[g][slot] = Some(m);
        }
    }
    Ok(())
}

/// Database nodes go on machines in use where they can (the freest first), else, if `may_open`,
/// on the largest unused machine of a new domain.
fn place_dbs(fleet: &Fleet, state: &mut State, may_open: bool) -> Result<(), Failure> {
    for i in 0..state.dbs.len() {
        if state.dbs[i].is_some() {
            continue;
        }
        let used = fleet.domains_of(&state.dbs);
        let best = (0..fleet.machines.len())
            .filter(|&m| {
                state.free[m] > 0 && !used.contains(&fleet.domain[m]) && (may_open || state.open[m])
            })
            .min_by_key(|&m| {
                let slots = fleet.machines[m].slots;
                if state.open[m] {
                    (
                        0,
                        std::cmp::Reverse(state.free[m]),
                        slots - state.free[m],
                        m,
                    )
                } else {
                    (1, std::cmp::Reverse(slots), 0, m)
                }
            });
        let Some(m) = best else {
            return Err(Failure::Infeasible(
                Constraint::DbSpread,
                format!(
                    "database node {i} finds no machine with a free slot in a domain apart from \
                     the other {} database node(s)",
                    used.len()
                ),
            ));
        };
        state.put(m);
        state.dbs[i] = Some(m);
    }
    Ok(())
}
