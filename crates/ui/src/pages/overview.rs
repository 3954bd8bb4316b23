//! The overview: the node's health — skills, sources, board, peers, calls by state, every
//! accepted box with its last check — and the metrics.

use super::*;

// ---- overview

pub(crate) async fn overview(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
) -> Response {
    let skills = store(&s, |s| s.skills.list()).await.unwrap_or_default();
    let sources = store(&s, |s| s.sources.list()).await.unwrap_or_default();
    let board = s
        .peers
        .get()
        .map(|h| h.with_board(|b, now| b.row_count(now)))
        .unwrap_or(0);
    let peers = match s.peers.get() {
        Some(h) => h.peers().await.map(|p| p.len()).unwrap_or(0),
        None => 0,
    };
    let calls = calls_of(&s);
    let mut by_state: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut boxes = Vec::new();
    let mut waiting = 0;
    if let Some(c) = &calls {
        for v in c.list(Filter::default()).await.unwrap_or_default() {
            *by_state.entry(v.state).or_default() += 1;
        }
        waiting = c.approvals().await.map(|a| a.len()).unwrap_or(0);
        boxes = c.boxes().status();
    }
    let offered = skills.iter().filter(|k| k.offered).count();
    let body = html! {
        dl class="facts" {
            dt { "Node" } dd { code { (s.node_id) } }
            dt { "Skills" } dd { (skills.len()) " (" (offered) " offered)" }
            dt { "Sources" } dd { (sources.len()) }
            dt { "Board" } dd { (board) " skills from peers" }
            dt { "Peers" } dd { (peers) " connected" }
            dt { "Waiting for you" } dd { a href=(session.at("/ui/approvals")) { (waiting) " approvals" } }
        }
        h2 { "Calls by state" }
        @if by_state.is_empty() { p { "No calls yet." } } @else {
            table {
                (columns(&["State", "Calls"], None))
                tbody { @for (st, n) in &by_state { tr { td { (st) } td { (n) } } } }
            }
        }
        h2 { "Boxes" }
        @if calls.is_none() { p { "The calls driver is not running (no peer network)." } }
        @else if boxes.is_empty() { p { "No box is accepted (boxes.accept in config.toml)." } } @else {
            table {
                (columns(&["Box", "Reachable", "Platform", "Isolation", "Providers (models)"], None))
                tbody {
                    @for b in &boxes {
                        tr data-box=(b.url) {
                            td { code { (b.url) } }
                            td { (reachability(b)) }
                            @if let Some(k) = &b.known {
                                td { (k.platform) }
                                td { @if k.platform == "insecure-dev" { strong { "none: its operator can read what is staked" } } @else { "hardware" } }
                                td {
                                    @for p in &k.providers {
                                        span class=(if p.available { "ok" } else { "off" }) {
                                            (p.id) @if !p.available { " (unavailable)" }
                                        } " "
                                    }
                                }
                            } @else {
                                td colspan="3" { "never answered" }
                            }
                        }
                    }
                }
            }
            form method="post" action=(session.at("/ui/boxes/check")) {
                (csrf_field(&session))
                button type="submit" { "Check the boxes now" }
            }
        }
    };
    page(Showing::OK, "Overview", "/ui", &session, body)
}

/// When the box was last asked, and whether it answered usably (stable codes, in words).
fn reachability(b: &skillbox_node::calls::boxes::BoxStatus) -> Markup {
    let Some(check) = &b.last_check else {
        return html! { "not asked yet" };
    };
    let why = match check.refusal {
        None => None,
        Some("insecure_dev_not_allowed") => {
            Some("answers as insecure-dev, which this node does not allow")
        }
        Some("pin_mismatch") => Some("does not show its pinned identity"),
        Some("key_changed") => Some("shows another key than it first did"),
        Some("platform_changed") => Some("shows another platform than it first did"),
        Some("key_missing") => Some("answers as insecure-dev without a key"),
        Some("identity_malformed") => Some("shows a malformed identity"),
        Some("store_failed") => Some("its first identity could not be kept"),
        // Its TLS key is not one its own attestation bound: a man in the middle, or a box
        // that no longer proves itself (7263cdc); not the same as silence.
        Some("tls_key_not_attested") => Some("its connection shows a TLS key it did not attest"),
        Some(_) => Some("did not answer"),
    };
    html! {
        @match why {
            None => span class="ok" { "yes" },
            Some(w) => span class="off" { "no: " (w) },
        }
        " (" time { (when(check.at_ms)) } ")"
    }
}

/// `POST /ui/boxes/check`: ask every accepted box who it is now.
pub(crate) async fn check_boxes(
    State(s): State<AppState>,
    Posted { session, form: _ }: Posted<CsrfOnly>,
) -> Response {
    if let Some(c) = calls_of(&s) {
        c.boxes().refresh().await;
    }
    Redirect::to(&session.at("/ui")).into_response()
}

// ---- metrics

/// One metric family of the OpenMetrics text: its help and its samples (histogram buckets
/// left out: their count and sum say how many and how long).
struct Family {
    name: String,
    help: String,
    samples: Vec<(String, String)>,
}

fn families(text: &str) -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push(Family {
                name: name.to_owned(),
                help: help.to_owned(),
                samples: Vec::new(),
            });
        } else if line.starts_with('#') || line.is_empty() {
            continue;
        } else if let Some((sample, value)) = line.rsplit_once(' ') {
            if sample
                .split('{')
                .next()
                .is_some_and(|n| n.ends_with("_bucket"))
            {
                continue;
            }
            if let Some(f) = out.last_mut() {
                f.samples.push((sample.to_owned(), value.to_owned()));
            }
        }
    }
    out
}

/// `GET /ui/metrics`: the node's metrics (the same text `GET /metrics` serves), as tables.
pub(crate) async fn metrics(
    State(s): State<AppState>,
    Extension(session): Extension<Session>,
) -> Response {
    let text = s.metrics_text().await.unwrap_or_default();
    let families = families(&text);
    let body = html! {
        p { "The same figures " code { "GET /metrics" } " serves to Prometheus (OpenMetrics text; histogram buckets are left out here)." }
        @for f in &families {
            section aria-label=(f.name) {
                h2 { code { (f.name) } }
                p { (f.help) }
                @if f.samples.is_empty() { p { "No samples yet." } } @else {
                    table {
                        (columns(&["Sample", "Value"], None))
                        tbody {
                            @for (sample, value) in &f.samples {
                                tr { td { code { (sample) } } td { (value) } }
                            }
                        }
                    }
                }
            }
        }
    };
    page(Showing::OK, "Metrics", "/ui/metrics", &session, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_families_keep_help_and_samples_and_drop_buckets() {
        let text = "# HELP skillbox_calls Calls in the store.\n# TYPE skillbox_calls gauge\nskillbox_calls{role=\"caller\",state=\"answered\"} 2\n# HELP skillbox_call_seconds Call duration.\n# TYPE skillbox_call_seconds histogram\nskillbox_call_seconds_sum{role=\"caller\"} 1.5\nskillbox_call_seconds_count{role=\"caller\"} 2\nskillbox_call_seconds_bucket{le=\"0.5\",role=\"caller\"} 1\n# EOF\n";
        let f = families(text);
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].name, "skillbox_calls");
        assert_eq!(f[0].help, "Calls in the store.");
        assert_eq!(
            f[0].samples,
            [(
                "skillbox_calls{role=\"caller\",state=\"answered\"}".to_owned(),
                "2".to_owned()
            )]
        );
        assert_eq!(f[1].samples.len(), 2, "buckets are left out");
        assert!(f[1].samples.iter().all(|(s, _)| !s.contains("_bucket")));
    }

    /// A box whose connection shows a key its attestation did not bind (a man in the middle)
    /// is not shown as one that is merely down: the human's next step differs.
    #[test]
    fn a_key_the_box_did_not_attest_is_not_shown_as_silence() {
        let status = |refusal| skillbox_node::calls::boxes::BoxStatus {
            url: "https://box.example".to_owned(),
            known: None,
            last_check: Some(skillbox_node::calls::boxes::BoxCheck { at_ms: 0, refusal }),
        };
        let shown = reachability(&status(Some("tls_key_not_attested"))).into_string();
        assert!(shown.contains("did not attest"), "{shown}");
        assert!(!shown.contains("did not answer"), "{shown}");
        let down = reachability(&status(Some("box_unreachable"))).into_string();
        assert!(down.contains("did not answer"), "{down}");
    }
}
