//! Calls, approvals and policy routes (§7, §9): thin handlers over [`crate::calls::Calls`].

use axum::Json;
use axum::http::Uri;
use axum::response::Response;
use zeroize::Zeroizing;

use super::ApiError;
use super::bodies::{
    ApprovalList, CallList, DecisionBody, IntentBody, IntentStarted, OneCall, StartBody,
};
use super::extract::{
    BadBody, CallBody, CallPath, Driver, JsonBody, NoCalls, NoSuchCall, NotJson, Param, Small,
    TooLarge, UnknownQuery, driver_reads, query, written,
};
use crate::calls::records::{Filter, parse_role};
use crate::calls::{CallView, StartCall};

/// The routes that start a call (`POST /calls`, the skill intent): a request text read as a
/// [`CallBody`] and a 201 with what was started. A row says its path, name (with the names it
/// binds the driver and the body to, and the body's type), summary, the 201's body and words,
/// the refusals that are its own, and the handler's block, which gives that body; the table
/// writes what they declare alike (the body's `TooLarge` and `NotJson`, `NoCalls`). A macro for
/// the reason [`driver_reads`] is one.
macro_rules! call_starts {
    () => {};
    (
        $(#[$doc:meta])*
        post $path:literal => $name:ident($c:ident, $b:ident: $request:ident)
            $summary:literal created($body:ident, $ok:literal) [$($refused:tt),* $(,)?]
            $handler:block
        $($rest:tt)*
    ) => {
        $(#[$doc])*
        #[utoipa::path(
            post, path = $path,
            summary = $summary,
            request_body = $request,
            responses(
                (status = 201, description = $ok, body = $body),
                $($refused,)* TooLarge, NotJson, NoCalls
            )
        )]
        pub(super) async fn $name(
            Driver($c): Driver,
            JsonBody($b, _): CallBody<$request>,
        ) -> Result<Response, ApiError> {
            let started: $body = $handler;
            Ok(written(true, started))
        }
        call_starts!($($rest)*);
    };
}

call_starts! {
    post "/calls" => post_call(c, b: StartBody)
        "Start a call as caller: a peer's skill on the board right now, applied to the request and the chosen sources (omitted: the skill's requiredSources this node holds; []: none)."
        created(CallView, "The call, `requested`.") [
            (status = 400, description = "Bad body (`validation_error`), a source outside requiredSources (`source_not_required`), one this node does not hold (`source_not_held`), named twice (`duplicate_source`)."),
            (status = 409, description = "The skill is not on the board right now (`skill_not_offered`), or no box both sides accept (`no_common_box`, details.peer the peer whose advert was tried)."),
            (status = 422, description = "The skill requires sources and this node holds none of them (`required_sources_not_held`)."),
        ]
    {
        if b.peer.is_empty() || b.skill.is_empty() {
            return Err(ApiError::validation(
                if b.peer.is_empty() { "peer" } else { "skill" },
                "must not be empty",
            ));
        }
        let from_agent = from_agent(b.surface.as_deref())?;
        let req = StartCall {
            peer: b.peer,
            skill: b.skill,
            request: Zeroizing::new(b.request),
            sources: b.sources,
        };
        if from_agent {
            c.start_by(req, crate::calls::StartedBy::Agent).await?
        } else {
            c.start(req).await?
        }
    }

    /// `POST /intents/skill {text}`: the pick (skill, peer, score, runner-up) and the call started.
    post "/intents/skill" => intent_skill(c, b: IntentBody)
        "The skill intent: rank the skills the board offers right now (that this node could call) against the text by BM25 over name and description, and start a call on the best with sources omitted. Nothing below the score threshold is picked."
        created(IntentStarted, "The pick and the call it started.") [
            BadBody,
            (status = 409, description = "Nothing on the board matches (`no_offered_skill`, details.reason `no_candidates` or `no_match` with the best score and the threshold), or no box both sides accept for the pick (`no_common_box`, details.peer the peer picked)."),
        ]
    {
        let (pick, call) = if from_agent(b.surface.as_deref())? {
            c.intent_by(Zeroizing::new(b.text), crate::calls::StartedBy::Agent)
                .await?
        } else {
            c.intent(Zeroizing::new(b.text)).await?
        };
        IntentStarted {
            pick,
            call_id: call.id.clone(),
            call,
        }
    }
}

#[utoipa::path(
    get, path = "/calls",
    summary = "Calls on both sides, newest first; filter by state, role, peer.",
    params(
        ("state" = Option<String>, Query, description = "requested, received, accepted, opened, staked, awaiting_consent, submitting, submitted, answered, ran or failed."),
        ("role" = Option<String>, Query, description = "caller or owner."),
        ("peer" = Option<String>, Query),
        ("limit" = Option<u32>, Query, minimum = 1),
    ),
    responses(
        (status = 200, description = "Calls.", body = CallList),
        (status = 400, description = "Unknown parameter or value (`validation_error`)."),
        NoCalls,
    )
)]
pub(super) async fn list_calls(Driver(c): Driver, uri: Uri) -> Result<Json<CallList>, ApiError> {
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
    Ok(Json(CallList::of(c.list(f).await?)))
}

driver_reads! {
    get "/calls/{id}" => get_call(c, id, surface)
        "One call; on the caller's side with the answer once `answered`."
        ok(OneCall, "The call.") = OneCall::of(c.get(&id).await?);
    post "/calls/{id}/cancel" => cancel_call(c, id, surface)
        "Fail the call here (`cancelled`), cancel its run, tell the peer."
        ok(OneCall, "The call.") = OneCall::of(c.cancel(&id).await?);
}

/// The `surface` query of a call's read and cancel: what the agent surfaces send.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // the document's parameter; the handler reads it with `agent_only`
struct AgentSurface {
    /// `agent`: only a call an agent surface (MCP, A2A) started; any other — one the human
    /// started from the CLI or the dashboard, an owner's — is `not_found`, untouched.
    surface: Option<String>,
}

/// With `surface=agent`, `not_found` unless an agent surface started the call: an agent
/// follows and cancels its own calls, never the human's (whose answers a peer's text could ask
/// it to pull into its context and send on).
async fn agent_only(c: &crate::calls::Calls, id: &str, uri: &Uri) -> Result<(), ApiError> {
    let q = query(uri, &["surface"])?;
    if from_agent(q.get("surface").map(String::as_str))? {
        c.started_by_an_agent(id).await?;
    }
    Ok(())
}

driver_reads! {
    get "/approvals" => list_approvals(c)
        "Calls waiting for this node's human (policy said `ask`), each with exactly what approving it discloses."
        ok(ApprovalList, "Approvals.") = ApprovalList::of(c.approvals().await?);
}

#[utoipa::path(
    post, path = "/approvals/{id}",
    summary = "Decide a parked call's question (`question`: the digest shown with it): `allow` submits, `deny` fails it (`consent_denied`). A missing `question` is a `validation_error` naming it.",
    params(CallPath),
    request_body = DecisionBody,
    responses(
        (status = 200, description = "The call.", body = OneCall),
        BadBody,
        NoSuchCall,
        (status = 403, description = "`via: elicitation` on a node with `calls.elicitation_consent = false` (`elicitation_consent_off`). `via: elicitation` with `remember` (only the human makes rules), or allowing a call that stakes sources (an agent's client may deny it, not approve it), is a 400 `validation_error`."),
        (status = 409, description = "The call is not awaiting consent (`not_awaiting_consent`), or asks another question than the one `question` names (`question_changed`: nothing decided, the call still waits)."),
        TooLarge,
        NoCalls,
    )
)]
pub(super) async fn decide_approval(
    Driver(c): Driver,
    Param(id): Param,
    JsonBody(b, _): Small<DecisionBody>,
) -> Result<Json<OneCall>, ApiError> {
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
    let by = match b.via.as_deref() {
        None => crate::calls::DecidedBy::Api,
        Some("cli") => crate::calls::DecidedBy::Cli,
        Some("elicitation") => crate::calls::DecidedBy::Elicitation,
        Some(_) => {
            return Err(ApiError::validation("via", "must be cli or elicitation"));
        }
    };
    Ok(Json(OneCall::of(
        c.consent_by(&id, allow, b.remember, by, b.question.as_deref())
            .await?,
    )))
}

/// A start body's `surface`: `agent` or nothing.
fn from_agent(surface: Option<&str>) -> Result<bool, ApiError> {
    match surface {
        None => Ok(false),
        Some("agent") => Ok(true),
        Some(_) => Err(ApiError::validation("surface", "must be agent or absent")),
    }
}
