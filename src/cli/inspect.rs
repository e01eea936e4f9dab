//! `tableseek inspect MODEL`: a model's facts and memory plan, from headers alone.

use tableseek::engine::hub::resolve_model_path;
use tableseek::engine::plan::{human, MemoryPlan, ModelFacts};
use tableseek::engine::{parse_bytes, parse_dtype, DeviceMap, LoadOptions, ModelSpec};

use super::model_args::weights_mode;

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// A GGUF file, a checkpoint folder, a model id `ORG/NAME[@REVISION][:QUANT]` from the local
    /// Hugging Face cache, or `random:PRESET`.
    pub model: String,
    /// Devices the plan is for, as `--device` elsewhere.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Proportions of layers per device, or `auto` (by free memory).
    #[arg(long)]
    pub layer_split: Option<String>,
    /// f32, bf16 or f16; defaults to f32 on CPU and bf16 on CUDA.
    #[arg(long)]
    pub dtype: Option<String>,
    /// GGUF weights mode, as `--weights` elsewhere.
    #[arg(long, default_value = "auto")]
    pub weights: String,
    /// KV budget the plan sizes the context for.
    #[arg(long, default_value = "4GiB", value_parser = parse_bytes)]
    pub kv_memory: usize,
}

pub fn run(args: InspectArgs) -> anyhow::Result<()> {
    let spec = match ModelSpec::parse(&args.model)? {
        ModelSpec::Path(path) => ModelSpec::Path(resolve_model_path(&path)?),
        random => random,
    };
    let devices = DeviceMap::parse(&args.device, args.layer_split.as_deref())?;
    let options = LoadOptions {
        dtype: args.dtype.as_deref().map(parse_dtype).transpose()?,
        quantized: match &spec {
            ModelSpec::Path(path) => weights_mode(&args.weights, path, &devices)?,
            ModelSpec::Random { .. } => Default::default(),
        },
        prefill_chunk: None,
    };
    let facts = ModelFacts::read(&spec)?;
    let c = &facts.config;
    println!("{}", facts.source);
    println!(
        "  architecture {:?}, {} layers, hidden {}, intermediate {}, vocab {}",
        c.architecture, c.num_hidden_layers, c.hidden_size, c.intermediate_size, c.vocab_size
    );
    println!(
        "  attention: {} heads, {} KV heads, head dim {}; context {} tokens; rope theta {}",
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
        c.max_position_embeddings,
        c.rope_theta
    );
    println!("  experts: none (dense)");
    println!(
        "  tied output head: {}; chat template: {}",
        c.tie_word_embeddings,
        if facts.chat_template {
            "from the model"
        } else {
            "none"
        }
    );
    let types: Vec<String> = facts
        .dtypes()
        .iter()
        .map(|(dtype, (n, bytes))| format!("{dtype} x{n} ({})", human(*bytes)))
        .collect();
    println!(
        "  tensors: {} in {} stored: {}",
        facts.tensors.len(),
        human(facts.stored_bytes()),
        types.join(", ")
    );
    let plan = MemoryPlan::new(&facts, &devices, &options, args.kv_memory as u64);
    println!(
        "plan ({:?} weights mode, nothing loaded):\n{}",
        options.quantized,
        plan.render()
    );
    match plan.check(None) {
        Ok(()) => println!("fits"),
        Err(e) => println!("does not fit: {e}"),
    }
    Ok(())
}
