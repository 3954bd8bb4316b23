//! Static assets, signing in and out.

use super::*;

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
