//! `batond`: the Baton daemon. Parses flags, sets up logging, runs the server.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

use baton::clock::{Clock, ManualClock, SystemClock};
use baton::config::{Config, Flags};

/// jemalloc: a request's memory is allocated on a connection thread and freed on the
/// writer, and glibc's malloc frees it under the other thread's arena lock (see
/// Cargo.toml).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Baton: the local coordination daemon for multi-agent AI systems.
#[derive(Parser)]
#[command(version, about, long_about = None, args_override_self = true)]
struct Cli {
    #[command(flatten)]
    flags: Flags,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let config = match Config::from_process(&cli.flags) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("batond: {err}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("batond: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let clock: Arc<dyn Clock> = match config.test_clock_ms {
        Some(wall_ms) => {
            tracing::warn!(
                wall_ms,
                "BATON_TEST_CLOCK_MS is set: time stands still until a client calls AdvanceClock; leases never expire by themselves. This is for tests only"
            );
            Arc::new(ManualClock::new(wall_ms))
        }
        None if config.test_clock_skew_ms != 0 => {
            tracing::warn!(
                skew_ms = config.test_clock_skew_ms,
                "BATON_TEST_CLOCK_SKEW_MS is set: this daemon's clock runs off. This is for tests only"
            );
            Arc::new(SystemClock::skewed(config.test_clock_skew_ms))
        }
        None => Arc::new(SystemClock::new()),
    };
    match runtime.block_on(baton::server::run(config, clock)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("batond: {err}");
            ExitCode::FAILURE
        }
    }
}
