//! Edits of Codex's config.toml with toml_edit, the maintained format-preserving TOML editor:
//! comments, order and spacing of everything else stay as written. Baton's tables go at the
//! end; a second run finds them by their content and changes nothing.

use toml_edit::{Array, ArrayOfTables, DocumentMut, Item, Table, Value};

pub struct Doc {
    doc: DocumentMut,
}

/// A hook handler table: `type = "command"`, `command`, `timeout` (seconds).
pub struct Hook {
    pub matcher: Option<&'static str>,
    pub command: String,
    pub timeout: i64,
}

impl Doc {
    pub fn parse(text: &str, what: &str) -> Result<Doc, String> {
        let doc = text.parse::<DocumentMut>().map_err(|e| {
            format!(
                "{what} is not valid TOML ({}); fix it, then run `baton setup` again",
                e.message()
            )
        })?;
        Ok(Doc { doc })
    }

    pub fn text(&self) -> String {
        self.doc.to_string()
    }

    /// The table `name` at the top, created (implicit: no header of its own) where missing.
    fn table(&mut self, name: &str, what: &str) -> Result<&mut Table, String> {
        let item = self.doc.entry(name).or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        });
        item.as_table_mut().ok_or_else(|| {
            format!("{what}: `{name}` is not a table; fix it, then run `baton setup` again")
        })
    }

    /// `[mcp_servers.baton]` with these members (in this order), unless it already says so.
    pub fn set_server(&mut self, members: &[(&str, Value)], what: &str) -> Result<(), String> {
        let servers = self.table("mcp_servers", what)?;
        let same = servers
            .get("baton")
            .and_then(Item::as_table)
            .is_some_and(|t| {
                t.len() == members.len()
                    && members.iter().all(|(k, v)| {
                        t.get(k)
                            .and_then(Item::as_value)
                            .is_some_and(|have| same_value(have, v))
                    })
            });
        if same {
            return Ok(());
        }
        let mut table = Table::new();
        for (k, v) in members {
            table.insert(k, Item::Value(v.clone()));
        }
        servers.insert("baton", Item::Table(table));
        Ok(())
    }

    pub fn remove_server(&mut self) {
        if let Some(servers) = self.doc.get_mut("mcp_servers").and_then(Item::as_table_mut) {
            servers.remove("baton");
            if servers.is_empty() && servers.is_implicit() {
                self.doc.remove("mcp_servers");
            }
        }
    }

    /// Makes Baton's group of `[[hooks.EVENT]]` be `hook` (found by `mark` in its commands).
    pub fn put_hook(
        &mut self,
        event: &str,
        hook: &Hook,
        mark: &str,
        what: &str,
    ) -> Result<(), String> {
        let hooks = self.table("hooks", what)?;
        let groups = hooks
            .entry(event)
            .or_insert_with(|| Item::ArrayOfTables(ArrayOfTables::new()))
            .as_array_of_tables_mut()
            .ok_or_else(|| {
                format!("{what}: `hooks.{event}` is not a list of tables ([[hooks.{event}]]); fix it, then run `baton setup` again")
            })?;
        let want = group(hook);
        let mut found = false;
        let mut i = 0;
        while i < groups.len() {
            let table = groups.get(i).expect("index in range");
            if !is_ours(table, mark) {
                i += 1;
                continue;
            }
            if found {
                groups.remove(i);
                continue;
            }
            found = true;
            if !same_group(table, &want) {
                *groups.get_mut(i).expect("index in range") = want.clone();
            }
            i += 1;
        }
        if !found {
            groups.push(want);
        }
        Ok(())
    }

    /// Removes Baton's groups of `[[hooks.EVENT]]`, and what that left empty.
    pub fn remove_hook(&mut self, event: &str, mark: &str) {
        let Some(hooks) = self.doc.get_mut("hooks").and_then(Item::as_table_mut) else {
            return;
        };
        if let Some(groups) = hooks.get_mut(event).and_then(Item::as_array_of_tables_mut) {
            groups.retain(|t| !is_ours(t, mark));
            if groups.is_empty() {
                hooks.remove(event);
            }
        }
        if hooks.is_empty() && hooks.is_implicit() {
            self.doc.remove("hooks");
        }
    }
}

fn group(hook: &Hook) -> Table {
    let mut group = Table::new();
    if let Some(matcher) = hook.matcher {
        group.insert("matcher", toml_edit::value(matcher));
    }
    let mut handler = Table::new();
    handler.insert("type", toml_edit::value("command"));
    handler.insert("command", toml_edit::value(hook.command.as_str()));
    handler.insert("timeout", toml_edit::value(hook.timeout));
    let mut handlers = ArrayOfTables::new();
    handlers.push(handler);
    group.insert("hooks", Item::ArrayOfTables(handlers));
    group
}

fn commands(group: &Table) -> Vec<String> {
    let mut found = Vec::new();
    match group.get("hooks") {
        Some(Item::ArrayOfTables(handlers)) => {
            for h in handlers.iter() {
                if let Some(c) = h.get("command").and_then(Item::as_str) {
                    found.push(c.to_string());
                }
            }
        }
        Some(Item::Value(Value::Array(handlers))) => {
            for h in handlers.iter() {
                if let Some(c) = h
                    .as_inline_table()
                    .and_then(|t| t.get("command"))
                    .and_then(Value::as_str)
                {
                    found.push(c.to_string());
                }
            }
        }
        _ => {}
    }
    found
}

fn is_ours(group: &Table, mark: &str) -> bool {
    commands(group).iter().any(|c| c.contains(mark))
}

fn same_group(have: &Table, want: &Table) -> bool {
    have.to_string() == want.to_string()
}

fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::String(x), Value::String(y)) => x.value() == y.value(),
        (Value::Integer(x), Value::Integer(y)) => x.value() == y.value(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(p, q)| same_value(p, q))
        }
        _ => false,
    }
}

/// A TOML array of strings.
pub fn strings(items: &[String]) -> Value {
    let mut array = Array::new();
    for item in items {
        array.push(item.as_str());
    }
    Value::Array(array)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_go_in_and_out_leaving_the_rest_as_written() {
        let before = "# mine\nmodel = \"o3\"\n\n[mcp_servers.other]\ncommand = \"x\" # keep\n";
        let hook = Hook {
            matcher: Some("apply_patch"),
            command: "'b' guard hook codex".into(),
            timeout: 10,
        };
        let mut doc = Doc::parse(before, "config.toml").unwrap();
        doc.set_server(&[("command", toml_edit::Value::from("m"))], "f")
            .unwrap();
        doc.put_hook("PreToolUse", &hook, " guard hook codex", "f")
            .unwrap();
        let once = doc.text();
        assert!(once.starts_with(before), "{once}");
        let mut again = Doc::parse(&once, "f").unwrap();
        again
            .set_server(&[("command", toml_edit::Value::from("m"))], "f")
            .unwrap();
        again
            .put_hook("PreToolUse", &hook, " guard hook codex", "f")
            .unwrap();
        assert_eq!(again.text(), once);
        let mut out = Doc::parse(&once, "f").unwrap();
        out.remove_server();
        out.remove_hook("PreToolUse", " guard hook codex");
        assert_eq!(out.text(), before);
    }
}
