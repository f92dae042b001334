//! `baton setup [HARNESS...] [--agent NAME] [--user] [--dry-run] [--uninstall]`: wires Baton
//! into agent harnesses, in each one's own documented config files (one file per harness
//! here: `claude.rs`, `codex.rs`, `cursor.rs`, `gemini.rs`, each citing its docs): the MCP
//! server (`mcp-bridge`, or batond's HTTP `/mcp` for a remote batond), the edit guard
//! (`baton guard hook`), the context hook and the stop hook (`baton hook`). The project's
//! files (of the git repository here) unless `--user`. Everything already in a file stays
//! as written; `files.rs` keeps each file's bytes to restore them.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use baton::client::{Endpoint, Target};

use crate::cli::Harness;
use crate::failure::{Failure, Outcome};

mod claude;
mod codex;
mod cursor;
mod files;
mod gemini;
mod json;
mod toml;

use files::Done;

/// The environment variable the harnesses read batond's token from (never the token
/// itself in a file).
pub const TOKEN_ENV: &str = "BATON_TOKEN";
/// The HTTP listener's port when `BATON_HTTP_LISTEN` does not say.
const HTTP_PORT: u16 = 7421;
/// Seconds a hook may take before its harness gives up on it (the hooks answer in well
/// under a second, or fail open after 3 s).
pub const HOOK_TIMEOUT_SECS: u64 = 10;

pub struct Request<'a> {
    pub harnesses: Vec<Harness>,
    pub agent: Option<String>,
    pub user: bool,
    pub dry_run: bool,
    pub uninstall: bool,
    /// The global `--url` and `--socket` flags.
    pub url: Option<String>,
    pub socket: Option<String>,
    pub target: &'a Target,
}

/// Where the config files are: the project's (its root) or the user's (the home folder).
pub enum Scope {
    Project(PathBuf),
    User(PathBuf),
}

/// A config file's text changed: Err says what is wrong with the file.
pub type Change = Box<dyn Fn(&str) -> Result<String, String>>;

/// One config file's change.
pub struct Edit {
    pub path: PathBuf,
    /// What Baton puts there, for the report.
    pub what: String,
    /// The file's text (empty when it does not exist) with Baton's entries in.
    pub install: Change,
    /// The file's text with Baton's entries out.
    pub remove: Change,
}

/// What one harness gets: its file edits, and what it cannot do (said, not pretended).
pub struct Plan {
    pub edits: Vec<Edit>,
    pub notes: Vec<String>,
}

/// How the MCP server and the hooks reach batond and whom they act for.
pub struct Wiring {
    baton: String,
    bridge: String,
    /// `--url U` or `--socket P`, when setup was given one (else they find batond as any
    /// client does).
    connect: Vec<String>,
    pub agent: Option<String>,
    /// batond's HTTP `/mcp` URL, when batond is on another host.
    pub remote_mcp: Option<String>,
}

pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:@+=".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// What a hook command says after `baton`, to be recognised again.
pub fn mark(kind: &str, harness: Harness) -> String {
    format!(" {kind} {}", harness.arg())
}

impl Wiring {
    /// The command line of one hook: `kind` is `guard hook`, `hook context` or `hook stop`.
    pub fn hook(&self, kind: &str, harness: Harness) -> String {
        let mut command = shell_quote(&self.baton);
        for arg in &self.connect {
            command.push(' ');
            command.push_str(&shell_quote(arg));
        }
        command.push_str(&mark(kind, harness));
        if let Some(agent) = &self.agent {
            command.push_str(" --agent ");
            command.push_str(&shell_quote(agent));
        }
        command
    }

    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    /// mcp-bridge's arguments.
    pub fn bridge_args(&self) -> Vec<String> {
        let mut args = vec!["--tools".to_string(), "all".to_string()];
        args.extend(self.connect.iter().cloned());
        if let Some(agent) = &self.agent {
            args.push("--agent".into());
            args.push(agent.clone());
        }
        args
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// An agent name the hooks' command lines carry safely.
fn check_agent(agent: &str) -> Result<(), Failure> {
    let ok = (1..=128).contains(&agent.len())
        && agent
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-@+:".contains(c));
    if ok {
        Ok(())
    } else {
        Err(Failure::new(
            2,
            format!("--agent {agent:?}: use 1 to 128 letters, digits and . _ - @ + : (the name your claims and messages use, e.g. --agent writer-1)"),
        ))
    }
}

/// An agent name as a query value: `+`, `@` and `:` percent-encoded (a `+` would read as
/// a space), the rest as it is (names are letters, digits and `. _ - @ + :`).
fn query_value(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            '+' | '@' | ':' => format!("%{:02X}", c as u32),
            c => c.to_string(),
        })
        .collect()
}

fn is_local(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl Wiring {
    fn new(req: &Request) -> Result<Wiring, Failure> {
        let exe = std::env::current_exe()
            .map_err(|e| Failure::new(1, format!("cannot find this baton binary ({e})")))?;
        let baton = exe.display().to_string();
        let beside = exe.with_file_name("mcp-bridge");
        let bridge = if beside.exists() {
            beside.display().to_string()
        } else {
            which("mcp-bridge").ok_or_else(|| {
                Failure::new(
                    1,
                    format!(
                        "mcp-bridge is neither beside {} nor on PATH; build it (cargo build --release --bins) or install it (scripts/install-service)",
                        exe.display()
                    ),
                )
            })?
        };
        let url = req.url.clone().or_else(|| env("BATON_URL"));
        let remote_mcp = match &req.target.endpoint {
            Endpoint::Tls { host, .. } => Some(host.clone()),
            Endpoint::Tcp { host, .. } if !is_local(host) => Some(host.clone()),
            _ => None,
        }
        .map(|host| {
            let port = env("BATON_HTTP_LISTEN")
                .and_then(|l| l.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()))
                .unwrap_or(HTTP_PORT);
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host
            };
            // The same tools as the local entry's `--tools all`; the session acts for the
            // agent (batond's /mcp takes `?agent=` when the token may act as that name).
            match &req.agent {
                Some(agent) => format!(
                    "https://{host}:{port}/mcp?tools=all&agent={}",
                    query_value(agent)
                ),
                None => format!("https://{host}:{port}/mcp?tools=all"),
            }
        });
        let connect = match (&url, &req.target.endpoint) {
            (Some(url), _) => vec!["--url".to_string(), url.clone()],
            (None, Endpoint::Unix(path))
                if req.socket.is_some()
                    || env("BATON_SOCKET_PATH").is_some()
                    || env("BATON_HOME").is_some() =>
            {
                vec!["--socket".to_string(), path.display().to_string()]
            }
            _ => Vec::new(),
        };
        Ok(Wiring {
            baton,
            bridge,
            connect,
            agent: req.agent.clone(),
            remote_mcp,
        })
    }
}

/// A program on PATH, as an absolute path.
fn which(program: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}

fn home() -> Result<PathBuf, Failure> {
    env("HOME").map(PathBuf::from).ok_or_else(|| {
        Failure::new(
            1,
            "HOME is not set; set it to your home folder and run this again",
        )
    })
}

/// Whether `harness` looks installed: its program on PATH or its config folder in HOME.
fn installed(harness: Harness, home: &Path) -> bool {
    let (programs, folder): (&[&str], PathBuf) = match harness {
        Harness::ClaudeCode => (&["claude"], home.join(".claude")),
        Harness::Codex => (&["codex"], codex::home(home)),
        Harness::Cursor => (&["cursor", "cursor-agent"], home.join(".cursor")),
        Harness::Gemini => (&["gemini"], home.join(".gemini")),
    };
    folder.is_dir() || programs.iter().any(|p| which(p).is_some())
}

/// The git repository's root here.
fn project_root() -> Result<PathBuf, Failure> {
    let here = std::env::current_dir()
        .map_err(|e| Failure::new(1, format!("cannot read the working directory ({e})")))?;
    match crate::guard::git(&here, &["rev-parse", "--show-toplevel"]) {
        Ok(root) => Ok(PathBuf::from(root.trim())),
        Err(_) => Err(Failure::new(
            2,
            format!(
                "{} is not in a git repository: run `baton setup` in your project (or `git init` it first), or pass --user for your user-level config",
                here.display()
            ),
        )),
    }
}

pub fn setup(req: Request) -> Outcome {
    if let Some(agent) = &req.agent {
        check_agent(agent)?;
    }
    let home = home()?;
    let scope = if req.user {
        Scope::User(home.clone())
    } else {
        Scope::Project(project_root()?)
    };
    let harnesses: Vec<Harness> = if req.harnesses.is_empty() {
        Harness::ALL
            .into_iter()
            .filter(|h| installed(*h, &home))
            .collect()
    } else {
        let mut named = req.harnesses.clone();
        named.dedup();
        named
    };
    if harnesses.is_empty() {
        return Err(Failure::new(
            3,
            "found no harness here (no claude, codex, cursor or gemini on PATH, no ~/.claude, ~/.codex, ~/.cursor or ~/.gemini); name the ones to set up, e.g. `baton setup claude-code`",
        ));
    }
    let wiring = Wiring::new(&req)?;
    let verb = match (req.uninstall, req.dry_run) {
        (false, false) => "set up",
        (false, true) => "would set up",
        (true, false) => "took out",
        (true, true) => "would take out",
    };
    let mut folders = Vec::new();
    for harness in harnesses {
        let plan = match harness {
            Harness::ClaudeCode => claude::plan(&scope, &wiring),
            Harness::Codex => codex::plan(&scope, &wiring),
            Harness::Cursor => cursor::plan(&scope, &wiring),
            Harness::Gemini => gemini::plan(&scope, &wiring),
        };
        eprintln!("{}:", harness.title());
        for edit in &plan.edits {
            let done = if req.uninstall {
                files::uninstall(edit, req.dry_run, &mut folders)?
            } else {
                files::install(edit, req.dry_run)?
            };
            let path = edit.path.display();
            let line = match (done, req.uninstall) {
                (Done::Unchanged, false) => format!("already set up in {path}: {}", edit.what),
                (Done::Unchanged, true) => format!("nothing of Baton's in {path}"),
                (Done::Created, _) => format!("{verb} {path} (new): {}", edit.what),
                (Done::Written, _) => format!("{verb} in {path}: {}", edit.what),
                (Done::Restored, _) => format!("{path}: restored as it was before setup"),
                (Done::Removed, _) => format!("{path}: removed (setup had created it)"),
                (Done::Stripped, _) => {
                    format!("{path}: changed since setup, so only Baton's entries were taken out")
                }
            };
            eprintln!("  {line}");
        }
        if !req.uninstall {
            for note in &plan.notes {
                eprintln!("  note: {note}");
            }
        }
    }
    files::remove_folders(folders);
    if !req.uninstall {
        match (&wiring.agent, &wiring.remote_mcp) {
            (None, _) => eprintln!(
                "no --agent given: the MCP server and the hooks act for BATON_AGENT in the harness's environment; without it the guard lets only unclaimed files through and the context and stop hooks stay silent"
            ),
            (Some(agent), None) => eprintln!(
                "the MCP server and the hooks act for agent {agent}: its claims pass the guard, its mail and claims feed the context and stop hooks"
            ),
            (Some(agent), Some(_)) => eprintln!(
                "the MCP server (?agent={agent}: the token in $BATON_TOKEN must be named {agent} or have the grant agents:{agent}) and the hooks act for agent {agent}: its claims pass the guard, its mail and claims feed the context and stop hooks"
            ),
        }
        if let Some(url) = &wiring.remote_mcp {
            eprintln!(
                "batond is remote: the MCP entries use {url} with `Authorization: Bearer` from ${TOKEN_ENV}, and the hooks read {TOKEN_ENV} too; set it in the harness's environment (no file holds the token)"
            );
        }
        if req.dry_run {
            eprintln!("(dry run: nothing was changed)");
        }
    }
    Ok(0)
}
