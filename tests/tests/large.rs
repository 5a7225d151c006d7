//! A 100 MB state through the standalone server: POST and GET work (byte-equal), the server's
//! peak resident memory stays within 4× the state size (read from /proc, `VmHWM`), and a body
//! one byte over the configured maximum gets 413.

use gitstate_tests::*;

fn peak_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kb * 1024
}

#[test]
fn a_hundred_megabyte_state_within_four_times_its_size() {
    let size = 100 * 1024 * 1024;
    let cwd = tempfile::tempdir().unwrap();
    let server = Gitstate::start(&["--max-state-bytes", &size.to_string()], &[], cwd.path());
    let head = r#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"large","outputs":{},"resources":[],"pad":""#;
    let mut body = String::with_capacity(size);
    body.push_str(head);
    while body.len() < size - 2 {
        body.push_str("0123456789abcdef");
    }
    body.truncate(size - 2);
    body.push_str("\"}");
    assert_eq!(body.len(), size);
    let url = server.state_url("default", "large.tfstate");
    let (status, text) = http("POST", &url, Some(&body), None).unwrap();
    assert_eq!(status, 200, "{text}");
    let (status, got) = http("GET", &url, None, None).unwrap();
    assert_eq!(status, 200);
    assert!(got == body, "GET did not return the state byte for byte");
    let peak = peak_rss_bytes(server.pid());
    eprintln!(
        "100 MiB state: server peak RSS {} MiB ({:.2}×)",
        peak >> 20,
        peak as f64 / size as f64
    );
    assert!(
        peak <= 4 * size as u64,
        "peak RSS {peak} bytes is over 4× the state"
    );
    let over = format!("{} ", body);
    let (status, text) = http("POST", &url, Some(&over), None).unwrap();
    assert_eq!(status, 413, "{}", &text[..text.len().min(200)]);
}
