//! Model-loading flags shared by every subcommand that runs an LLM.

use std::path::PathBuf;

use anyhow::{bail, Context};
use tableseek::engine::hub::resolve_model_path;
use tableseek::engine::{
    parse_dtype, ChatModel, ChatModelOptions, DeviceMap, LoadOptions, ModelSpec, WeightsMode,
};

#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// A GGUF file, a Hugging Face checkpoint directory (config.json + *.safetensors), or a model
    /// id `ORG/NAME[@REVISION][:QUANT]` found offline in the local Hugging Face cache
    /// ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub); QUANT picks a GGUF file.
    #[arg(long, default_value = "models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")]
    pub model: PathBuf,
    /// tokenizer.json to use instead of the one that comes with the weights.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Random weights at the real shapes of a known model, for speed and memory measurements
    /// only (qwen3-0.6b, qwen3-4b, qwen3-8b, llama-3.1-8b). Needs --tokenizer.
    #[arg(long, value_name = "PRESET")]
    pub random_init: Option<String>,
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// CPU threads for the forward pass (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Where and how weights are placed: shared by the commands that load a model and `inspect`,
/// which plans the same placement without loading.
#[derive(Debug, Clone, clap::Args)]
pub struct PlacementArgs {
    /// `cpu`, `cuda:N`, or `cuda:0,1,...` to split the layers across GPUs.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Proportions of decoder layers per device, e.g. `3,1` (like llama.cpp's -ts), or `auto`
    /// (in proportion to each device's free memory).
    #[arg(long)]
    pub layer_split: Option<String>,
    /// f32, bf16 or f16; defaults to f32 on CPU and bf16 on CUDA.
    #[arg(long)]
    pub dtype: Option<String>,
    /// GGUF weights in memory: `as-stored` (least memory), `dense` (exact, 8x memory for 4-bit),
    /// `dense-q8` (dense prefill + 8-bit or as-stored 4-bit decode: fastest on CPU), or `auto`: dense-q8 for GGUF
    /// files up to 512 MiB on CPU, as-stored otherwise.
    #[arg(long, value_enum, default_value_t = WeightsMode::Auto)]
    pub weights: WeightsMode,
}

impl PlacementArgs {
    pub fn devices(&self) -> anyhow::Result<DeviceMap> {
        Ok(DeviceMap::parse(&self.device, self.layer_split.as_deref())?)
    }

    /// Load options for `model` on `devices` (no prefill chunk override).
    pub fn load_options(
        &self,
        model: &std::path::Path,
        devices: &DeviceMap,
    ) -> anyhow::Result<LoadOptions> {
        Ok(LoadOptions {
            dtype: self.dtype.as_deref().map(parse_dtype).transpose()?,
            quantized: self.weights.resolve(model, devices),
            prefill_chunk: None,
        })
    }
}

impl ModelArgs {
    /// Replaces a model id in `--model` with its path in the Hugging Face cache.
    pub fn resolve(&mut self) -> anyhow::Result<()> {
        if self.random_init.is_none() {
            self.model = resolve_model_path(&self.model)?;
        }
        Ok(())
    }

    pub fn load(&self) -> anyhow::Result<ChatModel> {
        let devices = self.placement.devices()?;
        let load = self.placement.load_options(&self.model, &devices)?;
        let spec = match &self.random_init {
            Some(preset) => ModelSpec::Random {
                preset: preset.clone(),
                seed: 0,
            },
            None => ModelSpec::Path(self.model.clone()),
        };
        let options = ChatModelOptions {
            tokenizer: self.tokenizer.clone(),
            devices,
            dtype: load.dtype,
            quantized: load.quantized,
            ..ChatModelOptions::default()
        };
        let started = std::time::Instant::now();
        let model = ChatModel::load(&spec, &options).with_context(|| match &self.random_init {
            Some(preset) => format!("building random-init model {preset}"),
            None => format!(
                "loading model {} (run scripts/fetch-models.sh for the default)",
                self.model.display()
            ),
        })?;
        tracing::info!(ms = started.elapsed().as_millis() as u64, "model loaded");
        Ok(model)
    }
}

/// Sizes the CPU thread pools: `threads` if given, else candle's default (physical cores). Candle's
/// kernels and our corpus loading share rayon's global pool, which can only be sized before its
/// first use, so the dispatcher calls this before any command runs. Candle also sizes its own pools
/// from `CANDLE_NUM_THREADS` / `RAYON_NUM_THREADS`, and when neither is set it re-reads
/// /proc/cpuinfo on every CPU matrix product (4,232 opens in a 16-token prefill + 64 decoded tokens
/// of SmolLM2), so both are always set here.
pub fn init_threads(threads: Option<usize>) -> anyhow::Result<()> {
    if threads == Some(0) {
        bail!("--threads must be at least 1");
    }
    let from_environment = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 0)
    };
    let threads = threads
        .or_else(|| from_environment("CANDLE_NUM_THREADS"))
        .unwrap_or_else(candle_core::utils::get_num_threads);
    // Called at the single-threaded start of the process: no thread reads the environment yet.
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    std::env::set_var("CANDLE_NUM_THREADS", threads.to_string());
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .context("setting the CPU thread count")
}
