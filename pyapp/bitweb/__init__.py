"""bitweb: BitNet b1.58 on WebGPU from Python (Pyodide in the browser, wgpu-py natively).

BROWSER_MODULES are what the browser's Pyodide loads: tools/build_web.py zips exactly these (and
shaders/*.wgsl) into build/web/bitweb.zip. They use the standard library only (numpy at most
inside CPython-only methods, e.g. formats' pack / dequantize); tests/test_layout.py imports each
with every other package blocked. Everything else is CPython only: commands/ (the CLI),
authoring/ (model generator, GGUF writer, vocabularies, the default model's tasks and their
evaluation), numpy_model (the numpy forward pass), ref/ (numpy mirrors of the kernels and their
cases), gpu.native (wgpu-py).
"""
__version__ = "0.1.0"

# module names under bitweb; "kernels.*": the package and every module in it
BROWSER_MODULES = ("bench", "blob", "blocks", "chat", "completions", "decoding", "engine", "errors", "formats.*", "generation",
                   "gguf", "gpu", "gpu.browser", "gpu.caps", "gpu.errors", "gpu.pipelines", "grammar.*",
                   "floor", "kernel_check", "kernels.*", "model", "options", "sampling", "shaders", "slot", "speculative", "speculative_bench",
                   "structured",
                   "tokenizer", "tokenizer_pre", "upload", "webapp")
