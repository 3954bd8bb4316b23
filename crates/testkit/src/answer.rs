//! The answer check: every answer a test reads from a node's own routes matches what
//! `/openapi.json` says of it (route, status, content type, body schema).

use serde_json::Value;

/// Panic with the mismatch when the answer to `method path` is not as the OpenAPI document
/// says. A route the document does not have must answer 404 with an error envelope.
pub fn check(method: &str, path: &str, status: u16, content_type: Option<&str>, bytes: &[u8]) {
    let route = path.split('?').next().unwrap_or(path);
    if let Err(e) =
        skillbox_node::openapi::check_response(method, route, status, content_type, bytes)
    {
        panic!(
            "the answer does not match /openapi.json: {e}\n{}",
            String::from_utf8_lossy(bytes)
        );
    }
}

/// Send `rb` to a node's own route and read its answer, status and text, [`check`]ed: the one
/// way every test client of a node's API reads an answer.
pub async fn send_checked(rb: reqwest::RequestBuilder) -> (u16, String) {
    let (client, req) = rb.build_split();
    let req = req.expect("request");
    let (method, path) = (req.method().to_string(), req.url().path().to_owned());
    let resp = client.execute(req).await.expect("send");
    let status = resp.status().as_u16();
    let ct = content_type(resp.headers());
    let text = resp.text().await.expect("body");
    check(&method, &path, status, ct.as_deref(), text.as_bytes());
    (status, text)
}

/// `method path` to the node at `base` as its operator (`token`), with `body` (content type,
/// bytes) if any, through [`send_checked`].
pub async fn request_checked(
    http: &reqwest::Client,
    (base, token): (&str, &str),
    method: reqwest::Method,
    path: &str,
    body: Option<(&str, Vec<u8>)>,
) -> (u16, String) {
    let mut rb = http
        .request(method, format!("{base}{path}"))
        .bearer_auth(token);
    if let Some((ct, bytes)) = body {
        rb = rb.header("content-type", ct).body(bytes);
    }
    send_checked(rb).await
}

/// [`check`] for the node's own routes only: the surfaces mounted beside them (MCP, A2A, the
/// dashboard) are not in the document and have their own tests.
pub fn check_documented(
    method: &str,
    path: &str,
    status: u16,
    content_type: Option<&str>,
    bytes: &[u8],
) {
    if skillbox_node::openapi::route_for(path.split('?').next().unwrap_or(path)).is_some() {
        check(method, path, status, content_type, bytes);
    }
}

/// The content type of an HTTP answer, if it has one.
pub fn content_type(headers: &reqwest::header::HeaderMap) -> Option<String> {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The JSON body (Null when empty; the text as a string when it is not JSON).
pub fn json_body(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// The `name` of each entry of the list `key` in an answer (`{"skills": [{"name": …}, …]}`), in
/// its order.
pub fn names<'a>(answer: &'a Value, key: &str) -> Vec<&'a str> {
    field_of_each(answer, key, "name")
}

/// The string `field` of each entry of the list `key` in an answer, in its order: a ledger's
/// entry kinds (`entries`, `kind`), what a stake entry staked (`items`, `stake`). Every entry
/// must have it: one without is a failure, not left out.
pub fn field_of_each<'a>(answer: &'a Value, key: &str, field: &str) -> Vec<&'a str> {
    answer[key]
        .as_array()
        .unwrap_or_else(|| panic!("no list `{key}`: {answer}"))
        .iter()
        .map(|e| {
            e[field]
                .as_str()
                .unwrap_or_else(|| panic!("no `{field}` in {e}"))
        })
        .collect()
}

/// Whether a `GET /board` answer lists `skill` of `peer`.
pub fn board_has(board: &Value, peer: &str, skill: &str) -> bool {
    board_row(board, peer, skill).is_some()
}

/// `peer`'s row for `skill` on a `GET /board` answer, if the board has it.
pub fn board_row<'b>(board: &'b Value, peer: &str, skill: &str) -> Option<&'b Value> {
    board["board"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["peer"].as_str() == Some(peer) && r["skill"].as_str() == Some(skill))
}

/// A call record failed by its provider's error carries only closed codes: `run_failed`
/// naming `upstream_error` on the side that fetched the result first, `peer_failed` naming
/// `run_failed` on the side it told — never the provider's own words.
#[track_caller]
pub fn assert_failed_upstream(call: &Value) {
    assert_failed_in_run(call, "upstream_error");
}

/// A call record whose box run failed with `box_code` carries only closed codes: `run_failed`
/// naming `box_code` on the side that fetched the result first, `peer_failed` naming
/// `run_failed` on the side it told — never words of the provider or the peer.
#[track_caller]
pub fn assert_failed_in_run(call: &Value, box_code: &str) {
    let (code, message) = (
        call["failure"]["code"].as_str().unwrap_or(""),
        call["failure"]["message"].as_str().unwrap_or(""),
    );
    assert!(
        (code == "run_failed" && message.contains(box_code))
            || (code == "peer_failed" && message.contains("run_failed")),
        "the closed code ({box_code} in the run), not anyone's own words: {call}"
    );
}
