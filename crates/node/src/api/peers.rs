//! The peer network: the board of what peers offer, the connected peers, dialling one.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use super::bodies::*;
use super::extract::{Media, NotJson, TooLarge, json, query};
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

/// `GET /board`: one row per offered skill of every peer on the board. The rows come
/// pre-rendered from the board (no per-request serialization of 10,000 adverts).
#[utoipa::path(
    get, path = "/board",
    summary = "What peers offer right now: one row per offered skill of every peer's newest unexpired advert.",
    responses(
        (status = 200, description = "The board.", body = Board),
        (status = 400, description = "Unknown query parameter (`validation_error`)."),
        (status = 503, description = "The peer network is not running (`peers_unavailable`)."),
    )
)]
pub(super) async fn board(State(s): State<AppState>, uri: Uri) -> Result<Response, ApiError> {
    query(&uri, &[])?;
    let view = s.board.get().ok_or_else(peers_unavailable)?.clone();
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
        (status = 503, description = "The peer network is not running (`peers_unavailable`)."),
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
        (status = 503, description = "The peer network is not running (`peers_unavailable`)."),
    )
)]
pub(super) async fn add_peer(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let expected = "not the expected JSON (addr: a multiaddr)";
    let dial: Dial = json(&headers, body, Media::Json, 4096, expected).await?;
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
