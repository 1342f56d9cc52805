"""The local demo target: llama.cpp's ``llama-server`` with SmolLM2-135M on the CPU.

Leaf modules, imported by name (this package re-exports nothing):

* ``target``  -- ``prepare_target()``: the binary and the model, smoke-tested together;
* ``server``  -- ``LlamaServer``: start on a free loopback port, stop on every way out;
* ``build``   -- ``build_llama_server()``: the one-time portable build into the cache;
* ``model``   -- ``ensure_gguf()``: the SmolLM2-135M-Instruct Q4_1 GGUF, fetched once;
* ``steps``   -- the cache dir, locks, logged subprocesses, progress line, errors.
"""
