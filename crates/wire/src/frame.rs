//! Length-prefixed frames: a 4-byte big-endian length, then that many bytes.

use std::io::{self, Read, Write};

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer announced a frame larger than this connection accepts.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    /// The stream ended in the middle of a frame.
    #[error("connection closed in the middle of a frame")]
    Truncated,
    /// Any other I/O failure.
    #[error("i/o error on frame stream: {0}")]
    Io(#[from] io::Error),
}

/// Writes one frame. Refuses payloads over `max` so that we never send what a peer with the same
/// limit would reject.
pub fn write_frame<W: Write>(w: &mut W, payload: &[u8], max: usize) -> Result<(), FrameError> {
    if payload.len() > max {
        return Err(FrameError::TooLarge {
            len: payload.len(),
            max,
        });
    }
    let len = u32::try_from(payload.len()).map_err(|_| FrameError::TooLarge {
        len: payload.len(),
        max,
    })?;
    // One write: a reader blocked on the header would otherwise wake for it alone and block
    // again for the payload (two context switches more per frame on each side of usigd's
    // socket).
    let mut frame = Vec::with_capacity(4 + payload.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(payload);
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame of at most `max` bytes. `Ok(None)` is a clean end of stream between frames.
pub fn read_frame<R: Read>(r: &mut R, max: usize) -> Result<Option<Vec<u8>>, FrameError> {
    let mut header = [0u8; 4];
    match read_full(r, &mut header)? {
        0 => return Ok(None),
        4 => {}
        _ => return Err(FrameError::Truncated),
    }
    let len = u32::from_be_bytes(header) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let mut payload = vec![0u8; len];
    if read_full(r, &mut payload)? != len {
        return Err(FrameError::Truncated);
    }
    Ok(Some(payload))
}

/// Reads until `buf` is full or the stream ends; returns how many bytes were read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_clean_eof() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"hello", 16).unwrap();
        write_frame(&mut buf, b"", 16).unwrap();
        let mut r = &buf[..];
        assert_eq!(read_frame(&mut r, 16).unwrap().unwrap(), b"hello");
        assert_eq!(read_frame(&mut r, 16).unwrap().unwrap(), b"");
        assert!(read_frame(&mut r, 16).unwrap().is_none());
    }

    #[test]
    fn oversized_frames_are_refused_both_ways() {
        let mut buf = Vec::new();
        assert!(matches!(
            write_frame(&mut buf, &[0; 17], 16),
            Err(FrameError::TooLarge { len: 17, max: 16 })
        ));
        let header = (1u32 << 31).to_be_bytes();
        assert!(matches!(
            read_frame(&mut &header[..], 1024),
            Err(FrameError::TooLarge { .. })
        ));
    }

    proptest! {
        #[test]
        fn truncated_frames_are_errors(payload in proptest::collection::vec(any::<u8>(), 1..64)) {
            let mut buf = Vec::new();
            write_frame(&mut buf, &payload, 64).unwrap();
            for cut in 1..buf.len() {
                prop_assert!(matches!(read_frame(&mut &buf[..cut], 64), Err(FrameError::Truncated)));
            }
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let mut r = &bytes[..];
            while let Ok(Some(_)) = read_frame(&mut r, 64) {}
        }
    }
}
