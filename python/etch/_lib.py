"""The C library: where it is, and the structures and signatures of include/etch.h, mirrored whole."""

import ctypes
import ctypes.util
import os


class EtchError(Exception):
    """An error from etch: .status is the etch_status code, .status_name its name, str() etch's message."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.status_name = lib().etch_status_string(status).decode()


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
                ("kv_cache_full_bytes", ctypes.c_int64), ("kv_type", ctypes.c_char_p)]


class _GenerateConfig(ctypes.Structure):
    _fields_ = [("max_new_tokens", ctypes.c_int32), ("temperature", ctypes.c_float), ("top_k", ctypes.c_int32),
                ("top_p", ctypes.c_float), ("seed", ctypes.c_uint64), ("prefill", ctypes.c_int),
                ("add_bos", ctypes.c_int), ("cache", ctypes.c_int), ("stop", ctypes.POINTER(ctypes.c_char_p)),
                ("n_stop", ctypes.c_int32), ("context", ctypes.c_int), ("n_keep", ctypes.c_int32)]


_PROGRESS = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64)


class _ExportOptions(ctypes.Structure):
    _fields_ = [("max_context_len", ctypes.c_int32), ("max_seq_len", ctypes.c_int32), ("dtype", ctypes.c_char_p),
                ("chat_template", ctypes.c_char_p), ("progress", _PROGRESS), ("progress_user", ctypes.c_void_p),
                ("kv_type", ctypes.c_char_p), ("activations", ctypes.c_char_p)]


class _SessionOptions(ctypes.Structure):
    _fields_ = [("n_threads", ctypes.c_int32), ("kv_type", ctypes.c_char_p)]


class _ChatOptions(ctypes.Structure):
    _fields_ = [("system", ctypes.c_char_p), ("think", ctypes.c_int), ("template_name", ctypes.c_char_p)]


class _ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p), ("reasoning", ctypes.c_char_p)]


class _Limits(ctypes.Structure):
    _fields_ = [("max_prompt_bytes", ctypes.c_int64), ("max_prompt_tokens", ctypes.c_int32),
                ("max_new_tokens", ctypes.c_int32)]


def _find_library():
    """ETCH_LIBRARY; else the copy built into this package (pip install); else beside the package as
    `cmake --install` lays it out (lib/pythonX/dist-packages/etch next to lib/libetch.so.0); else the
    system's library path."""
    env = os.environ.get("ETCH_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "libetch.so.0"),
                      os.path.normpath(os.path.join(here, "..", "..", "..", "libetch.so.0")),
                      os.path.normpath(os.path.join(here, "..", "..", "..", "libetch.so"))):
        if os.path.exists(candidate):
            return candidate
    found = ctypes.util.find_library("etch")
    if found:
        return found
    raise OSError("libetch not found: set ETCH_LIBRARY to the path of libetch.so, install etch with cmake --install, "
                  "or pip install the package from an etch checkout (it builds the library)")


def _load():
    so = ctypes.CDLL(_find_library())
    P, I, S, E = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.POINTER(_Error)
    I32P, F32P = ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_float)
    sig = {
        "etch_version": (ctypes.c_char_p, []),
        "etch_status_string": (ctypes.c_char_p, [I]),
        "etch_program_open": (I, [ctypes.c_char_p, ctypes.POINTER(P), E]),
        "etch_program_close": (None, [P]),
        "etch_program_meta": (ctypes.POINTER(_MethodMeta), [P]),
        "etch_cached_program": (I, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_ExportOptions), ctypes.c_char_p,
                                    S, ctypes.POINTER(I), E]),
        "etch_session_new": (I, [P, ctypes.POINTER(P), E]),
        "etch_session_new_threads": (I, [P, I, ctypes.POINTER(P), E]),
        "etch_session_new_opts": (I, [P, ctypes.POINTER(_SessionOptions), ctypes.POINTER(P), E]),
        "etch_session_kv_type": (ctypes.c_char_p, [P]),
        "etch_session_free": (None, [P]),
        "etch_session_error": (ctypes.c_char_p, [P]),
        "etch_session_cancel": (None, [P]),
        "etch_session_set_limits": (I, [P, ctypes.POINTER(_Limits)]),
        "etch_forward": (I, [P, I32P, ctypes.c_int32, ctypes.c_int32, F32P, I]),
        "etch_prefill": (I, [P, I32P, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, F32P, I]),
        "etch_tokenize": (I, [P, ctypes.c_char_p, S, I, ctypes.POINTER(I32P), I32P, E]),
        "etch_detokenize": (I, [P, I32P, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(S), E]),
        "etch_free": (None, [P]),
        "etch_generate_config_default": (None, [ctypes.POINTER(_GenerateConfig)]),
        "etch_generate_start": (I, [P, ctypes.c_char_p, ctypes.POINTER(_GenerateConfig)]),
        "etch_generate_next": (I, [P, I32P, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(S)]),
        "etch_generate_stop": (None, [P]),
        "etch_session_stats": (P, [P]),
        "etch_stats_observer_line": (I, [P, ctypes.c_char_p, S]),
        "etch_chat_render": (I, [P, ctypes.c_char_p, ctypes.POINTER(_ChatOptions), ctypes.POINTER(ctypes.c_void_p), E]),
        "etch_export_hf": (I, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_ExportOptions), E]),
        "etch_export_gguf": (I, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_ExportOptions), E]),
        "etch_set_memory_budget": (I, [ctypes.c_int64]),
        "etch_chat_start": (I, [P, ctypes.POINTER(_ChatMessage), ctypes.c_int32, ctypes.POINTER(_ChatOptions),
                                ctypes.POINTER(_GenerateConfig)]),
        "etch_session_position": (ctypes.c_int32, [P]),
        "etch_session_reset": (None, [P]),
        "etch_session_rewind": (I, [P, ctypes.c_int32]),
        "etch_session_save": (I, [P, ctypes.c_char_p]),
        "etch_session_load": (I, [P, ctypes.c_char_p]),
        "etch_memory_in_use": (ctypes.c_int64, []),
    }
    for name, (res, args) in sig.items():
        fn = getattr(so, name)
        fn.restype, fn.argtypes = res, args
    return so


_lib = None


def lib():
    global _lib
    if _lib is None:
        _lib = _load()
    return _lib


def check(status, err):
    if status != 0:
        raise EtchError(status, err.message.decode("utf-8", "replace"))
