//! Calls on both sides (live), one call with its answer or receipt, and the approvals that
//! wait for this node's human.

use super::*;

// ---- calls

/// Most characters of a box's URL or a provider's host shown (an owner chose them).
const URL_SHOWN: usize = 256;
/// Most characters of a consent question shown: the node's bound on the question (its own
/// words, the facts, and an agent's request quoted to fit), so no cut here reaches the count of
/// what the quote leaves out or the node's closing words (review 32 A32-7).
const QUESTION_SHOWN: usize = skillbox_node::calls::Disclosure::QUESTION_SHOWN;

/// An agent's whole request, under the question that quotes its start: in a scroll box, its
/// lines kept and cleaned as an answer's are, so the human can read all that approving lets
/// leave before deciding (review 32 A32-7: only the first 2,000 characters were shown).
fn whole_request(d: &skillbox_node::calls::Disclosure) -> Markup {
    html! {
        @if let Some(r) = d.request.as_deref().filter(|r| !r.is_empty()) {
            details class="request" open {
                summary { "The agent's whole request (" (r.chars().count()) " characters)" }
                pre class="request" { (peer_lines(r)) }
            }
        }
    }
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
    shown: Showing<'_>,
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
        form method="post" action=(session.at("/ui/calls")) class="stack" {
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
            // Where the page script polls for live states: the session's address, written here
            // so the script holds no copy of the address's shape.
            Ok(list) => table data-live=(session.at("/ui/live/calls")) {
                (columns(&["Call", "Side", "Skill", "Peer", "State", "Failure", "Started"], None))
                tbody {
                    @for v in list {
                        tr {
                            td { a href=(session.at(&format!("/ui/calls/{}", enc(&v.id)))) { code { (short(&v.id)) } } }
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
    page(shown, "Calls", "/ui/calls", session, body)
}

pub(crate) async fn calls(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Query(q): Query<StartQuery>,
) -> Response {
    calls_page(&s, &session, &q, Showing::OK).await
}

#[derive(Deserialize)]
pub(crate) struct StartForm {
    peer: String,
    skill: String,
    request: String,
}

pub(crate) async fn start_call(
    State(s): State<AppState>,
    Posted { session, form: f }: Posted<StartForm>,
) -> Response {
    let Some(c) = calls_of(&s) else {
        return no_calls(&session, "/ui/calls");
    };
    let request = Zeroizing::new(f.request);
    let prefill = StartQuery {
        peer: f.peer.trim().to_owned(),
        skill: f.skill.trim().to_owned(),
    };
    if request.len() > s.calls_max_request {
        let why = "That request is larger than this node sends.";
        let shown = Showing::again(StatusCode::PAYLOAD_TOO_LARGE, why);
        return calls_page(&s, &session, &prefill, shown).await;
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
        Ok(v) => Redirect::to(&session.at(&format!("/ui/calls/{}", enc(&v.id)))).into_response(),
        Err(e) => {
            let msg = format!("Not started ({}): {e}", e.code());
            let shown = Showing::again(StatusCode::BAD_REQUEST, &msg);
            calls_page(&s, &session, &prefill, shown).await
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
            return page(Showing::status(status), "Call", "/ui/calls", &session, body);
        }
    };
    let body = html! {
        @for v in &views {
            section aria-label=(format!("{} side", v.role)) data-live=(session.at("/ui/live/calls")) {
                h2 { "As " (v.role) }
                dl class="facts" {
                    dt { "Call" } dd { code { (v.id) } }
                    dt { "Skill" } dd { (v.skill) }
                    dt { "Peer" } dd { code { (v.peer) } }
                    dt { "State" } dd data-call-state=(format!("{}:{}", v.id, v.role)) { (v.state) }
                    @if v.failure.is_some() { dt { "Failure" } dd data-call-failure=(format!("{}:{}", v.id, v.role)) { (failure_cell(v)) } }
                    @if !v.sources.is_empty() { dt { "Sources applied" } dd { (sources_shown(&v.sources)) } }
                    @if let Some(b) = &v.box_url {
                        dt { "Box" } dd {
                            code { (peer_line(b, URL_SHOWN)) }
                            @if let Some(a) = &v.attested {
                                " — " (peer_line(&a.platform, 64)) ", measurement " code title=(a.measurement) { (short(&a.measurement)) } ", "
                                @if a.hardware_isolation { "hardware-isolated" } @else { strong { "no hardware isolation: its operator can read what is staked" } }
                            } @else { " (not verified yet)" }
                        }
                    }
                }
                @if let Some(d) = &v.disclosure {
                    p class="notice" { "Waiting for you: " (peer_line(&d.text, QUESTION_SHOWN)) }
                    (whole_request(d))
                    (decision_forms(&session, &v.id, v.question.as_deref()))
                }
                @if let Some(r) = &v.receipt {
                    h3 { "Receipt" }
                    dl class="facts" {
                        dt { "Run" } dd { code { (r["run_id"].as_str().unwrap_or("")) } }
                        dt { "Status" } dd { (r["status"].as_str().unwrap_or("")) }
                        dt { "Output bucket" } dd { (r["output_bucket"].as_u64().unwrap_or(0)) " B" }
                        // Only the owner's node knows (from the box's note sealed to it); a
                        // caller's receipt says nothing of the guard, so neither does its page.
                        @if let Some(acted) = r["guard_acted"].as_bool() {
                            dt { "Guard acted" } dd { (if acted { "yes" } else { "no" }) }
                        }
                    }
                }
                @if let Some(a) = &v.answer {
                    h3 { "Answer" }
                    pre class="answer" { (peer_lines(a)) }
                }
            }
        }
        p { a href=(session.at(&format!("/ui/ledger?call={}", enc(&id)))) { "What this call disclosed (ledger)" } }
    };
    page(Showing::OK, "Call", "/ui/calls", &session, body)
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

/// The decision forms for the question whose digest is `question`: each posts it back, so a
/// decision taken on this page answers the question the page showed, never one the call asks
/// after it moved (`question_changed`).
fn decision_forms(session: &Session, id: &str, question: Option<&str>) -> Markup {
    html! {
        div class="decide" {
            @for (decision, remember, label) in [("allow", false, "Approve"), ("allow", true, "Approve and remember"), ("deny", false, "Deny"), ("deny", true, "Deny and remember")] {
                form method="post" action=(session.at("/ui/approvals")) {
                    (csrf_field(session))
                    input type="hidden" name="id" value=(id);
                    @if let Some(q) = question { input type="hidden" name="question" value=(q); }
                    input type="hidden" name="decision" value=(decision);
                    @if remember { input type="hidden" name="remember" value="true"; }
                    button type="submit" data-decision=(decision) { (label) }
                }
            }
        }
    }
}

async fn approvals_page(s: &AppState, session: &Session, shown: Showing<'_>) -> Response {
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
                        p { (peer_line(&d.text, QUESTION_SHOWN)) }
                        (whole_request(d))
                        dl class="facts" {
                            dt { "Sources" } dd { @if d.sources.is_empty() { "none" } @else { (sources_shown(&d.sources)) } }
                            dt { "Peer" } dd { code { (d.peer) } }
                            dt { "Box" } dd { (peer_line(d.box_url.as_deref().unwrap_or_default(), URL_SHOWN)) " " (peer_line(d.platform.as_deref().unwrap_or_default(), 64)) }
                            dt { "Hardware isolation" } dd { @if d.hardware_isolation { "yes" } @else { strong { "no" } } }
                            dt { "Sees the plaintext" } dd { (peer_line(d.provider.as_deref().unwrap_or_default(), 64)) " " (peer_line(d.provider_host.as_deref().unwrap_or_default(), URL_SHOWN)) }
                        }
                    }
                    p { a href=(session.at(&format!("/ui/calls/{}", enc(&v.id)))) { "The call" } }
                    (decision_forms(session, &v.id, v.question.as_deref()))
                }
            },
        }
    };
    page(shown, "Approvals", "/ui/approvals", session, body)
}

page_route!(approvals => approvals_page);

#[derive(Deserialize)]
pub(crate) struct DecideForm {
    id: String,
    decision: String,
    #[serde(default)]
    remember: Option<String>,
    /// The digest of the question the page showed.
    #[serde(default)]
    question: Option<String>,
}

pub(crate) async fn decide(
    State(s): State<AppState>,
    Posted { session, form: f }: Posted<DecideForm>,
) -> Response {
    let Some(c) = calls_of(&s) else {
        return no_calls(&session, "/ui/approvals");
    };
    let allow = match f.decision.as_str() {
        "allow" => true,
        "deny" => false,
        _ => {
            let why = "The decision must be allow or deny.";
            return approvals_page(&s, &session, Showing::again(StatusCode::BAD_REQUEST, why))
                .await;
        }
    };
    match c
        .consent(
            &f.id,
            allow,
            f.remember.as_deref() == Some("true"),
            f.question.as_deref(),
        )
        .await
    {
        Ok(_) => Redirect::to(&session.at(&format!("/ui/calls/{}", enc(&f.id)))).into_response(),
        Err(e) => {
            let why = format!("Not decided ({}): {e}", e.code());
            approvals_page(&s, &session, Showing::again(StatusCode::CONFLICT, &why)).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review 32 A32-7: an agent's request is shown whole under its question, last line
    /// included, in a scroll box (`pre.request`), cleaned (no bidi override) and escaped.
    #[test]
    fn an_agents_whole_request_is_shown_under_its_question() {
        let mut request = "“Creep”, “Airbag”, ".repeat(100);
        for i in 0..150 {
            request.push_str(&format!(
                "\nprivate note {i:03} \u{202E}<b>from ~/notes.txt</b>"
            ));
        }
        request.push_str("\nLAST-LINE-A32-7");
        let d = skillbox_node::calls::Disclosure {
            sources: Vec::new(),
            peer: "P".into(),
            skill: "s".into(),
            box_url: None,
            platform: None,
            measurement: None,
            hardware_isolation: false,
            provider: None,
            provider_host: None,
            declaration: None,
            request: Some(request.clone()),
            text: "Approving stakes your request.".into(),
        };
        let shown = whole_request(&d).into_string();
        assert!(shown.contains(r#"<pre class="request">"#), "{shown}");
        assert!(shown.contains("\nLAST-LINE-A32-7</pre>"), "{shown}");
        for i in 0..150 {
            assert!(shown.contains(&format!("private note {i:03} ")), "{i}");
        }
        assert!(shown.contains("&lt;b&gt;") && !shown.contains('\u{202E}'));
        assert!(shown.contains(&format!("({} characters)", request.chars().count())));
        let none = skillbox_node::calls::Disclosure { request: None, ..d };
        assert_eq!(whole_request(&none).into_string(), "");
    }

    /// Every decision form on a page posts the digest of the question the page showed, so the
    /// node takes the decision only while the call still asks it.
    #[test]
    fn each_decision_form_posts_the_question_it_shows() {
        let session = Session {
            csrf: "c".into(),
            key: [0; 32],
            base: crate::Base("0".repeat(32)),
        };
        let question = format!("sha256:{}", "ab".repeat(32));
        let page = decision_forms(&session, "c1", Some(&question)).into_string();
        let field = format!(r#"<input type="hidden" name="question" value="{question}">"#);
        assert_eq!(page.matches("<form").count(), 4, "{page}");
        assert_eq!(page.matches(&field).count(), 4, "{page}");
    }
}
