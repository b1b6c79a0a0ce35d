//! When did it fail? The phase of a failure read from the lines printed with its message: the
//! traceback's frames (which code was running) and the message's own words (the start-up checks
//! of serving engines, model loaders).
//!
//! A Python traceback lists frames outermost first: `File "path", line N, in function` followed
//! by the source line. Each frame (its function, the file it is in, its source line) and each line
//! of the message is matched against a table of clues; every clue names a phase. The phases found
//! are ranked — the more specific wins over the generic:
//!
//! | rank | phase | clues (function names, source lines, message words) |
//! |---|---|---|
//! | 1 | `load` | `from_pretrained`, `load_state_dict`, `load_checkpoint`, `load_model`, `dispatch_model`, `Module.to` / `.cuda()` / `.half()` / `_apply` inside `torch/nn/modules/module.py`, `model.to(` / `model.cuda(` in user code; engine start-up: vLLM's `profile_run`, `determine_num_available_blocks`, `_initialize_kv_caches`, `capture_model`, the KV-cache and free-memory start-up checks, sampler warm-up; llama.cpp `llama_model_load` / `llama_kv_cache_init` / compute-buffer reservation, node-llama-cpp's context check; ExLlamaV2 `load_autosplit` / `Insufficient VRAM for model and cache`; SGLang `--mem-fraction-static`; TGI warm-up; `Loading checkpoint shards`; a program's own report that a model, its weights or a checkpoint failed to load (`Failed to load SDXL model`, `could not load model`; the line right after the failure is read with it) |
//! | 2 | `optimizer_init` | the optimizer creating its state (`_init_group` at `zeros_like` / `state[…]`, DeepSpeed `initialize_optimizer_states`, `_create_fp32_partitions`, `_configure_optimizer`) |
//! | 3 | `backward` | `backward`, `run_backward`, `_engine_run_backward`, `loss.backward(` |
//! | 4 | `optimizer_step` | `torch/optim` `step`, `_single_tensor_*` / `_multi_tensor_*` / `_fused_*`, `optimizer.step(`, `clip_grad_norm_` |
//! | 5 | `inference` | `generate`, `_sample`, `greedy_search`, `beam_search`, `execute_model`, `transcribe`, `model.generate(` |
//! | 6 | `eval` | `evaluate`, `evaluation_loop`, `prediction_step`, `validation_step`, `validate`, `test_step` |
//! | 7 | `forward` | `forward`, `_call_impl`, `_wrapped_call_impl`, `training_step` |
//!
//! A source line of PyTorch's own code without its frame line (a paste that kept only the last
//! source line before the message) is a clue too when it says what ran ([`signature_line`]:
//! `Module.to`'s `return t.to(device, dtype if …`, Adam's `exp_avg_sq.sqrt()`, …).
//!
//! The finding carries the clue (the frame's function or the message's words) as evidence.

use oomlens_schema::Phase;

use crate::frames::{Frame, file_name, frames};

/// A phase and what said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseFinding {
    /// The phase.
    pub phase: Phase,
    /// The clue: `frame from_pretrained (modeling_utils.py)`, `message: KV cache at start-up`, …
    pub clue: String,
}

fn rank(p: Phase) -> u8 {
    match p {
        Phase::Load => 1,
        Phase::OptimizerInit => 2,
        Phase::Backward => 3,
        Phase::OptimizerStep => 4,
        Phase::Inference => 5,
        Phase::Eval => 6,
        Phase::Forward => 7,
        Phase::DataLoading | Phase::Unknown => 9,
    }
}

/// Function names (exact) and their phase.
const FUNCTIONS: &[(&str, Phase)] = &[
    ("from_pretrained", Phase::Load),
    ("_load_pretrained_model", Phase::Load),
    ("load_state_dict", Phase::Load),
    ("_load_state_dict_into_meta_model", Phase::Load),
    ("_load_state_dict_into_model", Phase::Load),
    ("load_checkpoint", Phase::Load),
    ("load_checkpoint_in_model", Phase::Load),
    ("load_model", Phase::Load),
    ("load_weights", Phase::Load),
    ("load_pretrained", Phase::Load),
    ("set_module_tensor_to_device", Phase::Load),
    ("dispatch_model", Phase::Load),
    ("init_model", Phase::Load),
    ("build_model", Phase::Load),
    ("initialize_model", Phase::Load),
    ("profile_run", Phase::Load),
    ("determine_num_available_blocks", Phase::Load),
    ("determine_available_memory", Phase::Load),
    ("_initialize_kv_caches", Phase::Load),
    ("initialize_cache", Phase::Load),
    ("initialize_kv_cache", Phase::Load),
    ("_allocate_kv_cache", Phase::Load),
    ("allocate_kv_cache", Phase::Load),
    ("capture_model", Phase::Load),
    ("_dummy_run", Phase::Load),
    ("_dummy_sampler_run", Phase::Load),
    ("init_device", Phase::Load),
    ("warmup", Phase::Load),
    ("load_autosplit", Phase::Load),
    ("load_autosplit_gen", Phase::Load),
    ("initialize_optimizer_states", Phase::OptimizerInit),
    ("_create_fp32_partitions", Phase::OptimizerInit),
    ("_configure_optimizer", Phase::OptimizerInit),
    ("_configure_zero_optimizer", Phase::OptimizerInit),
    ("create_optimizer", Phase::OptimizerInit),
    ("backward", Phase::Backward),
    ("run_backward", Phase::Backward),
    ("_engine_run_backward", Phase::Backward),
    ("manual_backward", Phase::Backward),
    ("backward_step", Phase::Backward),
    ("optimizer_step", Phase::OptimizerStep),
    ("clip_grad_norm_", Phase::OptimizerStep),
    ("generate", Phase::Inference),
    ("_sample", Phase::Inference),
    ("sample", Phase::Inference),
    ("greedy_search", Phase::Inference),
    ("beam_search", Phase::Inference),
    ("_beam_search", Phase::Inference),
    ("execute_model", Phase::Inference),
    ("_execute_model", Phase::Inference),
    ("transcribe", Phase::Inference),
    ("generate_stream", Phase::Inference),
    ("evaluate", Phase::Eval),
    ("evaluation_loop", Phase::Eval),
    ("prediction_step", Phase::Eval),
    ("eval_step", Phase::Eval),
    ("validation_step", Phase::Eval),
    ("validate", Phase::Eval),
    ("val_step", Phase::Eval),
    ("test_step", Phase::Eval),
    ("forward", Phase::Forward),
    ("_call_impl", Phase::Forward),
    ("_wrapped_call_impl", Phase::Forward),
    ("training_step", Phase::Forward),
    ("train_step", Phase::Forward),
];

/// Source-line fragments (lower case) and their phase.
const SOURCE: &[(&str, Phase)] = &[
    (".from_pretrained(", Phase::Load),
    ("load_state_dict(", Phase::Load),
    ("model.to(", Phase::Load),
    ("model.cuda(", Phase::Load),
    ("model = model.to(", Phase::Load),
    (".backward(", Phase::Backward),
    ("optimizer.step(", Phase::OptimizerStep),
    ("optim.step(", Phase::OptimizerStep),
    ("scaler.step(", Phase::OptimizerStep),
    (".generate(", Phase::Inference),
];

/// Source lines of PyTorch's own code that place a failure when a paste kept only the last source
/// line before the message (`    return t.to(device, dtype if …)` / `torch.cuda.OutOfMemoryError:
/// …`, without its `File` line), as the code spells them, with their phase and what ran.
const SIGNATURE_LINES: &[(&str, Phase, &str)] = &[
    ("return t.to(device, dtype if t.is_floating_point()", Phase::Load, "Module.to"),
    ("param_applied = fn(param)", Phase::Load, "Module._apply"),
    ("torch.empty((out_features, in_features), **factory_kwargs)", Phase::Load, "a layer's weights created"),
    (
        "= torch.zeros_like(p, memory_format=torch.preserve_format)",
        Phase::OptimizerInit,
        "optimizer state created",
    ),
    ("exp_avg_sq.sqrt()", Phase::OptimizerStep, "Adam's step"),
    ("Variable._execution_engine.run_backward(", Phase::Backward, "autograd's backward"),
];

/// The phase a line of PyTorch's own code places a failure in ([`SIGNATURE_LINES`]), and the clue.
pub(crate) fn signature_line(line: &str) -> Option<(Phase, String)> {
    SIGNATURE_LINES
        .iter()
        .find(|(code, _, _)| line.contains(code))
        .map(|(_, p, what)| (*p, format!("traceback: {what} (its source line)")))
}

/// Message words (compact form, see `text::compact`) that place the failure, and their phase.
const MESSAGE: &[(&str, Phase, &str)] = &[
    (crate::frameworks::VLLM_KV_CHECK, Phase::Load, "KV-cache check at engine start-up"),
    ("noavailablememoryforthecacheblocks", Phase::Load, "KV-cache allocation at engine start-up"),
    ("onstartupislessthandesiredgpumemoryutilization", Phase::Load, "free-memory check at engine start-up"),
    ("toserveatleastonerequestwiththe", Phase::Load, "KV-cache check at engine start-up"),
    ("whenwarmingupsampler", Phase::Load, "sampler warm-up at engine start-up"),
    ("capturecudagraphfailed", Phase::Load, "CUDA graph capture at start-up"),
    ("pleasetrytoincrease--mem-fraction-static", Phase::Load, "memory pool sizing at start-up"),
    ("unabletowarmupmodel", Phase::Load, "warm-up at start-up"),
    ("warmup(generation(", Phase::Load, "warm-up at start-up"),
    ("llama_model_load:", Phase::Load, "model load"),
    ("errorloadingmodel", Phase::Load, "model load"),
    ("llama_kv_cache_init:", Phase::Load, "KV-cache allocation at context creation"),
    ("failedtoallocatecomputebuffers", Phase::Load, "compute-buffer reservation at context creation"),
    ("failedtoallocatecomputeppbuffers", Phase::Load, "compute-buffer reservation at context creation"),
    // ExLlama's `Insufficient VRAM [in split] for model and cache`.
    ("formodelandcache", Phase::Load, "model and cache placed at load"),
    ("toolargefortheavailablevram", Phase::Load, "context sized at load"),
    ("loadingcheckpointshards", Phase::Load, "loading checkpoint shards"),
    ("loadingmodelweights", Phase::Load, "loading model weights"),
    // A serving engine's runtime is inference (its start-up failures are placed above).
    ("vllm.engine", Phase::Inference, "a vLLM engine at run time"),
    ("vllm/worker", Phase::Inference, "a vLLM engine at run time"),
    ("(vllmworker", Phase::Inference, "a vLLM engine at run time"),
    ("(enginecore", Phase::Inference, "a vLLM engine at run time"),
    ("text_generation_server", Phase::Inference, "a TGI server at run time"),
    ("sglang", Phase::Inference, "an SGLang server at run time"),
    ("ggml_cuda", Phase::Inference, "llama.cpp at run time"),
    ("ggml-cuda", Phase::Inference, "llama.cpp at run time"),
    ("mistralrs", Phase::Inference, "an inference engine at run time"),
    ("scheduler:executionstepfailed", Phase::Inference, "an inference engine at run time"),
];

fn frame_phase(f: &Frame<'_>) -> Option<(Phase, String)> {
    let file = f.file.replace('\\', "/");
    let src = f.source.map(str::to_ascii_lowercase).unwrap_or_default();
    let clue = |what: &str| format!("traceback: {what} ({})", file_name(f.file));
    // Module moves (`model.to(…)`, `.cuda()`, `.half()`) run `_apply` / `convert` inside torch's
    // module.py: the model is being placed on the GPU.
    if file.ends_with("torch/nn/modules/module.py")
        && matches!(f.function, "_apply" | "convert" | "to" | "cuda" | "half" | "bfloat16" | "float")
    {
        return Some((Phase::Load, clue(&format!("Module.{}", f.function))));
    }
    // bitsandbytes quantises a weight when it is moved to the GPU: the model is being loaded.
    if file.contains("bitsandbytes/") && matches!(f.function, "_quantize" | "cuda" | "to") {
        return Some((Phase::Load, clue(&format!("bitsandbytes {}", f.function))));
    }
    if f.function == "_init_group" || file.contains("/optim/") {
        if src.contains("zeros_like") || src.contains("state[") {
            return Some((Phase::OptimizerInit, clue("optimizer state created")));
        }
        if matches!(f.function, "step" | "_init_group")
            || f.function.starts_with("_single_tensor_")
            || f.function.starts_with("_multi_tensor_")
            || f.function.starts_with("_fused_")
        {
            return Some((Phase::OptimizerStep, clue(&format!("optimizer {}", f.function))));
        }
    }
    if let Some((_, p)) = FUNCTIONS.iter().find(|(name, _)| *name == f.function) {
        return Some((*p, clue(f.function)));
    }
    SOURCE.iter().find(|(frag, _)| src.contains(frag)).map(|(frag, p)| (*p, clue(frag.trim_end_matches('('))))
}

/// The phase an allocation site belongs to, from its file and function (the innermost user frame
/// of an allocator snapshot block): `load` / `optimizer_init` / `optimizer_step` frames hold
/// weights and optimizer state, `forward` / `backward` / `eval` / `inference` frames hold
/// activations. `None` when the frame says nothing.
pub fn phase_of_site(file: &str, function: &str) -> Option<Phase> {
    let function = function.split('(').next().unwrap_or(function).trim();
    let function = function.rsplit('.').next().unwrap_or(function);
    frame_phase(&Frame { file, function, source: None }).map(|(p, _)| p)
}

/// The phase of a failure whose lines (traceback, message, trailer) are `lines`; `compact` is the
/// compact form of its message text. `None` when nothing places it.
pub fn phase_of(lines: &[&str], compact: &str) -> Option<PhaseFinding> {
    let mut best: Option<(Phase, String)> = None;
    let mut consider = |p: Phase, clue: String| {
        if best.as_ref().is_none_or(|(b, _)| rank(p) < rank(*b)) {
            best = Some((p, clue));
        }
    };
    for f in frames(lines) {
        if let Some((p, clue)) = frame_phase(&f) {
            consider(p, clue);
        }
    }
    // A source line of PyTorch's own code, also without its frame line.
    for l in lines {
        if let Some((p, clue)) = signature_line(l) {
            consider(p, clue);
        }
    }
    for (words, p, what) in MESSAGE {
        if compact.contains(words) {
            consider(*p, format!("message: {what}"));
        }
    }
    if model_load_failed(compact) {
        consider(Phase::Load, "message: the program reports a model that failed to load".to_owned());
    }
    best.map(|(phase, clue)| PhaseFinding { phase, clue })
}

/// A program's own report that loading a model failed: `Exception: Failed to load SDXL model`,
/// `Stable diffusion model failed to load`, `could not load model`, `Unable to load checkpoint`.
/// The failure happened while the model was being placed on the device. What failed to load must
/// be a model, its weights or a checkpoint, named within a few words of the verb: `Error loading
/// "…\cudnn_adv_train64_8.dll"` (a library) and `Failed to load in-memory CUBIN` (a kernel) are
/// not. `compact` is the compact form (`text::compact`).
pub(crate) fn model_load_failed(compact: &str) -> bool {
    const VERBS: &[&str] =
        &["failedtoload", "unabletoload", "couldnotload", "cannotload", "errorwhileloading", "errorloading"];
    const OBJECTS: &[&str] = &["model", "checkpoint", "weights"];
    /// Compact characters after the verb that may hold the object (`thesdxlmodel`, `meta-llama-3-8b/original` is too far).
    const WINDOW: usize = 16;
    if compact.contains("modelfailedtoload") {
        return true;
    }
    VERBS.iter().any(|verb| {
        compact.match_indices(verb).any(|(at, _)| {
            let rest = &compact[at + verb.len()..];
            let end = rest.char_indices().nth(WINDOW).map_or(rest.len(), |(i, _)| i);
            OBJECTS.iter().any(|o| rest[..end].contains(o))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::frame_of;
    use crate::text::compact;

    fn phase(text: &str) -> Option<Phase> {
        let lines: Vec<&str> = text.lines().collect();
        phase_of(&lines, &compact(text)).map(|f| f.phase)
    }

    #[test]
    fn a_source_line_of_torch_places_the_failure_without_its_frame() {
        for (text, want) in [
            (
                "    return t.to(device, dtype if t.is_floating_point() or t.is_complex() else None, non_blocking)\nx",
                Phase::Load,
            ),
            ("    param_applied = fn(param)\nx", Phase::Load),
            ("torch.empty((out_features, in_features), **factory_kwargs)\nx", Phase::Load),
            (
                "    state[\"exp_avg\"] = torch.zeros_like(p, memory_format=torch.preserve_format)\nx",
                Phase::OptimizerInit,
            ),
            ("    denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)\nx", Phase::OptimizerStep),
            ("    Variable._execution_engine.run_backward(  # Calls into the C++ engine\nx", Phase::Backward),
        ] {
            assert_eq!(phase(text), Some(want), "{text}");
        }
        // The user's own code says nothing without its frame.
        assert_eq!(phase("    out = model(x.to(device))\nx"), None);
    }

    #[test]
    fn a_model_that_failed_to_load_places_the_failure_at_load() {
        for text in [
            "torch.cuda.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\n\nException: Failed to load SDXL model",
            "RuntimeError: CUDA out of memory.\nStable diffusion model failed to load",
            "error=\"could not load model (no success): Unexpected err=OutOfMemoryError(\"CUDA out of memory.\")\"",
            "ValueError: Unable to load checkpoint: CUDA out of memory.",
        ] {
            assert_eq!(phase(text), Some(Phase::Load), "{text}");
        }
        // What failed to load is not a model: a library, a kernel image, a page of data.
        for text in [
            "OSError: [WinError 1455] The paging file is too small. Error loading \"C:\\torch\\lib\\cudnn_adv_train64_8.dll\" or one of its dependencies.",
            "XlaRuntimeError: INTERNAL: Failed to load in-memory CUBIN: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
            "failed to load the image batch for the model: CUDA out of memory",
        ] {
            assert_eq!(phase(text), None, "{text}");
        }
    }

    #[test]
    fn frames_of_each_phase() {
        let load = "Traceback (most recent call last):\n  File \"app.py\", line 8, in <module>\n    model = AutoModelForCausalLM.from_pretrained(name, device_map=\"cuda\")\n  File \"/x/transformers/modeling_utils.py\", line 3850, in from_pretrained\n    ) = cls._load_pretrained_model(\n  File \"/x/torch/nn/modules/module.py\", line 1143, in convert\n    return t.to(device)\ntorch.cuda.OutOfMemoryError: CUDA out of memory.";
        assert_eq!(phase(load), Some(Phase::Load));
        let backward = "Traceback (most recent call last):\n  File \"train.py\", line 99, in update_params\n    loss.backward()\n  File \"/usr/lib/torch/_tensor.py\", line 491, in backward\n    torch.autograd.backward(\n  File \"/usr/lib/torch/nn/modules/module.py\", line 1501, in _call_impl\n    return forward_call(*args)\ntorch.cuda.OutOfMemoryError: x";
        assert_eq!(phase(backward), Some(Phase::Backward));
        let opt_init = "  File \"/x/torch/optim/adam.py\", line 174, in _init_group\n    state[\"exp_avg\"] = torch.zeros_like(\nOutOfMemoryError: x";
        assert_eq!(phase(opt_init), Some(Phase::OptimizerInit));
        let step = "  File \"/x/torch/optim/adamw.py\", line 184, in step\n    adamw(\n  File \"/x/torch/optim/adamw.py\", line 335, in _multi_tensor_adamw\n    exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)\nx";
        assert_eq!(phase(step), Some(Phase::OptimizerStep));
        let generate = "  File \"chat.py\", line 3, in reply\n    out = model.generate(**inputs)\n  File \"/x/transformers/generation/utils.py\", line 1, in generate\n    return self._sample(\n  File \"/x/models/llama.py\", line 9, in forward\n    attn = q @ k\nx";
        assert_eq!(phase(generate), Some(Phase::Inference));
        let fwd = "  File \"/x/torch/nn/modules/module.py\", line 1501, in _call_impl\n    return forward_call(*args, **kwargs)\n  File \"net.py\", line 5, in forward\n    y = self.conv(x)\nx";
        assert_eq!(phase(fwd), Some(Phase::Forward));
        let jupyter = "/usr/local/lib/python3.11/dist-packages/torch/optim/adam.py in _init_group(self, group)\n    173  # Exponential moving average of gradient values\n--> 174  state[\"exp_avg\"] = torch.zeros_like(\nOutOfMemoryError: x";
        assert_eq!(phase(jupyter), Some(Phase::OptimizerInit), "a Jupyter frame's source is its active line");
        let ipython = "File ~/env/site-packages/bitsandbytes/nn/modules.py:296, in Params4bit._quantize(self, device)\n    294 def _quantize(self, device):\nRuntimeError: CUDA driver error: out of memory";
        assert_eq!(phase(ipython), Some(Phase::Load));
        let colab = "[/usr/local/lib/python3.10/dist-packages/exllamav2/model.py](https://localhost:8080/#) in load_autosplit_gen(self, cache)\n    443  if current_device >= num_devices:\n--> 444  raise RuntimeError(\"Insufficient VRAM for model and cache\")\nRuntimeError: Insufficient VRAM for model and cache";
        assert_eq!(
            frame_of(colab.lines().next().unwrap_or("")),
            Some(("/usr/local/lib/python3.10/dist-packages/exllamav2/model.py", "load_autosplit_gen"))
        );
        assert_eq!(phase(colab), Some(Phase::Load));
        let cut = "main/x/transformers/modeling_utils.py\", line 3850, in from_pretrained\n    ) = cls._load_pretrained_model(\nx";
        assert_eq!(phase(cut), Some(Phase::Load), "a frame line whose start the paste cut off");
        assert_eq!(frame_of("see train.py\", line 3, in the log"), None, "prose is not a frame");
        assert_eq!(phase("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 MiB"), None);
        // A batch moved to the GPU in the training loop is not a model load.
        assert_eq!(phase("  File \"train.py\", line 5, in main\n    x = x.to(device)\nx"), None);
    }

    #[test]
    fn start_up_messages() {
        assert_eq!(
            phase(
                "ValueError: The model's max seq len (4096) is larger than the maximum number of tokens that can be stored in KV cache (3664)."
            ),
            Some(Phase::Load)
        );
        assert_eq!(
            phase("llama_model_load: error loading model: unable to allocate CUDA0 buffer"),
            Some(Phase::Load)
        );
        let f = phase_of(&[], &compact("ValueError: No available memory for the cache blocks.")).unwrap();
        assert_eq!(f.clue, "message: KV-cache allocation at engine start-up");
    }
}
