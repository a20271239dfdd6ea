//! Prints the docs' table of planned machine counts against the lower bound:
//! `cargo run --release -p cloudbft-placement --example bound_table`.

use placement::{lower_bound, plan, Demand, Level, Machine};
use std::time::Instant;

/// `n` machines of `slots` slots in `zones` zones of `racks` racks each (dealt round-robin).
fn fleet(n: usize, slots: u32, zones: usize, racks: usize) -> Vec<Machine> {
    (0..n)
        .map(|i| Machine {
            zone: Some(format!("z{}", i % zones)),
            rack: Some(format!("z{}r{}", i % zones, (i / zones) % racks)),
            ..Machine::new(format!("m{i}"), slots)
        })
        .collect()
}

fn main() {
    println!(
        "| machines offered | f | groups | candidates | isolation | plan | lower bound | time |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    // (machines, slots, zones, racks per zone, f, groups, candidates, isolation)
    type Row = (usize, u32, usize, usize, usize, usize, usize, Level);
    let rows: [Row; 12] = [
        (20, 8, 4, 5, 1, 1, 1, Level::Host),
        (20, 8, 4, 5, 1, 5, 1, Level::Host),
        (20, 8, 4, 5, 2, 5, 2, Level::Host),
        (20, 3, 4, 5, 1, 4, 1, Level::Host),
        (40, 2, 4, 5, 2, 6, 1, Level::Host),
        (40, 1, 4, 5, 1, 2, 2, Level::Host),
        (40, 4, 4, 5, 1, 10, 2, Level::Rack),
        (40, 4, 3, 5, 1, 10, 2, Level::Zone),
        (1000, 8, 4, 10, 1, 200, 3, Level::Host),
        (1000, 8, 4, 10, 1, 200, 3, Level::Rack),
        (1000, 8, 4, 10, 1, 200, 3, Level::Zone),
        (1000, 8, 4, 10, 2, 200, 3, Level::Rack),
    ];
    for (n, slots, zones, racks, f, groups, candidates, level) in rows {
        let machines = fleet(n, slots, zones, racks);
        let demand = Demand::new(f, groups, candidates).at(level);
        let start = Instant::now();
        let p = plan(&machines, &demand, None).expect("feasible");
        let took = start.elapsed();
        println!(
            "| {n} × {slots} slots ({zones} zones × {racks} racks) | {f} | {groups} | {candidates} | {level} | {} | {} | {:.1} ms |",
            p.machines_used(),
            lower_bound(&machines, &demand),
            took.as_secs_f64() * 1e3
        );
    }
}
