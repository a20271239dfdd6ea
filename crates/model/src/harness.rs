//! What the model-check tests share: an exhaustive check, a shortest counterexample, and the
//! line that reports what was explored.

use stateright::{Checker, HasDiscoveries, Model, Path};
use std::collections::BTreeSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::time::Instant;

/// Explores every state depth first, one per class of states `representative` maps together;
/// panics unless every `always` property holds and every `sometimes` one was seen.
pub fn check_all<M>(name: &str, model: M, representative: fn(&M::State) -> M::State)
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let start = Instant::now();
    let checker = model
        .checker()
        .symmetry_fn(representative)
        .spawn_dfs()
        .join();
    report(name, &checker, start);
    checker.assert_properties();
}

/// A shortest counterexample to `property`, printed with what was explored: breadth first with
/// an increasing depth bound (stateright's breadth-first search keeps the last violation it
/// met in a block of states, not the first). Panics if there is none up to `max_depth`.
pub fn shortest_counterexample<M>(
    name: &str,
    model: &M,
    property: &'static str,
    max_depth: usize,
) -> Path<M::State, M::Action>
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let start = Instant::now();
    for depth in 1..=max_depth {
        let checker = model
            .clone()
            .checker()
            .target_max_depth(depth)
            .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
            .spawn_bfs()
            .join();
        if let Some(path) = checker.discovery(property) {
            report(&format!("{name}, \"{property}\" refuted"), &checker, start);
            return path;
        }
    }
    panic!("{name}: no counterexample to \"{property}\" up to depth {max_depth}");
}

/// Prints the states explored and the time taken.
pub fn report<M: Model>(name: &str, checker: &impl Checker<M>, start: Instant) {
    println!(
        "{name}: {} unique states ({} generated), max depth {}, {:.1?}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        start.elapsed()
    );
}
