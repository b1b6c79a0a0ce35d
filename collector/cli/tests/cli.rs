//! The `oomlens` binary's generated files: shell completions and man pages.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[test]
fn completions_and_man_pages_generate() {
    oomlens_devkit::clitest::assert_completions_and_man(env!("CARGO_BIN_EXE_oomlens"), "oomlens", "accuracy");
}
