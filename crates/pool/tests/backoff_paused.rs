//! Re-dialing under tokio's paused clock: failed dials back off exponentially
//! with jitter, between the configured bounds.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pool::{DialFuture, Dialer, LaneState, Pool, PoolConfig};
use tokio::time::Instant;

struct Refusing {
    attempts: Mutex<Vec<Instant>>,
}

impl Dialer for Refusing {
    fn dial(&self) -> DialFuture<'_> {
        self.attempts.lock().unwrap().push(Instant::now());
        Box::pin(async {
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "refused (test)",
            ))
        })
    }
}

#[tokio::test(start_paused = true)]
async fn failed_dials_back_off_exponentially_within_bounds() {
    let dialer = Arc::new(Refusing {
        attempts: Mutex::new(Vec::new()),
    });
    let min = Duration::from_millis(100);
    let max = Duration::from_millis(1600);
    let pool = Pool::start_with_dialer(
        PoolConfig {
            connections: 1,
            backoff_min: min,
            backoff_max: max,
            ..PoolConfig::default()
        },
        dialer.clone(),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let st = pool.stats();
    assert_eq!(st[0].state, LaneState::Backoff);
    let at = dialer.attempts.lock().unwrap().clone();
    assert!(at.len() >= 8, "only {} attempts", at.len());
    let mut ceiling = min;
    for w in at.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap >= ceiling / 2 && gap <= ceiling + Duration::from_millis(1),
            "gap {gap:?} outside [{:?}, {ceiling:?}]",
            ceiling / 2
        );
        ceiling = (ceiling * 2).min(max);
    }
    assert_eq!(st[0].reconnects as usize, at.len() - 1);
    pool.close(Duration::ZERO).await;
    let n = at.len();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        dialer.attempts.lock().unwrap().len(),
        n,
        "dialed after close"
    );
}
