//! Peers: this node's addresses, the connected peers, dialling one.

use super::*;

// ---- peers

async fn peers_page(
    s: &AppState,
    session: &Session,
    notice: Option<&str>,
    status: StatusCode,
) -> Response {
    let Some(h) = s.peers.get() else {
        let body = html! { p { "The peer network is not running on this node." } };
        return page(StatusCode::OK, "Peers", "/ui/peers", session, notice, body);
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
    page(status, "Peers", "/ui/peers", session, notice, body)
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
            return peers_page(
                &s,
                &session,
                Some("That is not a multiaddr."),
                StatusCode::BAD_REQUEST,
            )
            .await;
        }
    };
    let Some(h) = s.peers.get() else {
        return peers_page(&s, &session, None, StatusCode::SERVICE_UNAVAILABLE).await;
    };
    match h.dial(addr).await {
        Ok(_) => Redirect::to(&session.at("/ui/peers")).into_response(),
        Err(e) => {
            peers_page(
                &s,
                &session,
                Some(&format!("Cannot connect: {e}")),
                StatusCode::BAD_GATEWAY,
            )
            .await
        }
    }
}
