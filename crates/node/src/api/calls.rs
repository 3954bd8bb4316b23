//! Calls, approvals and policy routes (§7, §9): thin handlers over [`crate::calls::Calls`].

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use zeroize::Zeroizing;

use super::{ApiError, AppState, path_param, query, read_body};
use crate::calls::records::{Filter, parse_role};
use crate::calls::{CallError, Calls, StartCall};
use crate::config::PolicyConfig;

const SMALL_BODY: usize = 64 * 1024;

impl From<CallError> for ApiError {
    fn from(e: CallError) -> ApiError {
        let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let details = match &e {
            CallError::Selection(s) => serde_json::to_value(s).ok(),
            CallError::NoPick(p) => serde_json::to_value(p).ok(),
            _ => None,
        };
        let err = ApiError::new(status, e.code(), e.to_string());
        match details {
            Some(d) => err.with_details(d),
            None => err,
        }
    }
}

pub(super) fn calls(s: &AppState) -> Result<Calls, ApiError> {
    s.calls.get().cloned().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "calls_unavailable",
            "calls need the peer network, which this node has not started",
        )
    })
}

fn json_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        // serde's message names the field and what was expected; the position helps too.
        ApiError::validation("body", format!("not the expected JSON: {e}"))
    })
}

/// A body that carries a request text: up to `calls.max_request_bytes` plus room for the rest.
async fn request_body<T: serde::de::DeserializeOwned>(
    s: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    let limit = s.calls_max_request.saturating_add(SMALL_BODY);
    json_body(&read_body(body, headers, limit).await?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StartBody {
    peer: String,
    skill: String,
    request: String,
    #[serde(default)]
    sources: Option<Vec<String>>,
}

pub(super) async fn post_call(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let c = calls(&s)?;
    let b: StartBody = request_body(&s, &headers, body).await?;
    if b.peer.is_empty() || b.skill.is_empty() {
        return Err(ApiError::validation(
            if b.peer.is_empty() { "peer" } else { "skill" },
            "must not be empty",
        ));
    }
    let view = c
        .start(StartCall {
            peer: b.peer,
            skill: b.skill,
            request: Zeroizing::new(b.request),
            sources: b.sources,
        })
        .await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

pub(super) async fn list_calls(
    State(s): State<AppState>,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let c = calls(&s)?;
    let q = query(&uri, &["state", "role", "peer", "limit"])?;
    let mut f = Filter::default();
    if let Some(v) = q.get("state") {
        f.state = Some(skillbox_calls::State::parse(v).ok_or_else(|| {
            ApiError::validation(
                "query.state",
                format!("unknown state {v:?} (requested, received, accepted, opened, staked, awaiting_consent, submitting, submitted, answered, ran, failed)"),
            )
        })?);
    }
    if let Some(v) = q.get("role") {
        f.role = Some(parse_role(v).ok_or_else(|| {
            ApiError::validation("query.role", format!("{v:?} is not caller or owner"))
        })?);
    }
    f.peer = q.get("peer").cloned();
    if let Some(v) = q.get("limit") {
        f.limit = Some(
            v.parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| ApiError::validation("query.limit", "a positive integer"))?,
        );
    }
    let list = c.list(f).await?;
    Ok(Json(json!({ "calls": list, "total": list.len() })))
}

pub(super) async fn get_call(
    State(s): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let c = calls(&s)?;
    let id = path_param(id)?;
    let views = c.get(&id).await?;
    Ok(Json(one(views)))
}

/// One view when there is one row; both (caller first) when a node called itself.
fn one(mut views: Vec<crate::calls::CallView>) -> Value {
    if views.len() == 1 {
        json!(views.remove(0))
    } else {
        json!({ "sides": views })
    }
}

pub(super) async fn cancel_call(
    State(s): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let c = calls(&s)?;
    let id = path_param(id)?;
    Ok(Json(one(c.cancel(&id).await?)))
}

pub(super) async fn list_approvals(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    let c = calls(&s)?;
    let list = c.approvals().await?;
    Ok(Json(json!({ "approvals": list, "total": list.len() })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    decision: String,
    /// Record the decision as a policy rule for this peer, skill and source set.
    #[serde(default)]
    remember: bool,
}

pub(super) async fn decide_approval(
    State(s): State<AppState>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let c = calls(&s)?;
    let id = path_param(id)?;
    let bytes = read_body(body, &headers, SMALL_BODY).await?;
    let b: DecisionBody = json_body(&bytes)?;
    let allow = match b.decision.as_str() {
        "allow" => true,
        "deny" => false,
        other => {
            return Err(ApiError::validation(
                "decision",
                format!("{other:?} is not allow or deny"),
            ));
        }
    };
    Ok(Json(one(c.consent(&id, allow, b.remember).await?)))
}

pub(super) async fn get_policy(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    let c = calls(&s)?;
    Ok(Json(json!(c.policy())))
}

pub(super) async fn put_policy(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let c = calls(&s)?;
    let bytes = read_body(body, &headers, SMALL_BODY).await?;
    let policy: PolicyConfig = json_body(&bytes)?;
    let store = s.sources.store().clone();
    let p = policy.clone();
    super::blocking(move || crate::calls::save_policy(&store, &p)).await?;
    c.set_policy(policy.clone());
    Ok(Json(json!(policy)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IntentBody {
    text: String,
}

/// `POST /intents/skill {text}`: the pick (skill, peer, score, runner-up) and the call started.
pub(super) async fn intent_skill(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let c = calls(&s)?;
    let b: IntentBody = request_body(&s, &headers, body).await?;
    let (pick, call) = c.intent(Zeroizing::new(b.text)).await?;
    let body = json!({
        "skill": pick.skill,
        "peer": pick.peer,
        "score": pick.score,
        "runnerUp": pick.runner_up,
        "callId": call.id,
        "call": call,
    });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}
