/* Malformed Hugging Face folders (config.json, safetensors headers, tokenizer.json) and GGUF files:
 * each is refused with a clear error naming the file and the field, never a crash, and nothing is
 * left at the output path. Inputs are made here from a small synthetic model and by hand. */
#define _GNU_SOURCE /* memmem */
#include "stories.h"

#include <sys/stat.h>
#include <unistd.h>

static char dir[512], out[600];

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

static void write_text(const char *path, const char *s) { write_file(path, s, strlen(s)); }

/* Exports the folder (or GGUF) and expects failure with status st and every given substring. */
static void expect_fail(const char *what, int gguf, const char *src, etch_status st, const char *s1, const char *s2) {
    etch_error err;
    unlink(out);
    etch_status got = gguf ? etch_export_gguf(src, out, NULL, &err) : etch_export_hf(src, out, NULL, &err);
    CHECK(got == st && strstr(err.message, s1) && (!s2 || strstr(err.message, s2)) && access(out, F_OK) != 0,
          "%s: status %d (want %d), message '%s' (want '%s'%s%s)", what, got, st, got ? err.message : "", s1, s2 ? ", " : "",
          s2 ? s2 : "");
}

/* Writes a safetensors file with the given header and data size. */
static void safetensors(const char *path, const char *header, size_t data_bytes) {
    size_t hl = strlen(header);
    uint8_t *buf = calloc(1, 8 + hl + data_bytes);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    write_file(path, buf, 8 + hl + data_bytes);
    free(buf);
}

/* ---- a minimal GGUF writer for hostile files */
typedef struct gbuf {
    uint8_t p[1 << 16];
    size_t n;
} gbuf;
static void g_u32(gbuf *b, uint32_t v) {
    for (int i = 0; i < 4; i++) b->p[b->n++] = (uint8_t)(v >> (8 * i));
}
static void g_u64(gbuf *b, uint64_t v) {
    g_u32(b, (uint32_t)v);
    g_u32(b, (uint32_t)(v >> 32));
}
static void g_str(gbuf *b, const char *s) {
    g_u64(b, strlen(s));
    memcpy(b->p + b->n, s, strlen(s));
    b->n += strlen(s);
}
static void g_kv_str(gbuf *b, const char *k, const char *v) {
    g_str(b, k);
    g_u32(b, 8);
    g_str(b, v);
}
int main(void) {
    snprintf(dir, sizeof dir, "%s/bad-hf", ETCH_TEST_TMP);
    snprintf(out, sizeof out, "%s/bad-out.etch", ETCH_TEST_TMP);
    char tok[1100], path[700], cfg_path[700], st_path[700], tj_path[700];
    snprintf(tok, sizeof tok, "%s/mistral/tokenizer.json", tokenizers_dir());
    etch_synth_options so = {"llama", "tiny", 2, 32, 64, 4, 2, 8, 256, 3, 0.1f, tok, "hf", "f32", 0};
    etch_error err;
    REQUIRE(etch_synth(&so, dir, &err) == ETCH_OK, "synth: %s", err.message);
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    snprintf(tj_path, sizeof tj_path, "%s/tokenizer.json", dir);
    size_t n_cfg, n_st, n_tj;
    char *cfg = check_read_file(cfg_path, &n_cfg), *st = check_read_file(st_path, &n_st), *tj = check_read_file(tj_path, &n_tj);
    REQUIRE(cfg && st && tj, "read the synthetic folder");
    CHECK(etch_export_hf(dir, out, NULL, &err) == ETCH_OK, "the untouched folder exports: %s", err.message);

    /* config.json */
    write_text(cfg_path, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 32,");
    expect_fail("truncated config", 0, dir, ETCH_ERR_FORMAT, "config.json: not valid JSON", NULL);
    write_text(cfg_path, "{\"architectures\": [\"FalconForCausalLM\"], \"hidden_size\": 32}");
    expect_fail("unknown architecture", 0, dir, ETCH_ERR_UNSUPPORTED, "config.json", "'FalconForCausalLM' is not supported");
    write_text(cfg_path, "{\"architectures\": [\"LlamaForCausalLM\"], \"intermediate_size\": 64}");
    expect_fail("missing field", 0, dir, ETCH_ERR_FORMAT, "config.json: 'hidden_size' is missing", NULL);
    write_text(cfg_path, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": -5, \"intermediate_size\": 64}");
    expect_fail("negative field", 0, dir, ETCH_ERR_FORMAT, "'hidden_size' must be an integer", NULL);
    write_text(cfg_path, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 64,"
                         "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 3, \"vocab_size\": 32000}");
    expect_fail("heads not a multiple", 0, dir, ETCH_ERR_FORMAT, "num_key_value_heads 3", NULL);
    write_text(cfg_path, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 64,"
                         "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 32000, \"hidden_act\": \"gelu\"}");
    expect_fail("activation", 0, dir, ETCH_ERR_UNSUPPORTED, "hidden activation 'gelu'", NULL);
    write_text(cfg_path, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 64,"
                         "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 32000, \"rope_scaling\": {\"type\": \"yarn\"}}");
    expect_fail("rope scaling", 0, dir, ETCH_ERR_UNSUPPORTED, "rope_scaling type 'yarn'", NULL);
    write_text(cfg_path, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 64,"
                         "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100}");
    expect_fail("vocab smaller than the tokenizer", 0, dir, ETCH_ERR_FORMAT, "tokenizer.json", "vocab_size is 100");
    /* Gemma-3 and sliding windows */
#define GEMMA "{\"architectures\": [\"Gemma3ForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 64," \
              "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 32000, "
    write_text(cfg_path, "{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"text_config\": {}}");
    expect_fail("multimodal Gemma-3", 0, dir, ETCH_ERR_UNSUPPORTED, "Gemma3ForConditionalGeneration", "text-only");
    write_text(cfg_path, GEMMA "\"sliding_window\": 8, \"attn_logit_softcapping\": 50.0}");
    expect_fail("attention soft-capping", 0, dir, ETCH_ERR_UNSUPPORTED, "attn_logit_softcapping", NULL);
    write_text(cfg_path, GEMMA "\"hidden_activation\": \"silu\", \"sliding_window\": 8}");
    expect_fail("Gemma activation", 0, dir, ETCH_ERR_UNSUPPORTED, "hidden activation 'silu'", "gelu_pytorch_tanh");
    write_text(cfg_path, GEMMA "\"sliding_window\": null}");
    expect_fail("Gemma without a window", 0, dir, ETCH_ERR_FORMAT, "'sliding_window' is missing", NULL);
    write_text(cfg_path, GEMMA "\"sliding_window\": 8, \"layer_types\": [\"sliding_attention\"]}");
    expect_fail("layer_types too short", 0, dir, ETCH_ERR_FORMAT, "'layer_types' has 1 entries for 2 layers", NULL);
    write_text(cfg_path, GEMMA "\"sliding_window\": 8, \"layer_types\": [\"sliding_attention\", \"chunked_attention\"]}");
    expect_fail("unknown layer type", 0, dir, ETCH_ERR_UNSUPPORTED, "layer_types[1] 'chunked_attention'", NULL);
    write_text(cfg_path, GEMMA "\"sliding_window\": -3}");
    expect_fail("negative window", 0, dir, ETCH_ERR_FORMAT, "'sliding_window' must be an integer", NULL);
    write_text(cfg_path, "{\"architectures\": [\"MistralForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 64,"
                         "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 32000, \"sliding_window\": \"4k\"}");
    expect_fail("window not a number", 0, dir, ETCH_ERR_FORMAT, "'sliding_window' must be an integer", NULL);
#undef GEMMA
    /* Found by fuzz_config: a number past a long's range must be refused before any cast. */
    write_text(cfg_path, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 64,"
                         "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 32000, "
                         "\"max_position_embeddings\": 6.4e37}");
    expect_fail("huge number", 0, dir, ETCH_ERR_FORMAT, "'max_position_embeddings' must be an integer", NULL);
    write_file(cfg_path, cfg, n_cfg);

    /* safetensors headers */
    write_file(st_path, "\xff\xff\xff\xff\x00\x00\x00\x00{}", 10);
    expect_fail("header length past the end", 0, dir, ETCH_ERR_FORMAT, "model.safetensors: header length", "past the end");
    safetensors(st_path, "[1, 2]", 0);
    expect_fail("header not an object", 0, dir, ETCH_ERR_FORMAT, "not a JSON object", NULL);
    safetensors(st_path, "{\"model.norm.weight\": {\"dtype\": \"F32\", \"shape\": [32], \"data_offsets\": [0, 128]}}", 64);
    expect_fail("offsets past the end", 0, dir, ETCH_ERR_FORMAT, "'model.norm.weight'", "run past the data");
    safetensors(st_path, "{\"model.norm.weight\": {\"dtype\": \"F32\", \"shape\": [32], \"data_offsets\": [0, 100]}}", 128);
    expect_fail("shape and size disagree", 0, dir, ETCH_ERR_FORMAT, "'model.norm.weight'", "data_offsets span 100");
    safetensors(st_path, "{\"model.norm.weight\": {\"dtype\": \"I8\", \"shape\": [32], \"data_offsets\": [0, 32]}}", 128);
    expect_fail("unknown dtype", 0, dir, ETCH_ERR_UNSUPPORTED, "dtype 'I8'", NULL);
    safetensors(st_path, "{\"model.norm.weight\": {\"dtype\": \"F32\", \"shape\": [32], \"data_offsets\": [0, 128]},"
                         "\"model.layers.0.input_layernorm.weight\": {\"dtype\": \"F32\", \"shape\": [32], \"data_offsets\": [64, 192]}}", 256);
    expect_fail("overlapping", 0, dir, ETCH_ERR_FORMAT, "overlap", NULL);
    safetensors(st_path, "{\"model.vision_tower.weight\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 16);
    expect_fail("unknown tensor", 0, dir, ETCH_ERR_UNSUPPORTED, "'model.vision_tower.weight' is not part of", NULL);
    safetensors(st_path, "{\"model.norm.weight\": {\"dtype\": \"F32\", \"shape\": [32], \"data_offsets\": [0, 128]}}", 128);
    expect_fail("missing tensors", 0, dir, ETCH_ERR_FORMAT, "is missing", NULL);
    write_file(st_path, st, n_st);

    /* tokenizer.json */
    write_text(tj_path, "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}");
    expect_fail("unigram", 0, dir, ETCH_ERR_UNSUPPORTED, "tokenizer.json: tokenizer model 'Unigram'", NULL);
    write_text(tj_path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a c\"]}}");
    expect_fail("merge of a missing piece", 0, dir, ETCH_ERR_FORMAT, "merge 0", "not in the vocabulary");
    write_text(tj_path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 99999999}, \"merges\": []}}");
    expect_fail("huge id", 0, dir, ETCH_ERR_FORMAT, "bad id", NULL);
    write_text(tj_path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"normalizer\": {\"type\": \"NFKC\"}}");
    expect_fail("normalizer", 0, dir, ETCH_ERR_UNSUPPORTED, "normalizer 'NFKC'", NULL);
    write_text(tj_path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", "
                        "\"pattern\": {\"Regex\": \"(unclosed\"}, \"behavior\": \"Isolated\"}}");
    expect_fail("bad regex", 0, dir, ETCH_ERR_FORMAT, "split regex does not compile", NULL);
    /* Found by fuzz_tokenizer_json: an empty piece first appended nothing to a buffer not made yet
     * (undefined behaviour the UBSan build of this test catches). An empty piece is harmless: accepted. */
    write_text(tj_path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\": 0, \"a\": 1}, \"merges\": []}}");
    CHECK(etch_export_hf(dir, out, NULL, &err) == ETCH_OK, "empty piece: %s", err.message);
    /* Found by fuzz_tokenizer_json: an empty merge string (read past its end looking for the space). */
    write_text(tj_path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"\"]}}");
    expect_fail("empty merge", 0, dir, ETCH_ERR_FORMAT, "merge 0", NULL);
    write_text(tj_path, "not json at all");
    expect_fail("not JSON", 0, dir, ETCH_ERR_FORMAT, "tokenizer.json: not valid JSON", NULL);
    write_file(tj_path, tj, n_tj);
    CHECK(etch_export_hf(dir, out, NULL, &err) == ETCH_OK, "restored folder exports: %s", err.message);

    /* Found by fuzz_llama2c: a vocabulary size of INT32_MIN (negative means "not shared"; its negation
     * overflows). */
    {
        char ck[700], tk[1100];
        snprintf(ck, sizeof ck, "%s/bad-llama2c.bin", ETCH_TEST_TMP);
        snprintf(tk, sizeof tk, "%s/stories260K/tok512.bin", models_dir());
        int32_t h[7] = {8, 16, 1, 2, 2, INT32_MIN, 8};
        write_file(ck, h, sizeof h);
        unlink(out);
        CHECK(etch_export_llama2c(ck, tk, out, NULL, &err) == ETCH_ERR_FORMAT && access(out, F_OK) != 0,
              "llama2.c vocab INT32_MIN: %s", err.message);
        /* Found by fuzz_llama2c: the versioned export's version was read after the file was unmapped. */
        memcpy(h, "24ka", 4);
        h[1] = 2;
        write_file(ck, h, sizeof h);
        CHECK(etch_export_llama2c(ck, tk, out, NULL, &err) == ETCH_ERR_UNSUPPORTED && strstr(err.message, "version 2"),
              "llama2.c versioned export: %s", err.message);
    }

    /* GGUF, by hand */
    char gpath[700];
    snprintf(gpath, sizeof gpath, "%s/bad.gguf", ETCH_TEST_TMP);
    gbuf *b = calloc(1, sizeof *b);
    memcpy(b->p, "GGUX", 4), b->n = 4;
    g_u32(b, 3);
    write_file(gpath, b->p, 64);
    expect_fail("bad magic", 1, gpath, ETCH_ERR_FORMAT, "bad.gguf: not a GGUF file", NULL);
    b->n = 0, memcpy(b->p, "GGUF", 4), b->n = 4, g_u32(b, 4), g_u64(b, 0), g_u64(b, 0);
    write_file(gpath, b->p, b->n);
    expect_fail("version", 1, gpath, ETCH_ERR_UNSUPPORTED, "GGUF version 4", NULL);
    b->n = 4, g_u32(b, 3), g_u64(b, 0), g_u64(b, 1ull << 60);
    write_file(gpath, b->p, b->n + 16);
    expect_fail("huge count", 1, gpath, ETCH_ERR_FORMAT, "cannot fit", NULL);
    b->n = 4, g_u32(b, 3), g_u64(b, 0), g_u64(b, 1), g_u64(b, 1ull << 40); /* a key whose length runs off */
    write_file(gpath, b->p, b->n + 8);
    expect_fail("bad string length", 1, gpath, ETCH_ERR_FORMAT, "key length", "past the end");
    b->n = 4, g_u32(b, 3), g_u64(b, 0), g_u64(b, 1), g_str(b, "x.y"), g_u32(b, 99), g_u32(b, 0);
    write_file(gpath, b->p, b->n);
    expect_fail("unknown value type", 1, gpath, ETCH_ERR_FORMAT, "'x.y' has unknown value type 99", NULL);
    b->n = 4, g_u32(b, 3), g_u64(b, 0), g_u64(b, 1), g_str(b, "a"), g_u32(b, 9), g_u32(b, 8), g_u64(b, 1ull << 50);
    write_file(gpath, b->p, b->n + 8);
    expect_fail("huge array", 1, gpath, ETCH_ERR_FORMAT, "array 'a'", "past the end");
    b->n = 4, g_u32(b, 3), g_u64(b, 0), g_u64(b, 1), g_kv_str(b, "general.architecture", "gemma2");
    write_file(gpath, b->p, b->n + 32); /* padded to the alignment the data would start at */
    expect_fail("unknown architecture", 1, gpath, ETCH_ERR_UNSUPPORTED, "architecture 'gemma2'", NULL);
    b->n = 4, g_u32(b, 3), g_u64(b, 1), g_u64(b, 1), g_kv_str(b, "general.architecture", "llama");
    g_str(b, "token_embd.weight"), g_u32(b, 2), g_u64(b, 32), g_u64(b, 10), g_u32(b, 10), g_u64(b, 0); /* Q2_K: unread */
    write_file(gpath, b->p, b->n + 4096);
    expect_fail("missing keys", 1, gpath, ETCH_ERR_FORMAT, "'llama.embedding_length' is missing", NULL);
    b->n = 4, g_u32(b, 3), g_u64(b, 1), g_u64(b, 1), g_kv_str(b, "general.architecture", "llama");
    g_str(b, "token_embd.weight"), g_u32(b, 2), g_u64(b, 32), g_u64(b, 1ull << 40), g_u32(b, 0), g_u64(b, 0);
    write_file(gpath, b->p, b->n + 64);
    expect_fail("tensor past the data", 1, gpath, ETCH_ERR_FORMAT, "'token_embd.weight'", "past the");

    /* A real GGUF with a tensor renamed away: the exporter names the missing one. */
    snprintf(path, sizeof path, "%s/ok.gguf", ETCH_TEST_TMP);
    so.format = "gguf";
    REQUIRE(etch_synth(&so, path, &err) == ETCH_OK, "synth gguf: %s", err.message);
    size_t ng;
    char *g = check_read_file(path, &ng);
    char *hit = g ? memmem(g, ng, "blk.1.ffn_up.weight", 19) : NULL;
    REQUIRE(hit, "tensor name in the GGUF");
    hit[4] = '7'; /* blk.7.ffn_up.weight: an unknown layer, and layer 1 lacks ffn_up */
    write_file(gpath, g, ng);
    expect_fail("missing tensor", 1, gpath, ETCH_ERR_FORMAT, "'blk.1.ffn_up.weight' is missing", NULL);
    /* Truncated at many lengths: always an error, never a crash. */
    int accepted = 0;
    for (size_t len = 0; len < ng; len += ng / 97 + 1) {
        write_file(gpath, g, len);
        if (etch_export_gguf(gpath, out, NULL, &err) == ETCH_OK) accepted++;
    }
    CHECK(accepted == 0, "%d truncated GGUF files accepted", accepted);
    free(g), free(b), free(cfg), free(st), free(tj);
    return check_done();
}
