//! `baton setup`: into a temporary home and a temporary git project that already hold
//! settings of their own, as a person's would. `--dry-run` changes nothing and shows a
//! diff, setup keeps what was there (comments and order included), a second run changes
//! nothing, `--uninstall` gives back every file byte for byte and removes what setup
//! created; a remote batond gets the `/mcp` URL with the token's variable, never the token.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// A home folder and a git project in it.
struct Desk {
    dir: tempfile::TempDir,
}

const CLAUDE_SETTINGS: &str = "{\n  // my rules\n  \"permissions\": {\"allow\": [\"Bash(ls)\"]},\n  \"hooks\": {\n    \"PostToolUse\": [{\"matcher\": \"Write\", \"hooks\": [{\"type\": \"command\", \"command\": \"fmt\"}]}]\n  },\n  \"model\": \"x\"\n}\n";
const MCP_JSON: &str =
    "{\n    \"mcpServers\": {\n        \"other\": {\"command\": \"other-server\"}\n    }\n}\n";
const CODEX_TOML: &str = "# my Codex\nmodel = \"gpt-5-codex\"\n\n[mcp_servers.other]\ncommand = \"other-server\" # keep me\n\n[[hooks.Stop]]\n[[hooks.Stop.hooks]]\ntype = \"command\"\ncommand = \"notify-me\"\n";
const CURSOR_HOOKS: &str = "{\n\t\"version\": 1,\n\t\"hooks\": {\n\t\t\"afterFileEdit\": [{\"command\": \"./format.sh\"}]\n\t}\n}\n";
const GEMINI_SETTINGS: &str = "{\n  \"theme\": \"GitHub\",\n  \"mcpServers\": {}\n}";

impl Desk {
    fn new() -> Desk {
        let desk = Desk {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(desk.home()).unwrap();
        std::fs::create_dir_all(desk.project()).unwrap();
        let init = Command::new("git")
            .args(["init", "-q"])
            .current_dir(desk.project())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(init.status.success());
        desk
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn project(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    /// Writes `files` (relative to `base`).
    fn write(base: &Path, files: &[(&str, &str)]) {
        for (name, text) in files {
            let path = base.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    /// Every file under the home and the project (but .git), with its bytes.
    fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.file_name().is_some_and(|n| n == ".git") {
                    continue;
                }
                if path.is_dir() {
                    out.insert(path.clone(), Vec::new());
                    walk(&path, out);
                } else {
                    out.insert(path.clone(), std::fs::read(&path).unwrap());
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(&self.project(), &mut out);
        walk(&self.home(), &mut out);
        // Setup's records of what it changed are its own business.
        out.retain(|p, _| !p.starts_with(self.home().join(".local")));
        out
    }

    fn baton(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_baton"));
        cmd.args(args)
            .current_dir(self.project())
            .env("HOME", self.home())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env_remove("XDG_STATE_HOME")
            .env_remove("CODEX_HOME")
            .env_remove("BATON_URL")
            .env_remove("BATON_TOKEN")
            .env_remove("BATON_AGENT")
            .env_remove("BATON_SOCKET_PATH")
            .env_remove("BATON_HOME")
            .env_remove("BATON_HTTP_LISTEN");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    fn ok(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let out = self.baton(args, env);
        assert!(
            out.status.success(),
            "baton {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

const ALL: [&str; 4] = ["claude-code", "codex", "cursor", "gemini"];

/// Whether every one of `parts` is in `text`, each after the one before.
fn in_order<'a>(text: &str, parts: impl Iterator<Item = &'a str>) -> bool {
    let mut at = 0;
    for part in parts {
        match text[at..].find(part) {
            Some(i) => at += i + part.len(),
            None => return false,
        }
    }
    true
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// JSON with comments, read as JSON.
fn json(text: &str) -> Value {
    let plain: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    serde_json::from_str(&plain).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn commands(value: &Value) -> Vec<String> {
    let mut found = Vec::new();
    match value {
        Value::Object(members) => {
            for (k, v) in members {
                match (k.as_str(), v.as_str()) {
                    ("command", Some(c)) => found.push(c.to_string()),
                    _ => found.extend(commands(v)),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| found.extend(commands(v))),
        _ => {}
    }
    found
}

#[test]
fn project_setup_keeps_what_is_there_runs_once_and_uninstalls_byte_for_byte() {
    let desk = Desk::new();
    Desk::write(
        &desk.project(),
        &[
            (".claude/settings.json", CLAUDE_SETTINGS),
            (".mcp.json", MCP_JSON),
            (".codex/config.toml", CODEX_TOML),
            (".cursor/hooks.json", CURSOR_HOOKS),
            (".gemini/settings.json", GEMINI_SETTINGS),
        ],
    );
    let before = desk.snapshot();
    let mut args = vec!["setup"];
    args.extend(ALL);
    args.extend(["--agent", "bob"]);

    // A dry run shows the diff and changes nothing.
    let mut dry = args.clone();
    dry.push("--dry-run");
    let out = desk.ok(&dry, &[]);
    let diff = String::from_utf8_lossy(&out.stdout);
    assert!(diff.contains("+++ b") && diff.contains("@@"), "{diff}");
    assert!(diff.contains("+      \"command\": "), "{diff}");
    assert!(
        diff.contains("--- /dev/null"),
        "new files show as created: {diff}"
    );
    assert_eq!(desk.snapshot(), before, "--dry-run changed nothing");

    let out = desk.ok(&args, &[]);
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(
        report.contains("Cursor has no hook that adds context before each prompt"),
        "{report}"
    );
    let p = desk.project();

    // Claude Code: what was there stays, in its order, comment included.
    let settings = read(p.join(".claude/settings.json"));
    assert!(
        settings.starts_with("{\n  // my rules\n  \"permissions\": {\"allow\": [\"Bash(ls)\"]},"),
        "{settings}"
    );
    assert!(settings.contains("\"command\": \"fmt\"}]}]"), "{settings}");
    let value = json(&settings);
    assert_eq!(value["model"], "x");
    assert_eq!(
        value["hooks"]["PreToolUse"][0]["matcher"],
        "Edit|Write|MultiEdit|NotebookEdit"
    );
    let claude = commands(&value["hooks"]);
    for want in [
        "guard hook claude-code --agent bob",
        "hook context claude-code --agent bob",
        "hook stop claude-code --agent bob",
    ] {
        assert!(
            claude.iter().any(|c| c.ends_with(want)),
            "{want}: {claude:?}"
        );
    }
    assert!(
        value["hooks"]["SessionStart"].is_array() && value["hooks"]["UserPromptSubmit"].is_array()
    );
    let mcp = json(&read(p.join(".mcp.json")));
    assert_eq!(mcp["mcpServers"]["other"]["command"], "other-server");
    assert!(mcp["mcpServers"]["baton"]["command"]
        .as_str()
        .unwrap()
        .ends_with("mcp-bridge"));
    assert_eq!(
        mcp["mcpServers"]["baton"]["args"],
        serde_json::json!(["--tools", "all", "--agent", "bob"])
    );

    // Codex: every line as written and in its order (toml_edit puts Baton's tables beside
    // their kin: [mcp_servers.baton] after [mcp_servers.other], its Stop group after yours).
    let codex = read(p.join(".codex/config.toml"));
    assert!(in_order(&codex, CODEX_TOML.lines()), "{codex}");
    assert!(codex.contains("[mcp_servers.baton]\ncommand = "), "{codex}");
    assert!(
        codex.contains("[[hooks.PreToolUse]]\nmatcher = \"apply_patch|Edit|Write\""),
        "{codex}"
    );
    for want in [
        "guard hook codex --agent bob",
        "hook context codex --agent bob",
        "hook stop codex --agent bob",
    ] {
        assert!(codex.contains(want), "{want}: {codex}");
    }
    assert!(
        codex.contains("[[hooks.UserPromptSubmit]]") && codex.contains("[[hooks.SessionStart]]")
    );

    // Cursor: tabs kept, its own hook kept.
    let hooks = read(p.join(".cursor/hooks.json"));
    assert!(hooks.starts_with("{\n\t\"version\": 1,\n\t\"hooks\": {\n\t\t\"afterFileEdit\": [{\"command\": \"./format.sh\"}],"), "{hooks}");
    let value = json(&hooks);
    assert_eq!(value["hooks"]["preToolUse"][0]["matcher"], "Write|Delete");
    assert!(value["hooks"]["sessionStart"][0]["command"]
        .as_str()
        .unwrap()
        .ends_with("hook context cursor --agent bob"));
    assert!(value["hooks"]["stop"][0]["command"]
        .as_str()
        .unwrap()
        .ends_with("hook stop cursor --agent bob"));
    let cursor_mcp = json(&read(p.join(".cursor/mcp.json")));
    assert!(cursor_mcp["mcpServers"]["baton"]["command"].is_string());

    // Gemini CLI.
    let gemini = json(&read(p.join(".gemini/settings.json")));
    assert_eq!(gemini["theme"], "GitHub");
    assert_eq!(
        gemini["hooks"]["BeforeTool"][0]["matcher"],
        "write_file|replace"
    );
    assert_eq!(
        gemini["hooks"]["AfterAgent"][0]["hooks"][0]["timeout"],
        10000
    );
    assert!(gemini["hooks"]["BeforeAgent"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .ends_with("hook context gemini --agent bob"));
    assert!(gemini["mcpServers"]["baton"]["args"].is_array());

    // A second run changes nothing.
    let once = desk.snapshot();
    let out = desk.ok(&args, &[]);
    assert_eq!(
        desk.snapshot(),
        once,
        "setup twice changes nothing the second time"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("already set up"));

    // Uninstall: each file as it was, byte for byte; what setup created is gone.
    let mut undo = vec!["setup", "--uninstall"];
    undo.extend(ALL);
    let mut dry_undo = undo.clone();
    dry_undo.push("--dry-run");
    let out = desk.ok(&dry_undo, &[]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("+++ /dev/null"));
    assert_eq!(
        desk.snapshot(),
        once,
        "--uninstall --dry-run changed nothing"
    );
    desk.ok(&undo, &[]);
    assert_eq!(desk.snapshot(), before, "--uninstall restored every byte");
}

#[test]
fn user_setup_writes_the_users_files_and_an_edited_file_keeps_its_edits_at_uninstall() {
    let desk = Desk::new();
    Desk::write(
        &desk.home(),
        &[(".claude.json", "{\"numStartups\": 3, \"projects\": {}}\n")],
    );
    let before = desk.snapshot();
    desk.ok(
        &[
            "setup",
            "claude-code",
            "codex",
            "cursor",
            "gemini",
            "--user",
            "--agent",
            "ann",
        ],
        &[],
    );
    let h = desk.home();
    let claude_json = read(h.join(".claude.json"));
    assert!(
        in_order(
            &claude_json,
            ["\"numStartups\": 3", "\"projects\": {}", "\"mcpServers\""].into_iter()
        ),
        "{claude_json}"
    );
    assert!(json(&claude_json)["mcpServers"]["baton"]["args"]
        .to_string()
        .contains("ann"));
    for file in [
        ".claude/settings.json",
        ".codex/config.toml",
        ".cursor/mcp.json",
        ".cursor/hooks.json",
        ".gemini/settings.json",
    ] {
        assert!(h.join(file).is_file(), "{file}");
    }
    assert!(
        !desk.project().join(".claude").exists(),
        "the project is left alone"
    );
    // The person edits a file setup wrote; uninstall keeps that edit.
    let settings = h.join(".gemini/settings.json");
    let edited = read(settings.clone()).replacen("{", "{\n  \"theme\": \"Dracula\",", 1);
    std::fs::write(&settings, &edited).unwrap();
    let out = desk.ok(
        &[
            "setup",
            "--uninstall",
            "--user",
            "claude-code",
            "codex",
            "cursor",
            "gemini",
        ],
        &[],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("changed since setup"));
    let left = json(&read(settings.clone()));
    assert_eq!(left["theme"], "Dracula");
    assert!(
        left.get("mcpServers").is_none() && left.get("hooks").is_none(),
        "{left}"
    );
    std::fs::remove_dir_all(h.join(".gemini")).unwrap();
    assert_eq!(desk.snapshot(), before, "everything else as it was");
}

#[test]
fn setup_finds_the_installed_harnesses_by_their_config_folders() {
    let desk = Desk::new();
    std::fs::create_dir_all(desk.home().join(".gemini")).unwrap();
    // A PATH with git alone: no harness program on it.
    let bin = desk.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let git = ["/usr/bin/git", "/usr/local/bin/git", "/bin/git"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("git is installed");
    std::os::unix::fs::symlink(git, bin.join("git")).unwrap();
    let path = bin.display().to_string();
    let out = desk.ok(&["setup", "--agent", "bob"], &[("PATH", &path)]);
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(
        report.contains("Gemini CLI:") && !report.contains("Claude Code:"),
        "{report}"
    );
    assert!(desk.project().join(".gemini/settings.json").is_file());
    assert!(!desk.project().join(".claude").exists());
    std::fs::remove_dir_all(desk.home().join(".gemini")).unwrap();
    let out = desk.baton(&["setup"], &[("PATH", &path)]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("name the ones to set up"));
}

#[test]
fn a_remote_batond_gets_the_mcp_url_with_the_tokens_variable_never_the_token() {
    let desk = Desk::new();
    let secret = "bt_remote_secret_0123456789";
    let env = [
        ("BATON_URL", "tls://baton.example.com:7443"),
        ("BATON_HTTP_LISTEN", "0.0.0.0:8443"),
        ("BATON_TOKEN", secret),
    ];
    let out = desk.ok(
        &[
            "setup",
            "claude-code",
            "codex",
            "cursor",
            "gemini",
            "--agent",
            "bob",
        ],
        &env,
    );
    let p = desk.project();
    let url = "https://baton.example.com:8443/mcp?tools=all&agent=bob";
    let claude = json(&read(p.join(".mcp.json")));
    assert_eq!(claude["mcpServers"]["baton"]["type"], "http");
    assert_eq!(claude["mcpServers"]["baton"]["url"], url);
    assert_eq!(
        claude["mcpServers"]["baton"]["headers"]["Authorization"],
        "Bearer ${BATON_TOKEN}"
    );
    let codex = read(p.join(".codex/config.toml"));
    assert!(
        codex.contains(&format!(
            "url = \"{url}\"\nbearer_token_env_var = \"BATON_TOKEN\""
        )),
        "{codex}"
    );
    let cursor = json(&read(p.join(".cursor/mcp.json")));
    assert_eq!(
        cursor["mcpServers"]["baton"]["headers"]["Authorization"],
        "Bearer ${env:BATON_TOKEN}"
    );
    let gemini = json(&read(p.join(".gemini/settings.json")));
    assert_eq!(gemini["mcpServers"]["baton"]["httpUrl"], url);
    // The hooks reach the same batond; the token stays in the environment.
    assert!(
        codex.contains("--url tls://baton.example.com:7443 hook stop codex --agent bob"),
        "{codex}"
    );
    for (file, bytes) in desk.snapshot() {
        assert!(
            !String::from_utf8_lossy(&bytes).contains(secret),
            "{} holds the token",
            file.display()
        );
    }
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!said.contains(secret));
    assert!(said.contains("$BATON_TOKEN"), "{said}");
    // Without the port, the HTTP listener's default.
    let desk = Desk::new();
    desk.ok(
        &["setup", "claude-code"],
        &[("BATON_URL", "tls://10.1.2.3:7443")],
    );
    let claude = json(&read(desk.project().join(".mcp.json")));
    assert_eq!(
        claude["mcpServers"]["baton"]["url"],
        "https://10.1.2.3:7421/mcp?tools=all"
    );
    // A loopback TCP batond is local: mcp-bridge, told where.
    let desk = Desk::new();
    desk.ok(
        &["setup", "claude-code"],
        &[("BATON_URL", "tcp://127.0.0.1:7420")],
    );
    let claude = json(&read(desk.project().join(".mcp.json")));
    assert_eq!(
        claude["mcpServers"]["baton"]["args"],
        serde_json::json!(["--tools", "all", "--url", "tcp://127.0.0.1:7420"])
    );
}

#[test]
fn bad_input_is_refused_with_what_to_do_and_nothing_written() {
    let desk = Desk::new();
    Desk::write(
        &desk.project(),
        &[(".gemini/settings.json", "{\"theme\": ")],
    );
    let before = desk.snapshot();
    let out = desk.baton(&["setup", "gemini"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not valid JSON"),
        "{out:?}"
    );
    let out = desk.baton(&["setup", "claude-code", "--agent", "bob smith"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--agent"),
        "{out:?}"
    );
    let out = desk.baton(&["setup", "claude-code"], &[("GIT_DIR", "/nonexistent")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not in a git repository"),
        "{out:?}"
    );
    assert_eq!(desk.snapshot(), before);
}
