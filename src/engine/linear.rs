//! A projection and the choice of kernel that multiplies it: our CPU kernels against GGUF blocks
//! as stored (`cpu::matmul`), candle's quantized or dense matmul otherwise. This is the one place
//! that choice is made, for prefill, decoding and batched decoding alike.

use candle_core::quantized::QMatMul;
use candle_core::{DType, Module, Tensor};

use super::cpu::matmul::{self as cpu_matmul, StoredRows};
use super::cpu::q4::Q41Rows;
use super::cpu::q4k::Q4KRows;
use super::cpu::q5::Q50Rows;
use super::cpu::q6k::Q6KRows;
use super::cpu::q8::Q8Rows;
use super::error::{EngineError, Result};

/// Rows of every small dense product on CUDA ([`Linear::forward`]): the most decoding rows that
/// share one gemm, and the shape a single decoding row is computed at, alone or batched.
pub(crate) const CUDA_ROW_BUCKET: usize = 32;

/// A projection: dense (safetensors, F16/F32 GGUF) or block-quantized (GGUF), optionally with
/// a quantized copy for our CPU kernels or, where they do not run, a second copy used when a
/// single row is multiplied (decoding), where memory bandwidth rather than arithmetic sets the
/// speed.
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    inner: QMatMul,
    single_row: Option<QMatMul>,
    /// Weights for our AVX-512 VNNI kernels, used for every product on the CPU in f32 (`inner`
    /// then only serves [`Linear::rows`] and inputs the kernels cannot take).
    decode_rows: Option<DecodeRows>,
    /// `[out]`, added to every output row (Qwen2's q, k and v).
    bias: Option<Tensor>,
}

/// Weights for our AVX-512 VNNI kernels (`cpu::matmul`): decoding and prefill alike, so that a
/// position gets the same arithmetic whichever way it is computed.
#[derive(Debug, Clone)]
pub(crate) enum DecodeRows {
    /// Q8_0, as stored or re-quantized from dense weights (`cpu::q8`).
    Q8(Q8Rows),
    /// Q4_1 as stored (`cpu::q4`).
    Q41(Q41Rows),
    /// Q5_0 as stored (`cpu::q5`).
    Q50(Q50Rows),
    /// Q4_K as stored (`cpu::q4k`).
    Q4K(Q4KRows),
    /// Q6_K as stored (`cpu::q6k`).
    Q6K(Q6KRows),
}

impl DecodeRows {
    fn shape(&self) -> (usize, usize) {
        match self {
            Self::Q8(q) => q.shape(),
            Self::Q41(q) => q.shape(),
            Self::Q50(q) => q.shape(),
            Self::Q4K(q) => q.shape(),
            Self::Q6K(q) => q.shape(),
        }
    }

    /// `x · Wᵀ` for `rows` activation rows (row-major), `[rows, out]`; `None` when the CPU lacks
    /// AVX-512 VNNI or `x` has the wrong length. Each output row depends on its input row only,
    /// bit for bit.
    pub(crate) fn matmul(&self, x: &[f32], rows: usize) -> Option<Vec<f32>> {
        match self {
            Self::Q8(q) => cpu_matmul::matmul(q, x, rows),
            Self::Q41(q) => cpu_matmul::matmul(q, x, rows),
            Self::Q50(q) => cpu_matmul::matmul(q, x, rows),
            Self::Q4K(q) => cpu_matmul::matmul(q, x, rows),
            Self::Q6K(q) => cpu_matmul::matmul(q, x, rows),
        }
    }
}

impl Linear {
    pub(crate) fn new(inner: QMatMul) -> Self {
        Self {
            inner,
            single_row: None,
            decode_rows: None,
            bias: None,
        }
    }

    pub(crate) fn with_single_row(inner: QMatMul, single_row: QMatMul) -> Self {
        Self {
            inner,
            single_row: Some(single_row),
            decode_rows: None,
            bias: None,
        }
    }

    pub(crate) fn with_decode_rows(inner: QMatMul, decode_rows: DecodeRows) -> Self {
        Self {
            inner,
            single_row: None,
            decode_rows: Some(decode_rows),
            bias: None,
        }
    }

    /// Adds `bias` (`[out]`, in the activation dtype) to every output.
    pub(crate) fn with_bias(mut self, bias: Tensor) -> Self {
        self.bias = Some(bias);
        self
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.forward_unbiased(x)?;
        match &self.bias {
            Some(bias) => Ok(y.broadcast_add(bias)?),
            None => Ok(y),
        }
    }

    /// `forward` for a stack of rows `[n, ..., in]` from different sequences, each row's output
    /// bitwise what it is when the row is multiplied alone. Our CPU kernels keep rows apart, so
    /// the rows share one pass over the weights. On CUDA a dense projection multiplies every
    /// product of up to [`CUDA_ROW_BUCKET`] rows as one of exactly that many rows (see
    /// [`Linear::forward`]), so a stack of up to that many shares one gemm. Any other kernel
    /// (candle's CPU gemm and quantized matmuls pick blocking by row count) multiplies them one
    /// by one.
    pub(crate) fn forward_rows(&self, x: &Tensor) -> Result<Tensor> {
        let n = x.dim(0)?;
        let group = if self.keeps_rows_apart(x)? {
            n
        } else if self.pads_rows(x) {
            CUDA_ROW_BUCKET
        } else {
            1
        };
        if group >= n {
            return self.forward(x);
        }
        let parts = (0..n)
            .step_by(group)
            .map(|start| self.forward(&x.narrow(0, start, group.min(n - start))?))
            .collect::<Result<Vec<_>>>()?;
        Ok(Tensor::cat(&parts, 0)?)
    }

    fn keeps_rows_apart(&self, x: &Tensor) -> Result<bool> {
        Ok(match &self.decode_rows {
            Some(decode) => {
                x.device().is_cpu()
                    && x.dtype() == DType::F32
                    && decode.shape().1 == x.dim(candle_core::D::Minus1)?
                    && super::cpu::q8::supported()
            }
            None => false,
        })
    }

    /// Whether products of few rows are padded to [`CUDA_ROW_BUCKET`]: dense weights on CUDA.
    /// Quantized CUDA matmuls are left alone: padding would move a single row from the fused
    /// matrix-vector kernel to dequantize-then-gemm and double what decoding reads.
    fn pads_rows(&self, x: &Tensor) -> bool {
        x.device().is_cuda() && matches!(self.inner, QMatMul::Tensor(_) | QMatMul::TensorF16(_))
    }

    fn forward_unbiased(&self, x: &Tensor) -> Result<Tensor> {
        let cols = x.dim(candle_core::D::Minus1)?;
        let rows = x.elem_count() / cols.max(1);
        if let (Some(decode), true, DType::F32) =
            (&self.decode_rows, x.device().is_cpu(), x.dtype())
        {
            let (out_features, in_features) = decode.shape();
            if in_features == cols {
                let x = x.contiguous()?;
                let (storage, layout) = x.storage_and_layout();
                let values = match (&*storage, layout.contiguous_offsets()) {
                    (candle_core::Storage::Cpu(cpu), Some((start, end))) => {
                        &cpu.as_slice::<f32>()?[start..end]
                    }
                    _ => &[][..],
                };
                if let Some(out) = decode.matmul(values, rows) {
                    let mut dims = x.dims().to_vec();
                    if let Some(last) = dims.last_mut() {
                        *last = out_features;
                    }
                    return Ok(Tensor::from_vec(out, dims, x.device())?);
                }
            }
        }
        if self.pads_rows(x) && rows <= CUDA_ROW_BUCKET {
            return self.forward_padded(x, rows, cols);
        }
        let mm = match &self.single_row {
            Some(q) if rows == 1 => q,
            _ => &self.inner,
        };
        // Quantized kernels take f32 activations; bf16 activations (CUDA) are widened around them.
        if matches!(mm, QMatMul::QTensor(_)) && x.dtype() != DType::F32 {
            let dtype = x.dtype();
            return Ok(mm.forward(&x.to_dtype(DType::F32)?)?.to_dtype(dtype)?);
        }
        Ok(mm.forward(x)?)
    }

    /// `x` (up to [`CUDA_ROW_BUCKET`] rows of `cols`, in any shape: `[n, 1, in]` when decoding)
    /// multiplied as a 2-D product of exactly [`CUDA_ROW_BUCKET`] rows, zeros below. cuBLAS picks its algorithm by shape, and a row's
    /// dot products do not depend on the other rows of a fixed-shape gemm, so one decoding row
    /// gets the same bits alone or stacked with others; a matrix-vector product would not.
    /// Decoding is bound by reading the weights, which the extra rows do not add to.
    fn forward_padded(&self, x: &Tensor, rows: usize, cols: usize) -> Result<Tensor> {
        let flat = x.reshape((rows, cols))?;
        let padded = if rows < CUDA_ROW_BUCKET {
            let zeros = Tensor::zeros((CUDA_ROW_BUCKET - rows, cols), x.dtype(), x.device())?;
            Tensor::cat(&[&flat, &zeros], 0)?
        } else {
            flat.contiguous()?
        };
        let out = self.inner.forward(&padded)?.narrow(0, 0, rows)?;
        let mut dims = x.dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last = out.dim(1)?;
        }
        Ok(out.reshape(dims)?)
    }

    /// Rows `ids` of the weight matrix `[out, in]` as dense f32 `[ids.len(), in]`: for a head
    /// that needs a few logits only (a reranker's yes/no), without projecting the whole vocabulary.
    /// Quantized weights are dequantized row by row from their blocks, never as a whole matrix.
    pub(crate) fn rows(&self, ids: &[u32]) -> Result<Tensor> {
        match &self.inner {
            QMatMul::Tensor(w) | QMatMul::TensorF16(w) => {
                let index = Tensor::new(ids, w.device())?;
                Ok(w.index_select(&index, 0)?.to_dtype(DType::F32)?)
            }
            QMatMul::QTensor(q) => {
                let (out, inner) = q.shape().dims2()?;
                let dtype = q.dtype();
                let row_bytes = inner / dtype.block_size() * dtype.type_size();
                let data = q.data()?;
                let mut picked = Vec::with_capacity(ids.len() * row_bytes);
                for &id in ids {
                    let id = id as usize;
                    if id >= out {
                        return Err(EngineError::TokenOutOfRange {
                            id: id as u32,
                            vocab_size: out,
                        });
                    }
                    picked.extend_from_slice(&data[id * row_bytes..(id + 1) * row_bytes]);
                }
                let device = q.device();
                let rows = candle_core::quantized::ggml_file::qtensor_from_ggml(
                    dtype,
                    &picked,
                    vec![ids.len(), inner],
                    &device,
                )?;
                Ok(rows.dequantize(&device)?)
            }
        }
    }
}
