//! PostgreSQL's side of [`Agents`].

use crate::store::boundary::{Agents, MessageRow, SessionRow};

use crate::error::Result;

use super::PgConn;

impl Agents for PgConn {
    fn session(&self, name: &str) -> Result<Option<SessionRow>> {
        todo!("PostgreSQL: Agents")
    }

    fn session_by_id(&self, session_id: &str) -> Result<Option<SessionRow>> {
        todo!("PostgreSQL: Agents")
    }

    fn sessions(&self) -> Result<Vec<SessionRow>> {
        todo!("PostgreSQL: Agents")
    }

    fn insert_session(&self, session: &SessionRow) -> Result<()> {
        todo!("PostgreSQL: Agents")
    }

    fn touch_session(&self, name: &str, last_seen: i64, expires_at: i64) -> Result<()> {
        todo!("PostgreSQL: Agents")
    }

    fn delete_session(&self, name: &str) -> Result<()> {
        todo!("PostgreSQL: Agents")
    }

    fn remember_agent(&self, name: &str, at_ms: i64) -> Result<()> {
        todo!("PostgreSQL: Agents")
    }

    fn agent_names(&self) -> Result<Vec<String>> {
        todo!("PostgreSQL: Agents")
    }

    fn insert_message(&self, message: &MessageRow, to: &[String]) -> Result<()> {
        todo!("PostgreSQL: Agents")
    }

    fn inbox(&self, name: &str, after: u64, limit: u64) -> Result<Vec<MessageRow>> {
        todo!("PostgreSQL: Agents")
    }

    fn inbox_count(&self, name: &str, after: u64, up_to: Option<u64>) -> Result<u64> {
        todo!("PostgreSQL: Agents")
    }

    fn cursor(&self, name: &str) -> Result<u64> {
        todo!("PostgreSQL: Agents")
    }

    fn set_cursor(&self, name: &str, acked: u64) -> Result<()> {
        todo!("PostgreSQL: Agents")
    }
}
