//! Length-prefixed frames on a byte stream: the blocking reader (`wire::read_frame`, usigd's
//! socket) and the async one (`net::frame::read_frame`, every TCP connection between nodes).
//! Both must read the same frames and stop the same way, never allocate past the limit, and
//! writing the frames they read must give back the bytes they consumed.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[derive(Debug, PartialEq)]
enum End {
    Clean,
    TooLarge(usize),
    Truncated,
}

fuzz_target!(|data: &[u8]| {
    // The first byte sets the limit, so that inputs reach both sides of it.
    let Some((&limit, stream)) = data.split_first() else {
        return;
    };
    let max = usize::from(limit) * 4;

    let mut sync = stream;
    let mut frames = Vec::new();
    let end = loop {
        match wire::read_frame(&mut sync, max) {
            Ok(Some(frame)) => frames.push(frame),
            Ok(None) => break End::Clean,
            Err(wire::FrameError::TooLarge { len, max: m }) => {
                assert_eq!(m, max);
                assert!(len > max);
                break End::TooLarge(len);
            }
            Err(wire::FrameError::Truncated) => break End::Truncated,
            Err(e) => panic!("reading from memory failed: {e}"),
        }
    };

    let mut nonblocking = stream;
    let mut async_frames = Vec::new();
    let async_end = loop {
        match cloudbft_fuzz::block_on(net::frame::read_frame(&mut nonblocking, max)) {
            Ok(Some(frame)) => async_frames.push(frame),
            Ok(None) => break End::Clean,
            Err(net::frame::FrameError::TooLarge { len, .. }) => break End::TooLarge(len),
            Err(net::frame::FrameError::Truncated) => break End::Truncated,
            Err(e) => panic!("reading from memory failed: {e}"),
        }
    };
    assert_eq!(frames, async_frames, "the two frame readers disagree");
    assert_eq!(end, async_end, "the two frame readers stop differently");

    let mut written = Vec::new();
    for frame in &frames {
        assert!(frame.len() <= max);
        wire::write_frame(&mut written, frame, max).expect("a frame that was read can be written");
    }
    assert_eq!(
        written,
        stream[..written.len()],
        "re-framing changed the bytes"
    );
    if end == End::Clean {
        assert_eq!(written.len(), stream.len(), "a clean end left bytes unread");
    }
});
