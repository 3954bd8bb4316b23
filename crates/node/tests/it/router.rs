//! The router itself, without sockets: it agrees with its OpenAPI document, and random requests
//! never get a 5xx or a panic.

use crate::common;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use proptest::prelude::*;
use serde_json::Value;
use tower::ServiceExt;

use skillbox_node::Node;

struct Opened {
    _dir: tempfile::TempDir,
    node: Node,
    token: String,
}

fn open() -> Opened {
    let dir = common::init_dir();
    let node = Node::open(dir.path()).expect("open");
    let token = skillbox_node::DataDir::new(dir.path())
        .load_api_token()
        .expect("token");
    Opened {
        _dir: dir,
        node,
        token,
    }
}

/// Send through the router; every answer must match the OpenAPI document.
async fn send(router: &axum::Router, req: Request<Body>) -> (StatusCode, Vec<u8>) {
    let (method, path) = (req.method().to_string(), req.uri().path().to_owned());
    let resp = router
        .clone()
        .oneshot(req)
        .await
        .expect("router is infallible");
    let status = resp.status();
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = resp
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .to_vec();
    if let Err(e) = skillbox_node::openapi::check_response(
        &method,
        &path,
        status.as_u16(),
        ct.as_deref(),
        &body,
    ) {
        panic!(
            "the answer does not match /openapi.json: {e}\n{}",
            String::from_utf8_lossy(&body)
        );
    }
    (status, body)
}

/// A concrete path for a template: each `{param}` becomes `x`.
fn sample(path: &str) -> String {
    path.split('/')
        .map(|seg| if seg.starts_with('{') { "x" } else { seg })
        .collect::<Vec<_>>()
        .join("/")
}

const METHODS: &[&str] = &["GET", "POST", "PUT", "DELETE", "PATCH"];

#[tokio::test]
async fn router_and_openapi_document_agree() {
    let o = open();
    let router = o.node.router();
    let doc = skillbox_node::openapi::document();
    let paths = doc["paths"].as_object().expect("paths");
    let routes = skillbox_node::api::route_paths();

    // Every routed path is documented, and the methods the router answers are exactly the
    // documented ones (walk every method, look for 405).
    for route in &routes {
        let documented = paths
            .get(&route.openapi)
            .unwrap_or_else(|| panic!("{} is routed but not in /openapi.json", route.openapi));
        for m in METHODS {
            let req = Request::builder()
                .method(*m)
                .uri(sample(&route.openapi))
                .header("authorization", format!("Bearer {}", o.token))
                .header("content-type", "text/markdown")
                .body(Body::from("---\nname: x\ndescription: x\n---\nx\n"))
                .expect("request");
            let (status, body) = send(&router, req).await;
            let answered = status != StatusCode::METHOD_NOT_ALLOWED;
            let in_doc = documented.get(m.to_ascii_lowercase()).is_some();
            assert_eq!(
                answered, in_doc,
                "{m} {}: router {status}, documented {in_doc}",
                route.openapi
            );
            if answered {
                let text = String::from_utf8_lossy(&body);
                assert!(
                    !text.contains("no route for"),
                    "{m} {} fell through to the fallback",
                    route.openapi
                );
            }
            // Public flag agrees with the document's `security: []`.
            if in_doc {
                let public = documented[m.to_ascii_lowercase()].get("security")
                    == Some(&Value::Array(vec![]));
                assert_eq!(public, route.public, "{m} {}: public flag", route.openapi);
            }
        }
    }
    // Every documented path is routed.
    for p in paths.keys() {
        assert!(
            routes.iter().any(|r| &r.openapi == p),
            "{p} is documented but not routed"
        );
    }
    assert_eq!(paths.len(), routes.len());
}

/// Found by `random_requests_never_get_5xx`: a path parameter that is not UTF-8 once
/// percent-decoded is the extractor's 400, on every route with a parameter, and documented.
#[tokio::test]
async fn a_path_parameter_that_does_not_decode_is_a_documented_400() {
    let o = open();
    let router = o.node.router();
    for (method, uri) in [
        (Method::DELETE, "/skills/%FF"),
        (Method::GET, "/skills/%C3%28"),
        (Method::DELETE, "/sources/%FF%FE"),
    ] {
        let req = Request::builder()
            .method(method.clone())
            .uri(uri)
            .header("authorization", format!("Bearer {}", o.token))
            .body(Body::empty())
            .expect("request");
        let (status, body) = send(&router, req).await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "{method} {uri}: {}",
            String::from_utf8_lossy(&body)
        );
    }
}

#[tokio::test]
async fn openapi_document_is_served_and_well_formed() {
    let o = open();
    let router = o.node.router();
    let req = Request::get("/openapi.json")
        .body(Body::empty())
        .expect("request");
    let (status, body) = send(&router, req).await;
    assert_eq!(status, StatusCode::OK);
    let doc: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(doc["openapi"], Value::String("3.1.0".into()));
    // Every $ref resolves inside the document.
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r.clone());
                }
                m.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for r in all {
        let pointer = r.strip_prefix('#').expect("local ref");
        assert!(doc.pointer(pointer).is_some(), "dangling {r}");
    }
}

/// The document is an OpenAPI 3.1 document by the OpenAPI Initiative's own schema.
#[test]
fn openapi_document_validates_against_the_openapi_3_1_schema() {
    let schema: Value = serde_json::from_str(include_str!("../data/openapi-3.1/schema.json"))
        .expect("the OpenAPI 3.1 schema");
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let doc = skillbox_node::openapi::document();
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .take(10)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    // And the check is able to fail: a document without `info` is refused.
    let mut broken = doc.clone();
    broken.as_object_mut().expect("object").remove("info");
    assert!(!validator.is_valid(&broken));
}

/// The methods the routes know, and one no router does (`BREW`), equally likely.
fn method_strategy() -> impl Strategy<Value = Method> {
    let names = [
        "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "BREW",
    ];
    let methods = names.map(|m| Method::from_bytes(m.as_bytes()).expect("method"));
    prop::sample::select(methods.to_vec())
}

fn path_strategy() -> impl Strategy<Value = String> {
    // The route words and the encodings that trip routers, weighing 12 to the patterns' 1
    // each: one branch apiece, as when each was a branch of its own.
    let fixed: Vec<String> =
        "skills sources v1 agents skill body .. %2F %ff%fe % .well-known openwop"
            .split(' ')
            .map(str::to_owned)
            .collect();
    let seg = prop_oneof![
        12 => prop::sample::select(fixed),
        1 => "[a-zA-Z0-9._~-]{0,12}",
        1 => "[a-z%0-9]{1,6}",
    ];
    (
        proptest::collection::vec(seg, 0..6),
        proptest::option::of("[a-z]{1,5}=[a-z%0-9]{0,6}(&[a-z]{1,5}=[a-z0-9]{0,4})?"),
    )
        .prop_map(|(segs, q)| {
            let mut p = format!("/{}", segs.join("/"));
            if let Some(q) = q {
                p.push('?');
                p.push_str(&q);
            }
            p
        })
}

fn body_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..256),
        Just(b"---\nname: p\ndescription: d\nprovider: local\n---\nbody\n".to_vec()),
        Just(b"---\nname: p\ndescription: d\nmemory: {longTerm: true}\n---\nbody\n".to_vec()),
        Just(b"{\"not\": json".to_vec()),
        "---\\n[a-z:\\n {}\\[\\]&*!-]{0,80}\\n---\\n[a-z ]{0,20}".prop_map(String::into_bytes),
    ]
}

fn content_type_strategy() -> impl Strategy<Value = Option<&'static str>> {
    prop_oneof![
        Just(None),
        Just(Some("text/markdown")),
        Just(Some("text/plain; charset=utf-8")),
        Just(Some("application/json")),
        Just(Some("application/octet-stream")),
        Just(Some("\u{1}bad")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    /// Random methods, paths, queries, bodies, content types and auth: never a 5xx, never a
    /// panic, and every error is an envelope.
    #[test]
    fn random_requests_never_get_5xx(
        requests in proptest::collection::vec(
            (method_strategy(), path_strategy(), body_strategy(), content_type_strategy(), any::<bool>()),
            1..8,
        )
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let o = open();
        let router = o.node.router();
        rt.block_on(async {
            for (method, path, body, ct, auth) in requests {
                let mut b = Request::builder().method(method.clone()).uri(path.as_str());
                if auth {
                    b = b.header("authorization", format!("Bearer {}", o.token));
                }
                if let Some(v) = ct.and_then(|ct| axum::http::HeaderValue::from_str(ct).ok()) {
                    b = b.header("content-type", v);
                }
                let Ok(req) = b.body(Body::from(body)) else { continue };
                let (status, resp) = send(&router, req).await;
                prop_assert!(status.as_u16() < 500, "{method} {path} -> {status}: {}", String::from_utf8_lossy(&resp));
                if status.as_u16() >= 400 && method != Method::HEAD {
                    let v: Value = serde_json::from_slice(&resp)
                        .map_err(|e| TestCaseError::fail(format!("{method} {path} -> {status}: not JSON: {e}")))?;
                    prop_assert!(v["error"].is_string() && v["message"].is_string(), "{method} {path}: {v}");
                }
            }
            Ok(())
        })?;
    }
}
