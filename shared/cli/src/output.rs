//! How the command line prints: aligned tables for people, JSON for machines, and progress on
//! standard error for long work.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Rows as left-aligned columns separated by two spaces (the first row is the header).
pub fn table(rows: Vec<Vec<String>>) -> String {
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Pretty JSON with a final newline.
pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, String> {
    serde_json::to_string_pretty(value)
        .map(|s| s + "\n")
        .map_err(|e| e.to_string())
}

/// Progress of a long task on standard error: a line rewritten in place on a terminal, else a
/// line every few seconds (and the last one), so logs of CI jobs stay short.
pub struct Progress {
    label: String,
    total: usize,
    done: usize,
    terminal: bool,
    last: Option<Instant>,
}

impl Progress {
    /// Starts reporting `label` over `total` items.
    pub fn new(label: impl Into<String>, total: usize) -> Progress {
        Progress {
            label: label.into(),
            total,
            done: 0,
            terminal: std::io::stderr().is_terminal(),
            last: None,
        }
    }

    /// One more item done, `what` being its name.
    pub fn step(&mut self, what: &str) {
        self.done += 1;
        let finished = self.done == self.total;
        let due = self
            .last
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(if self.terminal { 0 } else { 5 }));
        if !(due || finished) {
            return;
        }
        self.last = Some(Instant::now());
        let mut err = std::io::stderr().lock();
        let line = format!("{}: {}/{} {what}", self.label, self.done, self.total);
        if self.terminal {
            let _ = write!(err, "\r\x1b[2K{line}");
            if finished {
                let _ = writeln!(err);
            }
        } else {
            let _ = writeln!(err, "{line}");
        }
    }
}
