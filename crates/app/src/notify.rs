//! systemd service notifications of both binaries (`Type=notify` units in deploy/systemd/).
//!
//! What it does: sends `READY=1` once the listeners are bound (and, on the edge, the pool is up
//! or its ready timeout passed), `RELOADING=1`/`READY=1` around a SIGHUP reload, `STOPPING=1`
//! when draining starts, and `WATCHDOG=1` every half `WatchdogSec` from a task on the runtime
//! (so a wedged runtime stops the pings and systemd restarts the service).
//!
//! What it does NOT do: anything when `NOTIFY_SOCKET` is unset (started outside systemd), or
//! fail the service when a notification cannot be sent (it logs at debug level).

use std::time::Duration;

use sd_notify::NotifyState;

fn send(states: &[NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}

/// `READY=1` with a one-line status.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// `STOPPING=1`: draining has started.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("draining")]);
}

/// `RELOADING=1` (with the monotonic time systemd asks for) before a reload.
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(_) => send(&[NotifyState::Reloading]),
    }
}

/// The watchdog ping interval: half of `WatchdogSec`, or `None` when the watchdog is off or
/// meant for another process.
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().map(|d| d / 2)
}

/// Spawns the `WATCHDOG=1` task when systemd asked for one (call inside the runtime).
pub fn spawn_watchdog() {
    let Some(every) = watchdog_interval() else {
        return;
    };
    tracing::info!(
        interval_ms = every.as_millis() as u64,
        "systemd watchdog pings on"
    );
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            send(&[NotifyState::Watchdog]);
        }
    });
}

/// Start-up is done: starts the watchdog pings and sends `READY=1` with `status`, plus where
/// the metrics endpoint listens when it is on.
pub fn started(status: &str, metrics: Option<std::net::SocketAddr>) {
    spawn_watchdog();
    ready(&format!(
        "{status}{}",
        metrics
            .map(|m| format!(", metrics on {m}"))
            .unwrap_or_default()
    ));
}
