# Layers look their tensors up by name once at setup; nothing in lib/ or
# apps/ finds a tensor by its position in the registry or by a pattern in its
# name (the registry's attributes say layer, init, decay, stage and tying).
# Fails naming the file and line of each offence.
source "$(dirname "$0")/../scripts/common.sh"
cd "$MT_SRC"
patterns=(
  'sscanf\([^;]*"blocks\.'          # parsing a layer back out of a name
  'strstr\([^;]*\bt(n)?(->|\.)name'  # a pattern in a tensor's name
  'strncmp\([^;]*\bt(n)?(->|\.)name' # a prefix of a tensor's name
  'ends_with\([^;]*name'            # a suffix of a name
  '(->|\.)t\[[0-9]+ *[-+*]'         # t[2 + 12 * layer]: by position
  '(->|\.)t\[[0-9]+\]'              # t[0]: by position
)
bad=0
for p in "${patterns[@]}"; do
  if grep -nEr --include='*.c' --include='*.h' -- "$p" lib apps > "$WORK/hits.txt"; then
    sed 's/^/offence: /' "$WORK/hits.txt"
    bad=1
  fi
done
[ $bad -eq 0 ] || fail "tensors found by position or by a name pattern (see above)"
# and the model's views are bound by name lookups
grep -q 'mt_registry_findf(r, "blocks.%d.attn.qkv.weight"' lib/model/gpt.c || fail "no name lookup in the model"
echo PASS
