//! The ordering path alone: the primary and one group of 2f+1 replicas (with 2f+1 database
//! voters and a trivial executor) in one process on one thread, over in-memory queues, with
//! real envelopes, soft-USIG warrants and Ed25519 signatures; 256 closed-loop clients with
//! pre-signed requests (`sim::inproc` says exactly what is and is not included). The
//! `-decisions` case stops at f+1 replicas' decisions: the ordering alone, without execution,
//! as other MinBFT implementations are measured.
//!
//! `cargo bench -p cloudbft-sim --bench ordering`: criterion reports requests/s (each request
//! completed with f+1 matching REPLYs) as "thrpt". Setting `ORDERING_ONCE=1` runs each case
//! once without criterion (for `valgrind --tool=callgrind`), or `ORDERING_RUNS` times each.
//! docs/performance.md has figures.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use sim::inproc::{Harness, Options, Through};
use std::time::Duration;

/// The allocator the `cloudbft` binary runs with, so that these figures match its nodes'.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Requests per client in one timed run: 256 x 20 = 5,120 requests.
const PER_CLIENT: u64 = 20;

fn cases() -> Vec<(&'static str, Options)> {
    vec![
        ("f1-batch64", Options::standard(PER_CLIENT)),
        (
            "f1-batch64-decisions",
            Options {
                through: Through::Decisions,
                ..Options::standard(PER_CLIENT)
            },
        ),
        (
            "f1-batch1",
            Options {
                max_batch: 1,
                ..Options::standard(PER_CLIENT)
            },
        ),
    ]
}

fn ordering(c: &mut Criterion) {
    if std::env::var_os("ORDERING_ONCE").is_some() {
        let only = std::env::var("ORDERING_CASE").ok();
        // Later runs in one process start with a warm heap, as a long-running node does.
        let runs: usize = std::env::var("ORDERING_RUNS").map_or(1, |n| {
            n.parse()
                .expect("ORDERING_RUNS must be a number of runs, such as 5")
        });
        let chosen = cases()
            .into_iter()
            .filter(|(name, _)| only.as_deref().is_none_or(|o| o == *name));
        for (name, options) in chosen.flat_map(|case| std::iter::repeat_n(case, runs)) {
            let harness = Harness::new(options);
            let requests = harness.requests();
            let (start, cpu) = (std::time::Instant::now(), thread_cpu());
            let report = harness.run();
            let (took, cpu) = (start.elapsed().as_secs_f64(), thread_cpu() - cpu);
            assert_eq!(report.completed, requests);
            println!(
                "{name}: {requests} requests in {} PREPAREs: {:.0} requests/s ({took:.3} s), \
                 {:.0} requests per CPU second ({cpu:.3} s of this thread's CPU)",
                report.prepares,
                requests as f64 / took,
                requests as f64 / cpu,
            );
        }
        return;
    }
    let mut g = c.benchmark_group("ordering");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(10));
    for (name, options) in cases() {
        let requests = options.clients * options.requests_per_client;
        g.throughput(Throughput::Elements(requests));
        g.bench_function(name, |b| {
            b.iter_batched(
                || Harness::new(options.clone()),
                |h| {
                    let report = h.run();
                    assert_eq!(report.completed, requests);
                    report
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

/// This thread's CPU time in seconds: on a shared machine the figure that does not move with
/// the other load (wall-clock throughput does).
fn thread_cpu() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

criterion_group!(benches, ordering);
criterion_main!(benches);
