// Fill and check kernels for collbench's GPU backend. They mirror
// suites/pattern.go exactly: the same hash, domains and expected values, so
// inputs are written and outputs verified on the GPU without host copies.
//
// Built without the CUDA toolkit: make ptx runs
//   clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_70
// and the PTX is embedded in the binary and JIT-compiled by the driver.

#ifdef CB_HOST
// Host build, for tests: one thread walks every element.
#define KERNEL
#define DEV static inline
#define __nvvm_read_ptx_sreg_ctaid_x() 0u
#define __nvvm_read_ptx_sreg_ntid_x() 1u
#define __nvvm_read_ptx_sreg_tid_x() 0u
#define __nvvm_read_ptx_sreg_nctaid_x() 1u
#define __nvvm_atom_add_gen_ll(p, v) (*(p) += (v))
#else
#define KERNEL extern "C" __attribute__((global))
#define DEV static __attribute__((device)) __attribute__((always_inline)) inline
#endif

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;

// Element types, numbered as in dtype/dtype.go (and NCCL).
enum { T_I8, T_U8, T_I32, T_U32, T_I64, T_U64, T_F16, T_F32, T_F64, T_BF16, T_E4M3, T_E5M2 };
// Domain kinds, as suites.DomainKind.
enum { D_RANGE, D_SPARSE, D_PROD };
// Collectives and ops, as suites.Collective and suites.ReduceOp.
enum { C_ALLREDUCE, C_ALLGATHER, C_REDUCESCATTER, C_BROADCAST, C_REDUCE, C_ALLTOALL, C_SENDRECV,
       C_GATHER, C_SCATTER, C_ALLTOALLV, C_HYPERCUBE };
enum { O_SUM, O_PROD, O_MAX, O_MIN, O_AVG };

typedef struct {
  int kind;
  i64 lo, hi;
  int sgn;
  u64 seed;
  int n;
} domain;

DEV u64 mix(u64 seed, int rank, i64 idx) {
  u64 x = (u64)idx * 0x9E3779B97F4A7C15ull ^ ((u64)rank + 1) * 0xC2B2AE3D27D4EB4Full ^ (seed + 1) * 0x165667B19E3779F9ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return x;
}

DEV double value(const domain* d, int rank, i64 idx) {
  u64 x = mix(d->seed, rank, idx);
  u64 span = (u64)(d->hi - d->lo + 1);
  u64 n = d->n > 1 ? (u64)d->n : 1;
  if (d->kind == D_SPARSE) {
    if (((u64)idx + d->seed) % n != (u64)rank) return 0.0;
    return (double)(d->lo + (i64)(x % span));
  }
  if (d->kind == D_PROD) {
    double v = 1.0;
    if (((u64)idx + d->seed) % n == (u64)rank && (x & 1)) v = 2.0;
    if (d->sgn && (x & 2)) v = -v;
    return v;
  }
  return (double)(d->lo + (i64)(x % span));
}

DEV double pow2(int k) {
  union { u64 u; double f; } c;
  c.u = (u64)(k + 1023) << 52;
  return c.f;
}

DEV double half_bits(u32 h) {
  int s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) {
    union { u64 u; double f; } c;
    c.u = m ? 0x7ff8000000000000ull : 0x7ff0000000000000ull;
    v = c.f;
  } else if (e == 0) {
    v = (double)m * pow2(-24);
  } else {
    v = (1.0 + (double)m / 1024.0) * pow2(e - 15);
  }
  return s ? -v : v;
}

DEV double e4m3_bits(u32 b) {
  int s = (b >> 7) & 1, e = (b >> 3) & 15, m = b & 7;
  double v;
  if (e == 15 && m == 7) {
    union { u64 u; double f; } c;
    c.u = 0x7ff8000000000000ull;
    v = c.f;
  } else if (e == 0) {
    v = (double)m / 8.0 * pow2(-6);
  } else {
    v = (1.0 + (double)m / 8.0) * pow2(e - 7);
  }
  return s ? -v : v;
}

DEV double load(const void* p, int t, u64 i) {
  switch (t) {
    case T_I8: return (double)((const signed char*)p)[i];
    case T_U8: return (double)((const unsigned char*)p)[i];
    case T_I32: return (double)((const int*)p)[i];
    case T_U32: return (double)((const u32*)p)[i];
    case T_I64: return (double)((const i64*)p)[i];
    case T_U64: return (double)((const u64*)p)[i];
    case T_F16: return half_bits(((const unsigned short*)p)[i]);
    case T_F32: return (double)((const float*)p)[i];
    case T_F64: return ((const double*)p)[i];
    case T_BF16: {
      union { u32 u; float f; } c;
      c.u = (u32)((const unsigned short*)p)[i] << 16;
      return (double)c.f;
    }
    case T_E4M3: return e4m3_bits(((const unsigned char*)p)[i]);
    case T_E5M2: return half_bits((u32)((const unsigned char*)p)[i] << 8);
  }
  return 0.0;
}

// small_float encodes an integer-valued v that the format holds exactly.
DEV u32 small_float(double v, int mant, int bias, int width) {
  if (v == 0.0) return 0;
  u32 s = v < 0 ? 1u : 0u;
  u64 a = (u64)(v < 0 ? -v : v);
  int e = 63 - __builtin_clzll(a);
  u64 m = e <= mant ? (a << (mant - e)) : (a >> (e - mant));
  m &= (1ull << mant) - 1;
  return (s << (width - 1)) | ((u32)(e + bias) << mant) | (u32)m;
}

DEV void store(void* p, int t, u64 i, double v) {
  switch (t) {
    case T_I8: ((signed char*)p)[i] = (signed char)v; break;
    case T_U8: ((unsigned char*)p)[i] = (unsigned char)v; break;
    case T_I32: ((int*)p)[i] = (int)v; break;
    case T_U32: ((u32*)p)[i] = (u32)v; break;
    case T_I64: ((i64*)p)[i] = (i64)v; break;
    case T_U64: ((u64*)p)[i] = (u64)v; break;
    case T_F16: ((unsigned short*)p)[i] = (unsigned short)small_float(v, 10, 15, 16); break;
    case T_F32: ((float*)p)[i] = (float)v; break;
    case T_F64: ((double*)p)[i] = v; break;
    case T_BF16: {
      union { u32 u; float f; } c;
      c.f = (float)v;
      ((unsigned short*)p)[i] = (unsigned short)(c.u >> 16);
      break;
    }
    case T_E4M3: ((unsigned char*)p)[i] = (unsigned char)small_float(v, 3, 7, 8); break;
    case T_E5M2: ((unsigned char*)p)[i] = (unsigned char)small_float(v, 2, 15, 8); break;
  }
}

DEV u64 gtid() {
  return (u64)__nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + __nvvm_read_ptx_sreg_tid_x();
}

DEV u64 gstride() {
  return (u64)__nvvm_read_ptx_sreg_nctaid_x() * __nvvm_read_ptx_sreg_ntid_x();
}

// cb_fill writes count elements of rank's input pattern.
KERNEL void cb_fill(void* dst, u64 count, int t, int kind, i64 lo, i64 hi, int sgn, u64 seed, int n, int rank) {
  domain d = {kind, lo, hi, sgn, seed, n};
  for (u64 i = gtid(); i < count; i += gstride()) store(dst, t, i, value(&d, rank, (i64)i));
}

DEV double reduce_at(const domain* d, int op, int t, i64 idx) {
  double acc = value(d, 0, idx);
  for (int r = 1; r < d->n; r++) {
    double v = value(d, r, idx);
    switch (op) {
      case O_PROD: acc *= v; break;
      case O_MAX: acc = v > acc ? v : acc; break;
      case O_MIN: acc = v < acc ? v : acc; break;
      default: acc += v;
    }
  }
  if (op == O_AVG) {
    acc /= (double)d->n;
    if (t <= T_U64) acc = (double)(i64)acc;  // integer types truncate toward zero
  }
  return acc;
}

// tsize is the size in bytes of an element of type t.
DEV int tsize(int t) {
  switch (t) {
    case T_I8: case T_U8: case T_E4M3: case T_E5M2: return 1;
    case T_F16: case T_BF16: return 2;
    case T_I32: case T_U32: case T_F32: return 4;
  }
  return 8;
}

// vcount is how many elements of type t rank from sends to rank to in an
// alltoallv of average count per peer, as measure.VCount: the share
// d/(1+2+...+n-1) of its whole, d = (to-from) mod n, rounded down to 16
// bytes (NCCL's benchmark's pattern).
DEV i64 vcount(i64 count, int t, int from, int to, int n) {
  if (n == 1) return count;
  i64 d = (((to - from) % n) + n) % n;
  i64 a = 16 / tsize(t);
  return count * 2 * d / (n - 1) / a * a;
}

// cb_check compares count output elements of rank with their expected values
// and adds the number that differ to *wrong.
KERNEL void cb_check(const void* src, u64 count, int t, int coll, int op, int root, int rank,
                     i64 sendcount, i64 ccount, i64 recvcount,
                     int kind, i64 lo, i64 hi, int sgn, u64 seed, int n, double tol, u64* wrong) {
  domain d = {kind, lo, hi, sgn, seed, n};
  u64 bad = 0;
  for (u64 i = gtid(); i < count; i += gstride()) {
    double want;
    i64 ii = (i64)i;
    switch (coll) {
      case C_ALLREDUCE:
      case C_REDUCE: want = reduce_at(&d, op, t, ii); break;
      case C_REDUCESCATTER: want = reduce_at(&d, op, t, (i64)rank * recvcount + ii); break;
      case C_BROADCAST: want = value(&d, root, ii); break;
      case C_ALLGATHER:
      case C_GATHER:
      case C_HYPERCUBE: {
        i64 c = sendcount > 0 ? sendcount : 1;
        want = value(&d, (int)(ii / c), ii % c);
        break;
      }
      case C_SCATTER: want = value(&d, root, (i64)rank * recvcount + ii); break;
      case C_ALLTOALLV: {
        // The sender whose part holds element ii, and where that part
        // starts in the sender's input.
        i64 off = 0;
        want = 0;
        for (int p = 0; p < n; p++) {
          i64 c = vcount(ccount, t, p, rank, n);
          if (ii < off + c) {
            i64 displ = 0;
            for (int q = 0; q < rank; q++) displ += vcount(ccount, t, p, q, n);
            want = value(&d, p, displ + ii - off);
            break;
          }
          off += c;
        }
        break;
      }
      case C_ALLTOALL: {
        i64 c = ccount > 0 ? ccount : 1;
        want = value(&d, (int)(ii / c), (i64)rank * c + ii % c);
        break;
      }
      default: want = value(&d, (rank - 1 + n) % n, ii);
    }
    double got = load(src, t, i);
    double diff = got - want;
    if (diff < 0) diff = -diff;
    if (!(got == want || (tol > 0 && diff <= tol))) bad++;
  }
  if (bad) __nvvm_atom_add_gen_ll((long long*)wrong, (long long)bad);
}
