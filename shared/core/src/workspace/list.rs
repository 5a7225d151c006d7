//! The workspace list (DESIGN §10, "The list"): the workspaces of a repository a credential may
//! read, found in one listing of the state branch's paths (the states at the pattern's paths,
//! and the records: [`crate::StateStore::list_paths`]), searched by name and tags, one page at a
//! time, in name order.

use std::collections::BTreeMap;

use super::operations::{Workspace, WorkspaceError, Workspaces};
use super::{admit, Record, WorkspaceName};
use crate::scope::{Scope, Use};

/// Where records live on the state branch (see [`WorkspaceName::record_path`]).
const RECORDS: &str = ".gitstate/workspaces/";

/// Workspaces a page holds unless asked otherwise (the API's default).
pub const DEFAULT_PAGE_SIZE: usize = 20;

/// Most workspaces a page holds (the API's maximum).
pub const MAX_PAGE_SIZE: usize = 100;

/// What a list asks for: a part of the name, and tags the workspace must all have and tags it
/// must have none of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Search {
    /// `search[name]`: a part of the name, compared without regard to case (as HCP Terraform's
    /// search finds a prefix, this finds it too).
    pub name: Option<String>,
    /// `search[tags]`: every one of these.
    pub tags: Vec<String>,
    /// `search[exclude-tags]`: none of these.
    pub exclude_tags: Vec<String>,
}

impl Search {
    fn names(&self, name: &WorkspaceName) -> bool {
        match &self.name {
            None => true,
            Some(part) => name
                .as_str()
                .to_ascii_lowercase()
                .contains(&part.to_ascii_lowercase()),
        }
    }

    fn needs_tags(&self) -> bool {
        !self.tags.is_empty() || !self.exclude_tags.is_empty()
    }

    fn tags_match(&self, tags: &[String]) -> bool {
        self.tags.iter().all(|t| tags.contains(t))
            && !self.exclude_tags.iter().any(|t| tags.contains(t))
    }
}

/// Which page: its number (from 1) and its size (1 to [`MAX_PAGE_SIZE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    /// The page's number, from 1.
    pub number: usize,
    /// Workspaces in a page.
    pub size: usize,
}

impl Default for PageRequest {
    fn default() -> PageRequest {
        PageRequest {
            number: 1,
            size: DEFAULT_PAGE_SIZE,
        }
    }
}

impl PageRequest {
    /// `page[number]` and `page[size]` as given (absent: the first page of 20); a value that is
    /// not a whole number, a number below 1, or a size over 100 is one sentence.
    pub fn parse(number: Option<&str>, size: Option<&str>) -> Result<PageRequest, String> {
        let whole = |name: &str, raw: &str| -> Result<usize, String> {
            match raw.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => Err(format!(
                    "page[{name}] is {:?}; it must be a whole number from 1",
                    crate::text::escape_controls(raw)
                )),
            }
        };
        let number = number.map(|n| whole("number", n)).transpose()?.unwrap_or(1);
        let size = size
            .map(|s| whole("size", s))
            .transpose()?
            .unwrap_or(DEFAULT_PAGE_SIZE);
        if size > MAX_PAGE_SIZE {
            return Err(format!(
                "page[size] is {size}; a page holds at most {MAX_PAGE_SIZE} workspaces"
            ));
        }
        Ok(PageRequest { number, size })
    }
}

/// One page of a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The workspaces of the page, in name order.
    pub workspaces: Vec<Workspace>,
    /// Workspaces found in all pages.
    pub total: usize,
    /// The page asked for.
    pub page: PageRequest,
}

impl Listed {
    /// How many pages the list has (0 when it is empty, as the API says).
    pub fn total_pages(&self) -> usize {
        self.total.div_ceil(self.page.size)
    }

    /// The next page's number, when there is one.
    pub fn next_page(&self) -> Option<usize> {
        (self.page.number < self.total_pages()).then_some(self.page.number + 1)
    }

    /// The page before's number, when there is one.
    pub fn prev_page(&self) -> Option<usize> {
        (self.page.number > 1).then_some(self.page.number - 1)
    }
}

impl Workspaces<'_> {
    /// The page `page` of the workspaces that a credential of `scope` may read and that `search`
    /// finds, in name order. A workspace exists when a state is at its path or it has a record
    /// (DESIGN §10.4): both are found in one listing of the state branch. Records are read for
    /// the page's workspaces, and for every workspace when the search names tags.
    pub async fn list(
        &self,
        scope: &Scope,
        search: &Search,
        page: PageRequest,
    ) -> Result<Listed, WorkspaceError> {
        let store = self.store;
        let repository = store.repository();
        let pattern = store.workspace_path();
        let (states, records) = tokio::try_join!(
            store.list_paths(pattern.prefix()),
            store.list_paths(RECORDS),
        )?;
        // Each name: whether it has a state, whether it has a record.
        let mut found: BTreeMap<WorkspaceName, (bool, bool)> = BTreeMap::new();
        for listed in &states {
            let Ok(path) = crate::path::StatePath::parse(listed) else {
                continue;
            };
            if let Some(name) = pattern.name_of(&path) {
                found.entry(name).or_default().0 = true;
            }
        }
        for listed in &records {
            let name = listed
                .strip_prefix(RECORDS)
                .and_then(|rest| rest.strip_suffix(".json"))
                .and_then(|name| WorkspaceName::parse(name).ok());
            if let Some(name) = name {
                found.entry(name).or_default().1 = true;
            }
        }
        let mut kept = Vec::new();
        for (name, (has_state, has_record)) in found {
            if !search.names(&name) {
                continue;
            }
            let Ok(path) = self.path(&name) else {
                continue;
            };
            if admit(scope, repository, &name, &path, Use::Read).is_err() {
                continue;
            }
            kept.push((name, path, has_state, has_record));
        }
        // Tags are in the records: read them only when the search needs them.
        let mut read_records: BTreeMap<WorkspaceName, Record> = BTreeMap::new();
        if search.needs_tags() {
            let mut matching = Vec::new();
            for entry in kept {
                let record = match entry.3 {
                    true => self.record(&entry.0).await?,
                    false => None,
                };
                let tags = record.as_ref().map_or(&[][..], |r| &r.tags[..]);
                if search.tags_match(tags) {
                    if let Some(record) = record {
                        read_records.insert(entry.0.clone(), record);
                    }
                    matching.push(entry);
                }
            }
            kept = matching;
        }
        let total = kept.len();
        let locks: BTreeMap<String, bytes::Bytes> = store
            .list_locks()
            .await?
            .into_iter()
            .map(|held| (held.path, held.content))
            .collect();
        let skip = (page.number - 1).saturating_mul(page.size);
        let mut workspaces = Vec::new();
        for (name, path, has_state, has_record) in kept.into_iter().skip(skip).take(page.size) {
            let record = match (read_records.remove(&name), has_record) {
                (Some(record), _) => Some(record),
                (None, true) => self.record(&name).await?,
                (None, false) => None,
            };
            workspaces.push(Workspace {
                id: self.id(&name),
                lock: locks.get(path.as_str()).cloned(),
                path,
                record,
                has_state,
                locked_by_caller: false,
            });
        }
        Ok(Listed {
            workspaces,
            total,
            page,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_whole_numbers_from_one_and_at_most_a_hundred() {
        assert_eq!(PageRequest::parse(None, None), Ok(PageRequest::default()));
        assert_eq!(
            PageRequest::parse(Some("3"), Some("100")),
            Ok(PageRequest {
                number: 3,
                size: 100
            })
        );
        for (number, size) in [(Some("0"), None), (Some("x"), None), (None, Some("101"))] {
            let e = PageRequest::parse(number, size).unwrap_err();
            assert!(e.starts_with("page["), "{e}");
        }
        let listed = |total, number| Listed {
            workspaces: Vec::new(),
            total,
            page: PageRequest { number, size: 20 },
        };
        assert_eq!(listed(0, 1).total_pages(), 0);
        assert_eq!(listed(0, 1).next_page(), None);
        assert_eq!(listed(41, 1).total_pages(), 3);
        assert_eq!(listed(41, 2).next_page(), Some(3));
        assert_eq!(listed(41, 2).prev_page(), Some(1));
        assert_eq!(listed(41, 3).next_page(), None);
    }
}
