//! Which failure a line starts (the *family*), which later lines belong to it, and the numbers of
//! every family but PyTorch's allocator message (see `pytorch.rs`):
//!
//! | family | start (compact text contains) | framework |
//! |---|---|---|
//! | Torch | `CUDA/HIP/NPU/XPU out of memory. Tried to allocate`, `MPS backend out of memory` (also wrapped before `Tried to allocate`), torch_npu's `NPU memory is insufficient. Attempting to allocate …` with its figures, a caught OOM's `ran out of memory, skipping batch`, ComfyUI's report `**Exception Type:** torch.OutOfMemoryError`, `OutOfMemoryError`, its bare `Allocation on device` after a word on a short line (ComfyUI's title), the caching allocator's `NVML_SUCCESS == r INTERNAL ASSERT FAILED at …CUDACachingAllocator.cpp` (its OOM path on platforms without NVML), C++'s `terminate called after throwing an instance of 'c10::OutOfMemoryError'` | `pytorch` |
//! | Cuda | `CUDA error: out of memory`, `cudaErrorMemoryAllocation`, `cuda runtime error (2) : out of memory`, `CUDA_ERROR_OUT_OF_MEMORY`, the driver API's status as torch_memory_saver prints it (`CUresult error result=2`), NVIDIA's video encoder (`[h264_nvenc @ …] OpenEncodeSessionEx failed: out of memory (10)`, NVEncC's `nvEncOpenEncodeSessionEx: 10 (… unable to allocate enough memory …)`), Blender Cycles' `Out of memory in cuStreamCreate(…)` / `System is out of GPU and shared host memory`, cuML's `Not enough free memory on device N to run …`, MNN's `Out of memory when gamma is acquired in CudaLayerNorm`, early Caffe's `Check failed: (cudaMalloc(&gpu_ptr_, size_)) == cudaSuccess (2 vs. 0)`, the Spark RAPIDS Accelerator's `DeviceMemoryEventHandler: Device allocation of N bytes failed` (framework `rapids`), Intel Gaudi's `MODULE:PT_DEVMEM Allocation failed for size::N` (framework `habana`), cuBLAS that could not start (TensorFlow's `Blas GEMM launch failed`, MXNet's `Create cublas handle failed`; framework `cublas`), PyTorch's `Unable to find a valid cuDNN algorithm to run convolution` (framework `cudnn`), ONNX Runtime's `Available memory of 0 is smaller than requested bytes of N`, Huawei Ascend's CANN `EL0004 … Failed to allocate memory` / `[driver error:out of memory]` / its driver's `halMemAlloc failed … drvRetCode=6` (framework `ascend`), `THCudaCheck FAIL … error=2 : out of memory`, `CUDA driver error: out of memory`, `CUDA failed with error out of memory`, `Triton Error [CUDA]: out of memory`, `ErrStr:out of memory`, `… bytes of device memory (out of memory)`, `ran out of memory on GPU`, TensorRT's `Error Code 2: OutOfMemory`, ONNX Runtime's `BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer of size N` (not its CPU provider's: `…_nchwc` nodes), DirectML's `BucketizedBufferAllocator … 8007000E Not enough memory resources` (framework `directml`), torch-directml's `Could not allocate tensor with N bytes. There is not enough GPU video memory available!`, AUTOMATIC1111's `Not enough memory, use lower resolution`, Wav2Lip's `Image too big to run face detection on GPU` (framework `pytorch`), `insufficient GPU memory`, general wordings (`Out of GPU memory trying to allocate`, `not enough VRAM`, `GPU memory exhausted`; not when the line falls back or retries), OpenCL's `Memory Object Allocation Failure` / `CL_MEM_OBJECT_ALLOCATION_FAILURE`, CUDA's math libraries (`CUFFT_ALLOC_FAILED`, `cuFFT failed to allocate GPU or CPU memory`, `CUSPARSE_STATUS_ALLOC_FAILED`, cuSOLVER's, cuTENSOR's, `CURAND_STATUS_ALLOCATION_FAILED`), NVENC's status 10 after any call (`CreateBitstreamBuffer failed: out of memory (10)`), `Device out of memory`, SYCL's `UR_RESULT_ERROR_OUT_OF_RESOURCES` / `UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY` / `PI_ERROR_OUT_OF_RESOURCES` (Intel GPUs), RAPIDS RMM's `RMM failure … Maximum pool size exceeded` / `Initial pool size exceeds the maximum pool size`, RELION's `ERROR: out of memory in F at line N (error-code 2)`, PyTorch's MPS allocator's `Invalid buffer size: 19.38 GiB` (framework `pytorch`), Apple MLX's `[metal::malloc] Attempting to allocate N bytes which is greater than the maximum allowed buffer size` / `Resource limit (N) exceeded` / `[malloc_or_wait] Unable to allocate N bytes` and oMLX's guard `Memory limit exceeded during prefill` / `Prefill context too large for available memory` (framework `mlx`), the CUDA samples' check macro (bitsandbytes) `Error out of memory at line N in file F`, Tenstorrent tt-metal's `Out of Memory: Not enough space to allocate N B DRAM buffer across K banks` (its per-bank figures × K; framework `tt-metal`), Thrust's `std::bad_alloc: out of memory` and `parallel_for failed: out of memory`, MindSpore's pool (`alloc size : Q is more than total mem size : C`, `Memory isn't enough`; framework `mindspore`), Kaldi's `Failed to allocate a memory region of N bytes … Memory info: free:F, used:U` and `MallocInternal … Memory allocation failure` (framework `kaldi`), CubeCL's (Burn) `can't allocate buffer of size: N` / `No pool handles allocation of size N` (framework `cubecl`), OpenVINO's GPU plugin `… reduce memory consumption … CL_OUT_OF_RESOURCES` (framework `openvino`), Jittor's `GPU memory is overflow` (`jittor`), MegEngine's `out of memory while requesting N bytes` (`megengine`), Sophgo's `bm_alloc_gmem failed` (`sophon`), Metal's `Command buffer execution failed: Insufficient Memory` (`mlx`), the CUDA runtime's `out of memory` next to a CUDA source location (`out of memory at …/THCStorage.cu:58`, Thrust's `…/device_helpers.cuh(456): out of memory`), PyTorch-DirectML's `DML allocator out of memory!` (`directml`), Lua Torch's cuDNN `No algorithms found that would fit in free GPU memory` (`cudnn`), OpenVINO's `[GPU] Exceeded max size of memory object allocation` (`openvino`), OneFlow's `oneflow.ErrorProto.out_of_memory_error` (`oneflow`), HeavyDB's `Query couldn't keep the entire working set of columns in GPU memory` (`heavydb`), DeePMD-kit's `DeePMD-kit OOM: CUDA Assert` (`deepmd`), TensorRT 7's `[TensorRT] ERROR: … OutOfMemory Error in allocate` / `Out of memory error during getBestTactic` (`tensorrt`), torch_memory_saver's `CUresult error: 2 (out of memory)`, TensorRT-LLM's `maxTokensInPagedKvCache must be large enough to process at least 1 sequence` (`tensorrt-llm`), TensorFlow's / XLA's `Memory usage: F bytes free, T bytes total.` after cuDNN could not create its handle, with less than a tenth free, `Insufficient graphics memory`, Thrust's `temporary_buffer::allocate: get_temporary_buffer failed`, NNabla's `memory error in alloc` (`nnabla`), Kunlun XPUs' `XPU API return wrong value[-705], no enough memory` / `Device memory not enough` / `xpu api no enough workspace` (`kunlun`), MindIE's `Warmup failed, because of … out of memory` (`mindie`), Milvus's `out of memory: CPU2GPU` (`milvus`), any other line saying `out of memory` together with `CUDA` / `GPU` / `device` / `cudaMalloc`, and, as a last resort, a memory failure's words with a device's in any program's words (`generic.rs`; framework `other`: `failed to allocate 2.10 GiB on device 0`, `Out of video memory`, `GL_OUT_OF_MEMORY`) | `cuda`, or the framework whose code printed it (`tensorflow`, `jax`, `llama.cpp`, `mxnet`, `paddle`, `cupy`, `tensorrt`, `rapids`, …) |
//! | Cublas / Cudnn | `CUBLAS_STATUS_ALLOC_FAILED` / `CUDNN_STATUS_ALLOC_FAILED` | `cublas` / `cudnn` |
//! | Nccl | `Cuda failure 'out of memory'` (also `Cuda failure 2 'out of memory'`) | `nccl` |
//! | TfTensor | `OOM when allocating tensor with shape[…] and type T on …/device:GPU:N` (also cut to `ResourceExhaustedError: OOM`, or to the advice only it prints, `Hint: If you want to see a list of allocated tensors when OOM happens, …`, which after the error is its trailer), 1.x `Ran out of GPU memory when allocating N bytes for`, eager `ResourceExhaustedError: failed to allocate memory [Op:…]`, a 1.x session's root error `(0) Resource exhausted: failed to allocate memory`, the convolution autotuner's `RESOURCE_EXHAUSTED: Allocating N bytes exceeds the memory limit of M bytes` | `tensorflow` |
//! | Bfc | `Allocator (GPU_0_bfc) ran out of memory trying to allocate X (rounded to N)` + its dump | `tensorflow` or `jax` (by the logging source path / the final error) |
//! | Jax | `Out of memory while trying to allocate`, `Failed to allocate request for X (NB) on device ordinal N`, TPU `Ran out of memory in memory space hbm`, `Error allocating device buffer`, older PyTorch/XLA `Resource exhausted: Attempting to allocate X. That was not possible.`, XLA's `Failed to allocate N bytes for new constant` | `jax` |
//! | Hip | `HIP error: out of memory`, `hipErrorOutOfMemory`, hipCaffe's `'hipErrorMemoryAllocation'(1002)`, MIOpen's `Memory not available to allocate buffer: N` | `hip` |
//! | Cupy | `OutOfMemoryError: Out of memory allocating 1,024 bytes (allocated so far: …)` | `cupy` |
//! | Ggml | `cudaMalloc failed: out of memory`, `failed to allocate CUDA0 buffer of size N`, the Vulkan backend's `ggml_vulkan: Device memory allocation of size N failed.` / `ErrorOutOfDeviceMemory` (not a pinned host buffer, which falls back to a plain one); node-llama-cpp's `A context size of N is too large for the available VRAM`; ollama's `llama runner exited, you may not have enough available memory to run this model` | `llama.cpp` |
//! | Vllm | `No available memory for the cache blocks`, `Free memory on device [cuda:N] (F/C GiB) on startup is less than desired GPU memory utilization (u, R GiB)`, `The model's max seq len (N) is larger than the maximum number of tokens that can be stored in KV cache (M)` (also retyped by hand: `maxinum`), `To serve at least one request with the models's max seq len (N), (X GiB KV cache is needed, which is larger than the available KV cache memory (Y GiB)`, `max_num_seqs (N) exceeds available Mamba cache blocks` (an earlier `Memory profiling results: total_gpu_memory=…` line gives the capacity) | `vllm` |
//! | Paddle | `Out of memory error on GPU N. Cannot allocate X memory on GPU N, [Y memory has been allocated and] available memory is only Z.` (older: `Cannot allocate X GPU memory, available memory is Y`; an issue title's head alone, `Out of memory error on GPU`) + its hints | `paddle` |
//! | Serving | TGI `Not enough memory to handle N prefill tokens` / `… N total tokens with M prefill tokens`; SGLang `Not enough memory. Please try to increase --mem-fraction-static` | `tgi` / `sglang` |
//! | Accelerate | `No executable batch size found, reached zero.` (`find_executable_batch_size` caught an OOM at every batch size down to 0; the OOMs themselves are not printed) | `accelerate` |
//!
//! Wrappers (vLLM workers, DeepSpeed, Accelerate, torchrun) print the underlying framework's error
//! behind their own prefixes (`prefix.rs`); the event keeps the underlying framework.

use super::Fields;
use super::generic;
use super::prefix::Origin;
use super::text::{after, has};
use super::units::{GIB, number_at, size_at, u32_at, uint_at};

/// The kind of message that starts an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// PyTorch's caching allocator.
    Torch,
    /// The CUDA runtime or driver.
    Cuda,
    /// cuBLAS's `CUBLAS_STATUS_ALLOC_FAILED` (framework `cublas`).
    Cublas,
    /// cuDNN's `CUDNN_STATUS_ALLOC_FAILED` (framework `cudnn`).
    Cudnn,
    /// NCCL's `Cuda failure 'out of memory'` (framework `nccl`).
    Nccl,
    /// TensorFlow's tensor allocation failure.
    TfTensor,
    /// The BFC allocator of TensorFlow / XLA.
    Bfc,
    /// JAX / XLA / PJRT.
    Jax,
    /// ROCm's HIP runtime.
    Hip,
    /// CuPy's `OutOfMemoryError: Out of memory allocating …` (framework `cupy`).
    Cupy,
    /// llama.cpp / ggml.
    Ggml,
    /// vLLM's own memory checks.
    Vllm,
    /// Hugging Face Accelerate's automatic batch-size search giving up.
    Accelerate,
    /// PaddlePaddle's allocator.
    Paddle,
    /// A serving engine's own memory check (TGI, SGLang).
    Serving,
    /// Host memory ran out (`host.rs`): the event is a `host_oom_kill`.
    Host,
}

impl Family {
    /// Bit of this family in a set.
    pub fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// TensorFlow's advice that only its OOM error carries (compact `c`): `Hint: If you want to see a
/// list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom to RunOptions
/// for current allocation info.`
pub fn tf_oom_hint(c: &str) -> bool {
    has(c, "toseealistofallocatedtensorswhenoomhappens")
}

/// oMLX's memory guard stopping a prompt's prefill (compact `c`): `Memory limit exceeded during
/// prefill`, `… during chunked prefill at 51072/53418 tokens`, `Prefill context too large for
/// available memory (pre-chunk guard at 57344 tokens, …)`.
pub fn mlx_prefill_guard(c: &str) -> bool {
    (has(c, "memorylimitexceededduring") && has(c, "prefill"))
        || has(c, "prefillcontexttoolargeforavailablememory")
}

/// vLLM's start-up check that the model's context fits its KV cache (`The model's max seq len (N) is
/// larger than the maximum number of tokens that can be stored in KV cache (M)`), compact: the
/// words after "maximum", so that a hand-retyped copy (`… larger than the maxinum number of tokens
/// …`) still reads.
pub const VLLM_KV_CHECK: &str = "numberoftokensthatcanbestoredinkvcache";

/// The family whose message `c` (a compact line) starts, if any.
pub fn detect(c: &str) -> Option<Family> {
    // Cheap gate: every start contains one of these.
    if !(has(c, "memory")
        || has(c, "alloc")
        || has(c, "oom")
        || has(c, "out_of_memory")
        || has(c, "resource_exhausted")
        || has(c, "executablebatchsize")
        || has(c, "toserveatleastonerequest")
        || has(c, "storedinkvcache")
        || has(c, "anyotherprocessusinggpu")
        || has(c, "attemptingtoreserve")
        || has(c, "out_of_resources")
        || has(c, "vram")
        || has(c, "cublashandle")
        || has(c, "cublascreate(handle)")
        || has(c, "failedwitherror2")
        || has(c, "curesulterror")
        || has(c, "enoughgpuram")
        || has(c, "gpumem")
        || has(c, "dsttensorisnotinitialized")
        || has(c, "mambacacheblocks")
        || has(c, "gemmlaunchfailed")
        || has(c, "validcudnnalgorithm")
        || has(c, "hbmusage")
        || has(c, "invalidbuffersize")
        || has(c, "facedetectionongpu")
        || has(c, "pagedkvcache")
        || has(c, "enoughworkspace"))
    {
        return None;
    }
    // Warnings that only look like failures: TensorFlow's BFC allocator retrying with less.
    // DataParallel's wrapper of a replica's OOM names the failure whose own message follows it
    // (`LogParser` marks the traceback instead).
    if has(c, "thecallerindicatesthatthisisnotafailure") || replica_wrapper(c) {
        return None;
    }
    // llama.cpp's back-ends asking for a pinned host buffer fall back to a plain one when they
    // cannot have it (`ggml_cuda_host_malloc: failed to allocate 349659.17 MiB of pinned memory:
    // out of memory`, `ggml_vulkan: Failed to allocate pinned memory (… ErrorOutOfDeviceMemory)`).
    if (has(c, "ggml_cuda_host_malloc") || has(c, "ggml_vulkan")) && has(c, "pinnedmemory") {
        return None;
    }
    if has(c, "outofmemoryallocating") || has(c, "outofmemorytoallocate") {
        return Some(Family::Cupy);
    }
    if (has(c, "outofmemory") && has(c, "triedtoallocate")) || has(c, "mpsbackendoutofmemory") {
        return Some(Family::Torch);
    }
    // Ascend's torch_npu cut to its head: `RuntimeError: NPU out of memory.`; a build that words it
    // `NPU memory is insufficient. Attempting to allocate 386.00 MiB (NPU 1; total capacity …;
    // allocated …; currently active …; free …; PyTorch has reserved a total of …)`.
    if has(c, "error:npuoutofmemory") || has(c, "npumemoryisinsufficient.attemptingtoallocate") {
        return Some(Family::Torch);
    }
    // ComfyUI's error report (markdown): `- **Exception Type:** torch.OutOfMemoryError`.
    if has(c, "exceptiontype:**") && has(c, "outofmemoryerror") && !has(c, "java.lang") {
        return Some(Family::Torch);
    }
    // A training loop that caught PyTorch's OOM and went on (Boltz; fairseq's older trainer):
    // `WARNING: ran out of memory, skipping batch` — the batch's work is lost, no numbers.
    if has(c, "ranoutofmemory,skippingbatch") {
        return Some(Family::Torch);
    }
    // PyTorch's message pasted without its head (also an issue title cut right after 2.x's
    // `Tried to allocate 160.00 MiB. GPU`).
    if let Some(p) = after(c, "triedtoallocate", 0)
        && (has(c, "(gpu")
            || has(c, "(npu")
            || has(c, "hasatotalcapac")
            || size_at(c, p, false).is_some_and(|(_, e)| c[e..].starts_with(".gpu")))
    {
        return Some(Family::Torch);
    }
    if (c.starts_with("(gpu") || c.starts_with("(npu"))
        && has(c, "totalcapacity;")
        && has(c, "alreadyallocated")
    {
        return Some(Family::Torch);
    }
    // (Also its message at the end of a short line after a word — ComfyUI's error title glues the
    // node's name before it: `WanVideoSampler Allocation on device`; alone on its line it is read
    // with the head before it, `LogParser::head`.)
    if has(c, "allocationondevice")
        && (has(c, "wouldexceedallowedmemory")
            || (c.ends_with("allocationondevice")
                && (19..=64).contains(&c.len())
                && !has(c, "memoryallocationondevice"))
            || has(c, "outofmemoryerror:allocationondevice")
            || has(c, "exceptionduringprocessing")
            // Its UI's report: `Error occurred when executing KSampler:`, a blank line, the
            // message (joined by the parser's head).
            || has(c, "erroroccurredwhenexecuting"))
    {
        return Some(Family::Torch);
    }
    // (Also the head alone, as an issue title carries it: `Out of memory error on GPU`.) Its
    // allocator's exception as an operator reports it, before the message (`W0109 …
    // operator.cc:179] mul raises an exception paddle::memory::allocation::BadAlloc,`).
    if has(c, "outofmemoryerrorongpu") || has(c, "paddle::memory::allocation::badalloc") {
        return Some(Family::Paddle);
    }
    // The 1.5-era fluid allocator: `Cannot malloc 49.0002 MB GPU memory. Please shrink FLAGS_…`.
    if (has(c, "cannotallocate") && has(c, "gpumemory,availablememoryis"))
        || (has(c, "cannotmalloc") && has(c, "gpumemory"))
        || has(c, "pleasecheckwhetherthereisanyotherprocessusinggpu")
    {
        return Some(Family::Paddle);
    }
    // cuBLAS could not create its handle: `CUBLAS_STATUS_NOT_INITIALIZED when calling
    // `cublasCreate(handle)`` is how PyTorch reports the handle's workspace allocation failing on
    // a full GPU (without `cublasCreate` it says nothing of memory).
    if has(c, "cublas_status_alloc_failed")
        || (has(c, "cublas_status_not_initialized") && has(c, "cublascreate(handle)"))
    {
        return Some(Family::Cublas);
    }
    if has(c, "cudnn_status_alloc_failed") {
        return Some(Family::Cudnn);
    }
    if has(c, "cudafailure'outofmemory'") || has(c, "cudafailure2'outofmemory'") {
        return Some(Family::Nccl);
    }
    if has(c, "oomwhenallocatingtensor") {
        return Some(Family::TfTensor);
    }
    // The same with its first letters lost in a paste (`OM when allocating tensor with shape[…]
    // … by allocator GPU_0_bfc`): the shape and the allocator's name are TensorFlow's OOM alone.
    if has(c, "byallocator") && tf_shape(c).is_some() {
        return Some(Family::TfTensor);
    }
    // The same error cut to its head (an issue title, a one-line summary): `ResourceExhaustedError: OOM`.
    // Or to its last line, the advice only its OOM error carries: `Hint: If you want to see a list
    // of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom to RunOptions
    // for current allocation info.` (after the error's own line it is that error's trailer).
    if has(c, "resourceexhaustederror:oom") || tf_oom_hint(c) {
        return Some(Family::TfTensor);
    }
    // TensorFlow 1.x's GPU allocator: `ResourceExhaustedError: Ran out of GPU memory when
    // allocating N bytes for` + the node; TensorFlow 2's eager ops: `ResourceExhaustedError:
    // failed to allocate memory [Op:AddV2]`.
    // TensorFlow could not copy an input to the GPU (its allocator refused the destination):
    // `Failed copying input tensor from …/device:CPU:0 to …/device:GPU:0 in order to run
    // _EagerConst: Dst tensor is not initialized.`
    // TensorFlow / XLA autotuning a convolution whose workspace does not fit: `No algorithm
    // worked!  Error messages: Profiling failure on CUDNN engine 1: RESOURCE_EXHAUSTED: Allocating
    // 4718624784 bytes exceeds the memory limit of 4294967296 bytes.`
    if has(c, "resource_exhausted:allocating") && has(c, "exceedsthememorylimitof") {
        return Some(Family::TfTensor);
    }
    if has(c, "ranoutofgpumemorywhenallocating")
        // (Also alone: `InternalError (see above for traceback): Dst tensor is not initialized.`)
        || has(c, "dsttensorisnotinitialized")
        || ((has(c, "resourceexhaustederror:") || has(c, "resource_exhausted:"))
            && has(c, ":failedtoallocatememory"))
        // TensorFlow 1.x's session listing its root errors: `(0) Resource exhausted: failed to
        // allocate memory` under `ResourceExhaustedError: 2 root error(s) found.`
        || has(c, "resourceexhausted:failedtoallocatememory")
    {
        return Some(Family::TfTensor);
    }
    if has(c, "ranoutofmemorytryingtoallocate") {
        return Some(Family::Bfc);
    }
    // `ofmemorywhiletryingtoallocate`: also the older jaxlib line hard-wrapped after `Out`.
    if has(c, "ofmemorywhiletryingtoallocate")
        || has(c, "failedtoallocaterequestfor")
        || has(c, "ranoutofmemoryinmemoryspace")
        || has(c, "resource_exhausted:errorallocatingdevicebuffer")
        || has(c, "unlikelytohaveenoughmemory")
        || (has(c, "attemptingtoreserve") && has(c, "thatwasnotpossible"))
        // Older PyTorch/XLA on TPU: `Resource exhausted: Attempting to allocate 180.59M. That was
        // not possible. There are 142.58M free.; (0x3x0_HBM1)`.
        || (has(c, "attemptingtoallocate") && has(c, "thatwasnotpossible"))
        // XLA could not place a constant of the compiled program: `INTERNAL: Failed to allocate
        // 98697216 bytes for new constant`.
        || (has(c, "failedtoallocate") && has(c, "bytesfornewconstant"))
        // XLA's status alone, as an issue title carries it: `RESOURCE_EXHAUSTED: Out of memory`.
        || has(c, "resource_exhausted:outofmemory")
        // Older jaxlib (AlphaFold 2): `RuntimeError: Resource exhausted: Out of memory`.
        || has(c, "resourceexhausted:outofmemory")
        // A paste that begins at the TPU compiler's account of the memory it needed (its
        // `Ran out of memory in memory space hbm` headline cut off; after the headline the
        // account is the same failure's, `LogParser`).
        || tpu_usage_summary(c)
    {
        return Some(Family::Jax);
    }
    // MXNet's pooled storage manager (`cudaMalloc failed: out of memory`, `Memory allocation
    // failed.`): the CUDA runtime error in MXNet's words.
    if has(c, "pooled_storage_manager") && (has(c, "cudamallocfai") || has(c, "memoryallocationfailed")) {
        return Some(Family::Cuda);
    }
    if has(c, "cudamallocfailed:outofmemory")
        || (has(c, "failedtoallocatecuda") && has(c, "bufferofsize"))
        || (has(c, "unabletoallocate") && (has(c, "cuda0buffer") || has(c, "backendbuffer")))
        || has(c, "failedtoallocatebufferforkvcache")
        || has(c, "failedtoallocatecomputebuffers")
        // LM Studio's llama.cpp: `failed to allocate compute pp buffers`.
        || has(c, "failedtoallocatecomputeppbuffers")
        // Early llama.cpp's fixed context pool, sized from the batch: `ggml_new_tensor_impl: not
        // enough space in the context's memory pool (needed 819409712, available 805306368)`.
        || (has(c, "notenoughspaceinthe") && has(c, "memorypool(needed"))
        // ggml's Vulkan backend: `ggml_vulkan: Device memory allocation of size N failed.`,
        // `vk::Device::allocateMemory: ErrorOutOfDeviceMemory`.
        || (has(c, "ggml_vulkan:") && has(c, "memoryallocationofsize") && has(c, "failed"))
        || has(c, "erroroutofdevicememory")
        // node-llama-cpp's check before it creates a context: `A context size of 4096 is too
        // large for the available VRAM`.
        || (has(c, "contextsizeof") && has(c, "toolargefortheavailablevram"))
        // ollama when its runner died loading the model: `Error: llama runner exited, you may not
        // have enough available memory to run this model`.
        || has(c, "llamarunnerexited,youmaynothaveenoughavailablememory")
    {
        return Some(Family::Ggml);
    }
    if has(c, "hiperror:outofmemory")
        || has(c, "hiperroroutofmemory")
        // hipCaffe's check: `error: 'hipErrorMemoryAllocation'(1002) at src/caffe/syncedmem.cpp:56`.
        || has(c, "hiperrormemoryallocation")
        // MIOpen (ROCm's cuDNN) could not allocate its workspace: `MIOpen Error: …/handlehip.cpp:68:
        // Memory not available to allocate buffer: 528515072`.
        || has(c, "memorynotavailabletoallocatebuffer")
        || (has(c, "fromdevice:") && has(c, "hiperror_t(1002)"))
        // TensorFlow's ROCm driver wrapper: `rocm_driver.cc:600] failed to allocate 3.08G
        // (3304535552 bytes) from device: HIP_ERROR_OutOfMemory`.
        || has(c, "fromdevice:hip_error_outofmemory")
    {
        return Some(Family::Hip);
    }
    // PyTorch's caching allocator failed a request and then could not ask NVML for the GPU's
    // processes to print them (Jetson, WSL and other NVML-less platforms): `NVML_SUCCESS == r
    // INTERNAL ASSERT FAILED at ".../c10/cuda/CUDACachingAllocator.cpp":841` — its OOM message
    // path, with no numbers.
    if has(c, "nvml_success==rinternalassertfailed") && has(c, "cudacachingallocator") {
        return Some(Family::Torch);
    }
    // C++ code that let PyTorch's exception escape: `terminate called after throwing an instance
    // of 'c10::OutOfMemoryError'` (older: `'c10::CUDAOutOfMemoryError'`), its `what():` next.
    if has(c, "throwinganinstanceof'c10::") && has(c, "outofmemoryerror'") {
        return Some(Family::Torch);
    }
    // An `OutOfMemoryError:` of another program's host memory is `host.rs`'s ([`HOST_OOM_ERRORS`]),
    // and one that ends the line (DuckDB's CLI prints its message on the next) names no memory;
    // PyTorch's own (`torch.cuda.OutOfMemoryError:`, `torch.OutOfMemoryError:`) does, wherever its
    // message is.
    if has(c, "cudaoutofmemory")
        || has(c, "hipoutofmemory")
        || has(c, "torch.cuda.outofmemoryerror")
        || has(c, "torch.outofmemoryerror")
        || (has(c, "outofmemoryerror:")
            && !c.ends_with("outofmemoryerror:")
            && !HOST_OOM_ERRORS.iter().any(|w| has(c, w)))
    {
        return Some(Family::Torch);
    }
    if has(c, "noavailablememoryforthecacheblocks")
        || (has(c, "freememoryondevice") && has(c, "desiredgpumemoryutilization"))
        // Its head alone, the rest on the next line (`… (30.12/31.84 GiB) on startup` / `is less
        // than desired GPU memory utilization (0.95, 30.25 GiB).`, wrapped by hand).
        || (has(c, "freememoryondevice") && has(c, "onstartup"))
        || has(c, VLLM_KV_CHECK)
        || (has(c, "toserveatleastonerequestwiththe") && has(c, "maxseqlen"))
        || (has(c, "exceedsavailablemambacacheblocks"))
    {
        return Some(Family::Vllm);
    }
    if has(c, "notenoughmemorytohandle") && has(c, "prefilltokens") {
        return Some(Family::Serving);
    }
    if has(c, "notenoughmemory.pleasetrytoincrease--mem-fraction-static") {
        return Some(Family::Serving);
    }
    // SGLang's KV-cache pool had no slots left for the running batch (raised after evicting
    // what it could): `RuntimeError: Decode out of memory. Try to lower your batch size.` (also
    // `Prefill …`). Its log line `Decode out of memory happened` is a retraction, not a failure.
    if kv_pool_exhausted(c) {
        return Some(Family::Serving);
    }
    // Accelerate's `device_map="auto"` placed part of a quantized model off the GPU, which
    // transformers refuses: `Some modules are dispatched on the CPU or the disk. Make sure you have
    // enough GPU RAM to fit the quantized model.`
    if has(c, "noexecutablebatchsizefound") || has(c, "makesureyouhaveenoughgpuramtofitthequantizedmodel") {
        return Some(Family::Accelerate);
    }
    if cuda_runtime(c) || other_device_failure(c) || cudnn_start_on_full_gpu(c) {
        return Some(Family::Cuda);
    }
    None
}

/// TensorFlow's (and XLA's: JAX, Elixir's EXLA) account of the device after cuDNN could not create
/// its handle — `Could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR` then `Memory usage:
/// 433717248 bytes free, 25351290880 bytes total.` — with less than a tenth of the device free:
/// cuDNN had no room for its workspace (the error alone has other causes; the figures say which).
fn cudnn_start_on_full_gpu(c: &str) -> bool {
    memory_usage(c).is_some_and(|(free, total)| free.saturating_mul(10) < total)
}

/// The free and total bytes of `Memory usage: F bytes free, T bytes total`.
fn memory_usage(c: &str) -> Option<(u64, u64)> {
    let p = after(c, "memoryusage:", 0)?;
    let (free, e) = uint_at(c, p)?;
    let t = after(c, "bytesfree,", e).filter(|&t| t == e + "bytesfree,".len())?;
    let (total, e2) = uint_at(c, t)?;
    c.get(e2..).filter(|r| r.starts_with("bytestotal"))?;
    Some((free, total))
}

/// A failed device allocation in words no rule names (`generic.rs`): framework `other`.
pub fn other_device_failure(c: &str) -> bool {
    generic::device_memory_failed(c)
        && !has(c, "notenoughgpumemory?")
        && !unified_memory_retry(c)
        && !cuda_runtime(c)
}

/// XLA's unified-memory allocator (`TF_FORCE_UNIFIED_MEMORY`) logs a refused request and goes
/// on with a smaller one: `failed to alloc N bytes unified memory; result:
/// CUDA_ERROR_OUT_OF_MEMORY` — a real failure follows from the BFC allocator if there is one.
fn unified_memory_retry(c: &str) -> bool {
    has(c, "bytesunifiedmemory;result:")
}

/// The CUDA runtime's or driver's out-of-memory error, as any program prints it.
fn cuda_runtime(c: &str) -> bool {
    if unified_memory_retry(c) {
        return false;
    }
    if has(c, "cudaerror:outofmemory")
        || has(c, "cudaerrormemoryallocation")
        || has(c, "cudaruntimeerror(2):outofmemory")
        || has(c, "cuda_error_out_of_memory")
        || has(c, "cudaerror(2),outofmemory")
        // TensorRT's builder: `Error Code 2: OutOfMemory (no further information)`; TensorRT 7's
        // `[TensorRT] ERROR: ../rtSafe/WeightsPtr.cpp (92) - OutOfMemory Error in allocate: 0` and
        // `[TensorRT] ERROR: Out of memory error during getBestTactic: [FULLY_CONNECTED #1] …`.
        || has(c, "errorcode2:outofmemory")
        || (has(c, "[tensorrt]")
            && (has(c, "outofmemoryerrorinallocate") || has(c, "outofmemoryerrorduringgetbesttactic")))
        // SYCL's unified runtime (Intel GPUs, e.g. llama.cpp's SYCL backend): `UR backend returns:40
        // (UR_RESULT_ERROR_OUT_OF_RESOURCES)`; the older plugin interface's `PI_ERROR_OUT_OF_RESOURCES`.
        || has(c, "ur_result_error_out_of_resources")
        || has(c, "ur_result_error_out_of_device_memory")
        || has(c, "pi_error_out_of_resources")
        // Vulkan (TVM / MLC LLM): `Vulkan Error, code=-2: VK_ERROR_OUT_OF_DEVICE_MEMORY`.
        || has(c, "vk_error_out_of_device_memory")
        // cuBLAS could not create its handle (its workspace did not fit): TensorFlow / XLA
        // `failed to create cublas handle: CUBLAS_STATUS_NOT_INITIALIZED`, newer XLA `… the
        // resource allocation failed`.
        || (has(c, "failedtocreatecublashandle")
            && (has(c, "cublas_status_not_initialized") || has(c, "resourceallocationfailed")))
        // ONNX Runtime's arena (the CUDA / DirectML execution providers' device memory):
        // `onnxruntime::BFCArena::AllocateRawInternal Failed to allocate memory for requested
        // buffer of size N`.
        // (Not its CPU execution provider's arena, whose nodes the NCHWc layout renames
        // `347_nchwc`: host memory, `host.rs`.)
        || (has(c, "bfcarena") && has(c, "failedtoallocatememoryforrequestedbuffer") && !has(c, "_nchwc"))
        // DirectML's buffer allocator (ONNX Runtime's DirectML execution provider): `…
        // BucketizedBufferAllocator.cpp(122)\onnxruntime_pybind11_state.pyd!… Exception(1)
        // tid(…) 8007000E Not enough memory resources are available to complete this operation.`
        || (has(c, "bucketizedbufferallocator") && (has(c, "8007000e") || has(c, "enoughmemoryresources")))
        // torch-directml: `Could not allocate tensor with N bytes. There is not enough GPU video
        // memory available!`.
        || (has(c, "couldnotallocatetensorwith") && has(c, "notenoughgpuvideomemory"))
        // AUTOMATIC1111's split attention checks before it allocates: `RuntimeError: Not enough
        // memory, use lower resolution (max approx. 384x384). Need: 0.0GB free, Have:0.0GB free`.
        || has(c, "notenoughmemory,uselowerresolution")
        // Wav2Lip's face detector halves its batch on every CUDA OOM and gives up at one frame:
        // `RuntimeError: Image too big to run face detection on GPU. Please use the
        // --resize_factor argument` (its `Recovering from OOM error; New batch size: N` on the
        // way down is a retry, not a failure).
        || has(c, "imagetoobigtorunfacedetectionongpu")
        // TensorRT-LLM's executor, Rust engines: `… failed due to insufficient GPU memory`.
        || has(c, "insufficientgpumemory")
        // CUDA's math libraries refusing their workspace: cuFFT's `CUFFT_ALLOC_FAILED` (PyTorch's
        // `cuFFT error: CUFFT_ALLOC_FAILED`, CuPy's `CuFftError`) and its description (Julia's
        // `CUFFTError(code 2, cuFFT failed to allocate GPU or CPU memory)`), cuSPARSE's, cuSOLVER's
        // and cuTENSOR's `…_STATUS_ALLOC_FAILED`, cuRAND's `CURAND_STATUS_ALLOCATION_FAILED`.
        || has(c, "cufft_alloc_failed")
        || has(c, "cufftfailedtoallocate")
        || has(c, "cusparse_status_alloc_failed")
        || has(c, "cusolver_status_alloc_failed")
        || has(c, "cutensor_status_alloc_failed")
        || has(c, "curand_status_allocation_failed")
        // NVIDIA's video encoder's status 10 (`NV_ENC_ERR_OUT_OF_MEMORY`) as FFmpeg and the tools
        // built on it print any call's failure: `CreateBitstreamBuffer failed: out of memory (10)`.
        || has(c, "failed:outofmemory(10)")
        // OpenCL's CL_MEM_OBJECT_ALLOCATION_FAILURE, by its name or its text (`Memory Object
        // Allocation Failure`): a buffer the device could not hold (hashcat's
        // `clEnqueueNDRangeKernel(): CL_MEM_OBJECT_ALLOCATION_FAILURE`).
        || has(c, "memoryobjectallocationfailure")
        || has(c, "cl_mem_object_allocation_failure")
        // ArrayFire: `ArrayFire Exception (Device out of memory:101)`.
        || has(c, "deviceoutofmemory")
        || gpu_memory_ran_out(c)
        // RAPIDS' memory manager (RMM) pool over its limit: `RMM failure at: …
        // pool_memory_resource.hpp:179: Maximum pool size exceeded`.
        || (has(c, "rmmfailure")
            && (has(c, "maximumpoolsizeexceeded") || has(c, "initialpoolsizeexceedsthemaximumpoolsize")))
        // RMM's device memory resource refusing (cuDF, cuML, XGBoost): `std::bad_alloc:
        // out_of_memory: CUDA error at: …/rmm/mr/device/cuda_memory_resource.hpp` — not the host's
        // `std::bad_alloc`.
        || (has(c, "bad_alloc") && has(c, "rmm/mr/device"))
        // XGBoost's device allocator (`dh::detail`): `device_helpers.cuh:428: Memory allocation
        // error on worker 1: …` with `- Free memory:` / `- Requested memory:` lines after it.
        || (has(c, "device_helpers.cuh") && has(c, "memoryallocationerroron"))
        // RELION's GPU code: `ERROR: out of memory in …/acc_backprojector_impl.h at line 38
        // (error-code 2)`.
        || (has(c, "error:outofmemoryin") && has(c, "(error-code2)"))
        // Tenstorrent's tt-metal allocator: `Out of Memory: Not enough space to allocate N B DRAM
        // buffer across K banks, where each bank needs to store M B[, but bank size is S B]
        // [(allocated: A B, free: F B, largest free block: L B)]` (also L1 buffers).
        || (has(c, "outofmemory:notenoughspacetoallocate") && has(c, "buffer"))
        // The CUDA samples' check macro, as bitsandbytes' C code prints it: `Error out of memory
        // at line 380 in file /src/csrc/pythonInterface.c`.
        || (has(c, "erroroutofmemoryatline") && has(c, "infile"))
        // DyNet: `CUDA failure in cudaMalloc(&ptr, n)` (then `out of memory` on the next line).
        || has(c, "cudafailureincudamalloc")
        // PhysX's GPU allocator (Isaac Gym): `PxgCudaDeviceMemoryAllocator fail to allocate memory
        // 1073741824 bytes!! Result = 2`.
        || (has(c, "pxgcudadevicememoryallocator") && has(c, "failtoallocatememory"))
        // NVIDIA Warp: `RuntimeError: Array allocation failed on device: cuda:0 for 16777216 bytes`.
        || has(c, "arrayallocationfailedondevice:cuda")
        // Vulkan renderers: `VkResult: ERROR_OUT_OF_DEVICE_MEMORY`; ncnn (waifu2x, Upscayl):
        // `vkAllocateMemory failed -2` (-2 is VK_ERROR_OUT_OF_DEVICE_MEMORY). ncnn asks for
        // device-local memory only, and a driver out of it may say -1 (OUT_OF_HOST_MEMORY): the
        // reports of it were cured by a smaller tile, so it is the GPU's too.
        || has(c, "vkresult:error_out_of_device_memory")
        || ends_code(c, "vkallocatememoryfailed-2")
        || ends_code(c, "vkallocatememoryfailed-1")
        // Theano's CNMeM pool: `Error allocating 52428800 bytes of device memory
        // (CNMEM_STATUS_OUT_OF_MEMORY).`, `initCnmem: cnmemInit call failed!
        // Reason=CNMEM_STATUS_OUT_OF_MEMORY` (not its warning that falls back to pinned memory).
        || (has(c, "cnmem_status_out_of_memory")
            && (has(c, "bytesofdevicememory") || has(c, "cnmeminitcallfailed")))
        // Apple's MLX on Metal: `[metal::malloc] Attempting to allocate N bytes which is greater
        // than the maximum allowed buffer size of M bytes`, `[metal::malloc] Resource limit (N)
        // exceeded`.
        || (has(c, "[metal::malloc]")
            && (has(c, "attemptingtoallocate") || has(c, "resourcelimit")))
        // Its allocator waiting for memory to be freed, then giving up: `[malloc_or_wait] Unable
        // to allocate 9663676416 bytes.`
        || (has(c, "[malloc_or_wait]") && has(c, "unabletoallocate"))
        // oMLX (an MLX server) stopping a prompt's prefill at its memory ceiling: `Memory limit
        // exceeded during (chunked) prefill`, `Prefill context too large for available memory`.
        || mlx_prefill_guard(c)
        // PyTorch's MPS allocator refusing a buffer larger than Metal allows: `RuntimeError:
        // Invalid buffer size: 19.38 GiB`.
        || mps_buffer_limit(c)
        // (Its older releases said the same without the tag.)
        || mlx_buffer_limit(c)
        // Thrust (cuDF, XGBoost, CUDA C++) throws its device allocator's failure with the CUDA
        // error appended — `what():  std::bad_alloc: out of memory` (C++'s own host `bad_alloc`
        // says only `std::bad_alloc`) — and a failed kernel launch as `parallel_for failed: out of
        // memory`.
        || has(c, "std::bad_alloc:outofmemory")
        || has(c, "parallel_forfailed:outofmemory")
        || mindspore_refused(c)
        // Haskell's Accelerate on CUDA, its device-memory cache: `./Data/Array/Accelerate/Array/
        // Remote/LRU.hs:237:40: (malloc): Remote memory exhausted`.
        || has(c, "(malloc):remotememoryexhausted")
        // OpenFold3's runner logs the OOM it caught per query: `ERROR:openfold3.projects.
        // of3_all_atom.runner:OOM for query_id(s) BM50-P19.`
        || has(c, "oomforquery_id")
        // cuRAND's generator could not allocate its state: `CURANDError:
        // CURAND_STATUS_ALLOCATION_FAILED`.
        || has(c, "curand_status_allocation_failed")
        // Thrust's device allocator, its `what():` line cut off (also with a typographic quote).
        || has(c, "throwinganinstanceof'thrust::system::detail::bad_alloc")
        // tiny-cuda-nn (instant-ngp): `cudaMalloc(&rawptr, n_bytes+DEBUG_GUARD_SIZE*2) failed with
        // error out of memory`, also cut inside its last word.
        || (has(c, "cudamalloc(") && has(c, "failedwitherroroutofmemor"))
        // A CUDA extension's check (spconv in mmdet3d): `cuda execution failed with error 2` (2
        // is cudaErrorMemoryAllocation).
        || ends_code(c, "cudaexecutionfailedwitherror2")
        // The CUDA driver API's status 2 (CUDA_ERROR_OUT_OF_MEMORY) as torch_memory_saver
        // prints it for its `cuMemCreate`: `CUresult error  result=2 file=… func=cu_mem_create`.
        || ends_code(c, "curesulterrorresult=2")
        // HugeCTR's GPU buffers: `Runtime error: out of memory …/HugeCTR/include/general_buffer.hpp:64`.
        || (has(c, "runtimeerror:outofmemory") && has(c, "hugectr"))
        // ThunderSVM on the GPU: `FATAL [default] out of memory, you may try "-m memory size" to
        // constrain memory usage` (its host-side `out of host memory` is `host.rs`).
        || has(c, "outofmemory,youmaytry\"-mmemorysize\"")
        // NVIDIA's video encoder could not open a session (NV_ENC_ERR_OUT_OF_MEMORY, 10) in
        // NVEncC's words: `Error on nvEncOpenEncodeSessionEx: 10 (NVENC indicates that the API call
        // failed because it was unable to allocate enough memory …)` (FFmpeg's `[h264_nvenc @ …]
        // OpenEncodeSessionEx failed: out of memory (10)` is the generic rule's).
        || (has(c, "nvencopenencodesessionex") && has(c, "unabletoallocateenoughmemory"))
        // Blender Cycles' CUDA check (`Out of memory in cuStreamCreate(&cuda_stream_, …)`, also
        // `cuMemAlloc`) and its device-memory message `System is out of GPU and shared host memory`.
        || has(c, "outofmemoryincu")
        || has(c, "systemisoutofgpu")
        // cuML's check before a neighbours search: `Not enough free memory on device 0 to run
        // kneighbors. needed=8589934592, free=7744913408`.
        || has(c, "notenoughfreememoryondevice")
        // MNN's CUDA backend: `Out of memory when gamma is acquired in CudaLayerNorm.`
        || (has(c, "outofmemorywhen") && has(c, "isacquiredincuda"))
        // Early Caffe's check prints the call, not the words: `Check failed:
        // (cudaMalloc(&gpu_ptr_, size_)) == cudaSuccess (2 vs. 0)` (2: cudaErrorMemoryAllocation).
        || (has(c, "(cudamalloc(") && has(c, "==cudasuccess(2vs.0)"))
        // The Spark RAPIDS Accelerator's handler of a refused device allocation (its pool's
        // spilling could not make room): `DeviceMemoryEventHandler: Device allocation of 345571976
        // bytes failed, device store has 0 bytes. Total RMM allocated is 9319438848 bytes.`
        || (has(c, "devicememoryeventhandler:deviceallocationof") && has(c, "bytesfailed"))
        // Intel Gaudi's device memory (PyTorch on HPU): `FATAL ERROR :: MODULE:PT_DEVMEM Allocation
        // failed for size::469762048 (448)MB`.
        || has(c, "pt_devmemallocationfailedforsize::")
        // cuBLAS could not start (its handle and workspace did not fit), as TensorFlow 1.x
        // reports it when another process holds the GPU: `InternalError: Blas GEMM launch failed`
        // (`Blas xGEMM launch failed`); MXNet's `Check failed: err == CUBLAS_STATUS_SUCCESS (1 vs.
        // 0) : Create cublas handle failed`.
        || has(c, "blasgemmlaunchfailed")
        || has(c, "blasxgemmlaunchfailed")
        || has(c, "createcublashandlefailed")
        // cuDNN found no convolution algorithm whose workspace fits, as PyTorch reports it:
        // `RuntimeError: Unable to find a valid cuDNN algorithm to run convolution`.
        || has(c, "unabletofindavalidcudnnalgorithmtorunconvolution")
        // ONNX Runtime's arena: `BFCArena::AllocateRawInternal(…) Available memory of 0 is smaller
        // than requested bytes of 135383040`.
        || (has(c, "availablememoryof") && has(c, "issmallerthanrequestedbytesof"))
        // Huawei Ascend's runtime (CANN): `EL0004: … Failed to allocate memory.` with `Possible
        // Cause: Available memory is insufficient.`, `reason=[driver error:out of memory]`.
        || (has(c, "el0004") && has(c, "failedtoallocatememory"))
        || has(c, "reason=[drivererror:outofmemory]")
        // Its driver's allocation refused with `DRV_ERROR_OUT_OF_MEMORY` (6): `halMemAlloc
        // failed:size=32(Byte), type=17, …, drvRetCode=6, device_id=0!`.
        || ascend_driver_oom(c)
        // Kaldi's CUDA allocator: `ERROR (nnet3-chain-train[…]:AllocateNewRegion():cu-allocator.cc:
        // 513) Failed to allocate a memory region of 356515840 bytes.  Possibly smaller minibatch
        // size would help.  Memory info: free:190M, used:3844M, …`; its older allocator (and
        // Eesen's, derived from it): `ERROR (train-ctc-parallel:MallocInternal():cuda-device.cc:668)
        // Memory allocation failure`.
        || has(c, "failedtoallocateamemoryregionof")
        || (has(c, "mallocinternal") && has(c, "memoryallocationfailure"))
        // CubeCL (Burn's GPU runtime) on wgpu / CUDA: `failed to reserve 3595479680 bytes of device
        // memory: can't allocate buffer of size: 3595479680`, `No pool handles allocation of size
        // 411041792` (larger than its largest memory pool).
        || has(c, "can'tallocatebufferofsize")
        || (has(c, "failedtoreserve") && has(c, "bytesofdevicememory"))
        || has(c, "nopoolhandlesallocationofsize")
        // OpenVINO's GPU plugin (OpenCL): `… reduce memory consumption (use smaller batch size, less
        // streams, lower precision, etc)to avoid CL_OUT_OF_RESOURCES exception`.
        || (has(c, "cl_out_of_resources") && has(c, "memory"))
        // Jittor: `GPU memory is overflow, please reduce your batch_size or data size!`.
        || has(c, "gpumemoryisoverflow")
        // MegEngine: `RuntimeError: out of memory while requesting 68719476736 bytes; you can try
        // setting MGB_CUDA_RESERVE_MEMORY to reserve all memory`.
        || has(c, "outofmemorywhilerequesting")
        // Sophgo's BM1684 runtime (libsophon): `[bmlib_memory][error] bm_alloc_gmem failed,
        // dev_id = 0, size = 0x639c00` (its `Alloc Device Memory Failed!` a few lines later is the
        // same failure's).
        || has(c, "bm_alloc_gmemfailed")
        // Metal reporting a command buffer that could not get its memory (MLX on Apple silicon):
        // `[METAL] Command buffer execution failed: Insufficient Memory`.
        || has(c, "commandbufferexecutionfailed:insufficientmemory")
        // The CUDA runtime's error text after a location in CUDA source: a check macro's `out of
        // memory at /pytorch/torch/lib/THC/generic/THCStorage.cu:58` (old PyTorch, its head cut
        // off), Thrust's `what():  …/common/device_helpers.cuh(456): out of memory` (XGBoost).
        || cuda_source_oom(c)
        // PyTorch-DirectML's heap allocator: `[W dml_heap_allocator.cc:97] DML allocator out of
        // memory!` (the `RuntimeError: Unknown error -2147024882` after it is E_OUTOFMEMORY).
        || has(c, "dmlallocatoroutofmemory")
        // cuDNN's algorithm search under Lua Torch: `cudnn/find.lua:503: No algorithms found that
        // would fit in free GPU memory`.
        || has(c, "noalgorithmsfoundthatwouldfitinfreegpumemory")
        // OpenVINO's GPU plugin refusing one buffer over the device's limit: `[GPU] Exceeded max
        // size of memory object allocation: requested N bytes, but max alloc size supported by
        // device is M bytes.`, or over what is left: `[GPU] Exceeded max size of memory
        // allocation: Required N bytes, already occupied : O bytes, but available memory size is
        // A bytes`.
        || has(c, "[gpu]exceededmaxsizeofmemory")
        // TVM's Relax VM (MLC-LLM) whose planned storage is too small for a buffer: `storage
        // allocation failure, attempted to allocate N at offset 0 in region that is M bytes`.
        || (has(c, "storageallocationfailure") && has(c, "attemptedtoallocate"))
        // OneFlow's error proto: `Error Type: oneflow.ErrorProto.out_of_memory_error` (its glog
        // line before, `F… op_call_instruction_policy.cpp:209] out of memory`, names no device).
        || has(c, "oneflow.errorproto.out_of_memory_error")
        // Thrust's temporary device buffer (its algorithms' scratch space; MinkowskiEngine,
        // point-cloud ops): `temporary_buffer::allocate: get_temporary_buffer failed`.
        || has(c, "temporary_buffer::allocate:get_temporary_bufferfailed")
        // NNabla's allocator (its CUDA context): `RuntimeError: memory error in alloc`.
        || has(c, "runtimeerror:memoryerrorinalloc")
        // Kunlun XPUs (PaddlePaddle's XPU build): `XPU API return wrong value[-705], no enough
        // memory`, its driver's `ioctl() fail, (705) Device memory not enough`, a kernel's `xpu api
        // no enough workspace`.
        || (has(c, "xpuapireturnwrongvalue") && has(c, "noenoughmemory"))
        || has(c, "devicememorynotenough")
        || has(c, "xpuapinoenoughworkspace")
        // Huawei's MindIE serving engine at its warm-up: `Warmup failed, because of multimodal
        // model inference out of memory when `maxInputTokenLen` set to 8192.`
        || (has(c, "warmupfailed,becauseof") && has(c, "outofmemory"))
        // Milvus's status when a collection does not fit its GPU cache: `out of memory: CPU2GPU:1`.
        || has(c, "outofmemory:cpu2gpu")
        // torch_memory_saver's driver call in its newer words: `[torch_memory_saver.cpp] CUresult
        // error: 2 (out of memory) file=csrc/utils.h func=cu_mem_create line=187`.
        || has(c, "curesulterror:2(outofmemory)")
        // TensorRT-LLM's KV cache left too small by what the engine's weights and activations took:
        // `maxTokensInPagedKvCache must be large enough to process at least 1 sequence to
        // completion` (vLLM's `… larger than the maximum number of tokens that can be stored in KV
        // cache` in its words).
        || has(c, "maxtokensinpagedkvcachemustbelargeenough")
        // HeavyDB (OmniSci) could not hold a query's columns in the GPUs' buffer pools: `Query
        // couldn't keep the entire working set of columns in GPU memory`.
        || has(c, "couldn'tkeeptheentireworkingsetofcolumnsingpumemory")
        // DeePMD-kit's custom TensorFlow ops report a CUDA allocation failure as `Resource
        // exhausted: Operation received an exception: DeePMD-kit OOM: CUDA Assert`.
        || has(c, "deepmd-kitoom")
    {
        return true;
    }
    let Some(at) = c.find("outofmemory") else {
        return false;
    };
    // Host-side wording is not a GPU failure (`Out of memory: Killed process`, `MemoryError`).
    // (Slurm names the node of a task its cgroup killed — `srun: error: gpu001: task 0: Out Of
    // Memory` — which may be called `gpu…`: host memory, `host.rs`.)
    if has(c, "killedprocess") || has(c, "killprocess") || has(c, "oom-kill") || has(c, "srun:error:") {
        return false;
    }
    let before = &c[..at];
    // Advice, not a failure: vLLM's `CUDA graphs can take additional 1~3 GiB memory per GPU. If
    // you are running out of memory, consider decreasing `gpu_memory_utilization` …`.
    if before.ends_with("ifyouarerunning") || before.ends_with("ifyourun") {
        return false;
    }
    has(c, "thcudacheckfail")
        || has(c, "cudadrivererror:")
        || has(c, "cudafailedwitherror")
        || has(c, "tritonerror[cuda]")
        || has(c, "errstr:outofmemory")
        || has(c, "ofdevicememory(outofmemory)")
        || has(c, "ranoutofmemoryongpu")
        || has(c, "cudaruntimeerror")
        || (has(c, "cudaerror") && has(c, ":outofmemory"))
        || has(c, "outofmemoryat[")
        || has(c, "outofmemoryat(")
        || (has(c, "outofmemory:failedtoallocate") && has(c, "ondevice"))
        || ["cuda", "gpu", "cudamalloc", "cumemalloc", "vram", "nvenc"].iter().any(|w| before.contains(w))
}

/// Other programs' words for the GPU's memory running out (Julia's CUDA.jl `Out of GPU memory
/// trying to allocate 1.5 GiB`, `not enough VRAM`, `GPU memory exhausted`), unless the line says
/// the program falls back or retries instead of failing, or advises (`If you run out of GPU
/// memory, …`).
fn gpu_memory_ran_out(c: &str) -> bool {
    const RAN_OUT: &[&str] = &[
        "outofgpumemory",
        "notenoughgpumemory",
        "notenoughvram",
        "insufficientvram",
        "outofvram",
        "gpumemoryexhausted",
        "gpumemoryisexhausted",
        // Whisperer (whisper.cpp on Windows): `Insufficient graphics memory for this model!`.
        "insufficientgraphicsmemory",
        "notenoughgraphicsmemory",
        "outofgraphicsmemory",
    ];
    const FALLS_BACK: &[&str] =
        &["fallingback", "fallback", "fallsback", "retry", "willuse", "insteadof", "warning", "ifyou"];
    // ColabFold prefixes every failed prediction with its guess `Not Enough GPU memory?`, whatever
    // the error (its real OOMs carry XLA's `RESOURCE_EXHAUSTED`, read by the JAX family).
    RAN_OUT.iter().any(|w| c.contains(w))
        && !FALLS_BACK.iter().any(|w| c.contains(w))
        && !has(c, "notenoughgpumemory?")
}

/// Out-of-memory errors of host memory whose words contain `OutOfMemoryError:`: Java's
/// `java.lang.OutOfMemoryError: Java heap space` (the JVM's heap); Ray's memory monitor killing a
/// worker (`ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on
/// memory.`, older `RayOutOfMemoryError`); DuckDB's buffer manager (`Out of Memory Error: failed
/// to allocate data of size 256.0 MiB (12.2 GiB/12.1 GiB used)`, `… Failed to allocate block of
/// 2048 bytes`); AWS ECS / Batch stopping a task's container (`OutOfMemoryError: Container killed
/// due to memory usage`).
const HOST_OOM_ERRORS: &[&str] = &[
    "java.lang.outofmemoryerror",
    "rayoutofmemoryerror",
    "ray.exceptions.outofmemoryerror",
    "duckdb",
    "outofmemoryerror:failedtoallocatedataofsize",
    "outofmemoryerror:failedtoallocateblockof",
    "outofmemoryerror:containerkilled",
];

/// The TPU compiler's account of a program that did not fit: `Total hbm usage >= 11.47G:`.
pub fn tpu_usage_summary(c: &str) -> bool {
    c.starts_with("totalhbmusage>=")
}

/// A wrapper's re-raise of a failure in another worker, whose own traceback and message follow:
/// DataParallel's `torch.OutOfMemoryError: Caught OutOfMemoryError in replica 0 on device 0.`;
/// Ray's `ray.exceptions.RayTaskError(OutOfMemoryError): ray::LLMActor.backload_to_gpu() (pid=…)`
/// — Ray wraps an actor's or task's own exception this way: PyTorch's `OutOfMemoryError` of a GPU
/// worker (`MegatronTrainRayActor.train()`, `DTensorPolicyWorkerV2.get_logprobs()` in real
/// pastes cut right after it). Ray's own host kill (`ray.exceptions.OutOfMemoryError: Task was
/// killed due to the node running low on memory`) reaches the driver unwrapped; wrapped only when
/// an actor waited on the killed task, and then its words follow and are read as the host's.
pub fn replica_wrapper(c: &str) -> bool {
    has(c, "caughtoutofmemoryerrorinreplica") || has(c, "raytaskerror(outofmemoryerror)")
}

/// True when a new start of family `new` is part of a pending event of family `pending` (the same
/// failure printed again by another layer) rather than a failure of its own.
pub fn absorbs(pending: Family, new: Family) -> bool {
    use Family::*;
    match pending {
        Bfc => matches!(new, Bfc | TfTensor | Jax | Cuda),
        Jax => matches!(new, Bfc),
        Nccl => matches!(new, Nccl),
        Ggml => matches!(new, Ggml | Cuda),
        Cuda => matches!(new, Cuda | Ggml),
        Cublas => matches!(new, Cublas),
        Cudnn => matches!(new, Cudnn),
        Hip => matches!(new, Hip),
        // Its traceback shows the `raise` line, then the exception: one failure.
        Accelerate => matches!(new, Accelerate),
        // The same failure's next line (Paddle prints the message twice on some paths).
        Paddle => matches!(new, Paddle | Cuda),
        // Several symptoms of one death (`Killed` and the scheduler's oom-kill line).
        Host => matches!(new, Host),
        Torch | TfTensor | Cupy | Vllm | Serving => false,
    }
}

/// Lines that follow a CUDA error report (PyTorch's C10_CUDA_CHECK, ggml's CUDA_CHECK).
const CUDA_TRAILERS: &[&str] = &[
    "cudakernelerrorsmightbe",
    "fordebuggingconsider",
    "compilewith`torch_use_cuda_dsa`",
    "searchfor`cuda",
    "currentdevice:",
    "cudamalloc(",
    "exceptionraisedfrom",
    "frame#",
    "ggml_assert",
    "hipkernelerrorsmightbe",
    "compilewith`torch_use_hip_dsa`",
    // TensorRT's builder after a refused workspace: its warnings, and the tactic it skipped
    // (also behind its logger's `[date-time] [TRT] [W]`, `continues`).
    "requestedamountofgpumemory(",
    "skippingtactic",
    "trydecreasingtheworkspacesize",
    "tryincreasingtheworkspacesize",
    // XGBoost's allocator: the device's free memory and the request.
    "-freememory:",
    "-requestedmemory:",
];

/// The rest of tt-metal's message when a paste wraps it.
const TT_TRAILERS: &[&str] = &["whereeachbankneedstostore", "(allocated:", "butbanksizeis"];

const BFC_STATS: &[&str] = &[
    "limit:",
    "inuse:",
    "maxinuse:",
    "numallocs:",
    "maxallocsize:",
    "reserved:",
    "peakreserved:",
    "largestfreeblock:",
    "stats:",
];

/// True when a line that starts nothing belongs to a pending event of `family` (not PyTorch's
/// wrapped message, see `pytorch::continues`). `c` is the compact line, `o` its origin and
/// `event_pid` the pending event's pid.
pub fn continues(family: Family, c: &str, o: &Origin, event_pid: Option<u32>) -> bool {
    match family {
        Family::Torch => false,
        Family::Cuda | Family::Cublas | Family::Cudnn | Family::Hip | Family::Ggml => {
            CUDA_TRAILERS.iter().any(|t| c.starts_with(t))
                || (has(c, "[trt][w]") && (has(c, "skippingtactic") || has(c, "requestedamountofgpumemory(")))
                || (family == Family::Cuda && TT_TRAILERS.iter().any(|t| c.starts_with(t)))
                || (family == Family::Ggml
                    && (c.starts_with("ggml_")
                        || c.starts_with("llama_")
                        || c.starts_with("alloc_tensor_range"))
                    && (has(c, "fail") || has(c, "error") || has(c, "unable")))
        }
        Family::Nccl => {
            (o.pid.is_some() && o.pid == event_pid && has(c, "->"))
                || c.starts_with("lasterror:")
                || c.starts_with("ncclunhandledcudaerror")
        }
        Family::TfTensor => {
            c.starts_with("[[")
                || c.starts_with("hint:")
                || c.starts_with("thisisn't")
                || c.starts_with("[op:")
        }
        Family::Bfc => {
            o.src.as_deref().is_some_and(|s| s.contains("bfc_allocator") || s.contains("op_kernel"))
                || BFC_STATS
                    .iter()
                    .any(|k| c.starts_with(k) && c.as_bytes().get(k.len()).is_some_and(u8::is_ascii_digit))
                || c == "stats:"
        }
        Family::Paddle => {
            c.starts_with("pleasecheckwhether")
                || c.starts_with("1.ifyes")
                || c.starts_with("2.ifno")
                || c.starts_with("3.")
                || c.starts_with("(at")
                || c.starts_with(".(at")
                || c.starts_with("[hint:")
                || c.starts_with("availablememoryis")
                || c.starts_with("thecommandis")
                || c.starts_with("ifthe")
                || (c.ends_with("mb.") || c.ends_with("gb.") || c.ends_with("kb.")) && c.len() < 24
        }
        Family::Vllm => {
            has(c, "kvcacheisneeded")
                || c.starts_with("basedontheavailablememory")
                || c.starts_with("tryincreasing")
                || c.starts_with("decreasegpumemoryutilization")
                // The start-up check's second half, when a hand wrapped it after `on startup`
                // (or after its `is`).
                || c.strip_prefix("is").unwrap_or(c).starts_with("lessthandesiredgpumemoryutilization")
        }
        Family::Jax | Family::Cupy | Family::Accelerate | Family::Serving | Family::Host => false,
    }
}

/// Words the requested size follows, in runtimes that print nothing else:
const REQUEST_BEFORE: &[&str] = &[
    // TensorFlow's autotuner: `RESOURCE_EXHAUSTED: Allocating 4718624784 bytes exceeds the memory
    // limit of 4294967296 bytes`.
    "resource_exhausted:allocating",
    // PhysX: `PxgCudaDeviceMemoryAllocator fail to allocate memory 1073741824 bytes!!`.
    "pxgcudadevicememoryallocatorfailtoallocatememory",
    // Theano: `Error allocating 52428800 bytes of device memory (CNMEM_STATUS_OUT_OF_MEMORY)`.
    "memoryerror:errorallocating",
    // MIOpen: `Memory not available to allocate buffer: 528515072`.
    "memorynotavailabletoallocatebuffer:",
    // PyTorch's MPS allocator: `Invalid buffer size: 19.38 GiB`.
    "invalidbuffersize:",
    // MLX: `[metal::malloc] Attempting to allocate 48736917632 bytes which is greater than …`.
    "[metal::malloc]attemptingtoallocate",
    "attemptingtoallocate",
    // TensorRT: `Requested amount of GPU memory (2147483648 bytes) could not be allocated`.
    "requestedamountofgpumemory(",
    // ONNX Runtime's arena: `… Failed to allocate memory for requested buffer of size 643840`.
    "requestedbufferofsize",
    // torch-directml: `Could not allocate tensor with 2025000000 bytes. There is not enough GPU
    // video memory available!`.
    "couldnotallocatetensorwith",
    // Julia's CUDA.jl: `Out of GPU memory trying to allocate 1.500 GiB`.
    "outofgpumemorytryingtoallocate",
    // TensorFlow 1.x: `Ran out of GPU memory when allocating 1294336000 bytes for`.
    "ranoutofgpumemorywhenallocating",
    // ONNX Runtime: `Available memory of 0 is smaller than requested bytes of 135383040`.
    "issmallerthanrequestedbytesof",
    // Spark RAPIDS: `Device allocation of 345571976 bytes failed`.
    "devicememoryeventhandler:deviceallocationof",
    // Intel Gaudi: `Allocation failed for size::469762048 (448)MB`.
    "pt_devmemallocationfailedforsize::",
    // MegEngine: `out of memory while requesting 68719476736 bytes`.
    "outofmemorywhilerequesting",
    // Kaldi: `Failed to allocate a memory region of 356515840 bytes`.
    "failedtoallocateamemoryregionof",
    // CubeCL: `can't allocate buffer of size: 4395368448`, `failed to reserve 3595479680 bytes of
    // device memory`, `No pool handles allocation of size 411041792`.
    "can'tallocatebufferofsize:",
    "nopoolhandlesallocationofsize",
    // TVM's Relax VM: `storage allocation failure, attempted to allocate 16785408 at offset 0 in
    // region that is 16777216bytes` (the region is its planned storage, not the device).
    "storageallocationfailure,attemptedtoallocate",
];

/// True when the unit a size was read with, ending at `e` of compact `c`, is a lone `b` glued to
/// a word (`2buffers`, compacted from `2 buffers`), not a unit.
fn bare_b_in_word(c: &str, e: usize) -> bool {
    let b = c.as_bytes();
    e >= 2 && b[e - 1] == b'b' && b[e - 2].is_ascii_digit() && b.get(e).is_some_and(u8::is_ascii_alphabetic)
}

/// Words any program may put right before the size of a request it could not serve.
const REQUEST_ANY: &[&str] = &[
    "failedtoallocate",
    "unabletoallocate",
    "cannotallocate",
    "couldnotallocate",
    "can'tallocate",
    "allocationof",
];

/// True when `c` contains `needle`, which ends in an error code, with no further digit after it
/// (`… error 2` is an out-of-memory code, `… error 20` is not).
fn ends_code(c: &str, needle: &str) -> bool {
    after(c, needle, 0)
        .is_some_and(|e| !c.get(e..).is_some_and(|r| r.starts_with(|ch: char| ch.is_ascii_digit())))
}

/// True when compact line `c` is PaddlePaddle's operator reporting its allocator's exception
/// without the message that follows it (`mul raises an exception
/// paddle::memory::allocation::BadAlloc,`).
pub fn paddle_report_head(c: &str) -> bool {
    has(c, "paddle::memory::allocation::badalloc") && !has(c, "outofmemoryerrorongpu")
}

/// `out of memory` next to a location in CUDA source (`….cu:58`, `….cuh(456)`): the CUDA runtime's
/// error text as a check macro prints it, whatever program's code it is.
fn cuda_source_oom(c: &str) -> bool {
    has(c, "outofmemory") && !has(c, "host") && [".cu:", ".cu(", ".cuh:", ".cuh("].iter().any(|w| has(c, w))
}

/// Huawei Ascend's driver refusing a device allocation for want of memory: `halMemAlloc
/// failed` with `drvRetCode=6` (`DRV_ERROR_OUT_OF_MEMORY` in the driver's error codes).
fn ascend_driver_oom(c: &str) -> bool {
    has(c, "halmemallocfailed")
        && after(c, "drvretcode=", 0).is_some_and(|p| {
            c.as_bytes().get(p) == Some(&b'6') && !c.as_bytes().get(p + 1).is_some_and(u8::is_ascii_digit)
        })
}

/// PyTorch's MPS allocator (Apple silicon) refusing one buffer larger than the device allows:
/// `Invalid buffer size: 19.38 GiB` (a size with its unit after the words).
fn mps_buffer_limit(c: &str) -> bool {
    after(c, "invalidbuffersize:", 0).and_then(|p| size_at(c, p, false)).is_some()
}

/// Apple MLX refusing a buffer larger than Metal allows, in the wording of its releases before the
/// `[metal::malloc]` tag: `Attempting to allocate N bytes which is greater than the maximum allowed
/// buffer size of M bytes.`
fn mlx_buffer_limit(c: &str) -> bool {
    has(c, "attemptingtoallocate") && has(c, "whichisgreaterthanthemaximumallowedbuffersize")
}

/// TensorRT's builder skipped a tactic for want of memory: its `Error Code 2: OutOfMemory` before
/// that line was recovered from.
pub fn tactic_skipped(c: &str) -> bool {
    has(c, "skippingtactic") && has(c, "duetoinsufficientmemory")
}

/// SGLang's KV pool refusing the running batch (see `detect`).
pub fn kv_pool_exhausted(c: &str) -> bool {
    has(c, "decodeoutofmemory.trytoloweryourbatchsize")
        || has(c, "prefilloutofmemory.trytoloweryourbatchsize")
        // Its pool of request slots (a row of token indices per running request, on the GPU):
        // `RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for
        // `--max-running-requests`.`
        || has(c, "alloc_req_slotsrunsoutofmemory")
}

/// Reads the numbers of one line (or a joined message) of a non-PyTorch family into `f`.
pub fn extract(c: &str, f: &mut Fields) {
    tf_tensor(c, f);
    bfc(c, f);
    jax(c, f);
    cupy(c, f);
    ggml(c, f);
    tt_metal(c, f);
    mindspore(c, f);
    vllm(c, f);
    paddle(c, f);
    // The requested size right after these words (a size with its unit, or bare bytes).
    for key in REQUEST_BEFORE {
        if let Some(p) = after(c, key, 0)
            && let Some((v, _)) = size_at(c, p, false).or_else(|| uint_at(c, p))
        {
            f.requested.get_or_insert(v);
        }
    }
    // Any other program's refused request with its size and unit right after the words
    // (`failed to allocate 2.10 GiB on device 0`): read last, when nothing above did. A bare
    // number there is not taken (`failed to allocate 2 buffers`).
    for key in REQUEST_ANY {
        if let Some(p) = after(c, key, 0)
            && let Some((v, e)) = size_at(c, p, false)
            && !bare_b_in_word(c, e)
        {
            f.requested.get_or_insert(v);
        }
    }
    // XGBoost's allocator lists the device's free memory and the request on lines of their own.
    for (key, slot) in [("-freememory:", &mut f.free), ("-requestedmemory:", &mut f.requested)] {
        if let Some(p) = after(c, key, 0)
            && let Some((v, _)) = uint_at(c, p)
        {
            slot.get_or_insert(v);
        }
    }
    // CatBoost's GPU memory pool: `(NCudaLib::TOutOfMemoryError) …stack_like_memory_pool.h:303:
    // Error: Out of memory. Requested 8880 MB; Free 5902.061425 MB`.
    if let Some(p) = after(c, "error:outofmemory.requested", 0)
        && let Some((q, e)) = size_at(c, p, false)
    {
        f.requested.get_or_insert(q);
        if let Some((free, _)) =
            after(c, ";free", e).filter(|r| *r == e + 5).and_then(|r| size_at(c, r, false))
        {
            f.free.get_or_insert(free);
        }
    }
    // OpenVINO's GPU plugin: `[GPU] Exceeded max size of memory allocation: Required 8257536
    // bytes, already occupied : 7927400508 bytes, but available memory size is 7927406592 bytes`
    // (the device's memory: an integrated GPU's share of the host's).
    if let Some(p) = after(c, "[gpu]exceededmaxsizeofmemoryallocation:required", 0)
        && let Some((q, e)) = uint_at(c, p)
    {
        f.requested.get_or_insert(q);
        let occupied = after(c, "alreadyoccupied:", e).and_then(|r| uint_at(c, r));
        let available = after(c, "availablememorysizeis", e).and_then(|r| uint_at(c, r));
        if let (Some((used, _)), Some((total, _))) = (occupied, available) {
            f.capacity.get_or_insert(total);
            f.free.get_or_insert(total.saturating_sub(used));
        }
    }
    // Warp: `Array allocation failed on device: cuda:0 for 16777216 bytes`.
    if let Some(p) = after(c, "arrayallocationfailedondevice:cuda", 0)
        && let Some(q) = after(c, "for", p)
        && let Some((v, e)) = uint_at(c, q)
        && c.get(e..).is_some_and(|r| r.starts_with("bytes"))
    {
        f.requested.get_or_insert(v);
    }
    kaldi(c, f);
    // Spark RAPIDS: `Total RMM allocated is 9319438848 bytes` (its pool's allocations).
    if let Some((v, _)) = after(c, "totalrmmallocatedis", 0).and_then(|p| uint_at(c, p)) {
        f.allocated.get_or_insert(v);
    }
    if let Some((free, total)) = memory_usage(c) {
        f.free.get_or_insert(free);
        f.capacity.get_or_insert(total);
    }
    if let Some((v, _)) = after(c, "totalmemoryreported:", 0).and_then(|p| uint_at(c, p)) {
        f.capacity.get_or_insert(v);
    }
    if let Some((g, _)) = after(c, "currentdevice:", 0).and_then(|p| u32_at(c, p)) {
        f.gpu.get_or_insert(g);
    }
    // TensorFlow / XLA stream executor: `failed to allocate 2.00G (2147483648 bytes) from device`.
    if let Some(p) = after(c, "failedtoallocate", 0)
        && let Some((_, e)) = size_at(c, p, true)
        && let Some((v, e2)) = c.get(e..).filter(|s| s.starts_with('(')).and_then(|_| uint_at(c, e + 1))
        && c.get(e2..).is_some_and(|s| s.starts_with("bytes)"))
    {
        f.requested.get_or_insert(v);
    }
}

/// Kaldi's allocator prints the device's memory in MiB (`M`) after its failure: `Memory info:
/// free:15426M, used:17053M, total:32480M, free/total:0.474948`, in older releases without the
/// total (then free + used is the card).
fn kaldi(c: &str, f: &mut Fields) {
    let Some(p) = after(c, "memoryinfo:free:", 0) else { return };
    let Some((free, e)) = size_at(c, p, true) else { return };
    f.free.get_or_insert(free);
    let used = after(c, ",used:", e).filter(|&u| u == e + 6).and_then(|u| size_at(c, u, true));
    let total = used
        .and_then(|(_, e)| after(c, ",total:", e).filter(|&t| t == e + 7))
        .and_then(|t| size_at(c, t, true));
    if let Some((total, _)) = total {
        f.capacity.get_or_insert(total);
    } else if let Some((used, _)) = used {
        f.capacity.get_or_insert(free.saturating_add(used));
    }
}

fn dtype_size(name: &str) -> Option<u64> {
    Some(match name {
        "bool" | "int8" | "uint8" | "qint8" | "quint8" | "float8_e4m3fn" | "float8_e5m2" => 1,
        "half" | "bfloat16" | "int16" | "uint16" | "float16" => 2,
        "float" | "int32" | "uint32" | "float32" => 4,
        "double" | "int64" | "uint64" | "complex64" | "float64" => 8,
        "complex128" => 16,
        _ => return None,
    })
}

/// The dimensions of the tensor TensorFlow could not allocate (`OOM when allocating tensor with
/// shape[8,486,486,256]`; TensorFlow 1.x: `… tensor of shape [3,3,1024,2048]`; TensorFlow 0.x
/// printed the shape's proto: `… with shapedim { size: 10000 } dim { size: 18 }`) in the compact
/// text `c`, and where the list ends. `None` when there is no shape or a dimension is not a
/// number. (`OOM` is not asked for: a paste may have lost its first letters.)
pub fn tf_shape(c: &str) -> Option<(Vec<u64>, usize)> {
    if let Some(mut p) = after(c, "whenallocatingtensorwithshapedim{", 0) {
        let mut dims = Vec::new();
        loop {
            let (d, e) = c.get(p..).filter(|r| r.starts_with("size:")).and_then(|_| uint_at(c, p + 5))?;
            dims.push(d);
            p = e.checked_add(1).filter(|_| c.get(e..).is_some_and(|r| r.starts_with('}')))?;
            match c.get(p..) {
                Some(r) if r.starts_with("dim{") => p += 4,
                _ => return Some((dims, p)),
            }
        }
    }
    let p = after(c, "whenallocatingtensorwithshape[", 0)
        .or_else(|| after(c, "whenallocatingtensorofshape[", 0))?;
    let end = c.get(p..)?.find(']').map(|i| p + i)?;
    let dims = c[p..end]
        .split(',')
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<u64>().ok())
        .collect::<Option<Vec<_>>>()?;
    Some((dims, end))
}

fn tf_tensor(c: &str, f: &mut Fields) {
    let Some((dims, end)) = tf_shape(c) else {
        return;
    };
    let elems = dims.iter().try_fold(1u64, |e, &d| e.checked_mul(d));
    if let Some(t) = after(c, "andtype", end) {
        let rest = &c[t..];
        let name_end = rest.find("on/").or_else(|| rest.find("on")).unwrap_or(rest.len());
        if let (Some(n), Some(sz)) = (elems, dtype_size(&rest[..name_end]))
            && let Some(v) = n.checked_mul(sz)
        {
            f.requested.get_or_insert(v);
        }
    }
    if let Some((g, _)) = after(c, "/device:gpu:", end).and_then(|q| u32_at(c, q)) {
        f.gpu.get_or_insert(g);
    }
}

fn bfc(c: &str, f: &mut Fields) {
    if let Some(p) = after(c, "ranoutofmemorytryingtoallocate", 0) {
        let exact = after(c, "(roundedto", p).and_then(|q| uint_at(c, q)).map(|(v, _)| v);
        if let Some(v) = exact.or_else(|| size_at(c, p, true).map(|(v, _)| v)) {
            f.requested.get_or_insert(v);
        }
        if let Some((g, _)) = after(c, "(gpu_", 0).and_then(|q| u32_at(c, q)) {
            f.gpu.get_or_insert(g);
        }
    }
    for (key, slot) in [("limit:", 0), ("inuse:", 1)] {
        if c.starts_with(key)
            && let Some((v, _)) = uint_at(c, key.len())
        {
            if slot == 0 {
                f.capacity.get_or_insert(v);
            } else {
                f.allocated.get_or_insert(v);
            }
        }
    }
}

fn jax(c: &str, f: &mut Fields) {
    if let Some((v, _)) = after(c, "outofmemorywhiletryingtoallocate", 0).and_then(|p| size_at(c, p, true)) {
        f.requested.get_or_insert(v);
    }
    if let Some(p) = after(c, "failedtoallocate", 0)
        && let Some((v, e)) = uint_at(c, p)
        && c.get(e..).is_some_and(|s| s.starts_with("bytesfornewconstant"))
    {
        f.requested.get_or_insert(v);
    }
    if let Some(p) = after(c, "failedtoallocaterequestfor", 0) {
        let exact = size_at(c, p, true)
            .and_then(|(_, e)| c.get(e..).filter(|s| s.starts_with('(')).map(|_| e + 1))
            .and_then(|q| size_at(c, q, false))
            .map(|(v, _)| v);
        if let Some(v) = exact.or_else(|| size_at(c, p, true).map(|(v, _)| v)) {
            f.requested.get_or_insert(v);
        }
        if let Some((g, _)) = after(c, "ondeviceordinal", p).and_then(|q| u32_at(c, q)) {
            f.gpu.get_or_insert(g);
        }
    }
    if let Some(p) = after(c, "ranoutofmemoryinmemoryspacehbm.used", 0)
        && let Some((used, e)) = size_at(c, p, true)
    {
        f.process_used.get_or_insert(used);
        if let Some((cap, _)) =
            c.get(e..).filter(|s| s.starts_with("of")).and_then(|_| size_at(c, e + 2, true))
        {
            f.capacity.get_or_insert(cap);
        }
    }
    // `Error allocating device buffer: Attempting to allocate X. That was not possible. There are
    // Y free.` (the older wording starts at `Attempting`).
    if let Some(p) = after(c, "attemptingtoallocate", 0).filter(|_| has(c, "thatwasnotpossible"))
        && let Some((v, e)) = size_at(c, p, true)
    {
        f.requested.get_or_insert(v);
        if let Some((free, _)) = after(c, "thereare", e).and_then(|q| size_at(c, q, true)) {
            f.free.get_or_insert(free);
        }
    }
}

fn cupy(c: &str, f: &mut Fields) {
    if let Some((v, e)) = after(c, "outofmemoryallocating", 0).and_then(|p| size_at(c, p, false)) {
        f.requested.get_or_insert(v);
        if let Some((a, _)) = after(c, "(allocatedsofar:", e).and_then(|q| size_at(c, q, false)) {
            f.allocated.get_or_insert(a);
        }
    }
    // CuPy < 7: `out of memory to allocate N bytes (total T bytes)`, T = the pool's allocations.
    if let Some((v, e)) = after(c, "outofmemorytoallocate", 0).and_then(|p| size_at(c, p, false)) {
        f.requested.get_or_insert(v);
        if let Some((a, _)) = after(c, "(total", e).and_then(|q| size_at(c, q, false)) {
            f.allocated.get_or_insert(a);
        }
    }
}

fn paddle(c: &str, f: &mut Fields) {
    // `Out of memory error on GPU 0. Cannot allocate 1.531250GB memory on GPU 0, 7.78GB memory has
    // been allocated and available memory is only 416.625000MB.`
    if let Some((v, _)) = after(c, "cannotmalloc", 0).and_then(|q| size_at(c, q, false)) {
        f.requested.get_or_insert(v);
    }
    let Some(p) = after(c, "cannotallocate", 0) else {
        return;
    };
    if !(has(c, "outofmemoryerrorongpu") || has(c, "gpumemory,availablememoryis")) {
        return;
    }
    if let Some((v, e)) = size_at(c, p, false) {
        f.requested.get_or_insert(v);
        if let Some((g, _)) = after(c, "memoryongpu", e).filter(|q| *q == e + 11).and_then(|q| u32_at(c, q)) {
            f.gpu.get_or_insert(g);
        }
    }
    if let Some((g, _)) = after(c, "outofmemoryerrorongpu", 0).and_then(|q| u32_at(c, q)) {
        f.gpu.get_or_insert(g);
    }
    if let Some(q) = c.find("memoryhasbeenallocated") {
        // The size just before: `,7.782776gb memory has been allocated`.
        let head = &c[..q];
        let start = head.rfind(',').map_or(0, |i| i + 1);
        if let Some((v, _)) = size_at(c, start, false) {
            f.allocated.get_or_insert(v);
        }
    }
    let free = after(c, "availablememoryisonly", p).or_else(|| after(c, "availablememoryis", p));
    if let Some((v, _)) = free.and_then(|q| size_at(c, q, false)) {
        f.free.get_or_insert(v);
    }
}

fn ggml(c: &str, f: &mut Fields) {
    if let Some(p) = after(c, "ggml_backend_cuda_buffer_type_alloc_buffer:allocating", 0)
        && let Some((v, e)) = size_at(c, p, false)
    {
        f.requested.get_or_insert(v);
        if let Some((g, _)) = c.get(e..).filter(|s| s.starts_with("ondevice")).and_then(|_| u32_at(c, e + 8))
        {
            f.gpu.get_or_insert(g);
        }
    }
    if let Some(p) = after(c, "failedtoallocatecuda", 0)
        && let Some((g, e)) = u32_at(c, p)
    {
        f.gpu.get_or_insert(g);
        if let Some((v, _)) = after(c, "bufferofsize", e).filter(|q| *q == e + 12).and_then(|q| uint_at(c, q))
        {
            // The exact byte count beats the rounded `allocating X MiB` of the line before.
            f.requested = Some(v);
        }
    }
    if let Some((v, _)) = after(c, "memoryallocationofsize", 0).and_then(|p| uint_at(c, p)) {
        f.requested.get_or_insert(v);
    }
    if let Some((v, e)) = after(c, "memorypool(needed", 0).and_then(|p| uint_at(c, p)) {
        f.requested.get_or_insert(v);
        if let Some((free, _)) =
            after(c, ",available", e).filter(|q| *q == e + 10).and_then(|q| uint_at(c, q))
        {
            f.free.get_or_insert(free);
        }
    }
}

/// MindSpore's device memory pool refused (GPU or Ascend): `AddMemBlockAndMemBufByEagerFree]
/// TotalUsedMemStatistics : U plus TotalUsedByEventMemStatistics : E and plus alloc size : Q is
/// more than total mem size : C.`, `Malloc for kernel output failed, Memory isn't enough,
/// node:Default/Cast-op446`, `Device(id:0) memory isn't enough and alloc failed`.
fn mindspore_refused(c: &str) -> bool {
    (has(c, "allocsize:") && has(c, "ismorethantotalmemsize"))
        || (has(c, "memoryisn'tenough") && (has(c, "malloc") || has(c, "allocfailed")))
}

/// MindSpore's numbers: the pool's total (its capacity), what it had in use and the request.
fn mindspore(c: &str, f: &mut Fields) {
    let Some(p) = after(c, "totalusedmemstatistics:", 0) else {
        return;
    };
    let Some((used, e)) = uint_at(c, p) else {
        return;
    };
    let by_event = after(c, "totalusedbyeventmemstatistics:", e).and_then(|q| uint_at(c, q));
    f.allocated.get_or_insert(used.saturating_add(by_event.map_or(0, |(v, _)| v)));
    if let Some((q, e)) = after(c, "allocsize:", e).and_then(|q| uint_at(c, q)) {
        f.requested.get_or_insert(q);
        if let Some((cap, _)) = after(c, "totalmemsize:", e).and_then(|q| uint_at(c, q)) {
            f.capacity.get_or_insert(cap);
        }
    }
}

/// tt-metal's numbers: the buffer is interleaved over K banks and the allocator's figures are per
/// bank, so the device's are K times them.
fn tt_metal(c: &str, f: &mut Fields) {
    let Some(p) = after(c, "notenoughspacetoallocate", 0) else {
        return;
    };
    let Some((req, e)) = uint_at(c, p) else {
        return;
    };
    f.requested.get_or_insert(req);
    let Some((banks, e)) = after(c, "across", e).and_then(|q| uint_at(c, q)).filter(|(k, _)| *k > 0) else {
        return;
    };
    let per_bank =
        |key: &str| after(c, key, e).and_then(|q| uint_at(c, q)).map(|(v, _)| v.saturating_mul(banks));
    if let Some(cap) = per_bank("banksizeisonly").or_else(|| per_bank("banksizeis")) {
        f.capacity.get_or_insert(cap);
    }
    if let Some(a) = per_bank("(allocated:") {
        f.allocated.get_or_insert(a);
    }
    if let Some(free) = per_bank("free:") {
        f.free.get_or_insert(free);
    }
}

fn vllm(c: &str, f: &mut Fields) {
    // `To serve at least one request with the models's max seq len (N), (X GiB KV cache is needed,
    // which is larger than the available KV cache memory (Y GiB).`
    if let Some(p) = after(c, "toserveatleastonerequestwiththe", 0)
        && let Some(q) = after(c, "),", p).map(|q| if c[q..].starts_with('(') { q + 1 } else { q })
        && let Some((need, e)) = size_at(c, q, false)
        && c.get(e..).is_some_and(|s| s.starts_with("kvcacheisneeded"))
    {
        f.requested.get_or_insert(need);
        if let Some((avail, _)) = after(c, "availablekvcachememory(", e).and_then(|r| size_at(c, r, false)) {
            f.free.get_or_insert(avail);
        }
    }
    // `Memory profiling results: total_gpu_memory=23.58GiB …` (an INFO line before the error).
    if let Some((v, _)) = after(c, "total_gpu_memory=", 0).and_then(|p| size_at(c, p, false)) {
        f.capacity.get_or_insert(v);
    }
    // `Free memory on device [cuda:1 ](14.1/79.1 GiB) on startup is less than desired GPU memory
    // utilization (0.9, 71.2 GiB).`
    if let Some(p) = after(c, "freememoryondevice", 0).and_then(|p| after(c, "(", p).filter(|q| q - p <= 12))
        && let Some((free, e)) = number_at(c, p)
        && c.get(e..).is_some_and(|s| s.starts_with('/'))
        && let Some((cap, e2)) = number_at(c, e + 1)
        && c.get(e2..).is_some_and(|s| s.starts_with("gib"))
    {
        f.free = f.free.or(free.times(GIB));
        f.capacity = f.capacity.or(cap.times(GIB));
        if let Some(q) = after(c, "desiredgpumemoryutilization(", e2)
            && let Some((_, e3)) = number_at(c, q)
            && c.get(e3..).is_some_and(|s| s.starts_with(','))
            && let Some((req, _)) = size_at(c, e3 + 1, false)
        {
            f.requested.get_or_insert(req);
        }
    }
}

/// The framework name of an event made of `families`, given its joined compact text and the
/// logging source path of its first line.
pub fn framework(families: u16, c: &str, src: Option<&str>) -> &'static str {
    let made_of = |f: Family| families & f.bit() != 0;
    let by_src = |default: &'static str| match src {
        Some(s) if s.contains("tensorflow/") => "tensorflow",
        Some(s) if s.contains("xla/") || s.contains("tsl/") || s.contains("jax") => "jax",
        _ => default,
    };
    // A runtime error names the program whose code printed it.
    let by_text = |default: &'static str| {
        if has(c, "pooled_storage_manager") || has(c, "mxnet") {
            "mxnet"
        } else if has(c, "paddle") {
            "paddle"
        } else if has(c, "ggml") || has(c, "llama") {
            "llama.cpp"
        } else if has(c, "cudasuccess(2vs") || has(c, "syncedmem") {
            "caffe"
        } else if has(c, "cudasuccess.2vs0") || has(c, "context_gpu.cu") {
            "caffe2"
        } else if has(c, "cnmem") {
            "theano"
        } else if has(c, "cudafailureincudamalloc") {
            "dynet"
        } else if has(c, "pxgcuda") {
            "physx"
        } else if has(c, "arrayallocationfailedondevice") {
            "warp"
        } else if has(c, "vkallocatememory") || has(c, "vkresult:") {
            "vulkan"
        } else if has(c, "metal::malloc") || has(c, "[malloc_or_wait]") || mlx_buffer_limit(c) {
            "mlx"
        } else if has(c, "bucketizedbufferallocator") {
            "directml"
        } else if has(c, "onnxruntime") || has(c, "bfcarena") {
            "onnxruntime"
        } else if has(c, "gpuvideomemory") || has(c, "directml") || has(c, "dmlallocator") {
            "directml"
        } else if has(c, "uselowerresolution") || has(c, "facedetectionongpu") || mps_buffer_limit(c) {
            "pytorch"
        } else if has(c, "executionoftvm") || has(c, "tvm.apache.org") || has(c, "storageallocationfailure") {
            "tvm"
        } else if has(c, "cu-allocator") || has(c, "cuda-device.cc") || has(c, "kaldi") {
            "kaldi"
        } else if has(c, "cubecl")
            || has(c, "can'tallocatebufferofsize")
            || has(c, "nopoolhandlesallocation")
            || has(c, "bytesofdevicememory:")
        {
            "cubecl"
        } else if has(c, "cl_out_of_resources")
            || has(c, "openvino")
            || has(c, "[gpu]exceededmaxsizeofmemory")
        {
            "openvino"
        } else if has(c, "gpumemoryisoverflow") || has(c, "jittor") {
            "jittor"
        } else if has(c, "outofmemorywhilerequesting") || has(c, "megengine") || has(c, "[mgb]") {
            "megengine"
        } else if has(c, "bm_alloc_gmem") || has(c, "bmlib") {
            "sophon"
        } else if has(c, "[metal]commandbuffer") || mlx_prefill_guard(c) {
            "mlx"
        } else if has(c, "memoryobjectallocationfailure") {
            "opencl"
        } else if has(c, "notenoughspacetoallocate") && has(c, "bank") {
            "tt-metal"
        } else if mindspore_refused(c) || has(c, "mindspore") {
            "mindspore"
        } else if has(c, "ncudalib") || has(c, "catboost") {
            "catboost"
        } else if has(c, "oomforquery_id") {
            "openfold"
        } else if has(c, "hugectr") {
            "hugectr"
        } else if has(c, "xpuapi") || has(c, "devicememorynotenough") {
            "kunlun"
        } else if has(c, "warmupfailed,becauseof") {
            "mindie"
        } else if has(c, "cpu2gpu") || has(c, "milvus") {
            "milvus"
        } else if has(c, "runtimeerror:memoryerrorinalloc") || has(c, "nnabla") {
            "nnabla"
        } else if has(c, "oneflow") {
            "oneflow"
        } else if has(c, "workingsetofcolumnsingpumemory") {
            "heavydb"
        } else if has(c, "deepmd-kit") {
            "deepmd"
        } else if has(c, "fitinfreegpumemory") {
            "cudnn"
        } else if has(c, "youmaytry\"-mmemorysize\"") {
            "thundersvm"
        } else if gpu_memory_ran_out(c) || other_device_failure(c) {
            // Not a CUDA runtime error: a program's own words, whose allocator is unknown.
            "other"
        } else if has(c, "cupy") || has(c, "chainer") {
            "cupy"
        } else if has(c, "tensorflow") || has(c, "stream_executor") {
            "tensorflow"
        } else if has(c, "xla") || has(c, "jax") {
            "jax"
        } else if has(c, "xgboost") {
            "xgboost"
        } else if has(c, "rmmfailure") || has(c, "/rmm/") || has(c, "devicememoryeventhandler") {
            "rapids"
        } else if has(c, "pt_devmem") {
            "habana"
        } else if has(c, "el0004") || has(c, "[drivererror:outofmemory]") || ascend_driver_oom(c) {
            "ascend"
        } else if has(c, "validcudnnalgorithm") {
            "cudnn"
        } else if has(c, "gemmlaunchfailed") {
            "cublas"
        } else if has(c, "turbomind") || has(c, "lmdeploy") {
            "lmdeploy"
        } else if has(c, "[trt]")
            || has(c, "[tensorrt]")
            || has(c, "virtualmemorybuffer")
            || has(c, "ibuilderconfig")
        {
            "tensorrt"
        } else if has(c, "tensorrt") || has(c, "maxtokensinpagedkvcache") {
            "tensorrt-llm"
        } else {
            by_src(default)
        }
    };
    if made_of(Family::Torch) {
        "pytorch"
    } else if made_of(Family::TfTensor) {
        "tensorflow"
    } else if made_of(Family::Jax) {
        "jax"
    } else if made_of(Family::Bfc) {
        by_src("tensorflow")
    } else if made_of(Family::Vllm) {
        "vllm"
    } else if made_of(Family::Serving) {
        if has(c, "mem-fraction-static") || kv_pool_exhausted(c) { "sglang" } else { "tgi" }
    } else if made_of(Family::Paddle) {
        "paddle"
    } else if made_of(Family::Accelerate) {
        "accelerate"
    } else if made_of(Family::Cupy) {
        if has(c, "resource_exhausted") { "jax" } else { "cupy" }
    } else if made_of(Family::Ggml) {
        // ggml names the buffer (`allocating 8192.00 MiB on device 0: cudaMalloc failed: out of
        // memory`); the bare `cudaMalloc failed: out of memory` is MXNet's storage manager's.
        if has(c, "cudamallocfailed") && !["allocating", "ggml", "llama"].iter().any(|w| c.contains(w)) {
            "mxnet"
        } else {
            "llama.cpp"
        }
    } else if made_of(Family::Nccl) {
        "nccl"
    } else if made_of(Family::Cublas) {
        "cublas"
    } else if made_of(Family::Cudnn) {
        "cudnn"
    } else if made_of(Family::Hip) {
        by_src("hip")
    } else {
        by_text("cuda")
    }
}

#[cfg(test)]
mod tests {
    use super::super::text::compact;
    use super::*;

    fn fields(line: &str) -> Fields {
        let mut f = Fields::default();
        extract(&compact(line), &mut f);
        f
    }

    #[test]
    fn detects_every_family() {
        for (line, fam) in [
            ("RuntimeError: CUDA error: out of memory", Family::Cuda),
            (
                "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                Family::Cublas,
            ),
            ("RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED", Family::Cudnn),
            ("Cuda failure 'out of memory'", Family::Nccl),
            ("Cuda failure 2 'out of memory'", Family::Nccl),
            (
                "ResourceExhaustedError: OOM when allocating tensor with shape[2,3] and type float on /job:l/device:GPU:0 by allocator GPU_0_bfc",
                Family::TfTensor,
            ),
            ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM", Family::TfTensor),
            (
                "tensorflow.python.framework.errors_impl.ResourceExhaustedError: Ran out of GPU memory when allocating 1294336000 bytes for ",
                Family::TfTensor,
            ),
            ("ResourceExhaustedError: failed to allocate memory [Op:AddV2]", Family::TfTensor),
            (
                "Allocator (GPU_0_bfc) ran out of memory trying to allocate 256.00MiB (rounded to 268435456)requested by op Conv2D",
                Family::Bfc,
            ),
            (
                "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.",
                Family::Jax,
            ),
            ("RuntimeError: HIP error: out of memory", Family::Hip),
            ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB.", Family::Torch),
            (
                "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,073,741,824 bytes (allocated so far: 0 bytes).",
                Family::Cupy,
            ),
            (
                "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 8192.00 MiB on device 0: cudaMalloc failed: out of memory",
                Family::Ggml,
            ),
            ("ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory", Family::Ggml),
            (
                "[02/15/2023-06:20:02] [E] Error[2]: [virtualMemoryBuffer.cpp::resizePhysical::145] Error Code 2: OutOfMemory (no further information)",
                Family::Cuda,
            ),
            (
                "MemoryError: std::bad_alloc: RMM failure at:/x/rmm/include/rmm/mr/device/pool_memory_resource.hpp:179: Maximum pool size exceeded",
                Family::Cuda,
            ),
            (
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
                Family::Vllm,
            ),
            ("RuntimeError: No executable batch size found, reached zero.", Family::Accelerate),
            (
                "ValueError: Some modules are dispatched on the CPU or the disk. Make sure you have enough GPU RAM to fit the quantized model.",
                Family::Accelerate,
            ),
            (
                "InternalError: Failed copying input tensor from /job:localhost/replica:0/task:0/device:CPU:0 to /job:localhost/replica:0/task:0/device:GPU:0 in order to run _EagerConst: Dst tensor is not initialized.",
                Family::TfTensor,
            ),
            (
                "The model's max seq len (56000) is larger than the maximum number of tokens that can be stored in KV cache (43328)",
                Family::Vllm,
            ),
            (
                "Cannot malloc 49.0002 MB GPU memory. Please shrink FLAGS_fraction_of_gpu_memory_to_use or FLAGS_initial_gpu_memory_in_mb",
                Family::Paddle,
            ),
            (
                "UR backend failed. UR backend returns:40 (UR_RESULT_ERROR_OUT_OF_RESOURCES)Exception caught at file:/src/ggml-sycl.cpp, line:2819",
                Family::Cuda,
            ),
            (
                "2024-09-05 15:15:49.9522079 [E:onnxruntime:, sequential_executor.cc:514 onnxruntime::ExecuteKernel] Non-zero status code returned while running FusedConv node. Name:'Conv_3' Status Message: D:\\a\\_work\\1\\s\\onnxruntime\\core\\framework\\bfc_arena.cc:376 onnxruntime::BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer of size 643840",
                Family::Cuda,
            ),
            (
                "!!! Exception during processing !!! Could not allocate tensor with 2025000000 bytes. There is not enough GPU video memory available!",
                Family::Cuda,
            ),
            ("pycuda._driver.MemoryError: cuMemAlloc failed: out of memory", Family::Cuda),
            ("Error out of memory at line 380 in file /src/csrc/pythonInterface.c", Family::Cuda),
            ("| WARNING: ran out of memory, skipping batch", Family::Torch),
            (
                "ai.rapids.cudf.CudfException: RMM failure at: /usr/local/rapids/include/rmm/mr/device/pool_memory_resource.hpp:100: Initial pool size exceeds the maximum pool size!",
                Family::Cuda,
            ),
            (
                "ERROR: out of memory in /usr/local/relion-3-source/src/acc/acc_backprojector_impl.h at line 38 (error-code 2)",
                Family::Cuda,
            ),
            ("- **Exception Type:** torch.OutOfMemoryError", Family::Torch),
            (
                "2023-05-09 10:11:12,345 Could not predict job_1. Not Enough GPU memory? RESOURCE_EXHAUSTED: Out of memory while trying to allocate 25.61GiB.",
                Family::Jax,
            ),
            (
                "TT_FATAL: Out of Memory: Not enough space to allocate 167772160 B DRAM buffer across 12 banks, where each bank needs to store 13983744 B",
                Family::Cuda,
            ),
            (
                "RuntimeError: MPS backend out of memory (MPS allocated: 0 bytes, other allocations: 0 bytes, max allowed: 7.93 GB).",
                Family::Torch,
            ),
            (
                "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total capacity; 57.36 GiB already allocated;",
                Family::Torch,
            ),
            ("(NPU 0; 60.97 GiB total capacity; 57.36 GiB already allocated; 1.05 GiB free;", Family::Torch),
            (
                "RuntimeError: MPS backend out of memory (MPS allocated: 17.81 GB, other allocations: 238.50 MB, max allowed: 18.13 GB). Tried to allocate 256 bytes on shared pool.",
                Family::Torch,
            ),
            (
                "  Check failed: (__e == VK_SUCCESS) is false: Vulkan Error, code=-2: VK_ERROR_OUT_OF_DEVICE_MEMORY",
                Family::Cuda,
            ),
            ("Failed to initialize the context: failed to allocate compute pp buffers", Family::Ggml),
            (
                "E external/org_tensorflow/tensorflow/stream_executor/cuda/cuda_blas.cc:226] failed to create cublas handle: CUBLAS_STATUS_NOT_INITIALIZED",
                Family::Cuda,
            ),
            ("ERROR: LoadError: Out of GPU memory trying to allocate 1.500 GiB", Family::Cuda),
            ("RuntimeError: Not enough VRAM to load the model", Family::Cuda),
            (
                "RuntimeError: Not enough memory, use lower resolution (max approx. 384x384). Need: 0.0GB free, Have:0.0GB free",
                Family::Cuda,
            ),
            (
                "(1) Resource exhausted: Attempting to allocate 180.59M. That was not possible. There are 142.58M free.; (0x3x0_HBM1)",
                Family::Jax,
            ),
            (
                "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to allocate 98697216 bytes for new constant",
                Family::Jax,
            ),
            (
                "Failed to load model: A context size of 4096 is too large for the available VRAM",
                Family::Ggml,
            ),
            (
                "RuntimeError: [metal::malloc] Attempting to allocate 48736917632 bytes which is greater than the maximum allowed buffer size of 30150672384 bytes.",
                Family::Cuda,
            ),
            ("RuntimeError: [metal::malloc] Resource limit (499000) exceeded.", Family::Cuda),
            (
                "libc++abi: terminating due to uncaught exception of type std::runtime_error: [malloc_or_wait] Unable to allocate 9663676416 bytes.",
                Family::Cuda,
            ),
            (
                "[ERROR] RUNTIME(29167,mindie_llm_backend_connector):2025-04-27-07:23:17.709.105 [npu_driver.cc:1274]29953 DevMemAllocManaged:[INIT][DEFAULT][drv api] halMemAlloc failed:size=32(Byte), type=17, moduleId=3, drvFlag=216172782156776448, drvRetCode=6, device_id=0!",
                Family::Cuda,
            ),
            (
                "Exception during initialization: D:\\a\\_work\\1\\s\\onnxruntime\\core\\providers\\dml\\DmlExecutionProvider\\src\\BucketizedBufferAllocator.cpp(122)\\onnxruntime_pybind11_state.pyd!00007FFA82D145C8: (caller: 00007FFA8336D326) Exception(1) tid(4790) 8007000E Not enough memory resources are available to complete this operation.",
                Family::Cuda,
            ),
            (
                "W0109 11:16:28.406390 11887 operator.cc:179] mul raises an exception paddle::memory::allocation::BadAlloc, ",
                Family::Paddle,
            ),
            ("RuntimeError: Invalid buffer size: 19.38 GiB", Family::Cuda),
            (
                "libc++abi: terminating due to uncaught exception of type std::runtime_error: Attempting to allocate 19081554496 bytes which is greater than the maximum allowed buffer size of 17179869184 bytes.",
                Family::Cuda,
            ),
            ("Tried to allocate 160MiB. GPU", Family::Torch),
            ("Out of memory error on GPU", Family::Paddle),
            ("CUDA failure in cudaMalloc(&ptr, n)", Family::Cuda),
            (
                "[job] PxgCudaDeviceMemoryAllocator fail to allocate memory 1073741824 bytes!! Result = 2",
                Family::Cuda,
            ),
            ("RuntimeError: Array allocation failed on device: cuda:0 for 16777216 bytes", Family::Cuda),
            (
                "[torch_memory_saver.cpp] CUresult error  result=2 file=csrc/torch_memory_saver.cpp func=cu_mem_create line=103 (5)",
                Family::Cuda,
            ),
            ("  (0) Resource exhausted: failed to allocate memory", Family::TfTensor),
            (
                "[h264_nvenc @ 0x46d8300] OpenEncodeSessionEx failed: out of memory (10): (no details)",
                Family::Cuda,
            ),
            (
                "nvenc : Error on nvEncOpenEncodeSessionEx: 10 (NVENC indicates that the API call failed because it was unable to allocate enough memory to perform the requested operation.)",
                Family::Cuda,
            ),
            (
                "Out of memory in cuStreamCreate(&cuda_stream_, CU_STREAM_NON_BLOCKING) (C:\\blender\\intern\\cycles\\device\\cuda\\queue.cpp:21)",
                Family::Cuda,
            ),
            ("System is out of GPU and shared host memory", Family::Cuda),
            (
                "Not enough free memory on device 0 to run kneighbors. needed=8589934592, free=7744913408",
                Family::Cuda,
            ),
            ("Out of memory when gamma is acquired in CudaLayerNorm.", Family::Cuda),
            (
                "ERROR (nnet3-chain-train[5.5.95~1-4bdb]:AllocateNewRegion():cu-allocator.cc:513) Failed to allocate a memory region of 356515840 bytes.",
                Family::Cuda,
            ),
            (
                "ERROR (train-ctc-parallel:MallocInternal():cuda-device.cc:668) Memory allocation failure",
                Family::Cuda,
            ),
            (
                "cubecl-wgpu .../compute/server.rs:270: can't allocate buffer of size: 4395368448",
                Family::Cuda,
            ),
            ("No pool handles allocation of size 411041792", Family::Cuda),
            ("GPU memory is overflow, please reduce your batch_size or data size!", Family::Cuda),
            (
                "RuntimeError: out of memory while requesting 68719476736 bytes; you can try setting MGB_CUDA_RESERVE_MEMORY to reserve all memory.",
                Family::Cuda,
            ),
            ("[bmlib_memory][error] bm_alloc_gmem failed, dev_id = 0, size = 0x639c00", Family::Cuda),
            (
                "libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL] Command buffer execution failed: Insufficient Memory",
                Family::Cuda,
            ),
            ("Total hbm usage >= 11.47G:", Family::Jax),
            (
                "Please try to update the driver or reduce memory consumption (use smaller batch size, less streams, lower precision, etc)to avoid CL_OUT_OF_RESOURCES exception",
                Family::Cuda,
            ),
            (
                "F0111 syncedmem.cpp:45] Check failed: (cudaMalloc(&gpu_ptr_, size_)) == cudaSuccess (2 vs. 0) ",
                Family::Cuda,
            ),
            (
                "INFO DeviceMemoryEventHandler: Device allocation of 345571976 bytes failed, device store has 0 bytes. Total RMM allocated is 9319438848 bytes.",
                Family::Cuda,
            ),
            (
                "RuntimeError: [Rank:7] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::469762048 (448)MB",
                Family::Cuda,
            ),
            (
                "InternalError: Blas GEMM launch failed : a.shape=(100, 784), b.shape=(784, 10), m=100, n=10, k=784",
                Family::Cuda,
            ),
            ("RuntimeError: Unable to find a valid cuDNN algorithm to run convolution", Family::Cuda),
            (
                "what():  [18:47:35] mshadow/./stream_gpu-inl.h:134: Check failed: err == CUBLAS_STATUS_SUCCESS (1 vs. 0) : Create cublas handle failed",
                Family::Cuda,
            ),
            (
                "onnxruntime::BFCArena::AllocateRawInternal(size_t, bool) Available memory of 0 is smaller than requested bytes of 135383040",
                Family::Cuda,
            ),
            ("EL0004: 2024-08-28-16:15:00.358.141 Failed to allocate memory.", Family::Cuda),
            ("InternalError (see above for traceback): Dst tensor is not initialized.", Family::TfTensor),
            (
                "Error: llama runner exited, you may not have enough available memory to run this model",
                Family::Ggml,
            ),
            ("ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (614).", Family::Vllm),
            ("[Error] [carb.graphics-vulkan.plugin] VkResult: ERROR_OUT_OF_DEVICE_MEMORY", Family::Cuda),
            ("vkAllocateMemory failed -2", Family::Cuda),
            ("vkAllocateMemory failed -1", Family::Cuda),
            ("clEnqueueNDRangeKernel(): CL_MEM_OBJECT_ALLOCATION_FAILURE", Family::Cuda),
            ("RuntimeError: cuFFT error: CUFFT_ALLOC_FAILED", Family::Cuda),
            ("CUFFTError(code 2, cuFFT failed to allocate GPU or CPU memory)", Family::Cuda),
            ("CuSparseError: CUSPARSE_STATUS_ALLOC_FAILED", Family::Cuda),
            ("CreateBitstreamBuffer failed: out of memory (10)", Family::Cuda),
            (
                "MemoryError: Error allocating 52428800 bytes of device memory (CNMEM_STATUS_OUT_OF_MEMORY).",
                Family::Cuda,
            ),
            ("initCnmem: cnmemInit call failed! Reason=CNMEM_STATUS_OUT_OF_MEMORY", Family::Cuda),
            (
                "  Profiling failure on CUDNN engine 1: RESOURCE_EXHAUSTED: Allocating 4718624784 bytes exceeds the memory limit of 4294967296 bytes.",
                Family::TfTensor,
            ),
            (
                "MIOpen Error: /data/repo/MIOpen/src/hip/handlehip.cpp:68: Memory not available to allocate buffer: 528515072",
                Family::Hip,
            ),
            (
                "RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at \"/opt/pytorch/pytorch/c10/cuda/CUDACachingAllocator.cpp\":841, please report a bug to PyTorch.",
                Family::Torch,
            ),
            (
                "MemoryError: std::bad_alloc: out_of_memory: CUDA error at: /home/v/miniforge3/envs/rapids/include/rmm/mr/device/cuda_memory_resource.hpp",
                Family::Cuda,
            ),
        ] {
            assert_eq!(detect(&compact(line)), Some(fam), "{line}");
        }
        assert_eq!(detect(&compact("step 1 loss 2.0")), None);
        // Warnings of a fallback or a guess, not failures.
        for warning in [
            "Warning: Ran out of memory when regular decoding, retrying with tiled VAE decoding.",
            "CNMEM_STATUS_OUT_OF_MEMORY, falling back to pinned system memory",
            "vkAllocateMemory failed -22",
            "(pid=737) ray._private.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node x is used",
            "Out of [DEVICE] memory, host memory will be used instead",
            "not enough VRAM available, falling back to CPU only",
            "Out of GPU memory, retrying with a smaller tile size",
            // A guess in front of another error, and a request the allocator retries smaller.
            "Could not predict job_1. Not Enough GPU memory? INTERNAL: RET_CHECK failure (external/gpu_compiler.cc:627) dnn != nullptr",
            "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
            "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED",
            "Check failed: (cudaMemcpy(a, b, n, cudaMemcpyDefault)) == cudaSuccess (2 vs. 0)",
            "DeviceMemoryEventHandler: Device allocation of 345571976 bytes succeeded after spilling",
            // Errors that memory can cause but that say nothing of it (also version mismatches).
            "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
            "UnknownError: CUDNN_STATUS_EXECUTION_FAILED Failed to set dropout descriptor",
            "Unimplemented: DNN library is not found.",
            "Error: cuDNN isn't found FWD algo for convolution.",
            "cuda execution failed with error 20",
            "[torch_memory_saver.cpp] CUresult error  result=201 file=csrc/torch_memory_saver.cpp func=cu_mem_create line=103",
            "INFO 02-03 03:43:49 model_runner.py:629] CUDA graphs can take additional 1~3 GiB memory per GPU. If you are running out of memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode.",
            "E external/org_tensorflow/tensorflow/stream_executor/cuda/cuda_driver.cc:771] failed to alloc 23994040320 bytes unified memory; result: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
            // DuckDB's buffer manager (host memory, `host.rs`), and a bare type that names no memory.
            "duckdb.duckdb.OutOfMemoryException: Out of Memory Error: Failed to allocate block of 2048 bytes (bad allocation)",
            "Out of Memory Error: failed to allocate data of size 256.0 MiB (12.2 GiB/12.1 GiB used)",
            "Out of Memory Error:",
            // Pinned host buffers llama.cpp's back-ends fall back from, an Ascend driver error
            // other than out-of-memory, ONNX Runtime's CPU arena (host memory, `host.rs`).
            "ggml_cuda_host_malloc: failed to allocate 349659.17 MiB of pinned memory: out of memory",
            "ggml_vulkan: Failed to allocate pinned memory (Requested buffer size exceeds device buffer size limit: ErrorOutOfDeviceMemory)",
            "halMemAlloc failed:size=32(Byte), type=17, moduleId=3, drvRetCode=61, device_id=0!",
            "Non-zero status code returned while running Conv node. Name:'347_nchwc' Status Message: bfc_arena.cc:330 onnxruntime::BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer of size 285081600",
        ] {
            assert_eq!(detect(&compact(warning)), None, "{warning}");
        }
        assert_eq!(detect(&compact("INFO memory usage 12 GiB")), None);
    }

    #[test]
    fn kaldi_memory_info() {
        let f = fields(
            "Failed to allocate a memory region of 356515840 bytes.  Possibly smaller minibatch size would help.  Memory info: free:190M, used:3844M,",
        );
        assert_eq!((f.requested, f.free, f.capacity), (Some(356_515_840), Some(190 << 20), Some(4034 << 20)));
        let f = fields("Memory info: free:15426M, used:17053M, total:32480M, free/total:0.474948");
        assert_eq!((f.free, f.capacity), (Some(15426 << 20), Some(32480 << 20)));
        let f = fields("Memory info: free:15426M, used:");
        assert_eq!((f.free, f.capacity), (Some(15426 << 20), None));
    }

    #[test]
    fn paddle_fluid_malloc() {
        let f =
            fields("Cannot malloc 49.0002 MB GPU memory. Please shrink FLAGS_fraction_of_gpu_memory_to_use");
        assert!(f.requested.is_some_and(|v| (49_000_000..=51_500_000).contains(&v)), "{:?}", f.requested);
    }

    #[test]
    fn numbers() {
        let f = fields(
            "OOM when allocating tensor with shape[32,64,256,256] and type float on /job:localhost/replica:0/task:0/device:GPU:2 by allocator GPU_2_bfc",
        );
        assert_eq!((f.requested, f.gpu), (Some(32 * 64 * 256 * 256 * 4), Some(2)));
        let f = fields(
            "BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer of size 150994944",
        );
        assert_eq!(f.requested, Some(150_994_944));
        let f = fields(
            "Could not allocate tensor with 2025000000 bytes. There is not enough GPU video memory available!",
        );
        assert_eq!(f.requested, Some(2_025_000_000));
        let f = fields(
            "INFO DeviceMemoryEventHandler: Device allocation of 345571976 bytes failed, device store has 0 bytes. Total RMM allocated is 9319438848 bytes.",
        );
        assert_eq!((f.requested, f.allocated), (Some(345_571_976), Some(9_319_438_848)));
        let f = fields(
            "BFCArena::AllocateRawInternal Available memory of 0 is smaller than requested bytes of 135383040",
        );
        assert_eq!(f.requested, Some(135_383_040));
        let f = fields("FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::469762048 (448)MB");
        assert_eq!(f.requested, Some(469_762_048));
        let f = fields(
            "(NCudaLib::TOutOfMemoryError) /src/catboost/catboost/cuda/cuda_lib/memory_pool/stack_like_memory_pool.h:303: Error: Out of memory. Requested 8880 MB; Free 5902.061425 MB",
        );
        assert_eq!(f.requested, Some(8880 << 20));
        assert!(f.free.is_some_and(|v| v >> 20 == 5902), "{:?}", f.free);
        let f = fields(
            "AddMemBlockAndMemBufByEagerFree] TotalUsedMemStatistics : 29356337664 plus TotalUsedByEventMemStatistics : 1024 and plus alloc size : 301990400 is more than total mem size : 29464985600.",
        );
        assert_eq!(
            (f.allocated, f.requested, f.capacity),
            (Some(29_356_338_688), Some(301_990_400), Some(29_464_985_600))
        );
        let f = fields("ERROR: LoadError: Out of GPU memory trying to allocate 1.500 GiB");
        assert_eq!(f.requested, Some(3 * GIB / 2));
        let f = fields("ResourceExhaustedError: Ran out of GPU memory when allocating 1294336000 bytes for ");
        assert_eq!(f.requested, Some(1_294_336_000));
        let f = fields(
            "Allocator (GPU_1_bfc) ran out of memory trying to allocate 256.00MiB (rounded to 268435456)requested by op Conv2D",
        );
        assert_eq!((f.requested, f.gpu), (Some(268_435_456), Some(1)));
        let f = fields(
            "XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for 1.00GiB (1073741824B) on device ordinal 3",
        );
        assert_eq!((f.requested, f.gpu), (Some(1 << 30), Some(3)));
        let f =
            fields("Out of memory allocating 1,073,741,824 bytes (allocated so far: 15,032,385,536 bytes).");
        assert_eq!((f.requested, f.allocated), (Some(1 << 30), Some(15_032_385_536)));
        let f = fields("RuntimeError: Array allocation failed on device: cuda:0 for 16777216 bytes");
        assert_eq!(f.requested, Some(16_777_216));
        let f = fields("PxgCudaDeviceMemoryAllocator fail to allocate memory 1073741824 bytes!! Result = 2");
        assert_eq!(f.requested, Some(1 << 30));
        let f = fields(
            "MemoryError: Error allocating 52428800 bytes of device memory (CNMEM_STATUS_OUT_OF_MEMORY).",
        );
        assert_eq!(f.requested, Some(52_428_800));
        let f = fields("MIOpen Error: handlehip.cpp:68: Memory not available to allocate buffer: 528515072");
        assert_eq!(f.requested, Some(528_515_072));
        let f = fields("XlaRuntimeError: INTERNAL: Failed to allocate 98697216 bytes for new constant");
        assert_eq!(f.requested, Some(98_697_216));
        let f = fields(
            "[metal::malloc] Attempting to allocate 48736917632 bytes which is greater than the maximum allowed buffer size of 30150672384 bytes.",
        );
        assert_eq!((f.requested, f.capacity), (Some(48_736_917_632), None));
        let f = fields("ggml_vulkan: Device memory allocation of size 96612096 failed.");
        assert_eq!(f.requested, Some(96_612_096));
        // tt-metal's per-bank figures, times the 12 banks.
        let f = fields(
            "TT_FATAL: Out of Memory: Not enough space to allocate 167772160 B DRAM buffer across 12 banks, where each bank \
             needs to store 13983744 B, but bank size is 1071821792 B (allocated: 1016636448 B, free: 55185344 B, largest \
             free block: 8713184 B)",
        );
        assert_eq!(f.requested, Some(167_772_160));
        assert_eq!(f.capacity, Some(12 * 1_071_821_792));
        assert_eq!(f.allocated, Some(12 * 1_016_636_448));
        assert_eq!(f.free, Some(12 * 55_185_344));
        let f = fields("ggml_gallocr_reserve_n: failed to allocate CUDA1 buffer of size 292926534144");
        assert_eq!((f.requested, f.gpu), (Some(292_926_534_144), Some(1)));
        let f = fields(
            "failed to allocate 2.00G (2147483648 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
        );
        assert_eq!(f.requested, Some(2_147_483_648));
        let f = fields(
            "ValueError: Free memory on device (14.1/79.1 GiB) on startup is less than desired GPU memory utilization (0.9, 71.2 GiB).",
        );
        assert_eq!(f.free, Some((141 * GIB + 5) / 10));
        assert_eq!(f.capacity, Some((791 * GIB + 5) / 10));
        assert_eq!(f.requested, Some((712 * GIB + 5) / 10));
        let f = fields(
            "Resource exhausted: Attempting to allocate 180.59M. That was not possible. There are 142.58M free.; (0x3x0_HBM1)",
        );
        assert!(f.requested.is_some_and(|v| v > 180 << 20 && v < 181 << 20), "{:?}", f.requested);
        assert!(f.free.is_some_and(|v| v > 142 << 20 && v < 143 << 20), "{:?}", f.free);
    }
}
