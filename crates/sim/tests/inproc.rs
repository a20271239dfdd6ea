//! The in-process ordering harness (the one `cargo bench -p cloudbft-sim --bench ordering`
//! times) is correct: every request gets f+1 matching REPLYs, and once the run drains every
//! replica's REPLY matches, with batches and without.

use sim::inproc::{Harness, Options, Through};

fn check(options: Options) {
    let f = options.f;
    let harness = Harness::new(options.clone());
    let requests = harness.requests();
    let report = harness.run();
    assert_eq!(report.completed, requests, "{report:?}");
    assert_eq!(report.ordered, requests, "each request ordered once");
    assert_eq!(report.matching.len() as u64, requests);
    for (request, matching) in &report.matching {
        assert_eq!(*matching, 2 * f + 1, "replies matching for {request:?}");
    }
    assert_eq!(report.replies, requests * (2 * f as u64 + 1));
    assert_eq!(report.bad_replies, 0);
    assert_eq!(report.rejected, 0, "{report:?}");
    assert_eq!(report.unexpected, 0, "{report:?}");
    if options.max_batch == 1 {
        assert_eq!(report.prepares, requests);
    } else {
        assert!(report.prepares < requests / 4, "batches formed: {report:?}");
    }
}

#[test]
fn batched_requests_all_get_f_plus_one_matching_replies() {
    check(Options {
        requests_per_client: 3,
        ..Options::standard(3)
    });
}

#[test]
fn unbatched_requests_all_get_f_plus_one_matching_replies() {
    check(Options {
        clients: 32,
        requests_per_client: 10,
        max_batch: 1,
        // Each client signs alone, with its own key.
        sign_batch: 1,
        ..Options::standard(10)
    });
}

#[test]
fn two_faults_tolerated_group() {
    check(Options {
        f: 2,
        clients: 64,
        requests_per_client: 5,
        ..Options::standard(5)
    });
}

/// The ordering alone (`Through::Decisions`, the bench's `f1-batch64-decisions`): every request
/// is decided by f+1 replicas with the same order and body, and once the run drains by all
/// 2f+1, without a database voter, a REPLY-COMMIT-DB or a REPLY.
#[test]
fn decisions_alone_match_at_every_replica() {
    let options = Options {
        through: Through::Decisions,
        ..Options::standard(3)
    };
    let harness = Harness::new(options);
    let requests = harness.requests();
    let report = harness.run();
    assert_eq!(report.completed, requests, "{report:?}");
    assert_eq!(report.ordered, requests, "each request ordered once");
    assert_eq!(report.matching.len() as u64, requests);
    assert!(report.matching.values().all(|&m| m == 3), "{report:?}");
    assert_eq!(report.replies, 0, "no REPLY on this path");
    assert_eq!(report.bad_replies, 0);
    assert_eq!(report.rejected, 0, "{report:?}");
    assert_eq!(report.unexpected, 0, "{report:?}");
    assert!(report.prepares < requests / 4, "batches formed: {report:?}");
}
