//! The workspace's own binaries for the benchmarks that run them as child processes (`loadgen`,
//! `agent-footprint`, `soak`): the binary next to the running one, built first so that it matches
//! the sources (release when the running binary is a release build).

use std::path::PathBuf;
use std::process::Command;

/// The binary could not be found or built.
#[derive(Debug, thiserror::Error)]
pub enum BinaryError {
    /// The running executable's location is unknown.
    #[error("cannot locate this executable: {0}")]
    CurrentExe(std::io::Error),
    /// `cargo build` failed and no earlier build exists.
    #[error("cannot build {bin} and {path} is missing")]
    Missing {
        /// Binary name.
        bin: String,
        /// Where it should be.
        path: PathBuf,
    },
}

/// `bin` of `package`, next to the running binary (built first; release if this is a release
/// build, with a warning otherwise since the figures of a debug build mean little).
pub fn sibling_binary(package: &str, bin: &str) -> Result<PathBuf, BinaryError> {
    let exe = std::env::current_exe().map_err(BinaryError::CurrentExe)?;
    let profile_dir = exe.parent().map(std::path::Path::to_owned).unwrap_or_default();
    let path = profile_dir.join(bin);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "-p", package, "--bin", bin]);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    } else {
        eprintln!("warning: not a release build; performance figures are only meaningful with --release");
    }
    if let Some(target) = profile_dir.parent() {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    let ok = cmd.status().map(|s| s.success()).unwrap_or(false);
    if !ok && !path.exists() {
        return Err(BinaryError::Missing { bin: bin.to_owned(), path });
    }
    Ok(path)
}
