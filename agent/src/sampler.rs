//! sampler (in progress)
