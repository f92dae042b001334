//! PostgreSQL's side of [`Records`].

use crate::protocol::state::{HistoryEntry, Record, RecordState};
use crate::store::boundary::{NewVersion, Records, StoredVersion};

use crate::error::Result;

use super::PgConn;

impl Records for PgConn {
    fn stored(&self, namespace: &str, key: &str) -> Result<Option<StoredVersion>> {
        todo!("PostgreSQL: Records")
    }

    fn live(&self, namespace: &str, key: &str) -> Result<Option<RecordState>> {
        todo!("PostgreSQL: Records")
    }

    fn store_version(&self, version: &NewVersion<'_>) -> Result<()> {
        todo!("PostgreSQL: Records")
    }

    fn live_versions(&self, namespace: &str) -> Result<Vec<(String, u64)>> {
        todo!("PostgreSQL: Records")
    }

    fn list(
        &self,
        namespace: &str,
        prefix: &str,
        after: Option<&str>,
        limit: u64,
    ) -> Result<(Vec<Record>, bool)> {
        todo!("PostgreSQL: Records")
    }

    fn history(
        &self,
        namespace: &str,
        key: &str,
        before_version: Option<u64>,
        limit: u64,
    ) -> Result<Vec<HistoryEntry>> {
        todo!("PostgreSQL: Records")
    }

    fn export(&self, namespace: Option<&str>) -> Result<(Vec<Record>, u64)> {
        todo!("PostgreSQL: Records")
    }

    fn counts(&self) -> Result<(u64, u64)> {
        todo!("PostgreSQL: Records")
    }

    fn keys_of_session(&self, session_id: &str) -> Result<Vec<(String, String)>> {
        todo!("PostgreSQL: Records")
    }
}
