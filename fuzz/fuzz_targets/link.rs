//! The authenticated links of `net::link`: a HELLO or REPLY of any bytes, and any stream of
//! frames on a link, is accepted or refused without a panic. Whatever parses as a HELLO or a
//! REPLY re-encodes to exactly its input, and a frame opens only if it is what the sender's
//! sealer makes at its place in the stream (so no other bytes, and no replayed or reordered
//! frame, ever reach the node).
#![no_main]

use libfuzzer_sys::fuzz_target;
use net::link::{derive_key, is_hello, parse_reply, reply, Hello, Sealer, Unsealer};

fuzz_target!(|data: &[u8]| {
    if let Ok(hello) = Hello::parse(data) {
        assert!(is_hello(data));
        assert_eq!(
            hello.encode(),
            data,
            "a HELLO parsed from other bytes than its encoding"
        );
    }
    if let Ok(ephemeral) = parse_reply(data) {
        assert_eq!(
            reply(&ephemeral),
            data,
            "a REPLY parsed from other bytes than its encoding"
        );
    }
    let key = || derive_key(b"fuzz shared secret", b"fuzz transcript").expect("HKDF");
    let (mut sealer, mut unsealer) = (Sealer::new(key()), Unsealer::new(key()));
    let mut stream = data;
    while let Ok(Some(frame)) = wire::read_frame(&mut stream, 4096) {
        match unsealer.open(frame.clone()) {
            Ok(payload) => assert_eq!(
                sealer.seal(&payload),
                frame,
                "a frame opened that the sealer does not make at this place"
            ),
            // The transport closes the connection at the first frame that does not open.
            Err(_) => break,
        }
    }
});
