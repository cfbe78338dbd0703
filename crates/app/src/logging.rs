//! `tracing` output of both binaries: text or JSON lines on stderr, with a level filter that a
//! SIGHUP can change without a restart.
//!
//! What it does: installs the global subscriber ([`init`]) with the filter from `RUST_LOG` when
//! that is set, else from the configuration's `log_level` (an `EnvFilter` directive list such
//! as `info` or `warn,access=info`), and returns a [`LogControl`] that swaps the filter later.
//!
//! What it does NOT do: write files or rotate them (journald or the service manager does), or
//! change the format (text/JSON) of a running process.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

use crate::config::LogFormat;

/// Default `log_level`: everything at info and above, including the access log.
pub const DEFAULT_LOG_LEVEL: &str = "info";

/// Checks a `log_level` value; the error says what is wrong with it.
pub fn parse_level(level: &str) -> Result<EnvFilter, String> {
    EnvFilter::try_new(level).map_err(|e| format!("log_level {level:?}: {e}"))
}

/// Changes the level filter of the running process.
#[derive(Debug, Clone)]
pub struct LogControl {
    handle: reload::Handle<EnvFilter, Registry>,
    /// `RUST_LOG` was set at start: it wins over `log_level`, also on reload.
    from_env: bool,
    current: String,
}

impl LogControl {
    /// Applies `level` if it differs from the one in force; returns what happened, for the log.
    pub fn apply(&mut self, level: &str) -> Result<Option<String>, String> {
        if self.from_env || level == self.current {
            return Ok(None);
        }
        let filter = parse_level(level)?;
        self.handle
            .reload(filter)
            .map_err(|e| format!("log_level: {e}"))?;
        let was = std::mem::replace(&mut self.current, level.to_string());
        Ok(Some(format!("log_level {was:?} -> {level:?}")))
    }

    /// The filter is `RUST_LOG`'s (the configuration's `log_level` is not used).
    pub fn from_env(&self) -> bool {
        self.from_env
    }
}

/// Installs the global subscriber: `RUST_LOG` if set, else `level`; `format` picks text or
/// JSON lines, on stderr (ANSI colours only on a terminal).
pub fn init(format: LogFormat, level: &str) -> LogControl {
    let (filter, from_env) = match EnvFilter::try_from_default_env() {
        Ok(f) => (f, true),
        Err(_) => (
            parse_level(level).unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_LEVEL)),
            false,
        ),
    };
    let (filter, handle) = reload::Layer::new(filter);
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(ansi)
                    .with_writer(std::io::stderr),
            )
            .init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr),
            )
            .init(),
    }
    LogControl {
        handle,
        from_env,
        current: level.to_string(),
    }
}
