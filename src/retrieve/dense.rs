//! Dense retrieval: every document embedded once by a [`TextEncoder`] (MiniLM's [`BertEncoder`],
//! or a decoder LLM in the Qwen3-Embedding recipe, [`LlmEncoder`]), queries ranked by cosine.
//!
//! Embedding a corpus is the slow part (a minute or two for TabFact's 1,695 tables on two cores), so
//! [`DenseIndex::load_or_build`] keeps the embeddings on disk, in `<cache dir>/<key>.bin`, where the
//! key hashes everything the vectors depend on: the cache format, the encoder's identity (weights,
//! maximum length, and for LLM encoders pooling token and width), and the documents' texts in order. A file that is unreadable,
//! truncated, or fails its checksum is rebuilt with a warning; nothing else is ever overwritten.
//!
//! File layout (little-endian): magic `TSEMBED\0`, format `u32`, key (32 bytes), `n: u64`,
//! `dim: u64`, `truncated: u64`, `n * dim` `f32`s, then the SHA-256 of everything before it.
//!
//! Rows and queries are unit vectors, so cosine is a dot product. Ties go to the lower document
//! index, so rankings are the same on every run.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::bert::{BertEncoder, BertError, Embeddings};
use super::bm25::Hit;
use super::llm_embed::{LlmEmbedError, LlmEncoder};

/// What [`DenseIndex`] needs from an encoder (`Sync`: concurrent evaluation shares one).
pub trait TextEncoder: Sync {
    /// Unit-length embeddings of documents, in input order.
    fn embed_documents(&self, texts: &[&str]) -> Result<Embeddings>;
    /// The unit-length embedding of a query (with the encoder's query instruction, if any).
    fn embed_query(&self, text: &str) -> Result<Vec<f32>>;
    fn dim(&self) -> usize;
    /// Bytes that change whenever document embeddings would: hashed into the cache key.
    fn identity(&self) -> Vec<u8>;
}

impl TextEncoder for BertEncoder {
    fn embed_documents(&self, texts: &[&str]) -> Result<Embeddings> {
        Ok(self.embed(texts)?)
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        Ok(self.embed_one(text)?)
    }

    fn dim(&self) -> usize {
        BertEncoder::dim(self)
    }

    fn identity(&self) -> Vec<u8> {
        // The bytes format-1 caches were keyed on (candle's forward pass), so those caches stay
        // valid where that pass still runs; the fused CPU pass differs in the last bits.
        let mut bytes = self.fingerprint().as_bytes().to_vec();
        bytes.extend_from_slice(&(self.options().max_length as u64).to_le_bytes());
        if self.kernels() != "candle" {
            bytes.extend_from_slice(self.kernels().as_bytes());
        }
        bytes
    }
}

impl TextEncoder for LlmEncoder {
    fn embed_documents(&self, texts: &[&str]) -> Result<Embeddings> {
        Ok(LlmEncoder::embed_documents(self, texts)?)
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        Ok(LlmEncoder::embed_query(self, text)?)
    }

    fn dim(&self) -> usize {
        LlmEncoder::dim(self)
    }

    fn identity(&self) -> Vec<u8> {
        // Queries' instruction is left out: documents are embedded without it.
        format!(
            "llm-last-token:{}:{}:{}:{}",
            self.fingerprint(),
            self.options().max_length,
            self.end_id(),
            self.dim()
        )
        .into_bytes()
    }
}

const MAGIC: &[u8; 8] = b"TSEMBED\0";
/// Bump when the layout or anything that changes the vectors (pooling, truncation) changes.
const FORMAT: u32 = 1;
const HEADER_LEN: usize = 8 + 4 + 32 + 8 * 3;

/// Why a dense index could not be built, loaded or searched.
#[derive(Debug, thiserror::Error)]
pub enum DenseError {
    #[error(transparent)]
    Encoder(#[from] BertError),
    #[error(transparent)]
    LlmEncoder(#[from] LlmEmbedError),
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot index an empty corpus")]
    EmptyCorpus,
    #[error("query has {got} dimensions, the index {expected}")]
    DimensionMismatch { expected: usize, got: usize },
}

pub type Result<T> = std::result::Result<T, DenseError>;

/// What [`DenseIndex::load_or_build`] did with the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheStatus {
    /// Read from this file.
    Hit(PathBuf),
    /// Embedded and written to this file (none was there; a failed write is only a warning).
    Built(PathBuf),
    /// The file could not be used (the reason); embedded and written again where possible.
    Rebuilt(PathBuf, String),
}

/// Document embeddings, searchable by cosine similarity.
#[derive(Debug, Clone, PartialEq)]
pub struct DenseIndex {
    embeddings: Embeddings,
}

impl DenseIndex {
    /// Embeds `documents` (no cache).
    pub fn build<E: TextEncoder + ?Sized, S: AsRef<str>>(
        encoder: &E,
        documents: &[S],
    ) -> Result<Self> {
        if documents.is_empty() {
            return Err(DenseError::EmptyCorpus);
        }
        let texts: Vec<&str> = documents.iter().map(|d| d.as_ref()).collect();
        Ok(Self {
            embeddings: encoder.embed_documents(&texts)?,
        })
    }

    /// Reads the embeddings of `documents` from `cache_dir` when a valid file for exactly this
    /// encoder, maximum length and document list is there; else embeds them and writes the file.
    pub fn load_or_build<E: TextEncoder + ?Sized, S: AsRef<str>>(
        encoder: &E,
        documents: &[S],
        cache_dir: &Path,
    ) -> Result<(Self, CacheStatus)> {
        if documents.is_empty() {
            return Err(DenseError::EmptyCorpus);
        }
        let key = cache_key(encoder, documents);
        let path = cache_dir.join(format!("{}.bin", hex::encode(key)));
        let status = match std::fs::read(&path) {
            Ok(bytes) => match decode(&bytes, &key, documents.len(), encoder.dim()) {
                Ok(embeddings) => {
                    tracing::info!("dense embeddings from {}", path.display());
                    return Ok((Self { embeddings }, CacheStatus::Hit(path)));
                }
                Err(reason) => {
                    tracing::warn!(
                        "embedding cache {} is unusable ({reason}); rebuilding it",
                        path.display()
                    );
                    CacheStatus::Rebuilt(path.clone(), reason)
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => CacheStatus::Built(path.clone()),
            Err(e) => {
                tracing::warn!(
                    "embedding cache {} is unreadable ({e}); embedding",
                    path.display()
                );
                CacheStatus::Rebuilt(path.clone(), format!("unreadable: {e}"))
            }
        };
        let index = Self::build(encoder, documents)?;
        // Minutes of embedding are not thrown away because the cache cannot be written.
        if let Err(e) = write_atomically(&path, &encode(&key, &index.embeddings)) {
            tracing::warn!("embeddings not cached: {e}");
        }
        Ok((index, status))
    }

    /// An index over embeddings made elsewhere (rows must be unit length for scores to be cosines).
    pub fn from_embeddings(embeddings: Embeddings) -> Result<Self> {
        if embeddings.is_empty() {
            return Err(DenseError::EmptyCorpus);
        }
        Ok(Self { embeddings })
    }

    pub fn len(&self) -> usize {
        self.embeddings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.embeddings.is_empty()
    }

    pub fn dim(&self) -> usize {
        self.embeddings.dim
    }

    /// How many documents were longer than the encoder's maximum length when embedded.
    pub fn truncated(&self) -> usize {
        self.embeddings.truncated
    }

    pub fn embeddings(&self) -> &Embeddings {
        &self.embeddings
    }

    /// The `k` documents most similar to a unit-length query vector, best first; equal scores in
    /// document order.
    pub fn search(&self, query: &[f32], k: usize) -> Result<Vec<Hit>> {
        if query.len() != self.dim() {
            return Err(DenseError::DimensionMismatch {
                expected: self.dim(),
                got: query.len(),
            });
        }
        let mut hits: Vec<Hit> = (0..self.len())
            .map(|doc| Hit {
                doc,
                score: dot(self.embeddings.row(doc), query),
            })
            .collect();
        let by_rank = |a: &Hit, b: &Hit| b.score.total_cmp(&a.score).then(a.doc.cmp(&b.doc));
        let k = k.min(hits.len());
        if k < hits.len() && k > 0 {
            hits.select_nth_unstable_by(k - 1, by_rank);
        }
        hits.truncate(k);
        hits.sort_by(by_rank);
        Ok(hits)
    }

    /// Embeds `query` with `encoder` and searches.
    pub fn search_text<E: TextEncoder + ?Sized>(
        &self,
        encoder: &E,
        query: &str,
        k: usize,
    ) -> Result<Vec<Hit>> {
        self.search(&encoder.embed_query(query)?, k)
    }
}

/// Summed in f64 so the score does not depend on how a SIMD loop would group f32 additions.
fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum()
}

fn cache_key<E: TextEncoder + ?Sized, S: AsRef<str>>(encoder: &E, documents: &[S]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(MAGIC);
    hasher.update(FORMAT.to_le_bytes());
    hasher.update(encoder.identity());
    hasher.update((documents.len() as u64).to_le_bytes());
    for document in documents {
        // Length prefixes keep ["ab", "c"] and ["a", "bc"] apart.
        let document = document.as_ref().as_bytes();
        hasher.update((document.len() as u64).to_le_bytes());
        hasher.update(document);
    }
    hasher.finalize().into()
}

fn encode(key: &[u8; 32], embeddings: &Embeddings) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER_LEN + embeddings.data.len() * 4 + 32);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&FORMAT.to_le_bytes());
    bytes.extend_from_slice(key);
    for n in [embeddings.len(), embeddings.dim, embeddings.truncated] {
        bytes.extend_from_slice(&(n as u64).to_le_bytes());
    }
    for x in &embeddings.data {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    let checksum = Sha256::digest(&bytes);
    bytes.extend_from_slice(&checksum);
    bytes
}

/// The embeddings in `bytes`, or why they cannot be used.
fn decode(
    bytes: &[u8],
    key: &[u8; 32],
    len: usize,
    dim: usize,
) -> std::result::Result<Embeddings, String> {
    let expected_size = HEADER_LEN + len * dim * 4 + 32;
    if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
        return Err("not an embedding cache file".into());
    }
    let u64_at = |at: usize| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(word)
    };
    let mut format = [0u8; 4];
    format.copy_from_slice(&bytes[8..12]);
    let format = u32::from_le_bytes(format);
    if format != FORMAT {
        return Err(format!("format {format}, expected {FORMAT}"));
    }
    if &bytes[12..44] != key {
        return Err("key in the header does not match its name".into());
    }
    let (n, d, truncated) = (u64_at(44), u64_at(52), u64_at(60));
    if n != len as u64 || d != dim as u64 {
        return Err(format!("{n} x {d} embeddings, expected {len} x {dim}"));
    }
    if bytes.len() != expected_size {
        return Err(format!("{} bytes, expected {expected_size}", bytes.len()));
    }
    let (body, checksum) = bytes.split_at(bytes.len() - 32);
    if Sha256::digest(body).as_slice() != checksum {
        return Err("checksum mismatch".into());
    }
    let data = body[HEADER_LEN..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok(Embeddings {
        data,
        dim,
        truncated: truncated as usize,
    })
}

/// Writes through a temporary file in the same directory and renames it, so a crash or a
/// concurrent run never leaves a half-written file under the final name.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |op, path: &Path| {
        let path = path.to_path_buf();
        move |source| DenseError::Io { op, path, source }
    };
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut file = std::fs::File::create(&tmp).map_err(io("creating", &tmp))?;
    file.write_all(bytes).map_err(io("writing", &tmp))?;
    file.sync_all().map_err(io("writing", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io("renaming to", path))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit_rows(rows: &[[f32; 2]]) -> Embeddings {
        let data = rows
            .iter()
            .flat_map(|r| {
                let n = (r[0] * r[0] + r[1] * r[1]).sqrt();
                [r[0] / n, r[1] / n]
            })
            .collect();
        Embeddings {
            data,
            dim: 2,
            truncated: 1,
        }
    }

    #[test]
    fn search_ranks_by_cosine_with_ties_in_document_order() {
        let index =
            DenseIndex::from_embeddings(unit_rows(&[[0., 1.], [1., 0.], [1., 1.], [1., 0.]]))
                .unwrap();
        let hits = index.search(&[1.0, 0.0], 3).unwrap();
        let docs: Vec<usize> = hits.iter().map(|h| h.doc).collect();
        assert_eq!(docs, [1, 3, 2]);
        assert!((hits[2].score - 0.5f64.sqrt()).abs() < 1e-6);
        assert_eq!(index.search(&[1.0, 0.0], 10).unwrap().len(), 4);
        assert!(index.search(&[1.0, 0.0], 0).unwrap().is_empty());
        assert!(matches!(
            index.search(&[1.0], 1),
            Err(DenseError::DimensionMismatch { .. })
        ));
    }

    #[test]
    fn cache_bytes_round_trip_and_reject_damage() {
        let embeddings = unit_rows(&[[0., 1.], [3., 4.]]);
        let key = [7u8; 32];
        let bytes = encode(&key, &embeddings);
        assert_eq!(decode(&bytes, &key, 2, 2).unwrap(), embeddings);

        assert!(decode(&bytes, &[8u8; 32], 2, 2).is_err());
        assert!(decode(&bytes, &key, 3, 2).is_err());
        assert!(decode(&bytes[..bytes.len() - 1], &key, 2, 2).is_err());
        assert!(decode(b"garbage", &key, 2, 2).is_err());
        let mut flipped = bytes.clone();
        flipped[HEADER_LEN + 2] ^= 1;
        assert_eq!(
            decode(&flipped, &key, 2, 2).unwrap_err(),
            "checksum mismatch"
        );
    }
}
