//! The disclosure ledger, per source, as a timeline, with its verification.

use super::*;

// ---- the ledger

#[derive(Deserialize, Default)]
pub(crate) struct LedgerQuery {
    #[serde(default)]
    source: String,
    #[serde(default)]
    call: String,
}

pub(crate) async fn ledger(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Query(q): Query<LedgerQuery>,
) -> Response {
    let Some(c) = calls_of(&s) else {
        return no_calls(&session, "/ui/ledger");
    };
    let filter = skillbox_node::ledger::Filter {
        source: (!q.source.is_empty()).then(|| q.source.clone()),
        call: (!q.call.is_empty()).then(|| q.call.clone()),
        ..skillbox_node::ledger::Filter::default()
    };
    let mut lines = c.ledger(filter).await.unwrap_or_default();
    let verdict = c.verify_ledger().await.ok();
    // The timeline per source: when each one left (or was refused), newest first. Keyed by the
    // stored name (two sources may be shown alike), shown as every surface shows it: a name an
    // older node took from a pasted provider key is masked, in the heading, its label and each
    // entry's summary.
    let mut per_source: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, l) in lines.iter().enumerate() {
        let mut names: Vec<&String> = l.entry.sources.iter().collect();
        names.extend(l.entry.items.iter().filter_map(|i| i.source.as_ref()));
        names.sort();
        names.dedup();
        for n in names {
            per_source.entry(n.clone()).or_default().push(i);
        }
    }
    for l in &mut lines {
        skillbox_node::sources::show_names_in(&mut l.entry);
    }
    let per_source: Vec<(String, Vec<&Line>)> = per_source
        .into_iter()
        .map(|(name, at)| {
            let shown = shown_name(&name).into_owned();
            (shown, at.into_iter().map(|i| &lines[i]).collect())
        })
        .collect();
    // The filter as typed is shown back only as a name is shown.
    let typed = shown_name(&q.source);
    let body = html! {
        @match &verdict {
            Some(v) if v.ok => p class="ok" { "Verified: " (v.entries) " entries, chained and signed by this node's key." },
            Some(v) => p class="notice" role="alert" { "The ledger does NOT verify: entry " (v.broken_at.unwrap_or(0)) " — " (v.reason.map(|r| r.as_str()).unwrap_or("unknown")) "." },
            None => p class="notice" { "The ledger could not be checked." },
        }
        form method="get" action=(session.at("/ui/ledger")) class="filters" {
            label for="ledger-source" { "Source" }
            input id="ledger-source" name="source" type="text" value=(typed);
            button type="submit" { "Show" }
        }
        @if !per_source.is_empty() {
            h2 { "Per source" }
            @for (name, entries) in &per_source {
                section class="timeline" aria-label=(format!("Source {name}")) {
                    h3 { code { (name) } }
                    ol reversed {
                        @for l in entries.iter().rev() {
                            li {
                                time { (when(l.entry.at)) } " — " (l.entry.summary()) " · "
                                @if l.entry.role == "caller" { "peer " code title=(l.entry.peer) { (short(&l.entry.peer)) } "'s skill " } @else { "your skill " }
                                (l.entry.skill) " via "
                                (l.entry.box_url.clone().unwrap_or_else(|| "no box yet".into()))
                                @if !l.entry.hardware_isolation { " (no hardware isolation)" }
                            }
                        }
                    }
                }
            }
        }
        h2 { "All entries" }
        @if lines.is_empty() { p { "Nothing has been staked or decided yet." } } @else {
            table {
                (columns(&["#", "When", "What", "Call", "Skill", "Box", "Sees plaintext"], None))
                tbody {
                    @for l in lines.iter().rev() {
                        tr data-ledger-seq=(l.entry.seq) {
                            td { (l.entry.seq) }
                            td { (when(l.entry.at)) }
                            td { (l.entry.summary()) }
                            td { a href=(session.at(&format!("/ui/calls/{}", enc(&l.entry.call)))) { code { (short(&l.entry.call)) } } " (" (l.entry.role) ")" }
                            td { (l.entry.skill) }
                            td {
                                (l.entry.box_url.clone().unwrap_or_default()) " "
                                (l.entry.platform.clone().unwrap_or_default())
                                @if !l.entry.hardware_isolation { ", no hardware isolation" }
                            }
                            td { (l.entry.provider.clone().unwrap_or_default()) " " (l.entry.provider_host.clone().unwrap_or_default()) }
                        }
                    }
                }
            }
        }
    };
    page(Showing::OK, "Ledger", "/ui/ledger", &session, body)
}
