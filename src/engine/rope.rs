//! Rotary position embeddings. The angles are computed per chunk for the chunk's absolute
//! positions, so there is no table to outgrow: any position up to the context length works.
//!
//! Arithmetic is f32 in the same order as transformers (`inv_freq` from `base ** (2i/d)`, then
//! `position * inv_freq`), which keeps the HF parity well inside 1e-5.

use candle_core::{DType, Device, Tensor};

use super::config::Config;
use super::error::Result;

/// How the two halves of each rotated pair are laid out in a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeLayout {
    /// Pairs are (i, i + d/2): HF checkpoints, and llama.cpp's NEOX mode (qwen3 GGUF).
    Halves,
    /// Pairs are (2i, 2i + 1): llama-architecture GGUF, whose q/k rows llama.cpp's converter permuted.
    Interleaved,
}

/// Per-frequency inverse wavelengths and the layout to apply them with.
#[derive(Debug, Clone)]
pub struct Rope {
    inv_freq: Vec<f32>,
    layout: RopeLayout,
}

impl Rope {
    /// Frequencies from the config, including Llama 3 scaling.
    pub fn from_config(cfg: &Config, layout: RopeLayout) -> Self {
        let d = cfg.head_dim;
        let base = cfg.rope_theta as f32;
        let mut inv_freq: Vec<f32> = (0..d / 2)
            .map(|i| 1.0 / base.powf((2 * i) as f32 / d as f32))
            .collect();
        if let Some(s) = cfg.rope_scaling {
            let old_ctx = s.original_max_position_embeddings as f32;
            let (factor, low, high) = (
                s.factor as f32,
                s.low_freq_factor as f32,
                s.high_freq_factor as f32,
            );
            let low_freq_wavelen = old_ctx / low;
            let high_freq_wavelen = old_ctx / high;
            for f in inv_freq.iter_mut() {
                let wavelen = 2.0 * std::f32::consts::PI / *f;
                if wavelen > low_freq_wavelen {
                    *f /= factor;
                } else if wavelen >= high_freq_wavelen {
                    let smooth = (old_ctx / wavelen - low) / (high - low);
                    *f = (1.0 - smooth) * *f / factor + smooth * *f;
                }
            }
        }
        Self { inv_freq, layout }
    }

    /// Frequencies from the config divided by per-frequency factors (GGUF `rope_freqs`, which is
    /// how llama.cpp stores Llama 3 scaling).
    pub fn with_freq_factors(cfg: &Config, layout: RopeLayout, factors: &[f32]) -> Self {
        let mut cfg = cfg.clone();
        cfg.rope_scaling = None;
        let mut rope = Self::from_config(&cfg, layout);
        for (f, div) in rope.inv_freq.iter_mut().zip(factors) {
            *f /= *div;
        }
        rope
    }

    pub fn layout(&self) -> RopeLayout {
        self.layout
    }

    /// cos and sin, each `[len, head_dim / 2]`, for positions `start..start + len`.
    pub fn tables(
        &self,
        start: usize,
        len: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(len * half);
        let mut sin = Vec::with_capacity(len * half);
        for p in start..start + len {
            let p = p as f32;
            for f in &self.inv_freq {
                let angle = p * f;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        let cos = Tensor::from_vec(cos, (len, half), device)?.to_dtype(dtype)?;
        let sin = Tensor::from_vec(sin, (len, half), device)?.to_dtype(dtype)?;
        Ok((cos, sin))
    }

    /// Rotates `x` of shape `[batch, heads, len, head_dim]` (must be contiguous).
    pub fn apply(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        Ok(match self.layout {
            RopeLayout::Halves => candle_nn::rotary_emb::rope(x, cos, sin)?,
            RopeLayout::Interleaved => candle_nn::rotary_emb::rope_i(x, cos, sin)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_scaling_matches_the_gguf_divisors() {
        // The tiny-llama3-rope fixture's README lists llama.cpp's `rope_freqs` for these settings.
        let mut cfg = Config::preset("llama-3.1-8b").unwrap();
        cfg.head_dim = 16;
        cfg.rope_theta = 10_000.0;
        let mut scaling = cfg.rope_scaling.unwrap();
        scaling.original_max_position_embeddings = 64;
        cfg.rope_scaling = Some(scaling);
        let scaled = Rope::from_config(&cfg, RopeLayout::Halves);
        cfg.rope_scaling = None;
        let plain = Rope::from_config(&cfg, RopeLayout::Halves);
        let expected = [1.0, 1.29398, 7.66739, 8.0, 8.0, 8.0, 8.0, 8.0];
        for ((p, s), e) in plain.inv_freq.iter().zip(&scaled.inv_freq).zip(expected) {
            assert!((p / s - e).abs() < 1e-4, "{} vs {e}", p / s);
        }
    }
}
