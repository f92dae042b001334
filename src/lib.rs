//! Baton: a local coordination daemon for multi-agent AI systems. Versioned state with
//! optimistic concurrency, leased locks, DAG tasks and a journal of every change, over one
//! JSON line per request on a Unix socket.
//!
//! Layout, top to bottom (imports run downwards only; ARCHITECTURE.md has the map):
//! - `server`: the socket, connections, the sweeper and the daemon's life cycle.
//! - `methods`: one handler per wire method and the rules (state, locks, tasks, agents,
//!   journal, retention); `methods::areas` lists what the rules keep on the writer.
//! - `engine`: the writer thread (batches, group commit, idempotency, the scheduler of
//!   deadlines), generic over the areas it runs and naming none.
//! - `store`: storage. `boundary` is what the rules ask of it (traits); the rest is
//!   SQLite's side of those traits (the SQL of each area, the read pool, migrations).
//! - `protocol`, `json`, `error`: the wire types, value rules and errors, used by all.
//! - `clock`, `config`, `metrics`, `resource_key`: time, settings, counters, lock keys.
//! - `client`, `bridge`: the client side, for the `baton` CLI and `mcp-bridge`.

pub mod bridge;
pub mod client;
pub mod clock;
pub mod config;
pub(crate) mod engine;
pub mod error;
pub(crate) mod json;
pub(crate) mod log_limit;
pub(crate) mod methods;
pub(crate) mod metrics;
pub mod protocol;
pub(crate) mod resource_key;
pub mod server;
pub(crate) mod store;
