//! Our CPU kernels, where candle's op-by-op CPU path was the bottleneck. `model` and `linear`
//! choose when they run; everything here is plain slices in, slices out.
//!
//! - [`kernels`]: vectorized exp/erf/softmax/layer norm for AVX-512, AVX2 and baseline (picked at
//!   run time), `gemm` on strided views, candle's worker pool for parallel loops.
//! - [`attention`]: one pass per KV head over the cache view, masked softmax.
//! - [`matmul`] with [`q8`], [`q4`], [`q5`], [`q4k`], [`q6k`] and [`qk`]: products against GGUF
//!   blocks as stored (AVX-512 VNNI, llama.cpp's arithmetic), each activation row bitwise
//!   independent of the others.

pub(crate) mod attention;
pub(crate) mod kernels;
pub(crate) mod matmul;
pub(crate) mod q4;
pub(crate) mod q4k;
pub(crate) mod q5;
pub(crate) mod q6k;
pub(crate) mod q8;
pub(crate) mod qk;
