//! The durable peer a user would pick instead of Baton: Redis with `appendonly yes` and
//! `appendfsync always` (and, for reference, Redis keeping nothing), started by the bench
//! on a Unix socket in its temp dir and driven with the same shapes of load as batond.
//!
//! The client is a minimal RESP one, as the batond side is a minimal JSON-lines one, so
//! that both measure the server and not a client library.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

use super::clients;

/// A Redis server started for the bench; killed when dropped.
pub struct Redis {
    child: Child,
    pub socket: PathBuf,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `redis-server` in `dir` on a Unix socket: durable (AOF, fsync before every
/// answer) or keeping nothing. None when redis-server is not installed.
pub async fn start(dir: &Path, durable: bool) -> Option<Redis> {
    std::fs::create_dir_all(dir).ok()?;
    let socket = dir.join("redis.sock");
    let persistence: &[&str] = if durable {
        &["--appendonly", "yes", "--appendfsync", "always"]
    } else {
        &["--appendonly", "no"]
    };
    let child = Command::new("redis-server")
        .args(["--port", "0", "--save", "", "--unixsocketperm", "700"])
        .arg("--unixsocket")
        .arg(&socket)
        .arg("--dir")
        .arg(dir)
        .args(persistence)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let redis = Redis { child, socket };
    for _ in 0..500 {
        if UnixStream::connect(&redis.socket).await.is_ok() {
            return Some(redis);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    None
}

/// One RESP reply, reduced to what the bench checks.
#[derive(Debug, PartialEq)]
pub enum Reply {
    Ok,
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Error(String),
}

pub struct Conn {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    line: String,
}

/// A command as RESP: an array of bulk strings.
pub fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

impl Conn {
    pub async fn open(socket: &Path) -> Conn {
        let (r, w) = UnixStream::connect(socket).await.unwrap().into_split();
        Conn {
            reader: BufReader::new(r),
            writer: w,
            line: String::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.unwrap();
    }

    pub async fn reply(&mut self) -> Reply {
        self.line.clear();
        self.reader.read_line(&mut self.line).await.unwrap();
        let text = self.line.trim_end();
        let (kind, rest) = text.split_at(1);
        match kind {
            "+" => Reply::Ok,
            "-" => Reply::Error(rest.to_string()),
            ":" => Reply::Int(rest.parse().unwrap()),
            "$" => {
                let len: i64 = rest.parse().unwrap();
                if len < 0 {
                    return Reply::Bulk(None);
                }
                let mut data = vec![0; len as usize + 2];
                self.reader.read_exact(&mut data).await.unwrap();
                data.truncate(len as usize);
                Reply::Bulk(Some(data))
            }
            other => panic!("unexpected RESP reply type {other}: {text}"),
        }
    }

    pub async fn call(&mut self, args: &[&[u8]]) -> Reply {
        let mut out = Vec::with_capacity(64);
        command(&mut out, args);
        self.send(&out).await;
        self.reply().await
    }

    /// Loads a Lua script; its SHA1 for EVALSHA.
    async fn load(&mut self, script: &str) -> Vec<u8> {
        match self.call(&[b"SCRIPT", b"LOAD", script.as_bytes()]).await {
            Reply::Bulk(Some(sha)) => sha,
            other => panic!("SCRIPT LOAD answered {other:?}"),
        }
    }
}

/// Compare-and-set on a version kept beside the value: the same contract as Baton's Set
/// with `expected_version`.
const CAS: &str = "local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0') \
    if v ~= tonumber(ARGV[1]) then return -1 end \
    redis.call('HSET', KEYS[1], 'v', v + 1, 'd', ARGV[2]) return v + 1";

/// Deletes the lock only if it still holds this owner's token.
const UNLOCK: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
    return redis.call('DEL', KEYS[1]) else return 0 end";

/// Lua CAS Sets per second from `conns` connections, each on its own key.
pub async fn cas_sets(socket: &Path, conns: usize, per_conn: usize) -> (f64, u64) {
    let sha = Conn::open(socket).await.load(CAS).await;
    // Each run its own keys, each starting from version 0.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    clients(conns, per_conn, |c| {
        let socket = socket.to_path_buf();
        let sha = sha.clone();
        async move {
            let mut conn = Conn::open(&socket).await;
            let key = format!("cas-{run}-{c}");
            let (mut version, mut errors) = (0i64, 0);
            for i in 0..per_conn {
                let (v, value) = (version.to_string(), i.to_string());
                let args: [&[u8]; 6] = [
                    b"EVALSHA",
                    &sha,
                    b"1",
                    key.as_bytes(),
                    v.as_bytes(),
                    value.as_bytes(),
                ];
                match conn.call(&args).await {
                    Reply::Int(n) if n == version + 1 => version = n,
                    other => {
                        errors += 1;
                        eprintln!("redis CAS answered {other:?}");
                    }
                }
            }
            errors
        }
    })
    .await
}

/// `SET key token NX PX` + Lua unlock pairs per second from `conns` connections on
/// distinct keys: the usual Redis lock.
pub async fn lock_pairs(socket: &Path, conns: usize, per_conn: usize) -> (f64, u64) {
    let sha = Conn::open(socket).await.load(UNLOCK).await;
    clients(conns, per_conn, |c| {
        let socket = socket.to_path_buf();
        let sha = sha.clone();
        async move {
            let mut conn = Conn::open(&socket).await;
            let mut errors = 0;
            for i in 0..per_conn {
                let key = format!("lock:cycle/c{c}/k{i}.rs");
                let token = format!("bench-{c}-{i}");
                let set: [&[u8]; 6] = [
                    b"SET",
                    key.as_bytes(),
                    token.as_bytes(),
                    b"NX",
                    b"PX",
                    b"600000",
                ];
                if conn.call(&set).await != Reply::Ok {
                    errors += 1;
                    continue;
                }
                let unlock: [&[u8]; 5] = [b"EVALSHA", &sha, b"1", key.as_bytes(), token.as_bytes()];
                if conn.call(&unlock).await != Reply::Int(1) {
                    errors += 1;
                }
            }
            errors
        }
    })
    .await
}

/// SETs per second on one connection keeping `window` in flight.
pub async fn windowed_sets(socket: &Path, window: usize, total: usize) -> (f64, u64) {
    let mut conn = Conn::open(socket).await;
    let (mut sent, mut answered, mut errors) = (0, 0, 0);
    let start = Instant::now();
    while answered < total {
        let mut out = Vec::new();
        while sent < total && sent - answered < window {
            let (key, value) = (format!("pipe-{sent}"), sent.to_string());
            command(&mut out, &[b"SET", key.as_bytes(), value.as_bytes()]);
            sent += 1;
        }
        if !out.is_empty() {
            conn.send(&out).await;
        }
        if conn.reply().await != Reply::Ok {
            errors += 1;
        }
        answered += 1;
    }
    (total as f64 / start.elapsed().as_secs_f64(), errors)
}
