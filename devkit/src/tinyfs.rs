//! A tmpfs of a given size mounted on a fresh directory, for tests of full disks. Mounted with the
//! `mount(2)` system call, not a forked `mount` command: a fork copies every open descriptor of
//! the test process (spool locks included) into a child for as long as it runs.

use std::path::Path;

/// A mounted tmpfs; detached (`umount -l`) and its directory removed when dropped.
#[derive(Debug)]
pub struct TinyFs {
    dir: tempfile::TempDir,
}

impl TinyFs {
    /// Mounts a tmpfs of `bytes` on a fresh temporary directory, or `None` — with the reason on
    /// stderr, so the calling test can skip — where this process may not mount (not root, no
    /// `CAP_SYS_ADMIN`).
    pub fn mount(bytes: u64) -> Option<TinyFs> {
        let dir = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("skipped: cannot create a directory to mount on: {e}");
                return None;
            }
        };
        let data = std::ffi::CString::new(format!("size={bytes}")).ok()?;
        match rustix::mount::mount(
            "tmpfs",
            dir.path(),
            "tmpfs",
            rustix::mount::MountFlags::empty(),
            data.as_c_str(),
        ) {
            Ok(()) => Some(TinyFs { dir }),
            Err(e) => {
                eprintln!("skipped: cannot mount a tmpfs here: {e}");
                None
            }
        }
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TinyFs {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(self.dir.path(), rustix::mount::UnmountFlags::DETACH);
    }
}
