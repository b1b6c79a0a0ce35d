//! Host-memory failures as a job's own log shows them (the kernel's OOM-killer lines are
//! `kernel.rs`): when host RAM runs out, the job rarely prints "out of memory" — it is killed
//! (SIGKILL, exit status 137 / -9), or an allocation on the host is refused. Each line below
//! becomes one `host_oom_kill` event whose label `host_oom.evidence` says how direct the evidence
//! is, and the attribution's confidence follows it:
//!
//! | evidence | lines (examples) |
//! |---|---|
//! | `explicit` — a scheduler, runtime or tool says memory ran out | Slurm `Detected 1 oom-kill event(s) in StepId=…` / `oom_kill event` / `task 0: Out Of Memory` (its node named `gpu001` or not), `seff`'s `State: OUT_OF_MEMORY`, `sacct`'s `OUT_OF_ME+` / `OUT_OF_MEMORY … 0:125`; LSF `TERM_MEMLIMIT`; Kubernetes `OOMKilled`, `The node was low on resource: memory`, runc `container init was OOM-killed`; earlyoom `sending SIGTERM to process N`; systemd `killed by the OOM killer`, `Failed with result 'oom-kill'`; Ray `killed due to memory pressure (OOM)` / `Ray killed this worker` / `Task was killed due to the node running low on memory`; Colab `Your session crashed after using all available RAM`; ollama `model requires more system memory (X) than is available (Y)`; Kaggle `Your notebook tried to allocate more memory than is available`; Vertex AI `The replica workerpool0-0 ran out-of-memory and exited with a non-zero status of 9(SIGKILL)`; older Slurm `Job N exceeded memory limit (A > B), being killed` / `Exceeded job memory limit`; PBS with Moab `job N exceeded MEM usage hard limit (A > B)`, PBS Pro `=>> PBS: job killed: mem A exceeded limit B` (also `vmem`); HTCondor `Docker job has gone over memory limit of N Mb`; YARN `is running beyond physical memory limits`; Ray `killed by SIGKILL by OOM killer` (also only its tail, `… how to address the out of memory issue`), `ray.exceptions.OutOfMemoryError: Task was killed …`, older Ray's `RayOutOfMemoryError: More than 95% of the memory on node … is used`; PBS's `Job exceeded a memory resource limit`; Dask's `Worker exceeded 95% memory budget` (also naming the worker, `Worker tcp://… (pid=N) exceeded …`) (not Slurm's `Exceeded step memory limit at some point`, printed for finished jobs too); Heroku's `R14 (Memory quota exceeded)` / `R15 (Memory quota vastly exceeded)`; Streamlit Cloud's `has gone over its resource limits`; SageMaker's `Please use an instance type with more memory`; iOS's `Terminated due to memory issue` / `killed by the operating system because it is using too much memory`; an application's `Process killed (out of memory)` |
//! | `allocation` — a host allocation was refused | `DefaultCPUAllocator: can't allocate memory` / `not enough memory`; `Torch: not enough memory: you tried to allocate` (Torch7's `… to reallocate 36GB. Buy new RAM!`); `Cannot allocate memory (12)`, `OSError: [Errno 12] Cannot allocate memory`; the JVM's `java.lang.OutOfMemoryError: Java heap space` / `GC overhead limit exceeded` / `Direct buffer memory`; PaddlePaddle `Fail to alloc memory of N size[, error code is 12]`; `posix_memalign(…) == 0 (12 vs. 0)`; Python `MemoryError`; numpy `Unable to allocate X for an array`; Intel MKL `mkl_malloc: failed to allocate memory`; Windows `[WinError 1455] The paging file is too small` (also `… (os error 1455)`, the text without its code, German `Die Auslagerungsdatei ist zu klein`, Chinese `页面文件太小`); old PyTorch's `[enforce fail at CPUAllocator.cpp:56] posix_memalign(…) == 0. 12 vs 0`; Rust's `memory allocation of N bytes failed`; llama.cpp's CPU backend `ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer`, `failed to allocate CPU buffer` (its KV-cache lines after it are the same failure); TensorFlow `OOM when allocating tensor … by allocator cpu`; C++ `terminate called after throwing an instance of 'std::bad_alloc'` / `what():  std::bad_alloc` (also both on one line) / `Error: std::bad_alloc` / the name alone or after a logger's bracket; HeavyDB's `Not enough host memory to execute the query`; MuJoCo's `mujoco.FatalError: Could not allocate memory`; Caffe `Check failed: *ptr host allocation of size N failed`; the JVM's `insufficient memory for the Java Runtime Environment` / `os::commit_memory … errno=12`; `virtual memory exhausted` (GCC, the linker); R's `system call failed: Cannot allocate memory`; DuckDB's `Out of Memory Error: failed to allocate data of size N (U/L used)` / `Failed to allocate block of N bytes`; ONNX Runtime's CPU arena (`BFCArena … Failed to allocate memory for requested buffer` for a node its NCHWc layout renamed `…_nchwc`) |
//! | `shm` — shared memory (`/dev/shm`, RAM-backed) ran out | `DataLoader worker (pid N) is killed by signal: Bus error`, `Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm)` (PaddlePaddle: `Unexpected BUS error encountered in DataLoader worker`), `unable to write to file </torch_N_M>: No space left on device`; a program's report of its worker's SIGBUS as maybe a memory condition (`exited with status 135. This is a bug, or an out-of-memory condition.`) |
//! | `sigkill` — the process was killed by SIGKILL, which on a node is almost always the OOM killer | `DataLoader worker (pid N) is killed by signal: Killed` (also re-typed `signal:killed`); a `Killed` line (alone — also bash's zh_CN `已杀死`, macOS's `Killed: 9` —, after a status line's ` :: `, after a progress bar or glued to Keras's `- loss: 2.1371Killed`, or bash's `line 28:  8156 Killed   python …` (in any locale: `riga 28:`; a re-typed lower-case `killed`; macOS's `Killed: 9`; a pipeline member `  134 Killed   | python …`), zsh's `[1]  14875 killed  python …`); an IDE's `interrupted by signal 9: SIGKILL`; fish's `terminated by signal SIGKILL (Forced quit)`; ollama's `process has terminated: signal: killed`; gunicorn's `Worker (pid:N) was sent SIGKILL! Perhaps out of memory?` (not after its own `WORKER TIMEOUT (pid:N)`); `exitcode: -9` (also torchrun's root-cause field `exitcode  : -9 (pid: N)`); Cog's `It might have run out of memory? (exitcode -9)`; `Signal 9 (SIGKILL) received by PID N`; `died with <Signals.SIGKILL: 9>`; `exits with return code = -9`; `exit code 137`, `exit code: 137` (Docker BuildKit), `exited with code 137`, `Exit Code: 137`, Kubernetes' `exitCode: 137`; `Program terminated with signal SIGKILL`; a compiler killed (`Killed signal terminated program cc1plus`, `internal compiler error: Killed`, nvcc's `'cicc' died due to signal 9`); Celery's `Worker exited prematurely: signal 9 (SIGKILL)`; `died with <Signals.SIGKILL: 9>`; loky's `{SIGKILL(-9)}` exit codes; ninja's `FAILED: [code=137]`; strace's `SIGCHLD {… si_code=CLD_KILLED … si_status=SIGKILL}`; MPI launchers: MPICH Hydra's `KILLED BY SIGNAL: 9 (Killed)` / `=   EXIT CODE: 9`, Open MPI's `exited on signal 9 (Killed)`, MVAPICH's `MPI process (rank: …) terminated with signal 9`; Horovod's `exit with status code 137` |
//! | `launcher` — a launcher killed its other workers after one died, with no error of the job's own before it | DeepSpeed's / `torch.distributed.launch`'s `Killing subprocess N` |
//!
//! | `exited` — a worker exited without saying why, most often killed for host memory (its shared memory or the OOM killer) | the DataLoader's `DataLoader worker (pid(s) N) exited unexpectedly`, an issue title cut at `is killed by signal`; Jupyter's `KernelRestarter: restarting kernel (1/5)` (a kernel that died; not after the kernel's own failure); worker pools (`BrokenProcessPool: A process in the process pool was terminated abruptly`, loky's `worker process … was unexpectedly terminated`, datasets' `One of the subprocesses has abruptly died`); Databricks' `The spark driver has stopped unexpectedly and is restarting` / `The Python kernel is unresponsive` |
//!
//! A `launcher` line is only evidence when nothing else explains the death: the log parser drops
//! it when a failure or a traceback of the job came just before (see `LogParser`).
//!
//! When no rule here names a line's words, `generic.rs` reads what such reports share (framework
//! `other`): a SIGKILL or status 137 / -9 in any phrasing (`sigkill`), a memory limit or quota
//! exceeded or a process stopped for its memory (`explicit`), a host allocation refused in words
//! that name the host's side (`allocation`).

use super::generic;
use super::text::has;

/// How direct the evidence of a host-memory failure is (label `host_oom.evidence`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostEvidence {
    /// A scheduler, runtime or tool says memory ran out.
    Explicit,
    /// A host allocation was refused.
    Allocation,
    /// Shared memory ran out.
    Shm,
    /// Killed by SIGKILL (exit status 137 / -9).
    Sigkill,
    /// A launcher killed the remaining workers.
    Launcher,
    /// A worker exited without saying why (most often killed for memory).
    Exited,
}

impl HostEvidence {
    /// How direct the evidence is: a higher number is stronger.
    pub const fn strength(self) -> u8 {
        match self {
            HostEvidence::Explicit => 4,
            HostEvidence::Allocation => 3,
            HostEvidence::Shm => 2,
            HostEvidence::Sigkill => 1,
            HostEvidence::Launcher | HostEvidence::Exited => 0,
        }
    }

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            HostEvidence::Explicit => "explicit",
            HostEvidence::Allocation => "allocation",
            HostEvidence::Shm => "shm",
            HostEvidence::Sigkill => "sigkill",
            HostEvidence::Launcher => "launcher",
            HostEvidence::Exited => "exited",
        }
    }
}

/// One host-memory symptom found in a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSymptom {
    /// How direct the evidence is.
    pub evidence: HostEvidence,
    /// Who printed it: `pytorch`, `slurm`, `lsf`, `kubernetes`, `ray`, `colab`, `kaggle`, `vertex`, `cog`, `ollama`, `java`, `earlyoom`, `shell`, `torchrun`,
    /// `deepspeed`, `launcher`, `python`, `numpy`, `windows`, `tensorflow`, `systemd`, `paddle`,
    /// `compiler`, `nvcc`, `celery`, `joblib`, `datasets`, `dask`, `pbs`, `mpi`, `heroku`,
    /// `streamlit`, `sagemaker`, `databricks`, `r`, `ios`, `duckdb`, `strace`, `go`, `matlab`, `triton`, `other`.
    pub framework: &'static str,
    /// The killed process, when the line names it.
    pub pid: Option<u32>,
}

/// Label key of [`HostEvidence`] on the event.
pub const EVIDENCE_LABEL: &str = "host_oom.evidence";

fn number_after(s: &str, marker: &str) -> Option<u32> {
    let rest = &s[s.find(marker)? + marker.len()..];
    let rest = rest.trim_start();
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

fn sym(evidence: HostEvidence, framework: &'static str, pid: Option<u32>) -> Option<HostSymptom> {
    Some(HostSymptom { evidence, framework, pid })
}

/// Lines that say it in so many words: every word of an entry in the (lower-cased) line, first
/// match wins.
const SAID: &[(&[&str], HostEvidence, &str)] = &[
    // Slurm: `slurmstepd: error: Detected 1 oom-kill event(s) in StepId=…`, `srun: error: node:
    // task 0: Out Of Memory`; its older enforcement `Job 7518 exceeded memory limit (626359956 >
    // 512000000), being killed`, `Exceeded job memory limit`.
    (&["slurmstepd", "oom-kill event"], HostEvidence::Explicit, "slurm"),
    (&["slurmstepd", "oom_kill event"], HostEvidence::Explicit, "slurm"),
    // The same without its `slurmstepd: error:` head (a paste, an email from the scheduler).
    (&["detected", "oom-kill event", "stepid="], HostEvidence::Explicit, "slurm"),
    (&["detected", "oom_kill event", "stepid="], HostEvidence::Explicit, "slurm"),
    (&["killed by the cgroup out-of-memory handler"], HostEvidence::Explicit, "slurm"),
    (&["srun: error:", "out of memory"], HostEvidence::Explicit, "slurm"),
    // Its accounting: `seff`'s `State: OUT_OF_MEMORY (exit code 0)`, and `sacct`'s state column,
    // which cuts a word wider than the column with a `+` (`OUT_OF_ME+    0:125`; whole, with the
    // exit code Slurm gives a step its cgroup killed, `0:125`).
    (&["state: out_of_memory"], HostEvidence::Explicit, "slurm"),
    (&[" out_of_me+ "], HostEvidence::Explicit, "slurm"),
    (&[" out_of_memory ", "0:125"], HostEvidence::Explicit, "slurm"),
    (&["slurmstepd", "exceeded job memory limit"], HostEvidence::Explicit, "slurm"),
    (&["slurmstepd", "exceeded step memory limit"], HostEvidence::Explicit, "slurm"),
    (&["slurmstepd", "exceeded memory limit", "being killed"], HostEvidence::Explicit, "slurm"),
    // PBS / Torque with Moab: `job 3132467 exceeded MEM usage hard limit (2528 > 1126)`.
    (&["exceeded mem usage hard limit"], HostEvidence::Explicit, "pbs"),
    // PBS Pro's note in the job's output: `=>> PBS: job killed: mem 38427376kb exceeded limit
    // 33554432kb` (also `mem job total N kb exceeded limit N kb`).
    // Also its virtual-memory limit (TORQUE's default `vmem`): `=>> PBS: job killed: vmem
    // 3372163072 exceeded limit 2147483648` (not its wall time, `walltime 3630 exceeded limit`).
    (&["pbs: job killed: ", "mem ", "exceeded limit"], HostEvidence::Explicit, "pbs"),
    // YARN: `Container [pid=…] is running beyond physical memory limits. … Killing container.`
    (&["is running beyond physical memory limits"], HostEvidence::Explicit, "yarn"),
    (&["is running beyond virtual memory limits"], HostEvidence::Explicit, "yarn"),
    // HTCondor's hold reason: `Docker job has gone over memory limit of 1024 Mb`.
    (&["job has gone over memory limit"], HostEvidence::Explicit, "htcondor"),
    (&["term_memlimit"], HostEvidence::Explicit, "lsf"),
    (&["was oom-killed"], HostEvidence::Explicit, "kubernetes"),
    (&["the node was low on resource: memory"], HostEvidence::Explicit, "kubernetes"),
    // systemd: `train.service: Failed with result 'oom-kill'.`
    (&["has been killed by the oom killer"], HostEvidence::Explicit, "systemd"),
    (&["failed with result 'oom-kill'"], HostEvidence::Explicit, "systemd"),
    (&["session crashed after using all available ram"], HostEvidence::Explicit, "colab"),
    (&["notebook tried to allocate more memory than is available"], HostEvidence::Explicit, "kaggle"),
    // Vertex AI custom jobs: `The replica workerpool0-0 ran out-of-memory and exited with a
    // non-zero status of 9(SIGKILL).`
    (&["ran out-of-memory and exited with a non-zero status"], HostEvidence::Explicit, "vertex"),
    // ollama's check before loading: `Error: model requires more system memory (12.5 GiB) than is
    // available (8.2 GiB)`.
    (&["model requires more system memory"], HostEvidence::Explicit, "ollama"),
    // The kernel's OOM-killer line quoted with its middle elided (`Out of memory: Killed …
    // anon-rss 6.0 GB`): the kernel parser needs its pid; the words are the kernel's.
    (&["out of memory: killed", "anon-rss"], HostEvidence::Explicit, "kernel"),
    // The tail of Ray's OOM-kill message, its head cut: `Refer to the documentation on how to
    // address the out of memory issue: https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html`.
    (&["how to address the out of memory issue"], HostEvidence::Explicit, "ray"),
    // Host allocations refused.
    (&["defaultcpuallocator: can't allocate memory"], HostEvidence::Allocation, "pytorch"),
    (&["defaultcpuallocator: not enough memory"], HostEvidence::Allocation, "pytorch"),
    (&["not enough memory: you tried to allocate"], HostEvidence::Allocation, "pytorch"),
    // Torch7's `THRealloc`: `$ Torch: not enough memory: you tried to reallocate 36GB. Buy new RAM!`.
    (&["not enough memory: you tried to reallocate"], HostEvidence::Allocation, "pytorch"),
    // ONNX Runtime's CPU execution provider's arena (its NCHWc layout renames the node:
    // `Non-zero status code returned while running Conv node. Name:'347_nchwc' Status Message:
    // …bfc_arena.cc:330 onnxruntime::BFCArena::AllocateRawInternal Failed to allocate memory for
    // requested buffer of size 285081600`).
    (
        &["bfcarena", "failed to allocate memory for requested buffer", "_nchwc"],
        HostEvidence::Allocation,
        "onnxruntime",
    ),
    // The JVM's heap (Spark, a Java service on the node).
    (&["java.lang.outofmemoryerror", "heap space"], HostEvidence::Allocation, "java"),
    (&["java.lang.outofmemoryerror", "gc overhead limit"], HostEvidence::Allocation, "java"),
    (&["java.lang.outofmemoryerror", "direct buffer memory"], HostEvidence::Allocation, "java"),
    // Android's runtime (ART): `java.lang.OutOfMemoryError: Failed to allocate a 9216012 byte
    // allocation with 8745148 free bytes and 8MB until OOM`; and any other JVM heap's refusal.
    (&["java.lang.outofmemoryerror"], HostEvidence::Allocation, "java"),
    // ENOMEM: `OSError: [Errno 12] Cannot allocate memory` (fork or mmap refused), `Cannot
    // allocate memory (12)`, PaddlePaddle's `posix_memalign(…) == 0 (12 vs. 0)` and `Fail to alloc
    // memory of 564023296 size, error code is 12.`
    (&["[errno 12] cannot allocate memory"], HostEvidence::Allocation, "python"),
    // Old PyTorch's CPU allocator: `[enforce fail at CPUAllocator.cpp:56] posix_memalign(&data,
    // gAlignment, nbytes) == 0. 12 vs 0`.
    (&["cpuallocator", "posix_memalign", "12 vs 0"], HostEvidence::Allocation, "pytorch"),
    (&["posix_memalign", "(12 vs. 0)"], HostEvidence::Allocation, "paddle"),
    (&["posix_memalign", ":12 != 0"], HostEvidence::Allocation, "paddle"),
    (&["cannot allocate memory (12)"], HostEvidence::Allocation, "python"),
    // (Its GPU allocator says `Out of memory error on GPU N`: this wording is the CPU's also when
    // a paste drops the code, as an issue's title does.)
    (&["fail to alloc memory of", " size"], HostEvidence::Allocation, "paddle"),
    (&["arraymemoryerror"], HostEvidence::Allocation, "numpy"),
    // ThunderSVM's host buffers: `FATAL [default] out of host memory`.
    (&["[default] out of host memory"], HostEvidence::Allocation, "thundersvm"),
    // HeavyDB (OmniSci) refusing a query its CPU buffer pool cannot hold: `Exception: Not enough
    // host memory to execute the query`.
    (&["not enough host memory to execute the query"], HostEvidence::Allocation, "heavydb"),
    // MuJoCo could not allocate a model's data (`mujoco.MjData`): `mujoco.FatalError: Could not
    // allocate memory`.
    (&["mujoco.fatalerror: could not allocate memory"], HostEvidence::Allocation, "mujoco"),
    // Rust's global allocator aborting (tokenizers, a Rust data loader): `memory allocation of
    // 2097152 bytes failed`.
    (&["memory allocation of ", " bytes failed"], HostEvidence::Allocation, "rust"),
    // Intel MKL's allocator (CPU inference: CTranslate2, numpy with MKL): `RuntimeError:
    // mkl_malloc: failed to allocate memory`.
    (&["mkl_malloc: failed to allocate memory"], HostEvidence::Allocation, "mkl"),
    (&["unable to allocate", "for an array"], HostEvidence::Allocation, "numpy"),
    // Its older wording: `MemoryError: Unable to allocate array with shape (9681, 9681) and data
    // type float64`.
    (&["unable to allocate array with shape"], HostEvidence::Allocation, "numpy"),
    // Windows, also without the `[WinError 1455]` prefix (`… (os error 1455)`).
    (&["winerror 1455"], HostEvidence::Allocation, "windows"),
    (&["paging file is too small", "1455"], HostEvidence::Allocation, "windows"),
    // Its text without the code (`ImportError: DLL load failed: The paging file is too small for
    // this operation to complete.`), also in German and Chinese Windows.
    (&["the paging file is too small for this operation"], HostEvidence::Allocation, "windows"),
    (&["auslagerungsdatei ist zu klein"], HostEvidence::Allocation, "windows"),
    (&["页面文件太小"], HostEvidence::Allocation, "windows"),
    (&["oom when allocating tensor", "allocator cpu"], HostEvidence::Allocation, "tensorflow"),
    // llama.cpp's CPU backend (host RAM: the weights or the KV cache kept on the CPU, a model
    // loaded without mmap): `ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer
    // of size 437944320`, `alloc_tensor_range: failed to allocate CPU buffer of size N`,
    // `llama_model_load: error loading model: unable to allocate CPU buffer`.
    (
        &["ggml_backend_cpu_buffer_type_alloc_buffer", "failed to allocate buffer"],
        HostEvidence::Allocation,
        "llama.cpp",
    ),
    (&["failed to allocate cpu buffer of size"], HostEvidence::Allocation, "llama.cpp"),
    (&["unable to allocate cpu buffer"], HostEvidence::Allocation, "llama.cpp"),
    // Caffe's host-side buffer: `syncedmem.hpp:24] Check failed: *ptr host allocation of size
    // 282240000 failed`.
    (&["check failed", "host allocation of size", "failed"], HostEvidence::Allocation, "caffe"),
    // The JVM could not commit memory from the OS (its heap limit was not the problem): `There
    // is insufficient memory for the Java Runtime Environment to continue.`, `os::commit_memory(…)
    // failed; error='Cannot allocate memory' (errno=12)`.
    (&["insufficient memory for the java runtime environment"], HostEvidence::Allocation, "java"),
    (&["os::commit_memory", "errno=12"], HostEvidence::Allocation, "java"),
    // GCC and the linker: `virtual memory exhausted: Cannot allocate memory`.
    (&["virtual memory exhausted"], HostEvidence::Allocation, "compiler"),
    // PBS / Torque's abort mail: `Job exceeded a memory resource limit (vmem, pvmem, etc.). Job
    // was aborted`.
    (&["job exceeded a memory resource limit"], HostEvidence::Explicit, "pbs"),
    // Dask's nanny restarting a worker over its budget: `distributed.nanny - WARNING - Worker
    // exceeded 95% memory budget. Restarting`.
    // (Newer releases name the worker: `Worker tcp://127.0.0.1:43171 (pid=56712) exceeded 95%
    // memory budget. Restarting...`.)
    (&["% memory budget", "worker"], HostEvidence::Explicit, "dask"),
    // A compiler killed while building (an extension's `setup.py`, `pip install flash-attn`, a
    // `make -j`): `g++: fatal error: Killed signal terminated program cc1plus`, `internal
    // compiler error: Killed (program cc1plus)`, nvcc's `'cicc' died due to signal 9 (Kill signal)`.
    (&["signal terminated program"], HostEvidence::Sigkill, "compiler"),
    (&["internal compiler error: killed"], HostEvidence::Sigkill, "compiler"),
    (&["died due to signal 9"], HostEvidence::Sigkill, "nvcc"),
    // Worker pools: Celery's `WorkerLostError('Worker exited prematurely: signal 9 (SIGKILL).')`
    // and `Process 'ForkPoolWorker-31' pid:90 exited with 'signal 9 (SIGKILL)'`; Python's
    // `subprocess.CalledProcessError: Command '…' died with <Signals.SIGKILL: 9>.`; loky's exit
    // codes `{SIGKILL(-9), SIGKILL(-9)}`.
    (&["exited prematurely: signal 9"], HostEvidence::Sigkill, "celery"),
    (&["exited with 'signal 9 (sigkill)'"], HostEvidence::Sigkill, "celery"),
    (&["died with <signals.sigkill: 9>"], HostEvidence::Sigkill, "python"),
    (&["exit codes of the workers are", "sigkill"], HostEvidence::Sigkill, "joblib"),
    // Pools whose worker died without saying why (a segmentation fault is possible, the OOM killer
    // most likely): loky's `A worker process managed by the executor was unexpectedly terminated.
    // … excessive memory usage causing the Operating System to kill the worker.`, Python's
    // `BrokenProcessPool: A process in the process pool was terminated abruptly …`, `A child
    // process terminated abruptly, the process pool is not usable anymore`, Hugging Face datasets'
    // `One of the subprocesses has abruptly died during map operation.`
    (&["worker process managed by the executor was unexpectedly terminated"], HostEvidence::Exited, "joblib"),
    (&["process in the process pool was terminated abru"], HostEvidence::Exited, "python"),
    (&["process in the executor was terminated abruptly"], HostEvidence::Exited, "joblib"),
    (&["child process terminated abruptly"], HostEvidence::Exited, "python"),
    (&["subprocesses has abruptly died"], HostEvidence::Exited, "datasets"),
    // MPI launchers reporting a rank the kernel killed: MPICH's Hydra box `=   KILLED BY SIGNAL: 9
    // (Killed)`, Open MPI's `mpirun noticed that process rank 7 with PID 0 on node n exited on
    // signal 9 (Killed).`, MVAPICH's `MPI process (rank: 0, pid: 39547) terminated with signal 9
    // -> abort job` (Hydra's `EXIT CODE: 9` is read below).
    (&["killed by signal: 9 (killed)"], HostEvidence::Sigkill, "mpi"),
    (&["exited on signal 9 (killed)"], HostEvidence::Sigkill, "mpi"),
    (&["mpi process", "terminated with signal 9 "], HostEvidence::Sigkill, "mpi"),
    // Heroku's router log: `Error R14 (Memory quota exceeded)` (the dyno swaps), `Error R15
    // (Memory quota vastly exceeded)` (the platform kills it).
    (&["r14 (memory quota exceeded)"], HostEvidence::Explicit, "heroku"),
    (&["r15 (memory quota vastly exceeded)"], HostEvidence::Explicit, "heroku"),
    // Managed platforms: Streamlit Community Cloud's mail `your app … has gone over its resource
    // limits` (its limit is the app's memory), SageMaker's `ClientError: Please use an instance
    // type with more memory, or reduce the size of job data processed on an instance`.
    (&["has gone over its resource limits"], HostEvidence::Explicit, "streamlit"),
    (&["instance type with more memory"], HostEvidence::Explicit, "sagemaker"),
    // Databricks restarting what died (the driver's JVM or the notebook's Python, most often for
    // the driver node's memory): `The spark driver has stopped unexpectedly and is restarting.`,
    // `Fatal error: The Python kernel is unresponsive.`
    (&["spark driver has stopped unexpectedly"], HostEvidence::Exited, "databricks"),
    (&["python kernel is unresponsive"], HostEvidence::Exited, "databricks"),
    // R's `system()` / `quit()` could not fork: `system call failed: Cannot allocate memory`.
    (&["system call failed: cannot allocate memory"], HostEvidence::Allocation, "r"),
    // iOS's jetsam killing an app (Xcode's debugger): `Message from debugger: Terminated due to
    // memory issue`, `The app “…” has been killed by the operating system because it is using too
    // much memory.`
    (&["terminated due to memory issue"], HostEvidence::Explicit, "ios"),
    (&["killed by the operating system because it is using too much memory"], HostEvidence::Explicit, "ios"),
    // An application's own report of its worker's death: `Process killed (out of memory) -- try a
    // lighter model or smaller image (code: exit-SIGKILL)`.
    (&["process killed (out of memory)"], HostEvidence::Explicit, "other"),
    // DuckDB's buffer manager over its memory limit (host memory): `Out of Memory Error: failed to
    // allocate data of size 256.0 MiB (12.2 GiB/12.1 GiB used)`, `duckdb.duckdb.
    // OutOfMemoryException: Out of Memory Error: Failed to allocate block of 2048 bytes (bad
    // allocation)`.
    (&["failed to allocate data of size", " used)"], HostEvidence::Allocation, "duckdb"),
    (&["out of memory error: failed to allocate block of"], HostEvidence::Allocation, "duckdb"),
    // strace watching a child the kernel killed: `--- SIGCHLD {si_signo=SIGCHLD,
    // si_code=CLD_KILLED, si_pid=3840555, …, si_status=SIGKILL, …} ---`.
    (&["si_code=cld_killed", "si_status=sigkill"], HostEvidence::Sigkill, "strace"),
    // Triton Inference Server's Python backend could not size its region in `/dev/shm` (a
    // container's 64 MB default): `Unable to initialize shared memory key
    // 'triton_python_backend_shm_region_1' to requested size (67108864 bytes)`.
    (&["unable to initialize shared memory key"], HostEvidence::Shm, "triton"),
    // MATLAB: `Out of memory. Type HELP MEMORY for your options.`, newer `Out of memory. For more
    // information, see Resolve "Out of Memory" Errors.`
    (&["out of memory. type help memory"], HostEvidence::Allocation, "matlab"),
    (&["out of memory. for more information, see resolve"], HostEvidence::Allocation, "matlab"),
    // Go's runtime could not get memory from the system: `fatal error: runtime: out of memory`
    // (with `runtime.(*mheap).sysAlloc` frames after it).
    (&["fatal error: runtime: out of memory"], HostEvidence::Allocation, "go"),
];

/// The symptom in `body` (a line with its logger prefixes stripped), if any.
pub fn detect(body: &str) -> Option<HostSymptom> {
    use HostEvidence::*;
    let t = body.trim();
    if t.is_empty() || t.len() > 2048 {
        return None;
    }
    let mut l = t.to_ascii_lowercase();
    // A re-typed paste in a Chinese input method: full-width `（pid 27631）`, `signal：killed`.
    if l.contains(['（', '）', '：']) {
        l = l.replace('（', " (").replace('）', ") ").replace('：', ": ");
    }
    // Cheap gate: every symptom has one of these words.
    if !(has(&l, "kill")
        || has(&l, "memory")
        || has(&l, "137")
        || has(&l, "-9")
        || has(&l, "signal")
        || has(&l, "memlimit")
        || has(&l, "mem usage")
        || has(&l, "bad_alloc")
        || has(&l, "out_of_me")
        || has(&l, "all available ram")
        || has(&l, "paging file")
        || has(&l, "memoryerror")
        || has(&l, "unable to allocate")
        || has(&l, "host allocation")
        || has(&l, "allocator cpu")
        || has(&l, "memalign")
        || has(&l, "winerror 1455")
        || has(&l, "errno 12")
        || has(&l, "outofmemoryerror")
        || has(&l, "earlyoom")
        || has(&l, "</torch_")
        || has(&l, "kernelrestarter")
        || has(&l, "cpu buffer")
        || has(&l, "auslagerungsdatei")
        || l.starts_with("bus error")
        || t.contains("页面文件太小")
        || has(&l, "cpu_buffer")
        || has(&l, "abru")
        || has(&l, "unexpectedly")
        || has(&l, "unresponsive")
        || has(&l, "resource limits")
        || has(&l, "exit code: 9")
        || has(&l, "allocate data of size")
        || has(&l, "allocate vector")
        || has(&l, "malloc")
        || has(&l, "new failed")
        || has(&l, "request of size")
        || has(&l, "out of ram")
        || has(&l, "attempt to allocate")
        || t.contains(KILLED_ZH))
    {
        return None;
    }
    // Slurm's report after a step ends whose peak went over its limit (`slurmstepd: error: Exceeded
    // step memory limit at some point.`, `… Step may have been partially swapped out to disk.`):
    // printed for jobs that finished too; a kill says so in its own words.
    if has(&l, "memory limit at some point") {
        return None;
    }
    // PyTorch's DataLoader.
    // PaddlePaddle words it `DataLoader process (pid 3063) exited is killed by signal: Killed`.
    if (has(&l, "dataloader worker") || has(&l, "dataloader process") || l.starts_with("worker (pid"))
        && has(&l, "killed by signal")
    {
        let pid = number_after(&l, "(pid ");
        let fw = if has(&l, "dataloader process") { "paddle" } else { "pytorch" };
        // (`… killed by signal: Bus` / `error. It is possible …` when the paste wraps.)
        if has(&l, "bus error") || l.trim_end().ends_with("signal: bus") {
            return sym(Shm, fw, pid);
        }
        // A re-typed paste drops the space (`killed by signal:killed`).
        if has(&l, "signal: killed") || has(&l, "signal:killed") {
            return sym(Sigkill, fw, pid);
        }
        // An issue title that stops at the signal (`DataLoader worker (pid xxx) is killed by
        // signal`): the worker died and the signal is not known.
        if l.trim_end_matches(['.', ' ']).ends_with("killed by signal") {
            return sym(Exited, fw, pid);
        }
        return None;
    }
    if has(&l, "dataloader worker (pid") && has(&l, "exited unexpectedly") {
        return sym(Exited, "pytorch", number_after(&l, "(pid(s) ").or_else(|| number_after(&l, "(pid ")));
    }
    // Jupyter's automatic restarter brings back a kernel that died (a restart the user asked
    // for logs `Kernel restarted`, not this): `KernelRestarter: restarting kernel (1/5), keep
    // random ports` — on a notebook host most often the OOM killer, as a worker that exited.
    if has(&l, "kernelrestarter: restarting kernel") {
        return sym(Exited, "jupyter", None);
    }
    // `ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient
    // shared memory (shm).`
    // PaddlePaddle words it `Unexpected BUS error encountered in DataLoader worker. This might be
    // caused by insufficient shared memory (shm), please check whether use_shared_memory is set`.
    if has(&l, "insufficient shared memory (shm)") {
        return sym(Shm, if has(&l, "use_shared_memory") { "paddle" } else { "pytorch" }, None);
    }
    // A DataLoader worker could not write a batch to /dev/shm: `RuntimeError: unable to write to
    // file </torch_18692_1954506624>: No space left on device (28)`.
    if has(&l, "unable to write to file </torch_") {
        return sym(Shm, "pytorch", None);
    }
    // Schedulers, runtimes and allocators that say it in so many words.
    if let Some((_, evidence, framework)) = SAID.iter().find(|(words, ..)| words.iter().all(|w| has(&l, w))) {
        return sym(*evidence, framework, None);
    }
    // Ray: `The process is killed by SIGKILL by OOM killer due to high memory usage`, `… killed
    // due to memory pressure (OOM)`; it names the worker's pid.
    if has(&l, "killed by sigkill by oom killer")
        || has(&l, "killed due to memory pressure")
        || has(&l, "ray killed this worker")
        || has(&l, "killed due to the node running low on memory")
        || (has(&l, "system memory low at node") && has(&l, "killing"))
        // Older Ray's memory monitor raising in the task: `ray._private.memory_monitor.
        // RayOutOfMemoryError: More than 95% of the memory on node … is used (7.12 / 7.49 GB)`.
        || has(&l, "rayoutofmemoryerror")
    {
        return sym(Explicit, "ray", number_after(&l, "pid="));
    }
    if has(&l, "oomkilled") && !has(&l, "oomkilled:false") && !has(&l, "oomkilled\": false") {
        return sym(Explicit, "kubernetes", None);
    }
    // earlyoom, the user-space OOM killer: `earlyoom[812]: sending SIGTERM to process 4567 uid 1000
    // "python3": oom_score 900, VmRSS 30000 MiB`.
    if has(&l, "earlyoom") && (has(&l, "sending sigterm to process") || has(&l, "sending sigkill to process"))
    {
        return sym(Explicit, "earlyoom", number_after(&l, "to process "));
    }
    // Hugging Face Spaces' runtime-error banner: `Memory limit exceeded (16Gi)`, older `CPU Memory
    // limit exceeded (16GB)`.
    if l.starts_with("memory limit exceeded") || l.starts_with("cpu memory limit exceeded") {
        return sym(Explicit, "spaces", None);
    }
    // A C++ program's `new` failed and nothing caught it: `terminate called after throwing an
    // instance of 'std::bad_alloc'`, `  what():  std::bad_alloc`, a program's report of it
    // (`Error: std::bad_alloc`) or the name alone. (GPU allocators that throw name
    // themselves on the same line: `std::bad_alloc: cudaErrorMemoryAllocation`, `rmm::bad_alloc`.)
    if l.ends_with("throwing an instance of 'std::bad_alloc'")
        || l.split_whitespace().eq(["what():", "std::bad_alloc"])
        || l.trim() == "std::bad_alloc"
        || l.trim_end().ends_with(": std::bad_alloc")
        || bad_alloc_last(&l)
    {
        return sym(Allocation, "c++", None);
    }
    if l == "memoryerror" || l.starts_with("memoryerror:") || l.ends_with(" memoryerror") {
        return sym(Allocation, "python", None);
    }
    // Killed by SIGKILL. torchrun's log line `failed (exitcode: -9) local_rank: 1 (pid: N)`, and the
    // field of its `Root Cause (first observed failure)` block, aligned with its neighbours:
    // `  exitcode  : -9 (pid: 3309)` (a paste can end there, before its `traceback : Signal 9 …`).
    if has(&l, "exitcode: -9")
        || l.strip_prefix("exitcode").is_some_and(|r| r.trim_start().starts_with(": -9 (pid:"))
    {
        return sym(Sigkill, "torchrun", number_after(&l, "(pid:"));
    }
    // Cog's worker: `Prediction failed for an unknown reason. It might have run out of memory?
    // (exitcode -9)`.
    if has(&l, "might have run out of memory") && has(&l, "exitcode -9") {
        return sym(Sigkill, "cog", None);
    }
    if has(&l, "signal 9 (sigkill) received by pid") {
        return sym(Sigkill, "torchrun", number_after(&l, "received by pid"));
    }
    if has(&l, "<signals.sigkill: 9>") {
        return sym(Sigkill, "python", None);
    }
    // A wrapper's own report: `❌ Training failed with exit code -9`.
    if ["exit code -9", "exit status -9"].iter().any(|w| ends_word(&l, w)) {
        return sym(Sigkill, "shell", None);
    }
    // PyTorch-BigGraph's pool: `RuntimeError: A subprocess exited unexpectedly with status -9`.
    if ends_word(&l, "exited unexpectedly with status -9") {
        return sym(Sigkill, "python", None);
    }
    if has(&l, "return code = -9") || has(&l, "returned non-zero exit status -9") {
        return sym(Sigkill, "deepspeed", None);
    }
    // ollama: `Error: 500 Internal Server Error: llama-server process has terminated: signal:
    // killed` (older: `llama runner process has terminated: signal: killed`).
    if has(&l, "process has terminated: signal: killed") {
        return sym(Sigkill, "ollama", None);
    }
    // gdb's `Program terminated with signal SIGKILL`; fish's `fish: Job 1, 'python3 …' terminated
    // by signal SIGKILL (Forced quit)`.
    if has(&l, "terminated with signal sigkill") || has(&l, "terminated by signal sigkill") {
        return sym(Sigkill, "shell", None);
    }
    // gunicorn's arbiter: `Worker (pid:N) was sent SIGKILL! Perhaps out of memory?` — unless it
    // killed the worker itself after a `WORKER TIMEOUT (pid:N)` (`LogParser` checks that).
    if has(&l, "was sent sigkill! perhaps out of memory") {
        return sym(Sigkill, GUNICORN, number_after(&l, "(pid:"));
    }
    // PyCharm / IDE runners: `Process finished with exit code 137 (interrupted by signal 9: SIGKILL)`.
    if has(&l, "interrupted by signal 9") {
        return sym(Sigkill, "ide", None);
    }
    // (Docker BuildKit: `executor failed running [...]: exit code: 137`.)
    if has(&l, "exit code 137")
        || has(&l, "exit code: 137")
        || has(&l, "exited with code 137")
        || has(&l, "exit status 137")
        // Horovod's launcher: `Process 0 exit with status code 137.`
        || has(&l, "exit with status code 137")
        // Newer ninja's failed edge: `FAILED: [code=137] obj/…`.
        || ends_word(&l, "failed: [code=137]")
        || (l.starts_with("exit code:") && l.trim_start_matches("exit code:").trim() == "137")
        // Kubernetes' container status (`kubectl get pod -o yaml`, `lastState` / `lastFailureInfo`):
        // `exitCode: 137`, in JSON `"exitCode": 137`.
        || ends_word(&l, "exitcode: 137")
        || ends_word(&l, "\"exitcode\": 137")
    {
        return sym(Sigkill, "shell", None);
    }
    // MPICH's Hydra box gives a rank's signal as its exit code: `=   EXIT CODE: 9`.
    if t.starts_with('=') && l.trim_start_matches(['=', ' ']).trim_end() == "exit code: 9" {
        return sym(Sigkill, "mpi", None);
    }
    // Nextflow: `Process `align (19)` terminated with an error exit status (137)`, `The exit status
    // of the task that caused the workflow execution to fail was: 137.`
    if has(&l, "terminated with an error exit status (137)")
        || ends_word(&l, "caused the workflow execution to fail was: 137")
    {
        return sym(Sigkill, "nextflow", None);
    }
    if let Some(s) = killed_line(t) {
        return Some(s);
    }
    // The shell's report of SIGBUS alone (`Bus error (core dumped)`): for a training job, its
    // shared memory (`/dev/shm`, a container's 64 MB default) ran out under a memory map.
    if l == "bus error" || l == "bus error (core dumped)" {
        return sym(Shm, "shell", None);
    }
    // A program reporting its worker's SIGBUS (status 135 = 128 + 7) as possibly a memory
    // condition (CubiCal: `child process 108 exited with status 135. This is a bug, or an
    // out-of-memory condition.`): the same shared memory.
    if (has(&l, "status 135") || has(&l, "code 135"))
        && (has(&l, "out-of-memory") || has(&l, "out of memory"))
    {
        return sym(Shm, GENERIC, None);
    }
    if has(&l, "killing subprocess") {
        return sym(Launcher, "launcher", None);
    }
    // A program's own fatal error with nothing but the words (Go's runtime on Windows, C tools):
    // `fatal error: out of memory` — a device's failure names the device.
    if l == "fatal error: out of memory" || l == "fatal: out of memory" {
        return sym(Allocation, GENERIC, None);
    }
    // Words no rule above names, read by what such reports have in common (`generic.rs`).
    if generic::host_limit_exceeded(&l) {
        return sym(Explicit, GENERIC, None);
    }
    if generic::killed_by_sigkill(&l) {
        return sym(Sigkill, GENERIC, None);
    }
    if generic::host_allocation_failed(&l) {
        return sym(Allocation, GENERIC, None);
    }
    None
}

/// True when `l` holds `w` not followed by another digit (`exit code -9`, not `-97`).
fn ends_word(l: &str, w: &str) -> bool {
    l.match_indices(w).any(|(i, _)| !l.as_bytes().get(i + w.len()).is_some_and(u8::is_ascii_digit))
}

/// Who printed a symptom read by the last-resort wordings (`generic.rs`): not known.
pub const GENERIC: &str = "other";

/// Who printed gunicorn's worker-killed line.
pub const GUNICORN: &str = "gunicorn";

/// The worker a gunicorn `WORKER TIMEOUT (pid:N)` line names: gunicorn kills that worker itself,
/// so its later `was sent SIGKILL` is not the OOM killer's.
pub fn worker_timeout_pid(body: &str) -> Option<u32> {
    let at = body.find("WORKER TIMEOUT (pid:")?;
    number_after(&body[at..], "(pid:")
}

/// Keras's progress bar with the shell's `Killed` glued to its last figure (no line break before
/// it): `165376/296960 [=====>....] - ETA: 365s - loss: 2.1371Killed`.
fn keras_bar_killed(lower: &str) -> bool {
    lower.strip_suffix("killed").is_some_and(|bar| {
        bar.ends_with(|c: char| c.is_ascii_digit()) && (bar.contains(" - loss: ") || bar.contains(" - eta: "))
    })
}

/// `std::bad_alloc` as a line's last word after the exception's report (`… 'std::bad_alloc'
/// what():  std::bad_alloc`, the two lines of `terminate` flattened onto one by a paste) or after a
/// logger's bracketed prefix (`[*** LOG ERROR #0001 ***] [2024-10-06 17:11:03] [] std::bad_alloc`).
fn bad_alloc_last(l: &str) -> bool {
    let mut words = l.split_whitespace().rev();
    words.next() == Some("std::bad_alloc") && words.next().is_some_and(|w| w == "what():" || w.ends_with(']'))
}

/// bash's `Killed` in the zh_CN locale.
const KILLED_ZH: &str = "已杀死";

/// A shell's report of a process killed by SIGKILL: `Killed` alone (also glued to the end of a
/// progress bar; macOS's `Killed: 9`), bash's `… line 28:  8156 Killed   python3 main.py`, zsh's `[1]  14875 killed  python`.
fn killed_line(t: &str) -> Option<HostSymptom> {
    let lower = t.to_ascii_lowercase();
    // bash in a Chinese locale prints `已杀死` for `Killed`.
    // macOS shells print `Killed: 9`; a paste that lost the line break glues the next line's
    // number on (`Killed96160`).
    let glued_number =
        lower.strip_prefix("killed").is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()));
    if lower == "killed"
        || lower == "killed: 9"
        || glued_number
        || t.ends_with(KILLED_ZH)
        || lower.ends_with("]killed")
        || lower.ends_with("it/s]killed")
        || lower.ends_with("| killed")
        // After a program's status line that ended without a line break: `:: Lookup embeddings
        // and tokens (this might take a while) :: Killed`.
        || lower.ends_with(" :: killed")
        || keras_bar_killed(&lower)
    {
        return sym(HostEvidence::Sigkill, "shell", None);
    }
    // bash: `<script>: line N: <pid> Killed <command>`; zsh: `[job] <pid> killed <command>`.
    let words: Vec<&str> = t.split_whitespace().collect();
    // (bash on macOS: `line 26: 21899 Killed: 9   python train.py`.)
    let i = words.iter().position(|w| {
        *w == "Killed" || *w == "killed" || *w == KILLED_ZH || (*w == "Killed:" && words.last() != Some(w))
    })?;
    if words[i] == "Killed:" && words.get(i + 1) != Some(&"9") {
        return None;
    }
    let pid = words.get(i.checked_sub(1)?)?.parse::<u32>().ok()?;
    // bash names the line in its locale's word (`line 24:`, `riga 24:`, `Zeile 24:`).
    // bash prints `Killed` capitalised (zsh `killed`); after the English `<script>: line N:` a
    // re-typed lower-case `killed` is still bash's report.
    let english_line = i.checked_sub(4).is_some_and(|j| words[j].ends_with(':') && words[j + 1] == "line");
    let bash = (words[i] != "killed" || english_line)
        && i.checked_sub(2).is_some_and(|j| {
            words[j].strip_suffix(':').is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        });
    // zsh's job number `[1]`, also glued to the end of a progress bar (`1.84s/it][1]`).
    let zsh = i.checked_sub(2).is_some_and(|j| words[j].ends_with(']') && words[j].contains('['));
    // zsh's report alone on its line, the command cut off: `[1]    2843557 killed`.
    let zsh_alone = i == 2
        && words.len() == 3
        && words[0]
            .strip_prefix('[')
            .and_then(|w| w.strip_suffix(']'))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    // bash's report of a pipeline names each member on a line of its own: `       134 Killed
    //        | python3 glem.py`.
    // (bash pads its status column: two spaces or more before the `|`.)
    let pipeline = i == 1 && words.get(2) == Some(&"|") && t.contains("Killed  ");
    // bash names the script line; an issue title may drop the command after `Killed`.
    if bash || (zsh && words.len() > i + 1) || zsh_alone || pipeline {
        return sym(HostEvidence::Sigkill, "shell", Some(pid));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(line: &str) -> Option<(HostEvidence, &'static str, Option<u32>)> {
        detect(line).map(|s| (s.evidence, s.framework, s.pid))
    }

    #[test]
    fn every_form() {
        use HostEvidence::*;
        for (line, want) in [
            (
                "RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed.",
                (Sigkill, "pytorch", Some(19597)),
            ),
            (
                "RuntimeError: DataLoader worker (pid 3855) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory.",
                (Shm, "pytorch", Some(3855)),
            ),
            ("Killed", (Sigkill, "shell", None)),
            ("Killed: 9", (Sigkill, "shell", None)),
            ("cli_demo.sh: line 5: 12989 Killed", (Sigkill, "shell", Some(12989))),
            ("Memory limit exceeded (16Gi)", (Explicit, "spaces", None)),
            (
                "UNAVAILABLE: Internal: Unable to initialize shared memory key 'triton_python_backend_shm_region_3' to requested size (67108864 bytes).",
                (Shm, "triton", None),
            ),
            ("CPU Memory limit exceeded (16GB)", (Explicit, "spaces", None)),
            ("not enough memory: you tried to allocate 9437184 bytes", (Allocation, "pytorch", None)),
            (
                "/x/share/lua/5.1/nn/THNN.lua:109: $ Torch: not enough memory: you tried to reallocate 36GB. Buy new RAM! at /x/torch/lib/TH/THGeneral.c:251",
                (Allocation, "pytorch", None),
            ),
            (
                "DataLoader process (pid 3063) exited is killed by signal: Killed",
                (Sigkill, "paddle", Some(3063)),
            ),
            ("train.service: Failed with result 'oom-kill'.", (Explicit, "systemd", None)),
            (
                "Error: 500 Internal Server Error: llama-server process has terminated: signal: killed",
                (Sigkill, "ollama", None),
            ),
            (
                "ResourceExhaustedError: Fail to alloc memory of 564023296 size, error code is 12.",
                (Allocation, "paddle", None),
            ),
            ("Killed96160", (Sigkill, "shell", None)),
            (
                "fish: Job 1, 'python3 stable_diffusion.py --p…' terminated by signal SIGKILL (Forced quit)",
                (Sigkill, "shell", None),
            ),
            ("  6%|██      | 3787/62565 [04:47<1:10:53, 13.82it/s]Killed", (Sigkill, "shell", None)),
            (
                "/var/spool/slurmd/job00191/slurm_script: line 28:  8156 Killed                  python3 main.py --epochs 400",
                (Sigkill, "shell", Some(8156)),
            ),
            ("[1]    14875 killed     python main.py --low_vram", (Sigkill, "shell", Some(14875))),
            ("[1]    2843557 killed", (Sigkill, "shell", Some(2843557))),
            ("RuntimeError: mkl_malloc: failed to allocate memory", (Allocation, "mkl", None)),
            (
                "(pid=737) ray._private.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node ip-172-31-7-2 is used (7.12 / 7.49 GB).",
                (Explicit, "ray", Some(737)),
            ),
            (
                "Feb 17, 2019, 12:41:07 PM | INFO | KernelRestarter: restarting kernel (1/5), keep random ports",
                (Exited, "jupyter", None),
            ),
            (
                "F1111 22:11:06.945744  1512 syncedmem.hpp:24] Check failed: *ptr host allocation of size 282240000 failed",
                (Allocation, "caffe", None),
            ),
            ("已杀死", (Sigkill, "shell", None)),
            ("run.sh: line 3:  8156 已杀死               python train.py", (Sigkill, "shell", Some(8156))),
            ("interrupted by signal 9:SIGKILL (137)", (Sigkill, "ide", None)),
            (
                "[2020-09-12 05:37:52 +0000] [18] [ERROR] Worker (pid:21) was sent SIGKILL! Perhaps out of memory?",
                (Sigkill, "gunicorn", Some(21)),
            ),
            (
                "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler.",
                (Explicit, "slurm", None),
            ),
            (
                "slurmstepd: error: Detected 1 oom_kill event in StepId=3347872.batch.",
                (Explicit, "slurm", None),
            ),
            (
                "Detected 1 oom-kill event(s) in StepId=125757.batch. Some of your processes may have been killed by the cgroup out-of-memory handler.",
                (Explicit, "slurm", None),
            ),
            ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.", (Explicit, "lsf", None)),
            ("      Reason:       OOMKilled", (Explicit, "kubernetes", None)),
            (
                "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 1 (pid: 1168) of binary: /opt/conda/bin/python",
                (Sigkill, "torchrun", Some(1168)),
            ),
            ("traceback : Signal 9 (SIGKILL) received by PID 10398", (Sigkill, "torchrun", Some(10398))),
            ("  exitcode  : -9 (pid: 3309)", (Sigkill, "torchrun", Some(3309))),
            ("Process finished with exit code 137 (interrupted by signal 9:SIGKILL)", (Sigkill, "ide", None)),
            (
                "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 845152256 bytes. Error code 12 (Cannot allocate memory)",
                (Allocation, "pytorch", None),
            ),
            ("MemoryError", (Allocation, "python", None)),
            (
                "OSError: [WinError 1455] The paging file is too small for this operation to complete",
                (Allocation, "windows", None),
            ),
            ("Your session crashed after using all available RAM.", (Explicit, "colab", None)),
            (
                "Your notebook tried to allocate more memory than is available. It has restarted.",
                (Explicit, "kaggle", None),
            ),
            (
                "The replica workerpool0-0 ran out-of-memory and exited with a non-zero status of 9(SIGKILL).",
                (Explicit, "vertex", None),
            ),
            (
                "cog.server.exceptions.FatalWorkerException: Prediction failed for an unknown reason. It might have run out of memory? (exitcode -9)",
                (Sigkill, "cog", None),
            ),
            (
                "Error: model requires more system memory (12.5 GiB) than is available (8.2 GiB)",
                (Explicit, "ollama", None),
            ),
            ("java.lang.OutOfMemoryError: Java heap space", (Allocation, "java", None)),
            ("OSError: [Errno 12] Cannot allocate memory", (Allocation, "python", None)),
            (
                "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
                (Shm, "pytorch", None),
            ),
            (
                "OSError: The paging file is too small for this operation to complete. (os error 1455)",
                (Allocation, "windows", None),
            ),
            (
                "child process 108 exited with status 135. This is a bug, or an out-of-memory condition.",
                (Shm, GENERIC, None),
            ),
            (
                "Jun 01 10:00:00 box earlyoom[812]: sending SIGTERM to process 4567 uid 1000 \"python3.13\": oom_score 900, VmRSS 30000 MiB",
                (Explicit, "earlyoom", Some(4567)),
            ),
            (
                "RuntimeError: unable to write to file </torch_18692_1954506624>: No space left on device (28)",
                (Shm, "pytorch", None),
            ),
            (
                "ERROR: Unexpected BUS error encountered in DataLoader worker. This might be caused by insufficient shared memory (shm), please check whether use_shared_memory is set and storage space in /dev/shm is enough",
                (Shm, "paddle", None),
            ),
            (
                "./invokeai/invoke.sh: riga 24:  8612 Killed                  .venv/bin/python .venv/bin/invoke.py --web $*",
                (Sigkill, "shell", Some(8612)),
            ),
            (
                "failed to solve: rpc error: code = Unknown desc = executor failed running [/bin/sh -c pip install -r requirements.txt]: exit code: 137",
                (Sigkill, "shell", None),
            ),
            ("        exitCode: 137", (Sigkill, "shell", None)),
            (r#"{"lastState":{"terminated":{"exitCode": 137,"reason":"Error"}}}"#, (Sigkill, "shell", None)),
            (
                "RuntimeError: DataLoader worker (pid(s) 25) exited unexpectedly",
                (Exited, "pytorch", Some(25)),
            ),
            ("RuntimeError: DataLoader worker (pid 47) is killed by signal: Bus", (Shm, "pytorch", Some(47))),
            (
                "RuntimeError:Dataloader worker (pid 6479) is killed by signal:killed",
                (Sigkill, "pytorch", Some(6479)),
            ),
            ("DataLoader worker (pid xxx) is killed by signal", (Exited, "pytorch", None)),
            ("./scripts/on_sd_start.sh: line 118: 7080 killed        ", (Sigkill, "shell", Some(7080))),
            (
                "165376/296960 [===============>..............] - ETA: 365s - loss: 2.1371Killed",
                (Sigkill, "shell", None),
            ),
            (
                "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 437944320",
                (Allocation, "llama.cpp", None),
            ),
            (
                "alloc_tensor_range: failed to allocate CPU buffer of size 437944320",
                (Allocation, "llama.cpp", None),
            ),
            (
                "ImportError: DLL load failed: The paging file is too small for this operation to complete.",
                (Allocation, "windows", None),
            ),
            (
                "ImportError: DLL load failed while importing _pywrap_tensorflow_internal: Die Auslagerungsdatei ist zu klein, um diesen Vorgang durchzuführen.",
                (Allocation, "windows", None),
            ),
            (
                "RuntimeError: [enforce fail at CPUAllocator.cpp:56] posix_memalign(&data, gAlignment, nbytes) == 0. 12 vs 0",
                (Allocation, "pytorch", None),
            ),
            (
                "memory allocation of memory allocation of 20971522097152 bytes failed",
                (Allocation, "rust", None),
            ),
            ("2017-12-31 02:15:06,078 FATAL [default] out of host memory", (Allocation, "thundersvm", None)),
            ("worker（pid 27631）is killed by signal：killed", (Sigkill, "pytorch", Some(27631))),
            ("RuntimeError: A subprocess exited unexpectedly with status -9", (Sigkill, "python", None)),
            ("Bus error (core dumped)", (Shm, "shell", None)),
            (
                "  Process `pipeline:stranding:call_adapter_scan (19)` terminated with an error exit status (137)",
                (Sigkill, "nextflow", None),
            ),
            ("Out of memory: Killed … anon-rss 6.0 GB", (Explicit, "kernel", None)),
            (
                "Refer to the documentation on how to address the out of memory issue: https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html.",
                (Explicit, "ray", None),
            ),
            (
                "./train.sh: line 26: 21899 Killed: 9               python train_simple.py",
                (Sigkill, "shell", Some(21899)),
            ),
            (
                "       134 Killed                  | python3 /workspace/examples/llm/glem.py",
                (Sigkill, "shell", Some(134)),
            ),
            ("❌ Training failed with exit code -9", (Sigkill, "shell", None)),
            (
                "[>>>>>>>>>> ] 1022/5000, 1.5 task/s, elapsed: 673s, ETA: 2621s已杀死",
                (Sigkill, "shell", None),
            ),
            (
                "slurmstepd: error: Job 7518 exceeded memory limit (626359956 > 512000000), being killed",
                (Explicit, "slurm", None),
            ),
            ("slurmstepd: error: Exceeded job memory limit", (Explicit, "slurm", None)),
            ("job 3132467 exceeded MEM usage hard limit (2528 > 1126)", (Explicit, "pbs", None)),
            ("=>> PBS: job killed: mem 38427376kb exceeded limit 33554432kb", (Explicit, "pbs", None)),
            ("=>> PBS: job killed: vmem 3372163072 exceeded limit 2147483648", (Explicit, "pbs", None)),
            (
                "2023-06-25 02:36:08,769 - distributed.worker_memory - WARNING - Worker tcp://127.0.0.1:43171 (pid=56712) exceeded 95% memory budget. Restarting...",
                (Explicit, "dask", None),
            ),
            (
                "Container [pid=4101,containerID=container_01] is running beyond physical memory limits. Current usage: 2.1 GB of 2 GB physical memory used; Killing container.",
                (Explicit, "yarn", None),
            ),
            (
                "(1) The process is killed by SIGKILL by OOM killer due to high memory usage.",
                (Explicit, "ray", None),
            ),
            (
                "Hold reason: Error from slot1_7@gpulab2002.chtc.wisc.edu: Docker job has gone over memory limit of 1024 Mb",
                (Explicit, "htcondor", None),
            ),
            ("terminate called after throwing an instance of 'std::bad_alloc'", (Allocation, "c++", None)),
            ("std::bad_alloc", (Allocation, "c++", None)),
            ("Error: std::bad_alloc", (Allocation, "c++", None)),
            (
                "ResourceExhaustedError: Fail to alloc memory of 5060694016 size.",
                (Allocation, "paddle", None),
            ),
            (
                "                                            what():  std::bad_alloc",
                (Allocation, "c++", None),
            ),
            (
                "[2023-04-07 13:09:33,201] [INFO] [launch.py:318:sigkill_handler] Killing subprocess 80",
                (Launcher, "launcher", None),
            ),
            ("g++: fatal error: Killed signal terminated program cc1plus", (Sigkill, "compiler", None)),
            ("c++: internal compiler error: Killed (program cc1plus)", (Sigkill, "compiler", None)),
            ("nvcc error   : 'cudafe++' died due to signal 9 (Kill signal)", (Sigkill, "nvcc", None)),
            ("virtual memory exhausted: Cannot allocate memory", (Allocation, "compiler", None)),
            (
                "Task handler raised error: WorkerLostError('Worker exited prematurely: signal 9 (SIGKILL).')",
                (Sigkill, "celery", None),
            ),
            (
                "subprocess.CalledProcessError: Command '['python3', '-u', 'subgen.py']' died with <Signals.SIGKILL: 9>.",
                (Sigkill, "python", None),
            ),
            (
                "concurrent.futures.process.BrokenProcessPool: A process in the process pool was terminated abruptly while the future was running or pending.",
                (Exited, "python", None),
            ),
            (
                "RuntimeError: One of the subprocesses has abruptly died during map operation.",
                (Exited, "datasets", None),
            ),
            (
                "There is insufficient memory for the Java Runtime Environment to continue.",
                (Allocation, "java", None),
            ),
            (
                "Job exceeded a memory resource limit (vmem, pvmem, etc.). Job was aborted",
                (Explicit, "pbs", None),
            ),
            (
                "distributed.nanny - WARNING - Worker exceeded 95% memory budget. Restarting",
                (Explicit, "dask", None),
            ),
            (
                "failed to allocate data of size 256.0 MiB (12.2 GiB/12.1 GiB used)",
                (Allocation, "duckdb", None),
            ),
            (
                "duckdb.duckdb.OutOfMemoryException: Out of Memory Error: Failed to allocate block of 2048 bytes (bad allocation)",
                (Allocation, "duckdb", None),
            ),
            (
                "--- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_KILLED, si_pid=3840555, si_uid=1000, si_status=SIGKILL, si_utime=1209, si_stime=944} ---",
                (Sigkill, "strace", None),
            ),
            ("FAILED: [code=137] csrc/batch_prefill.cuda.o", (Sigkill, "shell", None)),
            ("=   KILLED BY SIGNAL: 9 (Killed)", (Sigkill, "mpi", None)),
            ("=   EXIT CODE: 9", (Sigkill, "mpi", None)),
            (
                "mpirun noticed that process rank 7 with PID 0 on node HOSTNAME exited on signal 9 (Killed).",
                (Sigkill, "mpi", None),
            ),
            (
                "[c558-702.stampede.tacc.utexas.edu:mpispawn_0][child_handler] MPI process (rank: 0, pid: 39547) terminated with signal 9 -> abort job",
                (Sigkill, "mpi", None),
            ),
            ("Process 0 exit with status code 137.", (Sigkill, "shell", None)),
            ("heroku/web.1: Error R14 (Memory quota exceeded)", (Explicit, "heroku", None)),
            ("heroku[worker.1]: Error R15 (Memory quota vastly exceeded)", (Explicit, "heroku", None)),
            (
                "Just wanted to let you know that your app on Streamlit Cloud deployed from this repo has gone over its resource limits.",
                (Explicit, "streamlit", None),
            ),
            (
                "ClientError: Please use an instance type with more memory, or reduce the size of job data processed on an instance",
                (Explicit, "sagemaker", None),
            ),
            (
                "The spark driver has stopped unexpectedly and is restarting. Your notebook will be automatically reattached.",
                (Exited, "databricks", None),
            ),
            ("Fatal error: The Python kernel is unresponsive.", (Exited, "databricks", None)),
            ("  system call failed: Cannot allocate memory", (Allocation, "r", None)),
            ("Message from debugger: Terminated due to memory issue", (Explicit, "ios", None)),
            (
                "The app “Demo” has been killed by the operating system because it is using too much memory.",
                (Explicit, "ios", None),
            ),
            (
                "SafeError: Process killed (out of memory) -- try a lighter model or smaller image (code: exit-SIGKILL)",
                (Explicit, "other", None),
            ),
        ] {
            assert_eq!(ev(line), Some(want), "{line}");
        }
        for line in [
            "OOMKilled:false,",
            "=>> PBS: job killed: walltime 3630 exceeded limit 3600",
            "killed the process group after timeout",
            "epoch 3 loss 0.1",
            "Killed process 77 (python) total-vm:10kB",
            "I killed 3 flies",
            "Killed: 15",
            "terminate called after throwing an instance of 'thrust::system::detail::bad_alloc'",
            "  what():  std::bad_alloc: cudaErrorMemoryAllocation: out of memory",
            "    } catch (const std::bad_alloc& e) {",
            "killedby",
            "exit code 1",
            "process exited with exit code -97",
            "        exitCode: 1370",
            "        exitCode: 0",
            "step 12: 100 killed tasks",
            "see line 3: 12 killed processes",
            "./train.sh: line 26: 21899 Killed: 15   python train.py",
            "3 Killed | 4 alive",
            "A subprocess exited unexpectedly with status -97",
            "Bus error while reading the disk",
            "loss: 2.1371 killed",
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 512.00 MiB on device 0: cudaMalloc failed: out of memory",
            "slurmstepd: error: Exceeded step memory limit at some point.",
            "c++: internal compiler error: Segmentation fault (program cc1plus)",
            "nvcc error   : 'cicc' died due to signal 11 (Invalid memory reference)",
            "=   EXIT CODE: 139",
            "FAILED: [code=1] csrc/batch_prefill.cuda.o",
            "--- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED, si_pid=1, si_status=0} ---",
            "EXIT CODE: 9",
            "=   KILLED BY SIGNAL: 11 (Segmentation fault)",
            "mpirun noticed that process rank 0 with PID 1 on node n exited on signal 11 (Segmentation fault).",
            "MPI process (rank: 0, pid: 1) terminated with signal 91 -> abort job",
            "Process 0 exit with status code 1.",
            "heroku[web.1]: Error R10 (Boot timeout)",
        ] {
            assert_eq!(ev(line), None, "{line}");
        }
    }
}
