//! What a message says beyond "out of memory": the failures whose own words name the cause or
//! the moment (serving engines' start-up checks, a batch-size search that gave up, a CUDA context
//! that could not be created). Carried as the event's `message.hint` label; the attribution rules
//! read it (`docs/attribution.md`).
//!
//! | hint | message |
//! |---|---|
//! | `kv_cache` | vLLM: `The model's max seq len (N) is larger than the maximum number of tokens that can be stored in KV cache (M)`, `To serve at least one request with the model's max seq len (N), X GiB KV cache is needed …`; TensorRT-LLM's executor / Rust engines: `insufficient GPU memory` creating the KV cache; TensorRT-LLM's `maxTokensInPagedKvCache must be large enough to process at least 1 sequence to completion` |
//! | `attention` | AUTOMATIC1111's split attention: `Not enough memory, use lower resolution` (also set from the failing code, `op.rs`) |
//! | `pinned_host` | TensorFlow / XLA pinning host memory: `failed to alloc N bytes on host: CUDA_ERROR_OUT_OF_MEMORY`, `could not allocate pinned host memory of size: N`, its host-side pool `Allocator (gpu_host_bfc)` / `(xla_gpu_host_bfc) ran out of memory`; also set from the failing code (`op.rs`): a bare runtime error raised while pinning host memory — the host's memory in the device's words |
//! | `startup_free_memory` | vLLM: `Free memory on device … on startup is less than desired GPU memory utilization` |
//! | `cache_blocks` | vLLM: `No available memory for the cache blocks` |
//! | `sampler_warmup` | vLLM: `CUDA out of memory occurred when warming up sampler with N dummy requests` |
//! | `max_num_seqs` | vLLM: `max_num_seqs (N) exceeds available Mamba cache blocks`; SGLang: `alloc_req_slots runs out of memory. Please set a smaller number for --max-running-requests` (its pool of request slots) |
//! | `prefill_tokens` | TGI: `Not enough memory to handle N prefill tokens` |
//! | `batch_pool` | early llama.cpp: `ggml_new_tensor_impl: not enough space in the context's memory pool (needed N, available M)` — its scratch pool was sized from the batch (`-b`, `n_batch`); a smaller batch fits |
//! | `kv_pool` | SGLang: `Decode out of memory. Try to lower your batch size.` (also `Prefill …`): its KV-cache pool had no slots left for the running batch |
//! | `mem_fraction_static` | SGLang: `Not enough memory. Please try to increase --mem-fraction-static` |
//! | `graph_capture` | SGLang / vLLM: `Capture cuda graph failed` |
//! | `model_load` | llama.cpp: `error loading model`, `unable to allocate CUDA0 buffer`, `failed to allocate … buffer of size` while loading; transformers: `Make sure you have enough GPU RAM to fit the quantized model` (part of the model was placed off the GPU); ExLlamaV2's `Insufficient VRAM for model and cache` (its auto-split at load) |
//! | `context_alloc` | llama.cpp: `failed to allocate buffer for kv cache`, `failed to allocate compute buffers`; node-llama-cpp: `A context size of N is too large for the available VRAM` |
//! | `batch_search_exhausted` | Accelerate: `No executable batch size found, reached zero.` (even batch size 1 failed); Wav2Lip's face detector: `Image too big to run face detection on GPU` (it halved its batch to one frame) |
//! | `context_creation` | a CUDA context or a library's handle could not be created at start-up (`cuDevicePrimaryCtxRetain`, TensorFlow's `failed to create cublas handle`, `could not create cudnn handle`, old PyTorch's generator states `out of memory at …/THCTensorRandom.cu:25`) |
//! | `device_preallocation` | TensorFlow / XLA could not reserve its memory region (`failed to allocate X (N bytes) from device`); Theano's CNMeM pool could not reserve its share (`cnmemInit call failed`) |
//! | `graph_tensor` | TensorFlow: `OOM when allocating tensor …`, the BFC allocator `ran out of memory trying to allocate` |
//! | `weight_tensor` | TensorFlow's refused tensor has a convolution kernel's shape (`[kh,kw,in,out]`, `[k,k,k,in,out]`; sides 2–7, channels ≤ 16384): a variable, its gradient or an optimizer slot (`tensor_role`) |
//! | `batch_tensor` | TensorFlow's refused tensor is an activation of rank ≥ 3 whose first (batch) dimension is 4 or more (not rank 3 ending in 1–4 channels: one image, `[150,600,3]`) |
//! | `long_tensor` | TensorFlow's refused tensor is an activation of rank ≥ 3 with a batch of 1 or 2 and a dimension before the last of 4096 or more: one long input (audio frames, tokens) |
//! | `tensor_storage` | a framework that allocates its tensors with `cudaMalloc` itself, with no numbers: Caffe's `Check failed: error == cudaSuccess (2 vs. 0) out of memory` (`syncedmem.cpp`), Caffe2's `[enforce fail at context_gpu.cu:N] error == cudaSuccess. 2 vs 0`, old PyTorch / Torch7 `cuda runtime error (2) : out of memory at …/THCStorage.cu` |

use super::text::has;

/// The hint of a message whose compact text is `c`, if any.
pub fn message_hint(c: &str) -> Option<&'static str> {
    const HINTS: &[(&[&str], &str)] = &[
        (&[super::frameworks::VLLM_KV_CHECK], "kv_cache"),
        (&["toserveatleastonerequestwiththe", "kvcacheisneeded"], "kv_cache"),
        (&["insufficientgpumemory", "kvcache"], "kv_cache"),
        (&["maxtokensinpagedkvcachemustbelargeenough"], "kv_cache"),
        (&["notenoughmemory,uselowerresolution"], "attention"),
        (&["onstartupislessthandesiredgpumemoryutilization"], "startup_free_memory"),
        (&["noavailablememoryforthecacheblocks"], "cache_blocks"),
        (&["whenwarmingupsampler"], "sampler_warmup"),
        (&["exceedsavailablemambacacheblocks"], "max_num_seqs"),
        (&["notenoughmemorytohandle", "prefilltokens"], "prefill_tokens"),
        (&["notenoughspaceinthe", "memorypool(needed"], "batch_pool"),
        (&["decodeoutofmemory.trytoloweryourbatchsize"], "kv_pool"),
        (&["prefilloutofmemory.trytoloweryourbatchsize"], "kv_pool"),
        (&["alloc_req_slotsrunsoutofmemory"], "max_num_seqs"),
        (&["--mem-fraction-static"], "mem_fraction_static"),
        (&["capturecudagraphfailed"], "graph_capture"),
        (&["errorloadingmodel"], "model_load"),
        (&["llama_model_load"], "model_load"),
        (&["unabletoallocatecuda0buffer"], "model_load"),
        (&["makesureyouhaveenoughgpuramtofitthequantizedmodel"], "model_load"),
        // ExLlama: `Insufficient VRAM for model and cache` (v2), `… in split for model and cache` (v3).
        (&["insufficientvram", "formodelandcache"], "model_load"),
        (&["failedtoallocatebufferforkvcache"], "context_alloc"),
        (&["failedtoallocatecomputebuffers"], "context_alloc"),
        (&["failedtoallocatecomputeppbuffers"], "context_alloc"),
        (&["toolargefortheavailablevram"], "context_alloc"),
        (&["noexecutablebatchsizefound"], "batch_search_exhausted"),
        (&["imagetoobigtorunfacedetectionongpu"], "batch_search_exhausted"),
        (&["cudeviceprimaryctxretain"], "context_creation"),
        (&["failedtocreatecublashandle"], "context_creation"),
        (&["createcublashandlefailed"], "context_creation"),
        (&["couldnotcreatecudnnhandle"], "context_creation"),
        // Old PyTorch seeds its random generators on the device when CUDA first starts
        // (`THCTensorRandom.cu:25`): a few MiB, so an OOM there means others already filled it.
        (&["outofmemory", "thctensorrandom.cu"], "context_creation"),
        (&["cudasuccess(2vs"], "tensor_storage"),
        (&["cudasuccess.2vs0"], "tensor_storage"),
        (&["outofmemory", "thcstorage"], "tensor_storage"),
        (&["outofmemory", "thccachingallocator"], "tensor_storage"),
        // TensorFlow / XLA pinning host memory through the driver and its host-side BFC pool:
        // `failed to alloc N bytes on host: CUDA_ERROR_OUT_OF_MEMORY`, `could not allocate pinned
        // host memory of size: N`, `Allocator (xla_gpu_host_bfc) ran out of memory …` (before
        // the device pool's `graph_tensor`).
        (&["bytesonhost:cuda_error_out_of_memory"], "pinned_host"),
        (&["couldnotallocatepinnedhostmemory"], "pinned_host"),
        (&["(gpu_host_bfc)ranoutofmemory"], "pinned_host"),
        (&["(xla_gpu_host_bfc)ranoutofmemory"], "pinned_host"),
        (&["oomwhenallocatingtensor"], "graph_tensor"),
        (&["ranoutofmemorytryingtoallocate"], "graph_tensor"),
        (&["fromdevice:cuda_error_out_of_memory"], "device_preallocation"),
        (&["fromdevice:hiperror_t(1002)"], "device_preallocation"),
        (&["fromdevice:hip_error_outofmemory"], "device_preallocation"),
        // Theano's CNMeM pool could not reserve its share of the device at start-up
        // (`initCnmem: cnmemInit call failed! Reason=CNMEM_STATUS_OUT_OF_MEMORY`).
        (&["cnmeminitcallfailed"], "device_preallocation"),
    ];
    HINTS.iter().find(|(words, _)| words.iter().all(|w| has(c, w))).map(|(_, h)| *h)
}

/// Kernel sides (`kh`, `kw`) a convolution's weight has: 1×1 kernels are left out, a `[1,1,H,W]`
/// single-channel image has the same shape.
const KERNEL_SIDES: std::ops::RangeInclusive<u64> = 2..=7;
/// The most channels a weight's input or output has.
const MAX_CHANNELS: u64 = 16_384;
/// A first dimension this large is a batch.
const MIN_BATCH: u64 = 4;
/// A dimension before the last this long, with a batch of one or two, is one long input.
const MIN_LONG: u64 = 4096;

/// What the shape of the tensor TensorFlow could not allocate says it was: `weight_tensor`,
/// `batch_tensor` or `long_tensor` (see the module table); `None` without a shape or for shapes
/// that do not tell (rank 1 or 2: an embedding table and a flattened batch's logits look alike).
pub fn tensor_role(c: &str) -> Option<&'static str> {
    let (dims, _) = crate::frameworks::tf_shape(c)?;
    let rank = dims.len();
    if matches!(rank, 4 | 5) {
        let (sides, channels) = dims.split_at(rank - 2);
        if sides.iter().all(|s| KERNEL_SIDES.contains(s) && *s == sides[0])
            && channels.iter().all(|c| (1..=MAX_CHANNELS).contains(c))
        {
            return Some("weight_tensor");
        }
    }
    // Rank 1 and 2 do not tell; a rank-3 tensor ending in 1–4 channels is as often one image
    // (`[150,600,3]`: height, width, RGB) as a batch of point sets.
    if rank < 3 || (rank == 3 && dims[2] <= 4) {
        return None;
    }
    if dims[0] >= MIN_BATCH {
        return Some("batch_tensor");
    }
    (dims[0] <= 2 && dims[..rank - 1].iter().any(|d| *d >= MIN_LONG)).then_some("long_tensor")
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
                "initCnmem: cnmemInit call failed! Reason=CNMEM_STATUS_OUT_OF_MEMORY. numdev=1",
                Some("device_preallocation"),
            ),
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
            ("RuntimeError: Decode out of memory. Try to lower your batch size.", Some("kv_pool")),
            (
                "RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for `--max-running-requests`.",
                Some("max_num_seqs"),
            ),
            // SGLang's log line when it retracts requests to make room: not a failure.
            ("Decode out of memory happened. #retracted_reqs: 3, #new_token_ratio: 0.3 -> 0.5", None),
        ] {
            assert_eq!(message_hint(&compact(text)), want, "{text}");
        }
    }

    /// Shapes from real TensorFlow OOMs (the corpus's), each with what its thread found.
    #[test]
    fn tensor_roles() {
        for (shape, want) in [
            // Convolution kernels: a model too large (faceswap, Intel's extension, DeepFaceLab).
            ("[3,3,1024,2048]", Some("weight_tensor")),
            ("[3,3,2560,1280]", Some("weight_tensor")),
            ("[3,3,3,3,64]", Some("weight_tensor")),
            // Batches of activations (SSD, DeepLabCut, YOLO, seq2seq logits).
            ("[16,64,300,300]", Some("batch_tensor")),
            ("[8,486,486,256]", Some("batch_tensor")),
            ("[59,128,195370]", Some("batch_tensor")),
            ("[2048,3,130,130]", Some("batch_tensor")),
            // One long input: Spleeter's spectrogram of a long song, WaveNet's 100 000 samples.
            ("[2,22264,2049]", Some("long_tensor")),
            ("[1,1,100000,512]", Some("long_tensor")),
            // A long last dimension is a vocabulary as often as a length.
            ("[2,1023,50257]", None),
            // Rank 1 and 2 do not tell; a 1×1 kernel is shaped like one grayscale image.
            ("[1024]", None),
            ("[3072,768]", None),
            ("[1,1,1024,1024]", None),
            // One image, height × width × RGB (an OCR model at batch 1).
            ("[150,600,3]", None),
            ("[3,1024,51,38]", None),
            ("[]", None),
        ] {
            let text = format!(
                "ResourceExhaustedError: OOM when allocating tensor with shape{shape} and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"
            );
            assert_eq!(tensor_role(&compact(&text)), want, "{text}");
        }
        // TensorFlow 1.x's wording.
        let old = "ResourceExhaustedError: OOM when allocating tensor of shape [3,3,512,2048] and type float";
        assert_eq!(tensor_role(&compact(old)), Some("weight_tensor"));
        assert_eq!(tensor_role(&compact("OOM when allocating tensor with shape[8,a,3]")), None);
        // TensorFlow 0.x: the shape's proto.
        let proto = "OOM when allocating tensor with shapedim { size: 73257 } dim { size: 32 } dim { size: 32 } dim { size: 32 }";
        assert_eq!(tensor_role(&compact(proto)), Some("batch_tensor"));
        for broken in [
            "OOM when allocating tensor with shapedim { size: 5",
            "OOM when allocating tensor with shapedim { size: x }",
        ] {
            assert_eq!(tensor_role(&compact(broken)), None, "{broken}");
        }
    }

    proptest::proptest! {
        /// Any shape: no panic, and both wordings read the same.
        #[test]
        fn any_shape_reads_the_same_in_both_wordings(dims in proptest::collection::vec(0u64..u64::MAX, 0..8)) {
            let list = dims.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
            let new = compact(&format!("OOM when allocating tensor with shape[{list}] and type float"));
            let old = compact(&format!("OOM when allocating tensor of shape [{list}] and type float"));
            proptest::prop_assert_eq!(tensor_role(&new), tensor_role(&old));
            if let Some(role) = tensor_role(&new) {
                proptest::prop_assert!(dims.len() >= 3, "{role} from rank {}", dims.len());
            }
        }
    }
}
