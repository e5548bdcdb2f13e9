/* import: writing a program file from an in-memory model. */
#include "import.h"

#include "../format/format.h"
#include "../tokenizer/tokenizer.h"

#include <stdio.h>
#include <string.h>

#define DEFAULT_MAX_SEQ_LEN 128

etch_status imp_export(const imp_model *m, const char *out_path, const etch_export_options *opt, etch_error *err) {
    etch_export_options o = {0, 0};
    if (opt) o = *opt;
    if (o.max_context_len < 0 || o.max_context_len > (1 << 20))
        return base_fail(err, ETCH_ERR_ARG, "max_context_len %d is outside 1..%d", o.max_context_len, 1 << 20);
    if (o.max_seq_len < 0) return base_fail(err, ETCH_ERR_ARG, "max_seq_len %d is negative", o.max_seq_len);
    int32_t ctx = o.max_context_len ? o.max_context_len : m->context_len;
    int32_t seq = o.max_seq_len ? o.max_seq_len : DEFAULT_MAX_SEQ_LEN;
    if (seq > ctx) seq = ctx;

    /* The tokenizer must be one the runtime accepts: check it before writing anything. */
    tok_tokenizer tok;
    tok_spec spec = {m->vocab_size, m->tok_blob, m->tok_blob_size, m->tok_offsets, m->tok_scores, m->tok_types,
                     m->bos_id, m->unk_id, m->add_dummy_prefix};
    etch_status st = tok_init(&tok, &spec, m->source, err);
    if (st) return st;
    tok_free(&tok);
    if (m->tok_blob_size > UINT32_MAX) return base_fail(err, ETCH_ERR_UNSUPPORTED, "vocabulary text over 4 GiB");

    fmt_writer *w = fmt_writer_new();
    if (!w) return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate the program writer");
    /* Method metadata, named as ExecuTorch's runner names its constant methods. */
    fmt_put_i32(w, "max_seq_len", seq);
    fmt_put_i32(w, "max_context_len", ctx);
    fmt_put_i32(w, "use_kv_cache", 1);
    fmt_put_i32(w, "enable_dynamic_shape", seq > 1);
    fmt_put_i32(w, "bos_id", m->bos_id);
    fmt_put_i32s(w, "eos_ids", m->eos_ids, (uint32_t)m->n_eos);
    fmt_put_i32(w, "vocab_size", m->vocab_size);
    fmt_put_i32(w, "n_layers", m->n_layers);
    fmt_put_i32(w, "n_heads", m->n_heads);
    fmt_put_i32(w, "n_kv_heads", m->n_kv_heads);
    fmt_put_i32(w, "head_dim", m->head_dim);
    fmt_put_i32(w, "dim", m->dim);
    fmt_put_i32(w, "hidden_dim", m->hidden_dim);
    fmt_put_f32(w, "norm_eps", m->norm_eps);
    fmt_put_f32(w, "rope_base", m->rope_base);
    fmt_put_str(w, "rope_style", m->rope_style);
    fmt_put_i32(w, "tied_embeddings", m->tied_embeddings);
    fmt_put_str(w, "arch", m->arch);
    fmt_put_str(w, "dtype", "f32");
    fmt_put_str(w, "weight_layout", "row-major [out, in]: the layout kern_matmul_f32 reads");
    fmt_put_i32(w, "source_context_len", m->context_len);
    fmt_put_str(w, "source", m->source);
    fmt_put_str(w, "etch_version", ETCH_VERSION_STRING);
    /* The tokenizer. */
    fmt_put_str(w, "tokenizer.model", "sp-bpe");
    fmt_put_bytes(w, "tokenizer.pieces", m->tok_blob, (uint32_t)m->tok_blob_size);
    fmt_put_i32s(w, "tokenizer.offsets", m->tok_offsets, (uint32_t)m->vocab_size + 1);
    fmt_put_f32s(w, "tokenizer.scores", m->tok_scores, (uint32_t)m->vocab_size);
    fmt_put_bytes(w, "tokenizer.types", m->tok_types, (uint32_t)m->vocab_size);
    fmt_put_i32(w, "tokenizer.unk_id", m->unk_id);
    fmt_put_i32(w, "tokenizer.add_dummy_prefix", m->add_dummy_prefix);
    for (int32_t i = 0; i < m->n_tensors; i++) {
        const imp_tensor *t = &m->tensors[i];
        fmt_add_tensor(w, t->name, FMT_DT_F32, t->ndim, t->dims, t->data);
    }
    st = fmt_writer_write(w, out_path, err);
    fmt_writer_free(w);
    if (st) return st;

    /* Open what was written, with the runtime's own checks, so a bad export never leaves a file. */
    etch_program *p;
    st = etch_program_open(out_path, &p, err);
    if (st) {
        remove(out_path);
        return st;
    }
    etch_program_close(p);
    return ETCH_OK;
}
