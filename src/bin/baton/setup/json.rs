//! Edits of JSON config files that keep everything else as written: comments, member order,
//! indentation and spacing (jsonc-parser's CST; a file it creates is indented by two spaces).
//! Baton's entries are found by their content (`Ours`), so a second run finds them again.

use jsonc_parser::cst::{CstArray, CstInputValue, CstNode, CstObject, CstRootNode};
use jsonc_parser::ParseOptions;
use serde_json::Value;

/// A JSON value with its members in the order to write them.
#[derive(Clone)]
pub enum J {
    Str(String),
    Num(u64),
    Arr(Vec<J>),
    Obj(Vec<(&'static str, J)>),
}

impl From<&str> for J {
    fn from(s: &str) -> J {
        J::Str(s.to_string())
    }
}

impl From<String> for J {
    fn from(s: String) -> J {
        J::Str(s)
    }
}

impl J {
    fn input(&self) -> CstInputValue {
        match self {
            J::Str(s) => CstInputValue::String(s.clone()),
            J::Num(n) => CstInputValue::Number(n.to_string()),
            J::Arr(items) => CstInputValue::Array(items.iter().map(J::input).collect()),
            J::Obj(members) => CstInputValue::Object(
                members
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.input()))
                    .collect(),
            ),
        }
    }

    fn value(&self) -> Value {
        match self {
            J::Str(s) => Value::from(s.as_str()),
            J::Num(n) => Value::from(*n),
            J::Arr(items) => Value::Array(items.iter().map(J::value).collect()),
            J::Obj(members) => Value::Object(
                members
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.value()))
                    .collect(),
            ),
        }
    }
}

/// Tells Baton's entries from everyone else's.
pub type Ours<'a> = &'a dyn Fn(&Value) -> bool;

/// A config file's text, parsed; `what` names the file in errors.
pub struct Doc {
    root: CstRootNode,
}

impl Doc {
    pub fn parse(text: &str, what: &str) -> Result<Doc, String> {
        let root = CstRootNode::parse(text, &ParseOptions::default()).map_err(|e| {
            format!("{what} is not valid JSON ({e}); fix it, then run `baton setup` again")
        })?;
        if root.value().is_some_and(|v| v.as_object().is_none()) {
            return Err(format!(
                "{what} does not hold a JSON object; fix it, then run `baton setup` again"
            ));
        }
        Ok(Doc { root })
    }

    pub fn text(&self) -> String {
        let text = self.root.to_string();
        if text.ends_with('\n') {
            text
        } else {
            text + "\n"
        }
    }

    fn top(&self) -> CstObject {
        self.root.object_value_or_set()
    }

    /// The object at `path` below the top, created where missing; Err when a member on the
    /// way is not an object.
    fn object_at(&self, path: &[&str], what: &str) -> Result<CstObject, String> {
        let mut obj = self.top();
        for name in path {
            obj = match obj.get(name) {
                Some(prop) => prop.object_value().ok_or_else(|| {
                    format!(
                        "{what}: `{name}` is not an object; fix it, then run `baton setup` again"
                    )
                })?,
                None => obj.object_value_or_set(name),
            };
        }
        Ok(obj)
    }

    /// Sets member `name` of the object at `path` to `value`, unless it already is.
    pub fn set(&self, path: &[&str], name: &str, value: &J, what: &str) -> Result<(), String> {
        let obj = self.object_at(path, what)?;
        match obj.get(name) {
            Some(prop) => {
                let same = prop
                    .value()
                    .and_then(|v| v.to_serde_value())
                    .is_some_and(|v| v == value.value());
                if !same {
                    prop.set_value(value.input());
                }
            }
            None => {
                obj.append(name, value.input());
            }
        }
        Ok(())
    }

    /// Member `name` of the top object, if it is there.
    pub fn top_member(&self, name: &str) -> Option<Value> {
        self.top()
            .get(name)
            .and_then(|p| p.value())
            .and_then(|v| v.to_serde_value())
    }

    /// The array at `path` (its last name the array's), created where missing.
    fn array_at(&self, path: &[&str], what: &str) -> Result<CstArray, String> {
        let (name, parents) = path.split_last().expect("a path");
        let obj = self.object_at(parents, what)?;
        match obj.get(name) {
            Some(prop) => prop.array_value().ok_or_else(|| {
                format!(
                    "{what}: `{}` is not a list; fix it, then run `baton setup` again",
                    path.join(".")
                )
            }),
            None => Ok(obj.array_value_or_set(name)),
        }
    }

    /// Makes Baton's entry of the array at `path` be `entry`: the first of ours is set to it
    /// in place, any other of ours goes, and it is appended when there was none.
    pub fn put_entry(
        &self,
        path: &[&str],
        entry: &J,
        ours: Ours,
        what: &str,
    ) -> Result<(), String> {
        let array = self.array_at(path, what)?;
        let mut found = false;
        for (index, element) in array.elements().into_iter().enumerate() {
            let Some(value) = element.to_serde_value() else {
                continue;
            };
            if !ours(&value) {
                continue;
            }
            if found {
                element.remove();
            } else {
                found = true;
                if value != entry.value() {
                    element.remove();
                    array.insert(index, entry.input());
                }
            }
        }
        if !found {
            array.append(entry.input());
        }
        Ok(())
    }

    /// Removes Baton's entries of the array at `path`, then the array, and the objects on
    /// the way, when that left them empty.
    pub fn remove_entries(&self, path: &[&str], ours: Ours) {
        let Some(array) = self.find(path).and_then(|n| n.as_array()) else {
            return;
        };
        for element in array.elements() {
            if element.to_serde_value().is_some_and(|v| ours(&v)) {
                element.remove();
            }
        }
        self.prune(path);
    }

    /// Removes member `name` of the object at `path`, then the objects on the way when that
    /// left them empty.
    pub fn remove_member(&self, path: &[&str], name: &str) {
        let Some(obj) = self.find(path).and_then(|n| n.as_object()) else {
            return;
        };
        if let Some(prop) = obj.get(name) {
            prop.remove();
        }
        let mut full: Vec<&str> = path.to_vec();
        full.push(name);
        self.prune(&full);
    }

    /// The value at `path`, if every step is there.
    fn find(&self, path: &[&str]) -> Option<CstNode> {
        let mut obj = self.root.object_value()?;
        let (last, parents) = path.split_last()?;
        for name in parents {
            obj = obj.get(name)?.object_value()?;
        }
        obj.get(last)?.value()
    }

    /// Removes the (now) empty containers at `path` and above it.
    fn prune(&self, path: &[&str]) {
        for depth in (1..=path.len()).rev() {
            let here = &path[..depth];
            let empty = match self.find(here) {
                Some(node) => match (node.as_array(), node.as_object()) {
                    (Some(array), _) => array.elements().is_empty(),
                    (_, Some(obj)) => obj.properties().is_empty(),
                    _ => false,
                },
                None => true,
            };
            if !empty {
                return;
            }
            let (name, parents) = here.split_last().expect("a path");
            let parent = if parents.is_empty() {
                self.root.object_value()
            } else {
                self.find(parents).and_then(|n| n.as_object())
            };
            if let Some(prop) = parent.and_then(|p| p.get(name)) {
                prop.remove();
            }
        }
    }
}

/// Whether any `command` string inside `value` contains `needle`.
pub fn has_command(value: &Value, needle: &str) -> bool {
    match value {
        Value::Object(members) => members.iter().any(|(k, v)| {
            (k == "command" && v.as_str().is_some_and(|c| c.contains(needle)))
                || has_command(v, needle)
        }),
        Value::Array(items) => items.iter().any(|v| has_command(v, needle)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_goes_in_and_out_leaving_the_rest_as_written() {
        let before = "{\n    // mine\n    \"model\": \"x\",\n    \"hooks\": {\"Stop\": [{\"hooks\": [{\"type\": \"command\", \"command\": \"fmt\"}]}]}\n}\n";
        let doc = Doc::parse(before, "settings.json").unwrap();
        let entry = J::Obj(vec![(
            "hooks",
            J::Arr(vec![J::Obj(vec![
                ("type", "command".into()),
                ("command", "b hook stop x".into()),
            ])]),
        )]);
        let ours = |v: &Value| has_command(v, " hook stop x");
        doc.put_entry(&["hooks", "Stop"], &entry, &ours, "f")
            .unwrap();
        doc.set(
            &["mcpServers"],
            "baton",
            &J::Obj(vec![("command", "m".into())]),
            "f",
        )
        .unwrap();
        let once = doc.text();
        assert!(
            once.starts_with("{\n    // mine\n    \"model\": \"x\","),
            "{once}"
        );
        // Again: nothing changes.
        let again = Doc::parse(&once, "f").unwrap();
        again
            .put_entry(&["hooks", "Stop"], &entry, &ours, "f")
            .unwrap();
        again
            .set(
                &["mcpServers"],
                "baton",
                &J::Obj(vec![("command", "m".into())]),
                "f",
            )
            .unwrap();
        assert_eq!(again.text(), once);
        // Out again.
        let out = Doc::parse(&once, "f").unwrap();
        out.remove_entries(&["hooks", "Stop"], &ours);
        out.remove_member(&["mcpServers"], "baton");
        let value: Value = serde_json::from_str(&out.text().replace("// mine", "")).unwrap();
        assert_eq!(value["hooks"]["Stop"][0]["hooks"][0]["command"], "fmt");
        assert!(value.get("mcpServers").is_none(), "{}", out.text());
    }
}
