# Tensor data in the model, parallel, optim and train modules is touched only
# through the backend's op table (kernels) and its allocator, so a device
# backend adds files under lib/kernels and lib/comm and touches nothing
# else: no element of float memory read or written there (a subscript or a
# dereference of a float pointer, whatever its name), no memset/memcpy of
# float buffers, no mt_mem_alloc (buffers come from ops->alloc), and a host
# float buffer only as the host side of an upload or download, initial
# values or a file. tests/zero/ops_only.py holds the rule and its short,
# reasoned list of known breaches. First the checker must find each breach
# planted in a made-up module (so it cannot pass by finding nothing), then
# the real modules must have none. Fails naming each line.
source "$(dirname "$0")/../scripts/common.sh"
CHECKER="$MT_SRC/tests/zero/ops_only.py"

# 1. the planted breaches, one function each, in a tree of their own
mkdir -p "$WORK/canary/lib/model"
cat > "$WORK/canary/lib/model/thing.h" <<'EOF'
typedef struct {
  float *grads; /* a float * member */
  int *counts;
} thing;
EOF
cat > "$WORK/canary/lib/model/bad.c" <<'EOF'
#include "kernels/cpu/cpu_internal.h"
void host_loop(const mt_ops *o, thing *d, size_t n) {
  float *host = mt_malloc(n * sizeof(float));
  o->download(host, d->grads, n * sizeof(float));
  for (size_t i = 0; i < n; i++) host[i] *= 0.5f;
  o->upload(d->grads, host, n * sizeof(float));
  free(host);
}
void member_loop(thing *d, size_t n) {
  for (size_t i = 0; i < n; i++) d->grads[i] = 0.0f;
  for (size_t i = 0; i < n; i++) d->counts[i] = 0; /* ints: fine */
}
void pointer_walk(float *x, size_t n) {
  for (float *p = x; p < x + n; p++) *p = 0.0f;
}
void alias_loop(const mt_ops *o, const float *dev, size_t n) {
  float *host = mt_malloc(n * sizeof(float) + 64), *copy = host;
  o->download(host, dev, n * sizeof(float));
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += copy[i];
  free(host);
}
void host_escape(const mt_ops *o, const float *dev, size_t n) {
  float *host = mt_malloc(n * sizeof(float));
  o->download(host, dev, n * sizeof(float));
  mt_sum_floats(host, n);
  free(host);
}
void kept(thing *d, size_t n) { d->grads = mt_malloc(n * sizeof *d->grads); }
void cleared(float *x, size_t n) { memset(x, 0, n * sizeof(float)); }
void own_alloc(size_t n) { float *x = mt_mem_alloc(n * sizeof(float)); (void)x; }
void cast_write(void *p) { ((float *)p)[0] = 1.0f; }
void fine(const mt_ops *o, thing *d, float *x, size_t n, float s) {
  float *a = x, *b = x + n; /* declarations, products and ops: no breach */
  o->scale(d->grads, 2.0f * s, n);
  o->copy(a, b, n);
  float *host = mt_malloc(n * sizeof(float));
  o->download(host, d->grads, n * sizeof(float));
  o->upload(a, host, n * sizeof(float));
  free(host);
}
EOF
set +e
python3 "$CHECKER" "$WORK/canary" lib/model > "$WORK/canary.txt"; rc=$?
set -e
cat "$WORK/canary.txt"
[ $rc -eq 1 ] || fail "the checker passed a module full of breaches (exit $rc)"
for want in "host_loop(): element: host\[" "member_loop(): element: d->grads\[" \
            "pointer_walk(): element: \*p " "alias_loop(): element: copy\[" \
            "host_escape(): host: host float buffer host used in mt_sum_floats" \
            "kept(): host: a host float buffer kept in ->grads" \
            "cleared(): copy:" "own_alloc(): allocator:" "cast_write(): element: a subscript of a cast" \
            "include: kernels/cpu/cpu_internal.h"; do
  grep -q -- "$want" "$WORK/canary.txt" || fail "the checker missed the planted breach '$want'"
done
! grep -q "fine()\|counts" "$WORK/canary.txt" || fail "the checker called legal code a breach"
[ "$(grep -c '^offence:' "$WORK/canary.txt")" -eq 10 ] || fail "expected 10 offences in the canary"
echo "ok   the checker finds each of the 10 planted breaches and passes the legal code"

# 2. the real modules
python3 "$CHECKER" "$MT_SRC" lib/model lib/parallel lib/optim lib/train \
  || fail "tensor data handled outside the op table (see above)"
echo PASS
