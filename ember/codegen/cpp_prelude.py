"""The C++ prelude every generated translation unit starts with: headers, bf16/fp16 conversions and the helpers
for ops whose torch semantics C++ does not give directly (integer division, Python-style floordiv/remainder,
NaN-propagating maximum, shifts, erfinv, digamma).

Vector math: GCC vectorizes calls to ``expf``/``logf``/... inside ``#pragma omp simd`` loops only when they are
declared ``simd``; glibc's ``libmvec`` provides those variants, and ``vector_math_decls()`` declares the ones
this machine's libmvec exports (checked once), so the TU links with ``-lmvec`` and stays correct for NaN/inf
(libmvec handles special values; no ``-ffast-math``).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

PRELUDE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <algorithm>
// an index loaded from a tensor (gather, index_select, advanced indexing) outside its dimension: the kernel
// reads index 0 instead and reports it; the wrapper raises as eager does
template <typename T> static inline T ember_check_index(T v, int64_t n, int* err) {
  if (__builtin_expect(v < 0 || v >= (T)n, 0)) { __atomic_store_n(err, 1, __ATOMIC_RELAXED); return (T)0; }
  return v;
}
#include <type_traits>

static inline float ember_bf16_to_float(uint16_t h) {
  uint32_t u = ((uint32_t)h) << 16; float f; std::memcpy(&f, &u, 4); return f;
}
static inline uint16_t ember_float_to_bf16(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  if (f != f) return (uint16_t)0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float ember_round_bf16(float f) { return ember_bf16_to_float(ember_float_to_bf16(f)); }
static inline float ember_round_f16(float f) { return (float)(_Float16)f; }

// Welford's running mean and M2 (the sum of squared deviations) over n points; combined by Chan's formula
template <typename T> struct ember_wf { T mean; T m2; int64_t n; };
template <typename T> static inline ember_wf<T> ember_wf_update(ember_wf<T> a, T x) {
  const int64_t n = a.n + 1; const T d = x - a.mean; const T mean = a.mean + d / (T)n;
  return ember_wf<T>{mean, a.m2 + d * (x - mean), n};
}
template <typename T> static inline ember_wf<T> ember_wf_combine(ember_wf<T> a, ember_wf<T> b) {
  if (b.n == 0) return a;
  if (a.n == 0) return b;
  const int64_t n = a.n + b.n; const T d = b.mean - a.mean; const T w = (T)b.n / (T)n;
  return ember_wf<T>{a.mean + d * w, a.m2 + b.m2 + d * d * (T)a.n * w, n};
}
/* M2 from the sums of the shifted points and of their squares; NaN stays NaN; rounding: >= 0. Finite points
   whose squares overflowed (s2 = inf, s1 finite) have an M2 of +inf, not inf - inf = NaN (eager's M2, in float64
   on CPU, is finite there: its float variance is inf or near it); an infinite point makes s1 inf or NaN: NaN. */
template <typename T> static inline T ember_m2_from_sums(T s2, T s1, T n) {
  if (s2 == std::numeric_limits<T>::infinity() && s1 - s1 == (T)0) return s2;
  const T m2 = s2 - s1 * (s1 / n); return m2 < 0 ? (T)0 : m2;   // s1 * s1 alone overflows first
}
#pragma omp declare reduction(ember_wf_float : ember_wf<float> : omp_out = ember_wf_combine(omp_out, omp_in)) \
  initializer(omp_priv = ember_wf<float>{0, 0, 0})
#pragma omp declare reduction(ember_wf_double : ember_wf<double> : omp_out = ember_wf_combine(omp_out, omp_in)) \
  initializer(omp_priv = ember_wf<double>{0, 0, 0})

template <typename T> static inline T ember_div_trunc(T a, T b) {
  if (b == 0) return 0;
  if (std::is_signed<T>::value && b == (T)-1) return (T)(0 - (typename std::make_unsigned<T>::type)a);
  return a / b;
}
template <typename T> static inline T ember_floordiv_int(T a, T b) {
  if (b == 0) return 0;
  if (std::is_signed<T>::value && b == (T)-1) return (T)(0 - (typename std::make_unsigned<T>::type)a);
  T q = a / b; T r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) q -= 1;
  return q;
}
template <typename T> static inline T ember_remainder_int(T a, T b) {
  if (b == 0 || (std::is_signed<T>::value && b == (T)-1)) return 0;
  T r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
template <typename T> static inline T ember_fmod_int(T a, T b) {
  if (b == 0 || (std::is_signed<T>::value && b == (T)-1)) return 0;
  return a % b;
}
template <typename T> static inline T ember_floordiv_float(T a, T b) {
  if (b == 0) return a / b;
  T mod = std::fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= T(1);
  T fl;
  if (div != 0) { fl = std::floor(div); if (div - fl > T(0.5)) fl += T(1); }
  else fl = std::copysign(T(0), a / b);
  return fl;
}
template <typename T> static inline T ember_remainder_float(T a, T b) {
  T mod = std::fmod(a, b);
  if (mod != 0 && ((b < 0) != (mod < 0))) mod += b;
  return mod;
}
template <typename T> static inline T ember_pow_int(T a, T b) {
  if (std::is_signed<T>::value && b < 0) {
    if (a == 1) return 1;
    if (a == (T)-1) return (b & 1) ? (T)-1 : (T)1;
    return 0;
  }
  typedef typename std::make_unsigned<T>::type U;
  U r = 1, x = (U)a; uint64_t e = (uint64_t)b;
  while (e) { if (e & 1) r *= x; x *= x; e >>= 1; }
  return (T)r;
}
template <typename T> static inline T ember_maximum(T a, T b) {
  return (a != a) ? a : ((b != b) ? b : (a > b ? a : b));
}
template <typename T> static inline T ember_minimum(T a, T b) {
  return (a != a) ? a : ((b != b) ? b : (a < b ? a : b));
}
template <typename T> static inline T ember_shl(T a, T b) {
  const int64_t bits = sizeof(T) * 8;
  if ((int64_t)b < 0 || (int64_t)b >= bits) return 0;
  return (T)((typename std::make_unsigned<T>::type)a << b);
}
template <typename T> static inline T ember_shr(T a, T b) {
  const int64_t bits = sizeof(T) * 8;
  if ((int64_t)b < 0 || (int64_t)b >= bits) return std::is_signed<T>::value ? (T)(a >> (bits - 1)) : (T)0;
  return (T)(a >> b);
}
template <> inline bool ember_shl<bool>(bool a, bool b) { return b ? false : a; }
template <> inline bool ember_shr<bool>(bool a, bool b) { return b ? false : a; }

template <typename T> static inline T ember_erfinv(T y) {
  double x = (double)y;
  if (x <= -1.0 || x >= 1.0) {
    if (x == -1.0) return -std::numeric_limits<T>::infinity();
    if (x == 1.0) return std::numeric_limits<T>::infinity();
    return std::numeric_limits<T>::quiet_NaN();
  }
  if (x != x) return (T)x;
  /* Giles' single-precision approximation refined by Newton steps in double */
  double w = -std::log((1.0 - x) * (1.0 + x)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08; p = 3.43273939e-07 + p * w; p = -3.5233877e-06 + p * w; p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w; p = -0.00125372503 + p * w; p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w; p = 1.50140941 + p * w;
  } else {
    w = std::sqrt(w) - 3.0;
    p = -0.000200214257; p = 0.000100950558 + p * w; p = 0.00134934322 + p * w; p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w; p = -0.0076224613 + p * w; p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w; p = 2.83297682 + p * w;
  }
  double r = p * x;
  const double k = 1.1283791670955126;  /* 2/sqrt(pi) */
  for (int i = 0; i < 2; ++i) r -= (std::erf(r) - x) / (k * std::exp(-r * r));
  return (T)r;
}
static inline double ember_digamma_d(double x) {
  const double PSI_10 = 2.25175258906672110764;
  if (x == 0) return std::copysign(std::numeric_limits<double>::infinity(), -x);
  if (x < 0) {
    if (x == std::trunc(x)) return std::numeric_limits<double>::quiet_NaN();
    double q, r = std::modf(x, &q);
    return ember_digamma_d(1 - x) - M_PI / std::tan(M_PI * r);
  }
  double result = 0;
  while (x < 10) { result -= 1 / x; x += 1; }
  if (x == 10) return result + PSI_10;
  static const double A[] = {8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
                             -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
                             8.33333333333333333333E-2};
  double y = 0;
  if (x < 1.0e17) {
    double z = 1.0 / (x * x), p = 0;
    for (int i = 0; i < 7; ++i) p = p * z + A[i];
    y = z * p;
  }
  return result + std::log(x) - (0.5 / x) - y;
}
template <typename T> static inline T ember_digamma(T x) { return (T)ember_digamma_d((double)x); }
"""

# functions whose libmvec variants GCC may call (unary "v", binary "vv"), float and double
_VECTOR_MATH = {
    "exp": 1, "log": 1, "sin": 1, "cos": 1, "tan": 1, "tanh": 1, "erf": 1, "erfc": 1, "expm1": 1, "log1p": 1,
    "log2": 1, "log10": 1, "exp2": 1, "asin": 1, "acos": 1, "atan": 1, "sinh": 1, "cosh": 1, "asinh": 1,
    "acosh": 1, "atanh": 1, "atan2": 2, "hypot": 2, "pow": 2,
}
# per ISA letter (SSE, AVX, AVX2, AVX-512): lanes for float, double
_ISAS = {"b": (4, 2), "c": (8, 4), "d": (8, 4), "e": (16, 8)}


@functools.lru_cache(maxsize=None)
def _libmvec() -> ctypes.CDLL | None:
    path = ctypes.util.find_library("mvec")
    try:
        return ctypes.CDLL(path or "libmvec.so.1")
    except OSError:
        return None


@functools.lru_cache(maxsize=None)
def vector_math_decls() -> tuple[str, bool]:
    """(declarations, needs -lmvec): ``declare simd`` for each libmvec function present in all four ISAs."""
    lib = _libmvec()
    if lib is None:
        return "", False
    lines = []
    for name, arity in _VECTOR_MATH.items():
        for suffix, ct, lane in (("f", "float", 0), ("", "double", 1)):
            syms = [f"_ZGV{isa}N{lanes[lane]}{'v' * arity}_{name}{suffix}" for isa, lanes in _ISAS.items()]
            if all(hasattr(lib, s) for s in syms):
                params = ", ".join([ct] * arity)
                lines.append(f"#pragma omp declare simd notinbranch\n{ct} {name}{suffix}({params}) noexcept;")
    if not lines:
        return "", False
    return 'extern "C" {\n' + "\n".join(lines) + "\n}\n", True
