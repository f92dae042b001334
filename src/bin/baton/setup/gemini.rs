//! Gemini CLI. The MCP server and the hooks both go in `.gemini/settings.json` (`--user`:
//! `~/.gemini/settings.json`):
//! - `mcpServers.baton`, https://geminicli.com/docs/tools/mcp-server: `command` and `args`,
//!   or for a remote batond `httpUrl` (streamable HTTP) with `headers`; settings strings may
//!   name environment variables (`${VAR}`), https://geminicli.com/docs/reference/configuration.
//! - `hooks`, https://geminicli.com/docs/hooks/reference: BeforeTool on write_file|replace
//!   (the guard), SessionStart and BeforeAgent (the context hook), AfterAgent (the stop
//!   hook: its `deny` makes the model go on). Timeouts are in milliseconds.

use serde_json::Value;

use super::json::{has_command, Doc, J};
use super::{mark, Edit, Plan, Scope, Wiring, HOOK_TIMEOUT_SECS, TOKEN_ENV};
use crate::cli::Harness;
use crate::guard::tools;

const H: Harness = Harness::Gemini;

fn hooks(wiring: &Wiring) -> Vec<(&'static str, &'static str, J)> {
    let group = |kind: &str, name: &'static str, matcher: Option<&'static str>| {
        let handler = J::Obj(vec![
            ("name", name.into()),
            ("type", "command".into()),
            ("command", wiring.hook(kind, H).into()),
            ("timeout", J::Num(HOOK_TIMEOUT_SECS * 1000)),
        ]);
        let mut members = Vec::new();
        if let Some(m) = matcher {
            members.push(("matcher", m.into()));
        }
        members.push(("hooks", J::Arr(vec![handler])));
        J::Obj(members)
    };
    vec![
        (
            "BeforeTool",
            "guard hook",
            group("guard hook", "baton-guard", Some(tools::matcher(H))),
        ),
        (
            "SessionStart",
            "hook context",
            group("hook context", "baton-context", None),
        ),
        (
            "BeforeAgent",
            "hook context",
            group("hook context", "baton-context", None),
        ),
        (
            "AfterAgent",
            "hook stop",
            group("hook stop", "baton-stop", None),
        ),
    ]
}

pub fn plan(scope: &Scope, wiring: &Wiring) -> Plan {
    let path = match scope {
        Scope::Project(root) => root.join(".gemini/settings.json"),
        Scope::User(home) => home.join(".gemini/settings.json"),
    };
    let server = match &wiring.remote_mcp {
        Some(url) => J::Obj(vec![
            ("httpUrl", url.clone().into()),
            (
                "headers",
                J::Obj(vec![(
                    "Authorization",
                    format!("Bearer ${{{TOKEN_ENV}}}").into(),
                )]),
            ),
        ]),
        None => J::Obj(vec![
            ("command", wiring.bridge().into()),
            (
                "args",
                J::Arr(wiring.bridge_args().into_iter().map(J::from).collect()),
            ),
        ]),
    };
    let name = path.display().to_string();
    let name2 = name.clone();
    let hooks = hooks(wiring);
    let hooks_out: Vec<(&str, &str)> = hooks.iter().map(|(e, k, _)| (*e, *k)).collect();
    Plan {
        edits: vec![Edit {
            path,
            what: "mcpServers.baton; hooks BeforeTool (guard), SessionStart and BeforeAgent (context), AfterAgent (stop)".into(),
            install: Box::new(move |text| {
                let doc = Doc::parse(text, &name)?;
                doc.set(&["mcpServers"], "baton", &server, &name)?;
                for (event, kind, group) in &hooks {
                    let needle = mark(kind, H);
                    doc.put_entry(&["hooks", event], group, &|v: &Value| has_command(v, &needle), &name)?;
                }
                Ok(doc.text())
            }),
            remove: Box::new(move |text| {
                let doc = Doc::parse(text, &name2)?;
                doc.remove_member(&["mcpServers"], "baton");
                for (event, kind) in &hooks_out {
                    let needle = mark(kind, H);
                    doc.remove_entries(&["hooks", event], &|v: &Value| has_command(v, &needle));
                }
                Ok(doc.text())
            }),
        }],
        notes: vec![
            "Gemini CLI fingerprints project hooks and asks before running new or changed ones".into(),
            "the guard sees write_file and replace; files written by shell commands are not guarded (`baton guard install git` catches them at commit)".into(),
        ],
    }
}
