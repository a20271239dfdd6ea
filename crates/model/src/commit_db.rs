//! COMMIT-DB: what each correct replica sends to the database nodes, and which executions a
//! correct database node can perform.

use crate::prepare::{derive_orders, Order, Prepare, Request};
use crate::{Phase, State, F};

/// One execution of a COMMIT-DB: `(order, request)`, sent by a member of a group.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct CommitDb {
    pub order: Order,
    pub request: Request,
}

/// View 0: the order id of each old-primary counter, derived from the PREPAREs `1..=c` that
/// every correct replica processed before deciding `c`.
pub fn view0_orders(state: &State) -> Vec<Option<Order>> {
    derive_orders(state.prepares.iter().map(|p| Some(p.request)))
}

/// After the NEW-VIEW: the sequence every replica orders, `S` (one entry per old counter, null
/// where no included log holds it) followed by the new primary's PREPARE, if it issued one.
pub fn view1_entries(state: &State) -> Vec<Option<Prepare>> {
    let s = state.new_view.unwrap_or_default();
    let old = (1..)
        .zip(&state.prepares)
        .map(|(c, p)| s.contains(c).then_some(*p));
    old.chain(state.view1_prepare.map(Some)).collect()
}

/// The order ids of [`view1_entries`], by the same derivation as in view 0.
pub fn view1_orders(state: &State) -> Vec<Option<Order>> {
    derive_orders(view1_entries(state).iter().map(|e| e.map(|p| p.request)))
}

/// The COMMIT-DBs correct replica `r` sent: in view 0 its decisions; once it accepted the
/// NEW-VIEW, every entry of `S` for its group (all decided by the NEW-VIEW) and the new
/// primary's PREPARE if it is for its group (a correct new primary and the group's correct
/// members suffice to decide it). `view1: false` counts view 0 only.
pub fn sent(state: &State, r: usize, view1: bool) -> Vec<CommitDb> {
    let group = state.group_of(r);
    let replica = state.correct[r];
    let mut out = Vec::new();
    let orders = view0_orders(state);
    for c in replica.decided.iter() {
        if let Some(order) = orders[c as usize - 1] {
            let request = state.prepares[c as usize - 1].request;
            out.push(CommitDb { order, request });
        }
    }
    if view1 && replica.phase == Phase::NewView {
        for (entry, order) in view1_entries(state).into_iter().zip(view1_orders(state)) {
            if let (Some(p), Some(order)) = (entry, order) {
                if p.group == group {
                    out.push(CommitDb {
                        order,
                        request: p.request,
                    });
                }
            }
        }
    }
    out
}

/// The executions some correct database node can perform: `(order, request)` that f+1 members
/// of one group sent. Each group's Byzantine member is counted as sending whatever helps (a
/// COMMIT-DB is only authenticated by its link, not warranted). Database nodes are all correct and have no view,
/// and the network may hold any of them back until any single execution is available, so
/// "some correct node executes X" is exactly "X is in this set", and two executions in it can be
/// performed by one node or by two different nodes (the properties need at most two of the
/// three). `view1: false` counts only view-0 COMMIT-DBs.
pub fn executable(state: &State, view1: bool) -> Vec<CommitDb> {
    let mut out = Vec::new();
    for g in 0..state.byzantine.len() {
        let members: Vec<Vec<CommitDb>> = state
            .members(g as u8)
            .map(|r| sent(state, r, view1))
            .collect();
        for exec in members.iter().flatten() {
            let votes = members.iter().filter(|m| m.contains(exec)).count() + 1;
            if votes > F && !out.contains(exec) {
                out.push(*exec);
            }
        }
    }
    out.sort();
    out
}
