//! A throw-away ZooKeeper for tests: Debian's ZooKeeper jars (`libzookeeper-java`) run by
//! `java` as a standalone server on a free loopback port, its data in a temporary directory,
//! killed on drop. What replicated ClickHouse tables and `ON CLUSTER` DDL need.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian installs the ZooKeeper jars and their dependencies.
pub const JAR_DIR: &str = "/usr/share/java";

/// Why a ZooKeeper could not run.
#[derive(Debug, thiserror::Error)]
pub enum DevZkError {
    /// No `java` or no ZooKeeper jar.
    #[error("ZooKeeper is not installed ({0}): apt-get install default-jre-headless libzookeeper-java")]
    NotInstalled(String),
    /// An I/O step failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The server did not answer in time.
    #[error("ZooKeeper on port {port} did not start within {after:?}; its output: {log}")]
    NotReady {
        /// Its port.
        port: u16,
        /// How long it was given.
        after: Duration,
        /// The end of its output.
        log: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DevZkError {
    let what = what.into();
    move |source| DevZkError::Io { what, source }
}

/// A running standalone ZooKeeper; killed on drop.
#[derive(Debug)]
pub struct DevZooKeeper {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl DevZooKeeper {
    /// Whether `java` and the ZooKeeper jar are installed.
    pub fn available() -> bool {
        Path::new(JAR_DIR).join("zookeeper.jar").exists()
            && Command::new("java").arg("-version").stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    }

    /// Starts a server on a free loopback port and waits until it answers.
    pub fn start() -> Result<DevZooKeeper, DevZkError> {
        if !Self::available() {
            return Err(DevZkError::NotInstalled(format!("no java or no {JAR_DIR}/zookeeper.jar")));
        }
        let dir =
            tempfile::Builder::new().prefix("oomlens-devzk-").tempdir().map_err(io("temporary directory"))?;
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io("a free port"))?;
        let port = listener.local_addr().map_err(io("a free port"))?.port();
        drop(listener);
        let mut zk = DevZooKeeper { child: None, port, dir };
        zk.spawn()?;
        Ok(zk)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("zookeeper.log")
    }

    fn spawn(&mut self) -> Result<(), DevZkError> {
        let data = self.dir.path().join("data");
        std::fs::create_dir_all(&data).map_err(io("the data directory"))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(io("the log file"))?;
        let err = log.try_clone().map_err(io("the log file"))?;
        let child = Command::new("java")
            .arg("-Xmx256m")
            .arg("-Dzookeeper.admin.enableServer=false")
            .arg("-Dzookeeper.4lw.commands.whitelist=ruok,srvr")
            .arg("-cp")
            .arg(format!("{JAR_DIR}/*"))
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(self.port.to_string())
            .arg(&data)
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(io("starting java"))?;
        self.child = Some(child);
        let after = Duration::from_secs(30);
        let start = Instant::now();
        while start.elapsed() < after {
            if self.ruok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let tail: String =
            log.lines().rev().take(10).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
        Err(DevZkError::NotReady { port: self.port, after, log: tail })
    }

    /// Whether the server answers `ruok` with `imok`.
    pub fn ruok(&self) -> bool {
        let Ok(mut s) = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)) else { return false };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let mut reply = String::new();
        s.write_all(b"ruok").is_ok() && s.read_to_string(&mut reply).is_ok() && reply == "imok"
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (SIGKILL); its data stays.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port with the same data.
    pub fn restart(&mut self) -> Result<(), DevZkError> {
        self.kill();
        self.spawn()
    }

    /// The `<zookeeper>` element of a ClickHouse config pointing at this server.
    pub fn clickhouse_xml(&self) -> String {
        format!(
            "    <zookeeper><node><host>127.0.0.1</host><port>{}</port></node>\
             <session_timeout_ms>10000</session_timeout_ms></zookeeper>\n    \
             <distributed_ddl><path>/clickhouse/task_queue/ddl</path></distributed_ddl>",
            self.port
        )
    }
}

impl Drop for DevZooKeeper {
    fn drop(&mut self) {
        self.kill();
    }
}
