//! Frame I/O on byte streams (feature `quic`): one frame = 16-byte header + payload.
//!
//! The header is checked before the payload is read, so an oversized or foreign frame is refused
//! without reading (or allocating) its declared length.

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
    buf.clear();
    buf.resize(header.len as usize, 0);
    let got = read_full(r, buf).await?;
    if got < buf.len() {
        return Err(TransportError::TruncatedStream { have: got, need: buf.len() });
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
}
