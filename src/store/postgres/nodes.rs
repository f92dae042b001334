//! PostgreSQL's side of [`Nodes`].

use std::collections::BTreeMap;

use crate::protocol::tasks::{ListTasksResult, TaskStatus, TaskStatusResult};
use crate::store::boundary::{
    NewTask, NodeChange, NodeLease, NodeLeaseGrant, NodeRow, Nodes, StartedNode,
};

use crate::error::Result;

use super::PgConn;

impl Nodes for PgConn {
    fn insert_task(&self, task: &NewTask<'_>) -> Result<()> {
        todo!("PostgreSQL: Nodes")
    }

    fn task_status(&self, task_id: &str) -> Result<Option<TaskStatus>> {
        todo!("PostgreSQL: Nodes")
    }

    fn set_task_status(&self, task_id: &str, status: TaskStatus, at_ms: i64) -> Result<()> {
        todo!("PostgreSQL: Nodes")
    }

    fn task_goal(&self, task_id: &str) -> Result<(String, Option<String>)> {
        todo!("PostgreSQL: Nodes")
    }

    fn runnable(
        &self,
        task_id: Option<&str>,
        label_keys: &[String],
    ) -> Result<Option<(String, String)>> {
        todo!("PostgreSQL: Nodes")
    }

    fn has_running(&self, task_id: &str) -> Result<bool> {
        todo!("PostgreSQL: Nodes")
    }

    fn release_hold(&self, task_id: &str, node_id: &str, seq: i64) -> Result<bool> {
        todo!("PostgreSQL: Nodes")
    }

    fn held_nodes(&self) -> Result<Vec<(String, String, i64)>> {
        todo!("PostgreSQL: Nodes")
    }

    fn node(&self, task_id: &str, node_id: &str) -> Result<Option<NodeRow>> {
        todo!("PostgreSQL: Nodes")
    }

    fn start_node(
        &self,
        task_id: &str,
        node_id: &str,
        lease: &NodeLeaseGrant<'_>,
    ) -> Result<StartedNode> {
        todo!("PostgreSQL: Nodes")
    }

    fn node_result(&self, task_id: &str, node_id: &str) -> Result<Option<String>> {
        todo!("PostgreSQL: Nodes")
    }

    fn result_schema(&self, task_id: &str, node_id: &str) -> Result<Option<String>> {
        todo!("PostgreSQL: Nodes")
    }

    fn extend_node_lease(&self, task_id: &str, node_id: &str, expires_at: i64) -> Result<()> {
        todo!("PostgreSQL: Nodes")
    }

    fn change_node(&self, task_id: &str, node_id: &str, change: &NodeChange<'_>) -> Result<()> {
        todo!("PostgreSQL: Nodes")
    }

    fn release_dependents(&self, task_id: &str, node_id: &str, seq: i64) -> Result<()> {
        todo!("PostgreSQL: Nodes")
    }

    fn count_finished(&self, task_id: &str) -> Result<u64> {
        todo!("PostgreSQL: Nodes")
    }

    fn running_nodes(&self, task_id: &str) -> Result<Vec<String>> {
        todo!("PostgreSQL: Nodes")
    }

    fn cancel_open_nodes(&self, task_id: &str, at_ms: i64) -> Result<u64> {
        todo!("PostgreSQL: Nodes")
    }

    fn node_leases(&self) -> Result<Vec<NodeLease>> {
        todo!("PostgreSQL: Nodes")
    }

    fn nodes_of_session(&self, session_id: &str) -> Result<Vec<(String, String)>> {
        todo!("PostgreSQL: Nodes")
    }

    fn nodes_leased_by(&self, owner: &str) -> Result<Vec<(String, String)>> {
        todo!("PostgreSQL: Nodes")
    }

    fn task_report(&self, task_id: &str) -> Result<Option<TaskStatusResult>> {
        todo!("PostgreSQL: Nodes")
    }

    fn list_tasks(&self, status: Option<TaskStatus>, limit: u64) -> Result<ListTasksResult> {
        todo!("PostgreSQL: Nodes")
    }

    fn task_counts(&self) -> Result<(BTreeMap<String, u64>, BTreeMap<String, u64>)> {
        todo!("PostgreSQL: Nodes")
    }
}
