//! `baton guard ...`: making claims binding. `check` refuses paths that someone else holds
//! (as `file:` keys, so `dir:` leases on ancestors count); `install git` puts that check in
//! a pre-commit hook; `hook HARNESS` is a harness's hook before the tools that write files
//! (`tools.rs` says which tools, and where their input names the files; the hook protocols
//! are in `hook/`). A guard never stops work because batond cannot be asked, unless
//! `BATON_GUARD_STRICT=1`.

use std::path::{Component, Path, PathBuf};

use baton::client::{CallError, Connection, Target};
use baton::protocol::locks::{HeldBy, Holders, ResourceLockStatusParams, StatusResult};

use crate::failure::Failure;

mod install;
pub mod tools;

pub use install::{install, uninstall};

/// Exit code of a refusal (the CLI's "busy").
pub const REFUSED: u8 = 5;

/// Why a path may not be changed now.
pub struct Refusal {
    /// One line for a person or a model.
    pub text: String,
    /// The key held (the file's, or a folder's above it).
    pub key: String,
    /// Who holds it.
    pub holder: String,
}

/// Whether batond's absence refuses changes (`BATON_GUARD_STRICT=1`).
pub fn strict() -> bool {
    std::env::var("BATON_GUARD_STRICT").is_ok_and(|v| v == "1")
}

/// The name whose own claims do not refuse it: `--owner`, else `BATON_AGENT`.
pub fn owner(flag: Option<String>) -> Option<String> {
    flag.or_else(|| std::env::var("BATON_AGENT").ok())
        .filter(|o| !o.is_empty())
}

/// `path` made absolute against `base` and normalised without touching the file system
/// (`.` dropped, `..` taken back), as batond names it.
pub fn absolute(path: &Path, base: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    };
    let mut out = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Asks batond about each path; the refusals, one per path someone other than `owner`
/// holds. Paths outside batond's workspace are not coordinated and pass.
pub async fn check(
    conn: &mut Connection,
    owner: Option<&str>,
    paths: &[PathBuf],
) -> Result<Vec<Refusal>, CallError> {
    let mut refusals = Vec::new();
    for path in paths {
        let ask = ResourceLockStatusParams {
            resource_key: format!("file:{}", path.display()),
        };
        let status = match conn.call(&ask).await {
            Ok(status) => status,
            // Outside the workspace (or not a path batond can name): not coordinated.
            Err(CallError::Daemon { kind, .. }) if kind == "invalid" => continue,
            Err(err) => return Err(err),
        };
        let StatusResult::Held {
            resource_key,
            held_by,
            conflicting_key,
        } = status
        else {
            continue;
        };
        // Held only by the asker (alone, or among shared holders): its own claim.
        let all: Vec<&HeldBy> = match &held_by {
            Holders::One(h) => vec![h],
            Holders::Many(all) => all.iter().collect(),
        };
        let Some(held_by) = all.into_iter().find(|h| Some(h.owner.as_str()) != owner) else {
            continue;
        };
        let through = if conflicting_key == resource_key {
            String::new()
        } else {
            format!(" through {conflicting_key}")
        };
        let claim = match owner {
            Some(me) => format!("baton lock acquire {resource_key} --owner {me} --wait 60000"),
            None => format!(
                "baton lock acquire {resource_key} --owner YOUR_NAME --wait 60000 (and set BATON_AGENT=YOUR_NAME)"
            ),
        };
        refusals.push(Refusal {
            text: format!(
                "{}: held by {}{through} since {} until {} ({} s left); wait for it and claim it first: {claim}",
                path.display(),
                held_by.owner,
                held_by.acquired_at,
                held_by.expires_at,
                held_by.remaining_ms / 1000,
            ),
            key: conflicting_key.clone(),
            holder: held_by.owner.clone(),
        });
    }
    Ok(refusals)
}

/// Connects and checks; `Err` when batond could not be asked.
pub async fn ask(
    target: &Target,
    owner: Option<&str>,
    paths: &[PathBuf],
) -> Result<Vec<Refusal>, Failure> {
    let mut conn = Connection::open(target).await?;
    Ok(check(&mut conn, owner, paths).await?)
}

/// What a guard does when batond could not be asked: let the change through with a
/// warning on stderr, or (strict) refuse. Returns the exit code.
pub fn unanswered(failure: &Failure, refuse_code: u8) -> u8 {
    if strict() {
        eprintln!(
            "baton guard: cannot check the claims ({}); BATON_GUARD_STRICT=1 refuses changes until batond answers",
            failure.message
        );
        refuse_code
    } else {
        eprintln!(
            "baton guard: cannot check the claims ({}); letting the change through (set BATON_GUARD_STRICT=1 to refuse instead)",
            failure.message
        );
        0
    }
}

/// The paths staged for commit in the repository at `repo` (both sides of a rename),
/// absolute.
pub fn staged(repo: &Path) -> Result<Vec<PathBuf>, Failure> {
    let root = git(repo, &["rev-parse", "--show-toplevel"])?;
    let root = PathBuf::from(root.trim());
    let listed = git(
        &root,
        &["diff", "--cached", "--name-only", "--no-renames", "-z"],
    )?;
    Ok(listed
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(|p| absolute(Path::new(p), &root))
        .collect())
}

/// Runs git in `dir`; its stdout.
pub fn git(dir: &Path, args: &[&str]) -> Result<String, Failure> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .map_err(|e| Failure::new(1, format!("cannot run git ({e}); is it installed?")))?;
    if !out.status.success() {
        return Err(Failure::new(
            2,
            format!(
                "git {} in {} failed: {}",
                args.join(" "),
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    String::from_utf8(out.stdout)
        .map_err(|_| Failure::new(1, "git printed a path that is not UTF-8"))
}
