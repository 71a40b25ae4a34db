"""Making models (CPython only, never in the browser archive): the random-weight GGUF generator
(`makemodel`, the `make-model` command), the GGUF writer (`gguf_writer`), tokenizer metadata
builders (`vocab`), and the default model's chat tasks (`tasks`) with their held-out evaluation
(`evaluate`), which training/ and the `eval` command use."""
