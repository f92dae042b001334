//! The import rules of ARCHITECTURE.md as an allow-list, read from every path the sources
//! name (`crate::`, `self::`, `super::` chains resolved from the module they are written
//! in, and the binaries' `baton::`): each room of `src/` imports only what `ALLOWED` lists
//! for it. The wire types (`protocol`, `json`, `error`) import nothing of Baton's above
//! them, storage (`store`) neither the rules nor the server, the engine (`engine`) no rule
//! and no area, the rules (`methods`) storage only through `store::boundary`, the clients
//! (`client`, `bridge`, and the binaries `baton` and `mcp-bridge`) only the wire; and no
//! rule speaks SQL.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir` (or `dir` itself when it is a file).
fn sources(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
        let entry = entry.unwrap().path();
        if entry.is_dir() {
            files.extend(sources(&entry));
        } else if entry.extension().is_some_and(|e| e == "rs") {
            files.push(entry);
        }
    }
    files
}

/// Each room of `src/` (a top-level module; each binary is `bin::` and its name) and what
/// it may import: another room, or one item of a room (`store::boundary`). A room missing
/// here fails the test, so a new one must be placed. Test modules (`mod tests`) may import
/// anything.
const ALLOWED: &[(&str, &[&str])] = &[
    ("error", &[]),
    ("clock", &[]),
    ("json", &["error"]),
    ("resource_key", &["error"]),
    ("protocol", &["error", "json"]),
    ("log_limit", &["clock"]),
    ("metrics", &["clock", "protocol"]),
    ("config", &["error", "protocol"]),
    // Storage: SQL below the boundary; never the rules, the server or the clients.
    (
        "store",
        &["clock", "error", "json", "protocol", "resource_key"],
    ),
    // The engine runs the writer over any areas: it names none, nor any rule.
    (
        "engine",
        &[
            "clock",
            "error",
            "json",
            "log_limit",
            "protocol",
            "store::boundary",
        ],
    ),
    // The rules reach storage only through the boundary, and the read side only through
    // its handle (`Store::read`, a closure over the boundary's `&dyn Storage`).
    (
        "methods",
        &[
            "clock",
            "config",
            "engine",
            "error",
            "json",
            "log_limit",
            "metrics",
            "protocol",
            "resource_key",
            "store::Store",
            "store::boundary",
        ],
    ),
    // The server opens the store; everything else it asks of the rules and the writer.
    // `/mcp` serves the bridge's MCP server, a client of this daemon over an in-process
    // connection (so the server may use `bridge` and `client`, which speak the wire only).
    (
        "server",
        &[
            "bridge",
            "client",
            "clock",
            "config",
            "engine",
            "error",
            "json",
            "log_limit",
            "methods",
            "metrics",
            "protocol",
            "store::OpenError",
            "store::Store",
        ],
    ),
    // The clients speak the wire only.
    ("client", &["config", "error", "json", "protocol"]),
    ("bridge", &["client", "config", "error", "json", "protocol"]),
    // The binaries: batond runs the server; the CLI and mcp-bridge are clients.
    ("bin::batond", &["clock", "config", "server"]),
    (
        "bin::baton",
        &["client", "config", "error", "json", "protocol"],
    ),
    (
        "bin::mcp-bridge",
        &["bridge", "client", "config", "error", "json", "protocol"],
    ),
];

/// An import found in the sources: the room it is in, whether in a test module, what it
/// names (a path from the crate's root), and where.
struct Import {
    room: String,
    test: bool,
    target: Vec<String>,
    at: String,
}

/// The room of a binary: `bin::` and its name (`src/bin/batond.rs`, or a folder
/// `src/bin/baton/` with all its files).
fn binary_room(relative_to_bin: &Path) -> String {
    let first = relative_to_bin.iter().next().unwrap().to_string_lossy();
    format!("bin::{}", first.trim_end_matches(".rs"))
}

/// The module path of a source file (`src/methods/locks/rules.rs` -> methods, locks,
/// rules; a `mod.rs` is its folder); every file of a binary is the binary's room.
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(root).unwrap();
    if let Ok(in_bin) = relative.strip_prefix("bin") {
        return vec![binary_room(in_bin)];
    }
    let mut parts: Vec<String> = relative
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The paths a `use` or an expression names after `head::`: `a::b`, or each of a brace
/// group's first segments (`{a, b::c, d as e}` -> a, b, d).
fn named(rest: &str) -> Vec<Vec<String>> {
    let mut path = Vec::new();
    let mut text = rest;
    loop {
        if let Some(group) = text.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or("");
            return inner
                .split(',')
                .map(|item| {
                    item.trim()
                        .split("::")
                        .next()
                        .unwrap_or("")
                        .split(' ')
                        .next()
                        .unwrap_or("")
                })
                .filter(|item| !item.is_empty() && *item != "self")
                .map(|item| {
                    let mut full = path.clone();
                    full.push(item.to_string());
                    full
                })
                .collect();
        }
        let end = text
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(text.len());
        if end == 0 {
            break;
        }
        path.push(text[..end].to_string());
        match text[end..].strip_prefix("::") {
            Some(more) => text = more,
            None => break,
        }
    }
    vec![path]
}

/// Every `crate::`, `baton::`, `self::` and `super::` path in the sources, resolved from
/// the module it is written in (inline `mod x {` blocks included, so `super::super::` in a
/// test module lands where Rust resolves it).
fn imports() -> Vec<Import> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for file in sources(&root) {
        let module = module_of(&root, &file);
        let in_bin = module.first().is_some_and(|room| room.starts_with("bin::"));
        let text = std::fs::read_to_string(&file).unwrap();
        // (brace depth at which an inline module opened, its name)
        let mut inline: Vec<(i64, String)> = Vec::new();
        let mut depth = 0i64;
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let trimmed = code.trim_start();
            let declared = trimmed
                .strip_prefix("pub(crate) ")
                .or_else(|| trimmed.strip_prefix("pub(super) "))
                .or_else(|| trimmed.strip_prefix("pub "))
                .unwrap_or(trimmed);
            if let Some(name) = declared.strip_prefix("mod ") {
                if let Some(name) = name.strip_suffix('{') {
                    inline.push((depth, name.trim().to_string()));
                }
            }
            let here: Vec<String> = module
                .iter()
                .cloned()
                .chain(inline.iter().map(|(_, name)| name.clone()))
                .collect();
            let test = inline.iter().any(|(_, name)| name == "tests");
            let bytes = code.as_bytes();
            let mut i = 0;
            while i < code.len() {
                let starts_path = i == 0 || {
                    let c = bytes[i - 1] as char;
                    !(c.is_alphanumeric() || c == '_' || c == ':')
                };
                let rest = &code[i..];
                let head = ["crate::", "baton::", "self::", "super::"]
                    .into_iter()
                    .find(|h| rest.starts_with(h));
                let (true, Some(head)) = (starts_path, head) else {
                    i += rest.chars().next().map_or(1, char::len_utf8);
                    continue;
                };
                let mut segments = &rest[head.len()..];
                let base = match head {
                    "super::" => {
                        let mut supers = 1;
                        while let Some(more) = segments.strip_prefix("super::") {
                            supers += 1;
                            segments = more;
                        }
                        (!in_bin).then(|| here[..here.len().saturating_sub(supers)].to_vec())
                    }
                    "crate::" => (!in_bin).then(Vec::new),
                    "baton::" => Some(Vec::new()),
                    _ => (!in_bin).then(|| here.clone()),
                };
                if let Some(base) = base {
                    for path in named(segments) {
                        let mut target = base.clone();
                        target.extend(path);
                        found.push(Import {
                            room: module[0].clone(),
                            test,
                            target,
                            at: format!("{}:{}: {}", file.display(), n + 1, line.trim()),
                        });
                    }
                }
                i = code.len() - segments.len();
            }
            depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
            while inline.last().is_some_and(|(opened, _)| depth <= *opened) {
                inline.pop();
            }
        }
    }
    found
}

/// Whether an import is within what its room may import.
fn allowed(import: &Import) -> bool {
    let Some(first) = import.target.first() else {
        return true;
    };
    if *first == import.room || import.test {
        return true;
    }
    let Some((_, may)) = ALLOWED.iter().find(|(room, _)| *room == import.room) else {
        return false;
    };
    may.iter().any(|allowed| {
        let allowed: Vec<&str> = allowed.split("::").collect();
        import
            .target
            .iter()
            .zip(&allowed)
            .all(|(part, want)| part == want)
            && import.target.len() >= allowed.len()
    })
}

#[test]
fn imports_run_one_way() {
    let imports = imports();
    let mut found: Vec<String> = imports
        .iter()
        .filter(|i| !allowed(i))
        .map(|i| format!("{} (names {})", i.at, i.target.join("::")))
        .collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let binaries = std::fs::read_dir(root.join("bin"))
        .unwrap()
        .map(|entry| binary_room(Path::new(&entry.unwrap().file_name())));
    let rooms = std::fs::read_dir(&root)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            path.file_stem().unwrap().to_string_lossy().into_owned()
        })
        .filter(|room| room != "bin")
        .chain(binaries);
    for room in rooms {
        if room == "lib" || room.ends_with("_tests") {
            continue;
        }
        if !ALLOWED.iter().any(|(r, _)| *r == room) {
            found.push(format!(
                "src/{room} is in no room of ALLOWED: place it in the layering"
            ));
        }
    }
    assert!(
        found.is_empty(),
        "imports against the layering of ARCHITECTURE.md:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_an_import() {
    // The rule above must be able to fail: it sees the server import the rules, a rule
    // reach the boundary, and a test module's `super::super::` land in its room.
    let imports = imports();
    let names = |room: &str, target: &str| {
        imports
            .iter()
            .any(|i| i.room == room && i.target.join("::").starts_with(target))
    };
    assert!(names("server", "methods"));
    assert!(names("methods", "store::boundary"));
    assert!(names("bin::batond", "server"));
    assert!(names("bin::baton", "client"));
    assert!(imports
        .iter()
        .any(|i| i.at.contains("super::super::migrations")
            && i.target.join("::") == "store::sqlite::migrations::migrate"));
    // The clients reach the daemon only through the wire: not its rules, its storage, its
    // server (and the CLI not the bridge).
    for (client, beyond) in [
        ("client", "methods"),
        ("bridge", "methods"),
        ("bridge", "server"),
        ("bin::baton", "methods"),
        ("bin::baton", "store"),
        ("bin::baton", "server"),
        ("bin::baton", "bridge"),
        ("bin::mcp-bridge", "methods"),
    ] {
        assert!(
            !allowed(&Import {
                room: client.into(),
                test: false,
                target: vec![beyond.into()],
                at: String::new(),
            }),
            "{client} may import {beyond}"
        );
    }
    // Neither engine's folder is open to the rules.
    for engine in ["sqlite", "postgres"] {
        assert!(!allowed(&Import {
            room: "methods".into(),
            test: false,
            target: vec!["store".into(), engine.into(), "leases".into()],
            at: String::new(),
        }));
    }
}

/// The rules, written over the storage boundary (`store::boundary`), which a second
/// storage engine reuses as they are: no SQL and no SQLite anywhere in them, nor in the
/// boundary itself.
const RULES_OVER_THE_BOUNDARY: &[&str] = &["methods", "store/boundary"];

/// The lines of the files under `place` that speak SQL or name SQLite.
fn storage_lines(place: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for file in sources(&root.join(place)) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let sql = [
                "rusqlite",
                "r2d2",
                "prepare_cached",
                "SELECT ",
                "INSERT ",
                "UPDATE ",
                "DELETE FROM",
            ];
            if sql.iter().any(|word| code.contains(word)) {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn rules_over_the_boundary_speak_no_sql() {
    let found: Vec<String> = RULES_OVER_THE_BOUNDARY
        .iter()
        .flat_map(|place| storage_lines(place))
        .collect();
    assert!(
        found.is_empty(),
        "rules reaching past the storage boundary:\n{}",
        found.join("\n")
    );
    // The check can fail: each engine's side of the boundary is all SQL.
    for engine_side in [
        "store/sqlite/records.rs",
        "store/sqlite/leases.rs",
        "store/sqlite/nodes.rs",
        "store/postgres/records.rs",
        "store/postgres/leases.rs",
        "store/postgres/nodes.rs",
    ] {
        assert!(!storage_lines(engine_side).is_empty(), "{engine_side}");
    }
}
