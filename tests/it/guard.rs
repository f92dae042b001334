//! `baton guard`: a commit or a Claude Code edit that touches a file another agent holds
//! is refused with who holds it and how to claim it; the holder itself passes; a guard
//! lets work through when batond is down, unless BATON_GUARD_STRICT=1.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::json;

use crate::common::Daemon;

/// A git repository with one committed file, and a daemon whose workspace it is.
struct Repo {
    dir: tempfile::TempDir,
    daemon: Daemon,
}

fn git(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    out
}

impl Repo {
    fn new() -> Repo {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert!(git(root, &["init", "-q", "-b", "main"]).status.success());
        for (k, v) in [("user.name", "Test"), ("user.email", "t@example.com")] {
            assert!(git(root, &["config", k, v]).status.success());
        }
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.rs"), "// a\n").unwrap();
        std::fs::write(root.join("README"), "r\n").unwrap();
        assert!(git(root, &["add", "."]).status.success());
        assert!(git(root, &["commit", "-q", "-m", "first"]).status.success());
        let workspace = root.to_str().unwrap().to_string();
        let daemon = Daemon::start_with(&["--workspace", &workspace]);
        Repo { dir, daemon }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn baton(&self, agent: &str) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_baton"));
        cmd.current_dir(self.root())
            .env("BATON_SOCKET_PATH", self.daemon.socket_path())
            .env("BATON_AGENT", agent)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env_remove("BATON_URL")
            .env_remove("BATON_GUARD_STRICT");
        cmd
    }

    fn hold(&self, key: &str, owner: &str) {
        let mut client = self.daemon.client();
        let lease = client.result(
            "AcquireResourceLock",
            json!({"resource_key": key, "owner": owner, "ttl_secs": 600}),
        );
        assert_eq!(lease["status"], "acquired", "{lease}");
    }

    /// Changes `file`, stages it and commits as `agent`, with `env` set; git's output.
    fn commit(&self, file: &str, agent: &str, env: &[(&str, &str)]) -> Output {
        std::fs::write(self.root().join(file), format!("changed by {agent}\n")).unwrap();
        assert!(git(self.root(), &["add", file]).status.success());
        let mut cmd = Command::new("git");
        cmd.arg("-C")
            .arg(self.root())
            .args(["commit", "-q", "-m", "change"])
            .env("BATON_SOCKET_PATH", self.daemon.socket_path())
            .env("BATON_AGENT", agent)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env_remove("BATON_GUARD_STRICT");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn check_refuses_what_another_holds_directly_or_through_a_folder() {
    let repo = Repo::new();
    repo.hold("file:src/a.rs", "alice");
    repo.hold("dir:docs", "carol");
    let out = repo
        .baton("bob")
        .args(["guard", "check", "src/a.rs", "docs/guide.md", "README"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    let text = stderr(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "one line per refused path: {text}");
    assert!(
        lines[0].contains("src/a.rs: held by alice since "),
        "{text}"
    );
    assert!(lines[0].contains(" until "), "{text}");
    assert!(
        lines[0].contains("baton lock acquire file:src/a.rs --owner bob"),
        "{text}"
    );
    assert!(
        lines[1].contains("docs/guide.md: held by carol through dir:docs"),
        "{text}"
    );
    // The holder itself passes, and so does a free file.
    let mine = repo
        .baton("alice")
        .args(["guard", "check", "src/a.rs", "README"])
        .output()
        .unwrap();
    assert_eq!(mine.status.code(), Some(0), "{}", stderr(&mine));
}

#[test]
fn a_commit_touching_a_held_file_is_refused_until_its_author_holds_it() {
    let repo = Repo::new();
    // An existing hook is kept and still runs.
    let hooks = repo.root().join(".git/hooks");
    std::fs::write(hooks.join("pre-commit"), "#!/bin/sh\necho mine-ran >&2\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        hooks.join("pre-commit"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let install = repo
        .baton("bob")
        .args(["guard", "install", "git"])
        .output()
        .unwrap();
    assert!(install.status.success(), "{}", stderr(&install));
    repo.hold("file:src/a.rs", "alice");
    let refused = repo.commit("src/a.rs", "bob", &[]);
    assert!(!refused.status.success(), "the commit must be refused");
    let text = stderr(&refused);
    assert!(
        text.contains("mine-ran"),
        "the kept hook runs first: {text}"
    );
    assert!(text.contains("src/a.rs: held by alice"), "{text}");
    // Alice, who holds it, commits.
    let allowed = repo.commit("src/a.rs", "alice", &[]);
    assert!(allowed.status.success(), "{}", stderr(&allowed));
    // Uninstalling puts the kept hook back.
    let removed = repo
        .baton("bob")
        .args(["guard", "uninstall", "git"])
        .output()
        .unwrap();
    assert!(removed.status.success(), "{}", stderr(&removed));
    let hook = std::fs::read_to_string(hooks.join("pre-commit")).unwrap();
    assert_eq!(hook, "#!/bin/sh\necho mine-ran >&2\n");
}

#[test]
fn with_batond_down_a_commit_passes_with_a_warning_unless_strict() {
    let mut repo = Repo::new();
    let install = repo
        .baton("bob")
        .args(["guard", "install", "git"])
        .output()
        .unwrap();
    assert!(install.status.success(), "{}", stderr(&install));
    repo.daemon.sigterm();
    let passed = repo.commit("src/a.rs", "bob", &[]);
    assert!(passed.status.success(), "{}", stderr(&passed));
    assert!(
        stderr(&passed).contains("letting the change through"),
        "{}",
        stderr(&passed)
    );
    let refused = repo.commit("README", "bob", &[("BATON_GUARD_STRICT", "1")]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("BATON_GUARD_STRICT=1 refuses"),
        "{}",
        stderr(&refused)
    );
}

/// Runs the Claude Code hook on `input`; its exit code and stderr.
fn hook(repo: &Repo, agent: &str, input: &serde_json::Value) -> (Option<i32>, String) {
    let mut child = repo
        .baton(agent)
        .args(["guard", "hook", "claude-code"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code(), stderr(&out))
}

/// PreToolUse inputs as Claude Code sends them, one per file-writing tool.
fn recorded(root: &Path, file: &str) -> Vec<serde_json::Value> {
    let abs: PathBuf = root.join(file);
    let common = |tool: &str, input: serde_json::Value| {
        json!({
            "session_id": "3b1f", "transcript_path": "/tmp/t.jsonl",
            "cwd": root, "permission_mode": "default",
            "hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": input,
        })
    };
    vec![
        common(
            "Edit",
            json!({"file_path": abs, "old_string": "a", "new_string": "b"}),
        ),
        common("Write", json!({"file_path": file, "content": "x"})),
        common(
            "MultiEdit",
            json!({"file_path": abs, "edits": [{"old_string": "a", "new_string": "b"}]}),
        ),
        common(
            "NotebookEdit",
            json!({"notebook_path": abs, "new_source": "print(1)"}),
        ),
    ]
}

#[test]
fn the_claude_code_hook_blocks_writes_to_held_files_only() {
    let repo = Repo::new();
    repo.hold("file:src/a.rs", "alice");
    for input in recorded(repo.root(), "src/a.rs") {
        let (code, text) = hook(&repo, "bob", &input);
        assert_eq!(code, Some(2), "{}: {text}", input["tool_name"]);
        assert!(text.contains("held by alice"), "{text}");
        assert!(text.contains("baton lock acquire file:src/a.rs"), "{text}");
        // The holder's own tool calls go through.
        let (code, text) = hook(&repo, "alice", &input);
        assert_eq!(code, Some(0), "{text}");
    }
    for input in recorded(repo.root(), "README") {
        assert_eq!(hook(&repo, "bob", &input).0, Some(0));
    }
    let read = json!({"hook_event_name": "PreToolUse", "tool_name": "Read",
        "cwd": repo.root(), "tool_input": {"file_path": repo.root().join("src/a.rs")}});
    assert_eq!(
        hook(&repo, "bob", &read).0,
        Some(0),
        "reading is not guarded"
    );
}

#[test]
fn install_claude_code_keeps_the_settings_it_finds_and_is_removable() {
    let repo = Repo::new();
    let settings = repo.root().join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    let before = r#"{
  "permissions": {"allow": ["Bash(ls)"]},
  "hooks": {"PostToolUse": [{"matcher": "Write", "hooks": [{"type": "command", "command": "fmt"}]}]},
  "model": "x"
}"#;
    std::fs::write(&settings, before).unwrap();
    for _ in 0..2 {
        let out = repo
            .baton("bob")
            .args(["guard", "install", "claude-code"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let text = std::fs::read_to_string(&settings).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let groups = value["hooks"]["PreToolUse"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "installed once: {text}");
    assert_eq!(groups[0]["matcher"], "Edit|Write|MultiEdit|NotebookEdit");
    assert!(groups[0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .ends_with("guard hook claude-code"));
    assert_eq!(
        value["hooks"]["PostToolUse"][0]["hooks"][0]["command"],
        "fmt"
    );
    assert_eq!(value["permissions"]["allow"][0], "Bash(ls)");
    // Members keep their order.
    let order: Vec<usize> = ["\"permissions\"", "\"hooks\"", "\"model\""]
        .iter()
        .map(|k| text.find(k).unwrap())
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
    let out = repo
        .baton("bob")
        .args(["guard", "uninstall", "claude-code"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(value["hooks"]["PreToolUse"], json!([]));
    assert_eq!(value["model"], "x");
}
