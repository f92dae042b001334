//! `mcp-bridge`: serves Baton's tools to an MCP client over stdio, calling batond on its
//! socket. stdout carries only MCP messages; logs go to stderr.

use std::process::ExitCode;

use clap::Parser;
use rmcp::service::ServerInitializeError;
use rmcp::ServiceExt;

use baton::bridge::stdio::Relay;
use baton::bridge::tools::Group;
use baton::bridge::Bridge;
use baton::client::Target;

/// MCP server (stdio) for Baton: locks, versioned state, tasks and events as tools.
#[derive(Parser)]
#[command(
    name = "mcp-bridge",
    version,
    about = "mcp-bridge: an MCP server over stdio that serves batond's locks, versioned state, tasks and events as tools to MCP clients (Claude Code, Claude Desktop, Cursor, LangChain, ...). stdout carries MCP messages only; logs go to stderr.",
    long_about = None
)]
struct Cli {
    /// batond's socket [default: as batond's: BATON_SOCKET_PATH, else $BATON_HOME/baton.sock]
    #[arg(long, value_name = "PATH")]
    socket: Option<String>,
    /// batond's URL: unix:///PATH, tls://HOST:PORT or tcp://127.0.0.1:PORT [default: BATON_URL, else the socket]
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// Token to authenticate with; prefer BATON_TOKEN, which other users cannot see in `ps` [default: BATON_TOKEN]
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
    /// Tool groups to serve, comma-separated: locks, state, tasks, events, agents, or all
    #[arg(long, value_name = "GROUPS", default_value = "locks,state")]
    tools: String,
    /// The agent this session acts for: the owner of its claims and node leases and the
    /// author of its writes (`--owner` is an alias) [default: the client's name + a random suffix]
    #[arg(long, value_name = "NAME", env = "BATON_AGENT", alias = "owner")]
    agent: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // rmcp logs whole requests and results at debug, lease ids included (a lease id is the
    // holder's credential): whatever RUST_LOG asks, it logs at info at most.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"))
        .add_directive("rmcp=info".parse().expect("a valid directive"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
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
    // An empty BATON_AGENT (an unset shell variable, usually) means no name given.
    let agent = cli.agent.filter(|name| !name.trim().is_empty());
    if agent.as_deref().is_some_and(|name| name.len() > 200) {
        eprintln!("mcp-bridge: --agent (or BATON_AGENT) must be at most 200 bytes");
        return ExitCode::FAILURE;
    }
    let target = match Target::from_flags(
        cli.url.as_deref(),
        cli.socket.as_deref(),
        cli.token.as_deref(),
    ) {
        Ok(target) => target,
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
    let (closing, closed) = tokio::sync::watch::channel(false);
    let bridge = Bridge::new(target, groups, agent).closing_on(closed);
    let code = runtime.block_on(async move {
        let (stdin, stdout) = rmcp::transport::stdio_pipes();
        let relay = Relay::start(stdin, stdout, closing);
        let code = match bridge.serve((relay.input, relay.output)).await {
            Ok(service) => match service.waiting().await {
                Ok(_) => ExitCode::SUCCESS,
                Err(err) => {
                    tracing::error!(%err, "the MCP session ended abnormally");
                    ExitCode::FAILURE
                }
            },
            // The client went away before initializing: nothing to serve, nothing wrong.
            Err(ServerInitializeError::ConnectionClosed(_)) => ExitCode::SUCCESS,
            Err(err) => {
                tracing::error!(%err, "the MCP session did not start");
                ExitCode::FAILURE
            }
        };
        // Everything the session wrote reaches stdout before the process ends.
        let _ = relay.writer.await;
        code
    });
    // stdin may still be held by a blocking read; the session is over, so leave now.
    std::process::exit(if code == ExitCode::SUCCESS { 0 } else { 1 })
}
