//! Sources: names, kinds, sizes, the shareable flag; add, unshare and remove. Content is never
//! shown, and neither is a name an older node took from a pasted provider key.

use super::*;
use skillbox_node::SourceMeta;
pub(crate) use skillbox_node::sources::shown_name;
use skillbox_node::sources::{is_a_stored_pasted_key_name, reads_as_a_pasted_key};

// ---- sources

async fn sources_page(s: &AppState, session: &Session, shown: Showing<'_>) -> Response {
    let list = store(s, |s| s.sources.list()).await;
    let body = html! {
        p { "Content is never shown back: names, kinds, sizes and a keyed digest only. Only sources marked shareable can be staked into a call, and a secret never is." }
        @match &list {
            Err(e) => p class="notice" { (e) },
            Ok(list) => table {
                (columns(&["Name", "Kind", "Size", "Shareable", "Digest"], Some("Actions")))
                tbody {
                    @for m in list {
                        (source_row(session, m))
                    }
                }
            },
        }
        h2 { "Add or replace a source" }
        form method="post" action=(session.at("/ui/sources")) class="stack" autocomplete="off" {
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
    page(shown, "Sources", "/ui/sources", session, body)
}

page_route!(sources => sources_page);

/// A form's handle names no source of this page's list (removed since, or another session's).
const NOT_LISTED: &str = "That source is not in this page's list any more (it was removed, or the page is from another session): reload the page.";
/// A form posted neither a name nor a handle, or both.
const NO_SOURCE_NAMED: &str = "The form named no source: reload the page.";
const NO_SUCH_SOURCE: &str = "There is no such source: reload the page.";
/// The store failed on a source whose name must not be shown (its error could hold the name).
const NOT_CHANGED: &str = "The node could not change that source: reload the page and try again.";

/// A source's row. One an older node stored under a pasted provider key is shown as every
/// surface shows it ([`shown_name`]: a fixed label and the key's first few characters) with the
/// advice to revoke it, and its forms post the session's opaque handle for it: the key stands
/// nowhere on the page (a page is seen, cached, screenshotted), not in a cell, an attribute or a
/// hidden field.
fn source_row(session: &Session, m: &SourceMeta) -> Markup {
    let key_named = reads_as_a_pasted_key(&m.name);
    let shown = shown_name(&m.name);
    let field = if key_named {
        let handle = session.source_handle(&m.name);
        html! { input type="hidden" name="handle" value=(handle); }
    } else {
        html! { input type="hidden" name="name" value=(m.name); }
    };
    html! {
        tr data-source=[(!key_named).then_some(&m.name)] {
            td {
                @if key_named {
                    span class="key-name" {
                        (shown) ". Revoke that key with its provider, then remove this source."
                    }
                } @else {
                    code { (m.name) }
                }
            }
            td { (m.kind.as_str()) }
            td { (m.size) " B" }
            td { @if m.shareable { "yes" } @else { "no" } }
            td { code title=(m.digest) { (short(&m.digest)) } }
            td {
                @if m.shareable {
                    (row_form(session, "/ui/sources/unshare", "Unshare", &shown, field.clone()))
                }
                (remove_form(session, "/ui/sources/delete", &shown, field))
            }
        }
    }
}

/// [`shown_name`] of each of `names`, joined for a line of text (a skill's required sources, a
/// call's sources: an older node's declaration or source may hold a pasted key).
pub(crate) fn sources_shown<S: AsRef<str>>(names: &[S]) -> String {
    names
        .iter()
        .map(|n| shown_name(n.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Deserialize)]
pub(crate) struct AddSource {
    name: String,
    kind: String,
    content: String,
    #[serde(default)]
    shareable: Option<String>,
}

pub(crate) async fn add_source(
    State(s): State<AppState>,
    Posted { session, form: f }: Posted<AddSource>,
) -> Response {
    let content = Zeroizing::new(f.content.into_bytes());
    let name = f.name.trim().to_owned();
    let checked = skillbox_node::sources::check_name(&name)
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
            store(&s, move |s| {
                s.sources.put_with(&name, kind, &content, shareable)
            })
            .await
        }
        Err(e) => Err(e),
    };
    match put {
        Ok(_) => offer_changed(&s, &session, "/ui/sources"),
        Err(e) => sources_page(&s, &session, Showing::again(StatusCode::BAD_REQUEST, &e)).await,
    }
}

/// A row's form: the source's name, or the session's handle for one whose name is not shown.
#[derive(Deserialize)]
pub(crate) struct SourceForm {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    handle: Option<String>,
}

/// The source a row's form names.
enum Named {
    Name(String),
    /// An older node's source under a pasted key, with what its form is refused with when no
    /// such source is stored (the name's own fixed refusal, or [`NOT_LISTED`] for a handle):
    /// never words that hold the name.
    PastedKey {
        name: String,
        refused: String,
    },
}

/// The source `f` names. A name is taken as the API takes it: a valid one, or a stored one the
/// key test alone refuses (the change then reaches it only if it is stored); any other is
/// refused by the name rule's words, which never repeat the name. A handle is looked up among
/// the stored sources named by a pasted key, under this session's key.
async fn named(s: &AppState, session: &Session, f: SourceForm) -> Result<Named, String> {
    match (f.name, f.handle) {
        (Some(name), None) => match skillbox_node::sources::check_name(&name) {
            Ok(()) => Ok(Named::Name(name)),
            Err(refused) if is_a_stored_pasted_key_name(&name) => Ok(Named::PastedKey {
                name,
                refused: refused.to_string(),
            }),
            Err(refused) => Err(refused.to_string()),
        },
        (None, Some(handle)) => {
            let listed = store(s, |s| s.sources.list())
                .await
                .map_err(|_| NOT_CHANGED.to_owned())?;
            listed
                .into_iter()
                .map(|m| m.name)
                .find(|n| is_a_stored_pasted_key_name(n) && session.is_handle_of(&handle, n))
                .map(|name| Named::PastedKey {
                    name,
                    refused: NOT_LISTED.to_owned(),
                })
                .ok_or_else(|| NOT_LISTED.to_owned())
        }
        _ => Err(NO_SOURCE_NAMED.to_owned()),
    }
}

/// `how` on the source a form names (whether it was stored), then back to the list, or the
/// list again with why not.
async fn change_source(
    s: &AppState,
    session: &Session,
    f: SourceForm,
    how: fn(&AppState, &str) -> skillbox_node::Result<bool>,
) -> Response {
    let done = match named(s, session, f).await {
        Ok(Named::Name(name)) => match store(s, move |s| how(s, &name)).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(NO_SUCH_SOURCE.to_owned()),
            Err(e) => Err(e),
        },
        Ok(Named::PastedKey { name, refused }) => match store(s, move |s| how(s, &name)).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(refused),
            Err(_) => Err(NOT_CHANGED.to_owned()),
        },
        Err(e) => Err(e),
    };
    match done {
        Ok(()) => offer_changed(s, session, "/ui/sources"),
        Err(e) => sources_page(s, session, Showing::again(StatusCode::BAD_REQUEST, &e)).await,
    }
}

pub(crate) async fn delete_source(
    State(s): State<AppState>,
    Posted { session, form: f }: Posted<SourceForm>,
) -> Response {
    change_source(&s, &session, f, |s, name| s.sources.delete(name)).await
}

/// Unshare: no call stakes the source from now on. Also for a source named by a pasted key
/// (calls stake it whatever its name); sharing one again is offered nowhere.
pub(crate) async fn unshare_source(
    State(s): State<AppState>,
    Posted { session, form: f }: Posted<SourceForm>,
) -> Response {
    change_source(&s, &session, f, |s, name| {
        Ok(s.sources.set_shareable(name, false)?.is_some())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use skillbox_node::{DataDir, Node};
    use skillbox_testkit::leak::assert_no_part_of;
    use tower::ServiceExt;

    use skillbox_node::sources::KEY_NAMED;
    use skillbox_testkit::old_node::PASTED_KEYS as KEYS;

    /// A node over a data dir holding what an older node left: each of [`KEYS`] as a shareable
    /// source's name, beside a source named `notes`; its dashboard, in this process.
    struct Dashboard {
        _dir: tempfile::TempDir,
        node: Node,
        router: axum::Router,
        token: String,
        /// Every answer's status, headers and body, for the leak scan.
        answers: String,
        /// Each signed-in session's cookie and address (`/ui/s/<random>`), where its pages are
        /// asked for.
        sessions: Vec<(String, String)>,
    }

    struct Answer {
        status: StatusCode,
        text: String,
    }

    impl Dashboard {
        fn open() -> Dashboard {
            let dir = skillbox_testkit::node_api::init_dir();
            let data = DataDir::new(dir.path());
            skillbox_testkit::old_node::sources_named_by(dir.path(), &KEYS);
            {
                let store =
                    Arc::new(skillbox_node::store::Store::open(&data.store()).expect("store"));
                let key = Arc::new(data.load_data_key().expect("data key"));
                let sources = skillbox_node::Sources::new(store.clone(), key);
                sources
                    .put_with("notes", SourceKind::Text, b"more notes", true)
                    .expect("put");
                // A skill whose declaration names a pasted key as its key source and as a
                // required source, as an older node's import kept it.
                let skills = skillbox_node::Skills::new(
                    store.clone(),
                    Arc::new(data.load_data_key().expect("data key")),
                    skillbox_skill::openwop::DEFAULT_NAMESPACE,
                );
                let doc = skillbox_testkit::skills::skill_doc("taste", "BODY-u7k", &["notes"]);
                skills.import(doc.as_bytes(), None).expect("import");
                store
                    .write(|tx| {
                        Ok(tx.execute(
                            "UPDATE skills SET declaration = \
                             replace(replace(declaration, '\"openai-key\"', ?1), '\"notes\"', ?2)",
                            (format!("\"{}\"", KEYS[0]), format!("\"{}\"", KEYS[1])),
                        )?)
                    })
                    .expect("rewrite the declaration");
            }
            let node = Node::open(dir.path()).expect("open");
            let state = node.state();
            let router = skillbox_node::api::router_with(state.clone(), crate::mounts(state));
            Dashboard {
                token: data.load_api_token().expect("token"),
                _dir: dir,
                node,
                router,
                answers: String::new(),
                sessions: Vec::new(),
            }
        }

        async fn send(
            &mut self,
            method: &str,
            path: &str,
            cookie: &str,
            form: &[(&str, &str)],
        ) -> Answer {
            let body: String = form
                .iter()
                .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
                .collect::<Vec<_>>()
                .join("&");
            // A page the test names by its logical address (`/ui/sources`), asked for at the
            // session's own as the browser does.
            let at = self
                .sessions
                .iter()
                .find(|(c, _)| cookie.contains(c.as_str()))
                .map(|(_, at)| at.clone());
            let path = match (path.strip_prefix("/ui/"), &at) {
                (_, Some(at)) if path == "/ui" => at.clone(),
                (Some(page), Some(at)) if page != "login" => format!("{at}/{page}"),
                _ => path.to_owned(),
            };
            let req = axum::http::Request::builder()
                .method(method)
                .uri(path)
                .header(header::COOKIE, cookie)
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(body))
                .expect("request");
            let resp = self.router.clone().oneshot(req).await.expect("infallible");
            let status = resp.status();
            // Each answer's headers on lines of their own (the body before may end mid-line).
            self.answers.push('\n');
            for (k, v) in resp.headers() {
                self.answers
                    .push_str(&format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())));
            }
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .expect("body");
            let text = String::from_utf8_lossy(&bytes).into_owned();
            self.answers.push_str(&text);
            // The page's addresses read back as the logical ones the test names.
            let text = match &at {
                Some(at) => text.replace(at.as_str(), "/ui"),
                None => text,
            };
            Answer { status, text }
        }

        /// Sign in; the session's cookie.
        async fn sign_in(&mut self) -> String {
            let code = super::super::session::tests::signin_code(&self.router, &self.token).await;
            let a = self.send("POST", "/ui/login", "", &[("code", &code)]).await;
            assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.text);
            let at = self
                .answers
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("location: "))
                .expect("into the session")
                .to_owned();
            let cookie = self
                .answers
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("set-cookie: "))
                .and_then(|c| c.split(';').next())
                .expect("a session cookie")
                .to_owned();
            self.sessions.push((cookie.clone(), at));
            cookie
        }

        async fn page(&mut self, cookie: &str) -> String {
            let a = self.send("GET", "/ui/sources", cookie, &[]).await;
            assert_eq!(a.status, StatusCode::OK, "{}", a.text);
            a.text
        }

        fn stored(&self, name: &str) -> Option<SourceMeta> {
            self.node.sources().meta(name).expect("meta")
        }
    }

    /// Every value a page's forms post in `field`, in page order.
    fn values_of(page: &str, field: &str) -> Vec<String> {
        let at = format!("name=\"{field}\" value=\"");
        page.match_indices(&at)
            .filter_map(|(i, _)| {
                let rest = &page[i + at.len()..];
                rest.find('"').map(|end| rest[..end].to_owned())
            })
            .collect()
    }

    /// A node before the key test stored sources under a pasted key as the name, shareable ones
    /// too. Its human sees such a source on the dashboard, never the key (a label, its first
    /// four characters, the advice to revoke it), and unshares and removes it there by the
    /// session's opaque handle; a handle this session was not given, a post without the CSRF
    /// token, and a posted name neither stored nor valid are refused, and no page or answer
    /// holds any part of a key.
    #[tokio::test]
    async fn a_source_named_by_a_pasted_key_is_unshared_and_removed_without_being_shown() {
        let mut d = Dashboard::open();
        let cookie = d.sign_in().await;
        let page = d.page(&cookie).await;
        for key in KEYS {
            assert_no_part_of("the sources page", &page, key);
        }
        assert_eq!(page.matches("class=\"key-name\"").count(), 2, "{page}");
        assert!(page.contains("sk-a…") && page.contains("1fa0…"), "{page}");
        assert!(page.contains("Revoke that key with its provider"), "{page}");
        let csrf = values_of(&page, "csrf").pop().expect("a CSRF token");
        let mut handles = values_of(&page, "handle");
        handles.dedup();
        assert_eq!(handles.len(), 2, "one handle a key-named row: {page}");
        // Every other row posts its name (the skill's own sources too: `skill/…` is no key).
        let names = values_of(&page, "name");
        assert!(
            names
                .iter()
                .all(|n| n == "notes" || n.starts_with("skill/taste/")),
            "{page}"
        );
        assert_eq!(names.iter().filter(|n| *n == "notes").count(), 2, "{page}");

        // A forged post (no token, another's) is refused before anything changes.
        for bad in ["", "00", &"ab".repeat(32)] {
            let a = d
                .send(
                    "POST",
                    "/ui/sources/unshare",
                    &cookie,
                    &[("csrf", bad), ("handle", &handles[0])],
                )
                .await;
            assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.text);
        }
        assert!(
            KEYS.iter()
                .all(|k| d.stored(k).is_some_and(|m| m.shareable))
        );

        // Another session's handles name nothing in this one.
        let other = d.sign_in().await;
        let other_page = d.page(&other).await;
        assert!(
            values_of(&other_page, "handle")
                .iter()
                .all(|h| !handles.contains(h))
        );
        let a = d
            .send(
                "POST",
                "/ui/sources/delete",
                &cookie,
                &[
                    ("csrf", &csrf),
                    ("handle", &values_of(&other_page, "handle")[0]),
                ],
            )
            .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
        assert!(a.text.contains(NOT_LISTED), "{}", a.text);

        // Unshared: no call stakes them now; the rows offer no unsharing any more.
        for h in &handles {
            let a = d
                .send(
                    "POST",
                    "/ui/sources/unshare",
                    &cookie,
                    &[("csrf", &csrf), ("handle", h)],
                )
                .await;
            assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.text);
        }
        assert!(
            KEYS.iter()
                .all(|k| d.stored(k).is_some_and(|m| !m.shareable))
        );
        let page = d.page(&cookie).await;
        assert_eq!(
            page.matches("action=\"/ui/sources/unshare\"").count(),
            1,
            "notes only: {page}"
        );

        // Removed: one by its handle, the other by its name as the API takes it.
        let a = d
            .send(
                "POST",
                "/ui/sources/delete",
                &cookie,
                &[("csrf", &csrf), ("handle", &handles[0])],
            )
            .await;
        assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.text);
        let left: Vec<&str> = KEYS.into_iter().filter(|k| d.stored(k).is_some()).collect();
        assert_eq!(left.len(), 1, "one removed by its handle");
        let a = d
            .send(
                "POST",
                "/ui/sources/delete",
                &cookie,
                &[("csrf", &csrf), ("name", left[0])],
            )
            .await;
        assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.text);
        assert!(KEYS.iter().all(|k| d.stored(k).is_none()), "both removed");
        assert!(d.stored("notes").is_some(), "the others stay");

        // Refused with fixed words: a handle no longer listed, one never given, not a handle.
        for h in [handles[0].as_str(), &"ab".repeat(32), "not hex"] {
            for action in ["/ui/sources/delete", "/ui/sources/unshare"] {
                let a = d
                    .send("POST", action, &cookie, &[("csrf", &csrf), ("handle", h)])
                    .await;
                assert_eq!(
                    a.status,
                    StatusCode::BAD_REQUEST,
                    "{action} {h}: {}",
                    a.text
                );
                assert!(a.text.contains(NOT_LISTED), "{}", a.text);
            }
        }
        // A key as a name, not (or no longer) stored: the name rule's fixed refusal. A name
        // that fails the plain rule: refused as before, without repeating it.
        let never = "sk-ant-api03-NEVERstoredXq7nAmE9kLw2Rt5";
        let invalid = "sk-proj-Q3vT9xLm2+PASTED=kEy7wZr4Nd8Hs1Fb6";
        for name in [KEYS[0], KEYS[1], never, invalid] {
            for action in ["/ui/sources/delete", "/ui/sources/unshare"] {
                let a = d
                    .send("POST", action, &cookie, &[("csrf", &csrf), ("name", name)])
                    .await;
                assert_eq!(a.status, StatusCode::BAD_REQUEST, "{action}: {}", a.text);
                assert!(
                    a.text
                        .contains(skillbox_node::sources::KEY_IS_NOT_A_SOURCE_NAME),
                    "{}",
                    a.text
                );
            }
        }
        let a = d
            .send("POST", "/ui/sources/delete", &cookie, &[("csrf", &csrf)])
            .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
        assert!(a.text.contains(NO_SOURCE_NAMED), "{}", a.text);

        for key in KEYS.iter().chain([&never, &invalid]) {
            assert_no_part_of("the dashboard's answers", &d.answers, key);
        }
    }

    /// A declaration an older node imported may name a pasted key as the skill's key source or a
    /// required source: the skill's page shows the label and four characters, never the key.
    #[tokio::test]
    async fn a_skill_naming_a_pasted_key_is_shown_without_it() {
        let mut d = Dashboard::open();
        let stored = d
            .node
            .skills()
            .detail("taste")
            .expect("detail")
            .expect("taste");
        let decl = serde_json::to_value(&stored.declaration).expect("json");
        assert_eq!(
            decl["key"], KEYS[0],
            "the declaration as an older node kept it"
        );
        assert_eq!(decl["requiredSources"], serde_json::json!([KEYS[1]]));
        let cookie = d.sign_in().await;
        let a = d.send("GET", "/ui/skills/taste", &cookie, &[]).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
        for key in KEYS {
            assert_no_part_of("the skill's page", &a.text, key);
        }
        assert!(
            a.text.contains(&format!("{KEY_NAMED} (sk-a…)")),
            "{}",
            a.text
        );
        assert!(
            a.text.contains(&format!("{KEY_NAMED} (1fa0…)")),
            "{}",
            a.text
        );
    }

    /// Names joined for a line of text, each as every surface shows it.
    #[test]
    fn names_are_joined_as_each_is_shown() {
        let both = sources_shown(&["notes", KEYS[0]]);
        assert_eq!(both, format!("notes, {KEY_NAMED} (sk-a…)"));
        assert_no_part_of("the line", &both, KEYS[0]);
    }

    /// The pages write every dashboard address at the session's own as they render
    /// (`Session::at`), rather than having them rewritten in the finished page: every link,
    /// form and redirect of every page, as sent, is at the session's address, or is the sign-in
    /// page or a static file; no logical address (`/ui/board`), where no session answers, is
    /// left on a page.
    #[tokio::test]
    async fn every_pages_addresses_are_the_sessions() {
        let mut d = Dashboard::open();
        let cookie = d.sign_in().await;
        let at = d.sessions[0].1.clone();
        let from = d.answers.len();
        // Every page the navigation links, and a skill's.
        let pages = NAV.iter().map(|(href, _)| *href);
        for path in pages.chain(["/ui/skills/taste"]) {
            let a = d.send("GET", path, &cookie, &[]).await;
            assert_eq!(a.status, StatusCode::OK, "{path}: {}", a.text);
        }
        let page = d.page(&cookie).await;
        let csrf = values_of(&page, "csrf").pop().expect("a CSRF token");
        let a = d
            .send(
                "POST",
                "/ui/sources/unshare",
                &cookie,
                &[("csrf", &csrf), ("name", "notes")],
            )
            .await;
        assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.text);
        let sent = &d.answers[from..];
        let mut addresses: Vec<&str> = sent
            .match_indices("=\"/ui")
            .map(|(i, _)| {
                let v = &sent[i + 2..];
                &v[..v.find('"').unwrap_or(v.len())]
            })
            .collect();
        addresses.extend(sent.lines().filter_map(|l| l.strip_prefix("location: ")));
        assert!(addresses.len() > 50, "{addresses:?}");
        let logical: Vec<&&str> = addresses
            .iter()
            .filter(|v| {
                !(**v == at
                    || v.starts_with(&format!("{at}/"))
                    || v.starts_with(&format!("{at}?"))
                    || v.starts_with("/ui/static/")
                    || **v == "/ui/login")
            })
            .collect();
        assert!(
            logical.is_empty(),
            "not at the session's address {at}: {logical:?}"
        );
        assert!(
            addresses.contains(&format!("{at}/sources").as_str()),
            "{addresses:?}"
        );
    }
}
