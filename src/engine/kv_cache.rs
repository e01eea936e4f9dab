//! The attention KV cache, owned by the caller rather than by the model, so it can be truncated,
//! snapshotted into the prefix cache, and restored — none of which candle-transformers' private
//! caches allow.
//!
//! Each layer keeps one K and one V buffer of shape `[1, kv_heads, capacity, head_dim]` on that
//! layer's device, filled in place. Capacity is always the next power of two (at least
//! [`MIN_CAPACITY`]) of the longest length held so far, a function of length alone: a cache
//! restored from the prefix cache then has the same buffer strides as one grown from scratch,
//! which keeps the attention matmuls — and so the logits — bitwise identical.

use candle_core::{Tensor, D};

use super::error::Result;

/// Smallest buffer allocated per layer, in positions.
pub const MIN_CAPACITY: usize = 256;

#[derive(Debug, Clone, Default)]
struct LayerKv {
    k: Option<Tensor>,
    v: Option<Tensor>,
}

/// Keys and values of every layer for positions `0..len()`.
///
/// Not `Clone`: buffers are written in place, so a shallow copy would alias them; use
/// [`KvCache::fork`] for an independent copy.
#[derive(Debug)]
pub struct KvCache {
    layers: Vec<LayerKv>,
    len: usize,
}

pub(crate) fn capacity_for(len: usize) -> usize {
    len.next_power_of_two().max(MIN_CAPACITY)
}

impl KvCache {
    /// An empty cache for a model with `n_layers` decoder layers; buffers are allocated on first
    /// use, on the device the layer's keys arrive on.
    pub fn new(n_layers: usize) -> Self {
        Self {
            layers: vec![LayerKv::default(); n_layers],
            len: 0,
        }
    }

    /// Number of positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// Forgets every position from `len` on; buffers are kept for reuse.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// An independent deep copy of the first `len()` positions (e.g. to branch a conversation).
    pub fn fork(&self) -> Result<Self> {
        if self.len == 0 {
            return Ok(Self::new(self.layers.len()));
        }
        Self::from_snapshot(&self.snapshot(self.len)?, self.len)
    }

    /// Bytes held by the buffers (capacity, not just the used part).
    pub fn allocated_bytes(&self) -> usize {
        self.layers
            .iter()
            .flat_map(|l| [&l.k, &l.v])
            .flatten()
            .map(|t| t.elem_count() * t.dtype().size_in_bytes())
            .sum()
    }

    /// Writes the keys and values `[1, kv_heads, t, head_dim]` of layer `layer` at positions
    /// `len()..len() + t` and returns views of positions `0..len() + t`. Call
    /// [`KvCache::advance`] once every layer has been appended.
    pub(crate) fn append(
        &mut self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let start = self.len;
        let total = start + k.dim(2)?;
        let slot = &mut self.layers[layer];
        let k = write(&mut slot.k, k, start, total)?;
        let v = write(&mut slot.v, v, start, total)?;
        Ok((k, v))
    }

    /// Marks `t` more positions as held after all layers were appended.
    pub(crate) fn advance(&mut self, t: usize) {
        self.len += t;
    }

    /// Contiguous copies of positions `0..len` per layer, for the prefix cache.
    pub(crate) fn snapshot(&self, len: usize) -> Result<Vec<(Tensor, Tensor)>> {
        let len = len.min(self.len);
        self.layers
            .iter()
            .map(|l| match (&l.k, &l.v) {
                (Some(k), Some(v)) => {
                    Ok((k.narrow(2, 0, len)?.copy()?, v.narrow(2, 0, len)?.copy()?))
                }
                _ => Err(
                    candle_core::Error::Msg("snapshot of an unfilled KV cache layer".into()).into(),
                ),
            })
            .collect()
    }

    /// A cache holding the first `len` positions of a snapshot.
    pub(crate) fn from_snapshot(snapshot: &[(Tensor, Tensor)], len: usize) -> Result<Self> {
        let mut cache = Self::new(snapshot.len());
        for (slot, (k, v)) in cache.layers.iter_mut().zip(snapshot) {
            write(&mut slot.k, &k.narrow(2, 0, len)?, 0, len)?;
            write(&mut slot.v, &v.narrow(2, 0, len)?, 0, len)?;
        }
        cache.len = len;
        Ok(cache)
    }
}

/// Copies `src` into `buf` at `start`, growing `buf` to hold `total` positions, and returns
/// the view of `0..total`.
fn write(buf: &mut Option<Tensor>, src: &Tensor, start: usize, total: usize) -> Result<Tensor> {
    let src = src.contiguous()?;
    let needs_new = match buf {
        Some(b) => {
            b.dim(2)? < total || !b.device().same_device(src.device()) || b.dtype() != src.dtype()
        }
        None => true,
    };
    if needs_new {
        let (b, heads, _, hd) = src.dims4()?;
        let fresh = Tensor::zeros(
            (b, heads, capacity_for(total), hd),
            src.dtype(),
            src.device(),
        )?;
        if let Some(old) = buf.as_ref() {
            if start > 0 && old.device().same_device(src.device()) && old.dtype() == src.dtype() {
                fresh.slice_set(&old.narrow(2, 0, start)?.contiguous()?, 2, 0)?;
            }
        }
        *buf = Some(fresh);
    }
    let b = buf
        .as_ref()
        .ok_or_else(|| candle_core::Error::Msg("KV buffer missing".into()))?;
    b.slice_set(&src, 2, start)?;
    Ok(b.narrow(D::Minus2, 0, total)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    #[test]
    fn grows_truncates_and_restores() {
        let dev = Device::Cpu;
        let mut cache = KvCache::new(1);
        let chunk = |base: f32, t: usize| {
            Tensor::arange(base, base + (2 * t * 3) as f32, &dev)
                .unwrap()
                .reshape((1, 2, t, 3))
                .unwrap()
        };
        let (k, _) = cache.append(0, &chunk(0.0, 200), &chunk(0.0, 200)).unwrap();
        cache.advance(200);
        assert_eq!(k.dims(), &[1, 2, 200, 3]);
        let (k, _) = cache
            .append(0, &chunk(1000.0, 100), &chunk(1000.0, 100))
            .unwrap();
        cache.advance(100);
        assert_eq!(k.dims(), &[1, 2, 300, 3]);
        assert_eq!(
            cache.allocated_bytes(),
            2 * 2 * 512 * 3 * DType::F32.size_in_bytes()
        );
        // The first 200 positions survived the regrow.
        let first: Vec<f32> = k
            .narrow(2, 0, 200)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let expected: Vec<f32> = chunk(0.0, 200).flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(first, expected);
        cache.truncate(150);
        assert_eq!(cache.len(), 150);
        // A fork keeps its values when the original overwrites the same positions.
        let fork = cache.fork().unwrap();
        let before: Vec<f32> = fork.snapshot(150).unwrap()[0]
            .0
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        cache.truncate(140);
        cache
            .append(0, &chunk(-100.0, 10), &chunk(-100.0, 10))
            .unwrap();
        cache.advance(10);
        let after: Vec<f32> = fork.snapshot(150).unwrap()[0]
            .0
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(before, after);
        let changed: Vec<f32> = cache.snapshot(150).unwrap()[0]
            .0
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_ne!(before, changed);
        let snap = cache.snapshot(150).unwrap();
        let restored = KvCache::from_snapshot(&snap, 100).unwrap();
        assert_eq!(restored.len(), 100);
        let a: Vec<f32> = snap[0]
            .0
            .narrow(2, 0, 100)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let b: Vec<f32> = restored.layers[0]
            .k
            .as_ref()
            .unwrap()
            .narrow(2, 0, 100)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(a, b);
    }
}
