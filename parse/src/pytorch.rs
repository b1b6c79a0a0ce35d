//! PyTorch's caching-allocator OOM message, every format it has printed:
//!
//! * 1.0–1.3: `CUDA out of memory. Tried to allocate X (GPU N; C total capacity; A already
//!   allocated; F free; U cached)` — `U` is cached but unallocated, so reserved = A + U;
//! * 1.4–2.0: `… F free; R reserved in total by PyTorch)`, optionally `L allowed;` (memory
//!   fraction) and the `max_split_size_mb` hint;
//! * 2.1+: `Tried to allocate X. GPU N has a total capacity of C of which F is free. Process P has
//!   M memory in use. Including non-PyTorch memory, this process has M memory in use. [L allowed;]
//!   Of the allocated memory A is allocated by PyTorch, and U is reserved by PyTorch but
//!   unallocated.` — 2.1 printed `total capacty`; reserved = A + U;
//! * ROCm builds print `HIP out of memory` with the same numbers; Ascend's `torch_npu` prints
//!   `NPU out of memory. Tried to allocate X (NPU N; C total capacity; A already allocated; A
//!   current active; F free; R reserved in total by PyTorch)`;
//! * Apple's MPS backend: `MPS backend out of memory (MPS allocated: A, other allocations: O, max
//!   allowed: L). Tried to allocate X on private pool.` — L is the allocator's limit (the
//!   capacity), O the process's memory outside the allocator.
//!
//! [`extract`] reads the numbers from the compact form of the message (see `text.rs`).
//! [`continues`] decides whether a line is the rest of a message hard-wrapped over several lines:
//! every word of it must come from the message's vocabulary (words, fragments of words cut by the
//! wrap, sizes), so interleaved lines of other output are not swallowed.

use oomlens_schema::OtherProcess;

use super::Fields;
use super::text::after;
use super::units::{size_at, u32_at};

/// Most `Process P has X memory in use` clauses read from one message.
pub const MAX_PROCESSES: usize = 64;

/// Every word the message (and its hints) is made of, lower-cased, `|`-separated.
const VOCAB: &str = "|torch.outofmemoryerror|torch.cuda.outofmemoryerror|outofmemoryerror|runtimeerror|cuda|hip|\
out|of|memory|tried|to|allocate|gpu|total|capacity|capacty|already|allocated|free|reserved|in|by|pytorch|\
cached|allowed|if|is|>>|try|setting|max_split_size_mb|avoid|fragmentation|see|documentation|for|management|\
and|pytorch_cuda_alloc_conf|has|a|which|process|use|including|non-pytorch|this|the|but|unallocated|large|\
pytorch_cuda_alloc_conf=expandable_segments:true|https://pytorch.org/docs/stable/notes/cuda.html#environment-variables|\
bytes|kib|mib|gib|tib|with|private|pools|e.g|graphs|documentation|\
https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf|\
pytorch_alloc_conf=expandable_segments:true|pytorch_hip_alloc_conf=expandable_segments:true|pytorch_hip_alloc_conf|\
currently|requested|device|limit|according|set|user-supplied|fraction|would|exceed|on|npu|current|active|shared|pool|disable|upper|allocations|may|cause|system|failure|\
pytorch_mps_high_watermark_ratio=0.0|mps|backend|";

/// Characters trimmed from the ends of a word before the vocabulary check.
const PUNCT: &[char] = &['(', ')', '.', ',', ';', ':', '\'', '"', '`'];

fn known(word: &str) -> bool {
    if word.is_empty() {
        return true;
    }
    if word.contains('|') {
        return false;
    }
    let digits = word.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.' || c == ',');
    if digits.len() < word.len() {
        // A size (`20.00`, `20.00MiB`, `372.76mib`) or the start of one.
        return digits.is_empty() || VOCAB.contains(&format!("|{digits}")) || VOCAB.contains(digits);
    }
    VOCAB.contains(word)
}

/// The advice on fragmentation PyTorch's OOM message ends with (compact): 1.x's `If reserved
/// memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.`, 2.x's
/// `If reserved but unallocated memory is large try setting
/// PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.`
pub fn fragmentation_advice(c: &str) -> bool {
    c.contains("trysettingmax_split_size_mbtoavoidfragmentation")
        || c.contains("trysettingpytorch_cuda_alloc_conf=expandable_segments:truetoavoidfragmentation")
}

/// True when `line` (prefixes already stripped) is made only of the message's words: the rest of
/// a wrapped message or its hint.
pub fn continues(line: &str) -> bool {
    let mut any = false;
    for word in line.split_whitespace() {
        let w = word.to_ascii_lowercase();
        if !known(w.trim_matches(PUNCT)) {
            return false;
        }
        any = true;
    }
    any
}

/// True when the compact text ends a message (the allocator numbers are complete).
pub fn complete(compact_tail: &str) -> bool {
    compact_tail.contains("reservedintotalbypytorch)")
        || compact_tail.contains("cached)")
        || compact_tail.contains("butunallocated.")
        || compact_tail.contains("free(accordingtocuda):")
}

/// Reads every number of the message in `t` (compact) into `f` (fields already set are kept).
/// A paste that starts after the head (`Tried to allocate …`, or only the `(GPU 0; … total
/// capacity; …)` part) is read as far as it goes.
pub fn extract(t: &str, f: &mut Fields) {
    if let Some(p) = after(t, "allocationondevice", 0) {
        extract_async(t, p, f);
    }
    let anchor = after(t, "triedtoallocate", 0);
    if let Some(a) = anchor
        && let Some((v, _)) = size_at(t, a, false)
    {
        f.requested.get_or_insert(v);
    }
    if let Some(p) = after(t, "mpsbackendoutofmemory(", 0) {
        extract_mps(t, p, f);
    }
    if let Some(p) = after(t, "npumemoryisinsufficient.attemptingtoallocate", 0) {
        extract_npu_words(t, p, f);
        return;
    }
    let from = anchor.unwrap_or(0);
    if let Some(p) = clause_1x(t, from) {
        extract_1x(t, p, f);
    } else if let Some(h) = t.get(from..).and_then(|s| s.find("hasatotalcapac")).map(|i| from + i) {
        extract_2x(t, from, h, f);
    }
}

/// The `cudaMallocAsync` backend's table: `Allocation on device 0 would exceed allowed memory.
/// (out of memory)` / `Currently allocated : X` / `Requested : Y` / `Device limit : Z` /
/// `Free (according to CUDA): F`.
fn extract_async(t: &str, p: usize, f: &mut Fields) {
    if let Some((g, _)) = u32_at(t, p) {
        f.gpu.get_or_insert(g);
    }
    for (key, slot) in
        [("currentlyallocated:", 0), ("requested:", 1), ("devicelimit:", 2), ("free(accordingtocuda):", 3)]
    {
        if let Some((v, _)) = after(t, key, p).and_then(|q| size_at(t, q, false)) {
            let field = match slot {
                0 => &mut f.allocated,
                1 => &mut f.requested,
                2 => &mut f.capacity,
                _ => &mut f.free,
            };
            field.get_or_insert(v);
        }
    }
}

/// torch_npu's message in other words: `NPU memory is insufficient. Attempting to allocate 386.00
/// MiB (NPU 1; total capacity 29.49 GiB; allocated 28.90 GiB; currently active 28.90 GiB; free
/// 171.96 MiB; PyTorch has reserved a total of 28.95 GiB).` — each figure after its words.
fn extract_npu_words(t: &str, p: usize, f: &mut Fields) {
    if let Some((v, _)) = size_at(t, p, false) {
        f.requested.get_or_insert(v);
    }
    if let Some((g, _)) = after(t, "(npu", p).and_then(|q| u32_at(t, q)) {
        f.gpu.get_or_insert(g);
    }
    let read = |key: &str| after(t, key, p).and_then(|q| size_at(t, q, false)).map(|(v, _)| v);
    if let Some(v) = read(";totalcapacity") {
        f.capacity.get_or_insert(v);
    }
    if let Some(v) = read(";allocated") {
        f.allocated.get_or_insert(v);
    }
    if let Some(v) = read(";free") {
        f.free.get_or_insert(v);
    }
    if let Some(v) = read("pytorchhasreservedatotalof") {
        f.reserved.get_or_insert(v);
    }
}

/// Apple's MPS backend: `(MPS allocated: A, other allocations: O, max allowed: L)`. The process
/// holds A + O of the L its allocator may use.
fn extract_mps(t: &str, p: usize, f: &mut Fields) {
    let end = t.get(p..).and_then(|s| s.find(')')).map_or(t.len(), |i| p + i);
    let read =
        |key: &str| after(t, key, p).filter(|q| *q < end).and_then(|q| size_at(t, q, false)).map(|(v, _)| v);
    let allocated = read("mpsallocated:");
    if let Some(a) = allocated {
        // Its cache is not printed: reserved stays unknown, not "nothing cached".
        f.allocated.get_or_insert(a);
        if let Some(o) = read("otherallocations:") {
            f.process_used.get_or_insert(a.saturating_add(o));
        }
    }
    if let Some(l) = read("maxallowed:") {
        f.capacity.get_or_insert(l);
    }
}

/// The size printed right before `t[end..]` (`…79.10giballowed;` → 79.10 GiB at `allowed`).
fn size_before(t: &str, end: usize) -> Option<u64> {
    let b = t.as_bytes();
    let mut i = end;
    while i > 0 && b[i - 1].is_ascii_alphabetic() {
        i -= 1;
    }
    while i > 0 && (b[i - 1].is_ascii_digit() || b[i - 1] == b'.') {
        i -= 1;
    }
    while i < end && b[i] == b'.' {
        i += 1;
    }
    size_at(t, i, false).filter(|(_, e)| *e == end).map(|(v, _)| v)
}

/// Where 1.x's clause of numbers begins (after its `(GPU` / `(NPU`), searched from `from` in
/// compact text `t`; also when a paste lost its parenthesis (`… Tried to allocate 20.00 MiB` /
/// `GPU 0; 8.00 GiB total capacity; …`): the device's number, then `;`.
fn clause_1x(t: &str, from: usize) -> Option<usize> {
    after(t, "(gpu", from).or_else(|| after(t, "(npu", from)).or_else(|| {
        // (2.x's sentences have no `;`: nothing more to look for.)
        if !t.get(from..)?.contains(';') {
            return None;
        }
        ["gpu", "npu"].iter().find_map(|device| {
            let p = after(t, device, from)?;
            let (_, e) = u32_at(t, p)?;
            (t.as_bytes().get(e) == Some(&b';')).then_some(p)
        })
    })
}

fn extract_1x(t: &str, p: usize, f: &mut Fields) {
    if let Some((gpu, _)) = u32_at(t, p) {
        f.gpu.get_or_insert(gpu);
    }
    let end = t.get(p..).and_then(|s| s.find(')')).map_or(t.len(), |i| p + i);
    let mut allocated = None;
    let mut cached = None;
    let mut reserved = None;
    let mut allowed = None;
    for clause in t.get(p..end).unwrap_or("").split(';').skip(1) {
        let Some((v, e)) = size_at(clause, 0, false) else {
            continue;
        };
        let label = clause.get(e..).unwrap_or("");
        if label.starts_with("totalcapac") {
            f.capacity.get_or_insert(v);
        } else if label.starts_with("alreadyallocated") {
            allocated = Some(v);
        } else if label.starts_with("free") {
            f.free.get_or_insert(v);
        } else if label.starts_with("reservedintotal") {
            reserved = Some(v);
        } else if label.starts_with("cached") {
            cached = Some(v);
        } else if label.starts_with("allowed") {
            allowed = Some(v);
        }
    }
    limit_to_allowed(f, allowed);
    if let Some(a) = allocated {
        f.allocated.get_or_insert(a);
    }
    match (reserved, cached, allocated) {
        (Some(r), _, _) => {
            f.reserved.get_or_insert(r);
        }
        (None, Some(c), Some(a)) => {
            f.reserved.get_or_insert(a.saturating_add(c));
        }
        _ => {}
    }
}

fn extract_2x(t: &str, anchor: usize, h: usize, f: &mut Fields) {
    if let Some(g) = t.get(anchor..h).and_then(|s| s.rfind("gpu"))
        && let Some((gpu, _)) = u32_at(t, anchor + g + 3)
    {
        f.gpu.get_or_insert(gpu);
    }
    let cap_at = after(t, "capacityof", h).or_else(|| after(t, "capactyof", h));
    if let Some((v, e)) = cap_at.and_then(|p| size_at(t, p, false)) {
        f.capacity.get_or_insert(v);
        if let Some((v, _)) = after(t, "ofwhich", e).and_then(|p| size_at(t, p, false)) {
            f.free.get_or_insert(v);
        }
    }
    let stats = t.find("oftheallocatedmemory").unwrap_or(t.len());
    let mut pos = h;
    let mut others = Vec::new();
    while let Some(p) = t.get(pos..stats).and_then(|s| s.find("process")).map(|i| pos + i + "process".len()) {
        pos = p;
        if let Some((pid, e)) = u32_at(t, p) {
            if let Some((v, _)) =
                after(t, "has", e).filter(|q| *q == e + 3).and_then(|q| size_at(t, q, false))
                && others.len() < MAX_PROCESSES
            {
                others.push(OtherProcess { pid, used_bytes: v });
            }
        } else if t.get(..p).is_some_and(|s| s.ends_with("thisprocess"))
            && let Some((v, _)) =
                t.get(p..).filter(|s| s.starts_with("has")).and_then(|_| size_at(t, p + 3, false))
        {
            f.process_used.get_or_insert(v);
        }
    }
    if f.other_processes.is_empty() {
        f.other_processes = others;
    }
    let allowed = t.get(h..stats).and_then(|s| s.find("allowed;")).and_then(|i| size_before(t, h + i));
    limit_to_allowed(f, allowed);
    if let Some((a, e)) = after(t, "oftheallocatedmemory", h).and_then(|p| size_at(t, p, false)) {
        f.allocated.get_or_insert(a);
        // `… is allocated by PyTorch, [with G allocated in private pools (e.g., CUDA Graphs), ]and U
        // is reserved by PyTorch but unallocated.`: reserved = A + U either way.
        let unallocated = after(t, "isallocatedbypytorch,", e).and_then(|p| {
            let q = if t.get(p..)?.starts_with("and") { p + 3 } else { after(t, ",and", p)? };
            size_at(t, q, false)
        });
        if let Some((u, _)) = unallocated {
            f.reserved.get_or_insert(a.saturating_add(u));
        }
    }
}

/// With a per-process memory fraction (`X allowed;`) the allocator's limit is X, not the device:
/// the capacity the failure is measured against.
fn limit_to_allowed(f: &mut Fields, allowed: Option<u64>) {
    if let Some(a) = allowed
        && f.capacity.is_none_or(|c| a < c)
    {
        f.capacity = Some(a);
    }
}

#[cfg(test)]
mod tests {
    use super::super::text::compact;
    use super::super::units::{GIB, MIB};
    use super::*;

    fn fields(msg: &str) -> Fields {
        let mut f = Fields::default();
        extract(&compact(msg), &mut f);
        f
    }

    #[test]
    fn v2_message() {
        let f = fields(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 3 has a total capacity of \
             79.11 GiB of which 1.12 GiB is free. Process 23456 has 20.00 GiB memory in use. Including non-PyTorch \
             memory, this process has 58.00 GiB memory in use. Of the allocated memory 55.00 GiB is allocated by \
             PyTorch, and 1024.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is \
             large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
        );
        assert_eq!(f.gpu, Some(3));
        assert_eq!(f.requested, Some(3 * GIB / 2));
        assert_eq!(f.capacity, Some((7911 * GIB + 50) / 100));
        assert_eq!(f.free, Some((112 * GIB + 50) / 100));
        assert_eq!(f.other_processes, vec![OtherProcess { pid: 23456, used_bytes: 20 * GIB }]);
        assert_eq!(f.process_used, Some(58 * GIB));
        assert_eq!(f.allocated, Some(55 * GIB));
        assert_eq!(f.reserved, Some(56 * GIB));
    }

    #[test]
    fn v1_forms() {
        // Retyped without the clause's parentheses, over two lines.
        let f = fields(
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB \n\
             GPU 0; 8.00 GiB total capacity; 7.20 GiB already allocated; 0 bytes free; 7.30 GiB reserved in total by PyTorch",
        );
        assert_eq!((f.gpu, f.requested, f.capacity), (Some(0), Some(20 * MIB), Some(8 * GIB)));
        assert_eq!((f.allocated, f.free), (Some((720 * GIB + 50) / 100), Some(0)));
        let f = fields(
            "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total capacity; \
             9.82 GiB already allocated; 11.44 MiB free; 9.86 GiB reserved in total by PyTorch)",
        );
        assert_eq!((f.gpu, f.requested), (Some(0), Some(20 * MIB)));
        assert_eq!(f.reserved, Some((986 * GIB + 50) / 100));
        let f = fields(
            "RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 1; 10.92 GiB total capacity; \
             8.57 MiB already allocated; 9.28 GiB free; 4.68 MiB cached)",
        );
        assert_eq!(f.gpu, Some(1));
        assert_eq!(f.reserved, Some((857 * MIB + 50) / 100 + (468 * MIB + 50) / 100));
        // Ascend's torch_npu: the same clauses on an NPU, plus `current active`.
        let f = fields(
            "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total capacity; 57.36 GiB \
             already allocated; 57.36 GiB current active; 1.05 GiB free; 59.01 GiB reserved in total by PyTorch) If \
             reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.",
        );
        assert_eq!((f.gpu, f.requested), (Some(0), Some(2 * GIB)));
        assert_eq!(f.capacity, Some((6097 * GIB + 50) / 100));
        assert_eq!(f.allocated, Some((5736 * GIB + 50) / 100));
        assert_eq!(f.free, Some((105 * GIB + 50) / 100));
        assert_eq!(f.reserved, Some((5901 * GIB + 50) / 100));
    }

    #[test]
    fn mps_message() {
        let f = fields(
            "RuntimeError: MPS backend out of memory (MPS allocated: 17.81 GB, other allocations: 238.50 MB, max \
             allowed: 18.13 GB). Tried to allocate 256 bytes on shared pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 \
             to disable upper limit for memory allocations (may cause system failure).",
        );
        assert_eq!(f.requested, Some(256));
        assert_eq!(f.capacity, Some((1813 * GIB + 50) / 100));
        assert_eq!(f.allocated, Some((1781 * GIB + 50) / 100));
        assert_eq!(f.process_used, Some((1781 * GIB + 50) / 100 + (23850 * MIB + 50) / 100));
        assert_eq!(f.gpu, None);
    }

    #[test]
    fn vocabulary() {
        assert!(continues("city of 79.11 GiB of which 1.12 GiB is free. Process 23456 has 20.0"));
        assert!(continues("0 GiB memory in use. Including non-PyTorch memory, this pro"));
        assert!(continues("(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"));
        assert!(!continues("step 120 loss 2.3141 lr 3.0e-04"));
        assert!(!continues("Traceback (most recent call last):"));
        assert!(!continues(""));
        assert!(complete("reservedbypytorchbutunallocated.ifreserved"));
    }
}
