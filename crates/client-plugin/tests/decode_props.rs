//! Properties of the gateway's form decoding (issue 17): a form body, as axum's `Form`
//! extractor decodes it for the gateway's routes, through `gateway::form_operation`. An
//! operation written as a form (encode) comes back as the same operation bytes and partitions
//! (decode); arbitrary bodies and values never panic, and whatever is accepted declares exactly
//! the partitions the application derives. The fuzz target `gateway_form` checks the same
//! with coverage guidance.

use axum::body::Body;
use axum::extract::{Form, FromRequest};
use axum::http::{header, Request};
use client_plugin::gateway::form_operation;
use dbvote::{AppRule, Bank, BankOp};
use proptest::prelude::*;
use proto::PartitionRule;
use std::collections::HashMap;
use std::future::Future;
use std::task::{Context, Poll, Waker};

const PARTITIONS: u32 = 4;
const NOW: i64 = 1_767_225_600;
const BANK: [&str; 4] = [
    "/bank/open",
    "/bank/deposit",
    "/bank/transfer",
    "/bank/balance",
];
const TPCC: [&str; 5] = [
    "/tpcc/new-order",
    "/tpcc/payment",
    "/tpcc/order-status",
    "/tpcc/delivery",
    "/tpcc/stock-level",
];

/// Runs a future that never waits (the extractor over a body in memory).
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("a body in memory made the extractor wait"),
    }
}

/// What the gateway's routes get from a posted body.
fn extract(body: Vec<u8>) -> Option<HashMap<String, String>> {
    let request = Request::post("/")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .unwrap();
    ready(Form::<HashMap<String, String>>::from_request(request, &()))
        .ok()
        .map(|Form(v)| v)
}

/// A form body as a browser encodes it (`application/x-www-form-urlencoded`).
fn encode_form(pairs: &[(&str, String)]) -> Vec<u8> {
    let escape = |s: &str| -> String {
        s.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    (b as char).to_string()
                }
                b' ' => "+".into(),
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", escape(k), escape(v)))
        .collect::<Vec<_>>()
        .join("&")
        .into_bytes()
}

/// A bank operation on the cluster's partitions and the form that asks for it.
fn bank_form() -> impl Strategy<Value = (BankOp, &'static str, Vec<(&'static str, String)>)> {
    let branch = 0..PARTITIONS;
    prop_oneof![
        (branch.clone(), any::<u32>(), any::<u64>()).prop_map(|(branch, number, cents)| (
            BankOp::Open {
                branch,
                number,
                initial_cents: cents
            },
            "/bank/open",
            vec![
                ("branch", branch.to_string()),
                ("number", number.to_string()),
                ("cents", cents.to_string())
            ]
        )),
        (branch.clone(), any::<u32>(), any::<u64>()).prop_map(|(branch, number, cents)| (
            BankOp::Deposit {
                branch,
                number,
                cents
            },
            "/bank/deposit",
            vec![
                ("branch", branch.to_string()),
                ("number", number.to_string()),
                ("cents", cents.to_string())
            ]
        )),
        (
            branch.clone(),
            any::<u32>(),
            branch.clone(),
            any::<u32>(),
            any::<u64>()
        )
            .prop_map(|(fb, fnum, tb, tnum, cents)| (
                BankOp::Transfer {
                    from: (fb, fnum),
                    to: (tb, tnum),
                    cents
                },
                "/bank/transfer",
                vec![
                    ("from_branch", fb.to_string()),
                    ("from_number", fnum.to_string()),
                    ("to_branch", tb.to_string()),
                    ("to_number", tnum.to_string()),
                    ("cents", cents.to_string()),
                ]
            )),
        (branch, any::<u32>()).prop_map(|(branch, number)| (
            BankOp::Balance { branch, number },
            "/bank/balance",
            vec![
                ("branch", branch.to_string()),
                ("number", number.to_string())
            ]
        )),
    ]
}

/// Every form of every application on `values`: what would be sent declares its partitions.
fn check_every_form(values: &HashMap<String, String>) {
    let apps: [(&str, &[&str], Box<dyn PartitionRule>); 3] = [
        ("bank", &BANK, Box::new(AppRule(Bank))),
        ("noop", &["/noop"], Box::new(AppRule(dbvote::noop::Noop))),
        ("tpcc", &TPCC, Box::new(AppRule(tpcc::Tpcc))),
    ];
    for (app, actions, rule) in apps {
        for action in actions {
            let parsed = form_operation(app, action, values, PARTITIONS, NOW).expect("a form");
            if let Ok((partitions, bytes)) = parsed {
                assert_eq!(
                    rule.partitions(&bytes),
                    Some(partitions),
                    "{action}: {values:?}"
                );
            }
        }
    }
}

proptest! {
    #[test]
    fn a_bank_operation_written_as_a_form_comes_back((op, action, pairs) in bank_form()) {
        let values = extract(encode_form(&pairs)).expect("a browser's form body");
        let (partitions, bytes) = form_operation("bank", action, &values, PARTITIONS, NOW).unwrap().unwrap();
        prop_assert_eq!(partitions, op.partitions());
        prop_assert_eq!(BankOp::decode(&bytes).unwrap(), op);
    }

    #[test]
    fn arbitrary_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..128)) {
        if let Some(values) = extract(body) {
            check_every_form(&values);
        }
    }

    #[test]
    fn arbitrary_values_never_panic(
        values in proptest::collection::hash_map(
            prop_oneof![
                Just("branch".to_string()), Just("w_id".to_string()), Just("d_id".to_string()),
                Just("c_id".to_string()), Just("c_last".to_string()), Just("h_amount".to_string()),
                Just("ol_i_id_1".to_string()), Just("ol_quantity_1".to_string()),
                Just("ol_supply_w_id_2".to_string()), Just("partition".to_string()),
                Just("cents".to_string()), "[a-z_0-9]{1,12}"
            ],
            prop_oneof!["[0-9]{1,12}", "[0-9]{1,16}\\.[0-9]{0,3}", ".{0,12}"],
            0..8,
        )
    ) {
        check_every_form(&values);
    }
}
