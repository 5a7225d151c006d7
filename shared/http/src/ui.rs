//! The read-only web page at `/_/ui`: server-rendered HTML, no JavaScript, no build step. The
//! index lists every repository's states with their workspace (DESIGN §10.2), serial, size, last
//! writer and lock holder, a page
//! at a time, with their count and a filter by path prefix; a
//! state's page lists its versions and shows what changed in the readable structure between
//! two of them (resources and outputs added, removed or changed; never a value), and, with a
//! catalog, its links across states both ways (the graph of a repository: `graph.rs`).

use std::collections::HashMap;
use std::fmt::Write as _;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use gitstate_core::history::{StateRow, StatesPage, VersionInfo};
use gitstate_core::links::StateRef;
use gitstate_core::time::{format_age, format_rfc3339};
use gitstate_core::workspace::WorkspacePath;
use gitstate_core::{BackendError, ListQuery, StatePath, StoreError};
use gitstate_statefile::tfstate::{structure_diff, ChangeKind, Difference, StructureDiff};

use crate::error::ApiError;
use crate::inspect::{catalog, limit, list_query, query_string, state_path, store_for, url_part};
use crate::AppState;

/// Text made safe for HTML element content and attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2rem;color:#222}\
table{border-collapse:collapse;margin:1rem 0}th,td{border:1px solid #ccc;padding:.3rem .6rem;text-align:left}\
th{background:#f3f3f3}td.num{text-align:right}.locked{color:#a00;font-weight:600}\
td.when{white-space:nowrap}.added{color:#060}.removed{color:#a00}.changed{color:#a60}.literal{color:#d9480f;font-weight:600}code{font-size:.9em}.error{color:#a00}";

pub(crate) fn page(title: &str, body: &str) -> Response {
    let html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>{STYLE}</style></head><body>\n{body}\n<p><small>gitstate {} · read-only</small></p></body></html>\n",
        escape(title),
        env!("CARGO_PKG_VERSION")
    );
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        html,
    )
        .into_response()
}

fn when(time: Option<i64>) -> String {
    time.map_or("-".into(), |t| format_rfc3339(t).replace('T', " "))
}

/// The table of `rows`, each state named by its workspace too when its path is one of
/// `workspaces`' (DESIGN §10.2).
fn states_table(repo: &str, rows: &[StateRow], workspaces: &WorkspacePath) -> String {
    if rows.is_empty() {
        return "<p>No states yet.</p>".into();
    }
    let mut html = String::from(
        "<table><thead><tr><th>State</th><th>Workspace</th><th>Serial</th><th>Size (bytes)</th>\
         <th>Last writer</th><th>Updated (UTC)</th><th>Lock</th></tr></thead><tbody>\n",
    );
    for row in rows {
        let workspace = StatePath::parse(&row.path)
            .ok()
            .and_then(|path| workspaces.name_of(&path))
            .map_or_else(|| "-".to_owned(), |name| escape(name.as_str()));
        let lock = match &row.lock {
            Some(lock) => format!(
                "<span class=\"locked\">locked by {}</span> ({}, ID <code>{}</code>{})",
                escape(&lock.who),
                escape(&lock.operation),
                escape(&lock.id),
                lock.age_seconds
                    .map_or(String::new(), |a| format!(", {} ago", format_age(a)))
            ),
            None => "-".into(),
        };
        let _ = writeln!(
            html,
            "<tr><td><a href=\"/_/ui/{}/{}\">{}</a></td><td>{workspace}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td>{}</td><td class=\"when\">{}</td><td>{lock}</td></tr>",
            url_part(repo),
            url_part(&row.path),
            escape(&row.path),
            row.serial.map_or("-".into(), |s| s.to_string()),
            if row.commit.is_some() { row.size.to_string() } else { "-".into() },
            escape(row.updated_by.as_deref().unwrap_or("-")),
            when(row.updated_at),
        );
    }
    html.push_str("</tbody></table>");
    html
}

/// A store failure the browser should answer by asking for credentials.
fn needs_credentials(e: &BackendError) -> bool {
    matches!(e, BackendError::Store(StoreError::Unauthorized(_)))
}

/// States one page of the web page lists unless `limit` says otherwise.
const UI_PAGE: usize = 100;

/// `GET /_/ui?repo=R&prefix=P&after=CURSOR&limit=N`: the first page of every configured
/// repository's states, or with `repo` one page of that repository's: the count under the
/// prefix, a prefix filter, and links through the pages.
pub async fn index(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let query = list_query(&params, UI_PAGE)?;
    let mut body = String::from("<h1>gitstate</h1>\n");
    let names: Vec<String> = match params.get("repo") {
        Some(repo) => vec![repo.clone()],
        None => app.registry.names(),
    };
    if names.is_empty() {
        body.push_str("<p>No repositories are configured.</p>");
    }
    for name in names {
        let _ = writeln!(body, "<h2>Repository <code>{}</code></h2>", escape(&name));
        if app.catalog.is_some() {
            let _ = writeln!(
                body,
                "<p><a href=\"/_/ui/graph?repo={}\">dependency graph</a></p>",
                url_part(&name)
            );
        }
        let store = store_for(&app, &name, &headers).await?;
        match app.backend.states(store.as_ref(), &query).await {
            Ok(states) => {
                let workspaces = store.workspace_path();
                body.push_str(&states_page(&name, &query, &states, &workspaces))
            }
            Err(e) if needs_credentials(&e) => return Err(e.into()),
            Err(e) => {
                let sentence = ApiError::from(e).into_sentence();
                let _ = write!(body, "<p class=\"error\">{}</p>", escape(&sentence));
            }
        }
    }
    Ok(page("gitstate", &body))
}

/// One page of a repository's states: the count, the prefix filter, the table, the links.
fn states_page(
    repo: &str,
    query: &ListQuery,
    states: &StatesPage,
    workspaces: &WorkspacePath,
) -> String {
    let under = match query.prefix.is_empty() {
        true => String::new(),
        false => format!(" under <code>{}</code>", escape(&query.prefix)),
    };
    let mut html = format!(
        "<form method=\"get\" action=\"/_/ui\"><p>{} state{}{under}. \
         <input type=\"hidden\" name=\"repo\" value=\"{}\">\
         <label>Path starts with <input name=\"prefix\" value=\"{}\"></label> \
         <button type=\"submit\">Filter</button></p></form>\n",
        states.total,
        if states.total == 1 { "" } else { "s" },
        escape(repo),
        escape(&query.prefix),
    );
    html.push_str(&states_table(repo, &states.rows, workspaces));
    let base = format!("/_/ui?repo={}", url_part(repo));
    let mut links = Vec::new();
    if query.after.is_some() {
        let first = match query.prefix.is_empty() {
            true => base.clone(),
            false => format!("{base}&prefix={}", url_part(&query.prefix)),
        };
        links.push(format!("<a href=\"{}\">First page</a>", escape(&first)));
    }
    if let Some(next) = &states.next {
        let href = format!("{base}&{}", query_string(query, next));
        links.push(format!("<a href=\"{}\">Next page →</a>", escape(&href)));
    }
    if !links.is_empty() {
        let _ = write!(html, "<p>{}</p>", links.join(" · "));
    }
    html
}

fn differences(title: &str, list: &[Difference]) -> String {
    let mut html = format!("<h3>{title}</h3>");
    if list.is_empty() {
        html.push_str("<p>No change.</p>");
        return html;
    }
    html.push_str("<ul>");
    for d in list {
        let (class, word) = match d.kind {
            ChangeKind::Added => ("added", "added"),
            ChangeKind::Removed => ("removed", "removed"),
            ChangeKind::Changed => ("changed", "changed"),
        };
        let _ = write!(
            html,
            "<li class=\"{class}\"><code>{}</code> {word}</li>",
            escape(&d.name)
        );
    }
    html.push_str("</ul>");
    html
}

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

/// `GET /_/ui/{repo}/{path}?from=COMMIT&to=COMMIT&limit=N`: a state's versions and the
/// structure diff between two of them (by default the newest and the one before).
pub async fn state(
    State(app): State<AppState>,
    Path((repo, path)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let path = state_path(&path)?;
    let limit = limit(&query)?;
    let store = store_for(&app, &repo, &headers).await?;
    let backend = &app.backend;
    let versions = backend.history(store.as_ref(), &path, limit).await?;
    let mut body = format!(
        "<p><a href=\"/_/ui\">← all states</a></p><h1><code>{}</code> in <code>{}</code></h1>\n",
        escape(path.as_str()),
        escape(&repo)
    );
    if app.catalog.is_some() {
        body.push_str(&links_section(&app, &headers, &repo, &path).await);
    }
    if versions.is_empty() {
        body.push_str("<p>This state has no versions.</p>");
        return Ok(page(path.as_str(), &body));
    }
    let pick = |key: &str, default: Option<&VersionInfo>| {
        pick_version(&query, key, &versions, default, &path)
    };
    let to = pick("to", versions.first())?;
    let from = pick(
        "from",
        to.as_ref()
            .and_then(|t| versions.iter().position(|v| v.commit == t.commit))
            .and_then(|i| versions.get(i + 1)),
    )?;
    let content = |version: Option<VersionInfo>| {
        let store = store.clone();
        let path = path.clone();
        async move {
            match version {
                Some(v) if !v.deleted => {
                    let bytes = backend
                        .read_version(store.as_ref(), &path, &v.commit)
                        .await?;
                    Ok::<_, ApiError>(bytes.and_then(|b| serde_json::from_slice(&b).ok()))
                }
                _ => Ok(None),
            }
        }
    };
    let (old, new) = tokio::try_join!(content(from.clone()), content(to.clone()))?;
    let diff: StructureDiff = structure_diff(old.as_ref(), new.as_ref());
    let label = |v: &Option<VersionInfo>| match v {
        Some(v) => format!(
            "serial {} (<code>{}</code>)",
            v.serial.map_or("?".into(), |s| s.to_string()),
            short(&v.commit)
        ),
        None => "nothing".into(),
    };
    let _ = write!(
        body,
        "<h2>Changes from {} to {}</h2><p>{} resource instances in the newer version.</p>{}{}",
        label(&from),
        label(&to),
        diff.resource_count,
        differences("Resources", &diff.resources),
        differences("Outputs", &diff.outputs)
    );
    let base = format!("/_/ui/{}/{}", url_part(&repo), url_part(path.as_str()));
    versions_table(&mut body, &base, &versions);
    Ok(page(path.as_str(), &body))
}

/// The version `?{key}=` names (a commit prefix of at least 4 digits among `versions`), else
/// `default`; a prefix that names none is a 404.
fn pick_version(
    query: &HashMap<String, String>,
    key: &str,
    versions: &[VersionInfo],
    default: Option<&VersionInfo>,
    path: &StatePath,
) -> Result<Option<VersionInfo>, ApiError> {
    match query.get(key) {
        Some(spec) => versions
            .iter()
            .find(|v| v.commit.starts_with(spec.as_str()) && spec.len() >= 4)
            .cloned()
            .map(Some)
            .ok_or_else(|| {
                ApiError::Message(
                    StatusCode::NOT_FOUND,
                    format!("{key}={spec} is not a commit among the listed versions of {path}"),
                )
            }),
        None => Ok(default.cloned()),
    }
}

/// The table of `versions`, each with a link comparing it with the one before (`base`: the
/// state's page).
fn versions_table(body: &mut String, base: &str, versions: &[VersionInfo]) {
    body.push_str(
        "<h2>Versions</h2><table><thead><tr><th>Serial</th><th>Commit</th><th>When (UTC)</th>\
         <th>Who</th><th>Size (bytes)</th><th>Compare</th></tr></thead><tbody>\n",
    );
    for (i, v) in versions.iter().enumerate() {
        let compare = match versions.get(i + 1) {
            Some(previous) => format!(
                "<a href=\"{base}?from={}&amp;to={}\">with the previous</a>",
                short(&previous.commit),
                short(&v.commit)
            ),
            None => "-".into(),
        };
        let _ = writeln!(
            body,
            "<tr><td class=\"num\">{}</td><td><code>{}</code></td><td class=\"when\">{}</td><td>{}</td><td class=\"num\">{}</td><td>{compare}</td></tr>",
            v.serial.map_or("-".into(), |s| s.to_string()),
            short(&v.commit),
            when(Some(v.time)),
            escape(&v.who),
            v.size.map_or("deleted".into(), |s| s.to_string()),
        );
    }
    body.push_str("</tbody></table>");
}

/// The state's links both ways (from the catalog), each other state a link to its page; a
/// sentence instead when the catalog cannot say (the caller may not read it, or it failed).
async fn links_section(
    app: &AppState,
    headers: &HeaderMap,
    repo: &str,
    path: &StatePath,
) -> String {
    let state = StateRef {
        repository: repo.to_owned(),
        path: path.as_str().to_owned(),
    };
    let links = match catalog(app, headers).await {
        Ok(catalog) => catalog.links(&state).await.map_err(ApiError::from),
        Err(e) => Err(e),
    };
    let links = match links {
        Ok(links) => links,
        Err(e) => {
            let sentence = e.into_sentence();
            return format!(
                "<p class=\"error\">Links across states: {}</p>",
                escape(&sentence)
            );
        }
    };
    let mut html = format!(
        "<h2>Links across states</h2><p><a href=\"/_/ui/graph?repo={}\">dependency graph of <code>{}</code></a></p>",
        url_part(repo),
        escape(repo)
    );
    for (title, entries) in [("Uses", &links.uses), ("Used by", &links.used_by)] {
        let _ = write!(html, "<h3>{title}</h3>");
        if entries.is_empty() {
            html.push_str("<p>None.</p>");
            continue;
        }
        html.push_str("<table><tr><th>state</th><th>its address</th><th>its attribute</th><th>here</th><th>kind</th></tr>");
        for e in entries {
            let kind = e.kind.as_str();
            let _ = write!(
                html,
                "<tr><td><a href=\"/_/ui/{}/{}\">{}/{}</a></td><td><code>{}</code></td><td><code>{}</code></td>\
                 <td><code>{} {}</code></td><td class=\"{kind}\">{kind}{}</td></tr>",
                url_part(&e.repository),
                url_part(&e.path),
                escape(&e.repository),
                escape(&e.path),
                escape(&e.address),
                escape(&e.attribute),
                escape(&e.here.address),
                escape(&e.here.attribute),
                if e.dangling { ", dangling" } else { "" },
            );
        }
        html.push_str("</table>");
    }
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(url_part("envs/prod.tfstate"), "envs/prod.tfstate");
        assert_eq!(url_part("a b?"), "a%20b%3F");
    }
}
