//! Model ids (`ORG/NAME[@REVISION][:QUANT]`) resolved in the local Hugging Face cache, offline.
//!
//! The cache root is `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`, as
//! `huggingface_hub` picks it. A repository lives in `models--ORG--NAME/`: `refs/<branch or tag>`
//! holds a commit hash, `snapshots/<hash>/` holds the files (symlinks into `blobs/` on Unix). A
//! snapshot with `config.json` is a checkpoint folder (one `model.safetensors` or shards listed by
//! `model.safetensors.index.json`, which the loader reads); otherwise its `.gguf` files are
//! candidates, narrowed by a `:Q4_K_M`-style suffix.
//!
//! Nothing here touches the network. The hf-hub crate names the repository folder
//! (`Repo::folder_name`); its `Cache` lookup is not used: it reads no `HF_HUB_CACHE`, takes no
//! commit hash as revision (it only follows `refs/`), panics without a home directory, and cannot
//! list a snapshot, which picking a GGUF needs. What remains is reading one ref file.

use std::path::{Path, PathBuf};

use hf_hub::{Repo, RepoType};

/// Why a model id could not be resolved; every message names what was looked at.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The whole message: the id, every place looked at, and how to fill the cache.
    #[error("{0}")]
    NotCached(String),
    #[error("{id}: snapshot {snapshot} holds no config.json and no .gguf file")]
    NoWeights { id: String, snapshot: PathBuf },
    #[error(
        "{id}: {reason} in {snapshot}; found: {found}. Name one with a suffix, e.g. {example}"
    )]
    AmbiguousGguf {
        id: String,
        reason: String,
        snapshot: PathBuf,
        found: String,
        example: String,
    },
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// `ORG/NAME[@REVISION][:QUANT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubModelId {
    pub repo: String,
    pub revision: Option<String>,
    /// A GGUF file picked by this substring of its name (case-insensitive), e.g. `Q4_K_M`.
    pub quant: Option<String>,
}

impl HubModelId {
    /// Parses `text` as a model id; `None` when it cannot be one (a file name with an extension
    /// the engine reads, an absolute path, more or fewer than one `/` before any `@`).
    pub fn parse(text: &str) -> Option<Self> {
        if text.starts_with(['/', '.', '~']) || text.ends_with(".gguf") || text.contains('\\') {
            return None;
        }
        let (rest, quant) = match text.rsplit_once(':') {
            Some((rest, quant)) if is_name(quant) => (rest, Some(quant.to_string())),
            Some(_) => return None,
            None => (text, None),
        };
        let (repo, revision) = match rest.split_once('@') {
            Some((repo, revision)) if !revision.is_empty() => (repo, Some(revision.to_string())),
            Some(_) => return None,
            None => (rest, None),
        };
        let (org, name) = repo.split_once('/')?;
        (is_name(org) && is_name(name)).then(|| Self {
            repo: repo.to_string(),
            revision,
            quant,
        })
    }
}

impl std::fmt::Display for HubModelId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.repo)?;
        if let Some(revision) = &self.revision {
            write!(f, "@{revision}")?;
        }
        if let Some(quant) = &self.quant {
            write!(f, ":{quant}")?;
        }
        Ok(())
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The cache root and why it was chosen (for messages).
#[derive(Debug, Clone)]
pub struct HubCache {
    root: PathBuf,
    chosen_by: String,
}

impl HubCache {
    /// The root `huggingface_hub` would use in this environment.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(root) = var("HF_HUB_CACHE") {
            return Self::at_with_reason(PathBuf::from(root), "$HF_HUB_CACHE");
        }
        if let Some(home) = var("HF_HOME") {
            return Self::at_with_reason(PathBuf::from(home).join("hub"), "$HF_HOME/hub");
        }
        let home = var("HOME").map(PathBuf::from).unwrap_or_default();
        Self::at_with_reason(
            home.join(".cache/huggingface/hub"),
            "the default (neither $HF_HUB_CACHE nor $HF_HOME is set)",
        )
    }

    /// A cache rooted at `root` (tests, or a copied cache).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self::at_with_reason(root.into(), "given")
    }

    fn at_with_reason(root: PathBuf, chosen_by: &str) -> Self {
        Self {
            root,
            chosen_by: chosen_by.to_string(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The checkpoint folder or GGUF file `id` names.
    pub fn resolve(&self, id: &HubModelId) -> Result<PathBuf, HubError> {
        let repo = Repo::new(id.repo.clone(), RepoType::Model);
        let folder = self.root.join(repo.folder_name());
        let revision = id.revision.as_deref().unwrap_or("main");
        let mut looked = vec![format!(
            "  cache root {} ({}){}",
            self.root.display(),
            self.chosen_by,
            missing(&self.root)
        )];
        looked.push(format!("  {}{}", folder.display(), missing(&folder)));
        let snapshot = Self::snapshot(revision, &folder, &mut looked);
        let Some(snapshot) = snapshot else {
            let revision_flag = id
                .revision
                .as_ref()
                .map(|r| format!(" --revision {r}"))
                .unwrap_or_default();
            return Err(HubError::NotCached(format!(
                "{id} is not in the local Hugging Face cache.\nLooked at:\n{}\nTo fill the cache, on a connected machine run `huggingface-cli download {}{revision_flag}` (or `hf download`), then copy {} into {} here (or point $HF_HUB_CACHE at a copy).",
                looked.join("\n"),
                id.repo,
                repo.folder_name(),
                self.root.display()
            )));
        };
        if snapshot.join("config.json").is_file() && id.quant.is_none() {
            return Ok(snapshot);
        }
        pick_gguf(id, &snapshot)
    }

    /// `snapshots/<hash>` for `revision`: through `refs/<revision>`, or the
    /// revision itself when it is a commit hash with a snapshot.
    fn snapshot(revision: &str, folder: &Path, looked: &mut Vec<String>) -> Option<PathBuf> {
        let refs = folder.join("refs").join(revision);
        let hash = match std::fs::read_to_string(&refs) {
            Ok(hash) => {
                looked.push(format!("  {} -> {}", refs.display(), hash.trim()));
                hash.trim().to_string()
            }
            Err(_) => {
                looked.push(format!("  {} (missing)", refs.display()));
                revision.to_string()
            }
        };
        let snapshot = folder.join("snapshots").join(&hash);
        looked.push(format!("  {}{}", snapshot.display(), missing(&snapshot)));
        snapshot.is_dir().then_some(snapshot)
    }
}

fn missing(path: &Path) -> &'static str {
    if path.exists() {
        ""
    } else {
        " (missing)"
    }
}

/// The one GGUF of `snapshot` that `id.quant` names (or the only one there is). Split GGUFs
/// (`-00001-of-00003.gguf`) resolve to their first part.
fn pick_gguf(id: &HubModelId, snapshot: &Path) -> Result<PathBuf, HubError> {
    let mut ggufs = Vec::new();
    collect_ggufs(snapshot, snapshot, &mut ggufs)?;
    ggufs.sort();
    if ggufs.is_empty() {
        return Err(HubError::NoWeights {
            id: id.to_string(),
            snapshot: snapshot.to_path_buf(),
        });
    }
    let first_parts: Vec<&String> = ggufs
        .iter()
        .filter(|name| !name.contains("-of-") || name.contains("-00001-of-"))
        .collect();
    let matching: Vec<&String> = match &id.quant {
        Some(quant) => {
            let quant = quant.to_ascii_lowercase();
            first_parts
                .iter()
                .copied()
                .filter(|name| name.to_ascii_lowercase().contains(&quant))
                .collect()
        }
        None => first_parts.clone(),
    };
    match matching.as_slice() {
        [one] => Ok(snapshot.join(one)),
        _ => {
            let reason = match (&id.quant, matching.len()) {
                (Some(quant), 0) => format!("no GGUF file name contains {quant:?}"),
                (Some(quant), n) => format!("{n} GGUF files match {quant:?}"),
                (None, n) => format!("{n} GGUF files"),
            };
            let example = first_parts
                .first()
                .map(|name| format!("{}:{}", id.repo, quant_of(name)))
                .unwrap_or_default();
            Err(HubError::AmbiguousGguf {
                id: id.to_string(),
                reason,
                snapshot: snapshot.to_path_buf(),
                found: ggufs.join(", "),
                example,
            })
        }
    }
}

/// The quantization part of a GGUF file name, e.g. `Q4_K_M` of `model-Q4_K_M.gguf`.
fn quant_of(name: &str) -> &str {
    let stem = name.trim_end_matches(".gguf");
    stem.rsplit(['-', '.']).next().unwrap_or(stem)
}

fn collect_ggufs(base: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), HubError> {
    let entries = std::fs::read_dir(dir).map_err(|source| HubError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_ggufs(base, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "gguf") {
            if let Ok(relative) = path.strip_prefix(base) {
                out.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    Ok(())
}

/// `path` itself when it exists or cannot be a model id; else the id resolved in the cache from
/// the environment.
pub fn resolve_model_path(path: &Path) -> Result<PathBuf, HubError> {
    if path.exists() {
        return Ok(path.to_path_buf());
    }
    match path.to_str().and_then(HubModelId::parse) {
        Some(id) => HubCache::from_env().resolve(&id),
        None => Ok(path.to_path_buf()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ids_parse_and_paths_do_not() {
        let id = HubModelId::parse("Qwen/Qwen3-8B").unwrap();
        assert_eq!(
            (id.repo.as_str(), id.revision, id.quant),
            ("Qwen/Qwen3-8B", None, None)
        );
        let id = HubModelId::parse("Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF@v1.0:Q4_K_M").unwrap();
        assert_eq!(id.revision.as_deref(), Some("v1.0"));
        assert_eq!(id.quant.as_deref(), Some("Q4_K_M"));
        assert_eq!(
            id.to_string(),
            "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF@v1.0:Q4_K_M"
        );
        for path in [
            "models/qwen.gguf",
            "/abs/Qwen/Qwen3",
            "./Qwen/Qwen3",
            "a/b/c",
            "single",
            "Qwen/",
            "Qwen/Qwen3@",
            "Qwen/Qwen 3",
        ] {
            assert_eq!(HubModelId::parse(path), None, "{path}");
        }
    }

    #[test]
    fn quant_suffix_of_a_file_name() {
        assert_eq!(
            quant_of("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
            "q4_k_m"
        );
        assert_eq!(quant_of("Model.Q8_0.gguf"), "Q8_0");
    }
}
