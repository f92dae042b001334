//! PostgreSQL's side of [`Tokens`].

use crate::store::boundary::{NewToken, StoredToken, Tokens};

use crate::error::Result;

use super::PgConn;

impl Tokens for PgConn {
    fn insert_token(&self, token: &NewToken<'_>) -> Result<()> {
        todo!("PostgreSQL: Tokens")
    }

    fn token_by_hash(&self, secret_hash: &str) -> Result<Option<StoredToken>> {
        todo!("PostgreSQL: Tokens")
    }

    fn token_by_id(&self, token_id: &str) -> Result<Option<StoredToken>> {
        todo!("PostgreSQL: Tokens")
    }

    fn all_tokens(&self) -> Result<Vec<StoredToken>> {
        todo!("PostgreSQL: Tokens")
    }

    fn set_token_revoked(&self, token_id: &str, at_ms: i64) -> Result<()> {
        todo!("PostgreSQL: Tokens")
    }

    fn set_token_used(&self, token_id: &str, at_ms: i64) -> Result<()> {
        todo!("PostgreSQL: Tokens")
    }
}
