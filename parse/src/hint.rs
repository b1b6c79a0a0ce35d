//! What a message says beyond "out of memory": the failures whose own words name the cause or
//! the moment (serving engines' start-up checks, a batch-size search that gave up, a CUDA context
//! that could not be created). Carried as the event's `message.hint` label; the attribution rules
//! read it (`docs/attribution.md`).
//!
//! | hint | message |
//! |---|---|
//! | `kv_cache` | vLLM: `The model's max seq len (N) is larger than the maximum number of tokens that can be stored in KV cache (M)`, `To serve at least one request with the model's max seq len (N), X GiB KV cache is needed …`; TensorRT-LLM's executor / Rust engines: `insufficient GPU memory` creating the KV cache |
//! | `attention` | AUTOMATIC1111's split attention: `Not enough memory, use lower resolution` (also set from the failing code, `op.rs`) |
//! | `startup_free_memory` | vLLM: `Free memory on device … on startup is less than desired GPU memory utilization` |
//! | `cache_blocks` | vLLM: `No available memory for the cache blocks` |
//! | `sampler_warmup` | vLLM: `CUDA out of memory occurred when warming up sampler with N dummy requests` |
//! | `max_num_seqs` | vLLM: `max_num_seqs (N) exceeds available Mamba cache blocks` |
//! | `prefill_tokens` | TGI: `Not enough memory to handle N prefill tokens` |
//! | `mem_fraction_static` | SGLang: `Not enough memory. Please try to increase --mem-fraction-static` |
//! | `graph_capture` | SGLang / vLLM: `Capture cuda graph failed` |
//! | `model_load` | llama.cpp: `error loading model`, `unable to allocate CUDA0 buffer`, `failed to allocate … buffer of size` while loading; transformers: `Make sure you have enough GPU RAM to fit the quantized model` (part of the model was placed off the GPU); ExLlamaV2's `Insufficient VRAM for model and cache` (its auto-split at load) |
//! | `context_alloc` | llama.cpp: `failed to allocate buffer for kv cache`, `failed to allocate compute buffers`; node-llama-cpp: `A context size of N is too large for the available VRAM` |
//! | `batch_search_exhausted` | Accelerate: `No executable batch size found, reached zero.` (even batch size 1 failed) |
//! | `context_creation` | a CUDA context or a library's handle could not be created at start-up (`cuDevicePrimaryCtxRetain`, TensorFlow's `failed to create cublas handle`, `could not create cudnn handle`, old PyTorch's generator states `out of memory at …/THCTensorRandom.cu:25`) |
//! | `device_preallocation` | TensorFlow / XLA could not reserve its memory region (`failed to allocate X (N bytes) from device`) |
//! | `graph_tensor` | TensorFlow: `OOM when allocating tensor …`, the BFC allocator `ran out of memory trying to allocate` |
//! | `tensor_storage` | a framework that allocates its tensors with `cudaMalloc` itself, with no numbers: Caffe's `Check failed: error == cudaSuccess (2 vs. 0) out of memory` (`syncedmem.cpp`), Caffe2's `[enforce fail at context_gpu.cu:N] error == cudaSuccess. 2 vs 0`, old PyTorch / Torch7 `cuda runtime error (2) : out of memory at …/THCStorage.cu` |

/// The hint of a message whose compact text is `c`, if any.
pub fn message_hint(c: &str) -> Option<&'static str> {
    const HINTS: &[(&[&str], &str)] = &[
        (&["islargerthanthemaximumnumberoftokensthatcanbestoredinkvcache"], "kv_cache"),
        (&["toserveatleastonerequestwiththe", "kvcacheisneeded"], "kv_cache"),
        (&["insufficientgpumemory", "kvcache"], "kv_cache"),
        (&["notenoughmemory,uselowerresolution"], "attention"),
        (&["onstartupislessthandesiredgpumemoryutilization"], "startup_free_memory"),
        (&["noavailablememoryforthecacheblocks"], "cache_blocks"),
        (&["whenwarmingupsampler"], "sampler_warmup"),
        (&["exceedsavailablemambacacheblocks"], "max_num_seqs"),
        (&["notenoughmemorytohandle", "prefilltokens"], "prefill_tokens"),
        (&["--mem-fraction-static"], "mem_fraction_static"),
        (&["capturecudagraphfailed"], "graph_capture"),
        (&["errorloadingmodel"], "model_load"),
        (&["llama_model_load"], "model_load"),
        (&["unabletoallocatecuda0buffer"], "model_load"),
        (&["makesureyouhaveenoughgpuramtofitthequantizedmodel"], "model_load"),
        (&["insufficientvramformodelandcache"], "model_load"),
        (&["failedtoallocatebufferforkvcache"], "context_alloc"),
        (&["failedtoallocatecomputebuffers"], "context_alloc"),
        (&["failedtoallocatecomputeppbuffers"], "context_alloc"),
        (&["toolargefortheavailablevram"], "context_alloc"),
        (&["noexecutablebatchsizefound"], "batch_search_exhausted"),
        (&["cudeviceprimaryctxretain"], "context_creation"),
        (&["failedtocreatecublashandle"], "context_creation"),
        (&["couldnotcreatecudnnhandle"], "context_creation"),
        // Old PyTorch seeds its random generators on the device when CUDA first starts
        // (`THCTensorRandom.cu:25`): a few MiB, so an OOM there means others already filled it.
        (&["outofmemory", "thctensorrandom.cu"], "context_creation"),
        (&["cudasuccess(2vs"], "tensor_storage"),
        (&["cudasuccess.2vs0"], "tensor_storage"),
        (&["outofmemory", "thcstorage"], "tensor_storage"),
        (&["outofmemory", "thccachingallocator"], "tensor_storage"),
        (&["oomwhenallocatingtensor"], "graph_tensor"),
        (&["ranoutofmemorytryingtoallocate"], "graph_tensor"),
        (&["fromdevice:cuda_error_out_of_memory"], "device_preallocation"),
        (&["fromdevice:hiperror_t(1002)"], "device_preallocation"),
    ];
    HINTS.iter().find(|(words, _)| words.iter().all(|w| c.contains(w))).map(|(_, h)| *h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::compact;

    #[test]
    fn hints() {
        for (text, want) in [
            (
                "ValueError: The model's max seq len (4096) is larger than the maximum number of tokens that can be stored in KV cache (3664).",
                Some("kv_cache"),
            ),
            (
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
                Some("cache_blocks"),
            ),
            ("RuntimeError: No executable batch size found, reached zero.", Some("batch_search_exhausted")),
            (
                "failed call to cuDevicePrimaryCtxRetain: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
                Some("context_creation"),
            ),
            ("llama_model_load: error loading model: unable to allocate CUDA0 buffer", Some("model_load")),
            ("RuntimeError: Insufficient VRAM for model and cache", Some("model_load")),
            (
                "ValueError: Some modules are dispatched on the CPU or the disk. Make sure you have enough GPU RAM to fit the quantized model.",
                Some("model_load"),
            ),
            (
                "F1109 18:20:40.511134 28312 syncedmem.cpp:56] Check failed: error == cudaSuccess (2 vs. 0)  out of memory",
                Some("tensor_storage"),
            ),
            (
                "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCTensorRandom.cu:25",
                Some("context_creation"),
            ),
            (
                "RuntimeError: [enforce fail at context_gpu.cu:495] error == cudaSuccess. 2 vs 0. Error at: context_gpu.cu:495: out of memory",
                Some("tensor_storage"),
            ),
            // An issue title that retyped it: `(2 vs 0)`.
            ("Check failed: error == cudaSuccess(2 vs 0) out of memory", Some("tensor_storage")),
            (
                "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/torch/lib/THC/generic/THCStorage.cu:58",
                Some("tensor_storage"),
            ),
            (
                "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCGeneral.cpp:844",
                None,
            ),
            ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB", None),
        ] {
            assert_eq!(message_hint(&compact(text)), want, "{text}");
        }
    }
}
