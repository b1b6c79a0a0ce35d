//! The NVML source: real NVIDIA GPUs through `nvml-wrapper`.
//!
//! # Hangs and failures
//!
//! Every NVML call — `nvmlInit` included — runs on the dedicated worker thread of a
//! [`Watchdog`] with a timeout ([`NvmlOptions::call_timeout`], [`NvmlOptions::init_timeout`]). A
//! call that fails (`NotSupported`, `FailedToLoadSymbol` on old drivers, `GpuLost`, …) or does not
//! return in time makes the fields it would have filled `None` and is counted in
//! [`Reading::missing_fields`] (one per field left empty) and, for hangs,
//! [`Reading::timed_out_calls`] (one per call). A reading is never reported as zero because it
//! could not be read. After [`DEFAULT_MAX_HUNG`] stuck calls the watchdog refuses further calls at
//! once (counted as timed out) until the driver returns.
//!
//! The [`Nvml`] handle lives in a process-wide `static OnceLock` (NVML is initialised once and never
//! shut down); device handles borrow it for `'static` and are shared with the worker thread.
//!
//! # Memory semantics
//!
//! NVML's `used` changed meaning: `nvmlDeviceGetMemoryInfo` (v1) reports used = reserved +
//! allocated, `nvmlDeviceGetMemoryInfo_v2` reports used = allocated only and `reserved` (driver
//! and firmware) separately. oomlens reports the **v1 meaning on every driver**:
//!
//! * `memory_used_bytes` = everything that is not free (v2: `used + reserved`; v1: `used`), so
//!   `used + free = total` whatever the driver;
//! * `memory_free_bytes` = NVML `free` (what new allocations can still get — the number OOMs are
//!   about; identical in v1 and v2);
//! * `memory_reserved_bytes` = v2 `reserved`; `None` (and counted missing) when only v1 answers
//!   (drivers older than R510, or where the v2 symbol fails).
//!
//! v2 is tried first; v1 is the fallback when v2 fails (not when it hangs).
//!
//! # Indices and MIG
//!
//! Physical GPUs keep their NVML index (`0..device_count`). With [`NvmlOptions::include_mig`] and
//! MIG mode enabled on a GPU, each existing MIG instance is reported as a device of its own (its own
//! `MIG-…` uuid, name and memory, `mig = true`), numbered after all physical GPUs: first GPU's
//! instances in slot order, then the next GPU's, and so on. Empty slots (`NotFound`) are skipped. The
//! instance numbering is therefore only stable while the MIG layout is; the uuid identifies an
//! instance. Processes of a GPU in MIG mode are reported on its MIG instances (not also on the
//! parent, which would count them twice); the parent still reports its power, temperature, clocks
//! and aggregate memory. Per-instance utilisation, power, temperature and clocks are usually not
//! supported by NVML and then stay `None` (and counted missing) on every sample.
//!
//! # Processes
//!
//! `running_compute_processes` (NVML v3 API). NVML reports host PIDs; the process name is read from
//! `<proc_root>/<pid>/comm` (empty when the process is gone or not visible). In a container the
//! agent needs the host PID namespace (`hostPID: true`) or the host's `/proc` mounted at
//! [`NvmlOptions::proc_root`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError as DriverError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, Nvml};
use oomlens_schema::{GpuInfo, GpuSample, ProcessSample};

use crate::source::watchdog::{DEFAULT_MAX_HUNG, Watchdog};
use crate::source::{Reading, Source};

mod smoke;
pub use smoke::smoke_report;

/// The shared library NVML is loaded from (Linux).
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// What to do when NVML is not usable on a node.
const REMEDY: &str = "To fix: install the NVIDIA driver on the host (check that `nvidia-smi` works), or run the \
     agent's container with the NVIDIA container runtime (`--runtime=nvidia` / `--gpus all`; on \
     Kubernetes the NVIDIA device plugin or GPU operator), or, on a machine without NVIDIA GPUs, use \
     the simulator source instead (`source = \"simulator\"`).";

/// NVML's `NVML_DEVICE_MIG_ENABLE`.
const MIG_ENABLED: u32 = 1;

/// The process-wide NVML handle (initialised once, never shut down).
static NVML: OnceLock<Nvml> = OnceLock::new();

/// Options of [`NvmlSource::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlOptions {
    /// Limit for each NVML call while sampling and inventorying. Default 2 s.
    pub call_timeout: Duration,
    /// Limit for `nvmlInit`, which attaches every GPU and can take seconds per GPU when
    /// persistence mode is off. Default 30 s.
    pub init_timeout: Duration,
    /// Report MIG instances as devices of their own when MIG mode is on. Default true.
    pub include_mig: bool,
    /// Where the host's `/proc` is visible (process names). Default `/proc`.
    pub proc_root: PathBuf,
    /// Workload attribution of process samples (pod, container, Slurm job, user, command line).
    pub workload: crate::workload::WorkloadConfig,
}

impl Default for NvmlOptions {
    fn default() -> Self {
        NvmlOptions {
            call_timeout: Duration::from_secs(2),
            init_timeout: Duration::from_secs(30),
            include_mig: true,
            proc_root: PathBuf::from("/proc"),
            workload: crate::workload::WorkloadConfig::default(),
        }
    }
}

/// Why the NVML source cannot be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvmlError {
    /// The NVML library could not be loaded: no NVIDIA driver visible to the agent.
    #[error(
        "cannot load the NVIDIA management library {NVML_LIBRARY} ({detail}): no NVIDIA driver is visible to this process. {REMEDY}"
    )]
    LibraryNotFound {
        /// The loader's message.
        detail: String,
    },
    /// The library loaded but the kernel driver is not running.
    #[error("{NVML_LIBRARY} loaded but the NVIDIA kernel driver is not running ({detail}). {REMEDY}")]
    DriverNotLoaded {
        /// NVML's message.
        detail: String,
    },
    /// NVML is not allowed to talk to the driver.
    #[error(
        "NVML is not allowed to access the GPUs ({detail}): run the agent as root or give it access to /dev/nvidia*. {REMEDY}"
    )]
    NoPermission {
        /// NVML's message.
        detail: String,
    },
    /// NVML initialised but sees no GPU.
    #[error(
        "NVML ({NVML_LIBRARY}) works but reports no GPUs on this node (is the container given any GPUs, e.g. NVIDIA_VISIBLE_DEVICES?). {REMEDY}"
    )]
    NoDevices,
    /// GPUs exist but none could be opened.
    #[error("NVML reports {count} GPUs but none could be opened: {reasons}")]
    NoUsableDevices {
        /// GPUs NVML reported.
        count: u32,
        /// Why each one failed.
        reasons: String,
    },
    /// A call needed to open the source hung.
    #[error(
        "NVML call {call} did not return within {timeout:?}: the NVIDIA driver looks hung (check `dmesg` for Xid errors and `nvidia-smi`)"
    )]
    TimedOut {
        /// The NVML function.
        call: &'static str,
        /// The limit it ran into.
        timeout: Duration,
    },
    /// A call needed to open the source failed.
    #[error("NVML call {call} failed: {detail}")]
    Call {
        /// The NVML function.
        call: &'static str,
        /// What went wrong.
        detail: String,
    },
}

impl NvmlError {
    /// Maps a failed `nvmlInit` to an error that says what to do.
    fn from_init(err: DriverError) -> Self {
        let detail = err.to_string();
        match err {
            DriverError::LibloadingError(_) | DriverError::LibraryNotFound => {
                NvmlError::LibraryNotFound { detail }
            }
            DriverError::DriverNotLoaded => NvmlError::DriverNotLoaded { detail },
            DriverError::NoPermission => NvmlError::NoPermission { detail },
            _ => NvmlError::Call { call: "nvmlInit_v2", detail },
        }
    }

    fn from_call(call: &'static str, timeout: Duration, failure: CallFailure) -> Self {
        match failure {
            CallFailure::TimedOut => NvmlError::TimedOut { call, timeout },
            CallFailure::Failed(detail) => NvmlError::Call { call, detail },
        }
    }
}

/// Why one NVML call gave no value while sampling.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallFailure {
    /// NVML answered with an error (`NotSupported`, `FailedToLoadSymbol`, `GpuLost`, …).
    #[error("{0}")]
    Failed(String),
    /// The call hung (timed out now, or refused while earlier calls still hang).
    #[error("timed out")]
    TimedOut,
}

/// A memory reading in oomlens semantics (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryReading {
    /// Total framebuffer bytes.
    pub total: u64,
    /// Free bytes.
    pub free: u64,
    /// Everything not free: allocated + reserved.
    pub used: u64,
    /// Reserved by driver and firmware; `None` when only the v1 API answered.
    pub reserved: Option<u64>,
}

impl MemoryReading {
    /// From `nvmlDeviceGetMemoryInfo_v2` (whose `used` excludes `reserved`).
    pub fn from_v2(total: u64, reserved: u64, free: u64, used: u64) -> Self {
        MemoryReading { total, free, used: used.saturating_add(reserved), reserved: Some(reserved) }
    }

    /// From `nvmlDeviceGetMemoryInfo` (v1, whose `used` includes the reserved memory).
    pub fn from_v1(total: u64, free: u64, used: u64) -> Self {
        MemoryReading { total, free, used, reserved: None }
    }
}

/// SM and memory-controller utilisation, percent, as NVML returns them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtilReading {
    /// SM utilisation.
    pub gpu: u32,
    /// Memory-controller utilisation.
    pub memory: u32,
}

/// The outcome of every NVML call for one GPU sample, before mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawGpuReadings {
    /// Memory info (v2, else v1).
    pub memory: Result<MemoryReading, CallFailure>,
    /// Utilisation rates.
    pub utilization: Result<UtilReading, CallFailure>,
    /// Power usage, mW.
    pub power_mw: Result<u32, CallFailure>,
    /// GPU temperature sensor, °C.
    pub temperature_c: Result<u32, CallFailure>,
    /// SM clock, MHz.
    pub sm_clock_mhz: Result<u32, CallFailure>,
    /// Memory clock, MHz.
    pub mem_clock_mhz: Result<u32, CallFailure>,
}

/// Counts of what could not be read, added to a [`Reading`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Fields left `None`.
    pub missing_fields: u32,
    /// Calls that hung.
    pub timed_out_calls: u32,
}

impl Tally {
    /// Unwraps a call result; a failure leaves `fields` fields empty.
    fn take<T>(&mut self, result: Result<T, CallFailure>, fields: u32) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(failure) => {
                self.missing_fields += fields;
                if failure == CallFailure::TimedOut {
                    self.timed_out_calls += 1;
                }
                None
            }
        }
    }

    /// Counts a value that was read but cannot be represented (out of range) as missing.
    fn convert<T, U>(&mut self, value: Option<T>, f: impl FnOnce(T) -> Option<U>) -> Option<U> {
        let value = value?;
        let converted = f(value);
        if converted.is_none() {
            self.missing_fields += 1;
        }
        converted
    }
}

fn percent(v: u32) -> Option<u8> {
    u8::try_from(v).ok().filter(|p| *p <= 100)
}

/// Turns the per-call results of one GPU into a [`GpuSample`]: a failed or hung call leaves its
/// fields `None` and is counted in `tally` — never reported as zero. Pure.
pub fn gpu_sample(ts_ms: i64, gpu_index: u32, raw: RawGpuReadings, tally: &mut Tally) -> GpuSample {
    let memory = tally.take(raw.memory, 4);
    let reserved = memory.and_then(|m| m.reserved);
    if memory.is_some() && reserved.is_none() {
        tally.missing_fields += 1;
    }
    let util = tally.take(raw.utilization, 2);
    let util_gpu_pct = tally.convert(util.map(|u| u.gpu), percent);
    let util_mem_pct = tally.convert(util.map(|u| u.memory), percent);
    let power_mw = tally.take(raw.power_mw, 1);
    let temperature = tally.take(raw.temperature_c, 1);
    let temperature_c = tally.convert(temperature, |t| i16::try_from(t).ok());
    GpuSample {
        ts_ms,
        gpu_index,
        memory_used_bytes: memory.map(|m| m.used),
        memory_free_bytes: memory.map(|m| m.free),
        memory_total_bytes: memory.map(|m| m.total),
        memory_reserved_bytes: reserved,
        util_gpu_pct,
        util_mem_pct,
        power_mw,
        temperature_c,
        sm_clock_mhz: tally.take(raw.sm_clock_mhz, 1),
        mem_clock_mhz: tally.take(raw.mem_clock_mhz, 1),
    }
}

/// Turns NVML's process list of one GPU into [`ProcessSample`]s. `UsedGpuMemory::Unavailable`
/// becomes `None` (counted missing); a failed or hung list call yields no samples and counts one
/// missing field. A pid listed twice is reported once with its memory summed. Pure apart from
/// `name_of`.
pub fn process_samples(
    ts_ms: i64,
    gpu_index: u32,
    processes: Result<Vec<ProcessInfo>, CallFailure>,
    mut name_of: impl FnMut(u32) -> String,
    tally: &mut Tally,
) -> Vec<ProcessSample> {
    let Some(processes) = tally.take(processes, 1) else { return Vec::new() };
    let mut out: Vec<ProcessSample> = Vec::with_capacity(processes.len());
    for p in processes {
        let used = match p.used_gpu_memory {
            UsedGpuMemory::Used(bytes) => Some(bytes),
            UsedGpuMemory::Unavailable => None,
        };
        if let Some(existing) = out.iter_mut().find(|s| s.pid == p.pid) {
            existing.used_bytes = match (existing.used_bytes, used) {
                (Some(a), Some(b)) => Some(a.saturating_add(b)),
                _ => None,
            };
            continue;
        }
        out.push(ProcessSample {
            ts_ms,
            gpu_index,
            pid: p.pid,
            name: name_of(p.pid),
            used_bytes: used,
            labels: Vec::new(),
        });
    }
    tally.missing_fields += out.iter().filter(|s| s.used_bytes.is_none()).count() as u32;
    out
}

/// The process name from `<proc_root>/<pid>/comm`; empty when it cannot be read.
pub fn process_name(proc_root: &Path, pid: u32) -> String {
    std::fs::read_to_string(proc_root.join(pid.to_string()).join("comm"))
        .map(|s| s.trim_end_matches('\n').to_owned())
        .unwrap_or_default()
}

/// One device the source samples.
#[derive(Debug)]
struct Tracked {
    info: GpuInfo,
    device: Arc<Device<'static>>,
    /// False for a physical GPU whose processes are reported on its MIG instances.
    report_processes: bool,
}

/// The NVML [`Source`].
#[derive(Debug)]
pub struct NvmlSource {
    opts: NvmlOptions,
    nvml: &'static Nvml,
    watchdog: Watchdog,
    devices: Vec<Tracked>,
    /// pid → workload labels of the process samples.
    workload: crate::workload::WorkloadResolver,
}

impl NvmlSource {
    /// Loads and initialises NVML (through the watchdog) and takes the GPU inventory.
    pub fn open(opts: NvmlOptions) -> Result<NvmlSource, NvmlError> {
        let watchdog = Watchdog::new("oomlens-nvml", DEFAULT_MAX_HUNG);
        let nvml = init(&watchdog, opts.init_timeout)?;
        let workload = crate::workload::WorkloadResolver::with_config(opts.workload.clone());
        let mut source = NvmlSource { opts, nvml, watchdog, devices: Vec::new(), workload };
        source.take_inventory()?;
        Ok(source)
    }

    /// The watchdog running the NVML calls (for its hung-thread gauges).
    pub fn watchdog(&self) -> &Watchdog {
        &self.watchdog
    }

    /// Runs one NVML call through the watchdog.
    fn call<T, F>(&self, f: F) -> Result<T, CallFailure>
    where
        F: FnOnce() -> Result<T, DriverError> + Send + 'static,
        T: Send + 'static,
    {
        run(&self.watchdog, self.opts.call_timeout, f)
    }

    /// Runs one NVML call needed to open the source.
    fn open_call<T, F>(&self, call: &'static str, f: F) -> Result<T, NvmlError>
    where
        F: FnOnce() -> Result<T, DriverError> + Send + 'static,
        T: Send + 'static,
    {
        self.call(f).map_err(|e| NvmlError::from_call(call, self.opts.call_timeout, e))
    }

    fn on_device<T, F>(&self, device: &Arc<Device<'static>>, f: F) -> Result<T, CallFailure>
    where
        F: FnOnce(&Device<'static>) -> Result<T, DriverError> + Send + 'static,
        T: Send + 'static,
    {
        let device = Arc::clone(device);
        self.call(move || f(&device))
    }

    /// Identity of one device: uuid (required), name and total memory.
    fn describe(&self, index: u32, device: &Arc<Device<'static>>, mig: bool) -> Result<GpuInfo, String> {
        let uuid = self.on_device(device, |d| d.uuid()).map_err(|e| format!("uuid: {e}"))?;
        let name = self.on_device(device, |d| d.name()).unwrap_or_else(|e| {
            tracing::warn!(index, error = %e, "NVML: cannot read the GPU name");
            String::new()
        });
        let memory_total_bytes = self.read_memory(device).map(|m| m.total).unwrap_or_else(|e| {
            tracing::warn!(index, error = %e, "NVML: cannot read the GPU memory size (inventory says 0)");
            0
        });
        Ok(GpuInfo { index, uuid, name, memory_total_bytes, mig })
    }

    fn take_inventory(&mut self) -> Result<(), NvmlError> {
        let nvml = self.nvml;
        let count = self.open_call("nvmlDeviceGetCount_v2", move || nvml.device_count())?;
        if count == 0 {
            return Err(NvmlError::NoDevices);
        }
        let mut physical = Vec::new();
        let mut failures = Vec::new();
        for index in 0..count {
            let device = match self.call(move || nvml.device_by_index(index)) {
                Ok(d) => Arc::new(d),
                Err(e) => {
                    tracing::warn!(index, error = %e, "NVML: cannot open GPU; it is not reported");
                    failures.push(format!("GPU {index}: {e}"));
                    continue;
                }
            };
            match self.describe(index, &device, false) {
                Ok(info) => physical.push((info, device)),
                Err(e) => {
                    tracing::warn!(index, error = %e, "NVML: cannot identify GPU; it is not reported");
                    failures.push(format!("GPU {index}: {e}"));
                }
            }
        }
        if physical.is_empty() {
            return Err(NvmlError::NoUsableDevices { count, reasons: failures.join("; ") });
        }

        let mut next_mig_index = count;
        let mut mig_devices = Vec::new();
        for (info, device) in &physical {
            let mig_on = self.opts.include_mig
                && self.on_device(device, |d| d.mig_mode()).is_ok_and(|m| m.current == MIG_ENABLED);
            let mut has_instances = false;
            if mig_on {
                let slots = self.on_device(device, |d| d.mig_device_count()).unwrap_or_else(|e| {
                    tracing::warn!(gpu = info.index, error = %e, "NVML: cannot count MIG slots");
                    0
                });
                for slot in 0..slots {
                    let instance = match self.on_device(device, move |d| d.mig_device_by_index(slot)) {
                        Ok(d) => Arc::new(d),
                        Err(CallFailure::Failed(e)) if is_not_found(&e) => continue, // empty slot
                        Err(e) => {
                            tracing::warn!(gpu = info.index, slot, error = %e, "NVML: cannot open MIG instance");
                            continue;
                        }
                    };
                    match self.describe(next_mig_index, &instance, true) {
                        Ok(mig_info) => {
                            next_mig_index += 1;
                            has_instances = true;
                            mig_devices.push(Tracked {
                                info: mig_info,
                                device: instance,
                                report_processes: true,
                            });
                        }
                        Err(e) => {
                            tracing::warn!(gpu = info.index, slot, error = %e, "NVML: cannot identify MIG instance")
                        }
                    }
                }
            }
            self.devices.push(Tracked {
                info: info.clone(),
                device: Arc::clone(device),
                report_processes: !has_instances,
            });
        }
        self.devices.extend(mig_devices);
        Ok(())
    }

    /// Memory info: v2 first, v1 when v2 fails (not when it hangs).
    fn read_memory(&self, device: &Arc<Device<'static>>) -> Result<MemoryReading, CallFailure> {
        match self.on_device(device, |d| d.memory_info()) {
            Ok(m) => Ok(MemoryReading::from_v2(m.total, m.reserved, m.free, m.used)),
            Err(CallFailure::TimedOut) => Err(CallFailure::TimedOut),
            Err(CallFailure::Failed(v2_error)) => {
                let nvml = self.nvml;
                self.on_device(device, move |d| memory_info_v1(nvml, d)).map_err(|e| match e {
                    CallFailure::Failed(v1_error) => {
                        CallFailure::Failed(format!("v2: {v2_error}; v1: {v1_error}"))
                    }
                    hang => hang,
                })
            }
        }
    }

    /// Every per-GPU call of one sample.
    fn read_gpu(&self, device: &Arc<Device<'static>>) -> RawGpuReadings {
        RawGpuReadings {
            memory: self.read_memory(device),
            utilization: self
                .on_device(device, |d| d.utilization_rates())
                .map(|u| UtilReading { gpu: u.gpu, memory: u.memory }),
            power_mw: self.on_device(device, |d| d.power_usage()),
            temperature_c: self.on_device(device, |d| d.temperature(TemperatureSensor::Gpu)),
            sm_clock_mhz: self.on_device(device, |d| d.clock_info(Clock::SM)),
            mem_clock_mhz: self.on_device(device, |d| d.clock_info(Clock::Memory)),
        }
    }

    fn read_processes(&self, device: &Arc<Device<'static>>) -> Result<Vec<ProcessInfo>, CallFailure> {
        self.on_device(device, |d| match d.running_compute_processes() {
            // More processes started between NVML's count and list calls: ask once more.
            Err(DriverError::InsufficientSize(_)) => d.running_compute_processes(),
            other => other,
        })
    }
}

impl Source for NvmlSource {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn inventory(&self) -> Vec<GpuInfo> {
        self.devices.iter().map(|d| d.info.clone()).collect()
    }

    fn sample(&mut self, ts_ms: i64) -> Reading {
        let mut tally = Tally::default();
        let mut reading = Reading::default();
        for tracked in &self.devices {
            let raw = self.read_gpu(&tracked.device);
            reading.gpu_samples.push(gpu_sample(ts_ms, tracked.info.index, raw, &mut tally));
            if tracked.report_processes {
                let processes = self.read_processes(&tracked.device);
                let proc_root = &self.opts.proc_root;
                reading.process_samples.extend(process_samples(
                    ts_ms,
                    tracked.info.index,
                    processes,
                    |pid| process_name(proc_root, pid),
                    &mut tally,
                ));
            }
        }
        for p in &mut reading.process_samples {
            p.labels = self.workload.labels(p.pid);
        }
        reading.missing_fields = tally.missing_fields;
        reading.timed_out_calls = tally.timed_out_calls;
        reading
    }
}

/// Runs one NVML call on the watchdog and flattens the outcome.
fn run<T, F>(watchdog: &Watchdog, timeout: Duration, f: F) -> Result<T, CallFailure>
where
    F: FnOnce() -> Result<T, DriverError> + Send + 'static,
    T: Send + 'static,
{
    // The driver error is turned into text on the worker: it need not cross threads.
    match watchdog.call(timeout, move || f().map_err(|e| e.to_string())) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(text)) => Err(CallFailure::Failed(text)),
        Err(e) if e.is_hang() => Err(CallFailure::TimedOut),
        Err(e) => Err(CallFailure::Failed(e.to_string())),
    }
}

fn is_not_found(text: &str) -> bool {
    text == DriverError::NotFound.to_string()
}

/// Initialises NVML once per process, through the watchdog.
fn init(watchdog: &Watchdog, timeout: Duration) -> Result<&'static Nvml, NvmlError> {
    let outcome = watchdog.call(timeout, || -> Result<&'static Nvml, NvmlError> {
        if let Some(nvml) = NVML.get() {
            return Ok(nvml);
        }
        let nvml = Nvml::init().map_err(NvmlError::from_init)?;
        // Another thread may have won the race; its handle is kept and ours dropped.
        let _ = NVML.set(nvml);
        NVML.get().ok_or(NvmlError::Call { call: "nvmlInit_v2", detail: "handle not stored".into() })
    });
    match outcome {
        Ok(result) => result,
        Err(e) if e.is_hang() => Err(NvmlError::TimedOut { call: "nvmlInit_v2", timeout }),
        Err(e) => Err(NvmlError::Call { call: "nvmlInit_v2", detail: e.to_string() }),
    }
}

/// `nvmlDeviceGetMemoryInfo` (v1): nvml-wrapper 0.13 only wraps the v2 call, so this one goes
/// through the symbol table nvml-wrapper loaded.
#[allow(unsafe_code)]
fn memory_info_v1(nvml: &Nvml, device: &Device<'_>) -> Result<MemoryReading, DriverError> {
    /// C layout of `nvmlMemory_t`.
    #[repr(C)]
    struct MemoryV1 {
        total: u64,
        free: u64,
        used: u64,
    }
    let sym = nvml_wrapper::error::nvml_sym(nvml.lib().nvmlDeviceGetMemoryInfo.as_ref())?;
    let mut memory = MemoryV1 { total: 0, free: 0, used: 0 };
    // SAFETY: `sym` is `nvmlDeviceGetMemoryInfo` resolved by nvml-wrapper from the initialised
    // library that `device` belongs to (both live for the process); `MemoryV1` has the C layout of
    // `nvmlMemory_t` (three `unsigned long long`) and NVML writes only into it.
    let rc = unsafe { (*sym)(device.handle(), (&raw mut memory).cast()) };
    nvml_wrapper::error::nvml_try(rc)?;
    Ok(MemoryReading::from_v1(memory.total, memory.free, memory.used))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_ok() -> RawGpuReadings {
        RawGpuReadings {
            memory: Ok(MemoryReading::from_v2(100, 5, 40, 55)),
            utilization: Ok(UtilReading { gpu: 97, memory: 41 }),
            power_mw: Ok(612_345),
            temperature_c: Ok(63),
            sm_clock_mhz: Ok(1980),
            mem_clock_mhz: Ok(3201),
        }
    }

    fn failed() -> CallFailure {
        CallFailure::Failed(DriverError::NotSupported.to_string())
    }

    fn proc_info(pid: u32, used: UsedGpuMemory) -> ProcessInfo {
        ProcessInfo { pid, used_gpu_memory: used, gpu_instance_id: None, compute_instance_id: None }
    }

    #[test]
    fn open_without_driver_names_the_library_and_the_remedy() {
        match NvmlSource::open(NvmlOptions::default()) {
            Ok(source) => {
                eprintln!("NVML is present here ({} devices); no-driver check skipped", source.devices.len())
            }
            Err(e) => {
                let text = e.to_string();
                eprintln!("{text}");
                if matches!(e, NvmlError::LibraryNotFound { .. }) {
                    assert!(text.contains("libnvidia-ml.so.1"), "{text}");
                }
                assert!(text.contains("install the NVIDIA driver"), "{text}");
                assert!(text.contains("NVIDIA container runtime"), "{text}");
                assert!(text.contains("simulator source"), "{text}");
            }
        }
    }

    #[test]
    fn smoke_report_without_driver_is_the_same_clear_error() {
        if let Err(e) = smoke_report(NvmlOptions::default()) {
            assert!(e.to_string().contains("install the NVIDIA driver"), "{e}");
        }
    }

    /// This machine has no driver: pin the exact error (skipped where a driver is installed).
    #[test]
    fn missing_library_maps_to_library_not_found() {
        if std::path::Path::new("/proc/driver/nvidia").exists() {
            return;
        }
        let err = NvmlSource::open(NvmlOptions::default()).err();
        assert!(matches!(err, Some(NvmlError::LibraryNotFound { .. })), "{err:?}");
    }

    /// On a GPU node: `cargo test -p oomlens-agent --lib nvml -- --ignored --nocapture`.
    #[test]
    #[ignore = "needs an NVIDIA GPU and driver"]
    fn smoke_report_on_a_real_gpu() {
        let report = smoke_report(NvmlOptions::default()).unwrap();
        println!("{report}");
        assert!(report.contains("Inventory") && report.contains("GPU 0: memory used"), "{report}");
        let mut source = NvmlSource::open(NvmlOptions::default()).unwrap();
        let reading = source.sample(oomlens_schema::text::now_ms());
        assert_eq!(reading.gpu_samples.len(), source.inventory().len());
        assert_eq!(reading.timed_out_calls, 0);
        let gpu0 = &reading.gpu_samples[0];
        assert!(gpu0.memory_total_bytes.is_some_and(|t| t > 0));
        assert!(gpu0.memory_free_bytes.is_some() && gpu0.memory_used_bytes.is_some());
    }

    #[test]
    fn init_errors_map_to_actionable_errors() {
        assert!(matches!(
            NvmlError::from_init(DriverError::DriverNotLoaded),
            NvmlError::DriverNotLoaded { .. }
        ));
        assert!(matches!(NvmlError::from_init(DriverError::NoPermission), NvmlError::NoPermission { .. }));
        assert!(matches!(
            NvmlError::from_init(DriverError::LibraryNotFound),
            NvmlError::LibraryNotFound { .. }
        ));
        assert!(matches!(
            NvmlError::from_init(DriverError::FailedToLoadSymbol("nvmlInit_v2".into())),
            NvmlError::Call { call: "nvmlInit_v2", .. }
        ));
        let none = NvmlError::NoDevices.to_string();
        assert!(none.contains("no GPUs") && none.contains("simulator"), "{none}");
        let hung =
            NvmlError::from_call("nvmlDeviceGetCount_v2", Duration::from_secs(2), CallFailure::TimedOut);
        assert!(hung.to_string().contains("did not return within 2s"), "{hung}");
    }

    #[test]
    fn all_fields_read_map_one_to_one() {
        let mut tally = Tally::default();
        let s = gpu_sample(1_700_000_000_000, 3, all_ok(), &mut tally);
        assert_eq!(
            s,
            GpuSample {
                ts_ms: 1_700_000_000_000,
                gpu_index: 3,
                memory_used_bytes: Some(60),
                memory_free_bytes: Some(40),
                memory_total_bytes: Some(100),
                memory_reserved_bytes: Some(5),
                util_gpu_pct: Some(97),
                util_mem_pct: Some(41),
                power_mw: Some(612_345),
                temperature_c: Some(63),
                sm_clock_mhz: Some(1980),
                mem_clock_mhz: Some(3201),
            }
        );
        assert_eq!(tally, Tally::default());
    }

    #[test]
    fn used_means_everything_not_free_on_both_apis() {
        let v2 = MemoryReading::from_v2(80, 1, 30, 49);
        let v1 = MemoryReading::from_v1(80, 30, 50);
        assert_eq!((v2.used, v2.free, v2.total), (v1.used, v1.free, v1.total));
        assert_eq!(v2.used + v2.free, v2.total);
        assert_eq!((v2.reserved, v1.reserved), (Some(1), None));
    }

    #[test]
    fn failed_fields_are_none_and_counted_never_zero() {
        let raw = RawGpuReadings {
            memory: Err(failed()),
            utilization: Err(CallFailure::Failed("function symbol failed to load: x".into())),
            power_mw: Err(failed()),
            temperature_c: Ok(50),
            sm_clock_mhz: Err(failed()),
            mem_clock_mhz: Ok(1593),
        };
        let mut tally = Tally::default();
        let s = gpu_sample(0, 0, raw, &mut tally);
        assert_eq!(s.memory_used_bytes, None);
        assert_eq!(s.memory_free_bytes, None);
        assert_eq!(s.memory_total_bytes, None);
        assert_eq!(s.memory_reserved_bytes, None);
        assert_eq!((s.util_gpu_pct, s.util_mem_pct), (None, None));
        assert_eq!(s.power_mw, None);
        assert_eq!(s.sm_clock_mhz, None);
        assert_eq!((s.temperature_c, s.mem_clock_mhz), (Some(50), Some(1593)));
        assert_eq!(tally, Tally { missing_fields: 4 + 2 + 1 + 1, timed_out_calls: 0 });
    }

    #[test]
    fn timed_out_calls_are_none_and_counted_separately() {
        let raw = RawGpuReadings {
            power_mw: Err(CallFailure::TimedOut),
            memory: Err(CallFailure::TimedOut),
            ..all_ok()
        };
        let mut tally = Tally::default();
        let s = gpu_sample(0, 0, raw, &mut tally);
        assert_eq!((s.power_mw, s.memory_free_bytes, s.memory_used_bytes), (None, None, None));
        assert_eq!(s.util_gpu_pct, Some(97));
        assert_eq!(tally, Tally { missing_fields: 5, timed_out_calls: 2 });
    }

    #[test]
    fn v1_fallback_leaves_reserved_missing() {
        let raw = RawGpuReadings { memory: Ok(MemoryReading::from_v1(100, 40, 60)), ..all_ok() };
        let mut tally = Tally::default();
        let s = gpu_sample(0, 0, raw, &mut tally);
        assert_eq!((s.memory_used_bytes, s.memory_reserved_bytes), (Some(60), None));
        assert_eq!(tally, Tally { missing_fields: 1, timed_out_calls: 0 });
    }

    #[test]
    fn out_of_range_values_are_missing_not_truncated() {
        let raw = RawGpuReadings {
            utilization: Ok(UtilReading { gpu: 300, memory: 101 }),
            temperature_c: Ok(u32::MAX),
            ..all_ok()
        };
        let mut tally = Tally::default();
        let s = gpu_sample(0, 0, raw, &mut tally);
        assert_eq!((s.util_gpu_pct, s.util_mem_pct, s.temperature_c), (None, None, None));
        assert_eq!(tally.missing_fields, 3);
    }

    #[test]
    fn processes_map_used_memory_and_names() {
        let mut tally = Tally::default();
        let procs = vec![
            proc_info(100, UsedGpuMemory::Used(7 << 30)),
            proc_info(200, UsedGpuMemory::Unavailable),
            proc_info(100, UsedGpuMemory::Used(1 << 30)),
        ];
        let names = |pid: u32| if pid == 100 { "python3".to_owned() } else { String::new() };
        let out = process_samples(5, 2, Ok(procs), names, &mut tally);
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].pid, out[0].name.as_str(), out[0].used_bytes), (100, "python3", Some(8 << 30)));
        assert_eq!((out[1].pid, out[1].name.as_str(), out[1].used_bytes), (200, "", None));
        assert!(out.iter().all(|p| p.ts_ms == 5 && p.gpu_index == 2 && p.labels.is_empty()));
        assert_eq!(tally, Tally { missing_fields: 1, timed_out_calls: 0 });
    }

    #[test]
    fn failed_process_list_yields_nothing_and_is_counted() {
        let mut tally = Tally::default();
        assert!(process_samples(0, 0, Err(CallFailure::TimedOut), |_| String::new(), &mut tally).is_empty());
        assert!(process_samples(0, 0, Err(failed()), |_| String::new(), &mut tally).is_empty());
        assert_eq!(tally, Tally { missing_fields: 2, timed_out_calls: 1 });
    }

    #[test]
    fn process_name_reads_comm_and_tolerates_missing_processes() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("42")).unwrap();
        std::fs::write(root.path().join("42/comm"), "pt_main_thread\n").unwrap();
        assert_eq!(process_name(root.path(), 42), "pt_main_thread");
        assert_eq!(process_name(root.path(), 43), "");
        assert!(!process_name(Path::new("/proc"), std::process::id()).is_empty());
    }

    #[test]
    fn not_found_detection_matches_the_driver_text() {
        assert!(is_not_found(&DriverError::NotFound.to_string()));
        assert!(!is_not_found(&DriverError::NotSupported.to_string()));
    }

    #[test]
    fn run_flattens_driver_errors_and_hangs() {
        let wd = Watchdog::new("test-nvml-run", 2);
        let t = Duration::from_millis(50);
        assert_eq!(run(&wd, t, || Ok::<_, DriverError>(5)), Ok(5));
        assert_eq!(run(&wd, t, || Err::<u32, _>(DriverError::NotSupported)), Err(failed()));
        let hung = run(&wd, t, || {
            std::thread::sleep(Duration::from_millis(300));
            Ok::<_, DriverError>(1)
        });
        assert_eq!(hung, Err(CallFailure::TimedOut));
    }
}
