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
    /// Which page of the matching rows (from 0).
    #[serde(default)]
    page: usize,
}

/// Rows one board page shows: peers fill the board (a Sybil most of all), and the page is
/// rendered whole for each request.
const BOARD_PAGE: usize = 100;
/// Most providers or platforms a filter's list offers (a peer chooses its provider ids).
const FILTER_OPTIONS: usize = 64;

/// The rows of page `page` among `len` matching ones (an empty range past the end).
fn window(len: usize, page: usize) -> std::ops::Range<usize> {
    let start = page.saturating_mul(BOARD_PAGE).min(len);
    start..len.min(start + BOARD_PAGE)
}

pub(crate) async fn board(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Query(q): Query<BoardQuery>,
) -> Response {
    let Some(h) = s.peers.get() else {
        let body = html! { p { "The peer network is not running on this node." } };
        return page(StatusCode::OK, "Board", "/ui/board", &session, None, body);
    };
    let (rows, platforms) = h.with_board(|b, now| {
        let rows = b.snapshot(now);
        let mut platforms: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in &rows {
            platforms.entry(r.peer.clone()).or_insert_with(|| {
                let boxes = b.boxes_of(&r.peer, now);
                boxes.into_iter().map(|b| b.platform).collect()
            });
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
    let range = window(shown.len(), q.page);
    let page_link = |n: usize| {
        format!(
            "/ui/board?q={}&provider={}&platform={}&page={n}",
            enc(&q.q),
            enc(&q.provider),
            enc(&q.platform)
        )
    };
    let body = html! {
        form method="get" action="/ui/board" class="filters" role="search" {
            label for="q" { "Search" }
            input id="q" name="q" type="search" value=(q.q);
            label for="provider" { "Provider" }
            select id="provider" name="provider" {
                option value="" { "any" }
                @for p in all_providers.iter().take(FILTER_OPTIONS) { option value=(p) selected[*p == q.provider] { (p) } }
            }
            label for="platform" { "Box platform" }
            select id="platform" name="platform" {
                option value="" { "any" }
                @for p in all_platforms.iter().take(FILTER_OPTIONS) { option value=(p) selected[*p == q.platform] { (p) } }
            }
            button type="submit" { "Filter" }
        }
        p {
            (shown.len()) " of " (rows.len()) " skills"
            @if shown.len() > BOARD_PAGE { ", " (range.start + 1) "–" (range.end) " shown" }
            ". Descriptions are the peers' own words."
        }
        table {
            (columns(&["Skill", "Description (from the peer)", "Provider", "Boxes", "Needs", "Peer"], Some("Call")))
            tbody {
                @for r in &shown[range.clone()] {
                    tr {
                        td { (r.skill) }
                        td class="peer-text" { (peer_line(&r.description, 300)) }
                        td { (r.provider) }
                        td { (peer_line(&platforms.get(&r.peer).map(|p| p.join(", ")).unwrap_or_default(), 200)) }
                        td class="peer-text" { (needs(&r.required_sources)) }
                        td { code title=(r.peer) { (short(&r.peer)) } }
                        td { a href=(format!("/ui/calls?peer={}&skill={}", enc(&r.peer), enc(&r.skill))) { "Call…" } }
                    }
                }
            }
        }
        @if q.page > 0 || range.end < shown.len() {
            nav aria-label="Board pages" {
                @if q.page > 0 { a href=(page_link(q.page - 1)) { "Previous" } " " }
                @if range.end < shown.len() { a href=(page_link(q.page + 1)) { "Next" } }
            }
        }
    };
    page(StatusCode::OK, "Board", "/ui/board", &session, None, body)
}

/// Names shown of a row's required sources: the first [`NEEDS_SHOWN`], each capped at 64
/// characters, then how many more (a peer's list is as long as its advert allows).
const NEEDS_SHOWN: usize = 8;

fn needs(required: &[String]) -> String {
    let mut shown: Vec<String> = required
        .iter()
        .take(NEEDS_SHOWN)
        .map(|n| peer_line(n, 64))
        .collect();
    if required.len() > NEEDS_SHOWN {
        shown.push(format!("(+{} more)", required.len() - NEEDS_SHOWN));
    }
    shown.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer's list of required sources is its own text, as long as its advert allows (tens
    /// of thousands of names): the cell shows a few, each capped, and how many more.
    #[test]
    fn a_hostile_list_of_required_sources_is_shown_capped() {
        assert_eq!(needs(&["songs".into(), "diary".into()]), "songs, diary");
        let many: Vec<String> = (0..500)
            .map(|i| format!("s{i:03}{}", "x".repeat(200)))
            .collect();
        let shown = needs(&many);
        assert!(shown.ends_with("(+492 more)"), "{shown}");
        assert!(shown.chars().count() < 8 * 70 + 20, "{}", shown.len());
    }

    /// Issue 30 item 13: however many rows match, a page renders at most BOARD_PAGE of them.
    #[test]
    fn a_board_page_holds_one_window_of_rows() {
        assert_eq!(window(0, 0), 0..0);
        assert_eq!(window(7, 0), 0..7);
        assert_eq!(window(250, 0), 0..BOARD_PAGE);
        assert_eq!(window(250, 2), 200..250);
        assert_eq!(window(250, 3), 250..250);
        assert_eq!(window(250, usize::MAX), 250..250);
    }
}
