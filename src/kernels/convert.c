/* kernels/convert: the weight element sizes and the IEEE half and bfloat16 conversions. */
#include "kernels.h"

#include <string.h>

size_t kern_wsize(int wtype) { return wtype == KERN_F32 ? 4 : wtype == KERN_SCALE_S8 ? 1 : 2; }

size_t kern_kv_size(int kv_type) { return kv_type == KERN_KV_F32 ? 4 : kv_type == KERN_KV_F16 ? 2 : 1; }

static const char *const kv_names[] = {"f32", "f16", "q8"};

int kern_kv_type_of(const char *name) {
    for (int i = 0; name && i < 3; i++)
        if (strcmp(name, kv_names[i]) == 0) return i;
    return -1;
}

const char *kern_kv_type_name(int kv_type) { return kv_type >= 0 && kv_type < 3 ? kv_names[kv_type] : "?"; }

float kern_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else { /* subnormal: normalize */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3FF) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000u | man << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t kern_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xFF, man = x & 0x7FFFFF;
    if (exp == 0xFF) return (uint16_t)(sign | 0x7C00 | (man ? 0x200 : 0)); /* inf, NaN */
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7C00);                          /* overflow to inf */
    if (e <= 0) {                                                            /* subnormal or zero */
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000;
        int shift = 14 - e;
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = (uint32_t)e << 10 | man >> 13, rem = man & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++; /* may carry into the exponent: correct */
    return (uint16_t)(sign | half);
}

float kern_bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t kern_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7F800000u) == 0x7F800000u && (x & 0x7FFFFF)) return (uint16_t)(x >> 16 | 0x40); /* quiet NaN */
    x += 0x7FFF + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}
