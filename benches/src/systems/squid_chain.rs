//! `squid-chain`: a Squid child in the edge namespace forwarding everything to a Squid parent
//! in the remote namespace. The child keeps [`super::squid::SQUID_STANDBY`] warm connections to
//! its parent (Squid's own connection pool).

use super::squid::{self, start_squid};
use super::{own_dir, Running, Start, System, SystemSpec, PORTS};
use crate::bed::Node;
use anyhow::Result;
use std::net::SocketAddr;

/// Its id.
pub const ID: &str = "squid-chain";

/// Squid child (near side) → Squid parent (far side).
pub struct SquidChain;

impl System for SquidChain {
    fn id(&self) -> &'static str {
        ID
    }

    fn programs(&self) -> &'static [&'static str] {
        &[squid::PROGRAM]
    }

    fn start(&self, at: &Start<'_>, _spec: &SystemSpec, r: &mut Running) -> Result<()> {
        let parent = SocketAddr::new(at.bed.addr(Node::Remote), PORTS.squid_chain);
        let (c, p) = start_squid(
            at.bed,
            Node::Remote,
            &own_dir(at.dir, "squid-parent")?,
            parent,
            None,
            at.hosts,
        )?;
        r.children.push(("squid parent".into(), c));
        r.pid_files.push(p);
        let listen = SocketAddr::new(at.bed.addr(Node::Edge), PORTS.squid_chain);
        let (c, p) = start_squid(
            at.bed,
            Node::Edge,
            &own_dir(at.dir, "squid-child")?,
            listen,
            Some(parent),
            at.hosts,
        )?;
        r.children.push(("squid child".into(), c));
        r.pid_files.push(p);
        r.proxy = Some(listen);
        Ok(())
    }
}
