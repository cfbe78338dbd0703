//! The sweeps measured once per profile after the page-load cells: the origin's initial window
//! (seed 000 table 1; direct, replay, http) and offered load (seed 001 figure 5a), each one
//! checkpointed cell.

use super::profile::ProfileRun;
use super::{sweep_page, LINUX_INITCWND};
use crate::bed::Node;
use crate::checkpoint::{Cell, Checkpoint};
use crate::clients;
use crate::host::Meter;
use crate::load::{LinkPoint, LoadPoint};
use crate::results::{Params, Row};
use crate::schedule::shuffled_order;
use crate::systems::{direct, Running, SystemSpec};
use crate::workload::Workload;
use anyhow::Result;

/// Checkpoint key of the initial-window sweep.
pub(super) const INITCWND_CELL: &str = "initcwnd";
/// Checkpoint key of the offered-load points.
pub(super) const LOAD_CELL: &str = "load";

/// The initial-window sweep: from the checkpoint when an earlier run finished it, else measured
/// and checkpointed.
pub(super) fn initcwnd_cell(pr: &ProfileRun, cp: &mut Checkpoint) -> Result<Vec<Row>> {
    if let Some(done) = cp.get(INITCWND_CELL) {
        pr.log("   initial-window sweep: finished in an earlier run (--resume)");
        return Ok(done.rows.clone());
    }
    let meter = Meter::start();
    let sweep = initcwnd_sweep(pr)?;
    cp.record(Cell {
        cell: INITCWND_CELL.into(),
        rows: sweep.clone(),
        load: Vec::new(),
        host: pr.host_share(INITCWND_CELL, &meter),
    })?;
    Ok(sweep)
}

/// The offered-load points: from the checkpoint when an earlier run finished them, else (when
/// the suite offers load) measured with every running system on the Yahoo page (or the probe
/// page) and checkpointed when every system started.
pub(super) fn load_cell(
    pr: &ProfileRun,
    running: &[Running],
    failed: &[SystemSpec],
    cp: &mut Checkpoint,
) -> Result<Vec<LoadPoint>> {
    if let Some(done) = cp.get(LOAD_CELL) {
        pr.log("   offered load: finished in an earlier run (--resume)");
        return Ok(done.load.clone());
    }
    if pr.suite.load_fractions.is_empty() {
        return Ok(Vec::new());
    }
    let wid = if pr.all.iter().any(|w| w.id == "yahoo") {
        "yahoo"
    } else {
        pr.probe_w.as_str()
    };
    let w = pr.all.iter().find(|w| w.id == wid).expect("loaded");
    pr.log(&format!(
        "   offered load on {wid} (replay, http), {:?} per point",
        pr.suite.load_window
    ));
    let meter = Meter::start();
    let mut load = Vec::new();
    let mut waits = crate::settle::CellWaits::default();
    for sys in running {
        if !pr.suite.offers_load(&sys.spec) {
            continue;
        }
        for (k, f) in pr.suite.load_fractions.iter().enumerate() {
            match load_point(pr, sys, w, k, *f) {
                Ok(pt) => load.push(pt),
                Err(e) => pr.log(&format!("      {} at {f}: {e:#}", sys.spec.label())),
            }
            waits.add(pr.pause(), &format!("{} at {f}", sys.spec.label()));
        }
    }
    pr.log(&format!("      {}", waits.line()));
    let host = pr.host_share(LOAD_CELL, &meter);
    if failed.is_empty() {
        cp.record(Cell {
            cell: LOAD_CELL.into(),
            rows: Vec::new(),
            load: load.clone(),
            host,
        })?;
    } else {
        pr.log(
            "   offered load: not checkpointed, some systems did not start; \
             --resume measures it again",
        );
    }
    Ok(load)
}

/// One offered-load point: load fraction `f` (the `k`th) of the link rate through `sys`, with
/// what the long link saw meanwhile.
fn load_point(pr: &ProfileRun, sys: &Running, w: &Workload, k: usize, f: f64) -> Result<LoadPoint> {
    let rate = crate::load::rate_for(w, f * pr.link.rate_bps / 1e6);
    let seed = pr.suite.seed.wrapping_add(k as u64);
    let udp_drops = || {
        (
            pr.bed.udp_receive_buffer_errors(Node::Edge),
            pr.bed.udp_receive_buffer_errors(Node::Remote),
        )
    };
    let udp_before = udp_drops();
    let before = pr.bed.long_link();
    let r = pr
        .tr
        .load(sys.proxy, &w.id, rate, pr.suite.load_window, seed)?;
    let udp_rcvbuf_drops = crate::load::UdpDrops::between(udp_before, udp_drops());
    let links = before.zip(pr.bed.long_link()).map(|(b, a)| {
        (
            LinkPoint::between(&b.0, &a.0),
            LinkPoint::between(&b.1, &a.1),
        )
    });
    let (down_link, up_link) = (links.map(|l| l.0), links.map(|l| l.1));
    // The link's bytes per body byte delivered (the replies' headers, packet headers and
    // retransmissions), then the draw in those bytes: its share of the rate and the queueing
    // a first-come-first-served link at the rate would give its pages.
    let reference = down_link.and_then(|d| {
        crate::load::wire_reference(
            w.total_bytes(),
            r.pages,
            d.bytes,
            r.arrived_mbit,
            pr.link.rate_bps,
            &crate::load::poisson_arrivals(rate, pr.suite.load_window.as_secs_f64(), seed),
        )
    });
    let pt = LoadPoint {
        profile: pr.profile().to_string(),
        system: sys.spec.label(),
        workload: w.id.clone(),
        offered_mbit: r.offered_mbit,
        carried_mbit: r.carried_mbit,
        arrived_mbit: Some(r.arrived_mbit),
        steady_mbit: Some(r.steady_mbit),
        steady_from_s: Some(r.steady_from_s),
        due_mbit: Some(r.due_mbit),
        pages: r.pages,
        failures: r.failures,
        plt_ms_median: crate::stats::median(&r.plt_ms),
        down_link,
        up_link,
        window_s: Some(pr.suite.load_window.as_secs_f64()),
        wire_load: reference.map(|x| x.wire_load),
        fifo_wait_ms_median: reference.and_then(|x| x.fifo_wait_ms_median),
        arrivals_seed: Some(seed),
        udp_rcvbuf_drops,
    };
    let link_note = links.map_or(String::new(), |(d, u)| {
        format!(
            "; down link: {} packets, {} queue drops, {} lost, mean queue wait {:.0} ms; \
             up: {} packets, {} queue drops, mean queue wait {:.0} ms",
            d.packets,
            d.queue_drops,
            d.loss_drops,
            d.queue_wait_ms_mean,
            u.packets,
            u.queue_drops,
            u.queue_wait_ms_mean
        )
    });
    let drop_note = udp_rcvbuf_drops.map_or(String::new(), |d| {
        format!(
            "; UDP receive-buffer drops: edge {}, remote {}",
            d.edge, d.remote
        )
    });
    pr.log(&format!(
        "      {:<40} offered {:>7.1} arrived {:>7.1} carried {:>7.1} of {:.1} due (steady from {:.0} s; {:.1} to the last load's end) Mbit/s, {} pages, {} failed, median PLT {} ms, wire load {} of the rate, FIFO-link median wait {} ms (computed), arrivals' seed {seed}{link_note}{drop_note}",
        pt.system,
        pt.offered_mbit,
        r.arrived_mbit,
        r.steady_mbit,
        r.due_mbit,
        r.steady_from_s,
        pt.carried_mbit,
        pt.pages,
        pt.failures,
        pt.plt_ms_median.map_or("-".into(), |m| format!("{m:.0}")),
        pt.wire_load.map_or("-".into(), |l| format!("{l:.2}")),
        pt.fifo_wait_ms_median.map_or("-".into(), |m| format!("{m:.0}"))
    ));
    Ok(pt)
}

/// Seed 000 Table 1: the Yahoo page direct, with the origin's initial window set per step.
fn initcwnd_sweep(pr: &ProfileRun) -> Result<Vec<Row>> {
    let (suite, bed, tr, profile) = (pr.suite, pr.bed, &pr.tr, pr.profile());
    let wid = sweep_page(&suite.workloads);
    let mut rows = Vec::new();
    pr.log(&format!(
        "   initial-window sweep on {wid} (direct, replay, http)"
    ));
    let order = shuffled_order(suite.initcwnds.len(), suite.runs, suite.seed ^ 0x1c);
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); suite.initcwnds.len()];
    let mut errors: Vec<Vec<String>> = vec![Vec::new(); suite.initcwnds.len()];
    let mut waits = crate::settle::CellWaits::default();
    for rep in &order {
        for &i in rep {
            bed.set_initcwnd(Node::Origin, suite.initcwnds[i])?;
            match tr.replay(None, wid, "http") {
                Ok(p) => samples[i].push(p.plt_ms),
                Err(e) => errors[i].push(format!("{e:#}")),
            }
            waits.add(pr.pause(), &format!("iw={}", suite.initcwnds[i]));
        }
    }
    pr.log(&format!("      {}", waits.line()));
    bed.set_initcwnd(Node::Origin, LINUX_INITCWND)?;
    for (i, iw) in suite.initcwnds.iter().enumerate() {
        let params = Params {
            initcwnd: Some(*iw),
            ..Params::default()
        };
        let row = Row::measured(
            profile,
            wid,
            clients::replay::ID,
            direct::ID,
            params,
            "http",
            std::mem::take(&mut samples[i]),
            std::mem::take(&mut errors[i]),
        );
        pr.log(&format!(
            "      iw={iw:<3} median {:?} ms",
            row.plt_ms_median.map(|v| v.round())
        ));
        rows.push(row);
    }
    Ok(rows)
}
