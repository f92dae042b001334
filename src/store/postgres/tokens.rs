//! PostgreSQL's side of [`Tokens`] (as SQLite's `store::sqlite::tokens`): only the hash of a
//! secret is stored.

use tokio_postgres::Row;

use crate::error::Result;
use crate::store::boundary::{NewToken, StoredToken, Tokens};
use crate::store::rows::with_scopes;

use super::PgConn;

const TOKEN_COLUMNS: &str =
    "token_id, name, scopes, created_at, expires_at, revoked_at, last_used_at";

fn token_from_row(row: &Row) -> Result<StoredToken> {
    with_scopes((
        StoredToken {
            token_id: row.get(0),
            name: row.get(1),
            scopes: Vec::new(),
            created_at_ms: row.get(3),
            expires_at_ms: row.get(4),
            revoked_at_ms: row.get(5),
            last_used_at_ms: row.get(6),
        },
        row.get(2),
    ))
}

impl Tokens for PgConn {
    fn insert_token(&self, token: &NewToken<'_>) -> Result<()> {
        self.execute(
            &format!(
                "INSERT INTO tokens (secret_hash, {TOKEN_COLUMNS})
                 VALUES ($1, $2, $3, $4, $5, $6, NULL, NULL)"
            ),
            &[
                &token.secret_hash,
                &token.token_id,
                &token.name,
                &serde_json::to_string(token.scopes)?,
                &token.created_at_ms,
                &token.expires_at_ms,
            ],
        )?;
        Ok(())
    }

    fn token_by_hash(&self, secret_hash: &str) -> Result<Option<StoredToken>> {
        self.query_opt(
            &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE secret_hash = $1"),
            &[&secret_hash],
        )?
        .map(|r| token_from_row(&r))
        .transpose()
    }

    fn token_by_id(&self, token_id: &str) -> Result<Option<StoredToken>> {
        self.query_opt(
            &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE token_id = $1"),
            &[&token_id],
        )?
        .map(|r| token_from_row(&r))
        .transpose()
    }

    fn all_tokens(&self) -> Result<Vec<StoredToken>> {
        self.query(
            &format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY created_at, token_id"),
            &[],
        )?
        .iter()
        .map(token_from_row)
        .collect()
    }

    fn set_token_revoked(&self, token_id: &str, at_ms: i64) -> Result<()> {
        self.execute(
            "UPDATE tokens SET revoked_at = $2 WHERE token_id = $1 AND revoked_at IS NULL",
            &[&token_id, &at_ms],
        )?;
        Ok(())
    }

    fn set_token_used(&self, token_id: &str, at_ms: i64) -> Result<()> {
        self.execute(
            "UPDATE tokens SET last_used_at = $2 WHERE token_id = $1",
            &[&token_id, &at_ms],
        )?;
        Ok(())
    }
}
