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
            p { "In a terminal on this node's machine, run " code { "skillbox dashboard" } ". It prints a sign-in code: type it here. A code works once, for a minute, and opens a session: the browser keeps only the session's id." }
            // What a look-alike page would ask for: saying so here teaches the human that a
            // page asking for the token is not this node's (review 24a L5).
            p { "This page never asks for the operator token (" code { "api.token" } "). A page at this address that does is not your node's: do not paste the token there." }
            // The name is not shown here: this page answers anyone, and the name is what keeps
            // the cookie from other local ports.
            @if by_address { p class="notice" data-by-address="" { "You opened the dashboard by address: a browser sends its cookie to every program listening on this machine. Prefer the " code { "sbx-….localhost" } " address " code { "skillbox dashboard" } " printed." } }
            @if let Some(e) = error { p class="notice" role="alert" { (e) } }
            form method="post" action="/ui/login" {
                label for="code" { "Sign-in code" }
                input id="code" name="code" type="text" autocomplete="one-time-code" autocapitalize="none" spellcheck="false" maxlength="64" required;
                button type="submit" { "Sign in" }
            }
        },
    )
}

pub(crate) async fn login_page(headers: HeaderMap) -> Response {
    html_page(StatusCode::OK, login_form(None, by_address(&headers)))
}

/// The sign-in form: a code from `POST /dashboard/codes`. A `token` field, as the sign-in page
/// took before, is no field of it: the operator token opens no session here.
#[derive(Deserialize)]
pub(crate) struct LoginForm {
    #[serde(default)]
    code: String,
}

/// What a refused code is told, whatever was wrong with it (unknown, used, expired, issued
/// under a replaced token, another node's): the same words, so a try learns nothing.
const CODE_REFUSED: &str = "That is not a sign-in code this node gave, or it was used or is more than a minute old. Run skillbox dashboard for a new one.";

pub(crate) async fn login(
    State(s): State<AppState>,
    Extension(sessions): Extension<Arc<Sessions>>,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> Response {
    let code = Zeroizing::new(f.code);
    // The generation before the code is spent: a rotation in between leaves a session already
    // ended.
    let epoch = s.operator_epoch();
    if !s.signin_codes.redeem(&code, epoch) {
        return html_page(
            StatusCode::UNAUTHORIZED,
            login_form(Some(CODE_REFUSED), by_address(&headers)),
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
                    Some(
                        "The node could not start a session; run skillbox dashboard for a new code and try again.",
                    ),
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use axum::body::Body;
    use skillbox_node::{DataDir, Node};
    use tower::ServiceExt;

    /// A sign-in code from the node behind `router`, asked for with `token` as `skillbox
    /// dashboard` asks for one (`POST /dashboard/codes`).
    pub(crate) async fn signin_code(router: &axum::Router, token: &str) -> String {
        let req = axum::http::Request::post("/dashboard/codes")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::empty())
            .expect("request");
        let resp = router.clone().oneshot(req).await.expect("infallible");
        assert_eq!(resp.status(), StatusCode::CREATED);
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .expect("body");
        let v: Value = serde_json::from_slice(&bytes).expect("JSON");
        assert_eq!(v["path"], "/ui/login");
        v["code"].as_str().expect("a code").to_owned()
    }

    /// A node and its dashboard, in this process.
    struct Dashboard {
        _dir: tempfile::TempDir,
        _node: Node,
        router: axum::Router,
        token: String,
    }

    impl Dashboard {
        fn open() -> Dashboard {
            let dir = skillbox_testkit::node_api::init_dir();
            let node = Node::open(dir.path()).expect("open");
            let state = node.state();
            Dashboard {
                router: skillbox_node::api::router_with(state.clone(), crate::mounts(state)),
                token: DataDir::new(dir.path()).load_api_token().expect("token"),
                _dir: dir,
                _node: node,
            }
        }

        /// The sign-in form posted with `field=value`: the status and the cookie set, if any.
        async fn sign_in_with(&self, field: &str, value: &str) -> (StatusCode, Option<String>) {
            let body = format!(
                "{}={}",
                skillbox_node::api::url_component(field),
                skillbox_node::api::url_component(value)
            );
            let req = axum::http::Request::post("/ui/login")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(body))
                .expect("request");
            let resp = self.router.clone().oneshot(req).await.expect("infallible");
            let cookie = resp
                .headers()
                .get(header::SET_COOKIE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            (resp.status(), cookie)
        }

        async fn page(&self, path: &str) -> String {
            let req = axum::http::Request::get(path)
                .body(Body::empty())
                .expect("request");
            let resp = self.router.clone().oneshot(req).await.expect("infallible");
            let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .expect("body");
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }

    /// Review 24a L5: a code a look-alike page collected, or one seen on a screen, is worth one
    /// sign-in at most, and the human's own use spends it: the second use is refused.
    #[tokio::test]
    async fn a_sign_in_code_opens_one_session_and_is_refused_the_second_time() {
        let d = Dashboard::open();
        let code = signin_code(&d.router, &d.token).await;
        let (status, cookie) = d.sign_in_with("code", &code).await;
        assert_eq!(status, StatusCode::SEE_OTHER);
        assert!(cookie.is_some_and(|c| c.starts_with("skillbox_ui=")));
        let (again, cookie) = d.sign_in_with("code", &code).await;
        assert_eq!(
            (again, cookie),
            (StatusCode::UNAUTHORIZED, None),
            "a sign-in code opened a second session"
        );
        // As a human types it: capitals, no dashes.
        let code = signin_code(&d.router, &d.token).await;
        let typed = code.to_uppercase().replace('-', "");
        assert_eq!(
            d.sign_in_with("code", &typed).await.0,
            StatusCode::SEE_OTHER
        );
    }

    /// A code one node issued opens nothing on another (codes live in the issuing node's
    /// memory), and it stays good on its own node.
    #[tokio::test]
    async fn a_code_from_another_node_is_refused() {
        let (ours, theirs) = (Dashboard::open(), Dashboard::open());
        let code = signin_code(&theirs.router, &theirs.token).await;
        let (status, cookie) = ours.sign_in_with("code", &code).await;
        assert_eq!(
            (status, cookie),
            (StatusCode::UNAUTHORIZED, None),
            "another node's code signed in"
        );
        assert_eq!(
            theirs.sign_in_with("code", &code).await.0,
            StatusCode::SEE_OTHER
        );
    }

    /// Review 24a L5: the sign-in page asked for `api.token`, so a look-alike page on the node's
    /// port while it was down collected the token (good for everything, for ever). The page
    /// now neither asks for it nor takes it; asking for a code needs the token, which a page
    /// cannot send.
    #[tokio::test]
    async fn the_sign_in_page_neither_asks_for_nor_takes_the_token() {
        let d = Dashboard::open();
        let (status, cookie) = d.sign_in_with("token", &d.token).await;
        assert_eq!(
            (status, cookie),
            (StatusCode::UNAUTHORIZED, None),
            "the operator token signed in on the page"
        );
        assert_eq!(
            d.sign_in_with("code", &d.token).await.0,
            StatusCode::UNAUTHORIZED
        );
        let page = d.page("/ui/login").await;
        assert!(
            !page.contains("type=\"password\"") && page.contains("name=\"code\""),
            "{page}"
        );
        assert!(page.contains("skillbox dashboard"), "{page}");
        // No code without the operator's token.
        for auth in [None, Some("Bearer nope")] {
            let mut req = axum::http::Request::post("/dashboard/codes");
            if let Some(a) = auth {
                req = req.header(header::AUTHORIZATION, a);
            }
            let req = req.body(Body::empty()).expect("request");
            let resp = d.router.clone().oneshot(req).await.expect("infallible");
            assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{auth:?}");
        }
    }
}
