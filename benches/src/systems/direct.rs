//! `direct`: no proxy; the client talks to the origins across the long link.

use super::{Running, Start, System, SystemSpec};
use anyhow::Result;

/// Its id.
pub const ID: &str = "direct";

/// The client without any proxy: what customers get without longhaul.
pub struct Direct;

impl System for Direct {
    fn id(&self) -> &'static str {
        ID
    }

    fn start(&self, _at: &Start<'_>, _spec: &SystemSpec, _r: &mut Running) -> Result<()> {
        Ok(())
    }
}
