//! Seed inputs for every fuzz target: valid encodings of real values, built with the same
//! constructors the roles use (signed, warranted by the test cluster's soft USIGs, or by a
//! hand-marshalled TPM quote), so that the fuzzer starts from what the decoders accept and
//! mutates from there. Deterministic: the same seeds on every run (Ed25519 signing is).

use dbvote::{BankOp, BankResult};
use group::order::OrderBook;
use proto::testing::{self, TestCluster};
use proto::{
    chain, chain_start, Anchor, Checkpoint, ClientId, Commit, CommitDb, ConfigEpoch, ConfigRequest,
    Configure, DbCheckpoint, Decided, Envelope, EpochClose, EpochStarted, Execution, FetchCommits,
    FetchPrepares, GroupId, Join, Lineage, Message, NewView, NodeId, PositionReport,
    PositionRequest, Prepare, PrepareEntry, Proposal, Reconfigure, RecoveryRequest, RecoveryState,
    Reply, ReplyCommitDb, ReqViewChange, Signature, StableCheckpoint, StateChunk, StateRequest,
    TableRows, Value, View, ViewChange, ViewChangeBody, Warranted,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use tpcc::txn::{
    CustomerSelector, Delivery, InvalidInput, NewOrder, NewOrderLine, OrderStatus, Payment,
    StockLevel, TpccOp, TpccResult,
};
use usig::attest::{TPM_ALG_SHA256, TPM_GENERATED_VALUE, TPM_ST_ATTEST_QUOTE};
use usig::daemon::config::{IdentityConfig, TpmConfig, UsigdConfig};
use usig::daemon::protocol;
use usig::tpm::device::AkBlob;
use usig::warrant::{extend, tpm_entry};
use usig::{
    Certificate, Enrollment, EnrollmentRecord, Epoch, EpochOffset, MessageDigest, TpmCertificate,
    UniqueWarrant, Usig, UsigId,
};

/// Seed inputs by target name.
pub type Corpus = BTreeMap<&'static str, Vec<Vec<u8>>>;

/// Every target's seeds.
pub fn corpus() -> Corpus {
    let s = Seeds::new();
    let messages = s.messages();
    let mut corpus = Corpus::new();
    let envelopes: Vec<Vec<u8>> = messages.iter().map(Envelope::encode).collect();
    corpus.insert("frames", frames(&envelopes));
    corpus.insert("link", link(&envelopes));
    corpus.insert("envelope", envelopes.clone());
    corpus.insert(
        "new_view",
        s.new_views().iter().map(NewView::encode).collect(),
    );
    corpus.insert(
        "warrant",
        s.warrants().iter().map(UniqueWarrant::to_bytes).collect(),
    );
    corpus.insert("tpm_structures", tpm_structures());
    corpus.insert("usigd_protocol", s.usigd_protocol());
    corpus.insert("usigd_config", usigd_configs());
    corpus.insert("cluster_config", cluster_configs());
    corpus.insert("decision_log", decision_logs(&envelopes));
    corpus.insert("state_chunk", state_transfer(&messages));
    corpus.insert("order_book", s.order_books());
    corpus.insert("app_ops", app_ops());
    corpus.insert("gateway_form", gateway_forms());
    corpus.insert("voter_transfer", voter_transfers());
    corpus
}

/// The cluster every seed message belongs to, and the targets that need one check against.
pub fn cluster() -> TestCluster {
    TestCluster::new(1, 2, 4, 2)
}

struct Seeds {
    cluster: TestCluster,
    request: proto::Request,
    prepare: Prepare,
    join: Join,
    commit: Commit,
    checkpoint: Checkpoint,
    tpm: UniqueWarrant,
}

const EPOCH: ConfigEpoch = ConfigEpoch(1);
const PRIMARY: NodeId = NodeId(0);
const REPLICA: NodeId = NodeId(101);

impl Seeds {
    fn new() -> Self {
        let cluster = cluster();
        let mut primary = testing::usig(PRIMARY);
        let mut replica = testing::usig(REPLICA);
        let request = testing::request(1, 1, &[0]);
        let join = Join {
            replica: REPLICA,
            config_epoch: EPOCH,
            ui: replica
                .create_ui(&Join::warranted_bytes(REPLICA, EPOCH))
                .expect("soft warrant"),
        };
        let entries = vec![PrepareEntry {
            group: GroupId(0),
            request: request.clone(),
        }];
        let joins = vec![join.clone()];
        let ui = primary
            .create_ui(&Prepare::warranted_bytes(
                View(0),
                EPOCH,
                PRIMARY,
                &entries,
                &joins,
                None,
            ))
            .expect("soft warrant");
        let prepare = Prepare {
            view: View(0),
            config_epoch: EPOCH,
            primary: PRIMARY,
            entries,
            joins,
            reconfigure: None,
            ui,
        };
        let proposal = prepare.digest();
        let prefix = chain(&chain_start(EPOCH), &proposal);
        let ui = replica
            .create_ui(&Commit::warranted_bytes(
                View(0),
                REPLICA,
                1,
                &proposal,
                &prefix,
            ))
            .expect("soft warrant");
        let commit = Commit {
            view: View(0),
            replica: REPLICA,
            slot: 1,
            proposal,
            prefix,
            prepare: Some(std::sync::Arc::new(prepare.clone())),
            ui,
        };
        let book = OrderBook::new(&cluster.cluster).digest();
        let anchors = vec![Anchor::of(REPLICA, &commit.ui)];
        let ui = replica
            .create_ui(&Checkpoint::warranted_bytes(
                REPLICA,
                128,
                &prefix,
                &book,
                &Lineage::GENESIS,
                &anchors,
                &[NodeId(0)],
            ))
            .expect("soft warrant");
        let checkpoint = Checkpoint {
            replica: REPLICA,
            slot: 128,
            chain: prefix,
            book,
            lineage: Lineage::GENESIS,
            anchors,
            followed: vec![NodeId(0)],
            ui,
        };
        Seeds {
            cluster,
            request,
            prepare,
            join,
            commit,
            checkpoint,
            tpm: tpm_warrant(UsigId(1101), 1, &MessageDigest::of(b"tpm seed")),
        }
    }

    fn stable(&self) -> StableCheckpoint {
        StableCheckpoint {
            certificate: vec![self.checkpoint.clone()],
            book: Arc::new(OrderBook::new(&self.cluster.cluster).encode()),
        }
    }

    /// A VIEW-CHANGE to `next_view` on `base` (the NEW-VIEW it last accepted).
    fn view_change(&self, next_view: View, base: Option<&NewView>) -> ViewChange {
        let body = ViewChangeBody {
            checkpoint: Some(self.stable()),
            base: base.map(|nv| proto::Base::Carried(nv.encode())),
            prepares: vec![std::sync::Arc::new(self.prepare.clone())],
            log: vec![
                Warranted::Commit(self.commit.stub()),
                Warranted::ViewChange {
                    next_view: View(next_view.0.saturating_sub(1)),
                    body: MessageDigest::of(b"earlier body"),
                    ui: self.commit.ui.clone(),
                },
                Warranted::Checkpoint(self.checkpoint.clone()),
            ],
            anchor_proof: vec![self.checkpoint.clone()],
        };
        ViewChange {
            replica: REPLICA,
            group: GroupId(0),
            next_view,
            body,
            ui: self.tpm.clone(),
        }
    }

    /// NEW-VIEWs of views 1 and 2, the second's VIEW-CHANGE carrying the first as its base.
    fn new_views(&self) -> Vec<NewView> {
        let mut views: Vec<NewView> = Vec::new();
        for view in 1..=2 {
            let base = views.last();
            let vc = self.view_change(View(view), base);
            views.push(NewView {
                view: View(view),
                config_epoch: EPOCH,
                primary: NodeId(view as u32),
                view_changes: vec![vc],
                ui: self.commit.ui.clone(),
            });
        }
        views
    }

    fn warrants(&self) -> Vec<UniqueWarrant> {
        vec![
            self.commit.ui.clone(),
            self.prepare.ui.clone(),
            self.tpm.clone(),
            tpm_warrant(UsigId(1101), 2, &MessageDigest::of(b"second")),
        ]
    }

    /// One of every protocol message.
    fn messages(&self) -> Vec<Message> {
        let key = testing::node_key(REPLICA);
        let db_key = testing::node_key(NodeId(11));
        let new_views = self.new_views();
        let recovery_state = |at, base| {
            Message::RecoveryState(Box::new(
                RecoveryState {
                    replica: REPLICA,
                    stable: self.stable(),
                    witness: MessageDigest::of(b"witness"),
                    at,
                    base,
                    signature: Signature([0; 64]),
                }
                .sign(&key),
            ))
        };
        // Reconfiguration: the next epoch's configuration and the certificate of this one's end
        // (signatures are not checked by the decoders).
        let next = toml::to_string(&self.cluster.cluster.config).expect("a config is TOML");
        let book = OrderBook::new(&self.cluster.cluster).encode();
        let close = EpochClose {
            replica: REPLICA,
            config_epoch: EPOCH,
            view: View(0),
            slot: 1,
            chain: self.commit.prefix,
            book: MessageDigest::of(&book),
            signature: Signature([0; 64]),
        }
        .sign(&key);
        let mut tpm_commit = self.commit.clone();
        tpm_commit.ui = self.tpm.clone();
        vec![
            Message::Request(self.request.clone()),
            Message::Request(proto::Request::signed(
                ClientId(2),
                7,
                vec![0, 3],
                BankOp::Transfer {
                    from: (0, 1),
                    to: (3, 2),
                    cents: 250,
                }
                .encode(),
                &testing::client_key(ClientId(2)),
            )),
            Message::Prepare(self.prepare.clone()),
            Message::Commit(self.commit.clone()),
            Message::Commit(tpm_commit),
            Message::CommitDb(CommitDb {
                config_epoch: EPOCH,
                group: GroupId(0),
                replica: REPLICA,
                executions: vec![Execution {
                    order: 1,
                    positions: vec![(0, 1)],
                    request: self.request.body(),
                }],
            }),
            Message::ReplyCommitDb(ReplyCommitDb {
                db_node: NodeId(11),
                results: vec![(1, BankResult::Ok { balance_cents: 5 }.encode())],
            }),
            Message::Reply(Reply {
                config_epoch: EPOCH,
                view: View(0),
                group: GroupId(0),
                replica: REPLICA,
                client: ClientId(1),
                timestamp: 1,
                page: b"<!doctype html><p>ok</p>".to_vec(),
            }),
            Message::FetchPrepares(
                FetchPrepares {
                    replica: REPLICA,
                    counters: 1..=5,
                    signature: Signature([0; 64]),
                }
                .sign(&key),
            ),
            Message::FetchCommits(
                FetchCommits {
                    replica: REPLICA,
                    warrants: Some(2..=3),
                    slots: vec![1, 2],
                    signature: Signature([0; 64]),
                }
                .sign(&key),
            ),
            Message::ReqViewChange(
                ReqViewChange {
                    replica: REPLICA,
                    next_view: View(1),
                    signature: Signature([0; 64]),
                }
                .sign(&key),
            ),
            Message::ViewChange(self.view_change(View(2), new_views.first())),
            Message::NewView(new_views[0].clone()),
            Message::NewView(new_views[1].clone()),
            Message::Checkpoint(self.checkpoint.clone()),
            Message::StateRequest(
                StateRequest {
                    db_node: NodeId(13),
                    target_order: 7,
                    sender: NodeId(11),
                    signature: Signature([0; 64]),
                }
                .sign(&testing::node_key(NodeId(13))),
            ),
            Message::DbCheckpoint(
                DbCheckpoint {
                    db_node: NodeId(11),
                    target: 7,
                    order: 7,
                    digest: Some([9; 32]),
                    signature: Signature([0; 64]),
                }
                .sign(&db_key),
            ),
            Message::StateChunk(
                StateChunk {
                    db_node: NodeId(11),
                    order: 7,
                    index: 0,
                    last: true,
                    rows: TableRows {
                        table: 0,
                        columns: ["branch", "number", "balance_cents", "note", "raw", "gone"]
                            .map(String::from)
                            .to_vec(),
                        rows: vec![vec![
                            Value::Int(0),
                            Value::Int(-1),
                            Value::Real(1.5f64.to_bits()),
                            Value::Text("é".into()),
                            Value::Bytes(vec![0, 255]),
                            Value::Null,
                        ]],
                    },
                    signature: Signature([0; 64]),
                }
                .sign(&db_key),
            ),
            Message::Join(self.join.clone()),
            Message::RecoveryRequest(
                RecoveryRequest {
                    replica: REPLICA,
                    signature: Signature([0; 64]),
                }
                .sign(&key),
            ),
            recovery_state(
                Proposal::NewView(new_views[1].clone()),
                Some(new_views[0].encode()),
            ),
            recovery_state(Proposal::Prepare(self.prepare.clone()), None),
            Message::Reconfigure(Reconfigure {
                config_epoch: EPOCH,
                next: next.clone(),
                reply_to: "127.0.0.1:7000".into(),
                signature: Signature([0; 64]),
            }),
            Message::EpochClose(close.clone()),
            Message::Configure(Box::new(Configure {
                config: next,
                certificate: vec![close],
                book: book.clone(),
                reply_to: "127.0.0.1:7000".into(),
                signature: Signature([0; 64]),
            })),
            Message::PositionRequest(PositionRequest {
                config_epoch: ConfigEpoch(2),
                reply_to: "127.0.0.1:7000".into(),
                signature: Signature([0; 64]),
            }),
            Message::PositionReport(PositionReport {
                node: REPLICA,
                config_epoch: EPOCH,
                last: Some((MessageDigest::of(b"last"), self.commit.ui.clone())),
                book: Some(book),
                signature: Signature([0; 64]),
            }),
            Message::ConfigRequest(ConfigRequest {
                client: ClientId(1),
                config_epoch: EPOCH,
                signature: Signature([0; 64]),
            }),
            Message::EpochStarted(EpochStarted {
                node: REPLICA,
                config_epoch: ConfigEpoch(2),
                signature: Signature([0; 64]),
            }),
            Message::Decided(Decided {
                view: View(0),
                counter: 7,
            }),
        ]
    }

    fn usigd_protocol(&self) -> Vec<Vec<u8>> {
        let record = EnrollmentRecord::new(
            UsigId(1101),
            &Enrollment::Tpm {
                ak_public_key: [4; 65],
                epoch_offset: EpochOffset {
                    reset: 1,
                    restart: 2,
                },
                pcr: 8,
                tpm_identity: [7; 32],
            },
        );
        let soft = EnrollmentRecord::new(
            UsigId(1101),
            &Enrollment::Soft {
                public_key: testing::usig(REPLICA).public_key(),
            },
        );
        let digest = [3; 32];
        let requests = [
            protocol::Request::Hello {
                version: protocol::PROTOCOL_VERSION,
                identity: 1101,
            },
            protocol::Request::Create { digest },
            protocol::Request::Last,
            protocol::Request::Enrollment,
            protocol::Request::Epoch,
        ];
        let responses = [
            protocol::Response::Welcome,
            protocol::Response::Warrant {
                warrant: self.commit.ui.to_bytes(),
            },
            protocol::Response::Warrant {
                warrant: self.tpm.to_bytes(),
            },
            protocol::Response::Last {
                last: Some((digest, self.tpm.to_bytes())),
            },
            protocol::Response::Last { last: None },
            protocol::Response::Enrollment {
                toml: toml::to_string(&record).expect("a record is TOML"),
            },
            protocol::Response::Enrollment {
                toml: toml::to_string(&soft).expect("a record is TOML"),
            },
            protocol::Response::Epoch { epoch: 1 << 32 },
            protocol::Response::Error {
                message: "identity 7 is not served here".into(),
            },
        ];
        let encode = |v: &dyn erased::Encode| v.encode();
        requests
            .iter()
            .map(|r| encode(r))
            .chain(responses.iter().map(|r| encode(r)))
            .collect()
    }

    fn order_books(&self) -> Vec<Vec<u8>> {
        let cluster = &self.cluster.cluster;
        let fresh = OrderBook::new(cluster);
        let mut joined = fresh.clone();
        assert!(joined.join(cluster, &self.join), "the seed JOIN is valid");
        let mut ordered = joined.clone();
        ordered.order(
            cluster,
            &testing::BytesArePartitions,
            &self.prepare,
            &|_| false,
            &mut proto::batch::RootCache::default(),
        );
        vec![fresh.encode(), joined.encode(), ordered.encode()]
    }
}

/// Object-safe encoding for the seed lists of mixed types.
mod erased {
    pub trait Encode {
        fn encode(&self) -> Vec<u8>;
    }

    impl<T: serde::Serialize> Encode for T {
        fn encode(&self) -> Vec<u8> {
            wire::encode(self).expect("seed values encode")
        }
    }
}

/// A TPMS_ATTEST of a quote, marshalled as a TPM does (TPM 2.0 Part 2, 10.12).
pub fn quote_attest(extra: &[u8], reset: u32, restart: u32, pcr: u8, pcr_digest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let sized = |out: &mut Vec<u8>, bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
        out.extend_from_slice(bytes);
    };
    out.extend_from_slice(&TPM_GENERATED_VALUE.to_be_bytes());
    out.extend_from_slice(&TPM_ST_ATTEST_QUOTE.to_be_bytes());
    sized(&mut out, &[0x00, 0x0b, 0x11, 0x22]); // qualified signer (a name)
    sized(&mut out, extra);
    out.extend_from_slice(&123_456u64.to_be_bytes()); // clock
    out.extend_from_slice(&reset.to_be_bytes());
    out.extend_from_slice(&restart.to_be_bytes());
    out.push(1); // safe
    out.extend_from_slice(&0x2023_0101u64.to_be_bytes()); // firmware version
    out.extend_from_slice(&1u32.to_be_bytes()); // one PCR bank
    out.extend_from_slice(&TPM_ALG_SHA256.to_be_bytes());
    let mut bitmap = [0u8; 3];
    bitmap[usize::from(pcr / 8)] = 1 << (pcr % 8);
    out.push(bitmap.len() as u8);
    out.extend_from_slice(&bitmap);
    sized(&mut out, pcr_digest);
    out
}

/// A TPM warrant as usigd makes one (its signature is not a real AK's: the decoders do not
/// need one, and the verifier's paths up to the signature check do not either).
fn tpm_warrant(identity: UsigId, counter: u64, digest: &MessageDigest) -> UniqueWarrant {
    let prev = [0u8; 32];
    let entry = tpm_entry(identity, counter, digest);
    let next = extend(&prev, &entry);
    let attest = quote_attest(&entry, 0, 0, 8, &MessageDigest::of(&next).0);
    UniqueWarrant {
        identity,
        epoch: Epoch(0),
        counter,
        certificate: Certificate::Tpm(TpmCertificate {
            prev,
            attest,
            signature: [5; 64],
        }),
    }
}

fn tpm_structures() -> Vec<Vec<u8>> {
    let entry = [1u8; 32];
    vec![
        quote_attest(&entry, 3, 4, 8, &[2; 32]),
        quote_attest(&[], 0, 0, 23, &[]),
        AkBlob {
            public: vec![0, 0x23, 0, 0x0b, 1, 2, 3],
            private: vec![9; 40],
        }
        .to_bytes(),
    ]
}

/// Frame streams: each envelope in its own frame, then all of them in one stream.
fn frames(envelopes: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let framed = |payloads: &[Vec<u8>]| {
        // The target reads frames of at most 4 × its first byte.
        let mut out = vec![u8::MAX];
        for p in payloads {
            wire::write_frame(&mut out, p, 1020).expect("seed fits");
        }
        out
    };
    let small: Vec<Vec<u8>> = envelopes
        .iter()
        .filter(|e| e.len() <= 1020)
        .cloned()
        .collect();
    let mut seeds: Vec<Vec<u8>> = small
        .iter()
        .take(4)
        .map(|e| framed(std::slice::from_ref(e)))
        .collect();
    seeds.push(framed(&small));
    seeds.push(vec![8, 0, 0, 0, 0, 0, 0, 0, 3, 1, 2]); // an empty frame, then a truncated one
    seeds
}

/// A HELLO, a REPLY, and the first frames of a link sealed with the key the `link` target uses,
/// in order and with the second one replayed.
fn link(envelopes: &[Vec<u8>]) -> Vec<Vec<u8>> {
    use net::link::{derive_key, reply, Hello, Sealer};
    let hello = Hello {
        opener: 101,
        acceptor: 11,
        ephemeral: [7; 32],
    };
    let key = derive_key(b"fuzz shared secret", b"fuzz transcript").expect("HKDF");
    let mut sealer = Sealer::new(key);
    let sealed: Vec<Vec<u8>> = envelopes
        .iter()
        .filter(|e| e.len() <= 1024)
        .take(3)
        .map(|e| sealer.seal(e))
        .collect();
    let stream = |frames: &[&Vec<u8>]| {
        let mut out = Vec::new();
        for f in frames {
            wire::write_frame(&mut out, f, 4096).expect("seed fits");
        }
        out
    };
    vec![
        hello.encode(),
        reply(&[9; 32]),
        stream(&sealed.iter().collect::<Vec<_>>()),
        stream(&[&sealed[0], &sealed[1], &sealed[1]]),
    ]
}

fn usigd_configs() -> Vec<Vec<u8>> {
    let identity = |id: u64, pcr| IdentityConfig {
        id,
        socket: format!("/run/usigd/{id}.sock").into(),
        pcr,
    };
    let soft = UsigdConfig {
        state_dir: "/var/lib/usigd".into(),
        tpm: None,
        identities: vec![identity(1101, None), identity(1102, None)],
    };
    let tpm = UsigdConfig {
        tpm: Some(TpmConfig {
            tcti: "swtpm:path=/run/swtpm.sock".into(),
        }),
        identities: vec![identity(1101, Some(8))],
        ..soft.clone()
    };
    [soft, tpm]
        .iter()
        .map(|c| toml::to_string(c).expect("a config is TOML").into_bytes())
        .collect()
}

fn cluster_configs() -> Vec<Vec<u8>> {
    [cluster(), TestCluster::new(0, 1, 1, 1)]
        .iter()
        .map(|c| {
            toml::to_string(&c.cluster.config)
                .expect("a config is TOML")
                .into_bytes()
        })
        .collect()
}

fn decision_logs(envelopes: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let log = |records: &[Vec<u8>]| -> Vec<u8> {
        records
            .iter()
            .flat_map(|r| group::log::frame_record(r))
            .collect()
    };
    let small: Vec<Vec<u8>> = envelopes
        .iter()
        .filter(|e| e.len() < 600)
        .take(3)
        .cloned()
        .collect();
    let whole = log(&small);
    let mut torn = whole.clone();
    torn.truncate(whole.len() - 3);
    let mut zeros = log(&[b"one".to_vec()]);
    zeros.extend_from_slice(&[0; 16]);
    vec![whole, torn, zeros, log(&[b"a".to_vec(), b"bc".to_vec()])]
}

fn state_transfer(messages: &[Message]) -> Vec<Vec<u8>> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::StateChunk(c) => Some(wire::encode(c)),
            Message::DbCheckpoint(c) => Some(wire::encode(c)),
            Message::StateRequest(r) => Some(wire::encode(r)),
            _ => None,
        })
        .map(|bytes| bytes.expect("seed values encode"))
        .collect()
}

fn app_ops() -> Vec<Vec<u8>> {
    let line = |i_id, supply_w_id| NewOrderLine {
        i_id,
        supply_w_id,
        quantity: 5,
    };
    let tpcc = [
        TpccOp::NewOrder(NewOrder {
            w_id: 1,
            d_id: 2,
            c_id: 3,
            entry_d: 1_767_225_600,
            lines: vec![line(10, 1), line(11, 2)],
        }),
        TpccOp::Payment(Payment {
            w_id: 1,
            d_id: 2,
            c_w_id: 2,
            c_d_id: 3,
            customer: CustomerSelector::LastName("BARBARBAR".into()),
            h_amount: 1234,
            h_date: 1_767_225_600,
        }),
        TpccOp::OrderStatus(OrderStatus {
            w_id: 1,
            d_id: 2,
            customer: CustomerSelector::Id(7),
        }),
        TpccOp::Delivery(Delivery {
            w_id: 1,
            o_carrier_id: 3,
            delivery_d: 1_767_225_600,
        }),
        TpccOp::StockLevel(StockLevel {
            w_id: 1,
            d_id: 2,
            threshold: 15,
        }),
    ];
    let bank = [
        BankOp::Open {
            branch: 0,
            number: 1,
            initial_cents: 100,
        },
        BankOp::Deposit {
            branch: 1,
            number: 1,
            cents: 5,
        },
        BankOp::Transfer {
            from: (0, 1),
            to: (2, 1),
            cents: 7,
        },
        BankOp::Balance {
            branch: 3,
            number: 9,
        },
    ];
    let results = [
        TpccResult::Invalid(InvalidInput {
            field: "d_id".into(),
            problem: "11 is out of range".into(),
        })
        .encode(),
        BankResult::InsufficientFunds { balance_cents: 3 }.encode(),
    ];
    tpcc.iter()
        .map(TpccOp::encode)
        .chain(bank.iter().map(BankOp::encode))
        .chain([dbvote::noop::NoopOp {
            partitions: vec![0, 2],
            payload: vec![1; 16],
        }
        .encode()])
        .chain(results)
        .collect()
}

fn gateway_forms() -> Vec<Vec<u8>> {
    let mut lines = String::from("w_id=1&d_id=2&c_id=3");
    for (n, (item, supply)) in [(10, ""), (11, "2"), (12, "")].iter().enumerate() {
        let n = n + 1;
        lines += &format!("&ol_i_id_{n}={item}&ol_supply_w_id_{n}={supply}&ol_quantity_{n}=4");
    }
    [
        "branch=0&number=7&cents=100",
        "from_branch=0&from_number=7&to_branch=3&to_number=1&cents=250",
        "partition=2&payload=hello+world%21",
        lines.as_str(),
        "w_id=1&d_id=2&c_w_id=2&c_d_id=3&c_last=BARBARBAR&h_amount=12.34",
        "w_id=1&d_id=2&c_id=7",
        "w_id=2&o_carrier_id=3",
        "w_id=1&d_id=2&threshold=15",
    ]
    .iter()
    .map(|body| body.as_bytes().to_vec())
    .collect()
}

/// Whole state transfers as `voter_transfer` replays them: node 11 stalls behind order 3 and
/// installs rows from node 12 with digests of 12 and 13; node 11 serves node 12's request.
fn voter_transfers() -> Vec<Vec<u8>> {
    use crate::VoterEvent::*;
    let rows = |table| TableRows {
        table,
        columns: vec!["k".into(), "v".into()],
        rows: vec![vec![Value::Int(1), Value::Text("a".into())]],
    };
    let checkpoint = |from, digest| Checkpoint {
        from,
        forged: false,
        target: 3,
        order: 3,
        digest,
    };
    let chunk = |index, last| Chunk {
        from: 1,
        forged: false,
        order: 3,
        index,
        last,
        rows: rows(index),
    };
    let behind = vec![
        Decide {
            order: 3,
            partition: 0,
            position: 2,
        },
        Ticks(40),
        chunk(0, false),
        chunk(1, true),
        checkpoint(1, Some([7; 32])),
        checkpoint(2, Some([7; 32])),
        Installed {
            order: 3,
            last_seq: vec![2, 0],
        },
        Decide {
            order: 4,
            partition: 0,
            position: 3,
        },
        Executed(0),
    ];
    let disagreeing = vec![
        Decide {
            order: 3,
            partition: 0,
            position: 2,
        },
        Ticks(40),
        chunk(0, true),
        checkpoint(1, Some([1; 32])),
        checkpoint(2, Some([2; 32])),
        checkpoint(2, None),
        Ticks(100),
        InstallFailed(3),
    ];
    let serving = vec![
        Decide {
            order: 1,
            partition: 0,
            position: 1,
        },
        Decide {
            order: 2,
            partition: 1,
            position: 1,
        },
        Request {
            from: 1,
            target: 2,
            sender: 0,
        },
        Executed(0),
        Executed(0),
        SnapshotPinned(2),
        Decide {
            order: 3,
            partition: 0,
            position: 2,
        },
    ];
    [behind, disagreeing, serving]
        .iter()
        .map(|events| wire::encode(events).expect("seed events encode"))
        .collect()
}
