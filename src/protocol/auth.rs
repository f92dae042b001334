//! Authentication and access tokens: the params and results of Authenticate, CreateToken,
//! ListTokens and RevokeToken.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

requests! {
    AuthenticateParams => "Authenticate", AuthenticateResult;
    CreateTokenParams => "CreateToken", CreateTokenResult;
    ListTokensParams => "ListTokens", ListTokensResult;
    RevokeTokenParams => "RevokeToken", RevokeTokenResult;
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthenticateParams {
    /// The secret CreateToken returned (`baton_...`).
    pub token: String,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct AuthenticateResult {
    pub token_id: String,
    pub name: String,
    pub scopes: Vec<String>,
    /// When the token stops working; absent for a token without expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTokenParams {
    /// Who or what the token is for (an agent, a host): 1 to 128 bytes.
    pub name: String,
    /// Grants: `admin`, `kv:read:PATTERN`, `kv:write:PATTERN`, `locks:PATTERN`,
    /// `tasks:read`, `tasks:write`, `tasks:work`, `events:read`, `events:publish`,
    /// `agents`. A PATTERN is exact, or a prefix ending in `*`.
    pub scopes: Vec<String>,
    /// Lifetime in seconds; the token never expires when absent.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    // Absent is null, as the schema says (skipping None in serialization hides that).
    #[schemars(extend("default" = null), range(min = 1))]
    pub ttl_secs: Option<u64>,
    /// Makes a retry safe: a repeat with the same key and params within 24 hours gets the
    /// first answer again and changes nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct CreateTokenResult {
    pub token_id: String,
    /// The secret: shown this once, stored only as a hash. Keep it like a password.
    pub token: String,
    pub name: String,
    pub scopes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTokensParams {
    /// At most this many, 1 to 1000 [default: 1000]; a page also stops at 8 MiB.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// The previous page's `next`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// A token as ListTokens shows it: never its secret.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct TokenInfo {
    pub token_id: String,
    pub name: String,
    pub scopes: Vec<String>,
    pub created_at: String,
    pub expires_at: Option<String>,
    /// The last successful Authenticate with it.
    pub last_used_at: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ListTokensResult {
    /// Live tokens (not revoked, not expired), oldest first.
    pub tokens: Vec<TokenInfo>,
    /// Pass as `after` for the next page; null when nothing follows.
    #[serde(default)]
    pub next: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RevokeTokenParams {
    pub token_id: String,
    /// Makes a retry safe: a repeat with the same key and params within 24 hours gets the
    /// first answer again and changes nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct RevokeTokenResult {
    pub revoked: bool,
}
