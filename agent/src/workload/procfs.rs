//! Pure parsers for the `/proc/<pid>` files the resolver reads: `stat` (start time), `status`
//! (uid), `environ` (Slurm variables) and `cmdline`.

/// Field 22 of `/proc/<pid>/stat`: the start time in clock ticks since boot. The command name
/// (field 2) may contain spaces and parentheses, so fields are counted after its last `)`.
pub fn start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After `)` come field 3 (state), 4, …; field 22 is the 20th of them.
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// The real uid from the `Uid:` line of `/proc/<pid>/status`.
pub fn real_uid(status: &str) -> Option<u32> {
    status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_ascii_whitespace().next()?.parse().ok()
}

/// Slurm variables found in `/proc/<pid>/environ` (NUL-separated `KEY=VALUE`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlurmEnv {
    /// `SLURM_JOB_ID` (or the older `SLURM_JOBID`).
    pub job_id: Option<String>,
    /// `SLURM_STEP_ID` (or `SLURM_STEPID`).
    pub step_id: Option<String>,
    /// `SLURM_JOB_USER`.
    pub user: Option<String>,
}

/// Extracts the Slurm variables; values longer than `max_value` bytes or not valid UTF-8 are
/// ignored.
pub fn slurm_env(environ: &[u8], max_value: usize) -> SlurmEnv {
    let mut env = SlurmEnv::default();
    for entry in environ.split(|b| *b == 0) {
        let Some(eq) = entry.iter().position(|b| *b == b'=') else { continue };
        let (key, value) = (&entry[..eq], &entry[eq + 1..]);
        if value.is_empty() || value.len() > max_value {
            continue;
        }
        let Ok(value) = std::str::from_utf8(value) else { continue };
        // The current names win over the older `SLURM_JOBID` / `SLURM_STEPID` whatever their order.
        let (slot, current) = match key {
            b"SLURM_JOB_ID" => (&mut env.job_id, true),
            b"SLURM_JOBID" => (&mut env.job_id, false),
            b"SLURM_STEP_ID" => (&mut env.step_id, true),
            b"SLURM_STEPID" => (&mut env.step_id, false),
            b"SLURM_JOB_USER" => (&mut env.user, true),
            _ => continue,
        };
        if current || slot.is_none() {
            *slot = Some(value.to_owned());
        }
    }
    env
}

/// `/proc/<pid>/cmdline` as one line: NUL-separated arguments joined by spaces, invalid UTF-8
/// replaced, cut to at most `max_bytes` bytes on a character boundary (`…` marks a cut).
pub fn cmdline(raw: &[u8], max_bytes: usize) -> String {
    let trimmed = raw.strip_suffix(&[0]).unwrap_or(raw);
    let text: String = String::from_utf8_lossy(trimmed)
        .chars()
        .map(|c| if c == '\0' || c.is_control() { ' ' } else { c })
        .collect();
    oomlens_schema::text::clip_marked(text.trim(), max_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_survives_odd_command_names() {
        let stat =
            "4242 (py thon) (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 12 0 987654 1000 50";
        assert_eq!(start_time(stat), Some(987_654));
        assert_eq!(start_time("1 (init) S 0"), None);
        assert_eq!(start_time("garbage"), None);
    }

    #[test]
    fn uid_from_status() {
        assert_eq!(real_uid("Name:\tpython\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\n"), Some(1000));
        assert_eq!(real_uid("Name:\tpython\n"), None);
    }

    #[test]
    fn slurm_variables() {
        let env = b"PATH=/bin\0SLURM_JOBID=1\0SLURM_JOB_ID=4242\0SLURM_STEP_ID=3\0SLURM_JOB_USER=alice\0X=\0";
        assert_eq!(
            slurm_env(env, 64),
            SlurmEnv { job_id: Some("4242".into()), step_id: Some("3".into()), user: Some("alice".into()) }
        );
        let env = b"SLURM_JOB_ID=4242\0SLURM_JOBID=1\0";
        assert_eq!(slurm_env(env, 64).job_id.as_deref(), Some("4242"));
        assert_eq!(slurm_env(b"SLURM_JOB_ID=\xff\0", 64).job_id, None);
        assert_eq!(slurm_env(b"SLURM_JOB_ID=123456789\0", 4).job_id, None);
    }

    #[test]
    fn cmdline_is_joined_and_capped() {
        assert_eq!(cmdline(b"python\0train.py\0--batch\x0032\0", 100), "python train.py --batch 32");
        assert_eq!(cmdline(b"", 100), "");
        let long = cmdline("é".repeat(100).as_bytes(), 11);
        assert!(long.len() <= 11 && long.ends_with('…'), "{long}");
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(raw in proptest::collection::vec(proptest::num::u8::ANY, 0..400), max in 0usize..64) {
            let text = String::from_utf8_lossy(&raw);
            let _ = start_time(&text);
            let _ = real_uid(&text);
            let _ = slurm_env(&raw, max);
            let out = cmdline(&raw, max);
            proptest::prop_assert!(out.len() <= max);
        }
    }
}
