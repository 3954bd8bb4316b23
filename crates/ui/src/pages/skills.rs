//! My skills: offered or not and why, the OpenWOP manifest, add by upload or paste, remove.

use super::*;

// ---- my skills

async fn skills_page(
    s: &AppState,
    session: &Session,
    notice: Option<&str>,
    status: StatusCode,
) -> Response {
    let list = store(s, |s| s.skills.list()).await;
    let body = html! {
        @match &list {
            Err(e) => p class="notice" { "Cannot list skills: " (e) },
            Ok(list) if list.is_empty() => p { "No skills yet. Add a SKILL.md below." },
            Ok(list) => table {
                (columns(&["Skill", "Description", "Provider", "Offered"], Some("Remove")))
                tbody {
                    @for k in list {
                        tr data-skill=(k.name) {
                            td { a href=(session.at(&format!("/ui/skills/{}", enc(&k.name)))) { (k.name) } }
                            td { (peer_line(&k.description, 200)) }
                            td { (k.provider.clone().unwrap_or_default()) }
                            td {
                                @if k.offered { span class="ok" { "offered" } }
                                @else { span class="off" { "not offered: " (k.reasons.join("; ")) } }
                            }
                            td { (remove_form(session, &format!("/ui/skills/{}/delete", enc(&k.name)), &k.name, html! {})) }
                        }
                    }
                }
            },
        }
        h2 { "Add a skill" }
        form method="post" action=(session.at("/ui/skills")) class="stack" {
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
    page(status, "My skills", "/ui/skills", session, notice, body)
}

page_route!(skills => skills_page);

#[derive(Deserialize)]
pub(crate) struct AddSkill {
    doc: String,
    #[serde(default)]
    name: String,
}

pub(crate) async fn add_skill(
    State(s): State<AppState>,
    Posted { session, form: f }: Posted<AddSkill>,
) -> Response {
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
    match store(&s, move |s| s.skills.import(&doc, fallback.as_deref())).await {
        Ok(_) => offer_changed(&s, &session, "/ui/skills"),
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
    let detail = match store(&s, move |s| s.skills.detail(&n)).await {
        Ok(Some(d)) => d,
        refused => {
            let (status, body) = match refused {
                Err(e) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    html! { p class="notice" { (e) } },
                ),
                _ => (
                    StatusCode::NOT_FOUND,
                    html! { p { "No skill of that name." } },
                ),
            };
            return page(status, "Skill", "/ui/skills", &session, None, body);
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
            // Both through `shown_name`: a declaration stored before import refused pasted keys
            // may hold one as its key's or a required source's name.
            dt { "Key source" } dd { (decl["key"].as_str().map_or("none".into(), shown_name)) }
            dt { "Required sources" } dd { (sources_shown(&decl["requiredSources"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>()).unwrap_or_default())) }
            dt { "Offered" } dd {
                @if offered { span class="ok" { "yes" } } @else { span class="off" { "no: " (reasons.join("; ")) } }
            }
        }
        p { "The body, model and key are staked into a box for each call; they are never shown here." }
        h2 { "OpenWOP manifest" }
        pre class="manifest" { (manifest) }
    };
    page(
        StatusCode::OK,
        &format!("Skill {name}"),
        "/ui/skills",
        &session,
        None,
        body,
    )
}

pub(crate) async fn delete_skill(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Posted { session, form: _ }: Posted<CsrfOnly>,
) -> Response {
    match store(&s, move |s| s.skills.delete(&name)).await {
        Ok(_) => offer_changed(&s, &session, "/ui/skills"),
        Err(e) => skills_page(&s, &session, Some(&e), StatusCode::BAD_REQUEST).await,
    }
}
