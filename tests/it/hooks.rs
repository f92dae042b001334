//! The harness hooks (`baton guard hook`, `baton hook context|stop`) run by the real `baton`
//! binary on the inputs each harness documents (tests/fixtures/hooks/<harness>/), against a
//! real batond: the guard blocks a file another agent holds and passes a free one, the
//! context hook tells an agent with mail and claims about them and says nothing to one
//! without, the stop hook blocks once and then lets the stop through.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

use crate::common::{Client, Daemon};

/// A project folder that is batond's workspace, a home for the hooks' state, and a batond.
pub struct Bench {
    root: tempfile::TempDir,
    home: tempfile::TempDir,
    pub daemon: Daemon,
}

impl Bench {
    pub fn new() -> Bench {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("src")).unwrap();
        std::fs::write(root.path().join("src/a.rs"), "// a\n").unwrap();
        std::fs::write(root.path().join("README"), "r\n").unwrap();
        let workspace = root.path().to_str().unwrap().to_string();
        let daemon = Daemon::start_with(&["--workspace", &workspace]);
        Bench {
            root,
            home: tempfile::tempdir().unwrap(),
            daemon,
        }
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// A recorded input of `harness`, with this project's folder in it.
    pub fn fixture(&self, harness: &str, name: &str) -> Value {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/hooks")
            .join(harness)
            .join(name);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .replace("$ROOT", self.root().to_str().unwrap());
        serde_json::from_str(&text).unwrap()
    }

    /// `baton ARGS` with `input` on stdin, as the harness runs it.
    pub fn run(&self, args: &[&str], input: &Value) -> Output {
        self.run_env(args, input, &[])
    }

    pub fn run_env(&self, args: &[&str], input: &Value, env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_baton"));
        cmd.args(args)
            .current_dir(self.root())
            .env("HOME", self.home.path())
            .env("BATON_SOCKET_PATH", self.daemon.socket_path())
            .env_remove("XDG_STATE_HOME")
            .env_remove("BATON_URL")
            .env_remove("BATON_TOKEN")
            .env_remove("BATON_AGENT")
            .env_remove("BATON_GUARD_STRICT")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.to_string().as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    /// A task of one node, leased to `owner` for ten minutes; the task's id.
    pub fn lease_node(&self, owner: &str) -> String {
        let mut client = self.daemon.client();
        let task = client.result(
            "RegisterTask",
            json!({"goal": "ship it", "nodes": [{"id": "build"}]}),
        );
        let node = client.result(
            "AcquireNextNode",
            json!({"task_id": task["task_id"], "lease_owner": owner, "ttl_secs": 600}),
        );
        assert_eq!(node["node_id"], "build", "{node}");
        task["task_id"].as_str().unwrap().to_string()
    }

    pub fn hold(&self, key: &str, owner: &str) {
        let lease = self.daemon.client().result(
            "AcquireResourceLock",
            json!({"resource_key": key, "owner": owner, "ttl_secs": 600}),
        );
        assert_eq!(lease["status"], "acquired", "{lease}");
    }

    /// `name` joins (its session lives on this client) and gets a message from `from`.
    pub fn mail(&self, name: &str, from: &str, subject: &str) -> Client {
        let mut client = self.daemon.client();
        client.result("RegisterAgent", json!({"name": name, "ttl_secs": 600}));
        let sender = client.result("RegisterAgent", json!({"name": from, "ttl_secs": 600}));
        client.result(
            "SendMessage",
            json!({"session_id": sender["session_id"], "to": [name], "subject": subject, "body": {"pr": 7}}),
        );
        client
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The recorded edit of each harness: (harness, fixture).
const EDITS: [(&str, &str); 4] = [
    ("claude-code", "pre_tool_use_write.json"),
    ("codex", "pre_tool_use_apply_patch.json"),
    ("cursor", "pre_tool_use_write.json"),
    ("gemini", "before_tool_write_file.json"),
];

/// The recorded input made to write `file` instead of src/a.rs.
fn retarget(input: &Value, file: &str) -> Value {
    let text = input.to_string().replace("src/a.rs", file);
    serde_json::from_str(&text).unwrap()
}

/// Whether the harness's answer blocks the edit, in its own protocol.
fn blocked(harness: &str, out: &Output) -> bool {
    let answer: Value = serde_json::from_str(stdout(out).trim()).unwrap_or(Value::Null);
    match harness {
        "claude-code" => out.status.code() == Some(2) && !stderr(out).is_empty(),
        "codex" => answer["hookSpecificOutput"]["permissionDecision"] == "deny",
        "cursor" => answer["permission"] == "deny",
        "gemini" => answer["decision"] == "deny",
        _ => unreachable!(),
    }
}

fn reason(harness: &str, out: &Output) -> String {
    let answer: Value = serde_json::from_str(stdout(out).trim()).unwrap_or(Value::Null);
    let text = match harness {
        "claude-code" => return stderr(out),
        "codex" => &answer["hookSpecificOutput"]["permissionDecisionReason"],
        "cursor" => &answer["agent_message"],
        _ => &answer["reason"],
    };
    text.as_str().unwrap_or_default().to_string()
}

#[test]
fn each_guard_blocks_a_held_file_and_passes_a_free_one() {
    let bench = Bench::new();
    bench.hold("file:src/a.rs", "alice");
    for (harness, fixture) in EDITS {
        let input = bench.fixture(harness, fixture);
        let out = bench.run(&["guard", "hook", harness, "--agent", "bob"], &input);
        assert!(blocked(harness, &out), "{harness}: {out:?}");
        let why = reason(harness, &out);
        assert!(why.contains("held by alice"), "{harness}: {why}");
        assert!(
            why.contains("baton lock acquire file:src/a.rs --owner bob"),
            "{harness}: {why}"
        );
        // The holder's own edit goes through, and so does anyone's edit of a free file.
        let mine = bench.run(&["guard", "hook", harness, "--agent", "alice"], &input);
        assert_eq!(mine.status.code(), Some(0), "{harness}: {mine:?}");
        assert!(stdout(&mine).trim().is_empty(), "{harness}: {mine:?}");
        let free = retarget(&input, "README");
        let out = bench.run(&["guard", "hook", harness, "--agent", "bob"], &free);
        assert_eq!(out.status.code(), Some(0), "{harness}: {out:?}");
        assert!(!blocked(harness, &out), "{harness}: {out:?}");
        assert!(stdout(&out).trim().is_empty(), "{harness}: {out:?}");
    }
}

#[test]
fn the_guard_takes_the_agent_from_baton_agent_and_fails_open_unless_strict() {
    let mut bench = Bench::new();
    bench.hold("file:src/a.rs", "alice");
    let input = bench.fixture("gemini", "before_tool_write_file.json");
    let out = bench.run_env(
        &["guard", "hook", "gemini"],
        &input,
        &[("BATON_AGENT", "alice")],
    );
    assert!(
        stdout(&out).trim().is_empty(),
        "BATON_AGENT names the holder: {out:?}"
    );
    bench.daemon.sigterm();
    let out = bench.run(&["guard", "hook", "gemini", "--agent", "bob"], &input);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).trim().is_empty(), "{out:?}");
    assert!(
        stderr(&out).contains("letting the change through"),
        "{}",
        stderr(&out)
    );
    let out = bench.run_env(
        &["guard", "hook", "gemini", "--agent", "bob"],
        &input,
        &[("BATON_GUARD_STRICT", "1")],
    );
    assert!(blocked("gemini", &out), "strict refuses: {out:?}");
}

/// The context recorded for each harness: (harness, fixture, how its answer carries text).
const CONTEXTS: [(&str, &str); 7] = [
    ("claude-code", "session_start.json"),
    ("claude-code", "user_prompt_submit.json"),
    ("codex", "session_start.json"),
    ("codex", "user_prompt_submit.json"),
    ("cursor", "session_start.json"),
    ("gemini", "session_start.json"),
    ("gemini", "before_agent.json"),
];

fn context_text(harness: &str, out: &Output) -> String {
    let answer: Value = serde_json::from_str(stdout(out).trim())
        .unwrap_or_else(|e| panic!("{harness}: not JSON ({e}): {out:?}"));
    let text = match harness {
        "cursor" => &answer["additional_context"],
        _ => &answer["hookSpecificOutput"]["additionalContext"],
    };
    text.as_str().unwrap_or_default().to_string()
}

#[test]
fn the_context_hook_tells_an_agent_its_mail_claims_and_freed_files_and_nothing_else() {
    let bench = Bench::new();
    let _sessions = bench.mail("bob", "alice", "please review PR 7");
    bench.hold("file:README", "bob");
    let task = bench.lease_node("bob");
    // The guard refused bob src/a.rs while carol held it; carol is done now.
    bench.hold("file:src/a.rs", "carol");
    let edit = bench.fixture("claude-code", "pre_tool_use_write.json");
    assert!(blocked(
        "claude-code",
        &bench.run(&["guard", "hook", "claude-code", "--agent", "bob"], &edit)
    ));
    bench.daemon.client().result(
        "BreakLock",
        json!({"resource_key": "file:src/a.rs", "reason": "carol is done"}),
    );
    for (n, (harness, fixture)) in CONTEXTS.iter().enumerate() {
        let input = bench.fixture(harness, fixture);
        let out = bench.run(&["hook", "context", harness, "--agent", "bob"], &input);
        assert_eq!(out.status.code(), Some(0), "{harness}: {out:?}");
        let text = context_text(harness, &out);
        assert!(text.contains("agent bob"), "{harness}: {text}");
        assert!(
            text.contains("1 unread message: from alice \"please review PR 7\""),
            "{harness}: {text}"
        );
        assert!(
            text.contains("baton_inbox") && text.contains("baton_ack"),
            "{harness}: {text}"
        );
        assert!(text.contains("You hold file:README ("), "{harness}: {text}");
        assert!(text.contains("min left"), "{harness}: {text}");
        assert!(
            text.contains(&format!("You hold task node build of task {task} (")),
            "{harness}: {text}"
        );
        assert!(text.contains("baton_task_complete"), "{harness}: {text}");
        if n == 0 {
            // Said once, at the first chance.
            assert!(
                text.contains(
                    "file:src/a.rs is free now (carol held it when your edit was refused)"
                ),
                "{harness}: {text}"
            );
        } else {
            assert!(!text.contains("free now"), "{harness}: {text}");
        }
        if *harness == "claude-code" || *harness == "codex" || *harness == "gemini" {
            let answer: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
            assert_eq!(
                answer["hookSpecificOutput"]["hookEventName"],
                input["hook_event_name"]
            );
        }
    }
    // An agent with no mail and no claims hears nothing at all.
    for (harness, fixture) in CONTEXTS {
        let input = bench.fixture(harness, fixture);
        let out = bench.run(&["hook", "context", harness, "--agent", "dave"], &input);
        assert_eq!(out.status.code(), Some(0), "{harness}: {out:?}");
        assert_eq!(stdout(&out), "", "{harness}: silence");
        assert_eq!(stderr(&out), "", "{harness}: silence");
    }
}

/// Each harness's recorded stop, and the same stop once its harness says a stop hook
/// already made the agent go on.
fn stops(bench: &Bench) -> Vec<(&'static str, Value, Value)> {
    let mut all = Vec::new();
    for (harness, fixture, flag, again) in [
        ("claude-code", "stop.json", "stop_hook_active", json!(true)),
        ("codex", "stop.json", "stop_hook_active", json!(true)),
        ("cursor", "stop.json", "loop_count", json!(1)),
        (
            "gemini",
            "after_agent.json",
            "stop_hook_active",
            json!(true),
        ),
    ] {
        let first = bench.fixture(harness, fixture);
        let mut second = first.clone();
        second[flag] = again;
        all.push((harness, first, second));
    }
    all
}

fn stop_reason(harness: &str, out: &Output) -> Option<String> {
    let text = stdout(out);
    if text.trim().is_empty() {
        return None;
    }
    let answer: Value = serde_json::from_str(text.trim()).unwrap();
    let (field, decision) = match harness {
        "claude-code" | "codex" => ("reason", Some("block")),
        "gemini" => ("reason", Some("deny")),
        _ => ("followup_message", None),
    };
    if let Some(decision) = decision {
        assert_eq!(answer["decision"], decision, "{harness}: {answer}");
    }
    answer[field].as_str().map(str::to_string)
}

#[test]
fn the_stop_hook_blocks_once_then_lets_the_stop_through() {
    let bench = Bench::new();
    let _sessions = bench.mail("bob", "alice", "standup");
    bench.hold("file:README", "bob");
    let task = bench.lease_node("bob");
    for (harness, first, second) in stops(&bench) {
        let out = bench.run(&["hook", "stop", harness, "--agent", "bob"], &first);
        assert_eq!(out.status.code(), Some(0), "{harness}: {out:?}");
        let why =
            stop_reason(harness, &out).unwrap_or_else(|| panic!("{harness} must block: {out:?}"));
        assert!(why.contains("claim file:README"), "{harness}: {why}");
        assert!(why.contains("baton_release"), "{harness}: {why}");
        assert!(
            why.contains(&format!("task node build of task {task} (")),
            "{harness}: {why}"
        );
        assert!(
            why.contains("1 unacknowledged message (from alice \"standup\")"),
            "{harness}: {why}"
        );
        assert!(why.contains("baton_ack"), "{harness}: {why}");
        // The harness says it already went on once: the stop goes through.
        let out = bench.run(&["hook", "stop", harness, "--agent", "bob"], &second);
        assert_eq!(out.status.code(), Some(0), "{harness}: {out:?}");
        assert_eq!(stop_reason(harness, &out), None, "{harness}: no loop");
        // An input that does not say: a marker of its own keeps it to once a turn, until
        // the next prompt.
        let mut unsaid = first.clone();
        unsaid.as_object_mut().unwrap().remove("stop_hook_active");
        unsaid.as_object_mut().unwrap().remove("loop_count");
        let blocked = bench.run(&["hook", "stop", harness, "--agent", "bob"], &unsaid);
        assert!(
            stop_reason(harness, &blocked).is_some(),
            "{harness}: {blocked:?}"
        );
        let through = bench.run(&["hook", "stop", harness, "--agent", "bob"], &unsaid);
        assert_eq!(
            stop_reason(harness, &through),
            None,
            "{harness}: {through:?}"
        );
    }
    // An agent that holds nothing and has no mail stops at once.
    for (harness, first, _) in stops(&bench) {
        let out = bench.run(&["hook", "stop", harness, "--agent", "dave"], &first);
        assert_eq!(stop_reason(harness, &out), None, "{harness}: {out:?}");
    }
}

#[test]
fn the_stop_hook_lets_the_stop_through_when_batond_is_down_unless_strict() {
    let mut bench = Bench::new();
    let input = bench.fixture("claude-code", "stop.json");
    bench.daemon.sigterm();
    let out = bench.run(&["hook", "stop", "claude-code", "--agent", "bob"], &input);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stop_reason("claude-code", &out), None, "{out:?}");
    assert!(
        stderr(&out).contains("letting the stop through"),
        "{}",
        stderr(&out)
    );
    let out = bench.run_env(
        &["hook", "stop", "claude-code", "--agent", "bob"],
        &input,
        &[("BATON_GUARD_STRICT", "1")],
    );
    assert!(
        stop_reason("claude-code", &out).is_some(),
        "strict holds it once: {out:?}"
    );
    // The context hook only warns.
    let input = bench.fixture("claude-code", "session_start.json");
    let out = bench.run(
        &["hook", "context", "claude-code", "--agent", "bob"],
        &input,
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "");
    assert!(
        stderr(&out).contains("cannot ask batond"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn no_hook_prints_the_token() {
    let bench = Bench::new();
    let secret = "bt_supersecret_token_value_123";
    for (harness, fixture) in EDITS {
        let input = bench.fixture(harness, fixture);
        // A batond that cannot be reached, and a token in the environment: the warning
        // names the address, never the token.
        let out = bench.run_env(
            &[
                "--url",
                "tls://127.0.0.1:1",
                "guard",
                "hook",
                harness,
                "--agent",
                "bob",
            ],
            &input,
            &[("BATON_TOKEN", secret)],
        );
        assert!(
            !stdout(&out).contains(secret) && !stderr(&out).contains(secret),
            "{out:?}"
        );
        assert_eq!(out.status.code(), Some(0), "fails open: {out:?}");
    }
}
