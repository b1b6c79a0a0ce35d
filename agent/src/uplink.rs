//! uplink (in progress)
