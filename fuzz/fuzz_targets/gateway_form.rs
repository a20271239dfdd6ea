//! The gateway's form bodies: `application/x-www-form-urlencoded` bytes through axum's `Form`
//! extractor (what the gateway's routes use), then every form of every application
//! (`gateway::form_operation`). Whatever the gateway would sign and send must decode with the
//! application's own decoder, re-encode to the same bytes, and declare exactly the partitions
//! the application's rule derives (within the cluster's), or the cluster would refuse it.
#![no_main]

use axum::body::Body;
use axum::extract::{Form, FromRequest};
use axum::http::{header, Request};
use client_plugin::gateway::form_operation;
use dbvote::{AppRule, Bank};
use libfuzzer_sys::fuzz_target;
use proto::PartitionRule;
use std::collections::HashMap;

const PARTITIONS: u32 = 4;
const NOW: i64 = 1_767_225_600;

const FORMS: [(&str, &[&str]); 3] = [
    (
        "bank",
        &[
            "/bank/open",
            "/bank/deposit",
            "/bank/transfer",
            "/bank/balance",
        ],
    ),
    ("noop", &["/noop"]),
    (
        "tpcc",
        &[
            "/tpcc/new-order",
            "/tpcc/payment",
            "/tpcc/order-status",
            "/tpcc/delivery",
            "/tpcc/stock-level",
        ],
    ),
];

fn rule(application: &str) -> Box<dyn PartitionRule> {
    match application {
        "bank" => Box::new(AppRule(Bank)),
        "noop" => Box::new(AppRule(dbvote::noop::Noop)),
        _ => Box::new(AppRule(tpcc::Tpcc)),
    }
}

fuzz_target!(|data: &[u8]| {
    let request = Request::post("/form")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(data.to_vec()))
        .expect("a request with a form body");
    let Ok(Form(values)) =
        cloudbft_fuzz::block_on(Form::<HashMap<String, String>>::from_request(request, &()))
    else {
        return;
    };
    for (application, actions) in FORMS {
        let rule = rule(application);
        for action in actions {
            let parsed = form_operation(application, action, &values, PARTITIONS, NOW)
                .unwrap_or_else(|| panic!("{application} has no form at {action}"));
            let Ok((partitions, bytes)) = parsed else {
                continue;
            };
            assert_eq!(
                rule.partitions(&bytes).as_deref(),
                Some(partitions.as_slice()),
                "{action} would send an operation that does not declare its partitions: {values:?}"
            );
            assert!(
                partitions.iter().all(|&p| p < PARTITIONS),
                "{action}: {partitions:?}"
            );
            let canonical = match application {
                "bank" => dbvote::BankOp::decode(&bytes).map(|op| op.encode()).ok(),
                "noop" => dbvote::noop::NoopOp::decode(&bytes)
                    .map(|op| op.encode())
                    .ok(),
                _ => tpcc::txn::TpccOp::decode(&bytes).map(|op| op.encode()).ok(),
            };
            assert_eq!(
                canonical.as_deref(),
                Some(bytes.as_slice()),
                "{action}: {values:?}"
            );
        }
    }
});
