//! The wire itself: framing, every error code, ids, pipelining, the journal, and the
//! system methods.

use crate::common::{assert_error, u64s, Daemon};
use serde_json::{json, Value};

/// Each bad line gets its own code and changes nothing.
#[test]
fn every_malformed_request_gets_its_own_error() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    c.set("n", "k", json!("original"));
    let cases: &[(&str, i64, &str)] = &[
        (
            r#"{"id":1,"method":"Set","params":{"namespace":"n""#,
            -32700,
            "parse_error",
        ),
        ("hello", -32700, "parse_error"),
        ("[1,2,3]", -32600, "invalid_request"),
        ("17", -32600, "invalid_request"),
        (r#"{"id":2,"params":{}}"#, -32600, "invalid_request"),
        (r#"{"id":3,"method":42}"#, -32600, "invalid_request"),
        (
            r#"{"id":4,"method":"Frobnicate"}"#,
            -32601,
            "method_not_found",
        ),
        (
            r#"{"id":5,"method":"Set","params":{"namespace":"n","key":"k"}}"#,
            -32602,
            "invalid_params",
        ),
        (
            r#"{"id":6,"method":"Set","params":{"namespace":"n","key":"k","value":1,"expected_version":"1"}}"#,
            -32602,
            "invalid_params",
        ),
        (
            r#"{"id":7,"method":"Set","params":{"namespace":"n","key":"k","value":1,"expected_verison":1}}"#,
            -32602,
            "invalid_params",
        ),
        (
            r#"{"id":8,"method":"Set","params":"n/k=1"}"#,
            -32602,
            "invalid_params",
        ),
        (
            r#"{"id":9,"method":"Set","params":{"namespace":"n","key":"k","value":1,"expected_version":-1}}"#,
            -32602,
            "invalid_params",
        ),
    ];
    for (line, code, kind) in cases {
        c.send_line(line);
        let response = c.read_line();
        assert_error(&response["error"], *code, kind);
    }
    assert_eq!(c.get("n", "k")["value"], "original");
    assert_eq!(c.get("n", "k")["version"], 1);
}

#[test]
fn invalid_params_name_the_field() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    for (params, field) in [
        (json!({"namespace": "n", "key": "k"}), "value"),
        (
            json!({"namespace": "n", "key": "k", "value": 1, "expected_version": "1"}),
            "expected_version",
        ),
        (
            json!({"namespace": "n", "key": "k", "value": 1, "expected_verison": 1}),
            "expected_verison",
        ),
        (json!({"key": "k", "value": 1}), "namespace"),
    ] {
        let err = c.error("Set", params);
        let data = assert_error(&err, -32602, "invalid_params");
        assert_eq!(data["field"], field, "{err}");
        assert!(err["message"].as_str().unwrap().contains(field), "{err}");
    }
}

#[test]
fn unknown_method_lists_the_known_ones() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let err = c.error("Frobnicate", json!({}));
    let data = assert_error(&err, -32601, "method_not_found");
    let methods = data["methods"].as_array().unwrap();
    assert!(methods.contains(&json!("Set")) && methods.contains(&json!("DescribeInterface")));
}

#[test]
fn an_over_long_line_is_refused_and_the_connection_stays_usable() {
    let daemon = Daemon::start_with(&["--max-line-bytes", "256"]);
    let mut c = daemon.client();
    let long = format!(
        r#"{{"id":1,"method":"Set","params":{{"namespace":"n","key":"k","value":"{}"}}}}"#,
        "x".repeat(1000)
    );
    c.send_line(&long);
    let response = c.read_line();
    let data = assert_error(&response["error"], -32001, "request_too_large");
    assert_eq!(data["limit"], 256);
    assert_eq!(c.get("n", "k")["found"], false);
    assert_eq!(
        c.set("n", "k", json!(1))["version"],
        1,
        "the connection still works"
    );
}

#[test]
fn ids_are_echoed_blank_lines_ignored_and_snake_case_accepted() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    for id in [
        json!(7),
        json!("abc"),
        json!({"trace": [1, "x"]}),
        json!(1.5),
    ] {
        c.send_line(&json!({"id": id, "method": "Health"}).to_string());
        let response = c.read_line();
        assert_eq!(response["id"], id);
        assert_eq!(response["result"]["status"], "ok");
    }
    c.send_raw(b"\n  \n\r\n{\"method\":\"health\"}\n");
    let response = c.read_line();
    assert_eq!(response["id"], Value::Null);
    assert_eq!(response["result"]["status"], "ok");
    c.send_line(r#"{"id":"s","method":"clear_namespace","params":{"namespace":"n"}}"#);
    assert_eq!(c.read_line()["result"]["deleted"], 0);
    c.send_line(r#"{"id":"t","method":"read_events"}"#);
    assert!(c.read_line()["result"]["events"].is_array());
}

#[test]
fn a_thousand_pipelined_requests_come_back_in_order() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let mut batch = String::new();
    for i in 0..1000 {
        let line = match i % 3 {
            0 => {
                json!({"id": i, "method": "Set", "params": {"namespace": "p", "key": "counter", "value": i}})
            }
            1 => json!({"id": i, "method": "Get", "params": {"namespace": "p", "key": "counter"}}),
            _ => {
                json!({"id": i, "method": "Set", "params": {"namespace": "p", "key": format!("k{i}"), "value": i, "expected_version": 0}})
            }
        };
        batch.push_str(&line.to_string());
        batch.push('\n');
    }
    c.send_raw(batch.as_bytes());
    let mut last_set = None;
    for i in 0..1000u64 {
        let response = c.read_line();
        assert_eq!(response["id"], i, "answers in request order");
        let result = &response["result"];
        match i % 3 {
            0 => last_set = Some(i),
            // A read sees every write sent before it on the same connection, and none after.
            1 => assert_eq!(result["value"], json!(last_set.unwrap()), "at {i}"),
            _ => assert_eq!(result["version"], 1),
        }
    }
    assert_eq!(c.get("p", "counter")["version"], 334);
}

#[test]
fn every_write_appends_one_event_with_seq_equal_to_its_revision() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let mut revisions = vec![
        c.result(
            "Set",
            json!({"namespace": "a", "key": "x", "value": 1, "updated_by": "w"}),
        )["revision"]
            .clone(),
        c.set("a", "y", json!(2))["revision"].clone(),
        c.result("Delete", json!({"namespace": "a", "key": "x"}))["revision"].clone(),
        c.result(
            "Publish",
            json!({"topic": "review.done", "payload": {"ok": true}, "actor": "bot"}),
        )["event_seq"]
            .clone(),
    ];
    let txn = c.result(
        "Txn",
        json!({"ops": [{"op": "set", "namespace": "b", "key": "z", "value": 3}]}),
    );
    revisions.push(txn["results"][0]["revision"].clone());
    c.set("b", "w", json!(4));
    revisions.push(json!(6));

    let events = c.result("ReadEvents", json!({}))["events"].clone();
    let events = events.as_array().unwrap();
    let seqs: Vec<Value> = events.iter().map(|e| e["seq"].clone()).collect();
    assert_eq!(seqs, revisions);
    assert_eq!(
        seqs,
        (1..=6).map(|s| json!(s)).collect::<Vec<_>>(),
        "contiguous"
    );
    assert_eq!(events[0]["type"], "kv.set");
    assert_eq!(events[0]["namespace"], "a");
    assert_eq!(events[0]["key"], "x");
    assert_eq!(events[0]["actor"], "w");
    assert_eq!(events[0]["data"], json!({"version": 1, "value": 1}));
    assert_eq!(events[2]["type"], "kv.delete");
    assert_eq!(events[2]["data"]["version"], 2);
    assert_eq!(events[3]["type"], "custom.review.done");
    assert_eq!(events[3]["data"], json!({"ok": true}));
    assert_eq!(events[3]["actor"], "bot");
    assert!(
        events[3].get("namespace").is_none(),
        "absent fields are omitted"
    );
    assert!(events
        .iter()
        .all(|e| e["at"].as_str().is_some_and(|a| a.ends_with('Z'))));
}

#[test]
fn read_events_filters_and_pages() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    c.set("app", "cfg/a", json!(1)); // 1
    c.set("app", "cfg/b", json!(2)); // 2
    c.set("app", "run/x", json!(3)); // 3
    c.set("other", "cfg/a", json!(4)); // 4
    c.result("Delete", json!({"namespace": "app", "key": "cfg/a"})); // 5
    c.result("Publish", json!({"topic": "deploy", "payload": 1})); // 6

    let seqs = |c: &mut crate::common::Client, params: Value| -> Vec<u64> {
        u64s(&c.result("ReadEvents", params)["events"], "seq")
    };
    assert_eq!(seqs(&mut c, json!({"since_seq": 3})), [4, 5, 6]);
    assert_eq!(seqs(&mut c, json!({"types": ["kv.delete"]})), [5]);
    assert_eq!(seqs(&mut c, json!({"types": ["kv.*"]})), [1, 2, 3, 4, 5]);
    assert_eq!(
        seqs(&mut c, json!({"types": ["custom.deploy", "kv.delete"]})),
        [5, 6]
    );
    assert_eq!(seqs(&mut c, json!({"namespace": "app"})), [1, 2, 3, 5]);
    assert_eq!(
        seqs(&mut c, json!({"namespace": "app", "key_prefix": "cfg/"})),
        [1, 2, 5]
    );
    assert_eq!(seqs(&mut c, json!({"key_prefix": "cfg/"})), [1, 2, 4, 5]);
    assert_eq!(
        seqs(&mut c, json!({"resource_prefix": "file:"})),
        Vec::<u64>::new()
    );
    assert_eq!(seqs(&mut c, json!({"task_id": "nope"})), Vec::<u64>::new());

    // Paging: next_seq resumes exactly where the page stopped.
    let page = c.result("ReadEvents", json!({"limit": 2, "types": ["kv.set"]}));
    assert_eq!(page["events"].as_array().unwrap().len(), 2);
    assert_eq!(page["next_seq"], 2);
    let page = c.result(
        "ReadEvents",
        json!({"since_seq": 2, "limit": 2, "types": ["kv.set"]}),
    );
    let got: Vec<u64> = u64s(&page["events"], "seq");
    assert_eq!(got, [3, 4]);
    let page = c.result("ReadEvents", json!({"since_seq": 4, "types": ["kv.set"]}));
    assert_eq!(page["events"], json!([]));
    assert_eq!(
        page["next_seq"], 6,
        "a filtered read that reached the head resumes after it"
    );
    assert_error(&c.error("ReadEvents", json!({"limit": 0})), 400, "invalid");
    assert_error(
        &c.error("ReadEvents", json!({"since": 0})),
        -32602,
        "invalid_params",
    );
}

/// Filters read through indexes by ranges (a prefix up to the next string after it): the
/// edges of each range hold.
#[test]
fn read_events_prefix_ranges_end_where_the_prefix_does() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    c.set("ns", "a/\u{10FFFF}", json!(1)); // 1
    c.set("ns", "a0", json!(2)); // 2
    c.set("ns", "a/", json!(3)); // 3
    c.result(
        "AcquireResourceLock",
        json!({"resource_key": "file:src/x", "owner": "o", "ttl_secs": 60}),
    ); // 4
    c.result(
        "AcquireResourceLock",
        json!({"resource_key": "file:srcx", "owner": "o", "ttl_secs": 60}),
    ); // 5
    c.result("Publish", json!({"topic": "kv", "payload": 1})); // 6
    let seqs = |c: &mut crate::common::Client, params: Value| -> Vec<u64> {
        u64s(&c.result("ReadEvents", params)["events"], "seq")
    };
    assert_eq!(
        seqs(&mut c, json!({"namespace": "ns", "key_prefix": "a/"})),
        [1, 3]
    );
    assert_eq!(
        seqs(&mut c, json!({"namespace": "ns", "key_prefix": ""})),
        [1, 2, 3]
    );
    assert_eq!(seqs(&mut c, json!({"resource_prefix": "file:src/"})), [4]);
    assert_eq!(seqs(&mut c, json!({"resource_prefix": "file:src"})), [4, 5]);
    assert_eq!(seqs(&mut c, json!({"types": ["lock.*"]})), [4, 5]);
    assert_eq!(seqs(&mut c, json!({"types": ["custom.kv"]})), [6]);
    assert_eq!(
        seqs(&mut c, json!({"types": ["kv.*"], "since_seq": 1})),
        [2, 3]
    );
}

#[test]
fn describe_interface_lists_every_method_with_schemas() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let described = c.result("DescribeInterface", json!({}));
    assert_eq!(described["protocol"], "baton-jsonl-v1");
    assert!(described["version"].is_string());
    let methods = described["methods"].as_array().unwrap();
    for name in [
        "Get",
        "Set",
        "Delete",
        "List",
        "History",
        "Txn",
        "ClearNamespace",
        "Export",
        "ReadEvents",
        "Publish",
        "DescribeInterface",
        "Health",
        "Metrics",
    ] {
        let m = methods
            .iter()
            .find(|m| m["method"] == name)
            .unwrap_or_else(|| panic!("{name} missing"));
        assert!(
            m["summary"].as_str().is_some_and(|s| !s.is_empty()),
            "{name}"
        );
        assert_eq!(m["params_schema"]["type"], "object", "{name}");
        assert!(m["result_schema"].is_object(), "{name}");
    }
    let set = methods.iter().find(|m| m["method"] == "Set").unwrap();
    let required = set["params_schema"]["required"].as_array().unwrap();
    for field in ["namespace", "key", "value"] {
        assert!(required.contains(&json!(field)), "{field} required: {set}");
    }
    assert!(set["params_schema"]["properties"]["expected_version"].is_object());
    let codes: Vec<i64> = described["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_i64().unwrap())
        .collect();
    for code in [
        -32700, -32600, -32601, -32602, -32001, -32603, 400, 401, 403, 404, 409, 410, 413, 416,
        429, 503,
    ] {
        assert!(codes.contains(&code), "{code}");
    }
    let idempotency = described["errors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "idempotency_conflict")
        .expect("idempotency_conflict has its own row");
    assert_eq!(idempotency["code"], 409);
}

#[test]
fn health_and_metrics_report_the_daemon() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let health = c.result("Health", json!({}));
    assert_eq!(health["status"], "ok");
    assert_eq!(health["database"], "ok");
    assert!(health["schema_version"].as_i64().unwrap() >= 1);
    assert!(health["uptime_secs"].is_u64());
    assert!(health["version"].is_string());

    c.set("n", "a", json!(1));
    c.set("n", "b", json!(2));
    c.result("Delete", json!({"namespace": "n", "key": "b"}));
    c.get("n", "a");
    assert_error(
        &c.error("Get", json!({"namespace": "n"})),
        -32602,
        "invalid_params",
    );
    let _second = daemon.client();
    let metrics = c.result("Metrics", json!({}));
    assert_eq!(metrics["methods"]["Set"]["count"], 2);
    assert_eq!(metrics["methods"]["Get"]["count"], 2);
    assert_eq!(metrics["methods"]["Get"]["errors"], 1);
    assert!(metrics["methods"]["Set"]["p50_us"].is_u64());
    assert_eq!(metrics["records"], json!({"live": 1, "tombstones": 1}));
    assert_eq!(metrics["journal"]["head_seq"], 3);
    assert_eq!(metrics["journal"]["length"], 3);
    assert!(metrics["connections"]["open"].as_u64().unwrap() >= 1);
    assert!(metrics["storage"]["commits"].as_u64().unwrap() >= 1);
    assert!(metrics["storage"]["db_bytes"].as_u64().unwrap() > 0);
    assert_error(
        &c.error("Health", json!({"verbose": true})),
        -32602,
        "invalid_params",
    );
}

#[test]
fn the_envelope_is_as_strict_as_the_params() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    c.set("n", "k", json!(1));
    // An expected_version beside params would have been a blind write.
    c.send_line(
        r#"{"id":1,"method":"Set","params":{"namespace":"n","key":"k","value":2},"expected_version":5}"#,
    );
    let answer = c.read_line();
    assert_eq!(answer["id"], 1);
    assert_error(&answer["error"], -32600, "invalid_request");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expected_version"),
        "{answer}"
    );
    assert_eq!(c.get("n", "k")["value"], 1, "nothing was written");
    assert_eq!(c.get("n", "k")["version"], 1);

    // A JSON array is not a request, even one shaped like the envelope's fields.
    c.send_line(r#"[2,"Set",{"namespace":"n","key":"k","value":3}]"#);
    let answer = c.read_line();
    assert_error(&answer["error"], -32600, "invalid_request");
    assert_eq!(c.get("n", "k")["value"], 1);

    // expected_version: null is refused, never read as absent (a blind write).
    for (method, params) in [
        (
            "Set",
            json!({"namespace": "n", "key": "k", "value": 4, "expected_version": null}),
        ),
        (
            "Delete",
            json!({"namespace": "n", "key": "k", "expected_version": null}),
        ),
    ] {
        let err = c.error(method, params);
        let data = assert_error(&err, -32602, "invalid_params");
        assert_eq!(data["field"], "expected_version", "{err}");
    }
    assert_eq!(c.get("n", "k")["version"], 1);

    c.send_line(r#"{"jsonrpc":"2.0","id":3,"method":"Health"}"#);
    assert_eq!(c.read_line()["result"]["status"], "ok");
    c.send_line(r#"{"jsonrpc":"1.0","id":4,"method":"Health"}"#);
    assert_error(&c.read_line()["error"], -32600, "invalid_request");

    // Invalid UTF-8 inside a string is a parse error; the connection stays usable.
    c.send_raw(
        b"{\"id\":5,\"method\":\"Get\",\"params\":{\"namespace\":\"n\",\"key\":\"\xff\"}}\n",
    );
    assert_error(&c.read_line()["error"], -32700, "parse_error");
    assert_eq!(c.get("n", "k")["value"], 1);
}

/// AdvanceClock exists only on a daemon started for tests (BATON_TEST_CLOCK_MS): anywhere
/// else nobody can move time, and DescribeInterface never lists it.
#[test]
fn only_a_test_daemon_lets_a_client_move_its_clock() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    for params in [json!({"ms": 1000}), json!({"bogus": true})] {
        let err = c.error("AdvanceClock", params);
        assert_error(&err, -32601, "method_not_found");
    }
    let described = c.result("DescribeInterface", json!({}));
    assert!(!described.to_string().contains("AdvanceClock"));

    let mut test = Daemon::start_on_test_clock();
    let before = test.client().result("Health", json!({}));
    let moved = test.advance_clock(90_000);
    assert_eq!(moved["monotonic_ms"], 90_000, "{moved}");
    assert!(test.log().contains("BATON_TEST_CLOCK_MS is set"));
    let after = test.client().result("Health", json!({}));
    assert!(
        after["uptime_secs"].as_u64().unwrap() >= before["uptime_secs"].as_u64().unwrap() + 90,
        "{before} {after}"
    );
}

/// A client that sends every request before it reads any answer is served: batond keeps
/// reading while answers wait to be read (before, it stopped reading as soon as the
/// socket would take no more answers, and both sides waited for ever).
#[test]
fn requests_sent_before_any_answer_is_read_are_all_answered() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    c.set_read_timeout(std::time::Duration::from_secs(60));
    c.set_write_timeout(std::time::Duration::from_secs(60));
    for n in [10_000u64, 50_000] {
        let mut batch = String::new();
        for i in 0..n {
            batch.push_str(
                &json!({"id": i, "method": "Set", "params": {"namespace": "p", "key": format!("k{}", i % 10), "value": i}})
                    .to_string(),
            );
            batch.push('\n');
        }
        c.send_raw(batch.as_bytes());
        for i in 0..n {
            let answer = c.read_line();
            assert_eq!(answer["id"], i, "{answer}");
            assert!(answer.get("result").is_some(), "{answer}");
        }
    }
}
