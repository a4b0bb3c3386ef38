/* Unit test of the generated corpus (mt_corpus_generate): the same bytes
 * for a seed, other bytes for another, printable ASCII and newlines,
 * paragraphs and words, no period, and the local structure a small model
 * can learn (unigram and bigram entropies); a 0-byte corpus refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../check.h"
#include "core/core.h"
#include "data/data.h"

static char g_dir[256];


static unsigned char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = mt_malloc((size_t)len + 1);
  *n = fread(p, 1, (size_t)len, f);
  fclose(f);
  return p;
}

/* H(next byte | previous k bytes) in nats, from counts over the text (k = 0, 1) */
static double cond_entropy(const unsigned char *p, size_t n, int k) {
  static double counts[256 * 256];
  size_t ctx = k ? 256 : 1;
  memset(counts, 0, sizeof counts);
  for (size_t i = (size_t)k; i < n; i++) counts[(k ? p[i - 1] : 0) * 256 + p[i]] += 1;
  double h = 0, total = (double)(n - (size_t)k);
  for (size_t c = 0; c < ctx; c++) {
    double row = 0;
    for (int b = 0; b < 256; b++) row += counts[c * 256 + b];
    for (int b = 0; b < 256; b++) {
      double x = counts[c * 256 + b];
      if (x > 0) h -= x / total * log(x / row);
    }
  }
  return h;
}

static void test_corpus(void) {
  const size_t N = 200000;
  char a[320], b[320], c[320];
  snprintf(a, sizeof a, "%s/corpus_a.txt", g_dir);
  snprintf(b, sizeof b, "%s/corpus_b.txt", g_dir);
  snprintf(c, sizeof c, "%s/corpus_c.txt", g_dir);
  mt_err e = {0};
  MT_CHECK(mt_corpus_generate(a, N, 1, &e) == 0, "corpus a: %s", e.msg);
  MT_CHECK(mt_corpus_generate(b, N, 1, &e) == 0, "corpus b: %s", e.msg);
  MT_CHECK(mt_corpus_generate(c, N, 2, &e) == 0, "corpus c: %s", e.msg);
  size_t na = 0, nb = 0, nc = 0;
  unsigned char *pa = read_file(a, &na), *pb = read_file(b, &nb), *pc = read_file(c, &nc);
  if (!pa || !pb || !pc) {
    MT_CHECK(0, "cannot read back the corpus files");
    free(pa);
    free(pb);
    free(pc);
    return;
  }
  MT_CHECK(na == N && nb == N && nc == N, "corpus sizes %zu %zu %zu, expected %zu", na, nb, nc, N);
  MT_CHECK(na == nb && memcmp(pa, pb, na) == 0, "same seed gave different bytes");
  MT_CHECK(nc != na || memcmp(pa, pc, na) != 0, "seeds 1 and 2 gave the same bytes");

  size_t bad = SIZE_MAX, newlines = 0, spaces = 0;
  for (size_t i = 0; i < na; i++) {
    unsigned char ch = pa[i];
    if (ch == '\n')
      newlines++;
    else if (ch == ' ')
      spaces++;
    if (!(ch == '\n' || (ch >= 0x20 && ch <= 0x7e)) && bad == SIZE_MAX) bad = i;
  }
  MT_CHECK(bad == SIZE_MAX, "byte %zu of the corpus is 0x%02x, not printable ASCII or newline", bad,
           bad == SIZE_MAX ? 0 : pa[bad]);
  MT_CHECK(pa[na - 1] == '\n', "corpus does not end in a newline");
  MT_CHECK(newlines > N / 2000 && newlines < N / 100, "%zu paragraphs in %zu bytes", newlines, N);
  MT_CHECK(spaces > N / 10, "only %zu spaces: not word-like", spaces);

  /* not periodic: no shift up to 64 KiB maps the text onto itself */
  size_t period = 0;
  for (size_t shift = 1; shift <= 65536 && !period; shift++) {
    size_t i = 0;
    while (i + shift < na && pa[i] == pa[i + shift]) i++;
    if (i + shift == na) period = shift;
  }
  MT_CHECK(period == 0, "corpus repeats with period %zu", period);

  /* learnable: strong local structure (a bigram model already does much
   * better than bytes drawn by frequency), yet not trivial */
  double h0 = cond_entropy(pa, na, 0), h1 = cond_entropy(pa, na, 1);
  MT_CHECK(h0 > 2.0 && h0 < 3.5, "unigram entropy %.3f nats outside (2.0, 3.5)", h0);
  MT_CHECK(h1 < 2.3 && h1 > 0.8, "bigram entropy %.3f nats outside (0.8, 2.3)", h1);
  printf("corpus: unigram %.3f nats/byte, bigram %.3f nats/byte\n", h0, h1);

  e = (mt_err){0};
  MT_CHECK(mt_corpus_generate(a, 0, 1, &e) != 0 && strstr(e.msg, a), "0-byte corpus: '%s'", e.msg);
  free(pa);
  free(pb);
  free(pc);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/mt_test_corpus_XXXXXX");
  if (!mkdtemp(g_dir)) {
    fprintf(stderr, "test_corpus: mkdtemp failed\n");
    return 1;
  }
  test_corpus();
  const char *names[] = {"corpus_a.txt", "corpus_b.txt", "corpus_c.txt"};
  for (int i = 0; i < 3; i++) {
    char p[320];
    snprintf(p, sizeof p, "%s/%s", g_dir, names[i]);
    unlink(p);
  }
  rmdir(g_dir);
  return mt_check_summary("test_corpus");
}
