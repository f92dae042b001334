//! Authentication and access tokens: who a connection acts as ([`ConnectionAuth`]), the
//! token rules (random secrets stored only as a SHA-256 hash, expiry and revocation judged
//! at every request), and the methods Authenticate, CreateToken, ListTokens and
//! RevokeToken. What each grant allows is in `scopes`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::app::App;
use crate::clock::format_ms;
use crate::error::{Error, Result};
use crate::protocol::journal::EventType;
use crate::store::boundary::NewEvent;
use crate::store::boundary::{NewToken, StoredToken};

use super::journal;

use super::scopes::Scopes;
use super::{read, ready, write, Ctx, Method, Plan};

pub use crate::protocol::auth::*;

/// Failed Authenticate calls after which a connection is closed.
pub const MAX_FAILURES: u32 = 3;

/// What every token's secret starts with, so that a leaked one is recognisable (secret
/// scanners, logs).
pub const TOKEN_PREFIX: &str = "baton_";

/// Longest token name, in bytes.
const MAX_NAME_BYTES: usize = 128;

/// A token a connection authenticated with.
#[derive(Debug)]
pub struct Principal {
    pub token_id: String,
    pub name: String,
    pub scopes: Scopes,
    pub expires_at_ms: Option<i64>,
    /// Cancelled when the token is revoked or expires; shared by every connection using
    /// it, which ends what it opened (subscriptions, waits) when it fires.
    life: CancellationToken,
    /// Counts the principals of the token (the registry forgets a token nobody uses).
    _user: Arc<()>,
}

/// Who a connection acts as.
#[derive(Debug, Clone)]
enum Access {
    /// A Unix-socket connection trusted by the socket's file mode.
    Admin,
    /// Not (or no longer) authenticated.
    Pending,
    Token(Arc<Principal>),
}

/// A connection's authentication state.
#[derive(Debug)]
pub struct ConnectionAuth {
    access: Mutex<Access>,
    /// Failed Authenticate calls over the connection's whole life: a success in between
    /// does not reset it, or a holder of one valid token could keep guessing others.
    failures: AtomicU32,
    /// Where the connection comes from, for the log (`unix`, or the peer address).
    peer: Mutex<String>,
}

impl Default for ConnectionAuth {
    /// A connection that must authenticate before anything else.
    fn default() -> ConnectionAuth {
        ConnectionAuth {
            access: Mutex::new(Access::Pending),
            failures: AtomicU32::new(0),
            peer: Mutex::new("unknown".into()),
        }
    }
}

impl ConnectionAuth {
    fn access(&self) -> std::sync::MutexGuard<'_, Access> {
        self.access.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the connection act as `admin` (a Unix-socket connection, by default).
    pub fn trust_as_admin(&self) {
        *self.access() = Access::Admin;
    }

    /// Records where the connection comes from, for the log.
    pub fn set_peer(&self, peer: String) {
        *self.peer.lock().unwrap_or_else(|e| e.into_inner()) = peer;
    }

    /// Where the connection comes from (`unix`, or the peer's address).
    pub fn peer(&self) -> String {
        self.peer.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether the connection acts as someone (admin, or a token), until a request finds
    /// its token revoked or expired.
    pub fn is_authenticated(&self) -> bool {
        !matches!(*self.access(), Access::Pending)
    }

    /// Whether the connection has failed Authenticate too often and must be closed.
    pub fn must_close(&self) -> bool {
        self.failures.load(Ordering::Acquire) >= MAX_FAILURES
    }

    /// The token this request acts with (`None`: admin by the socket's mode), or 401 when
    /// the connection has not authenticated or its token expired or was revoked since.
    pub fn principal(&self, app: &App) -> Result<Option<Arc<Principal>>> {
        let mut access = self.access();
        let principal = match &*access {
            Access::Admin => return Ok(None),
            Access::Pending => {
                return Err(Error::Unauthenticated(
                    "this connection has not authenticated; call Authenticate {token} first (the token comes from `baton token create`; clients read BATON_TOKEN)".into(),
                ))
            }
            Access::Token(principal) => principal.clone(),
        };
        let why = if principal
            .expires_at_ms
            .is_some_and(|at| database_now_ms(app) >= at)
        {
            principal.life.cancel();
            "has expired"
        } else if principal.life.is_cancelled() {
            "was revoked"
        } else {
            return Ok(Some(principal));
        };
        *access = Access::Pending;
        Err(Error::Unauthenticated(format!(
            "the token `{}` {why}; authenticate again with a valid token (an admin creates one with `baton token create`)",
            principal.name
        )))
    }

    /// What ends when the connection's token is revoked or expires (None: not a token's).
    pub fn token_life(&self) -> Option<CancellationToken> {
        match &*self.access() {
            Access::Token(principal) => Some(principal.life.clone()),
            _ => None,
        }
    }

    /// A failed Authenticate: the connection is unauthenticated; returns the failures so
    /// far on this connection, a success in between notwithstanding.
    fn failed(&self) -> u32 {
        *self.access() = Access::Pending;
        self.failures.fetch_add(1, Ordering::AcqRel) + 1
    }
}

/// Daemon-wide authentication state: the life of each token connections use (ended by
/// revocation, on any daemon sharing the database, or by expiry), and the rate limit of
/// the failure log.
#[derive(Default)]
pub struct Registry {
    lives: Mutex<HashMap<String, Life>>,
    /// Told when a token starts being used, so the watcher looks at its expiry.
    used: tokio::sync::Notify,
    log: Mutex<FailureLog>,
}

/// A token in use: what ends with it, and when it expires.
struct Life {
    ended: CancellationToken,
    expires_at_ms: Option<i64>,
    /// One clone per principal of the token.
    users: Arc<()>,
    /// When this daemon revoked it.
    revoked_at: Option<std::time::Instant>,
}

/// How long a token revoked here stays refused from memory after nobody uses it: past
/// that, its revocation, committed long since, is in storage.
const KEEP_REVOKED: Duration = Duration::from_secs(600);

impl Life {
    fn new(expires_at_ms: Option<i64>) -> Life {
        Life {
            ended: CancellationToken::new(),
            expires_at_ms,
            users: Arc::new(()),
            revoked_at: None,
        }
    }

    fn unused(&self) -> bool {
        Arc::strong_count(&self.users) == 1
    }
}

#[derive(Default)]
struct FailureLog {
    last_logged: Option<Duration>,
    unlogged: u64,
}

/// At most one failure warning per this long.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(10);

impl Registry {
    fn lives(&self) -> std::sync::MutexGuard<'_, HashMap<String, Life>> {
        self.lives.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The life of a token, shared by every connection that uses it, and a counted user.
    fn life(&self, token_id: &str, expires_at_ms: Option<i64>) -> (CancellationToken, Arc<()>) {
        let taken = {
            let mut lives = self.lives();
            let life = lives
                .entry(token_id.to_string())
                .or_insert_with(|| Life::new(expires_at_ms));
            (life.ended.clone(), life.users.clone())
        };
        self.used.notify_one();
        taken
    }

    /// Whether the token was seen revoked (or expired) by this daemon.
    fn has_ended(&self, token_id: &str) -> bool {
        self.lives()
            .get(token_id)
            .is_some_and(|life| life.ended.is_cancelled())
    }

    /// Ends the token: every connection using it is cut off and what it opened ends.
    fn revoke(&self, token_id: &str) {
        let mut lives = self.lives();
        let life = lives
            .entry(token_id.to_string())
            .or_insert_with(|| Life::new(None));
        life.revoked_at.get_or_insert_with(std::time::Instant::now);
        life.ended.cancel();
    }

    /// Ends a token that expired (storage refuses it from now on by its expiry).
    fn expire(&self, token_id: &str) {
        if let Some(life) = self.lives().get(token_id) {
            life.ended.cancel();
        }
    }

    /// The tokens connections use now, live ones only, with their expiry; forgets those
    /// nobody uses any more (one revoked here a while longer: its revocation may not be
    /// committed yet).
    fn in_use(&self) -> Vec<(String, Option<i64>)> {
        let mut lives = self.lives();
        lives.retain(|_, life| {
            !life.unused()
                || life
                    .revoked_at
                    .is_some_and(|at| at.elapsed() < KEEP_REVOKED)
        });
        lives
            .iter()
            .filter(|(_, life)| !life.ended.is_cancelled())
            .map(|(id, life)| (id.clone(), life.expires_at_ms))
            .collect()
    }

    /// Logs a failed authentication, at most once per [`FAILURE_LOG_EVERY`] with a count of
    /// those not logged. Never the token.
    fn log_failure(&self, app: &App, peer: &str, failures: u32) {
        let now = app.clock.monotonic();
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        if log
            .last_logged
            .is_some_and(|at| now.saturating_sub(at) < FAILURE_LOG_EVERY)
        {
            log.unlogged += 1;
            return;
        }
        tracing::warn!(
            peer,
            failures_on_connection = failures,
            "authentication failed: unknown, expired or revoked token ({} more failures since the last report; Metrics counts them as auth.failures); if this is not a client you know, check who can reach the listener",
            log.unlogged
        );
        log.last_logged = Some(now);
        log.unlogged = 0;
    }
}

/// The time tokens expire by: the shared database's clock (as for leases), else this
/// daemon's.
pub fn database_now_ms(app: &App) -> i64 {
    app.writer.database_now_ms(app.clock.wall_ms())
}

/// How long the watcher waits, after a commit, before it looks again for tokens revoked
/// through another daemon (a burst of commits costs one look).
const REVOCATION_LOOK_EVERY: Duration = Duration::from_millis(100);

/// Ends every token in use when it expires (by [`database_now_ms`]) and, on a database
/// several daemons share, when another daemon revoked it: each commit anywhere moves this
/// daemon's head, and a revocation is one. Connections then end what the token opened.
pub async fn watch_tokens(app: Arc<App>, shared: bool, shutdown: CancellationToken) {
    let mut head = app.writer.head();
    let mut committed = false;
    loop {
        let in_use = app.auth.in_use();
        let now_ms = database_now_ms(&app);
        for (token_id, expires_at_ms) in &in_use {
            if expires_at_ms.is_some_and(|at| now_ms >= at) {
                app.auth.expire(token_id);
            }
        }
        if shared && committed && !in_use.is_empty() {
            let ids: Vec<String> = in_use.iter().map(|(id, _)| id.clone()).collect();
            let revoked = app.store.read(move |storage| {
                let mut revoked = Vec::new();
                for id in ids {
                    if let Some(token) = storage.token_by_id(&id)? {
                        if token.revoked_at_ms.is_some() {
                            revoked.push(id);
                        }
                    }
                }
                Ok(revoked)
            });
            match revoked {
                Ok(revoked) => revoked.iter().for_each(|id| app.auth.revoke(id)),
                // Looked at again after the next commit.
                Err(err) => tracing::debug!(%err, "cannot look for revoked tokens now"),
            }
        }
        committed = false;
        let next_expiry = in_use
            .iter()
            .filter_map(|(_, at)| *at)
            .filter(|&at| at > now_ms)
            .min()
            .map(|at| app.clock.monotonic() + Duration::from_millis((at - now_ms) as u64));
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = app.auth.used.notified() => {}
            changed = head.changed(), if shared => {
                if changed.is_err() {
                    return;
                }
                committed = true;
                tokio::time::sleep(REVOCATION_LOOK_EVERY).await;
            }
            _ = sleep_until(&app, next_expiry) => {}
        }
    }
}

async fn sleep_until(app: &App, at: Option<Duration>) {
    match at {
        Some(at) => app.clock.sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The hex SHA-256 of a token's secret: what is stored and looked up. The secret carries
/// 256 random bits, so a fast hash is enough (no guessing can reach it).
pub fn hash_secret(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A new secret: the prefix and 32 random bytes in hex.
fn new_secret() -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| {
        Error::Unavailable(format!(
            "the system's random source failed ({e}); nothing was created, retry"
        ))
    })?;
    Ok(format!("{TOKEN_PREFIX}{}", hex(&bytes)))
}

fn is_live(token: &StoredToken, now_ms: i64) -> bool {
    token.revoked_at_ms.is_none() && token.expires_at_ms.is_none_or(|at| now_ms < at)
}

fn not_authenticated(cx: &Ctx<'_>) -> Error {
    let failures = cx.connection.auth.failed();
    cx.app.metrics.auth_failed();
    cx.app
        .auth
        .log_failure(cx.app, &cx.connection.auth.peer(), failures);
    let then = if failures >= MAX_FAILURES {
        format!("; after {MAX_FAILURES} failures batond closes this connection")
    } else {
        String::new()
    };
    Error::Unauthenticated(format!(
        "this token is not valid (unknown, expired or revoked){then}; check BATON_TOKEN, or ask an admin for a new one (`baton token create`)"
    ))
}

/// The grants of a live token given by its secret (an HTTP request's bearer token); None
/// for an unknown, expired or revoked one.
pub fn token_scopes(app: &App, secret: &str) -> Result<Option<Scopes>> {
    Ok(live_token(app, secret)?.map(|t| t.scopes))
}

/// A live token as an HTTP request presents it: its name and grants.
pub struct Presented {
    pub name: String,
    pub scopes: Scopes,
}

/// The live token given by its secret; None for an unknown, expired or revoked one.
pub fn live_token(app: &App, secret: &str) -> Result<Option<Presented>> {
    let hash = hash_secret(secret);
    let found = app
        .store
        .read_one_statement(|conn| conn.token_by_hash(&hash))?;
    let now_ms = database_now_ms(app);
    let Some(token) = found.filter(|t| is_live(t, now_ms)) else {
        return Ok(None);
    };
    if app.auth.has_ended(&token.token_id) {
        return Ok(None);
    }
    Ok(Some(Presented {
        scopes: Scopes::parse(&token.scopes)?,
        name: token.name,
    }))
}

impl Method for AuthenticateParams {
    const SUMMARY: &'static str = "Authenticate this connection with a token; required first on network connections (Health and DescribeInterface work without).";

    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let hash = hash_secret(&self.token);
        drop(self);
        let app = cx.app;
        let found = app
            .store
            .read_one_statement(|conn| conn.token_by_hash(&hash))?;
        let now_ms = database_now_ms(app);
        let Some(token) = found.filter(|t| is_live(t, now_ms)) else {
            return Err(not_authenticated(cx));
        };
        let (life, user) = app.auth.life(&token.token_id, token.expires_at_ms);
        if life.is_cancelled() {
            return Err(not_authenticated(cx));
        }
        let result = AuthenticateResult {
            token_id: token.token_id.clone(),
            name: token.name.clone(),
            scopes: token.scopes.clone(),
            expires_at: token.expires_at_ms.map(format_ms),
        };
        let principal = Principal {
            token_id: token.token_id,
            name: token.name,
            scopes: Scopes::parse(&token.scopes)?,
            expires_at_ms: token.expires_at_ms,
            life,
            _user: user,
        };
        *cx.connection.auth.access() = Access::Token(Arc::new(principal));
        // Bookkeeping, not state: no revision, no event; a failure only leaves it stale.
        let token_id = result.token_id.clone();
        let _ = app.writer.detached(Box::new(move |ctx| {
            ctx.tokens().set_token_used(&token_id, ctx.now_ms)?;
            Ok(None)
        }));
        ready::<Self>(Ok(result))
    }
}

impl Method for CreateTokenParams {
    const SUMMARY: &'static str = "Create an access token with scopes (admin only); its secret is in this answer only, stored as a hash.";

    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        if self.name.is_empty() || self.name.len() > MAX_NAME_BYTES {
            return Err(Error::invalid_params(
                "name",
                format!("name must be 1 to {MAX_NAME_BYTES} bytes; name the agent or host the token is for"),
            ));
        }
        Scopes::parse(&self.scopes)?;
        let ttl_ms = match self.ttl_secs {
            Some(0) => {
                return Err(Error::invalid_params(
                    "ttl_secs",
                    "ttl_secs must be at least 1; omit it for a token that does not expire",
                ))
            }
            Some(secs) => Some(i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX)),
            None => None,
        };
        let secret = new_secret()?;
        write::<Self>(cx, self.idempotency_key, move |ctx| {
            create_token(ctx, secret, self.name, self.scopes, ttl_ms)
        })
    }
}

/// Stores a new token with `secret` and journals it (never the secret).
fn create_token(
    ctx: &mut crate::methods::areas::WriteCtx<'_>,
    secret: String,
    name: String,
    scopes: Vec<String>,
    ttl_ms: Option<i64>,
) -> Result<CreateTokenResult> {
    let token_id = crate::methods::new_id();
    let expires_at_ms = ttl_ms.map(|ttl| ctx.now_ms.saturating_add(ttl));
    ctx.tokens().insert_token(&NewToken {
        token_id: &token_id,
        name: &name,
        secret_hash: &hash_secret(&secret),
        scopes: &scopes,
        created_at_ms: ctx.now_ms,
        expires_at_ms,
    })?;
    // The journal learns who has a token, never its secret.
    let seq = ctx.next_revision();
    let data = serde_json::json!({
        "token_id": token_id,
        "name": name,
        "scopes": scopes,
        "expires_at": expires_at_ms.map(format_ms),
    });
    journal::append(
        ctx,
        seq,
        &NewEvent {
            data: &data.to_string(),
            ..NewEvent::of(EventType::TokenCreated)
        },
    )?;
    Ok(CreateTokenResult {
        token_id,
        token: secret,
        name,
        scopes,
        expires_at: expires_at_ms.map(format_ms),
    })
}

/// The file, in batond's home, where a one-time admin token is written (see
/// [`bootstrap_admin`]).
pub const BOOTSTRAP_FILE: &str = "bootstrap-token";

/// How long the one-time admin token lives.
const BOOTSTRAP_TTL_MS: i64 = 60 * 60 * 1000;

/// With `BATON_UNIX_AUTH=token`, nobody could create the first token (CreateToken needs
/// admin, and the socket no longer grants it): when no live token has `admin`, batond
/// creates one, valid for an hour, and writes its secret to `BOOTSTRAP_FILE` in its home,
/// readable by its user only (never to the log). Returns the file's path when it did.
pub async fn bootstrap_admin(app: &App) -> Result<Option<std::path::PathBuf>> {
    let now_ms = database_now_ms(app);
    let tokens = app.store.read(|storage| storage.all_tokens())?;
    let admin = |t: &StoredToken| is_live(t, now_ms) && t.scopes.iter().any(|s| s == "admin");
    if tokens.iter().any(admin) {
        return Ok(None);
    }
    let secret = new_secret()?;
    let written = secret.clone();
    let rx = app.writer.write(
        None,
        Box::new(move |ctx| {
            let created = create_token(
                ctx,
                written,
                "bootstrap-admin".into(),
                vec!["admin".into()],
                Some(BOOTSTRAP_TTL_MS),
            )?;
            crate::protocol::reply(&created).map(Some)
        }),
        Default::default(),
    )?;
    rx.await.map_err(|_| {
        Error::Unavailable("the writer stopped before the bootstrap token was stored".into())
    })??;
    let path = app.config.home.join(BOOTSTRAP_FILE);
    write_private(&path, &secret).map_err(|e| {
        Error::Unavailable(format!(
            "cannot write the one-time admin token to {} ({e}); let batond's user write its home, or create a token before setting BATON_UNIX_AUTH=token",
            path.display()
        ))
    })?;
    Ok(Some(path))
}

/// Writes `text` to a file only its owner can read or write.
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())?;
    file.write_all(b"\n")
}

impl Method for ListTokensParams {
    const SUMMARY: &'static str =
        "Live tokens (admin only): id, name, scopes, created, expires, last used; never a secret.";

    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let now_ms = database_now_ms(cx.app);
        let limit = super::paging::page_limit(self.limit, super::paging::MAX_PAGE)?;
        // Oldest first: the cursor is the last token's (created_at, token_id).
        let after: Option<(i64, String)> = self
            .after
            .as_deref()
            .map(|after| super::paging::parse_cursor(after, "ListTokens"))
            .transpose()?;
        Ok(read::<Self>(false, move |conn| {
            let mut live: Vec<_> = conn
                .all_tokens()?
                .into_iter()
                .filter(|t| is_live(t, now_ms))
                .filter(|t| {
                    after
                        .as_ref()
                        .is_none_or(|(created, id)| (t.created_at_ms, &t.token_id) > (*created, id))
                })
                .collect();
            live.sort_by(|a, b| {
                (a.created_at_ms, &a.token_id).cmp(&(b.created_at_ms, &b.token_id))
            });
            let more = live.len() as u64 > limit;
            live.truncate(limit as usize);
            let next = match more {
                true => live
                    .last()
                    .map(|t| super::paging::cursor(&(t.created_at_ms, &t.token_id)))
                    .transpose()?,
                false => None,
            };
            let tokens = live
                .into_iter()
                .map(|t| TokenInfo {
                    token_id: t.token_id,
                    name: t.name,
                    scopes: t.scopes,
                    created_at: format_ms(t.created_at_ms),
                    expires_at: t.expires_at_ms.map(format_ms),
                    last_used_at: t.last_used_at_ms.map(format_ms),
                })
                .collect();
            Ok(ListTokensResult { tokens, next })
        }))
    }
}

impl Method for RevokeTokenParams {
    const SUMMARY: &'static str =
        "Revoke a token (admin only): open connections using it get 401 at their next request.";

    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        let app = cx.app.clone();
        write::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            let Some(token) = ctx.tokens().token_by_id(&self.token_id)? else {
                return Err(Error::NotFound(format!(
                    "no token has the id `{}`; list them with ListTokens (`baton token list`)",
                    self.token_id
                )));
            };
            // Cut off at once; should the commit fail, the token stays unusable until a
            // restart, which is the safe side.
            app.auth.revoke(&token.token_id);
            if token.revoked_at_ms.is_some() {
                return Ok(RevokeTokenResult { revoked: true });
            }
            ctx.tokens()
                .set_token_revoked(&token.token_id, ctx.now_ms)?;
            let seq = ctx.next_revision();
            let data = serde_json::json!({ "token_id": token.token_id, "name": token.name });
            journal::append(
                ctx,
                seq,
                &NewEvent {
                    data: &data.to_string(),
                    ..NewEvent::of(EventType::TokenRevoked)
                },
            )?;
            Ok(RevokeTokenResult { revoked: true })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_long_random_and_recognisable() {
        let a = new_secret().unwrap();
        let b = new_secret().unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX));
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 64, "256 bits in hex");
        assert_eq!(hash_secret(&a).len(), 64);
        assert_ne!(hash_secret(&a), hash_secret(&b));
    }
}
