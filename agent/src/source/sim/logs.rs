//! Job log files: when `log_dir` is set, each job appends its log to `<log_dir>/<job_name>.log`,
//! and the simulated kernel log goes to `<log_dir>/kern.log`.
//!
//! Every job's log is bounded ([`MAX_LINES_PER_JOB`] ordinary lines; failure messages are always
//! written). Write errors never stop the simulation: the first one is reported with `tracing`.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::SimError;

/// Most ordinary lines (progress, eval) one job writes; failure output is always written.
pub(crate) const MAX_LINES_PER_JOB: u32 = 2000;

/// Where logs go.
#[derive(Debug)]
pub(crate) struct LogSink {
    dir: PathBuf,
    warned: bool,
}

impl LogSink {
    /// Creates the directory if needed and checks that it is writable.
    pub(crate) fn open(dir: &Path) -> Result<Self, SimError> {
        let err = |source| SimError::LogDir { path: dir.to_path_buf(), source };
        std::fs::create_dir_all(dir).map_err(err)?;
        let probe = dir.join(".oomlens-sim-probe");
        OpenOptions::new().create(true).append(true).open(&probe).map_err(err)?;
        std::fs::remove_file(&probe).map_err(err)?;
        Ok(LogSink { dir: dir.to_path_buf(), warned: false })
    }

    /// Appends `text` (which ends with a newline) to `<dir>/<name>.log`.
    pub(crate) fn append(&mut self, name: &str, text: &str) {
        let path = self.dir.join(format!("{name}.log"));
        let res = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(e) = res
            && !self.warned
        {
            self.warned = true;
            tracing::warn!(path = %path.display(), error = %e, "simulator cannot write a job log (further errors not reported)");
        }
    }
}
