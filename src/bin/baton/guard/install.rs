//! `baton guard install|uninstall git|claude-code`: puts the guard where a change is made
//! (a git pre-commit hook; Claude Code's PreToolUse hook in the project's settings), keeps
//! what was there, and takes it out again.

use std::path::{Path, PathBuf};

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::git;
use crate::cli::GuardTarget;
use crate::failure::{Failure, Outcome};

/// Marks files and settings entries this command wrote.
const MARK: &str = "baton guard";
/// Where an existing pre-commit hook goes; ours runs it first.
const CHAINED: &str = "pre-commit.before-baton";
/// The tools Claude Code writes files with.
const MATCHER: &str = "Edit|Write|MultiEdit|NotebookEdit";

fn io(what: &str, path: &Path) -> impl Fn(std::io::Error) -> Failure {
    let (what, path) = (what.to_string(), path.display().to_string());
    move |e| Failure::new(1, format!("cannot {what} {path} ({e})"))
}

/// This binary, to be called by the hooks (they may run with another PATH).
fn baton_exe() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.to_str().map(str::to_string))
        .unwrap_or_else(|| "baton".into())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

pub fn install(target: GuardTarget, dir: Option<PathBuf>) -> Outcome {
    match target {
        GuardTarget::Git => install_git(&dir.unwrap_or_else(|| ".".into())),
        GuardTarget::ClaudeCode => install_claude_code(&project(dir)?),
    }
}

pub fn uninstall(target: GuardTarget, dir: Option<PathBuf>) -> Outcome {
    match target {
        GuardTarget::Git => uninstall_git(&dir.unwrap_or_else(|| ".".into())),
        GuardTarget::ClaudeCode => uninstall_claude_code(&project(dir)?),
    }
}

fn project(dir: Option<PathBuf>) -> Result<PathBuf, Failure> {
    match dir {
        Some(dir) => Ok(dir),
        None => std::env::current_dir().map_err(|e| {
            Failure::new(
                1,
                format!("cannot read the working directory ({e}); pass --project DIR"),
            )
        }),
    }
}

/// The repository's hooks folder (honours core.hooksPath).
fn hooks_dir(repo: &Path) -> Result<PathBuf, Failure> {
    let root = PathBuf::from(git(repo, &["rev-parse", "--show-toplevel"])?.trim());
    let hooks = PathBuf::from(git(&root, &["rev-parse", "--git-path", "hooks"])?.trim());
    Ok(if hooks.is_absolute() {
        hooks
    } else {
        root.join(hooks)
    })
}

fn install_git(repo: &Path) -> Outcome {
    let hooks = hooks_dir(repo)?;
    std::fs::create_dir_all(&hooks).map_err(io("create", &hooks))?;
    let hook = hooks.join("pre-commit");
    let existing = std::fs::read_to_string(&hook).ok();
    if existing.as_deref().is_some_and(|h| h.contains(MARK)) {
        eprintln!("the guard is already installed in {}", hook.display());
        return Ok(0);
    }
    if existing.is_some() {
        let chained = hooks.join(CHAINED);
        std::fs::rename(&hook, &chained).map_err(io("move aside", &hook))?;
        eprintln!(
            "kept your pre-commit hook as {}; the guard runs it first",
            chained.display()
        );
    }
    let script = format!(
        "#!/bin/sh\n\
         # {MARK}: refuses a commit that touches a file another agent holds in Baton.\n\
         # Installed by `baton guard install git`; `baton guard uninstall git` removes it.\n\
         # The commit is yours when BATON_AGENT names the owner of your claims.\n\
         hooks=$(dirname \"$0\")\n\
         if [ -x \"$hooks/{CHAINED}\" ]; then\n    \"$hooks/{CHAINED}\" \"$@\" || exit $?\nfi\n\
         exec {} guard check --staged\n",
        shell_quote(&baton_exe())
    );
    std::fs::write(&hook, script).map_err(io("write", &hook))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755))
        .map_err(io("make executable", &hook))?;
    eprintln!("installed the guard as {}", hook.display());
    Ok(0)
}

fn uninstall_git(repo: &Path) -> Outcome {
    let hooks = hooks_dir(repo)?;
    let hook = hooks.join("pre-commit");
    match std::fs::read_to_string(&hook) {
        Ok(text) if text.contains(MARK) => {
            std::fs::remove_file(&hook).map_err(io("remove", &hook))?;
            let chained = hooks.join(CHAINED);
            if chained.exists() {
                std::fs::rename(&chained, &hook).map_err(io("restore", &chained))?;
                eprintln!("removed the guard; your own pre-commit hook is back");
            } else {
                eprintln!("removed the guard from {}", hook.display());
            }
            Ok(0)
        }
        Ok(_) => Err(Failure::new(
            2,
            format!(
                "{} is not the guard's hook; left it as it is",
                hook.display()
            ),
        )),
        Err(_) => {
            eprintln!("no guard is installed in {}", hooks.display());
            Ok(0)
        }
    }
}

/// A JSON object's members in the order written, each value exactly as written.
struct Ordered(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Ordered, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push(member);
                }
                Ok(Ordered(members))
            }
        }
        d.deserialize_map(Members)
    }
}

impl Ordered {
    fn get(&self, name: &str) -> Option<&RawValue> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| &**v)
    }

    fn set(&mut self, name: &str, value: Box<RawValue>) {
        match self.0.iter_mut().find(|(k, _)| k == name) {
            Some((_, v)) => *v = value,
            None => self.0.push((name.to_string(), value)),
        }
    }

    /// The object, one member per line.
    fn render(&self) -> String {
        if self.0.is_empty() {
            return "{}".into();
        }
        let members: Vec<String> = self
            .0
            .iter()
            .map(|(k, v)| format!("  {}: {}", serde_json::Value::from(k.as_str()), v.get()))
            .collect();
        format!("{{\n{}\n}}", members.join(",\n"))
    }
}

fn raw(value: &serde_json::Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).expect("a JSON value serializes")
}

/// The project's Claude Code settings, with the PreToolUse groups changed by `change`.
fn edit_settings(
    project: &Path,
    change: impl FnOnce(&mut Vec<serde_json::Value>) -> bool,
) -> Result<Option<PathBuf>, Failure> {
    let dir = project.join(".claude");
    let file = dir.join("settings.json");
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "{}".into(),
        Err(e) => return Err(io("read", &file)(e)),
    };
    let bad = |what: &str| {
        Failure::new(
            2,
            format!(
                "{} is not valid Claude Code settings ({what}); fix it, then run this again",
                file.display()
            ),
        )
    };
    let mut settings: Ordered = serde_json::from_str(&text).map_err(|e| bad(&e.to_string()))?;
    let mut hooks: Ordered = match settings.get("hooks") {
        Some(h) => serde_json::from_str(h.get()).map_err(|_| bad("`hooks` is not an object"))?,
        None => Ordered(Vec::new()),
    };
    let mut groups: Vec<serde_json::Value> = match hooks.get("PreToolUse") {
        Some(g) => {
            serde_json::from_str(g.get()).map_err(|_| bad("`hooks.PreToolUse` is not a list"))?
        }
        None => Vec::new(),
    };
    if !change(&mut groups) {
        return Ok(None);
    }
    hooks.set("PreToolUse", raw(&serde_json::Value::from(groups)));
    let hooks_text = hooks.render().replace('\n', "\n  ");
    settings.set(
        "hooks",
        RawValue::from_string(hooks_text).expect("rendered JSON"),
    );
    std::fs::create_dir_all(&dir).map_err(io("create", &dir))?;
    std::fs::write(&file, settings.render() + "\n").map_err(io("write", &file))?;
    Ok(Some(file))
}

fn is_ours(group: &serde_json::Value) -> bool {
    group["hooks"].as_array().is_some_and(|hooks| {
        hooks.iter().any(|h| {
            h["command"]
                .as_str()
                .is_some_and(|c| c.contains("guard hook claude-code"))
        })
    })
}

fn install_claude_code(project: &Path) -> Outcome {
    let command = format!("{} guard hook claude-code", shell_quote(&baton_exe()));
    let written = edit_settings(project, |groups| {
        if groups.iter().any(is_ours) {
            return false;
        }
        groups.push(serde_json::json!({
            "matcher": MATCHER,
            "hooks": [{"type": "command", "command": command}],
        }));
        true
    })?;
    match written {
        Some(file) => eprintln!(
            "installed the guard in {}: Claude Code's {MATCHER} calls on files another agent holds are refused; set BATON_AGENT to the name your claims use",
            file.display()
        ),
        None => eprintln!("the guard is already installed in this project's Claude Code settings"),
    }
    Ok(0)
}

fn uninstall_claude_code(project: &Path) -> Outcome {
    let written = edit_settings(project, |groups| {
        let before = groups.len();
        groups.retain(|g| !is_ours(g));
        groups.len() != before
    })?;
    match written {
        Some(file) => eprintln!("removed the guard from {}", file.display()),
        None => eprintln!("no guard is installed in this project's Claude Code settings"),
    }
    Ok(0)
}
