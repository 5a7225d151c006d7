//! Path patterns of `/`-separated segments, the one matcher for the `allow` list's URL paths and
//! for the state paths a scoped token may use: each segment is a glob where `*` matches any run
//! of characters inside that one segment (never a `/`), and a last segment `**` matches any
//! number of segments, none included. Paths are split into segments before matching, never
//! compared as text.

/// One parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentPattern {
    segments: Vec<String>,
}

impl SegmentPattern {
    /// Parses `path` (no leading `/`; a trailing one is ignored). `Err` is the rest of a sentence
    /// naming the rule: an empty path, an empty, `.` or `..` segment, or `**` before the end.
    pub fn parse(path: &str) -> Result<SegmentPattern, String> {
        let path = path.strip_suffix('/').unwrap_or(path);
        if path.is_empty() {
            return Err("the pattern names no path".into());
        }
        let segments: Vec<String> = path.split('/').map(str::to_owned).collect();
        if let Some(s) = segments
            .iter()
            .find(|s| s.is_empty() || *s == "." || *s == "..")
        {
            return Err(format!("the path segment '{s}' is not allowed"));
        }
        if segments[..segments.len() - 1].iter().any(|s| s == "**") {
            return Err("'**' may only be the last segment".into());
        }
        Ok(SegmentPattern { segments })
    }

    /// Whether the path whose segments are `path` matches.
    pub fn matches<S: AsRef<str>>(&self, path: &[S]) -> bool {
        segments_match(&self.segments, path)
    }

    /// Whether `path` (split at `/`) matches.
    pub fn matches_path(&self, path: &str) -> bool {
        let segments: Vec<&str> = path.split('/').collect();
        self.matches(&segments)
    }
}

/// Path segments against pattern segments: `*` inside a segment never crosses a `/`; a last
/// `**` takes the rest.
fn segments_match<S: AsRef<str>>(pattern: &[String], path: &[S]) -> bool {
    match (pattern.split_first(), path.split_first()) {
        (Some((p, _)), _) if p == "**" => true,
        (Some((p, pattern_rest)), Some((s, path_rest))) => {
            glob_segment(p, s.as_ref()) && segments_match(pattern_rest, path_rest)
        }
        (None, None) => true,
        _ => false,
    }
}

/// `*` matches any run of characters inside one segment.
fn glob_segment(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, path: &str) -> bool {
        SegmentPattern::parse(pattern)
            .expect("a pattern")
            .matches_path(path)
    }

    #[test]
    fn a_star_stays_inside_its_segment_and_a_last_double_star_takes_the_rest() {
        assert!(matches("teams/a/*", "teams/a/app.tfstate"));
        assert!(!matches("teams/a/*", "teams/a/x/app.tfstate"));
        assert!(!matches("teams/a/*", "teams/ab/app.tfstate"));
        assert!(matches("teams/a/**", "teams/a/x/y/app.tfstate"));
        assert!(matches("teams/a/**", "teams/a"));
        assert!(!matches("teams/a/**", "teams/ab/app.tfstate"));
        assert!(!matches("teams/a/**", "teams"));
        assert!(matches("teams/*-prod/**", "teams/a-prod/x.tfstate"));
        assert!(!matches("teams/*-prod/**", "teams/a-prod-x/x.tfstate"));
        assert!(matches("*.tfstate", "app.tfstate"));
        assert!(!matches("*.tfstate", "a/app.tfstate"));
        assert!(matches("a*b*c", "abc") && matches("a*b*c", "a-b-c") && !matches("a*b*c", "acb"));
    }

    #[test]
    fn a_pattern_names_segments_and_nothing_that_climbs() {
        for (bad, why) in [
            ("", "names no path"),
            ("/", "names no path"),
            ("teams//a", "segment ''"),
            ("teams/../b", "segment '..'"),
            ("./a", "segment '.'"),
            ("teams/**/a", "last segment"),
        ] {
            let err = SegmentPattern::parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
