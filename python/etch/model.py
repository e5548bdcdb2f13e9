"""Programs, sessions and generations over the C library (_lib). A model maps one program; each
Session owns a KV cache and is one conversation's state; a Generation is one pass of etch_generate
over a session, and owns that session until it ends or is closed."""

import array
import ctypes
import json
import os
import weakref
from collections import namedtuple

import time

from ._lib import (EtchError, _ChatMessage, _ChatOptions, _Error, _ExportOptions, _GenerateConfig, _Limits, _PROGRESS,
                   _SessionOptions, check, lib)

Token = namedtuple("Token", ["id", "text"])

_PREFILL = {"auto": 0, "batched": 1, "sequential": 2}
_CACHE = {"reset": 0, "continue": 1, "reuse": 2}
_INT32_MAX = 2 ** 31 - 1


def _int_arg(name, v, lo, hi):
    """v as an int in lo..hi, or ValueError naming the argument (a C int would wrap silently)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError("%s must be an int, not %s" % (name, type(v).__name__))
    if not lo <= v <= hi:
        raise ValueError("%s must be in %d..%d, not %d" % (name, lo, hi, v))
    return v


def library_version():
    """The version of the libetch in use, e.g. "0.1.0"."""
    return lib().etch_version().decode()


def set_memory_budget(nbytes):
    """A process-wide budget for the sessions' reserved memory (KV caches, workspaces); 0: none."""
    check(lib().etch_set_memory_budget(_int_arg("nbytes", nbytes, 0, 2 ** 63 - 1)), _Error(1, b"negative budget"))


class _Closing:
    """with-blocks and garbage collection both close: for the classes that hold C handles."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Generation:
    """An iterator of Token(id, text) (text: the characters that became complete). It owns its
    session until it ends; close() (or leaving a for loop early, or deleting it) stops it."""

    def __init__(self, session, keep=None):
        self._session = session
        self._keep = keep  # what the C side borrows for the generation (stop strings, messages)
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        s = self._session
        c = lib()
        tok, text, n = ctypes.c_int32(), ctypes.c_void_p(), ctypes.c_size_t()
        status = c.etch_generate_next(s._handle(), ctypes.byref(tok), ctypes.byref(text), ctypes.byref(n))
        if status != 0:
            self._finish(stop=False)
            raise EtchError(status, c.etch_session_error(s._sess).decode("utf-8", "replace"))
        piece = ctypes.string_at(text, n.value).decode("utf-8", "replace") if n.value else ""
        if tok.value < 0:
            self._finish(stop=False)
            if piece:
                return Token(-1, piece)
            raise StopIteration
        return Token(tok.value, piece)

    def _finish(self, stop):
        if self._done:
            return
        self._done = True
        s = self._session
        if stop and s._sess:
            lib().etch_generate_stop(s._sess)
        if s._active is not None and s._active() is self:
            s._active = None

    def close(self):
        """Stops the generation early (the stats then count what was generated)."""
        self._finish(stop=True)

    def cancel(self):
        """Asks the generation to stop from another thread: it ends at its next token."""
        if self._session._sess:
            lib().etch_session_cancel(self._session._sess)

    def __del__(self):
        try:
            self._finish(stop=True)
        except Exception:
            pass


class Session(_Closing):
    """One conversation's state: its own KV cache and stats, on a model's program. Two sessions on one
    model never mix; one session runs one generation at a time. Not for use from two threads at once."""

    def __init__(self, model, threads=0, kv_type=None):
        self._model = model
        self._sess = ctypes.c_void_p()
        self._active = None  # weakref to the open Generation
        err = _Error()
        if kv_type is not None and kv_type not in ("f32", "f16", "q8"):
            raise ValueError("kv_type must be 'f32', 'f16' or 'q8', not %r" % (kv_type,))
        opts = _SessionOptions(_int_arg("threads", threads, 0, 256), kv_type.encode() if kv_type else None)
        check(lib().etch_session_new_opts(model._handle(), ctypes.byref(opts), ctypes.byref(self._sess),
                                          ctypes.byref(err)), err)
        model._sessions.add(self)

    @property
    def kv_type(self):
        """The KV cache this session keeps: "f32", "f16" or "q8"."""
        return lib().etch_session_kv_type(self._handle()).decode()

    def _handle(self):
        if not self._sess:
            raise ValueError("this session is closed")
        self._model._handle()
        return self._sess

    def _fail(self, status):
        raise EtchError(status, lib().etch_session_error(self._sess).decode("utf-8", "replace"))

    def forward(self, tokens, start_pos=0, all_logits=False):
        """One forward call over the session's KV cache. Returns the logits as a buffer
        (array('f')): the last position's [vocab_size], or every position's [n * vocab_size]."""
        h = self._handle()
        n = len(tokens)
        arr = (ctypes.c_int32 * max(n, 1))(*tokens)
        rows = n if all_logits else 1
        logits = array.array("f", bytes(4 * self._model._meta.vocab_size * max(rows, 1)))
        addr, _ = logits.buffer_info()
        status = lib().etch_forward(h, arr, n, _int_arg("start_pos", start_pos, 0, _INT32_MAX),
                                    ctypes.cast(addr, ctypes.POINTER(ctypes.c_float)), int(all_logits))
        if status != 0:
            self._fail(status)
        return logits

    def _config(self, max_new_tokens, temperature, top_k, top_p, seed, prefill, add_bos, stop, cache):
        if self._active is not None and self._active() is not None:
            raise EtchError(1, "a generation on this session is still open: finish it or close() it first, or "
                               "use model.session() for a second conversation")
        if prefill not in _PREFILL:
            raise ValueError("prefill must be 'auto', 'batched' or 'sequential', not %r" % (prefill,))
        if cache not in _CACHE:
            raise ValueError("cache must be 'reset', 'continue' or 'reuse', not %r" % (cache,))
        stop = [stop] if isinstance(stop, str) else list(stop or [])
        if any(not isinstance(x, str) or not x for x in stop):
            raise ValueError("stop holds non-empty strings")
        cfg = _GenerateConfig()
        lib().etch_generate_config_default(ctypes.byref(cfg))
        cfg.max_new_tokens = _int_arg("max_new_tokens", max_new_tokens, 0, _INT32_MAX)
        cfg.top_k = _int_arg("top_k", top_k, 0, _INT32_MAX)
        cfg.seed = _int_arg("seed", seed, 0, 2 ** 64 - 1)
        cfg.temperature, cfg.top_p = float(temperature), float(top_p)
        cfg.prefill, cfg.add_bos, cfg.cache = _PREFILL[prefill], int(bool(add_bos)), _CACHE[cache]
        keep = (ctypes.c_char_p * max(len(stop), 1))(*[x.encode() for x in stop])
        cfg.stop, cfg.n_stop = (keep if stop else None), len(stop)
        return cfg, keep

    def generate(self, prompt, max_new_tokens=128, temperature=0.0, top_k=0, top_p=1.0, seed=42, prefill="auto",
                 add_bos=True, stop=None, cache="reset"):
        """Tokenizes and prefills the prompt now, and returns a Generation that yields Token(id, text)
        as each token is generated. Stops at max_new_tokens, an EOS id, a stop string (none of which is
        yielded) or a full context. cache: "reset" (start at position 0), "continue" (append the prompt
        to what the session holds) or "reuse" (keep the longest common prefix of prompt and cache)."""
        h = self._handle()
        if not isinstance(prompt, str):
            raise TypeError("prompt must be a str, not %s" % type(prompt).__name__)
        cfg, keep = self._config(max_new_tokens, temperature, top_k, top_p, seed, prefill, add_bos, stop, cache)
        status = lib().etch_generate_start(h, prompt.encode("utf-8"), ctypes.byref(cfg))
        if status != 0:
            self._fail(status)
        g = Generation(self, keep)
        self._active = weakref.ref(g)
        return g

    def chat(self, messages, stream=False, max_new_tokens=512, temperature=0.0, top_k=0, top_p=1.0, seed=42,
             stop=None, system=None, think=None, template=None):
        """An answer to messages ([{"role": ..., "content": ...}], the last one the user's) in the
        shape of llama-cpp-python's create_chat_completion: a chat.completion dict, or with stream=True
        an iterator of chat.completion.chunk dicts. The session keeps the conversation: a next call
        with these messages, the answer and a new user message prefills only the new message."""
        h = self._handle()
        msgs = list(messages)
        if system is not None:
            msgs = [{"role": "system", "content": system}] + msgs
        for i, mm in enumerate(msgs):
            if not isinstance(mm, dict) or mm.get("role") not in ("system", "user", "assistant") or \
                    not isinstance(mm.get("content"), str):
                raise ValueError("message %d needs a role (system, user or assistant) and a str content" % i)
        arr = (_ChatMessage * len(msgs))(*[_ChatMessage(mm["role"].encode(), mm["content"].encode("utf-8"),
                                                         mm["reasoning_content"].encode("utf-8")
                                                         if mm.get("reasoning_content") else None) for mm in msgs])
        cfg, keep = self._config(max_new_tokens, temperature, top_k, top_p, seed, "auto", True, stop, "reuse")
        o = _ChatOptions(None, -1 if think is None else int(bool(think)), template.encode() if template else None)
        status = lib().etch_chat_start(h, arr, len(msgs), ctypes.byref(o), ctypes.byref(cfg))
        if status != 0:
            self._fail(status)
        g = Generation(self, (keep, arr))
        self._active = weakref.ref(g)
        cid, created, name = "chatcmpl-%x" % id(g), int(time.time()), os.path.basename(self._model.path)

        def finish_reason():
            return "length" if self.stats()["generated_tokens"] >= max_new_tokens else "stop"

        if stream:
            def chunks():
                yield {"id": cid, "object": "chat.completion.chunk", "created": created, "model": name,
                       "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
                for t in g:
                    if t.text:
                        yield {"id": cid, "object": "chat.completion.chunk", "created": created, "model": name,
                               "choices": [{"index": 0, "delta": {"content": t.text}, "finish_reason": None}]}
                yield {"id": cid, "object": "chat.completion.chunk", "created": created, "model": name,
                       "choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason()}]}
            return chunks()
        text = "".join(t.text for t in g)
        st = self.stats()
        return {"id": cid, "object": "chat.completion", "created": created, "model": name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                             "finish_reason": finish_reason()}],
                "usage": {"prompt_tokens": st["prompt_tokens"] + st.get("reused_tokens", 0),
                          "completion_tokens": st["generated_tokens"],
                          "total_tokens": st["prompt_tokens"] + st.get("reused_tokens", 0) + st["generated_tokens"]}}

    def position(self):
        """The positions the session's KV cache holds."""
        return lib().etch_session_position(self._handle())

    def reset(self):
        """Empties the session: position 0, no conversation."""
        lib().etch_session_reset(self._handle())

    def rewind(self, pos):
        """Truncates the cache to its first pos positions."""
        status = lib().etch_session_rewind(self._handle(), _int_arg("pos", pos, 0, _INT32_MAX))
        if status != 0:
            self._fail(status)

    def save(self, path):
        """Saves the cache (ids, keys and values) to a file: load() it into a session of the same program."""
        status = lib().etch_session_save(self._handle(), os.fsencode(path))
        if status != 0:
            self._fail(status)

    def load(self, path):
        status = lib().etch_session_load(self._handle(), os.fsencode(path))
        if status != 0:
            self._fail(status)

    def text_generation(self, prompt, max_seq_len=None, **kwargs):
        """The prompt followed by its greedy continuation, as optimum-executorch returns it.
        max_seq_len counts prompt and generated tokens together (default: the context length)."""
        n_prompt = len(self._model.tokenize(prompt, add_bos=kwargs.get("add_bos", True)))
        limit = self._model._meta.max_context_len if max_seq_len is None else _int_arg("max_seq_len", max_seq_len, 1,
                                                                                         _INT32_MAX)
        if limit <= n_prompt:
            raise EtchError(7, "max_seq_len %d leaves no room after the prompt's %d tokens" % (limit, n_prompt))
        g = self.generate(prompt, max_new_tokens=limit - n_prompt, **kwargs)
        try:
            return prompt + "".join(t.text for t in g)
        finally:
            g.close()

    def stats(self):
        """The last generation's stats: the PyTorchObserver fields, as a dict."""
        c = lib()
        buf = ctypes.create_string_buffer(4096)
        c.etch_stats_observer_line(c.etch_session_stats(self._handle()), buf, len(buf))
        return json.loads(buf.value.decode()[len("PyTorchObserver "):])

    def set_limits(self, max_prompt_bytes=0, max_prompt_tokens=0, max_new_tokens=0):
        """Refuse prompts and requests past these before any work (0: no limit)."""
        lim = _Limits(_int_arg("max_prompt_bytes", max_prompt_bytes, 0, 2 ** 63 - 1),
                      _int_arg("max_prompt_tokens", max_prompt_tokens, 0, _INT32_MAX),
                      _int_arg("max_new_tokens", max_new_tokens, 0, _INT32_MAX))
        status = lib().etch_session_set_limits(self._handle(), ctypes.byref(lim))
        if status != 0:
            self._fail(status)

    def close(self):
        if self._active is not None and self._active() is not None:
            self._active()._finish(stop=False)
        if self._sess:
            lib().etch_session_free(self._sess)
            self._sess = ctypes.c_void_p()
        self._model._sessions.discard(self)


def _program_path(path, cache_dir, opts, progress):
    """The program for a program file, a GGUF file or a Hugging Face folder (exported once into the
    cache by the library's etch_cached_program, which the command line uses too)."""
    eo = _ExportOptions(opts["max_context_len"] or -4096, opts["max_seq_len"] or 0,
                        opts["dtype"].encode() if opts["dtype"] else None,
                        opts["chat_template"].encode() if opts["chat_template"] else None,
                        _PROGRESS(progress) if progress else _PROGRESS(), None, None,
                        opts["activations"].encode() if opts["activations"] else None)
    out = ctypes.create_string_buffer(4096)
    err = _Error()
    exported = ctypes.c_int()
    check(lib().etch_cached_program(os.fsencode(path), os.fsencode(cache_dir) if cache_dir else None, ctypes.byref(eo),
                                    out, len(out), ctypes.byref(exported), ctypes.byref(err)), err)
    return out.value.decode(), bool(exported.value)


class ETModelForCausalLM(_Closing):
    """A program and a default session (one conversation). model.session() makes more: each has its
    own KV cache, so conversations on one model never mix; the program is mapped once for all."""

    def __init__(self, program_path, threads=0, kv_type=None):
        c = lib()
        err = _Error()
        self._prog = ctypes.c_void_p()
        self._sessions = weakref.WeakSet()
        check(c.etch_program_open(os.fsencode(program_path), ctypes.byref(self._prog), ctypes.byref(err)), err)
        self.path = program_path
        self._meta = c.etch_program_meta(self._prog).contents
        try:
            self._default = Session(self, threads, kv_type)
        except Exception:
            c.etch_program_close(self._prog)
            self._prog = ctypes.c_void_p()
            raise

    @classmethod
    def from_pretrained(cls, path, *, max_seq_len=None, max_context_len=None, dtype=None, chat_template=None,
                        cache_dir=None, threads=0, kv_type=None, progress=None, activations=None):
        """Opens a program file, or exports a Hugging Face folder or a GGUF file on first use into a
        cache folder ($ETCH_CACHE_DIR, else ~/.cache/etch) and opens the result, reused while the
        source is unchanged. Export options: max_seq_len (the forward bound), max_context_len, dtype
        ("f32", "f16", "bf16"), chat_template, activations (a GGUF's quantized matrices: "int8", the
        default, rounds activations per 32 values as llama.cpp does; "f32" keeps the file's arithmetic
        exactly). A program file was exported already: an option that disagrees with it is an error,
        not ignored (activations is for exports only). progress(what, done, total) follows an export.
        kv_type ("f32", "f16", "q8") is the KV cache of the model's sessions (None: the program's)."""
        if activations not in (None, "int8", "f32"):
            raise ValueError("activations must be 'int8' or 'f32', not %r" % (activations,))
        opts = {"max_seq_len": max_seq_len, "max_context_len": max_context_len, "dtype": dtype,
                "chat_template": chat_template, "activations": activations}
        for k in ("max_seq_len", "max_context_len"):
            if opts[k] is not None:
                _int_arg(k, opts[k], 1, 1 << 20)
        cb = (lambda user, what, done, total: progress(what.decode(), done, total)) if progress else None
        prog, _ = _program_path(path, cache_dir, opts, cb)
        m = cls(prog, threads, kv_type)
        if prog == path:  # a program file: its options are fixed
            if activations is not None:
                m.close()
                raise ValueError("activations=%r: %s is a program file; activations are chosen when a GGUF is "
                                 "exported" % (activations, path))
            meta = m.method_meta()
            for k in ("max_seq_len", "max_context_len", "dtype", "chat_template"):
                if opts[k] is not None and opts[k] != meta[k]:
                    m.close()
                    raise ValueError("%s=%r: %s is a program exported with %s=%r; export it again to change it"
                                     % (k, opts[k], path, k, meta[k]))
        return m

    def _handle(self):
        if not self._prog:
            raise ValueError("this model is closed")
        return self._prog

    def session(self, threads=0, kv_type=None):
        """A new conversation on this model: its own KV cache ("f32", "f16" or "q8"; None: the
        program's) and stats."""
        return Session(self, threads, kv_type)

    # -------------------------------------------------------------- metadata and tokens

    def method_meta(self):
        """The method metadata, with ExecuTorch's names."""
        self._handle()
        m = self._meta
        d = {name: getattr(m, name) for name, _ in type(m)._fields_ if name not in ("eos_ids", "n_eos", "layer_window")}
        d["eos_ids"] = [m.eos_ids[i] for i in range(m.n_eos)]
        d["layer_window"] = [m.layer_window[i] for i in range(m.n_layers)] if m.layer_window else [0] * m.n_layers
        for k, v in d.items():
            if isinstance(v, bytes):
                d[k] = v.decode()
        return d

    def tokenize(self, text, add_bos=True):
        """The ids of text (BOS first when add_bos and the model has one)."""
        c = lib()
        data = text.encode("utf-8")
        ids = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_int32()
        err = _Error()
        check(c.etch_tokenize(self._handle(), data, len(data), int(add_bos), ctypes.byref(ids), ctypes.byref(n),
                              ctypes.byref(err)), err)
        try:
            return [ids[i] for i in range(n.value)]
        finally:
            c.etch_free(ids)

    def detokenize(self, ids):
        c = lib()
        arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        out = ctypes.c_void_p()
        n = ctypes.c_size_t()
        err = _Error()
        check(c.etch_detokenize(self._handle(), arr, len(ids), ctypes.byref(out), ctypes.byref(n), ctypes.byref(err)),
              err)
        try:
            return ctypes.string_at(out, n.value).decode("utf-8", "replace")
        finally:
            c.etch_free(out)

    def chat_prompt(self, user, system=None, think=None, template=None):
        """The prompt text of one user turn in the model's chat template."""
        c = lib()
        o = _ChatOptions(system.encode() if system else None, -1 if think is None else int(bool(think)),
                         template.encode() if template else None)
        out = ctypes.c_void_p()
        err = _Error()
        check(c.etch_chat_render(self._handle(), user.encode(), ctypes.byref(o), ctypes.byref(out), ctypes.byref(err)),
              err)
        try:
            return ctypes.string_at(out).decode()
        finally:
            c.etch_free(out)

    # -------------------------------------------------------------- the default session

    def forward(self, tokens, start_pos=0, all_logits=False):
        return self._default.forward(tokens, start_pos, all_logits)

    def generate(self, prompt, **kwargs):
        return self._default.generate(prompt, **kwargs)

    def text_generation(self, prompt, max_seq_len=None, **kwargs):
        return self._default.text_generation(prompt, max_seq_len, **kwargs)

    def stats(self):
        return self._default.stats()

    def chat(self, messages, **kwargs):
        return self._default.chat(messages, **kwargs)

    create_chat_completion = chat

    forward.__doc__, generate.__doc__, chat.__doc__ = Session.forward.__doc__, Session.generate.__doc__, Session.chat.__doc__
    text_generation.__doc__, stats.__doc__ = Session.text_generation.__doc__, Session.stats.__doc__

    # -------------------------------------------------------------- lifetime

    def close(self):
        """Frees every session of this model, then the program. Later calls raise ValueError."""
        for s in list(self._sessions):
            s.close()
        if self._prog:
            lib().etch_program_close(self._prog)
            self._prog = ctypes.c_void_p()


class ExecuTorchModelForCausalLM(ETModelForCausalLM):
    """optimum-executorch's name and call shape: text_generation(tokenizer=..., prompt=..., echo=...,
    max_seq_len=...). The tokenizer argument is accepted and not used: the program carries its own."""

    def text_generation(self, tokenizer=None, prompt=None, echo=True, max_seq_len=None, **kwargs):
        if prompt is None:
            raise TypeError("text_generation needs prompt=")
        out = ETModelForCausalLM.text_generation(self, prompt, max_seq_len, **kwargs)
        return out if echo else out[len(prompt):]
