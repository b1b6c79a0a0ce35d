//! Frame I/O on byte streams (feature `quic`): one frame = 16-byte header + payload.
//!
//! The header is checked before the payload is read, so an oversized or foreign frame is refused
//! without reading (or allocating) its declared length; a payload's buffer grows only as its bytes
//! arrive ([`read_payload`]), so a peer that announces a large frame and sends nothing costs
//! nothing.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::frame::{Frame, FrameError, FrameHeader, HEADER_LEN};

/// Reading or writing a frame failed.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The stream failed.
    #[error("stream I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent a bad frame.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// A frame of a kind not allowed at this point (checked on the header, before its payload).
    #[error("expected a {expected} frame, got {got}")]
    UnexpectedKind {
        /// What the session needed.
        expected: &'static str,
        /// What the header said.
        got: &'static str,
    },
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame ({have} of {need} bytes)")]
    TruncatedStream {
        /// Bytes read.
        have: usize,
        /// Bytes expected.
        need: usize,
    },
}

async fn read_full<R: AsyncRead + Unpin>(r: &mut R, buf: &mut [u8]) -> Result<usize, std::io::Error> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = r.read(&mut buf[filled..]).await?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}

/// The first allocation for a payload; it doubles (up to the payload's length) as bytes arrive.
const PAYLOAD_CHUNK: usize = 16 * 1024;

/// Reads a payload of `len` bytes into `buf` (cleared first), growing it only as bytes arrive and
/// never past `len`; returns how many bytes were read (fewer when the stream ended).
pub async fn read_payload<R: AsyncRead + Unpin>(
    r: &mut R,
    len: usize,
    buf: &mut Vec<u8>,
) -> Result<usize, std::io::Error> {
    buf.clear();
    while buf.len() < len {
        let remaining = len - buf.len();
        if buf.len() == buf.capacity() {
            buf.reserve_exact(buf.len().max(PAYLOAD_CHUNK).min(remaining));
        }
        let n = (&mut *r).take(remaining as u64).read_buf(buf).await?;
        if n == 0 {
            break;
        }
    }
    Ok(buf.len())
}

/// Reads one frame. `Ok(None)` when the stream ends cleanly between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> Result<Option<Frame>, TransportError> {
    let mut header = [0u8; HEADER_LEN];
    let got = read_full(r, &mut header).await?;
    if got == 0 {
        return Ok(None);
    }
    if got < HEADER_LEN {
        return Err(TransportError::TruncatedStream { have: got, need: HEADER_LEN });
    }
    let header = FrameHeader::parse(&header)?;
    let need = header.len as usize;
    let got = read_payload(r, need, buf).await?;
    if got < need {
        return Err(TransportError::TruncatedStream { have: got, need });
    }
    Ok(Some(Frame::decode_payload(&header, buf)?))
}

/// Encodes and writes one frame (`buf` is scratch space, reused between calls).
pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    frame: &Frame,
    buf: &mut Vec<u8>,
) -> Result<(), TransportError> {
    frame.encode_into(buf)?;
    w.write_all(buf).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::v1::{Ack, Batch};

    #[tokio::test]
    async fn frames_round_trip_over_a_pipe() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let mut buf = Vec::new();
        let batch = Frame::Batch(Batch { seq: 3, ..Batch::default() });
        write_frame(&mut a, &batch, &mut buf).await.unwrap();
        write_frame(&mut a, &Frame::Ack(Ack { seq: 3 }), &mut buf).await.unwrap();
        drop(a);
        let mut rbuf = Vec::new();
        assert_eq!(read_frame(&mut b, &mut rbuf).await.unwrap(), Some(batch));
        assert_eq!(read_frame(&mut b, &mut rbuf).await.unwrap(), Some(Frame::Ack(Ack { seq: 3 })));
        assert_eq!(read_frame(&mut b, &mut rbuf).await.unwrap(), None);
    }

    #[tokio::test]
    async fn truncated_and_foreign_streams_are_errors() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        tokio::io::AsyncWriteExt::write_all(&mut a, b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        drop(a);
        let err = read_frame(&mut b, &mut Vec::new()).await.unwrap_err();
        assert!(matches!(err, TransportError::Frame(FrameError::BadMagic(_))), "{err}");

        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let bytes = Frame::Ack(Ack { seq: 1 }).encode().unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut a, &bytes[..bytes.len() - 2]).await.unwrap();
        drop(a);
        let err = read_frame(&mut b, &mut Vec::new()).await.unwrap_err();
        assert!(matches!(err, TransportError::TruncatedStream { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_payload_buffer_grows_only_as_bytes_arrive() {
        // A peer announces 8 MiB and sends 100 bytes: the buffer holds about what arrived.
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        tokio::io::AsyncWriteExt::write_all(&mut a, &[7u8; 100]).await.unwrap();
        drop(a);
        let mut buf = Vec::new();
        assert_eq!(read_payload(&mut b, 8 << 20, &mut buf).await.unwrap(), 100);
        assert!(buf.capacity() <= PAYLOAD_CHUNK, "capacity {}", buf.capacity());
        // A whole payload never gets more capacity than its length, and nothing past it is read.
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let len = 300_000;
        let writer = tokio::spawn(async move {
            tokio::io::AsyncWriteExt::write_all(&mut a, &vec![1u8; len + 5]).await.unwrap();
        });
        assert_eq!(read_payload(&mut b, len, &mut buf).await.unwrap(), len);
        assert!(buf.capacity() <= len && buf.iter().all(|&x| x == 1));
        let mut rest = Vec::new();
        assert_eq!(read_payload(&mut b, 5, &mut rest).await.unwrap(), 5);
        writer.await.unwrap();
    }
}
