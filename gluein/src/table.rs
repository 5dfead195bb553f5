//! Plain-text tables for terminals: columns padded to their widest cell.

/// `rows` as lines of columns padded to their widest cell, two spaces
/// apart, without trailing spaces. Rows may be shorter than others.
pub fn columns(rows: &[Vec<String>]) -> String {
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
    for row in rows {
        let cells: Vec<String> = (row.iter().zip(&widths))
            .map(|(cell, &width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
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
}
