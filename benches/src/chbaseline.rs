//! The two baselines the whole-pipeline throughput is compared with, on the same rows:
//!
//! * **(a) the database's own limit**: what the pipeline stored is dumped with
//!   `clickhouse-client --query "SELECT * FROM db.t FORMAT RowBinary"` (the same bytes the
//!   collector's RowBinary inserts carry: the column order is the row structs'), then re-inserted
//!   into empty copies of the tables (`CREATE TABLE copy AS db.t`) with
//!   `clickhouse-client --query "INSERT INTO copy FORMAT RowBinary" < file`, timed.
//! * **(b) a Telegraf/Vector-style pipeline**: the same rows dumped as `JSONEachRow` and POSTed to
//!   ClickHouse's HTTP interface (`INSERT INTO copy FORMAT JSONEachRow`) in chunks of at most
//!   `chunk_bytes` (Vector's ClickHouse sink batches 10 MB by default), timed. The JSON is rendered
//!   before the clock starts, so the baseline is charged only for the transfer and the server-side
//!   parse — generous to it.
//! * **(a′) RowBinary over HTTP**: the RowBinary dump POSTed in one request
//!   (`INSERT INTO copy FORMAT RowBinary`) — the collector's own wire format to ClickHouse, without
//!   the collector; shown next to (a) because 18.16's `clickhouse-client` parses RowBinary on the
//!   client side and is not always the faster of the two.
//!
//! Both use `clickhouse-client` on the native port (dumps, DDL, counts) and plain HTTP/1.1 over a
//! `TcpStream` (`Connection: close`, one request per chunk) for the POSTs.

use std::fs::File;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A baseline step failed.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    /// `clickhouse-client` is missing or failed.
    #[error("clickhouse-client {what}: {detail}")]
    Client {
        /// What was being done.
        what: String,
        /// stderr or the spawn error.
        detail: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// An HTTP insert failed.
    #[error("HTTP insert into {table}: {detail}")]
    Http {
        /// The table the rows were inserted into.
        table: String,
        /// Status line and body, or the I/O error.
        detail: String,
    },
}

/// Where the server is.
#[derive(Debug, Clone)]
pub struct Server {
    /// Native protocol port (`clickhouse-client --port`).
    pub tcp_port: u16,
    /// HTTP port.
    pub http_port: u16,
}

fn client_binary() -> PathBuf {
    for dir in
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default()
    {
        let p = dir.join("clickhouse-client");
        if p.is_file() {
            return p;
        }
    }
    PathBuf::from("/usr/bin/clickhouse-client")
}

impl Server {
    fn client(&self) -> Command {
        let mut c = Command::new(client_binary());
        c.args(["--host", "127.0.0.1", "--port", &self.tcp_port.to_string()]);
        c
    }

    /// Runs one statement; returns its stdout (trimmed).
    pub fn query(&self, sql: &str) -> Result<String, BaselineError> {
        let out = self.client().args(["--query", sql]).stdin(Stdio::null()).output().map_err(|e| {
            BaselineError::Client { what: format!("spawn for {sql:?}"), detail: e.to_string() }
        })?;
        if !out.status.success() {
            return Err(BaselineError::Client {
                what: sql.to_owned(),
                detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// `SELECT count() FROM table`.
    pub fn count(&self, table: &str) -> Result<u64, BaselineError> {
        self.count_sql(&format!("SELECT count() FROM {table}"))
    }

    /// A query answering one unsigned integer.
    pub fn count_sql(&self, sql: &str) -> Result<u64, BaselineError> {
        let text = self.query(sql)?;
        text.parse().map_err(|_| BaselineError::Client { what: sql.to_owned(), detail: text })
    }

    /// Writes `SELECT * FROM table FORMAT <format>` to `out`; returns the bytes written.
    pub fn dump(&self, table: &str, format: &str, out: &Path) -> Result<u64, BaselineError> {
        let io = |source| BaselineError::Io { path: out.to_owned(), source };
        let file = File::create(out).map_err(io)?;
        let sql = format!("SELECT * FROM {table} FORMAT {format}");
        let status = self
            .client()
            .args(["--query", &sql])
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| BaselineError::Client {
                what: format!("spawn for {sql:?}"),
                detail: e.to_string(),
            })?;
        if !status.status.success() {
            return Err(BaselineError::Client {
                what: sql,
                detail: String::from_utf8_lossy(&status.stderr).trim().to_owned(),
            });
        }
        Ok(std::fs::metadata(out).map_err(io)?.len())
    }

    /// (Re)creates `copy` empty, with the structure and engine of `source`.
    pub fn empty_copy(&self, source: &str, copy: &str) -> Result<(), BaselineError> {
        if let Some((db, _)) = copy.split_once('.') {
            self.query(&format!("CREATE DATABASE IF NOT EXISTS {db}"))?;
        }
        self.query(&format!("DROP TABLE IF EXISTS {copy}"))?;
        self.query(&format!("CREATE TABLE {copy} AS {source}"))?;
        Ok(())
    }

    /// `clickhouse-client --query "INSERT INTO table FORMAT RowBinary" < file`, timed (the
    /// client's start-up included: it is part of that way of loading data).
    pub fn insert_rowbinary(&self, table: &str, file: &Path) -> Result<Duration, BaselineError> {
        let input = File::open(file).map_err(|source| BaselineError::Io { path: file.to_owned(), source })?;
        let sql = format!("INSERT INTO {table} FORMAT RowBinary");
        let started = Instant::now();
        let out = self
            .client()
            .args(["--query", &sql])
            .stdin(input)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| BaselineError::Client {
                what: format!("spawn for {sql:?}"),
                detail: e.to_string(),
            })?;
        let took = started.elapsed();
        if !out.status.success() {
            return Err(BaselineError::Client {
                what: sql,
                detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(took)
    }

    /// Splits a JSONEachRow file into chunks of whole lines of at most `chunk_bytes` (a longer
    /// line is a chunk of its own). Done before timing.
    pub fn json_chunks(file: &Path, chunk_bytes: usize) -> Result<Vec<Vec<u8>>, BaselineError> {
        let io = |source| BaselineError::Io { path: file.to_owned(), source };
        let mut reader = BufReader::new(File::open(file).map_err(io)?);
        let mut chunks = Vec::new();
        let mut cur = Vec::with_capacity(chunk_bytes.min(64 << 20));
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = reader.read_until(b'\n', &mut line).map_err(io)?;
            if n == 0 {
                break;
            }
            if !cur.is_empty() && cur.len() + line.len() > chunk_bytes {
                chunks.push(std::mem::replace(&mut cur, Vec::with_capacity(chunk_bytes.min(64 << 20))));
            }
            cur.extend_from_slice(&line);
        }
        if !cur.is_empty() {
            chunks.push(cur);
        }
        Ok(chunks)
    }

    /// POSTs each chunk as `INSERT INTO table FORMAT <format>` over HTTP, one connection per
    /// request; returns the total time.
    pub fn insert_http(
        &self,
        table: &str,
        format: &str,
        chunks: &[Vec<u8>],
    ) -> Result<Duration, BaselineError> {
        let query = format!("INSERT INTO {table} FORMAT {format}");
        let path = format!("/?query={}", percent_encode(&query));
        let started = Instant::now();
        for chunk in chunks {
            self.post(table, &path, chunk)?;
        }
        Ok(started.elapsed())
    }

    fn post(&self, table: &str, path: &str, body: &[u8]) -> Result<(), BaselineError> {
        let err = |detail: String| BaselineError::Http { table: table.to_owned(), detail };
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.http_port));
        let mut s = TcpStream::connect(addr).map_err(|e| err(e.to_string()))?;
        s.set_nodelay(true).map_err(|e| err(e.to_string()))?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).map_err(|e| err(e.to_string()))?;
        s.write_all(body).map_err(|e| err(e.to_string()))?;
        let mut response = Vec::new();
        s.read_to_end(&mut response).map_err(|e| err(e.to_string()))?;
        let text = String::from_utf8_lossy(&response);
        let status_ok = text.lines().next().is_some_and(|l| l.split_whitespace().nth(1) == Some("200"));
        if !status_ok {
            return Err(err(text.chars().take(600).collect()));
        }
        Ok(())
    }
}

/// Percent-encodes a query string value (everything but unreserved characters).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_queries() {
        assert_eq!(percent_encode("INSERT INTO a.b FORMAT X"), "INSERT%20INTO%20a.b%20FORMAT%20X");
        assert_eq!(percent_encode("a=1&b"), "a%3D1%26b");
    }

    #[test]
    fn json_chunks_keep_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.json");
        std::fs::write(&path, "{\"a\":1}\n{\"a\":22}\n{\"a\":333}\n").unwrap();
        let chunks = Server::json_chunks(&path, 18).unwrap();
        assert_eq!(chunks, vec![b"{\"a\":1}\n{\"a\":22}\n".to_vec(), b"{\"a\":333}\n".to_vec()]);
        let one = Server::json_chunks(&path, 1).unwrap();
        assert_eq!(one.len(), 3);
    }
}
