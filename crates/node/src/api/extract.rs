//! What handlers of one shape share, so each says only what is its own: the path parameter and
//! the calls driver as extractors (their refusals are the envelope's, before the handler runs),
//! a JSON body read one way (media type, limit, parse), the store on the blocking pool, and the
//! answers (found or 404, created or replaced, removed or 404).

use std::collections::BTreeMap;
use std::marker::PhantomData;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use utoipa::openapi::{Content, Ref, RefOr, ResponseBuilder};

use super::{ApiError, AppState, Shared};
use crate::calls::Calls;
use crate::tenants::Principal;
use skillbox_skill::agents::Owner;

/// The route's one path parameter (`{name}`, `{id}`, `{*name}`), percent-decoded. One that does
/// not decode (not UTF-8) is a 400 `validation_error` on `path`. Listed after [`Driver`] where a
/// handler takes both, so a node without calls answers 503 first, as it always has.
pub(super) struct Param(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Param {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(v)| Param(v))
            .map_err(|e| ApiError::validation("path", e.body_text()))
    }
}

/// How the document names the `{name}` of the skill routes (read with [`Param`]): one
/// declaration of its rule, not one a route.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // the document's parameter; the handler reads it with `Param`
pub(super) struct SkillPath {
    /// Skill name.
    #[param(pattern = r"^[a-z0-9]+(-[a-z0-9]+)*$", max_length = 64, min_length = 1)]
    name: String,
}

/// How the document names the `{*name}` of the source routes (read with
/// [`super::sources::SourceName`]).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // the document's parameter; the handler reads it with `SourceName`
pub(super) struct SourcePath {
    /// Source name; may contain `/` (e.g. `skill/<name>/body`), sent as is or percent-encoded.
    #[param(
        pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$",
        min_length = 1,
        max_length = 256
    )]
    name: String,
}

/// How the document names the `{id}` of the call and approval routes (read with [`Param`]).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // the document's parameter; the handler reads it with `Param`
pub(super) struct CallPath {
    /// The call id.
    id: String,
}

/// A route that takes no query parameter: any key is refused by name (400 `validation_error` on
/// `query.<key>`) before the handler runs, so the whole-document reads answer one way.
pub(super) struct NoQuery;

impl<S: Send + Sync> FromRequestParts<S> for NoQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        query(&parts.uri, &[]).map(|_| NoQuery)
    }
}

/// Whom a tenant route (the OpenWOP agent surfaces) answers for: the owner of the token that
/// `require_token` let through. Without one (a route mounted outside the token check) it is a
/// 401, never an answer for nobody in particular.
pub(super) struct Caller(pub Owner);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<Principal>()
            .map(|p| Caller(p.owner.clone()))
            .ok_or_else(ApiError::unauthenticated)
    }
}

/// The calls driver, for the routes that need it (calls, approvals, intents, policy, ledger):
/// without the peer network it is a 503 `calls_unavailable` before anything else is read.
pub(super) struct Driver(pub Calls);

impl FromRequestParts<AppState> for Driver {
    type Rejection = ApiError;

    async fn from_request_parts(_: &mut Parts, s: &AppState) -> Result<Self, ApiError> {
        s.calls.get().cloned().map(Driver).ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "calls_unavailable",
                "calls need the peer network, which this node has not started",
            )
        })
    }
}

/// The answers routes name among their `responses(...)`, each declared once for the document: a
/// name, its status and what the document says of it. The handlers answer them through
/// [`ApiError`] or an extractor's rejection, so the types are never built (`dead_code`).
macro_rules! answers {
    ($($(#[$doc:meta])* $vis:vis $name:ident = $status:tt, $description:tt;)*) => {$(
        $(#[$doc])*
        #[derive(utoipa::IntoResponses)]
        #[response(status = $status, description = $description)]
        #[allow(dead_code)]
        $vis struct $name;
    )*};
}
pub(super) use answers;

answers! {
    /// What [`NoQuery`] refuses.
    pub(super) UnknownQuery = 400, "Unknown query parameter (`validation_error`).";
    /// What [`Driver`] refuses: every route that takes a `Driver` lists it.
    pub(super) NoCalls = 503, "The peer network is not running, so neither are calls (`calls_unavailable`).";
    pub(super) NoSuchCall = 404, "No such call (`not_found`).";
    pub(super) NoSuchSkill = 404, "No such skill (`not_found`).";
    pub(super) NoSuchSource = 404, "No such source (`not_found`).";
    pub(super) NoPeers = 503, "The peer network is not running (`peers_unavailable`).";
    /// A JSON body that parses but is not what the route takes.
    pub(super) BadBody = 400, "Bad body (`validation_error`).";
    /// What [`json`] refuses for a body over the route's limit.
    pub(super) TooLarge = 413, "Body too large (`payload_too_large`).";
    /// What [`json`] refuses for a body that is not JSON.
    pub(super) NotJson = 415, "Not application/json (`unsupported_media_type`).";
    /// What [`removed`] answers when the thing was there.
    pub(super) Removed = 204, "Removed.";
}

/// The calls driver's routes that take no body (a call, its cancel, the approvals, the policy,
/// the ledger's check): [`Driver`], for a call's route its id ([`Param`]), and the driver's
/// answer as JSON. A row says its method, path, name (with the names it binds the driver and the
/// id to, and `surface` where the agent surfaces take the route too), summary, answer and how
/// the driver gives it; the table writes what every such route declares alike: `NoCalls` (the
/// `Driver`'s 503), with a call id `CallPath` and `NoSuchCall`, and with `surface` the
/// `AgentSurface` query and its `UnknownQuery`. A macro because the document's part is an attribute, which a fn cannot write;
/// the rows' modules import what it names.
macro_rules! driver_reads {
    () => {};
    // A call's route the agent surfaces also take: its id, and the `surface` query that keeps
    // an agent to the calls an agent started (`agent_only`, before the driver is asked).
    ($method:ident $path:literal => $name:ident($c:ident, $id:ident, surface) $($row:tt)*) => {
        driver_reads!(@row $method $path $name $c [, Param($id): Param, uri: Uri]
            [params(CallPath, AgentSurface),] [UnknownQuery, NoSuchCall,]
            [agent_only(&$c, &$id, &uri).await?;] $($row)*);
    };
    // A call's route: its id, and with it the call's path parameter and 404.
    ($method:ident $path:literal => $name:ident($c:ident, $id:ident) $($row:tt)*) => {
        driver_reads!(@row $method $path $name $c [, Param($id): Param] [params(CallPath),] [NoSuchCall,] [] $($row)*);
    };
    ($method:ident $path:literal => $name:ident($c:ident) $($row:tt)*) => {
        driver_reads!(@row $method $path $name $c [] [] [] [] $($row)*);
    };
    (
        @row $method:ident $path:literal $name:ident $c:ident
        [$($arg:tt)*] [$($params:tt)*] [$($missing:tt)*] [$($first:tt)*]
        $summary:literal ok($body:ident, $ok:literal) = $answer:expr;
        $($rest:tt)*
    ) => {
        #[utoipa::path(
            $method, path = $path,
            summary = $summary,
            $($params)*
            responses((status = 200, description = $ok, body = $body), $($missing)* NoCalls)
        )]
        pub(super) async fn $name(Driver($c): Driver $($arg)*) -> Result<Json<$body>, ApiError> {
            $($first)*
            Ok(Json($answer))
        }
        driver_reads!($($rest)*);
    };
}
pub(super) use driver_reads;

/// The routes over the named things of the node's state (agents, skills, sources, roster
/// entries), one table a module, a row a route, by what the route does:
///
/// - `list`: every one, on the blocking pool, as the body type's `of` the list.
/// - `get`: one, or its 404 ([`read_one`]). The extractors the route takes follow the state (the
///   last one reads the name); `as` after the answer names the type the read gives where that
///   is not the document's body (the agent surfaces answer JSON values).
/// - `patch`: a JSON change to one this node may offer, the thing after or its 404
///   ([`change_offered`]). The body is the handler's last argument, read by its rule; `let`s
///   (the change read from the body, its refusals the route's own 400) come before the change.
/// - `delete`: the removal of one this node may offer, 204 or its 404 ([`remove_offered`]).
///
/// A row says its method, path, name (with the names it binds the state and each extractor to),
/// summary, the document's path parameter, answer, the refusals it names, and what it reads or
/// changes (what the thing is called, the name, and how); a row's doc comment is its handler's.
/// The table writes what every such route declares alike (a change's `TooLarge` and `NotJson`,
/// a removal's `Removed`). A macro for the same reason as [`driver_reads`]; the rows' modules
/// import what it names.
macro_rules! named_routes {
    () => {};
    // What every row writes: its doc comment, the document's part, and the handler over the
    // state and the route's extractors.
    (
        @route [$($doc:tt)*] $name:ident($s:ident $($args:tt)*) -> $answer:ty
            [$($document:tt)*] $handler:block
    ) => {
        $($doc)*
        #[utoipa::path($($document)*)]
        pub(super) async fn $name(State($s): State<AppState> $($args)*) -> Result<$answer, ApiError>
            $handler
    };
    // What a `get` row's read gives: the document's body, or the type after `as`.
    (@read $body:ident) => { $body };
    (@read $body:ident $given:ty) => { $given };
    (
        $(#[$doc:meta])*
        list $path:literal => $name:ident($s:ident)
            $summary:literal ok($body:ident, $ok:literal) = $read:expr;
        $($rest:tt)*
    ) => {
        named_routes!(@route [$(#[$doc])*] $name($s) -> Json<$body>
            [get, path = $path, summary = $summary,
                responses((status = 200, description = $ok, body = $body))]
            { Ok(Json($body::of(blocking(move || $read).await?))) });
        named_routes!($($rest)*);
    };
    (
        $(#[$doc:meta])*
        get $path:literal => $name:ident($s:ident $(, $ext:ident($arg:ident))+)
            $summary:literal params($params:ident)
            ok($body:ident, $ok:literal) $(as $given:ty)? [$($refused:ident),*]
            = $what:literal($id:ident) |$n:ident| $read:expr;
        $($rest:tt)*
    ) => {
        named_routes!(@route [$(#[$doc])*] $name($s $(, $ext($arg): $ext)+)
            -> Json<named_routes!(@read $body $($given)?)>
            [get, path = $path, summary = $summary, params($params),
                responses((status = 200, description = $ok, body = $body), $($refused),*)]
            { read_one($what, &$id, move |$n| $read).await });
        named_routes!($($rest)*);
    };
    (
        $(#[$doc:meta])*
        patch $path:literal => $name:ident($s:ident, $ext:ident($arg:ident), $change:ident: $rule:ty)
            $summary:literal params($params:ident) request_body = $request:ident
            ok($body:ident, $ok:literal) bad($bad:literal) [$($refused:ident),*]
            $(let $p:pat = $init:expr;)*
            = $what:literal($id:ident) |$sh:ident, $n:ident| $apply:expr;
        $($rest:tt)*
    ) => {
        named_routes!(@route [$(#[$doc])*] $name($s, $ext($arg): $ext, JsonBody($change, _): $rule)
            -> Json<$body>
            [patch, path = $path, summary = $summary, params($params), request_body = $request,
                responses((status = 200, description = $ok, body = $body),
                    (status = 400, description = $bad), $($refused,)* TooLarge, NotJson)]
            {
                $(let $p = $init;)*
                change_offered(&$s, $what, &$id, move |$sh, $n| $apply).await
            });
        named_routes!($($rest)*);
    };
    (
        $(#[$doc:meta])*
        delete $path:literal => $name:ident($s:ident, $ext:ident($arg:ident))
            $summary:literal params($params:ident) [$($refused:ident),*]
            = $what:literal($id:ident) |$sh:ident, $n:ident| $delete:expr;
        $($rest:tt)*
    ) => {
        named_routes!(@route [$(#[$doc])*] $name($s, $ext($arg): $ext) -> StatusCode
            [delete, path = $path, summary = $summary, params($params),
                responses(Removed, $($refused),*)]
            { remove_offered(&$s, $what, &$id, |$sh, $n| $delete).await });
        named_routes!($($rest)*);
    };
}
pub(super) use named_routes;

/// Which media types a JSON body may come as. Every refusal names `application/json` only.
#[derive(Clone, Copy)]
pub(super) enum Media {
    /// Not looked at (consent decisions and the policy, and `POST /skills` which chose by it
    /// already).
    Any,
    /// `application/json`.
    Json,
    /// `application/json` or `application/merge-patch+json` (the agent surfaces, skill changes).
    JsonOrMergePatch,
}

/// A JSON body, read one way: the media type checked (415), the bytes up to `limit` (413), then
/// parsed; what does not parse is a 400 `validation_error` on `body`: `expected`, then serde's
/// message (which names the field and the position).
pub(super) async fn json<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
    media: Media,
    limit: usize,
    expected: &str,
) -> Result<T, ApiError> {
    let found = media_type(headers);
    let accepted = match media {
        Media::Any => true,
        Media::Json => found.as_deref() == Some("application/json"),
        Media::JsonOrMergePatch => matches!(
            found.as_deref(),
            Some("application/json" | "application/merge-patch+json")
        ),
    };
    if !accepted {
        return Err(ApiError::unsupported_media_type(
            found.as_deref(),
            &["application/json"],
        ));
    }
    let bytes = read_body(body, headers, limit).await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::validation("body", format!("{expected}: {e}")))
}

/// How a route reads its JSON body with [`json`]: the media types it takes, its size limit and
/// what a body that does not parse is told. One rule a kind of body, so that handlers of one
/// shape take their body as an extractor ([`JsonBody`]) instead of reading it themselves.
pub(super) trait BodyRule {
    fn rule(s: &Shared) -> (Media, usize, &'static str);
}

/// A JSON body read by rule `R`, the handler's last argument: it is read after the path, the
/// caller and the driver, so their refusals (a node without calls: 503) come first.
pub(super) struct JsonBody<T, R>(pub T, pub PhantomData<R>);

impl<T: DeserializeOwned, R: BodyRule> FromRequest<AppState> for JsonBody<T, R> {
    type Rejection = ApiError;

    async fn from_request(req: Request, s: &AppState) -> Result<Self, ApiError> {
        let (media, limit, expected) = R::rule(s);
        let (parts, body) = req.into_parts();
        let v = json(&parts.headers, body, media, limit, expected).await?;
        Ok(JsonBody(v, PhantomData))
    }
}

/// The limit of a small body, and the room a request text's body has for the rest.
const SMALL_BODY: usize = 64 * 1024;

/// What the calls routes answer when a body does not parse (serde's message follows).
const EXPECTED: &str = "not the expected JSON";

/// A document on the agent surfaces and skill changes: JSON or a merge patch, up to the
/// SKILL.md limit.
pub(super) enum DocRule {}
impl BodyRule for DocRule {
    fn rule(s: &Shared) -> (Media, usize, &'static str) {
        (
            Media::JsonOrMergePatch,
            s.limits.max_skill_bytes,
            "malformed JSON",
        )
    }
}
pub(super) type Doc = JsonBody<serde_json::Value, DocRule>;

/// A small body (a consent decision, a policy), whatever its media type says.
pub(super) enum SmallRule {}
impl BodyRule for SmallRule {
    fn rule(_: &Shared) -> (Media, usize, &'static str) {
        (Media::Any, SMALL_BODY, EXPECTED)
    }
}
pub(super) type Small<T> = JsonBody<T, SmallRule>;

/// A body that carries a request text (`POST /calls`, `POST /intents/skill`): `application/json`
/// only, as every other JSON route (a body sent as a form or text starts nothing), up to
/// `calls.max_request_bytes` plus room for the rest.
pub(super) enum CallRule {}
impl BodyRule for CallRule {
    fn rule(s: &Shared) -> (Media, usize, &'static str) {
        let limit = s.calls_max_request.saturating_add(SMALL_BODY);
        (Media::Json, limit, EXPECTED)
    }
}
pub(super) type CallBody<T> = JsonBody<T, CallRule>;

/// What a [`Tiny`] body's route tells a body that does not parse (serde's message follows).
pub(super) trait Expected {
    const EXPECTED: &'static str;
}

/// A few fields (a peer to dial, a source's change): `application/json` only, up to 4 KiB, the
/// refusal in the body type's own words ([`Expected`]).
pub(super) struct TinyRule<T>(PhantomData<T>);
impl<T: Expected> BodyRule for TinyRule<T> {
    fn rule(_: &Shared) -> (Media, usize, &'static str) {
        (Media::Json, 4096, T::EXPECTED)
    }
}
pub(super) type Tiny<T> = JsonBody<T, TinyRule<T>>;

/// A store write that can change what this node offers (skills, sources), on the blocking pool;
/// when `changed` says it did, the advert goes out now rather than at the next interval.
pub(super) async fn offering<T: Send + 'static>(
    s: &AppState,
    changed: fn(&T) -> bool,
    f: impl FnOnce(&Shared) -> crate::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    let shared = s.clone();
    let out = blocking(move || f(&shared)).await?;
    if changed(&out) {
        s.offer_changed.notify_one();
    }
    Ok(out)
}

/// A write's answer: 201 with the body when it created the thing, 200 when it replaced it.
pub(super) fn written(created: bool, body: impl Serialize) -> Response {
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    (status, Json(body)).into_response()
}

/// What [`written`] answers, declared once for the document: 201 Created or 200 Replaced, each
/// with `T` as its JSON body. An `IntoResponses` type registers no schema, so `T` is one the
/// document names elsewhere (the route's request body, another route's answer); the openapi test
/// `every_reference_names_a_component` holds that.
pub(super) struct Written<T>(PhantomData<T>);

impl<T: utoipa::ToSchema> utoipa::IntoResponses for Written<T> {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        let answer = |description: &str| {
            let schema = Ref::from_schema_name(T::name());
            ResponseBuilder::new()
                .description(description)
                .content("application/json", Content::new(Some(schema)))
                .build()
                .into()
        };
        BTreeMap::from([
            ("201".to_owned(), answer("Created.")),
            ("200".to_owned(), answer("Replaced.")),
        ])
    }
}

/// The 404 `not_found` for a named thing that is not there (`skill "x" not found`).
pub(super) fn missing(what: &str, name: &str) -> ApiError {
    ApiError::not_found(format!("{what} {name:?} not found"))
}

/// A read of one named thing: the thing, or its 404.
fn found<T>(v: Option<T>, what: &str, name: &str) -> Result<Json<T>, ApiError> {
    v.map(Json).ok_or_else(|| missing(what, name))
}

/// A read of one named thing on the blocking pool: the thing, or its 404 naming it.
pub(super) async fn read_one<T: Send + 'static>(
    what: &str,
    name: &str,
    read: impl FnOnce(&str) -> crate::Result<Option<T>> + Send + 'static,
) -> Result<Json<T>, ApiError> {
    let n = name.to_owned();
    let v = blocking(move || read(&n)).await?;
    found(v, what, name)
}

/// A change to one named thing that this node may offer ([`offering`]): the thing as it is
/// after, or its 404. The advert goes out when the thing was there to change.
pub(super) async fn change_offered<T: Send + 'static>(
    s: &AppState,
    what: &str,
    name: &str,
    change: impl FnOnce(&Shared, &str) -> crate::Result<Option<T>> + Send + 'static,
) -> Result<Json<T>, ApiError> {
    let n = name.to_owned();
    let after = offering(s, Option::is_some, move |s| change(s, &n)).await?;
    found(after, what, name)
}

/// A removal of one named thing that this node may offer ([`offering`]): 204, or its 404.
pub(super) async fn remove_offered(
    s: &AppState,
    what: &str,
    name: &str,
    delete: impl FnOnce(&Shared, &str) -> crate::Result<bool> + Send + 'static,
) -> Result<StatusCode, ApiError> {
    let n = name.to_owned();
    let done = offering(s, |d| *d, move |s| delete(s, &n)).await?;
    removed(done, what, name)
}

/// A removal: 204, or the 404 of what was not there.
pub(super) fn removed(done: bool, what: &str, name: &str) -> Result<StatusCode, ApiError> {
    if done {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(missing(what, name))
    }
}

/// A `true`/`false` query parameter; absent is `default`, anything else a 400 on `query.<key>`.
pub(super) fn flag(
    q: &BTreeMap<String, String>,
    key: &str,
    default: bool,
) -> Result<bool, ApiError> {
    match q.get(key).map(String::as_str) {
        None => Ok(default),
        Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(other) => Err(ApiError::validation(
            &format!("query.{key}"),
            format!("{other:?} is not true or false"),
        )),
    }
}

pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> crate::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("store worker failed: {e}")))?
        .map_err(ApiError::from)
}

/// Parse the query string; a key outside `allowed` is refused by name.
pub(super) fn query(uri: &Uri, allowed: &[&str]) -> Result<BTreeMap<String, String>, ApiError> {
    let Query(q) = Query::<BTreeMap<String, String>>::try_from_uri(uri)
        .map_err(|e| ApiError::validation("query", format!("malformed query string: {e}")))?;
    if let Some(k) = q.keys().find(|k| !allowed.contains(&k.as_str())) {
        let accepted = if allowed.is_empty() {
            "none".to_owned()
        } else {
            allowed.join(", ")
        };
        return Err(ApiError::validation(
            &format!("query.{k}"),
            format!("unknown parameter (accepted: {accepted})"),
        ));
    }
    Ok(q)
}

/// The media type of the request (`text/markdown; charset=utf-8` → `text/markdown`), read the
/// way the box reads it.
pub(super) use skillbox_jc::server::media_type;

/// Read a body up to `limit` bytes; more is a 413 envelope, whether announced or streamed.
pub(super) async fn read_body(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::too_large(limit));
    }
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::too_large(limit)),
        Err(e) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("reading the request body: {e}"),
        )),
    }
}
