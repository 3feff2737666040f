//! Compile-time problems, each with a code, a position and a caret under the source.

use std::fmt;

use super::ast::Span;

/// One problem found while parsing or compiling a mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// A stable code, e.g. `E001` for a syntax error.
    pub code: &'static str,
    pub message: String,
    /// 1-based line and column (columns count characters).
    pub line: usize,
    pub col: usize,
    /// The whole source line the problem is on.
    pub source_line: String,
    /// How many characters the caret underline covers (at least one).
    pub width: usize,
    pub hint: Option<String>,
}

impl Diagnostic {
    /// Builds a diagnostic for `span` of `src`.
    pub fn at(src: &str, span: Span, code: &'static str, message: impl Into<String>) -> Self {
        // Spans may come from byte arithmetic; keep every cut on a character boundary.
        let floor = |mut i: usize| {
            i = i.min(src.len());
            while !src.is_char_boundary(i) {
                i -= 1;
            }
            i
        };
        let start = floor(span.start);
        let line_start = src[..start].rfind('\n').map(|i| i + 1).unwrap_or(0);
        let line_end = src[start..]
            .find('\n')
            .map(|i| start + i)
            .unwrap_or(src.len());
        let line = src[..start].matches('\n').count() + 1;
        let col = src[line_start..start].chars().count() + 1;
        let end = floor(span.end.clamp(start, line_end));
        let width = src[start..end].chars().count().max(1);
        Diagnostic {
            code,
            message: message.into(),
            line,
            col,
            source_line: src[line_start..line_end].trim_end_matches('\r').to_string(),
            width,
            hint: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gutter = self.line.to_string().len();
        writeln!(f, "error[{}]: {}", self.code, self.message)?;
        writeln!(
            f,
            "{:gutter$}--> line {}, column {}",
            "", self.line, self.col
        )?;
        writeln!(f, "{:gutter$} |", "")?;
        writeln!(f, "{} | {}", self.line, self.source_line)?;
        // Tabs keep their width so the caret lines up under the right character.
        let pad: String = self
            .source_line
            .chars()
            .take(self.col - 1)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        write!(f, "{:gutter$} | {}{}", "", pad, "^".repeat(self.width))?;
        if let Some(h) = &self.hint {
            write!(f, "\n{:gutter$} = {}", "", h)?;
        }
        Ok(())
    }
}

/// Every problem found in one mapping, in source order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn one(d: Diagnostic) -> Self {
        Diagnostics(vec![d])
    }
    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter()
    }
    pub fn first(&self) -> Option<&Diagnostic> {
        self.0.first()
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_inside_a_character_do_not_panic() {
        let src = "root = é!";
        let d = Diagnostic::at(src, Span::new(8, 9), "E001", "x");
        assert_eq!(d.col, 8);
        let d = Diagnostic::at(src, Span::new(7, 8), "E001", "x");
        assert_eq!((d.col, d.width), (8, 1));
    }

    #[test]
    fn renders_line_column_and_caret() {
        let src = "root.a = 1\nroot.b = this.c +\n";
        let d = Diagnostic::at(src, Span::new(20, 21), "E001", "unexpected end");
        let text = d.to_string();
        assert!(text.contains("line 2, column 10"), "{text}");
        assert!(text.contains("2 | root.b = this.c +"), "{text}");
        assert!(text.ends_with("|          ^"), "{text}");
    }
}
