//! SQL for facts about the whole database (`meta`, file sizes): SQLite's side of [`Meta`].

use crate::error::Result;
use crate::store::boundary::Meta;

use super::sql::Sql;

/// The head revision, as an SQL expression (a macro, so that statements `concat!` it and
/// stay literals): every revision comes with the journal event of the same seq, so the last
/// event holds it, and `meta.revision` holds it only where the journal cannot: a revision
/// that came without an event, and the head when CompactJournal removes the events up to
/// it. Writing `meta` at every commit cost one more page in each commit's WAL write (one
/// in six to ten of a DAG worker's commit).
macro_rules! head_revision_sql {
    () => {
        "max(coalesce((SELECT value FROM meta WHERE name = 'revision'), 0),
             coalesce((SELECT max(seq) FROM events), 0))"
    };
}
pub(super) use head_revision_sql;

impl<C: Sql> Meta for C {
    fn head_revision(&self) -> Result<i64> {
        Ok(self.with(concat!("SELECT ", head_revision_sql!()), |s| {
            s.query_row([], |r| r.get(0))
        })?)
    }

    fn set_head_revision(&self, revision: i64) -> Result<()> {
        // Only a head that no event holds is written (see `head_revision_sql`).
        self.with(
            "UPDATE meta SET value = max(value, ?1) WHERE name = 'revision'
                 AND ?1 > coalesce((SELECT max(seq) FROM events), 0)",
            |s| s.execute([revision]),
        )?;
        Ok(())
    }

    fn file_sizes(&self) -> Result<(u64, u64)> {
        let db: u64 = self.conn().query_row(
            "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
            [],
            |r| r.get(0),
        )?;
        let wal = match self.conn().path().filter(|p| !p.is_empty()) {
            Some(path) => std::fs::metadata(format!("{path}-wal")).map_or(0, |m| m.len()),
            None => 0,
        };
        Ok((db, wal))
    }

    fn instance_heartbeat(&self, _: &str, _: u64, _: i64) -> Result<Vec<u64>> {
        // One daemon per SQLite file (it holds the file's lock).
        Ok(Vec::new())
    }

    fn live_instances(&self, _: i64) -> Result<u64> {
        Ok(1)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::boundary::{Foreseen, NewEvent};
    use crate::store::Store;

    /// The head is the last event's seq, or what `meta` keeps for a head no event holds,
    /// also once compaction removed every event (then a restart continues from it).
    #[test]
    fn the_head_is_read_from_the_journal_and_kept_through_compaction() {
        let dir = tempfile::tempdir().unwrap();
        let (store, writes) = Store::open(&dir.path().join("baton.db"), 0).unwrap();
        let mut writes = writes();
        let event = NewEvent {
            data: "{}",
            ..NewEvent::of(crate::protocol::journal::EventType::from_client("custom.t").unwrap())
        };
        writes.begin(&Foreseen::default()).unwrap();
        let before = writes.storage().head_revision().unwrap();
        writes
            .storage()
            .append_event(before + 1, 0, &event)
            .unwrap();
        writes
            .storage()
            .append_event(before + 2, 0, &event)
            .unwrap();
        writes.storage().set_head_revision(before + 2).unwrap();
        writes.commit().unwrap();
        assert_eq!(store.read(|s| s.head_revision()).unwrap(), before + 2);
        // Compaction of every event: `meta` keeps the head they held.
        writes.begin(&Foreseen::default()).unwrap();
        writes.storage().remove_before(before as u64 + 3).unwrap();
        writes.commit().unwrap();
        assert_eq!(store.read(|s| s.length()).unwrap(), 0);
        assert_eq!(store.read(|s| s.head_revision()).unwrap(), before + 2);
        // A head that no event holds (none is appended) is kept in `meta`.
        writes.begin(&Foreseen::default()).unwrap();
        writes.storage().set_head_revision(before + 3).unwrap();
        writes.commit().unwrap();
        assert_eq!(store.read(|s| s.head_revision()).unwrap(), before + 3);
        drop((store, writes));
        let (store, _writes) = Store::open(&dir.path().join("baton.db"), 0).unwrap();
        assert_eq!(store.read(|s| s.head_revision()).unwrap(), before + 3);
    }
}
