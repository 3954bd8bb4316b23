//! The HTTP API of a real node (in-process server on an ephemeral port, store on disk).

use crate::common::*;
use reqwest::Method;
use serde_json::{Value, json};
use skillbox_skill::openwop::{self, RETURN_SCHEMA_PATH, Schema, TASK_SCHEMA_PATH};

#[tokio::test]
async fn every_openwop_body_validates() {
    let node = TestNode::start().await;
    assert_eq!(node.post_skill(TASTE, None).await.0, 201);
    assert_eq!(node.post_skill(LOCAL, None).await.0, 201);

    // Discovery needs no token.
    let resp = node
        .http
        .get(node.url("/.well-known/openwop"))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    let disc: Value = resp.json().await.expect("json");
    openwop::validate(Schema::Capabilities, &disc).expect("discovery validates");
    assert_eq!(disc["agents"]["manifestRuntime"]["supported"], json!(true));
    assert_eq!(
        disc["capabilities"]["agents"]["manifestRuntime"]["supported"],
        json!(true)
    );

    let (status, inv, text) = node.get("/v1/agents").await;
    assert_eq!(status, 200);
    openwop::validate(Schema::AgentInventoryResponse, &inv).expect("inventory validates");
    let agents = inv["agents"].as_array().expect("array");
    assert_eq!(inv["total"], json!(agents.len()));
    assert_eq!(agents.len(), 2);
    let ids: Vec<&str> = agents
        .iter()
        .map(|a| a["agentId"].as_str().expect("id"))
        .collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted, "agentId-sorted");
    assert_eq!(ids, vec!["local.skillbox.haiku", "local.skillbox.taste"]);
    // Never a body, a key name or model, or a handoff schema in an entry.
    for needle in [
        "music critic",
        "openrouter-key",
        "claude-sonnet",
        "taskSchemaRef",
        "systemPrompt",
        "$schema",
    ] {
        assert!(!text.contains(needle), "inventory leaks {needle:?}: {text}");
    }

    let (status, entry, _) = node.get("/v1/agents/local.skillbox.taste").await;
    assert_eq!(status, 200);
    skillbox_node::openwop::validate_entry(&entry).expect("entry validates");
    assert_eq!(entry["hasHandoffSchemas"], json!(true));

    // The handoff schemas the manifests point at are served, without a token, and are 2020-12.
    for path in [TASK_SCHEMA_PATH, RETURN_SCHEMA_PATH] {
        let resp = node.http.get(node.url(path)).send().await.expect("send");
        assert_eq!(resp.status(), 200, "{path}");
        let schema: Value = resp.json().await.expect("schema is JSON");
        assert_eq!(
            schema["$schema"],
            json!("https://json-schema.org/draft/2020-12/schema"),
            "{path}"
        );
    }
    openwop::validate_task(&json!({"request": "hi", "sources": []}))
        .expect("task example validates");

    // The manifest a skill was imported with validates too (GET /skills/{name}).
    let (_, detail, _) = node.get("/skills/taste").await;
    openwop::validate(Schema::AgentManifest, &detail["manifest"]).expect("manifest validates");
    assert_eq!(
        detail["manifest"]["handoff"]["taskSchemaRef"],
        json!(TASK_SCHEMA_PATH)
    );
    node.stop().await;
}

/// Issue 12: the API answers only its own name, and no other site's page (DNS rebinding, a
/// browser's cross-site post), whatever the token.
#[tokio::test]
async fn requests_for_another_host_or_from_another_site_are_refused() {
    let node = TestNode::start().await;
    let host = node.base.trim_start_matches("http://").to_owned();
    let port = host.rsplit(':').next().expect("port").to_owned();
    // GET `path` with the token and `headers` set as given (not through the checked client,
    // which would set its own Host): the status, the body as JSON (Null when it is not).
    let send = async |path: &str, headers: Vec<(&'static str, String)>| {
        let mut rb = node
            .http
            .get(node.url(path))
            .header("authorization", format!("Bearer {}", node.token));
        for (k, v) in headers {
            rb = rb.header(k, v);
        }
        let r = rb.send().await.expect("send");
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        (status, body, text)
    };
    let evil_host = vec![("host", "evil.example".into())];
    assert_refused(send("/skills", evil_host).await, 421, "host_not_allowed");
    let public = vec![("host", format!("attacker.example:{port}"))];
    assert_eq!(send("/healthz", public).await.0, 421, "even public routes");
    let evil_origin = vec![("origin", "https://evil.example".into())];
    assert_refused(
        send("/skills", evil_origin).await,
        403,
        "origin_not_allowed",
    );
    // Its own address and origin, and `localhost` on the same port, are fine.
    for headers in [
        vec![("origin", format!("http://{host}"))],
        vec![("host", format!("localhost:{port}"))],
    ] {
        assert_eq!(send("/skills", headers.clone()).await.0, 200, "{headers:?}");
    }
    node.stop().await;
}

/// Audit U2: a browser sends no `Origin` with a cross-site `GET` or a `no-cors` load, and the
/// guard judged `Origin` only. Now whatever a browser says came from another origin
/// (`Sec-Fetch-Site: cross-site`, or `same-site`: a page on another port of this host) is refused
/// before any handler, even with the token and no `Origin`; a typed address (`none`) and the
/// node's own pages (`same-origin`) pass, as does a client that sends no such header.
#[tokio::test]
async fn a_request_a_browser_says_came_from_another_origin_is_refused() {
    let node = TestNode::start().await;
    let post = async |name: &str, site: Option<&str>| {
        let mut rb = node
            .req(Method::PUT, &format!("/sources/{name}?kind=text"))
            .await
            .body("planted");
        if let Some(site) = site {
            rb = rb.header("sec-fetch-site", site);
        }
        node.call(rb).await
    };
    for site in ["cross-site", "same-site", "Cross-Site", "other"] {
        assert_refused(post("planted", Some(site)).await, 403, "origin_not_allowed");
    }
    node.assert_sources_listed(&[]).await;
    // A GET too: no handler runs, whatever the route.
    let rb = node
        .req(Method::GET, "/sources")
        .await
        .header("sec-fetch-site", "cross-site");
    assert_refused(node.call(rb).await, 403, "origin_not_allowed");
    for (name, site) in [
        ("typed", Some("none")),
        ("own", Some("same-origin")),
        ("cli", None),
    ] {
        assert_eq!(post(name, site).await.0, 201, "{site:?}");
    }
    node.stop().await;
}

/// Review F2: a link to the node clicked on another site (a chat, an issue, a page on another
/// local port) is a top-level navigation (`navigate`, `document`, `GET`); it is answered, since
/// it arrives signed out (SameSite=Strict) and cannot be framed. The same from a frame, a
/// `no-cors` load or a form `POST` (which navigates too) is refused before any handler.
#[tokio::test]
async fn a_link_followed_from_another_site_is_answered_and_nothing_else_from_there() {
    let node = TestNode::start().await;
    let from_elsewhere = async |method: Method, path: &str, mode: &str, dest: &str| {
        let rb = node
            .req(method, path)
            .await
            .header("sec-fetch-site", "cross-site")
            .header("sec-fetch-mode", mode)
            .header("sec-fetch-dest", dest);
        node.call(rb).await
    };
    for path in ["/skills", "/ui/"] {
        let (status, body, _) = from_elsewhere(Method::GET, path, "navigate", "document").await;
        assert_ne!(body["error"], json!("origin_not_allowed"), "{path}: {body}");
        assert_ne!(status, 403, "{path}: {body}");
    }
    for (method, mode, dest) in [
        (Method::GET, "navigate", "iframe"),
        (Method::GET, "navigate", "object"),
        (Method::GET, "navigate", "embed"),
        (Method::GET, "no-cors", "image"),
        (Method::GET, "cors", "empty"),
        (Method::POST, "navigate", "document"),
    ] {
        assert_refused(
            from_elsewhere(method.clone(), "/skills", mode, dest).await,
            403,
            "origin_not_allowed",
        );
    }
    // A form posted from another site: refused, nothing written.
    let rb = node
        .req(Method::PUT, "/sources/planted?kind=text")
        .await
        .header("sec-fetch-site", "same-site")
        .header("sec-fetch-mode", "navigate")
        .header("sec-fetch-dest", "document")
        .body("planted");
    assert_refused(node.call(rb).await, 403, "origin_not_allowed");
    node.assert_sources_listed(&[]).await;
    node.stop().await;
}

#[tokio::test]
async fn unauthenticated_requests_get_401_envelopes() {
    let node = TestNode::start().await;
    for (method, path) in [
        (Method::GET, "/skills"),
        (Method::POST, "/skills"),
        (Method::GET, "/skills/taste"),
        (Method::DELETE, "/skills/taste"),
        (Method::GET, "/sources"),
        (Method::PUT, "/sources/x"),
        (Method::GET, "/sources/x"),
        (Method::DELETE, "/sources/x"),
        (Method::GET, "/v1/agents"),
        (Method::GET, "/v1/agents/local.skillbox.taste"),
        (Method::GET, "/metrics"),
        (Method::GET, "/node"),
    ] {
        for auth in [
            None,
            Some("Bearer wrong-token-0123456789"),
            Some("Basic abc"),
        ] {
            let mut rb = node.http.request(method.clone(), node.url(path));
            if let Some(a) = auth {
                rb = rb.header("authorization", a);
            }
            let resp = rb.send().await.expect("send");
            assert_eq!(resp.status(), 401, "{method} {path} {auth:?}");
            assert_eq!(
                resp.headers().get("www-authenticate").map(|v| v.as_bytes()),
                Some(&b"Bearer"[..])
            );
            let body: Value = resp.json().await.expect("json");
            assert_envelope(&body, "unauthenticated");
        }
    }
    // Public routes answer without a token.
    for path in [
        "/healthz",
        "/.well-known/openwop",
        "/openapi.json",
        TASK_SCHEMA_PATH,
    ] {
        let resp = node.http.get(node.url(path)).send().await.expect("send");
        assert_eq!(resp.status(), 200, "{path}");
    }
    node.stop().await;
}

#[tokio::test]
async fn unknown_agent_skill_source_and_route_are_404_envelopes() {
    let node = TestNode::start().await;
    for path in [
        "/v1/agents/local.skillbox.nope",
        "/skills/nope",
        "/sources/nope",
        "/sources/a/b/c",
        "/nowhere",
    ] {
        let (status, body, _) = node.get(path).await;
        assert_eq!(status, 404, "{path}");
        assert_envelope(&body, "not_found");
    }
    assert_refused(
        node.call(node.req(Method::DELETE, "/sources/nope").await)
            .await,
        404,
        "not_found",
    );
    assert_refused(
        node.call(node.req(Method::DELETE, "/skills/nope").await)
            .await,
        404,
        "not_found",
    );
    assert_refused(
        node.call(node.req(Method::PATCH, "/skills").await).await,
        405,
        "method_not_allowed",
    );
    node.stop().await;
}

fn count_rows(node: &TestNode, table: &str) -> i64 {
    let conn = rusqlite::Connection::open(node.path().join("node.db")).expect("open db");
    conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .expect("count")
}

#[tokio::test]
async fn skill_profile_violation_is_rejected_and_leaves_nothing() {
    let node = TestNode::start().await;
    let doc = "---\nname: memo\ndescription: Remembers everything.\nprovider: local\nmemory:\n  longTerm: true\n---\nRemember the user.\n";
    let (status, body, _) = node.post_skill(doc, None).await;
    assert_eq!(status, 400, "{body}");
    assert_envelope(&body, "pack_validation_failed");
    let errors = body["details"]["errors"]
        .as_array()
        .expect("schema errors in details");
    assert!(!errors.is_empty());
    assert!(
        errors.iter().any(|e| e["path"]
            .as_str()
            .is_some_and(|p| p.contains("memoryShape"))),
        "{body}"
    );
    assert_eq!(count_rows(&node, "skills"), 0);
    assert_eq!(count_rows(&node, "sources"), 0);
    let (_, list, _) = node.get("/skills").await;
    assert_eq!(list["total"], json!(0));
    let (_, list, _) = node.get("/sources").await;
    assert_eq!(list["total"], json!(0));
    let (status, _, _) = node.get("/sources/skill/memo/body").await;
    assert_eq!(status, 404);

    // A document error is a validation_error naming the field and line, and leaves nothing.
    let body = assert_refused(
        node.post_skill("---\nname: Bad_Name\ndescription: x\n---\nbody\n", None)
            .await,
        400,
        "validation_error",
    );
    let first = &body["details"]["errors"][0];
    assert_eq!(first["field"], json!("name"), "{body}");
    assert_eq!(first["line"], json!(2), "{body}");
    assert_eq!(count_rows(&node, "skills"), 0);
    assert_eq!(count_rows(&node, "sources"), 0);

    // A secret marker the box's guard cannot read is refused at import, with its line.
    let (status, body, _) = node
        .post_skill(
            "---\nname: gate\ndescription: Opens gates.\nprovider: local\n---\nBe brief.\nThe code is [[secret:PELICAN-42 ok.\n",
            None,
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("line 2"), "{body}");
    assert!(!body.to_string().contains("PELICAN"), "{body}");
    assert_eq!(count_rows(&node, "skills"), 0);
    assert_eq!(count_rows(&node, "sources"), 0);
    node.stop().await;
}

#[tokio::test]
async fn import_reimport_offer_state_and_delete() {
    let node = TestNode::start().await;
    let (status, imported, _) = node.post_skill(TASTE, None).await;
    assert_eq!(status, 201, "{imported}");
    assert_eq!(imported["replaced"], json!(false));
    assert_eq!(imported["state"]["offered"], json!(false));
    let digest1 = imported["digest"].as_str().expect("digest").to_owned();

    // Declared but not offered: the key source is missing.
    let (_, list, _) = node.get("/skills").await;
    let taste = &list["skills"][0];
    assert_eq!(taste["offered"], json!(false));
    assert!(
        taste["reason"]
            .as_str()
            .expect("reason")
            .contains("key source missing"),
        "{taste}"
    );

    // Add the key: offered.
    let (status, meta, _) = node
        .put_source("openrouter-key", "secret", b"sk-or-v1-test")
        .await;
    assert_eq!(status, 201, "{meta}");
    let (_, list, _) = node.get("/skills").await;
    assert_eq!(list["skills"][0]["offered"], json!(true), "{list}");
    assert!(list["skills"][0].get("reason").is_none());

    // The body and the model id are sources, listed with metadata only.
    let text = node
        .assert_sources_listed(&[
            "openrouter-key",
            "skill/taste/body",
            "skill/taste/model",
            "skill/taste/salt",
        ])
        .await;
    assert!(
        !text.contains("music critic") && !text.contains("sk-or-v1-test"),
        "{text}"
    );
    let (status, meta, _) = node.get("/sources/skill%2Ftaste%2Fbody").await;
    assert_eq!(status, 200, "percent-encoded name");
    assert_eq!(meta["kind"], json!("text"));

    // Re-import replaces and changes the digest.
    let changed = TASTE.replace("Builds a music-taste", "Builds a detailed music-taste");
    let (status, again, _) = node.post_skill(&changed, None).await;
    assert_eq!(status, 200);
    assert_eq!(again["replaced"], json!(true));
    assert_ne!(again["digest"].as_str().expect("digest"), digest1);
    let (_, list, _) = node.get("/skills").await;
    assert_eq!(list["total"], json!(1));

    // GET /skills/{name}: declaration, manifest, state; never the body.
    let (status, detail, text) = node.get("/skills/taste").await;
    assert_eq!(status, 200);
    assert_eq!(detail["declaration"]["key"], json!("openrouter-key"));
    assert_eq!(detail["state"]["offered"], json!(true));
    assert_eq!(detail["bodySource"]["name"], json!("skill/taste/body"));
    assert!(!text.contains("music critic"));

    // Deleting the body source: declared, not offered, says why.
    let (status, _, _) = node
        .call(node.req(Method::DELETE, "/sources/skill/taste/body").await)
        .await;
    assert_eq!(status, 204);
    let (_, list, _) = node.get("/skills").await;
    assert!(
        list["skills"][0]["reason"]
            .as_str()
            .expect("reason")
            .contains("body source missing"),
        "{list}"
    );

    // No provider: declared, not offered.
    let (status, _, _) = node
        .post_skill("---\nname: bare\ndescription: No provider.\n---\nx\n", None)
        .await;
    assert_eq!(status, 201);
    let (_, detail, _) = node.get("/skills/bare").await;
    assert!(
        detail["state"]["reasons"][0]
            .as_str()
            .expect("reason")
            .contains("no provider"),
        "{detail}"
    );

    // Fallback name from ?name=.
    let (status, b, _) = node
        .post_skill(
            "---\ndescription: Named by the query.\nprovider: local\n---\nx\n",
            Some("from-query"),
        )
        .await;
    assert_eq!(status, 201, "{b}");
    assert_eq!(b["name"], json!("from-query"));

    // DELETE /skills/{name} removes the declaration and the body source.
    let (status, _, _) = node
        .call(node.req(Method::DELETE, "/skills/from-query").await)
        .await;
    assert_eq!(status, 204);
    let (status, _, _) = node.get("/sources/skill/from-query/body").await;
    assert_eq!(status, 404);
    let (status, _, _) = node.get("/v1/agents/local.skillbox.from-query").await;
    assert_eq!(status, 404);
    node.stop().await;
}

#[tokio::test]
async fn bad_input_gets_the_right_status_and_envelope() {
    let node = TestNode::start().await;
    // Wrong content type.
    for ct in [
        Some("application/x-www-form-urlencoded"),
        Some("image/png"),
        None,
    ] {
        let mut rb = node.req(Method::POST, "/skills").await.body(LOCAL);
        if let Some(ct) = ct {
            rb = rb.header("content-type", ct);
        }
        let (status, body, _) = node.call(rb).await;
        assert_eq!(status, 415, "{ct:?}");
        assert_envelope(&body, "unsupported_media_type");
    }
    // A 2 MiB SKILL.md.
    let big = format!(
        "---\nname: big\ndescription: x\nprovider: local\n---\n{}",
        "a".repeat(2 * 1024 * 1024)
    );
    assert_refused(node.post_skill(&big, None).await, 413, "payload_too_large");
    // Not UTF-8.
    let rb = node
        .req(Method::POST, "/skills")
        .await
        .header("content-type", "text/plain")
        .body(vec![0xffu8, 0xfe, 0x00]);
    assert_refused(node.call(rb).await, 400, "validation_error");
    // Unknown query parameter, bad kind, bad source names, reserved names.
    let rb = node
        .req(Method::POST, "/skills?nmae=x")
        .await
        .header("content-type", "text/markdown")
        .body(LOCAL);
    let body = assert_refused(node.call(rb).await, 400, "validation_error");
    assert!(body["message"].as_str().expect("message").contains("nmae"));
    assert_refused(
        node.put_source("x", "password", b"v").await,
        400,
        "validation_error",
    );
    for bad in ["a%20b", ".hidden", "a%2F..%2Fb", "skill/taste/body"] {
        let (status, body, _) = node.put_source(bad, "text", b"v").await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_envelope(&body, "validation_error");
    }
    // A text source must be UTF-8.
    assert_refused(
        node.put_source("t", "text", &[0xff, 0xfe]).await,
        400,
        "validation_error",
    );
    // An empty source.
    assert_refused(
        node.put_source("empty", "file", b"").await,
        400,
        "validation_error",
    );
    // Unknown source.
    assert_refused(node.get("/sources/never-added").await, 404, "not_found");
    // Nothing of the above was stored.
    let (_, list, _) = node.get("/sources").await;
    assert_eq!(list["total"], json!(0), "{list}");
    node.stop().await;
}

#[tokio::test]
async fn restart_keeps_everything() {
    let node = TestNode::start().await;
    node.post_skill(TASTE, None).await;
    node.put_source("openrouter-key", "secret", b"sk-or-v1-keep")
        .await;
    node.put_source("spotify_songs", "file", b"song,artist\n")
        .await;
    let (_, before_skills, _) = node.get("/skills").await;
    let (_, before_sources, _) = node.get("/sources").await;
    let (_, before_agents, _) = node.get("/v1/agents").await;
    let dir = node.stop().await;

    let node = TestNode::start_in(dir).await;
    assert_eq!(node.get("/skills").await.1, before_skills);
    assert_eq!(node.get("/sources").await.1, before_sources);
    assert_eq!(node.get("/v1/agents").await.1, before_agents);
    let dir = node.stop().await;

    // Content survives too, and only apply reads it.
    let opened = skillbox_node::Node::open(dir.path()).expect("open");
    let mut out = Vec::new();
    opened
        .sources()
        .apply("openrouter-key", &mut out)
        .expect("apply");
    assert_eq!(out, b"sk-or-v1-keep");
}

#[tokio::test]
async fn missing_or_corrupted_data_key_is_a_clear_error() {
    let dir = init_dir();
    // First start writes the key check value.
    let node = TestNode::start_in(dir).await;
    node.put_source("a", "text", b"hello").await;
    let dir = node.stop().await;
    let key_path = dir.path().join("data.key");
    let good = std::fs::read(&key_path).expect("read key");

    std::fs::remove_file(&key_path).expect("remove");
    let err = skillbox_node::Node::open(dir.path()).expect_err("missing key");
    assert!(err.to_string().contains("data key missing"), "{err}");

    std::fs::write(&key_path, &good[..31]).expect("truncate");
    let err = skillbox_node::Node::open(dir.path()).expect_err("short key");
    assert!(
        err.to_string().contains("data key") && err.to_string().contains("corrupted"),
        "{err}"
    );

    let mut flipped = good.clone();
    flipped[0] ^= 0x01;
    std::fs::write(&key_path, &flipped).expect("corrupt");
    let err = skillbox_node::Node::open(dir.path()).expect_err("wrong key");
    assert!(
        err.to_string().contains("does not match this store"),
        "{err}"
    );

    std::fs::write(&key_path, &good).expect("restore");
    skillbox_node::Node::open(dir.path()).expect("the right key opens again");
}

#[tokio::test]
async fn metrics_and_health() {
    let node = TestNode::start().await;
    node.post_skill(LOCAL, None).await;
    node.get("/skills").await;
    let (status, _, _) = node.get("/healthz").await;
    assert_eq!(status, 200);
    let (status, _, text) = node.get("/metrics").await;
    assert_eq!(status, 200);
    for line in [
        "skillbox_http_requests_total{route=\"/skills\",method=\"GET\",status=\"200\"} 1",
        "route=\"/skills\",method=\"POST\",status=\"201\"} 1",
        "\nskillbox_skills 1\n",
        "\nskillbox_skills_offered 1\n",
        // No peer's payload being handled.
        "\nskillbox_inbound_payloads 0\n",
        // The body and the skill's commitment salt.
        "\nskillbox_sources 2\n",
    ] {
        assert!(text.contains(line), "{line:?} not in {text}");
    }
    node.stop().await;
}

#[tokio::test]
async fn pack_json_import_and_malformed_json() {
    let node = TestNode::start().await;
    let post_json = |body: String| async {
        let rb = node
            .req(Method::POST, "/skills")
            .await
            .header("content-type", "application/json")
            .body(body);
        node.call(rb).await
    };
    // Malformed JSON.
    let body = assert_refused(
        post_json("{\"agents\": [".into()).await,
        400,
        "validation_error",
    );
    assert!(
        body["message"]
            .as_str()
            .expect("message")
            .contains("malformed JSON"),
        "{body}"
    );
    assert_refused(post_json("[1, 2]".into()).await, 400, "validation_error");

    let agent = |id: &str, role: &str, long_term: bool| {
        json!({
            "agentId": id, "role": role, "persona": "Reviewer", "modelClass": "general",
            "description": "Reviews code.",
            "systemPrompt": "PACKPROMPT review the diff carefully.",
            "memoryShape": {"scratchpad": true, "conversation": false, "longTerm": long_term},
            "handoff": {"taskSchemaRef": "schemas/task.json", "returnSchemaRef": "schemas/return.json"},
            "toolAllowlist": []
        })
    };
    // A pack whose skill agent breaks the Skill profile: 400, nothing stored.
    let pack = |agents: Vec<Value>| {
        json!({
            "name": "vendor.acme.tools", "version": "1.0.0", "engines": {"openwop": ">=1.0 <2.0.0"},
            "runtime": {"language": "remote", "entry": "https://example.invalid/agents"},
            "agents": agents
        })
    };
    let bad = pack(vec![agent(
        "vendor.acme.tools.code-reviewer",
        "skill",
        true,
    )]);
    let (status, body, _) = post_json(bad.to_string()).await;
    assert_eq!(status, 400, "{body}");
    assert_envelope(&body, "pack_validation_failed");
    assert!(
        body["details"]["errors"]
            .as_array()
            .is_some_and(|e| !e.is_empty()),
        "{body}"
    );
    assert!(
        !body.to_string().contains("PACKPROMPT"),
        "the prompt leaks into the error: {body}"
    );
    assert_eq!(node.get("/skills").await.1["total"], json!(0));
    assert_eq!(node.get("/sources").await.1["total"], json!(0));

    // A bare skill manifest imports; the prompt becomes the body source and is never served.
    let (status, body, _) =
        post_json(agent("vendor.acme.tools.code-reviewer", "skill", false).to_string()).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["skills"][0]["name"], json!("code-reviewer"));
    let (status, _, _) = node.get("/sources/skill/code-reviewer/body").await;
    assert_eq!(status, 200);
    let routes = [
        "/skills",
        "/skills/code-reviewer",
        "/v1/agents",
        "/v1/agents/local.skillbox.code-reviewer",
    ];
    node.assert_routes_hide(&routes, &["PACKPROMPT"]).await;
    // An assistant agent is validated and listed as a pack agent, not imported as a skill.
    let mixed = pack(vec![agent("vendor.acme.tools.helper", "assistant", true)]);
    let (status, body, _) = post_json(mixed.to_string()).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        body["agents"][0]["agentId"],
        json!("vendor.acme.tools.helper")
    );
    assert_eq!(node.get("/skills").await.1["total"], json!(1));
    node.stop().await;
}

/// A browser opens the dashboard's `localhost` name on `::1` first. The node holds the API's
/// port on both loopback families, so no other user of the machine can answer there while it
/// runs; and when another program already holds the other family's port, the node does not
/// start (before the fix it started, and the squatter got the human's browser).
#[tokio::test]
async fn the_apis_port_on_the_other_loopback_family_is_the_nodes() {
    let node = TestNode::start().await;
    let port = node.base.rsplit(':').next().expect("port").to_owned();
    let r = node
        .http
        .get(format!("http://[::1]:{port}/skills"))
        .header("host", format!("localhost:{port}"))
        .header("authorization", format!("Bearer {}", node.token))
        .send()
        .await
        .expect("the node answers on [::1] too");
    assert_eq!(r.status().as_u16(), 200);
    node.stop().await;

    // The squatter binds [::1] first; the node configured for 127.0.0.1 on that port refuses.
    let squatter = std::net::TcpListener::bind("[::1]:0").expect("bind [::1]");
    let taken = squatter.local_addr().expect("addr").port();
    let mut config = skillbox_node::Config::default();
    config.api.listen = format!("127.0.0.1:{taken}").parse().expect("addr");
    let (_dir, node) = opened_with(&config);
    let err = node
        .bind(None)
        .await
        .expect_err("a node whose other loopback address is held does not start");
    let text = err.to_string();
    assert!(text.contains(&format!("[::1]:{taken}")), "{text}");
}

/// A node opened on a fresh data dir made with `config` (not yet bound).
fn opened_with(config: &skillbox_node::Config) -> (tempfile::TempDir, skillbox_node::Node) {
    let dir = tempfile::tempdir().expect("tempdir");
    skillbox_node::DataDir::new(dir.path())
        .init(config)
        .expect("init");
    let node = skillbox_node::Node::open(dir.path()).expect("open");
    (dir, node)
}

/// The API is plain HTTP: beyond loopback it would hand the operator token, the dashboard's
/// session and every answer to anyone on the path. A node asked to listen there does not
/// start unless its operator says the network (or a TLS proxy in front) is trusted.
#[tokio::test]
async fn the_api_does_not_listen_beyond_loopback_unless_the_operator_says_so() {
    let beyond: std::net::SocketAddr = "0.0.0.0:0".parse().expect("addr");
    let mut config = skillbox_node::Config::default();
    config.api.listen = beyond;
    let (_dir, node) = opened_with(&config);
    let err = node
        .bind(None)
        .await
        .expect_err("a node configured beyond loopback does not start");
    let text = err.to_string();
    assert!(
        text.contains("api.listen") && text.contains("api.plain_http_beyond_loopback"),
        "{text}"
    );
    // Nor through `--api`, whatever the config's own address.
    let err = node
        .bind(Some(beyond))
        .await
        .expect_err("--api beyond loopback");
    assert!(err.to_string().contains("api.listen"), "{err}");
    drop(node);

    config.api.plain_http_beyond_loopback = true;
    let (dir, node) = opened_with(&config);
    let text = std::fs::read_to_string(dir.path().join("config.toml")).expect("config");
    assert!(text.contains("plain_http_beyond_loopback = true"), "{text}");
    let listener = node.bind(None).await.expect("the operator said so");
    assert!(!listener.local_addr().expect("addr").ip().is_loopback());
}

#[tokio::test]
async fn one_node_per_data_dir() {
    let node = TestNode::start().await;
    let err = skillbox_node::Node::open(&node.path()).expect_err("second node on the same dir");
    assert!(err.to_string().contains("already running"), "{err}");
    let dir = node.stop().await;
    skillbox_node::Node::open(dir.path()).expect("free again once the first stopped");
}

#[tokio::test]
async fn source_limit_from_config_is_a_413_envelope() {
    let dir = init_dir();
    let config_path = dir.path().join("config.toml");
    let text = std::fs::read_to_string(&config_path).expect("config");
    let text = text.replace("max_source_bytes = 16777216", "max_source_bytes = 1024");
    assert!(text.contains("max_source_bytes = 1024"));
    std::fs::write(&config_path, text).expect("write config");
    let node = TestNode::start_in(dir).await;
    let (status, _, _) = node.put_source("small", "file", &[7u8; 1024]).await;
    assert_eq!(status, 201);
    let (status, body, _) = node.put_source("big", "file", &[7u8; 1025]).await;
    assert_eq!(status, 413);
    assert_envelope(&body, "payload_too_large");
    assert_eq!(body["details"]["limit"], json!(1024));
    let (status, _, _) = node.get("/sources/big").await;
    assert_eq!(status, 404, "nothing stored");
    node.stop().await;
}

use skillbox_testkit::old_node::PASTED_KEYS;

/// A key pasted into a SKILL.md's `requiredSources` would be a required source's name: in the
/// skill's advert to every peer, in callers' consent questions. The import check refuses it, and
/// neither its error (Display, Debug) nor `POST /skills`'s answer nor the log holds any part of
/// the key; no skill is made.
#[tokio::test]
async fn a_key_pasted_into_required_sources_is_refused_and_repeated_nowhere() {
    let logs = crate::leak::captured_logs();
    let node = TestNode::start().await;
    for key in PASTED_KEYS {
        let doc = skillbox_testkit::skills::skill_doc("grab", "BODY-r5q", &["notes", key]);
        let err =
            skillbox_skill::check_skill(doc.as_bytes(), None, "local.skillbox").expect_err(key);
        for shown in [err.to_string(), format!("{err:?}")] {
            assert!(
                shown.contains(skillbox_skill::document::KEY_IS_NOT_A_REQUIRED_SOURCE),
                "{shown}"
            );
            skillbox_testkit::leak::assert_no_part_of("the import check's error", &shown, key);
        }
        let (status, body, text) = node.post_skill(&doc, None).await;
        assert_eq!(status, 400, "{text}");
        assert_envelope(&body, "validation_error");
        skillbox_testkit::leak::assert_no_part_of("POST /skills's answer", &text, key);
    }
    let (_, skills, text) = node.get("/skills").await;
    assert_eq!(skills["skills"], json!([]), "{text}");
    node.stop().await;
    let logged = String::from_utf8_lossy(&logs.0.lock().expect("logs")).into_owned();
    for key in PASTED_KEYS {
        skillbox_testkit::leak::assert_no_part_of("the node's log", &logged, key);
    }
}

/// A node before the key test stored sources under a pasted key as the name; every route's
/// name check now refuses that name, so the key was stranded in the store. `DELETE` removes it
/// (and only a stored one: a name never stored is refused as before), answering nothing of it.
#[tokio::test]
async fn a_source_stored_under_a_pasted_key_can_be_removed() {
    let node = TestNode::start().await;
    for (i, key) in PASTED_KEYS.iter().enumerate() {
        let (status, _, text) = node
            .put_source(&format!("old-{i}"), "secret", b"sk-THE-CONTENT")
            .await;
        assert_eq!(status, 201, "{text}");
        // As an older node wrote it: the row under the key as its name.
        let conn = rusqlite::Connection::open(node.path().join("node.db")).expect("open db");
        conn.execute(
            "UPDATE sources SET name = ?1 WHERE name = ?2",
            rusqlite::params![key, format!("old-{i}")],
        )
        .expect("rename the row");
    }
    assert_eq!(count_rows(&node, "sources"), 2);
    let mut answers = String::new();
    for key in PASTED_KEYS {
        let (status, body, text) = node
            .call(node.req(Method::DELETE, &format!("/sources/{key}")).await)
            .await;
        assert_eq!(status, 204, "{body}");
        answers.push_str(&text);
        // Gone: a second removal is refused by the fixed text, as a never-stored key is.
        let refused = assert_refused(
            node.call(node.req(Method::DELETE, &format!("/sources/{key}")).await)
                .await,
            400,
            "validation_error",
        );
        answers.push_str(&refused.to_string());
        // Reading it is refused still: the exception is removal only.
        let (status, body, text) = node.get(&format!("/sources/{key}")).await;
        assert_eq!(status, 400, "{body}");
        answers.push_str(&text);
    }
    assert_eq!(count_rows(&node, "sources"), 0);
    // A name that fails the plain rule is refused as before, stored or not.
    assert_refused(
        node.call(
            node.req(
                Method::DELETE,
                "/sources/sk-proj-Q3vT9xLm2+PASTED=kEy7wZr4Nd8Hs1Fb6",
            )
            .await,
        )
        .await,
        400,
        "validation_error",
    );
    for key in PASTED_KEYS {
        skillbox_testkit::leak::assert_no_part_of("the answers", &answers, key);
    }
    node.stop().await;
}

/// A node before the key test stored sources under a pasted key as the name, shareable ones too
/// (a call may stake them). Its human must be able to withdraw such a source from calls: `PATCH
/// {"shareable": false}` unshares it and answers 204 with nothing of the name (the metadata's
/// name is the key); sharing it again, and unsharing a name never stored, are refused with the
/// fixed text; reading it stays refused.
#[tokio::test]
async fn a_source_stored_under_a_pasted_key_can_be_unshared() {
    let node = TestNode::start().await;
    for (i, key) in PASTED_KEYS.iter().enumerate() {
        let put = node
            .req(
                Method::PUT,
                &format!("/sources/old-{i}?kind=text&shareable=true"),
            )
            .await
            .body("the owner's notes");
        let (status, meta, text) = node.call(put).await;
        assert_eq!(status, 201, "{text}");
        assert_eq!(meta["shareable"], json!(true), "{text}");
        // As an older node wrote it: the row under the key as its name.
        let conn = rusqlite::Connection::open(node.path().join("node.db")).expect("open db");
        conn.execute(
            "UPDATE sources SET name = ?1 WHERE name = ?2",
            rusqlite::params![key, format!("old-{i}")],
        )
        .expect("rename the row");
    }
    let shareable = |key: &str| -> i64 {
        let conn = rusqlite::Connection::open(node.path().join("node.db")).expect("open db");
        conn.query_row(
            "SELECT shareable FROM sources WHERE name = ?1",
            rusqlite::params![key],
            |r| r.get(0),
        )
        .expect("the row")
    };
    let on = &node;
    let patch = |key: &str, to: bool| {
        let path = format!("/sources/{key}");
        async move {
            on.call(
                on.req(Method::PATCH, &path)
                    .await
                    .json(&json!({ "shareable": to })),
            )
            .await
        }
    };
    let mut answers = String::new();
    for key in PASTED_KEYS {
        let refused = assert_refused(patch(key, true).await, 400, "validation_error");
        answers.push_str(&refused.to_string());
        assert_eq!(shareable(key), 1, "still as it was");
        let (status, body, text) = patch(key, false).await;
        assert_eq!(status, 204, "{body}");
        answers.push_str(&text);
        assert_eq!(shareable(key), 0, "unshared");
        let (status, body, text) = node.get(&format!("/sources/{key}")).await;
        assert_eq!(status, 400, "{body}");
        answers.push_str(&text);
    }
    let never = "sk-ant-api03-NEVERstoredXq7nAmE9kLw2Rt5";
    let refused = assert_refused(patch(never, false).await, 400, "validation_error");
    skillbox_testkit::leak::assert_no_part_of("the refusal", &refused.to_string(), never);
    for key in PASTED_KEYS {
        skillbox_testkit::leak::assert_no_part_of("the answers", &answers, key);
    }
    node.stop().await;
}

/// `GET /sources` lists a source an older node stored under a pasted key by the masked name
/// every surface shows (`sources::shown_name`) and a handle, never the key: a listing is read on
/// screens, kept in scrollback and logs, and reaches an agent's context. The handle is what the
/// client acts with: `PATCH` unshares and `DELETE` removes by it (sharing stays refused); a
/// handle no source has any more, or never had, is a 404 in fixed words. Neither the answers
/// nor the node's log hold any part of a key.
#[tokio::test]
async fn a_source_stored_under_a_pasted_key_is_listed_masked_and_changed_by_its_handle() {
    let logs = crate::leak::captured_logs();
    let dir = init_dir();
    skillbox_testkit::old_node::sources_named_by(dir.path(), &PASTED_KEYS);
    let node = TestNode::start_in(dir).await;
    let mut answers = String::new();
    let (status, listed, text) = node.get("/sources").await;
    assert_eq!(status, 200, "{text}");
    answers.push_str(&text);
    let rows = listed["sources"].as_array().expect("sources").clone();
    assert_eq!(rows.len(), 2, "{text}");
    let mut handles = Vec::new();
    for row in &rows {
        let name = row["name"].as_str().expect("name");
        assert!(
            name.starts_with(skillbox_node::sources::KEY_NAMED),
            "{text}"
        );
        let handle = row["handle"].as_str().expect("a handle").to_owned();
        assert!(
            handle.starts_with(skillbox_node::sources::HANDLE_PREFIX),
            "{text}"
        );
        handles.push(handle);
    }
    let on = &node;
    let send = |method: Method, path: String, body: Option<Value>| async move {
        let rb = on.req(method, &path).await;
        on.call(match body {
            Some(b) => rb.json(&b),
            None => rb,
        })
        .await
    };
    let shared = |h: &str| {
        let sources = node.get("/sources");
        let h = h.to_owned();
        async move {
            let (_, listed, _) = sources.await;
            listed["sources"]
                .as_array()
                .and_then(|a| a.iter().find(|s| s["handle"] == h.as_str()).cloned())
                .map(|s| s["shareable"] == json!(true))
        }
    };
    for h in &handles {
        let path = format!("/sources/{h}");
        let refused = assert_refused(
            send(
                Method::PATCH,
                path.clone(),
                Some(json!({"shareable": true})),
            )
            .await,
            400,
            "validation_error",
        );
        answers.push_str(&refused.to_string());
        assert_eq!(shared(h).await, Some(true), "sharing again was refused");
        let (status, body, text) = send(
            Method::PATCH,
            path.clone(),
            Some(json!({"shareable": false})),
        )
        .await;
        assert_eq!(status, 204, "{body}");
        answers.push_str(&text);
        assert_eq!(shared(h).await, Some(false), "unshared by its handle");
        let (status, body, text) = send(Method::DELETE, path.clone(), None).await;
        assert_eq!(status, 204, "{body}");
        answers.push_str(&text);
        assert_eq!(shared(h).await, None, "removed by its handle");
        // Gone: its handle names nothing now, nor does one never given.
        for gone in [
            path.clone(),
            format!("/sources/pasted-key:{}", "ab".repeat(16)),
        ] {
            for (method, body) in [
                (Method::DELETE, None),
                (Method::PATCH, Some(json!({"shareable": false}))),
            ] {
                let refused =
                    assert_refused(send(method, gone.clone(), body).await, 404, "not_found");
                answers.push_str(&refused.to_string());
            }
        }
    }
    assert_eq!(count_rows(&node, "sources"), 0);
    node.stop().await;
    let logged = String::from_utf8_lossy(&logs.0.lock().expect("logs")).into_owned();
    for key in PASTED_KEYS {
        skillbox_testkit::leak::assert_no_part_of("the answers", &answers, key);
        skillbox_testkit::leak::assert_no_part_of("the node's log", &logged, key);
    }
}

/// A client that sends a key where a source's name goes with the wrong verb (`POST`, the common
/// one for "add"), on a mistyped route, or with a tenant's token, is refused by the router's own
/// answers (405, 404, 403). They name the route's template at most, never the path as sent:
/// clients show, log and keep a refusal.
#[tokio::test]
async fn a_refused_method_route_or_token_names_no_part_of_the_path() {
    let dir = init_dir();
    let config = skillbox_node::DataDir::new(dir.path()).config();
    let tenant = skillbox_node::tenants::add_token(&config, "acme", None).expect("tenant");
    let node = TestNode::start_in(dir).await;
    let mut answers = String::new();
    for key in PASTED_KEYS {
        let path = format!("/sources/{key}");
        let said = assert_refused(
            node.call(node.req(Method::POST, &path).await.body("the key"))
                .await,
            405,
            "method_not_allowed",
        );
        assert_eq!(said["message"], "POST is not allowed on /sources/{*name}");
        answers.push_str(&said.to_string());
        let said = assert_refused(node.get(&format!("/source/{key}")).await, 404, "not_found");
        answers.push_str(&said.to_string());
        let as_tenant = reqwest::Client::new()
            .get(node.url(&path))
            .bearer_auth(&tenant);
        let said = assert_refused(node.call(as_tenant).await, 403, "forbidden");
        assert!(
            said["message"]
                .as_str()
                .is_some_and(|m| m.contains("/sources/{*name} is the node operator's")),
            "{said}"
        );
        answers.push_str(&said.to_string());
    }
    for key in PASTED_KEYS {
        skillbox_testkit::leak::assert_no_part_of("the refusals", &answers, key);
    }
    node.stop().await;
}

/// Audit of A32-1: a client still set up from the old README sends `api.token` to the node's
/// TCP port, which any local user may hold while the node is down; and over TCP the caught
/// token opened every route (policy, a source's `shareable`, approvals, the ledger, sign-in
/// codes). As shipped, the node takes the operator's token only over its socket: every route
/// answers it 403 over TCP in fixed words naming the fix, and the socket still takes it. Undone,
/// `GET /sources` over TCP answers 200.
#[tokio::test]
async fn as_shipped_the_operator_token_opens_no_route_over_tcp() {
    let node = TestNode::start_in(init_dir_as_shipped()).await;
    let socket = reqwest::Client::builder()
        .unix_socket(node.path().join("api.sock"))
        .no_proxy()
        .build()
        .expect("socket client");
    for (method, path, body) in [
        (Method::PUT, "/policy", r#"{"default":"allow","rules":[]}"#),
        (Method::PUT, "/sources/diary?kind=text", "planted"),
        (Method::POST, "/approvals/c-1", "{}"),
        (Method::GET, "/ledger", ""),
        (Method::GET, "/sources", ""),
        (Method::GET, "/skills", ""),
        (Method::POST, "/dashboard/codes", ""),
        (Method::GET, "/v1/agents", ""),
    ] {
        let r = node
            .http
            .request(method.clone(), node.url(path))
            .bearer_auth(&node.token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("answered");
        let status = r.status().as_u16();
        let said: Value = r.json().await.expect("json");
        assert_eq!(status, 403, "{method} {path} over TCP: {said}");
        assert_eq!(
            said["message"],
            skillbox_node::api::OPERATOR_TOKEN_OVER_TCP,
            "{method} {path}"
        );
    }
    // Nothing was planted, and the socket takes the token.
    let r = socket
        .get(node.url("/sources"))
        .bearer_auth(&node.token)
        .send()
        .await
        .expect("answered over the socket");
    assert_eq!(r.status().as_u16(), 200);
    let listed: Value = r.json().await.expect("json");
    assert_eq!(listed["sources"], json!([]), "{listed}");
    // A public route still answers over TCP, without a token.
    let r = node
        .http
        .get(node.url("/healthz"))
        .send()
        .await
        .expect("sent");
    assert_eq!(r.status().as_u16(), 200);
    node.stop().await;
}
