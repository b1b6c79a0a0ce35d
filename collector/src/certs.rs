//! certs (in progress)
