//! `mcp-bridge`: serves Baton's tools to an MCP client over stdio, calling batond on its
//! socket. stdout carries only MCP messages; logs go to stderr.

use std::process::ExitCode;

use clap::Parser;
use rmcp::service::ServerInitializeError;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

use baton::bridge::tools::Group;
use baton::bridge::Bridge;
use baton::config::{Config, Flags};

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
    /// Tool groups to serve, comma-separated: locks, state, tasks, events, or all
    #[arg(long, value_name = "GROUPS", default_value = "locks,state")]
    tools: String,
    /// The agent this session acts for: the owner of its claims and node leases and the
    /// author of its writes (`--owner` is an alias) [default: the client's name + a random suffix]
    #[arg(long, value_name = "NAME", env = "BATON_AGENT", alias = "owner")]
    agent: Option<String>,
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
    // An empty BATON_AGENT (an unset shell variable, usually) means no name given.
    let agent = cli.agent.filter(|name| !name.trim().is_empty());
    if agent.as_deref().is_some_and(|name| name.len() > 200) {
        eprintln!("mcp-bridge: --agent (or BATON_AGENT) must be at most 200 bytes");
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
    let (closing, closed) = tokio::sync::watch::channel(false);
    let bridge = Bridge::new(config.socket_path, groups, agent).closing_on(closed);
    let code = runtime.block_on(async move {
        let (stdin, stdout) = rmcp::transport::stdio_pipes();
        let (feed, input) = tokio::io::duplex(1 << 16);
        tokio::spawn(forward_stdin(stdin, feed, closing));
        let service = match bridge.serve((input, stdout)).await {
            Ok(service) => service,
            // The client went away before initializing: nothing to serve, nothing wrong.
            Err(ServerInitializeError::ConnectionClosed(_)) => return ExitCode::SUCCESS,
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

/// Passes the client's lines on to the MCP service, with two repairs rmcp does not make:
/// a line that is not JSON is logged (rmcp drops it silently) and skipped, and a
/// `tools/call` without a `name` gets an empty one, so it is answered -32602 (invalid
/// params, naming the tools) rather than -32601 (method not found). When stdin ends it
/// tells the bridge, which ends its waiting calls at once: the client is gone, and rmcp
/// would otherwise hold the exit for up to 5 s waiting for their answers.
async fn forward_stdin(
    stdin: impl AsyncRead + Unpin,
    mut feed: impl AsyncWrite + Unpin,
    closing: tokio::sync::watch::Sender<bool>,
) {
    let mut stdin = BufReader::new(stdin);
    let mut line = Vec::new();
    loop {
        line.clear();
        match stdin.read_until(b'\n', &mut line).await {
            Ok(0) => break,
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(%err, "reading stdin failed; ending the session");
                break;
            }
        }
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        let mut message: Value = match serde_json::from_slice(text) {
            Ok(message) => message,
            Err(err) => {
                tracing::warn!(%err, bytes = text.len(), "a line on stdin is not JSON; ignored");
                continue;
            }
        };
        let nameless_call = message["method"] == "tools/call"
            && !message
                .get("params")
                .and_then(|p| p.get("name"))
                .is_some_and(Value::is_string);
        let written = if nameless_call {
            match message.get_mut("params") {
                Some(Value::Object(params)) => {
                    params.insert("name".into(), json!(""));
                }
                _ => message["params"] = json!({"name": ""}),
            }
            let mut repaired = serde_json::to_vec(&message).unwrap_or_default();
            repaired.push(b'\n');
            feed.write_all(&repaired).await
        } else {
            let end = line.len();
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            let written = feed.write_all(&line).await;
            line.truncate(end);
            written
        };
        if written.is_err() {
            break; // the service has ended
        }
    }
    let _ = closing.send(true);
    drop(feed);
}
