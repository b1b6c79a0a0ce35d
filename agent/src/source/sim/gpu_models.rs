//! The simulated GPU models: the memory figures of the shared catalog
//! ([`oomlens_schema::gpu`]: NVML totals and driver reservations, so the capacity PyTorch sees is
//! `total − reserved` — 79.11 GiB on an H100 80GB, 79.15 GiB on an A100 80GB, as in real OOM
//! messages) plus the power, clock and thermal envelope the simulator reports.

use oomlens_schema::gpu::{self, GpuSpec};

/// One simulated GPU model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuModel {
    /// Name used in [`super::SimConfig::gpu_models`], e.g. `H100-80GB`.
    pub key: &'static str,
    /// NVML marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: &'static str,
    /// Its memory figures in the shared catalog (NVML total, driver reservation).
    pub spec: GpuSpec,
    /// Board power limit, watts.
    pub tdp_w: u32,
    /// Idle power, watts.
    pub idle_w: u32,
    /// Maximum SM clock, MHz.
    pub max_sm_mhz: u32,
    /// Idle SM clock, MHz.
    pub idle_sm_mhz: u32,
    /// Memory clock, MHz.
    pub mem_mhz: u32,
}

/// The power and clock envelope of a simulated model.
struct Envelope {
    tdp_w: u32,
    idle_w: u32,
    max_sm_mhz: u32,
    idle_sm_mhz: u32,
    mem_mhz: u32,
}

impl GpuModel {
    /// A catalog entry with its simulated envelope.
    const fn simulated(spec: GpuSpec, e: Envelope) -> GpuModel {
        GpuModel {
            key: spec.key,
            name: spec.name,
            spec,
            tdp_w: e.tdp_w,
            idle_w: e.idle_w,
            max_sm_mhz: e.max_sm_mhz,
            idle_sm_mhz: e.idle_sm_mhz,
            mem_mhz: e.mem_mhz,
        }
    }

    /// NVML total memory, bytes.
    pub const fn total_bytes(&self) -> u64 {
        self.spec.total_bytes()
    }

    /// Driver-reserved memory, bytes.
    pub const fn driver_reserved_bytes(&self) -> u64 {
        self.spec.driver_reserved_bytes()
    }

    /// Capacity as CUDA / PyTorch see it (`total − driver reserved`), bytes.
    pub const fn capacity_bytes(&self) -> u64 {
        self.spec.capacity_bytes()
    }
}

/// Every simulated model.
pub const GPU_MODELS: &[GpuModel] = &[
    GpuModel::simulated(
        gpu::T4_16GB,
        Envelope { tdp_w: 70, idle_w: 9, max_sm_mhz: 1590, idle_sm_mhz: 300, mem_mhz: 5001 },
    ),
    GpuModel::simulated(
        gpu::L4_24GB,
        Envelope { tdp_w: 72, idle_w: 16, max_sm_mhz: 2040, idle_sm_mhz: 210, mem_mhz: 6251 },
    ),
    GpuModel::simulated(
        gpu::A10_24GB,
        Envelope { tdp_w: 150, idle_w: 16, max_sm_mhz: 1695, idle_sm_mhz: 210, mem_mhz: 6251 },
    ),
    GpuModel::simulated(
        gpu::A100_40GB,
        Envelope { tdp_w: 400, idle_w: 52, max_sm_mhz: 1410, idle_sm_mhz: 210, mem_mhz: 1215 },
    ),
    GpuModel::simulated(
        gpu::A100_80GB,
        Envelope { tdp_w: 400, idle_w: 60, max_sm_mhz: 1410, idle_sm_mhz: 210, mem_mhz: 1593 },
    ),
    GpuModel::simulated(
        gpu::H100_80GB,
        Envelope { tdp_w: 700, idle_w: 72, max_sm_mhz: 1980, idle_sm_mhz: 345, mem_mhz: 2619 },
    ),
    GpuModel::simulated(
        gpu::H200_141GB,
        Envelope { tdp_w: 700, idle_w: 78, max_sm_mhz: 1980, idle_sm_mhz: 345, mem_mhz: 3201 },
    ),
];

/// Looks a model up by its key (case-insensitive).
pub fn lookup(key: &str) -> Option<&'static GpuModel> {
    GPU_MODELS.iter().find(|m| m.key.eq_ignore_ascii_case(key.trim()))
}

/// The supported keys, comma-separated (for error messages).
pub fn supported() -> String {
    GPU_MODELS.iter().map(|m| m.key).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacities_look_like_real_drivers() {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let h100 = lookup("h100-80gb").unwrap();
        assert_eq!(h100.spec.total_mib, 81_559);
        assert!((gib(h100.capacity_bytes()) - 79.11).abs() < 0.01);
        let a100 = lookup("A100-80GB").unwrap();
        assert!((gib(a100.capacity_bytes()) - 79.15).abs() < 0.01);
        for (key, nominal) in [
            ("T4-16GB", 16.0),
            ("L4-24GB", 24.0),
            ("A10-24GB", 24.0),
            ("A100-40GB", 40.0),
            ("A100-80GB", 80.0),
            ("H100-80GB", 80.0),
            ("H200-141GB", 141.0),
        ] {
            let m = lookup(key).unwrap();
            let total_gb = m.total_bytes() as f64 / 1e9;
            assert!((total_gb / nominal - 1.0).abs() < 0.08, "{key}: {total_gb} GB");
        }
        assert!(lookup("V100").is_none());
        assert!(supported().contains("H200-141GB"));
    }
}
