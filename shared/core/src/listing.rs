//! What a store lists: the versions of a state ([`Version`]), and the files at the tip
//! ([`StateListing`]) one page at a time (issue 34, DESIGN §9.5): which paths a page holds
//! ([`ListQuery`]), and the page ([`StatePage`]). Pages are in path order (bytes, as git orders a
//! tree's paths); the cursor is the last path of the page before.

/// One version of a state file: a commit on the state branch that changed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The commit (a `Revision`).
    pub commit: String,
    /// Commit time, seconds since the Unix epoch.
    pub time: i64,
    /// The commit message (gitstate writes `Update {path} (serial N) by {Who}`).
    pub message: String,
    /// The commit's author name.
    pub author: String,
    /// Size of the stored file at this commit; `None` when the commit deleted it.
    pub size: Option<u64>,
}

/// A file on the state branch at its tip, with the last commit that changed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateListing {
    /// The file's path on the branch.
    pub path: String,
    /// Size of the stored file.
    pub size: u64,
    /// The last commit that changed it (`None` when the history does not reach it, e.g. a
    /// shallow history).
    pub last_change: Option<Version>,
}

/// Which states a listing asks for: paths starting with `prefix`, after the path `after` (the
/// cursor), at most `limit` of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Only paths starting with this (a folder with its `/`, or any start of a path).
    pub prefix: String,
    /// Only paths sorting after this one (the last path of the page before).
    pub after: Option<String>,
    /// Paths in the page at most.
    pub limit: usize,
}

impl ListQuery {
    /// Every file, in one page.
    pub fn all() -> ListQuery {
        ListQuery {
            prefix: String::new(),
            after: None,
            limit: usize::MAX,
        }
    }

    /// Whether `path` is under the prefix (wherever it sorts).
    pub fn matches(&self, path: &str) -> bool {
        path.starts_with(&self.prefix)
    }

    /// Whether `path` is under the prefix and after the cursor.
    pub fn admits(&self, path: &str) -> bool {
        self.matches(path) && self.after.as_deref().is_none_or(|after| path > after)
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatePage {
    /// The files of the page, in path order.
    pub states: Vec<StateListing>,
    /// Files under the prefix in all pages.
    pub total: usize,
    /// Whether files come after this page (the next page starts after its last path).
    pub more: bool,
}

impl StatePage {
    /// The page `query` asks for out of every file (`sorted` by path): the rule every store's
    /// listing follows, and how a store that holds everything in memory lists.
    pub fn of_sorted(sorted: impl IntoIterator<Item = StateListing>, query: &ListQuery) -> Self {
        let mut page = StatePage::default();
        for listing in sorted {
            if !query.matches(&listing.path) {
                continue;
            }
            page.total += 1;
            if !query.admits(&listing.path) {
                continue;
            }
            if page.states.len() < query.limit {
                page.states.push(listing);
            } else {
                page.more = true;
            }
        }
        page
    }

    /// The cursor of the next page: the last path of this one, when more follow.
    pub fn next(&self) -> Option<&str> {
        match self.more {
            true => self.states.last().map(|s| s.path.as_str()),
            false => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(path: &str) -> StateListing {
        StateListing {
            path: path.into(),
            size: 1,
            last_change: None,
        }
    }

    fn paths(page: &StatePage) -> Vec<&str> {
        page.states.iter().map(|s| s.path.as_str()).collect()
    }

    #[test]
    fn pages_follow_the_cursor_and_count_the_prefix() {
        let all: Vec<StateListing> = ["a.tfstate", "b/x.tfstate", "b/y.tfstate", "ba.tfstate"]
            .into_iter()
            .map(listing)
            .collect();
        let mut query = ListQuery {
            prefix: "b".into(),
            after: None,
            limit: 2,
        };
        let first = StatePage::of_sorted(all.clone(), &query);
        assert_eq!(paths(&first), ["b/x.tfstate", "b/y.tfstate"]);
        assert_eq!((first.total, first.more), (3, true));
        assert_eq!(first.next(), Some("b/y.tfstate"));
        query.after = first.next().map(str::to_owned);
        let second = StatePage::of_sorted(all.clone(), &query);
        assert_eq!(paths(&second), ["ba.tfstate"]);
        assert_eq!((second.total, second.more, second.next()), (3, false, None));
        let folder = ListQuery {
            prefix: "b/".into(),
            ..ListQuery::all()
        };
        assert_eq!(
            paths(&StatePage::of_sorted(all, &folder)),
            ["b/x.tfstate", "b/y.tfstate"]
        );
    }
}
