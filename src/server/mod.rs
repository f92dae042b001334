//! The daemon's life: claim the database and the socket, serve connections, and shut down
//! cleanly on SIGTERM, SIGINT or SIGQUIT (SIGHUP, SIGUSR1 and SIGUSR2 are logged).

pub mod codec;
pub mod connection;
mod http;
mod limits;
pub mod listen;
mod subscriptions;

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::config::{check_trusted, Config, Database};
use crate::methods::app::App;
use crate::methods::areas::{Memory, Writer};
use crate::store::Store;

/// After the grace, how long closed connections get to finish before the daemon exits anyway.
const HARD_STOP_TIMEOUT: Duration = Duration::from_secs(2);

/// Why the daemon would not start. Each message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("another batond is already running with the database {database} (the file is locked, perhaps reached through a hard link or another path); stop it first, or give this one a database of its own")]
    AlreadyRunningDatabase { database: PathBuf },
    #[error("another batond is already running and serving {0}; stop it first, or give this one another BATON_SOCKET_PATH")]
    AlreadyRunningSocket(PathBuf),
    #[error("{0} exists and is not a socket; refusing to delete it. Move it away, or set BATON_SOCKET_PATH to another path")]
    NotASocket(PathBuf),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the database {database} is missing, but {marker} says batond kept one there: restore it from a backup, or delete {marker} to start with an empty database")]
    DatabaseMissing { database: PathBuf, marker: PathBuf },
    #[error("the database {database} is empty (0 bytes), but {marker} says batond kept one there: restore it from a backup, or delete {marker} (and the empty file) to start with an empty database")]
    DatabaseEmpty { database: PathBuf, marker: PathBuf },
    /// A network listener or its TLS files; the message says what to do.
    #[error("{0}")]
    Network(String),
    #[error(transparent)]
    Untrusted(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Store(#[from] crate::store::OpenError),
}

fn io_error(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StartError {
    let path = path.to_path_buf();
    move |source| StartError::Io { what, path, source }
}

/// Creates a directory (and its parents) with mode 0700 if it does not exist.
fn create_private_dir(dir: &Path) -> Result<(), StartError> {
    if dir.as_os_str().is_empty() || dir.exists() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_error("cannot create the directory", dir))
}

/// Takes an exclusive lock on the database file itself (creating it if it does not exist),
/// held for the daemon's life. `flock` locks the file's inode, not its path, so a second
/// daemon that reaches the same database through a hard link (or another spelling of the
/// path) is refused too. `flock` locks are independent of the POSIX `fcntl` locks SQLite
/// takes on the same file, and this descriptor stays open until SQLite has closed, so
/// closing it never drops SQLite's locks.
fn lock_database(database: &Path) -> Result<File, StartError> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(database)
        .map_err(io_error("cannot open the database", database))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StartError::AlreadyRunningDatabase {
            database: database.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(io_error("cannot lock the database", database)(e))
        }
    }
}

/// The file beside the database that records that batond has kept a database there (and
/// its id), so that a database deleted or truncated behind its back is not silently
/// replaced by an empty one.
fn database_marker(database: &Path) -> PathBuf {
    let mut marker = database.as_os_str().to_owned();
    marker.push(".id");
    PathBuf::from(marker)
}

/// Refuses to start on a missing or zero-length database where one existed.
fn check_database_present(database: &Path) -> Result<(), StartError> {
    let marker = database_marker(database);
    match std::fs::symlink_metadata(&marker) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error("cannot inspect", &marker)(e)),
    }
    match std::fs::metadata(database) {
        Err(e) if e.kind() == ErrorKind::NotFound => Err(StartError::DatabaseMissing {
            database: database.to_path_buf(),
            marker,
        }),
        Err(e) => Err(io_error("cannot inspect the database", database)(e)),
        Ok(meta) if meta.len() == 0 => Err(StartError::DatabaseEmpty {
            database: database.to_path_buf(),
            marker,
        }),
        Ok(_) => Ok(()),
    }
}

/// Writes the marker of a database that opened (if it is not there already).
fn write_database_marker(database: &Path, id: i64) {
    let marker = database_marker(database);
    let text = format!(
        "{id:016x}\nbatond keeps a database at {}; while this file exists, batond refuses to start if that database is missing or empty\n",
        database.display()
    );
    if std::fs::read_to_string(&marker).is_ok_and(|old| old == text) {
        return;
    }
    if let Err(err) = std::fs::write(&marker, text) {
        tracing::warn!(%err, marker = %marker.display(), "cannot record that a database exists; a deleted database would not be noticed");
    }
}

/// Makes the socket path free to bind: refuses a live daemon or a non-socket file, and
/// removes a stale socket left by a daemon that died.
fn clear_socket_path(path: &Path) -> Result<(), StartError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error("cannot inspect the socket path", path)(e)),
    };
    if !meta.file_type().is_socket() {
        return Err(StartError::NotASocket(path.to_path_buf()));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(StartError::AlreadyRunningSocket(path.to_path_buf())),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
            tracing::warn!(socket = %path.display(), "replacing a stale socket left by a daemon that is gone");
            std::fs::remove_file(path).map_err(io_error("cannot remove the stale socket", path))
        }
        Err(e) => Err(io_error("cannot probe the existing socket", path)(e)),
    }
}

/// The listening socket systemd passed, when started by socket activation (`LISTEN_PID`
/// is this process and `LISTEN_FDS` is at least 1: the socket is fd 3). systemd then owns
/// the socket file: batond neither binds nor removes it.
fn inherited_listener() -> Result<Option<UnixListener>, StartError> {
    let ours = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        == Some(std::process::id());
    let count = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0);
    if !ours || count == 0 {
        return Ok(None);
    }
    if count > 1 {
        tracing::warn!(
            "systemd passed {count} sockets; batond serves the first and ignores the rest"
        );
    }
    // SAFETY: by the socket activation protocol fd 3 is ours, open, and used by nothing else.
    let std_listener = unsafe {
        use std::os::fd::FromRawFd;
        std::os::unix::net::UnixListener::from_raw_fd(3)
    };
    let passed = Path::new("(socket passed by systemd)");
    std_listener.set_nonblocking(true).map_err(io_error(
        "cannot use the socket systemd passed (is it a Unix stream socket?)",
        passed,
    ))?;
    let listener = UnixListener::from_std(std_listener)
        .map_err(io_error("cannot use the socket systemd passed", passed))?;
    Ok(Some(listener))
}

/// Binds the socket so that it is never reachable with wider permissions than `mode`.
fn bind_socket(path: &Path, mode: u32) -> Result<UnixListener, StartError> {
    // SAFETY: umask only swaps the process file-creation mask; nothing else creates files
    // while the daemon starts.
    let old = unsafe { libc::umask(0o777 & !(mode as libc::mode_t)) };
    let bound = UnixListener::bind(path);
    unsafe { libc::umask(old) };
    let listener = bound.map_err(io_error("cannot bind the socket", path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(io_error("cannot set the socket's mode", path))?;
    Ok(listener)
}

/// Lets the daemon hold as many connections as the hard limit allows.
fn raise_open_file_limit() {
    // SAFETY: plain getrlimit/setrlimit calls on a local struct.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Heartbeats every third of `BATON_INSTANCE_TIMEOUT_SECS`, until `stop`; each heartbeat
/// also ends what silent daemons held (`methods::instances`). Only for a database other
/// daemons may share.
async fn keep_alive(app: Arc<App>, connection_base: u64, stop: CancellationToken) {
    let timeout_ms = (app.config.instance_timeout_secs * 1000) as i64;
    let every = std::time::Duration::from_millis((timeout_ms as u64 / 3).max(100));
    loop {
        let beat = crate::methods::instances::heartbeat_write(
            app.instance_id.clone(),
            connection_base,
            timeout_ms,
        );
        if let Err(err) = app.writer.detached(beat) {
            static BEAT_FAILED: crate::log_limit::Limited =
                crate::log_limit::Limited::new(crate::log_limit::EVERY);
            if let Some(held_back) = BEAT_FAILED.admit() {
                tracing::warn!(%err, held_back, "cannot queue this instance's heartbeat");
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// Wakes the writer at each lock deadline (a lease expiry or the end of a wait) so that
/// expired leases end, and their waiters get the lock, without any client call.
async fn sweep_expired_locks(app: Arc<App>) {
    let writer = app.writer.clone();
    let mut next = writer.next_deadline();
    loop {
        let deadline = *next.borrow_and_update();
        match deadline {
            None => {
                if next.changed().await.is_err() {
                    return;
                }
            }
            Some(at) => {
                let now = app.clock.monotonic();
                if at > now {
                    tokio::select! {
                        _ = app.clock.sleep_until(at) => {}
                        changed = next.changed() => if changed.is_err() { return },
                    }
                    continue;
                }
                // An empty write: every batch first ends what is due.
                if writer.detached(Box::new(|_| Ok(None))).is_err() {
                    // Queue full or stopping; try again shortly.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                if next.changed().await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Accept failures (out of file descriptors, mostly): back off exponentially instead of
/// spinning, and log at a bounded rate with a count of the failures not logged.
struct AcceptErrors {
    backoff: Duration,
    paused_until: Option<tokio::time::Instant>,
    last_logged: Option<tokio::time::Instant>,
    unlogged: u64,
}

const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one accept warning per this long.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(10);

impl AcceptErrors {
    fn new() -> AcceptErrors {
        AcceptErrors {
            backoff: ACCEPT_BACKOFF_MIN,
            paused_until: None,
            last_logged: None,
            unlogged: 0,
        }
    }

    fn succeeded(&mut self) {
        self.backoff = ACCEPT_BACKOFF_MIN;
    }

    fn failed(&mut self, err: &std::io::Error) {
        let now = tokio::time::Instant::now();
        if self
            .last_logged
            .is_none_or(|at| now.duration_since(at) >= ACCEPT_LOG_EVERY)
        {
            tracing::warn!(
                %err,
                "accept failed; new clients wait until it succeeds (retrying with back-off, {} more failures since the last report; Metrics counts them as connections.accept_errors); if it is EMFILE, raise the open-file limit (ulimit -n, LimitNOFILE=)",
                self.unlogged
            );
            self.last_logged = Some(now);
            self.unlogged = 0;
        } else {
            self.unlogged += 1;
        }
        tracing::debug!(%err, "accept failed; retrying in {} ms", self.backoff.as_millis());
        self.paused_until = Some(now + self.backoff);
        self.backoff = (self.backoff * 2).min(ACCEPT_BACKOFF_MAX);
    }
}

/// SIGUSR1/SIGUSR2: a status line in the log; the daemon keeps serving.
fn log_status(signal: &str, app: &App) {
    let stats = &app.writer.stats;
    let relaxed = std::sync::atomic::Ordering::Relaxed;
    tracing::info!(
        "{signal}: still serving; {} connections open ({} since start), head revision {}, {} commits ({} failed), {} accept errors",
        app.metrics.connections_open(),
        app.metrics.connections_total(),
        *app.writer.head().borrow(),
        stats.commits.load(relaxed),
        stats.failed_commits.load(relaxed),
        app.metrics.accept_errors(),
    );
}

/// Runs the daemon until SIGTERM, SIGINT or SIGQUIT. Returns once everything is committed and the
/// socket is removed.
pub async fn run(config: Config, clock: Arc<dyn Clock>) -> Result<(), StartError> {
    raise_open_file_limit();
    let connection_base = connection::number_connections_from_random();
    // The database, its WAL and the lock file are the user's alone.
    // SAFETY: umask only sets the process file-creation mask.
    unsafe { libc::umask(0o077) };
    create_private_dir(&config.home)?;
    let sqlite = config.database.sqlite_path().map(Path::to_path_buf);
    for path in [Some(&config.socket_path), sqlite.as_ref()]
        .into_iter()
        .flatten()
    {
        if let Some(parent) = path.parent() {
            create_private_dir(parent)?;
        }
    }
    let inherited = inherited_listener()?;
    let activated = inherited.is_some();
    // Another user who can write here could swap the socket (and capture requests) or the
    // database: refuse, and say how to fix it.
    check_trusted(&config.home, "BATON_HOME", false)?;
    if let Some(dir) = sqlite.as_deref().and_then(Path::parent) {
        check_trusted(dir, "the database's directory", true)?;
    }
    if !activated {
        if let Some(dir) = config.socket_path.parent() {
            check_trusted(dir, "the socket's directory", true)?;
        }
        if config.socket_mode & 0o077 != 0 {
            tracing::warn!(
                "the socket mode {:04o} lets members of the socket's group connect and act as you; set BATON_SOCKET_MODE=0600 unless that is what you want",
                config.socket_mode
            );
        }
    }
    // One daemon per SQLite file; any number share a PostgreSQL database.
    let _lock = match &sqlite {
        Some(path) => {
            check_database_present(path)?;
            Some(lock_database(path)?)
        }
        None => None,
    };
    if !activated {
        clear_socket_path(&config.socket_path)?;
    }
    // Certificates and ports before the database: a bad PEM or a port in use stops the
    // start here, with nothing opened.
    let network = listen::bind_all(&config.listen, config.tls.as_ref())?;
    let http_listener = match &config.http_listen {
        Some(listen) => {
            let tls = match (listen.tls, config.tls.as_ref()) {
                (true, Some(files)) => Some(listen::tls_acceptor(files)?),
                _ => None,
            };
            let bound = http::bind(listen.addr).await.map_err(|e| {
                StartError::Network(format!(
                    "cannot serve HTTP on {} ({e}); pick another port with BATON_HTTP_LISTEN",
                    listen.addr
                ))
            })?;
            Some((bound, tls))
        }
        None => None,
    };
    let (store, writes) = match &config.database {
        Database::Sqlite(path) => Store::open(path, clock.wall_ms())?,
        Database::Postgres(url) => Store::open_postgres(
            url,
            clock.wall_ms(),
            tokio::runtime::Handle::current(),
            config.test_lose_commit_answers,
        )?,
    };
    let memory = Memory::new(crate::methods::retention::Retention::of(&config));
    let (writer, writer_thread) =
        Writer::spawn(writes, store.health().clone(), clock.clone(), memory)
            .map_err(|e| crate::store::OpenError::Start(e.to_string()))?;
    if let Some(path) = &sqlite {
        write_database_marker(path, store.database_id);
    }
    let (listener, socket_shown) = match inherited {
        Some(listener) => {
            let path = listener
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
                .unwrap_or_else(|| "an unnamed socket".into());
            (listener, format!("{path} (passed by systemd)"))
        }
        None => (
            bind_socket(&config.socket_path, config.socket_mode)?,
            config.socket_path.display().to_string(),
        ),
    };
    let schema_version = store.schema_version;
    let app = Arc::new(App::new(config, store, writer, clock));
    if app.config.unix_auth_token {
        tracing::info!("BATON_UNIX_AUTH=token: Unix-socket clients authenticate with a token too");
        match crate::methods::auth::bootstrap_admin(&app).await {
            Ok(Some(path)) => tracing::warn!(
                "no admin token exists, so batond created a one-time admin token, valid for 1 hour, in {} (readable by its user only): create the tokens you need with it (BATON_TOKEN=$(cat {0}) baton token create ...), then delete the file",
                path.display()
            ),
            Ok(None) => {}
            Err(err) => tracing::error!(%err, "could not create the one-time admin token"),
        }
    }
    if let Some((listener, tls)) = &http_listener {
        if let Ok(addr) = listener.local_addr() {
            let url = http::url_of(addr, tls.is_some());
            tracing::info!(
                "serving the dashboard at {url} (log in with `baton dashboard`) and {url}metrics (tokens with the metrics grant)"
            );
            let _ = app.dashboard.set(url);
        }
    }
    for net in &network {
        tracing::info!(
            "serving {} (clients authenticate with a token first)",
            net.shown
        );
    }
    tracing::info!(
        "batond {} listening on {socket_shown} (database {}, schema version {schema_version})",
        env!("CARGO_PKG_VERSION"),
        app.config.database.shown()
    );
    // systemd's Type=notify (and the tests) learn that batond serves from this datagram on
    // NOTIFY_SOCKET, not from its log; without NOTIFY_SOCKET it does nothing.
    if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]) {
        tracing::warn!("could not tell the service manager batond is ready (NOTIFY_SOCKET): {e}");
    }

    let shutdown = CancellationToken::new();
    // Cancelled when the shutdown grace runs out: ends connections mid-write.
    let hard_stop = CancellationToken::new();
    let sweeper = tokio::spawn(sweep_expired_locks(app.clone()));
    let writer = app.writer.clone();
    app.store
        .watch_other_instances(move || writer.catch_up(), shutdown.clone());
    tokio::spawn(crate::methods::auth::watch_tokens(
        app.clone(),
        app.store.shared(),
        shutdown.clone(),
    ));
    if app.store.shared() {
        tokio::spawn(keep_alive(app.clone(), connection_base, shutdown.clone()));
    }
    // Everything batond opens for itself is open by now: what is left under the open-file
    // limit, less a reserve, is for network and HTTP clients.
    let descriptors = limits::Descriptors::measure();
    let connections = TaskTracker::new();
    let http_task = http_listener.map(|(listener, tls)| {
        tokio::spawn(http::serve(
            listener,
            tls,
            app.clone(),
            descriptors.clone(),
            shutdown.clone(),
        ))
    });
    let network_tasks: Vec<_> = network
        .into_iter()
        .map(|net| {
            tokio::spawn(listen::serve(
                net,
                app.clone(),
                descriptors.clone(),
                connections.clone(),
                shutdown.clone(),
                hard_stop.clone(),
            ))
        })
        .collect();
    let listen_for = |kind: SignalKind, name: &'static str| {
        signal(kind).map_err(io_error(name, Path::new("(signal handler)")))
    };
    let mut sigterm = listen_for(SignalKind::terminate(), "cannot handle SIGTERM")?;
    let mut sigint = listen_for(SignalKind::interrupt(), "cannot handle SIGINT")?;
    let mut sigquit = listen_for(SignalKind::quit(), "cannot handle SIGQUIT")?;
    let mut sighup = listen_for(SignalKind::hangup(), "cannot handle SIGHUP")?;
    let mut sigusr1 = listen_for(SignalKind::user_defined1(), "cannot handle SIGUSR1")?;
    let mut sigusr2 = listen_for(SignalKind::user_defined2(), "cannot handle SIGUSR2")?;
    let mut accept_errors = AcceptErrors::new();
    loop {
        let paused = accept_errors.paused_until;
        tokio::select! {
            accepted = listener.accept(), if paused.is_none() => match accepted {
                Ok((stream, _)) => {
                    accept_errors.succeeded();
                    let peer = connection::Peer {
                        fd: std::os::fd::AsRawFd::as_raw_fd(&stream),
                        name: "unix".into(),
                        admin: !app.config.unix_auth_token,
                        unproven: None,
                        held: Some(descriptors.hold()),
                    };
                    let (reader, writer) = stream.into_split();
                    connections.spawn(connection::serve(
                        reader,
                        writer,
                        peer,
                        app.clone(),
                        shutdown.clone(),
                        hard_stop.clone(),
                    ));
                }
                Err(err) => {
                    app.metrics.accept_failed();
                    accept_errors.failed(&err);
                }
            },
            _ = tokio::time::sleep_until(paused.unwrap_or_else(tokio::time::Instant::now)), if paused.is_some() => {
                accept_errors.paused_until = None;
            }
            _ = sigterm.recv() => { tracing::info!("SIGTERM: shutting down"); break; }
            _ = sigint.recv() => { tracing::info!("SIGINT: shutting down"); break; }
            _ = sigquit.recv() => { tracing::info!("SIGQUIT: shutting down"); break; }
            _ = sighup.recv() => {
                tracing::info!("SIGHUP: batond does not reload its configuration; still serving, restart it to apply changes");
            }
            _ = sigusr1.recv() => log_status("SIGUSR1", &app),
            _ = sigusr2.recv() => log_status("SIGUSR2", &app),
        }
    }

    drop(listener);
    sweeper.abort();
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    shutdown.cancel();
    for task in network_tasks {
        let _ = task.await;
    }
    if let Some(task) = http_task {
        let _ = task.await;
    }
    // Requests waiting for a lock would hold their connections open: end them now.
    let _ = crate::methods::locks::end_waits(&app);
    connections.close();
    // Clients that do not read (a stalled subscriber, a pipeliner) would hold the shutdown
    // forever: after the grace they are closed, their unread answers dropped.
    let grace = Duration::from_millis(app.config.shutdown_grace_ms);
    if tokio::time::timeout(grace, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            "{} connections did not take their answers within the shutdown grace of {grace:?}; closing them (BATON_SHUTDOWN_GRACE_MS sets the grace)",
            connections.len()
        );
        hard_stop.cancel();
        if tokio::time::timeout(HARD_STOP_TIMEOUT, connections.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "some connections did not close within {HARD_STOP_TIMEOUT:?}; exiting anyway"
            );
        }
    }
    app.writer.shutdown().await;
    let _ = tokio::task::spawn_blocking(move || writer_thread.join()).await;
    // An activated socket belongs to systemd, which keeps it to start batond again.
    if !activated {
        if let Err(err) = std::fs::remove_file(&app.config.socket_path) {
            tracing::warn!(%err, "could not remove the socket");
        }
    }
    tracing::info!("batond stopped");
    Ok(())
}
