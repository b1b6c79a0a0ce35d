//! What the failing allocation was for, read from the lines printed with the message: the code
//! that asked for the memory. One finding so far, **attention**: the score matrix of attention
//! grows with the square of the sequence length, so an allocation that fails inside attention code
//! points at the input's length rather than the batch (`docs/attribution.md`, rule
//! `attention_at_failure`).
//!
//! Where the code is named:
//!
//! * a Python traceback — the innermost frame outside torch's own package (`…/torch/…`: the
//!   functional and module plumbing every model call passes through), that is the model code that
//!   made the call; its function, file name and source line. The same frame an allocator
//!   snapshot's sites name.
//! * a TensorFlow graph node — `[[node path/to/op (defined at …)]]` or the older
//!   `[[Node: path/to/op = Op[…]]]` trailer names the op that could not get its tensor.
//!
//! The words: `attn`, `attention`, `scaled_dot_product`, `sdpa`, `flash_attn`. A mask built for
//! attention (`_prepare_decoder_attention_mask`) is seq² as well and counts. The model code
//! around attention (the projections, the MLP, the logits) does not: it grows with batch × length
//! alike.
//!
//! A second finding, **pinned host memory**: a bare `CUDA error: out of memory` raised while
//! pinning host memory (`cudaHostAlloc`: page-locked RAM the device can reach, none of the
//! device's own memory) is the host's memory in the device's words. Seen on a real GPU (a pinned
//! buffer larger than the machine's RAM raised exactly that) and in threads where a DataLoader's
//! pin-memory thread or an offloading cache pinning its buffers failed. The innermost frame
//! decides: its function is `pin_memory` (the tensor's or storage's method, the DataLoader's
//! `_utils/pin_memory.py`), or its source line pins (`.pin_memory(`, `pin_memory=True`).

use crate::frames::{file_name, frames};

/// Words (lower case) that name attention code.
const ATTENTION: &[&str] = &["attn", "attention", "scaled_dot_product", "sdpa"];

/// The clue when the failing allocation was made in attention code: `traceback: forward
/// (modeling_llama.py)` or `graph node: …/self_attention/…/Softmax`. `None` when the lines do not
/// name the code, or name other code.
pub fn attention_clue(lines: &[&str]) -> Option<String> {
    node_clue(lines).or_else(|| frame_clue(lines))
}

/// Whether `text` (a function, file or source line, a graph node) names attention code. Also what
/// the attribution asks of an allocator snapshot's sites.
pub fn names_attention(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    ATTENTION.iter().any(|w| t.contains(w))
}

/// The innermost frame outside torch's own package, when it is attention code.
fn frame_clue(lines: &[&str]) -> Option<String> {
    let f = frames(lines).into_iter().rev().find(|f| !f.file.replace('\\', "/").contains("/torch/"))?;
    let name = file_name(f.file);
    (names_attention(f.function) || names_attention(name) || f.source.is_some_and(names_attention))
        .then(|| format!("traceback: {} ({name})", f.function))
}

/// The clue when the failing call pinned host memory: `traceback: pin_memory (storage.py)`.
/// `None` when the innermost frame of the lines does something else, or there is none.
pub fn pinned_clue(lines: &[&str]) -> Option<String> {
    let f = frames(lines).pop()?;
    let name = file_name(f.file);
    let pins = |t: &str| {
        let t = t.replace(' ', "");
        t.contains(".pin_memory(") || t.contains("pin_memory=True")
    };
    (f.function == "pin_memory" || name == "pin_memory.py" || f.source.is_some_and(pins))
        .then(|| format!("traceback: {} ({name})", f.function))
}

/// The TensorFlow node named in the message's trailer, when it is attention code.
fn node_clue(lines: &[&str]) -> Option<String> {
    lines.iter().find_map(|l| {
        // `[[node …`, `[[Node: …`, TensorFlow 2's `[[{{node …}}]]`.
        let rest = l.get(l.find("[[")? + 2..)?.trim_start_matches('{');
        if !rest.get(..4)?.eq_ignore_ascii_case("node") {
            return None;
        }
        let rest = rest.get(4..)?.trim_start_matches([':', ' ']);
        let path = rest.split([' ', '=', ']', '(', '}']).next().unwrap_or("");
        (!path.is_empty() && names_attention(path)).then(|| format!("graph node: {path}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clue(text: &str) -> Option<String> {
        attention_clue(&text.lines().collect::<Vec<_>>())
    }

    #[test]
    fn attention_in_the_innermost_model_frame() {
        let sdpa = "  File \"/x/transformers/models/qwen2_vl/modeling_qwen2_vl.py\", line 390, in forward\n    attn_output = F.scaled_dot_product_attention(q, k, v, attention_mask)\ntorch.OutOfMemoryError: CUDA out of memory.";
        assert_eq!(clue(sdpa).as_deref(), Some("traceback: forward (modeling_qwen2_vl.py)"));
        // torch's own frames below the model code are plumbing: the model frame decides.
        let softmax = "  File \"/x/ldm/modules/attention.py\", line 56, in forward\n    sim = sim.softmax(dim=-1)\n  File \"/x/site-packages/torch/nn/functional.py\", line 1843, in softmax\n    ret = input.softmax(dim)\nRuntimeError: CUDA out of memory.";
        assert_eq!(clue(softmax).as_deref(), Some("traceback: forward (attention.py)"));
        // The MLP of the same model is not attention, though an outer frame is.
        let mlp = "  File \"/x/modeling_llama.py\", line 300, in forward\n    hidden_states = self.self_attn(hidden_states)\n  File \"/x/modeling_llama.py\", line 150, in forward\n    down_proj = self.down_proj(self.act_fn(self.gate_proj(x)))\n  File \"/x/torch/nn/modules/linear.py\", line 114, in forward\n    return F.linear(input, self.weight, self.bias)\nx";
        assert_eq!(clue(mlp), None);
        // A paste that cut the frame line's start keeps the model frame.
        let cut = "main/vlm/qwen2_vl/modeling_qwen2_5_vl.py\", line 273, in forward\n    attn_weights = torch.matmul(q, k.transpose(1, 2))\ntorch.OutOfMemoryError: CUDA out of memory.";
        assert_eq!(clue(cut).as_deref(), Some("traceback: forward (modeling_qwen2_5_vl.py)"));
        assert_eq!(clue("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 MiB"), None);
    }

    #[test]
    fn pinning_host_memory_in_the_innermost_frame() {
        let cases: [(&str, Option<&str>); 6] = [
            // An offloading cache pinning its buffers (a real thread's paste).
            (
                "  File \"/x/src/expert_cache.py\", line 68, in <listcomp>\n    torch.UntypedStorage(self.module_size).pin_memory(self.device) for _ in range(offload_size)]\n  File \"/x/site-packages/torch/storage.py\", line 226, in pin_memory\n    cast(Storage, self)).pin_memory(device)\nRuntimeError: CUDA error: out of memory",
                Some("traceback: pin_memory (storage.py)"),
            ),
            // A DataLoader's pin-memory thread.
            (
                "  File \"/usr/lib/python3.10/site-packages/torch/utils/data/_utils/pin_memory.py\", line 55, in pin_memory\n    return data.pin_memory(device)\nRuntimeError: CUDA error: out of memory",
                Some("traceback: pin_memory (pin_memory.py)"),
            ),
            // The script's own line, as a real GPU printed it (Python 3.12's carets below).
            (
                "  File \"/work/variant_pinned.py\", line 16, in <module>\n    x = torch.empty(ram + 16 * GIB, dtype=torch.uint8, pin_memory=True)\n        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\ntorch.AcceleratorError: CUDA error: out of memory",
                Some("traceback: <module> (variant_pinned.py)"),
            ),
            // Pinning in an outer frame does not make the innermost call a pinned one.
            (
                "  File \"/x/train.py\", line 9, in <module>\n    batch = batch.pin_memory()\n  File \"/x/train.py\", line 12, in step\n    out = model(batch.cuda())\nRuntimeError: CUDA error: out of memory",
                None,
            ),
            ("RuntimeError: CUDA error: out of memory", None),
            ("  File \"/x/loader.py\", line 3, in load\n    pin_memory=False)\nRuntimeError: x", None),
        ];
        for (text, want) in cases {
            assert_eq!(pinned_clue(&text.lines().collect::<Vec<_>>()).as_deref(), want, "{text}");
        }
    }

    #[test]
    fn attention_in_the_graph_node() {
        let old = "ResourceExhaustedError (see above for traceback): OOM when allocating tensor with shape[336840,2807]\n\t [[Node: transformer/body/decoder/layer_0/self_attention/multihead_attention/dot_product_attention/Softmax = Softmax[T=DT_FLOAT]()]]";
        assert_eq!(
            clue(old).as_deref(),
            Some(
                "graph node: transformer/body/decoder/layer_0/self_attention/multihead_attention/dot_product_attention/Softmax"
            )
        );
        let new = "  [[node encoder/block_018/layer_000/SelfAttention/einsum_7/Einsum (defined at /x/mtf.py:123) ]]";
        assert!(clue(new).is_some_and(|c| c.contains("SelfAttention")));
        assert_eq!(clue("  [[node conv2d_5/Conv2D (defined at train.py:9) ]]"), None);
        let tf2 = "\t [[{{node model/encoder/self_attention/einsum/Einsum}}]]";
        assert_eq!(clue(tf2).as_deref(), Some("graph node: model/encoder/self_attention/einsum/Einsum"));
    }
}
