//! PCI bus id → GPU index: the kernel names GPUs by PCI address (`NVRM: Xid (PCI:0000:3b:00): …`),
//! NVML by index. [`PciMap`] normalises every spelling of an address (`0000:3b:00`,
//! `00000000:3B:00.0`, `3b:00.0`) to one key and maps it to the NVML index.
//!
//! On a node the map is built from `/proc/driver/nvidia/gpus/<bus id>/information` (the driver
//! prints each GPU's `GPU UUID` and `Bus Location` there) joined with the NVML inventory by UUID:
//! no NVML call, so no driver hang. Without the driver the map is empty and Xid events carry no
//! GPU index.

use std::collections::HashMap;
use std::path::Path;

use oomlens_schema::GpuInfo;

/// A normalised PCI address: domain, bus, device (the function is ignored: a GPU is one device).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PciAddr {
    /// PCI domain (segment).
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number.
    pub device: u8,
}

impl PciAddr {
    /// Parses `[domain:]bus:device[.function]` in hex, any case, with an optional `PCI:` prefix.
    pub fn parse(text: &str) -> Option<PciAddr> {
        let t = text.trim();
        let t = t.strip_prefix("PCI:").or_else(|| t.strip_prefix("pci:")).unwrap_or(t);
        let t = match t.split_once('.') {
            Some((head, func))
                if !func.is_empty() && func.len() <= 2 && u8::from_str_radix(func, 16).is_ok() =>
            {
                head
            }
            Some(_) => return None,
            None => t,
        };
        let parts: Vec<&str> = t.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, dev] => (*d, *b, *dev),
            [b, dev] => ("0", *b, *dev),
            _ => return None,
        };
        let hex_ok =
            |s: &str, max: usize| !s.is_empty() && s.len() <= max && s.chars().all(|c| c.is_ascii_hexdigit());
        if !(hex_ok(domain, 8) && hex_ok(bus, 2) && hex_ok(device, 2)) {
            return None;
        }
        Some(PciAddr {
            domain: u32::from_str_radix(domain, 16).ok()?,
            bus: u8::from_str_radix(bus, 16).ok()?,
            device: u8::from_str_radix(device, 16).ok()?,
        })
    }
}

impl std::fmt::Display for PciAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04x}:{:02x}:{:02x}", self.domain, self.bus, self.device)
    }
}

/// PCI address → GPU index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciMap {
    map: HashMap<PciAddr, u32>,
}

impl PciMap {
    /// A map from `(bus id, GPU index)` pairs; unparsable bus ids are skipped.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, u32)>) -> PciMap {
        let map = pairs.into_iter().filter_map(|(bus, index)| Some((PciAddr::parse(bus)?, index))).collect();
        PciMap { map }
    }

    /// Reads `<proc_root>/driver/nvidia/gpus/*/information` and joins it with `inventory` by UUID
    /// (physical GPUs only: a MIG instance shares its parent's address). Missing or unreadable
    /// files give a smaller (possibly empty) map, never an error.
    pub fn from_procfs(proc_root: &Path, inventory: &[GpuInfo]) -> PciMap {
        let by_uuid: HashMap<&str, u32> =
            inventory.iter().filter(|g| !g.mig).map(|g| (g.uuid.as_str(), g.index)).collect();
        let Ok(dir) = std::fs::read_dir(proc_root.join("driver/nvidia/gpus")) else {
            return PciMap::default();
        };
        let mut map = HashMap::new();
        for entry in dir.flatten().take(1024) {
            let Ok(text) = std::fs::read_to_string(entry.path().join("information")) else { continue };
            let field = |name: &str| {
                text.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    (k.trim() == name).then(|| v.trim().to_owned())
                })
            };
            let addr = field("Bus Location")
                .and_then(|b| PciAddr::parse(&b))
                .or_else(|| PciAddr::parse(&entry.file_name().to_string_lossy()));
            if let (Some(addr), Some(uuid)) = (addr, field("GPU UUID"))
                && let Some(&index) = by_uuid.get(uuid.as_str())
            {
                map.insert(addr, index);
            }
        }
        PciMap { map }
    }

    /// The GPU index at `bus_id` (any spelling [`PciAddr::parse`] accepts).
    pub fn index_of(&self, bus_id: &str) -> Option<u32> {
        self.map.get(&PciAddr::parse(bus_id)?).copied()
    }

    /// Number of GPUs mapped.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no GPU is mapped.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_an_address_is_the_same_key() {
        let a = PciAddr { domain: 0, bus: 0x3b, device: 0 };
        for s in ["0000:3b:00", "PCI:0000:3b:00", "00000000:3B:00.0", "3b:00.0", "3b:00", " 0000:3B:00.1 "] {
            assert_eq!(PciAddr::parse(s), Some(a), "{s}");
        }
        for s in ["", "3b", "zz:00", "0000:3b:00.", "0000:3b:000", "0:0:0:0", "3b:00.xyz", "123456789:00:00"]
        {
            assert_eq!(PciAddr::parse(s), None, "{s}");
        }
        assert_eq!(a.to_string(), "0000:3b:00");
    }

    #[test]
    fn procfs_information_is_joined_by_uuid() {
        let dir = tempfile::tempdir().unwrap();
        let gpus = dir.path().join("driver/nvidia/gpus");
        for (bus, uuid) in
            [("0000:3b:00.0", "GPU-aaa"), ("0000:af:00.0", "GPU-bbb"), ("0000:d8:00.0", "GPU-zzz")]
        {
            std::fs::create_dir_all(gpus.join(bus)).unwrap();
            std::fs::write(
                gpus.join(bus).join("information"),
                format!(
                    "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 123\nGPU UUID: \t {uuid}\n\
                     Video BIOS: \t 96.00.74.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n\
                     DMA Mask: \t 0xfffffffffffff\nBus Location: \t {bus}\nDevice Minor: \t 0\n"
                ),
            )
            .unwrap();
        }
        std::fs::create_dir_all(gpus.join("broken")).unwrap();
        let inv = vec![
            GpuInfo { index: 0, uuid: "GPU-aaa".into(), ..GpuInfo::default() },
            GpuInfo { index: 1, uuid: "GPU-bbb".into(), ..GpuInfo::default() },
            GpuInfo { index: 2, uuid: "MIG-ccc".into(), mig: true, ..GpuInfo::default() },
        ];
        let map = PciMap::from_procfs(dir.path(), &inv);
        assert_eq!(map.len(), 2);
        assert_eq!(map.index_of("PCI:0000:3b:00"), Some(0));
        assert_eq!(map.index_of("0000:AF:00"), Some(1));
        assert_eq!(map.index_of("0000:d8:00"), None);
        assert!(PciMap::from_procfs(&dir.path().join("nope"), &inv).is_empty());
        let pairs = PciMap::from_pairs([("00000000:3B:00.0", 4), ("junk", 5)]);
        assert_eq!(pairs.index_of("0000:3b:00"), Some(4));
        assert_eq!(pairs.len(), 1);
    }
}
