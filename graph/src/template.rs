//! `{name}` templates in ids, arguments and paths of swept entries.

use std::collections::BTreeMap;

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Var(String),
}

/// A string with `{name}` placeholders; `{{` and `}}` are literal braces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
}

/// Why a template is malformed, with the byte offset in the string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `{` without its `}`.
    #[error("`{{` at byte {0} is never closed; write `{{{{` for a literal brace")]
    Unclosed(usize),
    /// A `}` without a `{` before it.
    #[error("`}}` at byte {0} closes nothing; write `}}}}` for a literal brace")]
    Unopened(usize),
    /// `{}` or a name with characters other than letters, digits, `_` and `-`.
    #[error("bad placeholder `{{{0}}}`: names are letters, digits, `_` and `-` (write `{{{{` and `}}}}` for literal braces, e.g. in awk)")]
    BadName(String),
    /// A placeholder the entry's `for` does not define.
    #[error("unknown placeholder `{{{name}}}`; this entry defines {known}")]
    Unknown {
        /// The placeholder.
        name: String,
        /// The variables that exist, as text.
        known: String,
    },
}

impl Template {
    /// Parses `text`.
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut chars = text.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|&(_, n)| n) == Some('{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek().map(|&(_, n)| n) == Some('}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => return Err(TemplateError::Unopened(at)),
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some((_, '}')) => break,
                            Some((_, c)) => name.push(c),
                            None => return Err(TemplateError::Unclosed(at)),
                        }
                    }
                    let valid = !name.is_empty()
                        && name
                            .chars()
                            .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
                    if !valid {
                        return Err(TemplateError::BadName(name));
                    }
                    if !literal.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut literal)));
                    }
                    pieces.push(Piece::Var(name));
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Template { pieces })
    }

    /// Parses `text` and checks that its placeholders are among `known`.
    pub fn checked(text: &str, known: &[&str]) -> Result<Template, TemplateError> {
        let template = Template::parse(text)?;
        template.check(known)?;
        Ok(template)
    }

    /// Whether the template has any placeholder.
    pub fn has_placeholders(&self) -> bool {
        self.pieces.iter().any(|p| matches!(p, Piece::Var(_)))
    }

    /// Fails if a placeholder is not among `known`.
    pub fn check(&self, known: &[&str]) -> Result<(), TemplateError> {
        for piece in &self.pieces {
            if let Piece::Var(name) = piece {
                if !known.contains(&name.as_str()) {
                    let known = if known.is_empty() {
                        "no variables (it has no `for`)".to_string()
                    } else {
                        known
                            .iter()
                            .map(|k| format!("`{{{k}}}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    };
                    return Err(TemplateError::Unknown {
                        name: name.clone(),
                        known,
                    });
                }
            }
        }
        Ok(())
    }

    /// The text with every placeholder replaced; call [`check`](Self::check) first.
    pub fn render(&self, values: &BTreeMap<String, String>) -> String {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Var(name) => out.push_str(values.get(name).map_or("", String::as_str)),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn placeholders_are_replaced_and_double_braces_are_literal() {
        let t = Template::parse("detect-{pair}-{{x}}.{band}").unwrap();
        assert_eq!(
            t.render(&values(&[("pair", "7"), ("band", "r")])),
            "detect-7-{x}.r"
        );
        assert!(t.has_placeholders());
        assert!(!Template::parse("plain").unwrap().has_placeholders());
    }

    #[test]
    fn malformed_templates_say_what_is_wrong() {
        assert_eq!(Template::parse("a{pair"), Err(TemplateError::Unclosed(1)));
        assert_eq!(Template::parse("a}b"), Err(TemplateError::Unopened(1)));
        assert_eq!(
            Template::parse("{}"),
            Err(TemplateError::BadName(String::new()))
        );
        assert_eq!(
            Template::parse("{a b}"),
            Err(TemplateError::BadName("a b".into()))
        );
        let unknown = Template::parse("{pari}")
            .unwrap()
            .check(&["pair"])
            .unwrap_err();
        assert_eq!(
            unknown.to_string(),
            "unknown placeholder `{pari}`; this entry defines `{pair}`"
        );
    }
}
