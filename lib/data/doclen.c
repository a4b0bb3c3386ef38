/* The longest document of a run's training data (data.seq_policy = varlen
 * refuses one longer than model.seq_len unless told to cut it).
 *
 * Each rank scans a share of every training file: where its first and last
 * end-of-text tokens are and the longest gap between two of them inside
 * it. The shares' records (four numbers each) are gathered, and every rank
 * joins them in file order: a document runs from one end-of-text token
 * (or the file's start) to the next (or the file's end). One pass over the
 * tokens, split over the ranks, as validation reads them. */
#include "data/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FIRST, LAST, GAP, GAP_AT, N_REC };

/* eot positions in [lo, hi) of ds (relative to its view): first, last,
 * the longest gap between two consecutive ones and where it begins */
static void scan(const mt_dataset *ds, size_t lo, size_t hi, int eot, long long rec[N_REC]) {
  rec[FIRST] = rec[LAST] = -1, rec[GAP] = 0, rec[GAP_AT] = 0;
  for (size_t i = lo; i < hi; i++) {
    if (mt_dataset_token(ds, i) != eot) continue;
    if (rec[LAST] >= 0 && (long long)i - rec[LAST] > rec[GAP])
      rec[GAP] = (long long)i - rec[LAST], rec[GAP_AT] = rec[LAST];
    if (rec[FIRST] < 0) rec[FIRST] = (long long)i;
    rec[LAST] = (long long)i;
  }
}

static void take(mt_doc_longest *out, const mt_dataset *ds, long long len, long long at) {
  if (len <= out->len) return;
  out->len = len, out->offset = at;
  snprintf(out->path, sizeof out->path, "%s", ds->path);
}

void mt_sources_longest_document(const mt_sources *ss, int eot, MPI_Comm comm,
                                 mt_doc_longest *out) {
  memset(out, 0, sizeof *out);
  int rank, size;
  MT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MT_MPI_CHECK(MPI_Comm_size(comm, &size));
  long long *all = mt_malloc((size_t)size * N_REC * sizeof(long long));
  for (int si = 0; si < ss->n; si++)
    for (int f = 0; f < ss->src[si].n_train; f++) {
      const mt_dataset *ds = &ss->src[si].train[f];
      const size_t n = mt_dataset_ntokens(ds), share = n / (size_t)size;
      const size_t extra = n % (size_t)size, r = (size_t)rank;
      const size_t lo = r * share + (r < extra ? r : extra), hi = lo + share + (r < extra ? 1 : 0);
      long long mine[N_REC];
      scan(ds, lo, hi, eot, mine);
      MT_MPI_CHECK(MPI_Allgather(mine, N_REC, MPI_LONG_LONG, all, N_REC, MPI_LONG_LONG, comm));
      long long open = 0; /* where the document running now began */
      for (int k = 0; k < size; k++) {
        const long long *rec = all + (size_t)k * N_REC;
        if (rec[FIRST] < 0) continue;
        take(out, ds, rec[FIRST] - open, open);
        take(out, ds, rec[GAP], rec[GAP_AT]);
        open = rec[LAST];
      }
      take(out, ds, (long long)n - open, open);
    }
  free(all);
}
