/* Another math library for NumPy, as faithful as glibc's but not the same:
 * tools/portability.py preloads it (LD_PRELOAD) into the kernels of its `other-libm`
 * configuration.
 *
 * A math function is faithful when it returns one of the two floating-point numbers
 * next to the true value. glibc mostly returns the nearer one; other libraries (Intel's
 * SVML, which NumPy calls on AVX-512 CPUs, or another system's libm) sometimes return
 * the other. This library always does, wherever the result is not exact: the largest
 * move a faithful library can make, in every result at once. Exact results
 * (pow(16, 0.5), log(1), exp2(-33)) stay exact, as in every faithful library. The true
 * value is told from glibc's result computed in long double (64 significant bits on
 * x86-64), for float functions in double; a result that the wider one gives back
 * unchanged is taken as exact (about one inexact result in 2,000 is that close).
 *
 * Only NumPy's calls are answered so (calls from its _multiarray_umath module, told by
 * their return address): on Linux every other library (CPython's math module,
 * Matplotlib's renderer, PyTorch's scalar code) calls glibc on every CPU, while NumPy
 * calls SVML instead on AVX-512 CPUs. So a printed digit or an assert that depends on
 * which neighbour NumPy gets back shows up on the machine at hand, without a CPU that
 * has that other library.
 *
 * sin and cos are left as they are: NumPy's complex exp calls glibc's internal sincos,
 * which a preloaded library cannot replace, and np.cos and np.exp(1j * x) agree bit
 * for bit under every kernel set tools/portability.py runs (posenc.fast relies on it),
 * a pairing that replacing cos alone would break.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Whether the code at a return address belongs to NumPy's umath module. The answer
 * for each call site is kept in a small table, which any thread may fill: two threads
 * that fill one slot for one site write the same answer. */
#define SITES 4096
static uintptr_t site_key[SITES];
static unsigned char site_numpy[SITES];

static int from_numpy(const void *address) {
    uintptr_t key = (uintptr_t)address;
    size_t slot = (size_t)((key * 0x9e3779b97f4a7c15ULL) >> 52) % SITES;
    if (__atomic_load_n(&site_key[slot], __ATOMIC_ACQUIRE) == key)
        return site_numpy[slot];
    Dl_info info;
    int numpy = dladdr(address, &info) && info.dli_fname &&
                strstr(info.dli_fname, "_multiarray_umath") != NULL;
    site_numpy[slot] = (unsigned char)numpy;
    __atomic_store_n(&site_key[slot], key, __ATOMIC_RELEASE);
    return numpy;
}

/* r, glibc's result, or its neighbour on the other side of the true value t. */
static double other64(double r, long double t) {
    if (!isfinite(r) || !isfinite(t) || (long double)r == t)
        return r;
    double o = (long double)r < t ? nextafter(r, INFINITY) : nextafter(r, -INFINITY);
    return isfinite(o) ? o : r;
}

static float other32(float r, double t) {
    if (!isfinite(r) || !isfinite(t) || (double)r == t)
        return r;
    float o = (double)r < t ? nextafterf(r, INFINITY) : nextafterf(r, -INFINITY);
    return isfinite(o) ? o : r;
}

/* name: glibc's function, found past this library; wide: the same in a wider type. */
#define ONE64(name)                                                          \
    double name(double x) {                                                  \
        static double (*f)(double);                                          \
        if (!f) f = (double (*)(double))dlsym(RTLD_NEXT, #name);             \
        double r = f(x);                                                     \
        if (!from_numpy(__builtin_return_address(0))) return r;              \
        return other64(r, name##l((long double)x));                          \
    }
#define ONE32(name, wide)                                                    \
    float name(float x) {                                                    \
        static float (*f)(float);                                            \
        if (!f) f = (float (*)(float))dlsym(RTLD_NEXT, #name);               \
        float r = f(x);                                                      \
        if (!from_numpy(__builtin_return_address(0))) return r;              \
        return other32(r, wide((double)x));                                  \
    }
#define TWO64(name)                                                          \
    double name(double x, double y) {                                        \
        static double (*f)(double, double);                                  \
        if (!f) f = (double (*)(double, double))dlsym(RTLD_NEXT, #name);     \
        double r = f(x, y);                                                  \
        if (!from_numpy(__builtin_return_address(0))) return r;              \
        return other64(r, name##l((long double)x, (long double)y));          \
    }
#define TWO32(name, wide)                                                    \
    float name(float x, float y) {                                           \
        static float (*f)(float, float);                                     \
        if (!f) f = (float (*)(float, float))dlsym(RTLD_NEXT, #name);        \
        float r = f(x, y);                                                   \
        if (!from_numpy(__builtin_return_address(0))) return r;              \
        return other32(r, wide((double)x, (double)y));                       \
    }

ONE64(exp)
ONE64(exp2)
ONE64(expm1)
ONE64(log)
ONE64(log2)
ONE64(log10)
ONE64(log1p)
ONE64(tan)
ONE64(tanh)
ONE64(sinh)
ONE64(cosh)
ONE64(atan)
ONE64(asin)
ONE64(acos)
TWO64(pow)
TWO64(atan2)

ONE32(expf, exp)
ONE32(exp2f, exp2)
ONE32(expm1f, expm1)
ONE32(logf, log)
ONE32(log2f, log2)
ONE32(log10f, log10)
ONE32(log1pf, log1p)
ONE32(tanf, tan)
ONE32(tanhf, tanh)
ONE32(atanf, atan)
TWO32(powf, pow)
TWO32(atan2f, atan2)
