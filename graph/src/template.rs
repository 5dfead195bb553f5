//! `{name}` templates in ids, arguments and paths of swept entries.
//!
//! In `script`, the one field a shell reads, `{name}` puts the value in as
//! one shell word, quoted where it needs quoting, so a value such as
//! `x; touch pwned` is an argument and never code; `{name:raw}` splices the
//! text as it is. Other fields are never quoted: they reach the program as
//! they are, without a shell.

use std::collections::BTreeMap;

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// A placeholder; `raw` when written `{name:raw}`.
    Var {
        name: String,
        raw: bool,
    },
}

/// A string with `{name}` (or, in scripts, `{name:raw}`) placeholders;
/// `{{` and `}}` are literal braces.
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
    /// `{name:form}` with a form other than `raw`.
    #[error("bad placeholder `{{{name}:{form}}}`: the only form after `:` is `raw`, as in `{{{name}:raw}}`")]
    UnknownForm {
        /// The variable.
        name: String,
        /// What followed the `:`.
        form: String,
    },
    /// `{name:raw}` in a field no shell reads, where nothing is quoted.
    #[error("`{{{0}:raw}}` only means something in `script`, where values are quoted for the shell; this field is never quoted, so write `{{{0}}}`")]
    RawOutsideScript(String),
    /// A quoted placeholder in a script where the quoting would not work.
    #[error("`{{{name}}}` is {place} in the script, where a value quoted for the shell would not read as one word; {advice}, or write `{{{name}:raw}}` to splice the text in unquoted")]
    QuotedPlace {
        /// The variable.
        name: String,
        /// Where it is, e.g. `inside "…" quotes`.
        place: &'static str,
        /// How to move it out.
        advice: &'static str,
    },
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
                    let mut inside = String::new();
                    loop {
                        match chars.next() {
                            Some((_, '}')) => break,
                            Some((_, c)) => inside.push(c),
                            None => return Err(TemplateError::Unclosed(at)),
                        }
                    }
                    let (name, raw) = match inside.split_once(':') {
                        Some((name, "raw")) => (name.to_string(), true),
                        Some((name, form)) if valid_name(name) => {
                            return Err(TemplateError::UnknownForm {
                                name: name.to_string(),
                                form: form.to_string(),
                            })
                        }
                        Some(_) => return Err(TemplateError::BadName(inside)),
                        None => (inside, false),
                    };
                    if !valid_name(&name) {
                        return Err(TemplateError::BadName(name));
                    }
                    if !literal.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut literal)));
                    }
                    pieces.push(Piece::Var { name, raw });
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Template { pieces })
    }

    /// Parses `text`, a field no shell reads, and checks that its
    /// placeholders are among `known` and none is `{name:raw}`.
    pub fn checked(text: &str, known: &[&str]) -> Result<Template, TemplateError> {
        let template = Template::parse(text)?;
        template.check(known)?;
        if let Some(name) = template.vars().find(|(_, raw)| *raw).map(|(n, _)| n) {
            return Err(TemplateError::RawOutsideScript(name.to_string()));
        }
        Ok(template)
    }

    /// Parses `text`, a script for `/bin/sh`, and checks that its
    /// placeholders are among `known` and that each `{name}` stands where
    /// a quoted word reads as one: not inside quotes, a comment or a
    /// here-document. Render it with [`render_for_shell`](Self::render_for_shell).
    pub fn checked_script(text: &str, known: &[&str]) -> Result<Template, TemplateError> {
        let template = Template::parse(text)?;
        template.check(known)?;
        template.check_shell_places()?;
        Ok(template)
    }

    /// Whether the template has any placeholder.
    pub fn has_placeholders(&self) -> bool {
        self.vars().next().is_some()
    }

    fn vars(&self) -> impl Iterator<Item = (&str, bool)> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Var { name, raw } => Some((name.as_str(), *raw)),
            Piece::Text(_) => None,
        })
    }

    /// Fails if a placeholder is not among `known`.
    pub fn check(&self, known: &[&str]) -> Result<(), TemplateError> {
        for (name, _) in self.vars() {
            if !known.contains(&name) {
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
                    name: name.to_string(),
                    known,
                });
            }
        }
        Ok(())
    }

    /// Fails if a quoted placeholder stands where the shell would not read
    /// its quoted value as one word of text.
    fn check_shell_places(&self) -> Result<(), TemplateError> {
        let mut lexer = ShellLexer::default();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => text.chars().for_each(|c| lexer.feed(c)),
                Piece::Var { name, raw } => {
                    if let (Some((place, advice)), false) = (lexer.place(), raw) {
                        return Err(TemplateError::QuotedPlace {
                            name: name.clone(),
                            place,
                            advice,
                        });
                    }
                    lexer.feed_word();
                }
            }
        }
        Ok(())
    }

    /// At most how many bytes a rendering takes, plain or for a shell,
    /// when each placeholder's value takes at most `longest(name)` bytes:
    /// a value as one shell word takes at most four bytes for each of its
    /// own, and two quotes.
    pub fn longest_render(&self, longest: impl Fn(&str) -> usize) -> usize {
        (self.pieces.iter())
            .map(|piece| match piece {
                Piece::Text(text) => text.len(),
                Piece::Var { name, .. } => longest(name).saturating_mul(4).saturating_add(2),
            })
            .fold(0, usize::saturating_add)
    }

    /// The text with every placeholder replaced as it is; call
    /// [`check`](Self::check) first.
    pub fn render(&self, values: &BTreeMap<String, String>) -> String {
        self.render_with(values, false)
    }

    /// The script with every `{name}` replaced by its value as one shell
    /// word ([`shell_word`]) and every `{name:raw}` by the value as it is;
    /// call [`checked_script`](Self::checked_script) first.
    pub fn render_for_shell(&self, values: &BTreeMap<String, String>) -> String {
        self.render_with(values, true)
    }

    /// [`render`](Self::render) with each value from `value(name)`: a
    /// sweep looks its values up by position instead of building a map per
    /// activity.
    pub fn render_by<'v>(&self, value: impl Fn(&str) -> &'v str) -> String {
        self.render_lookup(&value, false)
    }

    /// [`render_for_shell`](Self::render_for_shell) with each value from
    /// `value(name)`.
    pub fn render_for_shell_by<'v>(&self, value: impl Fn(&str) -> &'v str) -> String {
        self.render_lookup(&value, true)
    }

    /// The text with each value put in as it is, or, where `quote` and the
    /// placeholder is not `{name:raw}`, as one shell word.
    fn render_with(&self, values: &BTreeMap<String, String>, quote: bool) -> String {
        self.render_lookup(&|name| values.get(name).map_or("", String::as_str), quote)
    }

    fn render_lookup<'v>(&self, value: &dyn Fn(&str) -> &'v str, quote: bool) -> String {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Var { name, raw } => {
                    let value = value(name);
                    if quote && !raw {
                        out.push_str(&shell_word(value));
                    } else {
                        out.push_str(value);
                    }
                }
            }
        }
        out
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

/// `value` as one word for a POSIX shell: as it is when it has only
/// characters no shell treats specially (`7`, `SN-2014J.fits`, `a/b:c`),
/// else in single quotes, each `'` in it written `'\''`. Nothing inside
/// single quotes is special, so the shell reads back exactly `value`.
pub fn shell_word(value: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./,:@%+".contains(c);
    if !value.is_empty() && value.chars().all(plain) {
        return value.to_string();
    }
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// Where the shell is in a script, as far as placing a quoted word goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Frame {
    /// Commands: the script itself, `( … )`, `$( … )` or `` ` … ` ``.
    Code { closer: Option<char> },
    /// Inside `'…'`: nothing is special but the closing `'`.
    Single,
    /// Inside `"…"`: `$`, `` ` `` and `\` still work.
    Double,
    /// From `#` at the start of a word to the end of the line.
    Comment,
    /// The body of a here-document, up to its delimiter line.
    HereBody {
        delimiter: String,
        strip_tabs: bool,
        line: String,
    },
}

/// A small reader of POSIX shell syntax that follows quotes, comments,
/// command substitutions and here-documents, enough to tell whether a
/// placeholder stands where a quoted word reads as one word. Where it is
/// unsure it errs towards "not a plain place", which is an error the user
/// can answer with `{name:raw}`, never a value read as code.
#[derive(Debug)]
struct ShellLexer {
    frames: Vec<Frame>,
    /// The previous character in code, to see `#` begin a word and `$(`.
    previous: char,
    /// The next character is escaped by a backslash.
    escaped: bool,
    /// `<<` seen; reading the here-document's delimiter word.
    delimiter: Option<(String, bool, Option<char>)>,
    /// Here-documents whose bodies start at the next line.
    pending: Vec<(String, bool)>,
}

impl Default for ShellLexer {
    fn default() -> Self {
        ShellLexer {
            frames: vec![Frame::Code { closer: None }],
            previous: '\n',
            escaped: false,
            delimiter: None,
            pending: Vec::new(),
        }
    }
}

impl ShellLexer {
    /// Where a placeholder here would stand, if not in plain code, and how
    /// to move it out.
    fn place(&self) -> Option<(&'static str, &'static str)> {
        if self.delimiter.is_some() {
            return Some((
                "in a here-document's delimiter",
                "write the delimiter without it",
            ));
        }
        match self.frames.last()? {
            Frame::Code { .. } => None,
            Frame::Single => Some((
                "inside '…' quotes",
                "close the quotes around it: 'a {x} b' becomes 'a '{x}' b'",
            )),
            Frame::Double => Some((
                "inside \"…\" quotes",
                "close the quotes around it: \"a {x} b\" becomes \"a \"{x}\" b\"",
            )),
            Frame::Comment => Some((
                "in a comment",
                "take it out of the comment (a line break in the value would end the comment)",
            )),
            Frame::HereBody { .. } => Some((
                "in a here-document",
                "pass the value some other way, e.g. `printf '%s\\n' {x} | …`",
            )),
        }
    }

    /// A placeholder's value, a word in code.
    fn feed_word(&mut self) {
        self.escaped = false;
        if let Some(Frame::HereBody { line, .. }) = self.frames.last_mut() {
            line.push('x');
        }
        self.previous = 'x';
    }

    fn feed(&mut self, c: char) {
        if let Some((word, strip_tabs, quote)) = &mut self.delimiter {
            match (*quote, c) {
                (Some(q), c) if c == q => *quote = None,
                (Some(_), c) => word.push(c),
                (None, '\'' | '"') => *quote = Some(c),
                (None, '\\') => {}
                (None, '<') if word.is_empty() && !*strip_tabs => {
                    // `<<<`, a here-string: a plain word follows.
                    self.delimiter = None;
                    self.previous = ' ';
                }
                (None, '-') if word.is_empty() && !*strip_tabs => *strip_tabs = true,
                (None, ' ' | '\t') if word.is_empty() => {}
                (None, c) if c.is_whitespace() || ";&|<>()".contains(c) => {
                    let (word, strip_tabs, _) = self.delimiter.take().unwrap_or_default();
                    self.pending.push((word, strip_tabs));
                    self.previous = ' ';
                    return self.feed(c);
                }
                (None, c) => word.push(c),
            }
            return;
        }
        let Some(frame) = self.frames.last_mut() else {
            return;
        };
        match frame {
            Frame::Single => {
                if c == '\'' {
                    self.frames.pop();
                    self.previous = 'x';
                }
            }
            Frame::Comment => {
                if c == '\n' {
                    self.frames.pop();
                    self.newline_in_code();
                }
            }
            Frame::HereBody {
                delimiter,
                strip_tabs,
                line,
            } => {
                if c == '\n' {
                    let text = if *strip_tabs {
                        line.trim_start_matches('\t')
                    } else {
                        line.as_str()
                    };
                    if text == delimiter {
                        self.frames.pop();
                        self.start_here_body();
                    } else {
                        line.clear();
                    }
                } else {
                    line.push(c);
                }
            }
            Frame::Double => {
                if self.escaped {
                    self.escaped = false;
                    self.previous = 'x';
                    return;
                }
                match c {
                    '\\' => self.escaped = true,
                    '"' => {
                        self.frames.pop();
                    }
                    '(' if self.previous == '$' => {
                        self.frames.push(Frame::Code { closer: Some(')') })
                    }
                    '`' => self.frames.push(Frame::Code { closer: Some('`') }),
                    _ => {}
                }
                self.previous = c;
            }
            Frame::Code { closer } => {
                let closer = *closer;
                if self.escaped {
                    self.escaped = false;
                    self.previous = 'x';
                    return;
                }
                let word_start =
                    self.previous.is_whitespace() || ";&|()<>`".contains(self.previous);
                match c {
                    '\\' => self.escaped = true,
                    '\'' => self.frames.push(Frame::Single),
                    '"' => self.frames.push(Frame::Double),
                    '#' if word_start => self.frames.push(Frame::Comment),
                    '(' => self.frames.push(Frame::Code { closer: Some(')') }),
                    ')' | '`' if closer == Some(c) => {
                        self.frames.pop();
                    }
                    '`' => self.frames.push(Frame::Code { closer: Some('`') }),
                    '<' if self.previous == '<' => {
                        self.delimiter = Some((String::new(), false, None));
                        self.previous = ' ';
                        return;
                    }
                    '\n' => self.newline_in_code(),
                    _ => {}
                }
                self.previous = c;
            }
        }
    }

    /// A line ends in code: here-documents opened on it begin.
    fn newline_in_code(&mut self) {
        self.previous = '\n';
        self.start_here_body();
    }

    fn start_here_body(&mut self) {
        if !self.pending.is_empty() {
            let (delimiter, strip_tabs) = self.pending.remove(0);
            self.frames.push(Frame::HereBody {
                delimiter,
                strip_tabs,
                line: String::new(),
            });
        }
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

    fn script(text: &str, pairs: &[(&str, &str)]) -> Result<String, TemplateError> {
        let names: Vec<&str> = pairs.iter().map(|(k, _)| *k).collect();
        Template::checked_script(text, &names).map(|t| t.render_for_shell(&values(pairs)))
    }

    /// What `/bin/sh` prints for `script`, one line per argument of `printf`.
    fn sh(script: &str) -> String {
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(script)
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn values_in_scripts_are_one_word_and_never_code() {
        let nasty = [
            "x; touch pwned",
            "it's",
            "$(id) `id` $HOME",
            "a\nb",
            "",
            " spaced ",
            "'",
            "\\",
            "*",
            "~",
            "a=b",
            "\"",
        ];
        for value in nasty {
            let text = script("printf '<%s>\\n' {v} end{v}end", &[("v", value)]).unwrap();
            assert_eq!(sh(&text), format!("<{value}>\n<end{value}end>\n"), "{text}");
        }
        // Plain values stay readable; the command line shows them as written.
        assert_eq!(
            script("cp in-{n}.txt out/{n}", &[("n", "7")]).unwrap(),
            "cp in-7.txt out/7"
        );
        assert_eq!(shell_word("SN-2014J.fits"), "SN-2014J.fits");
        assert_eq!(shell_word("x; y"), "'x; y'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }

    #[test]
    fn raw_placeholders_splice_text_into_scripts_only() {
        let text = script("{cmd:raw} | tr a-z A-Z", &[("cmd", "echo hi; echo there")]).unwrap();
        // The `;` in the value ends the first command: the text is code.
        assert_eq!(sh(&text), "hi\nTHERE\n");
        // Raw text may sit inside quotes; the writer answers for it.
        assert_eq!(
            script("echo \"{v:raw}\"", &[("v", "a b")]).unwrap(),
            "echo \"a b\""
        );
        let error = Template::checked("out/{v:raw}", &["v"]).unwrap_err();
        assert_eq!(error, TemplateError::RawOutsideScript("v".into()));
        assert!(error.to_string().contains("write `{v}`"), "{error}");
        assert_eq!(
            Template::parse("{v:quoted}"),
            Err(TemplateError::UnknownForm {
                name: "v".into(),
                form: "quoted".into()
            })
        );
        assert_eq!(
            Template::parse("{a b:raw}"),
            Err(TemplateError::BadName("a b".into()))
        );
    }

    #[test]
    fn placeholders_where_a_quoted_word_would_misread_are_refused() {
        let refused = [
            ("echo \"{v}\"", "inside \"…\" quotes"),
            ("echo \"a $(date) {v}\"", "inside \"…\" quotes"),
            ("echo 'a {v} b'", "inside '…' quotes"),
            ("ls # lists {v}", "in a comment"),
            ("cat <<EOF\nline {v}\nEOF\n", "in a here-document"),
            ("cat <<-'END'\n\t{v}\n\tEND\n", "in a here-document"),
            ("echo \"$(echo \"{v}\")\"", "inside \"…\" quotes"),
            ("echo \"\\$({v})\"", "inside \"…\" quotes"),
        ];
        for (text, place) in refused {
            let error = script(text, &[("v", "1")]).unwrap_err();
            assert!(
                matches!(&error, TemplateError::QuotedPlace { place: p, .. } if *p == place),
                "{text}: {error:?}"
            );
            assert!(error.to_string().contains("{v:raw}"), "{error}");
        }
        let allowed = [
            "echo \"a\" {v} 'b' \"c\"{v}",
            "echo \"$(echo {v})\"",
            "echo `echo {v}`",
            "x=$(( 1 + 2 )); echo $# ${{#x}} {v}",
            "cat <<EOF\nbody\nEOF\necho {v}",
            "cat <<<{v}",
            "echo it\\'s {v} # a 'comment",
            "awk '{{print $1}}' {v}",
            // As the glide-in tests write their marks.
            "s=$(date +%s%N); echo \"$LABELS $s $(date +%s%N)\" > dir/{v}",
        ];
        for text in allowed {
            script(text, &[("v", "1")]).unwrap_or_else(|e| panic!("{text}: {e}"));
        }
        // A raw placeholder may stand anywhere.
        script("echo \"{v:raw}\" # {v:raw}", &[("v", "1")]).unwrap();
    }
}
