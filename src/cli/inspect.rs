//! `tableseek inspect MODEL`: a model's facts and memory plan, from headers alone.

use std::path::Path;
use tableseek::engine::hub::resolve_model_path;
use tableseek::engine::plan::{human, MemoryPlan, ModelFacts};

use tableseek::engine::{parse_bytes, LoadOptions, ModelSpec};

use super::model_args::PlacementArgs;

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// A GGUF file, a checkpoint folder, a model id `ORG/NAME[@REVISION][:QUANT]` from the local
    /// Hugging Face cache, or `random:PRESET`.
    pub model: String,
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// KV budget the plan sizes the context for.
    #[arg(long, default_value = "4GiB", value_parser = parse_bytes)]
    pub kv_memory: usize,
}

pub fn run(args: InspectArgs) -> anyhow::Result<()> {
    let spec = match ModelSpec::parse(&args.model)? {
        ModelSpec::Path(path) => ModelSpec::Path(resolve_model_path(&path)?),
        random => random,
    };
    let devices = args.placement.devices()?;
    let options = match &spec {
        ModelSpec::Path(path) => args.placement.load_options(path, &devices)?,
        ModelSpec::Random { .. } => LoadOptions {
            dtype: args.placement.load_options(Path::new(""), &devices)?.dtype,
            ..LoadOptions::default()
        },
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
    match &c.moe {
        Some(moe) => {
            let sparse = (0..c.num_hidden_layers)
                .filter(|&i| moe.is_sparse(i))
                .count();
            println!(
                "  experts: {} of width {}, {} per token ({}renormalized), in {sparse} of {} layers",
                moe.num_experts,
                moe.moe_intermediate_size,
                moe.num_experts_per_tok,
                if moe.norm_topk_prob { "" } else { "not " },
                c.num_hidden_layers
            );
        }
        None => println!("  experts: none (dense)"),
    }
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
