// The host build's __half: IEEE binary16 storage with the GPU's conversions (round to
// nearest even from f32 and, in one rounding, from f64; NaN becomes 0x7fff as cvt.rn.f16
// gives it). Arithmetic on __half is not provided: the kernels widen to f32 first.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

struct __half {
  unsigned short x;
};

namespace standin {
// f64 → binary16 bits, rounded once to nearest even.
inline unsigned short half_bits(double d) {
  unsigned short sign = std::signbit(d) ? 0x8000 : 0;
  if (std::isnan(d)) return 0x7fff;
  double a = std::fabs(d);
  if (a >= 65520.0) return sign | 0x7c00;  // past the midpoint of 65504 and 2^16
  if (a < 0x1p-14) {                       // subnormal: units of 2^-24
    double m = std::nearbyint(a * 0x1p24);  // exact scaling; nearbyint ties to even
    return sign | (unsigned short)m;        // m = 1024 is the smallest normal's bits
  }
  int e;
  std::frexp(a, &e);  // a = f · 2^e, f in [0.5, 1)
  e -= 1;             // a = g · 2^e, g in [1, 2)
  double m = std::nearbyint(std::ldexp(a, 10 - e));  // in [1024, 2048]
  if (m == 2048.0) {
    m = 1024.0;
    e += 1;
  }
  if (e > 15) return sign | 0x7c00;
  return sign | (unsigned short)((e + 15) << 10) | (unsigned short)(m - 1024.0);
}

// binary16 bits → f32, exactly (every binary16 value is an f32).
inline float half_value(unsigned short h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
  if (e == 0) {
    float v = (float)m * 0x1p-24f;  // subnormal (or zero): exact
    return (h & 0x8000) ? -v : v;
  }
  if (e == 31)
    bits = sign | 0x7f800000u | (m << 13);  // infinity or NaN
  else
    bits = sign | ((e + 112) << 23) | (m << 13);  // rebias 15 → 127
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}
}  // namespace standin

inline float __half2float(__half h) { return standin::half_value(h.x); }
inline __half __float2half_rn(float f) { return __half{standin::half_bits((double)f)}; }
inline __half __float2half(float f) { return __float2half_rn(f); }
inline __half __double2half(double d) { return __half{standin::half_bits(d)}; }
