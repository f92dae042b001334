//! Claude Code. The MCP server goes in the project's `.mcp.json` (`--user`: the top-level
//! `mcpServers` of `~/.claude.json`), https://code.claude.com/docs/en/mcp ("MCP installation
//! scopes"; `${VAR}` is expanded in a server's `url` and `headers`). The hooks go in
//! `.claude/settings.json` (`--user`: `~/.claude/settings.json`),
//! https://code.claude.com/docs/en/hooks: PreToolUse on Edit|Write|MultiEdit|NotebookEdit
//! (the guard), SessionStart and UserPromptSubmit (the context hook), Stop (the stop hook).

use serde_json::Value;

use super::json::{has_command, Doc, J};
use super::{mark, Edit, Plan, Scope, Wiring, HOOK_TIMEOUT_SECS, TOKEN_ENV};
use crate::cli::Harness;
use crate::guard::tools;

const H: Harness = Harness::ClaudeCode;

/// The hook events and which hook each runs.
fn hooks(wiring: &Wiring) -> Vec<(&'static str, Option<&'static str>, &'static str, String)> {
    vec![
        (
            "PreToolUse",
            Some(tools::matcher(H)),
            "guard hook",
            wiring.hook("guard hook", H),
        ),
        (
            "SessionStart",
            None,
            "hook context",
            wiring.hook("hook context", H),
        ),
        (
            "UserPromptSubmit",
            None,
            "hook context",
            wiring.hook("hook context", H),
        ),
        ("Stop", None, "hook stop", wiring.hook("hook stop", H)),
    ]
}

fn group(matcher: Option<&'static str>, command: String) -> J {
    let handler = J::Obj(vec![
        ("type", "command".into()),
        ("command", command.into()),
        ("timeout", J::Num(HOOK_TIMEOUT_SECS)),
    ]);
    let mut members = Vec::new();
    if let Some(m) = matcher {
        members.push(("matcher", m.into()));
    }
    members.push(("hooks", J::Arr(vec![handler])));
    J::Obj(members)
}

pub fn server(wiring: &Wiring) -> J {
    match &wiring.remote_mcp {
        Some(url) => J::Obj(vec![
            ("type", "http".into()),
            ("url", url.clone().into()),
            (
                "headers",
                J::Obj(vec![(
                    "Authorization",
                    format!("Bearer ${{{TOKEN_ENV}}}").into(),
                )]),
            ),
        ]),
        None => J::Obj(vec![
            ("type", "stdio".into()),
            ("command", wiring.bridge().into()),
            (
                "args",
                J::Arr(wiring.bridge_args().into_iter().map(J::from).collect()),
            ),
        ]),
    }
}

pub fn plan(scope: &Scope, wiring: &Wiring) -> Plan {
    let (mcp, settings) = match scope {
        Scope::Project(root) => (root.join(".mcp.json"), root.join(".claude/settings.json")),
        Scope::User(home) => (
            home.join(".claude.json"),
            home.join(".claude/settings.json"),
        ),
    };
    let server = server(wiring);
    let mcp_name = mcp.display().to_string();
    let server_in = server.clone();
    let mcp_edit = Edit {
        path: mcp.clone(),
        what: "the MCP server `baton` (mcpServers)".into(),
        install: Box::new(move |text| {
            let doc = Doc::parse(text, &mcp_name)?;
            doc.set(&["mcpServers"], "baton", &server_in, &mcp_name)?;
            Ok(doc.text())
        }),
        remove: Box::new({
            let name = mcp.display().to_string();
            move |text| {
                let doc = Doc::parse(text, &name)?;
                doc.remove_member(&["mcpServers"], "baton");
                Ok(doc.text())
            }
        }),
    };
    let hooks = hooks(wiring);
    let name = settings.display().to_string();
    let hooks_out = hooks.clone();
    let settings_edit = Edit {
        path: settings.clone(),
        what: "hooks PreToolUse (guard), SessionStart and UserPromptSubmit (context), Stop".into(),
        install: Box::new(move |text| {
            let doc = Doc::parse(text, &name)?;
            for (event, matcher, kind, command) in &hooks {
                let needle = mark(kind, H);
                let ours = |v: &Value| has_command(v, &needle);
                doc.put_entry(
                    &["hooks", event],
                    &group(*matcher, command.clone()),
                    &ours,
                    &name,
                )?;
            }
            Ok(doc.text())
        }),
        remove: Box::new({
            let name = settings.display().to_string();
            move |text| {
                let doc = Doc::parse(text, &name)?;
                for (event, _, kind, _) in &hooks_out {
                    let needle = mark(kind, H);
                    doc.remove_entries(&["hooks", event], &|v: &Value| has_command(v, &needle));
                }
                Ok(doc.text())
            }
        }),
    };
    let mut notes = vec![
        "the guard sees Edit, Write, MultiEdit and NotebookEdit; files written by shell commands are not guarded (`baton guard install git` catches them at commit)".to_string(),
    ];
    if matches!(scope, Scope::Project(_)) {
        notes.push("Claude Code asks once before it starts the project's .mcp.json server (or list it in enabledMcpjsonServers)".into());
    }
    Plan {
        edits: vec![mcp_edit, settings_edit],
        notes,
    }
}
