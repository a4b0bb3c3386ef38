# Layers look their tensors up by name once at setup; nothing in lib/ or
# apps/ finds a tensor by its position in the registry or by a pattern in its
# name (the registry's attributes say layer, init, decay, stage, tying and
# axes), and nothing outside the model's registration (lib/model) and the
# interop name maps (lib/ckpt/interop) picks a tensor by comparing its name
# with a tensor name (strcmp on "wte.weight"). Fails naming the file and line
# of each offence. The rule is proved to bite: the same scan must find each
# kind of offence planted in a copy of a source file.
source "$(dirname "$0")/../scripts/common.sh"
cd "$MT_SRC"
patterns=(
  'sscanf\([^;]*"blocks\.'          # parsing a layer back out of a name
  'strstr\([^;]*\bt(n)?(->|\.)name'  # a pattern in a tensor's name
  'strncmp\([^;]*\bt(n)?(->|\.)name' # a prefix of a tensor's name
  'ends_with\([^;]*name'            # a suffix of a name
  '(->|\.)t\[[0-9]+ *[-+*]'         # t[2 + 12 * layer]: by position
  '(->|\.)t\[[0-9]+\]'              # t[0]: by position
  'strn?cmp\([^;]*\b(t|tn|tensor)(->|\.)name *, *"' # a tensor's name against a literal
  'strn?cmp\([^;]*names\[[^]]*\] *, *"'           # a name of the tensor table, likewise
  'strn?cmp\([^;]*"(wte|wpe|lnf|ln_f|lm_head|blocks|h|transformer)\.[a-z0-9_.%]*"' # against a tensor name
)
# where choosing a tensor by its name is the job: registration, interop
allowed='^(lib/model/|lib/ckpt/interop/)'
# scan DIR...: every offence under DIR (paths as given), 1 if any
scan() {
  local bad=0 p
  for p in "${patterns[@]}"; do
    if grep -nEr --include='*.c' --include='*.h' -- "$p" "$@" | grep -Ev "$allowed" > "$WORK/hits.txt"; then
      sed 's/^/offence: /' "$WORK/hits.txt"
      bad=1
    fi
  done
  return $bad
}
scan lib apps || fail "tensors found by position or by a name (see above)"
# and the model's views are bound by name lookups
grep -rq 'mt_registry_findf(r, "blocks.%d.attn.proj.weight"' lib/model || fail "no name lookup in the model"

# planted offences: each kind, in a copy of a ckpt source file, must be found
plant="$WORK/plant/lib/ckpt/core"
mkdir -p "$plant"
n=0
for line in 'if (!strcmp(t->name, "wte.weight")) axes = "vocab,embd";' \
            'int k = strcmp(tt->names[i], "blocks.0.attn.qkv.weight");' \
            'const mt_tensor *x = &reg->t[0];' \
            'if (strstr(t->name, ".bias")) continue;'; do
  n=$((n + 1))
  { cat lib/ckpt/core/write.c; echo "static void planted(void) { $line }"; } > "$plant/write_$n.c"
done
(cd "$WORK/plant" && scan lib) > "$WORK/planted.txt" && { cat "$WORK/planted.txt"; fail "the scan found none of the planted offences"; }
for k in $(seq 1 $n); do
  grep -q "write_$k.c" "$WORK/planted.txt" || { cat "$WORK/planted.txt"; fail "the scan missed planted offence $k"; }
done
echo "planted: $(grep -c offence "$WORK/planted.txt") offence lines found in $n planted files"
echo PASS
