"""etch for Python: run etch programs through the C library, with the standard library only (ctypes).

    from etch import ETModelForCausalLM
    m = ETModelForCausalLM.from_pretrained("model.etch")        # or a Hugging Face folder, or a .gguf
    print(m.text_generation("Once upon a time", max_seq_len=64))  # the prompt followed by the generation
    for tok in m.generate("Once upon a time", max_new_tokens=16):
        print(tok.text, end="", flush=True)
    other = m.session()                                           # a second conversation, its own KV cache
    r = m.chat([{"role": "user", "content": "Hi"}])               # llama-cpp-python's chat completion dict

The shape follows optimum-executorch's ExecuTorchModelForCausalLM: from_pretrained, text_generation
(where max_seq_len counts prompt and generated tokens together), forward(tokens, start_pos),
method_meta(). Errors raise EtchError carrying etch's own message; bad arguments raise ValueError or
TypeError naming them.

The shared library is found through the environment variable ETCH_LIBRARY (a path to libetch.so),
else the copy pip built into the package, else beside the package as `cmake --install` lays it out,
else on the system's library path.
"""

from ._lib import EtchError
from .model import (ETModelForCausalLM, ExecuTorchModelForCausalLM, Generation, Session, Token, library_version,
                    set_memory_budget)

__all__ = ["ETModelForCausalLM", "ExecuTorchModelForCausalLM", "EtchError", "Generation", "Session", "Token",
           "library_version", "set_memory_budget"]
