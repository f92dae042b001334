//! The command line: clap types, the exit codes `--help` lists, and turning arguments into params.

use std::io::Read;

use clap::{Parser, Subcommand, ValueEnum};
use serde::de::DeserializeOwned;
use serde_json::Value;

use baton::protocol::locks::Fence;
use baton::protocol::{Json, Request};

use crate::failure::Failure;

pub const EXIT_CODES: &str = "\
Exit codes:
  0   success
  1   any other failure
  2   bad input (usage, invalid params, refused as invalid)
  3   not found (a key that does not exist, an unknown task or lease)
  4   conflict (expected version did not match, a transaction compare failed)
  5   busy (the lock is held by someone else, or a wait timed out)
  6   lease invalid (expired, released or someone else's), or a fenced write refused
      (--fence: the claim was lost; nothing was written)
  69  batond is not running (or its socket cannot be opened)
  77  not allowed: no valid token (401: set BATON_TOKEN), or the token lacks the grant (403)
  75  temporary: batond is overloaded or shutting down; retry";

/// Command line for batond: versioned state, resource locks, tasks and the journal.
#[derive(Parser)]
#[command(
    name = "baton",
    version,
    about = "baton: batond from a terminal or a shell script: versioned state, resource locks, tasks and the journal. Tables for people, --json for scripts.",
    after_help = EXIT_CODES
)]
pub struct Cli {
    /// batond's socket [default: BATON_SOCKET_PATH, else $BATON_HOME/baton.sock]
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<String>,
    /// batond's URL: unix:///PATH, tls://HOST:PORT or tcp://127.0.0.1:PORT [default: BATON_URL, else the socket]
    #[arg(long, global = true, value_name = "URL")]
    pub url: Option<String>,
    /// Token to authenticate with; prefer BATON_TOKEN, which other users cannot see in `ps` [default: BATON_TOKEN]
    #[arg(long, global = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Print the daemon's JSON result instead of a table
    #[arg(long, global = true)]
    pub json: bool,
    /// Colour in tables and errors
    #[arg(long, global = true, value_enum, default_value_t = Colour::Auto)]
    pub color: Colour,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Colour {
    /// Only when writing to a terminal and NO_COLOR is unset
    Auto,
    Always,
    Never,
}

#[derive(Subcommand)]
pub enum Command {
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
        /// Write only while this claim holds: KEY:LEASE_ID (the lease is live) or
        /// KEY:FENCING_TOKEN (no newer lease was granted); exit 6 if not
        #[arg(long, value_name = "KEY:LEASE")]
        fence: Option<String>,
    },
    /// Delete a record (its version lives on as a tombstone)
    Delete {
        namespace: String,
        key: String,
        #[arg(long, value_name = "N")]
        expect: Option<u64>,
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
        /// Delete only while this claim holds (as for set); exit 6 if not
        #[arg(long, value_name = "KEY:LEASE")]
        fence: Option<String>,
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
    /// Access tokens for network clients: create, list, revoke (admin only)
    #[command(subcommand)]
    Token(TokenCommand),
    /// Join, heartbeat or leave as a named agent (join prints the session id)
    #[command(subcommand)]
    Agent(AgentCommand),
    /// Live agents: what each holds and how many unread messages it has
    Agents,
    /// The live dashboard: creates a short-lived read-only token and prints (on a desktop,
    /// also opens) the URL that logs in with it
    Dashboard {
        /// How long the token lasts, in seconds
        #[arg(long, value_name = "SECS", default_value_t = 3600)]
        ttl: u64,
        /// The dashboard's address, e.g. https://baton.example:7421 [default: the one
        /// batond reports]
        #[arg(long, value_name = "URL")]
        http: Option<String>,
        /// Print the URL without opening a browser
        #[arg(long)]
        no_open: bool,
    },
    /// Send a message from your session to agent names, or * for everyone; prints its seq
    Send {
        /// Recipients (names), or * for every agent that ever registered
        #[arg(required = true, num_args = 1..)]
        to: Vec<String>,
        /// The body: JSON if it parses as JSON, else a string
        #[arg(long)]
        body: String,
        #[arg(long)]
        subject: Option<String>,
        #[arg(long, value_name = "ID")]
        thread: Option<String>,
        /// Your session [default: BATON_SESSION]
        #[arg(long)]
        session: Option<String>,
    },
    /// Your messages after your acknowledged cursor (or --after); --follow waits for more
    Inbox {
        #[arg(long, value_name = "SEQ")]
        after: Option<u64>,
        #[arg(long, short)]
        follow: bool,
        #[arg(long)]
        session: Option<String>,
    },
    /// Mark your messages up to SEQ read
    Ack {
        up_to: u64,
        #[arg(long)]
        session: Option<String>,
    },
    /// Make claims binding: refuse changes to files someone else holds (git, Claude Code,
    /// Codex, Cursor, Gemini CLI)
    #[command(subcommand)]
    Guard(GuardCommand),
    /// Wire Baton into agent harnesses (Claude Code, Codex, Cursor, Gemini CLI): the MCP
    /// server, the edit guard, a context hook and a stop hook, in each harness's own config
    /// files; the project's (this git repository) unless --user
    Setup {
        /// Which harnesses [default: every one installed here]
        harnesses: Vec<Harness>,
        /// The agent the MCP server and the hooks act for (its claims pass the guard, its
        /// inbox and claims feed the hooks) [default: BATON_AGENT when they run]
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
        /// Your user-level config files instead of this project's
        #[arg(long)]
        user: bool,
        /// Print what would change as a unified diff; change nothing
        #[arg(long)]
        dry_run: bool,
        /// Take it all out again: each file as it was before setup, byte for byte (files
        /// setup created are removed)
        #[arg(long)]
        uninstall: bool,
    },
    /// Hooks a harness runs (`baton setup` installs them): `context` prints what the model
    /// should know (mail, claims, freed files), `stop` keeps it from ending its turn while
    /// it holds claims or unread messages
    #[command(subcommand)]
    Hook(HookCommand),
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
pub enum LockCommand {
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
        /// Hold it beside other shared holders (readers); an exclusive holder excludes them
        #[arg(long)]
        shared: bool,
        /// A counting key: up to N holders at once (every holder names the same N)
        #[arg(long, value_name = "N")]
        slots: Option<u64>,
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
    /// Operator: end KEY's leases (every holder, or --lease / --owner) as if released;
    /// waiters are served, the holder's next heartbeat fails (grant `operator`)
    Break {
        key: String,
        /// Why: journalled with who broke it, shown to the next holder
        #[arg(long)]
        reason: String,
        /// Only this lease
        #[arg(long = "lease", value_name = "ID")]
        lease: Option<String>,
        /// Only this owner's leases
        #[arg(long)]
        owner: Option<String>,
    },
}

#[derive(Subcommand)]
pub enum AgentCommand {
    /// Register as NAME; prints the session id (keep it: export BATON_SESSION=...)
    Join {
        name: String,
        #[arg(long)]
        role: Option<String>,
        /// Seconds the session lives without a heartbeat [default: 60]
        #[arg(long, value_name = "SECS")]
        ttl: Option<u64>,
        /// End NAME's live session, if any, and take its place
        #[arg(long)]
        takeover: bool,
    },
    /// Keep your session alive
    Heartbeat {
        #[arg(long)]
        session: Option<String>,
        #[arg(long, value_name = "SECS")]
        ttl: Option<u64>,
    },
    /// End your session (its locks, node leases and session keys end with it)
    Leave {
        #[arg(long)]
        session: Option<String>,
    },
    /// Operator: end NAME's live session as `leave` would (grant `operator`)
    End {
        name: String,
        /// Why: journalled with who ended it
        #[arg(long)]
        reason: String,
    },
}

#[derive(Subcommand)]
pub enum GuardCommand {
    /// Exit 0 unless a path is held by someone other than --owner (counting dir: leases on
    /// its folders); else exit 5 and one line per path: who, since when, until when, and
    /// how to claim it
    Check {
        /// Whose claims do not count against them [default: BATON_AGENT]
        #[arg(long)]
        owner: Option<String>,
        /// Check the paths staged for commit (in --repo, default here)
        #[arg(long)]
        staged: bool,
        #[arg(long, value_name = "DIR")]
        repo: Option<std::path::PathBuf>,
        /// Files to check (relative to here; batond maps them to file: keys in its workspace)
        paths: Vec<std::path::PathBuf>,
    },
    /// Put the guard in place: `git` (a pre-commit hook, keeping yours) or `claude-code`
    /// (a PreToolUse hook in the project's .claude/settings.json)
    Install {
        target: GuardTarget,
        /// The git repository [default: here]
        #[arg(long, value_name = "DIR")]
        repo: Option<std::path::PathBuf>,
        /// The Claude Code project [default: here]
        #[arg(long, value_name = "DIR")]
        project: Option<std::path::PathBuf>,
    },
    /// Take the guard out again (a hook it kept is put back)
    Uninstall {
        target: GuardTarget,
        #[arg(long, value_name = "DIR")]
        repo: Option<std::path::PathBuf>,
        #[arg(long, value_name = "DIR")]
        project: Option<std::path::PathBuf>,
    },
    /// Run as a harness's edit hook: reads the tool call on stdin and blocks it, in the
    /// harness's own protocol, when it writes a file someone other than the agent holds
    Hook {
        tool: Harness,
        /// Whose claims pass [default: BATON_AGENT]
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum GuardTarget {
    Git,
    ClaudeCode,
}

/// The agent harnesses Baton wires itself into.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum Harness {
    /// Anthropic's Claude Code
    ClaudeCode,
    /// OpenAI's Codex CLI
    Codex,
    /// Cursor (the editor's agent and cursor-agent)
    Cursor,
    /// Google's Gemini CLI
    Gemini,
}

impl Harness {
    pub const ALL: [Harness; 4] = [
        Harness::ClaudeCode,
        Harness::Codex,
        Harness::Cursor,
        Harness::Gemini,
    ];

    /// The name on the command line.
    pub fn arg(self) -> &'static str {
        match self {
            Harness::ClaudeCode => "claude-code",
            Harness::Codex => "codex",
            Harness::Cursor => "cursor",
            Harness::Gemini => "gemini",
        }
    }

    /// The name people know it by.
    pub fn title(self) -> &'static str {
        match self {
            Harness::ClaudeCode => "Claude Code",
            Harness::Codex => "Codex CLI",
            Harness::Cursor => "Cursor",
            Harness::Gemini => "Gemini CLI",
        }
    }
}

#[derive(Subcommand)]
pub enum HookCommand {
    /// At session start and before each prompt: a few lines for the model (unread messages,
    /// live claims and node leases with time left, refused files now free); nothing when
    /// there is nothing to say
    Context {
        harness: Harness,
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
    },
    /// When the model ends its turn: blocks it once while the agent holds claims or unread
    /// messages, naming each and the MCP tool that settles it
    Stop {
        harness: Harness,
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
    },
}

#[derive(Subcommand)]
pub enum TokenCommand {
    /// Create a token; prints the secret (shown this once) on stdout
    Create {
        /// Who or what it is for (an agent, a host)
        name: String,
        /// A grant, repeatable: kv:read:PATTERN, kv:write:PATTERN, locks:PATTERN, tasks:read,
        /// tasks:write, tasks:work, events:read, events:publish, agents, agents:PATTERN, read,
        /// metrics, operator, admin (PATTERN: exact, or a prefix ending in *); give the narrowest that does the job
        #[arg(long = "scope", value_name = "GRANT", required = true)]
        scope: Vec<String>,
        /// Lifetime in seconds [default: no expiry]
        #[arg(long, value_name = "SECS")]
        ttl: Option<u64>,
    },
    /// List live tokens (never their secrets)
    List,
    /// Revoke a token: connections using it get 401 at their next request
    Revoke { token_id: String },
}

#[derive(Subcommand)]
pub enum TaskCommand {
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
    /// Operator: put a FAILED node back to PENDING with fresh attempts; its task runs
    /// again once no node is FAILED (grant `operator`)
    Retry {
        task_id: String,
        node_id: String,
        /// Why: journalled with who retried it
        #[arg(long)]
        reason: String,
    },
}

/// Reads `arg`, or stdin when it is `-`.
pub fn arg_or_stdin(arg: &str) -> Result<String, Failure> {
    if arg != "-" {
        return Ok(arg.to_string());
    }
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .map_err(|e| Failure::new(1, format!("cannot read stdin: {e}")))?;
    Ok(input.trim_end_matches('\n').to_string())
}

pub fn parse_json(what: &str, text: &str) -> Result<Value, Failure> {
    serde_json::from_str(text).map_err(|e| {
        Failure::new(
            2,
            format!("{what} is not valid JSON ({e}); quote it, e.g. '{{\"a\": 1}}'"),
        )
    })
}

pub fn default_owner() -> String {
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

/// A JSON value read from an argument, as params carry it (spelt as `value` serializes).
pub fn json(value: &Value) -> Json {
    serde_json::value::to_raw_value(value).expect("a JSON value serializes")
}

/// An argument read as the field `name` of `R`'s params; refused (exit 2) in the words
/// batond uses for a field it cannot read.
pub fn field<R: Request, T: DeserializeOwned>(name: &str, text: String) -> Result<T, Failure> {
    serde_json::from_value(Value::String(text))
        .map_err(|e| Failure::new(2, format!("{}: field `{name}`: {e}", R::METHOD)))
}

/// `--fence KEY:LEASE`: the resource key, then after its last `:` a lease id, or a fencing
/// token when that part is a number.
pub fn fence(text: Option<String>) -> Result<Option<Fence>, Failure> {
    let Some(text) = text else {
        return Ok(None);
    };
    let refused = || {
        Failure::new(
            2,
            format!("--fence {text}: give KEY:LEASE_ID or KEY:FENCING_TOKEN, e.g. --fence file:report.md:3f2a... (the lease `baton lock acquire` printed)"),
        )
    };
    let (key, lease) = text.rsplit_once(':').ok_or_else(refused)?;
    if key.is_empty() || lease.is_empty() || !key.contains(':') {
        return Err(refused());
    }
    Ok(Some(match lease.parse::<u64>() {
        Ok(token) => Fence {
            resource_key: key.to_string(),
            lease_id: None,
            fencing_token: Some(token),
        },
        Err(_) => Fence {
            resource_key: key.to_string(),
            lease_id: Some(lease.to_string()),
            fencing_token: None,
        },
    }))
}
