//! The pacing run's figure in seed 002's Fig. 13 layout: one panel per RTT (columns) and queue
//! size (rows); in each, the short flow's median FCT per initial window (x), one bar per
//! bottleneck rate (colour) bursty (solid) and paced (light, outlined), whiskers over the
//! median's confidence interval. Draws only measured cells; writes nothing without any.

use crate::pacing::{Results, Sender};
use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::path::Path;

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plotting: {e:?}")
}

fn sorted_unique<T: PartialOrd + Copy>(mut v: Vec<T>) -> Vec<T> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v.dedup_by(|a, b| a == b);
    v
}

/// Draws the figure into `path`; `Ok(false)` when no cell has a measurement.
pub fn draw(path: &Path, res: &Results) -> Result<bool> {
    let beds = &res.beds;
    if !beds
        .iter()
        .any(|b| b.short.iter().any(|c| c.fct_ms.is_some()))
    {
        return Ok(false);
    }
    let rtts = sorted_unique(beds.iter().map(|b| b.spec.rtt_ms).collect());
    let queues = sorted_unique(beds.iter().map(|b| b.spec.queue_bdp).collect());
    let rates = sorted_unique(beds.iter().map(|b| b.spec.rate_mbit).collect());
    let iws = sorted_unique(
        beds.iter()
            .flat_map(|b| b.short.iter().map(|c| c.iw))
            .collect(),
    );
    let (w, h) = (420 * rtts.len() as u32, 300 * queues.len() as u32 + 40);
    let root = SVGBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root
        .titled(
            &format!(
                "{} B CUBIC flow beside a CUBIC elephant: FCT (median, CI whiskers), \
                 solid = bursty, light = paced, colour = rate",
                res.options.short_bytes
            ),
            ("sans-serif", 16),
        )
        .map_err(err)?;
    let panels = root.split_evenly((queues.len(), rtts.len()));
    let slots = rates.len() * 2;
    let width = 0.8 / slots as f64;
    for (qi, q) in queues.iter().enumerate() {
        for (ri, rtt) in rtts.iter().enumerate() {
            let area = &panels[qi * rtts.len() + ri];
            let here: Vec<_> = beds
                .iter()
                .filter(|b| b.spec.rtt_ms == *rtt && b.spec.queue_bdp == *q)
                .collect();
            let ymax = here
                .iter()
                .flat_map(|b| b.short.iter())
                .filter_map(|c| c.fct_ms.as_ref().map(|s| s.ci_high))
                .fold(1.0, f64::max)
                * 1.1;
            let n = iws.len();
            let labels = iws.clone();
            let mut chart = ChartBuilder::on(area)
                .caption(format!("RTT {rtt} ms, queue {q} x BDP"), ("sans-serif", 14))
                .margin(8)
                .x_label_area_size(30)
                .y_label_area_size(50)
                .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..ymax)
                .map_err(err)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n + 1)
                .x_label_formatter(&move |x| {
                    let i = x.round();
                    if (x - i).abs() < 0.01 && i >= 0.0 && (i as usize) < labels.len() {
                        format!("IW{}", labels[i as usize])
                    } else {
                        String::new()
                    }
                })
                .y_desc("FCT, ms")
                .draw()
                .map_err(err)?;
            for (k, rate) in rates.iter().enumerate() {
                let Some(bed) = here.iter().find(|b| b.spec.rate_mbit == *rate) else {
                    continue;
                };
                let color = PALETTE[k % PALETTE.len()];
                for (j, sender) in [Sender::Cubic, Sender::CubicPaced].iter().enumerate() {
                    let slot = k * 2 + j;
                    let mut bars = Vec::new();
                    let mut whiskers = Vec::new();
                    for (g, iw) in iws.iter().enumerate() {
                        let Some(s) = bed
                            .short
                            .iter()
                            .find(|c| c.iw == *iw && c.sender == *sender)
                            .and_then(|c| c.fct_ms.as_ref())
                        else {
                            continue;
                        };
                        let x0 = g as f64 - 0.4 + slot as f64 * width;
                        let x1 = x0 + width * 0.9;
                        if j == 0 {
                            bars.push(Rectangle::new([(x0, 0.0), (x1, s.median)], color.filled()));
                        } else {
                            bars.push(Rectangle::new(
                                [(x0, 0.0), (x1, s.median)],
                                color.mix(0.3).filled(),
                            ));
                            bars.push(Rectangle::new(
                                [(x0, 0.0), (x1, s.median)],
                                color.stroke_width(1),
                            ));
                        }
                        let xc = (x0 + x1) / 2.0;
                        whiskers.push(PathElement::new(
                            vec![(xc, s.ci_low), (xc, s.ci_high)],
                            BLACK.stroke_width(1),
                        ));
                    }
                    let series = chart.draw_series(bars).map_err(err)?;
                    if qi == 0 && ri == 0 {
                        let label = format!("{rate} Mbit/s {}", sender.name());
                        let style = if j == 0 {
                            color.filled()
                        } else {
                            color.mix(0.3).filled()
                        };
                        series.label(label).legend(move |(x, y)| {
                            Rectangle::new([(x, y - 5), (x + 12, y + 5)], style)
                        });
                    }
                    chart.draw_series(whiskers).map_err(err)?;
                }
            }
            if qi == 0 && ri == 0 {
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .label_font(("sans-serif", 11))
                    .draw()
                    .map_err(err)?;
            }
        }
    }
    root.present().map_err(err)?;
    Ok(true)
}
