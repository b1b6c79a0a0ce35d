//! The frame codec: a fixed 16-byte header followed by an rkyv payload.
//!
//! ```text
//! offset  size  field
//!      0     4  magic  b"OOML"
//!      4     2  protocol version (little endian)
//!      6     2  kind (little endian, see FrameKind)
//!      8     4  payload length (little endian, ≤ MAX_FRAME_PAYLOAD)
//!     12     4  reserved, must be zero
//!     16     …  payload: the rkyv archive of the kind's type in that version
//! ```
//!
//! Every payload is validated with bytecheck and then checked against [`crate::limits`]; anything
//! wrong is a [`FrameError`], never a panic.

use rkyv::rancor::BoxedError;
use rkyv::util::AlignedVec;

use crate::limits::{LimitError, MAX_CONTROL_PAYLOAD, MAX_FRAME_PAYLOAD, WithinLimits};
use crate::wire::v1;

/// Frame magic.
pub const MAGIC: [u8; 4] = *b"OOML";
/// The protocol version this build writes.
pub const PROTOCOL_VERSION: u16 = 1;
/// Every protocol version this build can read.
pub const SUPPORTED_VERSIONS: &[u16] = &[1];
/// Header length in bytes.
pub const HEADER_LEN: usize = 16;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum FrameKind {
    /// [`v1::Hello`].
    Hello = 1,
    /// [`v1::Welcome`].
    Welcome = 2,
    /// [`v1::Batch`].
    Batch = 3,
    /// [`v1::Ack`].
    Ack = 4,
    /// [`v1::ErrorReply`].
    Error = 5,
}

impl FrameKind {
    /// Largest payload a frame of this kind may have: [`MAX_FRAME_PAYLOAD`] for batches,
    /// [`MAX_CONTROL_PAYLOAD`] for the rest.
    pub const fn max_payload(self) -> u32 {
        match self {
            FrameKind::Batch => MAX_FRAME_PAYLOAD,
            FrameKind::Hello | FrameKind::Welcome | FrameKind::Ack | FrameKind::Error => MAX_CONTROL_PAYLOAD,
        }
    }

    /// Parses the header's kind field.
    pub fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            1 => FrameKind::Hello,
            2 => FrameKind::Welcome,
            3 => FrameKind::Batch,
            4 => FrameKind::Ack,
            5 => FrameKind::Error,
            _ => return None,
        })
    }

    /// Lower-case name, for logs and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            FrameKind::Hello => "hello",
            FrameKind::Welcome => "welcome",
            FrameKind::Batch => "batch",
            FrameKind::Ack => "ack",
            FrameKind::Error => "error",
        }
    }
}

/// Why a frame was refused.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// Fewer bytes than the header needs.
    #[error("truncated frame: {have} bytes, need {need}")]
    Truncated {
        /// Bytes available.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
    /// The magic is not `OOML`.
    #[error("bad magic {0:02x?}: not an oomlens frame")]
    BadMagic([u8; 4]),
    /// A protocol version this build cannot read.
    #[error("unsupported protocol version {0} (this build reads {SUPPORTED_VERSIONS:?})")]
    UnsupportedVersion(u16),
    /// An unknown frame kind.
    #[error("unknown frame kind {0}")]
    UnknownKind(u16),
    /// The reserved header field is not zero.
    #[error("reserved header field is {0:#x}, must be 0")]
    ReservedNotZero(u32),
    /// The declared payload is larger than allowed.
    #[error("frame payload of {len} bytes exceeds the limit of {limit}")]
    TooLarge {
        /// Declared length.
        len: u64,
        /// The limit.
        limit: u32,
    },
    /// The buffer does not hold exactly header + declared payload.
    #[error("frame length mismatch: header declares {declared} payload bytes, got {actual}")]
    LengthMismatch {
        /// Declared length.
        declared: u32,
        /// Actual length.
        actual: usize,
    },
    /// The payload failed rkyv/bytecheck validation.
    #[error("invalid {kind} payload: {reason}")]
    Invalid {
        /// Frame kind.
        kind: &'static str,
        /// Validation error text.
        reason: String,
    },
    /// The payload is valid but exceeds a limit.
    #[error("frame exceeds a limit: {0}")]
    Limit(#[from] LimitError),
    /// Serialisation failed (only when encoding).
    #[error("cannot encode frame: {0}")]
    Encode(String),
}

impl FrameError {
    /// A short, stable label for metrics (`rejects_total{reason=…}`).
    pub const fn reason(&self) -> &'static str {
        match self {
            FrameError::Truncated { .. } => "truncated",
            FrameError::BadMagic(_) => "bad_magic",
            FrameError::UnsupportedVersion(_) => "unsupported_version",
            FrameError::UnknownKind(_) => "unknown_kind",
            FrameError::ReservedNotZero(_) => "reserved_not_zero",
            FrameError::TooLarge { .. } => "too_large",
            FrameError::LengthMismatch { .. } => "length_mismatch",
            FrameError::Invalid { .. } => "invalid_payload",
            FrameError::Limit(_) => "limit",
            FrameError::Encode(_) => "encode",
        }
    }
}

/// A parsed frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Protocol version of the payload.
    pub version: u16,
    /// Payload kind.
    pub kind: FrameKind,
    /// Payload length in bytes.
    pub len: u32,
}

impl FrameHeader {
    /// Parses and checks a header: magic, version, kind, reserved bits and the size limit.
    pub fn parse(bytes: &[u8]) -> Result<Self, FrameError> {
        let Some(h) = bytes.get(..HEADER_LEN) else {
            return Err(FrameError::Truncated { have: bytes.len(), need: HEADER_LEN });
        };
        let magic: [u8; 4] = [h[0], h[1], h[2], h[3]];
        if magic != MAGIC {
            return Err(FrameError::BadMagic(magic));
        }
        let version = u16::from_le_bytes([h[4], h[5]]);
        if !SUPPORTED_VERSIONS.contains(&version) {
            return Err(FrameError::UnsupportedVersion(version));
        }
        let kind_raw = u16::from_le_bytes([h[6], h[7]]);
        let kind = FrameKind::from_u16(kind_raw).ok_or(FrameError::UnknownKind(kind_raw))?;
        let len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        let limit = kind.max_payload();
        if len > limit {
            return Err(FrameError::TooLarge { len: u64::from(len), limit });
        }
        let reserved = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
        if reserved != 0 {
            return Err(FrameError::ReservedNotZero(reserved));
        }
        Ok(FrameHeader { version, kind, len })
    }

    /// The 16 header bytes.
    pub fn to_bytes(self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[..4].copy_from_slice(&MAGIC);
        out[4..6].copy_from_slice(&self.version.to_le_bytes());
        out[6..8].copy_from_slice(&(self.kind as u16).to_le_bytes());
        out[8..12].copy_from_slice(&self.len.to_le_bytes());
        out
    }
}

/// A decoded, validated frame of the current protocol version.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// Session start.
    Hello(v1::Hello),
    /// Session accepted.
    Welcome(v1::Welcome),
    /// Readings and events from the agent, answered by an `Ack` once stored.
    Batch(v1::Batch),
    /// Data stored.
    Ack(v1::Ack),
    /// Error before close.
    Error(v1::ErrorReply),
}

impl Frame {
    /// The frame's kind.
    pub fn kind(&self) -> FrameKind {
        match self {
            Frame::Hello(_) => FrameKind::Hello,
            Frame::Welcome(_) => FrameKind::Welcome,
            Frame::Batch(_) => FrameKind::Batch,
            Frame::Ack(_) => FrameKind::Ack,
            Frame::Error(_) => FrameKind::Error,
        }
    }

    /// Appends header + payload to `out` (which is cleared first).
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), FrameError> {
        let payload = match self {
            Frame::Hello(v) => archive(v)?,
            Frame::Welcome(v) => archive(v)?,
            Frame::Batch(v) => archive(v)?,
            Frame::Ack(v) => archive(v)?,
            Frame::Error(v) => archive(v)?,
        };
        let limit = self.kind().max_payload();
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|len| *len <= limit)
            .ok_or(FrameError::TooLarge { len: payload.len() as u64, limit })?;
        let header = FrameHeader { version: PROTOCOL_VERSION, kind: self.kind(), len };
        out.clear();
        out.reserve(HEADER_LEN + payload.len());
        out.extend_from_slice(&header.to_bytes());
        out.extend_from_slice(&payload);
        Ok(())
    }

    /// Encodes the frame into a new buffer.
    pub fn encode(&self) -> Result<Vec<u8>, FrameError> {
        let mut out = Vec::new();
        self.encode_into(&mut out)?;
        Ok(out)
    }

    /// Decodes and validates a payload whose header was already parsed.
    pub fn decode_payload(header: &FrameHeader, payload: &[u8]) -> Result<Frame, FrameError> {
        if payload.len() != header.len as usize {
            return Err(FrameError::LengthMismatch { declared: header.len, actual: payload.len() });
        }
        match header.version {
            1 => decode_v1(header.kind, payload),
            other => Err(FrameError::UnsupportedVersion(other)),
        }
    }

    /// Decodes and validates one whole frame (header + payload, nothing more).
    pub fn decode(bytes: &[u8]) -> Result<Frame, FrameError> {
        let header = FrameHeader::parse(bytes)?;
        Frame::decode_payload(&header, &bytes[HEADER_LEN..])
    }
}

fn archive<T>(value: &T) -> Result<AlignedVec, FrameError>
where
    T: for<'a> rkyv::Serialize<
            rkyv::api::high::HighSerializer<AlignedVec, rkyv::ser::allocator::ArenaHandle<'a>, BoxedError>,
        >,
{
    rkyv::to_bytes::<BoxedError>(value).map_err(|e| FrameError::Encode(e.to_string()))
}

fn decode_v1(kind: FrameKind, payload: &[u8]) -> Result<Frame, FrameError> {
    // rkyv needs an aligned buffer; network bytes come at any alignment.
    let mut aligned = AlignedVec::<16>::with_capacity(payload.len());
    aligned.extend_from_slice(payload);
    let invalid = |e: BoxedError| FrameError::Invalid { kind: kind.as_str(), reason: e.to_string() };
    let frame = match kind {
        FrameKind::Hello => {
            let v = rkyv::from_bytes::<v1::Hello, BoxedError>(&aligned).map_err(invalid)?;
            v.check_limits()?;
            Frame::Hello(v)
        }
        FrameKind::Welcome => {
            let v = rkyv::from_bytes::<v1::Welcome, BoxedError>(&aligned).map_err(invalid)?;
            v.check_limits()?;
            Frame::Welcome(v)
        }
        FrameKind::Batch => {
            let v = rkyv::from_bytes::<v1::Batch, BoxedError>(&aligned).map_err(invalid)?;
            v.check_limits()?;
            Frame::Batch(v)
        }
        FrameKind::Ack => Frame::Ack(rkyv::from_bytes::<v1::Ack, BoxedError>(&aligned).map_err(invalid)?),
        FrameKind::Error => {
            let v = rkyv::from_bytes::<v1::ErrorReply, BoxedError>(&aligned).map_err(invalid)?;
            v.check_limits()?;
            Frame::Error(v)
        }
    };
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_refusals() {
        let h = FrameHeader { version: 1, kind: FrameKind::Batch, len: 42 };
        assert_eq!(FrameHeader::parse(&h.to_bytes()).unwrap(), h);

        let mut bad = h.to_bytes();
        bad[0] = b'X';
        assert!(matches!(FrameHeader::parse(&bad), Err(FrameError::BadMagic(_))));

        let mut bad = h.to_bytes();
        bad[4] = 99;
        assert!(matches!(FrameHeader::parse(&bad), Err(FrameError::UnsupportedVersion(99))));

        let mut bad = h.to_bytes();
        bad[6] = 77;
        assert!(matches!(FrameHeader::parse(&bad), Err(FrameError::UnknownKind(77))));

        let mut bad = h.to_bytes();
        bad[8..12].copy_from_slice(&(MAX_FRAME_PAYLOAD + 1).to_le_bytes());
        assert!(matches!(FrameHeader::parse(&bad), Err(FrameError::TooLarge { .. })));

        let mut bad = h.to_bytes();
        bad[15] = 1;
        assert!(matches!(FrameHeader::parse(&bad), Err(FrameError::ReservedNotZero(_))));

        // Control frames have their own, small limit.
        let hello = FrameHeader { version: 1, kind: FrameKind::Hello, len: MAX_CONTROL_PAYLOAD };
        assert_eq!(FrameHeader::parse(&hello.to_bytes()).unwrap(), hello);
        let big = FrameHeader { len: MAX_CONTROL_PAYLOAD + 1, ..hello };
        assert!(matches!(
            FrameHeader::parse(&big.to_bytes()),
            Err(FrameError::TooLarge { limit: MAX_CONTROL_PAYLOAD, .. })
        ));

        assert!(matches!(FrameHeader::parse(&[0u8; 3]), Err(FrameError::Truncated { .. })));
    }

    #[test]
    fn ack_round_trip() {
        let frame = Frame::Ack(v1::Ack { seq: 7 });
        let bytes = frame.encode().unwrap();
        assert_eq!(Frame::decode(&bytes).unwrap(), frame);
        assert!(matches!(Frame::decode(&bytes[..bytes.len() - 1]), Err(FrameError::LengthMismatch { .. })));
    }
}
