//! Wire types, one module per protocol version.
//!
//! rkyv has no schema evolution: bytes of a newer struct can validate as an older one and read as
//! garbage. The frame header's protocol version therefore decides which module's archived types a
//! payload is read as ([`crate::frame`]); a version's module never changes once shipped, and the
//! golden frames under `schema/tests/golden/` pin it.

pub mod v1;
