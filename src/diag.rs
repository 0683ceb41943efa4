//! Diagnostics: problems in an input file, located by line and column.
//!
//! Invariant: every diagnostic names where (line:col, or a JSON path) and why; nothing here
//! reads files or touches a database.

use std::fmt;

/// One problem found in an input file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// 1-based line (0 when the input has no lines, e.g. a JSON path location).
    pub line: usize,
    /// 1-based column.
    pub col: usize,
    /// Where inside the document, when lines are not known (e.g. `job_list.x.option_list`).
    pub path: Option<String>,
    /// What is wrong, naming the field and the value.
    pub reason: String,
}

impl Diagnostic {
    /// A problem at a byte offset of `text`.
    pub fn at(text: &str, offset: usize, reason: impl Into<String>) -> Self {
        let (line, col) = line_col(text, offset);
        Self {
            line,
            col,
            path: None,
            reason: reason.into(),
        }
    }

    /// A problem at a path inside a structured document without line information.
    pub fn at_path(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            line: 0,
            col: 0,
            path: Some(path.into()),
            reason: reason.into(),
        }
    }

    /// Renders as `file:line:col: reason` (or `file: path: reason`).
    pub fn render(&self, file: &str) -> String {
        match &self.path {
            Some(path) => format!("{file}: {path}: {}", self.reason),
            None => format!("{file}:{}:{}: {}", self.line, self.col, self.reason),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(path) => write!(f, "{path}: {}", self.reason),
            None => write!(f, "{}:{}: {}", self.line, self.col, self.reason),
        }
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..text.floor_char_boundary(offset)];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 6), (2, 1));
        assert_eq!(line_col(text, 9), (2, 3));
        assert_eq!(line_col(text, 999), (3, 1));
    }
}
