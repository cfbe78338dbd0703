//! `replay`: the browser-like replay client ([`crate::replay`]), run as `pageload replay-once`
//! in the client namespace so that every load starts cold. Every load's per-object times are
//! appended to the profile's `trials.jsonl`.

use super::Client;
use crate::runner::trial::Trialer;
use crate::systems::Running;
use crate::workload::Workload;
use anyhow::Result;

/// Its id.
pub const ID: &str = "replay";

/// The replay client.
pub struct Replay;

impl Client for Replay {
    fn id(&self) -> &'static str {
        ID
    }

    fn measures_sweeps(&self) -> bool {
        true
    }

    fn load(&self, tr: &Trialer<'_>, sys: &Running, w: &Workload, scheme: &str) -> Result<f64> {
        tr.replay_over(sys.proxy, &w.id, scheme, sys.spec.http3())
            .map(|p| {
                // Per-object times of every replay load, for later reading.
                let line = serde_json::json!({
                    "workload": w.id, "system": sys.spec.id, "params": sys.spec.params,
                    "scheme": scheme, "load": p,
                });
                tr.record_trial(&line);
                p.plt_ms
            })
    }
}
