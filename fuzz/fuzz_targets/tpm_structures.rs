//! TPM structures parsed in software: the TPMS_ATTEST of a quote (`QuoteAttest::parse`, from a
//! warrant a Byzantine sender chose) and the attestation-key blob usigd keeps on disk
//! (`AkBlob::from_bytes`). Both parse exactly: no shorter or longer input gives the same
//! result, and the blob re-encodes to its bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use usig::attest::QuoteAttest;
use usig::tpm::device::AkBlob;

fuzz_target!(|data: &[u8]| {
    if let Ok(quote) = QuoteAttest::parse(data) {
        assert!(QuoteAttest::parse(&data[..data.len() - 1]).is_err());
        let mut longer = data.to_vec();
        longer.push(0);
        assert!(QuoteAttest::parse(&longer).is_err());
        for pcr in 0..=u8::MAX {
            if quote.selects_only(pcr) {
                assert!((0..=u8::MAX).filter(|&p| quote.selects_only(p)).count() == 1);
            }
        }
    }
    if let Ok(blob) = AkBlob::from_bytes(data) {
        assert_eq!(
            blob.to_bytes(),
            data,
            "an accepted AK blob is not canonical"
        );
    }
});
