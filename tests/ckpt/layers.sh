# lib/ckpt is three layers (issue 20): core (format, writers, reader,
# checks), tools (conversion, inspection) and interop (Hugging Face) on top
# of core, behind one public header. A reader knows from the path what a
# file may touch, and this test holds it: core includes nothing of tools or
# interop and calls nothing defined there (checked on the compiled objects);
# nothing outside lib/ckpt includes a private header of it (its own tests
# of the internals aside) or HDF5 (meshckpt works through ckpt.h alone).
source "$(dirname "$0")/../scripts/common.sh"
cd "$MT_SRC"
bad=0
offence() { echo "offence: $*"; bad=1; }
while read -r f; do offence "$f: core includes tools or interop"; done \
  < <(grep -lE '#include "ckpt/(tools|interop)/' lib/ckpt/core/*.[ch] || true)
while read -r f; do offence "$f: tools include interop"; done \
  < <(grep -lE '#include "ckpt/interop/' lib/ckpt/tools/*.[ch] || true)
while read -r f; do offence "$f: a private header of lib/ckpt outside it"; done \
  < <(grep -rlE '#include "ckpt/(core|tools|interop)/' lib apps --include='*.[ch]' | grep -v '^lib/ckpt/' || true)
while read -r f; do offence "$f: HDF5 outside lib/ckpt"; done \
  < <(grep -rlE '#include <hdf5' lib apps --include='*.[ch]' | grep -v '^lib/ckpt/' || true)
# the objects: what core's files call is defined in core's files
objs="$MT_BIN/../CMakeFiles/mt_ckpt.dir/lib/ckpt"
[ -d "$objs/core" ] || fail "no objects under $objs (build first)"
nm --defined-only "$objs"/core/*.o | awk '$2 ~ /[TDBR]/ {print $3}' | sort -u > "$WORK/core_defined"
nm --defined-only "$objs"/tools/*.o "$objs"/interop/*.o | awk '$2 ~ /[TDBR]/ {print $3}' | sort -u > "$WORK/upper_defined"
for o in "$objs"/core/*.o; do
  while read -r sym; do offence "$(basename "$o" .o): core calls $sym of tools or interop"; done \
    < <(nm --undefined-only "$o" | awk '{print $2}' | sort -u | comm -12 - "$WORK/upper_defined")
done
nm --defined-only "$objs"/interop/*.o | awk '$2 ~ /[TDBR]/ {print $3}' | sort -u > "$WORK/interop_defined"
while read -r sym; do offence "tools call $sym of interop"; done \
  < <(nm --undefined-only "$objs"/tools/*.o | awk '{print $2}' | sort -u | comm -12 - "$WORK/interop_defined")
[ $bad -eq 0 ] || fail "lib/ckpt's layers are crossed (see above)"
echo "core: $(ls lib/ckpt/core/*.c | wc -l) files, tools: $(ls lib/ckpt/tools/*.c | wc -l), interop: $(ls lib/ckpt/interop/*.c | wc -l); no crossing"
echo PASS
