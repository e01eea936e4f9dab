//! Encoder and reranker flags shared by `retrieve` and `eval`, and loading what they name.
//!
//! Over 150 lines because the flags and their documented defaults take ~60; which encoder a path
//! holds and how it loads are `retrieve::encoder`'s, the cache is `retrieve::dense`'s.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use tableseek::engine::hub::resolve_model_path;
use tableseek::engine::{DeviceMap, LoadOptions};
use tableseek::retrieve::dense::{CacheStatus, DenseIndex, TextEncoder};
use tableseek::retrieve::encoder::{load_encoder, EncoderSettings};
use tableseek::retrieve::llm_embed::DEFAULT_TASK;
use tableseek::retrieve::rerank::{
    RerankBatching, RerankOptions, Reranker, DEFAULT_INSTRUCTION, DEFAULT_MAX_LENGTH,
};

#[derive(Debug, Clone, clap::Args)]
pub struct EncoderArgs {
    /// A sentence-transformers BERT folder (config.json, model.safetensors, tokenizer.json), or a
    /// decoder LLM (GGUF file or checkpoint folder) used the Qwen3-Embedding way (last token).
    /// Default: $TABLESEEK_MODELS/all-MiniLM-L6-v2, else models/all-MiniLM-L6-v2.
    #[arg(long)]
    pub embed_model: Option<PathBuf>,
    /// Tokens per text for the encoder (special tokens included); longer tables are truncated.
    /// Default: 256 for BERT (sentence-transformers' setting), the model's window for LLMs.
    #[arg(long)]
    pub max_length: Option<usize>,
    /// Texts per encoder forward pass. Default: 32 for BERT, 8 for LLMs.
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Query instruction of an LLM encoder (`Instruct: {task}\nQuery:{query}`).
    #[arg(long, default_value = DEFAULT_TASK)]
    pub embed_task: String,
    /// Matryoshka width of an LLM encoder: keep the first N components.
    #[arg(long)]
    pub embed_dim: Option<usize>,
    /// Where corpus embeddings are kept between runs.
    #[arg(long, default_value = "runs/cache/embeddings")]
    pub cache_dir: PathBuf,
    /// Embed the corpus afresh and write no cache.
    #[arg(long)]
    pub no_cache: bool,
}

#[derive(Debug, Clone, clap::Args)]
pub struct RerankArgs {
    /// The reranking LLM (GGUF file or checkpoint folder).
    /// Default: $TABLESEEK_MODELS/smollm2-135m-instruct-q4_1.gguf, else models/….
    #[arg(long)]
    pub rerank_model: Option<PathBuf>,
    /// How many dense candidates the reranker reorders.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub rerank_depth: u64,
    /// The `<Instruct>` of the reranker prompt.
    #[arg(long, default_value = DEFAULT_INSTRUCTION)]
    pub rerank_instruction: String,
    /// Tokens per reranker prompt (capped by the model's window); documents are cut to fit.
    #[arg(long, default_value_t = DEFAULT_MAX_LENGTH)]
    pub rerank_max_length: usize,
}

fn models_dir() -> PathBuf {
    std::env::var_os("TABLESEEK_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("models"))
}

impl EncoderArgs {
    /// Replaces a model id in `--embed-model` with its path in the Hugging Face cache.
    pub fn resolve(&mut self) -> anyhow::Result<()> {
        if let Some(path) = &self.embed_model {
            self.embed_model = Some(resolve_model_path(path)?);
        }
        Ok(())
    }

    pub fn model_path(&self) -> PathBuf {
        self.embed_model
            .clone()
            .unwrap_or_else(|| models_dir().join("all-MiniLM-L6-v2"))
    }

    /// The encoder the flags name (`retrieve::encoder`'s choice and defaults).
    pub fn load(
        &self,
        devices: &DeviceMap,
        progress: bool,
    ) -> anyhow::Result<Box<dyn TextEncoder>> {
        let settings = EncoderSettings {
            max_length: self.max_length,
            batch_size: self.batch_size,
            task: self.embed_task.clone(),
            dim: self.embed_dim,
            progress,
        };
        Ok(load_encoder(&self.model_path(), devices, &settings)?)
    }

    /// Embeddings of `texts`, from the cache when it holds them.
    pub fn index(&self, encoder: &dyn TextEncoder, texts: &[&str]) -> anyhow::Result<DenseIndex> {
        let start = Instant::now();
        let (index, status) = match self.no_cache {
            true => (DenseIndex::build(encoder, texts)?, None),
            false => {
                let (index, status) = DenseIndex::load_or_build(encoder, texts, &self.cache_dir)?;
                (index, Some(status))
            }
        };
        let cached = match status {
            Some(CacheStatus::Hit(path)) => {
                tracing::info!("embeddings from {}", path.display());
                None
            }
            Some(CacheStatus::Built(path) | CacheStatus::Rebuilt(path, _)) => {
                Some(format!("; cached in {}", path.display()))
            }
            None => Some(String::new()),
        };
        if let Some(cached) = cached {
            let seconds = start.elapsed().as_secs_f64();
            let rate = index.len() as f64 / seconds;
            eprintln!(
                "embedded {} tables in {seconds:.1}s ({rate:.1} tables/s){cached}",
                index.len()
            );
        }
        if index.truncated() > 0 {
            tracing::warn!(
                "{} of {} tables are longer than the encoder's maximum length; only their start is embedded",
                index.truncated(),
                index.len(),
            );
        }
        Ok(index)
    }
}

impl RerankArgs {
    /// Replaces a model id in `--rerank-model` with its path in the Hugging Face cache.
    pub fn resolve(&mut self) -> anyhow::Result<()> {
        if let Some(path) = &self.rerank_model {
            self.rerank_model = Some(resolve_model_path(path)?);
        }
        Ok(())
    }

    pub fn model_path(&self) -> PathBuf {
        self.rerank_model
            .clone()
            .unwrap_or_else(|| models_dir().join("smollm2-135m-instruct-q4_1.gguf"))
    }

    pub fn depth(&self) -> usize {
        usize::try_from(self.rerank_depth).unwrap_or(usize::MAX)
    }

    pub fn load(&self, devices: &DeviceMap) -> anyhow::Result<Reranker> {
        let path = self.model_path();
        let options = RerankOptions {
            instruction: self.rerank_instruction.clone(),
            max_length: self.rerank_max_length,
            yes_no_ids: None,
            batching: RerankBatching::Auto,
        };
        let load = LoadOptions::for_prefill(&path, devices);
        Reranker::load(&path, devices, &load, options)
            .with_context(|| format!("loading the reranker from {}", path.display()))
    }
}
