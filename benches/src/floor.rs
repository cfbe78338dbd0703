//! The analytic floor of a page load: what no system can beat on a given link.
//!
//! floor = discovery levels × RTT + total bytes ÷ rate, where RTT is the client-to-origin round
//! trip (access link + long link + origin link) and rate the long link's downstream rate. It
//! assumes warm connections (no handshakes, no slow start), unlimited parallelism inside a level
//! and a full pipe; it is computed, never measured, and results label it so.

use crate::workload::Workload;

/// What the floor needs to know about a link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkModel {
    /// Client-to-origin round-trip time in milliseconds.
    pub rtt_ms: f64,
    /// Bottleneck rate towards the client in bits per second.
    pub rate_bps: f64,
}

/// The floor for `w` on `link`, in milliseconds; `None` for a workload without objects (mixed)
/// or a link without a rate.
pub fn floor_ms(w: &Workload, link: &LinkModel) -> Option<f64> {
    if w.objects.is_empty() || link.rate_bps <= 0.0 || !link.rtt_ms.is_finite() {
        return None;
    }
    let levels = w.levels().len() as f64;
    let transfer_ms = w.total_bytes() as f64 * 8.0 / link.rate_bps * 1000.0;
    Some(levels * link.rtt_ms + transfer_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{generate_bulk, generate_mixed, generate_page, page_specs};

    #[test]
    fn floor_is_levels_times_rtt_plus_serialisation() {
        let google = generate_page(&page_specs()[1]);
        let levels = google.levels().len() as f64;
        let link = LinkModel {
            rtt_ms: 130.0,
            rate_bps: 100e6,
        };
        // 74 000 bytes at 100 Mbit/s = 5.92 ms.
        let f = floor_ms(&google, &link).unwrap();
        assert!((f - (levels * 130.0 + 5.92)).abs() < 1e-9, "{f}");
        // 50 MB at 100 Mbit/s = 4 s, one level.
        let b = floor_ms(&generate_bulk(), &link).unwrap();
        assert!((b - (130.0 + 4000.0)).abs() < 1e-9, "{b}");
        assert_eq!(floor_ms(&generate_mixed(), &link), None);
        assert_eq!(
            floor_ms(
                &google,
                &LinkModel {
                    rtt_ms: 1.0,
                    rate_bps: 0.0
                }
            ),
            None
        );
    }
}
