//! Seeded random weights at a preset's real shapes (`--model random:PRESET`), so the agent loop
//! and the benchmarks run at a model's true cost without its weights.

use candle_core::quantized::QMatMul;
use candle_core::{DType, Device, Tensor};
use rayon::prelude::*;

use super::super::config::Config;
use super::super::device::DeviceMap;
use super::super::error::Result;
use super::super::ffn::{FeedForward, Mlp, SparseMoe};
use super::super::model::{Layer, Linear, Model};
use super::super::rope::{Rope, RopeLayout};
use super::{assemble, Ends};

/// SplitMix64: tiny, seedable, and identical on every platform, so a preset + seed always gives
/// the same weights.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform weights with standard deviation 0.02 (HF's initializer range), generated in
/// independently seeded blocks so rayon can fill large tensors in parallel deterministically.
fn random_tensor(
    name: &str,
    shape: &[usize],
    seed: u64,
    dtype: DType,
    device: &Device,
) -> Result<Tensor> {
    const BLOCK: usize = 1 << 16;
    let mut name_seed = seed;
    for b in name.bytes() {
        name_seed = splitmix(&mut name_seed) ^ b as u64;
    }
    let n: usize = shape.iter().product();
    let half_width = 0.02f32 * 3f32.sqrt();
    let mut data = vec![0f32; n];
    data.par_chunks_mut(BLOCK)
        .enumerate()
        .for_each(|(i, block)| {
            let mut s = name_seed ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93);
            for x in block {
                let u = (splitmix(&mut s) >> 40) as f32 / (1u64 << 24) as f32;
                *x = (2.0 * u - 1.0) * half_width;
            }
        });
    Ok(Tensor::from_vec(data, shape, &Device::Cpu)?
        .to_dtype(dtype)?
        .to_device(device)?)
}

pub(super) fn load_random(
    cfg: &Config,
    seed: u64,
    devices: &DeviceMap,
    dtype: DType,
) -> Result<Model> {
    let (h, kvd, qd, ff) = (
        cfg.hidden_size,
        cfg.num_key_value_heads * cfg.head_dim,
        cfg.num_attention_heads * cfg.head_dim,
        cfg.intermediate_size,
    );
    let ones = |n: usize, d: &Device| -> Result<Tensor> { Ok(Tensor::ones(n, dtype, d)?) };
    let lin = |name: &str, out: usize, inp: usize, d: &Device| -> Result<Linear> {
        Ok(Linear::new(QMatMul::Tensor(random_tensor(
            name,
            &[out, inp],
            seed,
            dtype,
            d,
        )?)))
    };
    let embed = random_tensor("embed", &[cfg.vocab_size, h], seed, dtype, devices.first())?;
    let last = devices.last();
    let lm_head = if cfg.tie_word_embeddings {
        Linear::new(QMatMul::Tensor(embed.to_device(last)?))
    } else {
        lin("lm_head", cfg.vocab_size, h, last)?
    };
    let qwen3 = cfg.architecture.qk_norm();
    let biased = |name: &str, out: usize, d: &Device| -> Result<Linear> {
        let linear = lin(name, out, h, d)?;
        match cfg.architecture.qkv_bias() {
            true => Ok(linear.with_bias(random_tensor(
                &format!("{name}.bias"),
                &[out],
                seed,
                dtype,
                d,
            )?)),
            false => Ok(linear),
        }
    };
    let layer = |i: usize, d: &Device| -> Result<Layer> {
        Ok(Layer {
            attn_norm: ones(h, d)?,
            q: biased(&format!("{i}.q"), qd, d)?,
            k: biased(&format!("{i}.k"), kvd, d)?,
            v: biased(&format!("{i}.v"), kvd, d)?,
            o: lin(&format!("{i}.o"), h, qd, d)?,
            q_norm: if qwen3 {
                Some(ones(cfg.head_dim, d)?)
            } else {
                None
            },
            k_norm: if qwen3 {
                Some(ones(cfg.head_dim, d)?)
            } else {
                None
            },
            ffn_norm: ones(h, d)?,
            ffn: match &cfg.moe {
                Some(moe) if moe.is_sparse(i) => {
                    let mlp = |e: usize| -> Result<Mlp> {
                        let f = moe.moe_intermediate_size;
                        Ok(Mlp {
                            gate: lin(&format!("{i}.{e}.gate"), f, h, d)?,
                            up: lin(&format!("{i}.{e}.up"), f, h, d)?,
                            down: lin(&format!("{i}.{e}.down"), h, f, d)?,
                        })
                    };
                    let experts = (0..moe.num_experts).map(mlp).collect::<Result<_>>()?;
                    let router = lin(&format!("{i}.router"), moe.num_experts, h, d)?;
                    FeedForward::Sparse(Box::new(SparseMoe::new(router, experts, moe)))
                }
                _ => FeedForward::Dense(Box::new(Mlp {
                    gate: lin(&format!("{i}.gate"), ff, h, d)?,
                    up: lin(&format!("{i}.up"), ff, h, d)?,
                    down: lin(&format!("{i}.down"), h, ff, d)?,
                })),
            },
            device: d.clone(),
        })
    };
    let rope = Rope::from_config(cfg, RopeLayout::Halves);
    assemble(
        cfg.clone(),
        devices,
        dtype,
        rope,
        Ends {
            embed,
            norm: ones(h, last)?,
            lm_head,
        },
        layer,
    )
}
