#!/usr/bin/env bash
# blas_kernels.sh - the OpenBLAS kernels (OPENBLAS_CORETYPE names) this CPU
# can run besides the one OpenBLAS picks by itself, one per line: Haswell
# (AVX2), SkylakeX (AVX-512), Cooperlake (AVX-512 with BF16). They round
# differently, so CI runs the numerical-parity tests under each: a user's
# machine picks any of them. Prints nothing off x86-64; the kernel picked by
# default (or named by OPENBLAS_CORETYPE) goes to stderr.
set -u
corename() {
  python3 -c 'import ctypes; b = ctypes.CDLL("libopenblas.so.0"); b.openblas_get_corename.restype = ctypes.c_char_p; print(b.openblas_get_corename().decode())' 2>/dev/null
}
[ "$(uname -m)" = x86_64 ] || exit 0
own=$(corename) || exit 0
echo "openblas picks ${own:-?}${OPENBLAS_CORETYPE:+ (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)}" >&2
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { for f in "$@"; do [[ $flags == *" $f "* ]] || return 1; done; }
for k in Haswell SkylakeX Cooperlake; do
  case $k in
  Haswell) has avx2 fma || continue ;;
  SkylakeX) has avx512f avx512bw avx512dq avx512vl || continue ;;
  Cooperlake) has avx512f avx512bw avx512dq avx512vl avx512_bf16 || continue ;;
  esac
  # OPENBLAS_CORETYPE works only where OpenBLAS is built with DYNAMIC_ARCH
  # (Debian's is): say so rather than run the same kernel twice
  got=$(OPENBLAS_CORETYPE=$k corename)
  if [ "$got" != "$k" ]; then
    echo "OPENBLAS_CORETYPE=$k gives '${got:-?}' (OpenBLAS built without DYNAMIC_ARCH?): not run" >&2
    continue
  fi
  [ "$k" = "$own" ] || echo "$k"
done
