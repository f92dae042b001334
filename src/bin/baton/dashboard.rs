//! `baton dashboard`: a short-lived read-only token and the URL that logs in with it.

use baton::client::Connection;
use baton::protocol::auth::CreateTokenParams;
use baton::protocol::system::HealthParams;

use crate::failure::{Failure, Outcome};

/// Creates a `read` token that lasts `ttl` seconds, prints the dashboard URL that logs in
/// with it and, on a desktop, opens it.
pub async fn dashboard(
    ttl: u64,
    http: Option<String>,
    no_open: bool,
    conn: &mut Connection,
) -> Outcome {
    let base = match http {
        Some(base) => base,
        None => {
            let health = conn.call(&HealthParams {}).await?;
            match health.dashboard {
                Some(base) => base,
                None => {
                    return Err(Failure::new(
                        1,
                        "batond serves no dashboard: start it with --http 127.0.0.1:7421 (or BATON_HTTP_LISTEN), or pass --http URL if it is behind a proxy",
                    ))
                }
            }
        }
    };
    let create = CreateTokenParams {
        name: "dashboard".into(),
        scopes: vec!["read".into()],
        ttl_secs: Some(ttl),
        idempotency_key: None,
    };
    let token = conn.call(&create).await?.token;
    // In the fragment, which the browser keeps to itself: the login page's script takes it
    // out of the address bar and posts it.
    let url = format!("{}/login#token={token}", base.trim_end_matches('/'));
    println!("{url}");
    eprintln!(
        "a read-only token for the dashboard, valid {}; the URL logs in with it (keep it to yourself)",
        lasting(ttl)
    );
    if !no_open && on_a_desktop() {
        open(&url);
    }
    Ok(0)
}

fn lasting(secs: u64) -> String {
    match secs {
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

fn on_a_desktop() -> bool {
    cfg!(target_os = "macos")
        || std::env::var_os("DISPLAY").is_some()
        || std::env::var_os("WAYLAND_DISPLAY").is_some()
}

/// Hands the URL to the desktop's browser; says so when it cannot.
fn open(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let started = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(err) = started {
        eprintln!("cannot open a browser with {opener} ({err}); open the URL above yourself");
    }
}
