//! What a commit gitstate writes says about itself (DESIGN §6, "Commit identity"): its message,
//! and its author, the caller on whose behalf it was written: the lock holder's `Who` when the
//! write is under a lock, else the user name of the caller's credential (the team's writer in
//! team mode, the git user in pass-through). Without a caller the author is the committer.
//! The committer is the deployment's (`committer_name`/`committer_email`), which the store holds.

use std::fmt;

/// A commit's message and author.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The message, e.g. `Update prod.tfstate (serial 4) by alice@ci`.
    pub text: String,
    /// Who the commit is by; `None`: the committer.
    pub author: Option<Author>,
}

impl Message {
    /// `text` by `who` (see [`Author::of`]).
    pub fn by(text: String, who: &str) -> Message {
        Message {
            text,
            author: Author::of(who),
        }
    }
}

impl From<String> for Message {
    /// A message whose author is the committer.
    fn from(text: String) -> Self {
        Message { text, author: None }
    }
}

impl From<&str> for Message {
    fn from(text: &str) -> Self {
        Message::from(text.to_owned())
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A commit's author: a name and an e-mail address git can write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Author {
    /// The name (no `<`, `>` or control character).
    pub name: String,
    /// The address: the name itself when it has the form `user@host` (Terraform's `Who`, which
    /// is what git itself uses when no e-mail is configured), else empty.
    pub email: String,
}

impl Author {
    /// The author for the caller named `who`: `None` when nothing of it can be written (empty,
    /// or only characters git's identity lines cannot hold).
    pub fn of(who: &str) -> Option<Author> {
        let name: String = who
            .chars()
            .filter(|c| !c.is_control() && *c != '<' && *c != '>')
            .collect();
        let name = name.trim().to_owned();
        if name.is_empty() {
            return None;
        }
        let email = match name.split_once('@') {
            Some((user, host))
                if !user.is_empty()
                    && !host.is_empty()
                    && !name.contains(char::is_whitespace)
                    && !host.contains('@') =>
            {
                name.clone()
            }
            _ => String::new(),
        };
        Some(Author { name, email })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_author_is_the_callers_name_made_writable() {
        let terraform = Author::of("alice@ci-runner-7").expect("an author");
        assert_eq!(
            (terraform.name.as_str(), terraform.email.as_str()),
            ("alice@ci-runner-7", "alice@ci-runner-7")
        );
        let team = Author::of("payments").expect("an author");
        assert_eq!((team.name.as_str(), team.email.as_str()), ("payments", ""));
        let hostile = Author::of("mallory <x@y>\nparent 0000").expect("an author");
        assert_eq!(hostile.name, "mallory x@yparent 0000");
        assert_eq!(hostile.email, "", "a name with blanks is no address");
        for nothing in ["", "  ", "<>", "\n"] {
            assert_eq!(Author::of(nothing), None, "{nothing:?}");
        }
        assert_eq!(Message::from("x").author, None);
        assert_eq!(Message::by("x".into(), "").author, None);
    }
}
