//! Peers: this node's addresses, the connected peers, dialling one.

use super::*;

// ---- peers

async fn peers_page(s: &AppState, session: &Session, shown: Showing<'_>) -> Response {
    let Some(h) = s.peers.get() else {
        let body = html! { p { "The peer network is not running on this node." } };
        // The page says why (no network), whatever the form's status.
        let shown = Showing {
            status: StatusCode::OK,
            ..shown
        };
        return page(shown, "Peers", "/ui/peers", session, body);
    };
    let peers = h.peers().await.unwrap_or_default();
    let listen: Vec<String> = h
        .listen_addrs()
        .await
        .unwrap_or_default()
        .iter()
        .map(ToString::to_string)
        .collect();
    let me = h.local_peer_id().to_base58();
    let body = html! {
        dl class="facts" {
            dt { "Peer id" } dd { code { (me) } }
            dt { "Listening on" } dd { @for a in &listen { code { (a) "/p2p/" (me) } br; } }
        }
        h2 { "Connected" }
        @if peers.is_empty() { p { "No peer is connected." } } @else {
            table {
                (columns(&["Peer", "Addresses", "Agent"], None))
                tbody {
                    @for p in &peers {
                        tr {
                            td { code { (p.peer) } }
                            td { (peer_line(&p.addresses.join(", "), 1000)) }
                            td { (peer_line(p.agent_version.as_deref().unwrap_or(""), 80)) }
                        }
                    }
                }
            }
        }
        h2 { "Connect to a peer" }
        form method="post" action=(session.at("/ui/peers")) class="stack" {
            (csrf_field(session))
            label for="peer-addr" { "Multiaddr (…/p2p/PEER_ID)" }
            input id="peer-addr" name="addr" type="text" required;
            button type="submit" { "Connect" }
        }
    };
    page(shown, "Peers", "/ui/peers", session, body)
}

page_route!(peers => peers_page);

#[derive(Deserialize)]
pub(crate) struct PeerForm {
    addr: String,
}

pub(crate) async fn add_peer(
    State(s): State<AppState>,
    Posted { session, form: f }: Posted<PeerForm>,
) -> Response {
    let addr: skillbox_peers::Multiaddr = match f.addr.trim().parse() {
        Ok(a) => a,
        Err(_) => {
            let why = Showing::again(StatusCode::BAD_REQUEST, "That is not a multiaddr.");
            return peers_page(&s, &session, why).await;
        }
    };
    let Some(h) = s.peers.get() else {
        let unavailable = Showing::status(StatusCode::SERVICE_UNAVAILABLE);
        return peers_page(&s, &session, unavailable).await;
    };
    match h.dial(addr).await {
        Ok(_) => Redirect::to(&session.at("/ui/peers")).into_response(),
        Err(e) => {
            let why = format!("Cannot connect: {e}");
            peers_page(&s, &session, Showing::again(StatusCode::BAD_GATEWAY, &why)).await
        }
    }
}
