//! Where output goes and how it looks: tables with colour on a terminal, or JSON.

use serde_json::value::RawValue;
use serde_json::Value;

use baton::client::{read, Connection};
use baton::protocol::journal::Event;
use baton::protocol::Request;

use crate::failure::Failure;

/// Where output goes and how it looks.
pub struct Out {
    pub json: bool,
    pub colour: bool,
}

impl Out {
    pub fn paint(&self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub fn status(&self, text: &str) -> String {
        let code = match text {
            "acquired" | "already_held" | "available" | "completed" | "released" | "ok"
            | "COMPLETED" => "32",
            "busy" | "held" | "running" | "RUNNING" | "PENDING" | "timeout" => "33",
            "failed" | "cancelled" | "FAILED" | "CANCELLED" => "31",
            _ => return text.to_string(),
        };
        self.paint(code, text)
    }

    /// The result as batond sent it (for --json).
    pub fn raw(&self, result: &RawValue) {
        println!("{}", pretty(result));
    }

    /// Sends `request`. With --json, prints its result as batond sent it and returns
    /// `None`; else returns the result read as the method's result type, for a table.
    pub async fn answer<R: Request>(
        &self,
        conn: &mut Connection,
        request: &R,
    ) -> Result<Option<R::Result>, Failure> {
        let result = conn.send(request).await?;
        self.result::<R>(&result)
    }

    /// A result of `R` as batond sent it: printed with --json (then `None`), else read as
    /// the method's result type.
    pub fn result<R: Request>(&self, result: &RawValue) -> Result<Option<R::Result>, Failure> {
        if self.json {
            self.raw(result);
            return Ok(None);
        }
        Ok(Some(read::<R>(result)?))
    }

    /// Sends a paged `request`, following `next` until the end or until `total` items of
    /// `fields[0]` have come, and answers as one page: the arrays of `fields` joined, the
    /// rest of the first page, and the last page's `next` (null unless `total` stopped it).
    /// With --json, prints that and returns `None`.
    pub async fn pages<R: Request>(
        &self,
        conn: &mut Connection,
        request: &R,
        fields: &[&str],
        total: Option<u64>,
    ) -> Result<Option<R::Result>, Failure> {
        let method = R::METHOD;
        // The pages differ only in `limit` and `after`, set on the params as sent.
        let mut params =
            serde_json::to_value(request).map_err(|e| Failure::new(1, format!("{method}: {e}")))?;
        let mut joined: Option<Value> = None;
        let mut count = 0u64;
        loop {
            if let Some(total) = total {
                params["limit"] =
                    Value::from((total - count).min(baton::protocol::limits::MAX_PAGE));
            }
            let page: Value = serde_json::from_str(conn.call_raw(method, &params).await?.get())
                .map_err(|e| Failure::new(1, format!("{method} answered what is not JSON: {e}")))?;
            let next = page.get("next").cloned().unwrap_or(Value::Null);
            let whole = joined.get_or_insert_with(|| {
                let mut first = page.clone();
                for field in fields {
                    first[*field] = Value::Array(Vec::new());
                }
                first
            });
            for field in fields {
                if let (Some(Value::Array(items)), Some(Value::Array(all))) =
                    (page.get(*field), whole.get_mut(*field))
                {
                    if field == &fields[0] {
                        count += items.len() as u64;
                    }
                    all.extend(items.iter().cloned());
                }
            }
            whole["next"] = next.clone();
            if whole.get("next_after").is_some() {
                // List's older name for it.
                whole["next_after"] = next.clone();
            }
            if next.is_null() || total.is_some_and(|total| count >= total) {
                break;
            }
            params["after"] = next;
        }
        let whole = joined.unwrap_or(Value::Null);
        if self.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&whole).unwrap_or_default()
            );
            return Ok(None);
        }
        let whole = serde_json::value::to_raw_value(&whole)
            .map_err(|e| Failure::new(1, format!("{method}: {e}")))?;
        Ok(Some(read::<R>(&whole)?))
    }

    /// Rows under a header, columns aligned.
    pub fn table(&self, header: &[&str], rows: &[Vec<String>]) {
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for row in rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(visible_len(cell));
            }
        }
        let line = |cells: Vec<String>| {
            let last = cells.len().saturating_sub(1);
            let mut text = String::new();
            for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
                text.push_str(cell);
                if i < last {
                    text.push_str(&" ".repeat(w - visible_len(cell) + 2));
                }
            }
            text
        };
        let head = line(header.iter().map(|h| h.to_string()).collect());
        println!("{}", self.paint("1", &head));
        for row in rows {
            println!("{}", line(row.clone()));
        }
    }
}

/// Length without ANSI colour codes.
pub fn visible_len(text: &str) -> usize {
    let mut n = 0;
    let mut in_escape = false;
    for c in text.chars() {
        match (in_escape, c) {
            (false, '\x1b') => in_escape = true,
            (true, 'm') => in_escape = false,
            (true, _) => {}
            (false, _) => n += 1,
        }
    }
    n
}

/// JSON as batond sent it, indented.
pub fn pretty(raw: &RawValue) -> String {
    match serde_json::from_str::<Value>(raw.get()) {
        Ok(value) => serde_json::to_string_pretty(&value).unwrap_or_default(),
        Err(_) => raw.get().to_string(),
    }
}

/// A JSON value on one line, cut to `max` characters.
pub fn compact(value: &Value, max: usize) -> String {
    match value {
        Value::String(s) => cut(s, max),
        Value::Null => "-".into(),
        other => cut(&other.to_string(), max),
    }
}

/// JSON as batond sent it, on one line, cut to `max` characters.
pub fn compact_raw(raw: &RawValue, max: usize) -> String {
    match serde_json::from_str::<Value>(raw.get()) {
        Ok(value) => compact(&value, max),
        Err(_) => cut(raw.get(), max),
    }
}

/// `text` cut to `max` characters.
pub fn cut(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        format!("{}...", text.chars().take(max - 3).collect::<String>())
    } else {
        text.to_string()
    }
}

pub fn text(text: &str) -> String {
    cut(text, 200)
}

/// `text`, or `-` when absent.
pub fn or_dash(text: Option<&str>) -> String {
    text.map_or_else(|| "-".into(), self::text)
}

pub fn event_row(e: &Event) -> Vec<String> {
    let subject = match (
        e.namespace.as_deref(),
        e.key.as_deref(),
        e.resource_key.as_deref(),
        e.task_id.as_deref(),
    ) {
        (Some(ns), Some(key), _, _) => format!("{ns}/{key}"),
        (Some(ns), None, _, _) => ns.to_string(),
        (_, _, Some(resource), _) => resource.to_string(),
        (_, _, _, Some(task)) => match e.node_id.as_deref() {
            Some(node) => format!("{task} {node}"),
            None => task.to_string(),
        },
        _ => "-".to_string(),
    };
    vec![
        e.seq.to_string(),
        text(&e.at),
        text(&e.kind),
        subject,
        or_dash(e.actor.as_deref()),
        compact_raw(&e.data, 60),
    ]
}
