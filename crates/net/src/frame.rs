//! Async length-prefixed frames: the format and limit semantics of [`wire::frame`] (a 4-byte
//! big-endian length, then that many bytes; oversized frames refused on both sides) over tokio
//! streams, so that a node's event loop never blocks a thread on a socket.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
pub use wire::FrameError;

/// Bytes of the length prefix.
pub const HEADER_LEN: usize = 4;

/// The payload buffer starts at most this large and doubles as bytes actually arrive, so a peer
/// that announces a large frame and then stalls costs little memory; it never exceeds the
/// announced length, itself at most `max`.
const INITIAL_PAYLOAD_CAPACITY: usize = 64 * 1024;

/// The length prefix of a `len`-byte payload, refused over `max` so that we never send what a
/// peer with the same limit would reject.
pub fn header(len: usize, max: usize) -> Result<[u8; HEADER_LEN], FrameError> {
    let too_large = FrameError::TooLarge { len, max };
    if len > max {
        return Err(too_large);
    }
    let len = u32::try_from(len).map_err(|_| too_large)?;
    Ok(len.to_be_bytes())
}

/// Appends one encoded frame (prefix and payload) to `buf`, for writers that batch frames.
pub fn encode_into(buf: &mut Vec<u8>, payload: &[u8], max: usize) -> Result<(), FrameError> {
    let header = header(payload.len(), max)?;
    buf.reserve(HEADER_LEN + payload.len());
    buf.extend_from_slice(&header);
    buf.extend_from_slice(payload);
    Ok(())
}

/// Writes one frame and flushes. Refuses payloads over `max`.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    payload: &[u8],
    max: usize,
) -> Result<(), FrameError> {
    let header = header(payload.len(), max)?;
    w.write_all(&header).await?;
    w.write_all(payload).await?;
    w.flush().await?;
    Ok(())
}

/// Reads one frame of at most `max` bytes. `Ok(None)` is a clean end of stream between frames;
/// a stream ending inside a frame is [`FrameError::Truncated`], a prefix over `max` is
/// [`FrameError::TooLarge`] (nothing is allocated for it).
///
/// Not cancel-safe: dropping the future mid-frame loses the bytes read so far, so callers only
/// cancel it when they abandon the stream.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<Option<Vec<u8>>, FrameError> {
    match read_header(r, max).await? {
        Some(len) => read_payload(r, len).await.map(Some),
        None => Ok(None),
    }
}

/// Reads a frame's length prefix: the payload's length, at most `max`, or `Ok(None)` at a clean
/// end of stream. With [`read_payload`], for readers that must make room for a frame before
/// they read it. Not cancel-safe, as [`read_frame`].
pub async fn read_header<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<Option<usize>, FrameError> {
    let mut header = [0u8; HEADER_LEN];
    match read_full(r, &mut header).await? {
        0 => return Ok(None),
        HEADER_LEN => {}
        _ => return Err(FrameError::Truncated),
    }
    let announced = u32::from_be_bytes(header);
    let len = usize::try_from(announced).map_err(|_| FrameError::TooLarge {
        len: usize::MAX,
        max,
    })?;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    Ok(Some(len))
}

/// Reads a payload of `len` bytes, whose prefix [`read_header`] read. Not cancel-safe, as
/// [`read_frame`].
pub async fn read_payload<R: AsyncRead + Unpin>(
    r: &mut R,
    len: usize,
) -> Result<Vec<u8>, FrameError> {
    let mut payload = Vec::with_capacity(len.min(INITIAL_PAYLOAD_CAPACITY));
    let mut filled = 0;
    while filled < len {
        if filled == payload.len() {
            let grown = payload
                .len()
                .saturating_mul(2)
                .max(INITIAL_PAYLOAD_CAPACITY)
                .min(len);
            payload.reserve_exact(grown - payload.len());
            payload.resize(grown, 0);
        }
        match r.read(&mut payload[filled..]).await {
            Ok(0) => return Err(FrameError::Truncated),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(payload)
}

/// Reads until `buf` is full or the stream ends; returns how many bytes were read.
async fn read_full<R: AsyncRead + Unpin>(r: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]).await {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::io::ReadBuf;

    #[tokio::test]
    async fn round_trip_clean_eof_and_same_format_as_wire() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"hello", 16).await.unwrap();
        write_frame(&mut buf, b"", 16).await.unwrap();
        encode_into(&mut buf, b"batched", 16).unwrap();

        let mut sync = Vec::new();
        wire::write_frame(&mut sync, b"hello", 16).unwrap();
        wire::write_frame(&mut sync, b"", 16).unwrap();
        wire::write_frame(&mut sync, b"batched", 16).unwrap();
        assert_eq!(buf, sync);

        let mut r = &buf[..];
        assert_eq!(read_frame(&mut r, 16).await.unwrap().unwrap(), b"hello");
        assert_eq!(read_frame(&mut r, 16).await.unwrap().unwrap(), b"");
        assert_eq!(read_frame(&mut r, 16).await.unwrap().unwrap(), b"batched");
        assert!(read_frame(&mut r, 16).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn oversized_frames_are_refused_both_ways() {
        let mut buf = Vec::new();
        assert!(matches!(
            write_frame(&mut buf, &[0; 17], 16).await,
            Err(FrameError::TooLarge { len: 17, max: 16 })
        ));
        assert!(matches!(
            encode_into(&mut buf, &[0; 17], 16),
            Err(FrameError::TooLarge { len: 17, max: 16 })
        ));
        assert!(buf.is_empty(), "nothing written for a refused frame");
        let header = u32::MAX.to_be_bytes();
        assert!(matches!(
            read_frame(&mut &header[..], 1024).await,
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[tokio::test]
    async fn truncation_anywhere_is_an_error() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &[7; 40], 64).await.unwrap();
        for cut in 1..buf.len() {
            assert!(
                matches!(
                    read_frame(&mut &buf[..cut], 64).await,
                    Err(FrameError::Truncated)
                ),
                "cut at {cut}"
            );
        }
    }

    /// Announces a large frame, then trickles bytes; records the largest read buffer offered.
    struct Trickle {
        header: Option<[u8; 4]>,
        remaining: usize,
        largest_buffer: usize,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            self.largest_buffer = self.largest_buffer.max(buf.remaining());
            if let Some(h) = self.header.take() {
                buf.put_slice(&h);
            } else if self.remaining > 0 {
                let n = self.remaining.min(1000).min(buf.remaining());
                buf.put_slice(&vec![1; n]);
                self.remaining -= n;
            }
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn memory_follows_the_bytes_that_arrive_not_the_announced_length() {
        let max = 8 << 20;
        let mut r = Trickle {
            header: Some((max as u32).to_be_bytes()),
            remaining: 3000,
            largest_buffer: 0,
        };
        assert!(matches!(
            read_frame(&mut r, max).await,
            Err(FrameError::Truncated)
        ));
        assert!(r.largest_buffer <= INITIAL_PAYLOAD_CAPACITY);
    }
}
