//! The Gantt chart of attempts per executor, or, for runs over the bar
//! limit, each executor row's occupancy in time bins stacked by kind.

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::colors::{kind_palette_slots, lighten, FAILED, KIND_PALETTE, OTHER_KIND};
use super::legend::{draw_legend, split_legend, Entry};
use super::{axis_seconds, short, Drawn, FONT};
use crate::bins::Bins;
use crate::model::Report;

/// Rows of the aggregated Gantt chart at most: more executors share rows.
const AGGREGATE_ROWS: usize = 32;
/// Time bins of the aggregated Gantt chart.
const AGGREGATE_BINS: usize = 120;

/// Where the Gantt chart goes, shared with the panels above it.
pub(super) struct Layout {
    /// Seconds the time axis covers.
    pub(super) span: f64,
    /// Width of the row labels, the same in every panel so time axes align.
    pub(super) label_width: u32,
    /// The chart's panel letter: (c), or (b) when the lanes are left out.
    pub(super) letter: char,
    /// Attempts above which the chart is aggregated.
    pub(super) max_bars: usize,
}

/// The Gantt chart's axes: time across, `labels.len()` rows down, row 0 at
/// the top as one reads a list.
fn row_chart<'a, DB: DrawingBackend>(
    plot: &'a DrawingArea<DB, Shift>,
    layout: &Layout,
    caption: &str,
    labels: &[String],
) -> Result<ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>, String> {
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let rows = labels.len().max(1);
    let mut chart = ChartBuilder::on(plot)
        .margin_top(8)
        .margin_right(10)
        .margin_bottom(6)
        .caption(caption, (FONT, 16))
        .x_label_area_size(40)
        .y_label_area_size(layout.label_width)
        .build_cartesian_2d(0.0..layout.span, -0.5..rows as f64 - 0.5)
        .map_err(fail)?;
    let row_label = |y: &f64| {
        let nearest = y.round();
        if (y - nearest).abs() > 1e-6 || nearest < 0.0 || nearest >= rows as f64 {
            return String::new();
        }
        let row = rows - 1 - nearest as usize;
        labels.get(row).cloned().unwrap_or_default()
    };
    chart
        .configure_mesh()
        .x_desc("seconds since run start")
        .x_label_formatter(&axis_seconds)
        .y_labels(rows.min(40))
        .y_label_formatter(&row_label)
        .disable_y_mesh()
        .light_line_style(WHITE.mix(0.0))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .draw()
        .map_err(fail)?;
    Ok(chart)
}

/// The legend of the kinds' colours, in graph order, then the grey of the
/// kinds without a colour of their own.
fn kind_entries(report: &Report, slots: &[Option<usize>]) -> Vec<Entry> {
    let mut entries: Vec<Entry> = report
        .kinds_in_graph_order()
        .into_iter()
        .filter_map(|k| {
            let kind = &report.kinds[k];
            slots[k].map(|slot| {
                Entry::area(
                    KIND_PALETTE[slot],
                    format!("{} ({})", short(&kind.kind, 22), kind.attempts),
                )
            })
        })
        .collect();
    let rest: Vec<usize> = (report.kinds.iter().zip(slots))
        .filter(|(_, slot)| slot.is_none())
        .map(|(kind, _)| kind.attempts)
        .collect();
    if !rest.is_empty() {
        entries.push(Entry::area(
            OTHER_KIND,
            format!(
                "{} other kinds ({})",
                rest.len(),
                rest.iter().sum::<usize>()
            ),
        ));
    }
    entries
}

pub(super) fn draw_gantt<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    report: &Report,
    layout: &Layout,
    names: &[String],
) -> Drawn {
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let (plot, legend) = split_legend(area);
    let rows = report.executors.len().max(1);
    let caption = format!("({}) attempts per executor", layout.letter);
    let mut chart = row_chart(&plot, layout, &caption, names)?;
    let row_y = |executor: usize| (rows - 1 - executor) as f64;

    let half = if rows > 60 { 0.5 } else { 0.38 };
    let slots = kind_palette_slots(report);
    let color_of = |kind: usize| {
        slots
            .get(kind)
            .copied()
            .flatten()
            .map_or(OTHER_KIND, |slot| KIND_PALETTE[slot])
    };
    // Bars wide enough to see get a white edge, so that back-to-back
    // attempts of one kind stay apart; thinner ones would vanish in it.
    let span = layout.span;
    // Measured on the chart's own mapping: a width guessed from the panel
    // (labels and margins included) made sub-pixel bars that rounded to no
    // width at all, which the PNG renderer skips with a warning.
    let (left, _) = chart.backend_coord(&(0.0, 0.0));
    let (right, _) = chart.backend_coord(&(span, 0.0));
    let pixels_per_second = f64::from((right - left).max(1)) / span;
    chart
        .draw_series(report.bars.iter().flat_map(|bar| {
            let y = row_y(bar.executor);
            // At least a pixel wide: a millisecond attempt still shows, and
            // the PNG renderer rejects rectangles of zero width.
            // (A hair over a pixel, so that rounding cannot take it back.)
            let end = bar.end.max(bar.start + 1.001 / pixels_per_second);
            let corners = [(bar.start, y - half), (end, y + half)];
            let color = color_of(bar.kind);
            let fill = if bar.failed {
                lighten(color, 0.55).filled()
            } else {
                color.filled()
            };
            let edge = ((bar.end - bar.start) * pixels_per_second >= 6.0)
                .then(|| Rectangle::new(corners, WHITE.stroke_width(1)));
            std::iter::once(Rectangle::new(corners, fill)).chain(edge)
        }))
        .map_err(fail)?;
    // Failures go on top, outlined, so a short failed bar among long ones
    // still shows. The outline is a path: SVG rectangles lose stroke widths.
    chart
        .draw_series(report.bars.iter().filter(|b| b.failed).map(|bar| {
            let y = row_y(bar.executor);
            let (x0, x1, y0, y1) = (bar.start, bar.end, y - half, y + half);
            PathElement::new(
                vec![(x0, y0), (x1, y0), (x1, y1), (x0, y1), (x0, y0)],
                FAILED.stroke_width(3),
            )
        }))
        .map_err(fail)?;

    let mut entries = kind_entries(report, &slots);
    if report.attempts.failed > 0 {
        entries.push(Entry::outline(
            FAILED,
            format!("failed attempt ({})", report.attempts.failed),
        ));
    }
    if entries.is_empty() {
        entries.push(Entry::note("no attempts".to_string()));
    }
    draw_legend(&legend, &entries)
}

/// The Gantt chart of a run with too many attempts to draw one by one: per
/// executor (or group of neighbouring executors, when there are more than
/// [`AGGREGATE_ROWS`]), the share of each time bin its attempts took,
/// stacked by kind in legend order, failed attempts on top. Its size
/// depends on rows, bins and kinds, not on the number of attempts.
pub(super) fn draw_occupancy<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    report: &Report,
    layout: &Layout,
    names: &[String],
) -> Drawn {
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let (plot, legend) = split_legend(area);
    let groups = RowGroups::of(report);
    let slots = kind_palette_slots(report);
    let occupancy = Occupancy::of(report, &slots, &groups, layout.span);
    let bin_seconds = layout.span / AGGREGATE_BINS as f64;

    let caption = format!(
        "({}) attempts per executor, aggregated: busy share of {} s bins, by kind",
        layout.letter,
        axis_seconds(&round_to_3(bin_seconds))
    );
    let mut chart = row_chart(&plot, layout, &caption, &groups.labels(names))?;
    let half = if groups.rows > 60 { 0.5 } else { 0.42 };
    // Levels go in steps of half a pixel: finer would not show.
    let (_, plot_height) = chart.plotting_area().dim_in_pixel();
    let thinnest = groups.rows as f64 / (2.0 * half * f64::from(plot_height.max(1))) * 0.5;
    let bands = occupancy.bands(&groups, half, thinnest, bin_seconds);
    chart.draw_series(bands).map_err(fail)?;
    draw_legend(&legend, &occupancy_legend(report, &slots, layout, &groups))
}

/// The rows of the aggregated Gantt chart: `per_row` neighbouring
/// executors share a row, so that there are at most [`AGGREGATE_ROWS`].
struct RowGroups {
    executors: usize,
    per_row: usize,
    rows: usize,
}

impl RowGroups {
    fn of(report: &Report) -> RowGroups {
        let executors = report.executors.len().max(1);
        let per_row = executors.div_ceil(AGGREGATE_ROWS);
        RowGroups {
            executors,
            per_row,
            rows: executors.div_ceil(per_row),
        }
    }

    /// How many executors row `row` holds (the last may hold fewer).
    fn size(&self, row: usize) -> usize {
        self.per_row.min(self.executors - row * self.per_row)
    }

    /// The rows' labels: the first executor's name, and how many more
    /// share its row.
    fn labels(&self, names: &[String]) -> Vec<String> {
        (0..self.rows)
            .map(|row| {
                let count = self.size(row);
                let name = names.get(row * self.per_row).cloned().unwrap_or_default();
                if count > 1 {
                    format!("{name} +{}", count - 1)
                } else {
                    name
                }
            })
            .collect()
    }
}

/// How busy each row was in each time bin, by category: the coloured
/// kinds in legend order, the grey of the others, then failed attempts of
/// any kind.
struct Occupancy {
    /// The categories' colours.
    colors: Vec<RGBColor>,
    /// By row, then category: `busy[row * colors.len() + category]`.
    busy: Vec<Bins>,
}

impl Occupancy {
    /// The occupancy of `report`'s bars over `span` seconds, with kinds
    /// coloured as their palette `slots` say.
    fn of(report: &Report, slots: &[Option<usize>], groups: &RowGroups, span: f64) -> Occupancy {
        let mut colors: Vec<RGBColor> = Vec::new();
        let mut category_of_kind = vec![None; report.kinds.len()];
        for kind in report.kinds_in_graph_order() {
            if let Some(slot) = slots[kind] {
                category_of_kind[kind] = Some(colors.len());
                colors.push(KIND_PALETTE[slot]);
            }
        }
        let other = colors.len();
        colors.push(OTHER_KIND);
        let failed = colors.len();
        colors.push(FAILED);
        let categories = colors.len();
        let mut busy: Vec<Bins> = (0..groups.rows * categories)
            .map(|_| Bins::new(span, AGGREGATE_BINS))
            .collect();
        for bar in &report.bars {
            let category = if bar.failed {
                failed
            } else {
                category_of_kind
                    .get(bar.kind)
                    .copied()
                    .flatten()
                    .unwrap_or(other)
            };
            let row = (bar.executor / groups.per_row).min(groups.rows - 1);
            busy[row * categories + category].cover(bar.start, bar.end);
        }
        Occupancy { colors, busy }
    }

    /// Each category's band of each row as one polygon whose top and
    /// bottom step from bin to bin, a row `2 * half` high. Levels are
    /// rounded to `thinnest`, so that a band that stays level for several
    /// bins needs no corners there, and the SVG grows with rows, bins and
    /// kinds, not with attempts.
    fn bands(
        &self,
        groups: &RowGroups,
        half: f64,
        thinnest: f64,
        bin_seconds: f64,
    ) -> Vec<Polygon<(f64, f64)>> {
        let categories = self.colors.len();
        let mut bands = Vec::new();
        for row in 0..groups.rows {
            let capacity = groups.size(row) as f64;
            let bottom = (groups.rows - 1 - row) as f64 - half;
            let to_chart = |(x, level): (f64, f64)| (x, bottom + 2.0 * half * level);
            let mut below = vec![0.0; AGGREGATE_BINS];
            for (category, color) in self.colors.iter().enumerate() {
                let share = self.busy[row * categories + category].fractions(capacity);
                // Overlapping attempts of a corrupt-ish journal could stack
                // above the row: the stack stops at full.
                let above: Vec<f64> = (below.iter().zip(&share))
                    .map(|(low, share)| ((low + share).min(1.0) / thinnest).round() * thinnest)
                    .collect();
                if above == below {
                    continue;
                }
                let mut outline = step_edge(&above, bin_seconds);
                outline.extend(step_edge(&below, bin_seconds).into_iter().rev());
                bands.push(Polygon::new(
                    outline.into_iter().map(to_chart).collect::<Vec<_>>(),
                    color.filled(),
                ));
                below = above;
            }
        }
        bands
    }
}

/// The aggregated chart's legend: the kinds, failed attempts, and notes
/// that say the chart is aggregated and how.
fn occupancy_legend(
    report: &Report,
    slots: &[Option<usize>],
    layout: &Layout,
    groups: &RowGroups,
) -> Vec<Entry> {
    let mut entries = kind_entries(report, slots);
    if report.attempts.failed > 0 {
        entries.push(Entry::area(
            FAILED,
            format!("failed attempts ({})", report.attempts.failed),
        ));
    }
    entries.push(Entry::note(format!(
        "aggregated: {} attempts,",
        report.attempts.total
    )));
    entries.push(Entry::note(format!(
        "over {} to draw one by one",
        layout.max_bars
    )));
    if groups.per_row > 1 {
        entries.push(Entry::note(format!("{} executors a row", groups.per_row)));
    }
    entries
}

/// The corners, left to right, of a line that holds `levels[i]` across bin
/// `i` (bins `width` wide): two where the level changes, none in between.
fn step_edge(levels: &[f64], width: f64) -> Vec<(f64, f64)> {
    let Some(&first) = levels.first() else {
        return Vec::new();
    };
    let mut corners = vec![(0.0, first)];
    for (i, pair) in levels.windows(2).enumerate() {
        if pair[0] != pair[1] {
            let x = (i + 1) as f64 * width;
            corners.push((x, pair[0]));
            corners.push((x, pair[1]));
        }
    }
    corners.push((levels.len() as f64 * width, levels[levels.len() - 1]));
    corners
}

/// `value` with three significant digits, for a caption.
fn round_to_3(value: f64) -> f64 {
    if value <= 0.0 || !value.is_finite() {
        return value;
    }
    let scale = 10f64.powi(2 - value.log10().floor() as i32);
    (value * scale).round() / scale
}
