/* Quantized programs (etch_quantize): stories260K with 8w keeps the reference greedy output for its
 * first 50 tokens; every scheme gives bit-identical logits in batched and one-token prefill and in
 * a static program (4w on AMX-BF16: batched within a tolerance, kern_matmul_exact); the file holds
 * what the scheme says (types, scales, tying); bad requests fail with a clear error and leave no
 * file. */
#include "format/format.h"
#include "kernels/kernels.h"
#include "stories.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

enum { LEN = 200 };

/* Whether 4w's batched rows equal one-token ones bit for bit with groups of `group`: not on AMX-BF16,
 * whose tiles sum exact products in their own order (kernels.h, kern_matmul_exact); there the test
 * takes a tolerance, and test_kernels the kernel's bound. */
static int q4_tiles_exact(int group) {
    kern_mat m = {.type = KERN_Q4, .group = group};
    return kern_matmul_exact(&m, 64, 4 * group);
}

static const char *quantize(const char *in, const char *name, const char *scheme, int group, const char *qembd) {
    const char *out = check_tmp_path(name);
    etch_quantize_options o = {.scheme = scheme, .group_size = group, .qembedding = qembd};
    etch_error err;
    if (etch_quantize(in, out, &o, &err) != ETCH_OK) {
        fprintf(stderr, "quantize %s -> %s: %s\n", scheme, name, err.message);
        return NULL;
    }
    return out;
}

/* The dtype of a tensor by name, or NULL. */
static const char *tensor_dtype(const etch_program *p, const char *name) {
    etch_program_info info;
    etch_program_info_get(p, &info);
    for (int32_t i = 0; i < info.n_tensors; i++) {
        etch_tensor_info t;
        if (etch_program_tensor(p, i, &t) == ETCH_OK && !strcmp(t.name, name)) return t.dtype;
    }
    return NULL;
}

/* Every metadata entry of f into w, as it is. */
static void copy_meta(fmt_writer *w, const fmt_file *f) {
    for (uint32_t i = 0; i < f->n_meta; i++) {
        const fmt_meta *m = &f->meta[i];
        if (m->type == FMT_I32) fmt_put_i32s(w, m->key, m->data, m->count);
        else if (m->type == FMT_F32) fmt_put_f32s(w, m->key, m->data, m->count);
        else if (m->type == FMT_STR) fmt_put_str(w, m->key, m->data);
        else fmt_put_bytes(w, m->key, m->data, m->count);
    }
}

/* A copy of program in with every NAME.scale widened to f32: the layout etch wrote before its scales
 * became f16; and two-level scales and mins (int8 NAME.scale and NAME.min times their f16 NAME.scale_d
 * and NAME.min_d) as their f32 products, the layout etch wrote for a GGUF's K-quants before
 * 2026-12-02. Returns 1 when written. */
static int widen_scales(const char *in, const char *out) {
    fmt_file f;
    etch_error err;
    if (fmt_open(in, &f, &err) != ETCH_OK) return 0;
    fmt_writer *w = fmt_writer_new();
    float **wide = calloc(f.n_tensors, sizeof *wide);
    copy_meta(w, &f);
    for (uint32_t i = 0; i < f.n_tensors; i++) {
        const fmt_tensor *t = &f.tensors[i];
        size_t len = strlen(t->name);
        int sfx = len > 6 && !strcmp(t->name + len - 6, ".scale") ? 6 : len > 4 && !strcmp(t->name + len - 4, ".min") ? 4 : 0;
        if (len > 2 && !strcmp(t->name + len - 2, "_d")) continue; /* folded into its int8 table */
        if (sfx == 6 && t->dtype == FMT_DT_F16) {
            size_t n = t->nbytes / 2;
            wide[i] = malloc(n * sizeof **wide);
            for (size_t j = 0; j < n; j++) wide[i][j] = kern_f16_to_f32(((const uint16_t *)t->data)[j]);
            fmt_add_tensor(w, t->name, FMT_DT_F32, t->ndim, t->dims, wide[i]);
        } else if (sfx && t->dtype == FMT_DT_Q8) {
            char dname[160];
            snprintf(dname, sizeof dname, "%s_d", t->name);
            const fmt_tensor *d = fmt_find_tensor(&f, dname);
            if (!d) return 0;
            size_t n = t->nbytes, per = (size_t)(t->dims[1] / d->dims[1]);
            wide[i] = malloc(n * sizeof **wide);
            for (size_t j = 0; j < n; j++)
                wide[i][j] = kern_f16_to_f32(((const uint16_t *)d->data)[kern_scale_d_index(j, (int)per)]) * (float)((const int8_t *)t->data)[j];
            fmt_add_tensor(w, t->name, FMT_DT_F32, t->ndim, t->dims, wide[i]);
        } else {
            fmt_add_tensor(w, t->name, t->dtype, t->ndim, t->dims, t->data);
        }
    }
    int ok = fmt_writer_write(w, out, NULL, NULL, &err) == ETCH_OK;
    fmt_writer_free(w);
    for (uint32_t i = 0; i < f.n_tensors; i++) free(wide[i]);
    free(wide);
    fmt_close(&f);
    return ok;
}

/* Logits of every position of ids[0..LEN), one call per token, or in chunks of the program's bound. */
static int all_logits(const char *path, const int32_t *ids, int one_by_one, float *out) {
    etch_program *p;
    etch_session *s;
    etch_error err;
    if (etch_program_open(path, &p, &err) != ETCH_OK) return fprintf(stderr, "%s\n", err.message), 0;
    if (etch_session_new(p, &s, &err) != ETCH_OK) return etch_program_close(p), 0;
    int V = etch_program_meta(p)->vocab_size, step = one_by_one ? 1 : etch_program_meta(p)->max_seq_len, ok = 1;
    for (int i = 0; i < LEN && ok; i += step) {
        int n = LEN - i < step ? LEN - i : step;
        ok = etch_forward(s, ids + i, n, i, out + (size_t)i * V, 1) == ETCH_OK;
    }
    etch_session_free(s);
    etch_program_close(p);
    return ok;
}

/* Leading generated ids that equal the reference's, greedy from prompt. */
static int greedy_prefix(const char *path, const char *prompt, cJSON *want) {
    etch_program *p;
    etch_session *s;
    etch_error err;
    if (etch_program_open(path, &p, &err) != ETCH_OK || etch_session_new(p, &s, &err) != ETCH_OK) return -1;
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    cfg.max_new_tokens = cJSON_GetArraySize(want);
    int m = -1;
    if (etch_generate(s, prompt, &cfg, NULL, NULL) == ETCH_OK) {
        int32_t n;
        const int32_t *got = etch_session_generated_ids(s, &n);
        for (m = 0; m < n && m < cJSON_GetArraySize(want) && got[m] == cJSON_GetArrayItem(want, m)->valueint;) m++;
    }
    etch_session_free(s);
    etch_program_close(p);
    return m;
}

/* REQUIRE for void functions. */
#define REQUIRE_V(cond, ...)                                                          \
    do {                                                                              \
        if (!check_record(!!(cond), #cond, __FILE__, __LINE__, __VA_ARGS__)) return; \
    } while (0)

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* The tokens of a text file as the calibration chunks them (one sample here: it fits the context). */
static int32_t text_tokens(const char *program, const char *path) {
    etch_program *p;
    etch_error err;
    char *text = check_read_file(path, NULL);
    int32_t *ids, n = -1;
    if (text && etch_program_open(program, &p, &err) == ETCH_OK) {
        if (etch_tokenize(p, text, strlen(text), 0, &ids, &n, &err) == ETCH_OK) etch_free(ids);
        etch_program_close(p);
    }
    free(text);
    return n;
}

/* a8w8: calibration by prefill and by generation on stories260K; the report's counts; static
 * parameters in the file; batched, one-token and static programs agree bit for bit. */
static void test_calibration(const char *f32, const char *f32_static) {
    const char *files[] = {ETCH_SOURCE_DIR "/tests/data/story.txt"};
    int32_t n_text = text_tokens(f32, files[0]);
    for (int mode = 0; mode < 2; mode++) {
        etch_calib_report r;
        etch_quantize_options o = {.scheme = "a8w8", .calib_files = files, .n_calib_files = 1, .report = &r,
                                   .calib_mode = mode ? "generate" : NULL, .gen_tokens = 16,
                                   .observer = mode ? "percentile" : NULL};
        const char *out = check_tmp_path(mode ? "q-a8w8-gen.etch" : "q-a8w8.etch"), *outs = check_tmp_path("q-a8w8-static.etch");
        etch_error err;
        REQUIRE_V(etch_quantize(f32, out, &o, &err) == ETCH_OK, "a8w8 %s: %s", mode ? "generate" : "prefill", err.message);
        /* the text's tokens plus a BOS per chunk of the context (512), each seen once */
        int32_t chunks = (n_text + 510) / 511;
        CHECK(r.samples == chunks && r.tokens == n_text + chunks + r.generated, "%d samples, %lld tokens (text %d)",
              r.samples, (long long)r.tokens, n_text);
        CHECK(mode ? r.generated > 0 && r.generated <= 16 * chunks : r.generated == 0, "generated %lld", (long long)r.generated);
        CHECK(r.n_special == 2 && r.n_special_seen == 1 && !strcmp(r.missing, "</s>"),
              "coverage: %d of %d, missing '%s' (the BOS <s> is in every sample, the EOS never)", r.n_special_seen,
              r.n_special, r.missing);
        CHECK(r.seconds > 0, "timed");
        printf("a8w8 %s calibration: %d samples, %lld tokens (%lld generated) in %.3f s\n", mode ? "generate" : "prefill",
               r.samples, (long long)r.tokens, (long long)r.generated, r.seconds);
        etch_program *p;
        REQUIRE_V(etch_program_open(out, &p, &err) == ETCH_OK, "%s", err.message);
        const char *dt = tensor_dtype(p, "blk.0.ffn_down.weight");
        CHECK(dt && !strcmp(dt, "i8") && tensor_dtype(p, "blk.0.ffn_down.weight.act") && tensor_dtype(p, "output.weight.act") &&
                  tensor_dtype(p, "blk.0.ffn_down.weight.wsum"),
              "a8w8: i8 layers with static activation parameters");
        etch_program_close(p);
        if (mode) continue;
        /* A file whose k projection quantizes the shared input differently from q's is refused (the
         * fuzzer found one: k then read int8 made with q's zero point and no group sums of its own). */
        size_t size = 0;
        char *file = check_read_file(out, &size);
        REQUIRE_V(file && size > 0, "read %s", out);
        REQUIRE_V(etch_program_open(out, &p, &err) == ETCH_OK, "%s", err.message);
        uint64_t off = 0;
        etch_program_info info;
        etch_program_info_get(p, &info);
        for (int32_t i = 0; i < info.n_tensors; i++) {
            etch_tensor_info t;
            if (etch_program_tensor(p, i, &t) == ETCH_OK && !strcmp(t.name, "blk.1.attn_k.weight.act")) off = t.offset;
        }
        etch_program_close(p);
        REQUIRE_V(off > 0 && off + 8 <= size, "the act tensor of blk.1.attn_k inside the file");
        float zp;
        memcpy(&zp, file + off + 4, 4);
        zp = zp == 0 ? 1 : -zp; /* another zero point */
        memcpy(file + off + 4, &zp, 4);
        const char *bad_path = check_tmp_path("q-a8w8-mixed.etch");
        FILE *bf = fopen(bad_path, "wb");
        REQUIRE_V(bf && fwrite(file, 1, size, bf) == size, "write");
        fclose(bf);
        free(file);
        CHECK(etch_program_open(bad_path, &p, &err) == ETCH_ERR_FORMAT && strstr(err.message, "layer 1: q, k and v"),
              "mixed activation parameters refused: %s", err.message);
        o.report = NULL;
        REQUIRE_V(etch_quantize(f32_static, outs, &o, &err) == ETCH_OK, "%s", err.message);
        char *text = check_read_file(ETCH_SOURCE_DIR "/tests/data/heldout.txt", NULL);
        int32_t *ids, n;
        REQUIRE_V(etch_program_open(out, &p, &err) == ETCH_OK && etch_tokenize(p, text, strlen(text), 1, &ids, &n, &err) == ETCH_OK, "tokens");
        size_t bytes = (size_t)LEN * etch_program_meta(p)->vocab_size * sizeof(float);
        etch_program_close(p);
        float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
        REQUIRE_V(all_logits(out, ids, 0, a) && all_logits(out, ids, 1, b) && all_logits(outs, ids, 1, c), "a8w8 logits");
        CHECK(memcmp(a, b, bytes) == 0 && memcmp(a, c, bytes) == 0, "a8w8: batched, one-token and static prefill differ");
        free(a), free(b), free(c), free(text), etch_free(ids);
    }
}

/* A GGUF's K-quant (Q4_K, with mins) and IQ4_XS (signed sub-block scales) kept as they are: int8
 * scales with an f16 per 256 weights (NAME.scale_d), not f32 products. The f32-product layout of the
 * same program (as etch wrote it before) gives the same logits bit for bit and is larger; so do both
 * converted as they are to 8da4w. */
static void test_two_level_scales(void) {
    char tok[1100], gguf[600], kept[600], wide[600], c1[600], c2[600];
    snprintf(tok, sizeof tok, "%s/qwen3/tokenizer.json", tokenizers_dir());
    const char *types[] = {"q4_k", "iq4_xs"};
    char *text = check_read_file(ETCH_SOURCE_DIR "/tests/data/heldout.txt", NULL);
    REQUIRE_V(text, "heldout.txt");
    for (int ti = 0; ti < 2; ti++) {
        snprintf(gguf, sizeof gguf, "%s/q-%s.gguf", ETCH_TEST_TMP, types[ti]);
        snprintf(kept, sizeof kept, "%s/q-%s.etch", ETCH_TEST_TMP, types[ti]);
        snprintf(wide, sizeof wide, "%s/q-%s-wide.etch", ETCH_TEST_TMP, types[ti]);
        etch_error err;
        etch_synth_options so = {"qwen3", "tiny", 2, 256, 512, 4, 2, 64, 512, 7, 0.1f, tok, "gguf", types[ti], 0};
        REQUIRE_V(etch_synth(&so, gguf, &err) == ETCH_OK, "synth %s: %s", types[ti], err.message);
        etch_export_options eo = {512, 64, NULL, NULL, NULL, NULL, NULL, "f32"}; /* weight-only, f32 activations */
        REQUIRE_V(etch_export_gguf(gguf, kept, &eo, &err) == ETCH_OK, "export %s: %s", types[ti], err.message);
        etch_program *p;
        REQUIRE_V(etch_program_open(kept, &p, &err) == ETCH_OK, "%s", err.message);
        const char *sc = tensor_dtype(p, "blk.0.ffn_down.weight.scale"), *sd = tensor_dtype(p, "blk.0.ffn_down.weight.scale_d");
        const char *mn = tensor_dtype(p, "blk.0.ffn_down.weight.min"), *md = tensor_dtype(p, "blk.0.ffn_down.weight.min_d");
        CHECK(sc && !strcmp(sc, "q8") && sd && !strcmp(sd, "f16"), "%s: int8 scales (%s) with f16 factors (%s)", types[ti], sc, sd);
        CHECK(ti == 0 ? mn && !strcmp(mn, "q8") && md && !strcmp(md, "f16") : !mn && !md, "%s: mins %s, %s", types[ti], mn, md);
        int32_t *ids, n_ids;
        REQUIRE_V(etch_tokenize(p, text, strlen(text), 0, &ids, &n_ids, &err) == ETCH_OK && n_ids >= LEN, "tokens");
        int V = etch_program_meta(p)->vocab_size;
        etch_program_close(p);
        REQUIRE_V(widen_scales(kept, wide), "the f32-product copy");
        size_t bytes = (size_t)LEN * V * sizeof(float);
        float *a = malloc(bytes), *b = malloc(bytes);
        REQUIRE_V(a && b && all_logits(kept, ids, 0, a) && all_logits(wide, ids, 0, b), "%s logits", types[ti]);
        CHECK(memcmp(a, b, bytes) == 0, "%s: two-level scales give other logits than their f32 products", types[ti]);
        CHECK(file_size(wide) > file_size(kept), "%s: f32 products take more room: %ld vs %ld", types[ti], file_size(wide),
              file_size(kept));
        snprintf(c1, sizeof c1, "q-%s-8da4w.etch", types[ti]);
        snprintf(c2, sizeof c2, "q-%s-wide-8da4w.etch", types[ti]);
        const char *k4 = quantize(kept, c1, "8da4w", 0, NULL), *w4 = quantize(wide, c2, "8da4w", 0, NULL);
        REQUIRE_V(k4 && w4 && all_logits(k4, ids, 0, a) && all_logits(w4, ids, 0, b), "%s to 8da4w", types[ti]);
        CHECK(memcmp(a, b, bytes) == 0, "%s: converted to 8da4w, two-level scales differ from their f32 products", types[ti]);
        /* export's default (int8 activations per 32) is that conversion with --act-group 32, in one step */
        etch_quantize_options g32 = {.scheme = "8da4w", .act_group = 32};
        snprintf(c1, sizeof c1, "%s/q-%s-g32.etch", ETCH_TEST_TMP, types[ti]);
        snprintf(c2, sizeof c2, "%s/q-%s-default.etch", ETCH_TEST_TMP, types[ti]);
        eo.activations = NULL;
        REQUIRE_V(etch_quantize(kept, c1, &g32, &err) == ETCH_OK && etch_export_gguf(gguf, c2, &eo, &err) == ETCH_OK, "%s: %s",
                  types[ti], err.message);
        REQUIRE_V(all_logits(c1, ids, 0, a) && all_logits(c2, ids, 0, b), "%s: default and --act-group 32 logits", types[ti]);
        CHECK(memcmp(a, b, bytes) == 0, "%s: the default export gives other logits than 8da4w --act-group 32", types[ti]);
        float *c = malloc(bytes);
        REQUIRE_V(c && all_logits(c2, ids, 1, c), "%s: one token per call", types[ti]);
        CHECK(memcmp(b, c, bytes) == 0, "%s: the default export's batched and one-token logits differ", types[ti]);
        free(c);
        REQUIRE_V(etch_program_open(c2, &p, &err) == ETCH_OK, "%s", err.message);
        const char *dw = tensor_dtype(p, "blk.0.ffn_down.weight");
        CHECK(dw && !strcmp(dw, ti == 0 ? "i4" : "i8"), "%s: the default export's matrices are %s, not %s", types[ti], dw,
              ti == 0 ? "i4" : "i8");
        etch_program_close(p);
        remove(c1), remove(c2);
        REQUIRE_V(etch_program_open(k4, &p, &err) == ETCH_OK, "%s", err.message);
        sc = tensor_dtype(p, "blk.1.attn_q.weight.scale"), sd = tensor_dtype(p, "blk.1.attn_q.weight.scale_d");
        const char *w = tensor_dtype(p, "blk.1.attn_q.weight");
        CHECK(w && !strcmp(w, ti == 0 ? "i4" : "i8") && sc && !strcmp(sc, "q8") && sd && !strcmp(sd, "f16"),
              "%s to 8da4w: %s (%s: its own width) keeps the int8 scales (%s) and f16 factors (%s)", types[ti],
              ti == 0 ? "i4" : "i8", w, sc, sd);
        etch_program_close(p);
        /* a hostile copy: int8 scales without their f16 factors, or with a count that does not divide
         * the groups, is refused with the tensor's name */
        static const uint16_t zeros[4096 * 3];
        for (int bad = 0; ti == 0 && bad < 2; bad++) {
            fmt_file f;
            REQUIRE_V(fmt_open(kept, &f, &err) == ETCH_OK, "%s", err.message);
            fmt_writer *fw = fmt_writer_new();
            copy_meta(fw, &f);
            for (uint32_t i = 0; i < f.n_tensors; i++) {
                const fmt_tensor *t = &f.tensors[i];
                if (strcmp(t->name, "blk.1.ffn_up.weight.min_d")) fmt_add_tensor(fw, t->name, t->dtype, t->ndim, t->dims, t->data);
                else if (bad == 1) /* ffn_up's 256 columns make 8 groups: 3 factors per row divide nothing */
                    fmt_add_tensor(fw, t->name, t->dtype, 2, (uint64_t[]){t->dims[0], 3}, zeros);
            }
            REQUIRE_V(fmt_writer_write(fw, wide, NULL, NULL, &err) == ETCH_OK, "%s", err.message);
            fmt_writer_free(fw);
            fmt_close(&f);
            CHECK(etch_program_open(wide, &p, &err) == ETCH_ERR_FORMAT && strstr(err.message, "blk.1.ffn_up.weight.min_d"),
                  "%s: '%s'", bad ? "a factor count that divides nothing" : "missing factors", err.message);
        }
        printf("%s kept: %ld bytes, with f32 products %ld; as 8da4w %ld and %ld\n", types[ti], file_size(kept),
               file_size(wide), file_size(k4), file_size(w4));
        free(a), free(b), etch_free(ids);
        remove(wide), remove(k4), remove(w4), remove(gguf);
    }
    free(text);
}

/* Chat samples rendered with the Qwen3 template: the report counts the template's special tokens,
 * the think block, and names what the data lacks. */
static void test_chat_calibration(void) {
    char tok[1100], hf[600], prog[600], chat[600], out[600];
    snprintf(tok, sizeof tok, "%s/qwen3/tokenizer.json", tokenizers_dir());
    snprintf(hf, sizeof hf, "%s/q-qwen3-hf", ETCH_TEST_TMP);
    snprintf(prog, sizeof prog, "%s/q-qwen3.etch", ETCH_TEST_TMP);
    snprintf(chat, sizeof chat, "%s/q-chat.jsonl", ETCH_TEST_TMP);
    snprintf(out, sizeof out, "%s/q-qwen3-a8w8.etch", ETCH_TEST_TMP);
    etch_error err;
    etch_synth_options so = {"qwen3", "tiny", 2, 64, 128, 2, 1, 32, 256, 5, 0.1f, tok, "hf", "f32", 0};
    REQUIRE_V(etch_synth(&so, hf, &err) == ETCH_OK, "synth: %s", err.message);
    etch_export_options eo = {256, 64, NULL, NULL, NULL, NULL, NULL, NULL};
    REQUIRE_V(etch_export_hf(hf, prog, &eo, &err) == ETCH_OK, "export: %s", err.message);
    FILE *f = fopen(chat, "w");
    REQUIRE_V(f, "write %s", chat);
    fputs("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"2+2?\"},"
          " {\"role\": \"assistant\", \"reasoning_content\": \"Add them.\", \"content\": \"4\"}]}\n"
          "\n"
          "{\"text\": \"Plain text works too.\"}\n"
          "\"So does a string.\"\n", f);
    fclose(f);
    const char *files[] = {chat};
    etch_calib_report r;
    etch_quantize_options o = {.scheme = "a8w8", .calib_files = files, .n_calib_files = 1, .report = &r, .observer = "mse"};
    REQUIRE_V(etch_quantize(prog, out, &o, &err) == ETCH_OK, "%s", err.message);
    printf("chat calibration: %d samples, %lld tokens, special tokens seen %d of %d; missing: %.120s...\n", r.samples,
           (long long)r.tokens, r.n_special_seen, r.n_special, r.missing);
    CHECK(r.samples == 3, "three samples, %d", r.samples);
    /* <|im_start|>, <|im_end|>, <think>, </think> are in the rendered conversation */
    CHECK(r.n_special_seen == 4 && r.n_special > 20, "seen %d of %d", r.n_special_seen, r.n_special);
    CHECK(strstr(r.missing, "<|endoftext|>") && !strstr(r.missing, "<|im_start|>") && !strstr(r.missing, "<think>"),
          "missing names <|endoftext|> and not the ones present: %s", r.missing);
    /* bad samples: a clear error naming the place */
    f = fopen(chat, "w");
    fputs("{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}\n", f);
    fclose(f);
    CHECK(etch_quantize(prog, out, &o, &err) == ETCH_ERR_FORMAT && strstr(err.message, "q-chat.jsonl:1") &&
              strstr(err.message, "role"), "%s", err.message);
    f = fopen(chat, "w");
    fputs("[1, 2]", f);
    fclose(f);
    CHECK(etch_quantize(prog, out, &o, &err) == ETCH_ERR_FORMAT, "not JSON lines: %s", err.message);
    f = fopen(chat, "w");
    fputs("caf\xC3(", f);
    fclose(f);
    CHECK(etch_quantize(prog, out, &o, &err) == ETCH_ERR_TEXT && strstr(err.message, "UTF-8"), "%s", err.message);
}

int main(void) {
    const char *f32 = export_stories("q-f32.etch", 64, 0), *f32_static = export_stories("q-f32-static.etch", 1, 0);
    REQUIRE(f32 && f32_static, "export");

    /* --- the reference greedy output, 8w */
    char path[600];
    snprintf(path, sizeof path, "%s/stories260K/reference/greedy_ids.json", models_dir());
    char *json = check_read_file(path, NULL);
    REQUIRE(json, "cannot read %s", path);
    cJSON *ref = cJSON_Parse(json);
    REQUIRE(ref, "reference JSON");
    const char *q8 = quantize(f32, "q-8w.etch", "8w", 0, NULL);
    REQUIRE(q8, "8w");
    struct { const char *name, *prompt; } cases[] = {{"once_upon_a_time", "Once upon a time"}, {"empty", ""}};
    for (int c = 0; c < 2; c++) {
        cJSON *want = cJSON_GetObjectItem(cJSON_GetObjectItem(ref, cases[c].name), "generated_ids");
        int m8 = greedy_prefix(q8, cases[c].prompt, want), mf = greedy_prefix(f32, cases[c].prompt, want);
        printf("%s: 8w keeps %d of %d reference tokens (f32: %d)\n", cases[c].name, m8, cJSON_GetArraySize(want), mf);
        CHECK(mf == cJSON_GetArraySize(want), "the f32 program keeps all of them");
        CHECK(m8 >= 50, "8w keeps the reference greedy output for 50 tokens, %d here", m8);
    }
    cJSON_Delete(ref);
    free(json);

    /* --- every scheme: batched, one-token and static prefill give the same logits, bit for bit (but 4w's
     * batched rows on AMX-BF16) */
    etch_program *p;
    etch_error err;
    REQUIRE(etch_program_open(f32, &p, &err) == ETCH_OK, "%s", err.message);
    char *text = check_read_file(ETCH_SOURCE_DIR "/tests/data/heldout.txt", NULL);
    REQUIRE(text, "heldout.txt");
    int32_t *ids, n_ids;
    REQUIRE(etch_tokenize(p, text, strlen(text), 1, &ids, &n_ids, &err) == ETCH_OK && n_ids >= LEN, "tokens");
    int V = etch_program_meta(p)->vocab_size;
    etch_program_close(p);
    free(text);
    struct { const char *name, *scheme; int group; const char *qembd; } schemes[] = {
        {"q-8w.etch", "8w", 0, NULL},     {"q-8w-g32.etch", "8w", 32, NULL}, {"q-4w.etch", "4w", 0, NULL},
        {"q-4w-g16.etch", "4w", 16, NULL}, {"q-8w-e8.etch", "8w", 0, "8w"},  {"q-4w-e4.etch", "4w", 0, "4w"},
        {"q-8da8w.etch", "8da8w", 0, NULL}, {"q-8da4w.etch", "8da4w", 0, NULL}, {"q-8da4w-g16-e8.etch", "8da4w", 16, "8w"},
    };
    size_t bytes = (size_t)LEN * V * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes), *fl = malloc(bytes);
    REQUIRE(all_logits(f32, ids, 0, fl), "f32 logits");
    for (size_t i = 0; i < sizeof schemes / sizeof *schemes; i++) {
        const char *q = quantize(f32, schemes[i].name, schemes[i].scheme, schemes[i].group, schemes[i].qembd);
        char sname[64];
        snprintf(sname, sizeof sname, "s-%s", schemes[i].name);
        const char *qs = quantize(f32_static, sname, schemes[i].scheme, schemes[i].group, schemes[i].qembd);
        REQUIRE(q && qs, "%s", schemes[i].name);
        REQUIRE(all_logits(q, ids, 0, a) && all_logits(q, ids, 1, b) && all_logits(qs, ids, 1, c), "%s logits", q);
        if (!strcmp(schemes[i].scheme, "4w") && !q4_tiles_exact(schemes[i].group ? schemes[i].group : 32)) {
            double worst = 0, top = 0;
            for (size_t j = 0; j < (size_t)LEN * V; j++) worst = fmax(worst, fabs(a[j] - b[j])), top = fmax(top, fabs(b[j]));
            printf("%-14s on AMX-BF16 tiles: batched logits within %.3g of one-token ones (largest %.3g)\n", schemes[i].name,
                   worst, top);
            CHECK(worst <= 1e-3 * top, "%s: batched and one-token prefill differ by %g (largest logit %g)", schemes[i].name,
                  worst, top);
        } else {
            CHECK(memcmp(a, b, bytes) == 0, "%s: batched and one-token prefill differ", schemes[i].name);
        }
        CHECK(memcmp(b, c, bytes) == 0, "%s: the static program differs", schemes[i].name);
        double diff = 0, mag = 0;
        for (size_t j = 0; j < (size_t)LEN * V; j++) diff += fabs(a[j] - fl[j]), mag += fabs(fl[j]);
        printf("%-14s %7ld bytes (f32 %ld), mean |logit - f32 logit| / mean |f32 logit| = %.4f\n", schemes[i].name,
               file_size(q), file_size(f32), diff / mag);
        /* Not a copy of the float program, and not noise either. */
        CHECK(diff > 0 && diff / mag < (strstr(schemes[i].scheme, "4w") ? 0.3 : 0.03), "%s: relative logit error %g",
              schemes[i].name, diff / mag);
    }
    /* --- q8/q4 programs (a GGUF's Q8_0/Q4_0 kept as they are) convert to 8da8w/8da4w without rounding
     * again: the same logits as quantizing the float program with that scheme directly */
    REQUIRE(quantize(f32, "q-8da4w-g16.etch", "8da4w", 16, NULL) && quantize(f32, "q-4w-g16-e4.etch", "4w", 16, "4w") &&
                quantize(f32, "q-8da4w-g16-e4.etch", "8da4w", 16, "4w"), "group 16 programs");
    struct { const char *from, *to, *scheme, *direct; } conv[] = {
        {"q-8w.etch", "c-8da8w.etch", "8da8w", "q-8da8w.etch"},
        {"q-4w-g16.etch", "c-8da4w.etch", "8da4w", "q-8da4w-g16.etch"},
        {"q-4w-g16-e4.etch", "c-8da4w-e4.etch", "8da4w", "q-8da4w-g16-e4.etch"}, /* a tied q4 table: i4, still tied */
    };
    for (size_t i = 0; i < sizeof conv / sizeof *conv; i++) {
        const char *to = quantize(check_tmp_path(conv[i].from), conv[i].to, conv[i].scheme, 0, NULL);
        REQUIRE(to && all_logits(to, ids, 0, a) && all_logits(check_tmp_path(conv[i].direct), ids, 0, b), "%s", conv[i].to);
        CHECK(memcmp(a, b, bytes) == 0, "%s converted to %s differs from %s", conv[i].from, conv[i].scheme, conv[i].direct);
        CHECK(file_size(to) == file_size(check_tmp_path(conv[i].direct)), "%s: the size of %s", conv[i].to, conv[i].direct);
    }
    /* grouped scales are f16, one per row f32; widened to f32 (as etch wrote them all before
     * 2026-11-30) the grouped ones give the same logits bit for bit, through the f32 scale loads */
    const char *g16 = check_tmp_path("q-8da4w-g16-e8.etch"), *wide = check_tmp_path("q-wide.etch");
    REQUIRE(etch_program_open(g16, &p, &err) == ETCH_OK, "%s", err.message);
    const char *sg = tensor_dtype(p, "blk.0.ffn_down.weight.scale"), *se = tensor_dtype(p, "token_embd.weight.scale");
    CHECK(sg && !strcmp(sg, "f16") && se && !strcmp(se, "f32"), "scales: groups f16 (%s), one per row f32 (%s)", sg, se);
    etch_program_close(p);
    REQUIRE(widen_scales(g16, wide), "the f32-scale copy");
    CHECK(all_logits(g16, ids, 0, a) && all_logits(wide, ids, 0, b) && memcmp(a, b, bytes) == 0,
          "f32 scales give the logits of the f16 ones");
    CHECK(file_size(wide) > file_size(g16), "f32 scales take more room: %ld vs %ld", file_size(wide), file_size(g16));
    remove(wide);
    free(a), free(b), free(c), free(fl), free(ids);

    /* --- what the files hold */
    REQUIRE(etch_program_open(check_tmp_path("q-8w.etch"), &p, &err) == ETCH_OK, "%s", err.message);
    const char *dt = tensor_dtype(p, "blk.0.attn_q.weight"), *emb = tensor_dtype(p, "token_embd.weight"),
               *outw = tensor_dtype(p, "output.weight");
    CHECK(dt && !strcmp(dt, "q8") && tensor_dtype(p, "blk.0.attn_q.weight.scale"), "8w: q8 with scales (%s)", dt);
    CHECK(emb && !strcmp(emb, "f32"), "8w: the embedding table stays f32 (%s)", emb);
    CHECK(outw && !strcmp(outw, "q8") && etch_program_meta(p)->tied_embeddings == 0,
          "8w: the tied table gives the output layer its own q8 copy (%s)", outw);
    CHECK(!strcmp(tensor_dtype(p, "blk.0.attn_norm.weight"), "f32"), "norms stay f32");
    etch_program_close(p);
    REQUIRE(etch_program_open(check_tmp_path("q-4w-e4.etch"), &p, &err) == ETCH_OK, "%s", err.message);
    emb = tensor_dtype(p, "token_embd.weight");
    CHECK(emb && !strcmp(emb, "q4") && etch_program_meta(p)->tied_embeddings == 1 && !tensor_dtype(p, "output.weight"),
          "4w --qembedding 4w: the table is q4 and stays tied (%s)", emb);
    etch_program_close(p);
    REQUIRE(etch_program_open(check_tmp_path("q-8da4w-g16-e8.etch"), &p, &err) == ETCH_OK, "%s", err.message);
    dt = tensor_dtype(p, "blk.1.ffn_down.weight"), emb = tensor_dtype(p, "token_embd.weight");
    CHECK(dt && !strcmp(dt, "i4") && emb && !strcmp(emb, "i8") && etch_program_meta(p)->tied_embeddings == 1,
          "8da4w --qembedding 8w: i4 layers, an i8 table serving as the output's integer dot products (%s, %s)", dt, emb);
    etch_program_close(p);
    REQUIRE(etch_program_open(check_tmp_path("c-8da4w-e4.etch"), &p, &err) == ETCH_OK, "%s", err.message);
    emb = tensor_dtype(p, "token_embd.weight");
    CHECK(emb && !strcmp(emb, "i4") && etch_program_meta(p)->tied_embeddings == 1 && !tensor_dtype(p, "output.weight"),
          "a tied q4 table converted: i4, still tied (%s)", emb);
    etch_program_close(p);
    long s32 = file_size(f32), s8 = file_size(check_tmp_path("q-8w-e8.etch")), s4 = file_size(check_tmp_path("q-4w-e4.etch"));
    CHECK(s8 < s32 * 0.3 && s4 < s32 * 0.2, "sizes: f32 %ld, 8w %ld, 4w %ld", s32, s8, s4);

    /* --- bad requests: a clear error, nothing written */
    struct { const char *in, *scheme; int group; const char *qembd; etch_status want; const char *says; } bad[] = {
        {check_tmp_path("q-8w.etch"), "8w", 0, NULL, ETCH_ERR_UNSUPPORTED, "already q8"},
        {check_tmp_path("q-4w.etch"), "4w", 0, NULL, ETCH_ERR_UNSUPPORTED, "converts as it is only to i4, under an integer-dot"},
        {check_tmp_path("q-4w-g16.etch"), "8da4w", 32, NULL, ETCH_ERR_ARG, "keeps its groups of 16"},
        /* 4w's groups for k = 172 are 29 wide: pairs would straddle them */
        {check_tmp_path("q-4w.etch"), "8da4w", 0, NULL, ETCH_ERR_UNSUPPORTED, "groups of 29) cannot be used"},
        {f32, "3w", 0, NULL, ETCH_ERR_ARG, "scheme '3w'"},
        {f32, "8w", 0, "2w", ETCH_ERR_ARG, "embedding scheme '2w'"},
        {f32, "4w", -1, NULL, ETCH_ERR_ARG, "group size -1"},
        {check_tmp_path("missing.etch"), "8w", 0, NULL, ETCH_ERR_IO, "missing.etch"},
    };
    const char *out = check_tmp_path("q-bad.etch");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        remove(out);
        etch_quantize_options o = {.scheme = bad[i].scheme, .group_size = bad[i].group, .qembedding = bad[i].qembd};
        etch_status st = etch_quantize(bad[i].in, out, &o, &err);
        CHECK(st == bad[i].want && strstr(err.message, bad[i].says), "case %zu: status %d, '%s'", i, st, err.message);
        CHECK(access(out, F_OK) != 0, "case %zu left a file", i);
    }
    const char *calib_files[] = {ETCH_SOURCE_DIR "/tests/data/story.txt"};
    etch_quantize_options a8 = {.scheme = "a8w8"}, w8c = {.scheme = "8w", .calib_files = calib_files, .n_calib_files = 1};
    remove(out);
    CHECK(etch_quantize(f32, out, &a8, &err) == ETCH_ERR_ARG && strstr(err.message, "needs calibration"), "%s", err.message);
    CHECK(etch_quantize(f32, out, &w8c, &err) == ETCH_ERR_ARG && strstr(err.message, "use a8w8"), "%s", err.message);
    CHECK(access(out, F_OK) != 0, "nothing written");
    etch_quantize_options same = {.scheme = "8w"};
    CHECK(etch_quantize(f32, f32, &same, &err) == ETCH_ERR_ARG && strstr(err.message, "replace the input"),
          "in place refused: %s", err.message);
    CHECK(file_size(f32) == s32, "the input is intact");
    /* a8w8 calibrated on a q8 program converts its layers as they are too */
    etch_quantize_options a8q = {.scheme = "a8w8", .calib_files = calib_files, .n_calib_files = 1};
    remove(out);
    CHECK(etch_quantize(check_tmp_path("q-8w.etch"), out, &a8q, &err) == ETCH_OK, "a8w8 from q8: %s", err.message);
    if (etch_program_open(out, &p, &err) == ETCH_OK) {
        const char *t = tensor_dtype(p, "blk.0.attn_q.weight");
        CHECK(t && !strcmp(t, "i8") && tensor_dtype(p, "blk.0.attn_q.weight.act"), "a8w8 from q8: i8 with .act (%s)", t);
        etch_program_close(p);
    }
    test_calibration(f32, f32_static);
    test_chat_calibration();
    test_two_level_scales();
    return check_done();
}
