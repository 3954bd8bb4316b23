//! `GET /ledger` and `GET /ledger/verify`: the disclosure ledger, filtered and exported (JSON,
//! JSON Lines, CSV), and its check against the node key. Thin handlers over [`crate::ledger`].

use super::ApiError;
use super::bodies::LedgerPage;
use super::extract::{Driver, NoCalls, driver_reads, query};
use crate::ledger::{self, Filter, Line, Verdict};
use axum::Json;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

fn bad(field: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::validation(field, e.to_string())
}

#[utoipa::path(
    get, path = "/ledger",
    summary = "The disclosure ledger: every stake this node made into a box (written before its bytes were sent, then the box's answer) and every consent decision that allowed or refused one, in order from its genesis entry, each hash-chained and signed with the node key. Filters apply to each entry's signed content. Names, size buckets and keyed digests only, never content. Never pruned with the calls.",
    params(
        ("source" = Option<String>, Query, description = "Entries naming this source."),
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
pub(super) async fn get_ledger(Driver(c): Driver, uri: Uri) -> Result<Response, ApiError> {
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
    let filter = Filter {
        source: q.get("source").cloned(),
        peer: q.get("peer").cloned(),
        call: q.get("call").cloned(),
        since_ms,
        limit,
    };
    let lines = c.ledger(filter).await?;
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
        "Check the whole ledger: sequence, hashes, chain, signatures, the signed head in the database and the one kept outside it (`ledger.head`), and the index. `ok: false` names the first entry that fails and why (`sequence_gap`, `hash_mismatch`, `broken_chain`, `bad_signature`, `truncated`, `bad_head`, `unreadable`, `no_genesis`, `rolled_back`, `rewritten`, `head_file_missing`, `index_mismatch`); `ok: true` carries `signedHead`, the head to keep elsewhere."
        ok(Verdict, "The verdict.") = c.verify_ledger().await?;
}
