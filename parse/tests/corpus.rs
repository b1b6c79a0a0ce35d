#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Every message of the corpus of real OOMs (`corpus/`) gives an event of the kind its record
//! expects — through the same reader as `oomlens-agent parse` and `oomlens explain` — and the
//! warnings that only look like failures give none.

use std::io::Cursor;

use oomlens_parse::{LineFormat, ParsedOom, command::parse_reader};

fn parse(text: &str) -> Vec<ParsedOom> {
    let mut out = Vec::new();
    parse_reader(&mut Cursor::new(text.as_bytes()), LineFormat::Auto, &mut |e| {
        out.push(e);
        Ok(())
    })
    .expect("reading from memory cannot fail");
    out.sort_by_key(|e| e.line);
    out
}

#[test]
fn the_parser_finds_every_oom_of_the_corpus() {
    let records = oomlens_corpus::load().expect("corpus");
    let mut missed = Vec::new();
    let mut by_kind = std::collections::BTreeMap::<&str, usize>::new();
    for r in &records {
        let events = parse(&r.text);
        let ok = if r.expect == "none" {
            events.is_empty()
        } else {
            events.iter().any(|e| e.kind.as_str() == r.expect)
        };
        *by_kind.entry(r.expect.as_str()).or_default() += 1;
        if !ok {
            let got: Vec<_> = events.iter().map(|e| e.kind.as_str()).collect();
            missed.push(format!("{} (expect {}, got {got:?})", r.id, r.expect));
        }
    }
    println!("{} records: {by_kind:?}", records.len());
    assert!(
        missed.is_empty(),
        "{} of {} records not parsed as expected:\n{}",
        missed.len(),
        records.len(),
        missed.join("\n")
    );
}
