//! A fresh daemon with `BATON_UNIX_AUTH=token` can be administered: with no admin token,
//! it writes a one-time admin token to a file in its home only its user can read.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use crate::common::{assert_error, Daemon};

#[test]
fn a_fresh_daemon_with_token_auth_writes_a_one_time_admin_token() {
    let mut daemon = Daemon::start_with(&["--unix-auth", "token"]);
    let path = daemon.home().join("bootstrap-token");
    let mode = std::fs::metadata(&path)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", path.display(), daemon.log()))
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "readable by batond's user only");
    let secret = std::fs::read_to_string(&path).unwrap().trim().to_string();
    assert!(
        !daemon.log().contains(&secret),
        "the secret is never logged"
    );

    let mut c = daemon.client();
    assert_error(&c.error("ListTokens", json!({})), 401, "unauthenticated");
    c.result("Authenticate", json!({"token": secret}));
    let created = c.result("CreateToken", json!({"name": "ops", "scopes": ["admin"]}));

    // Once an admin token exists, a restart writes none.
    std::fs::remove_file(&path).unwrap();
    daemon.sigterm();
    daemon.restart();
    assert!(
        !path.exists(),
        "no new one-time token while an admin token lives"
    );
    let mut c = daemon.client();
    c.result("Authenticate", json!({"token": created["token"]}));
    c.result("ListTokens", json!({}));
}
