//! The Rust clients over TLS with a token: the `baton` CLI and `mcp-bridge`, by URL.

use std::io::Write;

use serde_json::json;

use crate::net::{tls_daemon, token, TestCa};

/// Runs `baton` with `args` against the daemon's TLS listener, authenticating with
/// `token`; returns (exit code, stdout, stderr).
fn baton_cli(ca: &TestCa, url: &str, token: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("--url")
        .arg(url)
        .args(args)
        .env("BATON_TOKEN", token)
        .env("BATON_TLS_CA", ca.ca())
        .env_remove("BATON_URL")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_cli_works_over_tls_with_a_token() {
    let ca = TestCa::new("Baton test CA");
    let daemon = tls_daemon(&ca, &[]);
    let url = format!("tls://localhost:{}", daemon.listening("tls").port());
    // An admin makes a narrow token with the CLI, over the Unix socket.
    let made = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["--socket", daemon.socket_path().to_str().unwrap()])
        .args([
            "token",
            "create",
            "cli-agent",
            "--scope",
            "kv:write:app",
            "--ttl",
            "3600",
        ])
        .env_remove("BATON_URL")
        .env_remove("BATON_TOKEN")
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let secret = String::from_utf8(made.stdout).unwrap().trim().to_string();
    assert!(secret.starts_with("baton_"), "{secret}");

    let (code, _, err) = baton_cli(&ca, &url, &secret, &["set", "app", "k", "41"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = baton_cli(&ca, &url, &secret, &["get", "app", "k"]);
    assert_eq!((code, out.trim()), (0, "41"));
    // Outside the grant: 403, exit 77, the message names the grant.
    let (code, _, err) = baton_cli(&ca, &url, &secret, &["get", "other", "k"]);
    assert_eq!(code, 77, "{err}");
    assert!(err.contains("kv:read:other"), "{err}");
    // A wrong token: 401, exit 77; never echoed.
    let (code, _, err) = baton_cli(&ca, &url, "baton_wrong", &["get", "app", "k"]);
    assert_eq!(code, 77, "{err}");
    assert!(!err.contains("baton_wrong"), "{err}");
    // A CA that did not sign batond's certificate: unreachable, exit 69.
    let other = TestCa::new("Other CA");
    let (code, _, err) = baton_cli(&other, &url, &secret, &["get", "app", "k"]);
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("BATON_TLS_CA"), "{err}");
    // The admin lists and revokes it.
    let listed = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([
            "--socket",
            daemon.socket_path().to_str().unwrap(),
            "token",
            "list",
        ])
        .env_remove("BATON_URL")
        .output()
        .unwrap();
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(
        listed.contains("cli-agent") && !listed.contains(&secret),
        "{listed}"
    );
}

#[test]
fn the_mcp_bridge_works_over_tls_with_a_token() {
    use std::io::BufRead;
    let ca = TestCa::new("Baton test CA");
    let daemon = tls_daemon(&ca, &[]);
    let secret = token(&daemon, &["kv:write:notes"]);
    let url = format!("tls://127.0.0.1:{}", daemon.listening("tls").port());
    let mut bridge = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-bridge"))
        .args(["--url", &url, "--tools", "state"])
        .env("BATON_TOKEN", &secret)
        .env("BATON_TLS_CA", ca.ca())
        .env_remove("BATON_URL")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = bridge.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(bridge.stdout.take().unwrap());
    let mut send = |v: serde_json::Value| writeln!(stdin, "{v}").unwrap();
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}}),
    );
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "baton_set", "arguments": {"namespace": "notes", "key": "k", "value": "hi", "expected_version": 0}}}),
    );
    send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "baton_get", "arguments": {"namespace": "private", "key": "k"}}}),
    );
    let mut answers = std::collections::HashMap::new();
    while answers.len() < 3 {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the bridge ended early"
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if let Some(id) = v["id"].as_i64() {
            answers.insert(id, v);
        }
    }
    let set = &answers[&2]["result"];
    assert_eq!(set["isError"], json!(false), "{set}");
    assert_eq!(set["structuredContent"]["version"], 1, "{set}");
    let denied = &answers[&3]["result"];
    assert_eq!(denied["isError"], json!(true), "{denied}");
    assert!(denied.to_string().contains("kv:read:private"), "{denied}");
    drop(stdin);
    let _ = bridge.wait();
    assert_eq!(daemon.client().get("notes", "k")["value"], "hi");
}
