//! The dashboard's pages and form handlers. Each handler reads through the node's library API
//! (skills, sources, calls, the board, the peer network), renders with `maud` (every value is
//! escaped) and, after a form, redirects (303) so a reload never posts twice.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Extension, Form, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};
use skillbox_calls::machine::FailureCode;
use skillbox_node::api::AppState;
use skillbox_node::calls::records::Filter;
use skillbox_node::calls::{CallView, Calls, StartCall};
use skillbox_node::ledger::{self, EntryKind, Line};
use skillbox_node::{SourceKind, sources};
use zeroize::Zeroizing;

use crate::{Session, cleared_cookie, is_operator, session_cookie};

const NAV: &[(&str, &str)] = &[
    ("/ui", "Overview"),
    ("/ui/board", "Board"),
    ("/ui/skills", "My skills"),
    ("/ui/sources", "Sources"),
    ("/ui/calls", "Calls"),
    ("/ui/approvals", "Approvals"),
    ("/ui/ledger", "Ledger"),
    ("/ui/peers", "Peers"),
];

fn html_page(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

/// A page with the navigation, the sign-out form and an optional notice.
fn page(title: &str, here: &str, session: &Session, notice: Option<&str>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · skillbox" }
                link rel="stylesheet" href="/ui/static/app.css";
                script src="/ui/static/app.js" defer {}
            }
            body {
                a class="skip" href="#main" { "Skip to content" }
                header {
                    nav aria-label="Dashboard" {
                        ul {
                            @for (href, label) in NAV {
                                li {
                                    @if *href == here {
                                        a href=(href) aria-current="page" { (label) }
                                    } @else {
                                        a href=(href) { (label) }
                                    }
                                }
                            }
                        }
                    }
                    form method="post" action="/ui/logout" class="logout" {
                        input type="hidden" name="csrf" value=(session.csrf);
                        button type="submit" { "Sign out" }
                    }
                }
                main id="main" {
                    h1 { (title) }
                    @if let Some(n) = notice {
                        p class="notice" role="alert" { (n) }
                    }
                    (body)
                }
            }
        }
    }
}

/// A page without a session (sign-in, signed out).
pub(crate) fn plain_page(title: &str, text: &str) -> String {
    bare(title, html! { p { (text) } }).into_string()
}

fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · skillbox" }
                link rel="stylesheet" href="/ui/static/app.css";
            }
            body { main id="main" { h1 { (title) } (body) } }
        }
    }
}

fn csrf_field(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf); }
}

fn refused_csrf() -> Response {
    html_page(
        StatusCode::FORBIDDEN,
        bare(
            "Refused",
            html! { p { "This form did not come from this dashboard (its CSRF token is missing or wrong). Reload the page and try again." } },
        ),
    )
}

fn calls_of(s: &AppState) -> Option<Calls> {
    s.calls.get().cloned()
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> skillbox_node::Result<T> + Send + 'static,
) -> Result<T, String> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the node's worker failed".into()),
    }
}

fn short(id: &str) -> String {
    if id.chars().count() > 16 {
        let head: String = id.chars().take(8).collect();
        let tail: String = id
            .chars()
            .rev()
            .take(6)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("{head}…{tail}")
    } else {
        id.to_owned()
    }
}

/// A peer's text, capped (it is escaped by the template; this only keeps pages readable).
fn capped(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        let mut t: String = text.chars().take(max).collect();
        t.push('…');
        t
    } else {
        text.to_owned()
    }
}

fn failure_words(code: &str) -> &'static str {
    FailureCode::parse(code)
        .map(FailureCode::fixed_message)
        .unwrap_or("the call failed")
}

fn when(ms: u64) -> String {
    skillbox_node::store::rfc3339(ms)
        .replace('T', " ")
        .replace('Z', " UTC")
}

// ---- static

pub(crate) async fn css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../assets/app.css"),
    )
        .into_response()
}

pub(crate) async fn js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../assets/app.js"),
    )
        .into_response()
}

// ---- sign in and out

fn login_form(error: Option<&str>) -> Markup {
    bare(
        "Sign in",
        html! {
            p { "Paste this node's operator token (the file " code { "api.token" } " in its data dir). It is kept in a cookie only this dashboard can use." }
            @if let Some(e) = error { p class="notice" role="alert" { (e) } }
            form method="post" action="/ui/login" {
                label for="token" { "Operator token" }
                input id="token" name="token" type="password" autocomplete="current-password" required;
                button type="submit" { "Sign in" }
            }
        },
    )
}

pub(crate) async fn login_page() -> Response {
    html_page(StatusCode::OK, login_form(None))
}

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    token: String,
}

pub(crate) async fn login(State(s): State<AppState>, Form(f): Form<LoginForm>) -> Response {
    let token = Zeroizing::new(f.token.trim().to_owned());
    if is_operator(&s, &token) {
        (
            StatusCode::SEE_OTHER,
            [
                (header::LOCATION, "/ui".to_owned()),
                (header::SET_COOKIE, session_cookie(&token)),
            ],
        )
            .into_response()
    } else {
        html_page(
            StatusCode::UNAUTHORIZED,
            login_form(Some("That is not this node's operator token.")),
        )
    }
}

#[derive(Deserialize)]
pub(crate) struct CsrfOnly {
    #[serde(default)]
    csrf: String,
}

pub(crate) async fn logout(
    Extension(session): Extension<Session>,
    Form(f): Form<CsrfOnly>,
) -> Response {
    if !session.csrf_ok(&f.csrf) {
        return refused_csrf();
    }
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/ui/login".to_owned()),
            (header::SET_COOKIE, cleared_cookie()),
        ],
    )
        .into_response()
}

// ---- overview

pub(crate) async fn overview(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
) -> Response {
    let skills = {
        let s = s.clone();
        blocking(move || s.skills.list()).await.unwrap_or_default()
    };
    let sources = {
        let s = s.clone();
        blocking(move || s.sources.list()).await.unwrap_or_default()
    };
    let board = s
        .peers
        .get()
        .map(|h| h.with_board(|b, now| b.snapshot(now).len()))
        .unwrap_or(0);
    let peers = match s.peers.get() {
        Some(h) => h.peers().await.map(|p| p.len()).unwrap_or(0),
        None => 0,
    };
    let calls = calls_of(&s);
    let mut by_state: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut boxes = Vec::new();
    let mut waiting = 0;
    if let Some(c) = &calls {
        for v in c.list(Filter::default()).await.unwrap_or_default() {
            *by_state.entry(v.state).or_default() += 1;
        }
        waiting = c.approvals().await.map(|a| a.len()).unwrap_or(0);
        boxes = c.boxes().known();
        boxes.sort_by(|a, b| a.url.cmp(&b.url));
    }
    let offered = skills.iter().filter(|k| k.offered).count();
    let body = html! {
        dl class="facts" {
            dt { "Node" } dd { code { (s.node_id) } }
            dt { "Skills" } dd { (skills.len()) " (" (offered) " offered)" }
            dt { "Sources" } dd { (sources.len()) }
            dt { "Board" } dd { (board) " skills from peers" }
            dt { "Peers" } dd { (peers) " connected" }
            dt { "Waiting for you" } dd { a href="/ui/approvals" { (waiting) " approvals" } }
        }
        h2 { "Calls by state" }
        @if by_state.is_empty() { p { "No calls yet." } } @else {
            table {
                thead { tr { th scope="col" { "State" } th scope="col" { "Calls" } } }
                tbody { @for (st, n) in &by_state { tr { td { (st) } td { (n) } } } }
            }
        }
        h2 { "Boxes" }
        @if calls.is_none() { p { "The calls driver is not running (no peer network)." } }
        @else if boxes.is_empty() { p { "No accepted box has answered yet." } } @else {
            table {
                thead { tr { th scope="col" { "Box" } th scope="col" { "Platform" } th scope="col" { "Isolation" } th scope="col" { "Providers" } } }
                tbody {
                    @for b in &boxes {
                        tr {
                            td { code { (b.url) } }
                            td { (b.platform) }
                            td { @if b.platform == "insecure-dev" { strong { "none: its operator can read what is staked" } } @else { "hardware" } }
                            td {
                                @for p in &b.providers {
                                    span class=(if p.available { "ok" } else { "off" }) {
                                        (p.id) @if !p.available { " (unavailable)" }
                                    } " "
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    html_page(
        StatusCode::OK,
        page("Overview", "/ui", &session, None, body),
    )
}

// ---- the board

#[derive(Deserialize, Default)]
pub(crate) struct BoardQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    provider: String,
    #[serde(default)]
    platform: String,
}

pub(crate) async fn board(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Query(q): Query<BoardQuery>,
) -> Response {
    let Some(h) = s.peers.get() else {
        let body = html! { p { "The peer network is not running on this node." } };
        return html_page(
            StatusCode::OK,
            page("Board", "/ui/board", &session, None, body),
        );
    };
    let (rows, platforms) = h.with_board(|b, now| {
        let rows = b.snapshot(now);
        let mut platforms: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in &rows {
            if platforms.contains_key(&r.peer) {
                continue;
            }
            let p = r
                .peer
                .parse::<skillbox_peers::PeerId>()
                .ok()
                .and_then(|p| b.advert(&p, now).map(|a| a.boxes.clone()))
                .unwrap_or_default()
                .into_iter()
                .map(|b| b.platform)
                .collect();
            platforms.insert(r.peer.clone(), p);
        }
        (rows, platforms)
    });
    let all_providers: std::collections::BTreeSet<String> =
        rows.iter().map(|r| r.provider.clone()).collect();
    let all_platforms: std::collections::BTreeSet<String> =
        platforms.values().flatten().cloned().collect();
    let needle = q.q.to_lowercase();
    let shown: Vec<_> = rows
        .iter()
        .filter(|r| {
            needle.is_empty()
                || r.skill.to_lowercase().contains(&needle)
                || r.description.to_lowercase().contains(&needle)
        })
        .filter(|r| q.provider.is_empty() || r.provider == q.provider)
        .filter(|r| {
            q.platform.is_empty()
                || platforms
                    .get(&r.peer)
                    .is_some_and(|p| p.contains(&q.platform))
        })
        .collect();
    let body = html! {
        form method="get" action="/ui/board" class="filters" role="search" {
            label for="q" { "Search" }
            input id="q" name="q" type="search" value=(q.q);
            label for="provider" { "Provider" }
            select id="provider" name="provider" {
                option value="" { "any" }
                @for p in &all_providers { option value=(p) selected[*p == q.provider] { (p) } }
            }
            label for="platform" { "Box platform" }
            select id="platform" name="platform" {
                option value="" { "any" }
                @for p in &all_platforms { option value=(p) selected[*p == q.platform] { (p) } }
            }
            button type="submit" { "Filter" }
        }
        p { (shown.len()) " of " (rows.len()) " skills. Descriptions are the peers' own words." }
        table {
            thead { tr {
                th scope="col" { "Skill" } th scope="col" { "Description (from the peer)" }
                th scope="col" { "Provider" } th scope="col" { "Boxes" } th scope="col" { "Needs" }
                th scope="col" { "Peer" } th scope="col" { span class="sr" { "Call" } }
            } }
            tbody {
                @for r in &shown {
                    tr {
                        td { (r.skill) }
                        td class="peer-text" { (capped(&r.description, 300)) }
                        td { (r.provider) }
                        td { (platforms.get(&r.peer).map(|p| p.join(", ")).unwrap_or_default()) }
                        td { (r.required_sources.join(", ")) }
                        td { code title=(r.peer) { (short(&r.peer)) } }
                        td { a href=(format!("/ui/calls?peer={}&skill={}", enc(&r.peer), enc(&r.skill))) { "Call…" } }
                    }
                }
            }
        }
    };
    html_page(
        StatusCode::OK,
        page("Board", "/ui/board", &session, None, body),
    )
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

// ---- my skills

async fn skills_page(
    s: &AppState,
    session: &Session,
    notice: Option<&str>,
    status: StatusCode,
) -> Response {
    let list = {
        let s = s.clone();
        blocking(move || s.skills.list()).await
    };
    let body = html! {
        @match &list {
            Err(e) => p class="notice" { "Cannot list skills: " (e) },
            Ok(list) if list.is_empty() => p { "No skills yet. Add a SKILL.md below." },
            Ok(list) => table {
                thead { tr {
                    th scope="col" { "Skill" } th scope="col" { "Description" } th scope="col" { "Provider" }
                    th scope="col" { "Offered" } th scope="col" { span class="sr" { "Remove" } }
                } }
                tbody {
                    @for k in list {
                        tr data-skill=(k.name) {
                            td { a href=(format!("/ui/skills/{}", enc(&k.name))) { (k.name) } }
                            td { (capped(&k.description, 200)) }
                            td { (k.provider.clone().unwrap_or_default()) }
                            td {
                                @if k.offered { span class="ok" { "offered" } }
                                @else { span class="off" { "not offered: " (k.reasons.join("; ")) } }
                            }
                            td {
                                form method="post" action=(format!("/ui/skills/{}/delete", enc(&k.name))) {
                                    (csrf_field(session))
                                    button type="submit" aria-label=(format!("Remove {}", k.name)) { "Remove" }
                                }
                            }
                        }
                    }
                }
            },
        }
        h2 { "Add a skill" }
        form method="post" action="/ui/skills" class="stack" {
            (csrf_field(session))
            label for="skill-file" { "SKILL.md file (loaded into the text below)" }
            input id="skill-file" type="file" accept=".md,text/markdown,text/plain" data-load-into="skill-doc";
            label for="skill-doc" { "SKILL.md (front matter and body)" }
            textarea id="skill-doc" name="doc" rows="14" required {}
            label for="skill-name" { "Name, if the front matter has none (optional)" }
            input id="skill-name" name="name" type="text";
            button type="submit" { "Add skill" }
        }
    };
    html_page(
        status,
        page("My skills", "/ui/skills", session, notice, body),
    )
}

pub(crate) async fn skills(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
) -> Response {
    skills_page(&s, &session, None, StatusCode::OK).await
}

#[derive(Deserialize)]
pub(crate) struct AddSkill {
    #[serde(default)]
    csrf: String,
    doc: String,
    #[serde(default)]
    name: String,
}

pub(crate) async fn add_skill(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Form(f): Form<AddSkill>,
) -> Response {
    if !session.csrf_ok(&f.csrf) {
        return refused_csrf();
    }
    let doc = Zeroizing::new(f.doc.replace("\r\n", "\n").into_bytes());
    if doc.len() > s.limits.max_skill_bytes {
        return skills_page(
            &s,
            &session,
            Some("That SKILL.md is larger than this node accepts."),
            StatusCode::PAYLOAD_TOO_LARGE,
        )
        .await;
    }
    let fallback = (!f.name.trim().is_empty()).then(|| f.name.trim().to_owned());
    let imported = {
        let s = s.clone();
        blocking(move || s.skills.import(&doc, fallback.as_deref())).await
    };
    match imported {
        Ok(_) => {
            s.offer_changed.notify_one();
            Redirect::to("/ui/skills").into_response()
        }
        Err(e) => {
            skills_page(
                &s,
                &session,
                Some(&format!("Not imported: {e}")),
                StatusCode::BAD_REQUEST,
            )
            .await
        }
    }
}

pub(crate) async fn skill(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
) -> Response {
    let n = name.clone();
    let detail = {
        let s = s.clone();
        blocking(move || s.skills.detail(&n)).await
    };
    let detail = match detail {
        Ok(Some(d)) => d,
        Ok(None) => {
            let body = html! { p { "No skill of that name." } };
            return html_page(
                StatusCode::NOT_FOUND,
                page("Skill", "/ui/skills", &session, None, body),
            );
        }
        Err(e) => {
            let body = html! { p class="notice" { (e) } };
            return html_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                page("Skill", "/ui/skills", &session, None, body),
            );
        }
    };
    let state = serde_json::to_value(&detail.state).unwrap_or(Value::Null);
    let decl = serde_json::to_value(&detail.declaration).unwrap_or(Value::Null);
    let manifest = serde_json::to_string_pretty(&detail.manifest).unwrap_or_default();
    let offered = state["offered"].as_bool() == Some(true);
    let reasons: Vec<String> = state["reasons"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str().map(str::to_owned))
        .collect();
    let body = html! {
        dl class="facts" {
            dt { "Agent id" } dd { code { (detail.agent_id) } }
            dt { "Digest" } dd { code { (detail.digest) } }
            dt { "Provider" } dd { (decl["provider"].as_str().unwrap_or("none")) }
            dt { "Key source" } dd { (decl["key"].as_str().unwrap_or("none")) }
            dt { "Required sources" } dd { (decl["requiredSources"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")).unwrap_or_default()) }
            dt { "Offered" } dd {
                @if offered { span class="ok" { "yes" } } @else { span class="off" { "no: " (reasons.join("; ")) } }
            }
        }
        p { "The body, model and key are staked into a box for each call; they are never shown here." }
        h2 { "OpenWOP manifest" }
        pre class="manifest" { (manifest) }
    };
    html_page(
        StatusCode::OK,
        page(&format!("Skill {name}"), "/ui/skills", &session, None, body),
    )
}

pub(crate) async fn delete_skill(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
    Form(f): Form<CsrfOnly>,
) -> Response {
    if !session.csrf_ok(&f.csrf) {
        return refused_csrf();
    }
    let removed = {
        let s = s.clone();
        blocking(move || s.skills.delete(&name)).await
    };
    match removed {
        Ok(_) => {
            s.offer_changed.notify_one();
            Redirect::to("/ui/skills").into_response()
        }
        Err(e) => skills_page(&s, &session, Some(&e), StatusCode::BAD_REQUEST).await,
    }
}

// ---- sources

async fn sources_page(
    s: &AppState,
    session: &Session,
    notice: Option<&str>,
    status: StatusCode,
) -> Response {
    let list = {
        let s = s.clone();
        blocking(move || s.sources.list()).await
    };
    let body = html! {
        p { "Content is never shown back: names, kinds, sizes and a keyed digest only. Only sources marked shareable can be staked into a call, and a secret never is." }
        @match &list {
            Err(e) => p class="notice" { (e) },
            Ok(list) => table {
                thead { tr {
                    th scope="col" { "Name" } th scope="col" { "Kind" } th scope="col" { "Size" }
                    th scope="col" { "Shareable" } th scope="col" { "Digest" } th scope="col" { span class="sr" { "Remove" } }
                } }
                tbody {
                    @for m in list {
                        tr data-source=(m.name) {
                            td { code { (m.name) } }
                            td { (m.kind.as_str()) }
                            td { (m.size) " B" }
                            td { @if m.shareable { "yes" } @else { "no" } }
                            td { code title=(m.digest) { (short(&m.digest)) } }
                            td {
                                form method="post" action="/ui/sources/delete" {
                                    (csrf_field(session))
                                    input type="hidden" name="name" value=(m.name);
                                    button type="submit" aria-label=(format!("Remove {}", m.name)) { "Remove" }
                                }
                            }
                        }
                    }
                }
            },
        }
        h2 { "Add or replace a source" }
        form method="post" action="/ui/sources" class="stack" autocomplete="off" {
            (csrf_field(session))
            label for="src-name" { "Name" }
            input id="src-name" name="name" type="text" required;
            label for="src-kind" { "Kind" }
            select id="src-kind" name="kind" {
                option value="text" { "text (your data)" }
                option value="secret" { "secret (an API key: never staked as data)" }
            }
            label for="src-content" { "Content" }
            textarea id="src-content" name="content" rows="6" required {}
            label class="check" {
                input type="checkbox" name="shareable" value="true";
                " Shareable: calls may stake it into a box (you are still asked, by default)"
            }
            button type="submit" { "Save source" }
        }
    };
    html_page(
        status,
        page("Sources", "/ui/sources", session, notice, body),
    )
}

pub(crate) async fn sources(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
) -> Response {
    sources_page(&s, &session, None, StatusCode::OK).await
}

#[derive(Deserialize)]
pub(crate) struct AddSource {
    #[serde(default)]
    csrf: String,
    name: String,
    kind: String,
    content: String,
    #[serde(default)]
    shareable: Option<String>,
}

pub(crate) async fn add_source(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Form(f): Form<AddSource>,
) -> Response {
    if !session.csrf_ok(&f.csrf) {
        return refused_csrf();
    }
    let content = Zeroizing::new(f.content.into_bytes());
    let name = f.name.trim().to_owned();
    let checked = sources::check_name(&name)
        .map_err(|e| e.to_string())
        .and_then(|()| match f.kind.parse::<SourceKind>() {
            Ok(k @ (SourceKind::Text | SourceKind::Secret)) => Ok(k),
            _ => Err(format!("{:?} is not text or secret", f.kind)),
        })
        .and_then(|k| {
            if content.len() > s.limits.max_source_bytes {
                Err("That content is larger than this node accepts for a source.".to_owned())
            } else {
                Ok(k)
            }
        });
    let put = match checked {
        Ok(kind) => {
            let shareable = f.shareable.as_deref() == Some("true");
            let s = s.clone();
            blocking(move || s.sources.put_with(&name, kind, &content, shareable)).await
        }
        Err(e) => Err(e),
    };
    match put {
        Ok(_) => {
            s.offer_changed.notify_one();
            Redirect::to("/ui/sources").into_response()
        }
        Err(e) => sources_page(&s, &session, Some(&e), StatusCode::BAD_REQUEST).await,
    }
}

#[derive(Deserialize)]
pub(crate) struct NameForm {
    #[serde(default)]
    csrf: String,
    name: String,
}

pub(crate) async fn delete_source(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Form(f): Form<NameForm>,
) -> Response {
    if !session.csrf_ok(&f.csrf) {
        return refused_csrf();
    }
    let name = f.name;
    if let Err(e) = sources::check_name(&name) {
        return sources_page(&s, &session, Some(&e.to_string()), StatusCode::BAD_REQUEST).await;
    }
    let removed = {
        let s = s.clone();
        blocking(move || s.sources.delete(&name)).await
    };
    match removed {
        Ok(_) => {
            s.offer_changed.notify_one();
            Redirect::to("/ui/sources").into_response()
        }
        Err(e) => sources_page(&s, &session, Some(&e), StatusCode::BAD_REQUEST).await,
    }
}

// ---- calls

fn no_calls(session: &Session, here: &str) -> Response {
    let body = html! { p { "The calls driver is not running (no peer network)." } };
    html_page(StatusCode::OK, page("Calls", here, session, None, body))
}

fn failure_cell(v: &CallView) -> Markup {
    html! {
        @if let Some(f) = &v.failure {
            (failure_words(f.code.as_str())) " (" code { (f.code.as_str()) } ")"
        }
    }
}

#[derive(Deserialize, Default)]
pub(crate) struct StartQuery {
    #[serde(default)]
    peer: String,
    #[serde(default)]
    skill: String,
}

async fn calls_page(
    s: &AppState,
    session: &Session,
    prefill: &StartQuery,
    notice: Option<&str>,
    status: StatusCode,
) -> Response {
    let Some(c) = calls_of(s) else {
        return no_calls(session, "/ui/calls");
    };
    let list = c
        .list(Filter {
            limit: Some(200),
            ..Filter::default()
        })
        .await;
    let body = html! {
        h2 { "Start a call" }
        form method="post" action="/ui/calls" class="stack" {
            (csrf_field(session))
            label for="call-peer" { "Peer id" }
            input id="call-peer" name="peer" type="text" value=(prefill.peer) required;
            label for="call-skill" { "Skill" }
            input id="call-skill" name="skill" type="text" value=(prefill.skill) required;
            label for="call-request" { "Your request" }
            textarea id="call-request" name="request" rows="4" required {}
            p class="hint" { "The skill's required sources that you hold and marked shareable are applied; by default you are asked before any leaves." }
            button type="submit" { "Start call" }
        }
        h2 { "Calls" }
        @match &list {
            Err(e) => p class="notice" { (e.to_string()) },
            Ok(list) if list.is_empty() => p { "No calls yet." },
            Ok(list) => table data-live="calls" {
                thead { tr {
                    th scope="col" { "Call" } th scope="col" { "Side" } th scope="col" { "Skill" }
                    th scope="col" { "Peer" } th scope="col" { "State" } th scope="col" { "Failure" }
                    th scope="col" { "Started" }
                } }
                tbody {
                    @for v in list {
                        tr {
                            td { a href=(format!("/ui/calls/{}", enc(&v.id))) { code { (short(&v.id)) } } }
                            td { (v.role) }
                            td { (v.skill) }
                            td { code title=(v.peer) { (short(&v.peer)) } }
                            td data-call-state=(format!("{}:{}", v.id, v.role)) { (v.state) }
                            td data-call-failure=(format!("{}:{}", v.id, v.role)) { (failure_cell(v)) }
                            td { (when(v.created_at)) }
                        }
                    }
                }
            },
        }
    };
    html_page(status, page("Calls", "/ui/calls", session, notice, body))
}

pub(crate) async fn calls(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Query(q): Query<StartQuery>,
) -> Response {
    calls_page(&s, &session, &q, None, StatusCode::OK).await
}

#[derive(Deserialize)]
pub(crate) struct StartForm {
    #[serde(default)]
    csrf: String,
    peer: String,
    skill: String,
    request: String,
}

pub(crate) async fn start_call(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Form(f): Form<StartForm>,
) -> Response {
    if !session.csrf_ok(&f.csrf) {
        return refused_csrf();
    }
    let Some(c) = calls_of(&s) else {
        return no_calls(&session, "/ui/calls");
    };
    let request = Zeroizing::new(f.request);
    let prefill = StartQuery {
        peer: f.peer.trim().to_owned(),
        skill: f.skill.trim().to_owned(),
    };
    if request.len() > s.calls_max_request {
        return calls_page(
            &s,
            &session,
            &prefill,
            Some("That request is larger than this node sends."),
            StatusCode::PAYLOAD_TOO_LARGE,
        )
        .await;
    }
    match c
        .start(StartCall {
            peer: prefill.peer.clone(),
            skill: prefill.skill.clone(),
            request,
            sources: None,
        })
        .await
    {
        Ok(v) => Redirect::to(&format!("/ui/calls/{}", enc(&v.id))).into_response(),
        Err(e) => {
            let msg = format!("Not started ({}): {e}", e.code());
            calls_page(&s, &session, &prefill, Some(&msg), StatusCode::BAD_REQUEST).await
        }
    }
}

pub(crate) async fn call(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
) -> Response {
    let Some(c) = calls_of(&s) else {
        return no_calls(&session, "/ui/calls");
    };
    let views = match c.get(&id).await {
        Ok(v) => v,
        Err(e) => {
            let body = html! { p class="notice" { (e.to_string()) } };
            let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::NOT_FOUND);
            return html_page(status, page("Call", "/ui/calls", &session, None, body));
        }
    };
    let body = html! {
        @for v in &views {
            section aria-label=(format!("{} side", v.role)) {
                h2 { "As " (v.role) }
                dl class="facts" {
                    dt { "Call" } dd { code { (v.id) } }
                    dt { "Skill" } dd { (v.skill) }
                    dt { "Peer" } dd { code { (v.peer) } }
                    dt { "State" } dd data-call-state=(format!("{}:{}", v.id, v.role)) { (v.state) }
                    @if v.failure.is_some() { dt { "Failure" } dd data-call-failure=(format!("{}:{}", v.id, v.role)) { (failure_cell(v)) } }
                    @if !v.sources.is_empty() { dt { "Sources applied" } dd { (v.sources.join(", ")) } }
                    @if let Some(b) = &v.box_url {
                        dt { "Box" } dd {
                            code { (b) }
                            @if let Some(a) = &v.attested {
                                " — " (a.platform) ", measurement " code title=(a.measurement) { (short(&a.measurement)) } ", "
                                @if a.hardware_isolation { "hardware-isolated" } @else { strong { "no hardware isolation: its operator can read what is staked" } }
                            } @else { " (not verified yet)" }
                        }
                    }
                }
                @if let Some(d) = &v.disclosure {
                    p class="notice" { "Waiting for you: " (d.text) }
                    (decision_forms(&session, &v.id))
                }
                @if let Some(r) = &v.receipt {
                    h3 { "Receipt" }
                    dl class="facts" {
                        dt { "Run" } dd { code { (r["run_id"].as_str().unwrap_or("")) } }
                        dt { "Status" } dd { (r["status"].as_str().unwrap_or("")) }
                        dt { "Output bucket" } dd { (r["output_bucket"].as_u64().unwrap_or(0)) " B" }
                        dt { "Guard acted" } dd { (if r["guard_acted"].as_bool() == Some(true) { "yes" } else { "no" }) }
                    }
                }
                @if let Some(a) = &v.answer {
                    h3 { "Answer" }
                    pre class="answer" { (a) }
                }
            }
        }
        p { a href=(format!("/ui/ledger?call={}", enc(&id))) { "What this call disclosed (ledger)" } }
    };
    html_page(
        StatusCode::OK,
        page("Call", "/ui/calls", &session, None, body),
    )
}

/// `GET /ui/live/calls`: each call's state and failure code, for the page script.
pub(crate) async fn live_calls(State(s): State<AppState>) -> Response {
    let Some(c) = calls_of(&s) else {
        return Json(json!({ "calls": [] })).into_response();
    };
    let list = c
        .list(Filter {
            limit: Some(200),
            ..Filter::default()
        })
        .await
        .unwrap_or_default();
    let calls: Vec<Value> = list
        .iter()
        .map(|v| {
            let failure = v.failure.as_ref().map(
                |f| json!({ "code": f.code.as_str(), "words": failure_words(f.code.as_str()) }),
            );
            json!({ "key": format!("{}:{}", v.id, v.role), "state": v.state, "failure": failure })
        })
        .collect();
    Json(json!({ "calls": calls })).into_response()
}

// ---- approvals

fn decision_forms(session: &Session, id: &str) -> Markup {
    html! {
        div class="decide" {
            @for (decision, remember, label) in [("allow", false, "Approve"), ("allow", true, "Approve and remember"), ("deny", false, "Deny"), ("deny", true, "Deny and remember")] {
                form method="post" action="/ui/approvals" {
                    (csrf_field(session))
                    input type="hidden" name="id" value=(id);
                    input type="hidden" name="decision" value=(decision);
                    @if remember { input type="hidden" name="remember" value="true"; }
                    button type="submit" data-decision=(decision) { (label) }
                }
            }
        }
    }
}

async fn approvals_page(
    s: &AppState,
    session: &Session,
    notice: Option<&str>,
    status: StatusCode,
) -> Response {
    let Some(c) = calls_of(s) else {
        return no_calls(session, "/ui/approvals");
    };
    let list = c.approvals().await;
    let body = html! {
        @match &list {
            Err(e) => p class="notice" { (e.to_string()) },
            Ok(list) if list.is_empty() => p { "Nothing is waiting for you." },
            Ok(list) => @for v in list {
                section class="approval" aria-label=(format!("Call {}", v.id)) {
                    h2 { (v.skill) " — " (v.role) " side" }
                    @if let Some(d) = &v.disclosure {
                        p { (d.text) }
                        dl class="facts" {
                            dt { "Sources" } dd { @if d.sources.is_empty() { "none" } @else { (d.sources.join(", ")) } }
                            dt { "Peer" } dd { code { (d.peer) } }
                            dt { "Box" } dd { (d.box_url.clone().unwrap_or_default()) " " (d.platform.clone().unwrap_or_default()) }
                            dt { "Hardware isolation" } dd { @if d.hardware_isolation { "yes" } @else { strong { "no" } } }
                            dt { "Sees the plaintext" } dd { (d.provider.clone().unwrap_or_default()) " " (d.provider_host.clone().unwrap_or_default()) }
                        }
                    }
                    p { a href=(format!("/ui/calls/{}", enc(&v.id))) { "The call" } }
                    (decision_forms(session, &v.id))
                }
            },
        }
    };
    html_page(
        status,
        page("Approvals", "/ui/approvals", session, notice, body),
    )
}

pub(crate) async fn approvals(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
) -> Response {
    approvals_page(&s, &session, None, StatusCode::OK).await
}

#[derive(Deserialize)]
pub(crate) struct DecideForm {
    #[serde(default)]
    csrf: String,
    id: String,
    decision: String,
    #[serde(default)]
    remember: Option<String>,
}

pub(crate) async fn decide(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Form(f): Form<DecideForm>,
) -> Response {
    if !session.csrf_ok(&f.csrf) {
        return refused_csrf();
    }
    let Some(c) = calls_of(&s) else {
        return no_calls(&session, "/ui/approvals");
    };
    let allow = match f.decision.as_str() {
        "allow" => true,
        "deny" => false,
        _ => {
            return approvals_page(
                &s,
                &session,
                Some("The decision must be allow or deny."),
                StatusCode::BAD_REQUEST,
            )
            .await;
        }
    };
    match c
        .consent(&f.id, allow, f.remember.as_deref() == Some("true"))
        .await
    {
        Ok(_) => Redirect::to(&format!("/ui/calls/{}", enc(&f.id))).into_response(),
        Err(e) => {
            approvals_page(
                &s,
                &session,
                Some(&format!("Not decided ({}): {e}", e.code())),
                StatusCode::CONFLICT,
            )
            .await
        }
    }
}

// ---- the ledger

#[derive(Deserialize, Default)]
pub(crate) struct LedgerQuery {
    #[serde(default)]
    source: String,
    #[serde(default)]
    call: String,
}

fn entry_what(l: &Line) -> String {
    let e = &l.entry;
    match e.kind {
        EntryKind::Stake => {
            let items: Vec<String> = e
                .items
                .iter()
                .map(|i| match &i.source {
                    Some(s) => format!("source {s} (≤{} B)", i.size_bucket),
                    None => format!("{} (≤{} B)", i.stake, i.size_bucket),
                })
                .collect();
            format!("staked {}", items.join(", "))
        }
        EntryKind::Decision => format!(
            "{} by {}",
            if e.decision == "allow" {
                "allowed"
            } else {
                "refused"
            },
            e.decided_by
        ),
    }
}

pub(crate) async fn ledger(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Query(q): Query<LedgerQuery>,
) -> Response {
    let Some(c) = calls_of(&s) else {
        return no_calls(&session, "/ui/ledger");
    };
    let filter = ledger::Filter {
        source: (!q.source.is_empty()).then(|| q.source.clone()),
        call: (!q.call.is_empty()).then(|| q.call.clone()),
        ..ledger::Filter::default()
    };
    let lines = c.ledger(filter).await.unwrap_or_default();
    let verdict = c.verify_ledger().await.ok();
    // The timeline per source: when each one left (or was refused), newest first.
    let mut per_source: BTreeMap<String, Vec<&Line>> = BTreeMap::new();
    for l in &lines {
        let mut names: Vec<&String> = l.entry.sources.iter().collect();
        names.extend(l.entry.items.iter().filter_map(|i| i.source.as_ref()));
        names.sort();
        names.dedup();
        for n in names {
            per_source.entry(n.clone()).or_default().push(l);
        }
    }
    let body = html! {
        @match &verdict {
            Some(v) if v.ok => p class="ok" { "Verified: " (v.entries) " entries, chained and signed by this node's key." },
            Some(v) => p class="notice" role="alert" { "The ledger does NOT verify: entry " (v.broken_at.unwrap_or(0)) " — " (v.reason.map(|r| r.as_str()).unwrap_or("unknown")) "." },
            None => p class="notice" { "The ledger could not be checked." },
        }
        form method="get" action="/ui/ledger" class="filters" {
            label for="ledger-source" { "Source" }
            input id="ledger-source" name="source" type="text" value=(q.source);
            button type="submit" { "Show" }
        }
        @if !per_source.is_empty() {
            h2 { "Per source" }
            @for (name, entries) in &per_source {
                section class="timeline" aria-label=(format!("Source {name}")) {
                    h3 { code { (name) } }
                    ol reversed {
                        @for l in entries.iter().rev() {
                            li {
                                time { (when(l.entry.at)) } " — " (entry_what(l)) " for "
                                @if l.entry.role == "caller" { "peer " code title=(l.entry.peer) { (short(&l.entry.peer)) } "'s skill " } @else { "your skill " }
                                (l.entry.skill) " via "
                                (l.entry.box_url.clone().unwrap_or_else(|| "no box yet".into()))
                                @if !l.entry.hardware_isolation { " (no hardware isolation)" }
                            }
                        }
                    }
                }
            }
        }
        h2 { "All entries" }
        @if lines.is_empty() { p { "Nothing has been staked or decided yet." } } @else {
            table {
                thead { tr {
                    th scope="col" { "#" } th scope="col" { "When" } th scope="col" { "What" }
                    th scope="col" { "Call" } th scope="col" { "Skill" } th scope="col" { "Box" }
                    th scope="col" { "Sees plaintext" }
                } }
                tbody {
                    @for l in lines.iter().rev() {
                        tr data-ledger-seq=(l.entry.seq) {
                            td { (l.entry.seq) }
                            td { (when(l.entry.at)) }
                            td { (entry_what(l)) }
                            td { a href=(format!("/ui/calls/{}", enc(&l.entry.call))) { code { (short(&l.entry.call)) } } " (" (l.entry.role) ")" }
                            td { (l.entry.skill) }
                            td {
                                (l.entry.box_url.clone().unwrap_or_default()) " "
                                (l.entry.platform.clone().unwrap_or_default())
                                @if !l.entry.hardware_isolation { ", no hardware isolation" }
                            }
                            td { (l.entry.provider.clone().unwrap_or_default()) " " (l.entry.provider_host.clone().unwrap_or_default()) }
                        }
                    }
                }
            }
        }
    };
    html_page(
        StatusCode::OK,
        page("Ledger", "/ui/ledger", &session, None, body),
    )
}

// ---- peers

async fn peers_page(
    s: &AppState,
    session: &Session,
    notice: Option<&str>,
    status: StatusCode,
) -> Response {
    let Some(h) = s.peers.get() else {
        let body = html! { p { "The peer network is not running on this node." } };
        return html_page(
            StatusCode::OK,
            page("Peers", "/ui/peers", session, notice, body),
        );
    };
    let peers = h.peers().await.unwrap_or_default();
    let listen: Vec<String> = h
        .listen_addrs()
        .await
        .unwrap_or_default()
        .iter()
        .map(ToString::to_string)
        .collect();
    let me = h.local_peer_id().to_base58();
    let body = html! {
        dl class="facts" {
            dt { "Peer id" } dd { code { (me) } }
            dt { "Listening on" } dd { @for a in &listen { code { (a) "/p2p/" (me) } br; } }
        }
        h2 { "Connected" }
        @if peers.is_empty() { p { "No peer is connected." } } @else {
            table {
                thead { tr { th scope="col" { "Peer" } th scope="col" { "Addresses" } th scope="col" { "Agent" } } }
                tbody {
                    @for p in &peers {
                        tr {
                            td { code { (p.peer) } }
                            td { (p.addresses.join(", ")) }
                            td { (capped(p.agent_version.as_deref().unwrap_or(""), 80)) }
                        }
                    }
                }
            }
        }
        h2 { "Connect to a peer" }
        form method="post" action="/ui/peers" class="stack" {
            (csrf_field(session))
            label for="peer-addr" { "Multiaddr (…/p2p/PEER_ID)" }
            input id="peer-addr" name="addr" type="text" required;
            button type="submit" { "Connect" }
        }
    };
    html_page(status, page("Peers", "/ui/peers", session, notice, body))
}

pub(crate) async fn peers(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
) -> Response {
    peers_page(&s, &session, None, StatusCode::OK).await
}

#[derive(Deserialize)]
pub(crate) struct PeerForm {
    #[serde(default)]
    csrf: String,
    addr: String,
}

pub(crate) async fn add_peer(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Form(f): Form<PeerForm>,
) -> Response {
    if !session.csrf_ok(&f.csrf) {
        return refused_csrf();
    }
    let addr: skillbox_peers::Multiaddr = match f.addr.trim().parse() {
        Ok(a) => a,
        Err(_) => {
            return peers_page(
                &s,
                &session,
                Some("That is not a multiaddr."),
                StatusCode::BAD_REQUEST,
            )
            .await;
        }
    };
    let Some(h) = s.peers.get() else {
        return peers_page(&s, &session, None, StatusCode::SERVICE_UNAVAILABLE).await;
    };
    match h.dial(addr).await {
        Ok(_) => Redirect::to("/ui/peers").into_response(),
        Err(e) => {
            peers_page(
                &s,
                &session,
                Some(&format!("Cannot connect: {e}")),
                StatusCode::BAD_GATEWAY,
            )
            .await
        }
    }
}
