//! The placement table: the device of the embedding, of each layer and of
//! the output head.

use std::fmt;
use std::str::FromStr;

/// A kind of device, as `--fixed-on` names it; in a table from
/// [`Placement::gpu_split`] also the device index (`Side::Cpu as usize`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Cpu = 0,
    Gpu = 1,
}

impl FromStr for Side {
    type Err = String;

    fn from_str(s: &str) -> Result<Side, String> {
        match s {
            "cpu" => Ok(Side::Cpu),
            "gpu" => Ok(Side::Gpu),
            _ => Err(format!("{s:?}: expected cpu or gpu")),
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Cpu => "cpu",
            Side::Gpu => "gpu",
        })
    }
}

/// A part of the forward pass that runs on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Token embedding (and its scaling).
    Embed,
    /// Transformer block `l`.
    Layer(usize),
    /// Final norm and output projection.
    Head,
}

/// The device index of each stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub embed: usize,
    pub layers: Vec<usize>,
    pub head: usize,
}

impl Placement {
    /// Everything on device 0.
    pub fn single(n_layer: usize) -> Placement {
        Placement {
            embed: 0,
            layers: vec![0; n_layer],
            head: 0,
        }
    }

    /// Layers `0..n_first` (and the embedding) on `first`, the rest (and
    /// the head) on `rest`. With `n_first == n_layer` the head follows the
    /// last layer onto `first`.
    pub fn split(n_layer: usize, n_first: usize, first: usize, rest: usize) -> Placement {
        let n_first = n_first.min(n_layer);
        let layers: Vec<usize> = (0..n_layer)
            .map(|l| if l < n_first { first } else { rest })
            .collect();
        Placement {
            embed: first,
            head: layers.last().copied().unwrap_or(first),
            layers,
        }
    }

    /// The table `-g n_gpu --fixed-on fixed` asks for, numbered by
    /// [`Side`] (CPU 0, GPU 1): layers `0..n_gpu` on the GPU, the rest on
    /// the CPU; the embedding and the head both on `fixed` when given,
    /// otherwise the embedding on the GPU when any layer is there and the
    /// head with the last layer.
    pub fn gpu_split(n_layer: usize, n_gpu: usize, fixed: Option<Side>) -> Placement {
        let mut p = Placement::split(n_layer, n_gpu, Side::Gpu as usize, Side::Cpu as usize);
        match fixed {
            Some(side) => (p.embed, p.head) = (side as usize, side as usize),
            None if n_gpu == 0 => p.embed = Side::Cpu as usize,
            None => {}
        }
        p
    }

    /// The same table with the devices it uses numbered `0..` in
    /// ascending order, and the old index of each new one.
    pub fn compact(&self) -> (Placement, Vec<usize>) {
        let used = self.devices_used();
        let new = |d: usize| used.iter().position(|&u| u == d).expect("used");
        let p = Placement {
            embed: new(self.embed),
            layers: self.layers.iter().map(|&d| new(d)).collect(),
            head: new(self.head),
        };
        (p, used)
    }

    pub fn n_layer(&self) -> usize {
        self.layers.len()
    }

    /// The stages device `dev` runs, in words ("embedding, layers 0-14").
    pub fn describe(&self, dev: usize) -> String {
        let mut parts = Vec::new();
        if self.embed == dev {
            parts.push("embedding".to_string());
        }
        let mut l = 0;
        while l < self.layers.len() {
            if self.layers[l] != dev {
                l += 1;
                continue;
            }
            let start = l;
            while l < self.layers.len() && self.layers[l] == dev {
                l += 1;
            }
            parts.push(match l - start {
                1 => format!("layer {start}"),
                _ => format!("layers {start}-{}", l - 1),
            });
        }
        if self.head == dev {
            parts.push("output head".to_string());
        }
        match parts.is_empty() {
            true => "nothing".into(),
            false => parts.join(", "),
        }
    }

    /// The device that runs `stage`.
    ///
    /// # Panics
    /// For a layer index beyond the table.
    pub fn device(&self, stage: Stage) -> usize {
        match stage {
            Stage::Embed => self.embed,
            Stage::Layer(l) => self.layers[l],
            Stage::Head => self.head,
        }
    }

    /// Every device index the table uses, ascending.
    pub fn devices_used(&self) -> Vec<usize> {
        let mut d: Vec<usize> = self
            .layers
            .iter()
            .copied()
            .chain([self.embed, self.head])
            .collect();
        d.sort_unstable();
        d.dedup();
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_places_layers_embedding_and_head() {
        let p = Placement::split(4, 1, 1, 0);
        assert_eq!(p.layers, [1, 0, 0, 0]);
        assert_eq!((p.device(Stage::Embed), p.device(Stage::Head)), (1, 0));
        assert_eq!(p.devices_used(), [0, 1]);
        // Every layer on the first device: the head follows it.
        let p = Placement::split(4, 4, 1, 0);
        assert_eq!((p.device(Stage::Head), p.devices_used()), (1, vec![1]));
        // None on the first: only the embedding runs there.
        let p = Placement::split(4, 0, 1, 0);
        assert_eq!(p.layers, [0; 4]);
        assert_eq!(p.device(Stage::Embed), 1);
        assert_eq!(Placement::single(3).devices_used(), [0]);
    }

    #[test]
    fn gpu_split_follows_g_and_fixed_on() {
        let (c, g) = (Side::Cpu as usize, Side::Gpu as usize);
        // -g 0: all on the CPU, unless --fixed-on gpu moves embedding and head.
        let p = Placement::gpu_split(3, 0, None);
        assert_eq!((p.embed, p.layers.clone(), p.head), (c, vec![c; 3], c));
        let p = Placement::gpu_split(3, 0, Some(Side::Gpu));
        assert_eq!((p.embed, p.layers.clone(), p.head), (g, vec![c; 3], g));
        // -g 1: embedding follows the GPU, head the last layer.
        let p = Placement::gpu_split(3, 1, None);
        assert_eq!((p.embed, p.layers.clone(), p.head), (g, vec![g, c, c], c));
        let p = Placement::gpu_split(3, 1, Some(Side::Cpu));
        assert_eq!((p.embed, p.head), (c, c));
        let p = Placement::gpu_split(3, 2, Some(Side::Gpu));
        assert_eq!((p.embed, p.layers.clone(), p.head), (g, vec![g, g, c], g));
        // Every layer: the head too, unless fixed on the CPU.
        let p = Placement::gpu_split(3, 3, None);
        assert_eq!((p.embed, p.head, p.devices_used()), (g, g, vec![g]));
        let p = Placement::gpu_split(3, 3, Some(Side::Cpu));
        assert_eq!((p.embed, p.layers.clone(), p.head), (c, vec![g; 3], c));
        assert_eq!("gpu".parse::<Side>(), Ok(Side::Gpu));
        assert!("vulkan".parse::<Side>().is_err());
    }

    #[test]
    fn compact_numbers_the_devices_used() {
        // Only the GPU in use: it becomes device 0.
        let (p, old) = Placement::gpu_split(2, 2, None).compact();
        assert_eq!((p, old), (Placement::single(2), vec![1]));
        let (p, old) = Placement::gpu_split(2, 1, None).compact();
        assert_eq!(
            (p.embed, p.layers, p.head, old),
            (1, vec![1, 0], 0, vec![0, 1])
        );
        assert_eq!(
            Placement::gpu_split(4, 2, Some(Side::Cpu)).describe(1),
            "layers 0-1"
        );
        assert_eq!(
            Placement::gpu_split(4, 1, None).describe(1),
            "embedding, layer 0"
        );
        assert_eq!(
            Placement::gpu_split(4, 1, None).describe(0),
            "layers 1-3, output head"
        );
    }
}
