//! What peers offer right now, searchable and filtered by provider and box platform.

use super::*;

// ---- the board

#[derive(Deserialize, Default)]
pub(crate) struct BoardQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    provider: String,
    #[serde(default)]
    platform: String,
}

pub(crate) async fn board(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Query(q): Query<BoardQuery>,
) -> Response {
    let Some(h) = s.peers.get() else {
        let body = html! { p { "The peer network is not running on this node." } };
        return html_page(
            StatusCode::OK,
            page("Board", "/ui/board", &session, None, body),
        );
    };
    let (rows, platforms) = h.with_board(|b, now| {
        let rows = b.snapshot(now);
        let mut platforms: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in &rows {
            if platforms.contains_key(&r.peer) {
                continue;
            }
            let p = r
                .peer
                .parse::<skillbox_peers::PeerId>()
                .ok()
                .and_then(|p| b.advert(&p, now).map(|a| a.boxes.clone()))
                .unwrap_or_default()
                .into_iter()
                .map(|b| b.platform)
                .collect();
            platforms.insert(r.peer.clone(), p);
        }
        (rows, platforms)
    });
    let all_providers: std::collections::BTreeSet<String> =
        rows.iter().map(|r| r.provider.clone()).collect();
    let all_platforms: std::collections::BTreeSet<String> =
        platforms.values().flatten().cloned().collect();
    let needle = q.q.to_lowercase();
    let shown: Vec<_> = rows
        .iter()
        .filter(|r| {
            needle.is_empty()
                || r.skill.to_lowercase().contains(&needle)
                || r.description.to_lowercase().contains(&needle)
        })
        .filter(|r| q.provider.is_empty() || r.provider == q.provider)
        .filter(|r| {
            q.platform.is_empty()
                || platforms
                    .get(&r.peer)
                    .is_some_and(|p| p.contains(&q.platform))
        })
        .collect();
    let body = html! {
        form method="get" action="/ui/board" class="filters" role="search" {
            label for="q" { "Search" }
            input id="q" name="q" type="search" value=(q.q);
            label for="provider" { "Provider" }
            select id="provider" name="provider" {
                option value="" { "any" }
                @for p in &all_providers { option value=(p) selected[*p == q.provider] { (p) } }
            }
            label for="platform" { "Box platform" }
            select id="platform" name="platform" {
                option value="" { "any" }
                @for p in &all_platforms { option value=(p) selected[*p == q.platform] { (p) } }
            }
            button type="submit" { "Filter" }
        }
        p { (shown.len()) " of " (rows.len()) " skills. Descriptions are the peers' own words." }
        table {
            thead { tr {
                th scope="col" { "Skill" } th scope="col" { "Description (from the peer)" }
                th scope="col" { "Provider" } th scope="col" { "Boxes" } th scope="col" { "Needs" }
                th scope="col" { "Peer" } th scope="col" { span class="sr" { "Call" } }
            } }
            tbody {
                @for r in &shown {
                    tr {
                        td { (r.skill) }
                        td class="peer-text" { (capped(&r.description, 300)) }
                        td { (r.provider) }
                        td { (platforms.get(&r.peer).map(|p| p.join(", ")).unwrap_or_default()) }
                        td { (r.required_sources.join(", ")) }
                        td { code title=(r.peer) { (short(&r.peer)) } }
                        td { a href=(format!("/ui/calls?peer={}&skill={}", enc(&r.peer), enc(&r.skill))) { "Call…" } }
                    }
                }
            }
        }
    };
    html_page(
        StatusCode::OK,
        page("Board", "/ui/board", &session, None, body),
    )
}
