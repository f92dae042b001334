//! Tests: every request serializes to the params a client sends and parses back (as the
//! daemon parses it) to the same request; every result the daemon writes reads back into
//! its type and writes again byte for byte, raw values (kept as sent) included.

use serde::Serialize;

use super::agents::{RegisterAgentParams, SendMessageParams};
use super::auth::CreateTokenParams;
use super::journal::{ReadEventsParams, SubscribeParams};
use super::locks::{
    AcquireResourceLockParams, HeartbeatResourceLockParams, ListResourceLocksParams,
    ReleaseResourceLockParams, ResourceLockStatusParams, WaitResourceLockParams,
};
use super::state::{DeleteParams, GetParams, HistoryParams, ListParams, SetParams, TxnParams};
use super::system::{HealthParams, MetricsParams};
use super::tasks::{
    AcquireNextNodeParams, CancelTaskParams, ListTasksParams, RegisterTaskParams, TaskStatusParams,
};
use super::{Json, Request};

/// Parses `text` as `R`'s params, as the daemon does, and serializes it again: the same
/// text (so `text` spells every member in the type's order, absent ones left out); parsed
/// once more, it serializes to the same text again.
fn request<R: Request>(text: &str) {
    let parsed: R = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let written = serde_json::to_string(&parsed).unwrap();
    assert_eq!(written, text, "{}", R::METHOD);
    let again: R = serde_json::from_str(&written).unwrap();
    assert_eq!(
        serde_json::to_string(&again).unwrap(),
        text,
        "{}",
        R::METHOD
    );
}

/// Reads `text` as the result of `R` and writes it again: the daemon's bytes come back.
fn answer<R: Request>(text: &str) {
    let read: R::Result = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(serde_json::to_string(&read).unwrap(), text, "{}", R::METHOD);
}

fn raw(text: &str) -> Json {
    serde_json::value::RawValue::from_string(text.into()).unwrap()
}

fn written<T: Serialize>(request: &T) -> String {
    serde_json::to_string(request).unwrap()
}

#[test]
fn requests_parse_back_to_what_was_sent() {
    request::<GetParams>(r#"{"namespace":"ns","key":"k"}"#);
    // A value is sent as it is spelt; expected_version 0 (create only) is sent, not left out.
    request::<SetParams>(
        r#"{"namespace":"ns","key":"k","value":{"b": 1.50, "a": [1e400]},"updated_by":"me","expected_version":0,"idempotency_key":"i"}"#,
    );
    request::<DeleteParams>(r#"{"namespace":"ns","key":"k","expected_version":3}"#);
    request::<ListParams>(r#"{"namespace":"ns","prefix":"a/","limit":2,"after":"a/b"}"#);
    request::<HistoryParams>(r#"{"namespace":"ns","key":"k","after":7}"#);
    // A set of a JSON null is not a set without a value.
    request::<TxnParams>(
        r#"{"compare":[{"namespace":"ns","key":"a","version":0}],"ops":[{"op":"set","namespace":"ns","key":"a","value":null},{"op":"delete","namespace":"ns","key":"b"}],"updated_by":"me"}"#,
    );
    request::<AcquireResourceLockParams>(
        r#"{"resource_key":"tool:build","owner":"ci","ttl_secs":60,"metadata":{"why": "x"},"wait_ms":1000,"release_on_disconnect":true,"mode":"shared","slots":2}"#,
    );
    request::<HeartbeatResourceLockParams>(r#"{"resource_key":"file:a","lease_id":"l"}"#);
    request::<ReleaseResourceLockParams>(
        r#"{"resource_key":"file:a","lease_id":"l","outcome":"moved","moved_to":"file:b"}"#,
    );
    request::<ResourceLockStatusParams>(r#"{"resource_key":"dir:src"}"#);
    request::<ListResourceLocksParams>(r#"{"owner":"bob","after":"[\"file:a\",3]"}"#);
    request::<WaitResourceLockParams>(r#"{"resource_key":"file:a","timeout_ms":500}"#);
    request::<RegisterTaskParams>(
        r#"{"goal":"g","context":[1],"nodes":[{"id":"a","dependencies":[],"payload":{"x": 1.50},"max_attempts":3,"priority":-1,"labels":["gpu"],"delay_ms":10},{"name":"b","dependencies":["a"],"labels":[],"result_schema":{"type":"object"}}]}"#,
    );
    request::<AcquireNextNodeParams>(
        r#"{"task_id":"t","lease_owner":"w","wait_ms":100,"labels":["gpu"]}"#,
    );
    request::<TaskStatusParams>(r#"{"task_id":"t","limit":5}"#);
    request::<ListTasksParams>(r#"{"status":"failed"}"#);
    request::<CancelTaskParams>(r#"{"task_id":"t","idempotency_key":"i"}"#);
    request::<ReadEventsParams>(
        r#"{"since_seq":0,"limit":100,"types":["kv.*"],"namespace":"ns","task_id":"t"}"#,
    );
    request::<SubscribeParams>(r#"{"since_seq":4,"filter":{"resource_prefix":"file:src/"}}"#);
    request::<SubscribeParams>(r#"{}"#);
    request::<CreateTokenParams>(r#"{"name":"ci","scopes":["kv:read:*"],"ttl_secs":60}"#);
    request::<RegisterAgentParams>(
        r#"{"name":"a","role":"reviewer","release_on_disconnect":false,"takeover":true}"#,
    );
    request::<SendMessageParams>(r#"{"session_id":"s","to":"*","body":"hi"}"#);
    request::<SendMessageParams>(
        r#"{"session_id":"s","to":["a","b"],"subject":"re","body":{"n": 1.0},"thread_id":"t"}"#,
    );
    request::<HealthParams>("{}");
    request::<SetParams>(
        r#"{"namespace":"n","key":"k","value":1,"fence":{"resource_key":"file:a.md","lease_id":"l-1"}}"#,
    );
    request::<TxnParams>(
        r#"{"compare":[{"namespace":"n","key":"k","version":2},{"resource_key":"tool:x","fencing_token":7}],"ops":[{"op":"delete","namespace":"n","key":"k","fence":{"resource_key":"tool:x","fencing_token":7}}]}"#,
    );
}

#[test]
fn a_request_leaves_out_what_it_does_not_say() {
    let set = SetParams {
        namespace: "ns".into(),
        key: "k".into(),
        value: raw("[1, 2]"),
        updated_by: None,
        expected_version: None,
        session_id: None,
        fence: None,
        idempotency_key: None,
    };
    // No `expected_version: null`, which the daemon refuses: absent is a blind write.
    assert_eq!(
        written(&set),
        r#"{"namespace":"ns","key":"k","value":[1, 2]}"#
    );
    let txn = TxnParams {
        compare: Vec::new(),
        ops: Vec::new(),
        updated_by: None,
        idempotency_key: None,
    };
    assert_eq!(written(&txn), "{}");
    assert_eq!(written(&MetricsParams {}), "{}");
}

const HOLDER: &str = r#"{"owner":"bob","mode":"exclusive","provider":"mcp","fencing_token":3,"acquired_at":"2026-01-02T03:04:05.678Z","expires_at":"2026-01-02T03:09:05.678Z","remaining_ms":299000,"metadata":{"intent": "refactor", "n": [1.50, 2e3]}}"#;

const SLOT: &str = r#"{"owner":"ci","mode":"exclusive","slots":2,"provider":null,"fencing_token":5,"acquired_at":"2026-01-02T03:04:05.678Z","expires_at":"2026-01-02T03:09:05.678Z","remaining_ms":1,"metadata":null}"#;

#[test]
fn state_results_read_back_byte_for_byte() {
    answer::<GetParams>(
        r#"{"found":true,"namespace":"ns","key":"k","value":{"b": 1.50, "a": ["\u00e9", 1e400]},"version":3,"revision":7,"updated_by":"alice","updated_at":"2026-01-02T03:04:05.678Z"}"#,
    );
    answer::<GetParams>(r#"{"found":false,"namespace":"ns","key":"k"}"#);
    answer::<ListParams>(
        r#"{"records":[{"namespace":"ns","key":"a","value":12345678901234567890123,"version":1,"revision":2,"updated_by":null,"updated_at":"2026-01-02T03:04:05.678Z"},{"namespace":"ns","key":"b","value":"x","version":4,"revision":6,"updated_by":"bob","updated_at":"2026-01-02T03:04:05.678Z"}],"next_after":"b","next":"b"}"#,
    );
    answer::<ListParams>(r#"{"records":[],"next_after":null,"next":null}"#);
    answer::<HistoryParams>(
        r#"{"history":[{"version":2,"value":null,"updated_by":null,"updated_at":"2026-01-02T03:04:05.678Z","revision":5,"deleted":true},{"version":1,"value":[1.0],"updated_by":"a","updated_at":"2026-01-02T03:04:05.678Z","revision":4,"deleted":false}],"next":2}"#,
    );
    answer::<SetParams>(
        r#"{"namespace":"ns","key":"k","version":2,"previous_version":1,"revision":9}"#,
    );
    answer::<DeleteParams>(r#"{"deleted":true,"version":3,"revision":10}"#);
    answer::<DeleteParams>(r#"{"deleted":false,"version":0}"#);
    answer::<TxnParams>(
        r#"{"revision":9,"results":[{"op":"set","namespace":"ns","key":"a","version":1,"revision":9},{"op":"delete","namespace":"ns","key":"b","version":0}]}"#,
    );
}

#[test]
fn lock_results_read_back_byte_for_byte() {
    answer::<AcquireResourceLockParams>(
        r#"{"status":"acquired","resource_key":"file:a","lease_id":"L1","owner":"alice","mode":"exclusive","provider":null,"fencing_token":4,"acquired_at":"2026-01-02T03:04:05.678Z","expires_at":"2026-01-02T03:09:05.678Z","remaining_ms":300000,"metadata":{"intent": "x"},"previous":{"outcome":"moved","owner":"bob","at":"2026-01-02T03:04:05.678Z","moved_to":"file:b","note":"n"}}"#,
    );
    answer::<AcquireResourceLockParams>(
        r#"{"status":"already_held","resource_key":"file:a","owner":"alice","mode":"shared","provider":"mcp","fencing_token":4,"acquired_at":"2026-01-02T03:04:05.678Z","expires_at":"2026-01-02T03:09:05.678Z","remaining_ms":1,"metadata":null}"#,
    );
    answer::<AcquireResourceLockParams>(&format!(
        r#"{{"status":"busy","resource_key":"file:a/b","held_by":{HOLDER},"conflicting_key":"dir:a"}}"#
    ));
    // A key with several holders lists them all.
    answer::<AcquireResourceLockParams>(&format!(
        r#"{{"status":"busy","resource_key":"tool:build","held_by":[{SLOT},{SLOT}],"conflicting_key":"tool:build"}}"#
    ));
    answer::<ResourceLockStatusParams>(r#"{"status":"available","resource_key":"file:a"}"#);
    answer::<ResourceLockStatusParams>(
        r#"{"status":"available","resource_key":"file:a","previous":{"outcome":"abandoned","owner":"bob","at":"2026-01-02T03:04:05.678Z"}}"#,
    );
    answer::<ResourceLockStatusParams>(&format!(
        r#"{{"status":"held","resource_key":"file:a","held_by":{HOLDER},"conflicting_key":"file:a"}}"#
    ));
    answer::<WaitResourceLockParams>(
        r#"{"status":"available","resource_key":"file:a","waited_ms":3,"previous":{"outcome":"released","owner":"bob","at":"2026-01-02T03:04:05.678Z"}}"#,
    );
    answer::<WaitResourceLockParams>(&format!(
        r#"{{"status":"timeout","resource_key":"file:a","held_by":{HOLDER},"waited_ms":500}}"#
    ));
    answer::<ListResourceLocksParams>(&format!(
        r#"{{"locks":[{{"resource_key":"file:a",{}],"waiting":[{{"resource_key":"file:a","owner":"carol","mode":"shared"}},{{"resource_key":"tool:build","owner":"dan","mode":"shared","slots":2}}],"next":"[\"file:a\",3]"}}"#,
        &HOLDER[1..]
    ));
    answer::<HeartbeatResourceLockParams>(
        r#"{"resource_key":"file:a","expires_at":"2026-01-02T03:09:05.678Z","remaining_ms":1000}"#,
    );
    answer::<ReleaseResourceLockParams>(
        r#"{"status":"released","resource_key":"file:a","outcome":"moved"}"#,
    );
}

#[test]
fn task_journal_and_system_results_read_back_byte_for_byte() {
    answer::<RegisterTaskParams>(r#"{"task_id":"t","node_ids":["a","b"],"event_seq":3}"#);
    answer::<AcquireNextNodeParams>("null");
    answer::<AcquireNextNodeParams>(
        r#"{"task_id":"t","node_id":"n","name":null,"lease_id":"l","lease_owner":"w","lease_expires_at":"2026-01-02T03:09:05.678Z","attempt":1,"max_attempts":2,"payload":{"x": 1.50},"context":{"goal":"g","task_context":[ 1 ],"dependency_results":{"a":true,"b":{"c": 2.0}},"recent_events":[{"seq":1,"type":"task.registered","at":"2026-01-02T03:04:05.678Z","task_id":"t","data":{}}]}}"#,
    );
    answer::<TaskStatusParams>(
        r#"{"task":{"task_id":"t","goal":"g","status":"running","created_at":"2026-01-02T03:04:05.678Z","updated_at":"2026-01-02T03:04:05.678Z"},"counts":{"COMPLETED":0,"PENDING":1},"nodes":[{"node_id":"n","name":"build","state":"FAILED","dependencies":["m"],"attempts":1,"max_attempts":1,"lease_owner":null,"lease_expires_at":null,"result":null,"error":{"why": 1.50},"updated_at":"2026-01-02T03:04:05.678Z","labels":["gpu"],"ready_at":"2026-01-02T03:04:06.000Z"}],"next":null}"#,
    );
    answer::<ListTasksParams>(
        r#"{"tasks":[{"task_id":"t","goal":"g","status":"completed","created_at":"2026-01-02T03:04:05.678Z","updated_at":"2026-01-02T03:04:05.678Z"}],"next":"t"}"#,
    );
    answer::<CancelTaskParams>(r#"{"task_id":"t","status":"cancelled","cancelled_nodes":2}"#);
    answer::<ReadEventsParams>(
        r#"{"events":[{"seq":1,"type":"kv.set","at":"2026-01-02T03:04:05.678Z","actor":"a","namespace":"ns","key":"k","data":{"version": 1}},{"seq":2,"type":"lock.acquired","at":"2026-01-02T03:04:05.678Z","resource_key":"file:a","data":{}}],"next_seq":2}"#,
    );
    answer::<HealthParams>(
        r#"{"status":"degraded","database":"failing","database_error":"disk","schema_version":4,"version":"1.2.3","uptime_secs":9,"backend":"postgres","instance_id":"i1"}"#,
    );
    answer::<MetricsParams>(
        r#"{"uptime_secs":7,"methods":{"Get":{"count":5,"errors":1,"p50_us":20,"p99_us":90,"max_us":100}},"connections":{"open":2,"total":3,"accept_errors":0,"refused_unauthenticated":0,"refused_descriptors":0,"auth_timeouts":0},"auth":{"failures":0},"records":{"live":4,"tombstones":1},"journal":{"length":6,"head_seq":8,"oldest_seq":1},"storage":{"commits":10,"failed_commits":0,"writes":15,"max_batch":3,"mean_batch":1.5,"db_bytes":4096,"wal_bytes":0},"locks":{"live":11,"waiting":12,"watching":13},"tasks":{"running":1},"nodes":{},"node_waiters":0,"inbox_waiters":0,"instances":1}"#,
    );
}

#[test]
fn a_result_of_another_shape_is_refused() {
    let read = |text: &str| {
        serde_json::from_str::<<GetParams as Request>::Result>(text)
            .unwrap_err()
            .to_string()
    };
    // found, but no record: a derived reader of the flattened record would say None.
    let err = read(r#"{"found":true,"namespace":"ns","key":"k"}"#);
    assert!(err.contains("missing field"), "{err}");
    let err = serde_json::from_str::<<AcquireResourceLockParams as Request>::Result>(
        r#"{"status":"taken","resource_key":"file:a"}"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("taken"), "{err}");
    let err = serde_json::from_str::<<ReleaseResourceLockParams as Request>::Result>(
        r#"{"status":"kept","resource_key":"file:a","outcome":"released"}"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("kept"), "{err}");
}
