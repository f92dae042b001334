//! Baton: a local coordination daemon for multi-agent AI systems. Versioned state with
//! optimistic concurrency, a journal of every change, over one JSON line per request on a
//! Unix socket. See ARCHITECTURE.md for the map.

pub mod app;
pub mod bridge;
pub mod client;
pub mod clock;
pub mod config;
pub mod error;
pub mod json;
pub mod methods;
pub mod metrics;
pub mod protocol;
pub mod resource_key;
pub mod server;
pub mod store;
