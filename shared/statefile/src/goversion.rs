//! Which `terraform_version` strings Terraform reads: those `version.NewVersion` of
//! hashicorp/go-version parses (Terraform reads a v4 state's non-empty `terraform_version`, and a
//! v3 state's, with it, and refuses the state when it fails).
//!
//! go-version matches `^v?([0-9]+(\.[0-9]+)*?)(-([0-9]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)|
//! (-?([A-Za-z\-~]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)))?(\+([0-9A-Za-z\-~]+(\.[0-9A-Za-z\-~]+)*))?$`
//! and then parses every numeric segment as an int64. Read as a language: numeric segments
//! separated by dots, then an optional pre-release that starts with a letter, `-` or `~` and is
//! made of dot-separated non-empty runs of `[0-9A-Za-z-~]`, then optional build metadata: `+` and
//! dot-separated non-empty runs of the same characters.

/// Whether go-version's `NewVersion` accepts `text`.
pub(crate) fn is_go_version(text: &str) -> bool {
    let text = text.strip_prefix('v').unwrap_or(text);
    let bytes = text.as_bytes();
    // The numeric segments: as many as there are (a pre-release cannot start with a digit or a
    // dot, so the regular expression's lazy core matches exactly these).
    let mut at = 0;
    loop {
        let start = at;
        while at < bytes.len() && bytes[at].is_ascii_digit() {
            at += 1;
        }
        if at == start || !fits_int64(&text[start..at]) {
            return false;
        }
        if at + 1 < bytes.len() && bytes[at] == b'.' && bytes[at + 1].is_ascii_digit() {
            at += 1;
            continue;
        }
        break;
    }
    let rest = &text[at..];
    let (pre, metadata) = match rest.split_once('+') {
        Some((pre, metadata)) => (pre, Some(metadata)),
        None => (rest, None),
    };
    let pre_ok = pre.is_empty()
        || (pre
            .as_bytes()
            .first()
            .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'-' || *b == b'~')
            && dotted_runs(pre));
    pre_ok && metadata.is_none_or(dotted_runs)
}

/// `[0-9A-Za-z-~]+(\.[0-9A-Za-z-~]+)*`.
fn dotted_runs(text: &str) -> bool {
    text.split('.').all(|run| {
        !run.is_empty()
            && run
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'~')
    })
}

/// `strconv.ParseInt(segment, 10, 64)` succeeds (leading zeros allowed).
fn fits_int64(digits: &str) -> bool {
    digits.parse::<i64>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::is_go_version;

    #[test]
    fn reads_what_go_version_reads() {
        for good in [
            "1.15.5",
            "0.0.0",
            "1",
            "1.2",
            "v1.2.3",
            "1.2.3.4.5",
            "1.11.0-beta1",
            "1.11.0-rc.1",
            "1.2.3beta",
            "1.2.3-",
            "1.2.3--",
            "1.2.3~x",
            "1.2.3+build.7",
            "1.2.3-alpha+meta-data.x",
            "01.002.0003",
            "9223372036854775807",
        ] {
            assert!(is_go_version(good), "{good:?} is a version");
        }
        for bad in [
            "",
            "v",
            "V1.2.3",
            "1.",
            ".1",
            "1..2",
            "1.2.x",
            "1.2.3+",
            "1.2.3+a..b",
            "1.2.3-a..b",
            "1.2.3 ",
            " 1.2.3",
            "1.2.3-é",
            "9223372036854775808",
            "latest",
            "1.2.3+a+b",
        ] {
            assert!(!is_go_version(bad), "{bad:?} is not a version");
        }
    }
}
