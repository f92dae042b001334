//! Resource keys (`kind:name`) and their canonical form. `file:` and `dir:` names are paths:
//! `\` becomes `/`, repeated `/` collapse, `.` segments and a trailing `/` drop, `..` is
//! refused, and an absolute path must lie inside the workspace and becomes relative.

use std::path::Path;

use crate::error::{Error, Result};

/// A canonical resource key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceKey {
    /// `kind:name`, canonical.
    pub key: String,
    pub kind: String,
    /// The canonical path, for `file:` and `dir:` keys.
    pub path: Option<String>,
}

impl ResourceKey {
    pub fn is_dir(&self) -> bool {
        self.kind == "dir"
    }

    /// Proper ancestors of the path, nearest first (`a/b/c` -> `a/b`, `a`).
    pub fn ancestors(&self) -> Vec<&str> {
        let Some(path) = self.path.as_deref() else {
            return Vec::new();
        };
        path.char_indices()
            .rev()
            .filter(|(_, c)| *c == '/')
            .map(|(i, _)| &path[..i])
            .collect()
    }
}

/// Longest resource key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// Parses and canonicalises `raw` against `workspace` (which absolute paths must lie in).
pub fn canonicalize(raw: &str, workspace: &Path) -> Result<ResourceKey> {
    let Some((kind, name)) = raw.split_once(':') else {
        return Err(Error::Invalid(format!(
            "resource_key `{raw}` has no kind; write kind:name, e.g. file:src/lib.rs or tool:cargo-fmt"
        )));
    };
    if kind.is_empty() || name.is_empty() {
        return Err(Error::Invalid(format!(
            "resource_key `{raw}` needs a kind and a name; write kind:name, e.g. file:src/lib.rs"
        )));
    }
    if raw.len() > MAX_KEY_BYTES {
        return Err(Error::Invalid(format!(
            "resource_key is {} bytes, over the limit of {MAX_KEY_BYTES}; use a shorter key",
            raw.len()
        )));
    }
    if kind != "file" && kind != "dir" {
        return Ok(ResourceKey {
            key: raw.to_string(),
            kind: kind.to_string(),
            path: None,
        });
    }
    let path = canonical_path(name, workspace, raw)?;
    Ok(ResourceKey {
        key: format!("{kind}:{path}"),
        kind: kind.to_string(),
        path: Some(path),
    })
}

fn canonical_path(name: &str, workspace: &Path, raw: &str) -> Result<String> {
    let name = name.replace('\\', "/");
    let relative = if name.starts_with('/') {
        let workspace = workspace.to_string_lossy().replace('\\', "/");
        let root = segments(&workspace, raw)?;
        let full = segments(&name, raw)?;
        if full.len() < root.len() || full[..root.len()] != root[..] {
            return Err(Error::Invalid(format!(
                "resource_key `{raw}` is an absolute path outside the workspace {}; use a path relative to it, or set BATON_WORKSPACE",
                workspace
            )));
        }
        full[root.len()..].to_vec()
    } else {
        segments(&name, raw)?
    };
    if relative.is_empty() {
        return Err(Error::Invalid(format!(
            "resource_key `{raw}` names no path inside the workspace; name a file or directory under it"
        )));
    }
    Ok(relative.join("/"))
}

fn segments<'a>(path: &'a str, raw: &str) -> Result<Vec<&'a str>> {
    let mut out = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                return Err(Error::Invalid(format!(
                    "resource_key `{raw}` contains `..`; name the path without going up a directory"
                )))
            }
            s => out.push(s),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(raw: &str) -> Result<String> {
        canonicalize(raw, Path::new("/work/repo")).map(|k| k.key)
    }

    #[test]
    fn paths_are_canonical() {
        for (raw, want) in [
            ("file:src/lib.rs", "file:src/lib.rs"),
            ("file:./src//lib.rs", "file:src/lib.rs"),
            ("file:src\\lib.rs", "file:src/lib.rs"),
            ("dir:src/", "dir:src"),
            ("dir:./src/./a/", "dir:src/a"),
            ("file:/work/repo/src/lib.rs", "file:src/lib.rs"),
            ("file:/work/repo//src/./lib.rs", "file:src/lib.rs"),
            ("tool:cargo-fmt", "tool:cargo-fmt"),
            ("artifact:docs//api.json", "artifact:docs//api.json"),
        ] {
            assert_eq!(canon(raw).unwrap(), want, "{raw}");
        }
    }

    #[test]
    fn bad_keys_are_refused() {
        for raw in [
            "file:../x",
            "file:src/../../x",
            "file:/etc/passwd",
            "file:/work/repository/x",
            "nokind",
            ":x",
            "file:",
            "dir:.",
            "dir:/work/repo",
        ] {
            let err = canon(raw).unwrap_err();
            assert_eq!(err.code(), 400, "{raw}: {err}");
        }
    }

    #[test]
    fn ancestors_nearest_first() {
        let key = canonicalize("file:a/b/c.rs", Path::new("/")).unwrap();
        assert_eq!(key.ancestors(), ["a/b", "a"]);
        assert!(canonicalize("tool:x", Path::new("/"))
            .unwrap()
            .ancestors()
            .is_empty());
    }
}
