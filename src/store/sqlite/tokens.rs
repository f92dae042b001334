//! SQL for access tokens: SQLite's [`Tokens`]. Only the hash of a secret is stored.

use rusqlite::{params, OptionalExtension, Row};

use crate::error::Result;
use crate::store::boundary::{NewToken, StoredToken, Tokens};
use crate::store::rows::with_scopes;

use super::sql::Sql;

macro_rules! token_columns {
    () => {
        "token_id, name, scopes, created_at, expires_at, revoked_at, last_used_at"
    };
}

fn token_from_row(row: &Row<'_>) -> rusqlite::Result<(StoredToken, String)> {
    Ok((
        StoredToken {
            token_id: row.get(0)?,
            name: row.get(1)?,
            scopes: Vec::new(),
            created_at_ms: row.get(3)?,
            expires_at_ms: row.get(4)?,
            revoked_at_ms: row.get(5)?,
            last_used_at_ms: row.get(6)?,
        },
        row.get(2)?,
    ))
}

impl<C: Sql> Tokens for C {
    fn insert_token(&self, token: &NewToken<'_>) -> Result<()> {
        let scopes = serde_json::to_string(token.scopes)?;
        self.with(
            concat!(
                "INSERT INTO tokens (secret_hash, ",
                token_columns!(),
                ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, NULL)"
            ),
            |s| {
                s.execute(params![
                    token.secret_hash,
                    token.token_id,
                    token.name,
                    scopes,
                    token.created_at_ms,
                    token.expires_at_ms,
                ])
            },
        )?;
        Ok(())
    }

    fn token_by_hash(&self, secret_hash: &str) -> Result<Option<StoredToken>> {
        self.with(
            concat!(
                "SELECT ",
                token_columns!(),
                " FROM tokens WHERE secret_hash = ?1"
            ),
            |s| s.query_row([secret_hash], token_from_row),
        )
        .optional()?
        .map(with_scopes)
        .transpose()
    }

    fn token_by_id(&self, token_id: &str) -> Result<Option<StoredToken>> {
        self.with(
            concat!(
                "SELECT ",
                token_columns!(),
                " FROM tokens WHERE token_id = ?1"
            ),
            |s| s.query_row([token_id], token_from_row),
        )
        .optional()?
        .map(with_scopes)
        .transpose()
    }

    fn all_tokens(&self) -> Result<Vec<StoredToken>> {
        let mut stmt = self.conn().prepare_cached(concat!(
            "SELECT ",
            token_columns!(),
            " FROM tokens ORDER BY created_at, token_id"
        ))?;
        let rows = stmt.query_map([], token_from_row)?;
        rows.map(|row| with_scopes(row?)).collect()
    }

    fn set_token_revoked(&self, token_id: &str, at_ms: i64) -> Result<()> {
        self.with(
            "UPDATE tokens SET revoked_at = ?2 WHERE token_id = ?1 AND revoked_at IS NULL",
            |s| s.execute(params![token_id, at_ms]),
        )?;
        Ok(())
    }

    fn set_token_used(&self, token_id: &str, at_ms: i64) -> Result<()> {
        self.with(
            "UPDATE tokens SET last_used_at = ?2 WHERE token_id = ?1",
            |s| s.execute(params![token_id, at_ms]),
        )?;
        Ok(())
    }
}
