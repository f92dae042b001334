//! Writing one config file for `baton setup`, and taking it back. Before its first change a
//! file's bytes (or that it did not exist) are kept in a record under
//! `$XDG_STATE_HOME/baton/setup` (else `~/.local/state/baton/setup`), with a digest of what
//! setup wrote. `--uninstall` puts those bytes back when the file is still as setup left
//! it (and removes a file, and the folders, that setup created); a file changed since keeps
//! the changes and loses only Baton's entries. `--dry-run` prints the unified diff instead.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Edit;
use crate::failure::Failure;
use crate::hook::state;

#[derive(Serialize, Deserialize)]
struct Record {
    path: String,
    /// The file before setup first changed it; None: it did not exist.
    original: Option<String>,
    /// SHA-256 of what setup last wrote.
    written: String,
    /// Folders setup created for it, outermost first.
    created: Vec<String>,
}

/// What happened to one file.
pub enum Done {
    Unchanged,
    Written,
    Created,
    Restored,
    Removed,
    /// Changed since setup: only Baton's entries were taken out.
    Stripped,
}

fn sha(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn record_path(path: &Path) -> Result<PathBuf, Failure> {
    let root = state::root().ok_or_else(|| {
        Failure::new(
            1,
            "cannot tell where to keep setup's records: set HOME (or XDG_STATE_HOME)",
        )
    })?;
    Ok(root
        .join("setup")
        .join(state::digest(&[&path.display().to_string()]) + ".json"))
}

fn io(what: &str, path: &Path) -> impl Fn(std::io::Error) -> Failure {
    let (what, path) = (what.to_string(), path.display().to_string());
    move |e| Failure::new(1, format!("cannot {what} {path} ({e})"))
}

fn read(path: &Path) -> Result<Option<String>, Failure> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes).map(Some).map_err(|_| {
            Failure::new(
                2,
                format!(
                    "{} is not UTF-8 text; fix it, then run `baton setup` again",
                    path.display()
                ),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("read", path)(e)),
    }
}

fn load(record: &Path) -> Option<Record> {
    serde_json::from_slice(&std::fs::read(record).ok()?).ok()
}

fn save(record_file: &Path, record: &Record) -> Result<(), Failure> {
    if let Some(dir) = record_file.parent() {
        std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    }
    let text = serde_json::to_vec_pretty(record).expect("a record serializes");
    std::fs::write(record_file, text).map_err(io("write", record_file))
}

/// Prints the unified diff of `path` from `old` to `new` (None: no file).
fn diff(path: &Path, old: Option<&str>, new: Option<&str>) {
    let name = path.display().to_string();
    let (a, b) = (
        if old.is_some() {
            format!("a{name}")
        } else {
            "/dev/null".into()
        },
        if new.is_some() {
            format!("b{name}")
        } else {
            "/dev/null".into()
        },
    );
    let text = similar::TextDiff::from_lines(old.unwrap_or(""), new.unwrap_or(""))
        .unified_diff()
        .context_radius(3)
        .header(&a, &b)
        .to_string();
    print!("{text}");
}

/// Puts Baton's entries in `edit.path`.
pub fn install(edit: &Edit, dry_run: bool) -> Result<Done, Failure> {
    let path = &edit.path;
    let current = read(path)?;
    let new = (edit.install)(current.as_deref().unwrap_or("")).map_err(|e| Failure::new(2, e))?;
    if current.as_deref() == Some(new.as_str()) {
        return Ok(Done::Unchanged);
    }
    if dry_run {
        diff(path, current.as_deref(), Some(&new));
        return Ok(if current.is_some() {
            Done::Written
        } else {
            Done::Created
        });
    }
    let record_file = record_path(path)?;
    let mut created = Vec::new();
    let mut dir = path.parent();
    while let Some(d) = dir {
        if d.exists() {
            break;
        }
        created.insert(0, d.display().to_string());
        dir = d.parent();
    }
    let record = match load(&record_file) {
        Some(mut record) => {
            record.written = sha(&new);
            record.created.extend(created.iter().cloned());
            record
        }
        None => Record {
            path: path.display().to_string(),
            original: current.clone(),
            written: sha(&new),
            created: created.clone(),
        },
    };
    // The record first: a file written without it could not be taken back.
    save(&record_file, &record)?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io("create", parent))?;
    }
    std::fs::write(path, &new).map_err(io("write", path))?;
    Ok(if current.is_some() {
        Done::Written
    } else {
        Done::Created
    })
}

/// Takes Baton's entries out of `edit.path`: the file as it was, when setup's record says
/// so and nobody changed it since; else only Baton's entries. The folders setup created for
/// a file it removes go into `folders`, for the caller to remove once they are empty.
pub fn uninstall(edit: &Edit, dry_run: bool, folders: &mut Vec<PathBuf>) -> Result<Done, Failure> {
    let path = &edit.path;
    let record_file = record_path(path)?;
    let record = load(&record_file);
    let current = read(path)?;
    let Some(current) = current else {
        if !dry_run && record.is_some() {
            let _ = std::fs::remove_file(&record_file);
        }
        return Ok(Done::Unchanged);
    };
    let (target, done) = match &record {
        Some(r) if sha(&current) == r.written => (
            r.original.clone(),
            if r.original.is_some() {
                Done::Restored
            } else {
                Done::Removed
            },
        ),
        _ => {
            let stripped = (edit.remove)(&current).map_err(|e| Failure::new(2, e))?;
            if stripped == current {
                if !dry_run && record.is_some() {
                    let _ = std::fs::remove_file(&record_file);
                }
                return Ok(Done::Unchanged);
            }
            (Some(stripped), Done::Stripped)
        }
    };
    if dry_run {
        diff(path, Some(&current), target.as_deref());
        return Ok(done);
    }
    match &target {
        Some(text) => std::fs::write(path, text).map_err(io("write", path))?,
        None => std::fs::remove_file(path).map_err(io("remove", path))?,
    }
    if let Some(r) = &record {
        if target.is_none() {
            folders.extend(r.created.iter().map(PathBuf::from));
        }
        let _ = std::fs::remove_file(&record_file);
    }
    Ok(done)
}

/// Removes `folders` that are empty, innermost first; a folder someone filled stays.
pub fn remove_folders(mut folders: Vec<PathBuf>) {
    folders.sort_by_key(|f| std::cmp::Reverse(f.components().count()));
    folders.dedup();
    for folder in folders {
        let _ = std::fs::remove_dir(folder);
    }
}
