//! My skills: offered or not and why, the OpenWOP manifest, add by upload or paste, remove.

use super::*;

// ---- my skills

/// The import form's refusal when its ticket is spent or unknown: nothing was read or written.
const SENT_ALREADY: &str = "Nothing was imported: this form was sent already (a reload or a \
     restored tab sends it again), or it is too old. Paste the SKILL.md again to import it.";
/// What the page says when the notes its `imported` id names are gone (shown already, too old,
/// or another session's).
const NOTES_GONE: &str = "That import's notes were shown once and are gone; each skill's page \
     below says what it is now.";

async fn skills_page(
    s: &AppState,
    session: &Session,
    forms: &FormTickets,
    shown: Showing<'_>,
) -> Response {
    skills_page_after(s, session, forms, shown, html! {}).await
}

/// The skills page with `imported` (what an import committed the owner to) above the list. Its
/// import form carries a new ticket (see [`FormTickets`]).
async fn skills_page_after(
    s: &AppState,
    session: &Session,
    forms: &FormTickets,
    shown: Showing<'_>,
    imported: Markup,
) -> Response {
    let list = store(s, |s| s.skills.list()).await;
    let ticket = forms.ticket(session);
    let body = html! {
        (imported)
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
            input type="hidden" name="ticket" value=(ticket);
            label for="skill-file" { "SKILL.md file (loaded into the text below)" }
            input id="skill-file" type="file" accept=".md,text/markdown,text/plain" data-load-into="skill-doc";
            label for="skill-doc" { "SKILL.md (front matter and body)" }
            textarea id="skill-doc" name="doc" rows="14" required {}
            label for="skill-name" { "Name, if the front matter has none (optional)" }
            input id="skill-name" name="name" type="text";
            button type="submit" { "Add skill" }
        }
    };
    page(shown, "My skills", "/ui/skills", session, body)
}

/// `GET /ui/skills`, and `?imported=<id>` where an import's post led: its notes, once.
#[derive(Deserialize)]
pub(crate) struct SkillsQuery {
    #[serde(default)]
    imported: Option<String>,
}

pub(crate) async fn skills(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Extension(forms): Extension<Arc<FormTickets>>,
    Query(q): Query<SkillsQuery>,
) -> Response {
    let Some(id) = q.imported else {
        return skills_page(&s, &session, &forms, Showing::OK).await;
    };
    match forms.take_notes(&session, &id) {
        Some(notes) => skills_page_after(&s, &session, &forms, Showing::OK, notes).await,
        None => skills_page(&s, &session, &forms, Showing::noting(NOTES_GONE)).await,
    }
}

#[derive(Deserialize)]
pub(crate) struct AddSkill {
    doc: String,
    #[serde(default)]
    name: String,
    /// The form's one-time ticket ([`FormTickets`]).
    #[serde(default)]
    ticket: String,
}

pub(crate) async fn add_skill(
    State(s): State<AppState>,
    Extension(forms): Extension<Arc<FormTickets>>,
    Posted { session, form: f }: Posted<AddSkill>,
) -> Response {
    // First, before the file is read: a post sent again imports nothing (review 27 F4).
    if !forms.spend(&session, &f.ticket) {
        let shown = Showing::again(StatusCode::CONFLICT, SENT_ALREADY);
        return skills_page(&s, &session, &forms, shown).await;
    }
    let doc = Zeroizing::new(f.doc.replace("\r\n", "\n").into_bytes());
    if doc.len() > s.limits.max_skill_bytes {
        let why = "That SKILL.md is larger than this node accepts.";
        let shown = Showing::again(StatusCode::PAYLOAD_TOO_LARGE, why);
        return skills_page(&s, &session, &forms, shown).await;
    }
    let fallback = (!f.name.trim().is_empty()).then(|| f.name.trim().to_owned());
    match store(&s, move |s| s.skills.import(&doc, fallback.as_deref())).await {
        Ok(imported) => {
            // The human is shown what the file commits them to, as `skill add` prints it
            // (review 26 V4), on the page the redirect leads to: a reload asks for that page
            // again and posts nothing.
            s.offer_changed.notify_one();
            let notes = import_notes(&imported);
            match forms.keep_notes(&session, notes.clone()) {
                Some(id) => {
                    Redirect::to(&session.at(&format!("/ui/skills?imported={id}"))).into_response()
                }
                None => skills_page_after(&s, &session, &forms, Showing::OK, notes).await,
            }
        }
        Err(e) => {
            let why = format!("Not imported: {e}");
            let shown = Showing::again(StatusCode::BAD_REQUEST, &why);
            skills_page(&s, &session, &forms, shown).await
        }
    }
}

/// What an import committed the owner to, as `skill add` prints it: the provider, model and key
/// source the skill spends of the owner's when a peer calls it, the ceilings in force, and each
/// warning (a ceiling held to `[ceilings]`, an unknown key). A SKILL.md is often someone else's
/// file: every field of its text is cleaned as a peer's ([`peer_line`]); maud escapes markup.
fn import_notes(i: &skillbox_node::skills::Imported) -> Markup {
    let sp = &i.spends;
    let shown = |v: &Option<String>| v.as_deref().map_or("none".into(), |t| peer_line(t, 256));
    let limits = serde_json::to_value(sp.limits).unwrap_or(Value::Null);
    let ceilings: Vec<String> = skillbox_skill::Limits::FIELDS
        .iter()
        .filter_map(|f| limits[f].as_u64().map(|n| format!("{f} {n}")))
        .collect();
    let warnings: Vec<String> = i
        .warnings
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            let message = w["message"].as_str().unwrap_or("");
            let line = match w["field"].as_str() {
                Some(field) => format!("{field}: {message}"),
                None => message.to_owned(),
            };
            peer_line(&line, 600)
        })
        .collect();
    html! {
        section class="imported" data-imported=(i.name) {
            h2 { (if i.replaced { "Replaced " } else { "Added " }) (peer_line(&i.name, 64)) }
            p { "What it spends of yours when a peer calls it:" }
            dl class="facts" {
                dt { "Provider" } dd { (shown(&sp.provider)) }
                dt { "Model" } dd { (shown(&sp.model)) }
                dt { "Key source" } dd { (shown(&sp.key)) }
                dt { "Ceilings in force" } dd { (ceilings.join(", ")) }
            }
            @if !warnings.is_empty() {
                ul class="warnings" {
                    @for w in &warnings { li { "warning: " (w) } }
                }
            }
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
            return page(
                Showing::status(status),
                "Skill",
                "/ui/skills",
                &session,
                body,
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
        Showing::OK,
        &format!("Skill {name}"),
        "/ui/skills",
        &session,
        body,
    )
}

pub(crate) async fn delete_skill(
    State(s): State<AppState>,
    Extension(forms): Extension<Arc<FormTickets>>,
    Path(name): Path<String>,
    Posted { session, form: _ }: Posted<CsrfOnly>,
) -> Response {
    match store(&s, move |s| s.skills.delete(&name)).await {
        Ok(_) => offer_changed(&s, &session, "/ui/skills"),
        Err(e) => {
            let shown = Showing::again(StatusCode::BAD_REQUEST, &e);
            skills_page(&s, &session, &forms, shown).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review 26 V4: the dashboard's import of someone else's SKILL.md (review 25's) shows what
    /// it spends — the model and the key source it binds — and the ceilings it was held to,
    /// each warning named by its field; the file's escapes reach the page as no control
    /// character. Before, the import redirected and said none of it.
    #[test]
    fn an_imports_page_says_what_it_spends_and_what_was_held() {
        let store = skillbox_node::store::Store::open_in_memory().expect("store");
        let key = skillbox_node::crypto::DataKey::from_bytes(&[5u8; 32]);
        let skills =
            skillbox_node::skills::Skills::new(Arc::new(store), Arc::new(key), "local.test");
        let imported = skills
            .import(skillbox_testkit::skills::HOSTILE_SKILL_MD.as_bytes(), None)
            .expect("import");
        let page = import_notes(&imported).into_string();
        for shown in [
            "openai/o1-pro",
            "openrouter-key",
            "limits.callsPerDay: 9007199254740991 is above this node",
            "limits.maxOutputBytes",
            "callsPerDay 1000",
        ] {
            assert!(page.contains(shown), "{shown:?} in {page}");
        }
        assert!(
            !skillbox_testkit::skills::holds_terminal_controls(&page),
            "{page:?}"
        );
    }
}
