//! The live leases, mirrored in the writer's memory, so that conflict checks and lease
//! lookups read no storage (on PostgreSQL each read is a round trip made while every
//! daemon's writer waits for this one). Storage stays the truth: the mirror is filled from
//! it at start, after a rollback and after another daemon changed leases
//! (`LockState::reload`), and follows every lease this writer grants, extends or ends.

use std::collections::{BTreeMap, HashMap};

use crate::protocol::locks::LockMode;
use crate::store::boundary::LeaseRow;

/// The kind and path of a stored (canonical) key: `file:` and `dir:` keys have a path.
fn path_of(resource_key: &str) -> Option<(&str, &str)> {
    resource_key
        .split_once(':')
        .filter(|(kind, _)| *kind == "file" || *kind == "dir")
}

#[derive(Default)]
pub struct Held {
    by_id: HashMap<String, LeaseRow>,
    /// The leases on each key, lowest fencing token (oldest) first.
    by_key: HashMap<String, Vec<String>>,
    /// The leases on each path (`file:` and `dir:` keys), oldest first.
    by_path: BTreeMap<String, Vec<String>>,
}

/// Puts `lease_id` into `ids` in fencing-token order.
fn insert_ordered(ids: &mut Vec<String>, by_id: &HashMap<String, LeaseRow>, lease_id: &str) {
    let token = |id: &String| by_id.get(id).map_or(0, |r| r.fencing_token);
    let fencing = by_id.get(lease_id).map_or(0, |r| r.fencing_token);
    let at = ids.partition_point(|id| token(id) <= fencing);
    ids.insert(at, lease_id.to_string());
}

/// Takes `lease_id` out of `ids`; true when none is left.
fn remove_id(ids: Option<&mut Vec<String>>, lease_id: &str) -> bool {
    let Some(ids) = ids else {
        return false;
    };
    ids.retain(|id| id != lease_id);
    ids.is_empty()
}

impl Held {
    pub fn insert(&mut self, row: LeaseRow) {
        let lease_id = row.lease_id.clone();
        let key = row.resource_key.clone();
        let path = path_of(&key).map(|(_, p)| p.to_string());
        self.by_id.insert(lease_id.clone(), row);
        let on_key = self.by_key.entry(key).or_default();
        insert_ordered(on_key, &self.by_id, &lease_id);
        if let Some(path) = path {
            let on_path = self.by_path.entry(path).or_default();
            insert_ordered(on_path, &self.by_id, &lease_id);
        }
    }

    pub fn remove(&mut self, lease_id: &str) -> Option<LeaseRow> {
        let row = self.by_id.remove(lease_id)?;
        if remove_id(self.by_key.get_mut(&row.resource_key), lease_id) {
            self.by_key.remove(&row.resource_key);
        }
        if let Some((_, path)) = path_of(&row.resource_key) {
            if remove_id(self.by_path.get_mut(path), lease_id) {
                self.by_path.remove(path);
            }
        }
        Some(row)
    }

    pub fn clear(&mut self) {
        self.by_id.clear();
        self.by_key.clear();
        self.by_path.clear();
    }

    pub fn by_id(&self, lease_id: &str) -> Option<&LeaseRow> {
        self.by_id.get(lease_id)
    }

    /// Every lease on exactly this key, oldest first.
    pub fn holders(&self, resource_key: &str) -> Vec<LeaseRow> {
        self.rows(self.by_key.get(resource_key)).cloned().collect()
    }

    fn rows<'a>(&'a self, ids: Option<&'a Vec<String>>) -> impl Iterator<Item = &'a LeaseRow> {
        ids.into_iter()
            .flatten()
            .filter_map(|id| self.by_id.get(id))
    }

    /// The oldest lease on `path` that is not on `key` itself (only exclusive ones if asked).
    pub fn other_on_path(&self, path: &str, key: &str, exclusive_only: bool) -> Option<&LeaseRow> {
        self.rows(self.by_path.get(path))
            .find(|r| r.resource_key != key && (!exclusive_only || r.mode == LockMode::Exclusive))
    }

    /// The oldest `dir:` lease at exactly `path` (only exclusive ones if asked).
    pub fn dir_at(&self, path: &str, exclusive_only: bool) -> Option<&LeaseRow> {
        self.rows(self.by_path.get(path)).find(|r| {
            r.resource_key.starts_with("dir:") && (!exclusive_only || r.mode == LockMode::Exclusive)
        })
    }

    /// A lease on a path strictly inside `path/` (only exclusive ones if asked), the first
    /// in path order.
    pub fn inside(&self, path: &str, exclusive_only: bool) -> Option<&LeaseRow> {
        // From "path/" up to "path0": '0' follows '/'.
        let (low, high) = (format!("{path}/"), format!("{path}0"));
        self.by_path
            .range(low..high)
            .flat_map(|(_, ids)| self.rows(Some(ids)))
            .find(|r| !exclusive_only || r.mode == LockMode::Exclusive)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &str, id: &str, fencing_token: u64, mode: LockMode) -> LeaseRow {
        LeaseRow {
            resource_key: key.into(),
            lease_id: id.into(),
            owner: "o".into(),
            provider: None,
            fencing_token,
            acquired_at: 0,
            expires_at: 1,
            metadata: None,
            holder_connection: None,
            token_id: None,
            session_id: None,
            mode,
            slots: None,
        }
    }

    #[test]
    fn lookups_by_key_path_ancestor_and_inside() {
        let mut held = Held::default();
        held.insert(row("file:a/b.rs", "2", 2, LockMode::Shared));
        held.insert(row("file:a/b.rs", "1", 1, LockMode::Shared));
        held.insert(row("dir:a/b.rs", "3", 3, LockMode::Exclusive));
        held.insert(row("dir:a", "4", 4, LockMode::Shared));
        held.insert(row("tool:x", "5", 5, LockMode::Exclusive));
        let ids = |rows: Vec<LeaseRow>| rows.into_iter().map(|r| r.lease_id).collect::<Vec<_>>();
        assert_eq!(ids(held.holders("file:a/b.rs")), ["1", "2"]);
        assert_eq!(ids(held.holders("tool:x")), ["5"]);
        let other = held.other_on_path("a/b.rs", "file:a/b.rs", false);
        assert_eq!(other.map(|r| r.lease_id.as_str()), Some("3"));
        assert!(held.other_on_path("a/b.rs", "dir:a/b.rs", true).is_none());
        assert_eq!(held.dir_at("a", false).map(|r| r.fencing_token), Some(4));
        assert!(held.dir_at("a", true).is_none());
        assert_eq!(held.inside("a", true).map(|r| r.fencing_token), Some(3));
        assert!(held.inside("a/b", false).is_none());
        assert!(held.inside("a/b.rs", false).is_none());
        held.remove("3");
        assert!(held.inside("a", true).is_none());
        assert_eq!(held.inside("a", false).map(|r| r.fencing_token), Some(1));
        held.remove("1");
        held.remove("2");
        assert!(held.holders("file:a/b.rs").is_empty());
        assert!(!held.by_path.contains_key("a/b.rs"));
        assert_eq!(held.remove("5").map(|r| r.fencing_token), Some(5));
        assert!(held.by_id("5").is_none() && !held.by_key.contains_key("tool:x"));
    }
}
