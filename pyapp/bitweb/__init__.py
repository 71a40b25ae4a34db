"""bitweb: BitNet b1.58 on WebGPU from Python (Pyodide in the browser, wgpu-py natively).

Modules that run in Pyodide (stdlib only): gguf, formats (specs), tokenizer,
chat, sampling, model, engine, gpu. numpy is used only by CPython-side code
(format pack/dequantize, the numpy model, the generator, tests).
"""
__version__ = "0.1.0"
