"""The Python package against the command line and the reference outputs (unittest, system python3).
Environment: ETCH_LIBRARY (libetch.so), ETCH_BIN (the etch command), ETCH_MODELS_DIR, ETCH_TEST_TMP."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from etch import ETModelForCausalLM, EtchError, library_version  # noqa: E402

BIN = os.environ["ETCH_BIN"]
MODELS = os.environ.get("ETCH_MODELS_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "models")
TOKS = os.environ.get("ETCH_TOKENIZERS_DIR") or os.path.join(MODELS, "..", "tokenizers")
TMP = os.environ.get("ETCH_TEST_TMP") or tempfile.mkdtemp()
S = os.path.join(MODELS, "stories260K")


def run(*args):
    return subprocess.run([BIN, *args], check=True, capture_output=True, text=True).stdout


class TestEtch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.makedirs(TMP, exist_ok=True)
        cls.program = os.path.join(TMP, "py-stories.etch")
        run("export", "--llama2c", os.path.join(S, "stories260K.bin"), "--tokenizer", os.path.join(S, "tok512.bin"),
            "-o", cls.program)
        cls.m = ETModelForCausalLM.from_pretrained(cls.program)

    @classmethod
    def tearDownClass(cls):
        cls.m.close()

    def test_version(self):
        self.assertRegex(library_version(), r"^\d+\.\d+\.\d+$")

    def test_greedy_equals_command_line_and_reference(self):
        # 5 prompt tokens + 196 generated = 201: max_seq_len counts both, as in optimum-executorch.
        text = self.m.text_generation("Once upon a time", max_seq_len=201)
        cli = run("run", self.program, "-p", "Once upon a time", "-n", "196")
        self.assertEqual(text + "\n", cli)
        with open(os.path.join(S, "reference", "greedy_once_upon_a_time.txt"), encoding="utf-8") as f:
            self.assertEqual(text + "\n", f.read())
        with open(os.path.join(S, "reference", "greedy_ids.json"), encoding="utf-8") as f:
            ids = json.load(f)["once_upon_a_time"]
        got = [t.id for t in self.m.generate("Once upon a time", max_new_tokens=196)]
        self.assertEqual(got, ids["generated_ids"])

    def test_generate_streams_and_stops_early(self):
        gen = self.m.generate("Once upon a time", max_new_tokens=50)
        first = [next(gen) for _ in range(5)]
        gen.close()
        self.assertEqual([t.id for t in first], [432, 383, 286, 261, 376])
        self.assertEqual(self.m.stats()["generated_tokens"], 5)

    def test_forward_logits_buffer(self):
        meta = self.m.method_meta()
        last = self.m.forward([1, 403, 407], 0)
        self.assertEqual(len(last), meta["vocab_size"])
        allrows = self.m.forward([1, 403, 407], 0, all_logits=True)
        self.assertEqual(len(allrows), 3 * meta["vocab_size"])
        self.assertEqual(list(allrows[2 * meta["vocab_size"]:]), list(last))
        self.assertEqual(max(range(len(last)), key=last.__getitem__), 261)  # "a" follows "Once upon"

    def test_meta_and_stats(self):
        meta = self.m.method_meta()
        self.assertEqual((meta["max_seq_len"], meta["max_context_len"], meta["vocab_size"], meta["eos_ids"]), (128, 512, 512, [2]))
        # the whole C struct is mirrored: the window and KV fields read through (5 layers, no window)
        self.assertEqual((meta["sliding_window"], meta["n_window_layers"], meta["layer_window"]), (0, 0, [0] * 5))
        self.assertEqual(meta["kv_cache_bytes"], meta["kv_cache_full_bytes"])
        width = {"f32": 4, "f16": 2}[meta["kv_type"]]  # bytes per cached value
        self.assertEqual(meta["kv_cache_bytes"], 2 * 5 * 512 * meta["n_kv_heads"] * meta["head_dim"] * width)
        list(self.m.generate("Once", max_new_tokens=3))
        st = self.m.stats()
        for k in ("prompt_tokens", "generated_tokens", "model_load_start_ms", "inference_start_ms", "first_token_ms",
                  "inference_end_ms", "aggregate_sampling_time_ms", "SCALING_FACTOR_UNITS_PER_SECOND"):
            self.assertIn(k, st)
        self.assertEqual(st["generated_tokens"], 3)

    def test_errors_carry_etch_message(self):
        with self.assertRaises(EtchError) as cm:
            self.m.forward([1, 9999], 0)
        self.assertIn("token id 9999 at index 1 is outside the vocabulary", str(cm.exception))
        self.assertIn("method_meta", str(cm.exception))
        self.assertEqual(cm.exception.status_name, "invalid input")
        with self.assertRaises(EtchError) as cm:
            ETModelForCausalLM.from_pretrained(os.path.join(S, "stories260K.bin") + ".missing")
        self.assertIn("cannot open", str(cm.exception))
        with self.assertRaises(EtchError) as cm:
            list(self.m.generate("Once", max_new_tokens=1, temperature=-1))
        self.assertIn("temperature", str(cm.exception))

    def test_from_pretrained_exports_gguf_once(self):
        gguf = os.path.join(TMP, "py-tiny.gguf")
        run("synth", "--arch", "qwen3", "--tokenizer", os.path.join(TOKS, "qwen3", "tokenizer.json"), "--format", "gguf",
            "--seed", "5", "-o", gguf)
        cache = tempfile.mkdtemp(dir=TMP, prefix="py-cache-")
        with ETModelForCausalLM.from_pretrained(gguf, cache_dir=cache, max_seq_len=16) as a:
            self.assertEqual(a.method_meta()["max_seq_len"], 16)
            self.assertEqual(a.method_meta()["model_type"], "qwen3")
            out = a.text_generation("Hello", max_seq_len=6)
            self.assertTrue(out.startswith("Hello"))
            self.assertIn("<|im_start|>user\nHi<|im_end|>", a.chat_prompt("Hi"))
        files = os.listdir(cache)
        self.assertEqual(len(files), 1)
        stamp = os.stat(os.path.join(cache, files[0])).st_mtime_ns
        with ETModelForCausalLM.from_pretrained(gguf, cache_dir=cache, max_seq_len=16):
            pass
        self.assertEqual(os.stat(os.path.join(cache, files[0])).st_mtime_ns, stamp)  # reused, not exported again

    def test_from_pretrained_activations(self):
        gguf = os.path.join(TMP, "py-q8.gguf")
        run("synth", "--arch", "qwen3", "--tokenizer", os.path.join(TOKS, "qwen3", "tokenizer.json"), "--format", "gguf",
            "--dtype", "q8_0", "--seed", "5", "-o", gguf)
        cache = tempfile.mkdtemp(dir=TMP, prefix="py-cache-")
        paths = []
        for act in (None, "f32"):  # the default rounds activations to int8; f32 keeps them: two programs
            with ETModelForCausalLM.from_pretrained(gguf, cache_dir=cache, max_seq_len=16, activations=act) as m:
                self.assertTrue(m.text_generation("Hello", max_seq_len=6).startswith("Hello"))
                paths.append(m.path)
        self.assertEqual(len(os.listdir(cache)), 2)
        info = [run("inspect", p, "--no-verify-data") for p in paths]
        self.assertIn("weight matrices: i8 100%", info[0])
        self.assertIn("weight matrices: q8 100%", info[1])
        with self.assertRaises(ValueError):
            ETModelForCausalLM.from_pretrained(gguf, cache_dir=cache, activations="f16")
        with self.assertRaises(ValueError):
            ETModelForCausalLM.from_pretrained(paths[0], activations="f32")


if __name__ == "__main__":
    unittest.main()


class TestNewUserEdges(unittest.TestCase):
    """The new-user issue's Python findings, each failing before its fix."""

    @classmethod
    def setUpClass(cls):
        os.makedirs(TMP, exist_ok=True)
        cls.program = os.path.join(TMP, "py-edges.etch")
        run("export", "--llama2c", os.path.join(S, "stories260K.bin"), "--tokenizer", os.path.join(S, "tok512.bin"),
            "-o", cls.program)

    def fresh(self, prompt, n):
        with ETModelForCausalLM(self.program) as m:
            return [t.id for t in m.generate(prompt, max_new_tokens=n)]

    def test_two_generations_on_one_session_do_not_interleave(self):
        with ETModelForCausalLM(self.program) as m:
            g1 = m.generate("Once upon a time", max_new_tokens=6)
            first = [next(g1).id for _ in range(3)]
            with self.assertRaises(EtchError) as cm:
                m.generate("The cat", max_new_tokens=3)
            self.assertIn("still open", str(cm.exception))
            rest = [t.id for t in g1]  # g1 goes on with its own story
            self.assertEqual(first + rest, self.fresh("Once upon a time", 6))
            g2 = m.generate("The cat", max_new_tokens=3)
            del g1  # deleting a finished generation does not stop the next one
            self.assertEqual([t.id for t in g2], self.fresh("The cat", 3))

    def test_two_sessions_interleaved_each_give_their_own(self):
        with ETModelForCausalLM(self.program) as m:
            a, b = m.session(), m.session()
            ga, gb = a.generate("Once upon a time", max_new_tokens=8), b.generate("The cat", max_new_tokens=8)
            got_a, got_b = [], []
            for _ in range(8):
                got_a.append(next(ga).id)
                got_b.append(next(gb).id)
            self.assertEqual(got_a, self.fresh("Once upon a time", 8))
            self.assertEqual(got_b, self.fresh("The cat", 8))
            self.assertEqual(a.stats()["generated_tokens"], 8)

    def test_kv_types(self):
        # an f16 cache keeps the reference's greedy text; each session says what it keeps
        with open(os.path.join(S, "reference", "greedy_ids.json"), encoding="utf-8") as f:
            want = json.load(f)["once_upon_a_time"]["generated_ids"]
        with ETModelForCausalLM(self.program) as m:
            self.assertEqual(m.method_meta()["kv_type"], m.session().kv_type)
            with m.session(kv_type="f16") as s:
                self.assertEqual(s.kv_type, "f16")
                self.assertEqual([t.id for t in s.generate("Once upon a time", max_new_tokens=196)], want)
            with m.session(kv_type="q8") as s:
                self.assertEqual(s.kv_type, "q8")
                self.assertEqual(len(list(s.generate("Once upon a time", max_new_tokens=20))), 20)
            with self.assertRaises(ValueError):
                m.session(kv_type="q4")

    def test_arguments_are_checked_not_wrapped(self):
        with ETModelForCausalLM(self.program) as m:
            with self.assertRaises(ValueError) as cm:
                m.generate("Once", max_new_tokens=2 ** 40)
            self.assertIn("max_new_tokens", str(cm.exception))
            with self.assertRaises(ValueError) as cm:
                m.generate("Once", prefill="fast")
            self.assertIn("'auto', 'batched' or 'sequential'", str(cm.exception))
            with self.assertRaises(TypeError):
                m.generate("Once", max_new_tokens=1.5)
        with self.assertRaises(ValueError) as cm:
            m.generate("Once")
        self.assertIn("closed", str(cm.exception))
        with self.assertRaises(ValueError):
            m.tokenize("Once")

    def test_from_pretrained_says_what_a_file_is_and_refuses_ignored_options(self):
        with self.assertRaises(EtchError) as cm:
            ETModelForCausalLM.from_pretrained(os.path.join(S, "stories260K.bin"))
        self.assertIn("not an etch program, a GGUF file or a Hugging Face folder", str(cm.exception))
        self.assertIn("--llama2c", str(cm.exception))
        text = os.path.join(TMP, "py-notes.txt")
        with open(text, "w") as f:
            f.write("just text\n")
        with self.assertRaises(EtchError) as cm:
            ETModelForCausalLM.from_pretrained(text)
        self.assertIn("not an etch program", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            ETModelForCausalLM.from_pretrained(self.program, max_seq_len=16)
        self.assertIn("exported with max_seq_len=128", str(cm.exception))
        with ETModelForCausalLM.from_pretrained(self.program, max_seq_len=128) as m:  # agreeing is fine
            self.assertEqual(m.method_meta()["max_seq_len"], 128)


class TestConversations(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.makedirs(TMP, exist_ok=True)
        cls.gguf = os.path.join(TMP, "py-chat.gguf")
        run("synth", "--arch", "qwen3", "--tokenizer", os.path.join(TOKS, "qwen3", "tokenizer.json"), "--format", "gguf",
            "--seed", "7", "-o", cls.gguf)
        cls.cache = tempfile.mkdtemp(dir=TMP, prefix="py-chat-cache-")

    def test_chat_completion_shape_and_turns(self):
        with ETModelForCausalLM.from_pretrained(self.gguf, cache_dir=self.cache) as m:
            msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
            r = m.chat(msgs, max_new_tokens=6)
            self.assertEqual(r["object"], "chat.completion")
            self.assertEqual(r["choices"][0]["message"]["role"], "assistant")
            self.assertIn(r["choices"][0]["finish_reason"], ("stop", "length"))
            u = r["usage"]
            self.assertEqual(u["total_tokens"], u["prompt_tokens"] + u["completion_tokens"])
            first_prompt = u["prompt_tokens"]
            msgs += [r["choices"][0]["message"], {"role": "user", "content": "And again?"}]
            chunks = list(m.chat(msgs, max_new_tokens=6, stream=True))
            self.assertEqual(chunks[0]["choices"][0]["delta"], {"role": "assistant"})
            self.assertTrue(all(c["object"] == "chat.completion.chunk" for c in chunks))
            self.assertIsNotNone(chunks[-1]["choices"][0]["finish_reason"])
            st = m.stats()
            # the second turn prefilled only the new message: the first turn's positions were kept
            self.assertGreaterEqual(st["reused_tokens"], first_prompt)
            self.assertLess(st["prompt_tokens"], 20)

    def test_two_conversations_interleaved(self):
        with ETModelForCausalLM.from_pretrained(self.gguf, cache_dir=self.cache) as m:
            a, b = m.session(), m.session()
            ref = {}
            for who in ("cat", "dog"):
                with m.session() as s:
                    ref[who] = s.chat([{"role": "user", "content": "Tell me about a " + who}], max_new_tokens=5)
            sa = a.chat([{"role": "user", "content": "Tell me about a cat"}], max_new_tokens=5, stream=True)
            sb = b.chat([{"role": "user", "content": "Tell me about a dog"}], max_new_tokens=5, stream=True)
            ta, tb = [], []
            for ca, cb in zip(sa, sb):
                ta.append(ca["choices"][0]["delta"].get("content", ""))
                tb.append(cb["choices"][0]["delta"].get("content", ""))
            self.assertEqual("".join(ta), ref["cat"]["choices"][0]["message"]["content"])
            self.assertEqual("".join(tb), ref["dog"]["choices"][0]["message"]["content"])

    def test_stop_save_load_and_optimum_shape(self):
        from etch import ExecuTorchModelForCausalLM
        prog = os.path.join(TMP, "py-opt.etch")
        run("export", "--llama2c", os.path.join(S, "stories260K.bin"), "--tokenizer", os.path.join(S, "tok512.bin"),
            "-o", prog)
        with ExecuTorchModelForCausalLM.from_pretrained(prog) as m:
            out = m.text_generation(tokenizer=None, prompt="Once upon a time", echo=False, max_seq_len=20)
            self.assertTrue(out.startswith(", there was a little girl"))
            text = "".join(t.text for t in m.generate("Once upon a time", max_new_tokens=30, stop=["Lily"]))
            self.assertEqual(text, ", there was a little girl named ")
            self.assertEqual(m.stats()["generated_tokens"] > 0, True)
            path = os.path.join(TMP, "py.session")
            m._default.save(path)
            with m.session() as s:
                s.load(path)
                self.assertEqual(s.position(), m._default.position())
