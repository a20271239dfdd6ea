//! Properties of the protocol's decoders (issue 17): for arbitrary values of every message,
//! `Envelope::encode` → `Envelope::decode` is the identity (and `NewView::encode` →
//! `NewView::decode` for the bases VIEW-CHANGEs carry); arbitrary bytes and mutated valid
//! envelopes never panic, and what is accepted is canonical; a written cluster configuration
//! parses back to itself, and no configuration text panics. The fuzz targets `envelope`,
//! `new_view` and `cluster_config` check the same with coverage guidance.

use proptest::prelude::*;
use proto::config::Cluster;
use proto::testing::TestCluster;
use proto::*;
use std::sync::Arc;
use usig::{Certificate, Epoch, MessageDigest, TpmCertificate, UniqueWarrant, UsigId};
use wire::testing::mutated;

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

fn digest() -> impl Strategy<Value = MessageDigest> {
    any::<[u8; 32]>().prop_map(MessageDigest)
}

fn batch_signature() -> impl Strategy<Value = BatchSignature> {
    (
        any::<u32>(),
        any::<u32>(),
        prop::collection::vec(any::<[u8; 32]>(), 0..14),
        signature(),
    )
        .prop_map(|(count, index, path, signature)| BatchSignature {
            count,
            index,
            path,
            signature,
        })
}

fn signature() -> impl Strategy<Value = Signature> {
    (any::<[u8; 32]>(), any::<[u8; 32]>()).prop_map(|(a, b)| {
        let mut s = [0; 64];
        s[..32].copy_from_slice(&a);
        s[32..].copy_from_slice(&b);
        Signature(s)
    })
}

fn warrant() -> impl Strategy<Value = UniqueWarrant> {
    let certificate = prop_oneof![
        signature().prop_map(|s| Certificate::Soft { signature: s.0 }),
        (
            any::<[u8; 32]>(),
            proptest::collection::vec(any::<u8>(), 1..64),
            signature()
        )
            .prop_map(|(prev, attest, s)| Certificate::Tpm(TpmCertificate {
                prev,
                attest,
                signature: s.0
            })),
    ];
    (any::<u64>(), any::<u64>(), any::<u64>(), certificate).prop_map(
        |(i, e, counter, certificate)| UniqueWarrant {
            identity: UsigId(i),
            epoch: Epoch(e),
            counter,
            certificate,
        },
    )
}

fn request() -> impl Strategy<Value = Request> {
    (
        any::<u64>(),
        any::<u64>(),
        proptest::collection::vec(any::<u32>(), 0..4),
        bytes(32),
        batch_signature(),
    )
        .prop_map(
            |(client, timestamp, partitions, operation, signature)| Request {
                client: ClientId(client),
                timestamp,
                partitions,
                operation,
                signature,
            },
        )
}

fn join() -> impl Strategy<Value = Join> {
    (any::<u32>(), any::<u64>(), warrant()).prop_map(|(r, e, ui)| Join {
        replica: NodeId(r),
        config_epoch: ConfigEpoch(e),
        ui,
    })
}

fn prepare() -> impl Strategy<Value = Prepare> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        proptest::collection::vec((any::<u32>(), request()), 0..3),
        proptest::collection::vec(join(), 0..2),
        warrant(),
        proptest::option::of(reconfigure()),
    )
        .prop_map(
            |(view, epoch, primary, entries, joins, ui, reconfigure)| Prepare {
                view: View(view),
                config_epoch: ConfigEpoch(epoch),
                primary: NodeId(primary),
                entries: entries
                    .into_iter()
                    .map(|(g, request)| PrepareEntry {
                        group: GroupId(g),
                        request,
                    })
                    .collect(),
                joins,
                reconfigure: reconfigure.map(Box::new),
                ui,
            },
        )
}

fn commit() -> impl Strategy<Value = Commit> {
    (
        any::<u64>(),
        any::<u32>(),
        any::<u64>(),
        digest(),
        digest(),
        proptest::option::of(prepare()),
        warrant(),
    )
        .prop_map(
            |(view, replica, slot, proposal, prefix, prepare, ui)| Commit {
                view: View(view),
                replica: NodeId(replica),
                slot,
                proposal,
                prefix,
                prepare: prepare.map(std::sync::Arc::new),
                ui,
            },
        )
}

fn checkpoint() -> impl Strategy<Value = Checkpoint> {
    let anchor = (any::<u32>(), any::<u64>(), any::<u64>(), any::<[u8; 32]>()).prop_map(
        |(replica, epoch, counter, chain)| Anchor {
            replica: NodeId(replica),
            epoch,
            counter,
            chain,
        },
    );
    (
        any::<u32>(),
        any::<u64>(),
        digest(),
        digest(),
        lineage(),
        (
            proptest::collection::vec(anchor, 0..3),
            proptest::collection::vec(any::<u32>().prop_map(NodeId), 0..3),
        ),
        warrant(),
    )
        .prop_map(
            |(replica, slot, chain, book, lineage, (anchors, followed), ui)| Checkpoint {
                replica: NodeId(replica),
                slot,
                chain,
                book,
                lineage,
                anchors,
                followed,
                ui,
            },
        )
}

fn lineage() -> impl Strategy<Value = Lineage> {
    (any::<u64>(), digest(), any::<u64>(), any::<u64>()).prop_map(|(view, nv, counter, slot)| {
        Lineage {
            view: View(view),
            new_view: nv,
            counter,
            slot,
        }
    })
}

/// Bases as a replica makes them ([`Base::Shared`] exists only inside a NEW-VIEW's encoding).
fn base() -> impl Strategy<Value = Base> {
    prop_oneof![
        lineage().prop_map(Base::Named),
        // Two lengths, so that NEW-VIEWs often hold two VIEW-CHANGEs with the same base.
        prop_oneof![bytes(2), bytes(48)].prop_map(Base::Carried),
    ]
}

fn stable() -> impl Strategy<Value = StableCheckpoint> {
    // Two lengths, so that NEW-VIEWs often hold two stable checkpoints with the same book.
    let book = prop_oneof![bytes(2), bytes(32)].prop_map(Arc::new);
    (proptest::collection::vec(checkpoint(), 0..2), book)
        .prop_map(|(certificate, book)| StableCheckpoint { certificate, book })
}

fn view_change() -> impl Strategy<Value = ViewChange> {
    let warranted = prop_oneof![
        commit().prop_map(|c| Warranted::Commit(c.stub())),
        (any::<u64>(), digest(), warrant()).prop_map(|(v, body, ui)| Warranted::ViewChange {
            next_view: View(v),
            body,
            ui
        }),
        checkpoint().prop_map(Warranted::Checkpoint),
    ];
    let body = (
        proptest::option::of(stable()),
        proptest::option::of(base()),
        proptest::collection::vec(prepare(), 0..2),
        proptest::collection::vec(warranted, 0..3),
        proptest::collection::vec(checkpoint(), 0..2),
    )
        .prop_map(
            |(checkpoint, base, prepares, log, anchor_proof)| ViewChangeBody {
                checkpoint,
                base,
                prepares: prepares.into_iter().map(Arc::new).collect(),
                log,
                anchor_proof,
            },
        );
    (any::<u32>(), any::<u32>(), any::<u64>(), body, warrant()).prop_map(
        |(replica, group, next_view, body, ui)| ViewChange {
            replica: NodeId(replica),
            group: GroupId(group),
            next_view: View(next_view),
            body,
            ui,
        },
    )
}

fn new_view() -> impl Strategy<Value = NewView> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        proptest::collection::vec(view_change(), 0..3),
        any::<bool>(),
        warrant(),
    )
        .prop_map(|(view, epoch, primary, mut view_changes, shared, ui)| {
            // VIEW-CHANGEs of one NEW-VIEW mostly show the same PREPAREs, which its encoding
            // holds once.
            if let [first, second, ..] = &mut view_changes[..] {
                if shared {
                    second.body.prepares.clone_from(&first.body.prepares);
                }
            }
            NewView {
                view: View(view),
                config_epoch: ConfigEpoch(epoch),
                primary: NodeId(primary),
                view_changes,
                ui,
            }
        })
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::Int),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(Value::Real),
        ".{0,8}".prop_map(Value::Text),
        bytes(16).prop_map(Value::Bytes),
    ]
}

fn reconfigure() -> impl Strategy<Value = Reconfigure> {
    (any::<u64>(), ".{0,32}", ".{0,16}", signature()).prop_map(
        |(epoch, next, reply_to, signature)| Reconfigure {
            config_epoch: ConfigEpoch(epoch),
            next,
            reply_to,
            signature,
        },
    )
}

fn epoch_close() -> impl Strategy<Value = EpochClose> {
    (
        any::<u32>(),
        any::<u64>().prop_map(ConfigEpoch),
        any::<u64>(),
        any::<u64>(),
        digest(),
        digest(),
        signature(),
    )
        .prop_map(
            |(replica, config_epoch, view, slot, chain, book, signature)| EpochClose {
                replica: NodeId(replica),
                config_epoch,
                view: View(view),
                slot,
                chain,
                book,
                signature,
            },
        )
}

/// The reconfiguration messages (docs/protocol.md, "Reconfiguration").
fn reconfiguration() -> impl Strategy<Value = Message> {
    let epoch = any::<u64>().prop_map(ConfigEpoch);
    prop_oneof![
        reconfigure().prop_map(Message::Reconfigure),
        epoch_close().prop_map(Message::EpochClose),
        (
            ".{0,32}",
            proptest::collection::vec(epoch_close(), 0..2),
            bytes(32),
            ".{0,16}",
            signature()
        )
            .prop_map(|(config, certificate, book, reply_to, signature)| {
                Message::Configure(Box::new(Configure {
                    config,
                    certificate,
                    book,
                    reply_to,
                    signature,
                }))
            }),
        (epoch.clone(), ".{0,16}", signature()).prop_map(|(config_epoch, reply_to, signature)| {
            Message::PositionRequest(PositionRequest {
                config_epoch,
                reply_to,
                signature,
            })
        }),
        (
            any::<u32>(),
            epoch.clone(),
            proptest::option::of((digest(), warrant())),
            proptest::option::of(bytes(32)),
            signature()
        )
            .prop_map(|(node, config_epoch, last, book, signature)| {
                Message::PositionReport(PositionReport {
                    node: NodeId(node),
                    config_epoch,
                    last,
                    book,
                    signature,
                })
            }),
        (any::<u64>(), epoch.clone(), signature()).prop_map(|(client, config_epoch, signature)| {
            Message::ConfigRequest(ConfigRequest {
                client: ClientId(client),
                config_epoch,
                signature,
            })
        }),
        (any::<u32>(), epoch, signature()).prop_map(|(node, config_epoch, signature)| {
            Message::EpochStarted(reconfig::EpochStarted {
                node: NodeId(node),
                config_epoch,
                signature,
            })
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(view, counter)| {
            Message::Decided(Decided {
                view: View(view),
                counter,
            })
        }),
    ]
}

fn reply() -> impl Strategy<Value = Reply> {
    (
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        bytes(64),
    )
        .prop_map(|(view, group, replica, client, timestamp, page)| Reply {
            config_epoch: ConfigEpoch(view),
            view: View(view),
            group: GroupId(group),
            replica: NodeId(replica),
            client: ClientId(client),
            timestamp,
            page,
        })
}

fn message() -> impl Strategy<Value = Message> {
    let node = any::<u32>().prop_map(NodeId);
    prop_oneof![
        request().prop_map(Message::Request),
        prepare().prop_map(Message::Prepare),
        commit().prop_map(Message::Commit),
        (
            any::<u64>(),
            any::<u32>(),
            node.clone(),
            proptest::collection::vec(
                (
                    any::<u64>(),
                    proptest::collection::vec((any::<u32>(), any::<u64>()), 0..3),
                    request()
                ),
                0..3
            ),
        )
            .prop_map(
                |(epoch, group, replica, executions)| Message::CommitDb(CommitDb {
                    config_epoch: ConfigEpoch(epoch),
                    group: GroupId(group),
                    replica,
                    executions: executions
                        .into_iter()
                        .map(|(order, positions, request)| Execution {
                            order,
                            positions,
                            request: request.body(),
                        })
                        .collect(),
                })
            ),
        (
            node.clone(),
            proptest::collection::vec((any::<u64>(), bytes(16)), 0..3),
        )
            .prop_map(|(db_node, results)| Message::ReplyCommitDb(ReplyCommitDb {
                db_node,
                results
            })),
        reply().prop_map(Message::Reply),
        proptest::collection::vec(request(), 0..3).prop_map(Message::Requests),
        proptest::collection::vec(reply(), 0..3).prop_map(Message::Replies),
        (node.clone(), any::<u64>(), any::<u64>(), signature()).prop_map(
            |(replica, a, b, signature)| {
                Message::FetchPrepares(FetchPrepares {
                    replica,
                    counters: a..=b,
                    signature,
                })
            }
        ),
        (
            node.clone(),
            proptest::option::of((any::<u64>(), any::<u64>())),
            proptest::collection::vec(any::<u64>(), 0..4),
            signature()
        )
            .prop_map(|(replica, w, slots, signature)| Message::FetchCommits(
                FetchCommits {
                    replica,
                    warrants: w.map(|(a, b)| a..=b),
                    slots,
                    signature,
                }
            )),
        (node.clone(), any::<u64>(), signature()).prop_map(|(replica, v, signature)| {
            Message::ReqViewChange(ReqViewChange {
                replica,
                next_view: View(v),
                signature,
            })
        }),
        view_change().prop_map(Message::ViewChange),
        new_view().prop_map(Message::NewView),
        checkpoint().prop_map(Message::Checkpoint),
        (node.clone(), any::<u64>(), node.clone(), signature()).prop_map(
            |(db_node, target_order, sender, signature)| {
                Message::StateRequest(StateRequest {
                    db_node,
                    target_order,
                    sender,
                    signature,
                })
            }
        ),
        (
            node.clone(),
            any::<u64>(),
            any::<u64>(),
            proptest::option::of(any::<[u8; 32]>()),
            signature()
        )
            .prop_map(
                |(db_node, target, order, digest, signature)| Message::DbCheckpoint(DbCheckpoint {
                    db_node,
                    target,
                    order,
                    digest,
                    signature,
                })
            ),
        (
            node.clone(),
            (any::<u64>(), any::<u32>(), any::<bool>(), any::<u32>()),
            proptest::collection::vec("[a-z_]{1,8}", 0..3),
            proptest::collection::vec(proptest::collection::vec(value(), 0..3), 0..3),
            signature()
        )
            .prop_map(
                |(db_node, (order, index, last, table), columns, rows, signature)| {
                    Message::StateChunk(StateChunk {
                        db_node,
                        order,
                        index,
                        last,
                        rows: TableRows {
                            table,
                            columns,
                            rows,
                        },
                        signature,
                    })
                }
            ),
        join().prop_map(Message::Join),
        (node.clone(), signature()).prop_map(|(replica, signature)| {
            Message::RecoveryRequest(RecoveryRequest { replica, signature })
        }),
        (
            node,
            stable(),
            digest(),
            prop_oneof![
                prepare().prop_map(Proposal::Prepare),
                new_view().prop_map(Proposal::NewView)
            ],
            proptest::option::of(bytes(32)),
            signature()
        )
            .prop_map(|(replica, stable, witness, at, base, signature)| {
                Message::RecoveryState(Box::new(RecoveryState {
                    replica,
                    stable,
                    witness,
                    at,
                    base,
                    signature,
                }))
            }),
        reconfiguration(),
    ]
}

fn decode_checked(bytes: &[u8]) {
    if let Ok(message) = Envelope::decode(bytes) {
        assert_eq!(
            Envelope::encode(&message),
            bytes,
            "accepted a non-canonical envelope"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn envelope_encode_then_decode_is_the_identity(m in message()) {
        prop_assert_eq!(Envelope::decode(&Envelope::encode(&m)).unwrap(), m);
    }

    #[test]
    fn new_view_encode_then_decode_is_the_identity(nv in new_view()) {
        prop_assert_eq!(NewView::decode(&nv.encode()).unwrap(), nv);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in bytes(512)) {
        decode_checked(&bytes);
        let _ = NewView::decode(&bytes);
    }

    #[test]
    fn mutated_envelopes_never_panic_and_accepted_ones_are_canonical(
        m in message(), at in any::<usize>(), byte in any::<u8>(), how in any::<u8>()
    ) {
        decode_checked(&mutated(&Envelope::encode(&m), at, byte, how));
    }

    #[test]
    fn a_written_cluster_configuration_parses_back_to_itself(
        f in 0usize..3, groups in 1u32..4, partitions in 1u32..9, clients in 0u64..4
    ) {
        let config = TestCluster::new(f, groups, partitions.max(groups), clients).cluster.config;
        let text = toml::to_string(&config).unwrap();
        prop_assert_eq!(Cluster::parse(&text, "t.toml").unwrap().config, config);
    }

    #[test]
    fn no_configuration_text_panics(
        at in any::<usize>(), byte in 0x20u8..0x7f, how in any::<u8>(), garbage in ".{0,64}"
    ) {
        let config = TestCluster::new(1, 2, 4, 1).cluster.config;
        let text = toml::to_string(&config).unwrap();
        let _ = Cluster::parse(&garbage, "t.toml");
        if let Ok(changed) = String::from_utf8(mutated(text.as_bytes(), at, byte, how)) {
            let _ = Cluster::parse(&changed, "t.toml");
        }
    }
}

/// Found by the property test above and the fuzz target `envelope`: postcard reads a varint
/// with redundant continuation bytes (`80 00` for 0), so one message had many accepted
/// encodings. `wire::decode` now refuses every encoding but the canonical one.
#[test]
fn redundant_varint_bytes_are_refused() {
    let message = Message::RecoveryRequest(RecoveryRequest {
        replica: NodeId(0),
        signature: Signature([0; 64]),
    });
    let canonical = Envelope::encode(&message);
    // The version, variant 16, replica 0, the signature's length 64, then its bytes.
    assert_eq!(canonical[..4], [message::PROTOCOL_VERSION as u8, 16, 0, 64]);
    assert_eq!(Envelope::decode(&canonical).unwrap(), message);
    let mut overlong = canonical.clone();
    overlong.splice(2..3, [0x80, 0x00]);
    assert!(matches!(
        Envelope::decode(&overlong),
        Err(message::EnvelopeError::Codec(
            wire::CodecError::NonCanonical
        ))
    ));
}
