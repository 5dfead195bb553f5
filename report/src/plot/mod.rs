//! The report as a picture: utilization, per-label lanes and a Gantt chart
//! of attempts, stacked, drawn with plotters to SVG or PNG.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

mod colors;
mod gantt;
mod legend;
mod panels;

use crate::error::ReportError;
use crate::model::{Report, WallEnd};
use gantt::{draw_gantt, draw_occupancy, Layout};
use panels::{draw_lanes, draw_utilization};

pub use colors::kind_colors;

/// The size `plot` draws at, in pixels: wide enough for a long run's
/// detail, tall enough for three panels.
pub const DEFAULT_PLOT_SIZE: (u32, u32) = (1400, 1000);

/// Above this many attempts `plot` draws the Gantt chart as an aggregate
/// (see [`PlotOptions::max_bars`]). A bar takes up to three SVG elements,
/// so this keeps the SVG within a few megabytes and far below the million
/// elements resvg parses at most (a PNG of a million attempts failed with
/// "nodes limit reached"); a chart this dense shows no single bar anyway.
pub const DEFAULT_MAX_BARS: usize = 20_000;

/// The font family every text uses; it is registered from bundled bytes.
const FONT: &str = "sans-serif";
/// Width of the column right of each panel that holds its legend.
const LEGEND_WIDTH: u32 = 250;

/// How [`plot_with_options`] draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlotOptions {
    /// Width and height in pixels, at least 600 × 400.
    pub size: (u32, u32),
    /// Runs with more attempts than this get, instead of a bar per attempt,
    /// each executor's (or group of executors') occupancy in time bins,
    /// stacked by kind, and the chart's caption says so.
    pub max_bars: usize,
}

impl Default for PlotOptions {
    fn default() -> PlotOptions {
        PlotOptions {
            size: DEFAULT_PLOT_SIZE,
            max_bars: DEFAULT_MAX_BARS,
        }
    }
}

/// Draws `report` to `path` at [`DEFAULT_PLOT_SIZE`]; the extension
/// (`.svg` or `.png`) picks the format.
pub fn plot(report: &Report, path: &Path) -> Result<(), ReportError> {
    plot_with_options(report, path, PlotOptions::default())
}

/// Draws `report` to `path` at `size` pixels (width, height; at least
/// 600 × 400); the extension (`.svg` or `.png`) picks the format.
pub fn plot_with_size(report: &Report, path: &Path, size: (u32, u32)) -> Result<(), ReportError> {
    plot_with_options(
        report,
        path,
        PlotOptions {
            size,
            ..PlotOptions::default()
        },
    )
}

/// Draws `report` to `path` as `options` say; the extension (`.svg` or
/// `.png`) picks the format.
pub fn plot_with_options(
    report: &Report,
    path: &Path,
    options: PlotOptions,
) -> Result<(), ReportError> {
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
    let size = (options.size.0.max(600), options.size.1.max(400));
    let svg = render_svg(report, size, options.max_bars).map_err(failure)?;
    let bytes = if png {
        rasterize(&svg, size).map_err(failure)?
    } else {
        svg.into_bytes()
    };
    std::fs::write(path, bytes).map_err(|e| failure(e.to_string()))
}

/// The report drawn as an SVG document. PNGs are rasterized from it too,
/// so both formats show the same picture.
fn render_svg(report: &Report, size: (u32, u32), max_bars: usize) -> Result<String, String> {
    register_fonts()?;
    let mut svg = String::new();
    draw(
        SVGBackend::with_string(&mut svg, size).into_drawing_area(),
        report,
        max_bars,
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

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    report: &Report,
    max_bars: usize,
) -> Drawn {
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(fail)?;
    let (_, height) = root.dim_in_pixel();
    let (title, body) = root.split_vertically(36);
    draw_title(&title, report)?;

    // Panels (a) and (b) get a fixed share; the Gantt chart, which needs a
    // row per executor, gets the rest. With one lane (or none), the lanes'
    // stack is the busy-executor curve of (a) over again, in executors
    // instead of percent: it is left out and the Gantt chart takes its room.
    let body_height = height.saturating_sub(36);
    let panel = (body_height * 27 / 100).max(120);
    let (utilization, rest) = body.split_vertically(panel);
    let (lanes, gantt) = if report.lanes.len() > 1 {
        let (lanes, gantt) = rest.split_vertically(panel);
        (Some(lanes), gantt)
    } else {
        (None, rest)
    };

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
    let gantt_letter = match &lanes {
        Some(lanes) => {
            draw_lanes(lanes, report, span, label_width)?;
            'c'
        }
        None => 'b',
    };
    let layout = Layout {
        span,
        label_width,
        letter: gantt_letter,
        max_bars,
    };
    if report.bars.len() > max_bars {
        draw_occupancy(&gantt, report, &layout, &names)?;
    } else {
        draw_gantt(&gantt, report, &layout, &names)?;
    }
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
