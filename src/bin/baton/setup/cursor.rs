//! Cursor. The MCP server goes in `.cursor/mcp.json` (`--user`: `~/.cursor/mcp.json`),
//! https://cursor.com/docs/context/mcp (`${env:NAME}` is read from the environment in a
//! server's `headers`). The hooks go in `.cursor/hooks.json` (`--user`:
//! `~/.cursor/hooks.json`), https://cursor.com/docs/agent/hooks (`{"version": 1, "hooks":
//! {EVENT: [{"command", "matcher"?}]}}`): preToolUse on Write|Delete (the guard),
//! sessionStart (the context hook), stop (the stop hook). Cursor has no hook that adds
//! context before each prompt (`beforeSubmitPrompt` can only let a prompt through or not),
//! so its context comes at session start only.

use serde_json::Value;

use super::json::{has_command, Doc, J};
use super::{mark, Edit, Plan, Scope, Wiring, TOKEN_ENV};
use crate::cli::Harness;
use crate::guard::tools;

const H: Harness = Harness::Cursor;

fn hooks(wiring: &Wiring) -> Vec<(&'static str, &'static str, J)> {
    let entry = |kind: &str, matcher: Option<&'static str>| {
        let mut members = vec![("command", J::from(wiring.hook(kind, H)))];
        if let Some(m) = matcher {
            members.push(("matcher", m.into()));
        }
        J::Obj(members)
    };
    vec![
        (
            "preToolUse",
            "guard hook",
            entry("guard hook", Some(tools::matcher(H))),
        ),
        ("sessionStart", "hook context", entry("hook context", None)),
        ("stop", "hook stop", entry("hook stop", None)),
    ]
}

pub fn plan(scope: &Scope, wiring: &Wiring) -> Plan {
    let dir = match scope {
        Scope::Project(root) => root.join(".cursor"),
        Scope::User(home) => home.join(".cursor"),
    };
    let server = match &wiring.remote_mcp {
        Some(url) => J::Obj(vec![
            ("url", url.clone().into()),
            (
                "headers",
                J::Obj(vec![(
                    "Authorization",
                    format!("Bearer ${{env:{TOKEN_ENV}}}").into(),
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
    let mcp = dir.join("mcp.json");
    let mcp_name = mcp.display().to_string();
    let mcp_name2 = mcp_name.clone();
    let mcp_edit = Edit {
        path: mcp,
        what: "the MCP server `baton` (mcpServers)".into(),
        install: Box::new(move |text| {
            let doc = Doc::parse(text, &mcp_name)?;
            doc.set(&["mcpServers"], "baton", &server, &mcp_name)?;
            Ok(doc.text())
        }),
        remove: Box::new(move |text| {
            let doc = Doc::parse(text, &mcp_name2)?;
            doc.remove_member(&["mcpServers"], "baton");
            Ok(doc.text())
        }),
    };
    let hooks_path = dir.join("hooks.json");
    let name = hooks_path.display().to_string();
    let name2 = name.clone();
    let hooks = hooks(wiring);
    let hooks_out: Vec<(&str, &str)> = hooks.iter().map(|(e, k, _)| (*e, *k)).collect();
    let hooks_edit = Edit {
        path: hooks_path,
        what: "hooks preToolUse (guard), sessionStart (context), stop".into(),
        install: Box::new(move |text| {
            let doc = Doc::parse(text, &name)?;
            if doc.top_member("version").is_none() {
                doc.set(&[], "version", &J::Num(1), &name)?;
            }
            for (event, kind, entry) in &hooks {
                let needle = mark(kind, H);
                doc.put_entry(
                    &["hooks", event],
                    entry,
                    &|v: &Value| has_command(v, &needle),
                    &name,
                )?;
            }
            Ok(doc.text())
        }),
        remove: Box::new(move |text| {
            let doc = Doc::parse(text, &name2)?;
            for (event, kind) in &hooks_out {
                let needle = mark(kind, H);
                doc.remove_entries(&["hooks", event], &|v: &Value| has_command(v, &needle));
            }
            Ok(doc.text())
        }),
    };
    Plan {
        edits: vec![mcp_edit, hooks_edit],
        notes: vec![
            "Cursor has no hook that adds context before each prompt (beforeSubmitPrompt can only let a prompt through); the context hook runs at session start only".into(),
            "the guard sees Write and Delete; files written by shell commands are not guarded (`baton guard install git` catches them at commit)".into(),
        ],
    }
}
