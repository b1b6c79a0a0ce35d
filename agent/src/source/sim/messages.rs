//! The exact text a job and the kernel print: PyTorch CUDA OOM messages (1.x and 2.x formats),
//! short Python tracebacks, ordinary training log lines, and the Linux OOM killer's lines.
//!
//! Sizes are formatted like c10's `format_size`: ≤ 1024 → `N bytes`, ≤ 1 MiB → `x.xx KiB`,
//! ≤ 1 GiB → `x.xx MiB`, else `x.xx GiB`. The numbers printed are the event's fields: 1.x prints
//! allocated ("already allocated"), free, and reserved ("reserved in total by PyTorch"); 2.x prints
//! free, one `Process P has X memory in use.` clause per other process and `this process has` =
//! process_used (CUDA context + reserved) in NVML (pid) order, allocated, and
//! `reserved − allocated` ("reserved by PyTorch but unallocated").

use std::fmt::Write as _;

use oomlens_schema::Phase;

use super::memory::AllocKind;

/// `c10::format_size`, shared with the log parser that reads these messages back.
pub(crate) use oomlens_parse::units::format_size;

/// Which PyTorch release a job runs (decides the message format and the exception name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TorchVersion {
    /// `RuntimeError`, 1.x format.
    V1_12,
    /// `torch.cuda.OutOfMemoryError`, 1.x format.
    V1_13,
    /// `torch.cuda.OutOfMemoryError`, 2.x format.
    V2_3,
    /// `torch.OutOfMemoryError`, 2.x format.
    V2_5,
}

impl TorchVersion {
    pub(crate) const ALL: [TorchVersion; 4] =
        [TorchVersion::V1_12, TorchVersion::V1_13, TorchVersion::V2_3, TorchVersion::V2_5];

    pub(crate) fn version(self) -> &'static str {
        match self {
            TorchVersion::V1_12 => "1.12.1",
            TorchVersion::V1_13 => "1.13.1",
            TorchVersion::V2_3 => "2.3.1",
            TorchVersion::V2_5 => "2.5.1",
        }
    }

    pub(crate) fn is_2x(self) -> bool {
        matches!(self, TorchVersion::V2_3 | TorchVersion::V2_5)
    }

    fn exception(self) -> &'static str {
        match self {
            TorchVersion::V1_12 => "RuntimeError",
            TorchVersion::V1_13 | TorchVersion::V2_3 => "torch.cuda.OutOfMemoryError",
            TorchVersion::V2_5 => "torch.OutOfMemoryError",
        }
    }

    fn site_packages(self) -> &'static str {
        match self {
            TorchVersion::V1_12 => "/opt/conda/lib/python3.8/site-packages",
            TorchVersion::V1_13 => "/opt/conda/lib/python3.9/site-packages",
            TorchVersion::V2_3 => "/usr/local/lib/python3.10/dist-packages",
            TorchVersion::V2_5 => "/usr/local/lib/python3.11/site-packages",
        }
    }
}

/// The numbers of one CUDA OOM.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CudaOom<'a> {
    pub device: u32,
    pub pid: u32,
    pub requested: u64,
    pub capacity: u64,
    pub free: u64,
    pub allocated: u64,
    pub reserved: u64,
    pub process_used: u64,
    /// Every process on the GPU, this one included, as `(pid, used bytes)` in pid order.
    pub processes: &'a [(u32, u64)],
}

/// The one-line exception message, exactly as PyTorch prints it.
pub(crate) fn torch_oom_message(v: TorchVersion, o: &CudaOom<'_>) -> String {
    let mut m = String::with_capacity(512);
    let _ =
        write!(m, "{}: CUDA out of memory. Tried to allocate {}", v.exception(), format_size(o.requested));
    if v.is_2x() {
        let _ = write!(
            m,
            ". GPU {} has a total capacity of {} of which {} is free. ",
            o.device,
            format_size(o.capacity),
            format_size(o.free)
        );
        for &(pid, used) in o.processes {
            if pid == o.pid {
                let used = format_size(o.process_used);
                let _ = write!(m, "Including non-PyTorch memory, this process has {used} memory in use. ");
            } else {
                let _ = write!(m, "Process {pid} has {} memory in use. ", format_size(used));
            }
        }
        let _ = write!(
            m,
            "Of the allocated memory {} is allocated by PyTorch, and {} is reserved by PyTorch but unallocated. \
             If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
             to avoid fragmentation.  See documentation for Memory Management  \
             (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
            format_size(o.allocated),
            format_size(o.reserved.saturating_sub(o.allocated))
        );
    } else {
        let _ = write!(
            m,
            " (GPU {}; {} total capacity; {} already allocated; {} free; {} reserved in total by PyTorch) \
             If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  \
             See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
            o.device,
            format_size(o.capacity),
            format_size(o.allocated),
            format_size(o.free),
            format_size(o.reserved)
        );
    }
    m
}

/// A short, realistic traceback for a failure in `phase` on an allocation of `kind` (without the
/// final exception line). `script` is the training script, e.g. `/workspace/train.py`.
pub(crate) fn traceback(v: TorchVersion, phase: Phase, kind: AllocKind, script: &str) -> String {
    let sp = v.site_packages();
    let mut t = String::with_capacity(1024);
    t.push_str("Traceback (most recent call last):\n");
    if phase == Phase::Inference {
        let _ = writeln!(
            t,
            "  File \"{sp}/vllm/engine/llm_engine.py\", line 340, in _initialize_kv_caches\n    \
             self.model_executor.initialize_cache(num_gpu_blocks, num_cpu_blocks)\n  \
             File \"{sp}/vllm/worker/cache_engine.py\", line 94, in _allocate_kv_cache\n    \
             torch.zeros(kv_cache_shape, dtype=self.dtype, pin_memory=pin_memory, device=device))"
        );
        return t;
    }
    let _ = writeln!(t, "  File \"{script}\", line 412, in <module>\n    main()");
    let module_call = |t: &mut String| {
        let _ = writeln!(
            t,
            "  File \"{sp}/torch/nn/modules/module.py\", line 1532, in _wrapped_call_impl\n    \
             return self._call_impl(*args, **kwargs)\n  File \"{sp}/torch/nn/modules/module.py\", line 1541, \
             in _call_impl\n    return forward_call(*args, **kwargs)"
        );
    };
    match phase {
        Phase::Load => {
            let _ = writeln!(
                t,
                "  File \"{script}\", line 361, in main\n    model = build_model(cfg).to(device)\n  \
                 File \"{sp}/torch/nn/modules/module.py\", line 1174, in to\n    return self._apply(convert)\n  \
                 File \"{sp}/torch/nn/modules/module.py\", line 805, in _apply\n    param_applied = fn(param)\n  \
                 File \"{sp}/torch/nn/modules/module.py\", line 1160, in convert\n    \
                 return t.to(device, dtype if t.is_floating_point() or t.is_complex() else None, non_blocking)"
            );
        }
        Phase::OptimizerInit | Phase::OptimizerStep => {
            let _ = writeln!(
                t,
                "  File \"{script}\", line 377, in main\n    optimizer.step()\n  \
                 File \"{sp}/torch/optim/optimizer.py\", line 391, in wrapper\n    out = func(*args, **kwargs)\n  \
                 File \"{sp}/torch/optim/adamw.py\", line 177, in step\n    has_complex = self._init_group("
            );
            if phase == Phase::OptimizerInit {
                let _ = writeln!(
                    t,
                    "  File \"{sp}/torch/optim/adamw.py\", line 128, in _init_group\n    \
                     state[\"exp_avg\"] = torch.zeros_like(p, memory_format=torch.preserve_format)"
                );
            } else {
                let _ = writeln!(
                    t,
                    "  File \"{sp}/torch/optim/adamw.py\", line 614, in _multi_tensor_adamw\n    \
                     exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)"
                );
            }
        }
        Phase::Backward => {
            let _ = writeln!(
                t,
                "  File \"{script}\", line 372, in main\n    loss.backward()\n  \
                 File \"{sp}/torch/_tensor.py\", line 522, in backward\n    torch.autograd.backward(\n  \
                 File \"{sp}/torch/autograd/__init__.py\", line 266, in backward\n    \
                 Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass"
            );
        }
        _ => {
            if phase == Phase::Eval {
                let _ = writeln!(
                    t,
                    "  File \"{script}\", line 380, in main\n    metrics = evaluate(model, eval_loader)\n  \
                     File \"{script}\", line 198, in evaluate\n    outputs = model(**batch)"
                );
            } else {
                let _ = writeln!(
                    t,
                    "  File \"{script}\", line 369, in main\n    \
                     outputs = model(input_ids=batch[\"input_ids\"], labels=batch[\"labels\"])"
                );
            }
            module_call(&mut t);
            let (line, code) = match kind {
                AllocKind::Attention => (
                    412,
                    "attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)",
                ),
                AllocKind::Logits => (1196, "logits = logits.float()"),
                _ => (240, "down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))"),
            };
            let _ = writeln!(
                t,
                "  File \"{sp}/transformers/models/llama/modeling_llama.py\", line {line}, in forward\n    {code}"
            );
        }
    }
    t
}

/// Python's `f"{x:.1e}"` (two-digit exponent), e.g. `3.0e-04`.
pub(crate) fn py_sci(x: f64) -> String {
    let s = format!("{x:.1e}");
    match s.split_once('e') {
        Some((mant, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mant}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

/// An ordinary training line.
pub(crate) fn step_line(step: u64, loss: f64, lr: f64) -> String {
    format!("step {step} loss {loss:.4} lr {}", py_sci(lr))
}

/// The numbers of one OOM-killer kill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OomKill<'a> {
    pub pid: u32,
    pub comm: &'a str,
    pub total_vm_kb: u64,
    pub anon_rss_kb: u64,
    pub file_rss_kb: u64,
    pub shmem_rss_kb: u64,
    pub uid: u32,
    pub pgtables_kb: u64,
    pub oom_score_adj: i32,
}

/// The kernel's `Out of memory: Killed process …` line (Linux ≥ 5.x format).
pub(crate) fn oom_kill_line(k: &OomKill<'_>) -> String {
    format!(
        "Out of memory: Killed process {} ({}) total-vm:{}kB, anon-rss:{}kB, file-rss:{}kB, shmem-rss:{}kB, \
         UID:{} pgtables:{}kB oom_score_adj:{}",
        k.pid,
        k.comm,
        k.total_vm_kb,
        k.anon_rss_kb,
        k.file_rss_kb,
        k.shmem_rss_kb,
        k.uid,
        k.pgtables_kb,
        k.oom_score_adj
    )
}

/// The kernel log lines around a kill, with `[seconds.micros]` stamps since boot.
pub(crate) fn kernel_log(k: &OomKill<'_>, uptime_ms: i64) -> String {
    let s = uptime_ms.max(0);
    let stamp = |extra_us: i64| {
        let us = s * 1000 + extra_us;
        format!("[{:>5}.{:06}]", us / 1_000_000, us % 1_000_000)
    };
    format!(
        "{} {} invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj={}\n\
         {} {}\n{} oom_reaper: reaped process {} ({}), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB\n",
        stamp(0),
        k.comm,
        k.oom_score_adj,
        stamp(412),
        oom_kill_line(k),
        stamp(51_877),
        k.pid,
        k.comm
    )
}

/// Parses a size printed by [`format_size`] back into bytes (test helper; the inverse within
/// rounding).
#[cfg(test)]
pub(crate) fn parse_size(text: &str) -> Option<u64> {
    let (num, unit) = text.trim().split_once(' ')?;
    let n: f64 = num.parse().ok()?;
    let mult = match unit {
        "bytes" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some((n * mult).round() as u64)
}

/// Half a unit of the last printed digit for a size: the rounding tolerance of [`parse_size`].
#[cfg(test)]
pub(crate) fn size_tolerance(bytes: u64) -> u64 {
    if bytes <= 1024 {
        0
    } else if bytes <= 1 << 20 {
        6
    } else if bytes <= 1 << 30 {
        6 * 1024
    } else {
        6 * 1024 * 1024
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn format_size_matches_c10() {
        assert_eq!(format_size(0), "0 bytes");
        assert_eq!(format_size(1024), "1024 bytes");
        assert_eq!(format_size(1025), "1.00 KiB");
        assert_eq!(format_size(1 << 20), "1024.00 KiB");
        assert_eq!(format_size(20 << 20), "20.00 MiB");
        assert_eq!(format_size(GIB), "1024.00 MiB");
        assert_eq!(format_size(2 * GIB), "2.00 GiB");
        assert_eq!(format_size(81_008 << 20), "79.11 GiB");
        for b in [1u64, 1000, 5000, 3 << 20, 7 * GIB / 3, 200 * GIB] {
            let back = parse_size(&format_size(b)).unwrap();
            assert!(back.abs_diff(b) <= size_tolerance(b), "{b} -> {back}");
        }
    }

    #[test]
    fn messages_match_the_reference_formats() {
        let procs = [(23456, 20 * GIB), (30000, 58 * GIB)];
        let o = CudaOom {
            device: 0,
            pid: 30000,
            requested: 3 * GIB / 2,
            capacity: 81_008 << 20,
            free: 1_202_590_842,
            allocated: 55 * GIB,
            reserved: 56 * GIB,
            process_used: 58 * GIB,
            processes: &procs,
        };
        assert_eq!(
            torch_oom_message(TorchVersion::V2_5, &o),
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of \
             79.11 GiB of which 1.12 GiB is free. Process 23456 has 20.00 GiB memory in use. Including non-PyTorch \
             memory, this process has 58.00 GiB memory in use. Of the allocated memory 55.00 GiB is allocated by \
             PyTorch, and 1024.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is \
             large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See \
             documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        );
        assert_eq!(
            torch_oom_message(TorchVersion::V1_13, &o),
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 79.11 GiB total \
             capacity; 55.00 GiB already allocated; 1.12 GiB free; 56.00 GiB reserved in total by PyTorch) If \
             reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See \
             documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
        );
        assert!(torch_oom_message(TorchVersion::V1_12, &o).starts_with("RuntimeError: CUDA out of memory."));
    }

    #[test]
    fn kernel_and_log_lines() {
        let k = OomKill {
            pid: 12345,
            comm: "python",
            total_vm_kb: 123_456_789,
            anon_rss_kb: 98_765_432,
            file_rss_kb: 0,
            shmem_rss_kb: 0,
            uid: 1000,
            pgtables_kb: 234_567,
            oom_score_adj: 0,
        };
        assert_eq!(
            oom_kill_line(&k),
            "Out of memory: Killed process 12345 (python) total-vm:123456789kB, anon-rss:98765432kB, \
             file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:234567kB oom_score_adj:0"
        );
        assert!(kernel_log(&k, 1_234_567).contains("[ 1234.567412] Out of memory: Killed process 12345"));
        assert_eq!(step_line(120, 2.31414, 3e-4), "step 120 loss 2.3141 lr 3.0e-04");
        assert_eq!(py_sci(1.5e-5), "1.5e-05");
        let tb = traceback(TorchVersion::V2_3, Phase::Forward, AllocKind::Attention, "/workspace/train.py");
        assert!(tb.starts_with("Traceback (most recent call last):\n"));
        assert!(tb.contains("torch.matmul(query_states"));
        for phase in Phase::ALL {
            assert!(
                traceback(TorchVersion::V1_12, *phase, AllocKind::Activation, "train.py").ends_with('\n')
            );
        }
    }
}
