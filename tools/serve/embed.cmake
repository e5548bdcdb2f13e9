# Writes the chat page into a C file: the bytes of IN as an array, so the binary serves it with no file
# beside it. Run by CMake at build time: cmake -DIN=page.html -DOUT=page_html.c -P embed.cmake
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" body "${body}")
file(WRITE "${OUT}" "/* Generated from tools/serve/page.html by tools/serve/embed.cmake: do not edit. */\n#include <stddef.h>\n"
     "extern const char serve_page_html[];\nextern const size_t serve_page_html_len;\n"
     "const char serve_page_html[] = {\n${body}0};\nconst size_t serve_page_html_len = ${bytes};\n")
