//! Plain-text tables for terminals: columns padded to their widest cell.

use std::borrow::Cow;

/// `rows` as lines of columns padded to their widest cell, two spaces
/// apart, without trailing spaces. Rows may be shorter than others.
///
/// A cell's control characters are written escaped (`\n`, `\u{1b}`), as
/// Rust's `escape_debug` writes them: a cell may come from anywhere (a
/// job name an older build stored), and a raw newline or escape sequence
/// would forge rows or drive the terminal. Cells are padded by hand, not
/// with `format!`'s width, which panics past 65,535.
pub fn columns(rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<Cow<'_, str>>> = (rows.iter())
        .map(|row| row.iter().map(|cell| printable(cell)).collect())
        .collect();
    let count = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..count)
        .map(|c| {
            (rows.iter())
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (k, (cell, &width)) in row.iter().zip(&widths).enumerate() {
            if k > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            let pad = width.saturating_sub(cell.chars().count());
            line.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `text` with its control characters escaped; unchanged (and not
/// copied) when it has none.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_are_padded_to_the_widest_cell() {
        let rows = vec![
            vec!["A".to_string(), "LONG".to_string()],
            vec!["wide".to_string(), "x".to_string()],
            vec!["short".to_string()],
        ];
        assert_eq!(super::columns(&rows), "A      LONG\nwide   x\nshort\n");
    }

    #[test]
    fn a_cell_wider_than_format_allows_is_padded_without_a_panic() {
        let wide = "n".repeat(100_000);
        let rows = vec![
            vec![wide.clone(), "x".to_string()],
            vec!["a".to_string(), "y".to_string()],
        ];
        let out = super::columns(&rows);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], format!("{wide}  x"));
        assert_eq!(lines[1].len(), 100_000 + 3, "a, padding, two spaces, y");
        assert!(lines[1].starts_with('a') && lines[1].ends_with("  y"));
    }

    #[test]
    fn control_characters_are_escaped_and_cannot_forge_a_row() {
        let rows = vec![vec![
            "job\n7  succeeded".to_string(),
            "\u{1b}[2Jred".to_string(),
        ]];
        let out = super::columns(&rows);
        assert_eq!(out, "job\\n7  succeeded  \\u{1b}[2Jred\n");
        assert_eq!(out.lines().count(), 1);
    }
}
