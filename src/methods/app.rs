//! Everything a request handler may need, shared by all connections: built by the server
//! at start, lent to each handler through `methods::Ctx`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::value::RawValue;

use crate::clock::Clock;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::protocol::notify::QueuedEverywhere;
use crate::store::Store;

use super::areas::Writer;
use super::{self as methods, system};

pub struct App {
    pub config: Config,
    /// The read side of storage.
    pub store: Store,
    /// The one writer: every change goes through it.
    pub writer: Writer,
    pub clock: Arc<dyn Clock>,
    pub metrics: Metrics,
    /// Revoked tokens and the failure log, shared by every connection.
    pub auth: methods::auth::Registry,
    /// Subscription events queued on every connection together, and their bound.
    pub subscribers: Arc<QueuedEverywhere>,
    /// This daemon's id, new at every start.
    pub instance_id: String,
    /// The dashboard's address (`https://HOST:PORT/`), once the HTTP listener is bound.
    pub dashboard: OnceLock<String>,
    started: Duration,
    describe: OnceLock<Box<RawValue>>,
}

impl App {
    pub fn new(config: Config, store: Store, writer: Writer, clock: Arc<dyn Clock>) -> App {
        let instance_id = store.instance_id.clone();
        let subscribers = Arc::new(QueuedEverywhere::new(config.max_subscriber_bytes));
        App {
            config,
            store,
            writer,
            instance_id,
            dashboard: OnceLock::new(),
            started: clock.monotonic(),
            clock,
            metrics: Metrics::new(methods::METHOD_NAMES),
            auth: Default::default(),
            subscribers,
            describe: OnceLock::new(),
        }
    }

    pub fn uptime(&self) -> Duration {
        self.clock.monotonic().saturating_sub(self.started)
    }

    /// The DescribeInterface answer, generated once from the method types.
    pub fn describe_interface(&self) -> &RawValue {
        self.describe.get_or_init(|| {
            let result = system::DescribeInterfaceResult {
                protocol: system::PROTOCOL.into(),
                version: env!("CARGO_PKG_VERSION").into(),
                methods: methods::describe_all(),
                errors: system::error_table(),
                limits: system::EnforcedLimits::of(&self.config),
            };
            serde_json::value::to_raw_value(&result).expect("the interface description serializes")
        })
    }
}

/// Shared handle to the application state.
pub type SharedApp = Arc<App>;
