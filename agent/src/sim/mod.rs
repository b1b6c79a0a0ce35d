//! simulator (in progress)
