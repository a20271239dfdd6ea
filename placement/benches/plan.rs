//! Planning time for 1,000 machines and 200 groups (issue 14's measurement), fresh and
//! incremental.

use criterion::{criterion_group, criterion_main, Criterion};
use placement::{lower_bound, plan, Demand, Level, Machine};
use std::hint::black_box;

/// 1,000 machines of 8 slots in 4 zones of 10 racks of 25 hosts.
fn fleet() -> Vec<Machine> {
    (0..1000)
        .map(|i| Machine {
            rack: Some(format!("z{}r{}", i % 4, (i / 4) % 10)),
            zone: Some(format!("z{}", i % 4)),
            tpm: Some(format!("{i:064x}")),
            ..Machine::new(format!("m{i}"), 8)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let machines = fleet();
    let mut g = c.benchmark_group("plan 1000 machines 200 groups");
    for (f, level) in [
        (1, Level::Host),
        (1, Level::Rack),
        (1, Level::Zone),
        (2, Level::Rack),
    ] {
        let demand = Demand::new(f, 200, 3).at(level);
        let p = plan(&machines, &demand, None).expect("feasible");
        eprintln!(
            "f={f} {level}: {} machines used, lower bound {}",
            p.machines_used(),
            lower_bound(&machines, &demand)
        );
        g.bench_function(format!("fresh f={f} {level}"), |b| {
            b.iter(|| plan(black_box(&machines), black_box(&demand), None).expect("feasible"))
        });
    }
    let demand = Demand::new(1, 200, 3);
    let before = plan(&machines, &demand, None).expect("feasible");
    let more = Demand {
        groups: 201,
        ..demand
    };
    g.bench_function("add one group f=1 host", |b| {
        b.iter(|| plan(black_box(&machines), black_box(&more), Some(&before)).expect("feasible"))
    });
    let gone = before.groups[0][0].clone();
    let rest: Vec<Machine> = machines.iter().filter(|m| m.id != gone).cloned().collect();
    g.bench_function("replace a machine f=1 host", |b| {
        b.iter(|| plan(black_box(&rest), black_box(&demand), Some(&before)).expect("feasible"))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
