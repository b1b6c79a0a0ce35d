//! A throw-away local ClickHouse server for tests, the demo and the benches.
//!
//! [`DevClickHouse::start`] picks free loopback ports, renders the same config templates as
//! `deploy/dev-clickhouse.sh` (`deploy/clickhouse/dev-config.xml`, `dev-users.xml`) into a
//! temporary directory, starts `clickhouse server` (a modern single binary on `PATH`) or Debian's
//! `clickhouse-server` (18.16) in its own process group and waits until `GET /ping` answers `Ok.`.
//! The server is stopped (SIGTERM, then SIGKILL) when the handle is dropped. [`DevClickHouse::kill`]
//! and [`DevClickHouse::restart`] simulate an outage on the same ports and data directory.
//! [`DevClickHouse::start_cluster`] starts several servers forming one ClickHouse cluster (a
//! `<remote_servers>` section naming every server's TCP port, one shard each; plain `MergeTree`
//! shards behind `Distributed` tables need no ZooKeeper).
//!
//! 18.16 waits for open HTTP keep-alive connections when it shuts down: drop the ClickHouse clients
//! of the same process (and let their runtime run for a moment) before dropping the server, or
//! `stop` may need its whole SIGTERM grace period before it falls back to SIGKILL.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const CONFIG_TEMPLATE: &str = include_str!("../../deploy/clickhouse/dev-config.xml");
const USERS_TEMPLATE: &str = include_str!("../../deploy/clickhouse/dev-users.xml");

/// How long [`DevClickHouse::start`] waits for `/ping`.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long [`DevClickHouse::stop`] waits after SIGTERM before SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);

const INSTALL_HINT: &str = "install it with 'apt-get install -y clickhouse-server clickhouse-client' \
                            or put a modern 'clickhouse' binary on PATH";

/// Why the throw-away server could not be started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum DevChError {
    /// Neither `clickhouse` nor `clickhouse-server` exists.
    #[error(
        "no ClickHouse server binary found (looked for 'clickhouse' and 'clickhouse-server' on PATH and /usr/sbin/clickhouse-server): {INSTALL_HINT}"
    )]
    NoServer,
    /// A file-system or process operation failed.
    #[error("dev ClickHouse: {context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The server process exited before answering `/ping`.
    #[error("dev ClickHouse exited during start-up ({status}); logs in {log_dir}:\n{log_tail}")]
    Exited {
        /// Exit status.
        status: ExitStatus,
        /// The log directory.
        log_dir: String,
        /// Last lines of the error log and stdout.
        log_tail: String,
    },
    /// The server did not answer `/ping` in time.
    #[error(
        "dev ClickHouse did not answer /ping on port {port} within {after:?}; logs in {log_dir}:\n{log_tail}"
    )]
    Timeout {
        /// HTTP port polled.
        port: u16,
        /// How long we waited.
        after: Duration,
        /// The log directory.
        log_dir: String,
        /// Last lines of the error log and stdout.
        log_tail: String,
    },
    /// `restart` was called while the server is running.
    #[error("dev ClickHouse is already running (pid {0})")]
    AlreadyRunning(u32),
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> DevChError {
    let context = context.into();
    move |source| DevChError::Io { context, source }
}

/// The server binary and the arguments before `--config-file`.
#[derive(Debug, Clone)]
struct ServerCmd {
    program: PathBuf,
    args: Vec<&'static str>,
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

fn server_cmd() -> Result<ServerCmd, DevChError> {
    if let Some(program) = find_on_path("clickhouse") {
        return Ok(ServerCmd { program, args: vec!["server"] });
    }
    if let Some(program) = find_on_path("clickhouse-server") {
        return Ok(ServerCmd { program, args: vec![] });
    }
    let sbin = PathBuf::from("/usr/sbin/clickhouse-server");
    if is_executable(&sbin) {
        return Ok(ServerCmd { program: sbin, args: vec![] });
    }
    Err(DevChError::NoServer)
}

/// A free loopback TCP port (bound to port 0, then released).
fn free_port() -> Result<u16, DevChError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io("binding a free loopback port"))?;
    let port = listener.local_addr().map_err(io("reading a bound port"))?.port();
    Ok(port)
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Renders `dev-config.xml` for a data directory and ports.
fn render_config(dir: &Path, http_port: u16, tcp_port: u16) -> String {
    CONFIG_TEMPLATE
        .replace("@DIR@", &xml_escape(&dir.to_string_lossy()))
        .replace("@HTTP_PORT@", &http_port.to_string())
        .replace("@TCP_PORT@", &tcp_port.to_string())
}

/// [`render_config`] with `extra` (XML elements) added at the end of the root element.
fn render_config_with(dir: &Path, http_port: u16, tcp_port: u16, extra: &str) -> String {
    let config = render_config(dir, http_port, tcp_port);
    match config.rfind("</yandex>") {
        Some(end) if !extra.is_empty() => format!("{}{extra}\n{}", &config[..end], &config[end..]),
        _ => config,
    }
}

/// A `<remote_servers>` section defining cluster `name` with one shard per loopback TCP port, and
/// the `{cluster}` macro.
pub fn remote_servers_xml(name: &str, tcp_ports: &[u16]) -> String {
    let name = xml_escape(name);
    let mut xml = format!("    <remote_servers>\n        <{name}>\n");
    for port in tcp_ports {
        xml.push_str(&format!(
            "            <shard><replica><host>127.0.0.1</host><port>{port}</port></replica></shard>\n"
        ));
    }
    xml.push_str(&format!("        </{name}>\n    </remote_servers>\n"));
    xml.push_str(&format!("    <macros><cluster>{name}</cluster></macros>"));
    xml
}

/// The server side of an HTTPS listener (ClickHouse's `<openSSL><server>`).
#[derive(Debug, Clone)]
pub struct HttpsFiles {
    /// Server certificate chain, PEM.
    pub cert: PathBuf,
    /// Its private key, PEM.
    pub key: PathBuf,
    /// Verify clients against this CA (`<verificationMode>strict</verificationMode>`); `None`:
    /// no client certificate asked.
    pub client_ca: Option<PathBuf>,
}

impl HttpsFiles {
    /// The `<https_port>` and `<openSSL>` elements for `port`.
    fn config_xml(&self, port: u16) -> String {
        let path = |p: &Path| xml_escape(&p.to_string_lossy());
        let verify = match &self.client_ca {
            Some(ca) => {
                format!("<verificationMode>strict</verificationMode><caConfig>{}</caConfig>", path(ca))
            }
            None => "<verificationMode>none</verificationMode>".to_owned(),
        };
        format!(
            "    <https_port>{port}</https_port>\n    <openSSL><server><certificateFile>{}</certificateFile>\
             <privateKeyFile>{}</privateKeyFile>{verify}<loadDefaultCAFile>false</loadDefaultCAFile>\
             <cacheSessions>true</cacheSessions><disableProtocols>sslv2,sslv3</disableProtocols>\
             <preferServerCiphers>true</preferServerCiphers></server></openSSL>",
            path(&self.cert),
            path(&self.key)
        )
    }
}

#[derive(Debug)]
enum Dir {
    Temp(tempfile::TempDir),
    Given(PathBuf),
}

impl Dir {
    fn path(&self) -> &Path {
        match self {
            Dir::Temp(t) => t.path(),
            Dir::Given(p) => p,
        }
    }
}

/// A running throw-away ClickHouse server; stopped on drop.
#[derive(Debug)]
pub struct DevClickHouse {
    child: Option<Child>,
    server: ServerCmd,
    http_port: u16,
    tcp_port: u16,
    /// XML elements added to the rendered config (the cluster's `<remote_servers>`).
    extra_config: String,
    /// HTTPS listener: its files and port (0 until ports are picked).
    https: Option<(HttpsFiles, u16)>,
    // Declared last: removed after the server is stopped in `Drop`.
    dir: Dir,
}

impl DevClickHouse {
    /// Starts a server in a fresh temporary directory (removed on drop).
    pub fn start() -> Result<DevClickHouse, DevChError> {
        let dir = tempfile::Builder::new()
            .prefix("oomlens-devch-")
            .tempdir()
            .map_err(io("creating a temporary directory"))?;
        Self::start_with(Dir::Temp(dir))
    }

    /// Starts a server whose config, data and logs live in `dir` (created if missing, kept).
    pub fn start_in(dir: impl AsRef<Path>) -> Result<DevClickHouse, DevChError> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        let dir = std::fs::canonicalize(dir).map_err(io(format!("resolving {}", dir.display())))?;
        Self::start_with(Dir::Given(dir))
    }

    /// Starts a server (temporary directory) that also serves HTTPS with `tls`
    /// ([`Self::https_url`]).
    pub fn start_https(tls: HttpsFiles) -> Result<DevClickHouse, DevChError> {
        let dir = tempfile::Builder::new()
            .prefix("oomlens-devch-")
            .tempdir()
            .map_err(io("creating a temporary directory"))?;
        Self::start_with_https(Dir::Temp(dir), Some(tls))
    }

    fn start_with(dir: Dir) -> Result<DevClickHouse, DevChError> {
        Self::start_with_https(dir, None)
    }

    fn start_with_https(dir: Dir, tls: Option<HttpsFiles>) -> Result<DevClickHouse, DevChError> {
        let server = server_cmd()?;
        let mut ch = DevClickHouse::unstarted(server, dir)?;
        ch.https = tls.map(|t| (t, 0));
        // A port picked here can be taken by someone else before the server binds it: retry with
        // fresh ports a few times when that is why the server exited.
        let mut attempt = 0;
        loop {
            attempt += 1;
            ch.pick_ports()?;
            match ch.spawn_and_wait() {
                Err(DevChError::Exited { log_tail, .. })
                    if attempt < 3 && log_tail.contains("Address already in use") =>
                {
                    tracing::debug!("dev ClickHouse: port taken, retrying with fresh ports");
                }
                other => return other.map(|()| ch),
            }
        }
    }

    /// A handle with its directories created and no process yet.
    fn unstarted(server: ServerCmd, dir: Dir) -> Result<DevClickHouse, DevChError> {
        for sub in ["data", "tmp", "log", "user_files", "format_schemas"] {
            let p = dir.path().join(sub);
            std::fs::create_dir_all(&p).map_err(io(format!("creating {}", p.display())))?;
        }
        Ok(DevClickHouse {
            child: None,
            server,
            http_port: 0,
            tcp_port: 0,
            extra_config: String::new(),
            https: None,
            dir,
        })
    }

    /// Starts `shards` servers (temporary directories) forming cluster `name`: every server's
    /// config has the same `<remote_servers>` section listing all of them, one shard (with one
    /// replica) per server, in the order returned. Retries with fresh ports when one was taken.
    pub fn start_cluster(name: &str, shards: usize) -> Result<Vec<DevClickHouse>, DevChError> {
        let server = server_cmd()?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut servers = Vec::with_capacity(shards);
            let mut taken = std::collections::HashSet::new();
            let mut fresh_port = || -> Result<u16, DevChError> {
                loop {
                    let port = free_port()?;
                    if taken.insert(port) {
                        return Ok(port);
                    }
                }
            };
            for _ in 0..shards {
                let dir = tempfile::Builder::new()
                    .prefix("oomlens-devch-")
                    .tempdir()
                    .map_err(io("creating a temporary directory"))?;
                let mut ch = DevClickHouse::unstarted(server.clone(), Dir::Temp(dir))?;
                ch.http_port = fresh_port()?;
                ch.tcp_port = fresh_port()?;
                servers.push(ch);
            }
            let tcp_ports: Vec<u16> = servers.iter().map(|s| s.tcp_port).collect();
            let xml = remote_servers_xml(name, &tcp_ports);
            let mut result = Ok(());
            for ch in &mut servers {
                ch.extra_config.clone_from(&xml);
                ch.write_config()?;
                result = ch.spawn_and_wait();
                if result.is_err() {
                    break;
                }
            }
            match result {
                Ok(()) => return Ok(servers),
                Err(DevChError::Exited { log_tail, .. })
                    if attempt < 3 && log_tail.contains("Address already in use") =>
                {
                    tracing::debug!("dev ClickHouse cluster: port taken, retrying with fresh ports");
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts `shards` × `replicas` servers forming cluster `name` with replicated shards
    /// (`internal_replication`), each with its `{shard}` / `{replica}` macros, an interserver
    /// port for fetching parts, and `zookeeper` (the `<zookeeper>` and `<distributed_ddl>`
    /// elements, [`crate::devzk::DevZooKeeper::clickhouse_xml`]). Returned shard by shard:
    /// `[s1r1, s1r2, s2r1, s2r2, …]`.
    pub fn start_replicated_cluster(
        name: &str,
        shards: usize,
        replicas: usize,
        zookeeper: &str,
    ) -> Result<Vec<DevClickHouse>, DevChError> {
        let server = server_cmd()?;
        let mut taken = std::collections::HashSet::new();
        let mut fresh_port = || -> Result<u16, DevChError> {
            loop {
                let port = free_port()?;
                if taken.insert(port) {
                    return Ok(port);
                }
            }
        };
        let mut servers = Vec::with_capacity(shards * replicas);
        let mut interserver = Vec::with_capacity(shards * replicas);
        for _ in 0..shards * replicas {
            let dir = tempfile::Builder::new()
                .prefix("oomlens-devch-")
                .tempdir()
                .map_err(io("creating a temporary directory"))?;
            let mut ch = DevClickHouse::unstarted(server.clone(), Dir::Temp(dir))?;
            ch.http_port = fresh_port()?;
            ch.tcp_port = fresh_port()?;
            interserver.push(fresh_port()?);
            servers.push(ch);
        }
        let name = xml_escape(name);
        let mut remote = format!("    <remote_servers>\n        <{name}>\n");
        for s in 0..shards {
            remote.push_str("            <shard><internal_replication>true</internal_replication>");
            for r in 0..replicas {
                let port = servers[s * replicas + r].tcp_port;
                remote.push_str(&format!("<replica><host>127.0.0.1</host><port>{port}</port></replica>"));
            }
            remote.push_str("</shard>\n");
        }
        remote.push_str(&format!("        </{name}>\n    </remote_servers>\n"));
        for (i, ch) in servers.iter_mut().enumerate() {
            let (s, r) = (i / replicas + 1, i % replicas + 1);
            ch.extra_config = format!(
                "{remote}    <macros><cluster>{name}</cluster><shard>{s:02}</shard><replica>r{s}-{r}</replica></macros>\n    \
                 <interserver_http_port>{}</interserver_http_port><interserver_http_host>127.0.0.1</interserver_http_host>\n{zookeeper}",
                interserver[i]
            );
            ch.write_config()?;
            ch.spawn_and_wait()?;
        }
        Ok(servers)
    }

    fn pick_ports(&mut self) -> Result<(), DevChError> {
        self.http_port = free_port()?;
        self.tcp_port = free_port()?;
        while self.tcp_port == self.http_port {
            self.tcp_port = free_port()?;
        }
        if let Some((files, _)) = self.https.take() {
            let mut port = free_port()?;
            while port == self.http_port || port == self.tcp_port {
                port = free_port()?;
            }
            self.extra_config = files.config_xml(port);
            self.https = Some((files, port));
        }
        self.write_config()
    }

    /// Writes `config.xml` (for the current ports and extra config) and `users.xml`.
    fn write_config(&self) -> Result<(), DevChError> {
        let root = self.dir.path().to_path_buf();
        let config = root.join("config.xml");
        std::fs::write(&config, render_config_with(&root, self.http_port, self.tcp_port, &self.extra_config))
            .map_err(io(format!("writing {}", config.display())))?;
        let users = root.join("users.xml");
        std::fs::write(&users, USERS_TEMPLATE).map_err(io(format!("writing {}", users.display())))?;
        Ok(())
    }

    fn spawn_and_wait(&mut self) -> Result<(), DevChError> {
        let root = self.dir.path().to_path_buf();
        let log = root.join("log");
        let stdout = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log.join("stdout.log"))
            .map_err(io("opening log/stdout.log"))?;
        let stderr = stdout.try_clone().map_err(io("duplicating the stdout log handle"))?;
        let child = Command::new(&self.server.program)
            .args(&self.server.args)
            .arg(format!("--config-file={}", root.join("config.xml").display()))
            .current_dir(&root)
            .env("CLICKHOUSE_WATCHDOG_ENABLE", "0")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .map_err(io(format!("starting {}", self.server.program.display())))?;
        self.child = Some(child);
        match self.wait_ready(START_TIMEOUT) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.kill_and_reap();
                Err(e)
            }
        }
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<(), DevChError> {
        let started = Instant::now();
        loop {
            if ping(self.http_port) {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait().map_err(io("polling the server process"))?
            {
                self.child = None;
                return Err(DevChError::Exited {
                    status,
                    log_dir: self.log_dir().display().to_string(),
                    log_tail: self.log_tail(20),
                });
            }
            if started.elapsed() >= timeout {
                return Err(DevChError::Timeout {
                    port: self.http_port,
                    after: timeout,
                    log_dir: self.log_dir().display().to_string(),
                    log_tail: self.log_tail(20),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last `n` lines of the server's error log and stdout/stderr.
    pub fn log_tail(&self, n: usize) -> String {
        let mut out = String::new();
        for name in ["clickhouse-server.err.log", "stdout.log"] {
            let path = self.log_dir().join(name);
            if let Some(text) = read_tail(&path, 64 * 1024) {
                let lines: Vec<&str> = text.lines().collect();
                let from = lines.len().saturating_sub(n);
                out.push_str(&format!("--- {} ---\n", path.display()));
                for line in &lines[from..] {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        out
    }

    /// Directory with the server's logs.
    pub fn log_dir(&self) -> PathBuf {
        self.dir.path().join("log")
    }

    /// Directory with config, data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// The HTTPS URL (`https://localhost:<port>`) of a server started with [`Self::start_https`].
    pub fn https_url(&self) -> Option<String> {
        self.https.as_ref().map(|(_, port)| format!("https://localhost:{port}"))
    }

    /// HTTP port.
    pub fn http_port(&self) -> u16 {
        self.http_port
    }

    /// Native-protocol port (for `clickhouse-client --port`).
    pub fn tcp_port(&self) -> u16 {
        self.tcp_port
    }

    /// PID of the server process (also its process group id), if running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// True while the server process is running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(_) => {
                self.child = None;
                false
            }
            None => false,
        }
    }

    /// SIGTERM to the server's process group, wait up to [`STOP_TIMEOUT`], then SIGKILL.
    pub fn stop(&mut self) -> Result<(), DevChError> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        signal_group(child.id(), libc::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if child.try_wait().map_err(io("polling the server process"))?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        signal_group(child.id(), libc::SIGKILL);
        child.wait().map_err(io("waiting for the killed server"))?;
        Ok(())
    }

    /// SIGKILL the server (an outage); [`DevClickHouse::restart`] brings it back.
    pub fn kill(&mut self) -> Result<(), DevChError> {
        if let Some(mut child) = self.child.take() {
            signal_group(child.id(), libc::SIGKILL);
            child.wait().map_err(io("waiting for the killed server"))?;
        }
        Ok(())
    }

    fn kill_and_reap(&mut self) {
        let _ = self.kill();
    }

    /// Starts the server again on the same ports and data directory (after `kill` or `stop`).
    pub fn restart(&mut self) -> Result<(), DevChError> {
        if self.is_running() {
            return Err(DevChError::AlreadyRunning(self.pid().unwrap_or(0)));
        }
        self.spawn_and_wait()
    }

    /// Starts a replica again that was killed between writing a part and registering it in
    /// ZooKeeper, as an operator does: with the `force_restore_data` flag, the server moves the
    /// parts ZooKeeper does not know to `detached/` instead of refusing to start. (It refuses when
    /// such parts hold more than half of a table's rows — with a test's few rows, one part.)
    pub fn restart_restoring(&mut self) -> Result<(), DevChError> {
        let flags = self.dir().join("data").join("flags");
        std::fs::create_dir_all(&flags).map_err(io("creating the flags directory"))?;
        std::fs::write(flags.join("force_restore_data"), b"")
            .map_err(io("writing the force_restore_data flag"))?;
        self.restart()
    }
}

impl Drop for DevClickHouse {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!(error = %e, "stopping the dev ClickHouse failed");
            self.kill_and_reap();
        }
    }
}

/// Sends `sig` to the process group led by `pid` (the server was spawned with `process_group(0)`).
fn signal_group(pid: u32, sig: libc::c_int) {
    if let Ok(pgid) = libc::pid_t::try_from(pid)
        && pgid > 1
    {
        // A negative pid addresses the process group we created for the server, never our own.
        send_signal(-pgid, sig);
    }
}

/// Sends `sig` to one child process `pid` (e.g. SIGTERM to an agent the demo started).
pub fn signal_process(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid)
        && pid > 1
    {
        send_signal(pid, sig);
    }
}

#[allow(unsafe_code)]
fn send_signal(target: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill(2) takes plain integers and has no memory-safety preconditions.
    unsafe {
        libc::kill(target, sig);
    }
}

/// The last `max` bytes of a file, lossily decoded.
fn read_tail(path: &Path, max: u64) -> Option<String> {
    use std::io::{Seek as _, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(max))).ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// One `GET /ping` over HTTP/1.0; true when the body is `Ok.`.
fn ping(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    if stream.write_all(b"GET /ping HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut response = Vec::new();
    if stream.read_to_end(&mut response).is_err() {
        return false;
    }
    let text = String::from_utf8_lossy(&response);
    text.starts_with("HTTP/1.")
        && text.contains(" 200 ")
        && text.split("\r\n\r\n").nth(1).map(str::trim) == Some("Ok.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_rendered_from_the_shared_template() {
        let cfg = render_config(Path::new("/tmp/x&y"), 1234, 5678);
        assert!(cfg.contains("<http_port>1234</http_port>"), "{cfg}");
        assert!(cfg.contains("<tcp_port>5678</tcp_port>"), "{cfg}");
        assert!(cfg.contains("<path>/tmp/x&amp;y/data/</path>"), "{cfg}");
        assert!(!cfg.contains('@'), "{cfg}");
    }

    #[test]
    fn cluster_config_names_every_shard() {
        let xml = remote_servers_xml("oomlens_test", &[9001, 9002]);
        let cfg = render_config_with(Path::new("/tmp/x"), 1234, 9001, &xml);
        assert!(cfg.contains("<oomlens_test>"), "{cfg}");
        assert_eq!(cfg.matches("<shard><replica><host>127.0.0.1</host>").count(), 2, "{cfg}");
        assert!(cfg.contains("<port>9002</port>"), "{cfg}");
        let end = cfg.find("</remote_servers>").unwrap();
        assert!(end < cfg.rfind("</yandex>").unwrap(), "{cfg}");
        assert_eq!(
            render_config_with(Path::new("/tmp/x"), 1, 2, ""),
            render_config(Path::new("/tmp/x"), 1, 2)
        );
    }

    #[test]
    fn ping_of_a_closed_port_is_false() {
        let port = free_port().unwrap();
        assert!(!ping(port));
    }
}
