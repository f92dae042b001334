//! `mcp-bridge`: serves Baton's tools to an MCP client over stdio, calling batond on its
//! socket. stdout carries only MCP messages; logs go to stderr.

use std::process::ExitCode;

use clap::Parser;
use rmcp::ServiceExt;

use baton::bridge::tools::Group;
use baton::bridge::Bridge;
use baton::config::{Config, Flags};

/// MCP server (stdio) for Baton: locks, versioned state, tasks and events as tools.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    /// batond's socket [default: as batond's: BATON_SOCKET_PATH, else $BATON_HOME/baton.sock]
    #[arg(long, value_name = "PATH")]
    socket: Option<String>,
    /// Tool groups to serve, comma-separated: locks, state, tasks, events, or all
    #[arg(long, value_name = "GROUPS", default_value = "locks,state")]
    tools: String,
    /// Owner name for this session's claims [default: the client's name + a random suffix]
    #[arg(long, value_name = "NAME")]
    owner: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let groups = match Group::parse_list(&cli.tools) {
        Ok(groups) => groups,
        Err(err) => {
            eprintln!("mcp-bridge: {err}");
            return ExitCode::FAILURE;
        }
    };
    if cli
        .owner
        .as_deref()
        .is_some_and(|o| o.is_empty() || o.len() > 200)
    {
        eprintln!("mcp-bridge: --owner must be 1 to 200 bytes");
        return ExitCode::FAILURE;
    }
    let flags = Flags {
        socket: cli.socket,
        ..Flags::default()
    };
    let config = match Config::from_process(&flags) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("mcp-bridge: {err}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("mcp-bridge: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let bridge = Bridge::new(config.socket_path, groups, cli.owner);
    let code = runtime.block_on(async move {
        let service = match bridge.serve(rmcp::transport::stdio_pipes()).await {
            Ok(service) => service,
            Err(err) => {
                tracing::error!(%err, "the MCP session did not start");
                return ExitCode::FAILURE;
            }
        };
        match service.waiting().await {
            Ok(_) => ExitCode::SUCCESS,
            Err(err) => {
                tracing::error!(%err, "the MCP session ended abnormally");
                ExitCode::FAILURE
            }
        }
    });
    // stdin may still be held by a blocking read; the session is over, so leave now.
    std::process::exit(if code == ExitCode::SUCCESS { 0 } else { 1 })
}
