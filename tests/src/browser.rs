//! Headless Chromium (Debian's) for the web page's tests: a DOM dump, a screenshot (kept at
//! `$CARGO_TARGET_DIR/ui-screenshots/`), the text of a DOM.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::{run_captured, which, INSTALL_HINT};

fn chromium() -> PathBuf {
    which("chromium").unwrap_or_else(|| {
        panic!("chromium is not installed (apt-get install chromium); {INSTALL_HINT}")
    })
}

/// Runs headless Chromium on `url` with `mode` (`--dump-dom` or `--screenshot=FILE`) in a fresh
/// profile, with the flags that keep it off the (closed) network; returns stdout.
pub fn browse(url: &str, mode: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,800",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .arg(mode)
    .arg(url)
    .stdin(Stdio::null());
    let out = run_captured(
        cmd,
        &format!("chromium {mode} {url}"),
        Duration::from_secs(120),
    );
    assert_eq!(out.code, Some(0), "chromium failed: {}", out.stderr);
    out.stdout
}

pub fn screenshot(url: &str, name: &str) -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
        .join("ui-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(name);
    let _ = std::fs::remove_file(&file);
    browse(url, &format!("--screenshot={}", file.display()));
    let png = std::fs::read(&file).expect("chromium wrote the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(png.len() > 5_000, "a blank page? {} bytes", png.len());
    file
}

/// The text of a DOM dump without tags, whitespace collapsed.
pub fn text_of(dom: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in dom.chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                text.push(' ');
            }
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
