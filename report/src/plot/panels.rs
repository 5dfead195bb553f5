//! Panels (a) and (b): executor and core utilization over time, and the
//! busy executors of each lane (first label) stacked.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::colors::{lane_color, CORES, EXECUTORS};
use super::legend::{draw_legend, split_legend, Entry};
use super::{axis_seconds, short, Drawn, FONT};
use crate::model::Report;

/// The steps of a binned series: each bin's value held across its width.
fn steps(values: &[f64], bin: f64, scale: f64) -> Vec<(f64, f64)> {
    values
        .iter()
        .enumerate()
        .flat_map(|(i, v)| {
            let start = i as f64 * bin;
            [(start, v * scale), (start + bin, v * scale)]
        })
        .collect()
}

/// The top of a percentage axis: 100%, or more when overlapping attempts
/// in a corrupt-ish journal push a series above it.
fn percent_top<'a>(series: impl Iterator<Item = &'a [f64]>) -> f64 {
    let max = series.flat_map(|s| s.iter().copied()).fold(1.0, f64::max);
    ((max * 100.0 / 10.0).ceil() * 10.0).min(1000.0) + 2.0
}

pub(super) fn draw_utilization<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    report: &Report,
    span: f64,
    label_width: u32,
) -> Drawn {
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let timeline = &report.timeline;
    let (plot, legend) = split_legend(area);
    let top = percent_top(
        std::iter::once(timeline.executors_busy.as_slice()).chain(timeline.cores_busy.as_deref()),
    );
    let mut chart = ChartBuilder::on(&plot)
        .margin_top(8)
        .margin_right(10)
        .caption("(a) utilization", (FONT, 16))
        .x_label_area_size(34)
        .y_label_area_size(label_width)
        .build_cartesian_2d(0.0..span, 0.0..top)
        .map_err(fail)?;
    chart
        .configure_mesh()
        .y_desc("% busy")
        .x_desc("seconds since run start")
        .y_label_formatter(&|v| format!("{v:.0}%"))
        .x_label_formatter(&axis_seconds)
        .light_line_style(WHITE.mix(0.0))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .draw()
        .map_err(fail)?;
    let bin = timeline.bin_seconds;
    chart
        .draw_series(
            AreaSeries::new(
                steps(&timeline.executors_busy, bin, 100.0),
                0.0,
                EXECUTORS.mix(0.3),
            )
            .border_style(EXECUTORS.stroke_width(2)),
        )
        .map_err(fail)?;
    let mut entries = vec![Entry::area(
        EXECUTORS,
        format!(
            "executors busy (mean {:.1}%)",
            timeline.mean_executors_busy * 100.0
        ),
    )];
    if let (Some(cores), Some(mean)) = (&timeline.cores_busy, timeline.mean_cores_busy) {
        chart
            .draw_series(LineSeries::new(
                steps(cores, bin, 100.0),
                CORES.stroke_width(2),
            ))
            .map_err(fail)?;
        entries.push(Entry::line(
            CORES,
            format!("cores busy, CPU time (mean {:.1}%)", mean * 100.0),
        ));
    } else {
        entries.push(Entry::note("core use unknown: no CPU times".to_string()));
    }
    entries.push(Entry::note(format!(
        "{} executors, {} cores",
        report.executors.len(),
        timeline.cores
    )));
    // The lanes' panel is left out with a single lane; say which it is.
    if let [lane] = report.lanes.as_slice() {
        entries.push(Entry::note(format!(
            "all with first label {}",
            short(&lane.label, 16)
        )));
    }
    draw_legend(&legend, &entries)
}

/// Busy executors stacked by lane: the total is the busy-executor curve of
/// the paper's figures, and each band shows which kind of executor it was.
pub(super) fn draw_lanes<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    report: &Report,
    span: f64,
    label_width: u32,
) -> Drawn {
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let (plot, legend) = split_legend(area);
    let capacity = report.executors.len().max(1) as f64;
    // Each band is drawn from zero up to its running total, the tallest
    // first, so that lower bands paint over it.
    let (totals, highest) = lane_totals(report, capacity);
    let mut chart = ChartBuilder::on(&plot)
        .margin_top(8)
        .margin_right(10)
        .caption("(b) busy executors by first label", (FONT, 16))
        .x_label_area_size(34)
        .y_label_area_size(label_width)
        .build_cartesian_2d(0.0..span, 0.0..highest * 1.08)
        .map_err(fail)?;
    chart
        .configure_mesh()
        .y_desc("busy executors")
        .x_desc("seconds since run start")
        .y_labels((highest as usize + 1).min(10))
        .y_label_formatter(&|v| {
            if v.fract().abs() < 1e-9 {
                format!("{v:.0}")
            } else {
                String::new()
            }
        })
        .x_label_formatter(&axis_seconds)
        .light_line_style(WHITE.mix(0.0))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .draw()
        .map_err(fail)?;
    let bin = report.timeline.bin_seconds;
    for (i, total) in totals.iter().enumerate().rev() {
        let color = lane_color(i);
        chart
            .draw_series(
                AreaSeries::new(steps(total, bin, 1.0), 0.0, color.mix(0.85))
                    .border_style(color.stroke_width(1)),
            )
            .map_err(fail)?;
    }
    if !report.executors.is_empty() {
        chart
            .draw_series(LineSeries::new(
                [(0.0, capacity), (span, capacity)],
                BLACK.mix(0.6).stroke_width(1),
            ))
            .map_err(fail)?;
    }
    draw_legend(&legend, &lane_legend(report))
}

/// Busy executors per bin summed over the lanes, bottom lane first: by
/// lane, the running total up to and including it; and the highest the
/// top reaches, at least `capacity`.
fn lane_totals(report: &Report, capacity: f64) -> (Vec<Vec<f64>>, f64) {
    let bins = report.timeline.executors_busy.len();
    let mut totals: Vec<Vec<f64>> = Vec::with_capacity(report.lanes.len());
    let mut running = vec![0.0; bins];
    for lane in &report.lanes {
        for (sum, busy) in running.iter_mut().zip(&lane.busy) {
            *sum += busy * lane.executors as f64;
        }
        totals.push(running.clone());
    }
    let highest = running.iter().copied().fold(capacity, f64::max);
    (totals, highest)
}

/// The lanes panel's legend: each lane with its size and mean use, and
/// the line of all executors.
fn lane_legend(report: &Report) -> Vec<Entry> {
    let mut entries: Vec<Entry> = report
        .lanes
        .iter()
        .enumerate()
        .map(|(i, lane)| {
            Entry::area(
                lane_color(i),
                format!(
                    "{} ×{} (mean {:.1}%)",
                    short(&lane.label, 16),
                    lane.executors,
                    lane.mean_busy * 100.0
                ),
            )
        })
        .collect();
    if report.executors.is_empty() {
        entries.push(Entry::note("no executors".to_string()));
    } else {
        entries.push(Entry::line(
            RGBColor(0x66, 0x66, 0x66),
            format!("all {} executors", report.executors.len()),
        ));
    }
    entries
}
