//! The dashboard's pages and form handlers. Each handler reads through the node's library API
//! (skills, sources, calls, the board, the peer network), renders with `maud` (every value is
//! escaped) and, after a form, redirects (303) so a reload never posts twice.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, Form, FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};
use skillbox_calls::machine::FailureCode;
use skillbox_node::SourceKind;
use skillbox_node::api::{AppState, url_component as enc};
use skillbox_node::calls::records::Filter;
use skillbox_node::calls::{CallView, Calls, StartCall};
use skillbox_node::ledger::Line;
use zeroize::Zeroizing;

use crate::{Base, Session, Sessions, cleared_cookie, session_cookie};

mod board;
mod calls;
mod ledger;
mod overview;
mod peers;
mod session;
mod skills;
mod sources;

pub(crate) use board::*;
pub(crate) use calls::*;
pub(crate) use ledger::*;
pub(crate) use overview::*;
pub(crate) use peers::*;
pub(crate) use session::*;
pub(crate) use skills::*;
pub(crate) use sources::*;

const NAV: &[(&str, &str)] = &[
    ("/ui", "Overview"),
    ("/ui/board", "Board"),
    ("/ui/skills", "My skills"),
    ("/ui/sources", "Sources"),
    ("/ui/calls", "Calls"),
    ("/ui/approvals", "Approvals"),
    ("/ui/ledger", "Ledger"),
    ("/ui/peers", "Peers"),
    ("/ui/metrics", "Metrics"),
];

fn html_page(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

/// How a page is shown: the status it answers with and the notice above its body. Asked for, it
/// is [`Showing::OK`]; after a form that was not done, the form's page again saying why
/// ([`Showing::again`]).
#[derive(Clone, Copy)]
struct Showing<'a> {
    status: StatusCode,
    notice: Option<&'a str>,
}

impl<'a> Showing<'a> {
    /// 200, no notice: the page as a `GET` asks for it.
    const OK: Showing<'static> = Showing {
        status: StatusCode::OK,
        notice: None,
    };

    /// A page answered with `status` and no notice (what went wrong is in its body).
    const fn status(status: StatusCode) -> Showing<'static> {
        Showing {
            status,
            notice: None,
        }
    }

    /// The page again after a form that was not done: `status`, and `why`.
    fn again(status: StatusCode, why: &'a str) -> Showing<'a> {
        Showing {
            status,
            notice: Some(why),
        }
    }
}

/// A signed-in page as `shown` says (its status, a notice or none): the navigation, the
/// sign-out form, the notice, the body.
fn page(shown: Showing<'_>, title: &str, here: &str, session: &Session, body: Markup) -> Response {
    html_page(
        shown.status,
        framed(title, here, session, shown.notice, body),
    )
}

/// Every page's head; the signed-in pages load the dashboard's script too.
fn head(title: &str, script: bool) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " · skillbox" }
            link rel="stylesheet" href="/ui/static/app.css";
            @if script {
                script src="/ui/static/app.js" defer {}
            }
        }
    }
}

fn framed(
    title: &str,
    here: &str,
    session: &Session,
    notice: Option<&str>,
    body: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title, true))
            body {
                a class="skip" href="#main" { "Skip to content" }
                header {
                    nav aria-label="Dashboard" {
                        ul {
                            @for (href, label) in NAV {
                                li {
                                    @if *href == here {
                                        a href=(session.at(href)) aria-current="page" { (label) }
                                    } @else {
                                        a href=(session.at(href)) { (label) }
                                    }
                                }
                            }
                        }
                    }
                    form method="post" action=(session.at("/ui/logout")) class="logout" {
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
            (head(title, false))
            body { main id="main" { h1 { (title) } (body) } }
        }
    }
}

/// A form that carries nothing but its CSRF token (remove, sign out, check now).
#[derive(Deserialize)]
pub(crate) struct CsrfOnly {}

/// A form posted from a dashboard page, with the session that posted it: extracted only once
/// the form's CSRF token is that session's, so no handler can forget the check (a wrong or
/// missing token gets the refusal page before the handler runs).
pub(crate) struct Posted<T> {
    pub(crate) session: Session,
    pub(crate) form: T,
}

#[derive(Deserialize)]
struct WithCsrf<T> {
    #[serde(default)]
    csrf: String,
    #[serde(flatten)]
    form: T,
}

impl<S: Send + Sync, T: serde::de::DeserializeOwned + Send> FromRequest<S> for Posted<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        let (mut parts, body) = req.into_parts();
        let Extension(session) = Extension::<Session>::from_request_parts(&mut parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let Form(f) = Form::<WithCsrf<T>>::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(IntoResponse::into_response)?;
        if !session.csrf_ok(&f.csrf) {
            return Err(refused_csrf());
        }
        Ok(Posted {
            session,
            form: f.form,
        })
    }
}

/// `GET` of a page that [`$page`] renders from the node's state: the same page a form shows
/// again, without a notice.
macro_rules! page_route {
    ($(#[$doc:meta])* $name:ident => $page:ident) => {
        $(#[$doc])*
        pub(crate) async fn $name(
            State(s): State<AppState>,
            Extension(session): Extension<Session>,
        ) -> Response {
            $page(&s, &session, Showing::OK).await
        }
    };
}
use page_route;

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

/// The page a calls-driven page shows when the node runs without its peer network.
fn no_calls(session: &Session, here: &str) -> Response {
    let body = html! { p { "The calls driver is not running (no peer network)." } };
    page(Showing::OK, "Calls", here, session, body)
}

fn calls_of(s: &AppState) -> Option<Calls> {
    s.calls.get().cloned()
}

/// `f` over the node's state on the blocking pool (the store is synchronous SQLite): its value,
/// or the error's words for the page.
async fn store<T: Send + 'static>(
    s: &AppState,
    f: impl FnOnce(&AppState) -> skillbox_node::Result<T> + Send + 'static,
) -> Result<T, String> {
    let s = s.clone();
    match tokio::task::spawn_blocking(move || f(&s)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the node's worker failed".into()),
    }
}

/// A form's change to what this node may offer (a skill or source added or removed) is done: the
/// advert goes out now rather than at the next interval, and the browser goes back to the page
/// `to` (its logical address) at the session's.
fn offer_changed(s: &AppState, session: &Session, to: &str) -> Response {
    s.offer_changed.notify_one();
    Redirect::to(&session.at(to)).into_response()
}

/// A table row's remove control: a CSRF-guarded post to `action` (a logical address) carrying `fields`, its button
/// labelled with what it removes.
fn remove_form(session: &Session, action: &str, what: &str, fields: Markup) -> Markup {
    row_form(session, action, "Remove", what, fields)
}

/// A table row's control: a CSRF-guarded post to `action` carrying `fields`, its button saying
/// `verb` and, to a screen reader, what it acts on.
fn row_form(session: &Session, action: &str, verb: &str, what: &str, fields: Markup) -> Markup {
    html! {
        form method="post" action=(session.at(action)) {
            (csrf_field(session))
            (fields)
            button type="submit" aria-label=(format!("{verb} {what}")) { (verb) }
        }
    }
}

/// A table's header row: a column per name, and the row actions' column (a form's button) last,
/// named for screen readers only.
fn columns(names: &[&str], actions: Option<&str>) -> Markup {
    html! {
        thead { tr {
            @for n in names { th scope="col" { (n) } }
            @if let Some(a) = actions { th scope="col" { span class="sr" { (a) } } }
        } }
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

/// A peer's text as a human reads it here: one line of at most `max` characters with every
/// control, bidi and invisible character gone. Markup is no risk (maud escapes it), but a right-
/// to-left override or an isolate reorders what a human reads (a description that reads as
/// another skill's, an answer whose words are not the order the bytes say) and zero-width or tag
/// characters hide text a human never sees. One cleaning for every surface: the CLI's
/// (`peer_text.rs`) and the agent surfaces' are this same function.
pub(crate) use skillbox_reach::catalog::clean_untrusted as peer_line;
/// A peer's text that keeps its lines (a call's answer), otherwise cleaned as [`peer_line`].
pub(crate) use skillbox_reach::catalog::clean_untrusted_lines as peer_lines;

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The header rows the pages wrote out by hand before [`columns`]: the same bytes.
    #[test]
    fn a_header_row_is_the_markup_the_pages_wrote_by_hand() {
        let by_hand = html! { thead { tr {
            th scope="col" { "Name" } th scope="col" { "Kind" }
            th scope="col" { span class="sr" { "Remove" } }
        } } };
        assert_eq!(
            columns(&["Name", "Kind"], Some("Remove")).into_string(),
            by_hand.into_string()
        );
        let by_hand = html! { thead { tr {
            th scope="col" { "#" } th scope="col" { "Description (from the peer)" }
        } } };
        assert_eq!(
            columns(&["#", "Description (from the peer)"], None).into_string(),
            by_hand.into_string()
        );
    }
}
