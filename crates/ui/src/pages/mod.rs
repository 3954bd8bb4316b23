//! The dashboard's pages and form handlers. Each handler reads through the node's library API
//! (skills, sources, calls, the board, the peer network), renders with `maud` (every value is
//! escaped) and, after a form, redirects (303) so a reload never posts twice. A form whose post
//! must not be done twice even when the browser re-sends it (the skill import, which replaces
//! what the owner set since) also carries a one-time ticket ([`FormTickets`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

    /// The page as asked for (200), with `what` above it.
    fn noting(what: &'a str) -> Showing<'a> {
        Showing::again(StatusCode::OK, what)
    }
}

/// Tickets a session's import form may hold at once (one per rendering: tabs, error pages); one
/// more drops the oldest, whose post is then refused as a spent one would be.
const TICKETS: usize = 8;
/// How long a rendered form's ticket is good: as long as a session left alone lives.
const TICKET_LIFE: Duration = crate::IDLE;
/// Notes of forms done that a session holds until their page is asked for (the redirect asks at
/// once; more imports before that drop the oldest).
const NOTES: usize = 4;
/// How long a done form's notes wait for the page its redirect leads to.
const NOTES_LIFE: Duration = Duration::from_secs(10 * 60);
/// The random bytes of a ticket and of a notes id.
const ONE_TIME_BYTES: usize = 16;

/// One-time values of the sessions' forms, in the node's memory (review 27 F4). The CSRF token
/// is the session's, good for every post, so a browser that re-sends a post (a reload of the
/// page it answered, a restored tab) did the post again: a skill import replaced the skill
/// again, and the ceilings and key the owner had set since (`skill set`) with it. Now:
///
/// - each rendering of such a form carries a **ticket** ([`FormTickets::ticket`]) that one post
///   spends ([`FormTickets::spend`]): the same body sent again carries a spent ticket and is
///   refused before anything is read or written;
/// - what the form's page would have said (an import's notes) is kept here under a random id
///   ([`FormTickets::keep_notes`]) and the post answers 303 to the page with that id, which
///   shows them once ([`FormTickets::take_notes`]): a reload asks for the page again, never
///   posts.
///
/// Both are the session's own (keyed by its secret digest; another session's id finds nothing),
/// a few at a time, for a while; sessions as many as the dashboard holds ([`crate::MAX_SESSIONS`],
/// the least recently used dropped). Notes hold what the page shows of an import (the model and
/// the key source's name, never a key or a body).
#[derive(Default)]
pub(crate) struct FormTickets {
    map: Mutex<HashMap<[u8; 32], OneTime>>,
}

/// One session's tickets and notes, oldest first.
struct OneTime {
    used: Instant,
    tickets: VecDeque<(String, Instant)>,
    notes: VecDeque<(String, Instant, Markup)>,
}

impl FormTickets {
    /// A new ticket for a form `session`'s page renders; empty (a form every post of which is
    /// refused, saying so) if the system has no randomness to give.
    pub(crate) fn ticket(&self, session: &Session) -> String {
        self.ticket_at(session, Instant::now())
    }

    /// Whether `presented` is a ticket drawn for `session` and not yet spent or too old; it is
    /// spent by this call either way.
    pub(crate) fn spend(&self, session: &Session, presented: &str) -> bool {
        self.spend_at(session, presented, Instant::now())
    }

    /// Keep `notes` for `session`'s next page that asks for them; their id, `None` if the
    /// system has no randomness to give (the caller then shows them at once).
    pub(crate) fn keep_notes(&self, session: &Session, notes: Markup) -> Option<String> {
        self.keep_notes_at(session, notes, Instant::now())
    }

    /// The notes kept under `id` for `session`, once: a second ask, another session's, or one
    /// after [`NOTES_LIFE`] finds none.
    pub(crate) fn take_notes(&self, session: &Session, id: &str) -> Option<Markup> {
        self.take_notes_at(session, id, Instant::now())
    }

    fn ticket_at(&self, session: &Session, now: Instant) -> String {
        let Ok(bytes) = skillbox_node::crypto::random_bytes::<ONE_TIME_BYTES>() else {
            return String::new();
        };
        let ticket = hex::encode(bytes);
        self.with(session, now, |held| {
            if held.tickets.len() >= TICKETS {
                held.tickets.pop_front();
            }
            held.tickets.push_back((ticket.clone(), now));
        });
        ticket
    }

    fn spend_at(&self, session: &Session, presented: &str, now: Instant) -> bool {
        if presented.len() != 2 * ONE_TIME_BYTES {
            return false;
        }
        self.with(session, now, |held| {
            let at = held
                .tickets
                .iter()
                .position(|(t, _)| crate::same_hex(t, presented));
            at.and_then(|i| held.tickets.remove(i)).is_some()
        })
    }

    fn keep_notes_at(&self, session: &Session, notes: Markup, now: Instant) -> Option<String> {
        let id = hex::encode(skillbox_node::crypto::random_bytes::<ONE_TIME_BYTES>().ok()?);
        self.with(session, now, |held| {
            if held.notes.len() >= NOTES {
                held.notes.pop_front();
            }
            held.notes.push_back((id.clone(), now, notes));
        });
        Some(id)
    }

    fn take_notes_at(&self, session: &Session, id: &str, now: Instant) -> Option<Markup> {
        if id.len() != 2 * ONE_TIME_BYTES {
            return None;
        }
        self.with(session, now, |held| {
            let at = held
                .notes
                .iter()
                .position(|(n, _, _)| crate::same_hex(n, id))?;
            held.notes.remove(at).map(|(_, _, notes)| notes)
        })
    }

    /// `f` over `session`'s entry at `now`, made if missing, with what has expired gone (from
    /// every session: an ended one's entry goes once it holds nothing live).
    fn with<T>(&self, session: &Session, now: Instant, f: impl FnOnce(&mut OneTime) -> T) -> T {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, held| {
            held.tickets
                .retain(|(_, at)| now.duration_since(*at) < TICKET_LIFE);
            held.notes
                .retain(|(_, at, _)| now.duration_since(*at) < NOTES_LIFE);
            !(held.tickets.is_empty() && held.notes.is_empty())
        });
        if !map.contains_key(&session.key) {
            skillbox_node::api::make_room(&mut map, crate::MAX_SESSIONS, |h| h.used);
        }
        let held = map.entry(session.key).or_insert_with(|| OneTime {
            used: now,
            tickets: VecDeque::new(),
            notes: VecDeque::new(),
        });
        held.used = now;
        f(held)
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

    fn session(n: u8) -> Session {
        Session {
            csrf: hex::encode([n; 32]),
            key: [n; 32],
            base: Base(hex::encode([n; 16])),
        }
    }

    /// Review 27 F4: a ticket is good for one post, of its own session, while it lives; a
    /// session holds [`TICKETS`] at once (the oldest gives way).
    #[test]
    fn a_forms_ticket_is_good_for_one_post_of_its_session() {
        let forms = FormTickets::default();
        let (a, b) = (session(1), session(2));
        let t0 = Instant::now();
        let ticket = forms.ticket_at(&a, t0);
        assert_eq!(ticket.len(), 2 * ONE_TIME_BYTES);
        assert!(!forms.spend_at(&b, &ticket, t0), "another session's");
        for other in ["", "00", &"ab".repeat(ONE_TIME_BYTES), &"zz".repeat(16)] {
            assert!(!forms.spend_at(&a, other, t0), "{other:?}");
        }
        assert!(forms.spend_at(&a, &ticket, t0));
        assert!(!forms.spend_at(&a, &ticket, t0), "spent twice");

        let old = forms.ticket_at(&a, t0);
        assert!(!forms.spend_at(&a, &old, t0 + TICKET_LIFE), "too old");

        let drawn: Vec<String> = (0..=TICKETS).map(|_| forms.ticket_at(&a, t0)).collect();
        assert!(!forms.spend_at(&a, &drawn[0], t0), "the oldest gave way");
        for t in &drawn[1..] {
            assert!(forms.spend_at(&a, t, t0));
        }
    }

    /// An import's notes are shown once, to their session, while they live; a session holds
    /// [`NOTES`] (the oldest gives way), and the map as many sessions as the dashboard holds.
    #[test]
    fn notes_are_taken_once_and_everything_is_bounded() {
        let forms = FormTickets::default();
        let (a, b) = (session(1), session(2));
        let t0 = Instant::now();
        let id = forms
            .keep_notes_at(&a, html! { p { "kept" } }, t0)
            .expect("an id");
        assert!(
            forms.take_notes_at(&b, &id, t0).is_none(),
            "another session's"
        );
        let notes = forms.take_notes_at(&a, &id, t0).expect("shown once");
        assert_eq!(notes.into_string(), "<p>kept</p>");
        assert!(forms.take_notes_at(&a, &id, t0).is_none(), "shown twice");

        let id = forms.keep_notes_at(&a, html! {}, t0).expect("an id");
        assert!(forms.take_notes_at(&a, &id, t0 + NOTES_LIFE).is_none());

        let ids: Vec<String> = (0..=NOTES)
            .map(|_| forms.keep_notes_at(&a, html! {}, t0).expect("an id"))
            .collect();
        assert!(forms.take_notes_at(&a, &ids[0], t0).is_none());
        assert!(forms.take_notes_at(&a, &ids[NOTES], t0).is_some());

        let forms = FormTickets::default();
        let first = forms.ticket_at(&session(0), t0);
        for n in 1..=crate::MAX_SESSIONS as u8 {
            forms.ticket_at(&session(n), t0 + Duration::from_millis(u64::from(n)));
        }
        let held = forms.map.lock().expect("map").len();
        assert_eq!(held, crate::MAX_SESSIONS);
        assert!(
            !forms.spend_at(&session(0), &first, t0 + Duration::from_secs(1)),
            "the least recently used session's entry gave way"
        );
    }

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
