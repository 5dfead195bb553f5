//! The report as a picture: utilization, per-label lanes and a Gantt chart
//! of attempts, stacked, drawn with plotters to SVG or PNG.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use super::bins::Bins;
use super::error::ReportError;
use super::model::{Report, WallEnd};

/// The size `plot` draws at, in pixels: wide enough for a long run's
/// detail, tall enough for three panels.
pub const DEFAULT_PLOT_SIZE: (u32, u32) = (1400, 1000);

/// Above this many attempts `plot` draws the Gantt chart as an aggregate
/// (see [`PlotOptions::max_bars`]). A bar takes up to three SVG elements,
/// so this keeps the SVG within a few megabytes and far below the million
/// elements resvg parses at most (a PNG of a million attempts failed with
/// "nodes limit reached"); a chart this dense shows no single bar anyway.
pub const DEFAULT_MAX_BARS: usize = 20_000;

/// Rows of the aggregated Gantt chart at most: more executors share rows.
const AGGREGATE_ROWS: usize = 32;
/// Time bins of the aggregated Gantt chart.
const AGGREGATE_BINS: usize = 120;

/// Colours for activity kinds: pairwise at least 16 apart in CIEDE2000
/// (ΔE00; 2 is a just-noticeable difference) and as far from the failure
/// red, the grey of "other kinds", black and white. Picked greedily from
/// Okabe-Ito, Tableau 10 and 20 and Kelly's colours of maximum contrast,
/// keeping a lightness (L*) of 30 to 92 so that bars show on white and
/// black text reads beside them. See [`kind_colors`] for which kind gets
/// which.
const KIND_PALETTE: [RGBColor; 18] = [
    RGBColor(0xe6, 0x9f, 0x00),
    RGBColor(0x56, 0xb4, 0xe9),
    RGBColor(0x00, 0x9e, 0x73),
    RGBColor(0xf0, 0xe4, 0x42),
    RGBColor(0x00, 0x72, 0xb2),
    RGBColor(0xd5, 0x5e, 0x00),
    RGBColor(0xcc, 0x79, 0xa7),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x98, 0xdf, 0x8a),
    RGBColor(0xc5, 0xb0, 0xd5),
    RGBColor(0xc2, 0xb2, 0x80),
    RGBColor(0xb3, 0x44, 0x6c),
    RGBColor(0x8d, 0xb6, 0x00),
    RGBColor(0x65, 0x45, 0x22),
    RGBColor(0x7f, 0x7f, 0x00),
];
const OTHER_KIND: RGBColor = RGBColor(0xba, 0xb0, 0xac);
const FAILED: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const EXECUTORS: RGBColor = RGBColor(0x4e, 0x79, 0xa7);
const CORES: RGBColor = RGBColor(0xf2, 0x8e, 0x2b);

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

/// Each kind's colour in plots of `report`, in [`Report::kinds`] order, as
/// RGB; `None` for a kind drawn in the grey shared by "other kinds".
///
/// The rule: every kind ranks the palette's colours by a stable hash (FNV-1a,
/// the same in every build and on every machine) of its name and the
/// colour's index, so each kind has its own order of preference
/// (rendezvous hashing). In graph order, each kind takes the first colour of
/// its ranking that no kind before it took. A kind thus has the same colour
/// in every run unless a kind earlier in the graph took that colour first,
/// and no two kinds of one plot share a colour. When there are more kinds
/// than colours, the kinds with the most total time get the colours and the
/// rest share the grey.
pub fn kind_colors(report: &Report) -> Vec<Option<[u8; 3]>> {
    kind_palette_slots(report)
        .into_iter()
        .map(|slot| {
            slot.map(|s| {
                let RGBColor(r, g, b) = KIND_PALETTE[s];
                [r, g, b]
            })
        })
        .collect()
}

/// [`kind_colors`] as indices into [`KIND_PALETTE`].
fn kind_palette_slots(report: &Report) -> Vec<Option<usize>> {
    // `report.kinds` comes most total time first: the first ones get colours.
    let coloured = report.kinds.len().min(KIND_PALETTE.len());
    let mut taken = [false; KIND_PALETTE.len()];
    let mut slots = vec![None; report.kinds.len()];
    for kind in report.kinds_in_graph_order() {
        if kind >= coloured {
            continue;
        }
        let name = report.kinds[kind].kind.as_bytes();
        let slot = (0..KIND_PALETTE.len())
            .filter(|&s| !taken[s])
            .max_by_key(|&s| fnv1a(name, s as u64));
        if let Some(slot) = slot {
            taken[slot] = true;
            slots[kind] = Some(slot);
        }
    }
    slots
}

/// FNV-1a over `bytes` and then `salt`: a hash that, unlike std's hashers,
/// is fixed by its definition, so colours stay the same across builds.
fn fnv1a(bytes: &[u8], salt: u64) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes.iter().copied().chain(salt.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
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

/// Where the Gantt chart goes, shared with the panels above it.
struct Layout {
    /// Seconds the time axis covers.
    span: f64,
    /// Width of the row labels, the same in every panel so time axes align.
    label_width: u32,
    /// The chart's panel letter: (c), or (b) when the lanes are left out.
    letter: char,
    /// Attempts above which the chart is aggregated.
    max_bars: usize,
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

fn draw_gantt<DB: DrawingBackend>(
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
fn draw_occupancy<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    report: &Report,
    layout: &Layout,
    names: &[String],
) -> Drawn {
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let (plot, legend) = split_legend(area);
    let executors = report.executors.len().max(1);
    let per_row = executors.div_ceil(AGGREGATE_ROWS);
    let rows = executors.div_ceil(per_row);
    let labels: Vec<String> = (0..rows)
        .map(|row| {
            let first = row * per_row;
            let count = per_row.min(executors - first);
            let name = names.get(first).cloned().unwrap_or_default();
            if count > 1 {
                format!("{name} +{}", count - 1)
            } else {
                name
            }
        })
        .collect();

    // Categories: the coloured kinds in legend order, the grey of the
    // others, then failed attempts of any kind.
    let slots = kind_palette_slots(report);
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
    let mut busy: Vec<Bins> = (0..rows * categories)
        .map(|_| Bins::new(layout.span, AGGREGATE_BINS))
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
        let row = (bar.executor / per_row).min(rows - 1);
        busy[row * categories + category].cover(bar.start, bar.end);
    }
    let bin_seconds = layout.span / AGGREGATE_BINS as f64;

    let caption = format!(
        "({}) attempts per executor, aggregated: busy share of {} s bins, by kind",
        layout.letter,
        axis_seconds(&round_to_3(bin_seconds))
    );
    let mut chart = row_chart(&plot, layout, &caption, &labels)?;
    let half = if rows > 60 { 0.5 } else { 0.42 };
    // Levels go in steps of half a pixel: finer would not show.
    let (_, plot_height) = chart.plotting_area().dim_in_pixel();
    let thinnest = rows as f64 / (2.0 * half * f64::from(plot_height.max(1))) * 0.5;
    // Each kind's band of a row is one polygon whose top and bottom step
    // from bin to bin. Levels are rounded to half a pixel, so that a band
    // that stays level for several bins needs no corners there, and the
    // SVG grows with rows, bins and kinds, not with attempts.
    let mut bands = Vec::new();
    for row in 0..rows {
        let first = row * per_row;
        let capacity = per_row.min(executors - first) as f64;
        let bottom = (rows - 1 - row) as f64 - half;
        let to_chart = |(x, level): (f64, f64)| (x, bottom + 2.0 * half * level);
        let mut below = vec![0.0; AGGREGATE_BINS];
        for (category, color) in colors.iter().enumerate() {
            let share = busy[row * categories + category].fractions(capacity);
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
    chart.draw_series(bands).map_err(fail)?;

    let mut entries = kind_entries(report, &slots);
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
    if per_row > 1 {
        entries.push(Entry::note(format!("{per_row} executors a row")));
    }
    draw_legend(&legend, &entries)
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
