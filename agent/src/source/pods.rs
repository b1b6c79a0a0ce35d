//! A source wrapper that adds the pod (namespace, name, container) to every process sample and
//! event from the kubelet's view of which pod holds which GPU (`workload::podresources`).

use std::collections::HashMap;

use oomlens_schema::GpuInfo;

use crate::source::{Reading, Source};
use crate::workload::podresources::PodDirectory;

/// A [`Source`] whose process samples and events get pod names from a [`PodDirectory`].
pub struct PodAttributed {
    inner: Box<dyn Source>,
    dir: PodDirectory,
    uuids: HashMap<u32, String>,
}

impl std::fmt::Debug for PodAttributed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodAttributed")
            .field("inner", &self.inner.name())
            .field("gpus", &self.uuids.len())
            .finish()
    }
}

impl PodAttributed {
    /// Wraps `inner`; GPU indices are mapped to UUIDs through its inventory.
    pub fn new(inner: Box<dyn Source>, dir: PodDirectory) -> Self {
        let uuids = inner.inventory().into_iter().map(|g: GpuInfo| (g.index, g.uuid)).collect();
        PodAttributed { inner, dir, uuids }
    }
}

impl Source for PodAttributed {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn inventory(&self) -> Vec<GpuInfo> {
        self.inner.inventory()
    }

    fn sample(&mut self, ts_ms: i64) -> Reading {
        let mut reading: Reading = self.inner.sample(ts_ms);
        for p in &mut reading.process_samples {
            self.dir.annotate(self.uuids.get(&p.gpu_index).map(String::as_str), &mut p.labels);
        }
        for e in &mut reading.events {
            let uuid = e.gpu_index.and_then(|i| self.uuids.get(&i)).map(String::as_str);
            self.dir.annotate(uuid, &mut e.labels);
        }
        reading
    }
}
