//! Which weights the embedded model runs: each load measures the file (SHA-256, before llama.cpp
//! parses it), a file under the shipped model's name must be the shipped model, and the digest
//! the provider reports — what the box attests — is the loaded file's.

use std::path::Path;

use sha2::Digest;
use skillbox_providers::local::{
    LocalModel, LocalOptions, LocalProvider, MODEL_FILE, MODEL_SHA256, model_path_in,
};
use skillbox_providers::{ChatRequest, Provider, ProviderError};

use crate::gguf_edit;
use crate::local_model::model_path;

fn sha256_of(path: &Path) -> String {
    hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
}

/// Small enough that several loads at once stay cheap.
fn small() -> LocalOptions {
    LocalOptions {
        threads: Some(1),
        parallel: 1,
        context: Some(256),
        ..LocalOptions::default()
    }
}

fn hi() -> ChatRequest {
    ChatRequest {
        system: String::new(),
        user: "hi".into(),
        model: String::new(),
        max_tokens: 2,
        temperature: 0.0,
        seed: Some(1),
        system_allowance: None,
        context_tokens: None,
    }
}

/// The refusal of a file at the shipped model's name: unavailable, naming both digests.
fn assert_refused(err: &ProviderError, file: &Path) {
    assert!(matches!(err, ProviderError::Unavailable(_)), "{err:?}");
    let said = err.to_string();
    assert!(said.contains("sha256 mismatch"), "{said}");
    assert!(said.contains(&sha256_of(file)), "{said}");
    assert!(said.contains(MODEL_SHA256), "{said}");
}

/// The box operator swaps the GGUF at the default path: bytes that are no model (aimed at the
/// loader), and a working model that is not the shipped one (the shipped file with one metadata
/// value changed, standing in for a backdoored model — llama.cpp loads it happily). Both are
/// refused before llama.cpp reads them, with an error naming the mismatch.
#[tokio::test]
async fn a_tampered_file_at_the_default_path_is_refused_naming_the_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let default = model_path_in(dir.path());
    std::fs::create_dir_all(default.parent().unwrap()).unwrap();
    assert_eq!(default.file_name().unwrap(), MODEL_FILE);

    std::fs::write(&default, b"crafted for llama.cpp's loader".repeat(1000)).unwrap();
    let err = LocalProvider::new(default.clone())
        .complete(hi(), None)
        .await
        .unwrap_err();
    assert_refused(&err, &default);

    gguf_edit::rewrite(&model_path(), &default, "general.name", Some("not SmolLM2")).unwrap();
    let err = LocalModel::load_with(&default, &small()).unwrap_err();
    assert_refused(&err, &default);
    let provider = LocalProvider::with_options(default.clone(), small());
    let err = provider.complete(hi(), None).await.unwrap_err();
    assert_refused(&err, &default);
    // What the provider attests is still the only weights it would run there.
    assert_eq!(provider.weights_sha256().as_deref(), Some(MODEL_SHA256));

    // The same file under a name of its own is the operator's choice: it loads, and says
    // which file it was.
    let own = dir.path().join("operator-model.gguf");
    std::fs::rename(&default, &own).unwrap();
    let model = LocalModel::load_with(&own, &small()).unwrap();
    assert_eq!(model.sha256(), sha256_of(&own));
    assert_ne!(model.sha256(), MODEL_SHA256);
}

/// The digest the provider reports (the box's attested table) is the digest of the file it
/// loaded: the shipped model at its own name, and another file the operator named, which is
/// known once measured or loaded and pinned from then on.
#[tokio::test]
async fn the_provider_reports_the_digest_of_the_file_it_loaded() {
    let shipped = model_path();
    let provider = LocalProvider::with_options(shipped.clone(), small());
    let model = provider.model().await.unwrap();
    assert_eq!(model.sha256(), sha256_of(&shipped));
    assert_eq!(provider.weights_sha256().as_deref(), Some(model.sha256()));

    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("operator-model.gguf");
    gguf_edit::rewrite(&shipped, &own, "general.name", Some("the operator's")).unwrap();
    let provider = LocalProvider::with_options(own.clone(), small());
    assert_eq!(provider.weights_sha256(), None, "nothing measured yet");
    provider.model().await.unwrap();
    assert_eq!(provider.weights_sha256(), Some(sha256_of(&own)));

    // Measured when the box starts, then swapped for another working model: refused.
    let provider = LocalProvider::with_options(own.clone(), small());
    assert_eq!(provider.measure(), Some(sha256_of(&own)));
    let before = sha256_of(&own);
    gguf_edit::rewrite(&shipped, &own, "general.name", Some("swapped in")).unwrap();
    let err = provider.model().await.unwrap_err();
    let said = err.to_string();
    assert!(said.contains("sha256 mismatch"), "{said}");
    assert!(
        said.contains(&before) && said.contains(&sha256_of(&own)),
        "{said}"
    );
    assert_eq!(provider.weights_sha256(), Some(before));
}
