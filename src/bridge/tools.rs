//! The bridge's tool catalogue: each tool's daemon method, group, description (which
//! carries the protocol on its own, since clients may drop server instructions), input
//! and output schemas, and annotations.
//!
//! Input schemas are deliberately simple, for strict clients: one object, scalar types,
//! optional fields only absent from `required`, never a `["T", "null"]` type array, and
//! `"properties": {}` even when a tool takes nothing.

use serde_json::{json, Map, Value};

use super::schema::{self, any, boolean, bounded, integer, object, output, string, strings};

/// A group of tools, chosen with `--tools`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Locks,
    State,
    Tasks,
    Events,
}

impl Group {
    pub const ALL: [Group; 4] = [Group::Locks, Group::State, Group::Tasks, Group::Events];

    pub fn name(self) -> &'static str {
        match self {
            Group::Locks => "locks",
            Group::State => "state",
            Group::Tasks => "tasks",
            Group::Events => "events",
        }
    }

    /// Parses `--tools` (comma-separated groups, or `all`).
    pub fn parse_list(list: &str) -> Result<Vec<Group>, String> {
        let mut groups = Vec::new();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if name == "all" {
                return Ok(Group::ALL.to_vec());
            }
            match Group::ALL.iter().find(|g| g.name() == name) {
                Some(g) if !groups.contains(g) => groups.push(*g),
                Some(_) => {}
                None => {
                    return Err(format!(
                        "unknown tool group {name:?}: use locks, state, tasks, events or all (comma-separated)"
                    ))
                }
            }
        }
        if groups.is_empty() {
            return Err("--tools names no group: use locks, state, tasks, events or all".into());
        }
        Ok(groups)
    }
}

/// What the bridge does around the daemon call, beyond passing the arguments through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Arguments go to the method as they are.
    Plain,
    /// AcquireResourceLock with the session's owner and `release_on_disconnect`.
    Claim,
    /// Needs `expected_version` unless `force` (Set, Delete).
    Guarded,
    /// ReleaseResourceLock: also closes the connection a waited-for claim was parked on.
    Release,
    /// WaitResourceLock: waits on a connection of its own.
    Wait,
    /// AcquireNextNode with the session's owner; `null` becomes `{status: "none"}`.
    NextNode,
    /// Writes that record who made them (`updated_by` or `actor`).
    Attributed(&'static str),
}

impl Kind {
    /// Input properties the bridge reads itself and never sends to the daemon: the only
    /// ones that need not be params of the tool's method.
    pub fn bridge_params(self) -> &'static [&'static str] {
        match self {
            Kind::Guarded => &["force"],
            _ => &[],
        }
    }
}

pub struct Tool {
    pub name: &'static str,
    pub group: Group,
    pub method: &'static str,
    pub kind: Kind,
    pub title: &'static str,
    pub description: &'static str,
    /// (name, schema, required)
    pub params: Vec<(&'static str, Value, bool)>,
    pub output: Value,
    pub read_only: bool,
    pub idempotent: bool,
    pub destructive: bool,
}

impl Tool {
    pub fn input_schema(&self) -> Map<String, Value> {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for (name, schema, is_required) in &self.params {
            properties.insert((*name).to_string(), schema.clone());
            if *is_required {
                required.push(json!(name));
            }
        }
        let mut schema = Map::new();
        schema.insert("type".into(), json!("object"));
        schema.insert("properties".into(), Value::Object(properties));
        if !required.is_empty() {
            schema.insert("required".into(), Value::Array(required));
        }
        schema.insert("additionalProperties".into(), json!(false));
        schema
    }

    /// Checks the arguments against the input schema (known, required, type, range, enum,
    /// nested items) and says what to send instead, so a model can correct the call. Walks
    /// the tool's params: no schema is built and no argument copied per call.
    pub fn check_arguments(&self, arguments: &Map<String, Value>) -> Result<(), String> {
        let known = |name: &str| self.params.iter().any(|(n, _, _)| *n == name);
        if let Some(unknown) = arguments.keys().find(|k| !known(k)) {
            let names: Vec<&str> = self.params.iter().map(|(n, _, _)| *n).collect();
            return Err(format!(
                "{} has no argument \"{unknown}\"; send only {} and call it again.",
                self.name,
                names.join(", ")
            ));
        }
        let problem = || -> Result<(), String> {
            for (name, schema, required) in &self.params {
                if *required && !arguments.contains_key(*name) {
                    return Err(schema::missing(name, schema));
                }
            }
            for (field, value) in arguments {
                if let Some((_, schema, _)) = self.params.iter().find(|(n, _, _)| n == field) {
                    schema::check(schema, value, field)?;
                }
            }
            Ok(())
        };
        problem().map_err(|problem| {
            format!(
                "{}: {problem}; call {} again with that fixed.",
                self.name, self.name
            )
        })
    }
}

const NAMESPACE: &str = "Namespace of the value, e.g. the project or workflow name.";
const KEY: &str = "Key of the value within the namespace.";
const RESOURCE_KEY: &str = "kind:name of the resource: file:PATH (relative to the workspace), dir:PATH (the whole tree), or any kind:name such as tool:cargo or artifact:docs/api.json.";
const LEASE_ID: &str = "The lease_id you got from baton_claim.";
const TASK_ID: &str = "The task's id (from baton_task_register or baton_task_next).";
const NODE_ID: &str = "The node's id (from baton_task_next).";
const NODE_LEASE: &str = "The lease_id you got from baton_task_next for this node.";

/// The daemon's limits, stated in the schemas and checked before a call: the same
/// constants the daemon checks with.
pub use crate::methods::locks::{MAX_TTL_SECS as MAX_LOCK_TTL_SECS, MAX_WAIT_MS};
pub use crate::methods::tasks::{MAX_ATTEMPTS, MAX_NODES, MAX_NODE_TTL_SECS};
pub use crate::methods::MAX_PAGE;

/// Every tool, in listing order.
pub fn catalogue() -> Vec<Tool> {
    let record = json!({
        "found": {"type": "boolean"}, "namespace": {"type": "string"}, "key": {"type": "string"},
        "value": any("The stored JSON value."),
        "version": {"type": "integer", "description": "Pass it as expected_version to baton_set."},
        "revision": {"type": "integer"}, "updated_by": any("Who wrote it (null if not given)."), "updated_at": {"type": "string"},
    });
    let node = json!({
        "status": {"type": "string", "enum": ["acquired", "none"]},
        "task_id": {"type": "string"}, "node_id": {"type": "string"}, "name": any("The node's name, if it has one."),
        "lease_id": {"type": "string"}, "lease_owner": {"type": "string"},
        "lease_expires_at": {"type": "string"}, "attempt": {"type": "integer"},
        "payload": any("The node's input."),
        "context": {"type": "object", "description": "goal, task_context, dependency_results (node_id -> result), recent_events."},
    });
    vec![
        // ---- locks ----
        Tool {
            name: "baton_claim",
            group: Group::Locks,
            method: "AcquireResourceLock",
            kind: Kind::Claim,
            title: "Claim a resource",
            description: "Claim exclusive use of one resource right before you change it, and release it with baton_release right after. file:PATH locks a file, dir:PATH a whole tree (it conflicts with every file: and dir: lock inside it), any other kind:name is opaque (tool:cargo, artifact:docs). status acquired gives a lease_id; status already_held means you hold it already (same lease). An error with status busy means someone else holds it: work on something else and come back, call baton_wait, or claim again with wait_ms to queue for it. The lease lasts ttl_secs (default 300) and ends when this MCP session ends; on long work call baton_heartbeat before expires_at. `previous` says what the last holder did (e.g. modified): re-read the resource before changing it. fencing_token numbers claims in the order they were granted (it only grows): pass yours to whatever stores your result (a database row, an artifact, a deploy), so that a write from a claim that has since been lost, and overtaken by a newer one, can be refused.",
            params: vec![
                ("resource_key", string(RESOURCE_KEY), true),
                ("ttl_secs", bounded("Lease length in seconds, 1 to 604800 (default 300); heartbeat to extend.", 1, MAX_LOCK_TTL_SECS), false),
                ("wait_ms", bounded("If held, queue up to this many milliseconds (at most 3600000) for it, first come first served, instead of answering busy at once.", 0, MAX_WAIT_MS), false),
                ("metadata", object("Anything other agents should see about your claim, e.g. {\"intent\": \"refactor\"}."), false),
            ],
            output: output(&["status", "resource_key"], json!({
                "status": {"type": "string", "enum": ["acquired", "already_held", "busy"]},
                "resource_key": {"type": "string", "description": "The canonical key."},
                "lease_id": {"type": "string"}, "owner": {"type": "string"},
                "fencing_token": {"type": "integer", "description": "Strictly increasing across all claims: pass it to whatever stores your result, so a write from a lost claim can be refused."},
                "expires_at": {"type": "string"},
                "previous": any("What the last holder declared: outcome, owner, at, moved_to."),
            })),
            read_only: false,
            idempotent: false,
            destructive: false,
        },
        Tool {
            name: "baton_heartbeat",
            group: Group::Locks,
            method: "HeartbeatResourceLock",
            kind: Kind::Plain,
            title: "Extend a lease",
            description: "Extend a lease you hold to ttl_secs from now; during long work call it well before expires_at. An error means the lease is gone (expired or released): stop changing the resource and claim it again with baton_claim.",
            params: vec![
                ("resource_key", string(RESOURCE_KEY), true),
                ("lease_id", string(LEASE_ID), true),
                ("ttl_secs", bounded("New lease length from now, in seconds, 1 to 604800 (default: the claim's).", 1, MAX_LOCK_TTL_SECS), false),
            ],
            output: output(&["expires_at"], json!({"expires_at": {"type": "string"}, "remaining_ms": {"type": "integer"}})),
            read_only: false,
            idempotent: true,
            destructive: false,
        },
        Tool {
            name: "baton_release",
            group: Group::Locks,
            method: "ReleaseResourceLock",
            kind: Kind::Release,
            title: "Release a lease",
            description: "Release a lease right after your change, saying honestly what you did: outcome modified, created, deleted, moved (give moved_to), released (you changed nothing; the default) or abandoned (you gave up midway). The next claimant sees it as `previous`.",
            params: vec![
                ("resource_key", string(RESOURCE_KEY), true),
                ("lease_id", string(LEASE_ID), true),
                ("outcome", json!({"type": "string", "enum": ["released", "modified", "created", "deleted", "moved", "abandoned"], "description": "What you did to the resource (default released)."}), false),
                ("moved_to", string("Where the resource went, with outcome moved."), false),
                ("note", string("A short note for the next holder."), false),
            ],
            output: output(&["status", "outcome"], json!({"status": {"type": "string"}, "outcome": {"type": "string"}})),
            read_only: false,
            idempotent: false,
            destructive: false,
        },
        Tool {
            name: "baton_lock_status",
            group: Group::Locks,
            method: "ResourceLockStatus",
            kind: Kind::Plain,
            title: "Who holds a resource",
            description: "Whether a resource is available or held (by whom, until when, and the holder's fencing_token, which a store can compare with the token a writer presents), and what its last holder did. Read-only: use it when planning work; claim with baton_claim before changing the resource.",
            params: vec![("resource_key", string(RESOURCE_KEY), true)],
            output: output(&["status"], json!({
                "status": {"type": "string", "enum": ["available", "held"]},
                "held_by": any("owner, provider, fencing_token, acquired_at, expires_at, metadata."),
                "previous": any("What the last holder declared."),
            })),
            read_only: true,
            idempotent: true,
            destructive: false,
        },
        Tool {
            name: "baton_wait",
            group: Group::Locks,
            method: "WaitResourceLock",
            kind: Kind::Wait,
            title: "Wait until a resource is free",
            description: "Wait up to timeout_ms until a held resource is free, without claiming it; then claim it with baton_claim (someone else may be quicker). Returns status available, or timeout with the current holder (its owner, expiry and fencing_token, the number its writes carry). Stops when you cancel the call.",
            params: vec![
                ("resource_key", string(RESOURCE_KEY), true),
                ("timeout_ms", bounded("How long to wait, in milliseconds (at most 3600000).", 0, MAX_WAIT_MS), true),
            ],
            output: output(&["status"], json!({
                "status": {"type": "string", "enum": ["available", "timeout"]},
                "waited_ms": {"type": "integer"}, "held_by": any("The holder, on timeout."),
                "previous": any("What the last holder declared."),
            })),
            read_only: true,
            idempotent: true,
            destructive: false,
        },
        Tool {
            name: "baton_locks",
            group: Group::Locks,
            method: "ListResourceLocks",
            kind: Kind::Plain,
            title: "List live leases",
            description: "List live leases: who holds which resource, until when, and each holder's fencing_token (the number that holder's writes carry; a store that checks it refuses writes from older claims). Optionally only those under a resource prefix or of one owner. It never shows lease ids: release your own claims with the lease_id baton_claim gave you.",
            params: vec![
                ("prefix", string("Only resource keys starting with this, e.g. file:src/."), false),
                ("owner", string("Only leases of this owner."), false),
            ],
            output: output(&["locks"], json!({"locks": {"type": "array", "items": {"type": "object"}}})),
            read_only: true,
            idempotent: true,
            destructive: false,
        },
        // ---- state ----
        Tool {
            name: "baton_get",
            group: Group::State,
            method: "Get",
            kind: Kind::Plain,
            title: "Read a shared value",
            description: "Read a shared value and its version. Read before you write: pass this version as expected_version to baton_set, and read again whenever baton_set reports a conflict. found false means the key does not exist (create it with expected_version 0).",
            params: vec![("namespace", string(NAMESPACE), true), ("key", string(KEY), true)],
            output: output(&["found", "namespace", "key"], record.clone()),
            read_only: true,
            idempotent: true,
            destructive: false,
        },
        Tool {
            name: "baton_set",
            group: Group::State,
            method: "Set",
            kind: Kind::Guarded,
            title: "Write a shared value",
            description: "Write a shared value safely: read it with baton_get, work, then write with expected_version = the version you read (0 to create a new key). If someone wrote it meanwhile you get an error with the current version and value: merge your change into that value and retry with its version. expected_version is required; force true overwrites blindly (last writer wins) and is only for values nobody else edits.",
            params: vec![
                ("namespace", string(NAMESPACE), true),
                ("key", string(KEY), true),
                ("value", any("The new value: any JSON (object, array, string, number, boolean or null)."), true),
                ("expected_version", integer("The version you read with baton_get; 0 = create only."), false),
                ("force", boolean("Write without a version check (last writer wins)."), false),
            ],
            output: output(&["namespace", "key", "version"], json!({
                "namespace": {"type": "string"}, "key": {"type": "string"},
                "version": {"type": "integer", "description": "The new version: your next expected_version."},
                "previous_version": {"type": "integer"}, "revision": {"type": "integer"},
            })),
            read_only: false,
            idempotent: false,
            destructive: false,
        },
        Tool {
            name: "baton_delete",
            group: Group::State,
            method: "Delete",
            kind: Kind::Guarded,
            title: "Delete a shared value",
            description: "Delete a shared value: pass expected_version = the version you read with baton_get; a conflict means it changed since, so re-read before deciding. force true deletes whatever is there. Its history stays readable with baton_history.",
            params: vec![
                ("namespace", string(NAMESPACE), true),
                ("key", string(KEY), true),
                ("expected_version", integer("The version you read with baton_get."), false),
                ("force", boolean("Delete without a version check."), false),
            ],
            output: output(&["deleted", "version"], json!({"deleted": {"type": "boolean"}, "version": {"type": "integer"}, "revision": {"type": "integer"}})),
            read_only: false,
            idempotent: false,
            destructive: true,
        },
        Tool {
            name: "baton_list",
            group: Group::State,
            method: "List",
            kind: Kind::Plain,
            title: "List shared values",
            description: "List the values of a namespace in key order, optionally by key prefix; fetch the next page with after = next_after.",
            params: vec![
                ("namespace", string(NAMESPACE), true),
                ("prefix", string("Only keys starting with this."), false),
                ("limit", bounded("At most this many, 1 to 1000 (default 100).", 1, MAX_PAGE), false),
                ("after", string("The next_after of the previous page."), false),
            ],
            output: output(&["records"], json!({"records": {"type": "array", "items": {"type": "object"}}, "next_after": any("Pass it as after for the next page (null on the last).")})),
            read_only: true,
            idempotent: true,
            destructive: false,
        },
        Tool {
            name: "baton_history",
            group: Group::State,
            method: "History",
            kind: Kind::Plain,
            title: "Past versions of a value",
            description: "Past versions of one value, newest first: who wrote what, when. Use it to see why a value changed or to recover an older value.",
            params: vec![
                ("namespace", string(NAMESPACE), true),
                ("key", string(KEY), true),
                ("limit", bounded("At most this many versions, 1 to 1000 (default 100).", 1, MAX_PAGE), false),
                ("before_version", integer("Only versions older than this (to page)."), false),
            ],
            output: output(&["history"], json!({"history": {"type": "array", "items": {"type": "object"}}})),
            read_only: true,
            idempotent: true,
            destructive: false,
        },
        Tool {
            name: "baton_txn",
            group: Group::State,
            method: "Txn",
            kind: Kind::Attributed("updated_by"),
            title: "Change several values atomically",
            description: "Change several values at once, all or nothing: every compare must hold (version = the one you read with baton_get; 0 = must not exist), else nothing is written and the error lists the compares that failed, so re-read those keys and retry.",
            params: vec![
                ("compare", json!({"type": "array", "description": "Versions that must hold.", "items": {
                    "type": "object",
                    "properties": {"namespace": {"type": "string"}, "key": {"type": "string"}, "version": {"type": "integer", "minimum": 0}},
                    "required": ["namespace", "key", "version"], "additionalProperties": false}}), false),
                ("ops", json!({"type": "array", "description": "Writes to apply.", "items": {
                    "type": "object",
                    "properties": {"op": {"type": "string", "enum": ["set", "delete"]}, "namespace": {"type": "string"}, "key": {"type": "string"}, "value": any("For set: the new value (any JSON).")},
                    "required": ["op", "namespace", "key"], "additionalProperties": false}}), true),
            ],
            output: output(&["revision", "results"], json!({"revision": {"type": "integer"}, "results": {"type": "array", "items": {"type": "object"}}})),
            read_only: false,
            idempotent: false,
            destructive: false,
        },
        // ---- tasks ----
        Tool {
            name: "baton_task_register",
            group: Group::Tasks,
            method: "RegisterTask",
            kind: Kind::Plain,
            title: "Register a task graph",
            description: "Register a task as a graph of nodes (steps): a node runs only after all its dependencies completed. Workers then take nodes with baton_task_next. An unknown dependency, a duplicate id or a cycle is refused and nothing is stored.",
            params: vec![
                ("goal", string("What the task achieves; every worker sees it."), true),
                ("context", any("Shared input for every node (any JSON)."), false),
                ("nodes", json!({"type": "array", "minItems": 1, "maxItems": MAX_NODES, "description": "The steps.", "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "description": "Your id for the node (referenced by dependencies); generated when absent."},
                        "name": {"type": "string"},
                        "dependencies": {"type": "array", "items": {"type": "string"}, "description": "Ids of nodes that must complete first."},
                        "payload": any("The node's input (any JSON)."),
                        "max_attempts": {"type": "integer", "minimum": 1, "maximum": MAX_ATTEMPTS, "description": "Tries before it fails for good, 1 to 100 (default 1)."}
                    },
                    "additionalProperties": false}}), true),
            ],
            output: output(&["task_id", "node_ids"], json!({"task_id": {"type": "string"}, "node_ids": {"type": "array", "items": {"type": "string"}}})),
            read_only: false,
            idempotent: false,
            destructive: false,
        },
        Tool {
            name: "baton_task_next",
            group: Group::Tasks,
            method: "AcquireNextNode",
            kind: Kind::NextNode,
            title: "Take the next node to work on",
            description: "Take the next runnable node (of task_id, or of any task) with its goal, its dependencies' results and recent events. You hold it on a lease of ttl_secs: on long work call baton_task_heartbeat before lease_expires_at, then finish with baton_task_complete (with a result) or baton_task_fail. status none means nothing is runnable now (wait_ms waits for one; baton_task_status says whether the task is finished). Waiting stops when you cancel the call.",
            params: vec![
                ("task_id", string("Only this task's nodes (any task when absent)."), false),
                ("ttl_secs", bounded("Lease length in seconds, 1 to 86400 (default: the daemon's node timeout).", 1, MAX_NODE_TTL_SECS), false),
                ("wait_ms", bounded("If nothing is runnable, wait up to this many milliseconds (at most 3600000) for a node.", 0, MAX_WAIT_MS), false),
            ],
            output: output(&["status"], node),
            read_only: false,
            idempotent: false,
            destructive: false,
        },
        Tool {
            name: "baton_task_heartbeat",
            group: Group::Tasks,
            method: "HeartbeatNode",
            kind: Kind::Plain,
            title: "Extend a node lease",
            description: "Extend your node lease to ttl_secs from now; call it well before lease_expires_at during long work. An error means the lease lapsed and the node went back to the queue: stop, and take a node again with baton_task_next.",
            params: vec![
                ("task_id", string(TASK_ID), true),
                ("node_id", string(NODE_ID), true),
                ("lease_id", string(NODE_LEASE), true),
                ("ttl_secs", bounded("New lease length from now, in seconds, 1 to 86400.", 1, MAX_NODE_TTL_SECS), false),
            ],
            output: output(&["lease_expires_at"], json!({"lease_expires_at": {"type": "string"}})),
            read_only: false,
            idempotent: true,
            destructive: false,
        },
        Tool {
            name: "baton_task_complete",
            group: Group::Tasks,
            method: "CompleteNode",
            kind: Kind::Plain,
            title: "Complete a node",
            description: "Finish your node with its result (any JSON): nodes that depend on it become runnable and get it in dependency_results.",
            params: vec![
                ("task_id", string(TASK_ID), true),
                ("node_id", string(NODE_ID), true),
                ("lease_id", string(NODE_LEASE), true),
                ("result", any("The node's output (any JSON)."), false),
            ],
            output: output(&["event_seq"], json!({"event_seq": {"type": "integer"}})),
            read_only: false,
            idempotent: false,
            destructive: false,
        },
        Tool {
            name: "baton_task_fail",
            group: Group::Tasks,
            method: "FailNode",
            kind: Kind::Plain,
            title: "Fail a node",
            description: "Report that your node failed: it goes back to the queue while attempts remain and retry is true (the default), else it is FAILED and the nodes depending on it never run.",
            params: vec![
                ("task_id", string(TASK_ID), true),
                ("node_id", string(NODE_ID), true),
                ("lease_id", string(NODE_LEASE), true),
                ("error", any("What went wrong (any JSON)."), true),
                ("retry", boolean("Whether another attempt may help (default true)."), false),
            ],
            output: output(&["status"], json!({"status": {"type": "string", "enum": ["PENDING", "FAILED"]}, "attempts": {"type": "integer"}, "max_attempts": {"type": "integer"}})),
            read_only: false,
            idempotent: false,
            destructive: false,
        },
        Tool {
            name: "baton_task_status",
            group: Group::Tasks,
            method: "TaskStatus",
            kind: Kind::Plain,
            title: "A task's progress",
            description: "A task's status (running, completed, failed, cancelled), its node counts by state, and every node with its state and result.",
            params: vec![("task_id", string(TASK_ID), true)],
            output: output(&["task", "counts", "nodes"], json!({"task": {"type": "object"}, "counts": {"type": "object"}, "nodes": {"type": "array", "items": {"type": "object"}}})),
            read_only: true,
            idempotent: true,
            destructive: false,
        },
        Tool {
            name: "baton_task_event",
            group: Group::Tasks,
            method: "CommitEvent",
            kind: Kind::Plain,
            title: "Record a node event",
            description: "Record a progress event of a node (action_type and payload) in the journal; later workers of the task see it in recent_events. Pass lease_id while you hold the node.",
            params: vec![
                ("task_id", string(TASK_ID), true),
                ("node_id", string(NODE_ID), true),
                ("lease_id", string(NODE_LEASE), false),
                ("action_type", string("What happened, e.g. file_written."), true),
                ("payload", any("Details (any JSON)."), true),
            ],
            output: output(&["event_seq"], json!({"event_seq": {"type": "integer"}})),
            read_only: false,
            idempotent: false,
            destructive: false,
        },
        // ---- events ----
        Tool {
            name: "baton_events",
            group: Group::Events,
            method: "ReadEvents",
            kind: Kind::Plain,
            title: "Read the journal",
            description: "Read the journal of changes (writes, claims, releases, task steps, published events) after since_seq, optionally filtered; continue from next_seq to see only what is new.",
            params: vec![
                ("since_seq", integer("Only events after this seq (0 = from the start)."), false),
                ("limit", bounded("At most this many events, 1 to 1000 (default 100).", 1, MAX_PAGE), false),
                ("types", strings("Only these event types, e.g. kv.set, lock.released, custom.review."), false),
                ("namespace", string("Only events of this namespace."), false),
                ("key_prefix", string("Only keys starting with this."), false),
                ("resource_prefix", string("Only resource keys starting with this."), false),
                ("task_id", string("Only events of this task."), false),
            ],
            output: output(&["events", "next_seq"], json!({"events": {"type": "array", "items": {"type": "object"}}, "next_seq": {"type": "integer"}})),
            read_only: true,
            idempotent: true,
            destructive: false,
        },
        Tool {
            name: "baton_publish",
            group: Group::Events,
            method: "Publish",
            kind: Kind::Attributed("actor"),
            title: "Publish an event",
            description: "Publish a custom event (type custom.<topic>) to the journal, for other agents reading baton_events or subscribed.",
            params: vec![
                ("topic", string("The event's topic, e.g. review or deploy."), true),
                ("payload", any("The event's content (any JSON)."), true),
            ],
            output: output(&["event_seq"], json!({"event_seq": {"type": "integer"}})),
            read_only: false,
            idempotent: false,
            destructive: false,
        },
    ]
}

/// The server instructions: the protocol in one short paragraph, naming only the tools
/// of the groups this bridge serves.
pub fn instructions(groups: &[Group]) -> String {
    let mut text = String::from("Baton coordinates agents that share files, values and tasks.");
    for group in Group::ALL.iter().filter(|g| groups.contains(g)) {
        text.push(' ');
        text.push_str(match group {
            Group::State => "Shared values: read with baton_get, work, then write with baton_set and expected_version = the version you read (0 to create); on a conflict, re-read, merge and retry with the new version.",
            Group::Locks => "Files and other resources: claim one with baton_claim right before changing it and release it with baton_release right after, with an honest outcome (modified, created, deleted, moved, released, abandoned); if it is busy, do something else or wait with baton_wait. Leases last ttl_secs (default 300) and end when this session ends: heartbeat them on long work.",
            Group::Tasks => "Task graphs: take a node with baton_task_next, heartbeat it, finish it with baton_task_complete or baton_task_fail.",
            Group::Events => "The journal: read what changed with baton_events, announce with baton_publish.",
        });
    }
    text
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn no_type_arrays(value: &Value) -> bool {
        match value {
            Value::Object(map) => {
                !matches!(map.get("type"), Some(Value::Array(_)))
                    && map.values().all(no_type_arrays)
            }
            Value::Array(items) => items.iter().all(no_type_arrays),
            _ => true,
        }
    }

    #[test]
    fn instructions_name_only_the_tools_served() {
        let tools = catalogue();
        for groups in [
            vec![Group::Locks, Group::State],
            vec![Group::Tasks],
            Group::ALL.to_vec(),
        ] {
            let text = instructions(&groups);
            for tool in &tools {
                if !groups.contains(&tool.group) {
                    assert!(!text.contains(tool.name), "{} in {text}", tool.name);
                }
            }
            for group in &groups {
                assert!(
                    tools
                        .iter()
                        .any(|t| t.group == *group && text.contains(t.name)),
                    "{group:?} has no tool in {text}"
                );
            }
        }
    }

    #[test]
    fn every_tool_that_returns_a_fencing_token_says_what_it_is_for() {
        for tool in catalogue() {
            if matches!(
                tool.method,
                "AcquireResourceLock"
                    | "ResourceLockStatus"
                    | "WaitResourceLock"
                    | "ListResourceLocks"
            ) {
                assert!(
                    tool.description.contains("fencing_token"),
                    "{}: {}",
                    tool.name,
                    tool.description
                );
            }
        }
    }

    #[test]
    fn schemas_are_simple_objects() {
        let tools = catalogue();
        assert_eq!(tools.len(), 21);
        for tool in &tools {
            let schema = Value::Object(tool.input_schema());
            assert_eq!(schema["type"], "object", "{}", tool.name);
            assert!(schema["properties"].is_object(), "{}", tool.name);
            assert!(no_type_arrays(&schema), "{}", tool.name);
            assert!(no_type_arrays(&tool.output), "{}", tool.name);
        }
    }

    /// `schema` with a `$ref` into `defs` followed.
    fn resolve<'a>(schema: &'a Value, defs: &'a Value) -> &'a Value {
        match schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/$defs/"))
        {
            Some(name) => resolve(&defs[name], defs),
            None => schema,
        }
    }

    /// The branches of a schema: those of its `anyOf`/`oneOf`, or itself.
    fn branches<'a>(schema: &'a Value, defs: &'a Value) -> Vec<&'a Value> {
        let schema = resolve(schema, defs);
        match schema.get("anyOf").or_else(|| schema.get("oneOf")) {
            Some(Value::Array(options)) => options
                .iter()
                .flat_map(|option| branches(option, defs))
                .collect(),
            _ => vec![schema],
        }
    }

    /// The JSON types a schema admits; `None` for any JSON.
    fn json_types(schema: &Value, defs: &Value) -> Option<BTreeSet<String>> {
        let mut types = BTreeSet::new();
        for branch in branches(schema, defs) {
            match branch.get("type") {
                Some(Value::String(t)) => {
                    types.insert(t.clone());
                }
                Some(Value::Array(ts)) => {
                    types.extend(ts.iter().filter_map(Value::as_str).map(str::to_string))
                }
                _ if branch == &Value::Bool(false) => {}
                _ => return None,
            }
        }
        Some(types)
    }

    /// The values a schema allows, if it lists them (`null` aside).
    fn enum_values(schema: &Value, defs: &Value) -> Option<Vec<Value>> {
        let mut values = Vec::new();
        for branch in branches(schema, defs) {
            match branch.get("enum") {
                Some(Value::Array(options)) => values.extend(options.iter().cloned()),
                _ if branch.get("type") == Some(&json!("null")) => {}
                _ => return None,
            }
        }
        Some(values)
    }

    /// The first branch of `schema` that has `member` (`items`, `properties`).
    fn member<'a>(schema: &'a Value, defs: &'a Value, member: &str) -> Option<&'a Value> {
        branches(schema, defs)
            .into_iter()
            .find_map(|branch| branch.get(member))
    }

    /// Whether every value the bridge's `bridge` schema lets through is one the daemon's
    /// `daemon` schema takes: by JSON type, listed values, array items and object
    /// properties, recursively. Problems go to `problems`, named by `path`.
    fn compatible(
        bridge: &Value,
        daemon: &Value,
        defs: &Value,
        path: &str,
        problems: &mut Vec<String>,
    ) {
        let Some(daemon_types) = json_types(daemon, defs) else {
            return; // the daemon takes any JSON here
        };
        let Some(bridge_types) = json_types(bridge, &Value::Null) else {
            problems.push(format!(
                "{path}: the bridge passes any JSON, the daemon takes only {daemon_types:?}"
            ));
            return;
        };
        for t in &bridge_types {
            let taken =
                daemon_types.contains(t) || (t == "integer" && daemon_types.contains("number"));
            if !taken {
                problems.push(format!(
                    "{path}: the bridge passes {t}, the daemon takes only {daemon_types:?}"
                ));
            }
        }
        if let (Some(Value::Array(ours)), Some(theirs)) =
            (bridge.get("enum"), enum_values(daemon, defs))
        {
            for value in ours.iter().filter(|v| !theirs.contains(v)) {
                problems.push(format!(
                    "{path}: the bridge passes {value}, the daemon takes only {}",
                    Value::from(theirs.clone())
                ));
            }
        }
        if let Some(items) = bridge.get("items") {
            match member(daemon, defs, "items") {
                Some(theirs) => compatible(items, theirs, defs, &format!("{path}[]"), problems),
                None => problems.push(format!("{path}: the daemon's has no items")),
            }
        }
        if let Some(Value::Object(properties)) = bridge.get("properties") {
            let theirs = member(daemon, defs, "properties");
            for (name, schema) in properties {
                let path = format!("{path}.{name}");
                match theirs.and_then(|t| t.get(name)) {
                    Some(theirs) => compatible(schema, theirs, defs, &path, problems),
                    None => problems.push(format!("{path} is not a field the daemon takes")),
                }
            }
        }
    }

    /// Every argument a tool passes on is a param of its daemon method, as
    /// DescribeInterface publishes the method, of a type the method takes.
    #[test]
    fn every_argument_is_a_param_of_the_daemon_method() {
        let methods = crate::methods::describe_all();
        let mut problems = Vec::new();
        for tool in catalogue() {
            let Some(method) = methods.iter().find(|m| m.method == tool.method) else {
                problems.push(format!("{}: no daemon method {}", tool.name, tool.method));
                continue;
            };
            let params = serde_json::to_value(&method.params_schema).unwrap();
            let defs = params.get("$defs").cloned().unwrap_or(Value::Null);
            let input = Value::Object(tool.input_schema());
            let own = tool.kind.bridge_params();
            for name in own {
                assert!(
                    input["properties"].get(name).is_some(),
                    "{}: {name} is listed as the bridge's own but is no argument",
                    tool.name
                );
            }
            let arguments = input["properties"].as_object().unwrap();
            for (name, schema) in arguments.iter().filter(|(n, _)| !own.contains(&n.as_str())) {
                let path = format!("{}.{name}", tool.name);
                match params["properties"].get(name) {
                    Some(theirs) => compatible(schema, theirs, &defs, &path, &mut problems),
                    None => problems.push(format!("{path} is not a param of {}", tool.method)),
                }
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn groups_parse() {
        assert_eq!(Group::parse_list("all").unwrap(), Group::ALL.to_vec());
        assert_eq!(
            Group::parse_list("state, locks,state").unwrap(),
            vec![Group::State, Group::Locks]
        );
        assert!(Group::parse_list("lock").unwrap_err().contains("locks"));
        assert!(Group::parse_list("").is_err());
    }
}
