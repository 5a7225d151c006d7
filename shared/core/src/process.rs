//! Whether another process still runs (for files a process leaves behind: cache generations, the
//! wrapper's backend file).

/// Whether a process with id `pid` runs. On Linux: `/proc/<pid>` exists. Where `/proc` is not
/// mounted nothing can be told, and the answer is `true` (whoever asks then leaves the process's
/// files alone).
pub fn alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    let proc = std::path::Path::new("/proc");
    proc.join(pid.to_string()).exists() || !proc.join("self").exists()
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_runs_and_a_finished_one_does_not() {
        assert!(super::alive(std::process::id()));
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        child.wait().expect("wait");
        assert!(!super::alive(pid), "a reaped child is gone");
        assert!(!super::alive(0));
    }
}
