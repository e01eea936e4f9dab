//! Device placement: which device holds the embeddings, each decoder layer, and the head.
//!
//! A spec is `cpu`, `cuda:N`, or a comma list such as `cuda:0,1,2,3` (bare numbers after the
//! first inherit its kind). Layers are split between the listed devices in proportion to
//! `--layer-split` weights, the way llama.cpp's `-ts` does. A list of several `cpu` entries is
//! allowed on purpose: the split logic then runs (and is tested) without a GPU.

use candle_core::{DType, Device};

use super::error::{EngineError, Result};

/// One entry of a device spec, before it is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    Cpu,
    Cuda(usize),
}

/// The devices a model runs on and the proportion of decoder layers each one gets.
#[derive(Debug, Clone)]
pub struct DeviceMap {
    kinds: Vec<DeviceKind>,
    devices: Vec<Device>,
    weights: Vec<f64>,
}

impl DeviceMap {
    /// Everything on the CPU.
    pub fn cpu() -> Self {
        Self {
            kinds: vec![DeviceKind::Cpu],
            devices: vec![Device::Cpu],
            weights: vec![1.0],
        }
    }

    /// Parses and opens `spec` (e.g. `cuda:0,1`), with optional split proportions (e.g. `3,1`,
    /// or `auto`: in proportion to each device's free memory, shared evenly between entries
    /// naming the same device). Without proportions the layers are split evenly.
    pub fn parse(spec: &str, layer_split: Option<&str>) -> Result<Self> {
        let kinds = parse_kinds(spec)?;
        let devices = kinds
            .iter()
            .map(|k| open(*k, spec))
            .collect::<Result<Vec<_>>>()?;
        let weights = match layer_split {
            None => vec![1.0; kinds.len()],
            Some("auto") => {
                let mut weights = Vec::with_capacity(kinds.len());
                for (kind, device) in kinds.iter().zip(&devices) {
                    let free = free_memory(device).ok_or_else(|| EngineError::BadDeviceSpec {
                        spec: spec.to_string(),
                        detail: format!("--layer-split auto: the free memory of {kind:?} is unknown; give proportions instead"),
                    })?;
                    let sharing = kinds.iter().filter(|k| *k == kind).count();
                    weights.push(free as f64 / sharing as f64);
                }
                weights
            }
            Some(split) => parse_split(split, kinds.len())?,
        };
        Ok(Self {
            kinds,
            devices,
            weights,
        })
    }

    /// The opened devices, one per entry of the spec.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// The device that holds the token embeddings (and receives the input ids).
    pub fn first(&self) -> &Device {
        &self.devices[0]
    }

    /// The device that holds the final norm and the LM head.
    pub fn last(&self) -> &Device {
        &self.devices[self.devices.len() - 1]
    }

    pub fn kinds(&self) -> &[DeviceKind] {
        &self.kinds
    }

    /// f32 on CPU (fast paths and exact parity), bf16 on CUDA (half the memory, tensor cores).
    pub fn default_dtype(&self) -> DType {
        if self.kinds.iter().all(|k| *k == DeviceKind::Cpu) {
            DType::F32
        } else {
            DType::BF16
        }
    }

    /// Index into the device list for each of `n_layers` layers. Layer `i` goes to the first
    /// device whose cumulative share exceeds `i / n_layers` (llama.cpp's rule), so `3,1` over 8
    /// layers gives 6 and 2, and every device with a non-zero share gets a contiguous block.
    pub fn layer_assignment(&self, n_layers: usize) -> Vec<usize> {
        let total: f64 = self.weights.iter().sum();
        let mut cumulative = Vec::with_capacity(self.weights.len());
        let mut acc = 0.0;
        for w in &self.weights {
            acc += w / total;
            cumulative.push(acc);
        }
        (0..n_layers)
            .map(|i| {
                let f = i as f64 / n_layers as f64;
                cumulative
                    .iter()
                    .position(|&c| c > f)
                    .unwrap_or(self.weights.len() - 1)
            })
            .collect()
    }

    /// The opened device for each of `n_layers` layers.
    pub fn layer_devices(&self, n_layers: usize) -> Vec<Device> {
        self.layer_assignment(n_layers)
            .into_iter()
            .map(|d| self.devices[d].clone())
            .collect()
    }
}

/// Parses a `--dtype` value: `f32`, `bf16` or `f16`.
pub fn parse_dtype(text: &str) -> Result<DType> {
    match text.to_ascii_lowercase().as_str() {
        "f32" | "float32" => Ok(DType::F32),
        "bf16" | "bfloat16" => Ok(DType::BF16),
        "f16" | "float16" => Ok(DType::F16),
        _ => Err(EngineError::BadDeviceSpec {
            spec: text.to_string(),
            detail: "dtype must be f32, bf16 or f16".into(),
        }),
    }
}

fn parse_kinds(spec: &str) -> Result<Vec<DeviceKind>> {
    let bad = |detail: &str| EngineError::BadDeviceSpec {
        spec: spec.to_string(),
        detail: detail.to_string(),
    };
    let mut kinds = Vec::new();
    let mut last_cuda = false;
    for part in spec.split(',').map(str::trim) {
        let kind = if part.eq_ignore_ascii_case("cpu") {
            DeviceKind::Cpu
        } else if let Some(n) = part.strip_prefix("cuda:") {
            DeviceKind::Cuda(
                n.parse()
                    .map_err(|_| bad("expected cuda:N with N a number"))?,
            )
        } else if part.eq_ignore_ascii_case("cuda") {
            DeviceKind::Cuda(0)
        } else if let (true, Ok(n)) = (last_cuda, part.parse::<usize>()) {
            DeviceKind::Cuda(n)
        } else {
            return Err(bad(
                "entries are `cpu`, `cuda`, `cuda:N`, or N after a cuda entry",
            ));
        };
        last_cuda = matches!(kind, DeviceKind::Cuda(_));
        kinds.push(kind);
    }
    if kinds.is_empty() {
        return Err(bad("no device given"));
    }
    Ok(kinds)
}

fn parse_split(split: &str, n_devices: usize) -> Result<Vec<f64>> {
    let bad = |detail: String| EngineError::BadDeviceSpec {
        spec: split.to_string(),
        detail,
    };
    let weights = split
        .split(',')
        .map(|s| s.trim().parse::<f64>())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("layer split must be comma-separated numbers: {e}")))?;
    if weights.len() != n_devices {
        return Err(bad(format!(
            "layer split has {} entries for {n_devices} devices",
            weights.len()
        )));
    }
    if weights.iter().any(|w| !w.is_finite() || *w < 0.0) || weights.iter().sum::<f64>() <= 0.0 {
        return Err(bad(
            "layer split entries must be non-negative with a positive sum".into(),
        ));
    }
    Ok(weights)
}

/// Bytes a model could still take on `device`: the driver's free memory on CUDA, the kernel's
/// `MemAvailable` on the CPU (what can be allocated without swapping). `None` where unknown.
pub fn free_memory(device: &Device) -> Option<u64> {
    match device {
        Device::Cpu => {
            let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
            meminfo.lines().find_map(|line| {
                let kib = line
                    .strip_prefix("MemAvailable:")?
                    .trim()
                    .strip_suffix("kB")?;
                kib.trim().parse::<u64>().ok().map(|k| k * 1024)
            })
        }
        #[cfg(feature = "cuda")]
        Device::Cuda(cuda) => cuda
            .cuda_stream()
            .context()
            .mem_get_info()
            .ok()
            .map(|(free, _total)| free as u64),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

fn open(kind: DeviceKind, spec: &str) -> Result<Device> {
    match kind {
        DeviceKind::Cpu => Ok(Device::Cpu),
        DeviceKind::Cuda(ordinal) => {
            if !cfg!(feature = "cuda") {
                return Err(EngineError::CudaNotCompiled {
                    requested: spec.to_string(),
                });
            }
            Ok(Device::new_cuda(ordinal)?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_follows_proportions() {
        let map = DeviceMap::parse("cpu,cpu", Some("3,1")).unwrap();
        assert_eq!(map.layer_assignment(8), vec![0, 0, 0, 0, 0, 0, 1, 1]);
        let even = DeviceMap::parse("cpu,cpu,cpu", None).unwrap();
        assert_eq!(even.layer_assignment(6), vec![0, 0, 1, 1, 2, 2]);
        let skip_middle = DeviceMap::parse("cpu,cpu,cpu", Some("1,0,1")).unwrap();
        assert_eq!(skip_middle.layer_assignment(4), vec![0, 0, 2, 2]);
    }

    #[test]
    fn auto_split_shares_a_device_evenly() {
        let map = DeviceMap::parse("cpu,cpu", Some("auto")).unwrap();
        assert_eq!(map.layer_assignment(4), vec![0, 0, 1, 1]);
        assert!(free_memory(&Device::Cpu).is_some_and(|b| b > 0));
    }

    #[test]
    fn parses_dtypes() {
        assert_eq!(parse_dtype("BF16").unwrap(), DType::BF16);
        assert!(parse_dtype("int8").is_err());
    }

    #[test]
    fn parses_cuda_lists() {
        assert_eq!(
            parse_kinds("cuda:0,1,3").unwrap(),
            vec![
                DeviceKind::Cuda(0),
                DeviceKind::Cuda(1),
                DeviceKind::Cuda(3)
            ]
        );
        assert!(parse_kinds("tpu:0").is_err());
        assert!(parse_kinds("cpu,1").is_err());
        assert!(DeviceMap::parse("cpu,cpu", Some("1")).is_err());
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_in_cpu_build_is_a_clear_error() {
        match DeviceMap::parse("cuda:0", None) {
            Err(EngineError::CudaNotCompiled { requested }) => assert_eq!(requested, "cuda:0"),
            other => panic!("expected CudaNotCompiled, got {other:?}"),
        }
    }
}

/// A memory size as people write it: `4GiB`, `512MiB`, `1.5G`, `64k` or plain bytes. Binary
/// multiples either way (`G` = `GiB`), since memory is sized in them.
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size (e.g. 4GiB, 512MiB, 1048576)"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "`{text}`: unknown unit `{unit}` (B, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    Ok((value * (1u64 << shift) as f64) as usize)
}

#[cfg(test)]
mod byte_tests {
    use super::parse_bytes;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_bytes("4GiB"), Ok(4 << 30));
        assert_eq!(parse_bytes("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5G"), Ok(3 << 29));
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert!(parse_bytes("lots").unwrap_err().contains("not a size"));
        assert!(parse_bytes("4 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
    }
}
