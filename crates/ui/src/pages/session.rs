//! Static assets, signing in and out.

use super::*;
use axum::http::HeaderMap;

// ---- static

pub(crate) async fn css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../../assets/app.css"),
    )
        .into_response()
}

pub(crate) async fn js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../../assets/app.js"),
    )
        .into_response()
}

// ---- sign in and out

/// Whether the page was asked for by address (`127.0.0.1:PORT`) rather than under a
/// `*.localhost` name: a browser sends the address's cookie to every port of it.
fn by_address(headers: &HeaderMap) -> bool {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(|h| h.rsplit_once(':').map_or(h, |(name, _)| name))
        .is_none_or(|name| !name.to_ascii_lowercase().ends_with(".localhost"))
}

fn login_form(error: Option<&str>, by_address: bool) -> Markup {
    bare(
        "Sign in",
        html! {
            p { "Paste this node's operator token (the file " code { "api.token" } " in its data dir). It opens a session: the browser keeps only the session's id, never the token." }
            // The name is not shown here: this page answers anyone, and the name is what keeps
            // the cookie from other local ports.
            @if by_address { p class="notice" data-by-address="" { "You opened the dashboard by address: a browser sends its cookie to every program listening on this machine. Prefer the " code { "sbx-….localhost" } " address " code { "skillbox node" } " printed." } }
            @if let Some(e) = error { p class="notice" role="alert" { (e) } }
            form method="post" action="/ui/login" {
                label for="token" { "Operator token" }
                input id="token" name="token" type="password" autocomplete="current-password" required;
                button type="submit" { "Sign in" }
            }
        },
    )
}

pub(crate) async fn login_page(headers: HeaderMap) -> Response {
    html_page(StatusCode::OK, login_form(None, by_address(&headers)))
}

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    token: String,
}

pub(crate) async fn login(
    State(s): State<AppState>,
    Extension(sessions): Extension<Arc<Sessions>>,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> Response {
    let token = Zeroizing::new(f.token.trim().to_owned());
    // The generation before the check: a rotation in between leaves a session already ended.
    let epoch = s.operator_epoch();
    if !is_operator(&s, &token) {
        return html_page(
            StatusCode::UNAUTHORIZED,
            login_form(
                Some("That is not this node's operator token."),
                by_address(&headers),
            ),
        );
    }
    match sessions.open(epoch) {
        // Into the session's own address, the only path its cookie is sent to.
        Ok(opened) => (
            StatusCode::SEE_OTHER,
            [
                (header::LOCATION, opened.base.path()),
                (header::SET_COOKIE, session_cookie(&opened.id, &opened.base)),
            ],
        )
            .into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "no random bytes for a dashboard session");
            html_page(
                StatusCode::SERVICE_UNAVAILABLE,
                login_form(
                    Some("The node could not start a session; try again."),
                    by_address(&headers),
                ),
            )
        }
    }
}

pub(crate) async fn logout(
    Extension(sessions): Extension<Arc<Sessions>>,
    Extension(base): Extension<Base>,
    Posted { session, form: _ }: Posted<CsrfOnly>,
) -> Response {
    // Ended here, not only cleared in this browser: a copy of the cookie elsewhere is dead too.
    sessions.end(&session.key);
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/ui/login".to_owned()),
            (header::SET_COOKIE, cleared_cookie(&base)),
        ],
    )
        .into_response()
}
