//! Unit tests of the streaming parser (the fixture corpus is in `agent/tests/parse_fixtures.rs`).

use proptest::prelude::*;

use super::units::{GIB, MIB};
use super::*;

const V2: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of \
79.11 GiB of which 1.12 GiB is free. Process 23456 has 20.00 GiB memory in use. Including non-PyTorch memory, this \
process has 58.00 GiB memory in use. Of the allocated memory 55.00 GiB is allocated by PyTorch, and 1024.00 MiB is \
reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting \
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  \
(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";

fn wrap(text: &str, width: usize) -> Vec<String> {
    text.as_bytes().chunks(width).map(|c| String::from_utf8_lossy(c).into_owned()).collect()
}

fn check_v2(e: &ParsedOom) {
    assert_eq!(e.framework, "pytorch");
    assert_eq!(e.fields.gpu, Some(0));
    assert_eq!(e.fields.requested, Some(3 * GIB / 2));
    assert_eq!(e.fields.allocated, Some(55 * GIB));
    assert_eq!(e.fields.reserved, Some(56 * GIB));
    assert_eq!(e.fields.process_used, Some(58 * GIB));
    assert_eq!(e.fields.other_processes, vec![OtherProcess { pid: 23456, used_bytes: 20 * GIB }]);
    assert_eq!(e.reserved_unallocated(), Some(1024 * MIB));
}

/// What a test compares of each event: its kind, its framework and its first line.
fn kinds(events: &[ParsedOom]) -> Vec<(&'static str, &'static str, u64)> {
    events.iter().map(|e| (e.kind.as_str(), e.framework, e.line)).collect()
}

/// [`kinds`] of the events parsed from `lines`.
fn found(lines: &[&str]) -> Vec<(&'static str, &'static str, u64)> {
    kinds(&parse_all(lines.iter().copied()))
}

#[test]
fn one_line_message() {
    let events = parse_all(["step 1 loss 2.0", V2, "step 2"]);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].line, 2);
    check_v2(&events[0]);
}

/// The lines of a non-PyTorch failure are joined without separators for hard-wrapped numbers;
/// each line's own numbers win, so a number never runs into the next line's (seen in real logs:
/// `current device: 0` before a `2023/11/22 …` line read as GPU 2023, a buffer size before a
/// `1.06.520.086 E …` timestamp read ten times too large).
#[test]
fn numbers_do_not_run_into_the_next_line() {
    let events = parse_all([
        "CUDA error 2 at ggml-cuda.cu:7358: out of memory",
        "current device: 0",
        "2023/11/22 11:37:21 llama.go:430: 2 at ggml-cuda.cu:7358: out of memory",
    ]);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].fields.gpu, Some(0));
    let events = parse_all([
        "1.06.520.084 E ggml_gallocr_reserve_n_impl: failed to allocate CUDA1 buffer of size 54262464512",
        "1.06.520.086 E graph_reserve: failed to allocate compute buffers",
    ]);
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].fields.gpu, events[0].fields.requested), (Some(1), Some(54_262_464_512)));
}

#[test]
fn hard_wrapped_mid_word_and_interleaved() {
    let mut lines = vec!["epoch 3".to_owned()];
    let wrapped = wrap(V2, 80);
    for (i, l) in wrapped.iter().enumerate() {
        lines.push(l.clone());
        if i == 2 {
            lines.push("[rank1]: step 40 loss 2.3141 lr 3.0e-04".to_owned());
            lines.push("step 41 loss 2.3140 lr 3.0e-04".to_owned());
        }
    }
    lines.push("wandb: Waiting for W&B process to finish...".to_owned());
    let events = parse_all(lines.iter().map(String::as_str));
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0].line, 2);
    check_v2(&events[0]);
    assert_eq!(events[0].lines.len(), wrapped.len());
}

/// A line a terminal cut into three or four pieces of its width (ONNX Runtime's arena error, as
/// `onnxruntime#20038` printed it): no two neighbouring pieces say the failure (the arena's name and
/// `Failed to allocate memory` fall in different pieces), all of them together do; the event starts
/// at the first piece.
#[test]
fn hard_wrapped_in_more_than_two_pieces() {
    let message = r"onnx runtime error 6: Non-zero status code returned while running Mul node. Name:\'Mul_8702\' Status Message: /workspace/onnxruntime/onnxruntime/core/framework/bfc_arena.cc:368 void* onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, onnxruntime::WaitNotificationFn) Failed to allocate memory for requested buffer of size 2830172160\";
    for width in [100, 120] {
        let pieces = wrap(message, width);
        assert!(pieces.len() >= 3);
        let events = parse_all(pieces.iter().map(String::as_str));
        assert_eq!(kinds(&events), [("cuda_oom", "onnxruntime", 1)], "{width}");
        // (At 120 columns the cut falls inside the size itself: it is read whole.)
        assert_eq!(events[0].fields.requested, Some(2_830_172_160), "{width}");
    }
}

/// A number or a phrase a terminal's hard wrap cut is read whole (real pastes: jax's
/// `RESOURCE_EXHAUSTED` cut inside its size, spaCy's CuPy error cut before its allocated bytes),
/// also when every piece carries the paste's decoration (quote markers, an indent) or a log's
/// stamp.
#[test]
fn numbers_a_wrap_cut_are_read_whole() {
    let jax = [
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 740",
        "6166528 bytes.",
    ];
    let cupy = [
        "cupy.cuda.memory.OutOfMemoryError: OutOfMemoryError('Out of memory allocating 3,327,510,528 bytes (allocated so",
        "far: 13,736,083,968 bytes).')",
    ];
    for decoration in ["", "> ", "    ", "2024-05-01T12:00:00.123456789Z "] {
        let lines = |pieces: &[&str]| pieces.iter().map(|l| format!("{decoration}{l}")).collect::<Vec<_>>();
        let events = parse_all(lines(&jax).iter().map(String::as_str));
        assert_eq!(kinds(&events), [("cuda_oom", "jax", 1)], "{decoration:?}");
        assert_eq!(events[0].fields.requested, Some(7_406_166_528), "{decoration:?}");
        let events = parse_all(lines(&cupy).iter().map(String::as_str));
        assert_eq!(events[0].fields.requested, Some(3_327_510_528), "{decoration:?}");
        assert_eq!(events[0].fields.allocated, Some(13_736_083_968), "{decoration:?}");
    }
    // A cut right before a space: the next piece begins with it, and is still a piece (the
    // device it names is the failure's).
    let tf = [
        "2020-11-04 01:20:46.313269: W tensorflow/core/framework/op_kernel.cc:1651] OP_REQUIRES failed at con",
        "cat_op.cc:153 : Resource exhausted: OOM when allocating tensor with shape[4194304,90] and type float",
        " on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
    ];
    for decoration in ["", "> "] {
        let lines: Vec<String> = tf.iter().map(|l| format!("{decoration}{l}")).collect();
        let events = parse_all(lines.iter().map(String::as_str));
        assert_eq!(events.len(), 1, "{decoration:?}");
        assert_eq!(events[0].fields.gpu, Some(0), "{decoration:?}");
    }
    // A line cut in four: the second piece says nothing alone (it goes on inside a word), the
    // third names the device, which only the message's head makes TensorFlow's (the fourth, `]`,
    // too narrow to tell, is left).
    let node = parse_all([
        "ResourceExhaustedError: OOM when allocating tensor with shape[256,256,28,28]",
        "\t [[Node: mrcnn_mask_deconv/conv2d_transpose = Conv2DBackpropInput[T=DT_FLOAT, data_format=\"NHWC\", p",
        "adding=\"VALID\", strides=[1, 2, 2, 1], use_cudnn_on_gpu=true, _device=\"/job:localhost/replica:0/task:",
        "0/device:GPU:0\"](mrcnn_mask_deconv/stack, mrcnn_mask_deconv/kernel/read, mrcnn_mask_deconv/Reshape)]",
        "]",
    ]);
    assert_eq!(node.len(), 1);
    assert_eq!((node[0].fields.gpu, node[0].lines.len()), (Some(0), 4));
    // Pieces that end with a bracket or a separator and begin with a symbol.
    let bilm = parse_all([
        "ResourceExhaustedError (see above for traceback): OOM when allocating tensor of shape [] and type fl",
        "oat",
        "         [[node lm/RNN_0/rnn/multi_rnn_cell/cell_0/lstm_cell/kernel/Initializer/random_uniform/min (",
        "defined at /home/miniconda3/lib/python3.6/site-packages/bilm/training.py:410)  = Const[_class=[\"loc:",
        "@lm/RNN_0/rnn/multi_rnn_cell/cell_0/lstm_cell/kernel/Assign\"], dtype=DT_FLOAT, value=Tensor<type: fl",
        "oat shape: [] values: -0.0185652673>, _device=\"/job:localhost/replica:0/task:0/device:GPU:0\"]()]]",
    ]);
    assert_eq!((bilm.len(), bilm[0].fields.gpu), (1, Some(0)));
    // A worker's prefix on the first piece only, the cut inside the exception's name: the
    // failure is the worker's (its pid), from the prefixed line on.
    let worker = parse_all([
        "(VllmWorkerProcess pid=195295) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] torch.OutOfMemor",
        "yError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 2 has a total capacity of 14.62 GiB of ",
        "which 3.31 MiB is free.",
    ]);
    assert_eq!(kinds(&worker), [("cuda_oom", "pytorch", 1)]);
    assert_eq!((worker[0].fields.pid, worker[0].fields.gpu), (Some(195_295), Some(2)));
}

/// Old PyTorch's `… out of memory at` broken by a word wrap before its source location: the
/// location is read with the message (it names the tensor storage that failed).
#[test]
fn a_location_wrapped_after_at_is_the_messages() {
    let events = parse_all([
        "RuntimeError: cuda runtime error (2) : out of memory at",
        "/opt/conda/conda-bld/pytorch_1524586445097/work/aten/src/THC/generic/THCStorage.cu:58",
        "epoch 2",
    ]);
    assert_eq!(kinds(&events), [("cuda_oom", "cuda", 1)]);
    assert_eq!(events[0].hint, Some("tensor_storage"));
    assert_eq!(events[0].lines.len(), 2);
    // Not any line after it: a path with words is another line.
    let events = parse_all([
        "RuntimeError: cuda runtime error (2) : out of memory at",
        "/data/run 3/train.log:12 saved",
    ]);
    assert_eq!(events[0].lines.len(), 1);
}

/// A logger's next line is not a piece of the line before, whatever its stamp: llama.cpp's own
/// (`1.06.520.084 E`, unknown to the prefix grammars) begins both, so the size that ends the first
/// is not run into the next; neither is a line with a logger's level, nor an indented one.
#[test]
fn a_loggers_next_line_is_not_a_piece() {
    let events = parse_all([
        "1.06.520.084 E ggml_gallocr_reserve_n_impl: failed to allocate CUDA1 buffer of size 54262464512",
        "1.06.520.086 E graph_reserve: failed to allocate compute buffers",
    ]);
    assert_eq!(events[0].fields.requested, Some(54_262_464_512));
    let failure = "ggml_gallocr_reserve_n_impl: failed to allocate CUDA1 buffer of size 54262464512";
    for next in ["WARNING:root:2 retries left", "    2 retries left"] {
        let events = parse_all([failure, next]);
        assert_eq!(events[0].fields.requested, Some(54_262_464_512), "{next}");
    }
}

/// A line whose own words name a failure after a held line the wrap cut inside a word or a number
/// is read with it: the program is named before the cut (`… allocating 422` / `00 MiB on device 0:
/// cudaMalloc failed: out of memory` is llama.cpp's, not MXNet's bare `cudaMalloc failed`).
#[test]
fn a_failure_cut_from_its_program_is_read_with_it() {
    let events = parse_all([
        "llama_kv_cache_unified: KV self size  = 51200.00 MiB, K (f16): 25600.00 MiB, V (f16): 25600.00 MiB",
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating the compute buffer of 422",
        "00 MiB on device 0: cudaMalloc failed: out of memory",
    ]);
    assert_eq!(kinds(&events), [("cuda_oom", "llama.cpp", 2)]);
    let events = parse_all([
        "some_program_with_a_long_name_that_fills_the_terminal: creating the buffer for the layers 422",
        "00 MiB on device 0: cudaMalloc failed: out of memory",
    ]);
    assert_eq!(kinds(&events), [("cuda_oom", "mxnet", 2)], "the line before says no more: not joined");
}

/// Frame lines a terminal's hard wrap cut still place the failure: the traceback keeps their
/// pieces (`line 541, in __call__`, `, in convert`) and the frames are read whole.
#[test]
fn wrapped_frames_place_the_failure() {
    let events = parse_all([
        "  File \"/home/ep/InvokeAI/invokeai/lib/python3.9/site-packages/torch/nn/modules/module.py\", line 987",
        ", in convert",
        "    return t.to(device, dtype if t.is_floating_point() or t.is_complex() else None, non_blocking)",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 74.00 MiB (GPU 0; 1.95 GiB total capacity; 1.21 GiB already allocated; 21.38 MiB free; 1.26 GiB reserved in total by PyTorch)",
    ]);
    assert_eq!(kinds(&events), [("cuda_oom", "pytorch", 1)]);
    assert_eq!(events[0].phase.as_ref().map(|p| p.phase), Some(oomlens_schema::Phase::Load));
    let events = parse_all([
        "RuntimeError: CUDA out of memory. Tried to allocate 2.77 GiB (GPU 0; 7.79 GiB total capacity; 6.05 GiB already allocated; 462.94 MiB free; 371.28 MiB cached)",
        "Traceback (most recent call last):",
        "  File \"/home/ubuntu/anaconda3/envs/espnet/lib/python3.6/site-packages/torch/nn/modules/module.py\", ",
        "line 541, in __call__",
        "    result = self.forward(*input, **kwargs)",
        "  File \"/home/ubuntu/espnet-master/espnet/nets/pytorch_backend/e2e_asr_transformer.py\", line 175, in",
        " forward",
        "    hs_pad, hs_mask = self.encoder(xs_pad, src_mask)",
    ]);
    assert_eq!(events[0].phase.as_ref().map(|p| p.phase), Some(oomlens_schema::Phase::Forward));
}

/// `rich`'s boxed traceback and a notebook's traceback are the failure's traceback: the event
/// begins with them and their frames (the active source lines) place it.
#[test]
fn boxed_and_notebook_tracebacks_place_the_failure() {
    let rich = parse_all([
        "╭──────────────────── Traceback (most recent call last) ────────────────────╮",
        "│ /home/u/train.py:42 in <module>                                            │",
        "│                                                                            │",
        "│ ❱ 42 │   model = load(args)                                                │",
        "│                                                                            │",
        "│ /home/u/.cache/huggingface/modules/transformers_modules/modeling_glm.py:20 │",
        "│ 2 in forward                                                               │",
        "│                                                                            │",
        "│ ❱ 202 │   │   t = torch.arange(seq_len, device=x.device)                    │",
        "╰────────────────────────────────────────────────────────────────────────────╯",
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 6.00 GiB total capacity; 5.24 GiB already allocated; 0 bytes free; 5.29 GiB reserved in total by PyTorch)",
    ]);
    assert_eq!(kinds(&rich), [("cuda_oom", "pytorch", 1)]);
    let clue = rich[0].phase.as_ref().map(|p| (p.phase, p.clue.as_str()));
    assert_eq!(clue, Some((Phase::Forward, "traceback: forward (modeling_glm.py)")));
    let notebook = parse_all([
        "---------------------------------------------------------------------------",
        "OutOfMemoryError                          Traceback (most recent call last)",
        "<ipython-input-10-14d8a96daa0b> in <module>()",
        "      2 model = Net()",
        "----> 3 model.to(device)",
        "      4 train(model)",
        "",
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 6.00 GiB total capacity; 5.24 GiB already allocated; 0 bytes free; 5.29 GiB reserved in total by PyTorch)",
    ]);
    assert_eq!(kinds(&notebook), [("cuda_oom", "pytorch", 2)]);
    let clue = notebook[0].phase.as_ref().map(|p| (p.phase, p.clue.as_str()));
    assert_eq!(clue, Some((Phase::Load, "traceback: model.to (<ipython-input-10-14d8a96daa0b>)")));
}

/// A wrapper re-raising a number-less failure in its own exception's name is the same failure (a
/// desktop app's `ApiError: 500 …: CUDA error: out of memory` after the server's `500 …`); the
/// same words after a progress bar glued before them are the next failure.
#[test]
fn a_wrappers_re_raise_is_one_event() {
    let events = parse_all([
        "500 Internal Server Error: CUDA error: out of memory",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
        "",
        "ApiError: 500 Internal Server Error: CUDA error: out of memory",
    ]);
    assert_eq!(kinds(&events), [("cuda_oom", "cuda", 1)]);
    // fairseq skipping batches (two OOMs, the second's words glued to tqdm's bar).
    let events = parse_all([
        "THCudaCheck FAIL file=/pytorch/torch/lib/THC/generic/THCStorage.cu line=58 error=2 : out of memory",
        "| WARNING: ran out of memory on GPU #2, skipping batch",
        "",
        "| using 3 GPUs (with max tokens per GPU = 2000 and max sentences per GPU = None)",
        "| model fconv_wmt_en_de, criterion CrossEntropyCriterion",
        "| num. model params: 217643510",
        "| epoch 001:   0%|  | 315/72115 [01:24<5:21:16,  3.72it/s, oom=0]THCudaCheck FAIL file=/pytorch/torch/lib/THC/generic/THCStorage.cu line=58 error=2 : out of memory",
    ]);
    assert_eq!(kinds(&events), [("cuda_oom", "cuda", 1), ("cuda_oom", "cuda", 7)]);
}

/// A program reporting, right after the failure, that a model failed to load (llama.cpp's
/// `error loading model:` after Vulkan's refusal, LocalAI's `could not load model`) places the
/// failure at load; the report is part of the event, not another failure.
#[test]
fn a_model_that_failed_to_load_is_read_with_its_failure() {
    let events = parse_all([
        "Error allocating memory ErrorOutOfDeviceMemory",
        "error loading model: Error allocating vulkan memory.",
        "llama_load_model_from_file_internal: failed to load model",
    ]);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].phase.as_ref().map(|p| p.phase), Some(Phase::Load));
    let events = parse_all([
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 4.00 GiB total capacity; 3.39 GiB already allocated; 0 bytes free; 3.45 GiB reserved in total by PyTorch)",
        "Stable diffusion model failed to load",
        "Loading weights [31e35c80fc] from /models/v1-5-pruned-emaonly.safetensors",
    ]);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0].phase.as_ref().map(|p| p.phase), events[0].fields.capacity),
        (Some(Phase::Load), Some(4 << 30))
    );
}

/// A paste or a logger that broke PyTorch's message after its headline, or into its sentences,
/// still gives one event with every number, at the headline.
#[test]
fn a_message_broken_after_its_headline_is_one_event() {
    let sentences = V2
        .replacen("out of memory. ", "out of memory.\n", 1)
        .replace("is free. ", "is free.\n")
        .replace("memory in use. ", "memory in use.\n")
        .replace("but unallocated. ", "but unallocated.\n");
    for text in [
        V2.replacen("out of memory. ", "out of memory.\n", 1),
        V2.replacen("out of memory. ", "out of memory.\n\n", 1),
        V2.replacen("OutOfMemoryError: ", "OutOfMemoryError:\n", 1),
        V2.replacen("torch.OutOfMemoryError: ", "torch.cuda.OutOfMemoryError:\n\n", 1),
        sentences.clone(),
        // The journal's prefix on every line; a script's bracketed stamp and level.
        sentences.lines().map(|l| format!("Mar 25 12:15:11 node7 python3[8289]: {l}\n")).collect(),
        sentences.lines().map(|l| format!("[2024-09-16 12:53:56] [INFO] {l}\n")).collect(),
        // Behind loguru's long prefix a short sentence fills a terminal's width: taken by the
        // message, it is no head of another failure.
        sentences
            .lines()
            .map(|l| format!("2024-05-01 12:00:00.123 | ERROR    | train:main:42 - {l}\n"))
            .collect(),
    ] {
        let events = parse_all(text.lines());
        assert_eq!(events.len(), 1, "{text}\n{events:?}");
        assert_eq!(events[0].line, 1);
        check_v2(&events[0]);
    }
    // Each clause on a line of its own behind loguru's prefix (a user's re-typed message): the
    // short `Tried to allocate 1.36 GiB.` fills a terminal's width with the prefix, but the
    // message took it, so the next clause does not start another failure with it.
    let p = "2024-05-01 12:00:00.123 | ERROR    | train:main:42 - ";
    let lines = [
        format!("{p}torch.OutOfMemoryError: CUDA out of memory."),
        format!("{p}Tried to allocate 1.36 GiB."),
        format!("{p}GPU 0 has a total capacity of 23.65 GiB of which 1.36 GiB is free."),
        format!("{p}Of the allocated memory 21.73 GiB is allocated by PyTorch."),
    ];
    let events = parse_all(lines.iter().map(String::as_str));
    assert_eq!(kinds(&events), [("cuda_oom", "pytorch", 1)]);
    assert_eq!((events[0].fields.capacity.is_some(), events[0].fields.allocated.is_some()), (true, true));
    // A device's failure in a program's words, its numbers after a blank line (Ascend).
    let events = parse_all([
        "[Stage-0] ERROR 01-15 09:49:55 [diffusion_engine.py:169] Generation failed: NPU out of memory.",
        "",
        "Tried to allocate 20.00 MiB (NPU 0; 61.27 GiB total capacity; 0 bytes already allocated; 0 bytes current active; 48.36 MiB free; 0 bytes reserved in total by PyTorch)",
    ]);
    assert_eq!(kinds(&events), [("cuda_oom", "pytorch", 1)]);
    assert_eq!(events[0].fields.requested, Some(20 * MIB));
    // A whole message, then another process's headless one: two failures. A headline alone stays
    // an event of its own.
    let headless = "Tried to allocate 2.00 GiB (GPU 3; 79.15 GiB total capacity; 77.13 GiB already allocated; \
                    355.31 MiB free; 78.21 GiB reserved in total by PyTorch)";
    assert_eq!(found(&[V2, headless]), [("cuda_oom", "pytorch", 1), ("cuda_oom", "pytorch", 2)]);
    assert_eq!(found(&["torch.cuda.OutOfMemoryError:", "", "step 3"]), [("cuda_oom", "pytorch", 1)]);
}

/// A paste that kept only the last source line of the traceback: when it is PyTorch's own code
/// that places the failure, the event begins with it and takes its phase; another line before the
/// message, or one between, is not the failure's.
#[test]
fn a_lone_source_line_of_torch_before_the_message_places_it() {
    let to =
        "    return t.to(device, dtype if t.is_floating_point() or t.is_complex() else None, non_blocking)";
    let events = parse_all([to, V2]);
    assert_eq!(kinds(&events), [("cuda_oom", "pytorch", 1)]);
    assert_eq!(events[0].phase.as_ref().map(|p| p.phase), Some(Phase::Load));
    check_v2(&events[0]);
    let events = parse_all([to, "step 3", V2]);
    assert_eq!((events[0].line, events[0].phase.as_ref()), (3, None));
    let events = parse_all(["    out = model(x)", V2]);
    assert_eq!((events[0].line, events[0].phase.as_ref()), (2, None));
}

#[test]
fn traceback_is_part_of_the_event() {
    let text = format!(
        "loading\nTraceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    main()\n{V2}\nbye"
    );
    let events = parse_all(text.lines());
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].line, 2);
    assert!(events[0].raw_message().starts_with("Traceback (most recent call last):\n  File"));
    check_v2(&events[0]);
}

#[test]
fn repeated_print_is_one_event() {
    let text =
        format!("{V2}\nThe above exception was the direct cause of the following exception:\n\n{V2}\n");
    let mut p = LogParser::new();
    let mut events = Vec::new();
    for l in text.lines() {
        events.extend(p.feed_line(l));
    }
    events.extend(p.finish());
    assert_eq!(events.len(), 1);
    assert_eq!(p.duplicates(), 1);
}

/// Two ranks' messages (GPU 0 and GPU 1), wrapped at 70 columns and interleaved line by line,
/// each line behind `decoration` and its rank's prefix: two events, each with its own numbers.
fn check_interleaved_ranks(decoration: &str) {
    let a = V2.replace("GPU 0", "GPU 1");
    let lines: Vec<String> = wrap(V2, 70)
        .into_iter()
        .zip(wrap(&a, 70))
        .flat_map(|(x, y)| [format!("{decoration}[rank0]: {x}"), format!("{decoration}[rank1]: {y}")])
        .collect();
    let events = parse_all(lines.iter().map(String::as_str));
    assert_eq!(events.len(), 2, "{events:#?}");
    let gpus: Vec<_> = events.iter().map(|e| e.fields.gpu).collect();
    assert!(gpus.contains(&Some(0)) && gpus.contains(&Some(1)));
    for e in &events {
        assert_eq!(e.fields.allocated, Some(55 * GIB));
    }
}

#[test]
fn ranks_are_kept_apart() {
    check_interleaved_ranks("");
}

/// Inside a service's (or a host's) prefix the ranks are still kept apart, and a line of the
/// service without a rank (the message before its ranked traceback) joins the rank's lines.
#[test]
fn ranks_inside_a_service_are_kept_apart() {
    check_interleaved_ranks("trainer-1  | ");
    check_interleaved_ranks("worker-1: ");
    let events = parse_all([
        "trainer-1  | torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.46 GiB.",
        "trainer-1  | [rank0]: Traceback (most recent call last):",
        "trainer-1  | [rank0]:   File \"/x/transformers/trainer.py\", line 3572, in training_step",
        "trainer-1  | [rank0]:     loss = self.compute_loss(model, inputs)",
    ]);
    assert_eq!(kinds(&events), [("cuda_oom", "pytorch", 1)]);
    assert_eq!(events[0].phase.as_ref().map(|p| p.phase), Some(Phase::Forward));
}

/// The journal (and rsyslog's files) interleave every service's lines, `kubectl logs --prefix`
/// with a label selector every pod's: each program's pid, each pod's container, is a stream of
/// its own — two services' tracebacks interleaved line by line are two failures, each with its own
/// frames — and ranks inside one stay apart.
#[test]
fn services_in_the_journal_and_pods_are_kept_apart() {
    for (a, b) in [
        ("Mar 25 12:15:11 node7 python3[8289]: ", "Mar 25 12:15:11 node7 python3[8290]: "),
        ("[pod/trainer-0/pytorch] ", "[pod/server-0/vllm] "),
    ] {
        let lines = [
            format!("{a}Traceback (most recent call last):"),
            format!("{b}Traceback (most recent call last):"),
            format!("{a}  File \"train.py\", line 9, in <module>"),
            format!("{b}  File \"serve.py\", line 12, in <module>"),
            format!("{a}    loss.backward()"),
            format!("{b}    out = model.generate(x)"),
            format!(
                "{a}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 7.79 GiB of which 10.00 MiB is free."
            ),
            format!(
                "{b}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 40.00 MiB. GPU 1 has a total capacity of 7.79 GiB of which 10.00 MiB is free."
            ),
        ];
        let events = parse_all(lines.iter().map(String::as_str));
        let found: Vec<_> =
            events.iter().map(|e| (e.fields.gpu, e.phase.as_ref().map(|p| p.phase))).collect();
        assert_eq!(found, [(Some(0), Some(Phase::Backward)), (Some(1), Some(Phase::Inference))], "{a}");
        check_interleaved_ranks(a);
    }
}

#[test]
fn json_has_exactly_the_keys() {
    let e = &parse_all([V2])[0];
    let v: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut expected = vec![
        "kind",
        "framework",
        "gpu_index",
        "pid",
        "requested_bytes",
        "capacity_bytes",
        "free_bytes",
        "allocated_bytes",
        "reserved_bytes",
        "reserved_unallocated_bytes",
        "process_used_bytes",
        "other_processes",
        "xid",
        "phase",
        "phase_clue",
        "host_evidence",
        "hint",
        "op",
        "line",
    ];
    let mut got = keys.clone();
    got.sort_unstable();
    expected.sort_unstable();
    assert_eq!(got, expected);
    assert!(
        e.to_json()
            .starts_with("{\"kind\":\"cuda_oom\",\"framework\":\"pytorch\",\"gpu_index\":0,\"pid\":null")
    );
    let ev = e.to_event(42);
    assert_eq!((ev.kind, ev.source, ev.ts_ms), (OomKind::CudaOom, EventSource::Log, 42));
    assert_eq!(ev.raw_message, V2);
    assert!(e.summary().contains("requested"));
}

#[test]
fn open_events_time_out() {
    let mut p = LogParser::new();
    assert!(p.feed_line("RuntimeError: CUDA out of memory. Tried to allocate 2.00 MiB (GPU 0; 1").is_empty());
    let mut got = Vec::new();
    for i in 0..100 {
        got.extend(p.feed_line(&format!("unrelated {i}")));
    }
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].fields.requested, Some(2 * MIB));
    assert_eq!(p.buffered_lines(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_input_never_panics(lines in proptest::collection::vec("\\PC{0,300}", 0..60)) {
        let mut p = LogParser::new();
        for l in &lines {
            let _ = p.feed_line(l);
            prop_assert!(p.last_line_work() <= MAX_LINE_WORK);
        }
        let _ = p.finish();
    }

    #[test]
    fn oom_like_noise_keeps_buffers_bounded(
        picks in proptest::collection::vec(0usize..8, 1..600),
        long in 1usize..20_000,
    ) {
        let pieces = [
            "Traceback (most recent call last):".to_owned(),
            "  File \"x.py\", line 1, in f".to_owned(),
            "Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.0KiB (rounded to 1024)".to_owned(),
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB. GPU 0 has a total".to_owned(),
            "capacity of which is free memory in use Process 1 has 1 GiB memory in use".to_owned(),
            format!("[rank{long}]: Cuda failure 'out of memory'"),
            "x".repeat(long),
            format!("RuntimeError: CUDA error: out of memory {}", "y".repeat(long)),
        ];
        let mut p = LogParser::new();
        for (n, i) in picks.iter().enumerate() {
            let _ = p.feed_line(&pieces[*i]);
            prop_assert!(p.last_line_work() <= MAX_LINE_WORK, "work {} at line {n}", p.last_line_work());
            prop_assert!(p.buffered_lines() <= MAX_PENDING * (MAX_EVENT_LINES + 1) + TRACEBACK_HEAD + TRACEBACK_TAIL);
            prop_assert!(p.buffered_bytes() <= MAX_PENDING * (MAX_RAW_BYTES + MAX_COMPACT_BYTES) + (TRACEBACK_HEAD + TRACEBACK_TAIL) * text::MAX_LINE_BYTES);
        }
        for e in p.finish() {
            prop_assert!(e.raw_message().len() <= oomlens_schema::limits::MAX_RAW_MESSAGE);
        }
    }
}

#[test]
fn gunicorn_sigkill_after_its_own_timeout_is_not_a_host_oom() {
    let parse = |text: &str| {
        let mut p = LogParser::new();
        let mut out: Vec<ParsedOom> = text.lines().flat_map(|l| p.feed_line(l)).collect();
        out.extend(p.finish());
        out
    };
    // gunicorn timed the worker out and killed it itself (mlflow's CI log).
    let timeout = "[2024-01-19 00:48:31 +0000] [2973] [CRITICAL] WORKER TIMEOUT (pid:2977)\n[2024-01-19 00:48:32 +0000] [2973] [ERROR] Worker (pid:2977) was sent SIGKILL! Perhaps out of memory?\n[2024-01-19 00:48:32 +0000] [3004] [INFO] Booting worker with pid: 3004";
    assert!(parse(timeout).is_empty());
    // No timeout of that worker: the OOM killer.
    let oom = "[2020-09-12 05:37:48 +0000] [21] [INFO] Booting worker with pid: 21\neating memory\n[2020-09-12 05:37:52 +0000] [18] [ERROR] Worker (pid:21) was sent SIGKILL! Perhaps out of memory?";
    let got = parse(oom);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].kind, got[0].host_evidence), (OomKind::HostOomKill, Some(HostEvidence::Sigkill)));
    // Another worker's timeout does not explain it.
    let other = format!("[x] [1] [CRITICAL] WORKER TIMEOUT (pid:7)\n{oom}");
    assert_eq!(parse(&other).len(), 1);
}

/// IPython prints the exception's name in its traceback header; a paste cut before the message
/// still says which failure it was. With its message the header adds nothing: one event.
#[test]
fn ipython_header_names_the_failure() {
    let frames = [
        "ResourceExhaustedError                    Traceback (most recent call last)",
        "<ipython-input-35-1a3bbd5216b5> in <module>",
        "----> 7     classes=2",
        "",
        "/usr/local/lib/python3.6/dist-packages/keras/applications/resnet.py in ResNet50(*args, **kwargs)",
        "     13 def ResNet50(*args, **kwargs):",
        "---> 14     return resnet.ResNet50(*args, **kwargs)",
    ];
    let cut = parse_all(frames);
    assert_eq!(cut.len(), 1);
    assert_eq!((cut[0].kind, cut[0].framework, cut[0].line), (OomKind::CudaOom, "tensorflow", 1));
    assert_eq!(cut[0].fields.requested, None);

    let mut whole = frames.to_vec();
    whole.push(
        "ResourceExhaustedError: OOM when allocating tensor with shape[64,256,56,56] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
    );
    let events = parse_all(whole);
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].line, events[0].fields.requested), (1, Some(64 * 256 * 56 * 56 * 4)));

    // Another exception's header, or a header followed by other output: nothing.
    let mut other = frames.to_vec();
    other[0] = "ValueError                                Traceback (most recent call last)";
    assert!(parse_all(other).is_empty());
    let torch = parse_all([
        "OutOfMemoryError                          Traceback (most recent call last)",
        "Cell In[3], line 1",
    ]);
    assert_eq!(torch.len(), 1);
    assert_eq!(torch[0].framework, "pytorch");
}

/// The program named by what printed the failure's own words.
#[test]
fn framework_by_wording() {
    for (line, want) in [
        ("cudaMalloc failed: out of memory", "mxnet"),
        (
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 8192.00 MiB on device 0: cudaMalloc failed: out of memory",
            "llama.cpp",
        ),
        ("allocating 18390.70 MiB on device 0: cudaMalloc failed: out of memory", "llama.cpp"),
        (
            "RuntimeError: [metal::malloc] Attempting to allocate 48736917632 bytes which is greater than the maximum allowed buffer size of 30150672384 bytes.",
            "mlx",
        ),
        (
            "libc++abi: terminating due to uncaught exception of type std::runtime_error: Attempting to allocate 19081554496 bytes which is greater than the maximum allowed buffer size of 17179869184 bytes.",
            "mlx",
        ),
        ("Tried to allocate 160MiB. GPU", "pytorch"),
        (
            "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to allocate 98697216 bytes for new constant",
            "jax",
        ),
        ("  what():  std::bad_alloc: out of memory", "cuda"),
        ("  what():  parallel_for failed: out of memory", "cuda"),
        (
            "RuntimeError: Malloc for kernel output failed, Memory isn't enough, node:Default/Cast-op446",
            "mindspore",
        ),
        (
            "[ERROR] PRE_ACT(145615,fffbdf67f120,python):2025-01-12-09:48:13.703.514 [mindspore/ccsrc/backend/common/mem_reuse/mem_dynamic_allocator.cc:392] AddMemBlockAndMemBufByEagerFree] TotalUsedMemStatistics : 24725382656 plus TotalUsedByEventMemStatistics : 0 and plus alloc size : 100555779072 is more than total mem size : 61079552000.",
            "mindspore",
        ),
    ] {
        let events = parse_all([line]);
        assert_eq!(events.len(), 1, "{line}");
        assert_eq!(events[0].framework, want, "{line}");
    }
}

/// TensorFlow's driver wrapper at its own source line means a refused device allocation, even when
/// the paste ends in the middle of it.
/// TensorFlow's OOM advice (`Hint: If you want to see a list of allocated tensors when OOM
/// happens, …`) is printed only with its OOM error: alone (a paste that kept only the last lines)
/// it is that failure; after the error, the error's trailer; at a paste's start, before the
/// error's next root error, one failure with it.
#[test]
fn tf_oom_advice_alone_or_with_its_error() {
    const HINT: &str = "Hint: If you want to see a list of allocated tensors when OOM happens, add \
                        report_tensor_allocations_upon_oom to RunOptions for current allocation info.";
    let alone = parse_all([
        "Use standard file APIs to delete files with this prefix.",
        HINT,
        "    train_loss = run_set('train', train_init_op)",
    ]);
    assert_eq!(kinds(&alone), [("cuda_oom", "tensorflow", 2)]);
    let root = "  (0) Resource exhausted: OOM when allocating tensor with shape[1,896,896,67] and type float on \
                /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc";
    let after = parse_all([
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: 2 root error(s) found.",
        root,
        "     [[{{node concatenate_5_5/concat}}]]",
        HINT,
        "",
        "     [[activation_56_5/truediv/_17093]]",
        HINT,
        "",
        "0 successful operations.",
    ]);
    assert_eq!(kinds(&after), [("cuda_oom", "tensorflow", 2)]);
    let before = parse_all([HINT, "", "     [[activation_56_5/truediv/_17093]]", HINT, "", root]);
    assert_eq!(kinds(&before), [("cuda_oom", "tensorflow", 1)]);
    assert_eq!(before[0].fields.requested, Some(896 * 896 * 67 * 4));
}

#[test]
fn tf_driver_allocation_cut() {
    let events = parse_all([
        "2019-07-31 12:26:59.036369: E tensorflow/stream_executor/cuda/cuda_driver.cc:806] failed to allocate 7.63",
    ]);
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].framework, events[0].hint), ("tensorflow", Some("device_preallocation")));
    // Its ROCm twin, whole.
    let rocm = parse_all([
        "2020-03-11 17:17:25.172727: E tensorflow/stream_executor/rocm/rocm_driver.cc:600] failed to allocate 3.08G (3304535552 bytes) from device: HIP_ERROR_OutOfMemory",
    ]);
    assert_eq!(rocm.len(), 1);
    assert_eq!(
        (rocm[0].framework, rocm[0].hint, rocm[0].fields.requested),
        ("tensorflow", Some("device_preallocation"), Some(3304535552))
    );
    // The same words from another source are not a GPU failure.
    assert!(
        parse_all(["2019-07-31 12:26:59.036369: E tensorflow/core/x.cc:1] failed to allocate 7.63"])
            .is_empty()
    );
}

/// TensorFlow / XLA pinning host memory through the driver: the host's memory in the device's
/// words (hint `pinned_host`), before the host pool's allocator line reads as a graph tensor.
#[test]
fn tf_pinned_host_memory() {
    for line in [
        "2020-04-06 17:18:26.235701: E tensorflow/stream_executor/cuda/cuda_driver.cc:890] failed to alloc 249751808 bytes on host: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
        "2021-10-15 15:02:17.299178: W external/org_tensorflow/tensorflow/core/common_runtime/bfc_allocator.cc:457] Allocator (xla_gpu_host_bfc) ran out of memory trying to allocate 48.00MiB (rounded to 50331648)requested by op",
    ] {
        let events = parse_all([line]);
        assert_eq!(events.len(), 1, "{line}");
        assert_eq!((events[0].framework, events[0].hint), ("tensorflow", Some("pinned_host")), "{line}");
    }
    // The device's own pool is a graph tensor still.
    let device = parse_all([
        "2021-10-15 15:02:17.299178: W tensorflow/core/common_runtime/bfc_allocator.cc:457] Allocator (GPU_0_bfc) ran out of memory trying to allocate 48.00MiB (rounded to 50331648)requested by op",
    ]);
    assert_eq!(device[0].hint, Some("graph_tensor"));
}

/// The refused tensor's shape refines TensorFlow's graph-tensor hint; attention code named by
/// the graph node still says more (Spleeter's and tensor2tensor's messages, shortened).
#[test]
fn tf_tensor_shape_refines_the_hint() {
    let spleeter = [
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: 2 root error(s) found.",
        "  (0) Resource exhausted: OOM when allocating tensor with shape[2,22264,2049] and type complex64 on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
        "         [[{{node stft/rfft}}]]",
    ];
    let events = parse_all(spleeter);
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].hint, events[0].fields.requested),
        (Some("long_tensor"), Some(2 * 22264 * 2049 * 8))
    );
    let kernel = parse_all([
        "ResourceExhaustedError: OOM when allocating tensor of shape [3,3,1024,2048] and type float",
    ]);
    assert_eq!(
        (kernel[0].hint, kernel[0].fields.requested),
        (Some("weight_tensor"), Some(3 * 3 * 1024 * 2048 * 4))
    );
    let attention = parse_all([
        "ResourceExhaustedError: OOM when allocating tensor with shape[16,12,512,512] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
        "\t [[Node: bert/encoder/layer_3/attention/self/Softmax = Softmax[T=DT_FLOAT]()]]",
    ]);
    assert_eq!(attention[0].hint, Some(ATTENTION_HINT));
    let flat =
        parse_all(["ResourceExhaustedError: OOM when allocating tensor with shape[3072,768] and type float"]);
    assert_eq!(flat[0].hint, Some("graph_tensor"));
}

/// tinygrad's device allocators raise Python's `MemoryError`: its GPU runtimes' frames make it
/// the device's; its CPU back-ends' stay the host's (tinygrad's traceback, shortened).
#[test]
fn tinygrad_memory_error_by_its_runtime() {
    let tb = |module: &str| {
        [
            "Traceback (most recent call last):".to_owned(),
            "  File \"/home/u/tinygrad/tinygrad/device.py\", line 228, in alloc".to_owned(),
            "    return self._alloc(size, options if options is not None else self.default_buffer_spec)".to_owned(),
            format!("  File \"/home/u/tinygrad/tinygrad/runtime/ops_{module}.py\", line 584, in alloc"),
            "    if e.errno == errno.ENOMEM: raise MemoryError(f\"Cannot allocate {size} bytes: no memory is available.\") from e".to_owned(),
            "MemoryError: Cannot allocate 122341986304 bytes: no memory is available.".to_owned(),
        ]
    };
    let gpu = parse_all(tb("amd").iter().map(String::as_str));
    assert_eq!(gpu.len(), 1);
    assert_eq!((gpu[0].kind, gpu[0].framework, gpu[0].host_evidence), (OomKind::CudaOom, "tinygrad", None));
    let cpu = parse_all(tb("cpu").iter().map(String::as_str));
    assert_eq!(cpu[0].kind, OomKind::HostOomKill);
}

/// SGLang's KV pool out of slots for the running batch, with its numbers on the next lines; XGBoost's
/// device allocator with the free memory and the request on lines of their own.
#[test]
fn serving_pool_and_xgboost_allocator() {
    let sglang = parse_all([
        "RuntimeError: Decode out of memory. Try to lower your batch size.",
        "Try to allocate 148 tokens.",
        "Avaliable tokens: 2048",
    ]);
    assert_eq!((sglang.len(), sglang[0].framework, sglang[0].hint), (1, "sglang", Some("kv_pool")));
    assert!(parse_all(["[2025-03-19 12:00:01] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.7 -> 1.0"]).is_empty());
    let xgb = parse_all([
        "ml.dmlc.xgboost4j.java.XGBoostError: [22:22:41] /workspace/src/tree/updater_gpu_hist.cu:712: Exception in gpu_hist: [22:22:41] /workspace/jvm-packages/xgboost4j-gpu/src/native/../../../../src/common/device_helpers.cuh:428: Memory allocation error on ",
        "- Free memory: 224067584",
        "- Requested memory: 878511352",
    ]);
    assert_eq!(xgb.len(), 1);
    assert_eq!((xgb[0].kind, xgb[0].framework), (OomKind::CudaOom, "xgboost"));
    assert_eq!((xgb[0].fields.free, xgb[0].fields.requested), (Some(224067584), Some(878511352)));
}

/// TensorRT's builder logs a refused tactic workspace at error level and goes on without that
/// tactic: with its `Skipping tactic … due to insufficient memory` it is no failure; alone, the
/// refusal is one (VoltaML's and BEVDet's builder logs).
#[test]
fn tensorrt_tactic_skipped_is_no_failure() {
    let e = "[12/09/2022-20:25:24] [TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::145] Error Code 2: OutOfMemory (no further information)";
    let skipped = [
        e,
        e,
        "[12/09/2022-20:25:24] [TRT] [W] Requested amount of GPU memory (17179869184 bytes) could not be allocated. There may not be enough free memory for allocation to succeed.",
        "[12/09/2022-20:25:25] [TRT] [W] Skipping tactic 8 due to insufficient memory on requested size of 17179869184 detected for tactic 0x000000000000003c.",
        "Try decreasing the workspace size with IBuilderConfig::setMemoryPoolLimit().",
    ];
    assert!(parse_all(skipped).is_empty());
    let alone = parse_all([e, e, "[12/09/2022-20:25:26] [TRT] [I] Loaded engine size: 0 MiB"]);
    assert_eq!((alone.len(), alone[0].framework), (1, "tensorrt"));
}

/// PyTorch's fragmentation advice alone is its message cut before the numbers; inside an open
/// message (hard-wrapped) it is that message's line, not a second failure.
#[test]
fn pytorch_advice_alone_or_wrapped() {
    let cut = parse_all([
        "llocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CON",
    ]);
    assert_eq!((cut.len(), cut[0].framework, cut[0].kind), (1, "pytorch", OomKind::CudaOom));
    let wrapped = parse_all([
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 2.00 GiB total capacity; 1.25 GiB already allocated; 3.55 MiB free; 1.27 GiB reserved in total by PyTorch) If reserved memory is >> allocated",
        "memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
    ]);
    assert_eq!(wrapped.len(), 1);
    assert_eq!(wrapped[0].fields.capacity, Some(2 * GIB));
}

/// C++ announces an uncaught exception before its `what()`: one failure, with the numbers.
#[test]
fn uncaught_cpp_oom_is_one_event() {
    let events = parse_all([
        "terminate called after throwing an instance of 'c10::CUDAOutOfMemoryError'",
        "  what():  CUDA out of memory. Tried to allocate 12.50 GiB (GPU 0; 39.59 GiB total capacity; 27.41 GiB already allocated; 9.90 GiB free; 27.46 GiB reserved in total by PyTorch)",
        "Exception raised from malloc at ../c10/cuda/CUDACachingAllocator.cpp:536 (most recent call first):",
    ]);
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].line, events[0].fields.requested), (1, Some(25 * GIB / 2)));
    // The announcement alone is still the failure.
    assert_eq!(
        parse_all(["terminate called after throwing an instance of 'c10::OutOfMemoryError'"]).len(),
        1
    );
}

/// Which listed process failed: the one holding at least its allocator's memory, with the least
/// above it; with an allocator that holds nothing, none that holds the GPU.
#[test]
fn own_process_among_the_listed() {
    let listed =
        [OtherProcess { pid: 1, used_bytes: 30 * GIB }, OtherProcess { pid: 2, used_bytes: 12 * GIB }];
    assert_eq!(own_process_index(&listed, Some(10 * GIB), Some(9 * GIB)), Some((1, false)));
    assert_eq!(own_process_index(&listed, Some(20 * GIB), None), Some((0, true)));
    let full = [OtherProcess { pid: 885_415, used_bytes: 22 * GIB }];
    assert_eq!(own_process_index(&full, Some(0), Some(0)), None);
    let fresh =
        [OtherProcess { pid: 7, used_bytes: 22 * GIB }, OtherProcess { pid: 8, used_bytes: 500 * MIB }];
    assert_eq!(own_process_index(&fresh, Some(0), Some(0)), Some((1, true)));
    assert_eq!(own_process_index(&full, None, None), Some((0, true)));
}

/// Jupyter restarting a kernel that aborted on its own GPU failure is not a second (host) failure;
/// a restart with nothing before it still is one.
#[test]
fn kernel_restart_after_its_own_failure() {
    let events = parse_all([
        "terminate called after throwing an instance of 'thrust::system::system_error'",
        "  what():  parallel_for failed: out of memory",
        "[I 22:44:57.420 LabApp] KernelRestarter: restarting kernel (1/5), keep random ports",
    ]);
    let kinds: Vec<_> = events.iter().map(|e| (e.kind.as_str(), e.framework)).collect();
    assert_eq!(kinds, [("cuda_oom", "cuda")]);
    let events =
        parse_all(["[I 22:44:57.420 LabApp] KernelRestarter: restarting kernel (1/5), keep random ports"]);
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].kind.as_str(), events[0].framework), ("host_oom_kill", "jupyter"));
}

/// llama.cpp's CPU backend refusing a host buffer, and the engine's lines reporting it: one host
/// failure, not a GPU one besides.
#[test]
fn llama_cpu_buffer_is_one_host_failure() {
    let events = parse_all([
        "llama_new_context_with_model: n_ctx      = 1048576",
        "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 137438953504",
        "llama_kv_cache_init: failed to allocate buffer for kv cache",
        "llama_new_context_with_model: llama_kv_cache_init() failed for self-attention cache",
    ]);
    assert_eq!(kinds(&events), [("host_oom_kill", "llama.cpp", 2)]);
}

/// PyTorch 1.x's message wrapped right before its clause of numbers is one message, not a head
/// and a headless paste.
#[test]
fn wrap_before_the_numbers_clause() {
    let events = parse_all([
        "RuntimeError: CUDA out of memory. Tried to allocate 1.86 GiB   ",
        "(GPU 0; 4.00 GiB total capacity; 1.48 GiB already allocated; 319.91 MiB free; 1.88   ",
        " GiB reserved in total by PyTorch) ",
    ]);
    assert_eq!(events.len(), 1);
    let f = &events[0].fields;
    assert_eq!((events[0].line, f.gpu, f.capacity), (1, Some(0), Some(4 << 30)));
    assert!(f.requested.is_some() && f.reserved.is_some(), "{f:?}");
}

/// The rest of a failure a few lines after it, without numbers, is not a failure of its own; the
/// same words further on are.
#[test]
fn remainder_of_a_failure() {
    let paddle = [
        "Out of memory error on GPU 0. Cannot allocate 69.629150MB memory on GPU 0, 39.525391GB memory has been allocated and available memory is only 62.187500MB.",
        "",
        "Please check whether there is any other process using GPU 0.",
        "1. If yes, please stop them, or start PaddlePaddle on another GPU.",
    ];
    assert_eq!(parse_all(paddle).len(), 1);
    let catboost = [
        "(NCudaLib::TOutOfMemoryError) /src/catboost/catboost/cuda/cuda_lib/memory_pool/stack_like_memory_pool.h:303: Error: Out of memory. Requested 8880 MB; Free 5902.061425 MB",
        "uncaught exception:",
        "    address -> 0x4d5a35b0410",
        "    what() -> \"/src/catboost/catboost/cuda/cuda_lib/memory_pool/stack_like_memory_pool.h:303: Error: Out of memory. Requested 8880 MB; Free 5902.061425 MB\"",
    ];
    assert_eq!(parse_all(catboost).len(), 1);
    let mut twice = vec!["RuntimeError: CUDA error: out of memory"];
    twice.extend(["step 1"; 8]);
    twice.push("RuntimeError: CUDA error: out of memory, again later");
    assert_eq!(parse_all(twice).len(), 2);
}

/// A head hard-wrapped before its message (`… CUDA Exception:` / `out of memory`) is one failure
/// from the head's line; a colon-ended line followed by other output is nothing.
#[test]
fn head_wrapped_before_its_message() {
    let events = parse_all([
        "*** Internal error in package accelerate ***",
        "./Data/Array/Accelerate/CUDA/State.hs:86 (unhandled): CUDA Exception:",
        "out of memory",
        "",
        "     544,868,344 bytes allocated in the heap",
    ]);
    let got: Vec<_> = events.iter().map(|e| (e.kind.as_str(), e.line)).collect();
    assert_eq!(got, [("cuda_oom", 2)]);
    assert!(parse_all(["Results:", "out of memory errors: 0", "done"]).is_empty());
    // ComfyUI's report puts a blank line between the node's head and the message.
    let comfy = parse_all(["Error occurred when executing Diffree_Sampler:", "", "Allocation on device", ""]);
    assert_eq!(kinds(&comfy), [("cuda_oom", "pytorch", 1)]);
    assert!(
        parse_all([
            "Error occurred when executing KSampler:",
            "",
            "Expected all tensors to be on the same device"
        ])
        .is_empty()
    );
}

/// A traceback printed right after its failure's message — old PyTorch's C-level check before
/// Python raises it, an application that logs the error and then its traceback — is that
/// failure's: its frames give the phase, and its exception line is the same failure, not a second
/// one. A traceback that ends in another failure stays that failure's.
#[test]
fn traceback_after_its_message() {
    let phases = |events: Vec<ParsedOom>| -> Vec<(u64, Option<Phase>)> {
        events.iter().map(|e| (e.line, e.phase.as_ref().map(|p| p.phase))).collect()
    };
    let events = parse_all([
        "THCudaCheck FAIL file=/pytorch/torch/lib/THC/generic/THCStorage.cu line=58 error=2 : out of memory",
        "Traceback (most recent call last):",
        "  File \"train.py\", line 381, in <module>",
        "    model = model.cuda()",
        "  File \"/usr/lib/python2.7/site-packages/torch/nn/modules/module.py\", line 216, in cuda",
        "    return self._apply(lambda t: t.cuda(device))",
        "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/torch/lib/THC/generic/THCStorage.cu:58",
        "epoch 2",
    ]);
    assert_eq!(phases(events), [(1, Some(Phase::Load))]);
    let logged = parse_all([
        "!!! Exception during processing !!! Allocation on device",
        "Traceback (most recent call last):",
        "  File \"ComfyUI/nodes.py\", line 1497, in sample",
        "    images = vae.decode(samples[\"samples\"])",
        "  File \"ComfyUI/comfy/sd.py\", line 9, in generate",
        "    out = self.model.generate(x)",
        "torch.OutOfMemoryError: Allocation on device",
        "",
        "Got an OOM, unloading all loaded models.",
    ]);
    assert_eq!(phases(logged), [(1, Some(Phase::Inference))]);
    // The traceback ends in another failure: each keeps its own lines.
    let two = parse_all([
        "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,024 bytes (allocated so far: 2,048 bytes).",
        "Traceback (most recent call last):",
        "  File \"train.py\", line 88, in <module>",
        "    train()",
        "RuntimeError: No executable batch size found, reached zero.",
    ]);
    let found: Vec<_> = two.iter().map(|e| (e.framework, e.line)).collect();
    assert_eq!(found, [("cupy", 1), ("accelerate", 2)]);
    // Its own traceback and exception line first, then one that ends in another failure: the
    // second traceback alone is given up.
    let chained = parse_all([
        "THCudaCheck FAIL file=/pytorch/torch/lib/THC/generic/THCStorage.cu line=58 error=2 : out of memory",
        "Traceback (most recent call last):",
        "  File \"train.py\", line 381, in <module>",
        "    model = model.cuda()",
        "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/torch/lib/THC/generic/THCStorage.cu:58",
        "Traceback (most recent call last):",
        "  File \"train.py\", line 88, in <module>",
        "    train()",
        "RuntimeError: No executable batch size found, reached zero.",
    ]);
    let found: Vec<_> = chained.iter().map(|e| (e.framework, e.line, e.lines.len())).collect();
    assert_eq!(found, [("cuda", 1, 5), ("accelerate", 6, 4)]);
}

/// DataParallel's wrapper and the replica's own message after its original traceback are one
/// failure, from the wrapper's traceback; the wrapper alone (a paste cut after it) still is one.
#[test]
fn data_parallel_replica_failure() {
    let mut lines = vec![
        "Traceback (most recent call last):",
        "  File \"train.py\", line 8, in <module>",
        "    output = model(x)",
        "torch.OutOfMemoryError: Caught OutOfMemoryError in replica 0 on device 0.",
        "Original Traceback (most recent call last):",
    ];
    let frames =
        ["  File \"parallel_apply.py\", line 96, in _worker", "    output = module(*input, **kwargs)"];
    for _ in 0..20 {
        lines.extend(frames);
    }
    lines.push(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 63.98 GiB of which 350.00 MiB is free.",
    );
    let events = parse_all(lines.clone());
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!((events[0].line, events[0].fields.requested.is_some()), (1, true));
    let cut = parse_all(lines[..5].to_vec());
    assert_eq!(cut.len(), 1);
    assert_eq!((cut[0].kind.as_str(), cut[0].framework), ("cuda_oom", "pytorch"));
    // A paste that begins at the wrapper (the outer traceback cut off): the same, with or without
    // the replica's message.
    let headless = parse_all(lines[3..].to_vec());
    assert_eq!(headless.len(), 1, "{headless:?}");
    assert_eq!((headless[0].line, headless[0].fields.requested.is_some()), (1, true));
    let alone = parse_all(lines[3..5].to_vec());
    assert_eq!(kinds(&alone), [("cuda_oom", "pytorch", 1)]);
}

/// Several reports of one host-memory death (the shell's `Killed`, the scheduler's lines after
/// the job's output) are one failure.
#[test]
fn one_death_several_reports() {
    let mut lines = vec!["/zhome/.lsbatch/1.shell: line 14: 11577 Killed                  python main.py"];
    lines.extend(["job output"; 30]);
    lines.push("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.");
    lines.push("Exited with exit code 137.");
    assert_eq!(parse_all(lines).len(), 1);
    let slurm = [
        "srun: error: tiger-i23g11: task 0: Out Of Memory",
        "srun: Terminating job step 3955284.0",
        "slurmstepd: error: Detected 1 oom-kill event(s) in step 3955284.0 cgroup.",
    ];
    assert_eq!(parse_all(slurm).len(), 1);
}

/// What loggers, terminals and pastes add around a failure changes nothing: colours, a stamp on
/// every line (`kubectl logs --timestamps`, whose frames must still place the failure), quote
/// markers, and PaddlePaddle's native stack between Python's exception line and its message.
#[test]
fn decorations_change_nothing() {
    let plain = [
        "Traceback (most recent call last):",
        "  File \"train.py\", line 8, in <module>",
        "    model = AutoModelForCausalLM.from_pretrained(name).cuda()",
        "  File \"/x/torch/nn/modules/module.py\", line 1143, in convert",
        "    return t.to(device)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 7.79 GiB of which 3.00 MiB is free.",
        "",
    ];
    let summary = |events: Vec<ParsedOom>| -> Vec<(u64, Option<u64>, Option<Phase>)> {
        events.iter().map(|e| (e.line, e.fields.requested, e.phase.as_ref().map(|p| p.phase))).collect()
    };
    let want = summary(parse_all(plain));
    assert_eq!(want, [(1, Some(20 * MIB), Some(Phase::Load))]);
    let decorate = |f: &dyn Fn(&str) -> String| {
        let lines: Vec<String> = plain.iter().map(|l| f(l)).collect();
        summary(parse_all(lines.iter().map(String::as_str)))
    };
    assert_eq!(decorate(&|l| format!("2024-05-01T12:00:00.123456789Z {l}")), want, "stamped");
    assert_eq!(decorate(&|l| format!("\x1b[31m{l}\x1b[0m")), want, "coloured");
    assert_eq!(decorate(&|l| format!("> {l}")), want, "quoted");
    assert_eq!(decorate(&|l| format!("{l}\r")), want, "CRLF");
    assert_eq!(decorate(&|l| format!("    {l}")), want, "indented");
    assert_eq!(decorate(&|l| format!("\t{l}")), want, "indented with a tab");

    let paddle = parse_all([
        "  File \"model.py\", line 143, in forward",
        "    self.predictor.run()",
        "RuntimeError:",
        "",
        "--------------------------------------",
        "C++ Traceback (most recent call last):",
        "--------------------------------------",
        "0   paddle::AnalysisPredictor::ZeroCopyRun()",
        "1   paddle::framework::NaiveExecutor::Run()",
        "",
        "----------------------",
        "Error Message Summary:",
        "----------------------",
        "ResourceExhaustedError:",
        "",
        "Out of memory error on GPU 0. Cannot allocate 72.000000MB memory on GPU 0, 7.999390GB memory has been allocated and available memory is only 0.000000B.",
    ]);
    let found: Vec<_> =
        paddle.iter().map(|e| (e.framework, e.line, e.phase.as_ref().map(|p| p.phase))).collect();
    assert_eq!(found, [("paddle", 1, Some(Phase::Forward))]);
    // Numbered lines that are not native frames (a progress table) end another error's traceback.
    let table = parse_all([
        "Traceback (most recent call last):",
        "  File \"eval.py\", line 3, in <module>",
        "ValueError: bad config",
        "1   epoch 1 loss 2.0",
        "2   epoch 2 loss 1.9",
        "3   epoch 3 loss 1.8",
        "4   epoch 4 loss 1.7",
        "RuntimeError: CUDA error: out of memory",
    ]);
    let lines: Vec<_> = table.iter().map(|e| e.line).collect();
    assert_eq!(lines, [8]);
}

/// A line a terminal hard-wrapped inside a failure's words, or whose first part already speaks of
/// a failure, is one line again; a long line of other words lends the next line nothing.
#[test]
fn terminal_wrapped_lines() {
    let caffe = parse_all([
        "F1206 10:15:04.766489   447 syncedmem.cpp:56] Check failed: error == cudaSuccess (2 vs. 0)  out of m",
        "emory",
        "*** Check failure stack trace: ***",
    ]);
    let found: Vec<_> = caffe.iter().map(|e| (e.framework, e.line)).collect();
    assert_eq!(found, [("caffe", 1)]);
    let dlib = parse_all([
        "Error while calling cudaMalloc(&data, new_size*sizeof(float)) in file /home/ubuntu/dlib/dlib/dnn/gpu",
        "_data.cpp:191. code: 2, reason: out of memory",
    ]);
    assert_eq!(dlib.len(), 1);
    assert_eq!(dlib[0].line, 1);
    // A long line before a warning that retries: no failure.
    let warning = parse_all([
        "2024-05-01T12:00:00.123456789Z comfyui-rocm  | loading in lowvram mode 64.0 with the rest offloaded",
        "comfyui-rocm  | Warning: Ran out of memory when regular VAE decoding, retrying with tiled VAE decoding.",
    ]);
    assert!(warning.is_empty(), "{warning:?}");
    // A long line of other words whose cut split a program's failure words anywhere (not only
    // inside the few words a failure is known to be cut in): read with its piece — MXNet's pooled
    // storage manager cut inside its file name, `kubectl get pods` inside `OOMKilled`. Not when
    // the two read apart as they read together (the failure's words all in the second: a long
    // line before it lends it nothing), nor for a last-resort reading (a memory word and a
    // device's in any program's words).
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str, u64)]);
    let cases: [Case; 4] = [
        (
            &[
                "[12:44:34] /mxnet/dmlc-core/include/dmlc/./logging.h:304: [12:44:34] src/storage/./pooled_storage_ma",
                "nager.h:84: cudaMalloc failed: out of mem",
            ],
            &[("cuda_oom", "mxnet", 1)],
        ),
        (
            &[
                "kubeflow                    training-operator-8569f97489-zkxbt                            0/1     OO",
                "MKilled",
            ],
            &[("host_oom_kill", "kubernetes", 1)],
        ),
        // Apart as together: nothing.
        (
            &[
                "loaded partially; 0.00 MB usable, 0.00 MB loaded, 1344.02 MB offloaded, 162.01 MB buffer reserved, lowvram patches: 0",
                "Warning: Ran out of memory when regular VAE decoding, retrying with tiled VAE decoding.",
            ],
            &[],
        ),
        // Only a last-resort reading joined: nothing.
        (
            &[
                "1050981.0   dbrown         11/7  23:48 Job in status 2 put on hold by SYSTEM_PERIODIC_HOLD due to me",
                "mory usage 3000000.",
            ],
            &[],
        ),
    ];
    for (lines, want) in cases {
        assert_eq!(kinds(&parse_all(lines.iter().copied())), want, "{lines:?}");
    }
    // A host symptom whose words the wrap cut: matched on the line as it was.
    let ios = parse_all([
        "The app “SwiftMistralCoreML-DemoApp” has been killed by the operating system because it is using too much",
        " memory.",
    ]);
    assert_eq!(kinds(&ios), [("host_oom_kill", "ios", 1)]);
    let mpi = parse_all([
        "[c558-702.stampede.tacc.utexas.edu:mpispawn_0][child_handler] MPI process (rank: 0, pid: 39547) terminated",
        " with signal 9 -> abort job",
    ]);
    assert_eq!(mpi.len(), 1);
    assert_eq!(mpi[0].framework, "mpi");
    // A word wrap (at a space, as `rich` or a mail client wraps): the words joined with a space.
    let word_wrapped = parse_all([
        "RuntimeError: [enforce fail at ..\\c10\\core\\impl\\alloc_cpu.cpp:72] data. DefaultCPUAllocator: not",
        "enough memory: you tried to allocate 26214400 bytes.",
    ]);
    assert_eq!(kinds(&word_wrapped), [("host_oom_kill", "pytorch", 1)]);
    // A terminal's cut inside PyTorch's words of a host allocation: the size after the cut is the
    // failure's.
    let cut = parse_all([
        "RuntimeError: [enforce fail at CPUAllocator.cpp:68] . DefaultCPUAllocator: can't allocate memory: yo",
        "u tried to allocate 90177536 bytes.",
    ]);
    assert_eq!(kinds(&cut), [("host_oom_kill", "pytorch", 1)]);
    assert_eq!(cut[0].fields.requested, Some(90_177_536));
    // A wrap inside the failure's words after a line that already reads as one: the second piece
    // (a headless PyTorch message on its own) continues it.
    let engine = parse_all([
        "ERROR 03-19 10:55:18 [serving_chat.py:677] vllm.engine.multiprocessing.MQEngineDeadError: Engine",
        "loop is not running. Inspect the stacktrace to find the original error: OutOfMemoryError('CUDA out",
        "of memory. Tried to allocate 128.00 MiB. GPU 0 has a total capacity of 79.33 GiB of which 16.00 MiB",
        "is free. Process 36891 has 79.29 GiB memory in use. Of the allocated memory 69.59 GiB is allocated",
        "by PyTorch, and 118.89 MiB is reserved by PyTorch but unallocated.')",
    ]);
    assert_eq!(kinds(&engine), [("cuda_oom", "pytorch", 2)]);
    assert_eq!((engine[0].fields.requested, engine[0].fields.capacity.is_some()), (Some(128 * MIB), true));
    // A host symptom's own word cut in two.
    let databricks = parse_all([
        "com.databricks.backend.common.rpc.DriverStoppedException: Driver down cause: driver state change (ex",
        "it code: 137)",
    ]);
    let found: Vec<_> = databricks.iter().map(|e| (e.kind.as_str(), e.line)).collect();
    assert_eq!(found, [("host_oom_kill", 1)]);
    // DuckDB's CLI prints the error's type and its message on two lines: host memory, not a GPU's.
    let duck = parse_all([
        "Out of Memory Error:",
        "failed to allocate data of size 256.0 MiB (12.2 GiB/12.1 GiB used)",
    ]);
    assert_eq!(kinds(&duck), [("host_oom_kill", "duckdb", 2)]);
    // The TPU compiler's headline and its account of the memory: one failure; the account alone
    // (a paste cut before the headline) is one too.
    let tpu = [
        "RuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 16.26G of 15.48G hbm. Exceeded hbm capacity by 797.64M.",
        "",
        "Total hbm usage >= 16.78G:",
        "    reserved        530.00M",
        "    program          16.26G",
    ];
    assert_eq!(parse_all(tpu).len(), 1);
    assert_eq!(parse_all(tpu[2..].iter().copied()).len(), 1);
    // A long line that speaks of a kill, then a line of its own: nothing joined into a symptom.
    let two = parse_all([
        "INFO 2024-05-01 12:00:00 scheduler: the job killed last night was restarted on another node at 03:00",
        "137 tasks are queued",
    ]);
    assert!(two.is_empty(), "{two:?}");
}

/// Programs whose words no specific rule names still give an event (framework `other`), read by
/// what such reports have in common (`generic.rs`); what only looks like one gives none.
#[test]
fn unknown_programs_by_their_common_words() {
    // A process supervisor's report of SIGKILL, and a platform's memory quota, in words no rule
    // names (the specific rules' own test lines are elsewhere).
    assert_eq!(found(&["worker-3 finished: terminated by signal 9"]), [("host_oom_kill", "other", 1)]);
    assert_eq!(found(&["job 4412 ended (returncode=137), restarting"]), [("host_oom_kill", "other", 1)]);
    assert_eq!(
        found(&["app[web.1]: process exceeded its memory quota, stopping"]),
        [("host_oom_kill", "other", 1)]
    );
    // With a program's own report of the same death, the event keeps the program's name.
    assert_eq!(found(&["Command terminated by signal 9", "Exit code 137"]), [("host_oom_kill", "shell", 1)]);
    // A device allocation refused in a runtime's own words, and the size it asked for (a bare
    // number there is not a size).
    let device = parse_all(["[svc] fatal: failed to allocate 2.10 GiB on device 0 (HBM)"]);
    assert_eq!(
        device.iter().map(|e| (e.kind.as_str(), e.framework)).collect::<Vec<_>>(),
        [("cuda_oom", "other")]
    );
    assert_eq!(device[0].fields.requested, Some(21 * GIB / 10));
    let buffers = parse_all(["fatal: failed to allocate 2 buffers on the GPU"]);
    assert_eq!(buffers.len(), 1);
    assert_eq!(buffers[0].fields.requested, None);
    // Not failures: a logger's warning, a retry, advice, a command, a timeout's kill, a dump's field.
    for quiet in [
        "[W906 15:02:06.204334026 Allocator.cpp:39] memory allocation failed with OOM on device 0",
        "2024-05-01 12:00:00,123 - WARNING - GPU allocation failed, retrying with a smaller tile",
        "If you run out of GPU memory, lower the resolution",
        "run `kill -9 <pid>` if the worker hangs",
        "worker 12 timed out after 600 s, sending SIGKILL",
        "ExitCode:137,",
        "epoch 137: loss 0.23, 9 samples skipped",
    ] {
        assert_eq!(found(&[quiet]), [], "{quiet}");
    }
    // A program explaining the failure it just reported (RELION after its allocator's error): one
    // failure, not two.
    let relion = [
        "ERROR: HipCustomAllocator out of memory",
        "[requestedSpace:             9223372036854775808 B]",
        "ERROR:",
        "You ran out of memory on the GPU(s).",
    ];
    assert_eq!(found(&relion).len(), 1);
    // A runtime's host allocation refused, in words that name the host's side; after a GPU
    // failure the same words are its echo (an encoder's `Cannot allocate memory` after the
    // driver's refusal), not a host failure of their own.
    assert_eq!(found(&["OSError: [Errno 12] Cannot allocate memory"]), [("host_oom_kill", "python", 1)]);
    assert_eq!(
        found(&["Arrow: ValueOrDie called on an error: Out of memory: malloc of size 262144 failed"]),
        [("host_oom_kill", "other", 1)]
    );
    assert_eq!(
        found(&[
            "[h264_nvenc @ 0x55d5c8a3c340] OpenEncodeSessionEx failed: out of memory (10)",
            "E0315 05:59:16.328900 1048 ffmpeg.go:364] Transcoder Return : Cannot allocate memory",
        ]),
        [("cuda_oom", "cuda", 1)]
    );
    // A logger's own lines each begin as it begins them: the second is not the first's wrap.
    assert_eq!(
        found(&[
            "07-14 12:31:55.677 29475 29540 D Unity   : Allocation happend at: Line:113 in /Users/builduser/unity/build/Runtime/RingBufferMemoryFileData.cpp",
            "07-14 12:31:55.677 29475 29542 D Unity   : Could not allocate memory: System out of memory!",
        ]),
        [("host_oom_kill", "other", 2)]
    );
    // Ray re-raising a task's failure whose call names the GPU: a PyTorch OOM whose own message
    // the paste cut off.
    assert_eq!(
        found(&[
            "Traceback (most recent call last):",
            "  File \"/app/orz/ppo/trainer.py\", line 1289, in _backload_vllm_engines",
            "    await asyncio.gather(*backload_tasks)",
            "ray.exceptions.RayTaskError(OutOfMemoryError): ray::LLMActor.backload_to_gpu() (pid=11992, ip=10.148.9.90)",
        ]),
        [("cuda_oom", "pytorch", 1)]
    );
    // Whatever the call's name: an actor's own exception, PyTorch's on a GPU worker.
    assert_eq!(
        found(&[
            "    raise value.as_instanceof_cause()",
            "ray.exceptions.RayTaskError(OutOfMemoryError): ray::MegatronTrainRayActor.train() (pid=2025282, ip=10.252.197.29)",
        ]),
        [("cuda_oom", "pytorch", 2)]
    );
    // An actor that waited on a task Ray's memory monitor killed: the host's memory, once.
    assert_eq!(
        found(&[
            "ray.exceptions.RayTaskError(OutOfMemoryError): ray::Learner.step() (pid=4331, ip=192.168.0.107)",
            "  File \"/app/learner.py\", line 40, in step",
            "    ray.get(refs)",
            "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
        ]),
        [("host_oom_kill", "ray", 1)]
    );
}

/// A CI log names tests for what they test; the names are not failures. A failing test's own
/// traceback and pytest's summary of its reason still are: one event each.
#[test]
fn test_names_are_not_failures() {
    let green = [
        "============================= test session starts ==============================",
        "tests/test_manager.py::TestStop::test_stop_command_uses_sigterm_before_sigkill PASSED [ 30%]",
        "tests/test_oom.py::test_cuda_out_of_memory_is_reported PASSED          [ 31%]",
        "test_out_of_memory_retry (__main__.TestCuda.test_out_of_memory_retry) ... ok",
        "[ RUN      ] BfcAllocatorTest.OutOfMemoryReturnsNull",
        "[       OK ] BfcAllocatorTest.OutOfMemoryReturnsNull (0 ms)",
        "--- PASS: TestContainerOOMKilledExitCode137 (0.02s)",
        "test runtime::tests::exit_status_137_is_sigkill ... ok",
    ];
    assert!(found(&green).is_empty(), "{:?}", found(&green));
    let red = [
        "tests/test_train.py::test_big_batch FAILED                              [ 50%]",
        "=================================== FAILURES ===================================",
        "________________________________ test_big_batch ________________________________",
        "E       torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.77 GiB of which 1.10 GiB is free.",
        "=========================== short test summary info ============================",
        "FAILED tests/test_data.py::test_load_all - MemoryError",
    ];
    assert_eq!(found(&red), [("cuda_oom", "pytorch", 4), ("host_oom_kill", "python", 6)]);
}

/// The source line a traceback shows for the `raise` is code, not a second report; a paste that
/// ran it together with the exception line is still the report.
#[test]
fn a_raise_in_the_traceback_is_not_a_second_failure() {
    let events = parse_all([
        "Traceback (most recent call last):",
        "  File \"/usr/local/lib/python3.12/dist-packages/vllm/worker/worker.py\", line 493, in raise_if_cache_size_invalid",
        "    raise ValueError(\"No available memory for the cache blocks. \"",
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
    ]);
    assert_eq!(kinds(&events), [("cuda_oom", "vllm", 1)]);
    let joined = parse_all([
        "raise ValueError(\"No available memory for the cache blocks. \" ValueError: No available memory for the cache blocks.",
    ]);
    assert_eq!(joined.len(), 1);
}

/// Formats met first in a later collection round: each one failure, read as the program's.
#[test]
fn formats_of_a_later_round() {
    /// Lines, and the one failure they are: kind, framework, first line.
    type Case = (&'static [&'static str], (&'static str, &'static str, u64));
    let cases: [Case; 6] = [
        (
            &[
                "libc++abi: terminating due to uncaught exception of type std::runtime_error: [malloc_or_wait] Unable to allocate 9663676416 bytes.",
            ],
            ("cuda_oom", "mlx", 1),
        ),
        (
            &[
                "[ERROR] RUNTIME(29167,mindie_llm_backend_connector):2025-04-27-07:23:17.709.105 [npu_driver.cc:1274]29953 DevMemAllocManaged:[INIT][DEFAULT][drv api] halMemAlloc failed:size=32(Byte), type=17, moduleId=3, drvFlag=216172782156776448, drvRetCode=6, device_id=0!",
                "[ERROR] RUNTIME(29167,mindie_llm_backend_connector):2025-04-27-07:23:17.709.121 [api_error.cc:1052]29953 DevMalloc:[INIT][DEFAULT]Device malloc failed, size=32(Byte), type=17.",
            ],
            ("cuda_oom", "ascend", 1),
        ),
        (
            &[
                "2022-10-10 10:05:28.0893026 [E:onnxruntime:, inference_session.cc:1484 onnxruntime::InferenceSession::Initialize] Exception during initialization: D:\\a\\_work\\1\\s\\onnxruntime\\core\\providers\\dml\\DmlExecutionProvider\\src\\BucketizedBufferAllocator.cpp(122)\\onnxruntime_pybind11_state.pyd!00007FFA82D145C8: (caller: 00007FFA8336D326) Exception(1) tid(4790) 8007000E Not enough memory resources are available to complete this operation.",
            ],
            ("cuda_oom", "directml", 1),
        ),
        (
            &[
                "2021-07-08 01:27:55.7944269 [E:onnxruntime:, sequential_executor.cc:339 onnxruntime::SequentialExecutor::Execute] Non-zero status code returned while running Conv node. Name:'347_nchwc' Status Message: D:\\a\\_work\\1\\s\\onnxruntime\\core\\framework\\bfc_arena.cc:330 onnxruntime::BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer of size 285081600",
            ],
            ("host_oom_kill", "onnxruntime", 1),
        ),
        (
            &[
                "/x/share/lua/5.1/nn/THNN.lua:109: $ Torch: not enough memory: you tried to reallocate 36GB. Buy new RAM! at /x/torch/lib/TH/THGeneral.c:251",
            ],
            ("host_oom_kill", "pytorch", 1),
        ),
        // Torch7: the C check's line, then the same error raised through Lua's layers.
        (
            &[
                "THCudaCheck FAIL file=/tmp/luarocks_cutorch-scm-1-6130/cutorch/lib/THC/generic/THCStorage.cu line=40 error=2 : out of memory",
                "/home/u/torch/install/bin/luajit: /home/u/torch/install/share/lua/5.1/nn/Container.lua:67: ",
                "In 2 module of nn.Sequential:",
                "In 1 module of nn.Sequential:",
                "In 5 module of cudnn.BatchBRNNReLU:",
                "/home/u/torch/install/share/lua/5.1/cudnn/RNN.lua:308: cuda runtime error (2) : out of memory at /tmp/luarocks_cutorch-scm-1-6130/cutorch/lib/THC/generic/THCStorage.cu:40",
                "stack traceback:",
            ],
            ("cuda_oom", "cuda", 1),
        ),
    ];
    for (lines, want) in cases {
        assert_eq!(found(lines), [want], "{lines:?}");
    }
    // PaddlePaddle's operator reports its allocator's exception, then the message: one failure.
    let paddle = parse_all([
        "W0713 16:34:31.576385   221 operator.cc:242] roi_align raises an exception paddle::memory::allocation::BadAlloc, ResourceExhaustedError: ",
        "",
        "Out of memory error on GPU 0. Cannot allocate 48.473877MB memory on GPU 0, 7.900513GB memory has been allocated and available memory is only 29.437500MB.",
        "Please check whether there is any other process using GPU 0.",
    ]);
    assert_eq!(kinds(&paddle), [("cuda_oom", "paddle", 1)]);
    assert!(paddle[0].fields.requested.is_some());
    // Pinned host buffers llama.cpp falls back from are no failures.
    assert!(
        found(&["ggml_cuda_host_malloc: failed to allocate 349659.17 MiB of pinned memory: out of memory"])
            .is_empty()
    );
    // Wav2Lip's face detector gave up after halving its batch to one frame: its batch search is
    // exhausted. The retries on the way down are not failures.
    let wav2lip = parse_all([
        "Recovering from OOM error; New batch size: 8",
        "Recovering from OOM error; New batch size: 4",
        "RuntimeError: Image too big to run face detection on GPU. Please use the --resize_factor argument",
    ]);
    assert_eq!(kinds(&wav2lip), [("cuda_oom", "pytorch", 3)]);
    assert_eq!(wav2lip[0].hint, Some("batch_search_exhausted"));
    // Ascend's driver line hard-wrapped in three pieces, its return code in the last: the
    // driver's allocation is the device's, not the C library's `malloc failed`.
    let ascend = wrap(
        "[ERROR] RUNTIME(29167,mindie_llm_backend_connector):2025-04-27-07:23:17.709.105 [npu_driver.cc:1274]29953 DevMemAllocManaged:[INIT][DEFAULT][drv api] halMemAlloc failed:size=32(Byte), type=17, moduleId=3, drvFlag=216172782156776448, drvRetCode=6, device_id=0!",
        100,
    );
    assert_eq!(ascend.len(), 3);
    assert_eq!(kinds(&parse_all(ascend.iter().map(String::as_str))), [("cuda_oom", "ascend", 1)]);
}

/// Formats met first in the round after version 19's rules were fixed (records of the corpus):
/// each one failure, read as the program's, with the numbers it gives.
#[test]
fn formats_of_the_round_after_version_19() {
    type Case = (&'static [&'static str], (&'static str, &'static str, u64));
    let cases: [Case; 29] = [
        (&["out of memory at /pytorch/torch/lib/THC/generic/THCStorage.cu:58"], ("cuda_oom", "cuda", 1)),
        (
            &[
                "terminate called after throwing an instance of 'thrust::system::system_error'  what():  /home/ubuntu/src/xgboost/src/tree/../common/device_helpers.cuh(456): out of memory",
            ],
            ("cuda_oom", "xgboost", 1),
        ),
        (&["[W dml_heap_allocator.cc:97] DML allocator out of memory!"], ("cuda_oom", "directml", 1)),
        (
            &[
                "/home/torch/install/share/lua/5.1/cudnn/find.lua:503: No algorithms found that would fit in free GPU memory",
            ],
            ("cuda_oom", "cudnn", 1),
        ),
        (
            &[
                "[GPU] Exceeded max size of memory object allocation: requested 2305843008391495680 bytes, but max alloc size supported by device is 4294959104 bytes.Please try to reduce batch size or use lower precision.",
            ],
            ("cuda_oom", "openvino", 1),
        ),
        (&["Error Type: oneflow.ErrorProto.out_of_memory_error"], ("cuda_oom", "oneflow", 1)),
        (
            &[
                "Exception: Failed to run the cardinality estimation query: Query couldn't keep the entire working set of columns in GPU memory",
            ],
            ("cuda_oom", "heavydb", 1),
        ),
        (&["Exception: Not enough host memory to execute the query"], ("host_oom_kill", "heavydb", 1)),
        (
            &[
                "2021-08-31 08:43:31.755090: W tensorflow/core/framework/op_kernel.cc:1767] OP_REQUIRES failed at custom_op.cc:12 : Resource exhausted: Operation received an exception: DeePMD-kit OOM: CUDA Assert, in file /tmp/pip-req-build-8xtytcha/source/op/custom_op.cc:12",
            ],
            ("cuda_oom", "deepmd", 1),
        ),
        // TensorRT 7's builder: the refused allocation, then the tactic search's failure (one).
        (
            &[
                "[TensorRT] ERROR: ../rtSafe/WeightsPtr.cpp (92) - OutOfMemory Error in allocate: 0",
                "[TensorRT] ERROR: Out of memory error during getBestTactic: [FULLY_CONNECTED #1] torch.nn.functional.linear(tensor(shape=[1, 9216], dtype=torch.float32))",
                "[TensorRT] ERROR: Try increasing the workspace size with IBuilderConfig::setMaxWorkspaceSize() if using IBuilder::buildEngineWithConfig, or IBuilder::setMaxWorkspaceSize() if using IBuilder::buildCudaEngine.",
            ],
            ("cuda_oom", "tensorrt", 1),
        ),
        (
            &[
                "[torch_memory_saver.cpp] CUresult error: 2 (out of memory) file=csrc/utils.h func=cu_mem_create line=187",
            ],
            ("cuda_oom", "cuda", 1),
        ),
        (
            &[
                "[TensorRT-LLM][ERROR] maxTokensInPagedKvCache must be large enough to process at least 1 sequence to completion (i.e. must be larger than beam_width * tokensPerBlock * maxBlocksPerSeq)",
            ],
            ("cuda_oom", "tensorrt-llm", 1),
        ),
        (&["Insufficient graphics memory for this model!"], ("cuda_oom", "other", 1)),
        (&["WanVideoSampler Allocation on device"], ("cuda_oom", "pytorch", 1)),
        (&["[*** LOG ERROR #0001 ***] [2024-10-06 17:11:03] [] std::bad_alloc"], ("host_oom_kill", "c++", 1)),
        (
            &[":: Lookup embeddings and tokens (this might take a while) :: Killed"],
            ("host_oom_kill", "shell", 1),
        ),
        (&["RuntimeError: memory error in alloc"], ("cuda_oom", "nnabla", 1)),
        (&["  temporary_buffer::allocate: get_temporary_buffer failed"], ("cuda_oom", "cuda", 1)),
        (
            &["MemoryError: std::bad_alloc: temporary_buffer::allocate: get_temporary_buffer failed"],
            ("cuda_oom", "cuda", 1),
        ),
        (&["mujoco.FatalError: Could not allocate memory"], ("host_oom_kill", "mujoco", 1)),
        (
            &["OSError: (External) XPU API return wrong value[-705], no enough memory"],
            ("cuda_oom", "kunlun", 1),
        ),
        (&["ioctl() fail, (705) Device memory not enough"], ("cuda_oom", "kunlun", 1)),
        (
            &["ExternalError: XPU conv kernel return wrong value[3 xpu api no enough workspace]"],
            ("cuda_oom", "kunlun", 1),
        ),
        (
            &[
                "[2025-11-25 17:23:11,888] [249] [281471718846752] [llm] [ERROR] [logging.py-348] : Warmup failed, because of multimodal model inference out of memory when `maxInputTokenLen` set to 8192. Please try to decrease `maxPrefillTokens` in config.json of mindie-service.",
            ],
            ("cuda_oom", "mindie", 1),
        ),
        (
            &["2020-03-18:02:42:10,608 ERROR    [client.py:71] out of memory: CPU2GPU:1"],
            ("cuda_oom", "milvus", 1),
        ),
        (&["error: 'hipErrorMemoryAllocation'(1002) at src/caffe/syncedmem.cpp:56"], ("cuda_oom", "hip", 1)),
        (&["State: OUT_OF_MEMORY (exit code 0)"], ("host_oom_kill", "slurm", 1)),
        (
            &["[JOBID].0    python3.12               default          1 OUT_OF_ME+    0:125"],
            ("host_oom_kill", "slurm", 1),
        ),
        (&["srun: error: gpu001: task 0: Out Of Memory"], ("host_oom_kill", "slurm", 1)),
    ];
    for (lines, want) in cases {
        assert_eq!(found(lines), [want], "{lines:?}");
    }
    // torch_npu's message in other words, with its figures.
    let npu = parse_all([
        "RuntimeError: NPU memory is insufficient. Attempting to allocate 386.00 MiB (NPU 1; total capacity 29.49 GiB; allocated 28.90 GiB; currently active 28.90 GiB; free 171.96 MiB; PyTorch has reserved a total of 28.95 GiB). If the reserved memory is significantly larger than the allocated memory, try setting max_split_size_mb to avoid memory fragmentation.",
    ]);
    assert_eq!(kinds(&npu), [("cuda_oom", "pytorch", 1)]);
    let f = &npu[0].fields;
    assert_eq!((f.gpu, f.requested.is_some(), f.capacity.is_some()), (Some(1), true, true));
    assert!(f.allocated.is_some() && f.free.is_some() && f.reserved.is_some(), "{f:?}");
    // TensorFlow's account of the device after cuDNN could not start: a full device is a memory
    // failure with its figures; a device with room is not.
    let full = parse_all([
        "13:32:23.430 [error] Could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR",
        "13:32:23.430 [error] Memory usage: 433717248 bytes free, 25351290880 bytes total.",
    ]);
    assert_eq!(full.len(), 1);
    assert_eq!((full[0].fields.free, full[0].fields.capacity), (Some(433_717_248), Some(25_351_290_880)));
    assert!(
        found(&[
            "E tensorflow/stream_executor/cuda/cuda_dnn.cc:329] Could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR",
            "E tensorflow/stream_executor/cuda/cuda_dnn.cc:337] Memory usage: 20000000000 bytes free, 25351290880 bytes total.",
        ])
        .is_empty()
    );
    // The kernel's OOM killer naming a process whose name speaks of a device is no device's
    // failure (its `Killed process` line is the kernel reader's, `kernel.rs`).
    assert!(
        found(&["[   80.743300] Out of memory: Kill process 2700 (DeviceMemory) score 1 or sacrifice child"])
            .is_empty()
    );
    // C++'s two `terminate` lines flattened onto one.
    assert_eq!(
        found(&["terminate called after throwing an instance of 'std::bad_alloc'  what():  std::bad_alloc"]),
        [("host_oom_kill", "c++", 1)]
    );
}

#[test]
fn formats_of_round_20() {
    // llama.cpp's Metal backend before it named the reason: a failed command buffer after its
    // warning that the buffers passed the GPU's recommended working set is out of memory…
    let metal = parse_all([
        "ggml_metal_add_buffer: allocated 'data' buffer, size =   160.00 MB, (12018.69 / 10922.67), warning: current allocated size is greater than the recommended max working set size",
        "llama_new_context_with_model: kv self size  = 1600.00 MB",
        "ggml_metal_graph_compute: command buffer 0 failed with status 5",
        "GGML_ASSERT: ggml-metal.m:1177: false",
    ]);
    assert_eq!(kinds(&metal), [("cuda_oom", "llama.cpp", 3)]);
    // …but without the warning the status alone (a timeout, a fault) is not.
    assert!(found(&["ggml_metal_graph_compute: command buffer 0 failed with status 5"]).is_empty());
    // …nor long after it.
    let mut far = vec![
        "ggml_metal_add_buffer: allocated 'data' buffer, size =   160.00 MB, (12018.69 / 10922.67), warning: current allocated size is greater than the recommended max working set size",
    ];
    far.extend(std::iter::repeat_n("llama_print_timings: eval time = 1.00 ms", 600));
    far.push("ggml_metal_graph_compute: command buffer 0 failed with status 5");
    assert!(parse_all(far).is_empty());
    // OpenVINO's GPU plugin over what is left of an integrated GPU's share: its figures.
    let ov = parse_all([
        "2025-07-07T11:59:48Z deepseek-r1.server[17974]: [GPU] Exceeded max size of memory allocation: Required 8257536 bytes, already occupied : 7927400508 bytes, but available memory size is 7927406592 bytes",
    ]);
    assert_eq!(kinds(&ov), [("cuda_oom", "openvino", 1)]);
    let f = &ov[0].fields;
    assert_eq!((f.requested, f.capacity, f.free), (Some(8_257_536), Some(7_927_406_592), Some(6_084)));
    // TVM's Relax VM (MLC-LLM): a buffer larger than its planned storage region.
    let tvm = parse_all([
        "[05:04:00] /x/3rdparty/tvm/src/runtime/relax_vm/memory_manager.cc:115: InternalError: Check failed: (offset + needed_size <= this->buffer.size) is false: storage allocation failure, attempted to allocate 16785408 at offset 0 in region that is 16777216bytes",
    ]);
    assert_eq!(kinds(&tvm), [("cuda_oom", "tvm", 1)]);
    assert_eq!(tvm[0].fields.requested, Some(16_785_408));
    // vLLM's start-up check wrapped by hand after `on startup`: one failure, its figures and
    // the start-up phase from both lines.
    let vllm = parse_all([
        "ValueError: Free memory on device cuda:0 (30.12/31.84 GiB) on startup",
        "is less than desired GPU memory utilization (0.95, 30.25 GiB).",
    ]);
    assert_eq!(kinds(&vllm), [("cuda_oom", "vllm", 1)]);
    assert!(vllm[0].fields.requested.is_some() && vllm[0].fields.free.is_some(), "{:?}", vllm[0].fields);
    // ExLlama v3's wording of its load-time check names the model's placement as v2's does.
    for line in [
        "RuntimeError: Insufficient VRAM for model and cache",
        "RuntimeError: Insufficient VRAM in split for model and cache",
    ] {
        let e = parse_all([line]);
        assert_eq!((e.len(), e[0].hint), (1, Some("model_load")), "{line}");
        assert_eq!(e[0].phase.as_ref().map(|p| p.phase), Some(crate::Phase::Load), "{line}");
    }
}
