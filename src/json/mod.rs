//! The contract's rules for JSON that the daemon stores, on the exact text a client sent.
//!
//! A value (`value`, `payload`, `result`, `metadata`, `context`, `error`) is kept as the
//! client's text, so it comes back digit for digit and in the same key order. Before it is
//! stored, [`check_value`] refuses what some client could not read back: a number beyond
//! the double range (`1e400`), an integer literal beyond 2^63 - 1 in magnitude (most
//! clients would lose digits; `-9223372036854775808` is refused too, so the rule is the same
//! for both signs), a lone surrogate in a `\u` escape, or nesting deeper than
//! [`MAX_DEPTH`](value::MAX_DEPTH). A float that underflows to zero (`1e-400`) is accepted: every client
//! reads it, as 0.
//!
//! [`canonical_without`] is the text the idempotency digest is taken over: the same request spelt
//! with other whitespace, key order or string escapes gives the same text; numbers keep
//! their exact spelling, so `1.0` and `1` (or two doubles that differ in their last digit)
//! are different requests.
//!
//! [`int_param`] and [`opt_int_param`] bound integer params to what SQLite's signed
//! 64-bit integers hold, so an out-of-range `since_seq` is -32602 at parse time.
//!
//! Everything here works on text that serde_json has already accepted as JSON.

mod canonical;
mod params;
mod value;

pub use canonical::canonical_without;
pub use params::{expected_version, int_param, opt_int_param};
pub use value::check_value;
