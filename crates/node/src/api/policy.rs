//! The consent rules and admission in force: read, and replaced (kept in the store; they win over
//! `config.toml`).

use axum::Json;
use axum::extract::State;

use super::extract::{BadBody, Driver, JsonBody, NoCalls, Small, TooLarge, blocking, driver_reads};
use super::{ApiError, AppState};
use crate::config::PolicyConfig;

driver_reads! {
    get "/policy" => get_policy(c)
        "The consent rules and admission in force."
        ok(PolicyConfig, "Policy.") = c.policy();
}

#[utoipa::path(
    put, path = "/policy",
    summary = "Replace the consent rules and admission (kept in the store; they win over config.toml).",
    request_body = PolicyConfig,
    responses((status = 200, description = "Policy.", body = PolicyConfig), BadBody, TooLarge, NoCalls)
)]
pub(super) async fn put_policy(
    State(s): State<AppState>,
    Driver(c): Driver,
    JsonBody(policy, _): Small<PolicyConfig>,
) -> Result<Json<PolicyConfig>, ApiError> {
    let store = s.sources.store().clone();
    let p = policy.clone();
    blocking(move || crate::calls::save_policy(&store, &p)).await?;
    c.set_policy(policy.clone());
    Ok(Json(policy))
}
