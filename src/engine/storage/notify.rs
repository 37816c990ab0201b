//! Waiting for a thread to change, from any machine: over PostgreSQL a listener on
//! the thread and run channels wakes as soon as the thread's head, status, log, events or step
//! lease change anywhere, with a wait of [`PG_FALLBACK`] as a fallback; over a directory store
//! a short poll of the files.
//!
//! Architecture Invariant: a wait never lasts longer than its fallback, so a lost notification
//! or connection costs at most that much delay, never a hang.

use std::path::Path;
use std::time::Duration;

use crate::pg::{CHANNEL, Listener, PgConfig, RUNS_CHANNEL};

/// The longest a wait over PostgreSQL lasts without a notification.
pub(crate) const PG_FALLBACK: Duration = Duration::from_secs(1);

/// Wakes when one thread may have changed.
#[derive(Debug)]
pub(crate) struct ThreadWaker {
    id: String,
    /// The store's connection settings over PostgreSQL.
    config: Option<PgConfig>,
    listener: Option<Listener>,
    /// The poll of a directory store.
    poll: Duration,
}

impl ThreadWaker {
    /// A waker for thread `id` of `root`; `poll` is the wait over a directory store. Over
    /// PostgreSQL it starts listening at once, so nothing that happens after this call is
    /// missed.
    pub(crate) fn new(root: &Path, id: &str, poll: Duration) -> ThreadWaker {
        let config = super::pg(root).ok().flatten().map(|pg| pg.config().clone());
        let mut waker = ThreadWaker {
            id: id.to_owned(),
            config,
            listener: None,
            poll,
        };
        waker.connect();
        waker
    }

    fn connect(&mut self) {
        if self.listener.is_none()
            && let Some(config) = &self.config
        {
            self.listener = Listener::open_on(config, &[CHANNEL, RUNS_CHANNEL]).ok();
        }
    }

    /// Waits until the thread may have changed: a notification naming it, or the fallback.
    pub(crate) fn wait(&mut self) {
        if self.config.is_none() {
            std::thread::sleep(self.poll);
            return;
        }
        self.connect();
        let Some(listener) = self.listener.as_mut() else {
            std::thread::sleep(PG_FALLBACK);
            return;
        };
        let deadline = std::time::Instant::now() + PG_FALLBACK;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            match listener.wait(left) {
                Ok(Some(id)) if id == self.id => return,
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(_) => {
                    // Heard nothing for sure: look now, listen again at the next wait.
                    self.listener = None;
                    return;
                }
            }
        }
    }
}
