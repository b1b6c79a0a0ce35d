//! `oomlens-cli`: the `oomlens` command, on top of the collector's library
//! (`oomlens_collector`: queries, attribution, storage); nothing in the service depends on it.
//!
//! * [`postmortem`] — one report per OOM event: selection, memory curve, text / JSON / HTML.
//! * [`capacity`] — `oomlens report capacity`: headroom and OOMs per group, text / JSON / HTML.
//! * [`top`] — the live view.
//! * [`fit`] — `oomlens fit`: will this job fit? The memory model of one GPU of a job, the largest
//!   batch and sequence, the fleet's correction.
//! * [`explain`] — `oomlens explain`: reading the inputs and rendering the offline attribution.
//! * [`report`] — `oomlens sql` and the tables of events and row counts.
//! * [`demo`] — `oomlens demo` and the fleet run behind `oomlens accuracy`.
//! * [`render`] — what the reports share: sizes for people, HTML escaping and page head, colours.
//! * [`chart`] — the SVG charts' axes, ticks, page-wide colours and legends.
//! * [`timearg`] — `--since` / `--until` / `--at`: durations, RFC 3339, epoch milliseconds.

pub mod capacity;
pub mod chart;
pub mod demo;
pub mod explain;
pub mod fit;
pub mod postmortem;
pub mod render;
pub mod report;
pub mod timearg;
pub mod top;
