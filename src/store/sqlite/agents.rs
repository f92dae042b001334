//! SQL for sessions (`sessions`), the names that ever registered and the token that owns
//! each (`agents`), and the inboxes (`messages`, `inbox`, `inbox_cursors`): SQLite's side
//! of [`Agents`]. Who may register, when a session ends and who is told are rules in
//! `methods::agents`.

use rusqlite::{params, OptionalExtension, Row};

use crate::error::Result;
use crate::store::boundary::{Agents, MessageRow, NameOwner, SessionRow};

use super::sql::Sql;

const SESSION_COLUMNS: &str = "name, session_id, role, metadata, started_at, last_seen, expires_at, token_id, holder_connection";

fn session_row(r: &Row<'_>) -> rusqlite::Result<SessionRow> {
    Ok(SessionRow {
        name: r.get(0)?,
        session_id: r.get(1)?,
        role: r.get(2)?,
        metadata: r.get(3)?,
        started_at: r.get(4)?,
        last_seen: r.get(5)?,
        expires_at: r.get(6)?,
        token_id: r.get(7)?,
        holder_connection: r.get(8)?,
    })
}

fn message_row(r: &Row<'_>) -> rusqlite::Result<MessageRow> {
    Ok(MessageRow {
        seq: r.get(0)?,
        message_id: r.get(1)?,
        sender: r.get(2)?,
        recipients: r.get(3)?,
        subject: r.get(4)?,
        body: r.get(5)?,
        thread_id: r.get(6)?,
        reply_to: r.get(7)?,
        sent_at: r.get(8)?,
    })
}

impl<C: Sql> Agents for C {
    fn session(&self, name: &str) -> Result<Option<SessionRow>> {
        Ok(self
            .conn()
            .prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE name = ?1"
            ))?
            .query_row([name], session_row)
            .optional()?)
    }

    fn session_by_id(&self, session_id: &str) -> Result<Option<SessionRow>> {
        Ok(self
            .conn()
            .prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = ?1"
            ))?
            .query_row([session_id], session_row)
            .optional()?)
    }

    fn sessions(&self) -> Result<Vec<SessionRow>> {
        Ok(self
            .conn()
            .prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions ORDER BY name"
            ))?
            .query_map([], session_row)?
            .collect::<rusqlite::Result<_>>()?)
    }

    fn insert_session(&self, s: &SessionRow) -> Result<()> {
        self.conn()
            .prepare_cached(&format!(
            "INSERT INTO sessions ({SESSION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
        ))?
            .execute(params![
                s.name,
                s.session_id,
                s.role,
                s.metadata,
                s.started_at,
                s.last_seen,
                s.expires_at,
                s.token_id,
                s.holder_connection
            ])?;
        Ok(())
    }

    fn touch_session(&self, name: &str, last_seen: i64, expires_at: i64) -> Result<()> {
        self.with(
            "UPDATE sessions SET last_seen = ?2, expires_at = ?3 WHERE name = ?1",
            |s| s.execute(params![name, last_seen, expires_at]),
        )?;
        Ok(())
    }

    fn delete_session(&self, name: &str) -> Result<()> {
        self.with("DELETE FROM sessions WHERE name = ?1", |s| {
            s.execute([name])
        })?;
        Ok(())
    }

    fn name_owner(&self, name: &str) -> Result<Option<NameOwner>> {
        Ok(self
            .with(
                "SELECT owner_token_id FROM agents WHERE name = ?1 AND claimed_at IS NOT NULL",
                |s| s.query_row([name], |r| r.get(0)),
            )
            .optional()?
            .map(|token_id| NameOwner { token_id }))
    }

    fn remember_agent(&self, name: &str, owner: &NameOwner, at_ms: i64) -> Result<()> {
        self.with(
            "INSERT INTO agents (name, first_seen, claimed_at, owner_token_id)
             VALUES (?1, ?2, ?2, ?3)
             ON CONFLICT (name) DO UPDATE
                SET claimed_at = excluded.claimed_at, owner_token_id = excluded.owner_token_id
                WHERE agents.claimed_at IS NULL",
            |s| s.execute(params![name, at_ms, owner.token_id]),
        )?;
        Ok(())
    }

    fn agent_names(&self) -> Result<Vec<String>> {
        Ok(self.with("SELECT name FROM agents ORDER BY name", |s| {
            s.query_map([], |r| r.get(0))?.collect()
        })?)
    }

    fn insert_message(&self, m: &MessageRow, to: &[String]) -> Result<()> {
        self.with(
            "INSERT INTO messages (seq, message_id, sender, recipients, subject, body, thread_id,
                                   reply_to, sent_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            |s| {
                s.execute(params![
                    m.seq,
                    m.message_id,
                    m.sender,
                    m.recipients,
                    m.subject,
                    m.body,
                    m.thread_id,
                    m.reply_to,
                    m.sent_at
                ])
            },
        )?;
        self.with(
            "INSERT OR IGNORE INTO inbox (name, seq) VALUES (?1, ?2)",
            |deliver| {
                for name in to {
                    deliver.execute(params![name, m.seq])?;
                }
                Ok(())
            },
        )?;
        Ok(())
    }

    fn inbox(&self, name: &str, after: u64, limit: u64) -> Result<Vec<MessageRow>> {
        Ok(self.with(
            "SELECT m.seq, m.message_id, m.sender, m.recipients, m.subject, m.body, m.thread_id,
                        m.reply_to, m.sent_at
                 FROM inbox i JOIN messages m ON m.seq = i.seq
                 WHERE i.name = ?1 AND i.seq > ?2 ORDER BY i.seq LIMIT ?3 + 0",
            |s| {
                s.query_map(params![name, after, limit], message_row)?
                    .collect()
            },
        )?)
    }

    fn inbox_count(&self, name: &str, after: u64, up_to: Option<u64>) -> Result<u64> {
        Ok(self.with(
            "SELECT COUNT(*) FROM inbox WHERE name = ?1 AND seq > ?2 AND (?3 IS NULL OR seq <= ?3)",
            |s| s.query_row(params![name, after, up_to], |r| r.get(0)),
        )?)
    }

    fn newest_message(&self, name: &str) -> Result<u64> {
        Ok(self.with(
            "SELECT COALESCE(MAX(seq), 0) FROM inbox WHERE name = ?1",
            |s| s.query_row([name], |r| r.get(0)),
        )?)
    }

    fn cursor(&self, name: &str) -> Result<u64> {
        Ok(self
            .with("SELECT acked FROM inbox_cursors WHERE name = ?1", |s| {
                s.query_row([name], |r| r.get(0))
            })
            .optional()?
            .unwrap_or(0))
    }

    fn set_cursor(&self, name: &str, acked: u64) -> Result<()> {
        self.with(
            "INSERT INTO inbox_cursors (name, acked) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET acked = excluded.acked",
            |s| s.execute(params![name, acked]),
        )?;
        Ok(())
    }
}
