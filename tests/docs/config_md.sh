# docs/config.md is what `meshtrain --help-markdown` writes from the key table
# (lib/core/config_doc.c): a key added, removed or changed in the table
# without regenerating the page fails here, with the command that fixes it.
source "$(dirname "$0")/../scripts/common.sh"
page="$MT_SRC/docs/config.md"
[ -f "$page" ] || fail "docs/config.md is missing; make it: build/bin/meshtrain --help-markdown > docs/config.md"
mt_guard "$MT_BIN/meshtrain" --help-markdown > "$WORK/config.md" ||
  fail "meshtrain --help-markdown exited $?"
# the page holds every key of the table, each once (what --help lists)
"$MT_BIN/meshtrain" --help | sed -n 's/^  \([a-z_]*\.[a-z0-9_]*\) .*/\1/p' | sort > "$WORK/help-keys"
sed -n 's/^| `\([a-z_]*\.[a-z0-9_]*\)` |.*/\1/p' "$WORK/config.md" | sort > "$WORK/page-keys"
[ -s "$WORK/help-keys" ] || fail "no keys read from meshtrain --help"
diff "$WORK/help-keys" "$WORK/page-keys" > /dev/null ||
  fail "meshtrain --help-markdown and --help list other keys: $(diff "$WORK/help-keys" "$WORK/page-keys" | head -5 | tr '\n' ' ')"
if ! diff -u "$page" "$WORK/config.md" > "$WORK/config.diff"; then
  head -30 "$WORK/config.diff"
  fail "docs/config.md differs from the key table; regenerate it: build/bin/meshtrain --help-markdown > docs/config.md"
fi
echo "PASS: docs/config.md is the key table ($(wc -l < "$WORK/page-keys") keys)"
