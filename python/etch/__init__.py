"""etch for Python: run etch programs through the C library, with the standard library only (ctypes).

    from etch import ETModelForCausalLM
    m = ETModelForCausalLM.from_pretrained("model.etch")        # or a Hugging Face folder, or a .gguf
    print(m.text_generation("Once upon a time", max_seq_len=64))  # the prompt followed by the generation
    for tok in m.generate("Once upon a time", max_new_tokens=16):
        print(tok.text, end="", flush=True)

The shape follows optimum-executorch's ExecuTorchModelForCausalLM: from_pretrained, text_generation
(where max_seq_len counts prompt and generated tokens together), forward(tokens, start_pos),
method_meta(). Errors raise EtchError carrying etch's own message.

The shared library is found through the environment variable ETCH_LIBRARY (a path to libetch.so),
else beside this package as `cmake --install` lays it out (lib/python3/dist-packages/etch next to
lib/libetch.so.0), else on the system's library path.
"""

import array
import ctypes
import ctypes.util
import hashlib
import json
import os
from collections import namedtuple

__all__ = ["ETModelForCausalLM", "EtchError", "Token", "library_version"]

class EtchError(Exception):
    """An error from etch: .status is the etch_status code, str() is etch's message."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.status_name = _c().etch_status_string(status).decode()


Token = namedtuple("Token", ["id", "text"])


# ---------------------------------------------------------------- the C structures (include/etch.h)

class _Error(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("message", ctypes.c_char * 1024)]


class _MethodMeta(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("max_seq_len", "max_context_len", "use_kv_cache",
                                               "enable_dynamic_shape", "bos_id", "n_eos")] + \
               [("eos_ids", ctypes.POINTER(ctypes.c_int32))] + \
               [(n, ctypes.c_int32) for n in ("vocab_size", "n_layers", "n_heads", "n_kv_heads", "head_dim",
                                               "dim", "hidden_dim")] + \
               [("norm_eps", ctypes.c_float), ("rope_base", ctypes.c_float), ("tied_embeddings", ctypes.c_int32)] + \
               [(n, ctypes.c_char_p) for n in ("arch", "dtype", "rope_style", "tokenizer", "model_type",
                                                "chat_template")] + \
               [("sliding_window", ctypes.c_int32), ("n_window_layers", ctypes.c_int32),
                ("layer_window", ctypes.POINTER(ctypes.c_int32)), ("kv_cache_bytes", ctypes.c_int64),
                ("kv_cache_full_bytes", ctypes.c_int64)]


class _GenerateConfig(ctypes.Structure):
    _fields_ = [("max_new_tokens", ctypes.c_int32), ("temperature", ctypes.c_float), ("top_k", ctypes.c_int32),
                ("top_p", ctypes.c_float), ("seed", ctypes.c_uint64), ("prefill", ctypes.c_int),
                ("add_bos", ctypes.c_int)]


class _ExportOptions(ctypes.Structure):
    _fields_ = [("max_context_len", ctypes.c_int32), ("max_seq_len", ctypes.c_int32), ("dtype", ctypes.c_char_p),
                ("chat_template", ctypes.c_char_p), ("progress", ctypes.c_void_p), ("progress_user", ctypes.c_void_p)]


class _ChatOptions(ctypes.Structure):
    _fields_ = [("system", ctypes.c_char_p), ("think", ctypes.c_int), ("template_name", ctypes.c_char_p)]


def _find_library():
    env = os.environ.get("ETCH_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libetch.so.0", "libetch.so"):
        candidate = os.path.normpath(os.path.join(here, "..", "..", "..", name))
        if os.path.exists(candidate):
            return candidate
    found = ctypes.util.find_library("etch")
    if found:
        return found
    raise OSError("libetch not found: set ETCH_LIBRARY to the path of libetch.so, or install etch with cmake --install")


def _load():
    lib = ctypes.CDLL(_find_library())
    P, I, S, E = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.POINTER(_Error)
    sig = {
        "etch_version": (ctypes.c_char_p, []),
        "etch_status_string": (ctypes.c_char_p, [I]),
        "etch_program_open": (I, [ctypes.c_char_p, ctypes.POINTER(P), E]),
        "etch_program_close": (None, [P]),
        "etch_program_meta": (ctypes.POINTER(_MethodMeta), [P]),
        "etch_session_new": (I, [P, ctypes.POINTER(P), E]),
        "etch_session_free": (None, [P]),
        "etch_session_error": (ctypes.c_char_p, [P]),
        "etch_forward": (I, [P, ctypes.POINTER(ctypes.c_int32), ctypes.c_int32, ctypes.c_int32,
                             ctypes.POINTER(ctypes.c_float), I]),
        "etch_tokenize": (I, [P, ctypes.c_char_p, S, I, ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)),
                              ctypes.POINTER(ctypes.c_int32), E]),
        "etch_detokenize": (I, [P, ctypes.POINTER(ctypes.c_int32), ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p),
                                ctypes.POINTER(S), E]),
        "etch_free": (None, [P]),
        "etch_generate_config_default": (None, [ctypes.POINTER(_GenerateConfig)]),
        "etch_generate_start": (I, [P, ctypes.c_char_p, ctypes.POINTER(_GenerateConfig)]),
        "etch_generate_next": (I, [P, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(S)]),
        "etch_generate_stop": (None, [P]),
        "etch_session_stats": (P, [P]),
        "etch_stats_observer_line": (I, [P, ctypes.c_char_p, S]),
        "etch_chat_render": (I, [P, ctypes.c_char_p, ctypes.POINTER(_ChatOptions), ctypes.POINTER(ctypes.c_void_p), E]),
        "etch_export_hf": (I, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_ExportOptions), E]),
        "etch_export_gguf": (I, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_ExportOptions), E]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


_lib = None


def _c():
    global _lib
    if _lib is None:
        _lib = _load()
    return _lib


def library_version():
    """The version of the libetch in use, e.g. "0.1.0"."""
    return _c().etch_version().decode()


def _check(status, err):
    if status != 0:
        raise EtchError(status, err.message.decode("utf-8", "replace"))


def _cache_dir():
    return os.environ.get("ETCH_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "etch")


def _export_key(path, opts):
    """A name for the exported program: the source's path, size and mtime, and the options."""
    parts = [os.path.abspath(path)]
    files = [path] if os.path.isfile(path) else sorted(os.path.join(path, f) for f in os.listdir(path))
    for f in files:
        st = os.stat(f)
        parts.append("%s:%d:%d" % (f, st.st_size, st.st_mtime_ns))
    parts.append(json.dumps(opts, sort_keys=True))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


class ETModelForCausalLM:
    """A program with one session. Not safe to share between threads; make one per thread (the
    program file is mapped, so several instances cost little besides their KV caches)."""

    def __init__(self, program_path):
        c = _c()
        err = _Error()
        self._prog = ctypes.c_void_p()
        self._sess = ctypes.c_void_p()
        _check(c.etch_program_open(os.fsencode(program_path), ctypes.byref(self._prog), ctypes.byref(err)), err)
        status = c.etch_session_new(self._prog, ctypes.byref(self._sess), ctypes.byref(err))
        if status != 0:
            c.etch_program_close(self._prog)
            self._prog = ctypes.c_void_p()
            _check(status, err)
        self.path = program_path
        self._meta = c.etch_program_meta(self._prog).contents

    @classmethod
    def from_pretrained(cls, path, *, max_seq_len=None, max_context_len=None, dtype=None, chat_template=None,
                        cache_dir=None):
        """Opens a program file, or exports a Hugging Face folder or a GGUF file on first use into a
        cache folder ($ETCH_CACHE_DIR, else ~/.cache/etch) and opens the result. Export options:
        max_seq_len (the forward bound), max_context_len, dtype ("f32", "f16", "bf16"), chat_template."""
        if not os.path.exists(path):
            raise EtchError(2, "%s: cannot open: no such file or folder" % path)
        if os.path.isfile(path) and not path.endswith(".gguf"):
            with open(path, "rb") as f:
                if f.read(8) == b"ETCHPROG":
                    return cls(path)
        opts = {"max_seq_len": max_seq_len, "max_context_len": max_context_len, "dtype": dtype,
                "chat_template": chat_template}
        cache = cache_dir or _cache_dir()
        os.makedirs(cache, exist_ok=True)
        out = os.path.join(cache, _export_key(path, opts) + ".etch")
        if not os.path.exists(out):
            eo = _ExportOptions(max_context_len or -4096, max_seq_len or 0, dtype.encode() if dtype else None,
                                chat_template.encode() if chat_template else None, None, None)
            err = _Error()
            c = _c()
            if os.path.isdir(path):
                status = c.etch_export_hf(os.fsencode(path), os.fsencode(out), ctypes.byref(eo), ctypes.byref(err))
            else:
                status = c.etch_export_gguf(os.fsencode(path), os.fsencode(out), ctypes.byref(eo), ctypes.byref(err))
            _check(status, err)
        return cls(out)

    # -------------------------------------------------------------- metadata and tokens

    def method_meta(self):
        """The method metadata, with ExecuTorch's names."""
        m = self._meta
        d = {name: getattr(m, name) for name, _ in _MethodMeta._fields_
             if name not in ("eos_ids", "n_eos", "layer_window")}
        d["eos_ids"] = [m.eos_ids[i] for i in range(m.n_eos)]
        d["layer_window"] = [m.layer_window[i] for i in range(m.n_layers)] if m.layer_window else [0] * m.n_layers
        for k, v in d.items():
            if isinstance(v, bytes):
                d[k] = v.decode()
        return d

    def tokenize(self, text, add_bos=True):
        """The ids of text (BOS first when add_bos and the model has one)."""
        c = _c()
        data = text.encode("utf-8")
        ids = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_int32()
        err = _Error()
        _check(c.etch_tokenize(self._prog, data, len(data), int(add_bos), ctypes.byref(ids), ctypes.byref(n),
                               ctypes.byref(err)), err)
        try:
            return [ids[i] for i in range(n.value)]
        finally:
            c.etch_free(ids)

    def detokenize(self, ids):
        c = _c()
        arr = (ctypes.c_int32 * len(ids))(*ids)
        out = ctypes.c_void_p()
        n = ctypes.c_size_t()
        err = _Error()
        _check(c.etch_detokenize(self._prog, arr, len(ids), ctypes.byref(out), ctypes.byref(n), ctypes.byref(err)), err)
        try:
            return ctypes.string_at(out, n.value).decode("utf-8", "replace")
        finally:
            c.etch_free(out)

    def chat_prompt(self, user, system=None, think=None, template=None):
        """The prompt text of one user turn in the model's chat template."""
        c = _c()
        o = _ChatOptions(system.encode() if system else None, -1 if think is None else int(bool(think)),
                         template.encode() if template else None)
        out = ctypes.c_void_p()
        err = _Error()
        _check(c.etch_chat_render(self._prog, user.encode(), ctypes.byref(o), ctypes.byref(out), ctypes.byref(err)), err)
        try:
            return ctypes.string_at(out).decode()
        finally:
            c.etch_free(out)

    # -------------------------------------------------------------- forward

    def forward(self, tokens, start_pos=0, all_logits=False):
        """One forward call over the session's KV cache. Returns the logits as a buffer
        (array('f')): the last position's [vocab_size], or every position's [n * vocab_size]."""
        c = _c()
        n = len(tokens)
        arr = (ctypes.c_int32 * max(n, 1))(*tokens)
        rows = n if all_logits else 1
        logits = array.array("f", bytes(4 * self._meta.vocab_size * max(rows, 1)))
        addr, _ = logits.buffer_info()
        status = c.etch_forward(self._sess, arr, n, start_pos, ctypes.cast(addr, ctypes.POINTER(ctypes.c_float)),
                                int(all_logits))
        if status != 0:
            raise EtchError(status, c.etch_session_error(self._sess).decode("utf-8", "replace"))
        return logits

    # -------------------------------------------------------------- generation

    def generate(self, prompt, max_new_tokens=128, temperature=0.0, top_k=0, top_p=1.0, seed=42, prefill="auto",
                 add_bos=True):
        """Yields Token(id, text) as each is generated (text: the characters that became complete).
        Stops at max_new_tokens, an EOS id, or a full context; closing the generator stops early."""
        c = _c()
        cfg = _GenerateConfig()
        c.etch_generate_config_default(ctypes.byref(cfg))
        cfg.max_new_tokens, cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed = max_new_tokens, temperature, top_k, top_p, seed
        cfg.prefill = {"auto": 0, "batched": 1, "sequential": 2}[prefill]
        cfg.add_bos = int(add_bos)
        status = c.etch_generate_start(self._sess, prompt.encode("utf-8"), ctypes.byref(cfg))
        if status != 0:
            raise EtchError(status, c.etch_session_error(self._sess).decode("utf-8", "replace"))
        tok, text, n = ctypes.c_int32(), ctypes.c_void_p(), ctypes.c_size_t()
        finished = False
        try:
            while True:
                status = c.etch_generate_next(self._sess, ctypes.byref(tok), ctypes.byref(text), ctypes.byref(n))
                if status != 0:
                    raise EtchError(status, c.etch_session_error(self._sess).decode("utf-8", "replace"))
                piece = ctypes.string_at(text, n.value).decode("utf-8", "replace") if n.value else ""
                if tok.value < 0:
                    finished = True
                    if piece:
                        yield Token(-1, piece)
                    return
                yield Token(tok.value, piece)
        finally:
            if not finished:
                c.etch_generate_stop(self._sess)

    def text_generation(self, prompt, max_seq_len=None, **kwargs):
        """The prompt followed by its greedy continuation, as optimum-executorch returns it.
        max_seq_len counts prompt and generated tokens together (default: the context length)."""
        n_prompt = len(self.tokenize(prompt, add_bos=kwargs.get("add_bos", True)))
        limit = self._meta.max_context_len if max_seq_len is None else max_seq_len
        if limit <= n_prompt:
            raise EtchError(7, "max_seq_len %d leaves no room after the prompt's %d tokens" % (limit, n_prompt))
        pieces = [t.text for t in self.generate(prompt, max_new_tokens=limit - n_prompt, **kwargs)]
        return prompt + "".join(pieces)

    def stats(self):
        """The last generation's stats: the PyTorchObserver fields, as a dict."""
        c = _c()
        buf = ctypes.create_string_buffer(4096)
        c.etch_stats_observer_line(c.etch_session_stats(self._sess), buf, len(buf))
        line = buf.value.decode()
        return json.loads(line[len("PyTorchObserver "):])

    # -------------------------------------------------------------- lifetime

    def close(self):
        c = _c()
        if self._sess:
            c.etch_session_free(self._sess)
            self._sess = ctypes.c_void_p()
        if self._prog:
            c.etch_program_close(self._prog)
            self._prog = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
