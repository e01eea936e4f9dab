//! One decoder layer from a checkpoint, whatever its format: the tensor names of HF safetensors
//! and GGUF, and the experts of Qwen3-MoE in each format's layout (HF: one tensor per expert as on
//! the Hub, or transformers 5's fused `gate_up_proj`; GGUF: llama.cpp's stacked `ffn_*_exps`).

use std::ops::Range;

use candle_core::{Device, Tensor};

use super::super::config::Config;
use super::super::error::{EngineError, Result};
use super::super::ffn::{FeedForward, Mlp, SparseMoe};
use super::super::model::{Layer, Linear};

/// What a decoder layer needs from a checkpoint, whatever its file format.
pub(super) trait WeightSource {
    /// A dense tensor (norm weights) in the activation dtype.
    fn tensor(&self, name: &str, shape: &[usize], device: &Device) -> Result<Tensor>;
    fn linear(&self, name: &str, out: usize, inp: usize, device: &Device) -> Result<Linear>;
    fn has(&self, name: &str) -> bool;
    /// Rows `rows` of each of the `n` matrices of a stacked `[n, total_rows, inp]` tensor, one
    /// [`Linear`] per expert, each in the format's own storage.
    fn stacked(
        &self,
        name: &str,
        n: usize,
        total_rows: usize,
        rows: Range<usize>,
        inp: usize,
        device: &Device,
    ) -> Result<Vec<Linear>>;
}

/// Tensor names of one decoder layer: a per-layer prefix and the suffix of each weight.
pub(super) struct LayerNames {
    pub prefix: &'static str,
    pub attn_norm: &'static str,
    pub q: &'static str,
    pub k: &'static str,
    pub v: &'static str,
    pub o: &'static str,
    pub q_norm: &'static str,
    pub k_norm: &'static str,
    pub q_bias: &'static str,
    pub k_bias: &'static str,
    pub v_bias: &'static str,
    pub ffn_norm: &'static str,
    pub gate: &'static str,
    pub up: &'static str,
    pub down: &'static str,
    /// The MoE router `[num_experts, hidden]`.
    pub router: &'static str,
    pub experts: ExpertNames,
}

/// Where a format keeps a layer's experts.
pub(super) enum ExpertNames {
    /// HF: `{prefix}.{i}.mlp.experts.{e}.gate_proj.weight` ..., or transformers 5's fused
    /// `mlp.experts.gate_up_proj` `[n, 2·ff, hidden]` and `mlp.experts.down_proj` `[n, hidden, ff]`.
    PerExpert {
        stem: &'static str,
        fused_gate_up: &'static str,
        fused_down: &'static str,
    },
    /// GGUF: `[n, ff, hidden]` gate and up, `[n, hidden, ff]` down.
    Stacked {
        gate: &'static str,
        up: &'static str,
        down: &'static str,
    },
}

pub(super) const HF_NAMES: LayerNames = LayerNames {
    prefix: "model.layers",
    attn_norm: "input_layernorm.weight",
    q: "self_attn.q_proj.weight",
    k: "self_attn.k_proj.weight",
    v: "self_attn.v_proj.weight",
    o: "self_attn.o_proj.weight",
    q_norm: "self_attn.q_norm.weight",
    k_norm: "self_attn.k_norm.weight",
    q_bias: "self_attn.q_proj.bias",
    k_bias: "self_attn.k_proj.bias",
    v_bias: "self_attn.v_proj.bias",
    ffn_norm: "post_attention_layernorm.weight",
    gate: "mlp.gate_proj.weight",
    up: "mlp.up_proj.weight",
    down: "mlp.down_proj.weight",
    router: "mlp.gate.weight",
    experts: ExpertNames::PerExpert {
        stem: "mlp.experts",
        fused_gate_up: "mlp.experts.gate_up_proj",
        fused_down: "mlp.experts.down_proj",
    },
};

pub(super) const GGUF_NAMES: LayerNames = LayerNames {
    prefix: "blk",
    attn_norm: "attn_norm.weight",
    q: "attn_q.weight",
    k: "attn_k.weight",
    v: "attn_v.weight",
    o: "attn_output.weight",
    q_norm: "attn_q_norm.weight",
    k_norm: "attn_k_norm.weight",
    q_bias: "attn_q.bias",
    k_bias: "attn_k.bias",
    v_bias: "attn_v.bias",
    ffn_norm: "ffn_norm.weight",
    gate: "ffn_gate.weight",
    up: "ffn_up.weight",
    down: "ffn_down.weight",
    router: "ffn_gate_inp.weight",
    experts: ExpertNames::Stacked {
        gate: "ffn_gate_exps.weight",
        up: "ffn_up_exps.weight",
        down: "ffn_down_exps.weight",
    },
};

pub(super) fn build_layer(
    w: &impl WeightSource,
    names: &LayerNames,
    cfg: &Config,
    i: usize,
    d: &Device,
) -> Result<Layer> {
    let (h, hd) = (cfg.hidden_size, cfg.head_dim);
    let (qd, kvd) = (cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd);
    let name = |suffix: &str| format!("{}.{i}.{suffix}", names.prefix);
    let qk_norm = |suffix: &str| -> Result<Option<Tensor>> {
        match cfg.architecture.qk_norm() {
            true => Ok(Some(w.tensor(&name(suffix), &[hd], d)?)),
            false => Ok(None),
        }
    };
    let biased = |weight: &str, bias: &str, out: usize| -> Result<Linear> {
        let linear = w.linear(&name(weight), out, h, d)?;
        match cfg.architecture.qkv_bias() {
            true => Ok(linear.with_bias(w.tensor(&name(bias), &[out], d)?)),
            false => Ok(linear),
        }
    };
    Ok(Layer {
        attn_norm: w.tensor(&name(names.attn_norm), &[h], d)?,
        q: biased(names.q, names.q_bias, qd)?,
        k: biased(names.k, names.k_bias, kvd)?,
        v: biased(names.v, names.v_bias, kvd)?,
        o: w.linear(&name(names.o), h, qd, d)?,
        q_norm: qk_norm(names.q_norm)?,
        k_norm: qk_norm(names.k_norm)?,
        ffn_norm: w.tensor(&name(names.ffn_norm), &[h], d)?,
        ffn: build_ffn(w, names, cfg, i, d)?,
        device: d.clone(),
    })
}

fn build_ffn(
    w: &impl WeightSource,
    names: &LayerNames,
    cfg: &Config,
    i: usize,
    d: &Device,
) -> Result<FeedForward> {
    let name = |suffix: &str| format!("{}.{i}.{suffix}", names.prefix);
    let h = cfg.hidden_size;
    let moe = match &cfg.moe {
        Some(moe) if moe.is_sparse(i) => moe,
        _ => {
            let ff = cfg.intermediate_size;
            return Ok(FeedForward::Dense(Box::new(Mlp {
                gate: w.linear(&name(names.gate), ff, h, d)?,
                up: w.linear(&name(names.up), ff, h, d)?,
                down: w.linear(&name(names.down), h, ff, d)?,
            })));
        }
    };
    let (n, ff) = (moe.num_experts, moe.moe_intermediate_size);
    let router = w.linear(&name(names.router), n, h, d)?;
    let (gates, ups, downs) = match &names.experts {
        ExpertNames::Stacked { gate, up, down } => (
            w.stacked(&name(gate), n, ff, 0..ff, h, d)?,
            w.stacked(&name(up), n, ff, 0..ff, h, d)?,
            w.stacked(&name(down), n, h, 0..h, ff, d)?,
        ),
        ExpertNames::PerExpert {
            fused_gate_up,
            fused_down,
            ..
        } if w.has(&name(fused_gate_up)) => (
            w.stacked(&name(fused_gate_up), n, 2 * ff, 0..ff, h, d)?,
            w.stacked(&name(fused_gate_up), n, 2 * ff, ff..2 * ff, h, d)?,
            w.stacked(&name(fused_down), n, h, 0..h, ff, d)?,
        ),
        ExpertNames::PerExpert { stem, .. } => {
            let one = |e: usize, proj: &str, out: usize, inp: usize| {
                w.linear(&name(&format!("{stem}.{e}.{proj}.weight")), out, inp, d)
            };
            let mut parts = (Vec::new(), Vec::new(), Vec::new());
            for e in 0..n {
                parts.0.push(one(e, "gate_proj", ff, h)?);
                parts.1.push(one(e, "up_proj", ff, h)?);
                parts.2.push(one(e, "down_proj", h, ff)?);
            }
            parts
        }
    };
    let experts: Vec<Mlp> = gates
        .into_iter()
        .zip(ups)
        .zip(downs)
        .map(|((gate, up), down)| Mlp { gate, up, down })
        .collect();
    if experts.len() != n {
        return Err(EngineError::MissingTensor {
            name: name("experts"),
        });
    }
    Ok(FeedForward::Sparse(Box::new(SparseMoe::new(
        router, experts, moe,
    ))))
}
