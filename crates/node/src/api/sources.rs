//! Sources: list, metadata, store (encrypted at rest), mark shareable, remove. Never content out.

use axum::Json;
use axum::body::Body;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use super::bodies::*;
use super::extract::{
    Expected, JsonBody, NoSuchSource, NotJson, Param, Removed, SourcePath, Tiny, TooLarge, Written,
    answers, blocking, change_offered, flag, named_routes, offering, query, read_body, read_one,
    remove_offered, written,
};
use super::{ApiError, AppState};
use crate::sources::{self, SourceKind, SourceMeta};

/// The `{*name}` of a source route, checked as a source name (a 400 `validation_error` when it
/// is not one) before anything else is read.
pub(super) struct SourceName(String);

impl<S: Send + Sync> FromRequestParts<S> for SourceName {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Param(name) = Param::from_request_parts(parts, state).await?;
        sources::check_name(&name)?;
        Ok(SourceName(name))
    }
}

answers! {
    /// What [`SourceName`] refuses.
    BadName = 400, "Bad source name (`validation_error`).";
}

named_routes! {
    list "/sources" => list_sources(s)
        "Every source: name, kind, size, digest — never content. A name that reads as a provider's API key (an older node stored such names) is shown masked, with a `handle` that `PATCH` and `DELETE /sources/{name}` take in its place."
        ok(SourceList, "Sources.") = s.sources.list();
    get "/sources/{*name}" => get_source(s, SourceName(name))
        "One source's metadata (never content)."
        params(SourcePath) ok(SourceMeta, "Source metadata.") [BadName, NoSuchSource]
        = "source"(name) |n| s.sources.meta(n);
}

#[utoipa::path(
    put, path = "/sources/{*name}",
    summary = "Store or replace a source; the body is the content, encrypted at rest. Names under `skill/` are refused (skill import writes them).",
    params(
        SourcePath,
        ("kind" = Option<SourceKind>, Query, description = "text | secret | file (or header X-Source-Kind). Default: text when UTF-8, file otherwise."),
        ("shareable" = Option<bool>, Query, description = "Mark the source as user data a call may stake (default false; never a secret)."),
    ),
    request_body(content = inline(Content), content_type = "*/*", description = "The content."),
    responses(
        Written<SourceMeta>,
        (status = 400, description = "Bad name, kind or content (`validation_error`)."),
        (status = 413, description = "Body over the source limit (`payload_too_large`)."),
    )
)]
pub(super) async fn put_source(
    State(s): State<AppState>,
    SourceName(name): SourceName,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let q = query(&uri, &["kind", "shareable"])?;
    let shareable = flag(&q, "shareable", false)?;
    let header_kind = headers
        .get("x-source-kind")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let kind = match q.get("kind").cloned().or(header_kind) {
        Some(k) => Some(k.parse::<SourceKind>().map_err(|_| {
            ApiError::validation("kind", format!("{k:?} is not one of text, secret, file"))
        })?),
        None => None,
    };
    let bytes = read_body(body, &headers, s.limits.max_source_bytes).await?;
    // Without a kind: text when it is UTF-8, bytes otherwise.
    let kind = kind.unwrap_or(if std::str::from_utf8(&bytes).is_ok() {
        SourceKind::Text
    } else {
        SourceKind::File
    });
    let (meta, existed) = offering(
        &s,
        |_| true,
        move |s| {
            let existed = s.sources.meta(&name)?.is_some();
            Ok((s.sources.put_with(&name, kind, &bytes, shareable)?, existed))
        },
    )
    .await?;
    Ok(written(!existed, meta))
}

impl Expected for SourceChange {
    const EXPECTED: &'static str = "expected {\"shareable\": bool}";
}

/// `PATCH /sources/{name}` `{"shareable": bool}`: mark user data as stakeable by calls (or
/// not), without sending its content again. A source an older node stored under a name the key
/// test refuses ([`StoredSourceName::PastedKey`], by that name or by the handle `GET /sources`
/// lists for it) can be unshared (never shared again): its human must be able to withdraw it
/// from calls, and the answer, 204, holds nothing of the name (the metadata would: its name is
/// the key).
#[utoipa::path(
    patch, path = "/sources/{*name}",
    summary = "Mark a source shareable (a call may stake it) or not, without its content. A source listed with a `handle` (its name reads as a provider's API key) is named by that handle.",
    params(SourcePath), request_body = SourceChange,
    responses(
        (status = 200, description = "The source's metadata.", body = SourceMeta),
        (status = 204, description = "Unshared a source an older node stored under a name that reads as a provider's API key (its metadata would repeat that name)."),
        (status = 400, description = "A secret or reserved source cannot be shareable (`validation_error`)."),
        NoSuchSource, TooLarge, NotJson,
    )
)]
pub(super) async fn patch_source(
    State(s): State<AppState>,
    name: StoredSourceName,
    JsonBody(change, _): Tiny<SourceChange>,
) -> Result<Response, ApiError> {
    match name {
        StoredSourceName::Name(name) => change_offered(&s, "source", &name, move |s, n| {
            s.sources.set_shareable(n, change.shareable)
        })
        .await
        .map(IntoResponse::into_response),
        // Sharing it is refused, by name or handle, in the words every route refuses the name
        // with: a new consent to stake a pasted key is never the human's aim.
        StoredSourceName::PastedKey { .. } if change.shareable => Err(ApiError::validation(
            "name",
            sources::KEY_IS_NOT_A_SOURCE_NAME,
        )),
        StoredSourceName::PastedKey { named, refused } => {
            match offering(&s, Option::is_some, move |s| match named.stored(s)? {
                Some(name) => s.sources.set_shareable(&name, false),
                None => Ok(None),
            })
            .await?
            {
                Some(_) => Ok(StatusCode::NO_CONTENT.into_response()),
                None => Err(refused),
            }
        }
    }
}

/// The `{*name}` of `PATCH` and `DELETE /sources/{name}`: a [`SourceName`], or a stored source
/// the key test alone refuses. A node before that test stored sources under a pasted key as the
/// name, shareable ones too; its human must still be able to unshare such a source (calls stake
/// it whatever its name) and to remove it, which gets the key out of the store. Reads and `PUT`
/// refuse the name.
pub(super) enum StoredSourceName {
    Name(String),
    /// Named by the key itself (it passes the plain name rule but reads as a provider's key) or
    /// by its handle: never echoed, in an answer or a log. With the fixed refusal for when no
    /// such source is stored.
    PastedKey {
        named: KeyNamed,
        refused: ApiError,
    },
}

/// How a request names a source stored under a pasted key.
pub(super) enum KeyNamed {
    /// The key as the name (a client that kept it from an older node's listing).
    Name(String),
    /// The handle `GET /sources` lists in place of the name ([`sources::Sources::handle_of`]).
    Handle(String),
}

impl KeyNamed {
    /// The stored name meant: the name itself (the change then reaches it only if it is
    /// stored), or the one the handle stands for.
    fn stored(self, s: &crate::api::Shared) -> crate::Result<Option<String>> {
        match self {
            KeyNamed::Name(name) => Ok(Some(name)),
            KeyNamed::Handle(handle) => s.sources.named_by_handle(&handle),
        }
    }
}

/// A handle that names no stored source (removed since, or never listed): fixed words.
const NO_SOURCE_HAS_THAT_HANDLE: &str =
    "no source has that handle (it was removed, or never listed): list the sources again";

impl<S: Send + Sync> FromRequestParts<S> for StoredSourceName {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Param(name) = Param::from_request_parts(parts, state).await?;
        if name.starts_with(sources::HANDLE_PREFIX) {
            return Ok(StoredSourceName::PastedKey {
                named: KeyNamed::Handle(name),
                refused: ApiError::not_found(NO_SOURCE_HAS_THAT_HANDLE),
            });
        }
        match sources::check_name(&name) {
            Ok(()) => Ok(StoredSourceName::Name(name)),
            Err(refused) if sources::is_a_stored_pasted_key_name(&name) => {
                Ok(StoredSourceName::PastedKey {
                    named: KeyNamed::Name(name),
                    refused: refused.into(),
                })
            }
            Err(refused) => Err(refused.into()),
        }
    }
}

#[utoipa::path(
    delete,
    path = "/sources/{*name}",
    summary = "Remove a source. Also removes one an older node stored under a name that reads as a provider's API key (which no other route takes), named by it or by the `handle` `GET /sources` lists for it.",
    params(SourcePath),
    responses(Removed, BadName, NoSuchSource)
)]
pub(super) async fn delete_source(
    State(s): State<AppState>,
    name: StoredSourceName,
) -> Result<StatusCode, ApiError> {
    match name {
        StoredSourceName::Name(name) => {
            remove_offered(&s, "source", &name, |s, n| s.sources.delete(n)).await
        }
        StoredSourceName::PastedKey { named, refused } => {
            let removed = offering(
                &s,
                |d| *d,
                move |s| match named.stored(s)? {
                    Some(name) => s.sources.delete(&name),
                    None => Ok(false),
                },
            );
            if removed.await? {
                Ok(StatusCode::NO_CONTENT)
            } else {
                // Not stored: refused as everywhere else, so the route tells no more than before.
                Err(refused)
            }
        }
    }
}
