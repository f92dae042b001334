//! Which tool calls write files, per harness, and where their input names the files (the
//! paths made absolute against the call's working directory, as batond names them):
//! - Claude Code (https://code.claude.com/docs/en/hooks, "PreToolUse"): Edit, Write and
//!   MultiEdit name `tool_input.file_path`, NotebookEdit `tool_input.notebook_path`.
//! - Codex CLI (https://developers.openai.com/codex/hooks, "PreToolUse"): `apply_patch`
//!   carries the patch in `tool_input.command`; each `*** Add File:`, `*** Update File:`,
//!   `*** Delete File:` and `*** Move to:` line names a file.
//! - Cursor (https://cursor.com/docs/agent/hooks, "preToolUse"): Write and Delete name
//!   `tool_input.file_path`.
//! - Gemini CLI (https://geminicli.com/docs/tools/file-system): `write_file` and `replace`
//!   name `tool_input.file_path`.
//!
//! Shell commands that write files are not seen here; the git guard catches them at commit.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::absolute;
use crate::cli::Harness;

/// The tool names each harness's guard is installed for (its hook matcher).
pub fn matcher(harness: Harness) -> &'static str {
    match harness {
        Harness::ClaudeCode => "Edit|Write|MultiEdit|NotebookEdit",
        // `Edit` and `Write` are Codex's matcher aliases of apply_patch.
        Harness::Codex => "apply_patch|Edit|Write",
        Harness::Cursor => "Write|Delete",
        Harness::Gemini => "write_file|replace",
    }
}

/// The files a tool call is about to write, absolute; empty for a call that writes none.
pub fn targets(harness: Harness, input: &Value) -> Vec<PathBuf> {
    let Some(tool) = input["tool_name"].as_str() else {
        return Vec::new();
    };
    let tool_input = &input["tool_input"];
    let field = |name: &str| tool_input[name].as_str().map(str::to_string);
    let named: Vec<String> = match (harness, tool) {
        (Harness::ClaudeCode, "Edit" | "Write" | "MultiEdit") => {
            field("file_path").into_iter().collect()
        }
        (Harness::ClaudeCode, "NotebookEdit") => field("notebook_path").into_iter().collect(),
        (Harness::Codex, "apply_patch" | "Edit" | "Write") => ["command", "input", "patch"]
            .iter()
            .find_map(|k| field(k))
            .map(|patch| patch_files(&patch))
            .unwrap_or_default(),
        (Harness::Cursor, "Write" | "Delete" | "Edit") => field("file_path")
            .or_else(|| field("path"))
            .into_iter()
            .collect(),
        (Harness::Gemini, "write_file" | "replace") => field("file_path").into_iter().collect(),
        _ => Vec::new(),
    };
    let Some(base) = base(input) else {
        return Vec::new();
    };
    named
        .iter()
        .map(|p| absolute(Path::new(p), &base))
        .collect()
}

/// The folder relative paths start from: the call's `cwd`, else (Cursor) its first
/// workspace root, else this process's.
fn base(input: &Value) -> Option<PathBuf> {
    input["cwd"]
        .as_str()
        .or_else(|| input["workspace_roots"][0].as_str())
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok())
}

/// The files an apply_patch envelope adds, updates, deletes or moves to.
fn patch_files(patch: &str) -> Vec<String> {
    const HEADERS: [&str; 4] = [
        "*** Add File: ",
        "*** Update File: ",
        "*** Delete File: ",
        "*** Move to: ",
    ];
    let mut files: Vec<String> = Vec::new();
    for line in patch.lines() {
        let line = line.trim();
        for header in HEADERS {
            if let Some(file) = line.strip_prefix(header) {
                let file = file.trim().to_string();
                if !file.is_empty() && !files.contains(&file) {
                    files.push(file);
                }
            }
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_names_every_file_it_touches() {
        let patch = "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-a\n+b\n  *** Add File: docs/new.md\n+hi\n*** Delete File: old.txt\n*** Update File: src/b.rs\n*** Move to: src/c.rs\n*** End Patch\n";
        assert_eq!(
            patch_files(patch),
            ["src/a.rs", "docs/new.md", "old.txt", "src/b.rs", "src/c.rs"]
        );
    }
}
