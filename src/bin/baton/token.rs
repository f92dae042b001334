//! `baton token ...`: access tokens for network clients (admin only).

use baton::client::Connection;
use baton::protocol::auth::{CreateTokenParams, ListTokensParams, RevokeTokenParams};

use crate::cli::TokenCommand;
use crate::failure::Outcome;
use crate::out::{or_dash, text, Out};

pub async fn token(command: TokenCommand, out: &Out, conn: &mut Connection) -> Outcome {
    match command {
        TokenCommand::Create { name, scope, ttl } => {
            let create = CreateTokenParams {
                name,
                scopes: scope,
                ttl_secs: ttl,
                idempotency_key: None,
            };
            let answer = out.answer(conn, &create).await?;
            if let Some(r) = answer {
                // The secret alone on stdout, so that `$(baton token create ...)` takes it.
                println!("{}", r.token);
                eprintln!(
                    "token {} for {} ({}), expires {}; it is shown only now: hand it to the client as BATON_TOKEN",
                    r.token_id,
                    text(&r.name),
                    r.scopes.join(" "),
                    r.expires_at.as_deref().unwrap_or("never"),
                );
            }
            Ok(0)
        }
        TokenCommand::List => {
            let list = ListTokensParams {
                limit: None,
                after: None,
            };
            let answer = out.pages(conn, &list, &["tokens"], None).await?;
            let Some(r) = answer else { return Ok(0) };
            let rows: Vec<Vec<String>> = r
                .tokens
                .iter()
                .map(|t| {
                    vec![
                        text(&t.token_id),
                        text(&t.name),
                        t.scopes.join(" "),
                        or_dash(t.expires_at.as_deref()),
                        or_dash(t.last_used_at.as_deref()),
                    ]
                })
                .collect();
            out.table(
                &["TOKEN_ID", "NAME", "SCOPES", "EXPIRES_AT", "LAST_USED_AT"],
                &rows,
            );
            Ok(0)
        }
        TokenCommand::Revoke { token_id } => {
            let revoke = RevokeTokenParams {
                token_id: token_id.clone(),
                idempotency_key: None,
            };
            let answer = out.answer(conn, &revoke).await?;
            if answer.is_some() {
                println!("{token_id}  revoked");
            }
            Ok(0)
        }
    }
}
