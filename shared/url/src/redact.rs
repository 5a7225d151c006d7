//! Redaction of credentials in free text: the last line of defence for text not built from a
//! [`RepoUrl`](crate::RepoUrl) (a dependency's error message, a configured address echoed in a
//! message). Text built from a `RepoUrl` uses its [`display`](crate::RepoUrl::display), which
//! never holds a password.

/// Replaces `user:password@` in every URL inside free `text` (an error message from a
/// dependency, say) with `***@`: the last line of defence, for text not built from a
/// [`RepoUrl`](crate::RepoUrl).
pub fn redact_in_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("://") {
        let (head, tail) = rest.split_at(pos + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c == '/' || c.is_whitespace() || c == '"' || c == '\'')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                out.push_str("***@");
                out.push_str(&authority[at + 1..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}
