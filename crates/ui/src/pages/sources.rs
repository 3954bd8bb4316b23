//! Sources: names, kinds, sizes, the shareable flag; add and remove. Content is never shown.

use super::*;

// ---- sources

async fn sources_page(
    s: &AppState,
    session: &Session,
    notice: Option<&str>,
    status: StatusCode,
) -> Response {
    let list = store(s, |s| s.sources.list()).await;
    let body = html! {
        p { "Content is never shown back: names, kinds, sizes and a keyed digest only. Only sources marked shareable can be staked into a call, and a secret never is." }
        @match &list {
            Err(e) => p class="notice" { (e) },
            Ok(list) => table {
                (columns(&["Name", "Kind", "Size", "Shareable", "Digest"], Some("Remove")))
                tbody {
                    @for m in list {
                        tr data-source=(m.name) {
                            td { code { (m.name) } }
                            td { (m.kind.as_str()) }
                            td { (m.size) " B" }
                            td { @if m.shareable { "yes" } @else { "no" } }
                            td { code title=(m.digest) { (short(&m.digest)) } }
                            td { (remove_form(session, "/ui/sources/delete", &m.name, html! { input type="hidden" name="name" value=(m.name); })) }
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
    page(status, "Sources", "/ui/sources", session, notice, body)
}

page_route!(sources => sources_page);

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
        Ok(_) => offer_changed(&s, "/ui/sources"),
        Err(e) => sources_page(&s, &session, Some(&e), StatusCode::BAD_REQUEST).await,
    }
}

#[derive(Deserialize)]
pub(crate) struct NameForm {
    name: String,
}

pub(crate) async fn delete_source(
    State(s): State<AppState>,
    Posted { session, form: f }: Posted<NameForm>,
) -> Response {
    let name = f.name;
    if let Err(e) = skillbox_node::sources::check_name(&name) {
        return sources_page(&s, &session, Some(&e.to_string()), StatusCode::BAD_REQUEST).await;
    }
    match store(&s, move |s| s.sources.delete(&name)).await {
        Ok(_) => offer_changed(&s, "/ui/sources"),
        Err(e) => sources_page(&s, &session, Some(&e), StatusCode::BAD_REQUEST).await,
    }
}
