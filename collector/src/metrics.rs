//! metrics (in progress)
