//! The dashboard: pages for a person supervising agents (agents, locks, tasks, the journal,
//! keys), from assets compiled into batond, so it works with no network.
//!
//! The page is a client of batond like any other: each `/api/call` runs one request on an
//! in-process connection that authenticated with the visitor's token, so the token's
//! scopes, expiry and revocation apply exactly as on a socket, and `/events` is a Subscribe
//! on such a connection, relayed as server-sent events. Read methods pass, and the
//! operator's three audited methods (BreakLock, RetryNode, EndAgentSession, which the
//! token's `operator` or `admin` grant must allow) only from the page itself: same origin,
//! and the `X-Baton-CSRF` header carrying the page's token (the `baton-csrf` meta tag, an
//! HMAC of the session's token under a key this process drew at random), which another
//! site can neither read nor compute.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, Lines};

use super::{authorized, in_process, presented, refuse, verify, Http, SESSION_COOKIE};
use crate::methods::auth::token_scopes;

const INDEX: &str = include_str!("assets/index.html");
const LOGIN: &str = include_str!("assets/login.html");
const LOGIN_CSS: &str = include_str!("assets/login.css");
const LOGIN_JS: &str = include_str!("assets/login.js");

/// The login form's nonce: set as this cookie with the form, and sent back in the form's
/// `csrf` field. Only batond's own login page knows it, so another site cannot log a
/// visitor in with a token of its choosing (login CSRF).
const LOGIN_COOKIE: &str = "baton_login";
/// The page's code and style: name, content type, body.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/app.js"),
    ),
    (
        "htm-preact.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/vendor/htm-preact.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("assets/style.css"),
    ),
];

/// The methods the dashboard calls: reads only.
pub const READ_METHODS: &[&str] = &[
    "Health",
    "ListAgents",
    "ListResourceLocks",
    "ResourceLockStatus",
    "ListTasks",
    "TaskStatus",
    "ReadEvents",
    "Get",
    "List",
    "History",
];

/// The operator's methods the dashboard may call, with the page's CSRF token only.
pub const OPERATOR_METHODS: &[&str] = &["BreakLock", "RetryNode", "EndAgentSession"];

/// The header that carries the page's CSRF token on `/api/call`.
const CSRF_HEADER: &str = "x-baton-csrf";

/// The key of the pages' CSRF tokens: drawn once per process, so a restart makes open
/// pages reload before they act.
static CSRF_KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();

/// The page's CSRF token for a session's `token`: HMAC-SHA256 under [`CSRF_KEY`], in hex.
/// It proves the request came from a page batond served to that session.
fn csrf_token(token: &str) -> Result<String, String> {
    use sha2::{Digest, Sha256};
    let key = match CSRF_KEY.get() {
        Some(key) => key,
        None => {
            let mut fresh = [0u8; 32];
            getrandom::fill(&mut fresh).map_err(|e| {
                format!("the system's random source failed ({e}); reload the page in a moment")
            })?;
            CSRF_KEY.get_or_init(|| fresh)
        }
    };
    // HMAC (RFC 2104) over a 32-byte key: the key padded to SHA-256's 64-byte block.
    let mut inner = Sha256::new();
    let mut outer = Sha256::new();
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(key);
    inner.update(block.map(|b| b ^ 0x36));
    outer.update(block.map(|b| b ^ 0x5c));
    inner.update(b"baton-csrf\0");
    inner.update(token.as_bytes());
    outer.update(inner.finalize());
    Ok(outer
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Whether a request may call an operator's method: same origin, and its `X-Baton-CSRF`
/// header is the page's token for the session it presents; else why not.
fn operator_allowed(http: &Http, headers: &HeaderMap) -> Result<(), String> {
    if let Some(why) = cross_site(http, headers) {
        return Err(format!(
            "refused: {why}; operator actions are taken on the dashboard's own page only"
        ));
    }
    let expected = match presented(headers) {
        Some(token) => csrf_token(&token)?,
        None => return Err(HOW_TO_LOG_IN.into()),
    };
    let sent = headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // Compared in constant time: the token is a secret.
    let differs = sent.len() != expected.len()
        || sent
            .bytes()
            .zip(expected.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            != 0;
    if differs {
        return Err(
            "refused: operator actions need the page's X-Baton-CSRF header (its baton-csrf meta tag), which this request lacks or which is stale (batond restarted, or another session's); reload the dashboard and try again".into(),
        );
    }
    Ok(())
}

/// How often an open event stream checks that its token is still valid.
const RECHECK_TOKEN: std::time::Duration = std::time::Duration::from_secs(15);

/// Events the journal tail starts with when a page opens.
const MAX_TAIL: u64 = 1000;

/// Nothing but this origin: no CDN, no inline script, no frame.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

const HOW_TO_LOG_IN: &str = "log in with a token: open the URL that `baton dashboard` prints, or send Authorization: Bearer <token>";

const NOT_VALID: &str =
    "That token is not valid (unknown, expired or revoked). Get a new one with `baton dashboard`.";

pub(super) fn routes() -> Router<Arc<Http>> {
    Router::new()
        .route("/", get(index))
        .route("/login", get(login_form).post(login))
        .route("/logout", get(logout))
        .route("/assets/login.css", get(login_css))
        .route("/assets/login.js", get(login_js))
        .route("/assets/{name}", get(asset))
        .route("/api/call", post(call))
        .route("/events", get(events))
}

/// An HTML page, with headers that keep it to this origin and out of caches.
fn page(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

/// The login form, with a fresh nonce in its `csrf` field and in the [`LOGIN_COOKIE`].
fn login_page(http: &Http, status: StatusCode, message: &str) -> Response {
    login_page_with(http, status, message, false)
}

/// [`login_page`]; with `auto`, its script logs in with the token in the address's
/// fragment (`baton dashboard`'s URL).
fn login_page_with(http: &Http, status: StatusCode, message: &str, auto: bool) -> Response {
    let nonce = match new_nonce() {
        Ok(nonce) => nonce,
        Err(err) => return refuse(StatusCode::SERVICE_UNAVAILABLE, &err),
    };
    let body = LOGIN
        .replace("{{message}}", &escape_html(message))
        .replace("{{csrf}}", &nonce)
        .replace("{{auto}}", if auto { "on" } else { "off" });
    let mut response = page(status, body);
    // With no-referrer, a browser sends the form's POST with `Origin: null`: the login
    // checks the origin, and this page's address holds nothing secret (the fragment is
    // never part of a referrer).
    response.headers_mut().insert(
        header::REFERRER_POLICY,
        header::HeaderValue::from_static("same-origin"),
    );
    let cookie = format!(
        "{LOGIN_COOKIE}={nonce}; Path=/login; HttpOnly; SameSite=Strict{}",
        if http.tls { "; Secure" } else { "" }
    );
    if let Ok(cookie) = header::HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

/// 16 random bytes in hex.
fn new_nonce() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        format!("the system's random source failed ({e}); reload the page in a moment")
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Why a login (or an operator's call) is not from this dashboard's own page, if it is
/// not: the browser says the request is cross-site (`Sec-Fetch-Site`), or comes from
/// another origin (`Origin`).
fn cross_site(http: &Http, headers: &HeaderMap) -> Option<String> {
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if let Some(site) = site.filter(|s| !matches!(*s, "same-origin" | "none")) {
        return Some(format!(
            "the browser says this request came from another site ({site})"
        ));
    }
    let origin = headers.get(header::ORIGIN)?.to_str().unwrap_or("");
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let ours = format!("{}://{host}", if http.tls { "https" } else { "http" });
    (origin != ours).then(|| format!("this request came from {origin}, not from {ours}"))
}

fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// One parameter of the query string, percent-decoded.
pub(super) fn query(uri: &Uri, name: &str) -> Option<String> {
    field(uri.query()?, name)
}

/// One field of `a=1&b=2` (a query string, or a form's urlencoded body), percent-decoded.
fn field(pairs: &str, name: &str) -> Option<String> {
    pairs
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| {
            percent_encoding::percent_decode_str(&value.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        })
}

async fn index(State(http): State<Arc<Http>>, headers: HeaderMap) -> Response {
    if presented(&headers).is_none() {
        return login_page(
            &http,
            StatusCode::UNAUTHORIZED,
            "Log in with a token to see what your agents are doing.",
        );
    }
    match authorized(&http, &headers, HOW_TO_LOG_IN) {
        // The page's CSRF token goes in its `baton-csrf` meta tag.
        Ok(visitor) => match csrf_token(&visitor.token) {
            Ok(csrf) => page(StatusCode::OK, INDEX.replace("{{csrf}}", &csrf)),
            Err(err) => refuse(StatusCode::SERVICE_UNAVAILABLE, &err),
        },
        Err(refused) if refused.status == StatusCode::UNAUTHORIZED => {
            login_page(&http, StatusCode::UNAUTHORIZED, NOT_VALID)
        }
        Err(refused) => refused.into_response(),
    }
}

/// `GET /login`: the login form. `baton dashboard` opens `/login#token=...`: the fragment
/// never leaves the browser, and the page's script takes it out of the address bar and
/// posts it. A token in the query string is refused: it would stay in the history.
async fn login_form(State(http): State<Arc<Http>>, headers: HeaderMap, uri: Uri) -> Response {
    if query(&uri, "token").is_some() {
        return login_page(
            &http,
            StatusCode::BAD_REQUEST,
            "A token does not go in the address (it would stay in the browser's history). Paste it below, or open the URL `baton dashboard` prints.",
        );
    }
    // Opened from the terminal, typed, or from this dashboard: the fragment's token logs
    // in. Sent here by another site: it does not, or that site could log the visitor in
    // with a token of its own.
    if cross_site(&http, &headers).is_some() {
        return login_page_with(
            &http,
            StatusCode::OK,
            "Another site sent you here: log in only with a token you got yourself (`baton dashboard`).",
            false,
        );
    }
    login_page_with(
        &http,
        StatusCode::OK,
        "Log in with a token to see what your agents are doing.",
        true,
    )
}

/// A request's body, or the answer to a body axum refused: 413 over the limit, else
/// `other` with the rejection's status and text.
fn body_or(
    body: Result<Bytes, BytesRejection>,
    other: fn(StatusCode, &str) -> Response,
) -> Result<Bytes, Box<Response>> {
    body.map_err(|rejected| {
        Box::new(match rejected.status() {
            StatusCode::PAYLOAD_TOO_LARGE => super::body_too_large(),
            status => other(status, &rejected.body_text()),
        })
    })
}

/// `POST /login` (the login form, urlencoded `token` and `csrf`): only from this
/// dashboard's own page (same origin, and the form's nonce matching its cookie); sets the
/// session cookie and goes to the dashboard.
async fn login(
    State(http): State<Arc<Http>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body_or(body, refuse) {
        Ok(body) => body,
        Err(response) => return *response,
    };
    let form = String::from_utf8_lossy(&body);
    if let Some(why) = cross_site(&http, &headers) {
        return login_page(
            &http,
            StatusCode::FORBIDDEN,
            &format!(
                "Refused: {why}. Log in on this page, or open the URL `baton dashboard` prints."
            ),
        );
    }
    let nonce = field(&form, "csrf").unwrap_or_default();
    if nonce.is_empty() || super::cookie(&headers, LOGIN_COOKIE) != Some(nonce.as_str()) {
        return login_page(
            &http,
            StatusCode::FORBIDDEN,
            "Refused: this login did not come from this dashboard's own login page (or that page was stale). Log in on this page, or open the URL `baton dashboard` prints.",
        );
    }
    let Some(token) = field(&form, "token").filter(|t| !t.trim().is_empty()) else {
        return login_page(&http, StatusCode::UNAUTHORIZED, "Paste a token to log in.");
    };
    let visitor = match verify(&http, token.trim().to_string()) {
        Ok(visitor) => visitor,
        Err(refused) if refused.status == StatusCode::UNAUTHORIZED => {
            return login_page(&http, StatusCode::UNAUTHORIZED, NOT_VALID)
        }
        Err(refused) => return refused.into_response(),
    };
    // A valid token is `baton_` and hex: nothing in it can break out of the cookie.
    let cookie = format!(
        "{SESSION_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict{}",
        visitor.token,
        if http.tls { "; Secure" } else { "" }
    );
    let mut response = (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/".to_string()),
            (header::SET_COOKIE, cookie),
            (header::CACHE_CONTROL, "no-store".to_string()),
            (header::REFERRER_POLICY, "no-referrer".to_string()),
        ],
    )
        .into_response();
    // The nonce has served.
    response.headers_mut().append(
        header::SET_COOKIE,
        header::HeaderValue::from_static("baton_login=; Path=/login; Max-Age=0"),
    );
    response
}

async fn logout() -> Response {
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/".to_string()),
            (
                header::SET_COOKIE,
                format!("{SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"),
            ),
        ],
    )
        .into_response()
}

async fn login_css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        LOGIN_CSS,
    )
        .into_response()
}

async fn login_js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        LOGIN_JS,
    )
        .into_response()
}

async fn asset(
    State(http): State<Arc<Http>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    if let Err(refused) = authorized(&http, &headers, HOW_TO_LOG_IN) {
        return refused.into_response();
    }
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, body)) => (
            [
                (header::CONTENT_TYPE, *content_type),
                (header::CACHE_CONTROL, "no-cache"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            *body,
        )
            .into_response(),
        None => refuse(StatusCode::NOT_FOUND, "no such asset"),
    }
}

fn json_answer(status: StatusCode, answer: &Value) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        answer.to_string(),
    )
        .into_response()
}

fn json_error(status: StatusCode, message: &str) -> Response {
    json_answer(
        status,
        &json!({"error": {"code": status.as_u16(), "message": message}}),
    )
}

/// `POST /api/call {method, params}`: one read method, or an operator's method from the
/// page itself ([`operator_allowed`]), answered as batond answers it (`{result}` or
/// `{error}`).
async fn call(
    State(http): State<Arc<Http>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body_or(body, json_error) {
        Ok(body) => body,
        Err(response) => return *response,
    };
    // The connection's Authenticate is the token check (401 when it fails).
    let mut conn = match connect(&http, &headers).await {
        Ok(conn) => conn,
        Err(refused) => return refused,
    };
    // A cross-site form cannot send this content type without the browser asking first.
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return json_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the call as Content-Type: application/json",
        );
    }
    #[derive(Deserialize)]
    struct Call {
        method: String,
        #[serde(default)]
        params: Option<Value>,
    }
    let request: Call = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(err) => {
            return json_error(
                StatusCode::BAD_REQUEST,
                &format!("send {{\"method\": NAME, \"params\": {{...}}}} ({err})"),
            )
        }
    };
    if OPERATOR_METHODS.contains(&request.method.as_str()) {
        if let Err(why) = operator_allowed(&http, &headers) {
            return json_error(StatusCode::FORBIDDEN, &why);
        }
    } else if !READ_METHODS.contains(&request.method.as_str()) {
        return json_error(
            StatusCode::FORBIDDEN,
            &format!(
                "{} is not one of the dashboard's methods: it reads ({}) and, for operators, calls {}",
                request.method,
                READ_METHODS.join(", "),
                OPERATOR_METHODS.join(", ")
            ),
        );
    }
    let params = request.params.unwrap_or_else(|| json!({}));
    match conn.call(&request.method, params).await {
        // A line over BATON_MAX_LINE_BYTES: batond could not read its id.
        Ok(answer) if answer["error"]["code"] == json!(-32001) => {
            json_answer(StatusCode::PAYLOAD_TOO_LARGE, &answer)
        }
        Ok(answer) => json_answer(StatusCode::OK, &answer),
        Err(err) => json_error(StatusCode::SERVICE_UNAVAILABLE, &err.to_string()),
    }
}

/// `GET /events`: the journal as server-sent events, one per event (`id` is its seq),
/// from after `Last-Event-ID` when the browser reconnects, else from `since_seq`, else
/// the last `tail` events (at most 1,000), then live; and a `waiting` event whenever
/// requests start or stop waiting for locks, which the journal does not record.
async fn events(State(http): State<Arc<Http>>, headers: HeaderMap, uri: Uri) -> Response {
    let Some(token) = presented(&headers) else {
        return refuse(StatusCode::UNAUTHORIZED, HOW_TO_LOG_IN);
    };
    // An event's seq is below 2^63: anything else is the client's mistake (400), never
    // batond's (503).
    let seq = |what: &str, raw: &str| -> Result<u64, String> {
        match raw.trim().parse::<u64>() {
            Ok(seq) if seq <= i64::MAX as u64 => Ok(seq),
            _ => Err(format!("{what} must be an event's seq, a whole number from 0 to 2^63 - 1; reload the page to start from the newest events")),
        }
    };
    let resumed = match headers.get("last-event-id") {
        Some(raw) => match seq("Last-Event-ID", raw.to_str().unwrap_or("")) {
            Ok(seq) => Some(seq),
            Err(why) => return json_error(StatusCode::BAD_REQUEST, &why),
        },
        None => None,
    };
    let asked = match query(&uri, "since_seq") {
        Some(raw) if resumed.is_none() => match seq("since_seq", &raw) {
            Ok(seq) => Some(seq),
            Err(why) => return json_error(StatusCode::BAD_REQUEST, &why),
        },
        _ => None,
    };
    let since = resumed.or(asked).unwrap_or_else(|| {
        let tail = query(&uri, "tail")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            .min(MAX_TAIL);
        let head = *http.app.writer.head().borrow();
        head.saturating_sub(tail)
    });
    // The connection's Authenticate is the token check (401 when it fails).
    let mut conn = match Inproc::open(&http, &token).await {
        Ok(conn) => conn,
        Err(refused) => return refused.into_response(),
    };
    let mut answer = conn.call("Subscribe", json!({ "since_seq": since })).await;
    if matches!(&answer, Ok(a) if a["error"]["code"] == 416) {
        // Compacted past where the page was: go on from now.
        answer = conn.call("Subscribe", json!({})).await;
    }
    match answer {
        Ok(answer) if answer.get("result").is_some() => {}
        Ok(answer) => {
            // batond's own codes are HTTP's; JSON-RPC's (negative) are the request's fault.
            let code = answer["error"]["code"].as_i64().unwrap_or(503);
            let status = match u16::try_from(code) {
                Ok(code) => StatusCode::from_u16(code).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
                Err(_) => StatusCode::BAD_REQUEST,
            };
            return json_answer(status, &answer);
        }
        Err(err) => return json_error(StatusCode::SERVICE_UNAVAILABLE, &err.to_string()),
    }
    let mut waiters = http.app.writer.waits_changed();
    waiters.borrow_and_update();
    let mut recheck = tokio::time::interval(RECHECK_TOKEN);
    recheck.reset();
    let state = (conn, http.clone(), token, waiters, recheck);
    let stream = futures::stream::unfold(state, |state| async move {
        let (mut conn, http, token, mut waiters, mut recheck) = state;
        loop {
            let line = tokio::select! {
                _ = http.shutdown.cancelled() => return None,
                _ = recheck.tick() => {
                    // A revoked or expired token ends the stream too; the browser's
                    // reconnection is then refused and the page goes back to the login.
                    match tokio::task::block_in_place(|| token_scopes(&http.app, &token)) {
                        Ok(None) => return None,
                        Ok(Some(_)) | Err(_) => continue,
                    }
                }
                changed = waiters.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    // Not a journal event: a request began or stopped waiting for a lock.
                    let sse = Event::default().event("waiting").data("{}");
                    let state = (conn, http, token, waiters, recheck);
                    return Some((Ok::<_, Infallible>(sse), state));
                }
                line = conn.next() => line,
            };
            // The connection ended or the subscription did (it fell behind): the browser
            // reconnects from the last id it saw.
            let Ok(Some(line)) = line else { return None };
            match line["method"].as_str() {
                // The token was revoked or expired: the stream ends (within the second
                // the daemon gives itself), and the reconnection is refused.
                Some("Event") if line["params"].get("ended").is_some() => return None,
                Some("Event") => {
                    let event = &line["params"]["event"];
                    let sse = Event::default()
                        .id(event["seq"].to_string())
                        .data(event.to_string());
                    return Some((Ok(sse), (conn, http, token, waiters, recheck)));
                }
                Some("SubscriptionEnded") => return None,
                _ => continue,
            }
        }
    });
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, "no-store".parse().expect("a header"));
    response
}

/// An in-process connection authenticated with the token the request presents; else the
/// refusal (401).
async fn connect(http: &Http, headers: &HeaderMap) -> Result<Inproc, Response> {
    match presented(headers) {
        Some(token) => Inproc::open(http, &token).await,
        None => Err(refuse(StatusCode::UNAUTHORIZED, HOW_TO_LOG_IN)),
    }
}

/// A connection to this daemon inside the process, served by `connection::serve` like a
/// network one, so it must authenticate and its token's grants apply.
struct Inproc {
    lines: Lines<BufReader<Box<dyn AsyncRead + Send + Unpin>>>,
    writer: Box<dyn AsyncWrite + Send + Unpin>,
    next_id: u64,
}

impl Inproc {
    /// Opens one and authenticates it with `token`; a refused token is 401.
    async fn open(http: &Http, token: &str) -> Result<Inproc, Response> {
        let (reader, writer) = in_process(http, "dashboard");
        let mut conn = Inproc {
            lines: BufReader::new(reader).lines(),
            writer,
            next_id: 1,
        };
        match conn.call("Authenticate", json!({ "token": token })).await {
            Ok(answer) if answer.get("result").is_some() => Ok(conn),
            Ok(answer) => Err(refuse(
                StatusCode::UNAUTHORIZED,
                answer["error"]["message"]
                    .as_str()
                    .unwrap_or("the token was refused"),
            )),
            Err(err) => Err(refuse(StatusCode::SERVICE_UNAVAILABLE, &err.to_string())),
        }
    }

    /// Sends one request; its answer (notifications in between are dropped).
    async fn call(&mut self, method: &str, params: Value) -> std::io::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = serde_json::to_vec(&json!({"id": id, "method": method, "params": params}))?;
        line.push(b'\n');
        self.writer.write_all(&line).await?;
        self.writer.flush().await?;
        loop {
            match self.next().await? {
                Some(answer) if answer["id"] == json!(id) => return Ok(answer),
                // batond could not read the line (too long, say), so not its id either:
                // with one call at a time, the answer is this call's.
                Some(answer) if answer["id"].is_null() && answer.get("error").is_some() => {
                    return Ok(answer)
                }
                Some(_) => continue,
                None => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "batond is shutting down; retry in a moment",
                    ))
                }
            }
        }
    }

    /// The next line from batond, or None once it closed the connection.
    async fn next(&mut self) -> std::io::Result<Option<Value>> {
        match self.lines.next_line().await? {
            Some(line) => Ok(Some(serde_json::from_str(&line)?)),
            None => Ok(None),
        }
    }
}
