//! Configuration, resolved in one place: command-line flags over the process environment
//! over the env file (`BATON_ENV_FILE`, default `$BATON_HOME/.env`) over defaults.

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Flags of `batond`; each mirrors one environment variable.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct Flags {
    /// State directory (BATON_HOME) [default: ~/.baton]
    #[arg(long, value_name = "DIR")]
    pub home: Option<String>,
    /// Unix socket path (BATON_SOCKET_PATH) [default: $BATON_HOME/baton.sock]
    #[arg(long, value_name = "PATH")]
    pub socket: Option<String>,
    /// Database URL: sqlite://PATH or postgres://USER@HOST/DB (BATON_DATABASE_URL) [default: sqlite://$BATON_HOME/baton.db]
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// With PostgreSQL: how long after an instance's last heartbeat the others end its connections' leases and sessions (BATON_INSTANCE_TIMEOUT_SECS) [default: 15]
    #[arg(long, value_name = "SECS")]
    pub instance_timeout_secs: Option<String>,
    /// Env file to read (BATON_ENV_FILE) [default: $BATON_HOME/.env]
    #[arg(long, value_name = "PATH")]
    pub env_file: Option<String>,
    /// Socket file mode, octal (BATON_SOCKET_MODE) [default: 0600]
    #[arg(long, value_name = "OCTAL")]
    pub socket_mode: Option<String>,
    /// Default resource lock lease in seconds (BATON_LOCK_TTL_SECS) [default: 300]
    #[arg(long, value_name = "SECS")]
    pub lock_ttl_secs: Option<String>,
    /// Default task node lease in seconds (BATON_NODE_TIMEOUT_SECS) [default: 300]
    #[arg(long, value_name = "SECS")]
    pub node_timeout_secs: Option<String>,
    /// Journal events included in an acquired node's context (BATON_CONTEXT_EVENT_LIMIT) [default: 50]
    #[arg(long, value_name = "N")]
    pub context_event_limit: Option<String>,
    /// Longest request line accepted, in bytes (BATON_MAX_LINE_BYTES) [default: 1048576]
    #[arg(long, value_name = "BYTES")]
    pub max_line_bytes: Option<String>,
    /// Largest stored value, in bytes of JSON (BATON_MAX_VALUE_BYTES) [default: 1048576]
    #[arg(long, value_name = "BYTES")]
    pub max_value_bytes: Option<String>,
    /// Root that absolute file:/dir: lock paths must lie in (BATON_WORKSPACE) [default: the working directory]
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<String>,
    /// How long SIGTERM waits for clients to take their answers before closing them, in milliseconds (BATON_SHUTDOWN_GRACE_MS) [default: 5000]
    #[arg(long, value_name = "MS")]
    pub shutdown_grace_ms: Option<String>,
    /// Answer bytes a client may leave unread before batond stops reading its requests until it reads (BATON_MAX_UNREAD_BYTES) [default: 8388608]
    #[arg(long, value_name = "BYTES")]
    pub max_unread_bytes: Option<String>,
    /// Most bytes of subscription events queued for all clients together; past it, the subscribers furthest behind are ended (BATON_MAX_SUBSCRIBER_BYTES) [default: 67108864]
    #[arg(long, value_name = "BYTES")]
    pub max_subscriber_bytes: Option<String>,
    /// Serve /metrics for Prometheus on https://ADDR:PORT (with BATON_TLS_CERT and BATON_TLS_KEY), or on http://ADDR:PORT on loopback only (BATON_HTTP_LISTEN) [default: off]
    #[arg(long = "http", value_name = "ADDR:PORT")]
    pub http_listen: Option<String>,
    /// Also listen on the network: tls://ADDR:PORT, or tcp://ADDR:PORT on loopback only; repeatable or comma-separated (BATON_LISTEN) [default: the Unix socket only]
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    pub listen: Vec<String>,
    /// The TLS listener's certificate chain, PEM (BATON_TLS_CERT)
    #[arg(long, value_name = "PATH")]
    pub tls_cert: Option<String>,
    /// The TLS listener's private key, PEM (BATON_TLS_KEY)
    #[arg(long, value_name = "PATH")]
    pub tls_key: Option<String>,
    /// Require TLS clients to present a certificate signed by this CA, PEM (BATON_TLS_CLIENT_CA)
    #[arg(long, value_name = "PATH")]
    pub tls_client_ca: Option<String>,
    /// How long a network connection may take to authenticate, from connecting, before it is closed, in milliseconds (BATON_AUTH_TIMEOUT_MS) [default: 10000]
    #[arg(long, value_name = "MS")]
    pub auth_timeout_ms: Option<String>,
    /// Network connections each listener holds before they authenticate; one more is closed at once (BATON_MAX_UNAUTHENTICATED) [default: 256]
    #[arg(long, value_name = "N")]
    pub max_unauthenticated: Option<String>,
    /// How long an HTTP(S) client may take to send a request's headers before its connection is closed, in milliseconds (BATON_HTTP_HEADER_TIMEOUT_MS) [default: 10000]
    #[arg(long, value_name = "MS")]
    pub http_header_timeout_ms: Option<String>,
    /// How long an MCP session at the HTTP listener's `/mcp` may stay idle before it ends (and with it the agent session it joined), in milliseconds (BATON_MCP_IDLE_MS) [default: 300000]
    #[arg(long, value_name = "MS")]
    pub mcp_idle_ms: Option<String>,
    /// Versions of each key kept in its history, or `all`; older ones are removed in the background (BATON_HISTORY_KEEP) [default: 100]
    #[arg(long, value_name = "N")]
    pub history_keep: Option<String>,
    /// Journal events kept: a count (1000000) or an age (7d, 12h, 30m), or `all`; older ones are removed in the background (BATON_JOURNAL_RETAIN) [default: all]
    #[arg(long, value_name = "N|AGE")]
    pub journal_retain: Option<String>,
    /// How Unix-socket connections are trusted: admin (by the socket's file mode) or token (they authenticate too) (BATON_UNIX_AUTH) [default: admin]
    #[arg(long, value_name = "MODE")]
    pub unix_auth: Option<String>,
}

/// A network listener: where, and whether it speaks TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listen {
    pub tls: bool,
    pub addr: std::net::SocketAddr,
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "tls" } else { "tcp" };
        write!(f, "{scheme}://{}", self.addr)
    }
}

/// The PEM files of the TLS listeners.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by this CA.
    pub client_ca: Option<PathBuf>,
}

/// Where the state lives (`BATON_DATABASE_URL`).
#[derive(Clone)]
pub enum Database {
    /// An embedded SQLite file, this daemon's alone.
    Sqlite(PathBuf),
    /// A PostgreSQL database any number of batond share. The URL may hold a password: it is
    /// shown only through [`Database::shown`].
    Postgres(String),
}

impl Database {
    /// The SQLite file, when the state lives in one.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            Database::Sqlite(path) => Some(path),
            Database::Postgres(_) => None,
        }
    }

    /// How logs and errors name it: the path, or the URL without its password.
    pub fn shown(&self) -> String {
        match self {
            Database::Sqlite(path) => path.display().to_string(),
            Database::Postgres(url) => without_password(url),
        }
    }
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown())
    }
}

/// `postgres://user:secret@host/db` as `postgres://user:***@host/db`.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((user, host)) if user.contains(':') => {
            let name = user.split(':').next().unwrap_or("");
            format!("{scheme}://{name}:***@{host}")
        }
        _ => url.to_string(),
    }
}

/// How much of the journal `BATON_JOURNAL_RETAIN` keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalRetain {
    /// Every event (until CompactJournal).
    All,
    /// The last this many events.
    Events(u64),
    /// Events younger than this many milliseconds.
    Age(u64),
}

impl JournalRetain {
    /// Parses `1000000`, `7d`, `12h`, `30m`, `90s` or `all`; `what` names the source.
    fn parse(raw: &str, what: &str) -> Result<JournalRetain, ConfigError> {
        let raw = raw.trim();
        let refuse = || {
            ConfigError(format!(
                "{what} is `{raw}`; give a number of events (e.g. 1000000), an age with a unit (e.g. 7d, 12h, 30m, 90s) or all"
            ))
        };
        if raw == "all" {
            return Ok(JournalRetain::All);
        }
        if let Ok(n) = raw.parse::<u64>() {
            return match n {
                0 => Err(refuse()),
                n => Ok(JournalRetain::Events(n)),
            };
        }
        let unit_ms = match raw.chars().last() {
            Some('d') => 86_400_000,
            Some('h') => 3_600_000,
            Some('m') => 60_000,
            Some('s') => 1_000,
            _ => return Err(refuse()),
        };
        match raw[..raw.len() - 1].parse::<u64>() {
            Ok(n) if n > 0 => n
                .checked_mul(unit_ms)
                .map(JournalRetain::Age)
                .ok_or_else(refuse),
            _ => Err(refuse()),
        }
    }
}

/// The resolved configuration of one daemon.
#[derive(Debug, Clone)]
pub struct Config {
    pub home: PathBuf,
    pub socket_path: PathBuf,
    pub database: Database,
    /// With PostgreSQL: how long an instance may miss heartbeats before the others end its
    /// connection-bound leases and sessions.
    pub instance_timeout_secs: u64,
    /// The env file that was read, if one existed.
    pub env_file: Option<PathBuf>,
    pub socket_mode: u32,
    pub lock_ttl_secs: u64,
    pub node_timeout_secs: u64,
    pub context_event_limit: u64,
    pub max_line_bytes: usize,
    pub max_value_bytes: usize,
    pub workspace: PathBuf,
    /// How long a shutdown waits for connections to finish before closing them.
    pub shutdown_grace_ms: u64,
    /// Most bytes of subscription events queued and unread, all connections together.
    pub max_subscriber_bytes: usize,
    /// Answer bytes a connection may have unread before batond stops reading it.
    pub max_unread_bytes: usize,
    /// Network listeners (`BATON_LISTEN`), besides the Unix socket.
    pub listen: Vec<Listen>,
    /// The HTTP listener (`BATON_HTTP_LISTEN`): /metrics.
    pub http_listen: Option<Listen>,
    /// Certificate and key of the TLS listeners; set whenever one is configured.
    pub tls: Option<TlsFiles>,
    /// How long a network connection may take, from connecting, to authenticate.
    pub auth_timeout_ms: u64,
    /// Unauthenticated network connections each listener holds at most.
    pub max_unauthenticated: usize,
    /// How long an HTTP(S) client may take to send a request's headers.
    pub http_header_timeout_ms: u64,
    /// How long an MCP session at `/mcp` may stay idle before it ends.
    pub mcp_idle_ms: u64,
    /// Unix-socket connections authenticate like network ones (`BATON_UNIX_AUTH=token`)
    /// instead of acting as admin.
    pub unix_auth_token: bool,
    /// Versions kept per key (`BATON_HISTORY_KEEP`); None keeps them all.
    pub history_keep: Option<u64>,
    /// How much of the journal is kept (`BATON_JOURNAL_RETAIN`).
    pub journal_retain: JournalRetain,
    /// For tests only: run on a manual clock starting at this wall time (epoch ms), moved
    /// by the `AdvanceClock` method (`BATON_TEST_CLOCK_MS`; no flag).
    pub test_clock_ms: Option<i64>,
    /// For tests only: this daemon's wall clock runs this many milliseconds off, as on a
    /// host whose time is wrong (`BATON_TEST_CLOCK_SKEW_MS`; no flag).
    pub test_clock_skew_ms: i64,
    /// For tests only: on PostgreSQL, every Nth commit's answer is treated as lost, as
    /// when the connection breaks during COMMIT, so the daemon must find out whether it
    /// committed (`BATON_TEST_LOSE_COMMIT_ANSWERS`; 0, the default, is off; no flag).
    pub test_lose_commit_answers: u64,
}

/// A configuration value that could not be used; the message names where it came from.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

#[derive(Clone, Copy)]
enum Source {
    Flag,
    Env,
    EnvFile,
}

struct Layers<'a> {
    flags: HashMap<&'static str, String>,
    env: &'a dyn Fn(&str) -> Option<String>,
    file: HashMap<String, String>,
    file_path: Option<PathBuf>,
    user_home: Option<PathBuf>,
}

impl Layers<'_> {
    fn get(&self, name: &'static str) -> Option<(String, Source)> {
        if let Some(v) = self.flags.get(name) {
            return Some((v.clone(), Source::Flag));
        }
        if let Some(v) = (self.env)(name).filter(|v| !v.is_empty()) {
            return Some((v, Source::Env));
        }
        self.file
            .get(name)
            .filter(|v| !v.is_empty())
            .map(|v| (v.clone(), Source::EnvFile))
    }

    fn describe(&self, name: &str, source: Source) -> String {
        match source {
            Source::Flag => format!("--{}", flag_name(name)),
            Source::Env => format!("{name} (environment)"),
            Source::EnvFile => format!(
                "{name} (env file {})",
                self.file_path
                    .as_deref()
                    .map(Path::display)
                    .map(|d| d.to_string())
                    .unwrap_or_default()
            ),
        }
    }

    fn path(&self, name: &'static str) -> Result<Option<PathBuf>, ConfigError> {
        self.get(name)
            .map(|(v, source)| {
                expand_tilde(&v, self.user_home.as_deref(), &self.describe(name, source))
            })
            .transpose()
    }

    fn number<T>(&self, name: &'static str, default: T, min: T) -> Result<T, ConfigError>
    where
        T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
    {
        let Some((raw, source)) = self.get(name) else {
            return Ok(default);
        };
        match raw.trim().parse::<T>() {
            Ok(v) if v >= min => Ok(v),
            _ => Err(ConfigError(format!(
                "{} is `{raw}`; it must be a whole number of at least {min}",
                self.describe(name, source)
            ))),
        }
    }

    /// A whole number from `min` to `max`; `why` says what the ceiling protects.
    fn number_within<T>(
        &self,
        name: &'static str,
        default: T,
        (min, max): (T, T),
        why: &str,
    ) -> Result<T, ConfigError>
    where
        T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
    {
        let value = self.number(name, default, min)?;
        match self.get(name) {
            Some((raw, source)) if value > max => Err(ConfigError(format!(
                "{} is `{raw}`; it must be at most {max} ({why})",
                self.describe(name, source)
            ))),
            _ => Ok(value),
        }
    }
}

/// The largest `BATON_MAX_VALUE_BYTES`: one value and its names always fit in a page of
/// an answer (`methods::paging`).
pub const MAX_VALUE_BYTES_CAP: usize = 7 << 20;

fn flag_name(var: &str) -> String {
    let stem = var
        .trim_start_matches("BATON_")
        .to_ascii_lowercase()
        .replace('_', "-");
    match stem.as_str() {
        "socket-path" => "socket".into(),
        other => other.into(),
    }
}

/// Refuses a file or directory another user could have written: one owned by someone other
/// than this user or root, or writable by its group or by others (a directory with the
/// sticky bit, like /tmp, is accepted when `allow_sticky`: nobody else can replace what is
/// in it). A symlink is judged by what it points to. A path that does not exist passes.
pub fn check_trusted(path: &Path, what: &str, allow_sticky: bool) -> Result<(), ConfigError> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(ConfigError(format!(
                "cannot inspect {what} {} ({e}); check its permissions",
                path.display()
            )))
        }
    };
    let shown = match std::fs::symlink_metadata(path) {
        Ok(link) if link.file_type().is_symlink() => match std::fs::canonicalize(path) {
            Ok(target) => format!("{} (a symlink to {})", path.display(), target.display()),
            Err(_) => format!("{} (a symlink)", path.display()),
        },
        _ => path.display().to_string(),
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me && meta.uid() != 0 {
        return Err(ConfigError(format!(
            "{what} {shown} belongs to another user (uid {}), so batond will not trust it; run `chown {me} {}` if it is yours, or choose another path",
            meta.uid(),
            path.display()
        )));
    }
    let mode = meta.permissions().mode();
    let sticky_dir = meta.is_dir() && mode & 0o1000 != 0;
    if mode & 0o022 != 0 && !(allow_sticky && sticky_dir) {
        return Err(ConfigError(format!(
            "{what} {shown} is writable by other users (mode {:04o}), who could replace the socket, the database or the env file; run `chmod go-w {}`",
            mode & 0o7777,
            path.display()
        )));
    }
    Ok(())
}

/// Parses `BATON_LISTEN`: comma-separated `tls://ADDR:PORT` and `tcp://ADDR:PORT`; plain
/// TCP only on a loopback address.
fn parse_listen(raw: &str, what: &str) -> Result<Vec<Listen>, ConfigError> {
    let mut listen = Vec::new();
    for url in raw.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("tls://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("tcp://") {
            (false, rest)
        } else {
            return Err(ConfigError(format!(
                "{what} has `{url}`; write tls://ADDR:PORT (e.g. tls://0.0.0.0:7420) or tcp://127.0.0.1:PORT"
            )));
        };
        let rest = rest.trim_end_matches('/');
        let addr = match rest.strip_prefix("localhost:") {
            Some(port) => format!("127.0.0.1:{port}"),
            None => rest.to_string(),
        };
        let addr: std::net::SocketAddr = addr.parse().map_err(|_| {
            ConfigError(format!(
                "{what} has `{url}`, whose address is not IP:PORT; write e.g. tls://0.0.0.0:7420, tls://[::]:7420 or tcp://127.0.0.1:7420"
            ))
        })?;
        if !tls && !addr.ip().is_loopback() {
            return Err(ConfigError(format!(
                "{what} has `{url}`: plain TCP on a non-loopback address would send tokens and data in clear text to the network; use tls://{addr} with BATON_TLS_CERT and BATON_TLS_KEY, or tcp://127.0.0.1:{} for this host only",
                addr.port()
            )));
        }
        let listener = Listen { tls, addr };
        if !listen.contains(&listener) {
            listen.push(listener);
        }
    }
    Ok(listen)
}

fn expand_tilde(raw: &str, user_home: Option<&Path>, what: &str) -> Result<PathBuf, ConfigError> {
    if raw == "~" || raw.starts_with("~/") {
        let home = user_home.ok_or_else(|| {
            ConfigError(format!(
                "{what} starts with ~ but $HOME is not set; give an absolute path"
            ))
        })?;
        return Ok(home.join(raw.trim_start_matches('~').trim_start_matches('/')));
    }
    Ok(PathBuf::from(raw))
}

impl Config {
    /// Resolves the configuration from flags, the process environment and the env file.
    pub fn from_process(flags: &Flags) -> Result<Config, ConfigError> {
        Config::resolve(flags, &|name| std::env::var(name).ok())
    }

    /// The socket a client (`baton`, `mcp-bridge`) connects to: `--socket` when given
    /// (it outranks every other layer, so nothing else needs resolving, and a host that
    /// starts the client without $HOME still works), else as batond resolves it.
    pub fn client_socket(flag: Option<&str>) -> Result<PathBuf, ConfigError> {
        match flag.filter(|s| !s.is_empty()) {
            Some(path) => expand_tilde(
                path,
                std::env::var_os("HOME").map(PathBuf::from).as_deref(),
                "--socket",
            ),
            None => Ok(Config::from_process(&Flags::default())?.socket_path),
        }
    }

    /// Resolves the configuration with `env` standing in for the process environment.
    pub fn resolve(
        flags: &Flags,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut flag_values = HashMap::new();
        for (name, value) in [
            ("BATON_HOME", &flags.home),
            ("BATON_SOCKET_PATH", &flags.socket),
            ("BATON_DATABASE_URL", &flags.database_url),
            ("BATON_INSTANCE_TIMEOUT_SECS", &flags.instance_timeout_secs),
            ("BATON_ENV_FILE", &flags.env_file),
            ("BATON_SOCKET_MODE", &flags.socket_mode),
            ("BATON_LOCK_TTL_SECS", &flags.lock_ttl_secs),
            ("BATON_NODE_TIMEOUT_SECS", &flags.node_timeout_secs),
            ("BATON_CONTEXT_EVENT_LIMIT", &flags.context_event_limit),
            ("BATON_MAX_LINE_BYTES", &flags.max_line_bytes),
            ("BATON_MAX_VALUE_BYTES", &flags.max_value_bytes),
            ("BATON_WORKSPACE", &flags.workspace),
            ("BATON_SHUTDOWN_GRACE_MS", &flags.shutdown_grace_ms),
            ("BATON_MAX_SUBSCRIBER_BYTES", &flags.max_subscriber_bytes),
            ("BATON_MAX_UNREAD_BYTES", &flags.max_unread_bytes),
            ("BATON_TLS_CERT", &flags.tls_cert),
            ("BATON_TLS_KEY", &flags.tls_key),
            ("BATON_TLS_CLIENT_CA", &flags.tls_client_ca),
            ("BATON_UNIX_AUTH", &flags.unix_auth),
            ("BATON_HISTORY_KEEP", &flags.history_keep),
            ("BATON_JOURNAL_RETAIN", &flags.journal_retain),
            ("BATON_HTTP_LISTEN", &flags.http_listen),
            ("BATON_AUTH_TIMEOUT_MS", &flags.auth_timeout_ms),
            ("BATON_MAX_UNAUTHENTICATED", &flags.max_unauthenticated),
            (
                "BATON_HTTP_HEADER_TIMEOUT_MS",
                &flags.http_header_timeout_ms,
            ),
            ("BATON_MCP_IDLE_MS", &flags.mcp_idle_ms),
        ] {
            if let Some(v) = value {
                flag_values.insert(name, v.clone());
            }
        }
        if !flags.listen.is_empty() {
            flag_values.insert("BATON_LISTEN", flags.listen.join(","));
        }
        let mut layers = Layers {
            flags: flag_values,
            env,
            file: HashMap::new(),
            file_path: None,
            user_home: env("HOME").filter(|h| !h.is_empty()).map(PathBuf::from),
        };

        // The env file's own location can only come from flags, the environment or defaults.
        let default_home = || -> Result<PathBuf, ConfigError> {
            layers
                .user_home
                .as_ref()
                .map(|h| h.join(".baton"))
                .ok_or_else(|| {
                    ConfigError("$HOME is not set; set BATON_HOME or pass --home".into())
                })
        };
        let early_home = match layers.path("BATON_HOME")? {
            Some(home) => home,
            None => default_home()?,
        };
        let env_file = layers
            .path("BATON_ENV_FILE")?
            .unwrap_or_else(|| early_home.join(".env"));
        match std::fs::read(&env_file) {
            Ok(_) => {
                // Its settings choose the socket and the database: only trust a file nobody
                // else could have written.
                if let Some(dir) = env_file.parent().filter(|d| !d.as_os_str().is_empty()) {
                    check_trusted(dir, "the env file's directory", true)?;
                }
                check_trusted(&env_file, "the env file", false)?;
                let iter = dotenvy::from_path_iter(&env_file).map_err(|e| {
                    ConfigError(format!("cannot read env file {}: {e}", env_file.display()))
                })?;
                for item in iter {
                    let (k, v) = item.map_err(|e| {
                        ConfigError(format!(
                            "env file {} has a line that is not NAME=value ({e}); fix or remove it",
                            env_file.display()
                        ))
                    })?;
                    layers.file.insert(k, v);
                }
                layers.file_path = Some(env_file);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(ConfigError(format!(
                    "cannot read env file {}: {e}",
                    env_file.display()
                )))
            }
        }

        let home = match layers.path("BATON_HOME")? {
            Some(home) => home,
            None => default_home()?,
        };
        let socket_path = layers
            .path("BATON_SOCKET_PATH")?
            .unwrap_or_else(|| home.join("baton.sock"));
        let database = match layers.get("BATON_DATABASE_URL") {
            None => Database::Sqlite(home.join("baton.db")),
            Some((url, source)) => {
                let what = layers.describe("BATON_DATABASE_URL", source);
                if url.starts_with("postgres://") || url.starts_with("postgresql://") {
                    if url.parse::<tokio_postgres::Config>().is_err() {
                        return Err(ConfigError(format!(
                            "{what} is `{}`, which is not a PostgreSQL URL; write postgres://USER[:PASSWORD]@HOST[:PORT]/DB",
                            without_password(&url)
                        )));
                    }
                    Database::Postgres(url.to_string())
                } else {
                    let path = url
                        .strip_prefix("sqlite://")
                        .or_else(|| url.strip_prefix("sqlite:"))
                        .filter(|p| !p.is_empty())
                        .ok_or_else(|| {
                            ConfigError(format!(
                                "{what} is `{}`; it must be sqlite://PATH (e.g. sqlite:///home/me/.baton/baton.db) or postgres://USER@HOST[:PORT]/DB",
                                without_password(&url)
                            ))
                        })?;
                    Database::Sqlite(expand_tilde(path, layers.user_home.as_deref(), &what)?)
                }
            }
        };
        let socket_mode = match layers.get("BATON_SOCKET_MODE") {
            None => 0o600,
            Some((raw, source)) => {
                let digits = raw.trim().trim_start_matches("0o");
                match u32::from_str_radix(digits, 8) {
                    Ok(mode) if mode <= 0o777 && mode & 0o007 != 0 => {
                        return Err(ConfigError(format!(
                            "{} is `{raw}`, which lets every user on this machine connect and act as you; use 0600 (only you) or 0660 (you and the socket's group)",
                            layers.describe("BATON_SOCKET_MODE", source)
                        )))
                    }
                    Ok(mode) if mode <= 0o777 => mode,
                    _ => {
                        return Err(ConfigError(format!(
                            "{} is `{raw}`; it must be an octal file mode such as 0600 or 0660",
                            layers.describe("BATON_SOCKET_MODE", source)
                        )))
                    }
                }
            }
        };
        let cwd = || {
            std::env::current_dir().map_err(|e| {
                ConfigError(format!(
                    "cannot read the working directory ({e}); set BATON_WORKSPACE to an absolute path"
                ))
            })
        };
        // Absolute paths in `file:`/`dir:` keys are judged against this, so it is absolute too.
        let workspace = match layers.path("BATON_WORKSPACE")? {
            Some(dir) if dir.is_absolute() => dir,
            Some(dir) => cwd()?.join(dir),
            None => cwd()?,
        };

        let http_listen = match layers.get("BATON_HTTP_LISTEN") {
            None => None,
            Some((raw, source)) => {
                let what = layers.describe("BATON_HTTP_LISTEN", source);
                let raw = raw.trim().trim_end_matches('/');
                let (tls, raw) = match raw.strip_prefix("https://") {
                    Some(rest) => (true, rest),
                    None => (false, raw.trim_start_matches("http://")),
                };
                let addr = match raw.strip_prefix("localhost:") {
                    Some(port) => format!("127.0.0.1:{port}"),
                    None => raw.to_string(),
                };
                let addr: std::net::SocketAddr = addr.parse().map_err(|_| {
                    ConfigError(format!(
                        "{what} is `{raw}`, which is not IP:PORT; write e.g. 127.0.0.1:7421 or https://0.0.0.0:7421"
                    ))
                })?;
                if !tls && !addr.ip().is_loopback() {
                    return Err(ConfigError(format!(
                        "{what} is {addr}: plain HTTP is served on a loopback address only (tokens would cross the network in clear text); use https://{addr} with BATON_TLS_CERT and BATON_TLS_KEY, or 127.0.0.1:{} for this host only",
                        addr.port()
                    )));
                }
                Some(Listen { tls, addr })
            }
        };
        let listen = match layers.get("BATON_LISTEN") {
            None => Vec::new(),
            Some((raw, source)) => parse_listen(&raw, &layers.describe("BATON_LISTEN", source))?,
        };
        let tls = if listen.iter().chain(http_listen.iter()).any(|l| l.tls) {
            let shown: Vec<String> = listen
                .iter()
                .chain(http_listen.iter())
                .filter(|l| l.tls)
                .map(|l| l.to_string())
                .collect();
            let need = |name: &'static str| -> Result<PathBuf, ConfigError> {
                layers.path(name)?.ok_or_else(|| {
                    ConfigError(format!(
                        "{} needs a certificate and its key: set BATON_TLS_CERT and BATON_TLS_KEY to PEM files (docs/operations.md, \"TLS and tokens\", shows how to make them), or listen on tcp://127.0.0.1:PORT for this host only",
                        shown.join(", ")
                    ))
                })
            };
            Some(TlsFiles {
                cert: need("BATON_TLS_CERT")?,
                key: need("BATON_TLS_KEY")?,
                client_ca: layers.path("BATON_TLS_CLIENT_CA")?,
            })
        } else {
            None
        };
        let unix_auth_token = match layers.get("BATON_UNIX_AUTH") {
            None => false,
            Some((raw, source)) => match raw.trim() {
                "admin" => false,
                "token" => true,
                _ => {
                    return Err(ConfigError(format!(
                        "{} is `{raw}`; it must be admin (Unix-socket clients act as admin, trusted by the socket's mode) or token (they authenticate like network clients)",
                        layers.describe("BATON_UNIX_AUTH", source)
                    )))
                }
            },
        };
        let history_keep = match layers.get("BATON_HISTORY_KEEP") {
            Some((raw, _)) if raw.trim() == "all" => None,
            _ => Some(
                layers
                    .number("BATON_HISTORY_KEEP", 100u64, 1)
                    .map_err(|e| ConfigError(format!("{e}, or all to keep every version")))?,
            ),
        };
        let journal_retain = match layers.get("BATON_JOURNAL_RETAIN") {
            None => JournalRetain::All,
            Some((raw, source)) => {
                JournalRetain::parse(&raw, &layers.describe("BATON_JOURNAL_RETAIN", source))?
            }
        };

        Ok(Config {
            history_keep,
            journal_retain,
            listen,
            http_listen,
            tls,
            unix_auth_token,
            home,
            socket_path,
            database,
            instance_timeout_secs: layers.number("BATON_INSTANCE_TIMEOUT_SECS", 15, 1)?,
            env_file: layers.file_path.clone(),
            socket_mode,
            lock_ttl_secs: layers.number("BATON_LOCK_TTL_SECS", 300, 1)?,
            node_timeout_secs: layers.number("BATON_NODE_TIMEOUT_SECS", 300, 1)?,
            context_event_limit: layers.number("BATON_CONTEXT_EVENT_LIMIT", 50, 0)?,
            max_line_bytes: layers.number("BATON_MAX_LINE_BYTES", 1 << 20, 64)?,
            max_value_bytes: layers.number_within(
                "BATON_MAX_VALUE_BYTES",
                1 << 20,
                (1, MAX_VALUE_BYTES_CAP),
                "a page of List or Export holds at least one value, and no answer line may pass 16 MiB",
            )?,
            workspace,
            shutdown_grace_ms: layers.number("BATON_SHUTDOWN_GRACE_MS", 5000, 0)?,
            max_subscriber_bytes: layers.number("BATON_MAX_SUBSCRIBER_BYTES", 64 << 20, 1 << 20)?,
            max_unread_bytes: layers.number("BATON_MAX_UNREAD_BYTES", 8 << 20, 1024)?,
            auth_timeout_ms: layers.number("BATON_AUTH_TIMEOUT_MS", 10_000, 1)?,
            max_unauthenticated: layers.number("BATON_MAX_UNAUTHENTICATED", 256, 1)?,
            http_header_timeout_ms: layers.number("BATON_HTTP_HEADER_TIMEOUT_MS", 10_000, 1)?,
            mcp_idle_ms: layers.number("BATON_MCP_IDLE_MS", 300_000, 1)?,
            test_clock_ms: match layers.get("BATON_TEST_CLOCK_MS") {
                None => None,
                Some(_) => Some(layers.number("BATON_TEST_CLOCK_MS", 0i64, 0)?),
            },
            test_clock_skew_ms: layers.number("BATON_TEST_CLOCK_SKEW_MS", 0i64, i64::MIN)?,
            test_lose_commit_answers: layers.number("BATON_TEST_LOSE_COMMIT_ANSWERS", 0u64, 0)?,
        })
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
