//! uid → user name from `<etc_root>/passwd`, and group name → gid from `<etc_root>/group`.
//!
//! Only the files are read (no NSS): on nodes whose users come from LDAP/SSSD the agent shows the
//! numeric uid unless the directory is also synced into `/etc/passwd`. The passwd table is cached
//! and re-read when the file's modification time or size changes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Largest passwd/group file read, bytes (a bigger one is read up to this size).
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Cached uid → name table of one passwd file.
#[derive(Debug)]
pub struct UserDb {
    path: PathBuf,
    stamp: Option<(SystemTime, u64)>,
    names: HashMap<u32, String>,
}

impl UserDb {
    /// A table for `<etc_root>/passwd` (read on first use).
    pub fn new(etc_root: &Path) -> Self {
        UserDb { path: etc_root.join("passwd"), stamp: None, names: HashMap::new() }
    }

    /// The user name of `uid`, re-reading the file when it changed; `None` when unknown or the
    /// file is unreadable.
    pub fn name(&mut self, uid: u32) -> Option<String> {
        let stamp = std::fs::metadata(&self.path)
            .ok()
            .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
        if stamp != self.stamp {
            self.stamp = stamp;
            self.names = read_capped(&self.path).map(|t| parse_passwd(&t)).unwrap_or_default();
        }
        self.names.get(&uid).cloned()
    }
}

fn read_capped(path: &Path) -> Option<String> {
    use std::io::Read as _;
    let mut text = String::new();
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES).read_to_end(&mut bytes).ok()?;
    text.push_str(&String::from_utf8_lossy(&bytes));
    Some(text)
}

/// `name:password:uid:gid:…` lines → uid → name (the first entry of a uid wins).
pub fn parse_passwd(text: &str) -> HashMap<u32, String> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let mut f = line.split(':');
        let (Some(name), Some(_), Some(uid)) = (f.next(), f.next(), f.next()) else { continue };
        if name.is_empty() || name.starts_with('#') || name.starts_with('+') || name.starts_with('-') {
            continue;
        }
        if let Ok(uid) = uid.parse::<u32>() {
            out.entry(uid).or_insert_with(|| name.to_owned());
        }
    }
    out
}

/// A group named for the hook socket could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("group {name:?} does not exist in {path} (give a group name listed there or a numeric gid)")]
pub struct UnknownGroup {
    /// The name asked for.
    pub name: String,
    /// The file searched.
    pub path: String,
}

/// The gid of `name` (a group name from `<etc_root>/group`, or a number).
pub fn group_id(etc_root: &Path, name: &str) -> Result<u32, UnknownGroup> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(gid);
    }
    let path = etc_root.join("group");
    let found = read_capped(&path).and_then(|text| {
        text.lines().find_map(|line| {
            let mut f = line.split(':');
            let (Some(n), Some(_), Some(gid)) = (f.next(), f.next(), f.next()) else { return None };
            (n == name).then(|| gid.parse::<u32>().ok()).flatten()
        })
    });
    found.ok_or_else(|| UnknownGroup { name: name.to_owned(), path: path.display().to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_lines() {
        let t = "root:x:0:0:root:/root:/bin/bash\n# comment\nalice:x:1000:1000::/home/alice:/bin/sh\nbad\nbob:x:notanumber:1\nalias:x:1000:1\n";
        let m = parse_passwd(t);
        assert_eq!(m.get(&0).map(String::as_str), Some("root"));
        assert_eq!(m.get(&1000).map(String::as_str), Some("alice"));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn user_db_rereads_a_changed_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("passwd"), "alice:x:1000:1000::/:/bin/sh\n").unwrap();
        let mut db = UserDb::new(dir.path());
        assert_eq!(db.name(1000).as_deref(), Some("alice"));
        assert_eq!(db.name(1001), None);
        std::fs::write(
            dir.path().join("passwd"),
            "alice:x:1000:1000::/:/bin/sh\ncarol:x:1001:1::/:/bin/sh\n",
        )
        .unwrap();
        assert_eq!(db.name(1001).as_deref(), Some("carol"));
        assert_eq!(UserDb::new(&dir.path().join("nope")).name(0), None);
    }

    #[test]
    fn groups_by_name_or_number() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("group"), "root:x:0:\noomlens:x:990:alice,bob\n").unwrap();
        assert_eq!(group_id(dir.path(), "oomlens"), Ok(990));
        assert_eq!(group_id(dir.path(), "1234"), Ok(1234));
        let err = group_id(dir.path(), "gpu-users").unwrap_err();
        assert!(err.to_string().contains("gpu-users") && err.to_string().contains("group"), "{err}");
    }
}
