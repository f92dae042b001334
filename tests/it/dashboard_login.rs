//! The dashboard's login (contract v1.2): by POST from its own page only (same origin, and
//! the form's nonce matching its cookie), never with the token in the address; and an
//! event stream resumed from an impossible seq is the client's error (400).

use std::net::SocketAddr;

use crate::net::token;
use crate::net_limits::{http_daemon, http_request};

/// Sends one request (`Connection: close` added) and returns the whole answer.
fn http(addr: SocketAddr, method: &str, path: &str, headers: &[String], body: &str) -> String {
    http_request(
        addr,
        method,
        path,
        headers,
        "application/x-www-form-urlencoded",
        body,
    )
}

/// The login form's nonce and the cookie that carries it.
fn login_form(addr: SocketAddr) -> (String, String) {
    let page = http(addr, "GET", "/login", &[], "");
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let marker = "name=\"csrf\" value=\"";
    let at = page.find(marker).expect("a nonce in the form") + marker.len();
    let nonce = page[at..].split('"').next().unwrap().to_string();
    assert!(
        page.contains(&format!("set-cookie: baton_login={nonce};")),
        "{page}"
    );
    let cookie = format!("Cookie: baton_login={nonce}");
    (nonce, cookie)
}

fn sets_session(answer: &str) -> bool {
    answer.contains("set-cookie: baton_session=baton_")
}

#[test]
fn the_dashboard_logs_in_by_post_from_its_own_page_only() {
    let (daemon, addr) = http_daemon(&[]);
    let reader = token(&daemon, &["read"]);
    let origin = format!("Origin: http://{addr}");

    // The token in the address is refused (it would stay in the history), and says why.
    let answer = http(addr, "GET", &format!("/login?token={reader}"), &[], "");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("does not go in the address"), "{answer}");
    assert!(!sets_session(&answer), "{answer}");

    // Another site's form: its Origin, or the browser's Sec-Fetch-Site, gives it away.
    let (nonce, cookie) = login_form(addr);
    let body = format!("token={reader}&csrf={nonce}");
    for header in ["Origin: http://evil.example", "Sec-Fetch-Site: cross-site"] {
        let answer = http(
            addr,
            "POST",
            "/login",
            &[cookie.clone(), header.into()],
            &body,
        );
        assert!(answer.starts_with("HTTP/1.1 403"), "{header}: {answer}");
        assert!(!sets_session(&answer), "{header}: {answer}");
        assert!(answer.contains("Log in on this page"), "{answer}");
    }
    // Without the form's nonce (another site cannot read or set it): refused.
    let answer = http(addr, "POST", "/login", std::slice::from_ref(&origin), &body);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(!sets_session(&answer), "{answer}");
    let answer = http(
        addr,
        "POST",
        "/login",
        &[origin.clone(), "Cookie: baton_login=0123".into()],
        &body,
    );
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");

    // From its own page: logged in, and on to the dashboard.
    let (nonce, cookie) = login_form(addr);
    let body = format!("token={reader}&csrf={nonce}");
    let answer = http(
        addr,
        "POST",
        "/login",
        &[cookie, origin, "Sec-Fetch-Site: same-origin".into()],
        &body,
    );
    assert!(answer.starts_with("HTTP/1.1 303"), "{answer}");
    assert!(answer.contains("location: /\r\n"), "{answer}");
    assert!(sets_session(&answer), "{answer}");
    // Over plain HTTP there is no HSTS (HTTPS's is in `https`).
    assert!(!answer.contains("strict-transport-security"), "{answer}");
}

#[test]
fn a_last_event_id_beyond_2_63_is_400() {
    let (daemon, addr) = http_daemon(&[]);
    let reader = token(&daemon, &["read"]);
    let bearer = format!("Authorization: Bearer {reader}");
    for last in ["9223372036854775808", "18446744073709551615", "-1", "x"] {
        let answer = http(
            addr,
            "GET",
            "/events",
            &[bearer.clone(), format!("Last-Event-ID: {last}")],
            "",
        );
        assert!(answer.starts_with("HTTP/1.1 400"), "{last}: {answer}");
        assert!(answer.contains("reload the page"), "{answer}");
    }
    let answer = http(
        addr,
        "GET",
        "/events?since_seq=9223372036854775808",
        &[bearer],
        "",
    );
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
}

#[test]
fn the_login_link_logs_in_only_when_no_other_site_sent_the_browser() {
    let (_daemon, addr) = http_daemon(&[]);
    // `baton dashboard`'s /login#token=...: opened from the terminal (no Sec-Fetch-Site
    // from a non-browser, `none` from a browser) or from this dashboard, the page's script
    // logs in with the fragment's token.
    for header in [None, Some("none"), Some("same-origin")] {
        let headers: Vec<String> = header
            .map(|site| format!("Sec-Fetch-Site: {site}"))
            .into_iter()
            .collect();
        let page = http(addr, "GET", "/login", &headers, "");
        assert!(page.contains(r#"data-auto="on""#), "{header:?}: {page}");
    }
    // Another site's link to it would log the visitor in with that site's token: the page
    // only takes the token out of the address, and says why.
    for site in ["cross-site", "same-site"] {
        let page = http(
            addr,
            "GET",
            "/login",
            &[format!("Sec-Fetch-Site: {site}")],
            "",
        );
        assert!(page.contains(r#"data-auto="off""#), "{site}: {page}");
        assert!(page.contains("Another site sent you here"), "{page}");
    }
}
