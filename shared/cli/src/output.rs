//! How the command line prints: aligned tables for people, JSON for machines, and progress on
//! standard error for long work.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

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

/// Progress of a long task on standard error: an `indicatif` bar on a terminal, else a plain
/// line every few seconds (and the last one), so logs of CI jobs stay short and free of escape
/// codes. Standard output is left to the command's result.
pub struct Progress {
    label: String,
    total: usize,
    done: usize,
    bar: Option<ProgressBar>,
    last: Option<Instant>,
    started: Instant,
}

/// How often a plain progress line is printed when standard error is not a terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

impl Progress {
    /// Starts reporting `label` over `total` items.
    pub fn new(label: impl Into<String>, total: usize) -> Progress {
        let label = label.into();
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar =
                ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {pos}/{len} {per_sec} ETA {eta} {wide_msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_prefix(label.clone());
            bar
        });
        Progress {
            label,
            total,
            done: 0,
            bar,
            last: None,
            started: Instant::now(),
        }
    }

    /// One more item done, `what` being its name.
    pub fn step(&mut self, what: &str) {
        self.done += 1;
        let finished = self.done >= self.total;
        if let Some(bar) = &self.bar {
            bar.set_message(what.to_owned());
            bar.inc(1);
            if finished {
                // The bar goes; one line stays, ending with a newline, before the result.
                bar.finish_and_clear();
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "{}: {}/{}",
                    self.label,
                    self.done,
                    self.total
                );
            }
            return;
        }
        if let Some(line) = self.plain_line(what, finished, Instant::now()) {
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        }
    }

    /// The plain line to print now, if one is due: the first, one every [`PLAIN_EVERY`], and
    /// the last; with the rate so far and the time left at it, until the last.
    fn plain_line(&mut self, what: &str, finished: bool, now: Instant) -> Option<String> {
        let due = self
            .last
            .is_none_or(|t| now.saturating_duration_since(t) >= PLAIN_EVERY);
        if !(due || finished) {
            return None;
        }
        self.last = Some(now);
        let elapsed = now.saturating_duration_since(self.started).as_secs_f64();
        let pace = match (finished, elapsed > 0.0 && self.done > 0) {
            (false, true) => {
                let rate = self.done as f64 / elapsed;
                let left = self.total.saturating_sub(self.done) as f64 / rate;
                format!(" ({rate:.1}/s, ETA {left:.0} s)")
            }
            _ => String::new(),
        };
        Some(format!(
            "{}: {}/{}{pace} {what}",
            self.label, self.done, self.total
        ))
    }
}

impl Drop for Progress {
    /// A task that stopped early (an error) leaves its bar where it stopped, not half drawn.
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            if !bar.is_finished() {
                bar.abandon();
                let _ = writeln!(std::io::stderr().lock());
            }
        }
    }
}

/// A spinner on standard error while one long call runs (e.g. reading a state's history), on a
/// terminal only: the call has no count to show, and a log gets the result instead.
pub struct Spinner(Option<ProgressBar>);

impl Spinner {
    /// Starts spinning with `message`.
    pub fn start(message: impl Into<String>) -> Spinner {
        Spinner(std::io::stderr().is_terminal().then(|| {
            let spinner = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            spinner.set_style(ProgressStyle::default_spinner());
            spinner.set_message(message.into());
            spinner.enable_steady_tick(Duration::from_millis(100));
            spinner
        }))
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(spinner) = &self.0 {
            spinner.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_come_first_then_every_few_seconds_and_last() {
        let t0 = Instant::now();
        let mut progress = Progress {
            label: "rebuild default".into(),
            total: 3,
            done: 0,
            bar: None,
            last: None,
            started: t0,
        };
        progress.done = 1;
        assert_eq!(
            progress.plain_line("a.tfstate", false, t0).as_deref(),
            Some("rebuild default: 1/3 a.tfstate")
        );
        progress.done = 2;
        assert_eq!(
            progress.plain_line("b.tfstate", false, t0 + Duration::from_secs(1)),
            None
        );
        // Two done in 5 s: 0.4 a second, the last one in 2.5 s.
        assert_eq!(
            progress
                .plain_line("b.tfstate", false, t0 + PLAIN_EVERY)
                .as_deref(),
            Some("rebuild default: 2/3 (0.4/s, ETA 2 s) b.tfstate")
        );
        progress.done = 3;
        assert_eq!(
            progress
                .plain_line("c.tfstate", true, t0 + PLAIN_EVERY)
                .as_deref(),
            Some("rebuild default: 3/3 c.tfstate")
        );
    }
}
