//! `GET /ledger` and `GET /ledger/verify`: the disclosure ledger, filtered and exported (JSON,
//! JSON Lines, CSV), and its check against the node key. Thin handlers over [`crate::ledger`].

use super::bodies::LedgerPage;
use super::extract::{Driver, NoCalls, blocking, driver_reads, query};
use super::{ApiError, AppState};
use crate::ledger::{self, Filter, Line, Verdict};
use crate::sources;
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

fn bad(field: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::validation(field, e.to_string())
}

#[utoipa::path(
    get, path = "/ledger",
    summary = "The disclosure ledger: every stake this node made into a box (written before its bytes were sent, then the box's answer) and every consent decision that allowed or refused one, in order from its genesis entry, each hash-chained and signed with the node key. Filters apply to each entry's signed content. Names, size buckets and keyed digests only, never content; a source name that reads as a provider's API key is shown masked, as `GET /sources` shows it, and its line is marked `redacted` (`source_names`) and carries `shownSig`, the node key's signature over the line as shown: its text no longer hashes to its `hash`, so an offline check (`skillbox ledger verify --file`) checks that line by its hash's place in the chain, the signature over it and `shownSig` (an edit of what it shows is `bad_redaction`), and names it among the verdict's `redacted` entries; `GET /ledger/verify` checks the stored entry whole. The node signs as shown only a line whose stored text hashes to its `hash`: an entry edited in the database is shown masked without `shownSig` (offline: `bad_redaction`). Never pruned with the calls.",
    params(
        ("source" = Option<String>, Query, description = "Entries naming this source (by its name, or by the `handle` `GET /sources` lists for one whose name reads as a provider's API key)."),
        ("peer" = Option<String>, Query),
        ("call" = Option<String>, Query),
        ("since" = Option<String>, Query, description = "Unix milliseconds, or a span back from now (`30m`, `24h`, `7d`)."),
        ("limit" = Option<u32>, Query),
        ("format" = Option<String>, Query, description = "json (default), jsonl or csv."),
    ),
    responses(
        (status = 200, description = "The entries (JSON: with the node key they verify under; JSON Lines: one signed entry per line; CSV: one row per entry).",
            content((LedgerPage = "application/json"), (Line = "application/jsonl"), (String = "text/csv"))),
        (status = 400, description = "Bad query (`validation_error`)."),
        NoCalls,
    )
)]
pub(super) async fn get_ledger(
    Driver(c): Driver,
    State(s): State<AppState>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let q = query(
        &uri,
        &["source", "peer", "call", "since", "limit", "format"],
    )?;
    let since_ms = q
        .get("since")
        .map(|v| ledger::parse_since(v, skillbox_peers::now_ms()))
        .transpose()
        .map_err(|e| bad("query.since", e))?;
    let limit = q
        .get("limit")
        .map(|v| v.parse::<usize>())
        .transpose()
        .map_err(|_| bad("query.limit", "must be a whole number"))?;
    // A source listed by its handle (its name is never shown) is filtered by the name it stands
    // for; a handle naming none matches nothing.
    let source = match q.get("source").cloned() {
        // The handle itself is in no entry (`:` is in no name): it then matches nothing.
        Some(h) if h.starts_with(sources::HANDLE_PREFIX) => {
            let handle = h.clone();
            let named = blocking(move || s.sources.named_by_handle(&handle)).await?;
            Some(named.unwrap_or(h))
        }
        other => other,
    };
    let filter = Filter {
        source,
        peer: q.get("peer").cloned(),
        call: q.get("call").cloned(),
        since_ms,
        limit,
    };
    // Every format shows a name that reads as a pasted key masked: a view is read on screens
    // and by agents, an export is kept and passed on. Such a line is marked redacted and signed
    // as shown, so the export still verifies offline instead of reading as tampered, and an
    // edit of what it shows does not.
    let lines = c.ledger_shown(filter).await?;
    let text = |content_type: &'static str, body: String| {
        (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response()
    };
    let internal = |e: crate::error::NodeError| {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
    };
    match q.get("format").map(String::as_str).unwrap_or("json") {
        "json" => Ok(Json(LedgerPage {
            total: lines.len(),
            entries: lines,
            node_key: c.node_key_hex().to_owned(),
        })
        .into_response()),
        "jsonl" => Ok(text(
            "application/jsonl",
            ledger::to_jsonl(&lines).map_err(internal)?,
        )),
        "csv" => Ok(text(
            "text/csv; charset=utf-8",
            ledger::to_csv(&lines).map_err(internal)?,
        )),
        other => Err(bad(
            "query.format",
            format!("{other:?} is not json, jsonl or csv"),
        )),
    }
}

driver_reads! {
    get "/ledger/verify" => verify_ledger(c)
        "Check the whole ledger: sequence, hashes, chain, signatures, the signed head in the database and the one kept outside it (`ledger.head`), and the index. `ok: false` names the first entry that fails and why (`sequence_gap`, `hash_mismatch`, `broken_chain`, `bad_signature`, `truncated`, `bad_head`, `unreadable`, `no_genesis`, `rolled_back`, `rewritten`, `head_file_missing`, `index_mismatch`); `ok: true` carries `signedHead`, the head to keep elsewhere: version 2, whose `shown` pins what each line up to it shows redacted (its seq and the SHA-256 of what the node signs of it as shown), so `skillbox ledger verify --head` holds those lines to their text too, not only their hashes."
        ok(Verdict, "The verdict.") = c.verify_ledger().await?;
}
