//! The report as a picture: utilization, per-label lanes and a Gantt chart
//! of attempts, stacked, drawn with plotters to SVG or PNG.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use super::error::ReportError;
use super::model::{Report, WallEnd};

/// The size `plot` draws at, in pixels: wide enough for a long run's
/// detail, tall enough for three panels.
pub const DEFAULT_PLOT_SIZE: (u32, u32) = (1400, 1000);

/// Kinds the Gantt legend names; the rest share one grey.
const LEGEND_KINDS: usize = 12;

/// Colours for kinds and lanes; red is left out, as it marks failures.
const PALETTE: [RGBColor; 12] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x49, 0x98, 0x94),
    RGBColor(0xa0, 0xcb, 0xe8),
    RGBColor(0x8c, 0xd1, 0x7d),
    RGBColor(0xd4, 0xa6, 0xc8),
];
const OTHER_KIND: RGBColor = RGBColor(0xba, 0xb0, 0xac);
const FAILED: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const EXECUTORS: RGBColor = RGBColor(0x4e, 0x79, 0xa7);
const CORES: RGBColor = RGBColor(0xf2, 0x8e, 0x2b);

/// The font family every text uses; it is registered from bundled bytes.
const FONT: &str = "sans-serif";
/// Width of the column right of each panel that holds its legend.
const LEGEND_WIDTH: u32 = 250;

/// Draws `report` to `path` at [`DEFAULT_PLOT_SIZE`]; the extension
/// (`.svg` or `.png`) picks the format.
pub fn plot(report: &Report, path: &Path) -> Result<(), ReportError> {
    plot_with_size(report, path, DEFAULT_PLOT_SIZE)
}

/// Draws `report` to `path` at `size` pixels (width, height; at least
/// 600 × 400); the extension (`.svg` or `.png`) picks the format.
pub fn plot_with_size(report: &Report, path: &Path, size: (u32, u32)) -> Result<(), ReportError> {
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let png = match extension.as_deref() {
        Some("svg") => false,
        Some("png") => true,
        _ => return Err(ReportError::UnsupportedFormat(path.to_path_buf())),
    };
    let failure = |message: String| ReportError::Plot {
        path: path.to_path_buf(),
        message,
    };
    let size = (size.0.max(600), size.1.max(400));
    let svg = render_svg(report, size).map_err(failure)?;
    let bytes = if png {
        rasterize(&svg, size).map_err(failure)?
    } else {
        svg.into_bytes()
    };
    std::fs::write(path, bytes).map_err(|e| failure(e.to_string()))
}

/// The report drawn as an SVG document. PNGs are rasterized from it too,
/// so both formats show the same picture.
fn render_svg(report: &Report, size: (u32, u32)) -> Result<String, String> {
    register_fonts()?;
    let mut svg = String::new();
    draw(
        SVGBackend::with_string(&mut svg, size).into_drawing_area(),
        report,
    )?;
    Ok(svg)
}

/// Rasterizes `svg` to PNG bytes with the bundled font, so that text needs
/// no font installed on the machine.
fn rasterize(svg: &str, (width, height): (u32, u32)) -> Result<Vec<u8>, String> {
    let mut fonts = resvg::usvg::fontdb::Database::new();
    fonts.load_font_data(dejavu::sans::regular().to_vec());
    fonts.load_font_data(dejavu::sans::bold().to_vec());
    fonts.set_sans_serif_family("DejaVu Sans");
    let options = resvg::usvg::Options {
        font_family: "DejaVu Sans".to_string(),
        fontdb: std::sync::Arc::new(fonts),
        ..Default::default()
    };
    let tree = resvg::usvg::Tree::from_str(svg, &options).map_err(|e| e.to_string())?;
    let mut pixmap = resvg::tiny_skia::Pixmap::new(width, height)
        .ok_or_else(|| format!("cannot make a {width} × {height} image"))?;
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().map_err(|e| e.to_string())
}

/// Registers the bundled DejaVu Sans for plotters' text measurements, once;
/// they then match the font the PNG is drawn with.
fn register_fonts() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let fonts = [
                (FontStyle::Normal, dejavu::sans::regular()),
                (FontStyle::Bold, dejavu::sans::bold()),
            ];
            for (style, bytes) in fonts {
                register_font(FONT, style, bytes)
                    .map_err(|_| "the bundled DejaVu Sans font does not load".to_string())?;
            }
            Ok(())
        })
        .clone()
}

type Drawn = Result<(), String>;

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, report: &Report) -> Drawn {
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(fail)?;
    let (_, height) = root.dim_in_pixel();
    let (title, body) = root.split_vertically(36);
    draw_title(&title, report)?;

    // Panels (a) and (b) get a fixed share; the Gantt chart, which needs a
    // row per executor, gets the rest.
    let body_height = height.saturating_sub(36);
    let panel = (body_height * 27 / 100).max(120);
    let (utilization, rest) = body.split_vertically(panel);
    let (lanes, gantt) = rest.split_vertically(panel);

    // One label width for all panels keeps their time axes aligned.
    let names = row_names(report);
    let longest = names.iter().map(|n| n.chars().count()).max().unwrap_or(0) as u32;
    let label_width = (longest * 8 + 16).clamp(70, 220);
    let span = if report.timeline.span > 0.0 {
        report.timeline.span
    } else {
        1.0
    };

    draw_utilization(&utilization, report, span, label_width)?;
    draw_lanes(&lanes, report, span, label_width)?;
    draw_gantt(&gantt, report, span, label_width, &names)?;
    root.present().map_err(fail)
}

fn draw_title<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, report: &Report) -> Drawn {
    let run = &report.run;
    let wall = match run.wall_end {
        WallEnd::Recorded => format!("wall {:.1} s", run.wall_seconds),
        WallEnd::LastAttempt => {
            format!("wall {:.1} s (no end recorded)", run.wall_seconds)
        }
        WallEnd::Unknown => "wall unknown".to_string(),
    };
    let text = format!(
        "run {} of {} on {}: {}, {}, makespan {:.1} s, {} attempts on {} executors, {:.1}% executor use",
        run.run,
        run.graph_path,
        run.host,
        run.status,
        wall,
        run.makespan,
        report.attempts.total,
        report.executors.len(),
        report.timeline.mean_executors_busy * 100.0
    );
    area.draw(&Text::new(
        text,
        (14, 9),
        (FONT, 19).into_font().style(FontStyle::Bold).color(&BLACK),
    ))
    .map_err(|e| e.to_string())
}

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

fn draw_utilization<DB: DrawingBackend>(
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
    draw_legend(&legend, &entries)
}

/// Busy executors stacked by lane: the total is the busy-executor curve of
/// the paper's figures, and each band shows which kind of executor it was.
fn draw_lanes<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    report: &Report,
    span: f64,
    label_width: u32,
) -> Drawn {
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let (plot, legend) = split_legend(area);
    let capacity = report.executors.len().max(1) as f64;
    let bins = report.timeline.executors_busy.len();
    // Running totals, bottom lane first; each band is drawn from zero up to
    // its total, the tallest first, so that lower bands paint over it.
    let mut totals: Vec<Vec<f64>> = Vec::with_capacity(report.lanes.len());
    let mut running = vec![0.0; bins];
    for lane in &report.lanes {
        for (sum, busy) in running.iter_mut().zip(&lane.busy) {
            *sum += busy * lane.executors as f64;
        }
        totals.push(running.clone());
    }
    let highest = running.iter().copied().fold(capacity, f64::max);
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
    draw_legend(&legend, &entries)
}

/// Lane colours: darker hues than the kinds' palette, so that a lane is not
/// mistaken for a kind of the Gantt chart below.
fn lane_color(i: usize) -> RGBColor {
    const LANES: [RGBColor; 6] = [
        RGBColor(0x2f, 0x4b, 0x7c),
        RGBColor(0xa0, 0x51, 0x95),
        RGBColor(0x3c, 0x8d, 0x7e),
        RGBColor(0xa0, 0x6a, 0x2c),
        RGBColor(0x6b, 0x6b, 0x6b),
        RGBColor(0x5b, 0x8c, 0x2a),
    ];
    LANES[i % LANES.len()]
}

fn draw_gantt<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    report: &Report,
    span: f64,
    label_width: u32,
    names: &[String],
) -> Drawn {
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let (plot, legend) = split_legend(area);
    let rows = report.executors.len().max(1);
    let mut chart = ChartBuilder::on(&plot)
        .margin_top(8)
        .margin_right(10)
        .margin_bottom(6)
        .caption("(c) attempts per executor", (FONT, 16))
        .x_label_area_size(40)
        .y_label_area_size(label_width)
        .build_cartesian_2d(0.0..span, -0.5..rows as f64 - 0.5)
        .map_err(fail)?;
    // Row 0 is drawn at the top, as one reads a list.
    let row_y = |executor: usize| (rows - 1 - executor) as f64;
    let row_label = |y: &f64| {
        let nearest = y.round();
        if (y - nearest).abs() > 1e-6 || nearest < 0.0 || nearest >= rows as f64 {
            return String::new();
        }
        let executor = rows - 1 - nearest as usize;
        names.get(executor).cloned().unwrap_or_default()
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

    let half = if rows > 60 { 0.5 } else { 0.38 };
    let color_of = |kind: usize| {
        if kind < LEGEND_KINDS {
            PALETTE[kind % PALETTE.len()]
        } else {
            OTHER_KIND
        }
    };
    // Bars wide enough to see get a white edge, so that back-to-back
    // attempts of one kind stay apart; thinner ones would vanish in it.
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

    let mut entries: Vec<Entry> = report
        .kinds
        .iter()
        .take(LEGEND_KINDS)
        .enumerate()
        .map(|(i, k)| {
            Entry::area(
                color_of(i),
                format!("{} ({})", short(&k.kind, 22), k.attempts),
            )
        })
        .collect();
    if report.kinds.len() > LEGEND_KINDS {
        let rest = &report.kinds[LEGEND_KINDS..];
        entries.push(Entry::area(
            OTHER_KIND,
            format!(
                "{} other kinds ({})",
                rest.len(),
                rest.iter().map(|k| k.attempts).sum::<usize>()
            ),
        ));
    }
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

/// A panel's chart area and, right of it, its legend column.
fn split_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
) -> (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>) {
    let (width, _) = area.dim_in_pixel();
    area.split_horizontally(width.saturating_sub(LEGEND_WIDTH))
}

/// What a legend line shows before its text.
enum Swatch {
    Area(RGBColor),
    Line(RGBColor),
    Outline(RGBColor),
    None,
}

/// One line of a legend.
struct Entry {
    swatch: Swatch,
    text: String,
}

impl Entry {
    fn area(color: RGBColor, text: String) -> Entry {
        Entry {
            swatch: Swatch::Area(color),
            text,
        }
    }
    fn line(color: RGBColor, text: String) -> Entry {
        Entry {
            swatch: Swatch::Line(color),
            text,
        }
    }
    fn outline(color: RGBColor, text: String) -> Entry {
        Entry {
            swatch: Swatch::Outline(color),
            text,
        }
    }
    fn note(text: String) -> Entry {
        Entry {
            swatch: Swatch::None,
            text,
        }
    }
}

/// Draws a legend top-down in its own column, so that it never covers data.
fn draw_legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, entries: &[Entry]) -> Drawn {
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let (_, height) = area.dim_in_pixel();
    let line = 19;
    let top = 34;
    for (i, entry) in entries.iter().enumerate() {
        let y = top + i as i32 * line;
        if y + line > height as i32 {
            break;
        }
        let (x0, x1, mid) = (6, 26, y + 7);
        match entry.swatch {
            Swatch::Area(color) => area
                .draw(&Rectangle::new([(x0, y + 1), (x1, y + 13)], color.filled()))
                .map_err(fail)?,
            Swatch::Line(color) => area
                .draw(&PathElement::new(
                    vec![(x0, mid), (x1, mid)],
                    color.stroke_width(3),
                ))
                .map_err(fail)?,
            Swatch::Outline(color) => area
                .draw(&PathElement::new(
                    vec![
                        (x0, y + 1),
                        (x1, y + 1),
                        (x1, y + 13),
                        (x0, y + 13),
                        (x0, y + 1),
                    ],
                    color.stroke_width(3),
                ))
                .map_err(fail)?,
            Swatch::None => {}
        }
        area.draw(&Text::new(
            entry.text.clone(),
            (x1 + 8, y),
            (FONT, 13).into_font().color(&BLACK),
        ))
        .map_err(fail)?;
    }
    Ok(())
}

/// `color` moved `amount` (0 to 1) of the way to white, opaque, so that
/// grid lines do not show through it as they would through transparency.
fn lighten(color: RGBColor, amount: f64) -> RGBColor {
    let mix = |c: u8| (f64::from(c) + (255.0 - f64::from(c)) * amount).round() as u8;
    RGBColor(mix(color.0), mix(color.1), mix(color.2))
}

/// Axis seconds without needless decimals.
fn axis_seconds(value: &f64) -> String {
    if value.fract().abs() < 1e-9 {
        format!("{value:.0}")
    } else {
        let text = format!("{value:.3}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Row labels `node/executor`, short enough for the axis: host names lose
/// their domain when the short names still tell the nodes apart, and are
/// cut before the executor index, which must stay readable.
fn row_names(report: &Report) -> Vec<String> {
    let host = |node: &str| node.split('.').next().unwrap_or(node).to_string();
    let mut full: Vec<&str> = report.executors.iter().map(|e| e.node.as_str()).collect();
    full.sort_unstable();
    full.dedup();
    let mut hosts: Vec<String> = full.iter().map(|n| host(n)).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let unique = hosts.len() == full.len();
    report
        .executors
        .iter()
        .map(|e| {
            let node = if unique {
                host(&e.node)
            } else {
                e.node.clone()
            };
            format!("{}/{}", short(&node, 18), e.executor)
        })
        .collect()
}

/// `text` cut to `max` characters with an ellipsis, so that long host names
/// and kinds cannot push a legend or axis out of shape.
fn short(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}
