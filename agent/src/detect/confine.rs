//! Opening followed log files without leaving their roots.
//!
//! The agent runs with more privileges than the jobs whose logs it follows, and jobs can often
//! write into the followed directories (Slurm output, shared log directories). A symlink placed
//! there must not make the agent read what the job cannot: `/etc/shadow` must never end up in
//! `oom_events.raw_message`. So a log file is opened only when
//!
//! * its fully resolved path lies inside one of the **roots** — by default the literal directory
//!   prefix of each `[logs] paths` pattern (`/var/log/pods/*/*/*.log` → `/var/log/pods`), plus the
//!   directories in `logs.allowed_roots` (e.g. `/var/lib/docker/containers`, where Docker-era
//!   Kubernetes `/var/log/pods/…/0.log` symlinks point); a symlink that stays inside a root is
//!   followed, one that leaves every root is refused;
//! * the open itself cannot be redirected: it is `openat2` from the root's directory with
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS` on the resolved path, so a
//!   component swapped for a symlink between the check and the open makes it fail (kernels
//!   without `openat2` — before 5.6, or a seccomp filter — get `O_NOFOLLOW` and a check of the
//!   opened descriptor's path in `/proc/self/fd`);
//! * it is a regular file (checked on the opened descriptor; opened non-blocking, so a FIFO
//!   cannot hang the follower).
//!
//! The roots' own symlinks (`/var/log` → `/data/log`) are the administrator's and are resolved.
//! Hard links are not symlinks: with `fs.protected_hardlinks = 1` (every current distribution's
//! default) a user cannot hard-link a file it cannot read.

use std::fs::File;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// Why a log file was not opened.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The path resolves outside every root.
    #[error(
        "{path} resolves to {resolved}, outside the followed roots ({roots}); add its directory to logs.allowed_roots to follow it"
    )]
    Outside {
        /// The path found by the glob.
        path: PathBuf,
        /// Where it resolves.
        resolved: PathBuf,
        /// The roots, comma-separated.
        roots: String,
    },
    /// Not a regular file.
    #[error("{0} is not a regular file")]
    NotRegular(PathBuf),
    /// Resolving or opening failed (including a symlink swapped in after the check).
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// The directories followed files must resolve into.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roots {
    roots: Vec<PathBuf>,
}

/// The literal directory prefix of a glob pattern: its components before the first one with a
/// glob character (`*`, `?`, `[`); for a plain path, its parent directory.
pub fn pattern_root(pattern: &str) -> PathBuf {
    let path = Path::new(pattern);
    let mut root = PathBuf::new();
    let mut globbed = false;
    for c in path.components() {
        let s = c.as_os_str().to_string_lossy();
        if s.contains(['*', '?', '[']) {
            globbed = true;
            break;
        }
        root.push(c);
    }
    if !globbed {
        root.pop();
    }
    if root.as_os_str().is_empty() { PathBuf::from(".") } else { root }
}

impl Roots {
    /// The roots of `patterns` and the `extra` directories.
    pub fn new(patterns: &[String], extra: &[PathBuf]) -> Roots {
        let mut roots: Vec<PathBuf> = patterns.iter().map(|p| pattern_root(p)).collect();
        roots.extend(extra.iter().cloned());
        roots.sort();
        roots.dedup();
        Roots { roots }
    }

    /// The configured roots.
    pub fn list(&self) -> &[PathBuf] {
        &self.roots
    }

    fn describe(&self) -> String {
        self.roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(", ")
    }

    /// Opens `path` for reading if it resolves to a regular file inside a root.
    pub fn open(&self, path: &Path) -> Result<File, ConfineError> {
        let io = |source| ConfineError::Io { path: path.to_owned(), source };
        let resolved = std::fs::canonicalize(path).map_err(io)?;
        // Roots are resolved at every open: one may appear (a mount) after the agent started.
        let Some((root, rel)) = self.roots.iter().find_map(|r| {
            let r = std::fs::canonicalize(r).ok()?;
            let rel = resolved.strip_prefix(&r).ok()?.to_owned();
            Some((r, rel))
        }) else {
            return Err(ConfineError::Outside { path: path.to_owned(), resolved, roots: self.describe() });
        };
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) || rel.as_os_str().is_empty() {
            return Err(ConfineError::NotRegular(path.to_owned()));
        }
        let fd = open_beneath(&root, &rel).map_err(io)?;
        let file = File::from(fd);
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(ConfineError::NotRegular(path.to_owned()));
        }
        Ok(file)
    }
}

const FILE_FLAGS: OFlags =
    OFlags::RDONLY.union(OFlags::CLOEXEC).union(OFlags::NOCTTY).union(OFlags::NONBLOCK);

/// `openat2(root, rel, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`; without
/// `openat2`, `O_NOFOLLOW` and the opened descriptor's path checked against `root`.
fn open_beneath(root: &Path, rel: &Path) -> std::io::Result<OwnedFd> {
    let dir = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(&dir, rel, FILE_FLAGS, Mode::empty(), resolve) {
        Ok(fd) => Ok(fd),
        Err(e) if e == rustix::io::Errno::NOSYS || e == rustix::io::Errno::PERM => {
            let fd = rustix::fs::open(root.join(rel), FILE_FLAGS | OFlags::NOFOLLOW, Mode::empty())?;
            let opened = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
            if opened.starts_with(root) {
                Ok(fd)
            } else {
                Err(std::io::Error::other(format!("opened {} instead", opened.display())))
            }
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn roots_are_the_literal_prefixes_of_the_patterns() {
        assert_eq!(pattern_root("/var/log/pods/*/*/*.log"), Path::new("/var/log/pods"));
        assert_eq!(pattern_root("/scratch/slurm-*.out"), Path::new("/scratch"));
        assert_eq!(pattern_root("/srv/jobs/**/train.log"), Path::new("/srv/jobs"));
        assert_eq!(pattern_root("/srv/job[0-9]/out.log"), Path::new("/srv"));
        assert_eq!(pattern_root("/srv/logs/train.log"), Path::new("/srv/logs"));
        assert_eq!(pattern_root("train-*.log"), Path::new("."));
        let r = Roots::new(&["/a/*.log".into(), "/a/b/*.log".into()], &[PathBuf::from("/c")]);
        assert_eq!(r.list(), [Path::new("/a"), Path::new("/a/b"), Path::new("/c")]);
    }

    fn read(f: File) -> String {
        let mut s = String::new();
        let mut f = f;
        f.read_to_string(&mut s).unwrap();
        s
    }

    #[test]
    fn symlinks_are_followed_only_inside_the_roots() {
        let tmp = tempfile::tempdir().unwrap();
        let logs = tmp.path().join("logs");
        let other = tmp.path().join("secret");
        std::fs::create_dir_all(logs.join("job")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(logs.join("job/a.log"), "inside\n").unwrap();
        std::fs::write(other.join("shadow"), "root:secret\n").unwrap();
        symlink(logs.join("job/a.log"), logs.join("b.log")).unwrap();
        symlink(other.join("shadow"), logs.join("c.log")).unwrap();
        symlink("../secret/shadow", logs.join("d.log")).unwrap();
        symlink(&other, logs.join("dir")).unwrap();
        let roots = Roots::new(&[format!("{}/**/*.log", logs.display())], &[]);
        assert_eq!(read(roots.open(&logs.join("job/a.log")).unwrap()), "inside\n");
        assert_eq!(read(roots.open(&logs.join("b.log")).unwrap()), "inside\n", "a symlink within the root");
        for p in ["c.log", "d.log", "dir/shadow"] {
            let e = roots.open(&logs.join(p)).unwrap_err();
            assert!(matches!(e, ConfineError::Outside { .. }), "{p}: {e}");
            assert!(e.to_string().contains("logs.allowed_roots"), "{e}");
        }
        // An allowed root makes the same link followable (Docker-era /var/log/pods links).
        let roots = Roots::new(&[format!("{}/**/*.log", logs.display())], std::slice::from_ref(&other));
        assert_eq!(read(roots.open(&logs.join("c.log")).unwrap()), "root:secret\n");
    }

    #[test]
    fn only_regular_files_are_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("pipe.log");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, Mode::RUSR | Mode::WUSR, 0)
            .unwrap();
        std::fs::create_dir(tmp.path().join("d.log")).unwrap();
        let roots = Roots::new(&[format!("{}/*.log", tmp.path().display())], &[]);
        assert!(
            matches!(roots.open(&fifo), Err(ConfineError::NotRegular(_))),
            "a FIFO does not block or open"
        );
        assert!(matches!(roots.open(&tmp.path().join("d.log")), Err(ConfineError::NotRegular(_))));
        assert!(matches!(roots.open(&tmp.path().join("missing.log")), Err(ConfineError::Io { .. })));
    }

    #[test]
    fn a_component_swapped_for_a_symlink_after_the_check_cannot_redirect_the_open() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("logs");
        std::fs::create_dir_all(root.join("job")).unwrap();
        std::fs::write(root.join("job/a.log"), "x").unwrap();
        std::fs::create_dir_all(tmp.path().join("secret")).unwrap();
        std::fs::write(tmp.path().join("secret/a.log"), "secret").unwrap();
        // The resolved path was checked; then `job` becomes a symlink out of the root.
        std::fs::rename(root.join("job"), root.join("job.old")).unwrap();
        symlink(tmp.path().join("secret"), root.join("job")).unwrap();
        let e = open_beneath(&std::fs::canonicalize(&root).unwrap(), Path::new("job/a.log")).unwrap_err();
        assert!(e.raw_os_error().is_some(), "{e}");
    }
}
