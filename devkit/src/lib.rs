//! `oomlens-devkit`: what development and tests need besides the product — kept out of the
//! product's libraries.
//!
//! * [`devch`] — a throw-away local ClickHouse server (tests, `oomlens demo`, the benches).
//! * [`devzk`] — a throw-away ZooKeeper (replicated ClickHouse tests).
//! * [`devam`] — a throw-away Alertmanager (the OOM alert tests and bench).
//! * [`browser`] — headless Chromium: a page's layout checked at a viewport width, screenshots.
//! * [`tinyfs`] — a small tmpfs that fills up (disk-full tests).
//! * [`clitest`] — running a workspace binary in a test and reading its output, the repository
//!   root, and the checks that every Prometheus metric a binary registers is documented.

pub mod browser;
pub mod clitest;
pub mod devam;
pub mod devch;
pub mod devzk;
pub mod tinyfs;
