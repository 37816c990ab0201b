//! The CLI's one error boundary: every failure of a command becomes a [`CommandError`] exactly
//! once, through `From` (engine and store errors bring their hints and busy-ness as data, see
//! [`crate::advice`]) or through the constructors here (the CLI's own refusals), and
//! [`CommandError::report`] prints it and picks the exit code.
//!
//! Exit codes: 0 ok; 1 a user or internal error; 2 usage (clap's own errors, and missing or
//! contradictory arguments clap cannot see); 75 busy (another process holds the thread); 128 +
//! the signal's number when a caught SIGINT, SIGTERM or SIGHUP stopped a step (130, 143, 129);
//! 3 to 6 for how a thread that `thread run`, `run` or `live` followed ended ([`ended`]).
//! Printed as `error: <message>`, one `caused by: …` line per cause, then every hint as
//! `hint: …`.

use std::fmt::Display;
use std::process::ExitCode;

use crate::advice::Advice;

/// How `uwf thread run`, `uwf run` and `uwf live` end, for scripts (`docs/cli.md#exit-codes`):
/// 0 when the thread is done (or was already), and these otherwise.
pub(crate) mod ended {
    /// Still active after `--max-steps` steps.
    pub(crate) const STOPPED: u8 = 3;
    /// Waiting for a person to answer (`uwf thread answer`).
    pub(crate) const AWAITING: u8 = 4;
    /// A step failed: the thread stays active, its error recorded.
    pub(crate) const FAILED: u8 = 5;
    /// Killed (or rebased away): it takes no more steps.
    pub(crate) const KILLED: u8 = 6;
}

/// What kind of failure a command had; decides the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Bad input or a refused action (exit 1).
    User,
    /// Another process holds the thread (exit 75, EX_TEMPFAIL).
    Busy,
    /// The command line itself is wrong (exit 2).
    Usage,
    /// Something failed that the user did not ask for wrongly: I/O, a damaged store (exit 1).
    Internal,
    /// A caught stop signal ended the command (exit 128 + the signal's number).
    Interrupted(u8),
    /// A thread ended some way other than done (one of [`ended`]'s codes); printed as an error.
    Ended(u8),
    /// The command has already said everything and only picks its exit status (`cas has`
    /// answering "no", `fsck` finding problems, a reader of stdout that went away).
    Silent(u8),
}

/// A command's failure: what happened, why, and what to do instead.
#[derive(Debug)]
pub(crate) struct CommandError {
    pub kind: Kind,
    pub message: String,
    /// Underlying causes, outermost first.
    pub causes: Vec<String>,
    pub hints: Vec<String>,
}

/// The result of a command.
pub(super) type CliResult<T = ()> = Result<T, CommandError>;

impl CommandError {
    fn new(kind: Kind, message: impl Into<String>) -> CommandError {
        CommandError {
            kind,
            message: message.into(),
            causes: Vec::new(),
            hints: Vec::new(),
        }
    }

    /// Bad input or a refused action.
    pub(crate) fn user(message: impl Into<String>) -> CommandError {
        CommandError::new(Kind::User, message)
    }

    /// A command line clap accepted but that cannot work (exit 2).
    pub(crate) fn usage(message: impl Into<String>) -> CommandError {
        CommandError::new(Kind::Usage, message)
    }

    /// Ends the command with `code` without printing anything more.
    pub(crate) fn silent(code: u8) -> CommandError {
        CommandError::new(Kind::Silent(code), String::new())
    }

    /// The same failure, put down to stop signal `signal` (which picks the exit code).
    pub(crate) fn interrupted_by(mut self, signal: i32) -> CommandError {
        self.kind = Kind::Interrupted(u8::try_from(signal).unwrap_or(u8::MAX - 128));
        self
    }

    /// The same failure, as a thread ending with `code` (one of [`ended`]'s); a busy thread or
    /// a stop signal keeps its own code.
    pub(crate) fn ended(mut self, code: u8) -> CommandError {
        if matches!(self.kind, Kind::User | Kind::Internal) {
            self.kind = Kind::Ended(code);
        }
        self
    }

    /// Adds a hint (printed after the message and causes).
    pub(crate) fn hint(mut self, hint: impl Into<String>) -> CommandError {
        self.hints.push(hint.into());
        self
    }

    /// Puts `message` on top: the current message becomes the first cause.
    pub(crate) fn context(mut self, message: impl Display) -> CommandError {
        let inner = std::mem::replace(&mut self.message, message.to_string());
        self.causes.insert(0, inner);
        self
    }

    pub(crate) fn exit_code(&self) -> u8 {
        match self.kind {
            Kind::User | Kind::Internal => 1,
            Kind::Usage => 2,
            Kind::Busy => 75,
            Kind::Interrupted(signal) => 128u8.saturating_add(signal),
            Kind::Silent(code) | Kind::Ended(code) => code,
        }
    }

    /// The text printed on stderr (nothing for [`Kind::Silent`]).
    pub(crate) fn render(&self) -> String {
        if let Kind::Silent(_) = self.kind {
            return String::new();
        }
        let mut text = format!("error: {}\n", self.message);
        for cause in &self.causes {
            text.push_str(&format!("caused by: {cause}\n"));
        }
        for hint in &self.hints {
            text.push_str(&format!("hint: {hint}\n"));
        }
        text
    }

    /// Prints the error on stderr (coloured on a terminal) and returns the process exit code.
    pub(crate) fn report(&self) -> ExitCode {
        let text = self.render();
        if super::terminal::style::stderr_color() {
            use super::terminal::style::Paint;
            let painted: String = text
                .lines()
                .map(|line| {
                    let (paint, label) = if line.starts_with("error:") {
                        (Paint::Red, "error:")
                    } else if line.starts_with("hint:") {
                        (Paint::Cyan, "hint:")
                    } else if line.starts_with("caused by:") {
                        (Paint::Yellow, "caused by:")
                    } else {
                        return format!("{line}\n");
                    };
                    format!("{}{}\n", paint.on(label, true), &line[label.len()..])
                })
                .collect();
            eprint!("{painted}");
        } else {
            eprint!("{text}");
        }
        ExitCode::from(self.exit_code())
    }
}

/// Every error of the layers below converts with its causes, hints and busy-ness.
impl<E: std::error::Error + Advice + 'static> From<E> for CommandError {
    fn from(error: E) -> CommandError {
        let kind = if error.is_busy() {
            Kind::Busy
        } else if is_io(&error) {
            Kind::Internal
        } else {
            Kind::User
        };
        let mut causes = Vec::new();
        let mut source = error.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            // thiserror's `{source}` in a message repeats the cause; say it once.
            if !error.to_string().ends_with(&text) && !causes.contains(&text) {
                causes.push(text);
            }
            source = cause.source();
        }
        let broken_pipe =
            std::iter::successors(Some(&error as &dyn std::error::Error), |e| e.source()).any(
                |e| {
                    e.downcast_ref::<std::io::Error>()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
                },
            );
        CommandError {
            // The reader of our stdout went away (`uwf cas list | head`): not an error.
            kind: if broken_pipe { Kind::Silent(0) } else { kind },
            message: error.to_string(),
            causes,
            hints: error.hints(),
        }
    }
}

fn is_io(error: &(dyn std::error::Error + 'static)) -> bool {
    error.downcast_ref::<std::io::Error>().is_some()
}

/// `.context(…)` for any result whose error becomes a [`CommandError`].
pub(super) trait Context<T> {
    /// Puts `message` on top of the error.
    fn context(self, message: impl Display) -> CliResult<T>;
    /// Like [`Context::context`], with the message built only on failure.
    fn with_context<M: Display>(self, message: impl FnOnce() -> M) -> CliResult<T>;
}

impl<T, E: Into<CommandError>> Context<T> for Result<T, E> {
    fn context(self, message: impl Display) -> CliResult<T> {
        self.map_err(|e| e.into().context(message))
    }

    fn with_context<M: Display>(self, message: impl FnOnce() -> M) -> CliResult<T> {
        self.map_err(|e| e.into().context(message()))
    }
}

/// `CommandError::user(format!(…))`.
macro_rules! user_error {
    ($($arg:tt)*) => { $crate::cli::error::CommandError::user(format!($($arg)*)) };
}

/// Returns early with a user error built like `format!`.
macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::cli::error::user_error!($($arg)*)) };
}

pub(crate) use {bail, user_error};

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with two hints, as the engine's errors expose them.
    #[derive(Debug, thiserror::Error)]
    #[error("thread T is busy")]
    struct TwoHints;

    impl Advice for TwoHints {
        fn hints(&self) -> Vec<String> {
            vec!["wait for it".into(), "or kill it".into()]
        }
        fn is_busy(&self) -> bool {
            true
        }
    }

    #[test]
    fn every_hint_is_printed_and_busy_exits_75() {
        let e = CommandError::from(TwoHints);
        assert_eq!(
            e.render(),
            "error: thread T is busy\nhint: wait for it\nhint: or kill it\n"
        );
        assert_eq!(e.exit_code(), 75);
    }

    #[test]
    fn context_keeps_the_cause_and_the_hints() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e: CommandError = Err::<(), _>(io)
            .context("cannot read x.yaml")
            .map_err(|e| e.hint("check the path"))
            .unwrap_err();
        assert_eq!(
            e.render(),
            "error: cannot read x.yaml\ncaused by: no such file\nhint: check the path\n"
        );
        assert_eq!(e.exit_code(), 1);
    }

    #[test]
    fn a_cause_the_message_already_names_is_not_repeated() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot run `x`: {source}")]
        struct Spawn {
            source: std::io::Error,
        }
        impl Advice for Spawn {}
        let e = CommandError::from(Spawn {
            source: std::io::Error::other("denied"),
        });
        assert_eq!(e.render(), "error: cannot run `x`: denied\n");
    }

    #[test]
    fn a_closed_stdout_is_silent_success() {
        let e = CommandError::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert_eq!(e.render(), "");
        assert_eq!(e.exit_code(), 0);
    }
}
