//! The one-stake check: a call that ended left exactly one stake entry in its node's ledger
//! when it ran (`answered`, `ran`), at most one when it failed — across crashes and restarts
//! too. Every call test checks it through its client's `assert_staked_once`.

use serde_json::Value;

/// The ledger query to check for a call record `view` (None while the call has not ended).
pub fn ledger_query(view: &Value) -> Option<String> {
    let state = view["state"].as_str().unwrap_or("");
    ["answered", "ran", "failed"]
        .contains(&state)
        .then(|| format!("/ledger?call={}", view["id"].as_str().unwrap_or("")))
}

/// Assert the ledger answer (`status`, `body`) to [`ledger_query`] holds one stake of the
/// call's role (at most one for a failed call).
pub fn assert_once(view: &Value, status: u16, body: &Value) {
    let (id, role, state) = (
        view["id"].as_str().unwrap_or(""),
        view["role"].as_str().unwrap_or(""),
        view["state"].as_str().unwrap_or(""),
    );
    assert_eq!(status, 200, "{body}");
    let stakes: Vec<&Value> = body["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["kind"] == "stake" && e["role"] == role)
        .collect();
    // A call whose box was lost after the open moves to a new run (issue 33 item 4): each run
    // is staked into at most once, the run it ended with exactly once when it ran, and it
    // leaves at most 3 runs. Entries name their run (an entry without one: before they did).
    if stakes.iter().any(|e| e["run"].is_string()) {
        let mut per_run = std::collections::BTreeMap::<&str, usize>::new();
        for e in &stakes {
            *per_run.entry(e["run"].as_str().unwrap_or("")).or_default() += 1;
        }
        for (run, n) in &per_run {
            assert!(
                *n <= 1,
                "call {id} ({role}, {state}) staked {n} times into run {run:?}"
            );
        }
        assert!(
            per_run.len() <= 4,
            "call {id} ({role}) staked into {per_run:?}"
        );
        if state != "failed" {
            let run = view["runId"].as_str().unwrap_or("");
            assert!(
                per_run.contains_key(run),
                "call {id} ({role}, {state}) never staked into its run {run}: {per_run:?}"
            );
        }
        return;
    }
    let stakes = stakes.len();
    if state == "failed" {
        assert!(
            stakes <= 1,
            "call {id} ({role}, {state}) staked {stakes} times"
        );
    } else {
        assert_eq!(
            stakes, 1,
            "call {id} ({role}, {state}) staked {stakes} times"
        );
    }
}
