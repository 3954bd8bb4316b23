//! What peers offer right now, searchable and filtered by provider and box platform.

use super::*;
use skillbox_node::peering::{BoardView, MAX_ROWS_READ, RowKey, read_board, walk_lent};

// ---- the board

#[derive(Deserialize, Default, Clone)]
pub(crate) struct BoardQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    provider: String,
    #[serde(default)]
    platform: String,
    /// Where the page starts: after the row this cursor names (a page's next link).
    #[serde(default)]
    after: String,
}

impl BoardQuery {
    fn filtered(&self) -> bool {
        !(self.q.is_empty() && self.provider.is_empty() && self.platform.is_empty())
    }
}

/// Rows one board page shows: peers fill the board (a Sybil most of all), so a page is read
/// from the board lent under its lock, these rows and the one after, never the board whole.
const BOARD_PAGE: usize = 100;
/// Most providers or platforms a filter's suggestions offer (a peer chooses its provider ids).
const FILTER_OPTIONS: usize = 64;

/// A row as the page shows it, copied out of the board lent.
struct Shown {
    peer: String,
    skill: String,
    description: String,
    provider: String,
    required_sources: Vec<String>,
    /// The platforms of the boxes the row's peer accepts.
    platforms: Vec<String>,
}

/// One page of the board: its rows, where the next starts, and what the walk saw.
#[derive(Default)]
struct BoardPage {
    rows: Vec<Shown>,
    next: Option<RowKey>,
    /// Rows the walk looked at (the page's, those filtered out, and the one that ended it).
    looked_at: usize,
    /// Providers and platforms of the rows looked at, for the filters' suggestions.
    providers: std::collections::BTreeSet<String>,
    platforms: std::collections::BTreeSet<String>,
}

/// The page of `view` after `after` that `q` filters: [`BOARD_PAGE`] rows at most, read a
/// stretch at a time under the board's lock ([`walk_lent`]), at most [`MAX_ROWS_READ`] when
/// filtering.
fn board_page(view: &dyn BoardView, q: &BoardQuery, after: Option<RowKey>) -> BoardPage {
    let needle = q.q.to_lowercase();
    let budget = if q.filtered() {
        MAX_ROWS_READ
    } else {
        usize::MAX
    };
    let mut page = BoardPage::default();
    // The platforms of the peer whose rows are being read: rows come in peer order.
    let mut peer_platforms: (String, Vec<String>) = Default::default();
    // The rows' text lowercased, one buffer for the whole walk ([`holds`]).
    let mut lower = String::new();
    let walked = walk_lent(view, after.as_ref(), budget, |b, now, r| {
        page.looked_at += 1;
        if peer_platforms.0 != r.peer {
            let boxes = b.boxes_of(r.peer, now);
            peer_platforms = (
                r.peer.to_owned(),
                boxes.into_iter().map(|b| b.platform).collect(),
            );
        }
        let platforms = &peer_platforms.1;
        let s = r.skill;
        for (seen, value) in [
            (&mut page.providers, std::slice::from_ref(&s.provider)),
            (&mut page.platforms, platforms.as_slice()),
        ] {
            for v in value {
                // Looked up borrowed: a value copied once, when it is new to the suggestions.
                if seen.len() < FILTER_OPTIONS && !seen.contains(v.as_str()) {
                    seen.insert(v.clone());
                }
            }
        }
        let matches = (needle.is_empty() || holds(&mut lower, &s.name, &s.description, &needle))
            && (q.provider.is_empty() || s.provider == q.provider)
            && (q.platform.is_empty() || platforms.contains(&q.platform));
        if !matches {
            return true;
        }
        if page.rows.len() == BOARD_PAGE {
            return false;
        }
        page.rows.push(Shown {
            peer: r.peer.to_owned(),
            skill: s.name.clone(),
            description: s.description.clone(),
            provider: s.provider.clone(),
            required_sources: s.required_sources.clone(),
            platforms: platforms.clone(),
        });
        true
    });
    page.next = (!walked.ended).then(|| walked.last.or(after)).flatten();
    page
}

/// Whether a row's `name` or `description` holds `needle` (lowercased), case aside. Both are
/// lowercased at once into `lower`, the buffer a walk reuses, so a filtered read of thousands
/// of peer-written rows allocates nothing per row; text other than ASCII (whose lowercase may
/// change its length, or depend on the letters around) is lowercased as `str::to_lowercase`
/// does, each field on its own, so the rule is that of `to_lowercase` for every row.
fn holds(lower: &mut String, name: &str, description: &str, needle: &str) -> bool {
    lower.clear();
    lower.push_str(name);
    let cut = lower.len();
    lower.push_str(description);
    if !lower.is_ascii() {
        return name.to_lowercase().contains(needle) || description.to_lowercase().contains(needle);
    }
    lower.make_ascii_lowercase();
    lower[..cut].contains(needle) || lower[cut..].contains(needle)
}

pub(crate) async fn board(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
    Query(q): Query<BoardQuery>,
) -> Response {
    let Some(view) = s.board.get().cloned() else {
        let body = html! { p { "The peer network is not running on this node." } };
        return page(Showing::OK, "Board", "/ui/board", &session, body);
    };
    let after = match q.after.as_str() {
        "" => None,
        text => match RowKey::from_cursor(text) {
            Some(k) => Some(k),
            // Fixed words: the text is not said back.
            None => {
                let body = html! {
                    p { "That page link is not one this dashboard made." }
                    p { a href=(session.at("/ui/board")) { "The board's first page" } }
                };
                return page(
                    Showing::status(StatusCode::BAD_REQUEST),
                    "Board",
                    "/ui/board",
                    &session,
                    body,
                );
            }
        },
    };
    let first = after.is_none();
    let query = q.clone();
    // A filtered page reads up to MAX_ROWS_READ rows: CPU work, not the runtime's.
    let read = tokio::task::spawn_blocking(move || {
        let total = read_board(&*view, |b, now| b.row_count(now)).unwrap_or(0);
        (total, board_page(&*view, &query, after))
    })
    .await;
    let Ok((total, board)) = read else {
        let body = html! { p { "Reading the board failed." } };
        return page(
            Showing::status(StatusCode::INTERNAL_SERVER_ERROR),
            "Board",
            "/ui/board",
            &session,
            body,
        );
    };
    let link = |after: &str| {
        session.at(&format!(
            "/ui/board?q={}&provider={}&platform={}&after={}",
            enc(&q.q),
            enc(&q.provider),
            enc(&q.platform),
            enc(after)
        ))
    };
    let body = html! {
        form method="get" action=(session.at("/ui/board")) class="filters" role="search" {
            label for="q" { "Search" }
            input id="q" name="q" type="search" value=(q.q);
            label for="provider" { "Provider" }
            input id="provider" name="provider" list="providers" value=(q.provider);
            datalist id="providers" {
                @for p in &board.providers { option value=(p) {} }
            }
            label for="platform" { "Box platform" }
            input id="platform" name="platform" list="platforms" value=(q.platform);
            datalist id="platforms" {
                @for p in &board.platforms { option value=(p) {} }
            }
            button type="submit" { "Filter" }
        }
        p {
            (board.rows.len())
            @if q.filtered() { " matching" }
            " skills on this page, of " (total) " on the board"
            @if board.rows.len() < BOARD_PAGE && board.next.is_some() {
                ", after reading " (board.looked_at) " rows; the next page reads on"
            }
            ". Descriptions are the peers' own words."
        }
        table {
            (columns(&["Skill", "Description (from the peer)", "Provider", "Boxes", "Needs", "Peer"], Some("Call")))
            tbody {
                @for r in &board.rows {
                    tr {
                        td { (r.skill) }
                        td class="peer-text" { (peer_line(&r.description, 300)) }
                        td { (r.provider) }
                        td { (peer_line(&r.platforms.join(", "), 200)) }
                        td class="peer-text" { (needs(&r.required_sources)) }
                        td { code title=(r.peer) { (short(&r.peer)) } }
                        td { a href=(session.at(&format!("/ui/calls?peer={}&skill={}", enc(&r.peer), enc(&r.skill)))) { "Call…" } }
                    }
                }
            }
        }
        @if !first || board.next.is_some() {
            nav aria-label="Board pages" {
                @if !first { a href=(link("")) { "First page" } " " }
                @if let Some(next) = &board.next { a href=(link(&next.cursor())) rel="next" { "Next" } }
            }
        }
    };
    page(Showing::OK, "Board", "/ui/board", &session, body)
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

    /// A board of `peers × skills` rows, as the node's view of it.
    fn view(peers: usize, skills: usize) -> std::sync::Mutex<skillbox_peers::Board> {
        std::sync::Mutex::new(skillbox_testkit::node_api::board_of_rows(peers, skills))
    }

    /// The board's skills in board order.
    fn order(view: &std::sync::Mutex<skillbox_peers::Board>) -> Vec<String> {
        read_board(view, |b, now| {
            b.rows_after(now, None)
                .map(|r| r.skill.name.clone())
                .collect()
        })
        .unwrap_or_default()
    }

    /// Issue 30 item 13, and the copy it left: the page rendered BOARD_PAGE rows but copied
    /// the whole peer-written board (every row, every peer's boxes) on each request. A page now
    /// looks at its rows and the one after, whatever the board holds; its pages, followed
    /// through `next`, are every row once in board order; a filter reads on to its end.
    #[test]
    fn a_board_page_reads_its_rows_and_one_more() {
        let view = view(3, 250);
        let all = order(&view);
        let first = board_page(&view, &BoardQuery::default(), None);
        assert_eq!(
            (first.rows.len(), first.looked_at),
            (BOARD_PAGE, BOARD_PAGE + 1),
            "rows shown and rows looked at, of a board of 750"
        );
        let (mut seen, mut after, mut pages) = (Vec::new(), None, 0);
        loop {
            let p = board_page(&view, &BoardQuery::default(), after);
            pages += 1;
            assert!(p.rows.len() <= BOARD_PAGE);
            if p.next.is_some() {
                assert_eq!(p.rows.len(), BOARD_PAGE);
                assert_eq!(
                    p.looked_at,
                    BOARD_PAGE + 1,
                    "a page of the 750-row board looked at {} rows",
                    p.looked_at
                );
            }
            seen.extend(p.rows.into_iter().map(|r| r.skill));
            match p.next {
                Some(k) => after = Some(k),
                None => break,
            }
        }
        assert_eq!((seen, pages), (all, 8));
        let q = BoardQuery {
            q: "SKILL-1-2".into(),
            ..Default::default()
        };
        let p = board_page(&view, &q, None);
        assert_eq!(p.rows.len(), 50, "skill-1-200 to skill-1-249");
        assert!(p.next.is_none() && p.looked_at == 750);
        assert_eq!(p.providers.into_iter().collect::<Vec<_>>(), ["openrouter"]);
    }

    /// The search's rule moved into [`holds`] (one buffer a walk reuses): it answers as
    /// lowercasing each field with `str::to_lowercase` did, for ASCII and for text whose
    /// lowercase changes its length or hangs on the letters around (Greek's final sigma), and
    /// never across the two fields.
    #[test]
    fn a_search_matches_as_lowercasing_each_field_did() {
        let mut lower = String::from("left over from the row before");
        let rows = [
            ("summarize-notes", "Summaries of MEETING notes"),
            ("odos", "ΟΔΟΣ ΚΑΙ ΣΟΦΙΑ"),
            ("dotted", "İstanbul KELVIN \u{212A}"),
            ("ab", "cd"),
        ];
        let needles = [
            "meeting",
            "notes",
            "summarize",
            "οδος",
            "οδοσ",
            "σοφια",
            "i\u{307}stanbul",
            "kelvin k",
            "bc",
            "b",
            "x",
        ];
        for (name, description) in rows {
            for needle in needles {
                let before = name.to_lowercase().contains(needle)
                    || description.to_lowercase().contains(needle);
                assert_eq!(
                    holds(&mut lower, name, description, needle),
                    before,
                    "{name:?} {description:?} {needle:?}"
                );
            }
        }
    }

    /// The board page of a node whose board is `view`, for `query` (as the URL carries it).
    async fn shown(state: &AppState, query: &str) -> (StatusCode, String) {
        let uri: axum::http::Uri = format!("/ui/board?{query}").parse().expect("uri");
        let q = Query::<BoardQuery>::try_from_uri(&uri).expect("query");
        let session = Session {
            csrf: String::new(),
            key: [0; 32],
            base: crate::Base("0".repeat(32)),
        };
        let resp = board(State(state.clone()), Extension(session), q).await;
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("body");
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The skills a rendered page lists, in its order.
    fn listed(page: &str) -> Vec<String> {
        page.split("<td>skill-")
            .skip(1)
            .filter_map(|t| t.split('<').next())
            .map(|n| format!("skill-{n}"))
            .collect()
    }

    /// The query of the page's next link, as the browser sends it.
    fn next_link(page: &str) -> Option<String> {
        let at = page.find("rel=\"next\"")?;
        let tag = &page[page[..at].rfind("<a ")?..at];
        let href = tag.split("href=\"").nth(1)?.split('"').next()?;
        // At the session's address, as the page links it.
        let query = href.split_once("/board?")?.1;
        Some(query.replace("&amp;", "&"))
    }

    /// The dashboard's board page over a board of 250 rows: 100 rows and a next link, which
    /// gives the next 100, then the last 50 and no next link; a page link it did not make is
    /// refused in fixed words.
    #[tokio::test]
    async fn the_board_page_shows_one_page_and_a_next_link_that_goes_on() {
        let dir = skillbox_testkit::node_api::init_dir();
        let node = skillbox_node::Node::open(dir.path()).expect("open");
        let board = Arc::new(view(2, 125));
        let all = order(&board);
        node.attach_board(board).expect("attach");
        let state = node.state();
        let (mut seen, mut query, mut pages) = (Vec::new(), String::new(), Vec::new());
        loop {
            let (status, page) = shown(&state, &query).await;
            assert_eq!(status, StatusCode::OK, "{page}");
            let rows = listed(&page);
            pages.push(rows.len());
            assert!(page.contains(&format!("{} skills on this page, of 250", rows.len())));
            seen.extend(rows);
            match next_link(&page) {
                Some(next) => query = next,
                None => break,
            }
        }
        assert_eq!((seen, pages), (all, vec![100, 100, 50]));
        let (status, page) = shown(&state, "after=%3CECHOMARK%3E.61").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(page.contains("not one this dashboard made"), "{page}");
        assert!(
            !page.contains("ECHOMARK"),
            "the link is not said back: {page}"
        );
    }
}
