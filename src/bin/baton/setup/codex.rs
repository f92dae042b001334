//! Codex CLI. Both the MCP server and the hooks go in the project's `.codex/config.toml`
//! (`--user`: `$CODEX_HOME/config.toml`, `~/.codex` by default):
//! - `[mcp_servers.baton]`, https://developers.openai.com/codex/mcp: `command` and `args`,
//!   or for a remote batond `url` with `bearer_token_env_var` (the token's variable, not the
//!   token).
//! - `[[hooks.EVENT]]` tables, https://developers.openai.com/codex/hooks (inline TOML hooks
//!   take the same shape as hooks.json): PreToolUse on apply_patch (the guard; Codex also
//!   matches it as Edit and Write), SessionStart and UserPromptSubmit (the context hook),
//!   Stop (the stop hook).

use std::path::{Path, PathBuf};

use super::toml::{strings, Doc, Hook};
use super::{mark, Edit, Plan, Scope, Wiring, HOOK_TIMEOUT_SECS, TOKEN_ENV};
use crate::cli::Harness;
use crate::guard::tools;

const H: Harness = Harness::Codex;

/// Codex's home: `$CODEX_HOME`, else `~/.codex`.
pub fn home(home: &Path) -> PathBuf {
    match std::env::var_os("CODEX_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => home.join(".codex"),
    }
}

fn hooks(wiring: &Wiring) -> Vec<(&'static str, &'static str, Hook)> {
    let hook = |matcher, kind: &str| Hook {
        matcher,
        command: wiring.hook(kind, H),
        timeout: HOOK_TIMEOUT_SECS as i64,
    };
    vec![
        (
            "PreToolUse",
            "guard hook",
            hook(Some(tools::matcher(H)), "guard hook"),
        ),
        ("SessionStart", "hook context", hook(None, "hook context")),
        (
            "UserPromptSubmit",
            "hook context",
            hook(None, "hook context"),
        ),
        ("Stop", "hook stop", hook(None, "hook stop")),
    ]
}

pub fn plan(scope: &Scope, wiring: &Wiring) -> Plan {
    let path = match scope {
        Scope::Project(root) => root.join(".codex/config.toml"),
        Scope::User(h) => home(h).join("config.toml"),
    };
    let server: Vec<(&'static str, toml_edit::Value)> = match &wiring.remote_mcp {
        Some(url) => vec![
            ("url", url.as_str().into()),
            ("bearer_token_env_var", TOKEN_ENV.into()),
        ],
        None => vec![
            ("command", wiring.bridge().into()),
            ("args", strings(&wiring.bridge_args())),
        ],
    };
    let hooks = hooks(wiring);
    let name = path.display().to_string();
    let install = {
        let name = name.clone();
        let hooks: Vec<(&str, &str, Hook)> = hooks
            .iter()
            .map(|(e, k, h)| {
                (
                    *e,
                    *k,
                    Hook {
                        matcher: h.matcher,
                        command: h.command.clone(),
                        timeout: h.timeout,
                    },
                )
            })
            .collect();
        move |text: &str| {
            let mut doc = Doc::parse(text, &name)?;
            doc.set_server(&server, &name)?;
            for (event, kind, hook) in &hooks {
                doc.put_hook(event, hook, &mark(kind, H), &name)?;
            }
            Ok(doc.text())
        }
    };
    let remove = move |text: &str| {
        let mut doc = Doc::parse(text, &name)?;
        doc.remove_server();
        for (event, kind, _) in &hooks {
            doc.remove_hook(event, &mark(kind, H));
        }
        Ok(doc.text())
    };
    let mut notes = vec![
        "Codex runs a hook only once you have reviewed and trusted it (/hooks), and reads a project's .codex/config.toml only in a trusted project".to_string(),
        "the guard sees apply_patch; files written by shell commands are not guarded (`baton guard install git` catches them at commit)".into(),
    ];
    if matches!(scope, Scope::User(_)) {
        notes.push("CODEX_HOME, when set, says where the user-level config.toml is".into());
    }
    Plan {
        edits: vec![Edit {
            path,
            what: "[mcp_servers.baton]; hooks PreToolUse (guard), SessionStart and UserPromptSubmit (context), Stop".into(),
            install: Box::new(install),
            remove: Box::new(remove),
        }],
        notes,
    }
}
