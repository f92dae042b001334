//! `baton hook context|stop HARNESS` and `baton guard hook HARNESS`: the hooks `baton setup`
//! installs, each speaking its harness's own hook protocol (JSON on stdin; an exit code,
//! stderr or JSON on stdout back). Every hook answers within [`DEADLINE`], prints no token,
//! and fails open: when batond cannot be asked it says so on stderr and lets the harness go
//! on (the guard and the stop hook refuse instead under `BATON_GUARD_STRICT=1`).
//!
//! The protocols, from each harness's documentation:
//! - Claude Code, https://code.claude.com/docs/en/hooks: PreToolUse blocks with exit 2 and
//!   the reason on stderr; SessionStart and UserPromptSubmit add
//!   `hookSpecificOutput.additionalContext`; Stop blocks with `{"decision": "block",
//!   "reason"}` and says `stop_hook_active` once it already continued because of a stop hook.
//! - Codex CLI, https://developers.openai.com/codex/hooks: the same event names and fields
//!   (PreToolUse denies with `hookSpecificOutput.permissionDecision: "deny"`; its
//!   `apply_patch` calls carry the patch in `tool_input.command`).
//! - Cursor, https://cursor.com/docs/agent/hooks: `preToolUse` answers `{"permission":
//!   "deny", "user_message", "agent_message"}`; `sessionStart` adds `additional_context`;
//!   `stop` continues with `{"followup_message"}` and counts continuations in `loop_count`.
//!   Its `beforeSubmitPrompt` cannot add context, so Cursor gets context at session start
//!   only.
//! - Gemini CLI, https://geminicli.com/docs/hooks/reference: BeforeTool denies with
//!   `{"decision": "deny", "reason"}`; SessionStart and BeforeAgent add
//!   `hookSpecificOutput.additionalContext`; AfterAgent retries with `{"decision": "deny",
//!   "reason"}` and says `stop_hook_active`.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use baton::client::{Connection, Target};

use crate::cli::Harness;
use crate::failure::Failure;
use crate::guard;

mod facts;
pub mod state;
mod text;

use state::State;

/// The most a hook spends asking batond before it gives up (and fails open).
const DEADLINE: Duration = Duration::from_secs(3);

/// What a hook process answers its harness.
struct Answer {
    stdout: Option<String>,
    stderr: Option<String>,
    code: u8,
}

impl Answer {
    fn json(value: Value) -> Answer {
        Answer {
            stdout: Some(value.to_string()),
            stderr: None,
            code: 0,
        }
    }

    fn give(self) -> u8 {
        if let Some(out) = self.stdout {
            println!("{out}");
        }
        if let Some(err) = self.stderr {
            eprintln!("{err}");
        }
        self.code
    }
}

/// The hook's input: one JSON object on stdin; None (with a warning) when it is not.
fn read_input(what: &str) -> Option<Value> {
    let mut input = String::new();
    if std::io::Read::read_to_string(&mut std::io::stdin(), &mut input).is_err() {
        eprintln!("baton {what}: cannot read the hook input; letting the call through");
        return None;
    }
    match serde_json::from_str::<Value>(&input) {
        Ok(value) if value.is_object() => Some(value),
        _ => {
            eprintln!(
                "baton {what}: the hook input is not a JSON object; letting the call through"
            );
            None
        }
    }
}

/// The agent the hook acts for: `--agent` (written by `baton setup`), else `BATON_AGENT`.
fn agent(flag: Option<String>) -> Option<String> {
    guard::owner(flag)
}

/// The harness's session (conversation) the input belongs to.
fn session(input: &Value) -> String {
    ["session_id", "conversation_id"]
        .iter()
        .find_map(|k| input[*k].as_str())
        .unwrap_or("")
        .to_string()
}

/// Runs `work` on a fresh connection within [`DEADLINE`].
async fn asked<T>(
    target: &Target,
    work: impl AsyncFnOnce(&mut Connection) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let run = async {
        let mut conn = Connection::open(target).await?;
        work(&mut conn).await
    };
    match tokio::time::timeout(DEADLINE, run).await {
        Ok(result) => result,
        Err(_) => Err(Failure::new(
            69,
            format!(
                "batond did not answer within {} s at {}",
                DEADLINE.as_secs(),
                target.endpoint
            ),
        )),
    }
}

fn state_path(target: &Target, agent: &str) -> Option<PathBuf> {
    state::path(&target.endpoint.to_string(), agent)
}

/// `baton guard hook HARNESS`: blocks a tool call that writes a file another agent holds.
pub async fn guard(harness: Harness, agent_flag: Option<String>, target: &Target) -> u8 {
    let Some(input) = read_input("guard") else {
        return 0;
    };
    let paths = guard::tools::targets(harness, &input);
    if paths.is_empty() {
        return 0;
    }
    let owner = agent(agent_flag);
    let asked = asked(target, async |conn: &mut Connection| {
        Ok(guard::check(conn, owner.as_deref(), &paths).await?)
    })
    .await;
    let reason = match asked {
        Ok(refusals) if refusals.is_empty() => return 0,
        Ok(refusals) => {
            if let Some(path) = owner.as_deref().and_then(|o| state_path(target, o)) {
                let mut state = State::load(&path);
                for refusal in &refusals {
                    state.refused(&refusal.key, &refusal.holder, state::now_ms());
                }
                state.save(&path);
            }
            refusals
                .iter()
                .map(|r| format!("{} Do not write this file now.", r.text))
                .collect::<Vec<_>>()
                .join("\n")
        }
        Err(failure) => {
            if !guard::strict() {
                return guard::unanswered(&failure, 0);
            }
            guard::unanswered(&failure, 1);
            format!(
                "Baton cannot check who holds this file ({}) and BATON_GUARD_STRICT=1 refuses edits until batond answers.",
                failure.message
            )
        }
    };
    deny_edit(harness, &reason).give()
}

fn deny_edit(harness: Harness, reason: &str) -> Answer {
    match harness {
        Harness::ClaudeCode => Answer {
            stdout: None,
            stderr: Some(reason.to_string()),
            code: 2,
        },
        Harness::Codex => Answer::json(json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }})),
        Harness::Cursor => Answer::json(json!({
            "permission": "deny",
            "user_message": reason,
            "agent_message": reason,
        })),
        Harness::Gemini => Answer::json(json!({"decision": "deny", "reason": reason})),
    }
}

/// Whether the input is a new prompt (a turn starts).
fn starts_turn(input: &Value) -> bool {
    matches!(
        input["hook_event_name"].as_str(),
        Some("UserPromptSubmit" | "BeforeAgent" | "beforeSubmitPrompt")
    )
}

/// `baton hook context HARNESS`.
pub async fn context(harness: Harness, agent_flag: Option<String>, target: &Target) -> u8 {
    let Some(input) = read_input("hook context") else {
        return 0;
    };
    let Some(agent) = agent(agent_flag) else {
        eprintln!("baton hook context: no agent name (run `baton setup --agent NAME`, or set BATON_AGENT); nothing to say");
        return 0;
    };
    let path = state_path(target, &agent);
    let mut state = path.as_deref().map(State::load).unwrap_or_default();
    if starts_turn(&input) {
        let session = session(&input);
        state.stopped.retain(|s| *s != session);
    }
    let now = state::now_ms();
    let gathered = asked(target, async |conn: &mut Connection| {
        Ok(facts::gather(conn, &agent, &mut state, true, now).await?)
    })
    .await;
    if let Some(path) = &path {
        state.save(path);
    }
    let facts = match gathered {
        Ok(facts) => facts,
        Err(failure) => {
            eprintln!(
                "baton hook context: cannot ask batond ({}); no Baton context this time",
                failure.message
            );
            return 0;
        }
    };
    let Some(text) = text::context(&agent, &facts) else {
        return 0;
    };
    let event = input["hook_event_name"].as_str().unwrap_or("SessionStart");
    let answer = match harness {
        Harness::Cursor => Answer::json(json!({"additional_context": text})),
        Harness::ClaudeCode | Harness::Codex | Harness::Gemini => {
            Answer::json(json!({"hookSpecificOutput": {
                "hookEventName": event,
                "additionalContext": text,
            }}))
        }
    };
    answer.give()
}

/// Whether the harness says it already continued once because of a stop hook in this turn
/// (None: its input does not say).
fn already_continued(harness: Harness, input: &Value) -> Option<bool> {
    match harness {
        Harness::Cursor => input["loop_count"].as_u64().map(|n| n > 0),
        _ => input["stop_hook_active"].as_bool(),
    }
}

/// `baton hook stop HARNESS`.
pub async fn stop(harness: Harness, agent_flag: Option<String>, target: &Target) -> u8 {
    let Some(input) = read_input("hook stop") else {
        return 0;
    };
    let Some(agent) = agent(agent_flag) else {
        return 0;
    };
    // A turn the person aborted, or that failed, ends as it is.
    if matches!(input["status"].as_str(), Some("aborted" | "error")) {
        return 0;
    }
    let session = session(&input);
    let path = state_path(target, &agent);
    let mut state = path.as_deref().map(State::load).unwrap_or_default();
    let told =
        already_continued(harness, &input).unwrap_or_else(|| state.stopped.contains(&session));
    if told {
        // Told once in this turn: the stop goes through (no loops).
        state.stopped.retain(|s| *s != session);
        if let Some(path) = &path {
            state.save(path);
        }
        return 0;
    }
    let now = state::now_ms();
    let gathered = asked(target, async |conn: &mut Connection| {
        Ok(facts::gather(conn, &agent, &mut state, false, now).await?)
    })
    .await;
    let reason = match gathered {
        Ok(facts) => text::stop(&agent, &facts),
        Err(failure) if guard::strict() => {
            eprintln!(
                "baton hook stop: cannot ask batond ({}); BATON_GUARD_STRICT=1 keeps the agent from stopping once",
                failure.message
            );
            Some(format!("Baton cannot check what you hold ({}) and BATON_GUARD_STRICT=1 is set: make sure you released your claims (baton_release) and acknowledged your messages (baton_ack), then stop again.", failure.message))
        }
        Err(failure) => {
            eprintln!(
                "baton hook stop: cannot ask batond ({}); letting the stop through (set BATON_GUARD_STRICT=1 to hold it instead)",
                failure.message
            );
            None
        }
    };
    let Some(reason) = reason else {
        if let Some(path) = &path {
            state.save(path);
        }
        return 0;
    };
    state.stopped.retain(|s| *s != session);
    state.stopped.push(session);
    if let Some(path) = &path {
        state.save(path);
    }
    let answer = match harness {
        Harness::ClaudeCode | Harness::Codex => {
            Answer::json(json!({"decision": "block", "reason": reason}))
        }
        Harness::Gemini => Answer::json(json!({"decision": "deny", "reason": reason})),
        Harness::Cursor => Answer::json(json!({"followup_message": reason})),
    };
    answer.give()
}
