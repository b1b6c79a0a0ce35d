//! The PyTorch CUDA caching allocator, as far as OOMs care.
//!
//! * `allocated` — bytes of live tensors (block granularity); `reserved` — bytes of segments
//!   obtained with `cudaMalloc`. Freed blocks go back to the cache, not to the GPU: `reserved` only
//!   shrinks when the cache is released (`empty_cache`, or the allocator's own retry before an OOM).
//! * Request sizes are rounded as c10 does (`round_size`, then `get_allocation_size`): ≤ 1 MiB →
//!   a 2 MiB small-pool block, < 10 MiB → a 20 MiB block, larger → a multiple of 2 MiB. The rounded
//!   size is what the OOM message prints as "Tried to allocate".
//! * Fragmentation: the cache `reserved − allocated` is not one block. The largest free cached block
//!   is modelled as `usable_frac × cached`. Jobs with stable shapes keep `usable_frac = 1` (freed
//!   blocks coalesce exactly); every step whose tensor shapes changed multiplies it by
//!   `1 − churn`, down to `min_frac`: variable shapes leave cached-but-unusable pieces.
//! * A request is served from the cache when it fits the largest free block; otherwise a new
//!   segment must come from the GPU's free memory. When the GPU cannot provide it, the allocator
//!   first releases the cached memory that lies in whole free segments (modelled as the largest
//!   free block, `usable_frac × cached`; all of it when the cache is unfragmented) and retries;
//!   only then is it an OOM.
//!
//! * Routine slack: a cached block reused for a smaller tensor is split, and the remainder stays
//!   next to a live tensor: it cannot be released, so the OOM retry leaves it cached. Every reuse
//!   strands `stranded` (per job, 0.2–6 %) of the tensor's size, up to that share of the
//!   allocated bytes; a job that never reused its cache (loading its weights) has none. Real OOM
//!   messages show it: a median of 1.6 % of the GPU reserved but unallocated
//!   (`docs/attribution.md`).
//!
//! With `m = min_frac`, `x` the largest request and `s` the stranded share,
//! `reserved ≤ max(allocated) · (1 + s) + x / m` at all times (a new segment is only made when `cached < x / usable_frac`); the job templates budget
//! co-scheduled tenants with this bound, so healthy placements never run out.

const MIB: u64 = 1024 * 1024;

/// Largest share of a job's allocated bytes its allocator may keep in split remainders.
pub(crate) const MAX_STRANDED: f64 = 0.06;
const SMALL_SIZE: u64 = MIB;
const SMALL_BUFFER: u64 = 2 * MIB;
const LARGE_BUFFER: u64 = 20 * MIB;
const MIN_LARGE_ALLOC: u64 = 10 * MIB;
const ROUND_LARGE: u64 = 2 * MIB;
const MIN_BLOCK: u64 = 512;

/// The block size c10 allocates for a request of `bytes` (0 for 0).
pub(crate) fn alloc_size(bytes: u64) -> u64 {
    if bytes == 0 {
        return 0;
    }
    let size = bytes.div_ceil(MIN_BLOCK).saturating_mul(MIN_BLOCK);
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
    }
}

/// A request that neither the cache nor the GPU could serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AllocFailure {
    /// The rounded size that was requested.
    pub requested: u64,
}

/// One process's caching allocator.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CachingAllocator {
    allocated: u64,
    reserved: u64,
    usable_frac: f64,
    min_frac: f64,
    churn: f64,
    /// Share of a reused cached block split off and left next to the live tensor.
    stranded: f64,
    /// Cached bytes in split remainders (never released while their segments hold tensors).
    split: u64,
}

impl CachingAllocator {
    /// A fresh allocator; `churn` in `[0, 1)`, `min_frac` in `(0, 1]`, `stranded` in `[0, MAX_STRANDED]`.
    pub(crate) fn new(churn: f64, min_frac: f64, stranded: f64) -> Self {
        CachingAllocator {
            allocated: 0,
            reserved: 0,
            usable_frac: 1.0,
            min_frac: min_frac.clamp(1e-6, 1.0),
            churn: churn.clamp(0.0, 0.99),
            stranded: stranded.clamp(0.0, MAX_STRANDED),
            split: 0,
        }
    }

    pub(crate) fn allocated(&self) -> u64 {
        self.allocated
    }

    pub(crate) fn reserved(&self) -> u64 {
        self.reserved
    }

    pub(crate) fn cached(&self) -> u64 {
        self.reserved - self.allocated
    }

    /// Cached bytes in split remainders: routine slack, not fragmentation (at most `stranded` of
    /// the allocated bytes).
    pub(crate) fn split(&self) -> u64 {
        self.split
    }

    /// Largest free cached block (split remainders are too small to serve a tensor).
    pub(crate) fn largest_free_block(&self) -> u64 {
        (self.cached().saturating_sub(self.split) as f64 * self.usable_frac) as u64
    }

    /// Allocates `bytes`; `limit` is the most this allocator may reserve (the GPU's capacity less
    /// every other process and this process's CUDA context).
    pub(crate) fn malloc(&mut self, bytes: u64, limit: u64) -> Result<(), AllocFailure> {
        let size = alloc_size(bytes);
        if size == 0 {
            return Ok(());
        }
        if size <= self.largest_free_block() {
            self.allocated += size;
            // The cached block it reuses is split: its remainder stays next to a live tensor,
            // too small for the next one.
            let split = (size as f64 * self.stranded) as u64;
            self.split = self.split.saturating_add(split).min(self.cached());
            return Ok(());
        }
        if self.reserved.saturating_add(size) > limit {
            self.release_cached();
            if self.reserved.saturating_add(size) > limit {
                return Err(AllocFailure { requested: size });
            }
        }
        // A new segment is rounded up past the tensor (c10's block sizes, the blocks split off
        // for the next tensors): the remainder stays cached next to it, when the GPU has room.
        let extra = ((size as f64 * self.stranded) as u64 / ROUND_LARGE) * ROUND_LARGE;
        let extra = if self.reserved.saturating_add(size + extra) <= limit { extra } else { 0 };
        self.reserved += size + extra;
        self.split += extra;
        self.allocated += size;
        Ok(())
    }

    /// Frees a tensor of `bytes` (the same size it was allocated with).
    pub(crate) fn free(&mut self, bytes: u64) {
        self.allocated = self.allocated.saturating_sub(alloc_size(bytes));
        // Segments emptied by the free can be released again.
        self.split = self.split.min((self.allocated as f64 * self.stranded) as u64);
    }

    /// End of a training step: shape churn fragments the cache.
    pub(crate) fn end_step(&mut self, shapes_changed: bool) {
        if shapes_changed && self.churn > 0.0 {
            self.usable_frac = (self.usable_frac * (1.0 - self.churn)).max(self.min_frac);
        }
    }

    /// `torch.cuda.empty_cache()`: returns the whole free segments to the GPU.
    pub(crate) fn empty_cache(&mut self) {
        self.release_cached();
    }

    /// Releases the cached memory that lies in whole free segments (2 MiB granularity); the
    /// split remainders next to live tensors stay.
    fn release_cached(&mut self) {
        let kept = (self.split / ROUND_LARGE) * ROUND_LARGE;
        let free_segments = if self.usable_frac >= 1.0 {
            self.cached()
        } else {
            (self.largest_free_block() / ROUND_LARGE) * ROUND_LARGE
        };
        let releasable = free_segments.min(self.cached().saturating_sub(kept));
        self.reserved -= releasable;
    }

    /// Process exit: everything goes back to the GPU.
    pub(crate) fn reset(&mut self) {
        self.allocated = 0;
        self.reserved = 0;
        self.usable_frac = 1.0;
        self.split = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn sizes_are_rounded_like_c10() {
        assert_eq!(alloc_size(0), 0);
        assert_eq!(alloc_size(1), 2 * MIB);
        assert_eq!(alloc_size(MIB), 2 * MIB);
        assert_eq!(alloc_size(MIB + 1), 20 * MIB);
        assert_eq!(alloc_size(10 * MIB), 10 * MIB);
        assert_eq!(alloc_size(10 * MIB + 1), 12 * MIB);
        assert_eq!(alloc_size(3 * GIB), 3 * GIB);
    }

    #[test]
    fn cache_is_reused_and_reserved_only_grows() {
        let mut a = CachingAllocator::new(0.0, 1.0, 0.0);
        a.malloc(4 * GIB, 10 * GIB).unwrap();
        a.free(4 * GIB);
        assert_eq!((a.allocated(), a.reserved()), (0, 4 * GIB));
        a.malloc(3 * GIB, 10 * GIB).unwrap();
        assert_eq!(a.reserved(), 4 * GIB, "served from the cache");
        a.free(3 * GIB);
        a.empty_cache();
        assert_eq!(a.reserved(), 0);
    }

    #[test]
    fn oom_after_releasing_the_cache() {
        let mut a = CachingAllocator::new(0.0, 1.0, 0.0);
        a.malloc(2 * GIB, 10 * GIB).unwrap();
        a.malloc(2 * GIB, 10 * GIB).unwrap();
        a.free(2 * GIB);
        // 2 GiB cached, 2 GiB allocated; 7 GiB more cannot be served from the cache, and a new
        // segment next to the cached one exceeds the limit: the cache is released and it fits.
        a.malloc(7 * GIB, 10 * GIB).unwrap();
        assert_eq!((a.allocated(), a.reserved()), (9 * GIB, 9 * GIB));
        assert_eq!(a.malloc(2 * GIB, 10 * GIB), Err(AllocFailure { requested: 2 * GIB }));
    }

    #[test]
    fn split_remainders_stay_cached() {
        let mut a = CachingAllocator::new(0.0, 1.0, 0.05);
        a.malloc(10 * GIB, 40 * GIB).unwrap();
        a.malloc(10 * GIB, 40 * GIB).unwrap();
        a.free(10 * GIB);
        a.empty_cache();
        // The remainder split off the 10 GiB still allocated stays (2 MiB blocks); the rest of
        // the cache goes back.
        assert_eq!(a.cached(), (GIB / 2 / ROUND_LARGE) * ROUND_LARGE);
        // At the limit a segment comes without a remainder.
        let mut b = CachingAllocator::new(0.0, 1.0, 0.05);
        b.malloc(10 * GIB, 10 * GIB).unwrap();
        assert_eq!(b.cached(), 0);
    }

    #[test]
    fn churn_strands_cached_memory() {
        let mut a = CachingAllocator::new(0.5, 0.01, 0.0);
        a.malloc(8 * GIB, 20 * GIB).unwrap();
        a.free(8 * GIB);
        for _ in 0..4 {
            a.end_step(true);
        }
        assert_eq!(a.largest_free_block(), GIB / 2);
        // 1 GiB does not fit the 0.5 GiB block: a new segment although 8 GiB are cached.
        a.malloc(GIB, 20 * GIB).unwrap();
        assert_eq!(a.reserved(), 9 * GIB);
        // At the limit, only the largest block is released; 8 GiB stay stranded.
        assert!(a.malloc(12 * GIB, 20 * GIB).is_err());
        assert!(a.cached() >= 7 * GIB);
    }
}
