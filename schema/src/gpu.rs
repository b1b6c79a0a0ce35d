//! The GPU catalog: every GPU model oomlens knows by name, with its memory as the driver reports
//! it. One table for the fleet simulator (`oomlens-agent`, which adds its power and clock envelope)
//! and `oomlens fit` (which asks whether a job fits on one).
//!
//! Memory figures are what real drivers report: `total_mib` is NVML's total (`nvidia-smi`'s
//! `memory.total`, e.g. 81 559 MiB for an H100 80GB), of which the driver keeps a few hundred MiB
//! (`driver_reserved_mib`) that CUDA never hands out, so the capacity a framework sees
//! (`cudaMemGetInfo`'s total, printed by PyTorch as "total capacity") is `total − reserved` — 79.11
//! GiB on an H100 80GB. Where no OOM message of the model was at hand the reservation is an
//! estimate from a similar board (`docs/fit.md` lists which); AMD boards report their total to the
//! framework unchanged (reservation 0), MI250X per graphics compute die (one GCD is one device).

/// One GPU model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuSpec {
    /// Short name, e.g. `H100-80GB` (the simulator's `gpu_models` keys).
    pub key: &'static str,
    /// The name the driver reports (NVML / ROCm), e.g. `NVIDIA H100 80GB HBM3`.
    pub name: &'static str,
    /// Other names it goes by (other board variants with the same memory, short names).
    pub aliases: &'static [&'static str],
    /// Total framebuffer memory as the driver reports it, MiB.
    pub total_mib: u64,
    /// Memory the driver keeps (never available to CUDA), MiB.
    pub driver_reserved_mib: u64,
}

const MIB: u64 = 1 << 20;

impl GpuSpec {
    /// Total memory as the driver reports it, bytes.
    pub const fn total_bytes(&self) -> u64 {
        self.total_mib * MIB
    }

    /// Memory the driver keeps, bytes.
    pub const fn driver_reserved_bytes(&self) -> u64 {
        self.driver_reserved_mib * MIB
    }

    /// Capacity as CUDA / PyTorch see it (`total − driver reserved`), bytes.
    pub const fn capacity_bytes(&self) -> u64 {
        self.total_bytes() - self.driver_reserved_bytes()
    }

    /// Whether `query` names this model: its key, driver name or an alias, compared on letters
    /// and digits only, case-insensitively (`h100 80gb`, `H100-80GB`, `NVIDIA H100 80GB HBM3`).
    pub fn matches(&self, query: &str) -> bool {
        let q = normalize(query);
        !q.is_empty() && self.names().any(|n| n == q)
    }

    /// Every name it answers to, normalized: the key, the driver name and the aliases, each also
    /// without its vendor prefix (`NVIDIA`, `Tesla`, `GeForce`, `AMD Instinct`).
    fn names(&self) -> impl Iterator<Item = String> + '_ {
        std::iter::once(self.key)
            .chain(std::iter::once(self.name))
            .chain(self.aliases.iter().copied())
            .flat_map(|n| {
                let n = normalize(n);
                let bare = VENDOR_PREFIXES.iter().find_map(|p| n.strip_prefix(p)).map(str::to_owned);
                std::iter::once(n).chain(bare)
            })
    }
}

/// Vendor words a driver name may start with (normalized).
const VENDOR_PREFIXES: &[&str] = &["nvidiageforce", "nvidia", "tesla", "geforce", "amdinstinct", "amd"];

fn normalize(s: &str) -> String {
    s.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).collect()
}

/// NVIDIA T4 (16 GB GDDR6).
pub const T4_16GB: GpuSpec = GpuSpec {
    key: "T4-16GB",
    name: "Tesla T4",
    aliases: &["T4", "NVIDIA T4"],
    total_mib: 15_360,
    driver_reserved_mib: 246,
};
/// NVIDIA L4 (24 GB GDDR6).
pub const L4_24GB: GpuSpec = GpuSpec {
    key: "L4-24GB",
    name: "NVIDIA L4",
    aliases: &["L4"],
    total_mib: 23_034,
    driver_reserved_mib: 455,
};
/// NVIDIA A10 (24 GB GDDR6).
pub const A10_24GB: GpuSpec = GpuSpec {
    key: "A10-24GB",
    name: "NVIDIA A10",
    aliases: &["A10"],
    total_mib: 23_028,
    driver_reserved_mib: 305,
};
/// NVIDIA V100 16 GB (SXM2 and PCIe).
pub const V100_16GB: GpuSpec = GpuSpec {
    key: "V100-16GB",
    name: "Tesla V100-SXM2-16GB",
    aliases: &["Tesla V100-PCIE-16GB"],
    total_mib: 16_160,
    driver_reserved_mib: 2,
};
/// NVIDIA V100 32 GB (SXM2 and PCIe).
pub const V100_32GB: GpuSpec = GpuSpec {
    key: "V100-32GB",
    name: "Tesla V100-SXM2-32GB",
    aliases: &["Tesla V100-PCIE-32GB"],
    total_mib: 32_510,
    driver_reserved_mib: 0,
};
/// NVIDIA GeForce RTX 3090 (24 GB GDDR6X).
pub const RTX3090_24GB: GpuSpec = GpuSpec {
    key: "RTX3090-24GB",
    name: "NVIDIA GeForce RTX 3090",
    aliases: &["RTX 3090", "GeForce RTX 3090", "3090"],
    total_mib: 24_576,
    driver_reserved_mib: 317,
};
/// NVIDIA GeForce RTX 4090 (24 GB GDDR6X).
pub const RTX4090_24GB: GpuSpec = GpuSpec {
    key: "RTX4090-24GB",
    name: "NVIDIA GeForce RTX 4090",
    aliases: &["RTX 4090", "GeForce RTX 4090", "4090"],
    total_mib: 24_564,
    driver_reserved_mib: 346,
};
/// NVIDIA A100 40 GB (SXM4 and PCIe).
pub const A100_40GB: GpuSpec = GpuSpec {
    key: "A100-40GB",
    name: "NVIDIA A100-SXM4-40GB",
    aliases: &["NVIDIA A100-PCIE-40GB"],
    total_mib: 40_960,
    driver_reserved_mib: 621,
};
/// NVIDIA L40S (48 GB GDDR6).
pub const L40S_48GB: GpuSpec = GpuSpec {
    key: "L40S-48GB",
    name: "NVIDIA L40S",
    aliases: &["L40S"],
    total_mib: 46_068,
    driver_reserved_mib: 479,
};
/// AMD Instinct MI250X / MI250, one graphics compute die (64 GB HBM2e; a board holds two).
pub const MI250X_64GB: GpuSpec = GpuSpec {
    key: "MI250X-64GB",
    name: "AMD Instinct MI250X",
    aliases: &["AMD Instinct MI250", "MI250X", "MI250"],
    total_mib: 65_520,
    driver_reserved_mib: 0,
};
/// NVIDIA A100 80 GB (SXM4 and PCIe).
pub const A100_80GB: GpuSpec = GpuSpec {
    key: "A100-80GB",
    name: "NVIDIA A100-SXM4-80GB",
    aliases: &["NVIDIA A100 80GB PCIe"],
    total_mib: 81_920,
    driver_reserved_mib: 870,
};
/// NVIDIA H100 80 GB (SXM5 HBM3 and PCIe).
pub const H100_80GB: GpuSpec = GpuSpec {
    key: "H100-80GB",
    name: "NVIDIA H100 80GB HBM3",
    aliases: &["NVIDIA H100 PCIe", "H100 SXM"],
    total_mib: 81_559,
    driver_reserved_mib: 551,
};
/// NVIDIA H100 NVL (94 GB HBM3).
pub const H100_NVL_94GB: GpuSpec = GpuSpec {
    key: "H100-NVL-94GB",
    name: "NVIDIA H100 NVL",
    aliases: &["H100 NVL", "H100 94GB"],
    total_mib: 95_830,
    driver_reserved_mib: 500,
};
/// NVIDIA H200 (141 GB HBM3e). Measured on a real one (driver 580.159.04): NVML's total 143 771
/// MiB, PyTorch's "total capacity of 139.80 GiB" (143 155 MiB), NVML's reserve 0.60 GiB.
pub const H200_141GB: GpuSpec = GpuSpec {
    key: "H200-141GB",
    name: "NVIDIA H200",
    aliases: &["H200"],
    total_mib: 143_771,
    driver_reserved_mib: 616,
};
/// AMD Instinct MI300X (192 GB HBM3).
pub const MI300X_192GB: GpuSpec = GpuSpec {
    key: "MI300X-192GB",
    name: "AMD Instinct MI300X",
    aliases: &["MI300X"],
    total_mib: 196_592,
    driver_reserved_mib: 0,
};

/// Every known model, smallest memory first.
pub const GPUS: &[GpuSpec] = &[
    T4_16GB,
    V100_16GB,
    A10_24GB,
    L4_24GB,
    RTX4090_24GB,
    RTX3090_24GB,
    V100_32GB,
    A100_40GB,
    L40S_48GB,
    MI250X_64GB,
    H100_80GB,
    A100_80GB,
    H100_NVL_94GB,
    H200_141GB,
    MI300X_192GB,
];

/// The model `query` names (see [`GpuSpec::matches`]).
pub fn lookup(query: &str) -> Option<&'static GpuSpec> {
    GPUS.iter().find(|g| g.matches(query))
}

/// The known keys, comma-separated (for error messages).
pub fn known() -> String {
    GPUS.iter().map(|g| g.key).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_look_up_loosely() {
        for q in ["h100-80gb", "NVIDIA H100 80GB HBM3", "H100_80GB", "nvidia h100 pcie"] {
            assert_eq!(lookup(q).map(|g| g.key), Some("H100-80GB"), "{q}");
        }
        assert_eq!(lookup("rtx 4090").map(|g| g.key), Some("RTX4090-24GB"));
        assert_eq!(lookup("Tesla T4").map(|g| g.key), Some("T4-16GB"));
        for q in ["A100-PCIE-40GB", "NVIDIA A100-PCIE-40GB", "a100 40gb"] {
            assert_eq!(lookup(q).map(|g| g.key), Some("A100-40GB"), "{q}");
        }
        // Ambiguous or unknown names match nothing.
        for q in ["H100", "A100", "V100", "", "  ", "B200"] {
            assert_eq!(lookup(q), None, "{q}");
        }
        assert!(known().contains("H200-141GB") && known().contains("MI300X-192GB"));
    }

    #[test]
    fn every_name_is_unique_and_sizes_are_sane() {
        for (i, a) in GPUS.iter().enumerate() {
            for b in &GPUS[i + 1..] {
                assert!(
                    !a.names().any(|n| b.names().any(|m| m == n)),
                    "{} and {} share a name",
                    a.key,
                    b.key
                );
            }
        }
        for w in GPUS.windows(2) {
            assert!(w[0].total_mib <= w[1].total_mib, "{} before {}", w[0].key, w[1].key);
        }
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        assert_eq!(H100_80GB.total_mib, 81_559);
        assert!((gib(H100_80GB.capacity_bytes()) - 79.11).abs() < 0.01);
        assert!((gib(A100_80GB.capacity_bytes()) - 79.15).abs() < 0.01);
        assert!((gib(A100_40GB.capacity_bytes()) - 39.39).abs() < 0.01);
        assert!((gib(T4_16GB.capacity_bytes()) - 14.76).abs() < 0.01);
        for g in GPUS {
            // The nominal size in the key (decimal GB) is within 8 % of the reported total.
            let nominal: f64 =
                g.key.rsplit('-').next().and_then(|s| s.strip_suffix("GB")).unwrap().parse().unwrap();
            let total_gb = g.total_bytes() as f64 / 1e9;
            assert!((total_gb / nominal - 1.0).abs() < 0.08, "{}: {total_gb} GB", g.key);
            assert!(g.driver_reserved_mib < g.total_mib / 20, "{}", g.key);
        }
    }
}
