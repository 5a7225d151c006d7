//! Workspace tags (DESIGN §10, "Tags"): the names the `cloud` block's `workspaces { tags = […] }`
//! gives the workspaces it creates and selects by. A tag is kept in the workspace's record; this
//! module holds the rule a tag follows and how a set of them is kept (sorted, once each).

/// Longest tag the API admits, in characters.
pub const MAX_TAG_LEN: usize = 255;

/// Why a tag was refused: one sentence naming the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TagError {
    /// An empty tag.
    #[error("a workspace tag is empty; a tag has 1 to 255 letters, digits, '-', '_', ':' or '.'")]
    Empty,
    /// Over [`MAX_TAG_LEN`].
    #[error("the workspace tag is {0} characters long; a tag has at most 255 letters, digits, '-', '_', ':' or '.'")]
    TooLong(usize),
    /// A character outside the rule.
    #[error("a workspace tag contains {0}; a tag has only letters, digits, '-', '_', ':' and '.'")]
    BadCharacter(String),
}

/// Checks `raw` against the rule: 1 to 255 ASCII letters, digits, `-`, `_`, `:` and `.`,
/// compared as written.
pub fn parse_tag(raw: &str) -> Result<String, TagError> {
    if raw.is_empty() {
        return Err(TagError::Empty);
    }
    if let Some(c) = raw
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.')))
    {
        let shown = if c.is_control() || c.is_whitespace() {
            format!("the character U+{:04X}", c as u32)
        } else {
            format!("the character '{c}'")
        };
        return Err(TagError::BadCharacter(shown));
    }
    if raw.len() > MAX_TAG_LEN {
        return Err(TagError::TooLong(raw.len()));
    }
    Ok(raw.to_owned())
}

/// Each of `raw` checked, sorted and once each.
pub fn parse_tags<'a>(raw: impl IntoIterator<Item = &'a str>) -> Result<Vec<String>, TagError> {
    let mut tags = raw
        .into_iter()
        .map(parse_tag)
        .collect::<Result<Vec<_>, _>>()?;
    tags.sort();
    tags.dedup();
    Ok(tags)
}

/// `tags` with `add` added and `remove` removed, sorted and once each.
pub fn changed(tags: &[String], add: &[String], remove: &[String]) -> Vec<String> {
    let mut out: Vec<String> = tags
        .iter()
        .chain(add)
        .filter(|t| !remove.contains(t))
        .cloned()
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_follow_one_rule_and_a_set_is_sorted_once_each() {
        assert_eq!(
            parse_tags(["b", "a", "b", "env:prod", "v1.2"]).unwrap(),
            ["a", "b", "env:prod", "v1.2"]
        );
        assert_eq!(parse_tag(""), Err(TagError::Empty));
        assert_eq!(parse_tag(&"t".repeat(256)), Err(TagError::TooLong(256)));
        for bad in ["a b", "a/b", "a,b", "é", "a\n"] {
            let e = parse_tag(bad).unwrap_err();
            assert!(matches!(e, TagError::BadCharacter(_)), "{bad:?}: {e}");
        }
        let tags = ["a".to_owned(), "b".to_owned()];
        assert_eq!(
            changed(&tags, &["c".into(), "a".into()], &["b".into()]),
            ["a", "c"]
        );
    }
}
