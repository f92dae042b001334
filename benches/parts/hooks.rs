//! The harness hooks (`BATON_BENCH_ONLY=hooks`): the wall time of one whole `baton` process
//! per hook, as a harness waits for it (start, read the recorded input on stdin, ask batond,
//! answer, exit), beside a process that does nothing (`true`) for the cost of starting one.
//! On a daemon of its own whose workspace holds the files, with an agent that has mail, a
//! claim and a file another agent holds, so every hook has something to say.

use std::io::Write;

use super::*;

/// Wall times of `runs` processes of `baton args` fed `input`, sorted.
fn time_runs(
    program: &str,
    args: &[&str],
    input: &str,
    env: &[(&str, String)],
    runs: usize,
) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let started = Instant::now();
        let mut child = cmd.spawn().expect("start a hook");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait().unwrap();
        samples.push(started.elapsed());
    }
    samples.sort();
    samples
}

fn fixture(harness: &str, name: &str, root: &Path) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hooks")
        .join(harness)
        .join(name);
    std::fs::read_to_string(path)
        .expect("a recorded hook input")
        .replace("$ROOT", root.to_str().unwrap())
}

pub async fn measure(rows: &mut Vec<Row>, runs: usize) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("project");
    std::fs::create_dir_all(root.join("src")).unwrap();
    let (mut daemon, _) = start_daemon_with(
        dir.path(),
        &["--workspace".to_string(), root.display().to_string()],
    );
    let socket = dir.path().join("home/baton.sock");
    let (mut lines, mut w) = connect(&socket).await;
    for line in [
        r#"{"id":1,"method":"RegisterAgent","params":{"name":"bench-hooks","ttl_secs":3600}}"#.to_string(),
        r#"{"id":2,"method":"AcquireResourceLock","params":{"resource_key":"file:src/a.rs","owner":"someone-else","ttl_secs":3600}}"#.into(),
        r#"{"id":3,"method":"AcquireResourceLock","params":{"resource_key":"file:README","owner":"bench-hooks","ttl_secs":3600}}"#.into(),
    ] {
        round_trip(&mut lines, &mut w, format!("{line}\n").as_bytes()).await;
    }
    let sender = round_trip(
        &mut lines,
        &mut w,
        b"{\"id\":4,\"method\":\"RegisterAgent\",\"params\":{\"name\":\"bench-sender\",\"ttl_secs\":3600}}\n",
    )
    .await;
    let session = field(&sender, "\"session_id\":")
        .expect("a session")
        .to_string();
    let send = format!(
        "{{\"id\":5,\"method\":\"SendMessage\",\"params\":{{\"session_id\":\"{session}\",\"to\":[\"bench-hooks\"],\"subject\":\"hello\",\"body\":1}}}}\n"
    );
    round_trip(&mut lines, &mut w, send.as_bytes()).await;

    let baton = env!("CARGO_BIN_EXE_baton");
    let env = vec![
        ("BATON_SOCKET_PATH", socket.display().to_string()),
        ("HOME", dir.path().display().to_string()),
    ];
    let bare = tokio::task::block_in_place(|| time_runs("true", &[], "", &[], runs));
    let bare_p50 = percentile(&bare, 0.5);
    rows.push(Row {
        name: "hooks: a process that does nothing (true)",
        figure: format!("p50 {:.1} ms", bare_p50 / 1000.0),
        target: "-".into(),
        pass: None,
    });
    let free =
        fixture("claude-code", "pre_tool_use_write.json", &root).replace("src/a.rs", "README");
    let cases: [(&'static str, [&str; 5], String); 5] = [
        (
            "hooks: guard, a held file (claude-code)",
            ["guard", "hook", "claude-code", "--agent", "bench-hooks"],
            fixture("claude-code", "pre_tool_use_write.json", &root),
        ),
        (
            "hooks: guard, a free file (claude-code)",
            ["guard", "hook", "claude-code", "--agent", "bench-hooks"],
            free,
        ),
        (
            "hooks: guard, an apply_patch (codex)",
            ["guard", "hook", "codex", "--agent", "bench-hooks"],
            fixture("codex", "pre_tool_use_apply_patch.json", &root),
        ),
        (
            "hooks: context, mail and a claim (claude-code)",
            ["hook", "context", "claude-code", "--agent", "bench-hooks"],
            fixture("claude-code", "user_prompt_submit.json", &root),
        ),
        (
            "hooks: stop, blocked (claude-code)",
            ["hook", "stop", "claude-code", "--agent", "bench-hooks"],
            fixture("claude-code", "stop.json", &root),
        ),
    ];
    for (name, args, input) in cases {
        let samples = tokio::task::block_in_place(|| time_runs(baton, &args, &input, &env, runs));
        let (p50, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
        rows.push(Row {
            name,
            figure: format!(
                "p50 {:.1} ms, p99 {:.1} ms ({:.1}x a bare process)",
                p50 / 1000.0,
                p99 / 1000.0,
                p50 / bare_p50
            ),
            target: "< 50 ms a process".into(),
            pass: Some(p99 < 50_000.0),
        });
    }
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let _ = daemon.wait();
}
