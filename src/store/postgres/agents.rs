//! PostgreSQL's side of [`Agents`]: sessions, the names that ever registered and their
//! owners, inboxes (same meaning as SQLite's `store::sqlite::agents`).

use tokio_postgres::Row;

use crate::error::Result;
use crate::store::boundary::{Agents, MessageRow, NameOwner, SessionRow};

use super::{i, u, PgConn};

const SESSION_COLUMNS: &str = "name, session_id, role, metadata, started_at, last_seen, expires_at, token_id, holder_connection";

fn session_row(r: &Row) -> SessionRow {
    SessionRow {
        name: r.get(0),
        session_id: r.get(1),
        role: r.get(2),
        metadata: r.get(3),
        started_at: r.get(4),
        last_seen: r.get(5),
        expires_at: r.get(6),
        token_id: r.get(7),
        holder_connection: r.get::<_, Option<i64>>(8).map(u),
    }
}

fn message_row(r: &Row) -> MessageRow {
    MessageRow {
        seq: r.get(0),
        message_id: r.get(1),
        sender: r.get(2),
        recipients: r.get(3),
        subject: r.get(4),
        body: r.get(5),
        thread_id: r.get(6),
        reply_to: r.get(7),
        sent_at: r.get(8),
    }
}

impl Agents for PgConn {
    fn session(&self, name: &str) -> Result<Option<SessionRow>> {
        let row = self.query_opt(
            &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE name = $1"),
            &[&name],
        )?;
        Ok(row.as_ref().map(session_row))
    }

    fn session_by_id(&self, session_id: &str) -> Result<Option<SessionRow>> {
        let row = self.query_opt(
            &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = $1"),
            &[&session_id],
        )?;
        Ok(row.as_ref().map(session_row))
    }

    fn sessions(&self) -> Result<Vec<SessionRow>> {
        let rows = self.query(
            &format!("SELECT {SESSION_COLUMNS} FROM sessions ORDER BY name"),
            &[],
        )?;
        Ok(rows.iter().map(session_row).collect())
    }

    fn insert_session(&self, s: &SessionRow) -> Result<()> {
        self.touch(super::AGENTS).execute(
            &format!(
                "INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
            ),
            &[
                &s.name,
                &s.session_id,
                &s.role,
                &s.metadata,
                &s.started_at,
                &s.last_seen,
                &s.expires_at,
                &s.token_id,
                &s.holder_connection.map(i),
            ],
        )?;
        Ok(())
    }

    fn touch_session(&self, name: &str, last_seen: i64, expires_at: i64) -> Result<()> {
        self.touch(super::AGENTS).execute(
            "UPDATE sessions SET last_seen = $2, expires_at = $3 WHERE name = $1",
            &[&name, &last_seen, &expires_at],
        )?;
        Ok(())
    }

    fn delete_session(&self, name: &str) -> Result<()> {
        self.touch(super::AGENTS)
            .execute("DELETE FROM sessions WHERE name = $1", &[&name])?;
        Ok(())
    }

    fn name_owner(&self, name: &str) -> Result<Option<NameOwner>> {
        let row = self.query_opt(
            "SELECT owner_token_id FROM agents WHERE name = $1 AND claimed_at IS NOT NULL",
            &[&name],
        )?;
        Ok(row.map(|r| NameOwner { token_id: r.get(0) }))
    }

    fn remember_agent(&self, name: &str, owner: &NameOwner, at_ms: i64) -> Result<()> {
        self.touch(super::AGENTS).execute(
            "INSERT INTO agents (name, first_seen, claimed_at, owner_token_id)
             VALUES ($1, $2, $2, $3)
             ON CONFLICT (name) DO UPDATE
                SET claimed_at = EXCLUDED.claimed_at, owner_token_id = EXCLUDED.owner_token_id
                WHERE agents.claimed_at IS NULL",
            &[&name, &at_ms, &owner.token_id],
        )?;
        Ok(())
    }

    fn agent_names(&self) -> Result<Vec<String>> {
        let rows = self.query("SELECT name FROM agents ORDER BY name", &[])?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn insert_message(&self, m: &MessageRow, to: &[String]) -> Result<()> {
        self.touch(super::AGENTS).execute(
            "INSERT INTO messages (seq, message_id, sender, recipients, subject, body, thread_id,
                                   reply_to, sent_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            &[
                &m.seq,
                &m.message_id,
                &m.sender,
                &m.recipients,
                &m.subject,
                &m.body,
                &m.thread_id,
                &m.reply_to,
                &m.sent_at,
            ],
        )?;
        // Every recipient in one statement.
        self.touch(super::AGENTS).execute(
            "INSERT INTO inbox (name, seq) SELECT DISTINCT unnest($1::text[]), $2::bigint
             ON CONFLICT DO NOTHING",
            &[&to, &m.seq],
        )?;
        Ok(())
    }

    fn inbox(&self, name: &str, after: u64, limit: u64) -> Result<Vec<MessageRow>> {
        let rows = self.query(
            "SELECT m.seq, m.message_id, m.sender, m.recipients, m.subject, m.body, m.thread_id,
                    m.reply_to, m.sent_at
             FROM inbox i JOIN messages m ON m.seq = i.seq
             WHERE i.name = $1 AND i.seq > $2 ORDER BY i.seq LIMIT $3",
            &[&name, &i(after), &i(limit)],
        )?;
        Ok(rows.iter().map(message_row).collect())
    }

    fn inbox_count(&self, name: &str, after: u64, up_to: Option<u64>) -> Result<u64> {
        let row = self.query_one(
            "SELECT count(*) FROM inbox
             WHERE name = $1 AND seq > $2 AND ($3::bigint IS NULL OR seq <= $3)",
            &[&name, &i(after), &up_to.map(i)],
        )?;
        Ok(u(row.get(0)))
    }

    fn newest_message(&self, name: &str) -> Result<u64> {
        let row = self.query_one(
            "SELECT COALESCE(MAX(seq), 0)::bigint FROM inbox WHERE name = $1",
            &[&name],
        )?;
        Ok(u(row.get(0)))
    }

    fn cursor(&self, name: &str) -> Result<u64> {
        let row = self.query_opt("SELECT acked FROM inbox_cursors WHERE name = $1", &[&name])?;
        Ok(row.map_or(0, |r| u(r.get(0))))
    }

    fn set_cursor(&self, name: &str, acked: u64) -> Result<()> {
        self.touch(super::AGENTS).execute(
            "INSERT INTO inbox_cursors (name, acked) VALUES ($1, $2)
             ON CONFLICT (name) DO UPDATE SET acked = EXCLUDED.acked",
            &[&name, &i(acked)],
        )?;
        Ok(())
    }
}
