/* jsonq FILE PATH: prints the JSON value at PATH (keys and array indexes separated by '.'),
 * compactly; "length" after an array gives its length. Exit 1 when the file is not valid JSON or
 * the path is absent. A test helper built on cJSON, an implementation independent of etch's. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: jsonq FILE PATH\n");
        return 2;
    }
    FILE *f = strcmp(argv[1], "-") ? fopen(argv[1], "rb") : stdin;
    if (!f) return 1;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    buf[n] = '\0';
    cJSON *root = cJSON_Parse(buf);
    if (!root) {
        fprintf(stderr, "jsonq: not valid JSON near: %.40s\n", cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "?");
        return 1;
    }
    cJSON *v = root;
    char *path = argv[2];
    for (char *tok = strtok(path, "."); tok && v; tok = strtok(NULL, ".")) {
        if (!strcmp(tok, "length") && cJSON_IsArray(v)) {
            printf("%d\n", cJSON_GetArraySize(v));
            return 0;
        }
        v = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, atoi(tok)) : cJSON_GetObjectItemCaseSensitive(v, tok);
    }
    if (!v) return 1;
    if (cJSON_IsString(v)) fputs(v->valuestring, stdout);
    else {
        char *s = cJSON_PrintUnformatted(v);
        fputs(s, stdout);
        free(s);
    }
    putchar('\n');
    cJSON_Delete(root);
    free(buf);
    return 0;
}
