//! LISTEN/NOTIFY: waiting for thread changes from any machine.
//!
//! A [`Listener`] owns its own connection (a listening connection cannot run other queries
//! between waits without risking missed notifications). The `threads` trigger sends the thread
//! id on [`super::schema::CHANNEL`] for every start, head move, status or queue change and
//! archive, so `wait`, `live` and the mount can block here instead of polling. Appends to a
//! thread's log or events, and the end of a step's lease, are sent on
//! [`super::schema::RUNS_CHANNEL`].

use std::time::Duration;

use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;

use super::config::PgConfig;
use super::error::{PgError, describe};
use super::schema::CHANNEL;

/// A connection listening on the thread-change channel.
pub struct Listener {
    client: Client,
    target: String,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("target", &self.target)
            .finish()
    }
}

impl Listener {
    /// Connects and starts listening on the thread-change channel.
    pub fn open(config: &PgConfig) -> Result<Listener, PgError> {
        Listener::open_on(config, &[CHANNEL])
    }

    /// Connects and starts listening on `channels` (e.g. [`CHANNEL`] and
    /// [`super::schema::RUNS_CHANNEL`]).
    pub fn open_on(config: &PgConfig, channels: &[&str]) -> Result<Listener, PgError> {
        let mut client = config.connect()?;
        let sql = channels
            .iter()
            .map(|c| format!("listen {c}"))
            .collect::<Vec<_>>()
            .join("; ");
        client.batch_execute(&sql).map_err(|e| PgError::Query {
            action: "listen",
            reason: describe(&e),
        })?;
        Ok(Listener {
            client,
            target: config.target(),
        })
    }

    /// The next changed thread's id, or `None` when nothing arrives within `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<String>, PgError> {
        let target = self.target.clone();
        let mut notifications = self.client.notifications();
        let mut iter = notifications.timeout_iter(timeout);
        match iter.next() {
            Ok(found) => Ok(found.map(|n| n.payload().to_owned())),
            Err(e) => Err(PgError::ConnectionLost {
                target,
                action: "listen",
                reason: describe(&e),
            }),
        }
    }
}
