//! `uwf serve token`: a dashboard token per person (`crate::serve::people`) — made, listed and
//! taken back, so that every write through the dashboard names who made it.

use std::path::Path;

use clap::{Args, Subcommand};
use serde_json::json;

use crate::cli::Out;
use crate::cli::error::CliResult;
use crate::cli::terminal::output::Mode;
use crate::serve::people;

#[derive(Debug, Args)]
#[command(
    after_help = "Once anyone has a token of their own, the shared token of `uwf serve` (serve.token) lets \
no one in: every write names a person. Tokens are kept only as digests; a new token for a name \
replaces the old one. Changes take effect at once, on a running server too.\n\n\
Examples:\n  uwf serve token add 'Ann Lee'      # prints Ann's token and login URL, once\n  \
uwf serve token list\n  uwf serve token revoke 'Ann Lee'"
)]
pub(crate) struct TokenArgs {
    #[command(subcommand)]
    action: TokenAction,
}

#[derive(Debug, Subcommand)]
enum TokenAction {
    /// Make a token for a person (replacing theirs) and print it with their login URL, once
    Add {
        /// The person's name, as their writes will record it (`--by` rules)
        name: String,
        /// The dashboard's address for the login URL (default: the running `uwf serve` of this
        /// store, else $UWF_DASHBOARD_URL, else http://127.0.0.1:7420/)
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },
    /// The people who have a token (never the tokens)
    List,
    /// Take a person's token back
    Revoke {
        /// The person's name
        name: String,
    },
}

pub(crate) fn run(args: TokenArgs, root: &Path, out: &mut Out) -> CliResult {
    match args.action {
        TokenAction::Add { name, url } => {
            let token = people::add(root, &name)?;
            let name = name.trim();
            let base = url
                .or_else(|| std::env::var("UWF_DASHBOARD_URL").ok())
                .or_else(|| super::open::recorded(root))
                .unwrap_or_else(|| "http://127.0.0.1:7420/".to_owned());
            let login = format!("{}/login?token={token}", base.trim_end_matches('/'));
            out.said(
                &format!(
                    "token for {name} (shown this once; give it to them privately):\n  {token}\nlogin URL:\n  {login}"
                ),
                &token,
                &json!({"name": name, "token": token, "login": login}),
            )?;
        }
        TokenAction::List => {
            let roster = people::Roster::read(root)?;
            if out.mode == Mode::Table {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0);
                let rows: Vec<Vec<String>> = roster
                    .people
                    .iter()
                    .map(|p| {
                        vec![
                            p.name.clone(),
                            crate::cli::terminal::output::ago(p.created_at, now),
                        ]
                    })
                    .collect();
                out.table(&["NAME", "MADE"], &rows)?;
            } else {
                for p in &roster.people {
                    out.result(&p.name, &json!({"name": p.name, "createdAt": p.created_at}))?;
                }
            }
        }
        TokenAction::Revoke { name } => {
            people::revoke(root, &name)?;
            let name = name.trim();
            out.said(
                &format!("{name}'s token no longer lets anyone in"),
                name,
                &json!({"name": name, "revoked": true}),
            )?;
        }
    }
    Ok(())
}
