//! The client library against fake replicas: which replies accept a page, which never can, and
//! what is counted.

use crate::harness::{fast_retransmit, reply, wait_until, write_key, Harness, PRIMARY, WAIT};
use client_plugin::client::ClientError;
use client_plugin::{Accepted, ClientEndpoint, ClientOptions};
use proto::testing::client_key;
use proto::{ClientId, Envelope, GroupId, Message, Reply};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

const PAGE: &[u8] = b"<!DOCTYPE html><p>balance: 12.50</p>";

/// Invokes `operation` on partition 0 (group 0) in a task of its own.
fn invoke(
    endpoint: &ClientEndpoint,
    operation: &[u8],
) -> JoinHandle<Result<Accepted, ClientError>> {
    let endpoint = endpoint.clone();
    let operation = operation.to_vec();
    tokio::spawn(async move { endpoint.invoke(vec![0], operation).await })
}

async fn finish(task: JoinHandle<Result<Accepted, ClientError>>) -> Result<Accepted, ClientError> {
    tokio::time::timeout(WAIT, task)
        .await
        .expect("the invoke finishes")
        .expect("the invoke task does not panic")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f_plus_one_matching_replies_accept_the_page() {
    let mut h = Harness::new("bank", 4).await;
    let endpoint = h.open(ClientOptions::default()).await;
    assert_eq!(endpoint.identities(), 4);
    let task = invoke(&endpoint, b"op");

    let request = h.request_at(PRIMARY).await;
    let key = client_key(request.client).public_key();
    assert!(request.verify(&key));
    assert_eq!(
        (request.partitions.clone(), request.operation.clone()),
        (vec![0], b"op".to_vec())
    );
    // Every other primary candidate (so that a new view's primary has it) and every replica of
    // the group serving partition 0 got the very same request (other groups' replicas get it
    // only in retransmissions: configs.rs tests the routing).
    let config = &h.cluster.config;
    let candidates = config
        .primaries
        .iter()
        .map(|p| p.id)
        .filter(|&id| id != PRIMARY);
    let serving = h.cluster.group_of(0).expect("partition 0 is served");
    let nodes: Vec<u32> = candidates
        .chain(h.cluster.members(serving).map(|r| r.id))
        .collect();
    for id in nodes {
        assert_eq!(h.request_at(id).await, request, "node {id}");
    }

    h.reply(101, 0, &request, PAGE);
    h.reply(103, 0, &request, PAGE);
    let accepted = finish(task).await.unwrap();
    assert_eq!(accepted.page, PAGE);
    assert_eq!(accepted.group, GroupId(0));
    assert_eq!(
        (accepted.client, accepted.timestamp),
        (request.client, request.timestamp)
    );
    assert_eq!(accepted.retransmissions, 0);

    // The third member's reply is late, and harmless.
    h.reply(102, 0, &request, PAGE);
    let stats = wait_until(&endpoint, "the late reply is counted", |s| {
        s.late_replies == 1
    })
    .await;
    assert_eq!((stats.requests_sent, stats.accepted), (1, 1));
    assert_eq!((stats.disagreeing_replies, stats.rejected.total()), (0, 0));
    endpoint.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f_replies_wait_for_a_retransmission() {
    let mut h = Harness::new("bank", 4).await;
    let endpoint = h.open(fast_retransmit()).await;
    let task = invoke(&endpoint, b"op");

    let request = h.request_at(PRIMARY).await;
    h.reply(101, 0, &request, PAGE);
    // Only f replies: the client re-sends the same request (same timestamp and signature).
    assert_eq!(h.request_at(PRIMARY).await, request);
    h.reply(102, 0, &request, PAGE);

    let accepted = finish(task).await.unwrap();
    assert_eq!(accepted.page, PAGE);
    assert!(accepted.retransmissions >= 1);
    assert!(endpoint.stats().retransmissions >= 1);
    endpoint.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_byzantine_page_is_outvoted_and_counted() {
    let mut h = Harness::new("bank", 4).await;
    let endpoint = h.open(ClientOptions::default()).await;
    let task = invoke(&endpoint, b"op");

    let request = h.request_at(PRIMARY).await;
    // Replica 101 lies, then changes its story (its link keeps that order); the others agree.
    h.reply(101, 0, &request, b"<p>balance: 1000000.00</p>");
    h.reply(101, 0, &request, b"<p>balance: 0.00</p>");
    h.reply(102, 0, &request, PAGE);
    h.reply(103, 0, &request, PAGE);

    let accepted = finish(task).await.unwrap();
    assert_eq!(accepted.page, PAGE);
    // Both of 101's pages disagree, whether they came before the quorum (its second page, then
    // its first outvoted) or after it.
    wait_until(&endpoint, "101's pages are counted", |s| {
        s.disagreeing_replies == 2
    })
    .await;

    // A replica that changes its page after the quorum formed is still counted.
    h.reply(102, 0, &request, b"<p>changed my mind</p>");
    wait_until(&endpoint, "the late disagreement is counted", |s| {
        s.disagreeing_replies == 3
    })
    .await;
    endpoint.shutdown().await;
}

/// A reply can reach its request's queue behind the one that completes the quorum, before
/// the request's task has read it: it is counted all the same. Each round sends the quorum
/// first and a disagreeing page right after it, so the disagreement lands in the queue in some
/// rounds and after the acceptance in others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disagreeing_reply_is_counted_whenever_it_arrives() {
    const ROUNDS: u64 = 40;
    let mut h = Harness::new("bank", 4).await;
    let endpoint = h.open(ClientOptions::default()).await;
    let mut last = 0;
    for round in 1..=ROUNDS {
        let task = invoke(&endpoint, b"op");
        let request = h.request_after(last).await;
        last = request.timestamp;
        h.reply(102, 0, &request, PAGE);
        h.reply(103, 0, &request, PAGE);
        h.reply(101, 0, &request, b"<p>balance: 0.00</p>");
        assert_eq!(finish(task).await.unwrap().page, PAGE);
        wait_until(&endpoint, "every disagreeing page is counted", |s| {
            s.disagreeing_replies == round
        })
        .await;
    }
    endpoint.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonated_foreign_and_misaddressed_replies_never_count() {
    let mut h = Harness::new("bank", 4).await;
    let endpoint = h.open(ClientOptions::default()).await;
    let task = invoke(&endpoint, b"op");
    let request = h.request_at(PRIMARY).await;

    // 201 is a member of group 1 claiming group 0.
    h.reply(201, 0, &request, PAGE);
    // 102's reply on 201's link, and on a plain connection: neither proves 102 sent it.
    h.send_on(201, reply(102, 0, &request, PAGE));
    h.send_plain(reply(102, 0, &request, PAGE));
    // For a client this endpoint does not hold, and for a timestamp it never sent.
    h.send_on(
        102,
        Reply {
            client: ClientId(99),
            ..reply(102, 0, &request, PAGE)
        },
    );
    let mut future = request.clone();
    future.timestamp += 1;
    h.reply(102, 0, &future, PAGE);
    // Not an envelope, and a message clients do not take.
    h.send_frame(b"\x01\x00garbage".to_vec());
    h.send_frame(Envelope::encode(&Message::Request(request.clone())));
    // One genuine vote: still f short.
    h.reply(101, 0, &request, PAGE);

    let stats = wait_until(&endpoint, "every bad reply is rejected", |s| {
        s.rejected.total() == 7
    })
    .await;
    let r = stats.rejected;
    assert_eq!(
        (
            r.not_member,
            r.unauthenticated,
            r.unknown_client,
            r.wrong_timestamp
        ),
        (1, 2, 1, 1)
    );
    assert_eq!((r.malformed, r.unexpected_message, r.overflow), (1, 1, 0));
    assert!(
        !task.is_finished(),
        "accepted a page without f+1 genuine votes"
    );

    // 102's genuine reply was not shadowed by the impersonations.
    h.reply(102, 0, &request, PAGE);
    assert_eq!(finish(task).await.unwrap().page, PAGE);
    assert_eq!(endpoint.stats().rejected, r);
    endpoint.shutdown().await;
}

/// A node that no configuration epoch the endpoint knows has (a replica of a group added since
/// it last followed one) cannot open a link to it: what it sends never arrives, and its attempt
/// makes the endpoint ask the nodes for the newest configuration, under which the node's next
/// attempt would pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_from_a_node_the_endpoint_does_not_know_is_refused_and_it_asks_for_the_configuration(
) {
    let mut h = Harness::new("bank", 1).await;
    let endpoint = h.open(ClientOptions::default()).await;
    let task = invoke(&endpoint, b"op");
    let request = h.request_at(PRIMARY).await;

    let stranger = h.link_of(301).await;
    let frame = Envelope::encode(&Message::Reply(reply(301, 0, &request, PAGE)));
    stranger.send(h.endpoint.parse().unwrap(), frame);
    let asked = h.config_request().await;
    assert_eq!(
        (asked.client, asked.config_epoch),
        (request.client, h.cluster.epoch())
    );
    assert!(asked.verify(&client_key(request.client).public_key()));
    assert_eq!(
        stranger.stats().frames_sent,
        0,
        "a refused link carries nothing"
    );

    h.reply(101, 0, &request, PAGE);
    h.reply(102, 0, &request, PAGE);
    assert_eq!(finish(task).await.unwrap().page, PAGE);
    assert_eq!(endpoint.stats().rejected.total(), 0);
    stranger.shutdown().await;
    endpoint.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_reply_from_each_of_two_groups_is_not_a_quorum() {
    let mut h = Harness::new("bank", 4).await;
    let endpoint = h.open(ClientOptions::default()).await;
    let task = invoke(&endpoint, b"op");
    let request = h.request_at(PRIMARY).await;

    h.reply(101, 0, &request, PAGE);
    h.reply(201, 1, &request, PAGE);
    // A marker behind each on the same link (102's reply there): once both are counted, both
    // votes were.
    h.send_on(101, reply(102, 0, &request, PAGE));
    h.send_on(201, reply(102, 0, &request, PAGE));
    wait_until(&endpoint, "the markers are rejected", |s| {
        s.rejected.unauthenticated == 2
    })
    .await;
    assert!(!task.is_finished(), "accepted votes of two groups");

    h.reply(102, 0, &request, PAGE);
    let accepted = finish(task).await.unwrap();
    assert_eq!(accepted.group, GroupId(0));
    // 201's group does not serve partition 0, so its reply was refused, not outvoted.
    let stats = endpoint.stats();
    assert_eq!(
        (stats.rejected.not_serving, stats.disagreeing_replies),
        (1, 0)
    );
    endpoint.shutdown().await;
}

/// f+1 members of a group that does not serve the request's partition cannot answer it (no
/// correct one would: only the serving group orders it), and their replies are counted as
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_that_does_not_serve_the_request_cannot_answer_it() {
    let mut h = Harness::new("bank", 1).await;
    let endpoint = h.open(ClientOptions::default()).await;
    let task = invoke(&endpoint, b"op");
    let request = h.request_at(PRIMARY).await;

    h.reply(201, 1, &request, b"<p>balance: 1000000.00</p>");
    h.reply(202, 1, &request, b"<p>balance: 1000000.00</p>");
    wait_until(&endpoint, "group 1's replies are refused", |s| {
        s.rejected.not_serving == 2
    })
    .await;
    assert!(
        !task.is_finished(),
        "accepted a page of a group not serving"
    );

    h.reply(101, 0, &request, PAGE);
    h.reply(102, 0, &request, PAGE);
    let accepted = finish(task).await.unwrap();
    assert_eq!(
        (accepted.group, accepted.page.as_slice()),
        (GroupId(0), PAGE)
    );
    assert_eq!(endpoint.stats().rejected.total(), 2);
    endpoint.shutdown().await;
}

fn echo(request: &proto::Request) -> Vec<u8> {
    let mut page = b"page for ".to_vec();
    page.extend_from_slice(&request.operation);
    page
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_tasks_than_identities_all_complete() {
    const TASKS: u32 = 12;
    const EACH: u32 = 4;
    let mut h = Harness::new("bank", 3).await;
    let _reports = h.respond(echo);
    let endpoint = h.open(ClientOptions::default()).await;
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let endpoint = endpoint.clone();
            tokio::spawn(async move {
                let mut out = Vec::new();
                for i in 0..EACH {
                    let op = format!("task {t} op {i}").into_bytes();
                    let accepted = endpoint.invoke(vec![t % 4], op.clone()).await.unwrap();
                    let mut expected = b"page for ".to_vec();
                    expected.extend_from_slice(&op);
                    assert_eq!(accepted.page, expected);
                    assert_eq!(accepted.group, GroupId(t % 2));
                    out.push((accepted.client, accepted.timestamp));
                }
                out
            })
        })
        .collect();
    let mut requests = BTreeSet::new();
    for task in tasks {
        let done = tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
        requests.extend(done);
    }
    // Every request had its own (client, timestamp), and only the 3 identities were used.
    assert_eq!(requests.len(), (TASKS * EACH) as usize);
    let clients: BTreeSet<ClientId> = requests.iter().map(|(c, _)| *c).collect();
    assert_eq!(clients, (1..=3).map(ClientId).collect());
    let stats = endpoint.stats();
    assert_eq!(stats.accepted, u64::from(TASKS * EACH));
    assert_eq!(stats.requests_sent, u64::from(TASKS * EACH));
    assert_eq!(stats.rejected.total(), 0);
    endpoint.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gives_up_at_the_deadline_and_frees_the_identity() {
    let mut h = Harness::new("bank", 1).await;
    let endpoint = h
        .open(ClientOptions {
            deadline: Duration::from_millis(200),
            ..fast_retransmit()
        })
        .await;
    let error = finish(invoke(&endpoint, b"lost")).await.unwrap_err();
    assert!(matches!(error, ClientError::Timeout { .. }), "{error}");
    assert!(error.to_string().contains("f+1"), "{error}");
    let lost = h.request_at(PRIMARY).await;

    // The only identity is free again, with a later timestamp.
    let task = invoke(&endpoint, b"found");
    let request = h.request_after(lost.timestamp).await;
    assert_eq!(request.client, lost.client);
    // A reply to the abandoned request is late, not a vote.
    h.reply(101, 0, &lost, PAGE);
    h.reply(101, 0, &request, PAGE);
    h.reply(102, 0, &request, PAGE);
    assert_eq!(finish(task).await.unwrap().page, PAGE);
    let stats = wait_until(&endpoint, "the stale reply is counted", |s| {
        s.late_replies == 1
    })
    .await;
    assert_eq!((stats.timeouts, stats.accepted), (1, 1));
    endpoint.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamps_keep_increasing_across_restarts() {
    let mut h = Harness::new("bank", 1).await;
    let mut reports = h.respond(echo);
    let mut last = 0;
    for _ in 0..3 {
        // Each endpoint binds the address the previous one released at shutdown.
        let endpoint = h.open(ClientOptions::default()).await;
        let accepted = endpoint.invoke(vec![1], b"op".to_vec()).await.unwrap();
        assert!(accepted.timestamp > last);
        last = accepted.timestamp;
        // The fake primary saw it (skipping copies of earlier requests, should one have been
        // retransmitted).
        while reports.recv().await.unwrap().0.timestamp < last {}
        endpoint.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_fails_requests_in_progress_and_later_ones() {
    let mut h = Harness::new("bank", 1).await;
    let endpoint = h.open(ClientOptions::default()).await;
    let pending = invoke(&endpoint, b"op");
    let _ = h.request_at(PRIMARY).await;
    // The only identity is busy: this one waits for it.
    let waiting = invoke(&endpoint, b"op");
    endpoint.clone().shutdown().await;
    for task in [pending, waiting] {
        assert!(matches!(finish(task).await, Err(ClientError::Closed)));
    }
    assert!(matches!(
        endpoint.invoke(vec![0], b"op".to_vec()).await,
        Err(ClientError::Closed)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_names_what_is_missing() {
    let h = Harness::new("bank", 2).await;
    let open = |endpoint: String| {
        let cluster = Arc::clone(&h.cluster);
        let keys = h.keys().to_path_buf();
        async move {
            ClientEndpoint::open(cluster, &keys, &endpoint, ClientOptions::default())
                .await
                .err()
                .expect("open fails")
        }
    };
    let error = open("127.0.0.1:1".into()).await;
    assert!(
        matches!(&error, ClientError::Config { field, .. } if field == "client.addr"),
        "{error}"
    );

    std::fs::remove_file(proto::keys::client_key_path(h.keys(), ClientId(2))).unwrap();
    let error = open(h.endpoint.clone()).await;
    assert!(
        matches!(
            &error,
            ClientError::Key {
                client: ClientId(2),
                ..
            }
        ),
        "{error}"
    );
    write_key(h.keys(), ClientId(2));

    let options = ClientOptions {
        max_retransmit: Duration::from_millis(1),
        ..ClientOptions::default()
    };
    let error = ClientEndpoint::open(Arc::clone(&h.cluster), h.keys(), &h.endpoint, options)
        .await
        .err()
        .expect("open fails");
    assert!(
        error.to_string().contains("options.max_retransmit"),
        "{error}"
    );
}

/// An operation larger than any replica orders is refused at once, with what to do, and never
/// sent (a replica would give it no order, and the caller would wait for its deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_over_the_size_limit_is_refused_before_it_is_sent() {
    let mut h = Harness::new("bank", 1).await;
    let endpoint = h.open(ClientOptions::default()).await;
    let max = proto::limits::MAX_OPERATION_BYTES;
    let error = finish(invoke(&endpoint, &vec![1; max + 1]))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ClientError::OperationTooLarge { len, .. } if len == max + 1),
        "{error}"
    );
    assert!(error.to_string().contains("split it"), "{error}");
    // A request within the limit still goes out.
    let _task = invoke(&endpoint, b"op");
    assert_eq!(h.request_at(PRIMARY).await.operation, b"op".to_vec());
}
