//! The bridge's tool catalogue: each tool's daemon method, group, description (which
//! carries the protocol on its own, since clients may drop server instructions), input
//! and output schemas, and annotations.
//!
//! Input schemas are deliberately simple, for strict clients: one object, scalar types,
//! optional fields only absent from `required`, never a `["T", "null"]` type array, and
//! `"properties": {}` even when a tool takes nothing.

use serde_json::{json, Map, Value};

use super::schema;

/// A group of tools, chosen with `--tools`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Locks,
    State,
    Tasks,
    Events,
    Agents,
}

impl Group {
    pub const ALL: [Group; 5] = [
        Group::Locks,
        Group::State,
        Group::Tasks,
        Group::Events,
        Group::Agents,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Group::Locks => "locks",
            Group::State => "state",
            Group::Tasks => "tasks",
            Group::Events => "events",
            Group::Agents => "agents",
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
                        "unknown tool group {name:?}: use locks, state, tasks, events, agents or all (comma-separated)"
                    ))
                }
            }
        }
        if groups.is_empty() {
            return Err(
                "--tools names no group: use locks, state, tasks, events, agents or all".into(),
            );
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
    /// RegisterAgent: the MCP session becomes this agent (its name on claims, leases and
    /// writes), for as long as the session lasts.
    Join,
    /// A call as the joined agent (the bridge adds its session); `wait_ms` waits.
    AsAgent,
}

impl Kind {
    /// Whether the call acts as the joined agent: it carries the agent session (a claim,
    /// a node lease, a message), and ends with it.
    pub fn acts_as_agent(self) -> bool {
        matches!(self, Kind::Claim | Kind::NextNode | Kind::AsAgent)
    }

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
                    schema::check(schema, value, field)
                        .map_err(|e| one_of(schema, value, field, e))?;
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

pub use super::catalogue::catalogue;

/// The message for a value that none of an `anyOf`'s branches takes, which the generic
/// check can only call "not any JSON value": what it is, and what the field takes in the
/// words of its description (with the list a lone string was meant to be, for a field
/// that takes a list).
fn one_of(schema: &Value, value: &Value, field: &str, checked: String) -> String {
    let (Some(branches), Some(takes)) = (
        schema.get("anyOf").and_then(Value::as_array),
        schema.get("description").and_then(Value::as_str),
    ) else {
        return checked;
    };
    if branches
        .iter()
        .any(|b| schema::check(b, value, field).is_ok())
    {
        return checked; // a problem inside a branch: the check said which
    }
    let takes = takes.trim_end_matches('.');
    let mut takes = takes[..1].to_lowercase() + &takes[1..];
    let is = match value {
        Value::String(text) => {
            let text = Value::String(text.clone());
            if branches.iter().any(|b| b["type"] == "array") {
                takes.push_str(&format!("; for one, a list of one: [{text}]"));
            }
            format!("the string {text}")
        }
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::Array(_) => "an array that is not a list of strings".to_string(),
        Value::Object(_) => "an object".to_string(),
    };
    format!("\"{field}\" is {is}, which it cannot be: send {takes}")
}

/// The server instructions: the protocol in one short paragraph, naming only the tools
/// of the groups this bridge serves; with `agent` (`--agent`), that the session is that
/// agent already.
pub fn instructions(groups: &[Group], agent: Option<&str>) -> String {
    let mut text = String::from("Baton coordinates agents that share files, values and tasks.");
    if let Some(agent) = agent {
        text.push_str(&format!(" This session is already joined as agent {agent}: your claims, node leases and writes carry that name. If batond restarts, the bridge joins again as {agent} by itself and the next result says what was lost."));
    }
    for group in Group::ALL.iter().filter(|g| groups.contains(g)) {
        text.push(' ');
        if *group == Group::Agents && agent.is_some() {
            text.push_str("Other agents: see who is here with baton_agents, message them with baton_send, read yours with baton_inbox (wait_ms waits for one) and acknowledge with baton_ack; do not call baton_join (you are joined).");
            continue;
        }
        text.push_str(match group {
            Group::State => "Shared values: read with baton_get, work, then write with baton_set and expected_version = the version you read (0 to create); on a conflict, re-read, merge and retry with the new version.",
            Group::Locks => "Files and other resources: claim one with baton_claim right before changing it and release it with baton_release right after, with an honest outcome (modified, created, deleted, moved, released, abandoned); if it is busy, do something else or wait with baton_wait. Leases last ttl_secs (default 300) and end when this session ends: heartbeat them on long work, and pass the fence a claim returns to the writes that depend on it, so that a write from a claim lost meanwhile is refused instead of landing.",
            Group::Tasks => "Task graphs: take a node with baton_task_next, heartbeat it, finish it with baton_task_complete or baton_task_fail.",
            Group::Events => "The journal: read what changed with baton_events, announce with baton_publish.",
            Group::Agents => "Other agents: join under a name with baton_join first, see who is here with baton_agents, message them with baton_send, read yours with baton_inbox (wait_ms waits for one) and acknowledge with baton_ack. If batond restarts, the bridge joins again under your name by itself and the next result says what was lost.",
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
            let text = instructions(&groups, None);
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
    fn with_an_agent_name_the_instructions_say_the_session_is_joined() {
        let text = instructions(&Group::ALL, Some("bob"));
        assert!(text.contains("already joined as agent bob"), "{text}");
        assert!(text.contains("do not call baton_join"), "{text}");
        assert!(
            !text.contains("join under a name with baton_join first"),
            "{text}"
        );
        let text = instructions(&[Group::Locks], Some("bob"));
        assert!(text.contains("already joined as agent bob") && !text.contains("baton_join"));
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

    /// Every tool whose method takes a `fence` (Set, Delete, CompleteNode, Publish; Txn's
    /// ops) offers it, and baton_claim says to pass the fence it returns to them.
    #[test]
    fn every_write_that_batond_fences_takes_the_claims_fence() {
        let methods = crate::methods::describe_all();
        let tools = catalogue();
        let mut fenced = Vec::new();
        for tool in &tools {
            let method = methods.iter().find(|m| m.method == tool.method).unwrap();
            let params = serde_json::to_value(&method.params_schema).unwrap();
            let input = Value::Object(tool.input_schema());
            if params["properties"].get("fence").is_some() {
                assert!(input["properties"].get("fence").is_some(), "{}", tool.name);
                fenced.push(tool.name);
            }
            if tool.name == "baton_txn" {
                assert!(input["properties"]["ops"]["items"]["properties"]
                    .get("fence")
                    .is_some());
                fenced.push(tool.name);
            }
        }
        assert_eq!(
            fenced,
            [
                "baton_set",
                "baton_delete",
                "baton_txn",
                "baton_task_complete",
                "baton_publish"
            ]
        );
        let claim = tools.iter().find(|t| t.name == "baton_claim").unwrap();
        assert!(claim.output["properties"].get("fence").is_some());
        for name in &fenced {
            assert!(claim.description.contains(name), "{name}");
        }
    }

    #[test]
    fn schemas_are_simple_objects() {
        let tools = catalogue();
        assert_eq!(tools.len(), 26);
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
    fn a_wrong_recipient_is_told_what_to_send() {
        let tools = catalogue();
        let send = tools.iter().find(|t| t.name == "baton_send").unwrap();
        let args = |to: Value| json!({"to": to, "body": "hi"}).as_object().unwrap().clone();
        let hint = send.check_arguments(&args(json!("bob"))).unwrap_err();
        assert!(hint.contains("\"to\" is the string \"bob\""), "{hint}");
        assert!(hint.contains("a list of agent names"), "{hint}");
        assert!(hint.contains("a list of one: [\"bob\"]"), "{hint}");
        assert!(!hint.contains("any JSON"), "{hint}");
        let hint = send.check_arguments(&args(json!(5))).unwrap_err();
        assert!(
            hint.contains("the number 5") && hint.contains("\"*\""),
            "{hint}"
        );
        let hint = send.check_arguments(&args(json!([]))).unwrap_err();
        assert!(!hint.contains("any JSON"), "{hint}");
        assert!(send.check_arguments(&args(json!(["bob"]))).is_ok());
        assert!(send.check_arguments(&args(json!("*"))).is_ok());
        let hint = send
            .check_arguments(json!({"to": ["bob"]}).as_object().unwrap())
            .unwrap_err();
        assert!(hint.contains("\"body\" is missing"), "{hint}");
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
