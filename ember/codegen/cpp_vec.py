"""Explicit vector loops for the C++ backend (GCC/Clang vector extensions), with a scalar tail.

The scalar ``omp simd`` loops of ``ember.codegen.cpp`` leave vectorization to the compiler, which gives up or
falls into slow paths on the loops that matter most: short reduction rows (GCC's ``omp simd reduction`` keeps
per-lane arrays in memory and combines them with a scalar loop after every row), and selects over masks
(if-conversion turns ``mask ? -inf : x`` into masked loads). Here a loop whose statements allow it is written
with vector types instead: ``vfloat`` (``EMBER_VW`` float lanes) for float32 values and ``vmask`` (32-bit lanes
of 0 / -1) for bools, loads and stores of whole vectors, vector accumulators reduced horizontally once per row,
and the leftover ``n % EMBER_VW`` points run by the scalar loop as before.

A loop is vectorized when, at the loop's level, every value is float32 or bool, every load and store is
contiguous in the loop variable or invariant within a vector (``lane_coeff``) or, for float32 loads,
``var % m`` with ``m`` dividing the width (``period``: built lane by lane), loads are unmasked, and
reductions are sum/prod/amax/amin. Ops use a vector rule from ``VOPS`` when there is one, else the scalar rule
of ``cpp_ops`` applied lane by lane in an ``omp simd`` loop over the lanes (which GCC turns into one libmvec
call for erf/tanh/log...). Values computed only from loop invariants stay scalars and broadcast where used.
"""
from __future__ import annotations

from typing import Any, Callable

import sympy
import torch

from ember.loopir.kernel import HEAVY_OPS, Accumulate, Assign, Store

from . import cpp_cascade, cpp_ops as C

# ``w`` below is cpp.py's ``_KernelWriter`` (not imported: cpp imports this module)

VEC_DTYPES = (torch.float32, torch.bfloat16, torch.bool)
FLOATS = (torch.float32, torch.bfloat16)     # vfloat lanes (bf16 values in float, rounded to bf16 after each op)
VEC_REDUCTIONS = ("sum", "prod", "amax", "amin", "welford")

PRELUDE = r"""
typedef float vfloat __attribute__((vector_size(EMBER_VW * 4)));
typedef int32_t vmask __attribute__((vector_size(EMBER_VW * 4)));
static inline vfloat ember_vbf(float s) { return vfloat{} + s; }
static inline vmask ember_vbm(bool s) { return vmask{} + (s ? -1 : 0); }
static inline vfloat ember_vload(const float* p) { vfloat v; std::memcpy(&v, p, sizeof v); return v; }
static inline vfloat ember_vperiodic(const float* p, int m) {   // lanes p[0..m-1] repeated (m divides the width)
  vfloat v; for (int l = 0; l < EMBER_VW; ++l) v[l] = p[l % m]; return v;
}
static inline void ember_vstore(float* p, vfloat v) { std::memcpy(p, &v, sizeof v); }
typedef uint16_t vu16 __attribute__((vector_size(EMBER_VW * 2)));
typedef uint32_t vu32 __attribute__((vector_size(EMBER_VW * 4)));
static inline vfloat ember_vload_bf16(const uint16_t* p) {     // bf16 widens to float exactly: the high half
  vu16 h; std::memcpy(&h, p, sizeof h); return (vfloat)(__builtin_convertvector(h, vu32) << 16);
}
static inline vu32 ember_vbf16_bits(vfloat v) {                // round to nearest even, NaN to a quiet NaN
  const vu32 u = (vu32)v;
  const vu32 r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (v != v) ? (vu32){} + 0x7fc0u : r;
}
static inline vfloat ember_vround_bf16(vfloat v) { return (vfloat)(ember_vbf16_bits(v) << 16); }
static inline void ember_vstore_bf16(uint16_t* p, vfloat v) {
  const vu16 h = __builtin_convertvector(ember_vbf16_bits(v), vu16); std::memcpy(p, &h, sizeof h);
}
static inline void ember_vstore_bf16_exact(uint16_t* p, vfloat v) {   // v already bf16 values: the high halves
  const vu16 h = __builtin_convertvector((vu32)v >> 16, vu16); std::memcpy(p, &h, sizeof h);
}
/* bools are bytes of 0 or 1: widened to 32-bit lanes and negated (0 / -1), and back, as whole vectors (a lane
   loop of byte loads was most of a short masked softmax row's work) */
typedef uint8_t vu8 __attribute__((vector_size(EMBER_VW)));
static inline vmask ember_vload_mask(const bool* p) {
  vu8 b; std::memcpy(&b, p, sizeof b); return -__builtin_convertvector(b, vmask);
}
static inline void ember_vstore_mask(bool* p, vmask m) {
  const vu8 b = __builtin_convertvector(m & 1, vu8); std::memcpy(p, &b, sizeof b);
}
static inline vfloat ember_vmaximum(vfloat a, vfloat b) { return ((a > b) | (a != a)) ? a : b; }
static inline vfloat ember_vminimum(vfloat a, vfloat b) { return ((a < b) | (a != a)) ? a : b; }
static inline vfloat ember_vabs(vfloat a) { return (vfloat)((vmask)a & 0x7fffffff); }
/* exp and erf with fused multiply-adds (the translation unit turns contraction off; here it only speeds up
   approximations that are as accurate either way): GCC keeps them out of line, ~20% faster than inline */
#pragma GCC push_options
#pragma GCC optimize ("fp-contract=fast")
/* exp for float, inline so `omp simd` loops vectorize it: libmvec's vector expf takes a scalar slow path for
   every vector holding an input outside about [-87, 88] (the -inf of a masked softmax), ~5x slower there.
   Cody-Waite reduction, Cephes' degree-6 polynomial; under 1 ulp for every float whose exp is a normal float.
   Results below FLT_MIN are 0 (computing denormals costs microcode assists), as in the vector version
   ``ember_vexpf``; exp(-inf) = 0, exp(inf) = inf, NaN stays NaN. */
static inline float ember_expf(float x) {
  float xc = x < -87.33654f ? -87.33654f : x;
  xc = xc > 88.72284f ? 88.72284f : xc;
  const float k = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = k * -0.693145751953125f + xc;
  r = k * -1.428606765330187e-06f + r;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f; p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f; p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * (r * r) + r + 1.0f;
  const int32_t ki = (int32_t)k, k1 = ki >> 1, k2 = ki - k1;
  const float s1 = __builtin_bit_cast(float, (k1 + 127) << 23), s2 = __builtin_bit_cast(float, (k2 + 127) << 23);
  float res = p * s1 * s2;
  res = x < -87.33654f ? 0.0f : res;
  res = x > 88.72284f ? __builtin_inff() : res;
  return x != x ? x : res;
}
/* tanh and erf for float scalars: ember_vtanh and ember_verf on one lane, written out. A value's bits must not
   depend on which loop computes it (a vector loop, its scalar tail, a scalar kernel): a backward compares a
   recomputed value with a saved maximum (amax, max, max_pool), and a tail computed with libm's tanhf would
   differ from the vector lanes in the last bit. So the scalar functions use the same polynomials, and the same
   contraction (they are in this fp-contract region too). */
static inline float ember_tanhf(float x) {
  const float xc = x > 9.0f ? 9.0f : (x < -9.0f ? -9.0f : x);
  const float x2 = xc * xc;
  float p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f; p = p * x2 + 5.12229709037114e-08f; p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f; p = p * x2 + 4.89352455891786e-03f;
  float q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f; q = q * x2 + 4.89352518554385e-03f;
  const float t = xc * p / q;
  const float one = __builtin_copysignf(1.0f, x);
  const float ax = __builtin_fabsf(x);
  return ax < 0.0004f ? x : (ax >= 9.0f ? one : t);
}
static inline float ember_erff(float x) {
  const int32_t sign = __builtin_bit_cast(int32_t, x) & (int32_t)0x80000000;
  const float a = __builtin_fabsf(x);
  const float t = 1.0f / (a * 0.3275911f + 1.0f);
  float r = t * 1.061405429f + -1.453152027f;
  r = r * t + 1.421413741f; r = r * t + -0.284496736f; r = r * t + 0.254829592f;
  const float y = 1.0f - r * t * ember_expf(-(x * x));
  const float z = x * x;      // |x| < 1: x P(x^2), see ember_verf
  float s = z * -5.625401972793043e-04f + 4.91602998226881e-03f;
  s = s * z + -2.6709960773587227e-02f; s = s * z + 1.1280131340026855e-01f;
  s = s * z + -3.7612318992614746e-01f; s = s * z + 1.1283791065216064f;
  return a < 1.0f ? x * s : __builtin_bit_cast(float, __builtin_bit_cast(int32_t, y) ^ sign);
}
static vfloat ember_vexpf(vfloat x) {
  /* no clamp of x: k = round(x / ln 2) is read from the bits of x / ln 2 + 1.5 * 2^23 (no float-to-int
     conversion, defined for every input), and the selects at the end replace whatever a huge, infinite or NaN
     input computed (the clamps were 4 of the ~37 instructions) */
  const vfloat km = x * 1.44269504088896341f + 12582912.0f;
  const vfloat k = km - 12582912.0f;
  const vfloat xc = x;
  vfloat r = k * -0.693145751953125f + xc;
  r = k * -1.428606765330187e-06f + r;
  vfloat p = ember_vbf(1.9875691500E-4f);
  p = p * r + 1.3981999507E-3f; p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f; p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * (r * r) + r + 1.0f;
  /* p * 2^k by adding k to p's exponent: exact, and in range for every result from FLT_MIN (x = -87.33654)
     to FLT_MAX (x = 88.722832, the largest float whose exp is finite); the selects below replace the rest */
  const vmask ki = (vmask)km - 0x4B400000;
  vfloat res = (vfloat)((vmask)p + (ki << 23));
  res = x < -87.33654f ? ember_vbf(0.0f) : res;
  res = x > 88.72283172607421875f ? ember_vbf(__builtin_inff()) : res;
  return x != x ? x : res;
}
static vfloat ember_vtanh(vfloat x) {    // x P(x^2) / Q(x^2) (Eigen's float tanh) for |x| < 9: within 3e-7 of tanh
  const vfloat c = ember_vbf(9.0f);       // relatively; +-1 from 9 on (where float tanh is 1), NaN and -0 kept
  const vfloat xc = x > c ? c : (x < -c ? -c : x);
  const vfloat x2 = xc * xc;
  vfloat p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f; p = p * x2 + 5.12229709037114e-08f; p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f; p = p * x2 + 4.89352455891786e-03f;
  vfloat q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f; q = q * x2 + 4.89352518554385e-03f;
  const vfloat t = xc * p / q;
  const vfloat one = (vfloat)(((vmask)x & (int32_t)0x80000000) | (vmask)ember_vbf(1.0f));
  const vfloat ax = ember_vabs(x);
  return ax < 0.0004f ? x : (ax >= 9.0f ? one : t);
}
static vfloat ember_verf(vfloat x) {
  /* |x| >= 1: Abramowitz-Stegun 7.1.26 with the exp above (abs. error ~1.5e-7, under 2 ulp there). |x| < 1:
     x P(x^2), P of degree 5 fitted to erf(x)/x by relative least squares on [0, 1] (under 1.4 ulp): A-S's
     absolute error made erf(1e-6) 6% off and erf(1e-8) 0, where eager is within an ulp. */
  const vmask sign = (vmask)x & (int32_t)0x80000000;
  const vfloat a = ember_vabs(x);
  const vfloat t = 1.0f / (a * 0.3275911f + 1.0f);
  vfloat r = t * 1.061405429f + -1.453152027f;
  r = r * t + 1.421413741f; r = r * t + -0.284496736f; r = r * t + 0.254829592f;
  const vfloat y = 1.0f - r * t * ember_vexpf(-(x * x));
  const vfloat z = x * x;
  vfloat s = z * -5.625401972793043e-04f + 4.91602998226881e-03f;
  s = s * z + -2.6709960773587227e-02f; s = s * z + 1.1280131340026855e-01f;
  s = s * z + -3.7612318992614746e-01f; s = s * z + 1.1283791065216064f;
  return a < 1.0f ? x * s : (vfloat)((vmask)y ^ sign);
}
#pragma GCC pop_options
/* lane l of a rotation by w holds lane l + w: folds across lanes as trees of log2(width) steps */
static inline vmask ember_rot(int w) { vmask i; for (int l = 0; l < EMBER_VW; ++l) i[l] = (l + w) % EMBER_VW; return i; }
/* a sum across lanes as a tree (pairwise: each lane's value goes through log2(width) additions, not up to width) */
static inline float ember_hsum(vfloat v) {
  float s[EMBER_VW]; std::memcpy(s, &v, sizeof v);
  for (int w = EMBER_VW / 2; w > 0; w /= 2) for (int l = 0; l < w; ++l) s[l] += s[l + w];
  return s[0];
}
static inline float ember_hprod(vfloat v) { float s = 1; for (int l = 0; l < EMBER_VW; ++l) s *= v[l]; return s; }
/* max and min across lanes as a tree of lane rotations (log2 of the width steps instead of a chain through every
   lane: short rows, an attention's 32-64 scores, fold a row's accumulators per row). Any order gives the same
   max; NaN lanes are reported by ember_hnan, which callers test. */
static inline float ember_hmax(vfloat v) {
  for (int w = EMBER_VW / 2; w > 0; w /= 2) { const vfloat s = __builtin_shuffle(v, ember_rot(w)); v = s > v ? s : v; }
  return v[0];
}
static inline float ember_hmin(vfloat v) {
  for (int w = EMBER_VW / 2; w > 0; w /= 2) { const vfloat s = __builtin_shuffle(v, ember_rot(w)); v = s < v ? s : v; }
  return v[0];
}
/* the lanes' Welford states (n points each) as one, in float64 (the row's state, cpp.py's acc_type) */
static inline ember_wf<double> ember_hwelford(vfloat mean, vfloat m2, int64_t n) {
  if (n == 0) return ember_wf<double>{0, 0, 0};
  const float mu = ember_hsum(mean) * (1.0f / EMBER_VW);
  const vfloat d = mean - mu;
  return ember_wf<double>{mu, (double)ember_hsum(m2) + (double)n * (double)ember_hsum(d * d), n * EMBER_VW};
}
/* 1/n for Welford's vector steps: a division per step was a quarter of a bf16 LayerNorm's time */
static float ember_recip_tab[16384];
static const int ember_recip_init = [] { for (int i = 1; i < 16384; ++i) ember_recip_tab[i] = 1.0f / (float)i; return 0; }();
static inline float ember_recip(int64_t n) { return n < 16384 ? ember_recip_tab[n] : 1.0f / (float)n; }
/* per-lane Welford states of column reductions (ember.codegen.cpp_colred): float64 sums of the shifted points
   and of their squares, one lane per outer point, as two halves of EMBER_VW / 2 doubles (one register each: a
   vector of EMBER_VW doubles is wider than a register, and GCC kept such accumulators on the stack, a load and a
   store per step, 2x slower); M2 from them per lane, rounded to float once */
typedef double vdh __attribute__((vector_size(EMBER_VW * 4)));
typedef float vfh __attribute__((vector_size(EMBER_VW * 2)));
#if defined(__AVX512F__) && EMBER_VW == 16     /* one vcvtps2pd per half (GCC splits a generic convert in four) */
#include <immintrin.h>
static inline vdh ember_vlo(vfloat v) { return (vdh)_mm512_cvtps_pd(_mm512_castps512_ps256((__m512)v)); }
static inline vdh ember_vhi(vfloat v) {
  return (vdh)_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd((__m512)v), 1)));
}
#elif defined(__has_builtin) && __has_builtin(__builtin_shufflevector)   /* GCC 12, Clang: a register's half */
#if EMBER_VW == 16
#define EMBER_LO_LANES 0, 1, 2, 3, 4, 5, 6, 7
#define EMBER_HI_LANES 8, 9, 10, 11, 12, 13, 14, 15
#else
#define EMBER_LO_LANES 0, 1, 2, 3
#define EMBER_HI_LANES 4, 5, 6, 7
#endif
static inline vdh ember_vlo(vfloat v) { return __builtin_convertvector(__builtin_shufflevector(v, v, EMBER_LO_LANES), vdh); }
static inline vdh ember_vhi(vfloat v) { return __builtin_convertvector(__builtin_shufflevector(v, v, EMBER_HI_LANES), vdh); }
#else
static inline vdh ember_vlo(vfloat v) { vfh h; std::memcpy(&h, &v, sizeof h); return __builtin_convertvector(h, vdh); }
static inline vdh ember_vhi(vfloat v) {
  vfh h; std::memcpy(&h, (const char*)&v + sizeof h, sizeof h); return __builtin_convertvector(h, vdh);
}
#endif
static inline vfloat ember_vm2_from_sums(vdh s2a, vdh s2b, vdh s1a, vdh s1b, double n) {
  vfloat r;
  for (int l = 0; l < EMBER_VW / 2; ++l) {
    r[l] = (float)ember_m2_from_sums(s2a[l], s1a[l], n);
    r[l + EMBER_VW / 2] = (float)ember_m2_from_sums(s2b[l], s1b[l], n);
  }
  return r;
}
static inline int ember_hnan(vfloat v) { int n = 0; for (int l = 0; l < EMBER_VW; ++l) n |= v[l] != v[l]; return n; }
"""


def wf_lane_decl(a: str, *sfx: str) -> str:
    """Declarations of float64 lane sums ``a<sfx>`` as register-wide halves ``a<sfx>a`` and ``a<sfx>b``."""
    return "vdh " + ", ".join(f"{a}{x}{h} = vdh{{}}" for x in sfx for h in "ab") + ";"


def wf_lane_update(a: str, sq: str, s1: str, v: str) -> str:
    """Add the float vector ``v`` to the float64 lane sums ``a<s1>`` and its squares to ``a<sq>``."""
    return (f"{{ const vdh a_ = ember_vlo({v}), b_ = ember_vhi({v}); {a}{s1}a += a_; {a}{s1}b += b_; "
            f"{a}{sq}a += a_ * a_; {a}{sq}b += b_ * b_; }}")


def lane_coeff(e: Any, var: sympy.Symbol, width: int, lane_vars: set[str]) -> int | None:
    """How ``e`` moves across the lanes of a vector starting at a multiple of ``width``: 0 (the same for every
    lane), 1 (consecutive), or None (anything else, including a dependence on another per-lane value)."""
    r = _lanes(e, var, width, lane_vars)
    return None if r is None else r[0]


def period(e: Any, var: sympy.Symbol, width: int, lane_vars: set[str]) -> int | None:
    """``m`` when ``e`` is ``var % m`` plus terms the same for every lane, with ``m`` a proper divisor of
    ``width``: across a vector starting at a multiple of ``width`` it takes the values at lane 0 plus
    ``0..m-1``, repeated (a per-channel parameter read over NHWC rows of fewer channels than lanes)."""
    if not isinstance(e, sympy.Basic):
        return None
    terms = e.args if isinstance(e, sympy.Add) else (e,)
    mods = [t for t in terms if isinstance(t, sympy.Mod) and t.args[0] == var and t.args[1].is_Integer]
    if len(mods) != 1:
        return None
    m = int(mods[0].args[1])
    if not (1 < m < width and width % m == 0):
        return None
    rest = [t for t in terms if t is not mods[0]]
    return m if all(lane_coeff(t, var, width, lane_vars) == 0 for t in rest) else None


def _lanes(e: Any, var: sympy.Symbol, width: int, lane_vars: set[str]) -> tuple[int, bool] | None:
    """(lane coefficient, aligned): aligned says the value at lane 0 is a multiple of ``width`` (integer
    symbols other than ``var`` are nonnegative integers of unknown residue)."""
    if isinstance(e, (bool, int)):
        return 0, int(e) % width == 0
    if not isinstance(e, sympy.Basic):
        return None
    if any(s.name in lane_vars for s in e.free_symbols):
        return None
    if e == var:
        return 1, True
    if e.is_Integer:
        return 0, int(e) % width == 0
    if isinstance(e, sympy.Symbol):
        return 0, False
    if isinstance(e, sympy.Add):
        parts = [_lanes(a, var, width, lane_vars) for a in e.args]
        if None in parts:
            return None
        return sum(p[0] for p in parts), all(p[1] for p in parts)   # type: ignore[index]
    if isinstance(e, sympy.Mul):
        c, rest = e.as_coeff_Mul()
        if c.is_Integer and rest != e:
            inner = _lanes(rest, var, width, lane_vars)
            return None if inner is None else (int(c) * inner[0], int(c) % width == 0 or inner[1])
        parts = [_lanes(a, var, width, lane_vars) for a in e.args]
        return (0, any(p[1] for p in parts)) if all(p is not None and p[0] == 0 for p in parts) else None
    if isinstance(e, (sympy.floor, sympy.Mod)):
        a, m = sympy.fraction(sympy.together(e.args[0])) if isinstance(e, sympy.floor) else e.args
        inner = _lanes(a, var, width, lane_vars)
        if inner is None or not m.is_Integer:
            return None
        if inner[0] == 0:
            return 0, False
        if inner != (1, True) or int(m) % width != 0:
            return None
        return (0, False) if isinstance(e, sympy.floor) else (1, True)
    if var not in e.free_symbols:
        return 0, False
    if isinstance(e, (sympy.core.relational.Relational, sympy.logic.boolalg.BooleanFunction)):
        parts = [_lanes(a, var, width, lane_vars) for a in e.args]
        if all(p is not None and p[0] == 0 for p in parts):
            return 0, False
        # an aligned run of lanes against an aligned bound: ``v0 + l < K`` holds for all lanes or none
        if isinstance(e, (sympy.StrictLessThan, sympy.GreaterThan)) and parts == [(1, True), (0, True)]:
            return 0, False
        if isinstance(e, (sympy.StrictGreaterThan, sympy.LessThan)) and parts == [(0, True), (1, True)]:
            return 0, False
    return None


class VecLoop:
    """One loop (the x loop of a pointwise kernel, or one ``r`` section) written with vector types."""

    def __init__(self, w: Any, stmts: list, var: sympy.Symbol, width: int,
                 accumulators: list = (), per_lane: bool = False, vectors: frozenset = frozenset()) -> None:
        self.w, self.stmts, self.var, self.width = w, stmts, var, width
        self.accumulators = list(accumulators)
        # per_lane: the loop's lanes are outer points, each with its own reduction: vector accumulators are
        # never folded, and ``reduced`` reads them as vectors (ember.codegen.cpp_colred)
        self.per_lane = per_lane
        self.vectors = vectors              # vars of the enclosing code that are vectors already
        self.vec: set[str] = set(vectors)   # vars that are vectors inside the loop
        self.lane_vars = {st.var for st in stmts if isinstance(st, Assign)}
        self.suffix = ""                    # the accumulator set the statements being written update
        self.hoisted: set[str] = set()      # vars computed before the loop (``_hoisted``)
        self.part: set[str] = set()         # sum accumulators that add into a block's partials (``_cascaded``)

    # -- can this loop be vectorized? -----------------------------------------------------------------------
    def ok(self) -> bool:
        if any(rt not in VEC_REDUCTIONS or dt != torch.float32 for _, rt, dt in self.accumulators):
            return False
        vec: set[str] = set(self.vectors)     # what will be a vector (as ``stmt`` decides it)
        for st in self.stmts:
            if isinstance(st, Store):
                if st.scatter or self.w.body.buffer_dtype(st.buf) not in VEC_DTYPES or self.w.dtype(st.var) != \
                        self.w.body.buffer_dtype(st.buf) or self._coeff(st.index) != 1:
                    return False
                continue
            if isinstance(st, Accumulate):
                continue
            if st.kind == "reduced" and self.per_lane:
                vec.add(st.var)
                continue
            if not self._assign_ok(st):
                return False
            if (st.kind == "load" and (self._coeff(st.args[1]) == 1 or self._period(st)))  \
                    or any(a in vec for a in _operands(st)):
                if st.dtype not in VEC_DTYPES or any(self.w.dtype(a) not in VEC_DTYPES for a in _operands(st)):
                    return False
                if st.kind == "load" and not _widens(self.w.body.buffer_dtype(st.args[0]), st.dtype):
                    return False
                vec.add(st.var)
        return True

    def _coeff(self, idx: Any) -> int | None:
        return lane_coeff(idx, self.var, self.width, self.lane_vars)

    def _period(self, st: Assign) -> int | None:
        """The period of an unmasked float32 load repeating within a vector (see ``period``), else None."""
        buf, idx, mask = st.args
        if mask is not None or self.w.body.buffer_dtype(buf) != torch.float32 or self._coeff(idx) is not None:
            return None
        return period(idx, self.var, self.width, self.lane_vars)

    def _assign_ok(self, st: Assign) -> bool:
        if st.kind == "load":
            buf, idx, mask = st.args
            c = self._coeff(idx)
            if mask is not None and self._coeff(mask) != 0:
                return False          # a mask per lane: the scalar loop's conditional loads
            return c == 0 or (c == 1 and self.w.body.buffer_dtype(buf) in VEC_DTYPES) or self._period(st) is not None
        if st.kind == "index":
            return self._coeff(st.args[0]) == 0
        return st.kind in ("const", "op", "cast")      # not "reduced" (only after a loop)

    # -- emission --------------------------------------------------------------------------------------------
    def _v(self, a: str) -> str:
        """``a`` as a vector (broadcast when it is a scalar)."""
        if a in self.vec:
            return a
        return f"ember_vbm({a})" if self.w.dtype(a) is torch.bool else f"ember_vbf({a})"

    def stmt(self, st: Any) -> str:
        if isinstance(st, Store):
            ptr, i = _ptr(st.buf), C.index(st.index)
            # a bf16 vector computed in the loop holds bf16 values already (loads widen exactly, every op and
            # cast rounds): its store keeps the high halves; a broadcast scalar (a constant) is rounded there
            bf16 = "ember_vstore_bf16_exact" if st.var in self.vec else "ember_vstore_bf16"
            fn = {torch.bool: "ember_vstore_mask", torch.bfloat16: bf16}.get(self.w.dtype(st.var), "ember_vstore")
            return f"{fn}({ptr} + {i}, {self._v(st.var)});"
        if isinstance(st, Accumulate):
            a, v = f"v{st.acc}{self.suffix}{'_p' if st.acc in self.part else ''}", self._v(st.var)
            if st.reduce_type == "welford" and self.per_lane:     # float64 sums per lane (``_decls``)
                return wf_lane_update(f"v{st.acc}{self.suffix}", "_s2", "_s1", v)
            if st.reduce_type == "welford":     # every lane has seen as many points: one count
                n = f"{st.acc}{self.suffix}{'_p' if st.acc in self.part else ''}_vn"
                return (f"{{ const vfloat d_ = {v} - {a}_mean; {a}_mean += d_ * ember_recip(++{n}); "
                        f"{a}_m2 += d_ * ({v} - {a}_mean); }}")
            return {"sum": f"{a} += {v};", "prod": f"{a} *= {v};",
                    "amax": f"{a} = ember_vmaximum({v}, {a});", "amin": f"{a} = ember_vminimum({v}, {a});"
                    }[st.reduce_type]
        if st.kind == "reduced" and self.per_lane:
            self.vec.add(st.var)
            acc, rt = st.args
            if rt == "welford":
                a = f"v{acc}"
                return (f"const vfloat {st.var} = ember_vm2_from_sums({a}_s2a, {a}_s2b, {a}_s1a, {a}_s1b, "
                        f"(double){self.w.cR});")
            return f"const vfloat {st.var} = v{acc};"
        m = self._period(st) if st.kind == "load" else None
        if m:
            self.vec.add(st.var)
            return f"const vfloat {st.var} = ember_vperiodic({_ptr(st.args[0])} + {C.index(st.args[1])}, {m});"
        if st.kind == "load" and self._coeff(st.args[1]) == 1:
            self.vec.add(st.var)
            buf, idx, mask = st.args
            if st.dtype is torch.bool:
                e = f"ember_vload_mask({_ptr(buf)} + {C.index(idx)})"
                vt, zero = "vmask", "ember_vbm(false)"
            elif self.w.body.buffer_dtype(buf) is torch.bfloat16:
                e, vt, zero = f"ember_vload_bf16({_ptr(buf)} + {C.index(idx)})", "vfloat", "ember_vbf(0.0f)"
            else:
                e, vt, zero = f"ember_vload({_ptr(buf)} + {C.index(idx)})", "vfloat", "ember_vbf(0.0f)"
            if mask is not None:       # one condition for the whole vector: the load only runs where it holds
                e = f"({C.index(mask)} ? {e} : {zero})"
            return f"const {vt} {st.var} = {e};"
        args = _operands(st)
        if not any(a in self.vec for a in args):
            return self.w.assign(st)                     # invariant within the vector: a scalar
        self.vec.add(st.var)
        vt = "vmask" if st.dtype is torch.bool else "vfloat"
        if st.kind == "cast":
            return f"const {vt} {st.var} = {self._cast(args[0], st.dtype)};"
        name = st.args[0]
        rule = VOPS.get(name)
        if rule is not None:
            e = rule([self._v(a) for a in args], [self.w.dtype(a) for a in args], st.dtype)
            if e is not None:
                return f"const {vt} {st.var} = {_rounded(e, st.dtype)};"
        return self._lanes(st, name, args, vt)

    def _cast(self, a: str, dst: torch.dtype) -> str:
        src = self.w.dtype(a)
        if src == dst or (src is torch.bfloat16 and dst is torch.float32):
            return a
        if dst is torch.bool:
            return f"({a} != 0.0f)"
        if src is torch.bool:
            return f"({a} ? ember_vbf(1.0f) : ember_vbf(0.0f))"
        return _rounded(a, dst)

    def _lanes(self, st: Assign, name: str, args: tuple, vt: str) -> str:
        """The scalar rule, lane by lane (GCC vectorizes the lane loop, with libmvec for math calls)."""
        lane = []
        for a in args:
            if a not in self.vec:
                lane.append(a)
            elif self.w.dtype(a) is torch.bool:
                lane.append(f"({a}[l] != 0)")
            else:
                lane.append(f"{a}[l]")
        e = C.round_low(st.dtype, C.op(name, lane, [self.w.dtype(a) for a in args], st.dtype))
        if st.dtype is torch.bool:
            e = f"(({e}) ? -1 : 0)"
        # simdlen: as wide as the vector (GCC prefers 256-bit loops with AVX-512, and a 16-lane value would go
        # through the stack in halves: a store-forwarding stall per vector)
        return (f"{vt} {st.var};\n#pragma omp simd simdlen(EMBER_VW)\n"
                f"for (int l = 0; l < EMBER_VW; ++l) {st.var}[l] = {e};")

    def loop(self, ind: str, lo: str, hi: str, header: str = "") -> list[str]:
        """The vector loop over ``[lo, hi)`` (a multiple of the width apart), with vector accumulators declared
        before it and folded into the scalar accumulators after it.

        A reduction loop runs two vectors per step into two sets of accumulators (suffix ``_u1``): a vector
        accumulator is a chain of dependent operations (Welford's mean update is a subtraction, a multiply
        and an add: 12 cycles per vector), and two chains overlap. The odd vector left over runs alone. Loops
        with a transcendental op are bound by its work, not by the chain, and stay one vector per step (two
        were 3% slower for softmax's sum of exps)."""
        v = self.var.name
        if not self.accumulators or self._heavy():
            hoisted = self._hoisted(ind) if lo == "0" and not self.accumulators else []
            loop = self._loop(ind, v, lo, hi, [""]) if header else self._cascaded(ind, v, lo, hi, [""])
            return (self._decls(ind, "") + hoisted + [f"{ind}{header}"] * bool(header)
                    + loop + self._folds(ind, ""))
        lines = self._decls(ind, "") + self._decls(ind, "_u1")
        ilo, ihi = _int(lo), _int(hi)
        if ilo is not None and ihi is not None:      # static: the bound is a number (cascade blocks need it)
            end = str(ilo + (ihi - ilo) // (2 * self.width) * (2 * self.width))
        else:
            end = f"{v}_end2_{self.accumulators[0][0]}"
            lines.append(f"{ind}const int64_t {end} = ({lo}) + (({hi}) - ({lo})) / (2 * EMBER_VW) * (2 * EMBER_VW);")
        if header:
            lines.append(f"{ind}{header}")
        lines += self._loop(ind, f"{v}_s", lo, end, ["", "_u1"]) if header else \
            self._cascaded(ind, f"{v}_s", lo, end, ["", "_u1"])
        if end != hi:
            lines += self._loop(ind, v, end, hi, [""])
        # the two sets' sums add lane by lane before the fold across lanes (one tree instead of two chains)
        lines += [f"{ind}v{acc} += v{acc}_u1;" for acc, rt, _ in self.accumulators if rt == "sum"]
        return lines + self._folds(ind, "") + self._folds(ind, "_u1", skip=("sum",))

    def _cascaded(self, ind: str, var: str, lo: str, hi: str, sets: list[str]) -> list[str]:
        """``_loop`` with its float sums and Welford states updated in blocks (``cpp_cascade``): each block into
        fresh vector partials (``v<acc><set>_p``), added (Welford: combined by Chan's formula) into the row's
        vector accumulators after it. A Welford state updated through a whole row rounds its running mean and
        M2 at every point: a float32 variance of 100000 points was 8-11x eager's error."""
        sums = [acc for acc, rt, _ in self.accumulators if rt == "sum"]
        wfs = [acc for acc, rt, _ in self.accumulators if rt == "welford"]
        ilo, ihi = _int(lo), _int(hi)
        if ilo is not None and ihi is not None and cpp_cascade.static_block(ihi - ilo, len(sets) * self.width) is None:
            wfs = []        # one block: its partial state would only be copied into the row's, once per row

        def inner(i: str, a: str, b: str) -> list[str]:
            self.part = set(sums) | set(wfs)
            try:
                return self._loop(i, var, a, b, sets)
            finally:
                self.part = set()
        blocks = cpp_cascade.lane_blocks([a + s for s in sets for a in sums], [a + s for s in sets for a in wfs])
        return cpp_cascade.cascade(ind, var, lo, hi, len(sets) * self.width, blocks, inner)

    def _hoisted(self, ind: str) -> list[str]:
        """Statements the same in every step of a loop from 0 (steps of whole vectors), emitted before it:
        per-channel parameters over rows of fewer channels than lanes (``p[xindex % 8]``: lane ``l`` always
        holds ``p[l % 8]``) and what is computed from them alone (a batch norm's ``rsqrt(var + eps)``), which
        the loop otherwise rebuilt lane by lane in every step. Loads only from buffers the kernel does not
        write."""
        body = self.w.body
        written = {st.buf for sec in body.sections for st in sec.stmts if isinstance(st, Store)} | body.aliased
        inv: set[str] = set()
        lines: list[str] = []
        for st in self.stmts:
            if not isinstance(st, Assign):
                continue
            if st.kind == "const":
                inv.add(st.var)
                lines.append(f"{ind}{self.stmt(st)}")
                continue
            if st.kind == "load":
                buf, idx, mask = st.args
                m = self._period(st)
                terms = sympy.Add.make_args(idx)
                rest = [t for t in terms if not (isinstance(t, sympy.Mod) and t.args[0] == self.var)]
                if m and buf not in written and all(not getattr(t, "free_symbols", ()) for t in rest):
                    self.vec.add(st.var)
                    inv.add(st.var)
                    lines.append(f"{ind}const vfloat {st.var} = ember_vperiodic({_ptr(buf)} + "
                                 f"{C.index(sum(rest, sympy.Integer(0)))}, {m});")
                continue
            if st.kind in ("op", "cast") and any(a in self.vec for a in _operands(st)) and \
                    all(a in inv for a in _operands(st)):
                inv.add(st.var)
                lines += [f"{ind}{ln}" for ln in self.stmt(st).split("\n")]
        self.hoisted = inv
        return lines

    def _heavy(self) -> bool:
        return any(isinstance(st, Assign) and st.kind == "op" and st.args[0] in HEAVY_OPS for st in self.stmts)

    def _loop(self, ind: str, var: str, lo: str, hi: str, sets: list[str]) -> list[str]:
        """``for`` over ``var``; with several accumulator sets, one vector per set, each in a scope of its own
        where the loop's variable names that vector's first point."""
        v = self.var.name
        step = "EMBER_VW" if len(sets) == 1 else f"{len(sets)} * EMBER_VW"
        lines = [f"{ind}for (int64_t {var} = {lo}; {var} < {hi}; {var} += {step}) {{"]
        for k, suffix in enumerate(sets):
            self.suffix = suffix
            body = [ln for st in self.stmts if not (isinstance(st, Assign) and st.var in self.hoisted)
                    for ln in self.stmt(st).split("\n")]
            if var == v:
                lines += [f"{ind}  {ln}" for ln in body]
                continue
            lines.append(f"{ind}  {{ const int64_t {v} = {var}{f' + {k} * EMBER_VW' if k else ''};")
            lines += [f"{ind}    {ln}" for ln in body]
            lines.append(f"{ind}  }}")
        self.suffix = ""
        lines.append(f"{ind}}}")
        return lines

    def _decls(self, ind: str, sfx: str, accumulators: list | None = None) -> list[str]:
        lines = []
        for acc, rt, _ in self.accumulators if accumulators is None else accumulators:
            if rt == "welford" and self.per_lane:
                # a lane's float Welford state (or float sums) rounds at every point: an NHWC column variance
                # of 4097 rows was 36x eager's error (eager accumulates in float64); float64 sums of the shifted
                # points (ember.loopir.welford) cost no more than the float update's chain and need no cascade
                lines.append(f"{ind}{wf_lane_decl(f'v{acc}{sfx}', '_s2', '_s1')}")
                continue
            if rt == "welford":
                lines.append(f"{ind}vfloat v{acc}{sfx}_mean = ember_vbf(0.0f), v{acc}{sfx}_m2 = ember_vbf(0.0f); "
                             f"int64_t {acc}{sfx}_vn = 0;")
                continue
            init = {"sum": "0.0f", "prod": "1.0f", "amax": "-__builtin_inff()", "amin": "__builtin_inff()"}[rt]
            lines.append(f"{ind}vfloat v{acc}{sfx} = ember_vbf({init});")
        return lines

    def _folds(self, ind: str, sfx: str, skip: tuple = ()) -> list[str]:
        lines = []
        for acc, rt, _ in self.accumulators:
            if rt in skip:
                continue
            va = f"v{acc}{sfx}"
            if rt == "sum":
                lines.append(f"{ind}{acc} += ember_hsum({va});")
            elif rt == "prod":
                lines.append(f"{ind}{acc} *= ember_hprod({va});")
            elif rt == "welford":
                lines.append(f"{ind}{acc} = ember_wf_combine({acc}, ember_hwelford({va}_mean, {va}_m2, "
                             f"{acc}{sfx}_vn));")
            else:
                h, cmp = ("ember_hmax", ">") if rt == "amax" else ("ember_hmin", "<")
                lines.append(f"{ind}{{ const float h = {h}({va}); {acc} = h {cmp} {acc} ? h : {acc}; }}")
                lines.append(f"{ind}{acc}_nan |= ember_hnan({va});")
        return lines


def _int(s: Any) -> int | None:
    try:
        return int(str(s))
    except ValueError:
        return None


def _rounded(e: str, dtype: torch.dtype) -> str:
    """A vector of float lanes ``e`` rounded to ``dtype``'s precision (bf16 values are kept rounded)."""
    return f"ember_vround_bf16({e})" if dtype is torch.bfloat16 else e


def _widens(src: torch.dtype, dst: torch.dtype) -> bool:
    """A load of ``src`` elements as ``dst`` values needs no rounding (the same dtype, or bf16 as float)."""
    return src == dst or (src is torch.bfloat16 and dst is torch.float32)


def _operands(st: Assign) -> tuple:
    return st.args[1:] if st.kind == "op" else st.args if st.kind == "cast" else ()


def _ptr(buf: str) -> str:
    return C.cname(buf)


def _bin(op: str) -> Callable[[list, list, torch.dtype], str | None]:
    return lambda a, d, o: f"({a[0]} {op} {a[1]})"


def _when(ok: Callable[[list], bool], rule: Callable[[list, list, torch.dtype], str]
          ) -> Callable[[list, list, torch.dtype], str | None]:
    """``rule`` where the operand dtypes pass ``ok``; else None (the lane loop)."""
    return lambda a, d, o: rule(a, d, o) if ok(d) else None


def _float_only(rule: Callable[[list, list, torch.dtype], str]) -> Callable[[list, list, torch.dtype], str | None]:
    return _when(lambda d: all(t in FLOATS for t in d), rule)


def _float_or_bool(rule: Callable[[list, list, torch.dtype], str]) -> Callable[[list, list, torch.dtype], str | None]:
    return _when(lambda d: len(set(d)) == 1, rule)


def _bool_only(rule: Callable[[list, list, torch.dtype], str]) -> Callable[[list, list, torch.dtype], str | None]:
    return _when(lambda d: all(t is torch.bool for t in d), rule)


# vector rules over vector operands; None: no vector form for these dtypes (the lane loop runs instead)
VOPS: dict[str, Callable[[list, list, torch.dtype], str | None]] = {
    **{n: _float_only(_bin(o)) for n, o in (("add", "+"), ("sub", "-"), ("mul", "*"), ("div", "/"))},
    **{n: _float_only(_bin(o)) for n, o in (("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="))},
    **{n: _float_or_bool(_bin(o)) for n, o in (("eq", "=="), ("ne", "!="))},
    **{n: _bool_only(_bin(o)) for n, o in (("logical_and", "&"), ("logical_or", "|"), ("logical_xor", "^"),
                                            ("bitwise_and", "&"), ("bitwise_or", "|"), ("bitwise_xor", "^"))},
    "logical_not": _bool_only(lambda a, d, o: f"(~{a[0]})"),
    "bitwise_not": _bool_only(lambda a, d, o: f"(~{a[0]})"),
    "where": lambda a, d, o: f"({a[0]} ? {a[1]} : {a[2]})" if d[0] is torch.bool and d[1] == d[2] == o else None,
    "neg": _float_only(lambda a, d, o: f"(-{a[0]})"),
    "abs": _float_only(lambda a, d, o: f"ember_vabs({a[0]})"),
    "maximum": _float_only(lambda a, d, o: f"ember_vmaximum({a[0]}, {a[1]})"),
    "minimum": _float_only(lambda a, d, o: f"ember_vminimum({a[0]}, {a[1]})"),
    "exp": _float_only(lambda a, d, o: f"ember_vexpf({a[0]})"),
    "erf": _float_only(lambda a, d, o: f"ember_verf({a[0]})"),
    "tanh": _float_only(lambda a, d, o: f"ember_vtanh({a[0]})"),
    "sigmoid": _float_only(lambda a, d, o: f"(1.0f / (1.0f + ember_vexpf(-{a[0]})))"),
    "reciprocal": _float_only(lambda a, d, o: f"(1.0f / {a[0]})"),
}
