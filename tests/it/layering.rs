//! The import rules of ARCHITECTURE.md, read from the sources' `crate::` paths: the wire
//! types (`protocol`, `json`, `error`) import nothing of Baton's above them, storage
//! (`store`) imports neither the rules nor the server, the rules (`methods`) do not reach
//! up into the server or the bridge nor down past the storage boundary, and no rule
//! speaks SQL.

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

/// The lines of the files under `place` that name `crate::X` for a forbidden X.
fn violations(place: &str, forbidden: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for file in sources(&root.join(place)) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for module in forbidden {
                if code.contains(&format!("crate::{module}::"))
                    || code.contains(&format!("crate::{module};"))
                    || code.contains(&format!("crate::{module}::{{"))
                {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn imports_run_one_way() {
    let above_the_wire = ["app", "bridge", "client", "methods", "server", "store"];
    let mut found = Vec::new();
    for place in ["protocol", "json", "error.rs"] {
        found.extend(violations(place, &above_the_wire));
    }
    found.extend(violations("store", &["app", "bridge", "methods", "server"]));
    found.extend(violations("methods", &["bridge", "server"]));
    // The rules see storage only through the boundary (and the read pool's handle); the
    // server not even through the boundary, only through the rules and the writer.
    let sqlite_side = [
        "store::leases",
        "store::nodes",
        "store::state",
        "store::journal",
        "store::meta",
        "store::connection",
        "store::idempotency",
        "store::migrations",
    ];
    let mut storage_inside = sqlite_side.to_vec();
    storage_inside.push("store::boundary");
    found.extend(violations("server", &storage_inside));
    found.extend(violations("methods", &sqlite_side));
    assert!(
        found.is_empty(),
        "imports against the layering of ARCHITECTURE.md:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_an_import() {
    // The rule above must be able to fail: the server does import the rules.
    assert!(!violations("server", &["methods"]).is_empty());
}

/// The rules, written over the storage boundary (`store::boundary`), which a second
/// storage engine reuses as they are: no SQL and no SQLite anywhere in them, nor in the
/// boundary itself.
const RULES_OVER_THE_BOUNDARY: &[&str] = &["methods", "store/boundary.rs"];

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
    // The check can fail: the SQLite side of the boundary is all SQL.
    for sqlite_side in ["store/state.rs", "store/leases.rs", "store/nodes.rs"] {
        assert!(!storage_lines(sqlite_side).is_empty(), "{sqlite_side}");
    }
}
