//! The log follower's saved positions (`[logs] state_file`): per followed file its path, device
//! and inode, the offset read up to, and a fingerprint of its first bytes — so a restarted agent
//! resumes where it stopped, recognises a file that was renamed while it was down, and tells a
//! reused inode or a rewritten file from the one it read.
//!
//! The file is JSON, written atomically (temporary file, `fsync`, rename, `fsync` of the
//! directory). A missing file means a first start; an unreadable or corrupt one is reported and
//! set aside (`<state_file>.corrupt`), and the follower starts as on a first start.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Bytes at the start of a file covered by its fingerprint.
pub const FINGERPRINT_BYTES: usize = 256;
/// Most entries kept in the state file.
pub const MAX_ENTRIES: usize = 65_536;

/// The identity of a file's first bytes: FNV-1a 64 of the first `len` bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// Bytes covered (≤ [`FINGERPRINT_BYTES`]; 0 for an empty file).
    pub len: u32,
    /// Hash of those bytes.
    pub hash: u64,
}

impl Fingerprint {
    /// The fingerprint of `head` (at most [`FINGERPRINT_BYTES`] of it are used).
    pub fn of(head: &[u8]) -> Self {
        let head = &head[..head.len().min(FINGERPRINT_BYTES)];
        Fingerprint { len: head.len() as u32, hash: crate::hash::fnv1a64(head) }
    }
}

/// Where one file was read up to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileOffset {
    /// Path it was followed under.
    pub path: PathBuf,
    /// Device id.
    pub dev: u64,
    /// Inode number; with `dev`, identifies the file across renames.
    pub ino: u64,
    /// Bytes consumed (complete lines).
    pub offset: u64,
    /// Its first bytes.
    pub fingerprint: Fingerprint,
}

/// The saved state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetState {
    /// Format version (1).
    pub version: u32,
    /// When it was written, Unix epoch ms.
    pub saved_at_ms: i64,
    /// One entry per followed file.
    pub files: Vec<FileOffset>,
}

/// The state file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum OffsetError {
    /// I/O failed.
    #[error("log offsets file {path}: {source}")]
    Io {
        /// The offsets state file (or its directory) that could not be read or written.
        path: PathBuf,
        /// The underlying I/O (or JSON encoding) error.
        source: std::io::Error,
    },
    /// The content is not a valid state.
    #[error("log offsets file {path} is corrupt: {message}")]
    Corrupt {
        /// The offsets state file whose content is invalid.
        path: PathBuf,
        /// Parser message.
        message: String,
    },
}

impl OffsetState {
    /// Reads `path`: `Ok(None)` when it does not exist.
    pub fn load(path: &Path) -> Result<Option<OffsetState>, OffsetError> {
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(OffsetError::Io { path: path.to_owned(), source }),
        };
        let corrupt = |message: String| OffsetError::Corrupt { path: path.to_owned(), message };
        let state: OffsetState = serde_json::from_slice(&text).map_err(|e| corrupt(e.to_string()))?;
        if state.version != 1 {
            return Err(corrupt(format!("unknown version {}", state.version)));
        }
        if state.files.len() > MAX_ENTRIES {
            return Err(corrupt(format!("{} entries (at most {MAX_ENTRIES})", state.files.len())));
        }
        Ok(Some(state))
    }

    /// Moves an unusable state file aside (`<path>.corrupt`), best effort.
    pub fn set_aside(path: &Path) {
        let mut aside = path.as_os_str().to_owned();
        aside.push(".corrupt");
        let _ = std::fs::rename(path, PathBuf::from(aside));
    }

    /// Writes the state atomically: `<path>.tmp`, fsync, rename over `path`, fsync the directory.
    pub fn save(&self, path: &Path) -> Result<(), OffsetError> {
        let io = |source| OffsetError::Io { path: path.to_owned(), source };
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut tmp_name = path.as_os_str().to_owned();
        tmp_name.push(".tmp");
        let tmp = PathBuf::from(tmp_name);
        let data = serde_json::to_vec(self).map_err(|e| io(std::io::Error::other(e)))?;
        {
            let mut f = std::fs::File::create(&tmp).map_err(io)?;
            f.write_all(&data).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, path).map_err(io)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_stable_and_cover_the_first_bytes_only() {
        assert_eq!(Fingerprint::of(b""), Fingerprint { len: 0, hash: 0xcbf2_9ce4_8422_2325 });
        // FNV-1a 64 of "a" (published test vector).
        assert_eq!(Fingerprint::of(b"a").hash, 0xaf63_dc4c_8601_ec8c);
        let long = vec![7u8; 1000];
        assert_eq!(Fingerprint::of(&long), Fingerprint::of(&long[..FINGERPRINT_BYTES]));
        assert_eq!(Fingerprint::of(&long).len as usize, FINGERPRINT_BYTES);
        assert_ne!(Fingerprint::of(b"abc"), Fingerprint::of(b"abd"));
    }

    #[test]
    fn save_load_round_trip_and_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/offsets.json");
        assert_eq!(OffsetState::load(&path).unwrap(), None);
        let state = OffsetState {
            version: 1,
            saved_at_ms: 42,
            files: vec![FileOffset {
                path: "/var/log/a.log".into(),
                dev: 1,
                ino: 2,
                offset: 3,
                fingerprint: Fingerprint::of(b"x"),
            }],
        };
        state.save(&path).unwrap();
        assert_eq!(OffsetState::load(&path).unwrap(), Some(state.clone()));
        assert!(!dir.path().join("sub/offsets.json.tmp").exists());
        std::fs::write(&path, b"{not json").unwrap();
        let err = OffsetState::load(&path).unwrap_err();
        assert!(err.to_string().contains("corrupt"), "{err}");
        OffsetState::set_aside(&path);
        assert!(!path.exists());
        assert!(dir.path().join("sub/offsets.json.corrupt").exists());
        std::fs::write(&path, br#"{"version":9,"saved_at_ms":0,"files":[]}"#).unwrap();
        assert!(OffsetState::load(&path).unwrap_err().to_string().contains("version 9"));
    }
}
