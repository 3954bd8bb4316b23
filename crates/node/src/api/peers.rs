//! The peer network: the board of what peers offer, the connected peers, dialling one.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use super::bodies::*;
use super::extract::{Expected, JsonBody, NoPeers, NotJson, Tiny, TooLarge, query};
use super::{ApiError, AppState};

pub(super) fn peers_unavailable() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "peers_unavailable",
        "the peer network is not running on this node",
    )
}

/// The running network failed to answer (its task ended between the check and the question).
fn network(e: skillbox_peers::PeersError) -> ApiError {
    ApiError::internal(format!("peer network: {e}"))
}

/// A board search's text at most: a request, not a document (the index looks up a few terms).
const MAX_SEARCH_BYTES: usize = 4096;

/// `GET /board[?q=TEXT]`: one row per offered skill of every peer on the board. The rows come
/// pre-rendered from the board (no per-request serialization of 10,000 adverts). With `q`, the
/// skill index is searched first as `index.search` allows (`terms`: always, by `q`'s rarest
/// words; `category`: only when no row on the board answers `q`, by its category alone;
/// `board`: never): the adverts of the providers it names are fetched, verified and cached on
/// the board, so the answer holds what the network offers for `q`, not only what the live
/// topics brought.
#[utoipa::path(
    get, path = "/board",
    summary = "What peers offer right now: one row per offered skill of every peer's newest unexpired advert.",
    params(("q" = Option<String>, Query, description = "Search the skill index for this request first, as the node's `index.search` allows; the providers it names join the board.")),
    responses(
        (status = 200, description = "The board.", body = Board),
        (status = 400, description = "Unknown query parameter, or `q` over 4096 bytes (`validation_error`)."),
        NoPeers,
    )
)]
pub(super) async fn board(State(s): State<AppState>, uri: Uri) -> Result<Response, ApiError> {
    let q = query(&uri, &["q"])?;
    let view = s.board.get().ok_or_else(peers_unavailable)?.clone();
    if let Some(text) = q.get("q") {
        if text.len() > MAX_SEARCH_BYTES {
            return Err(ApiError::validation("query.q", "longer than 4096 bytes"));
        }
        let handle = s.peers.get().ok_or_else(peers_unavailable)?;
        // As the intent does (`index.search`): under `category` the board first, the index
        // (category key alone) only when no row of another peer answers `q`.
        let (rows, me) = (handle.board(), handle.local_peer_id().to_base58());
        let others: Vec<skillbox_calls::intent::Candidate<'_>> = rows
            .iter()
            .filter(|r| r.peer != me)
            .map(Into::into)
            .collect();
        if crate::calls::index_needed(handle.search_scope(), text, &others) {
            handle.search(text).await.map_err(network)?;
        }
    }
    let (rows, peers) = view.board_json();
    let mut body = String::with_capacity(rows.len() + 32);
    body.push_str("{\"board\":");
    body.push_str(&rows);
    body.push_str(",\"peerCount\":");
    body.push_str(&peers.to_string());
    body.push('}');
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

#[utoipa::path(
    get, path = "/peers",
    summary = "This node's peer id and listen addresses, and the peers it is connected to.",
    responses(
        (status = 200, description = "Peers.", body = PeerList),
        NoPeers,
    )
)]
pub(super) async fn list_peers(State(s): State<AppState>) -> Result<Json<PeerList>, ApiError> {
    let handle = s.peers.get().ok_or_else(peers_unavailable)?;
    let peers = handle.peers().await.map_err(network)?;
    let addrs: Vec<String> = handle
        .listen_addrs()
        .await
        .map_err(network)?
        .iter()
        .map(ToString::to_string)
        .collect();
    Ok(Json(PeerList {
        peer_id: handle.local_peer_id().to_base58(),
        listen_addrs: addrs,
        total: peers.len(),
        peers,
    }))
}

impl Expected for Dial {
    const EXPECTED: &'static str = "not the expected JSON (addr: a multiaddr)";
}

/// `POST /peers {"addr": MULTIADDR}`: dial a peer; answers its id once connected.
#[utoipa::path(
    post, path = "/peers",
    summary = "Dial a peer by multiaddr (`/p2p/<peer id>` may be omitted); answers once connected.",
    request_body = Dial,
    responses(
        (status = 200, description = "Connected.", body = Dialled),
        (status = 400, description = "Missing or malformed addr (`validation_error`)."),
        TooLarge,
        NotJson,
        (status = 502, description = "The peer could not be reached (`dial_failed`)."),
        NoPeers,
    )
)]
pub(super) async fn add_peer(
    State(s): State<AppState>,
    JsonBody(dial, _): Tiny<Dial>,
) -> Result<Response, ApiError> {
    let addr: skillbox_peers::Multiaddr = dial.addr.parse().map_err(|e| {
        ApiError::validation("addr", format!("{:?} is not a multiaddr: {e}", dial.addr))
    })?;
    let handle = s.peers.get().ok_or_else(peers_unavailable)?;
    match handle.dial(addr.clone()).await {
        Ok(peer) => Ok(Json(Dialled {
            peer: peer.to_base58(),
            addr: addr.to_string(),
        })
        .into_response()),
        Err(skillbox_peers::PeersError::Stopped) => Err(peers_unavailable()),
        Err(e) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "dial_failed",
            format!("cannot connect to {addr}: {e}"),
        )),
    }
}
