//! Cost of explaining real OOM messages offline (`oomlens explain`): every message of the corpus
//! (`corpus/`), each parsed and attributed — parse (the agent's parsers: log framing, every
//! family, traceback phase, host symptoms, hints) → event → evidence → features → rules — against
//! parsing alone (the baseline measured in the same run), and the attribution of already parsed
//! events alone (`OomFeatures::from_event` + `attribute`: what the collector's attributor adds per
//! stored event on top of its query).
//! Single-threaded, so the figures are per core.
//!
//! `cargo bench -p oomlens-benches --bench explain -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use oomlens_collector::analysis::explain::explain_text;
use oomlens_collector::analysis::{OomFeatures, attribute};
use oomlens_parse::LineFormat;
use oomlens_parse::command::parse_reader;

fn parse_only(text: &str) -> usize {
    let mut n = 0;
    let mut r = std::io::Cursor::new(text.as_bytes());
    // Reading from memory cannot fail.
    let _ = parse_reader(&mut r, LineFormat::Auto, &mut |e| {
        n += black_box(e).line as usize;
        Ok(())
    });
    n
}

fn corpus(c: &mut Criterion) {
    let records = match oomlens_corpus::load() {
        Ok(r) => r,
        Err(e) => panic!("corpus: {e}"),
    };
    let bytes: usize = records.iter().map(|r| r.text.len()).sum();
    let events: Vec<_> = records.iter().flat_map(|r| explain_text(&r.text)).map(|e| e.event).collect();
    println!("corpus: {} messages, {} bytes, {} failures", records.len(), bytes, events.len());

    let mut g = c.benchmark_group("corpus");
    g.throughput(Throughput::Elements(records.len() as u64));
    g.bench_function("parse", |b| b.iter(|| records.iter().map(|r| parse_only(&r.text)).sum::<usize>()));
    g.bench_function("parse_and_attribute", |b| {
        b.iter(|| records.iter().map(|r| black_box(explain_text(&r.text)).len()).sum::<usize>())
    });
    g.throughput(Throughput::Elements(events.len() as u64));
    g.bench_function("attribute_parsed_events", |b| {
        b.iter(|| {
            events
                .iter()
                .map(|e| usize::from(attribute(&OomFeatures::from_event(e)).confidence_pct))
                .sum::<usize>()
        })
    });
    g.finish();
}

criterion_group!(benches, corpus);
criterion_main!(benches);
