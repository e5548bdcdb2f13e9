/* Chat templates: etch's native rendering against Jinja2's rendering of the model's own template
 * (tests/conformance/chat_template.py), and the fixed formats of the templates etch knows by name.
 * usage: test_chat PROGRAM.etch cases.json jinja_rendered.json */
#include "check.h"
#include "etch.h"

#include <cjson/cJSON.h>
#include <string.h>

static cJSON *read_json(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return cJSON_Parse(buf);
}

static void expect(const etch_program *p, const char *tpl, const char *sys, const char *user, int think, const char *want) {
    etch_chat_options o = {sys, think, tpl};
    char *got = NULL;
    etch_error err;
    etch_status st = etch_chat_render(p, user, &o, &got, &err);
    CHECK(st == ETCH_OK && strcmp(got, want) == 0, "%s: got '%s' want '%s' (%s)", tpl, got ? got : "", want, err.message);
    etch_free(got);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: test_chat PROGRAM.etch cases.json jinja_rendered.json\n");
        return 2;
    }
    etch_program *p;
    etch_error err;
    REQUIRE(etch_program_open(argv[1], &p, &err) == ETCH_OK, "%s", err.message);
    REQUIRE(!strcmp(etch_program_meta(p)->chat_template, "qwen3"), "the program's template is '%s', not qwen3",
            etch_program_meta(p)->chat_template);
    cJSON *cases = read_json(argv[2]), *want = read_json(argv[3]);
    REQUIRE(cases && want && cJSON_GetArraySize(cases) == cJSON_GetArraySize(want), "cases and renderings");
    int i = 0;
    for (const cJSON *c = cases->child; c; c = c->next, i++) {
        const cJSON *sys = cJSON_GetObjectItem(c, "system"), *think = cJSON_GetObjectItem(c, "think");
        etch_chat_options o = {cJSON_IsString(sys) ? sys->valuestring : NULL,
                               cJSON_IsBool(think) ? cJSON_IsTrue(think) : -1, NULL};
        char *got = NULL;
        const char *ref = cJSON_GetArrayItem(want, i)->valuestring;
        CHECK(etch_chat_render(p, cJSON_GetObjectItem(c, "user")->valuestring, &o, &got, &err) == ETCH_OK &&
                  strcmp(got, ref) == 0,
              "case %d: etch '%s' vs Jinja '%s'", i, got ? got : err.message, ref);
        etch_free(got);
    }
    printf("%d cases rendered as Jinja2 renders the model's own template\n", i);
    /* The other templates, by name, in their published formats (Llama 3.0, Llama 2, plain ChatML). */
    expect(p, "llama3", NULL, "Hi", -1,
           "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    expect(p, "llama3", "Sys", "Hi", -1,
           "<|start_header_id|>system<|end_header_id|>\n\nSys<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect(p, "llama2", NULL, "Hi", -1, "[INST] Hi [/INST]");
    expect(p, "llama2", "Sys", "Hi", -1, "[INST] <<SYS>>\nSys\n<</SYS>>\n\nHi [/INST]");
    expect(p, "chatml", "Sys", "Hi", -1, "<|im_start|>system\nSys<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    etch_chat_options bad = {NULL, 0, "llama3"};
    char *out;
    CHECK(etch_chat_render(p, "Hi", &bad, &out, &err) == ETCH_ERR_ARG && strstr(err.message, "qwen3"), "--no-think needs qwen3: %s",
          err.message);
    etch_chat_options unknown = {NULL, -1, "vicuna"};
    CHECK(etch_chat_render(p, "Hi", &unknown, &out, &err) == ETCH_ERR_ARG && strstr(err.message, "vicuna"), "%s", err.message);
    cJSON_Delete(cases);
    cJSON_Delete(want);
    etch_program_close(p);
    return check_done();
}
