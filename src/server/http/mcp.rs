//! MCP over HTTP at `/mcp`: MCP's Streamable HTTP transport, served by rmcp's own server
//! transport, with the very tools, groups, hints and agent tools of `mcp-bridge`. Each MCP
//! session is a [`Bridge`] whose connections to batond are in-process ones, served like
//! any other connection: they authenticate with the bearer token the session opened with,
//! so its grants apply call by call, and they close when the session ends (the client's
//! DELETE, or `BATON_MCP_IDLE_MS` without a request), which ends the session's claims and
//! its agent session as a closed `mcp-bridge` would.
//!
//! Only `Authorization: Bearer` is taken here, never the dashboard's cookie: a browser
//! cannot send that header cross-site without a CORS preflight batond never answers, so a
//! page elsewhere (or a DNS-rebound one) cannot act through a visitor's login. That is
//! why the transport's own Host allow-list (meant for unauthenticated local servers) is
//! off: batond is reached by whatever name its certificate carries.
//!
//! The protocol versions offered are those with an `initialize` handshake (up to
//! 2025-11-25): a client that probes with `server/discover` falls back to it, and an MCP
//! session is then what ties a model's calls to one agent, as the contract asks.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, DiscoverResult, InitializeRequestParams,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use sha2::{Digest, Sha256};

use crate::bridge::tools::Group;
use crate::bridge::Bridge;
use crate::client::{Dialer, Endpoint, Target};
use crate::methods::scopes::Need;

use super::dashboard::query;
use super::{in_process, refuse, verify, Http, MAX_BODY_BYTES};

/// The groups a session serves without `?tools=`: `mcp-bridge`'s default.
const DEFAULT_GROUPS: &str = "locks,state";

/// How a request to `/mcp` was let in: the token, whom the session acts for, its tools.
#[derive(Clone)]
struct Admitted {
    token: String,
    agent: String,
    groups: Vec<Group>,
}

/// `/mcp`, for `serve`'s router.
pub(super) fn routes(http: &Arc<Http>) -> Router<Arc<Http>> {
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(Duration::from_millis(http.app.config.mcp_idle_ms));
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(http.shutdown.child_token());
    let factory = {
        let http = http.clone();
        move || Ok(McpSession::new(http.clone()))
    };
    let service = StreamableHttpService::new(factory, Arc::new(sessions), config);
    Router::new()
        .route_service("/mcp", service)
        .route_layer(axum::middleware::from_fn_with_state(http.clone(), admit))
}

/// Lets a request through only with a live bearer token (401 otherwise, with a
/// `WWW-Authenticate` challenge), and an `?agent=` the token may act as (403), and says
/// so to the session (the request's extensions, which rmcp hands the handler).
async fn admit(State(http): State<Arc<Http>>, mut request: Request, next: Next) -> Response {
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_string());
    let Some(token) = bearer else {
        return challenge(
            "/mcp needs a token: send `Authorization: Bearer TOKEN` (make one with `baton token create NAME --grant ...`); the dashboard's login does not reach /mcp",
        );
    };
    let visitor = match verify(&http, token) {
        Ok(visitor) => visitor,
        Err(refused) if refused.status == StatusCode::UNAUTHORIZED => {
            return challenge(&refused.message)
        }
        Err(refused) => return refused.into_response(),
    };
    let uri = request.uri().clone();
    let groups = match Group::parse_list(&query(&uri, "tools").unwrap_or(DEFAULT_GROUPS.into())) {
        Ok(groups) => groups,
        Err(err) => {
            let err = err.replace("--tools", "?tools=");
            return refuse(StatusCode::BAD_REQUEST, &format!("/mcp?tools=: {err}"));
        }
    };
    let agent = match query(&uri, "agent").filter(|a| !a.trim().is_empty()) {
        None => visitor.name.clone(),
        Some(agent) if agent.len() > 200 => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "/mcp?agent= must be at most 200 bytes",
            )
        }
        Some(agent) => {
            let need = Need::AgentName(agent.clone());
            if agent != visitor.name && !visitor.scopes.allows(&need) {
                return refuse(
                    StatusCode::FORBIDDEN,
                    &format!(
                        "this token (named {:?}) may act only as itself: ?agent={agent} needs the grant `{}` (or `agents`) on the token; drop ?agent= to act as {:?}, or use a token that has the grant",
                        visitor.name,
                        need.grant(),
                        visitor.name
                    ),
                );
            }
            agent
        }
    };
    let ending = request.method() == axum::http::Method::DELETE;
    request.extensions_mut().insert(Admitted {
        token: visitor.token,
        agent,
        groups,
    });
    let mut response = next.run(request).await;
    // rmcp answers a session's DELETE with 202; the SDKs' clients take 200 or 204 as the
    // session ended (the Python SDK warns on anything else), and nothing follows it.
    if ending && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

/// 401 with the challenge RFC 6750 asks of a bearer-token resource.
fn challenge(message: &str) -> Response {
    let mut response = refuse(StatusCode::UNAUTHORIZED, message);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"baton\""),
    );
    response
}

/// One MCP session: the bridge it serves, made at its first request from how that
/// request was admitted.
struct McpSession {
    http: Arc<Http>,
    bridge: OnceLock<Bridge>,
    /// The digest of the token the session opened with: a request of the same session
    /// with another token is refused (it would act with the first one's grants).
    token: OnceLock<[u8; 32]>,
}

impl McpSession {
    fn new(http: Arc<Http>) -> McpSession {
        McpSession {
            http,
            bridge: OnceLock::new(),
            token: OnceLock::new(),
        }
    }

    /// The session's bridge, made at its first request.
    fn bridge(&self, context: &RequestContext<RoleServer>) -> Result<&Bridge, McpError> {
        let admitted = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Admitted>())
            .ok_or_else(|| McpError::internal_error("the request was not admitted", None))?;
        let digest: [u8; 32] = Sha256::digest(admitted.token.as_bytes()).into();
        if *self.token.get_or_init(|| digest) != digest {
            return Err(McpError::invalid_request(
                "this MCP session was opened with another token; open a new session (initialize) with this one",
                None,
            ));
        }
        Ok(self.bridge.get_or_init(|| {
            let http = self.http.clone();
            let dialer = Dialer::new(move || Ok(in_process(&http, "mcp")));
            let target = Target::new(Endpoint::InProcess(dialer), Some(admitted.token.clone()));
            Bridge::new(
                target,
                admitted.groups.clone(),
                Some(admitted.agent.clone()),
            )
        }))
    }
}

impl ServerHandler for McpSession {
    fn get_info(&self) -> ServerConfig {
        match self.bridge.get() {
            Some(bridge) => bridge.get_info(),
            None => ServerConfig::default(),
        }
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(
            &ProtocolVersion::LATEST_WITH_INITIALIZE,
        ))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        self.bridge(&context)?;
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        let info = self.bridge(&context)?.get_info();
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            info,
        ))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let bridge = self.bridge(&context)?;
        bridge.list_tools(request, context).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let bridge = self.bridge(&context)?;
        bridge.call_tool(request, context).await
    }
}
