//! PostgreSQL's side of [`Remembered`].

use crate::store::boundary::{Remembered, RememberedAnswer};

use crate::error::Result;

use super::PgConn;

impl Remembered for PgConn {
    fn remembered(&self, key: &str) -> Result<Option<RememberedAnswer>> {
        todo!("PostgreSQL: Remembered")
    }

    fn remember(
        &self,
        key: &str,
        method: &str,
        request_hash: &[u8],
        response: &str,
        at_ms: i64,
    ) -> Result<()> {
        todo!("PostgreSQL: Remembered")
    }

    fn forget_before(&self, before_ms: i64) -> Result<()> {
        todo!("PostgreSQL: Remembered")
    }
}
