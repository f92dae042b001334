//! `baton`: batond from a terminal or a shell script. Tables for people, `--json` for
//! scripts, and exit codes a script can branch on (see `baton --help`).

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use serde_json::{json, Value};

use baton::client::Connection;
use baton::config::Config;

mod cli;
mod events;
mod failure;
mod lock;
mod out;
mod task;

use cli::{arg_or_stdin, params, parse_json, Cli, Colour, Command};
use events::follow_events;
use failure::{Failure, Outcome};
use lock::lock;
use out::{compact, event_row, text, Out};
use task::task;

async fn run(cli: Cli, out: &Out, conn: &mut Connection) -> Outcome {
    match cli.command {
        Command::Get { namespace, key } => {
            let r = conn
                .call("Get", &json!({"namespace": namespace, "key": key}))
                .await?;
            if out.json {
                out.raw(&r);
            } else if r["found"] == true {
                eprintln!(
                    "{}/{}  version {}  revision {}  by {}  at {}",
                    namespace,
                    key,
                    r["version"],
                    r["revision"],
                    text(&r["updated_by"]),
                    text(&r["updated_at"])
                );
                println!(
                    "{}",
                    serde_json::to_string_pretty(&r["value"]).unwrap_or_default()
                );
            }
            match (r["found"] == true, out.json) {
                (true, _) => Ok(0),
                (false, true) => Ok(3),
                (false, false) => Err(Failure::new(
                    3,
                    format!("{namespace}/{key} does not exist; write it with `baton set {namespace} {key} VALUE`"),
                )),
            }
        }
        Command::Set {
            namespace,
            key,
            value,
            expect,
            by,
            string,
        } => {
            let value = arg_or_stdin(&value)?;
            let value = if string {
                Value::String(value)
            } else {
                serde_json::from_str(&value).unwrap_or(Value::String(value))
            };
            let r = conn
                .call(
                    "Set",
                    &params(vec![
                        ("namespace", Some(json!(namespace))),
                        ("key", Some(json!(key))),
                        ("value", Some(value)),
                        ("expected_version", expect.map(Value::from)),
                        ("updated_by", by.map(Value::from)),
                    ]),
                )
                .await?;
            if out.json {
                out.raw(&r);
            } else {
                println!(
                    "{namespace}/{key}  version {} (was {})  revision {}",
                    r["version"], r["previous_version"], r["revision"]
                );
            }
            Ok(0)
        }
        Command::Delete {
            namespace,
            key,
            expect,
            by,
        } => {
            let r = conn
                .call(
                    "Delete",
                    &params(vec![
                        ("namespace", Some(json!(namespace))),
                        ("key", Some(json!(key))),
                        ("expected_version", expect.map(Value::from)),
                        ("updated_by", by.map(Value::from)),
                    ]),
                )
                .await?;
            if out.json {
                out.raw(&r);
            } else if r["deleted"] == true {
                println!("{namespace}/{key}  deleted at version {}", r["version"]);
            } else {
                println!("{namespace}/{key}  did not exist");
            }
            Ok(0)
        }
        Command::List {
            namespace,
            prefix,
            limit,
        } => {
            let r = conn
                .call(
                    "List",
                    &params(vec![
                        ("namespace", Some(json!(namespace))),
                        ("prefix", prefix.map(Value::from)),
                        ("limit", Some(json!(limit))),
                    ]),
                )
                .await?;
            if out.json {
                out.raw(&r);
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = r["records"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|rec| {
                    vec![
                        text(&rec["key"]),
                        rec["version"].to_string(),
                        compact(&rec["value"], 50),
                        text(&rec["updated_by"]),
                        text(&rec["updated_at"]),
                    ]
                })
                .collect();
            out.table(
                &["KEY", "VERSION", "VALUE", "UPDATED_BY", "UPDATED_AT"],
                &rows,
            );
            if let Some(after) = r["next_after"].as_str() {
                eprintln!("more: --prefix or a larger --limit (next page after {after})");
            }
            Ok(0)
        }
        Command::History {
            namespace,
            key,
            limit,
        } => {
            let r = conn
                .call(
                    "History",
                    &params(vec![
                        ("namespace", Some(json!(namespace))),
                        ("key", Some(json!(key))),
                        ("limit", limit.map(Value::from)),
                    ]),
                )
                .await?;
            if out.json {
                out.raw(&r);
                return Ok(0);
            }
            let history = r["history"].as_array().cloned().unwrap_or_default();
            if history.is_empty() {
                return Err(Failure::new(
                    3,
                    format!("{namespace}/{key} has never been written"),
                ));
            }
            let rows: Vec<Vec<String>> = history
                .iter()
                .map(|h| {
                    vec![
                        h["version"].to_string(),
                        if h["deleted"] == true {
                            out.paint("31", "(deleted)")
                        } else {
                            compact(&h["value"], 50)
                        },
                        text(&h["updated_by"]),
                        text(&h["updated_at"]),
                        h["revision"].to_string(),
                    ]
                })
                .collect();
            out.table(
                &["VERSION", "VALUE", "UPDATED_BY", "UPDATED_AT", "REVISION"],
                &rows,
            );
            Ok(0)
        }
        Command::Lock(command) => lock(command, out, conn).await,
        Command::Task(command) => task(command, out, conn).await,
        Command::Events {
            since,
            follow,
            types,
            namespace,
            key_prefix,
            resource_prefix,
            task,
            limit,
        } => {
            let filter = params(vec![
                (
                    "types",
                    (!types.is_empty()).then(|| Value::from(types.clone())),
                ),
                ("namespace", namespace.map(Value::from)),
                ("key_prefix", key_prefix.map(Value::from)),
                ("resource_prefix", resource_prefix.map(Value::from)),
                ("task_id", task.map(Value::from)),
            ]);
            if follow {
                return follow_events(out, conn, since, filter).await;
            }
            let mut p = filter.as_object().cloned().unwrap_or_default();
            p.insert("since_seq".into(), json!(since.unwrap_or(0)));
            p.insert("limit".into(), json!(limit));
            let r = conn.call("ReadEvents", &Value::Object(p)).await?;
            if out.json {
                out.raw(&r);
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = r["events"]
                .as_array()
                .into_iter()
                .flatten()
                .map(event_row)
                .collect();
            out.table(&["SEQ", "AT", "TYPE", "SUBJECT", "ACTOR", "DATA"], &rows);
            eprintln!("next: baton events --since {}", r["next_seq"]);
            Ok(0)
        }
        Command::Health => {
            let r = conn.call("Health", &json!({})).await?;
            if out.json {
                out.raw(&r);
            } else {
                println!(
                    "{}  batond {}  schema {}  database {}  up {}s",
                    out.status(r["status"].as_str().unwrap_or("?")),
                    text(&r["version"]),
                    r["schema_version"],
                    text(&r["database"]),
                    r["uptime_secs"]
                );
            }
            Ok(0)
        }
        Command::Metrics => {
            let r = conn.call("Metrics", &json!({})).await?;
            if out.json {
                out.raw(&r);
                return Ok(0);
            }
            println!(
                "up {}s  connections {} open ({} total)  records {} live  journal {} events (head {})  commits {} (mean batch {:.1})  locks {} live, {} waiting",
                r["uptime_secs"],
                r["connections"]["open"],
                r["connections"]["total"],
                r["records"]["live"],
                r["journal"]["length"],
                r["journal"]["head_seq"],
                r["storage"]["commits"],
                r["storage"]["mean_batch"].as_f64().unwrap_or(0.0),
                r["locks"]["live"],
                r["locks"]["waiting"],
            );
            let rows: Vec<Vec<String>> = r["methods"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(name, m)| {
                    let mut row = vec![
                        name.clone(),
                        m["count"].to_string(),
                        m["errors"].to_string(),
                    ];
                    for field in ["p50_us", "p99_us"] {
                        row.push(
                            m.get(field)
                                .map(|v| v.to_string())
                                .unwrap_or_else(|| "-".into()),
                        );
                    }
                    row
                })
                .collect();
            if !rows.is_empty() {
                println!();
                out.table(&["METHOD", "REQUESTS", "ERRORS", "P50_US", "P99_US"], &rows);
            }
            Ok(0)
        }
        Command::Call { method, params } => {
            let params = match params {
                Some(p) => parse_json("PARAMS", &arg_or_stdin(&p)?)?,
                None => json!({}),
            };
            let r = conn.call(&method, &params).await?;
            out.raw(&r);
            Ok(0)
        }
    }
}

fn main() -> ExitCode {
    // Die quietly when the reader goes away (`baton events | head`), as Unix tools do.
    // SAFETY: restoring the default disposition of one signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let colour = |tty: bool| match cli.color {
        Colour::Always => true,
        Colour::Never => false,
        Colour::Auto => tty && !no_color,
    };
    let out = Out {
        json: cli.json,
        colour: colour(std::io::stdout().is_terminal()),
    };
    let err_colour = colour(std::io::stderr().is_terminal());
    let socket = match Config::client_socket(cli.socket.as_deref()) {
        Ok(socket) => socket,
        Err(err) => {
            eprintln!("baton: {err}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("baton: cannot start: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let mut conn = Connection::connect(&socket).await?;
        run(cli, &out, &mut conn).await
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            let label = if err_colour {
                "\x1b[31mbaton:\x1b[0m"
            } else {
                "baton:"
            };
            eprintln!("{label} {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}
