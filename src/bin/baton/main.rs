//! `baton`: batond from a terminal or a shell script. Tables for people, `--json` for
//! scripts, and exit codes a script can branch on (see `baton --help`).

use std::io::IsTerminal;
use std::process::ExitCode;

use std::collections::BTreeMap;

use clap::Parser;
use serde::Deserialize;
use serde_json::{json, Value};

use baton::client::{read_as, Connection, Target};
use baton::protocol::journal::ReadEventsResult;
use baton::protocol::state::{DeleteResult, GetResult, HistoryResult, ListResult, SetResult};

mod agent;
mod cli;
mod dashboard;
mod events;
mod failure;
mod guard;
mod lock;
mod out;
mod task;
mod token;

use cli::{arg_or_stdin, params, parse_json, Cli, Colour, Command, GuardCommand, HookTool};
use events::follow_events;
use failure::{Failure, Outcome};
use lock::lock;
use out::{compact_raw, event_row, or_dash, pretty, text, Out};
use task::task;

async fn run(command: Command, out: &Out, conn: &mut Connection) -> Outcome {
    match command {
        Command::Get { namespace, key } => {
            let result = conn
                .call_raw("Get", &json!({"namespace": namespace, "key": key}))
                .await?;
            let r: GetResult = read_as("Get", &result)?;
            if out.json {
                out.raw(&result);
            } else if let Some(record) = &r.record {
                eprintln!(
                    "{}/{}  version {}  revision {}  by {}  at {}",
                    namespace,
                    key,
                    record.version,
                    record.revision,
                    or_dash(record.updated_by.as_deref()),
                    text(&record.updated_at)
                );
                println!("{}", pretty(&record.value));
            }
            match (r.found, out.json) {
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
            let answer = out
                .answer::<SetResult>(
                    conn,
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
            if let Some(r) = answer {
                println!(
                    "{namespace}/{key}  version {} (was {})  revision {}",
                    r.version, r.previous_version, r.revision
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
            let answer = out
                .answer::<DeleteResult>(
                    conn,
                    "Delete",
                    &params(vec![
                        ("namespace", Some(json!(namespace))),
                        ("key", Some(json!(key))),
                        ("expected_version", expect.map(Value::from)),
                        ("updated_by", by.map(Value::from)),
                    ]),
                )
                .await?;
            match answer {
                Some(r) if r.deleted => {
                    println!("{namespace}/{key}  deleted at version {}", r.version)
                }
                Some(_) => println!("{namespace}/{key}  did not exist"),
                None => {}
            }
            Ok(0)
        }
        Command::List {
            namespace,
            prefix,
            limit,
        } => {
            let answer = out
                .pages::<ListResult>(
                    conn,
                    "List",
                    &params(vec![
                        ("namespace", Some(json!(namespace))),
                        ("prefix", prefix.map(Value::from)),
                    ]),
                    &["records"],
                    Some(limit),
                )
                .await?;
            let Some(r) = answer else { return Ok(0) };
            let rows: Vec<Vec<String>> = r
                .records
                .iter()
                .map(|rec| {
                    vec![
                        text(&rec.key),
                        rec.state.version.to_string(),
                        compact_raw(&rec.state.value, 50),
                        or_dash(rec.state.updated_by.as_deref()),
                        text(&rec.state.updated_at),
                    ]
                })
                .collect();
            out.table(
                &["KEY", "VERSION", "VALUE", "UPDATED_BY", "UPDATED_AT"],
                &rows,
            );
            if let Some(after) = &r.next {
                eprintln!("more after {after}: give a larger --limit, or a --prefix");
            }
            Ok(0)
        }
        Command::History {
            namespace,
            key,
            limit,
        } => {
            let answer = out
                .pages::<HistoryResult>(
                    conn,
                    "History",
                    &params(vec![
                        ("namespace", Some(json!(namespace))),
                        ("key", Some(json!(key))),
                    ]),
                    &["history"],
                    limit,
                )
                .await?;
            let Some(HistoryResult { history, .. }) = answer else {
                return Ok(0);
            };
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
                        h.version.to_string(),
                        if h.deleted {
                            out.paint("31", "(deleted)")
                        } else {
                            compact_raw(&h.value, 50)
                        },
                        or_dash(h.updated_by.as_deref()),
                        text(&h.updated_at),
                        h.revision.to_string(),
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
        Command::Token(command) => token::token(command, out, conn).await,
        Command::Guard(_) => unreachable!("guards connect on their own"),
        Command::Agent(command) => agent::agent(command, out, conn).await,
        Command::Agents => agent::agents(out, conn).await,
        Command::Dashboard { ttl, http, no_open } => {
            dashboard::dashboard(ttl, http, no_open, conn).await
        }
        Command::Send {
            to,
            body,
            subject,
            thread,
            session,
        } => agent::send(session, to, body, subject, thread, out, conn).await,
        Command::Inbox {
            after,
            follow,
            session,
        } => agent::inbox(session, after, follow, out, conn).await,
        Command::Ack { up_to, session } => agent::ack(session, up_to, out, conn).await,
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
            let answer = out
                .answer::<ReadEventsResult>(conn, "ReadEvents", &Value::Object(p))
                .await?;
            let Some(r) = answer else { return Ok(0) };
            let rows: Vec<Vec<String>> = r.events.iter().map(event_row).collect();
            out.table(&["SEQ", "AT", "TYPE", "SUBJECT", "ACTOR", "DATA"], &rows);
            eprintln!("next: baton events --since {}", r.next_seq);
            Ok(0)
        }
        Command::Health => {
            if let Some(r) = out.answer::<Health>(conn, "Health", &json!({})).await? {
                println!(
                    "{}  batond {}  schema {}  database {} ({})  up {}s  instance {}",
                    out.status(&r.status),
                    text(&r.version),
                    r.schema_version,
                    text(&r.database),
                    text(&r.backend),
                    r.uptime_secs,
                    text(&r.instance_id)
                );
            }
            Ok(0)
        }
        Command::Metrics => {
            let Some(r) = out.answer::<Metrics>(conn, "Metrics", &json!({})).await? else {
                return Ok(0);
            };
            println!(
                "up {}s  connections {} open ({} total)  records {} live  journal {} events (head {})  commits {} (mean batch {:.1})  locks {} live, {} waiting",
                r.uptime_secs,
                r.connections.open,
                r.connections.total,
                r.records.live,
                r.journal.length,
                r.journal.head_seq,
                r.storage.commits,
                r.storage.mean_batch,
                r.locks.live,
                r.locks.waiting,
            );
            let rows: Vec<Vec<String>> = r
                .methods
                .iter()
                .map(|(name, m)| {
                    vec![
                        name.clone(),
                        m.count.to_string(),
                        m.errors.to_string(),
                        m.p50_us.to_string(),
                        m.p99_us.to_string(),
                    ]
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
            out.raw(&conn.call_raw(&method, &params).await?);
            Ok(0)
        }
    }
}

/// What `baton health` reads of Health's result. The daemon's `HealthResult` is written
/// from static strings and cannot be read back; the test below ties the two.
#[derive(Deserialize)]
struct Health {
    status: String,
    database: String,
    schema_version: i64,
    version: String,
    uptime_secs: u64,
    backend: String,
    instance_id: String,
}

/// What `baton metrics` reads of Metrics' result (`MetricsResult`, likewise write-only).
#[derive(Deserialize)]
struct Metrics {
    uptime_secs: u64,
    methods: BTreeMap<String, MethodFigures>,
    connections: ConnectionFigures,
    records: RecordFigures,
    journal: JournalFigures,
    storage: StorageFigures,
    locks: LockFigures,
}

#[derive(Deserialize)]
struct MethodFigures {
    count: u64,
    errors: u64,
    p50_us: u64,
    p99_us: u64,
}

#[derive(Deserialize)]
struct ConnectionFigures {
    open: u64,
    total: u64,
}

#[derive(Deserialize)]
struct RecordFigures {
    live: u64,
}

#[derive(Deserialize)]
struct JournalFigures {
    length: u64,
    head_seq: u64,
}

#[derive(Deserialize)]
struct StorageFigures {
    commits: u64,
    mean_batch: f64,
}

#[derive(Deserialize)]
struct LockFigures {
    live: u64,
    waiting: u64,
}

/// `baton guard ...`.
async fn guard_command(command: GuardCommand, target: &Target) -> Outcome {
    match command {
        GuardCommand::Check {
            owner,
            staged,
            repo,
            paths,
        } => {
            let here = std::env::current_dir()
                .map_err(|e| Failure::new(1, format!("cannot read the working directory ({e})")))?;
            let mut all: Vec<_> = paths.iter().map(|p| guard::absolute(p, &here)).collect();
            if staged {
                all.extend(guard::staged(&repo.unwrap_or(here))?);
            }
            let owner = guard::owner(owner);
            match guard::ask(target, owner.as_deref(), &all).await {
                Ok(refusals) if refusals.is_empty() => Ok(0),
                Ok(refusals) => {
                    for refusal in &refusals {
                        eprintln!("baton guard: {}", refusal.0);
                    }
                    Ok(guard::REFUSED)
                }
                Err(failure) => Ok(guard::unanswered(&failure, failure.code)),
            }
        }
        GuardCommand::Install {
            target: what,
            repo,
            project,
        } => guard::install(what, repo.or(project)),
        GuardCommand::Uninstall {
            target: what,
            repo,
            project,
        } => guard::uninstall(what, repo.or(project)),
        GuardCommand::Hook {
            tool: HookTool::ClaudeCode,
        } => Ok(claude_code_hook(target).await),
    }
}

/// Claude Code's PreToolUse hook: exit 0 lets the call through; exit 2 blocks it and
/// Claude Code shows the model what was written to stderr (the hooks reference,
/// https://code.claude.com/docs/en/hooks, "Exit code 2 behavior").
async fn claude_code_hook(target: &Target) -> u8 {
    const BLOCK: u8 = 2;
    let mut input = String::new();
    if std::io::Read::read_to_string(&mut std::io::stdin(), &mut input).is_err() {
        eprintln!("baton guard: cannot read the hook input; letting the call through");
        return 0;
    }
    let Ok(input) = serde_json::from_str::<Value>(&input) else {
        eprintln!("baton guard: the hook input is not JSON; letting the call through");
        return 0;
    };
    let Some(path) = guard::hook_target(&input) else {
        return 0;
    };
    let owner = guard::owner(None);
    match guard::ask(target, owner.as_deref(), &[path]).await {
        Ok(refusals) if refusals.is_empty() => 0,
        Ok(refusals) => {
            for refusal in &refusals {
                eprintln!("{} Do not write this file now.", refusal.0);
            }
            BLOCK
        }
        Err(failure) => guard::unanswered(&failure, BLOCK),
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
    let target = match Target::from_flags(
        cli.url.as_deref(),
        cli.socket.as_deref(),
        cli.token.as_deref(),
    ) {
        Ok(target) => target,
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
        match cli.command {
            // A guard decides for itself what an unreachable batond means.
            Command::Guard(command) => guard_command(command, &target).await,
            command => {
                let mut conn = Connection::open(&target).await?;
                run(command, &out, &mut conn).await
            }
        }
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use baton::methods::system::{
        AuthFigures, ConnectionFigures, HealthResult, JournalFigures, LockFigures, MetricsResult,
        RecordFigures, StorageFigures,
    };
    use baton::metrics::MethodFigures;
    use serde_json::value::to_raw_value;

    use super::*;

    #[test]
    fn health_reads_what_the_daemon_writes() {
        let health = HealthResult {
            status: "degraded".into(),
            database: "failing".into(),
            database_error: Some("disk".into()),
            schema_version: 4,
            version: "1.2.3".into(),
            uptime_secs: 9,
            backend: "postgres".into(),
            instance_id: "i1".into(),
            dashboard: None,
        };
        let r: Health = read_as("Health", &to_raw_value(&health).unwrap()).unwrap();
        assert_eq!(
            (r.status.as_str(), r.database.as_str(), r.schema_version),
            ("degraded", "failing", 4)
        );
        assert_eq!((r.version.as_str(), r.uptime_secs), ("1.2.3", 9));
        assert_eq!(
            (r.backend.as_str(), r.instance_id.as_str()),
            ("postgres", "i1")
        );
    }

    #[test]
    fn metrics_reads_what_the_daemon_writes() {
        let figures = MethodFigures {
            count: 5,
            errors: 1,
            p50_us: 20,
            p99_us: 90,
            max_us: 100,
        };
        let metrics = MetricsResult {
            uptime_secs: 7,
            methods: BTreeMap::from([("Get".into(), figures)]),
            connections: ConnectionFigures {
                open: 2,
                total: 3,
                accept_errors: 0,
                refused_unauthenticated: 0,
                refused_descriptors: 0,
                auth_timeouts: 0,
            },
            records: RecordFigures {
                live: 4,
                tombstones: 1,
            },
            journal: JournalFigures {
                length: 6,
                head_seq: 8,
                oldest_seq: 1,
            },
            storage: StorageFigures {
                commits: 10,
                failed_commits: 0,
                writes: 15,
                max_batch: 3,
                mean_batch: 1.5,
                db_bytes: 4096,
                wal_bytes: 0,
            },
            auth: AuthFigures { failures: 0 },
            locks: LockFigures {
                live: 11,
                waiting: 12,
                watching: 13,
            },
            tasks: BTreeMap::new(),
            nodes: BTreeMap::new(),
            node_waiters: 0,
            inbox_waiters: 0,
            instances: 1,
        };
        let r: Metrics = read_as("Metrics", &to_raw_value(&metrics).unwrap()).unwrap();
        let get = &r.methods["Get"];
        assert_eq!(
            (get.count, get.errors, get.p50_us, get.p99_us),
            (5, 1, 20, 90)
        );
        assert_eq!(
            (r.uptime_secs, r.connections.open, r.connections.total),
            (7, 2, 3)
        );
        assert_eq!(
            (r.records.live, r.journal.length, r.journal.head_seq),
            (4, 6, 8)
        );
        assert_eq!((r.storage.commits, r.storage.mean_batch), (10, 1.5));
        assert_eq!((r.locks.live, r.locks.waiting), (11, 12));
    }
}
