//! PostgreSQL's side of [`Meta`].

use crate::store::boundary::Meta;

use crate::error::Result;

use super::PgConn;

impl Meta for PgConn {
    fn head_revision(&self) -> Result<i64> {
        todo!("PostgreSQL: Meta")
    }

    fn set_head_revision(&self, revision: i64) -> Result<()> {
        todo!("PostgreSQL: Meta")
    }

    fn file_sizes(&self) -> Result<(u64, u64)> {
        todo!("PostgreSQL: Meta")
    }
}
