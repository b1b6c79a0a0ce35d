//! `oomlens-agent nvml-smoke`: opens NVML and describes the node — versions, inventory, one full
//! sample with processes — with the reason for every field that could not be read.

use std::fmt::Write as _;
use std::time::Instant;

use oomlens_schema::text::now_ms;

use super::{
    CallFailure, NVML_LIBRARY, NvmlError, NvmlOptions, NvmlSource, Tally, gpu_sample, process_name,
    process_samples,
};

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn show<T>(value: Option<T>, f: impl FnOnce(T) -> String) -> String {
    value.map_or_else(|| "n/a".to_owned(), f)
}

fn failure_note<T>(what: &str, result: &Result<T, CallFailure>, out: &mut String) {
    if let Err(e) = result {
        let _ = writeln!(out, "      ! {what}: {e}");
    }
}

/// Opens NVML and describes the node: versions, inventory, and one full sample with processes,
/// with the reason for every field that could not be read. For `oomlens-agent nvml-smoke`.
pub fn smoke_report(opts: NvmlOptions) -> Result<String, NvmlError> {
    let started = Instant::now();
    let source = NvmlSource::open(opts)?;
    let opened_in = started.elapsed();
    let nvml = source.nvml;
    let mut out = String::new();
    let _ = writeln!(out, "oomlens NVML smoke report");
    let _ = writeln!(out, "  library:             {NVML_LIBRARY} (opened in {opened_in:.1?})");
    let version = |r: Result<String, CallFailure>| r.unwrap_or_else(|e| format!("n/a ({e})"));
    let _ =
        writeln!(out, "  driver version:      {}", version(source.call(move || nvml.sys_driver_version())));
    let _ = writeln!(out, "  NVML version:        {}", version(source.call(move || nvml.sys_nvml_version())));
    let cuda = source.call(move || nvml.sys_cuda_driver_version()).map(|v| {
        format!(
            "{}.{} ({v})",
            nvml_wrapper::cuda_driver_version_major(v),
            nvml_wrapper::cuda_driver_version_minor(v)
        )
    });
    let _ = writeln!(out, "  CUDA driver version: {}", version(cuda));
    let _ = writeln!(
        out,
        "  options:             call timeout {:?}, init timeout {:?}, MIG instances {}, proc root {}",
        source.opts.call_timeout,
        source.opts.init_timeout,
        if source.opts.include_mig { "included" } else { "excluded" },
        source.opts.proc_root.display()
    );

    let _ = writeln!(out, "\nInventory ({} devices):", source.devices.len());
    for d in &source.devices {
        let i = &d.info;
        let _ = writeln!(
            out,
            "  [{}] {}  {}  memory {} ({} B)  mig={}{}",
            i.index,
            if i.name.is_empty() { "(unnamed)" } else { &i.name },
            i.uuid,
            gib(i.memory_total_bytes),
            i.memory_total_bytes,
            i.mig,
            if d.report_processes { "" } else { "  (processes reported on its MIG instances)" }
        );
    }

    let ts_ms = now_ms();
    let sample_start = Instant::now();
    let mut tally = Tally::default();
    let _ = writeln!(out, "\nSample at ts_ms={ts_ms}:");
    let mut process_count = 0;
    for d in &source.devices {
        let raw = source.read_gpu(&d.device);
        let mut notes = String::new();
        failure_note("memory", &raw.memory, &mut notes);
        failure_note("utilization", &raw.utilization, &mut notes);
        failure_note("power", &raw.power_mw, &mut notes);
        failure_note("temperature", &raw.temperature_c, &mut notes);
        failure_note("SM clock", &raw.sm_clock_mhz, &mut notes);
        failure_note("memory clock", &raw.mem_clock_mhz, &mut notes);
        let s = gpu_sample(ts_ms, d.info.index, raw, &mut tally);
        let _ = writeln!(
            out,
            "  GPU {}: memory used {} free {} total {} reserved {}",
            s.gpu_index,
            show(s.memory_used_bytes, gib),
            show(s.memory_free_bytes, gib),
            show(s.memory_total_bytes, gib),
            show(s.memory_reserved_bytes, gib),
        );
        let _ = writeln!(
            out,
            "      util gpu {} mem {}, power {}, temperature {}, clocks SM {} mem {}",
            show(s.util_gpu_pct, |v| format!("{v} %")),
            show(s.util_mem_pct, |v| format!("{v} %")),
            show(s.power_mw, |v| format!("{:.1} W", f64::from(v) / 1000.0)),
            show(s.temperature_c, |v| format!("{v} °C")),
            show(s.sm_clock_mhz, |v| format!("{v} MHz")),
            show(s.mem_clock_mhz, |v| format!("{v} MHz")),
        );
        out.push_str(&notes);
        if d.report_processes {
            let processes = source.read_processes(&d.device);
            let mut notes = String::new();
            failure_note("processes", &processes, &mut notes);
            let samples = process_samples(
                ts_ms,
                d.info.index,
                processes,
                |pid| process_name(&source.opts.proc_root, pid),
                &mut tally,
            );
            let _ = writeln!(out, "      processes: {}", samples.len());
            for p in &samples {
                let _ = writeln!(
                    out,
                    "        pid {:>7}  {:<16}  {}",
                    p.pid,
                    if p.name.is_empty() { "(unknown)" } else { &p.name },
                    show(p.used_bytes, gib)
                );
            }
            process_count += samples.len();
            out.push_str(&notes);
        }
    }
    let _ = writeln!(
        out,
        "\nSample took {:.1?}: {} GPU samples, {} process samples, {} missing fields, {} timed-out calls; \
         watchdog: {} hung workers, {} abandoned in total",
        sample_start.elapsed(),
        source.devices.len(),
        process_count,
        tally.missing_fields,
        tally.timed_out_calls,
        source.watchdog.hung_workers(),
        source.watchdog.abandoned_total(),
    );
    Ok(out)
}
