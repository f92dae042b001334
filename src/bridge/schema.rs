//! The subset of JSON Schema the tool catalogue uses: constructors for its input and
//! output schemas, and the check of a call's arguments against them, which says in words
//! what to send instead (a model reads it and corrects the call).

use serde_json::{json, Map, Value};

/// What a JSON value is, in words.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a number with a fraction",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// What a schema asks for, in words.
fn wanted(schema: &Value) -> String {
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        let options: Vec<String> = options
            .iter()
            .map(|o| o.as_str().map_or_else(|| o.to_string(), str::to_string))
            .collect();
        return format!("one of {}", options.join(", "));
    }
    let ty = schema.get("type").and_then(Value::as_str).unwrap_or("");
    let base = match ty {
        "string" => "a string".to_string(),
        "boolean" => "true or false".to_string(),
        "object" => "a JSON object".to_string(),
        "array" => "an array".to_string(),
        "number" => "a number".to_string(),
        "integer" => {
            let min = schema.get("minimum").and_then(Value::as_u64);
            let max = schema.get("maximum").and_then(Value::as_u64);
            match (min, max) {
                (Some(min), Some(max)) => format!("an integer from {min} to {max}"),
                (Some(0), None) => "a non-negative integer".to_string(),
                (Some(min), None) => format!("an integer of at least {min}"),
                _ => "an integer".to_string(),
            }
        }
        _ => "any JSON value".to_string(),
    };
    base
}

/// The message for a required field that is absent: what to send, and what it is for.
pub fn missing(name: &str, schema: &Value) -> String {
    let about = schema
        .get("description")
        .and_then(Value::as_str)
        .map(|d| format!(" ({})", d.trim_end_matches('.')))
        .unwrap_or_default();
    format!("\"{name}\" is missing; send {}{about}", wanted(schema))
}

/// Checks `value` against the subset of JSON Schema the catalogue uses; `path` names the
/// value in the message ("" for the arguments object itself).
pub fn check(schema: &Value, value: &Value, path: &str) -> Result<(), String> {
    let name = |field: &str| {
        if path.is_empty() {
            field.to_string()
        } else {
            format!("{path}.{field}")
        }
    };
    if let Some(branches) = schema.get("anyOf").and_then(Value::as_array) {
        if !branches.iter().any(|b| check(b, value, path).is_ok()) {
            return Err(format!(
                "\"{path}\" is {}; send {}",
                json_type(value),
                wanted(schema)
            ));
        }
    }
    let ty = schema.get("type").and_then(Value::as_str).unwrap_or("");
    let type_ok = match ty {
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        _ => true,
    };
    if !type_ok {
        return Err(format!(
            "\"{path}\" is {}; send {}",
            json_type(value),
            wanted(schema)
        ));
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        if !options.contains(value) {
            return Err(format!("\"{path}\" is {value}; send {}", wanted(schema)));
        }
    }
    if let Some(n) = value.as_f64() {
        let min = schema.get("minimum").and_then(Value::as_f64);
        let max = schema.get("maximum").and_then(Value::as_f64);
        if min.is_some_and(|min| n < min) || max.is_some_and(|max| n > max) {
            return Err(format!("\"{path}\" is {value}; send {}", wanted(schema)));
        }
    }
    if let Value::Array(items) = value {
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64) {
            if (items.len() as u64) < min {
                return Err(format!(
                    "\"{path}\" has {} items; send at least {min}",
                    items.len()
                ));
            }
        }
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64) {
            if items.len() as u64 > max {
                return Err(format!(
                    "\"{path}\" has {} items; send at most {max}",
                    items.len()
                ));
            }
        }
        if let Some(item) = schema.get("items") {
            for (i, v) in items.iter().enumerate() {
                check(item, v, &format!("{path}[{i}]"))?;
            }
        }
    }
    if let Value::Object(fields) = value {
        let empty = Map::new();
        let properties = schema
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
            if let Some(unknown) = fields.keys().find(|k| !properties.contains_key(*k)) {
                let known: Vec<&str> = properties.keys().map(String::as_str).collect();
                let what = if path.is_empty() {
                    format!("there is no argument \"{unknown}\"")
                } else {
                    format!("\"{path}\" has no field \"{unknown}\"")
                };
                return Err(format!("{what}; send only {}", known.join(", ")));
            }
        }
        for required in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !fields.contains_key(required) {
                return Err(missing(&name(required), &properties[required]));
            }
        }
        for (field, v) in fields {
            if let Some(sub) = properties.get(field) {
                check(sub, v, &name(field))?;
            }
        }
    }
    Ok(())
}

pub fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

pub fn integer(description: &str) -> Value {
    json!({"type": "integer", "minimum": 0, "description": description})
}

pub fn boolean(description: &str) -> Value {
    json!({"type": "boolean", "description": description})
}

pub fn object(description: &str) -> Value {
    json!({"type": "object", "description": description})
}

/// An integer from `min` to `max`: the limits the daemon enforces.
pub fn bounded(description: &str, min: u64, max: u64) -> Value {
    json!({"type": "integer", "minimum": min, "maximum": max, "description": description})
}

/// Any JSON value as an input property: typed, since a host may hand the input schema to
/// a model API that wants a type on every property (and the contract says so), one
/// branch per JSON type because a `type` array is refused by Gemini's function
/// declarations (a 400 for every request that lists the tool) and by ajv in strict mode.
/// The MCP Inspector (0.x/1.x and 2.x alike) shows such a field as a JSON editor, so
/// any value can be sent from it. An output schema holds the same field without the
/// branches (see `output`).
pub fn any(description: &str) -> Value {
    let mut schema = any_json();
    schema["description"] = json!(description);
    schema
}

fn any_json() -> Value {
    json!({"anyOf": [
        {"type": "object"}, {"type": "array"}, {"type": "string"},
        {"type": "number"}, {"type": "boolean"}, {"type": "null"}
    ]})
}

/// `schema` with every any-JSON field made by `any` reduced to its annotations (an
/// untyped schema admits exactly every JSON value, as the branches did).
fn untyped_any(schema: &mut Value) {
    let branches = any_json()["anyOf"].take();
    fn walk(schema: &mut Value, branches: &Value) {
        match schema {
            Value::Object(map) => {
                if map.get("anyOf") == Some(branches) {
                    map.remove("anyOf");
                }
                map.values_mut().for_each(|v| walk(v, branches));
            }
            Value::Array(items) => items.iter_mut().for_each(|v| walk(v, branches)),
            _ => {}
        }
    }
    walk(schema, &branches);
}

/// A write's `fence`: the `fence` baton_claim returns (`{resource_key, lease_id}`), or a
/// claim's `{resource_key, fencing_token}`; batond refuses a fence that names both or
/// neither, saying so. Three of the default tools take it, so its words are few: the
/// field names say what baton_claim's answer holds.
pub fn fence() -> Value {
    json!({
        "type": "object",
        "description": "The fence baton_claim returned, as it is: the write applies only while that claim is live, else nothing is written (with fencing_token instead of lease_id: while no newer claim exists).",
        "properties": {
            "resource_key": {"type": "string"},
            "lease_id": {"type": "string"},
            "fencing_token": {"type": "integer", "minimum": 0}
        },
        "required": ["resource_key"],
        "additionalProperties": false
    })
}

pub fn strings(description: &str) -> Value {
    json!({"type": "array", "items": {"type": "string"}, "description": description})
}

/// An output schema: an object with these properties, the listed ones always present.
/// Other properties are allowed, so the daemon may add fields without breaking clients.
///
/// Its any-JSON fields carry no type: clients check every result against this schema,
/// and the MCP Python SDK 1.x (what LangChain's adapters install) compiles it again for
/// each result, checking it against the 2020-12 metaschema at a cost that grows with its
/// subschemas: with the six branches of `any`, a baton_get result's check took 2.3 times
/// as long (docs/performance.md, "MCP").
pub fn output(required: &[&str], properties: Value) -> Value {
    let mut schema = json!({"type": "object", "properties": properties, "required": required});
    untyped_any(&mut schema);
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANY: [&str; 7] = [
        "{\"a\": [1]}",
        "[1, \"x\"]",
        "\"text\"",
        "1.5",
        "-2",
        "true",
        "null",
    ];

    #[test]
    fn any_json_is_typed_in_an_input_and_untyped_in_an_output() {
        let input = any("The new value.");
        assert_eq!(input["anyOf"].as_array().map(Vec::len), Some(6));
        for value in ANY {
            let value: Value = serde_json::from_str(value).unwrap();
            assert_eq!(check(&input, &value, "value"), Ok(()), "{value}");
        }
        let out = output(
            &["value"],
            json!({"value": any("The stored value."), "n": integer("A count.")}),
        );
        assert_eq!(
            out["properties"]["value"],
            json!({"description": "The stored value."})
        );
        assert_eq!(out["properties"]["n"], integer("A count."));
        // A nested any-JSON field loses its branches too; other anyOfs stay.
        let nested = output(
            &[],
            json!({"x": {"type": "object", "properties": {"v": any("v")}}, "to": {"anyOf": [{"type": "string"}, {"type": "null"}]}}),
        );
        assert_eq!(
            nested["properties"]["x"]["properties"]["v"],
            json!({"description": "v"})
        );
        assert_eq!(
            nested["properties"]["to"]["anyOf"].as_array().map(Vec::len),
            Some(2)
        );
    }
}
