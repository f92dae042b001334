//! `baton`: batond from a terminal or a shell script. Tables for people, `--json` for
//! scripts, and exit codes a script can branch on (see `baton --help`).

use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{json, Map, Value};

use baton::client::{CallError, Connection};
use baton::config::{Config, Flags};

const EXIT_CODES: &str = "\
Exit codes:
  0   success
  1   any other failure
  2   bad input (usage, invalid params, refused as invalid)
  3   not found (a key that does not exist, an unknown task or lease)
  4   conflict (expected version did not match, a transaction compare failed)
  5   busy (the lock is held by someone else, or a wait timed out)
  6   lease invalid (expired, released or someone else's)
  69  batond is not running (or its socket cannot be opened)
  75  temporary: batond is overloaded or shutting down; retry";

/// Command line for batond: versioned state, resource locks, tasks and the journal.
#[derive(Parser)]
#[command(name = "baton", version, about, after_help = EXIT_CODES)]
struct Cli {
    /// batond's socket [default: BATON_SOCKET_PATH, else $BATON_HOME/baton.sock]
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<String>,
    /// Print the daemon's JSON result instead of a table
    #[arg(long, global = true)]
    json: bool,
    /// Colour in tables and errors
    #[arg(long, global = true, value_enum, default_value_t = Colour::Auto)]
    color: Colour,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Colour {
    /// Only when writing to a terminal and NO_COLOR is unset
    Auto,
    Always,
    Never,
}

#[derive(Subcommand)]
enum Command {
    /// Print a record's value (exit 3 if the key does not exist)
    Get { namespace: String, key: String },
    /// Write a value: JSON if it parses as JSON, else a string; `-` reads stdin
    Set {
        namespace: String,
        key: String,
        value: String,
        /// Only if the stored version is N (0: only if the key does not exist); exit 4 if not
        #[arg(long, value_name = "N")]
        expect: Option<u64>,
        /// Who writes (updated_by)
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
        /// Store VALUE as a string even if it parses as JSON
        #[arg(long)]
        string: bool,
    },
    /// Delete a record (its version lives on as a tombstone)
    Delete {
        namespace: String,
        key: String,
        #[arg(long, value_name = "N")]
        expect: Option<u64>,
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// List the live records of a namespace
    List {
        namespace: String,
        #[arg(long)]
        prefix: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u64,
    },
    /// Every version of a key, newest first
    History {
        namespace: String,
        key: String,
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Resource locks: acquire, release, heartbeat, status, list
    #[command(subcommand)]
    Lock(LockCommand),
    /// DAG tasks: register, status, list, cancel
    #[command(subcommand)]
    Task(TaskCommand),
    /// The journal: events after --since; --follow keeps streaming new ones
    Events {
        /// Events with a seq greater than N [default: 0, or the head with --follow]
        #[arg(long, value_name = "N")]
        since: Option<u64>,
        /// Keep printing events as they happen (Ctrl-C to stop)
        #[arg(long, short)]
        follow: bool,
        /// Event types (repeatable; `kv.*` matches by prefix)
        #[arg(long = "type", value_name = "TYPE")]
        types: Vec<String>,
        #[arg(long)]
        namespace: Option<String>,
        #[arg(long)]
        key_prefix: Option<String>,
        #[arg(long)]
        resource_prefix: Option<String>,
        #[arg(long, value_name = "TASK_ID")]
        task: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u64,
    },
    /// Is batond up?
    Health,
    /// Counters, latencies, storage figures
    Metrics,
    /// Any method with raw JSON params (`-` reads them from stdin); prints the result
    Call {
        method: String,
        params: Option<String>,
    },
}

#[derive(Subcommand)]
enum LockCommand {
    /// Take a lease on KEY (file:PATH, dir:PATH, any kind:name); prints the lease id
    Acquire {
        key: String,
        /// Who holds it [default: BATON_OWNER, else user@host]
        #[arg(long)]
        owner: Option<String>,
        /// Lease length in seconds [default: the daemon's]
        #[arg(long, value_name = "SECS")]
        ttl: Option<u64>,
        /// Wait up to MS milliseconds for a busy lock (exit 5 if still busy)
        #[arg(long, value_name = "MS")]
        wait: Option<u64>,
        /// JSON metadata shown to others
        #[arg(long, value_name = "JSON")]
        metadata: Option<String>,
    },
    /// End a lease and say what happened
    Release {
        key: String,
        lease_id: String,
        /// released, modified, created, deleted, moved (with --moved-to), abandoned
        #[arg(long)]
        outcome: Option<String>,
        #[arg(long, value_name = "PATH")]
        moved_to: Option<String>,
        #[arg(long)]
        note: Option<String>,
    },
    /// Extend a lease
    Heartbeat {
        key: String,
        lease_id: String,
        #[arg(long, value_name = "SECS")]
        ttl: Option<u64>,
    },
    /// Who holds KEY, or what its last holder did (exit 5 if held)
    Status { key: String },
    /// Live leases
    List {
        #[arg(long)]
        prefix: Option<String>,
        #[arg(long)]
        owner: Option<String>,
    },
}

#[derive(Subcommand)]
enum TaskCommand {
    /// Register a task from a JSON file ({goal, context?, nodes: [...]}; `-` reads stdin)
    Register { file: String },
    /// A task's status and nodes
    Status { task_id: String },
    /// Tasks, newest first
    List {
        /// running, completed, failed or cancelled
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Cancel every unfinished node of a task
    Cancel { task_id: String },
}

/// Why the command failed, with the exit code it maps to.
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<CallError> for Failure {
    fn from(err: CallError) -> Failure {
        let code = match &err {
            CallError::Unreachable { .. } => 69,
            CallError::NotSent(_) | CallError::Lost(_) => 1,
            CallError::Daemon { kind, .. } => match kind.as_str() {
                "invalid" | "invalid_params" | "parse_error" | "invalid_request"
                | "method_not_found" | "request_too_large" | "value_too_large" => 2,
                "not_found" => 3,
                "conflict" | "idempotency_conflict" => 4,
                "lease_invalid" => 6,
                "overloaded" | "unavailable" => 75,
                _ => 1,
            },
        };
        let message = match &err {
            CallError::Unreachable { path, source } => format!(
                "batond is not running at {} ({source}); start it with `batond` (or install the service: scripts/install-service), or pass --socket",
                path.display()
            ),
            _ => err.to_string(),
        };
        Failure::new(code, message)
    }
}

type Outcome = Result<u8, Failure>;

/// Where output goes and how it looks.
struct Out {
    json: bool,
    colour: bool,
}

impl Out {
    fn paint(&self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    fn status(&self, text: &str) -> String {
        let code = match text {
            "acquired" | "already_held" | "available" | "completed" | "released" | "ok"
            | "COMPLETED" => "32",
            "busy" | "held" | "running" | "RUNNING" | "PENDING" | "timeout" => "33",
            "failed" | "cancelled" | "FAILED" | "CANCELLED" => "31",
            _ => return text.to_string(),
        };
        self.paint(code, text)
    }

    /// The result as JSON (for --json).
    fn raw(&self, value: &Value) {
        println!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        );
    }

    /// Rows under a header, columns aligned.
    fn table(&self, header: &[&str], rows: &[Vec<String>]) {
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for row in rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(visible_len(cell));
            }
        }
        let line = |cells: Vec<String>| {
            let last = cells.len().saturating_sub(1);
            let mut text = String::new();
            for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
                text.push_str(cell);
                if i < last {
                    text.push_str(&" ".repeat(w - visible_len(cell) + 2));
                }
            }
            text
        };
        let head = line(header.iter().map(|h| h.to_string()).collect());
        println!("{}", self.paint("1", &head));
        for row in rows {
            println!("{}", line(row.clone()));
        }
    }
}

/// Length without ANSI colour codes.
fn visible_len(text: &str) -> usize {
    let mut n = 0;
    let mut in_escape = false;
    for c in text.chars() {
        match (in_escape, c) {
            (false, '\x1b') => in_escape = true,
            (true, 'm') => in_escape = false,
            (true, _) => {}
            (false, _) => n += 1,
        }
    }
    n
}

/// A JSON value on one line, cut to `max` characters.
fn compact(value: &Value, max: usize) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    if text.chars().count() > max {
        format!("{}...", text.chars().take(max - 3).collect::<String>())
    } else {
        text
    }
}

fn text(value: &Value) -> String {
    compact(value, 200)
}

/// Reads `arg`, or stdin when it is `-`.
fn arg_or_stdin(arg: &str) -> Result<String, Failure> {
    if arg != "-" {
        return Ok(arg.to_string());
    }
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .map_err(|e| Failure::new(1, format!("cannot read stdin: {e}")))?;
    Ok(input.trim_end_matches('\n').to_string())
}

fn parse_json(what: &str, text: &str) -> Result<Value, Failure> {
    serde_json::from_str(text).map_err(|e| {
        Failure::new(
            2,
            format!("{what} is not valid JSON ({e}); quote it, e.g. '{{\"a\": 1}}'"),
        )
    })
}

fn default_owner() -> String {
    if let Ok(owner) = std::env::var("BATON_OWNER") {
        if !owner.is_empty() {
            return owner;
        }
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "localhost".into());
    format!("{user}@{host}")
}

/// Params with the `None` fields left out.
fn params(fields: Vec<(&str, Option<Value>)>) -> Value {
    let map: Map<String, Value> = fields
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
        .collect();
    Value::Object(map)
}

async fn run(cli: Cli, out: &Out, conn: &mut Connection) -> Outcome {
    match cli.command {
        Command::Get { namespace, key } => {
            let r = conn
                .call("Get", &json!({"namespace": namespace, "key": key}))
                .await?;
            if out.json {
                out.raw(&r);
            } else if r["found"] == true {
                eprintln!(
                    "{}/{}  version {}  revision {}  by {}  at {}",
                    namespace,
                    key,
                    r["version"],
                    r["revision"],
                    text(&r["updated_by"]),
                    text(&r["updated_at"])
                );
                println!(
                    "{}",
                    serde_json::to_string_pretty(&r["value"]).unwrap_or_default()
                );
            }
            match (r["found"] == true, out.json) {
                (true, _) => Ok(0),
                (false, true) => Ok(3),
                (false, false) => Err(Failure::new(
                    3,
                    format!("{namespace}/{key} does not exist; write it with `baton set {namespace} {key} VALUE`"),
                )),
            }
        }
        Command::Set {
            namespace,
            key,
            value,
            expect,
            by,
            string,
        } => {
            let value = arg_or_stdin(&value)?;
            let value = if string {
                Value::String(value)
            } else {
                serde_json::from_str(&value).unwrap_or(Value::String(value))
            };
            let r = conn
                .call(
                    "Set",
                    &params(vec![
                        ("namespace", Some(json!(namespace))),
                        ("key", Some(json!(key))),
                        ("value", Some(value)),
                        ("expected_version", expect.map(Value::from)),
                        ("updated_by", by.map(Value::from)),
                    ]),
                )
                .await?;
            if out.json {
                out.raw(&r);
            } else {
                println!(
                    "{namespace}/{key}  version {} (was {})  revision {}",
                    r["version"], r["previous_version"], r["revision"]
                );
            }
            Ok(0)
        }
        Command::Delete {
            namespace,
            key,
            expect,
            by,
        } => {
            let r = conn
                .call(
                    "Delete",
                    &params(vec![
                        ("namespace", Some(json!(namespace))),
                        ("key", Some(json!(key))),
                        ("expected_version", expect.map(Value::from)),
                        ("updated_by", by.map(Value::from)),
                    ]),
                )
                .await?;
            if out.json {
                out.raw(&r);
            } else if r["deleted"] == true {
                println!("{namespace}/{key}  deleted at version {}", r["version"]);
            } else {
                println!("{namespace}/{key}  did not exist");
            }
            Ok(0)
        }
        Command::List {
            namespace,
            prefix,
            limit,
        } => {
            let r = conn
                .call(
                    "List",
                    &params(vec![
                        ("namespace", Some(json!(namespace))),
                        ("prefix", prefix.map(Value::from)),
                        ("limit", Some(json!(limit))),
                    ]),
                )
                .await?;
            if out.json {
                out.raw(&r);
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = r["records"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|rec| {
                    vec![
                        text(&rec["key"]),
                        rec["version"].to_string(),
                        compact(&rec["value"], 50),
                        text(&rec["updated_by"]),
                        text(&rec["updated_at"]),
                    ]
                })
                .collect();
            out.table(
                &["KEY", "VERSION", "VALUE", "UPDATED_BY", "UPDATED_AT"],
                &rows,
            );
            if let Some(after) = r["next_after"].as_str() {
                eprintln!("more: --prefix or a larger --limit (next page after {after})");
            }
            Ok(0)
        }
        Command::History {
            namespace,
            key,
            limit,
        } => {
            let r = conn
                .call(
                    "History",
                    &params(vec![
                        ("namespace", Some(json!(namespace))),
                        ("key", Some(json!(key))),
                        ("limit", limit.map(Value::from)),
                    ]),
                )
                .await?;
            if out.json {
                out.raw(&r);
                return Ok(0);
            }
            let history = r["history"].as_array().cloned().unwrap_or_default();
            if history.is_empty() {
                return Err(Failure::new(
                    3,
                    format!("{namespace}/{key} has never been written"),
                ));
            }
            let rows: Vec<Vec<String>> = history
                .iter()
                .map(|h| {
                    vec![
                        h["version"].to_string(),
                        if h["deleted"] == true {
                            out.paint("31", "(deleted)")
                        } else {
                            compact(&h["value"], 50)
                        },
                        text(&h["updated_by"]),
                        text(&h["updated_at"]),
                        h["revision"].to_string(),
                    ]
                })
                .collect();
            out.table(
                &["VERSION", "VALUE", "UPDATED_BY", "UPDATED_AT", "REVISION"],
                &rows,
            );
            Ok(0)
        }
        Command::Lock(command) => lock(command, out, conn).await,
        Command::Task(command) => task(command, out, conn).await,
        Command::Events {
            since,
            follow,
            types,
            namespace,
            key_prefix,
            resource_prefix,
            task,
            limit,
        } => {
            let filter = params(vec![
                (
                    "types",
                    (!types.is_empty()).then(|| Value::from(types.clone())),
                ),
                ("namespace", namespace.map(Value::from)),
                ("key_prefix", key_prefix.map(Value::from)),
                ("resource_prefix", resource_prefix.map(Value::from)),
                ("task_id", task.map(Value::from)),
            ]);
            if follow {
                return follow_events(out, conn, since, filter).await;
            }
            let mut p = filter.as_object().cloned().unwrap_or_default();
            p.insert("since_seq".into(), json!(since.unwrap_or(0)));
            p.insert("limit".into(), json!(limit));
            let r = conn.call("ReadEvents", &Value::Object(p)).await?;
            if out.json {
                out.raw(&r);
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = r["events"]
                .as_array()
                .into_iter()
                .flatten()
                .map(event_row)
                .collect();
            out.table(&["SEQ", "AT", "TYPE", "SUBJECT", "ACTOR", "DATA"], &rows);
            eprintln!("next: baton events --since {}", r["next_seq"]);
            Ok(0)
        }
        Command::Health => {
            let r = conn.call("Health", &json!({})).await?;
            if out.json {
                out.raw(&r);
            } else {
                println!(
                    "{}  batond {}  schema {}  database {}  up {}s",
                    out.status(r["status"].as_str().unwrap_or("?")),
                    text(&r["version"]),
                    r["schema_version"],
                    text(&r["database"]),
                    r["uptime_secs"]
                );
            }
            Ok(0)
        }
        Command::Metrics => {
            let r = conn.call("Metrics", &json!({})).await?;
            if out.json {
                out.raw(&r);
                return Ok(0);
            }
            println!(
                "up {}s  connections {} open ({} total)  records {} live  journal {} events (head {})  commits {} (mean batch {:.1})  locks {} live, {} waiting",
                r["uptime_secs"],
                r["connections"]["open"],
                r["connections"]["total"],
                r["records"]["live"],
                r["journal"]["length"],
                r["journal"]["head_seq"],
                r["storage"]["commits"],
                r["storage"]["mean_batch"].as_f64().unwrap_or(0.0),
                r["locks"]["live"],
                r["locks"]["waiting"],
            );
            let rows: Vec<Vec<String>> = r["methods"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(name, m)| {
                    let mut row = vec![
                        name.clone(),
                        m["count"].to_string(),
                        m["errors"].to_string(),
                    ];
                    for field in ["p50_us", "p99_us"] {
                        row.push(
                            m.get(field)
                                .map(|v| v.to_string())
                                .unwrap_or_else(|| "-".into()),
                        );
                    }
                    row
                })
                .collect();
            if !rows.is_empty() {
                println!();
                out.table(&["METHOD", "REQUESTS", "ERRORS", "P50_US", "P99_US"], &rows);
            }
            Ok(0)
        }
        Command::Call { method, params } => {
            let params = match params {
                Some(p) => parse_json("PARAMS", &arg_or_stdin(&p)?)?,
                None => json!({}),
            };
            let r = conn.call(&method, &params).await?;
            out.raw(&r);
            Ok(0)
        }
    }
}

async fn lock(command: LockCommand, out: &Out, conn: &mut Connection) -> Outcome {
    match command {
        LockCommand::Acquire {
            key,
            owner,
            ttl,
            wait,
            metadata,
        } => {
            let metadata = metadata.map(|m| parse_json("--metadata", &m)).transpose()?;
            let r = conn
                .call(
                    "AcquireResourceLock",
                    &params(vec![
                        ("resource_key", Some(json!(key))),
                        ("owner", Some(json!(owner.unwrap_or_else(default_owner)))),
                        ("ttl_secs", ttl.map(Value::from)),
                        ("wait_ms", wait.map(Value::from)),
                        ("metadata", metadata),
                    ]),
                )
                .await?;
            // already_held through another connection: the lease id went only to that one.
            let held_elsewhere = r["status"] == "already_held" && r.get("lease_id").is_none();
            let busy = r["status"] == "busy" || held_elsewhere;
            if out.json {
                out.raw(&r);
            } else if held_elsewhere {
                eprintln!(
                    "{}: {} is already held by {} (this owner) until {}; its lease id was printed by the acquire that took it, and is shown to nobody else: release it with that id, or wait until it expires",
                    out.status("busy"),
                    text(&r["resource_key"]),
                    text(&r["owner"]),
                    text(&r["expires_at"]),
                );
            } else if busy {
                let held = &r["held_by"];
                eprintln!(
                    "{}: {} is held by {} until {}{}; retry later or wait with --wait MS",
                    out.status("busy"),
                    text(&r["resource_key"]),
                    text(&held["owner"]),
                    text(&held["expires_at"]),
                    match r["conflicting_key"].as_str() {
                        Some(k) if r["resource_key"].as_str() != Some(k) => format!(" (via {k})"),
                        _ => String::new(),
                    }
                );
            } else {
                println!("{}", text(&r["lease_id"]));
                eprintln!(
                    "{} {}  fencing token {}  expires {}",
                    out.status(r["status"].as_str().unwrap_or("")),
                    text(&r["resource_key"]),
                    r["fencing_token"],
                    text(&r["expires_at"])
                );
            }
            Ok(if busy { 5 } else { 0 })
        }
        LockCommand::Release {
            key,
            lease_id,
            outcome,
            moved_to,
            note,
        } => {
            let r = conn
                .call(
                    "ReleaseResourceLock",
                    &params(vec![
                        ("resource_key", Some(json!(key))),
                        ("lease_id", Some(json!(lease_id))),
                        ("outcome", outcome.map(Value::from)),
                        ("moved_to", moved_to.map(Value::from)),
                        ("note", note.map(Value::from)),
                    ]),
                )
                .await?;
            if out.json {
                out.raw(&r);
            } else {
                println!("{} {key} ({})", out.status("released"), text(&r["outcome"]));
            }
            Ok(0)
        }
        LockCommand::Heartbeat { key, lease_id, ttl } => {
            let r = conn
                .call(
                    "HeartbeatResourceLock",
                    &params(vec![
                        ("resource_key", Some(json!(key))),
                        ("lease_id", Some(json!(lease_id))),
                        ("ttl_secs", ttl.map(Value::from)),
                    ]),
                )
                .await?;
            if out.json {
                out.raw(&r);
            } else {
                println!("{key} expires {}", text(&r["expires_at"]));
            }
            Ok(0)
        }
        LockCommand::Status { key } => {
            let r = conn
                .call("ResourceLockStatus", &json!({"resource_key": key}))
                .await?;
            let held = r["status"] == "held";
            if out.json {
                out.raw(&r);
            } else if held {
                let h = &r["held_by"];
                println!(
                    "{} {key}  by {}  since {}  until {}",
                    out.status("held"),
                    text(&h["owner"]),
                    text(&h["acquired_at"]),
                    text(&h["expires_at"])
                );
            } else {
                let previous = &r["previous"];
                if previous.is_null() {
                    println!("{} {key}", out.status("available"));
                } else {
                    println!(
                        "{} {key}  last: {} by {} at {}",
                        out.status("available"),
                        text(&previous["outcome"]),
                        text(&previous["owner"]),
                        text(&previous["at"])
                    );
                }
            }
            Ok(if held { 5 } else { 0 })
        }
        LockCommand::List { prefix, owner } => {
            let r = conn
                .call(
                    "ListResourceLocks",
                    &params(vec![
                        ("prefix", prefix.map(Value::from)),
                        ("owner", owner.map(Value::from)),
                    ]),
                )
                .await?;
            if out.json {
                out.raw(&r);
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = r["locks"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|l| {
                    vec![
                        text(&l["resource_key"]),
                        text(&l["owner"]),
                        text(&l["acquired_at"]),
                        text(&l["expires_at"]),
                        l["fencing_token"].to_string(),
                    ]
                })
                .collect();
            out.table(
                &["RESOURCE", "OWNER", "ACQUIRED_AT", "EXPIRES_AT", "FENCING"],
                &rows,
            );
            Ok(0)
        }
    }
}

async fn task(command: TaskCommand, out: &Out, conn: &mut Connection) -> Outcome {
    match command {
        TaskCommand::Register { file } => {
            let source = if file == "-" {
                arg_or_stdin("-")?
            } else {
                std::fs::read_to_string(&file)
                    .map_err(|e| Failure::new(2, format!("cannot read {file}: {e}")))?
            };
            let spec = parse_json(&file, &source)?;
            let r = conn.call("RegisterTask", &spec).await?;
            if out.json {
                out.raw(&r);
            } else {
                println!("{}", text(&r["task_id"]));
                let ids: Vec<String> = r["node_ids"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(text)
                    .collect();
                eprintln!("registered with {} nodes: {}", ids.len(), ids.join(", "));
            }
            Ok(0)
        }
        TaskCommand::Status { task_id } => {
            let r = conn
                .call("TaskStatus", &json!({"task_id": task_id}))
                .await?;
            if out.json {
                out.raw(&r);
                return Ok(0);
            }
            let t = &r["task"];
            println!(
                "{}  {}  {}  created {}",
                text(&t["task_id"]),
                out.status(t["status"].as_str().unwrap_or("")),
                text(&t["goal"]),
                text(&t["created_at"])
            );
            let rows: Vec<Vec<String>> = r["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|n| {
                    vec![
                        text(&n["node_id"]),
                        text(&n["name"]),
                        out.status(n["state"].as_str().unwrap_or("")),
                        format!("{}/{}", n["attempts"], n["max_attempts"]),
                        text(&n["lease_owner"]),
                    ]
                })
                .collect();
            out.table(&["NODE", "NAME", "STATE", "ATTEMPTS", "WORKER"], &rows);
            Ok(0)
        }
        TaskCommand::List { status, limit } => {
            let r = conn
                .call(
                    "ListTasks",
                    &params(vec![
                        ("status", status.map(Value::from)),
                        ("limit", limit.map(Value::from)),
                    ]),
                )
                .await?;
            if out.json {
                out.raw(&r);
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = r["tasks"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| {
                    vec![
                        text(&t["task_id"]),
                        out.status(t["status"].as_str().unwrap_or("")),
                        compact(&t["goal"], 40),
                        text(&t["created_at"]),
                    ]
                })
                .collect();
            out.table(&["TASK", "STATUS", "GOAL", "CREATED_AT"], &rows);
            Ok(0)
        }
        TaskCommand::Cancel { task_id } => {
            let r = conn
                .call("CancelTask", &json!({"task_id": task_id}))
                .await?;
            if out.json {
                out.raw(&r);
            } else {
                println!(
                    "{task_id}  {}",
                    out.status(r["status"].as_str().unwrap_or("cancelled"))
                );
            }
            Ok(0)
        }
    }
}

fn event_row(e: &Value) -> Vec<String> {
    let subject = match (
        e["namespace"].as_str(),
        e["key"].as_str(),
        e["resource_key"].as_str(),
        e["task_id"].as_str(),
    ) {
        (Some(ns), Some(key), _, _) => format!("{ns}/{key}"),
        (Some(ns), None, _, _) => ns.to_string(),
        (_, _, Some(resource), _) => resource.to_string(),
        (_, _, _, Some(task)) => match e["node_id"].as_str() {
            Some(node) => format!("{task} {node}"),
            None => task.to_string(),
        },
        _ => "-".to_string(),
    };
    vec![
        e["seq"].to_string(),
        text(&e["at"]),
        text(&e["type"]),
        subject,
        text(&e["actor"]),
        compact(&e["data"], 60),
    ]
}

/// Streams events as they are journaled, resubscribing where it stopped if the daemon
/// cuts the subscription off for falling behind.
async fn follow_events(
    out: &Out,
    conn: &mut Connection,
    since: Option<u64>,
    filter: Value,
) -> Outcome {
    let subscribe = |since: Option<u64>| {
        params(vec![
            ("since_seq", since.map(Value::from)),
            ("filter", Some(filter.clone())),
        ])
    };
    conn.call("Subscribe", &subscribe(since)).await?;
    let stdout = std::io::stdout();
    loop {
        let note = conn.notification().await?;
        match note["method"].as_str() {
            Some("Event") => {
                let event = &note["params"]["event"];
                let mut lock = stdout.lock();
                let line = if out.json {
                    event.to_string()
                } else {
                    event_row(event).join("  ")
                };
                if writeln!(lock, "{line}").and_then(|_| lock.flush()).is_err() {
                    return Ok(0); // the reader went away (e.g. `| head`)
                }
            }
            Some("SubscriptionEnded") => {
                let p = &note["params"];
                if p["reason"] == "overflow" {
                    let resume = p["resume_from_seq"].as_u64();
                    conn.call("Subscribe", &subscribe(resume)).await?;
                } else {
                    return Err(Failure::new(
                        1,
                        p["message"]
                            .as_str()
                            .unwrap_or("the subscription ended")
                            .to_string(),
                    ));
                }
            }
            _ => {}
        }
    }
}

fn main() -> ExitCode {
    // Die quietly when the reader goes away (`baton events | head`), as Unix tools do.
    // SAFETY: restoring the default disposition of one signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let colour = |tty: bool| match cli.color {
        Colour::Always => true,
        Colour::Never => false,
        Colour::Auto => tty && !no_color,
    };
    let out = Out {
        json: cli.json,
        colour: colour(std::io::stdout().is_terminal()),
    };
    let err_colour = colour(std::io::stderr().is_terminal());
    let config = match Config::from_process(&Flags {
        socket: cli.socket.clone(),
        ..Flags::default()
    }) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("baton: {err}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("baton: cannot start: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let mut conn = Connection::connect(&config.socket_path).await?;
        run(cli, &out, &mut conn).await
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            let label = if err_colour {
                "\x1b[31mbaton:\x1b[0m"
            } else {
                "baton:"
            };
            eprintln!("{label} {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}
