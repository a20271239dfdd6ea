//! Unique warrants (`UniqueWarrant::from_bytes`, inside every warranted message) and their
//! verification against soft and TPM enrollments, which parses the TPM quote inside: accepted
//! warrants re-encode to the same bytes, and verification of anything decodable returns.
#![no_main]

use libfuzzer_sys::fuzz_target;
use usig::{Directory, Enrollment, EpochOffset, MessageDigest, UniqueWarrant};

fuzz_target!(|data: &[u8]| {
    let Ok(warrant) = UniqueWarrant::from_bytes(data) else {
        return;
    };
    assert_eq!(
        warrant.to_bytes(),
        data,
        "an accepted warrant is not canonical"
    );
    let as_field: UniqueWarrant =
        wire::decode(&wire::encode(&warrant).expect("a warrant encodes")).expect("and decodes");
    assert_eq!(as_field, warrant);

    let digest = MessageDigest::of(b"tpm seed");
    for enrollment in [
        Enrollment::Soft {
            public_key: [1; 32],
        },
        Enrollment::Tpm {
            ak_public_key: [4; 65],
            epoch_offset: EpochOffset::default(),
            pcr: 8,
            tpm_identity: [0; 32],
        },
    ] {
        let mut directory = Directory::new();
        directory.enroll(warrant.identity, enrollment);
        // Real keys are not at hand: nothing may verify, but every path up to the signature
        // must return rather than panic.
        assert!(directory
            .verify_digest(warrant.identity, &digest, &warrant)
            .is_err());
    }
});
