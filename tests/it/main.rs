//! The integration tests, one crate so the suite links once. Each test starts the real
//! `batond` binary in a fresh temporary directory (`common::Daemon`) and talks to it over
//! its socket, as users do.

mod agents;
mod bootstrap;
mod bound;
mod common;

mod credentials;
mod dashboard_login;
mod docs;
mod durability;
mod fence;
mod guard;
mod held_already;
mod hooks;
mod https;
mod idempotency;
mod layering;
mod lifecycle;
mod lock_expiry;
mod locks;
mod net;
mod net_limits;
mod operator;
mod paging;
mod postgres;
mod remote;
mod remote_clients;
mod retention;
mod revocation;
mod scopes;
mod setup;
mod shared_locks;
mod state;
mod subscribe;
mod tasks;
mod trust;
mod values;
mod visibility;
mod wire;
