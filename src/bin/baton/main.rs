//! `baton`: batond from a terminal or a shell script. Tables for people, `--json` for
//! scripts, and exit codes a script can branch on (see `baton --help`).

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use serde_json::{json, Value};

use baton::client::{read, Connection, Target};
use baton::protocol::journal::{EventFilter, ReadEventsParams};
use baton::protocol::state::{
    DeleteParams, GetParams, HistoryParams, HistoryResult, ListParams, SetParams,
};
use baton::protocol::system::{HealthParams, MetricsParams};

mod agent;
mod cli;
mod dashboard;
mod events;
mod failure;
mod guard;
mod hook;
mod lock;
mod out;
mod setup;
mod task;
mod token;

use cli::{arg_or_stdin, json, parse_json, Cli, Colour, Command, GuardCommand, HookCommand};
use events::follow_events;
use failure::{Failure, Outcome};
use lock::lock;
use out::{compact_raw, event_row, or_dash, pretty, text, Out};
use task::task;

async fn run(command: Command, out: &Out, conn: &mut Connection) -> Outcome {
    match command {
        Command::Get { namespace, key } => {
            let get = GetParams {
                namespace: namespace.clone(),
                key: key.clone(),
            };
            let result = conn.send(&get).await?;
            let r = read::<GetParams>(&result)?;
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
            fence,
        } => {
            let fence = cli::fence(fence)?;
            let value = arg_or_stdin(&value)?;
            let value = if string {
                Value::String(value)
            } else {
                serde_json::from_str(&value).unwrap_or(Value::String(value))
            };
            let set = SetParams {
                namespace: namespace.clone(),
                key: key.clone(),
                value: json(&value),
                updated_by: by,
                expected_version: expect,
                session_id: None,
                fence,
                idempotency_key: None,
            };
            let answer = out.answer(conn, &set).await?;
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
            fence,
        } => {
            let delete = DeleteParams {
                namespace: namespace.clone(),
                key: key.clone(),
                expected_version: expect,
                updated_by: by,
                fence: cli::fence(fence)?,
                idempotency_key: None,
            };
            let answer = out.answer(conn, &delete).await?;
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
            let list = ListParams {
                namespace,
                prefix,
                limit: None,
                after: None,
            };
            let answer = out.pages(conn, &list, &["records"], Some(limit)).await?;
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
            let history = HistoryParams {
                namespace: namespace.clone(),
                key: key.clone(),
                limit: None,
                before_version: None,
                after: None,
            };
            let answer = out.pages(conn, &history, &["history"], limit).await?;
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
        Command::Guard(_) | Command::Hook(_) | Command::Setup { .. } => {
            unreachable!("guards, hooks and setup connect on their own, or not at all")
        }
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
            let types = (!types.is_empty()).then_some(types);
            if follow {
                let filter = EventFilter {
                    types,
                    namespace,
                    key_prefix,
                    resource_prefix,
                    task_id: task,
                };
                return follow_events(out, conn, since, filter).await;
            }
            let read = ReadEventsParams {
                since_seq: Some(since.unwrap_or(0)),
                limit: Some(limit),
                types,
                namespace,
                key_prefix,
                resource_prefix,
                task_id: task,
            };
            let answer = out.answer(conn, &read).await?;
            let Some(r) = answer else { return Ok(0) };
            let rows: Vec<Vec<String>> = r.events.iter().map(event_row).collect();
            out.table(&["SEQ", "AT", "TYPE", "SUBJECT", "ACTOR", "DATA"], &rows);
            eprintln!("next: baton events --since {}", r.next_seq);
            Ok(0)
        }
        Command::Health => {
            if let Some(r) = out.answer(conn, &HealthParams {}).await? {
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
            let Some(r) = out.answer(conn, &MetricsParams {}).await? else {
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
                        name.to_string(),
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
                        eprintln!("baton guard: {}", refusal.text);
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
        GuardCommand::Hook { tool, agent } => Ok(hook::guard(tool, agent, target).await),
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
    let (cli_url, cli_socket) = (cli.url.clone(), cli.socket.clone());
    let result = runtime.block_on(async {
        match cli.command {
            // A guard or a hook decides for itself what an unreachable batond means.
            Command::Guard(command) => guard_command(command, &target).await,
            Command::Hook(HookCommand::Context { harness, agent }) => {
                Ok(hook::context(harness, agent, &target).await)
            }
            Command::Hook(HookCommand::Stop { harness, agent }) => {
                Ok(hook::stop(harness, agent, &target).await)
            }
            // Setup only writes files.
            Command::Setup {
                harnesses,
                agent,
                user,
                dry_run,
                uninstall,
            } => setup::setup(setup::Request {
                harnesses,
                agent,
                user,
                dry_run,
                uninstall,
                url: cli_url.clone(),
                socket: cli_socket.clone(),
                target: &target,
            }),
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
