//! The whole pipeline across processes over real TCP: `cloudbft demo` (usigd per machine, the
//! primary, two groups of three replicas, three database nodes, the gateway) under concurrent
//! bank transfers through the client library, on SQLite and on PostgreSQL. Every page comes from
//! f+1 replicas; money is conserved; every database node ends in the same state; a restarted
//! cluster continues with the data. With the soft USIG and with a (software) TPM per machine.

mod common;

use client_plugin::client::{ClientEndpoint, ClientOptions};
use common::{balance, db_states, invoke, Demo, PgDatabases, Ports};
use dbvote::bank::BankOp;
use proto::config::Cluster;
use proto::testing::Rng;
use std::sync::Arc;

const BRANCHES: u32 = 4;
const ACCOUNTS: u32 = 4;
const INITIAL: u64 = 100_000;

/// The load driver's client endpoint (the gateway holds the first one).
async fn driver(demo: &Demo) -> ClientEndpoint {
    let cluster = Arc::new(Cluster::load(&demo.config()).unwrap());
    let endpoint = cluster.config.clients[1].addr.clone();
    ClientEndpoint::open(
        cluster,
        &demo.dir.join("keys"),
        &endpoint,
        ClientOptions::default(),
    )
    .await
    .expect("opening the load driver's client endpoint")
}

async fn total(client: &ClientEndpoint) -> u64 {
    let mut sum = 0;
    for branch in 0..BRANCHES {
        for number in 0..ACCOUNTS {
            sum += balance(&invoke(client, BankOp::Balance { branch, number }).await);
        }
    }
    sum
}

/// Opens the accounts, runs concurrent transfers (a third across branches: multi-partition),
/// checks that money is conserved.
async fn workload(client: &ClientEndpoint) {
    for branch in 0..BRANCHES {
        for number in 0..ACCOUNTS {
            let page = invoke(
                client,
                BankOp::Open {
                    branch,
                    number,
                    initial_cents: INITIAL,
                },
            )
            .await;
            assert!(page.contains("opened with balance 1000.00"), "{page}");
        }
    }
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(t);
            for _ in 0..12 {
                let from = (rng.below(u64::from(BRANCHES)) as u32, t as u32 % ACCOUNTS);
                let to_branch = if rng.chance(0.33) {
                    (from.0 + 1) % BRANCHES
                } else {
                    from.0
                };
                let to = (to_branch, (t as u32 + 1) % ACCOUNTS);
                let cents = rng.between(1, 5_000);
                let page = invoke(&client, BankOp::Transfer { from, to, cents }).await;
                assert!(
                    page.contains("Transferred") || page.contains("Insufficient funds"),
                    "{page}"
                );
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        total(client).await,
        u64::from(BRANCHES * ACCOUNTS) * INITIAL,
        "money is conserved"
    );
}

/// Every metrics endpoint of the demo (primaries, replicas and database nodes, at their
/// address's port + 1000 as the launcher gives them, and the gateway) names the build that
/// `cloudbft --version` names: an operator sees which build each node runs.
fn every_endpoint_names_the_build(demo: &Demo) {
    let version = common::cloudbft(&["--version"]);
    let build = version
        .trim_end()
        .strip_suffix(')')
        .and_then(|v| v.rsplit_once("(build "))
        .map(|(_, build)| build)
        .unwrap_or_else(|| panic!("no build in {version:?}"));
    let series = format!(
        "cloudbft_build_info{{version=\"{}\",build=\"{build}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    let c = Cluster::load(&demo.config()).unwrap().config;
    let nodes = c.primaries.iter().map(|p| &p.addr);
    let nodes = nodes.chain(c.replicas.iter().map(|r| &r.addr));
    let mut endpoints: Vec<std::net::SocketAddr> = nodes
        .chain(c.db_nodes.iter().map(|d| &d.addr))
        .map(|addr| {
            let addr: std::net::SocketAddr = addr.parse().unwrap();
            std::net::SocketAddr::new(addr.ip(), addr.port() + 1000)
        })
        .collect();
    endpoints.push(demo.gateway.parse().unwrap());
    for endpoint in endpoints {
        let text =
            node::metrics::scrape(endpoint).unwrap_or_else(|| panic!("no metrics at {endpoint}"));
        assert!(text.contains(&series), "{endpoint} lacks {series}:\n{text}");
    }
}

fn run(extra: &[&str]) {
    let ports = Ports::reserve();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cluster");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let extra = [&["--application", "bank"], extra].concat();
    let extra = extra.as_slice();
    let demo = Demo::start(&data, &ports, extra);
    every_endpoint_names_the_build(&demo);
    runtime.block_on(async {
        let client = driver(&demo).await;
        workload(&client).await;
        client.shutdown().await;
    });
    demo.stop();
    let states = runtime.block_on(db_states(&data.join("cluster.toml")));
    assert!(states[0].1 > 0, "nothing executed");
    assert!(
        states.iter().all(|s| *s == states[0]),
        "database nodes differ: {states:?}"
    );

    // Started again on the same data, the cluster continues where it stopped.
    let demo = Demo::start(&data, &ports, extra);
    runtime.block_on(async {
        let client = driver(&demo).await;
        assert_eq!(
            total(&client).await,
            u64::from(BRANCHES * ACCOUNTS) * INITIAL
        );
        let page = invoke(
            &client,
            BankOp::Deposit {
                branch: 1,
                number: 1,
                cents: 1,
            },
        )
        .await;
        assert!(page.contains("Balance of account 1/1"), "{page}");
        client.shutdown().await;
    });
    demo.stop();
    let after = runtime.block_on(db_states(&data.join("cluster.toml")));
    assert!(after.iter().all(|s| *s == after[0]), "{after:?}");
    assert!(
        after[0].1 > states[0].1,
        "the restarted cluster executed nothing"
    );
}

#[test]
fn bank_cluster_on_sqlite() {
    run(&[]);
}

#[test]
fn bank_cluster_with_tpm_usig() {
    // A swtpm per simulated machine; a restart is a new TPM epoch for every identity.
    run(&["--usig", "tpm"]);
}

#[test]
fn bank_cluster_on_postgres() {
    let databases = PgDatabases::new("t");
    run(&databases.args());
}
