//! Pages of the answers that can grow: `limit` (how many), `after` (the cursor the previous
//! page answered as `next`) and a byte budget, so that no answer line passes
//! [`MAX_ANSWER_BYTES`](crate::protocol::limits::MAX_ANSWER_BYTES) however large the store is. Every list follows the same rules: a
//! page holds at most `limit` items and stops early once its items pass [`PAGE_BYTES`]
//! (always holding at least one), and `next` is null only when nothing follows.

use serde::Serialize;

use crate::error::{Error, Result};

pub use crate::protocol::limits::MAX_PAGE;

/// A page stops taking items once they pass this many bytes: with one item at most a
/// stored value (`BATON_MAX_VALUE_BYTES`, at most
/// [`crate::config::MAX_VALUE_BYTES_CAP`]) and its names, the line stays under
/// [`MAX_ANSWER_BYTES`](crate::protocol::limits::MAX_ANSWER_BYTES).
pub const PAGE_BYTES: usize = 8 << 20;

/// `limit` for paged reads: `default` when absent, else 1 to [`MAX_PAGE`].
pub fn page_limit(limit: Option<u64>, default: u64) -> Result<u64> {
    match limit {
        None => Ok(default),
        Some(n @ 1..=MAX_PAGE) => Ok(n),
        Some(n) => Err(Error::Invalid(format!(
            "limit is {n}; it must be 1 to {MAX_PAGE}: ask for a page of at most {MAX_PAGE} and pass the answer's `next` as `after` for the rest"
        ))),
    }
}

/// `limit` for the reads whose default page is 100.
pub fn limit_or_default(limit: Option<u64>) -> Result<u64> {
    page_limit(limit, 100)
}

/// Cuts `items` (a page read with one item more than `limit`, to tell whether more follow)
/// to at most `limit` items and [`PAGE_BYTES`]; true when something follows what is kept.
pub fn cut<T: Serialize>(items: &mut Vec<T>, limit: u64) -> Result<bool> {
    let mut more = items.len() as u64 > limit;
    items.truncate(limit as usize);
    let mut bytes = 0;
    for (kept, item) in items.iter().enumerate() {
        bytes += wire_len(item)?;
        if bytes > PAGE_BYTES && kept > 0 {
            items.truncate(kept);
            more = true;
            break;
        }
    }
    Ok(more)
}

/// The length of an item's JSON text, without writing it anywhere.
fn wire_len<T: Serialize>(item: &T) -> Result<usize> {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, item)?;
    Ok(count.0 + 1)
}

/// A cursor made of several parts (a namespace and a key, a key and a fencing token),
/// spelt as a JSON array so that any part may hold any character.
pub fn cursor<T: Serialize>(parts: &T) -> Result<String> {
    Ok(serde_json::to_string(parts)?)
}

/// Reads a cursor that [`cursor`] made; a cursor from elsewhere is 400 naming what it
/// must be.
pub fn parse_cursor<T: serde::de::DeserializeOwned>(after: &str, method: &str) -> Result<T> {
    serde_json::from_str(after).map_err(|_| {
        Error::Invalid(format!(
            "after `{after}` is not a cursor of {method}; pass the `next` of the previous page unchanged, or omit after to start at the beginning"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_stops_at_its_byte_budget_but_keeps_one_item() {
        let big = "x".repeat(PAGE_BYTES / 4 - 10);
        let mut items = vec![big.clone(); 5];
        assert!(cut(&mut items, 10).unwrap());
        assert_eq!(items.len(), 4);
        let mut one = vec!["y".repeat(PAGE_BYTES + 10)];
        assert!(!cut(&mut one, 10).unwrap());
        assert_eq!(one.len(), 1);
    }

    #[test]
    fn a_page_read_with_one_more_says_more_follow() {
        let mut items = vec![1, 2, 3];
        assert!(cut(&mut items, 2).unwrap());
        assert_eq!(items, vec![1, 2]);
        let mut items = vec![1, 2];
        assert!(!cut(&mut items, 2).unwrap());
    }

    #[test]
    fn cursors_round_trip_and_foreign_ones_are_refused() {
        let text = cursor(&("ns\"/", "key")).unwrap();
        let back: (String, String) = parse_cursor(&text, "Export").unwrap();
        assert_eq!(back, ("ns\"/".to_string(), "key".to_string()));
        let err = parse_cursor::<(String, String)>("nope", "Export").unwrap_err();
        assert!(err.to_string().contains("pass the `next`"), "{err}");
    }
}
