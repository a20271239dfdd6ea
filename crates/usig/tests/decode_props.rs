//! Properties of the USIG's decoders (issue 17): unique warrants, the TPM quote's TPMS_ATTEST,
//! the attestation-key blob, the usigd socket protocol, usigd's configuration and enrollment
//! records. For arbitrary valid values encode → decode is the identity; arbitrary bytes and
//! mutated valid encodings never panic, and what is accepted is canonical. The fuzz targets
//! `warrant`, `tpm_structures`, `usigd_protocol` and `usigd_config` check the same with
//! coverage guidance.

use proptest::prelude::*;
use std::path::Path;
use usig::attest::{QuoteAttest, TPM_ALG_SHA256, TPM_GENERATED_VALUE, TPM_ST_ATTEST_QUOTE};
use usig::daemon::config::{IdentityConfig, TpmConfig, UsigdConfig};
use usig::daemon::protocol::{Request, Response};
use usig::tpm::device::AkBlob;
use usig::{
    Certificate, Enrollment, EnrollmentRecord, Epoch, EpochOffset, TpmCertificate, UniqueWarrant,
    UsigId,
};
use wire::testing::mutated;

fn bytes(range: std::ops::Range<usize>) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), range)
}

fn sig64() -> impl Strategy<Value = [u8; 64]> {
    (any::<[u8; 32]>(), any::<[u8; 32]>()).prop_map(|(a, b)| {
        let mut s = [0; 64];
        s[..32].copy_from_slice(&a);
        s[32..].copy_from_slice(&b);
        s
    })
}

fn warrant() -> impl Strategy<Value = UniqueWarrant> {
    let certificate = prop_oneof![
        sig64().prop_map(|signature| Certificate::Soft { signature }),
        (any::<[u8; 32]>(), bytes(1..300), sig64()).prop_map(|(prev, attest, signature)| {
            Certificate::Tpm(TpmCertificate {
                prev,
                attest,
                signature,
            })
        }),
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

/// The fields of a quote as a TPM marshals them (TPM 2.0 Part 2, 10.12).
#[derive(Clone, Debug)]
struct Quote {
    signer: Vec<u8>,
    extra: Vec<u8>,
    reset: u32,
    restart: u32,
    banks: Vec<(u16, Vec<u8>)>,
    pcr_digest: Vec<u8>,
}

impl Quote {
    fn marshal(&self) -> Vec<u8> {
        fn sized(out: &mut Vec<u8>, b: &[u8]) {
            out.extend_from_slice(&(b.len() as u16).to_be_bytes());
            out.extend_from_slice(b);
        }
        let mut out = TPM_GENERATED_VALUE.to_be_bytes().to_vec();
        out.extend_from_slice(&TPM_ST_ATTEST_QUOTE.to_be_bytes());
        sized(&mut out, &self.signer);
        sized(&mut out, &self.extra);
        out.extend_from_slice(&7u64.to_be_bytes());
        out.extend_from_slice(&self.reset.to_be_bytes());
        out.extend_from_slice(&self.restart.to_be_bytes());
        out.push(1);
        out.extend_from_slice(&9u64.to_be_bytes());
        out.extend_from_slice(&(self.banks.len() as u32).to_be_bytes());
        for (hash, bitmap) in &self.banks {
            out.extend_from_slice(&hash.to_be_bytes());
            out.push(bitmap.len() as u8);
            out.extend_from_slice(bitmap);
        }
        sized(&mut out, &self.pcr_digest);
        out
    }
}

fn quote() -> impl Strategy<Value = Quote> {
    (
        bytes(0..36),
        bytes(0..33),
        any::<u32>(),
        any::<u32>(),
        proptest::collection::vec((any::<u16>(), bytes(0..5)), 0..3),
        bytes(0..33),
    )
        .prop_map(|(signer, extra, reset, restart, banks, pcr_digest)| Quote {
            signer,
            extra,
            reset,
            restart,
            banks,
            pcr_digest,
        })
}

fn usigd_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (any::<u16>(), any::<u64>())
            .prop_map(|(version, identity)| Request::Hello { version, identity }),
        any::<[u8; 32]>().prop_map(|digest| Request::Create { digest }),
        Just(Request::Last),
        Just(Request::Enrollment),
        Just(Request::Epoch),
    ]
}

fn usigd_response() -> impl Strategy<Value = Response> {
    prop_oneof![
        Just(Response::Welcome),
        bytes(0..128).prop_map(|warrant| Response::Warrant { warrant }),
        proptest::option::of((any::<[u8; 32]>(), bytes(0..64)))
            .prop_map(|last| Response::Last { last }),
        ".{0,64}".prop_map(|toml| Response::Enrollment { toml }),
        any::<u64>().prop_map(|epoch| Response::Epoch { epoch }),
        ".{0,64}".prop_map(|message| Response::Error { message }),
    ]
}

fn enrollment() -> impl Strategy<Value = (UsigId, Enrollment)> {
    let soft = any::<[u8; 32]>().prop_map(|public_key| Enrollment::Soft { public_key });
    let tpm = (
        any::<[u8; 32]>(),
        any::<[u8; 32]>(),
        any::<u32>(),
        any::<u32>(),
        0u8..16,
        any::<[u8; 32]>(),
    )
        .prop_map(|(a, b, reset, restart, pcr, tpm_identity)| {
            let mut ak_public_key = [4u8; 65];
            ak_public_key[1..33].copy_from_slice(&a);
            ak_public_key[33..].copy_from_slice(&b);
            Enrollment::Tpm {
                ak_public_key,
                epoch_offset: EpochOffset { reset, restart },
                pcr,
                tpm_identity,
            }
        });
    // TOML integers are i64: larger ids cannot be written in a configuration at all.
    (0..=i64::MAX as u64, prop_oneof![soft, tpm]).prop_map(|(id, e)| (UsigId(id), e))
}

fn usigd_config() -> impl Strategy<Value = UsigdConfig> {
    (
        "/[a-z]{1,8}(/[a-z0-9._-]{1,8}){0,2}",
        proptest::option::of("(device:/dev/tpmrm0|swtpm:path=/run/[a-z]{1,6}.sock)"),
        proptest::collection::btree_map(0..=i64::MAX as u64, any::<bool>(), 1..4),
    )
        .prop_map(|(state_dir, tcti, ids)| UsigdConfig {
            state_dir: state_dir.into(),
            identities: ids
                .keys()
                .enumerate()
                .map(|(i, &id)| IdentityConfig {
                    id,
                    socket: format!("/run/usigd/{id}.sock").into(),
                    pcr: tcti.as_ref().map(|_| i as u8),
                })
                .collect(),
            tpm: tcti.map(|tcti| TpmConfig { tcti }),
        })
}

/// Runs every decoder of this crate on `bytes`; what one accepts must re-encode to `bytes`.
fn decode_all(bytes: &[u8]) {
    if let Ok(w) = UniqueWarrant::from_bytes(bytes) {
        assert_eq!(w.to_bytes(), bytes);
    }
    if let Ok(blob) = AkBlob::from_bytes(bytes) {
        assert_eq!(blob.to_bytes(), bytes);
    }
    let _ = QuoteAttest::parse(bytes);
    if let Ok(r) = wire::decode::<Request>(bytes) {
        assert_eq!(wire::encode(&r).unwrap(), bytes);
    }
    if let Ok(r) = wire::decode::<Response>(bytes) {
        assert_eq!(wire::encode(&r).unwrap(), bytes);
    }
    if let Ok(text) = std::str::from_utf8(bytes) {
        let _ = UsigdConfig::parse(text, Path::new("t.toml"));
        if let Ok(record) = toml::from_str::<EnrollmentRecord>(text) {
            let _ = record.parse();
        }
    }
}

proptest! {
    #[test]
    fn warrants_round_trip(w in warrant()) {
        prop_assert_eq!(UniqueWarrant::from_bytes(&w.to_bytes()).unwrap(), w.clone());
        prop_assert_eq!(wire::decode::<UniqueWarrant>(&wire::encode(&w).unwrap()).unwrap(), w);
    }

    #[test]
    fn quotes_parse_to_their_fields(q in quote()) {
        let parsed = QuoteAttest::parse(&q.marshal()).unwrap();
        prop_assert_eq!(parsed.extra_data, q.extra);
        prop_assert_eq!((parsed.reset_count, parsed.restart_count), (q.reset, q.restart));
        prop_assert_eq!(parsed.pcr_select, q.banks);
        prop_assert_eq!(parsed.pcr_digest, q.pcr_digest);
        prop_assert_eq!(parsed.magic, TPM_GENERATED_VALUE);
        let _ = TPM_ALG_SHA256;
    }

    #[test]
    fn ak_blobs_round_trip(public in bytes(1..200), private in bytes(1..200)) {
        let blob = AkBlob { public, private };
        prop_assert_eq!(AkBlob::from_bytes(&blob.to_bytes()).unwrap(), blob);
    }

    #[test]
    fn usigd_messages_round_trip(request in usigd_request(), response in usigd_response()) {
        prop_assert_eq!(wire::decode::<Request>(&wire::encode(&request).unwrap()).unwrap(), request);
        prop_assert_eq!(wire::decode::<Response>(&wire::encode(&response).unwrap()).unwrap(), response);
    }

    #[test]
    fn usigd_configurations_round_trip(config in usigd_config()) {
        let text = toml::to_string(&config).unwrap();
        prop_assert_eq!(UsigdConfig::parse(&text, Path::new("t.toml")).unwrap(), config);
    }

    #[test]
    fn enrollment_records_round_trip((id, e) in enrollment()) {
        let text = toml::to_string(&EnrollmentRecord::new(id, &e)).unwrap();
        let record: EnrollmentRecord = toml::from_str(&text).unwrap();
        prop_assert_eq!(record.parse().unwrap(), (id, e));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in bytes(0..400)) {
        decode_all(&bytes);
    }

    #[test]
    fn mutated_encodings_never_panic(
        w in warrant(), q in quote(), r in usigd_response(), c in usigd_config(),
        at in any::<usize>(), byte in any::<u8>(), how in any::<u8>()
    ) {
        let config = toml::to_string(&c).unwrap().into_bytes();
        for valid in [w.to_bytes(), q.marshal(), wire::encode(&r).unwrap(), config] {
            decode_all(&mutated(&valid, at, byte, how));
        }
    }
}
