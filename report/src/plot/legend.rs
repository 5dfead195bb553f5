//! Legends, drawn in a column of their own right of each panel.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{Drawn, FONT, LEGEND_WIDTH};

/// A panel's chart area and, right of it, its legend column.
pub(super) fn split_legend<DB: DrawingBackend>(
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
pub(super) struct Entry {
    swatch: Swatch,
    text: String,
}

impl Entry {
    pub(super) fn area(color: RGBColor, text: String) -> Entry {
        Entry {
            swatch: Swatch::Area(color),
            text,
        }
    }
    pub(super) fn line(color: RGBColor, text: String) -> Entry {
        Entry {
            swatch: Swatch::Line(color),
            text,
        }
    }
    pub(super) fn outline(color: RGBColor, text: String) -> Entry {
        Entry {
            swatch: Swatch::Outline(color),
            text,
        }
    }
    pub(super) fn note(text: String) -> Entry {
        Entry {
            swatch: Swatch::None,
            text,
        }
    }
}

/// Draws a legend top-down in its own column, so that it never covers data.
pub(super) fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[Entry],
) -> Drawn {
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
