//! The documentation against the daemon: `docs/protocol.md` has one `### Name` section per
//! method DescribeInterface lists (and no other `###` heading), naming every param of that
//! method, every error kind and limit; every `BATON_*` setting of `src/config.rs` is in
//! `docs/operations.md`; the README stays a front door whose links resolve in the repository.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::common::Daemon;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The text of each `### Name` section (up to the next `##` or `###` heading), by name;
/// panics on a name that heads two sections.
fn method_sections(doc: &str) -> BTreeMap<String, String> {
    let mut sections = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in doc.lines() {
        if line.starts_with("## ") || line.starts_with("### ") {
            if let Some((name, text)) = current.take() {
                assert!(
                    sections.insert(name.clone(), text).is_none(),
                    "docs/protocol.md has two `### {name}` sections"
                );
            }
            if let Some(name) = line.strip_prefix("### ") {
                current = Some((name.trim().to_string(), String::new()));
            }
        } else if let Some((_, text)) = current.as_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    if let Some((name, text)) = current {
        assert!(
            sections.insert(name.clone(), text).is_none(),
            "docs/protocol.md has two `### {name}` sections"
        );
    }
    sections
}

/// The text under a `## Title` heading, up to the next `## ` heading.
fn chapter<'a>(doc: &'a str, title: &str) -> &'a str {
    let start = doc
        .find(&format!("\n## {title}\n"))
        .unwrap_or_else(|| panic!("docs/protocol.md has no `## {title}` section"));
    let body = &doc[start + title.len() + 5..];
    &body[..body.find("\n## ").unwrap_or(body.len())]
}

fn describe() -> Value {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    client.result("DescribeInterface", json!({}))
}

#[test]
fn protocol_doc_has_a_section_per_method_naming_every_param() {
    let interface = describe();
    let doc = read("docs/protocol.md");
    let sections = method_sections(&doc);

    let methods: BTreeMap<String, &Value> = interface["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["method"].as_str().unwrap().to_string(), m))
        .collect();
    let listed: BTreeSet<&String> = methods.keys().collect();
    let documented: BTreeSet<&String> = sections.keys().collect();
    let missing: Vec<_> = listed.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "DescribeInterface lists methods docs/protocol.md has no `### Name` section for: {missing:?}"
    );
    assert!(
        unknown.is_empty(),
        "docs/protocol.md has `### Name` sections for methods DescribeInterface does not list (every `###` heading there is a method; use `##` or bold text for anything else): {unknown:?}"
    );

    let mut unnamed = Vec::new();
    for (name, method) in &methods {
        let section = &sections[name];
        if let Some(props) = method["params_schema"]["properties"].as_object() {
            for param in props.keys() {
                if !section.contains(&format!("`{param}`")) {
                    unnamed.push(format!("{name}.{param}"));
                }
            }
        }
    }
    assert!(
        unnamed.is_empty(),
        "params DescribeInterface lists that their method's section in docs/protocol.md does not name (as `param`): {unnamed:?}"
    );

    // Every method that takes an idempotency key is named where idempotency is explained.
    let idempotency = chapter(&doc, "Idempotency");
    let unlisted: Vec<&String> = methods
        .iter()
        .filter(|(_, m)| m["params_schema"]["properties"]["idempotency_key"].is_object())
        .map(|(name, _)| name)
        .filter(|name| !idempotency.contains(name.as_str()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "methods that take idempotency_key but are not named in docs/protocol.md's Idempotency section: {unlisted:?}"
    );
}

#[test]
fn protocol_doc_names_every_error_and_limit() {
    let interface = describe();
    let doc = read("docs/protocol.md");
    let errors = chapter(&doc, "Errors");
    for error in interface["errors"].as_array().unwrap() {
        let row = format!(
            "| {} | `{}` |",
            error["code"],
            error["kind"].as_str().unwrap()
        );
        assert!(
            errors.contains(&row),
            "docs/protocol.md's Errors table has no row starting `{row}`"
        );
    }
    for limit in interface["limits"].as_object().unwrap().keys() {
        assert!(
            doc.contains(&format!("`{limit}`")),
            "docs/protocol.md does not name the limit `{limit}` DescribeInterface gives"
        );
    }
}

#[test]
fn operations_doc_lists_every_setting() {
    let config = read("src/config.rs");
    let table = read("docs/operations.md");
    let mut names = BTreeSet::new();
    for (at, _) in config.match_indices("\"BATON_") {
        let rest = &config[at + 1..];
        let end = rest
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        if end > "BATON_".len() {
            names.insert(&rest[..end]);
        }
    }
    assert!(
        names.len() > 20,
        "found too few settings in src/config.rs: {names:?}"
    );
    let missing: Vec<_> = names
        .iter()
        .filter(|name| !table.contains(&format!("| `{name}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "settings of src/config.rs without a row in docs/operations.md's configuration table: {missing:?}"
    );
}

/// GitHub's anchor for a heading: lower case, spaces to `-`, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            found.insert(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

/// Every `](target)` link of a Markdown file outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            found.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    found
}

#[test]
fn readme_is_a_front_door_and_every_link_resolves() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines: keep it a front door and move the rest into docs/"
    );
    for command in ["cargo run --release --bin batond", "scripts/test"] {
        assert!(
            readme.contains(&format!("```sh\n{command}\n```")),
            "README.md lost its set-up command `{command}`"
        );
    }

    let mut broken = Vec::new();
    for file in [
        "README.md",
        "ARCHITECTURE.md",
        "clients/python/README.md",
        "docs/protocol.md",
        "docs/operations.md",
        "docs/performance.md",
        "docs/clients.md",
    ] {
        let text = read(file);
        let dir = Path::new(file).parent().unwrap();
        for link in links(&text) {
            if link.starts_with("https://") || link.starts_with("http://") {
                continue;
            }
            let (path, fragment) = match link.split_once('#') {
                Some((path, fragment)) => (path, Some(fragment)),
                None => (link.as_str(), None),
            };
            let target = if path.is_empty() {
                PathBuf::from(file)
            } else {
                normalize(&dir.join(path))
            };
            if target.starts_with("..") || !repo().join(&target).exists() {
                broken.push(format!(
                    "{file}: {link} (outside the repository or missing)"
                ));
                continue;
            }
            if let Some(fragment) = fragment {
                let text = std::fs::read_to_string(repo().join(&target)).unwrap_or_default();
                if !anchors(&text).contains(fragment) {
                    broken.push(format!("{file}: {link} (no such heading)"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links: {broken:#?}");
}

/// `a/b/../c` as `a/c`; a path that climbs out of the repository keeps its leading `..`.
fn normalize(path: &Path) -> PathBuf {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else {
                    parts.push("..".as_ref());
                }
            }
            std::path::Component::CurDir => {}
            other => parts.push(other.as_os_str()),
        }
    }
    parts.iter().collect()
}
