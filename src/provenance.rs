//! Where a result came from: the revision the code was built from and the identity of the
//! weights it ran. Run directories (`eval`) record both, and the LLM encoder keys its embedding
//! cache by the same weights hash, so one recipe decides when two runs used the same model.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The revision the binary was built from (build.rs); failing that, the source checkout's HEAD
/// at run time. Uncommitted changes are not recorded either way.
pub fn git_revision() -> Option<String> {
    if let Some(built) = option_env!("TABLESEEK_BUILD_REVISION") {
        return Some(built.to_string());
    }
    let output = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Why weights could not be hashed.
#[derive(Debug, thiserror::Error)]
#[error("hashing {path}: {source}")]
pub struct HashError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// The weights' identity as lowercase hex: the sha256 of a file's bytes, or for a checkpoint
/// directory the sha256 over its files (not subdirectories) in name order, each name followed
/// by the file's bytes. Renaming a single file keeps its identity; renaming a file inside a
/// checkpoint changes it, since names say which tensor file is which.
pub fn weights_sha256(path: &Path) -> Result<String, HashError> {
    let error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| HashError { path, source }
    };
    let mut hasher = Sha256::new();
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(error(path))?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|file| file.is_file())
            .collect();
        files.sort();
        for file in files {
            hasher.update(file.file_name().unwrap_or_default().as_encoded_bytes());
            hash_file(&file, &mut hasher).map_err(error(&file))?;
        }
    } else {
        hash_file(path, &mut hasher).map_err(error(path))?;
    }
    Ok(hex::encode(hasher.finalize()))
}

fn hash_file(path: &Path, hasher: &mut Sha256) -> std::io::Result<()> {
    let mut file = std::fs::File::open(path)?;
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            return Ok(());
        }
        hasher.update(&buffer[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_hash_by_content_and_folders_by_names_and_contents() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.gguf");
        std::fs::write(&a, b"abc").unwrap();
        // sha256("abc"), the FIPS 180-2 test vector.
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(weights_sha256(&a).unwrap(), abc);
        let renamed = dir.path().join("b.gguf");
        std::fs::rename(&a, &renamed).unwrap();
        assert_eq!(weights_sha256(&renamed).unwrap(), abc);

        let folder = dir.path().join("ckpt");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("x.safetensors"), b"abc").unwrap();
        std::fs::create_dir(folder.join("sub")).unwrap();
        let first = weights_sha256(&folder).unwrap();
        assert_ne!(first, abc);
        std::fs::rename(folder.join("x.safetensors"), folder.join("y.safetensors")).unwrap();
        assert_ne!(weights_sha256(&folder).unwrap(), first);

        let missing = weights_sha256(&dir.path().join("none")).unwrap_err();
        assert!(missing.to_string().contains("none"));
    }
}
