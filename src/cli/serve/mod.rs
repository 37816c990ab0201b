//! `uwf serve`: the web dashboard (see `crate::serve`); `uwf open` ([`open`]): a thread's page
//! in it.

pub(crate) mod open;
pub(crate) mod token;

use std::net::SocketAddr;
use std::path::Path;

use clap::Args;
use serde_json::json;

use crate::cli::Out;
use crate::cli::error::CliResult;

#[derive(Debug, Args)]
#[command(
    after_help = "Security: bound to 127.0.0.1 by default (only this machine's browsers \
reach it, and the Host header is checked against DNS rebinding). Bound to any other address it \
needs a token: a person's own (`uwf serve token add NAME`), which names them as the author of \
every write they make, or, while no one has one, the shared token kept in <root>/serve.token \
(mode 0600) and printed once as a login URL; requests without one get 401. Writes from another site's pages are refused (Origin), \
--read-only refuses every write (405), and agent output is shown as text only.\n\n\
Examples:\n  uwf serve                          # http://127.0.0.1:7420/\n  \
uwf serve --bind 127.0.0.1:0       # a free port, printed\n  \
uwf serve --bind 0.0.0.0:7420      # the team's network: open the printed login URL\n  \
uwf serve --read-only\n  \
uwf serve token add 'Ann Lee'      # a token of Ann's own: her writes are recorded as hers",
    args_conflicts_with_subcommands = true
)]
pub(super) struct ServeArgs {
    #[command(subcommand)]
    token: Option<ServeCommand>,
    /// Address and port to listen on (port 0 picks a free one)
    #[arg(long, default_value = "127.0.0.1:7420")]
    bind: SocketAddr,
    /// Refuse every write (start, step, answer, fork…) and hide their buttons
    #[arg(long)]
    read_only: bool,
    /// Where the agents of threads started from the dashboard run (default: this directory);
    /// other threads keep their own
    #[arg(long, value_name = "DIR")]
    workdir: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
enum ServeCommand {
    /// Dashboard tokens per person: add, list, revoke
    Token(token::TokenArgs),
}

pub(super) fn run(args: ServeArgs, root: &Path, out: &mut Out) -> CliResult {
    if let Some(ServeCommand::Token(token)) = args.token {
        return token::run(token, root, out);
    }
    let store = crate::engine::storage::open_store(root)?;
    let options = crate::serve::Options {
        root: root.to_path_buf(),
        bind: args.bind,
        read_only: args.read_only,
        workdir: crate::cli::thread::workdir(args.workdir.as_deref())?,
    };
    let mut printed = Ok(());
    let mut record = None;
    crate::serve::serve(options, store, |started| {
        record = Some(open::record(root, &started.url));
        printed = out
            .line(
                json!({"url": started.url, "login": started.login_url, "pid": std::process::id()}),
            )
            .and_then(|()| out.flush());
        match &started.login_url {
            None if started.people > 0 && !args.bind.ip().is_loopback() => eprintln!(
                "uwf: serving {} for the {} people with their own token (`uwf serve token add NAME` gives one; Ctrl-C stops)",
                started.url, started.people
            ),
            Some(login) => eprintln!(
                "uwf: serving {} for any host that can reach it; log in once with {login} (Ctrl-C stops)",
                started.url
            ),
            None => eprintln!("uwf: serving {} (Ctrl-C stops)", started.url),
        }
    })?;
    drop(record);
    printed?;
    Ok(())
}
