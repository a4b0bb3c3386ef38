# Tensor data in the model, parallel, optim and train modules is touched only
# through the backend's op table (kernels) and its allocator, so a device
# backend adds files under lib/kernels and lib/comm and touches nothing
# else: no memset/memcpy of float buffers, no malloc'ed float tensors, no
# mt_mem_alloc there (buffers come from ops->alloc); host float buffers
# only as the host side of an upload or download (named host). Fails naming
# each line.
source "$(dirname "$0")/../scripts/common.sh"
cd "$MT_SRC"
dirs=(lib/model lib/parallel lib/optim lib/train)
patterns=(
  'mem(set|cpy|move)\([^;]*sizeof\(float\)'   # float tensor data copied or cleared by hand
  'mt_mem_alloc\('                          # buffers not from the backend
  'mt_(m|c)alloc\([^;]*sizeof\(float\)'      # host float tensors
)
bad=0
for p in "${patterns[@]}"; do
  if grep -nEr --include='*.c' -- "$p" "${dirs[@]}" | grep -v 'float \*host = ' > "$WORK/hits.txt"; then
    sed 's/^/offence: /' "$WORK/hits.txt"
    bad=1
  fi
done
[ $bad -eq 0 ] || fail "tensor data handled outside the op table (see above)"
echo PASS
