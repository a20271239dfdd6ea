//! Every protocol message as a node receives it: `Envelope::decode` of a frame's payload. What
//! it accepts must be the message's canonical encoding, and so must every NEW-VIEW nested in it
//! (VIEW-CHANGE bases, RECOVERY-STATE), followed as validators follow them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::Envelope;

fuzz_target!(|data: &[u8]| {
    let Ok(message) = Envelope::decode(data) else {
        return;
    };
    assert!(
        Envelope::encode(&message) == data,
        "an accepted envelope is not canonical: {message:?}"
    );
    cloudbft_fuzz::check_nested(&message);
});
