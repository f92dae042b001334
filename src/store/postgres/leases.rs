//! PostgreSQL's side of [`Leases`].

use crate::protocol::locks::Previous;
use crate::store::boundary::{LeaseEnd, LeaseRow, Leases, NewLease};

use crate::error::Result;

use super::PgConn;

impl Leases for PgConn {
    fn holders(&self, resource_key: &str) -> Result<Vec<LeaseRow>> {
        todo!("PostgreSQL: Leases")
    }

    fn lease_by_id(&self, lease_id: &str) -> Result<Option<LeaseRow>> {
        todo!("PostgreSQL: Leases")
    }

    fn lease_on_path(&self, path: &str, exclusive_only: bool) -> Result<Option<LeaseRow>> {
        todo!("PostgreSQL: Leases")
    }

    fn dir_lease_at(&self, path: &str, exclusive_only: bool) -> Result<Option<LeaseRow>> {
        todo!("PostgreSQL: Leases")
    }

    fn lease_inside(&self, path: &str, exclusive_only: bool) -> Result<Option<LeaseRow>> {
        todo!("PostgreSQL: Leases")
    }

    fn leases(&self, prefix: &str, owner: Option<&str>) -> Result<Vec<LeaseRow>> {
        todo!("PostgreSQL: Leases")
    }

    fn insert_lease(&self, lease: &NewLease<'_>) -> Result<()> {
        todo!("PostgreSQL: Leases")
    }

    fn extend_lease(&self, lease_id: &str, expires_at: i64) -> Result<()> {
        todo!("PostgreSQL: Leases")
    }

    fn delete_lease(&self, lease_id: &str) -> Result<()> {
        todo!("PostgreSQL: Leases")
    }

    fn previous(&self, resource_key: &str) -> Result<Option<Previous>> {
        todo!("PostgreSQL: Leases")
    }

    fn record_end(&self, end: &LeaseEnd<'_>) -> Result<()> {
        todo!("PostgreSQL: Leases")
    }

    fn next_fencing_token(&self) -> Result<u64> {
        todo!("PostgreSQL: Leases")
    }

    fn leases_of_session(&self, session_id: &str) -> Result<Vec<LeaseRow>> {
        todo!("PostgreSQL: Leases")
    }
}
