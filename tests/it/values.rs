//! Values against a real daemon: every value field (Set and Txn `value`, task `context`,
//! node `payload`, CompleteNode `result`, FailNode `error`, CommitEvent and Publish
//! `payload`, lock `metadata`) refuses what some client could not read back, keeps what it
//! accepts digit for digit and in key order, and the idempotency digest sees the exact
//! text. Integer params beyond 2^63 - 1 are -32602.
//!
//! Answers are compared as raw response text: a parse into `serde_json::Value` would
//! itself round floats and sort keys.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;

use crate::common::{assert_error, Daemon};
use serde_json::Value;

/// A line client that keeps answers as the text the daemon wrote.
struct Raw {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
}

impl Raw {
    fn connect(daemon: &Daemon) -> Raw {
        let stream = UnixStream::connect(daemon.socket_path()).expect("connect to batond");
        Raw {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
            next_id: 1,
        }
    }

    /// Sends `params` (JSON text, sent as is) and returns the answer line.
    fn call(&mut self, method: &str, params: &str) -> String {
        let id = self.next_id;
        self.next_id += 1;
        let line = format!("{{\"id\":{id},\"method\":\"{method}\",\"params\":{params}}}\n");
        self.writer.write_all(line.as_bytes()).unwrap();
        let mut answer = String::new();
        assert!(self.reader.read_line(&mut answer).unwrap() > 0, "closed");
        assert!(
            answer.starts_with(&format!("{{\"id\":{id},")),
            "answer to another request: {answer}"
        );
        answer
    }

    /// The answer line of a call that must succeed.
    #[track_caller]
    fn ok(&mut self, method: &str, params: &str) -> String {
        let answer = self.call(method, params);
        assert!(
            answer.contains("\"result\":"),
            "{method} {params} failed: {answer}"
        );
        answer
    }

    /// The result of a call that must succeed, parsed (for ids; values are checked as text).
    #[track_caller]
    fn result(&mut self, method: &str, params: &str) -> Value {
        let answer = self.ok(method, params);
        let parsed: Value = serde_json::from_str(&answer)
            .unwrap_or_else(|e| panic!("a client cannot read this answer ({e}): {answer}"));
        parsed["result"].clone()
    }

    /// The error object of a call that must fail.
    #[track_caller]
    fn error(&mut self, method: &str, params: &str) -> Value {
        let answer = self.call(method, params);
        let parsed: Value =
            serde_json::from_str(&answer).unwrap_or_else(|e| panic!("not JSON ({e}): {answer}"));
        match parsed.get("error") {
            Some(error) => error.clone(),
            None => panic!("{method} {params} should have failed: {answer}"),
        }
    }
}

/// An answer line without its id, to compare two answers.
fn body(answer: &str) -> &str {
    &answer[answer.find(',').expect("an id, then the answer")..]
}

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// Values no client can read back, with the path the refusal names and a word of its
/// message.
fn unreadable_values() -> Vec<(String, String, &'static str)> {
    let cases: [(String, &str, &str); 9] = [
        ("1e400".into(), "", "outside the range of a double"),
        ("-1e400".into(), "", "outside the range of a double"),
        (
            r#"{"a":[0,1,2,1e400]}"#.into(),
            " at /a/3",
            "the number 1e400 is outside the range of a double",
        ),
        ("1".repeat(400), "", "send it as a string"),
        ("9223372036854775808".into(), "", "send it as a string"),
        (
            r#"{"x":{"y":-9223372036854775808}}"#.into(),
            " at /x/y",
            "send it as a string",
        ),
        (r#""\ud800""#.into(), "", "lone surrogate"),
        (r#"["ok","a\udc00b"]"#.into(), " at /1", "lone surrogate"),
        (nested(65), "deep", "nested more than 64 levels"),
    ];
    cases
        .into_iter()
        .map(|(value, path, words)| {
            let path = match path {
                "deep" => format!(" at {}", "/0".repeat(64)),
                path => path.to_string(),
            };
            (value, path, words)
        })
        .collect()
}

/// A task with one RUNNING node: (task_id, node_id, lease_id).
fn running_node(c: &mut Raw, goal: &str) -> (String, String, String) {
    let task = c.result(
        "RegisterTask",
        &format!(r#"{{"goal":"{goal}","nodes":[{{"id":"a"}}]}}"#),
    );
    let task_id = task["task_id"].as_str().unwrap().to_string();
    let node = c.result(
        "AcquireNextNode",
        &format!(r#"{{"task_id":"{task_id}","lease_owner":"w"}}"#),
    );
    (
        task_id,
        node["node_id"].as_str().unwrap().to_string(),
        node["lease_id"].as_str().unwrap().to_string(),
    )
}

#[test]
fn every_value_field_refuses_what_some_client_cannot_read_back() {
    let daemon = Daemon::start();
    let mut c = Raw::connect(&daemon);
    let (task_id, node_id, lease_id) = running_node(&mut c, "refusals");
    let journal_before = c.ok("ReadEvents", r#"{"since_seq":0,"limit":1000}"#);
    let status_before = c.ok("TaskStatus", &format!(r#"{{"task_id":"{task_id}"}}"#));
    let node = format!(r#""task_id":"{task_id}","node_id":"{node_id}","lease_id":"{lease_id}""#);
    for (bad, path, words) in unreadable_values() {
        let fields: Vec<(&str, &str, String)> = vec![
            (
                "value",
                "Set",
                format!(r#"{{"namespace":"n","key":"k","value":{bad}}}"#),
            ),
            (
                "ops[1].value",
                "Txn",
                format!(
                    r#"{{"ops":[{{"op":"set","namespace":"n","key":"t","value":1}},{{"op":"set","namespace":"n","key":"k","value":{bad}}}]}}"#
                ),
            ),
            (
                "context",
                "RegisterTask",
                format!(r#"{{"goal":"g","context":{bad},"nodes":[{{"id":"a"}}]}}"#),
            ),
            (
                "nodes[1].payload",
                "RegisterTask",
                format!(r#"{{"goal":"g","nodes":[{{"id":"a"}},{{"id":"b","payload":{bad}}}]}}"#),
            ),
            (
                "result",
                "CompleteNode",
                format!(r#"{{{node},"result":{bad}}}"#),
            ),
            ("error", "FailNode", format!(r#"{{{node},"error":{bad}}}"#)),
            (
                "payload",
                "CommitEvent",
                format!(r#"{{{node},"action_type":"custom.file.written","payload":{bad}}}"#),
            ),
            (
                "payload",
                "Publish",
                format!(r#"{{"topic":"t","payload":{bad}}}"#),
            ),
            (
                "metadata",
                "AcquireResourceLock",
                format!(r#"{{"resource_key":"tool:x","owner":"o","metadata":{bad}}}"#),
            ),
        ];
        for (field, method, params) in fields {
            let err = c.error(method, &params);
            assert_error(&err, 400, "invalid");
            let message = err["message"].as_str().unwrap();
            assert!(
                message.starts_with(&format!("{field}{path}: ")),
                "{method} names {field}{path}: {message}"
            );
            assert!(message.contains(words), "{method} {bad}: {message}");
            assert!(message.contains("send"), "says what to send: {message}");
        }
    }
    // Nothing was stored anywhere.
    assert_eq!(
        body(&c.ok("ReadEvents", r#"{"since_seq":0,"limit":1000}"#)),
        body(&journal_before)
    );
    assert_eq!(
        body(&c.ok("TaskStatus", &format!(r#"{{"task_id":"{task_id}"}}"#))),
        body(&status_before)
    );
    assert!(c
        .ok("Get", r#"{"namespace":"n","key":"k"}"#)
        .contains(r#""found":false"#));
    assert!(c
        .ok("Get", r#"{"namespace":"n","key":"t"}"#)
        .contains(r#""found":false"#));
    assert!(c
        .ok("History", r#"{"namespace":"n","key":"k"}"#)
        .contains(r#""history":[]"#));
    let tasks = c.result("ListTasks", "{}");
    assert_eq!(tasks["tasks"].as_array().unwrap().len(), 1, "{tasks}");
    assert!(c.ok("ListResourceLocks", "{}").contains(r#""locks":[]"#));
    // The node is still RUNNING under its lease.
    c.ok("HeartbeatNode", &format!("{{{node}}}"));
}

#[test]
fn the_limits_themselves_are_accepted() {
    let daemon = Daemon::start();
    let mut c = Raw::connect(&daemon);
    for value in [
        nested(64),
        "9223372036854775807".into(),
        "-9223372036854775807".into(),
        "1e308".into(),
        "1e-400".into(),
        r#""\ud83d\ude00""#.into(),
    ] {
        c.ok(
            "Set",
            &format!(r#"{{"namespace":"n","key":"k","value":{value}}}"#),
        );
        let got = c.ok("Get", r#"{"namespace":"n","key":"k"}"#);
        assert!(got.contains(&format!(r#""value":{value},"#)), "{got}");
    }
}

/// Floats that a parse through f64 would change or reorder, integers beyond 2^53, and
/// keys out of order.
const EXACT: &str = r#"{"b":0.30000000000000004,"a":[1.7976931348623157e308,5e-324,12345678901234567.0,-0.0,1E+2,1.0,9223372036854775807,-9223372036854775807,0.1],"s":"\ud83d\ude00 \u00e9","q":"it's \\ \"q\" '' \\'"}"#;

#[track_caller]
fn assert_has(answer: &str, member: &str, value: &str) {
    let wanted = format!("\"{member}\":{value}");
    assert!(
        answer.contains(&wanted),
        "{member} did not come back as sent:\nwanted {wanted}\nin     {answer}"
    );
}

#[test]
fn state_and_journal_values_come_back_digit_for_digit() {
    let daemon = Daemon::start();
    let mut c = Raw::connect(&daemon);
    c.ok(
        "Set",
        &format!(r#"{{"namespace":"n","key":"k","value":{EXACT}}}"#),
    );
    c.ok(
        "Txn",
        &format!(r#"{{"ops":[{{"op":"set","namespace":"n","key":"t","value":{EXACT}}}]}}"#),
    );
    c.ok("Publish", &format!(r#"{{"topic":"t","payload":{EXACT}}}"#));
    for key in ["k", "t"] {
        let get = c.ok("Get", &format!(r#"{{"namespace":"n","key":"{key}"}}"#));
        assert_has(&get, "value", EXACT);
        let history = c.ok("History", &format!(r#"{{"namespace":"n","key":"{key}"}}"#));
        assert_has(&history, "value", EXACT);
    }
    assert_has(&c.ok("List", r#"{"namespace":"n"}"#), "value", EXACT);
    assert_has(&c.ok("Export", "{}"), "value", EXACT);
    let events = c.ok("ReadEvents", r#"{"since_seq":0}"#);
    assert_has(&events, "value", EXACT);
    assert_has(&events, "data", EXACT);
    // A refused compare-and-set shows the current value as stored, for the merge.
    let conflict = c.call(
        "Set",
        r#"{"namespace":"n","key":"k","value":1,"expected_version":7}"#,
    );
    assert!(conflict.contains("\"error\":"), "{conflict}");
    assert_has(&conflict, "actual_value", EXACT);
    let parsed: Value = serde_json::from_str(&conflict).expect("the 409 is JSON");
    assert_eq!(parsed["error"]["data"]["actual_version"], 1, "{conflict}");
}

#[test]
fn task_and_lock_values_come_back_digit_for_digit() {
    let daemon = Daemon::start();
    let mut c = Raw::connect(&daemon);
    let task = c.result(
        "RegisterTask",
        &format!(
            r#"{{"goal":"exact","context":{EXACT},"nodes":[{{"id":"a","payload":{EXACT}}},{{"id":"b","dependencies":["a"]}}]}}"#
        ),
    );
    let task_id = task["task_id"].as_str().unwrap().to_string();
    let acquire = format!(r#"{{"task_id":"{task_id}","lease_owner":"w"}}"#);
    let first = c.ok("AcquireNextNode", &acquire);
    assert_has(&first, "payload", EXACT);
    assert_has(&first, "task_context", EXACT);
    let lease_a = serde_json::from_str::<Value>(&first).unwrap()["result"]["lease_id"].clone();
    let node_a = format!(r#""task_id":"{task_id}","node_id":"a","lease_id":{lease_a}"#);
    c.ok(
        "CommitEvent",
        &format!(r#"{{{node_a},"action_type":"custom.file.written","payload":{EXACT}}}"#),
    );
    c.ok("CompleteNode", &format!(r#"{{{node_a},"result":{EXACT}}}"#));

    let second = c.ok("AcquireNextNode", &acquire);
    assert_has(
        &second,
        "dependency_results",
        &format!(r#"{{"a":{EXACT}}}"#),
    );
    assert_has(&second, "data", EXACT); // recent_events carry the commit and the result
    let lease_b = serde_json::from_str::<Value>(&second).unwrap()["result"]["lease_id"].clone();
    let node_b = format!(r#""task_id":"{task_id}","node_id":"b","lease_id":{lease_b}"#);
    c.ok(
        "FailNode",
        &format!(r#"{{{node_b},"error":{EXACT},"retry":false}}"#),
    );

    let status = c.ok("TaskStatus", &format!(r#"{{"task_id":"{task_id}"}}"#));
    assert_has(&status, "result", EXACT);
    assert_has(&status, "error", EXACT);
    let events = c.ok(
        "ReadEvents",
        &format!(r#"{{"since_seq":0,"task_id":"{task_id}"}}"#),
    );
    assert_has(&events, "data", EXACT); // CommitEvent
    assert_has(&events, "result", EXACT); // node.completed
    assert_has(&events, "error", EXACT); // node.failed

    let lock = c.ok(
        "AcquireResourceLock",
        &format!(r#"{{"resource_key":"tool:x","owner":"o","metadata":{EXACT}}}"#),
    );
    assert_has(&lock, "metadata", EXACT);
    assert_has(
        &c.ok("ResourceLockStatus", r#"{"resource_key":"tool:x"}"#),
        "metadata",
        EXACT,
    );
    assert_has(&c.ok("ListResourceLocks", "{}"), "metadata", EXACT);
    let busy = c.ok(
        "AcquireResourceLock",
        r#"{"resource_key":"tool:x","owner":"someone else"}"#,
    );
    assert_has(&busy, "metadata", EXACT);
}

#[test]
fn explicit_nulls_are_values_too() {
    let daemon = Daemon::start();
    let mut c = Raw::connect(&daemon);
    let (task_id, node_id, lease_id) = running_node(&mut c, "nulls");
    let node = format!(r#""task_id":"{task_id}","node_id":"{node_id}","lease_id":"{lease_id}""#);
    c.ok(
        "CommitEvent",
        &format!(r#"{{{node},"action_type":"custom.x.y","payload":null}}"#),
    );
    c.ok("CompleteNode", &format!(r#"{{{node},"result":null}}"#));
    let status = c.ok("TaskStatus", &format!(r#"{{"task_id":"{task_id}"}}"#));
    assert_has(&status, "result", "null");
    let (task_id, node_id, lease_id) = running_node(&mut c, "nulls 2");
    let failed = c.result(
        "FailNode",
        &format!(
            r#"{{"task_id":"{task_id}","node_id":"{node_id}","lease_id":"{lease_id}","error":null,"retry":false}}"#
        ),
    );
    assert_eq!(failed["status"], "FAILED");
    let status = c.ok("TaskStatus", &format!(r#"{{"task_id":"{task_id}"}}"#));
    assert_has(&status, "error", "null");
    c.ok(
        "RegisterTask",
        r#"{"goal":"g","context":null,"nodes":[{"id":"a","payload":null}]}"#,
    );
    c.ok(
        "AcquireResourceLock",
        r#"{"resource_key":"tool:n","owner":"o","metadata":null}"#,
    );
}

#[test]
fn idempotency_sees_the_exact_numbers_and_ignores_key_order() {
    let daemon = Daemon::start();
    let mut c = Raw::connect(&daemon);
    // The two doubles parse to the same f64, but they are different requests.
    let first = c.ok(
        "Set",
        r#"{"namespace":"n","key":"k","value":{"x":0.30000000000000004,"y":1},"idempotency_key":"s1"}"#,
    );
    let err = c.error(
        "Set",
        r#"{"namespace":"n","key":"k","value":{"x":0.30000000000000005,"y":1},"idempotency_key":"s1"}"#,
    );
    assert_error(&err, 409, "idempotency_conflict");
    let err = c.error(
        "Set",
        r#"{"namespace":"n","key":"k","value":{"x":0.30000000000000004,"y":1.0},"idempotency_key":"s1"}"#,
    );
    assert_error(&err, 409, "idempotency_conflict");
    // The same request with keys reordered and other whitespace replays the first answer.
    let again = c.ok(
        "Set",
        r#"{ "idempotency_key" : "s1", "value" : { "y" : 1, "x" : 0.30000000000000004 }, "key" : "k", "namespace" : "n" }"#,
    );
    assert_eq!(body(&again), body(&first));
    assert_has(
        &c.ok("Get", r#"{"namespace":"n","key":"k"}"#),
        "version",
        "1",
    );

    // Task values are digested as sent too.
    let task = c.ok(
        "RegisterTask",
        r#"{"goal":"g","context":{"p":0.1},"nodes":[{"id":"a","payload":[1.7976931348623157e308]}],"idempotency_key":"t1"}"#,
    );
    let err = c.error(
        "RegisterTask",
        r#"{"goal":"g","context":{"p":0.1},"nodes":[{"id":"a","payload":[1.7976931348623158e308]}],"idempotency_key":"t1"}"#,
    );
    assert_error(&err, 409, "idempotency_conflict");
    let replay = c.ok(
        "RegisterTask",
        r#"{"nodes":[{"payload":[1.7976931348623157e308],"id":"a"}],"idempotency_key":"t1","context":{"p":0.1},"goal":"g"}"#,
    );
    assert_eq!(body(&replay), body(&task));
}

#[test]
fn integer_params_beyond_2_63_are_invalid_params() {
    let daemon = Daemon::start();
    let mut c = Raw::connect(&daemon);
    c.ok("Set", r#"{"namespace":"n","key":"k","value":1}"#);
    let (task_id, node_id, lease_id) = running_node(&mut c, "ints");
    let journal_before = c.ok("ReadEvents", r#"{"since_seq":0,"limit":1000}"#);
    for big in ["9223372036854775808", "18446744073709551615"] {
        let cases: Vec<(&str, &str, String)> = vec![
            (
                "ReadEvents",
                "since_seq",
                format!(r#"{{"since_seq":{big}}}"#),
            ),
            ("ReadEvents", "limit", format!(r#"{{"limit":{big}}}"#)),
            (
                "History",
                "before_version",
                format!(r#"{{"namespace":"n","key":"k","before_version":{big}}}"#),
            ),
            (
                "History",
                "limit",
                format!(r#"{{"namespace":"n","key":"k","limit":{big}}}"#),
            ),
            (
                "Subscribe",
                "since_seq",
                format!(r#"{{"since_seq":{big}}}"#),
            ),
            (
                "Set",
                "expected_version",
                format!(r#"{{"namespace":"n","key":"k","value":2,"expected_version":{big}}}"#),
            ),
            (
                "Delete",
                "expected_version",
                format!(r#"{{"namespace":"n","key":"k","expected_version":{big}}}"#),
            ),
            (
                "Txn",
                "compare[0].version",
                format!(
                    r#"{{"compare":[{{"namespace":"n","key":"k","version":{big}}}],"ops":[{{"op":"delete","namespace":"n","key":"k"}}]}}"#
                ),
            ),
            (
                "CompactJournal",
                "before_seq",
                format!(r#"{{"before_seq":{big}}}"#),
            ),
            (
                "List",
                "limit",
                format!(r#"{{"namespace":"n","limit":{big}}}"#),
            ),
            ("ListTasks", "limit", format!(r#"{{"limit":{big}}}"#)),
            (
                "AcquireResourceLock",
                "ttl_secs",
                format!(r#"{{"resource_key":"tool:x","owner":"o","ttl_secs":{big}}}"#),
            ),
            (
                "AcquireResourceLock",
                "wait_ms",
                format!(r#"{{"resource_key":"tool:x","owner":"o","wait_ms":{big}}}"#),
            ),
            (
                "HeartbeatResourceLock",
                "ttl_secs",
                format!(r#"{{"resource_key":"tool:x","lease_id":"l","ttl_secs":{big}}}"#),
            ),
            (
                "WaitResourceLock",
                "timeout_ms",
                format!(r#"{{"resource_key":"tool:x","timeout_ms":{big}}}"#),
            ),
            (
                "AcquireNextNode",
                "ttl_secs",
                format!(r#"{{"lease_owner":"w","ttl_secs":{big}}}"#),
            ),
            (
                "AcquireNextNode",
                "wait_ms",
                format!(r#"{{"lease_owner":"w","wait_ms":{big}}}"#),
            ),
            (
                "HeartbeatNode",
                "ttl_secs",
                format!(
                    r#"{{"task_id":"{task_id}","node_id":"{node_id}","lease_id":"{lease_id}","ttl_secs":{big}}}"#
                ),
            ),
            (
                "RegisterTask",
                "nodes[0].max_attempts",
                format!(r#"{{"goal":"g","nodes":[{{"id":"a","max_attempts":{big}}}]}}"#),
            ),
        ];
        for (method, field, params) in cases {
            let err = c.error(method, &params);
            let data = assert_error(&err, -32602, "invalid_params");
            assert_eq!(data["field"], field, "{method}: {err}");
            let message = err["message"].as_str().unwrap();
            assert!(message.contains(field), "{method}: {message}");
        }
    }
    // Nothing changed, and the largest allowed values are served.
    assert_eq!(
        body(&c.ok("ReadEvents", r#"{"since_seq":0,"limit":1000}"#)),
        body(&journal_before)
    );
    assert!(c
        .ok("ReadEvents", r#"{"since_seq":9223372036854775807}"#)
        .contains(r#""events":[]"#));
    assert!(c
        .ok(
            "History",
            r#"{"namespace":"n","key":"k","before_version":9223372036854775807}"#
        )
        .contains(r#""version":1"#));
    let conflict = c.error(
        "Set",
        r#"{"namespace":"n","key":"k","value":2,"expected_version":9223372036854775807}"#,
    );
    assert_error(&conflict, 409, "conflict");
    c.ok("Subscribe", r#"{"since_seq":9223372036854775807}"#);
    c.ok("Publish", r#"{"topic":"t","payload":1}"#);
    assert!(
        !daemon.log().contains("subscription read failed"),
        "{}",
        daemon.log()
    );
}
